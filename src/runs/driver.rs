//! `mlperf-run resnet|bert` run sets: N seeded runs into RESULTS/SYSTEM/BENCHMARK
//! ([`super::run_set`]), with a live progress line, the score table and an accuracy plot at the
//! end. Before the first run the node's system description is written beside the results
//! (`sysinfo.json`).

use super::outcome::RunOutcome;
use super::plot;
use super::progress::{fmt_duration, RunProgress};
use super::set::{self, RunRequest, SetEvent, SetSpec};
use super::system::SystemConfig;
use crate::rules::Division;
use crate::submission::sysinfo;
use crate::util::ExitStatus;
use crate::{benchmarks, score};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Flags shared by the training subcommands for run sets.
#[derive(clap::Args, Debug, Clone)]
pub struct SetArgs {
    /// Runs in the set (default: the benchmark's required count, 5 for resnet, 10 for bert).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Results root: run i goes to `RESULTS/SYSTEM/BENCHMARK/result_<i>.txt`.
    #[arg(long, default_value = "runs/results")]
    pub results: PathBuf,
    /// System name, the folder under RESULTS (default: the config's submission_platform).
    #[arg(long)]
    pub system: Option<String>,
    /// Comma-separated seeds, one per run (default: a fresh seed from the OS for each run).
    #[arg(long)]
    pub seeds: Option<String>,
    /// Continue an interrupted set: finished runs are kept, an unfinished one is moved to
    /// interrupted/ and run again.
    #[arg(long)]
    pub resume: bool,
}

/// True on the process that writes logs (rank 0 of a data-parallel job, or a lone process), by
/// the launcher's variables ([`crate::distributed::Rendezvous`]: torchrun's, Slurm's or an MPI
/// launcher's; it read RANK and SLURM_PROCID alone, so every rank that mpirun started wrote).
/// Variables that are refused count as rank 0's: the command refuses them before a run.
pub fn is_writer_rank() -> bool {
    crate::distributed::Rendezvous::from_env()
        .ok()
        .flatten()
        .is_none_or(|r| r.rank == 0)
}

/// Write this node's system description beside the set's results
/// ([`sysinfo::RECORDED_FILE`], what `package` uses when it runs elsewhere). A failure only
/// warns: the runs matter more than their description.
fn record_node(set_dir: &Path, node: &sysinfo::RunSetNode) {
    let written = sysinfo::describe_run_set_node(node, &sysinfo::DescribeOptions::default())
        .and_then(|d| Ok((sysinfo::write_recorded(set_dir, &d.desc)?, d.warnings)));
    match written {
        Ok((path, warnings)) => {
            eprintln!("system description of this node: {}", path.display());
            for w in warnings {
                tracing::info!("{}: {w}", path.display());
            }
        }
        Err(e) => eprintln!("warning: {e:#} (package will need --system-config)"),
    }
}

/// The set's identity from the flags: the results folder, the system (default:
/// `sys.submission_platform`), the seeds, resume, and whether this rank writes.
fn set_spec(benchmark: &str, args: &SetArgs, sys: &SystemConfig, runs: usize) -> Result<SetSpec> {
    let default_system = sys.submission_platform.as_str();
    Ok(SetSpec {
        results_root: args.results.clone(),
        system: args
            .system
            .clone()
            .unwrap_or_else(|| default_system.to_string()),
        benchmark: benchmark.to_string(),
        runs,
        seeds: args
            .seeds
            .as_deref()
            .map(set::parse_seed_list)
            .transpose()?,
        resume: args.resume,
        writer: is_writer_rank(),
    })
}

/// What a set is, as the ranks of a data-parallel set compare it before the first run: its
/// runs, seeds, `--resume`, system folder and the finished runs this rank finds in the results
/// folder ([`set::preview`], which also refuses what [`set::run_set`] would: a rank that
/// cannot start the set says so to the others). Not the results path: each host may mount the
/// shared folder elsewhere.
pub fn set_items(
    benchmark: &str,
    args: &SetArgs,
    sys: &SystemConfig,
) -> Result<Vec<(String, String)>> {
    let runs = args.runs.unwrap_or(benchmarks::get(benchmark)?.runs);
    let spec = set_spec(benchmark, args, sys, runs)?;
    let kept = set::preview(&spec)?;
    let seeds = match &spec.seeds {
        Some(s) => s.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
        None => "none (drawn by rank 0)".into(),
    };
    let kept = if kept.is_empty() {
        "none".to_string()
    } else {
        let runs: Vec<String> = kept
            .iter()
            .map(|(i, seed)| match seed {
                Some(s) => format!("result_{i}.txt (seed {s})"),
                None => format!("result_{i}.txt"),
            })
            .collect();
        runs.join(", ")
    };
    Ok(vec![
        ("runs.count".into(), runs.to_string()),
        ("runs.seeds".into(), seeds),
        ("runs.resume".into(), spec.resume.to_string()),
        ("runs.system".into(), spec.system.clone()),
        ("runs.kept".into(), kept),
    ])
}

