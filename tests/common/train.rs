//! Running the tiny presets in-process on the CPU, as the training tests do.

use mlperf_run::train::config::{Division, ResnetRunConfig, SystemConfig};
use mlperf_run::train::engine::{RunOptions, RunOutcome, Submission};
use mlperf_run::train::resnet::{run_once, ResnetRun};
use std::path::Path;

/// Options for a CPU run of a preset with system section `system` in `division`: seed `seed`,
/// the log written to `log`, the preset's time limit.
pub fn cpu_run_options(
    system: &SystemConfig,
    division: Division,
    seed: u64,
    log: &Path,
) -> RunOptions {
    let mut opts = RunOptions::new(
        tch::Device::Cpu,
        Submission {
            org: system.submission_org.clone(),
            platform: system.submission_platform.clone(),
            division: division.as_str().into(),
            status: system.submission_status.as_str().into(),
        },
    );
    opts.seed = Some(seed);
    opts.log_path = Some(log.to_path_buf());
    opts.time_limit = Some(std::time::Duration::from_secs_f64(
        system.time_limit_minutes * 60.0,
    ));
    opts
}

/// One ResNet run of `cfg` on the CPU (in-memory data when `data` is None, else that
/// ImageFolder root); panics if the run cannot start.
pub fn resnet(
    cfg: &ResnetRunConfig,
    division: Division,
    data: Option<&Path>,
    seed: u64,
    log: &Path,
) -> RunOutcome {
    run_once(
        &ResnetRun {
            config: cfg,
            division,
            data_dir: data.map(Path::to_path_buf),
        },
        cpu_run_options(&cfg.system, division, seed, log),
    )
    .unwrap()
}
