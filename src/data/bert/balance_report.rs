//! `mlperf-run data bert-balance`: per-rank token imbalance of the BERT training loader over one
//! epoch, with the strided split and with token balancing ([`super::balance`]), on a data
//! directory (e.g. `synth-bert --lengths realistic --seq-len 512`). It runs the loaders of all
//! ranks in one process (no model, no device) and counts the non-padding tokens of every rank's
//! batch in every step.

use super::balance::Imbalance;
use super::{shard_files, Assignment, Shard, TrainLoader};
use anyhow::{bail, Result};
use serde_json::json;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use tch::Device;

/// Options of `data bert-balance`.
#[derive(clap::Args, Debug, Clone)]
pub struct BertBalanceArgs {
    /// BERT data directory (its train/ holds the shards).
    #[arg(long)]
    pub dir: PathBuf,
    /// Data-parallel ranks.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Samples per rank and step (configs/bert/open_8xA100.toml: 448 / 8 = 56).
    #[arg(long, default_value_t = 56)]
    pub batch: usize,
    /// The loader's shuffle seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Imbalance over the whole global batches of one epoch.
#[derive(Debug, Clone)]
pub struct BalanceReport {
    pub samples: usize,
    pub seq_len: usize,
    /// Fraction of the training set's token slots that are padding.
    pub padding_fraction: f64,
    pub steps: usize,
    pub strided: Imbalance,
    pub balanced: Imbalance,
}

/// Tokens of every rank in each of `steps` steps with `assignment`.
fn rank_tokens(
    train: &Path,
    ranks: usize,
    batch: usize,
    seed: u64,
    steps: usize,
    assignment: Assignment,
) -> Result<Vec<Vec<usize>>> {
    let mut loaders = (0..ranks)
        .map(|r| {
            TrainLoader::new(train, seed, r, ranks, batch, Device::Cpu)
                .map(|l| l.with_assignment(assignment))
        })
        .collect::<Result<Vec<_>>>()?;
    (0..steps)
        .map(|_| {
            loaders
                .iter_mut()
                .map(|l| Ok(l.next_batch_ids()?.iter().map(|s| s.tokens).sum()))
                .collect()
        })
        .collect()
}

/// Measure the strided and the token-balanced split of `dir/train`.
pub fn measure(dir: &Path, ranks: usize, batch: usize, seed: u64) -> Result<BalanceReport> {
    if ranks == 0 || batch == 0 {
        bail!("--ranks and --batch must be > 0");
    }
    let train = dir.join("train");
    let (mut samples, mut tokens, mut seq_len) = (0usize, 0usize, 0usize);
    for f in shard_files(&train)? {
        let s = Shard::read(&f)?;
        tokens += (0..s.n).map(|i| s.tokens(i)).sum::<usize>();
        samples += s.n;
        seq_len = s.seq;
    }
    let steps = samples / (ranks * batch);
    if steps == 0 {
        bail!(
            "{}: {samples} samples do not fill one global batch of {ranks} ranks x {batch}",
            train.display()
        );
    }
    let of = |a| rank_tokens(&train, ranks, batch, seed, steps, a).map(|t| Imbalance::of(&t));
    Ok(BalanceReport {
        samples,
        seq_len,
        padding_fraction: 1.0 - tokens as f64 / (samples * seq_len).max(1) as f64,
        steps,
        strided: of(Assignment::Strided)?,
        balanced: of(Assignment::TokenBalanced)?,
    })
}

fn imbalance_json(i: &Imbalance) -> serde_json::Value {
    json!({
        "epoch_max_over_mean": i.epoch_max_over_mean,
        "worst_step_max_over_mean": i.worst_step_max_over_mean,
        "worst_step_spread_tokens": i.worst_step_spread,
        "mean_rank_tokens": i.mean_rank_tokens,
    })
}

/// Entry point of `mlperf-run data bert-balance`.
pub fn run_bert_balance(a: BertBalanceArgs) -> Result<crate::util::ExitStatus> {
    // a folder without shards names the flag that gave it
    anyhow::Context::context(shard_files(&a.dir.join("train")), "--dir")?;
    let r = measure(&a.dir, a.ranks, a.batch, a.seed)?;
    let mut out = crate::util::output::stdout();
    if a.json {
        let v = json!({
            "dir": a.dir, "ranks": a.ranks, "batch": a.batch, "seed": a.seed,
            "samples": r.samples, "seq_len": r.seq_len, "padding_fraction": r.padding_fraction,
            "steps": r.steps,
            "strided": imbalance_json(&r.strided),
            "token_balanced": imbalance_json(&r.balanced),
        });
        writeln!(out, "{v}")?;
        return Ok(crate::util::ExitStatus::Success);
    }
    writeln!(
        out,
        "{}: {} samples, seq_len {}, {:.1}% padding; {} ranks x {} samples, {} steps (one epoch), seed {}",
        a.dir.join("train").display(),
        r.samples,
        r.seq_len,
        100.0 * r.padding_fraction,
        a.ranks,
        a.batch,
        r.steps,
        a.seed
    )?;
    writeln!(
        out,
        "{:<16} {:>15} {:>20} {:>19} {:>16}",
        "assignment",
        "epoch max/mean",
        "worst step max/mean",
        "worst spread (tok)",
        "mean tok/rank"
    )?;
    for (name, i) in [("strided", &r.strided), ("token-balanced", &r.balanced)] {
        writeln!(
            out,
            "{:<16} {:>15.4} {:>20.4} {:>19} {:>16.1}",
            name,
            i.epoch_max_over_mean,
            i.worst_step_max_over_mean,
            i.worst_step_spread,
            i.mean_rank_tokens
        )?;
    }
    Ok(crate::util::ExitStatus::Success)
}
