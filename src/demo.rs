//! `mlperf-run demo`: the one-command tour on data it makes itself. It synthesizes the tiny
//! data sets, runs the tiny ResNet set (5 runs) and the tiny BERT set (10 runs), scores them,
//! packages them into one submitter tree with a tarball, and verifies it. Each step is this
//! same binary with the arguments it prints, so every step can be repeated by hand.
//!
//! Both sets use the open-division tiny presets: tiny closed runs pass the closed compliance
//! rules (see the tests), but no tiny batch size has a reference convergence point, so a
//! closed tiny set could never pass the closed RCP check of the package checker.
//! Tiny results prove the pipeline, not the model.

use crate::util::ExitStatus;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const RESNET_CONFIG: &str = include_str!("../configs/resnet/tiny_cpu_open.toml");
const BERT_CONFIG: &str = include_str!("../configs/bert/tiny_cpu_open.toml");
const SYSTEM_CONFIG: &str = include_str!("../configs/systems/cpu_only.toml");
// The tiny presets log submission_org "mlperf-run".
const SUBMITTER: &str = "mlperf-run";

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Where everything goes (data, results, submission). Re-running continues an
    /// interrupted demo; --fresh starts over.
    #[arg(long, default_value = "runs/demo")]
    pub out: PathBuf,
    /// Delete what an earlier demo wrote under --out first.
    #[arg(long)]
    pub fresh: bool,
    /// ResNet runs (MLPerf needs 5).
    #[arg(long, default_value_t = 5)]
    pub resnet_runs: usize,
    /// BERT runs (MLPerf needs 10).
    #[arg(long, default_value_t = 10)]
    pub bert_runs: usize,
}

/// Run this binary with `args`, echoing the command; fail with the step's name.
fn step(name: &str, args: &[String]) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the mlperf-run executable")?;
    eprintln!("\n==> {name}\n    mlperf-run {}", args.join(" "));
    let status = Command::new(&exe)
        .args(args)
        .status()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    if !status.success() {
        bail!("demo step '{name}' failed ({status}); its output is above");
    }
    Ok(())
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

pub fn run_demo(args: DemoArgs) -> Result<ExitStatus> {
    let started = Instant::now();
    let out = &args.out;
    // Only what the demo itself writes is ever removed.
    let owned = ["configs", "data", "results", "submission"];
    if args.fresh {
        for d in owned {
            let p = out.join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p)
                    .with_context(|| format!("cannot remove {}", p.display()))?;
            }
        }
    }
    let configs = out.join("configs");
    let resnet_cfg = configs.join("resnet_tiny_cpu_open.toml");
    let bert_cfg = configs.join("bert_tiny_cpu_open.toml");
    crate::util::fs::write_atomic(&resnet_cfg, RESNET_CONFIG.as_bytes())?;
    crate::util::fs::write_atomic(&bert_cfg, BERT_CONFIG.as_bytes())?;
    let system_cfg = configs.join("system_cpu_only.toml");
    crate::util::fs::write_atomic(&system_cfg, SYSTEM_CONFIG.as_bytes())?;

    let bert_data = out.join("data/bert");
    if !bert_data.join("vocab.txt").exists() {
        step(
            "synthesize the tiny BERT corpus (HDF5 shards in the reference layout)",
            &[
                "data".into(),
                "synth-bert".into(),
                "--out".into(),
                s(&bert_data),
                "--sentences".into(),
                "16".into(),
                "--seq-len".into(),
                "32".into(),
            ],
        )?;
    }

    let results = out.join("results");
    let set_args = |bench: &str, cfg: &Path, runs: usize, system: &str| -> Vec<String> {
        let mut v = vec![
            bench.to_string(),
            "--division".into(),
            "open".into(),
            "--config".into(),
            s(cfg),
            "--runs".into(),
            runs.to_string(),
            "--results".into(),
            s(&results),
            "--system".into(),
            system.into(),
        ];
        let set_dir = results.join(system).join(bench);
        if set_dir.join("result_0.txt").exists() {
            v.push("--resume".into());
        }
        v
    };
    let resnet_system = "tiny-cpu-resnet";
    let bert_system = "tiny-cpu-bert";
    step(
        &format!("train the tiny ResNet set ({} runs)", args.resnet_runs),
        &set_args("resnet", &resnet_cfg, args.resnet_runs, resnet_system),
    )?;
    let mut bert = set_args("bert", &bert_cfg, args.bert_runs, bert_system);
    bert.extend(["--data".into(), s(&bert_data)]);
    step(
        &format!("train the tiny BERT set ({} runs)", args.bert_runs),
        &bert,
    )?;

    step("score both sets", &["score".into(), s(&results)])?;

    // The submission is derived output of this demo: rebuild it from the results each time.
    let submission = out.join("submission");
    if submission.exists() {
        std::fs::remove_dir_all(&submission)
            .with_context(|| format!("cannot remove {}", submission.display()))?;
    }
    let package = |system: &str, bench: &str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            "package".into(),
            "--submitter".into(),
            SUBMITTER.into(),
            "--system".into(),
            system.into(),
            "--division".into(),
            "open".into(),
            s(&results.join(system).join(bench)),
            "--out".into(),
            s(&submission),
            "--system-config".into(),
            s(&system_cfg),
        ];
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    step(
        "package the ResNet set",
        &package(resnet_system, "resnet", &["--force"]),
    )?;
    step(
        "add the BERT set and write the tarball",
        &package(bert_system, "bert", &["--add", "--tarball"]),
    )?;
    let tarball = submission.join(format!("{SUBMITTER}.tar.gz"));
    step("verify the tarball", &["verify".into(), s(&tarball)])?;

    eprintln!(
        "\ndemo finished in {:.1} minutes:",
        started.elapsed().as_secs_f64() / 60.0
    );
    eprintln!("  data        {}", bert_data.display());
    eprintln!(
        "  results     {}  (result_<i>.txt logs, accuracy.svg plots)",
        results.display()
    );
    eprintln!("  submission  {}", submission.join(SUBMITTER).display());
    eprintln!("  tarball     {}  (+ .sha256, manifest)", tarball.display());
    eprintln!("Tiny results prove the pipeline (logs, rules, scoring, packaging), not the model.");
    Ok(ExitStatus::Success)
}
