//! `resnet`/`bert` without `--config` (issue 44, part 5): on a machine with a GPU, the config
//! `plan` writes for it (its GPU count, model and memory), said with its path, started on all
//! of its GPUs; without a GPU, the tiny preset of the division on data the command makes itself
//! (ResNet's in-memory synthetic set; a tiny synthetic BERT corpus), said as such.

use crate::rules::Division;
use crate::train::{BertArgs, DeviceArg, ResnetArgs};
use crate::util::ExitStatus;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where the defaults write their configs and data.
const PLAN_DIR: &str = "runs/plan";
const TINY_DIR: &str = "runs/tiny";

fn tiny_config(benchmark: &str, division: Division) -> &'static str {
    match (benchmark, division) {
        ("resnet", Division::Closed) => include_str!("../../configs/resnet/tiny_cpu.toml"),
        ("resnet", Division::Open) => include_str!("../../configs/resnet/tiny_cpu_open.toml"),
        (_, Division::Closed) => include_str!("../../configs/bert/tiny_cpu.toml"),
        (_, Division::Open) => include_str!("../../configs/bert/tiny_cpu_open.toml"),
    }
}

/// Tests only: `COUNT,MODEL,GIB` stands for the GPUs this machine reports, so the GPU branch
/// runs (to the workers, which then find no CUDA device) on a CPU machine.
pub const TEST_GPUS: &str = "MLPERF_RUN_TEST_GPUS";

/// The GPUs `TEST_GPUS` names, if it is set and well formed (a malformed value is an error).
fn test_gpus() -> Result<Option<(u64, String, Option<f64>)>> {
    let Ok(v) = std::env::var(TEST_GPUS) else {
        return Ok(None);
    };
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [n, model, gib] => {
            let n: u64 = n.parse().ok().filter(|n| *n > 0).with_context(|| {
                format!("{TEST_GPUS}={v:?}: the count must be a whole number above 0")
            })?;
            let gib: f64 = gib
                .parse()
                .with_context(|| format!("{TEST_GPUS}={v:?}: the memory must be GiB"))?;
            Ok(Some((n, model.to_string(), Some(gib))))
        }
        _ => bail!("{TEST_GPUS}={v:?}: give COUNT,MODEL,GIB, e.g. 2,H100-SXM-80GB,80"),
    }
}

/// This machine's GPUs: (count, model, memory GiB), or None without a GPU.
fn machine_gpus() -> Result<Option<(u64, String, Option<f64>)>> {
    if let Some(g) = test_gpus()? {
        return Ok(Some(g));
    }
    Ok(detected_gpus())
}

#[cfg(feature = "torch")]
fn detected_gpus() -> Option<(u64, String, Option<f64>)> {
    let count = tch::Cuda::device_count();
    if count < 1 {
        return None;
    }
    let info = crate::submission::gpu::query().ok();
    let model = info
        .as_ref()
        .map_or_else(|| "H100".to_string(), |i| i.model.clone());
    let memory = info
        .and_then(|i| i.memory_bytes)
        .map(|b| b as f64 / (1u64 << 30) as f64);
    Some((count as u64, model, memory))
}

#[cfg(not(feature = "torch"))]
fn detected_gpus() -> Option<(u64, String, Option<f64>)> {
    None
}

/// The tiny preset for `benchmark` written under runs/tiny, said as such. It trains on the CPU:
/// `--device cuda` on this GPU-less machine is refused before anything is written.
fn tiny(benchmark: &str, division: Division, device: DeviceArg) -> Result<PathBuf> {
    if device == DeviceArg::Cuda {
        bail!(
            "--device cuda: no CUDA device is available to libtorch. Without --config and \
             without a GPU, {benchmark} trains the tiny CPU preset: drop --device cuda, or run \
             on a machine with a GPU (or give --config)"
        );
    }
    let path = Path::new(TINY_DIR).join(format!("{benchmark}_tiny_cpu_{}.toml", division.as_str()));
    crate::util::fs::write_atomic(&path, tiny_config(benchmark, division).as_bytes())?;
    eprintln!(
        "no --config and no GPU here: training the tiny {benchmark} preset ({}) on data this \
         command makes itself; it proves the pipeline, not the model. With a GPU, \
         `{benchmark} --division {} --data DIR` uses the config `mlperf-run plan` writes for \
         the machine.",
        path.display(),
        division.as_str()
    );
    Ok(path)
}

/// The tiny synthetic BERT corpus under runs/tiny/data/bert (made once, as `demo` does).
fn tiny_bert_data() -> Result<PathBuf> {
    let dir = Path::new(TINY_DIR).join("data/bert");
    if !dir.join("vocab.txt").exists() {
        let exe = std::env::current_exe().context("cannot find the mlperf-run executable")?;
        let args = [
            "data",
            "synth-bert",
            "--out",
            &dir.display().to_string(),
            "--sentences",
            "16",
            "--seq-len",
            "32",
        ];
        eprintln!("making the tiny BERT corpus: mlperf-run {}", args.join(" "));
        let st = std::process::Command::new(&exe).args(args).status()?;
        if !st.success() {
            bail!("mlperf-run data synth-bert failed ({st}); its output is above");
        }
    }
    Ok(dir)
}

