//! System description, submitter tree, tarball and verification.

#[derive(clap::Args, Debug)]
pub struct SysinfoArgs {}

pub fn run_sysinfo(_args: SysinfoArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args, Debug)]
pub struct PackageArgs {}

pub fn run_package(_args: PackageArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {}

pub fn run_verify(_args: VerifyArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not implemented yet")
}
