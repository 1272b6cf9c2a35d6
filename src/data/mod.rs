//! Data pipelines and synthetic data sets.

#[cfg(feature = "torch")]
pub mod bert;

#[derive(clap::Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub command: DataCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum DataCommand {
    /// Write BERT pre-training shards (reference HDF5 layout) from English text.
    #[cfg(feature = "torch")]
    SynthBert(bert::synth::SynthBertArgs),
}

pub fn run_data(args: DataArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        #[cfg(feature = "torch")]
        DataCommand::SynthBert(a) => bert::synth::run_synth_bert(a),
    }
}
