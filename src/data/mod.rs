//! Data pipelines and synthetic data sets.

#[derive(clap::Args, Debug)]
pub struct DataArgs {}

pub fn run_data(_args: DataArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
