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
    let mut cmd = Command::new(&exe);
    cmd.args(args);
    stop_with_parent(&mut cmd);
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    if !status.success() {
        // the step's own advice ("the same command with --resume") names the step's command;
        // the demo resumes its sets itself
        bail!(
            "demo step '{name}' failed ({status}); its output is above. Run the same `mlperf-run \
             demo` (the same --out) again to continue where it stopped"
        );
    }
    Ok(())
}

/// Have the step get SIGTERM when the demo dies. A demo stopped by SIGTERM or SIGKILL (or a
/// Ctrl-C sent to it alone) left its step running on its own: a training set then went on
/// writing results with nobody to report them, and a rerun of the demo was refused while its
/// lock was held. A run set ends its current run as aborted on SIGTERM, so the rerun
/// continues it.
fn stop_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // getppid and raise, which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // the demo died before the prctl: nothing would send the signal
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// A path as an argument (`run_demo` refuses an --out that is not UTF-8).
fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `mlperf-run demo`: synthesize, train, score, package and verify, each step a run of this
/// binary.
pub fn run_demo(args: DemoArgs) -> Result<ExitStatus> {
    let started = Instant::now();
    for (flag, runs, needed) in [
        ("--resnet-runs", args.resnet_runs, 5),
        ("--bert-runs", args.bert_runs, 10),
    ] {
        // it was found by the training step, after the BERT data, as "--runs must be at least 1"
        if runs == 0 {
            bail!("{flag} must be at least 1 (MLPerf needs {needed})");
        }
    }
    if args.out.to_str().is_none() {
        // it reached the steps as text, its bad bytes as U+FFFD: the BERT corpus went into a
        // second folder and the ResNet step found no config
        bail!(
            "--out {} is not a UTF-8 path: the demo's BERT corpus is HDF5, whose library takes \
             only UTF-8 file names; choose another --out",
            args.out.display()
        );
    }
    if args.out.exists() && !args.out.is_dir() {
        // it was "cannot create directory FILE/configs: Not a directory (os error 20)"
        anyhow::bail!(
            "--out {} exists and is not a folder: choose another --out (the demo writes \
             configs/, data/, results/ and submission/ there)",
            args.out.display()
        );
    }
    if args.fresh {
        remove_owned(&args.out)?;
    }
    // it was "cannot create directory /proc/nope/configs: ..." from the first file written
    std::fs::create_dir_all(&args.out).with_context(|| {
        format!(
            "--out {}: cannot create the folder; choose a writable --out (the demo writes \
             configs/, data/, results/ and submission/ there)",
            args.out.display()
        )
    })?;
    let paths = DemoPaths::new(&args.out);
    paths.write_configs()?;
    paths.synthesize_bert_data()?;
    paths.train_sets(&args)?;
    step("score both sets", &["score".into(), s(&paths.results)])?;
    let tarball = paths.package_and_verify()?;
    paths.print_summary(started, &tarball);
    Ok(ExitStatus::Success)
}

/// System name of the ResNet set.
const RESNET_SYSTEM: &str = "tiny-cpu-resnet";
/// System name of the BERT set.
const BERT_SYSTEM: &str = "tiny-cpu-bert";

