//! The command line: the subcommands and their dispatch ([`main`]), and the exit statuses
//! ([`ExitStatus`]). Each subcommand's flags are its `*Args` struct, beside the work it does.

mod defaults;

pub use crate::util::ExitStatus;

use crate::{data, demo, launch, plan, regress, rules, score, submission, train};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mlperf-run",
    version,
    about = "Train, check, score and package MLPerf Training submissions",
    long_about = "Train, check, score and package MLPerf Training submissions (ResNet-50 v1.5, \
                  BERT-Large) natively in Rust on libtorch.\n\nStart with `mlperf-run demo`."
)]
struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace). Also: RUST_LOG.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check MLPerf logs against the MLPerf Training rules (optionally also with the official checker).
    Check(rules::CheckArgs),
    /// Score result sets: per-run minutes, olympic mean, RCP check and scaling.
    Score(score::ScoreArgs),
    /// Compare results with recorded baselines; fail on regressions.
    Regress(regress::RegressArgs),
    /// Detect this machine's MLPerf system description.
    Sysinfo(submission::SysinfoArgs),
    /// Build a submitter tree (and tarball) from result logs.
    Package(submission::PackageArgs),
    /// Re-check a packaged tree or tarball against its SHA-256 manifest and the rules.
    Verify(submission::VerifyArgs),
    /// Train ResNet-50 v1.5 on ImageNet (one seeded run or a set).
    Resnet(train::ResnetArgs),
    /// Train BERT-Large phase 2 from the reference checkpoint.
    Bert(train::BertArgs),
    /// Data set tools: synthetic ImageNet-style and BERT data.
    Data(data::DataArgs),
    /// Plan a closed submission for N GPUs: configs from the RCP tables, projected time to train.
    Plan(plan::PlanArgs),
    /// The one-command tour: synthesize tiny data, train, score, package and verify.
    Demo(demo::DemoArgs),
    /// Start N local data-parallel workers: `launch --nproc-per-node N -- resnet ...`.
    Launch(launch::LaunchArgs),
    #[command(hide = true)]
    DistSelftest(launch::SelftestArgs),
}

/// Parse the command line, run the subcommand, and turn its result into the exit status: an
/// error is printed, unless it is stdout closed under the subcommand (`| head`), which ends
/// quietly with 0 ([`ExitStatus::of_error`]); a stop on Ctrl-C prints its one line and ends
/// with 130.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::util::logging::init(cli.verbose);
    #[cfg(feature = "torch")]
    crate::distributed::libtorch_logs(cli.verbose);
    // the benchmark definitions first: a bad MLPERF_RUN_BENCHMARKS_DIR is an error here
    let result = crate::benchmarks::ensure_loaded().and_then(|()| dispatch(cli.command));
    // what is still buffered goes out now, so that a closed stdout is seen here, not at exit
    let result = result.and_then(|status| {
        std::io::Write::flush(&mut crate::util::output::stdout())?;
        Ok(status)
    });
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            let status = ExitStatus::of_error(&err);
            // not eprintln!: a closed stderr must not turn the error into a panic
            if status == ExitStatus::Error {
                let _ = writeln!(std::io::stderr(), "error: {err:#}");
            } else if let Some(stop) = crate::util::exit::Interrupted::of(&err) {
                // a stop at a safe point: its one line, as it is
                let _ = writeln!(std::io::stderr(), "{stop}");
            }
            status.into()
        }
    }
}

/// `launch`'s worker arguments (after `--`) are an mlperf-run command line: refused once here,
/// before any worker starts, instead of by each of the N workers.
fn check_worker_args(worker_args: &[String]) -> anyhow::Result<()> {
    use clap::error::ErrorKind;
    let argv = std::iter::once("mlperf-run").chain(worker_args.iter().map(String::as_str));
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Resnet(_) | Command::Bert(_) | Command::DistSelftest(_),
            ..
        }) => Ok(()),
        // N copies of `check`, `score`, `demo` (or `launch`) would each do the whole work and
        // write over each other's output
        Ok(_) => {
            let command = worker_args
                .iter()
                .find(|a| !a.starts_with('-'))
                .map_or("", String::as_str);
            anyhow::bail!(
                "launch: the workers would run `{command}`: launch starts the workers of one \
                 data-parallel training run (`resnet` or `bert` after `--`); no worker was \
                 started. Run `mlperf-run {command} ...` directly instead"
            )
        }
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => Ok(()),
        Err(e) => {
            let rendered = e.to_string();
            let mut lines = rendered.lines();
            let first = lines.next().unwrap_or_default();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // the lines under the first up to the blank one: the missing arguments (it was
            // "the following required arguments were not provided:" and nothing after)
            let more: Vec<&str> = lines
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let why = match e.kind() {
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    "a subcommand is missing".to_string()
                }
                _ if more.is_empty() => first.to_string(),
                _ => format!("{first} {}", more.join(", ")),
            };
            anyhow::bail!(
                "launch: the worker arguments after `--` (`{}`) are not an mlperf-run command \
                 line: {why}; no worker was started. Give the command each worker runs, e.g. \
                 `launch --nproc-per-node 8 -- resnet --config CONFIG ...`",
                worker_args.join(" ")
            )
        }
    }
}

/// Run the subcommand.
fn dispatch(command: Command) -> anyhow::Result<ExitStatus> {
    match command {
        Command::Check(a) => rules::run_check(a),
        Command::Score(a) => score::run_score(a),
        Command::Regress(a) => regress::run_regress(a),
        Command::Sysinfo(a) => submission::run_sysinfo(a),
        Command::Package(a) => submission::run_package(a),
        Command::Verify(a) => submission::run_verify(a),
        Command::Resnet(a) => defaults::resnet(a),
        Command::Bert(a) => defaults::bert(a),
        Command::Data(a) => data::run_data(a),
        Command::Demo(a) => demo::run_demo(a),
        Command::Plan(a) => plan::run_plan(a),
        Command::Launch(a) => {
            check_worker_args(&a.worker_args)?;
            launch::run_launch(a)
        }
        Command::DistSelftest(a) => launch::run_selftest(a),
    }
}
