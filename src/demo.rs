//! `mlperf-run demo`: the one-command tour.

#[derive(clap::Args, Debug)]
pub struct DemoArgs {}

pub fn run_demo(_args: DemoArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
