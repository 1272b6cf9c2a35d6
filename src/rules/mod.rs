//! Compliance checks against the MLPerf Training rules (`mlperf-run check`).

#[derive(clap::Args, Debug)]
pub struct CheckArgs {}

pub fn run_check(_args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