/// Delete what an earlier demo wrote under `out` (`--fresh`).
fn remove_owned(out: &Path) -> Result<()> {
    // Only what the demo itself writes is ever removed.
    let owned = ["configs", "data", "results", "submission"];
    for d in owned {
        let p = out.join(d);
        if p.exists() {
            std::fs::remove_dir_all(&p)
                .with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    Ok(())
}

/// True when `dir` holds a finished `data synth-bert` data set: its README.txt, which
/// synth-bert removes first and writes last. (It was vocab.txt, written before the shards: a
/// demo killed while the shards were written then trained on the shards that were there.)
fn bert_data_finished(dir: &Path) -> bool {
    dir.join("README.txt").is_file()
}

/// Where the demo's files go under `--out`.
struct DemoPaths {
    resnet_cfg: PathBuf,
    bert_cfg: PathBuf,
    system_cfg: PathBuf,
    bert_data: PathBuf,
    results: PathBuf,
    submission: PathBuf,
}

impl DemoPaths {
    /// The paths under `out`.
    fn new(out: &Path) -> DemoPaths {
        let configs = out.join("configs");
        DemoPaths {
            resnet_cfg: configs.join("resnet_tiny_cpu_open.toml"),
            bert_cfg: configs.join("bert_tiny_cpu_open.toml"),
            system_cfg: configs.join("system_cpu_only.toml"),
            bert_data: out.join("data/bert"),
            results: out.join("results"),
            submission: out.join("submission"),
        }
    }

    /// Write the run and system configs the steps read.
    fn write_configs(&self) -> Result<()> {
        crate::util::fs::write_atomic(&self.resnet_cfg, RESNET_CONFIG.as_bytes())?;
        crate::util::fs::write_atomic(&self.bert_cfg, BERT_CONFIG.as_bytes())?;
        crate::util::fs::write_atomic(&self.system_cfg, SYSTEM_CONFIG.as_bytes())
    }

    /// Synthesize the tiny BERT corpus unless an earlier demo did.
    fn synthesize_bert_data(&self) -> Result<()> {
        if !bert_data_finished(&self.bert_data) {
            step(
                "synthesize the tiny BERT corpus (HDF5 shards in the reference layout)",
                &[
                    "data".into(),
                    "synth-bert".into(),
                    "--out".into(),
                    s(&self.bert_data),
                    "--sentences".into(),
                    "16".into(),
                    "--seq-len".into(),
                    "32".into(),
                ],
            )?;
        }
        Ok(())
    }

    /// The arguments of one set's training step (resumed when it has a finished run).
    fn set_args(&self, bench: &str, cfg: &Path, runs: usize, system: &str) -> Vec<String> {
        let mut v = vec![
            bench.to_string(),
            "--division".into(),
            "open".into(),
            "--config".into(),
            s(cfg),
            "--runs".into(),
            runs.to_string(),
            "--results".into(),
            s(&self.results),
            "--system".into(),
            system.into(),
        ];
        let set_dir = self.results.join(system).join(bench);
        if set_dir.join("result_0.txt").exists() {
            v.push("--resume".into());
        }
        v
    }

    /// Train the ResNet set, then the BERT set.
    fn train_sets(&self, args: &DemoArgs) -> Result<()> {
        step(
            &format!("train the tiny ResNet set ({} runs)", args.resnet_runs),
            &self.set_args("resnet", &self.resnet_cfg, args.resnet_runs, RESNET_SYSTEM),
        )?;
        let mut bert = self.set_args("bert", &self.bert_cfg, args.bert_runs, BERT_SYSTEM);
        bert.extend(["--data".into(), s(&self.bert_data)]);
        step(
            &format!("train the tiny BERT set ({} runs)", args.bert_runs),
            &bert,
        )
    }

    /// The arguments of a `package` step for one set.
    fn package_args(&self, system: &str, bench: &str, extra: &[&str]) -> Vec<String> {
        let mut v = vec![
            "package".into(),
            "--submitter".into(),
            SUBMITTER.into(),
            "--system".into(),
            system.into(),
            "--division".into(),
            "open".into(),
            s(&self.results.join(system).join(bench)),
            "--out".into(),
            s(&self.submission),
            "--system-config".into(),
            s(&self.system_cfg),
        ];
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    }

    /// Rebuild the submission from the results, write the tarball and verify it; returns the
    /// tarball's path.
    fn package_and_verify(&self) -> Result<PathBuf> {
        // The submission is derived output of this demo: rebuild it from the results each time.
        if self.submission.exists() {
            std::fs::remove_dir_all(&self.submission)
                .with_context(|| format!("cannot remove {}", self.submission.display()))?;
        }
        step(
            "package the ResNet set",
            &self.package_args(RESNET_SYSTEM, "resnet", &["--force"]),
        )?;
        step(
            "add the BERT set and write the tarball",
            &self.package_args(BERT_SYSTEM, "bert", &["--add", "--tarball"]),
        )?;
        let tarball = self.submission.join(format!("{SUBMITTER}.tar.gz"));
        step("verify the tarball", &["verify".into(), s(&tarball)])?;
        Ok(tarball)
    }

    /// Say where everything is.
    fn print_summary(&self, started: Instant, tarball: &Path) {
        eprintln!(
            "\ndemo finished in {:.1} minutes:",
            started.elapsed().as_secs_f64() / 60.0
        );
        eprintln!("  data        {}", self.bert_data.display());
        eprintln!(
            "  results     {}  (result_<i>.txt logs, accuracy.svg plots)",
            self.results.display()
        );
        eprintln!(
            "  submission  {}",
            self.submission.join(SUBMITTER).display()
        );
        eprintln!("  tarball     {}  (+ .sha256, manifest)", tarball.display());
        eprintln!(
            "Tiny results prove the pipeline (logs, rules, scoring, packaging), not the model."
        );
    }
}

#[cfg(test)]
mod tests {
    /// A BERT folder that a killed `data synth-bert` left (vocab.txt and some shards, no
    /// README.txt) is made again, not trained on.
    #[test]
    fn an_unfinished_bert_data_set_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("train")).unwrap();
        std::fs::write(dir.path().join("vocab.txt"), "[PAD]\n").unwrap();
        std::fs::write(dir.path().join("train/part-00000-of-00004.hdf5"), b"").unwrap();
        assert!(!super::bert_data_finished(dir.path()));
        std::fs::write(dir.path().join("README.txt"), "done\n").unwrap();
        assert!(super::bert_data_finished(dir.path()));
    }
}