/// The planned config for this machine, said with its path; None without a GPU.
fn planned(
    benchmark: &str,
    division: Division,
    data: &Option<PathBuf>,
) -> Result<Option<(PathBuf, u64)>> {
    let Some((count, model, memory)) = machine_gpus()? else {
        return Ok(None);
    };
    if data.is_none() {
        bail!(
            "no --config: on this machine ({count} GPU(s), {model}) {benchmark} trains the config \
             `mlperf-run plan` writes for it, and needs --data DIR (the {benchmark} data set)"
        );
    }
    let path =
        crate::plan::plan_for_machine(benchmark, count, &model, memory, Path::new(PLAN_DIR))?;
    eprintln!(
        "no --config: using the closed config `mlperf-run plan {benchmark} --gpus {count} --gpu \
         \"{model}\"` wrote for this machine: {} (division {}; a closed config is valid in both)",
        path.display(),
        division.as_str()
    );
    Ok(Some((path, count)))
}

/// Start the planned run on all `count` GPUs through `launch`, with the command line as given
/// plus the config.
fn launch_all(count: u64, config: &Path) -> Result<ExitStatus> {
    let exe = std::env::current_exe().context("cannot find the mlperf-run executable")?;
    let mut args: Vec<String> = vec![
        "launch".into(),
        "--nproc-per-node".into(),
        count.to_string(),
        "--".into(),
    ];
    args.extend(std::env::args().skip(1));
    args.extend(["--config".into(), config.display().to_string()]);
    if !args
        .iter()
        .any(|a| a == "--device" || a.starts_with("--device="))
    {
        args.extend(["--device".into(), "cuda".into()]);
    }
    eprintln!("mlperf-run {}", args.join(" "));
    let st = std::process::Command::new(&exe).args(&args).status()?;
    Ok(match st.code() {
        Some(0) => ExitStatus::Success,
        Some(c) => ExitStatus::Worker(c.clamp(1, 255) as u8),
        None => ExitStatus::Worker(1),
    })
}

/// True in a worker that a launcher started (torchrun, `launch`, Slurm, mpirun): it trains its
/// own rank, it does not start workers of its own.
fn under_a_launcher() -> bool {
    crate::distributed::under_a_launcher()
}

/// `resnet` as typed: the defaults filled in when --config (and --recipe) is absent.
pub fn resnet(mut a: ResnetArgs) -> Result<ExitStatus> {
    if a.config.is_some() || a.recipe.recipe.is_some() {
        return crate::train::run_resnet(a);
    }
    let division = a.division.context("--division is required")?;
    match planned("resnet", division, &a.data)? {
        Some((path, n)) if n > 1 && !under_a_launcher() => launch_all(n, &path),
        Some((path, _)) => {
            // one GPU, or this rank's under a launcher
            a.config = Some(path);
            a.run.device = DeviceArg::Cuda;
            crate::train::run_resnet(a)
        }
        None => {
            if let Some(dir) = &a.data {
                // refused before the tiny preset is written: its images are made in memory
                bail!(
                    "--data {}: without --config and without a GPU, resnet trains the tiny \
                     preset, whose data.source = \"synthetic-memory\" (its images are made in \
                     memory), so the folder would not be read; drop --data, or train on it with \
                     a config whose data.source is \"imagefolder\" (--config FILE, e.g. \
                     configs/resnet/tiny_cpu_jpeg.toml)",
                    dir.display()
                );
            }
            a.config = Some(tiny("resnet", division, a.run.device)?);
            crate::train::run_resnet(a)
        }
    }
}

/// `bert` as typed: the defaults filled in when --config (and --recipe) is absent.
pub fn bert(mut a: BertArgs) -> Result<ExitStatus> {
    if a.config.is_some() || a.recipe.recipe.is_some() {
        return crate::train::run_bert(a);
    }
    let division = a.division.context("--division is required")?;
    match planned("bert", division, &a.data)? {
        Some((path, n)) if n > 1 && !under_a_launcher() => launch_all(n, &path),
        Some((path, _)) => {
            // one GPU, or this rank's under a launcher
            a.config = Some(path);
            a.run.device = DeviceArg::Cuda;
            crate::train::run_bert(a)
        }
        None => {
            a.config = Some(tiny("bert", division, a.run.device)?);
            if a.data.is_none() {
                a.data = Some(tiny_bert_data()?);
            }
            crate::train::run_bert(a)
        }
    }
}
