//! The CI regression gate (`mlperf-run regress`).

#[derive(clap::Args, Debug)]
pub struct RegressArgs {}

pub fn run_regress(_args: RegressArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
