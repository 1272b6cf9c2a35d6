//! Olympic scoring and reference convergence points (`mlperf-run score`).

#[derive(clap::Args, Debug)]
pub struct ScoreArgs {}

pub fn run_score(_args: ScoreArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