/// The end of a set on the rank that writes: where it is and how long it took, then the
/// report and the verdict (Interrupted when stopped: `--resume` continues it).
fn finish(
    spec: &SetSpec,
    outcome: &set::SetOutcome,
    set_started: Instant,
    target: f64,
) -> Result<ExitStatus> {
    if let Some((index, why)) = &outcome.cut {
        eprintln!(
            "the set stopped: run {}/{} was cut: {why}",
            index + 1,
            spec.runs
        );
    }
    if !spec.writer {
        // the other ranks stop with the writer, and say so to their launcher
        return Ok(if outcome.interrupted {
            ExitStatus::Interrupted
        } else {
            ExitStatus::Success
        });
    }
    for aside in &outcome.moved_aside {
        eprintln!(
            "the log of a killed or cut run is kept at {} (it runs again on --resume)",
            aside.display()
        );
    }
    eprintln!(
        "set: {} in {}",
        outcome.set_dir.display(),
        fmt_duration(set_started.elapsed())
    );
    if outcome.interrupted {
        eprintln!("interrupted: continue with the same command and --resume");
        return Ok(ExitStatus::Interrupted);
    }
    report(&outcome.set_dir, target)?;
    let all_succeeded = outcome
        .runs
        .iter()
        .all(|r| r.status.as_deref() == Some("success"));
    Ok(ExitStatus::verdict(all_succeeded))
}

/// Run a set of `benchmark` with `run_one(seed, log_path)` performing one run, then report it.
/// `sys` and `division` give the set's identity (the system folder defaults to
/// sys.submission_platform); `cpu_only`: the runs train on the CPU (recorded as no
/// accelerators).
pub fn run_and_report(
    benchmark: &str,
    args: &SetArgs,
    sys: &SystemConfig,
    division: Division,
    cpu_only: bool,
    mut run_one: impl FnMut(u64, PathBuf) -> Result<RunOutcome>,
) -> Result<ExitStatus> {
    let bench = benchmarks::get(benchmark)?;
    let runs = args.runs.unwrap_or(bench.runs);
    if runs != bench.runs {
        eprintln!(
            "note: {runs} runs; an MLPerf {benchmark} result set needs exactly {}",
            bench.runs
        );
    }
    let spec = set_spec(benchmark, args, sys, runs)?;
    let node = sysinfo::RunSetNode {
        submitter: sys.submission_org.clone(),
        division: division.as_str().to_string(),
        status: sys.submission_status.as_str().to_string(),
        system_name: spec.system.clone(),
        cpu_only,
    };
    let mut node_recorded = false;
    crate::util::interrupt::install();
    let train_samples = bench.train_samples.map(|n| n as f64);
    let set_started = Instant::now();
    let mut durations: Vec<Duration> = Vec::new();
    let mut remaining = runs;
    let mut executor = |req: &RunRequest| {
        let eta = (!durations.is_empty()).then(|| {
            let mean = durations.iter().sum::<Duration>() / durations.len() as u32;
            mean * remaining.saturating_sub(1) as u32
        });
        let _progress = spec.writer.then(|| {
            RunProgress::follow(
                indicatif::ProgressBar::new_spinner(),
                format!("run {}/{} (seed {})", req.index + 1, req.runs, req.seed),
                req.log_path.clone(),
                train_samples,
                eta,
            )
        });
        let started = Instant::now();
        let result = run_one(req.seed, req.log_path.clone());
        durations.push(started.elapsed());
        remaining = remaining.saturating_sub(1);
        result
    };
    let outcome = set::run_set(&spec, &mut executor, |event| match event {
        SetEvent::Kept(r) => eprintln!(
            "run {}/{runs}: kept from before (seed {}, {})",
            r.index + 1,
            r.seed.map_or("?".into(), |s| s.to_string()),
            r.status.as_deref().unwrap_or("?")
        ),
        SetEvent::Starting(_) => {
            // Once the set is sure to run (its folder checked), on the rank that writes.
            if spec.writer && !node_recorded {
                record_node(&spec.set_dir(), &node);
                node_recorded = true;
            }
        }
        SetEvent::Finished(r) => eprintln!(
            "run {}/{runs}: {} (seed {}){}",
            r.index + 1,
            r.status.as_deref().unwrap_or("?"),
            r.seed.unwrap_or_default(),
            r.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
    })?;
    finish(&spec, &outcome, set_started, bench.target)
}

/// Write accuracy.svg beside the results, then print the score table (with any reason the set
/// has no valid score) and where the plot went (the plot first: a closed stdout, `| head`, ends
/// the output, not the work).
pub fn report(set_dir: &std::path::Path, target: f64) -> Result<()> {
    let set = score::score_set(set_dir, &score::ScoreOptions::default())?;
    let logs = score::result_files(set_dir)?
        .iter()
        .map(|p| crate::mllog::parse_file(p))
        .collect::<Result<Vec<_>>>()?;
    let title = format!("{} accuracy", set_dir.display());
    let svg = plot::accuracy_svg(&title, &logs, Some(target))?;
    let plot_path = set_dir.join("accuracy.svg");
    crate::util::fs::write_atomic(&plot_path, svg.as_bytes())
        .with_context(|| format!("cannot write {}", plot_path.display()))?;
    crate::util::output::print(&format!(
        "{}\nplot: {}\n",
        score::render(std::slice::from_ref(&set), score::Format::Table)?,
        plot_path.display()
    ))
}
