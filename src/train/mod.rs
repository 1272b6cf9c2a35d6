//! Training runs (feature `torch`).

#[derive(clap::Args, Debug)]
pub struct ResnetArgs {}

pub fn run_resnet(_args: ResnetArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args, Debug)]
pub struct BertArgs {}

pub fn run_bert(_args: BertArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
