//! Data pipelines and synthetic data sets (the `data` subcommand).
//!
//! - [`imagenet`]: the ImageFolder reader and the ResNet batch pipeline
//! - [`synth_imagenet`]: `data synth-imagenet`, a synthetic ImageNet-style JPEG data set
//! - [`prepare_imagenet`]: `data prepare-imagenet`, the ILSVRC2012 tars to the ImageFolder layout
//! - [`rng`]: counter-based random streams shared by the pipelines
//! - `handoff` (feature `torch`): the batches moved to the device ahead of the step that takes
//!   them (a prefetching thread, the copy stream)
//! - `bert` (feature `torch`): BERT pre-training data

#[cfg(feature = "torch")]
pub mod bert;
#[cfg(feature = "torch")]
pub mod handoff;
pub mod imagenet;
pub mod prepare_imagenet;
pub mod rng;
pub mod synth_imagenet;

use clap::Subcommand;

#[derive(clap::Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub command: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Write a synthetic ImageNet-style data set (train/ and val/ ImageFolders of JPEG files).
    SynthImagenet(synth_imagenet::SynthImagenetArgs),
    /// Turn the ILSVRC2012 tars (train, val, val labels) into the `train/<wnid>/` and
    /// `val/<wnid>/` ImageFolders the trainer reads; resumable, streamed, verified.
    PrepareImagenet(prepare_imagenet::PrepareImagenetArgs),
    /// Time the ImageNet training pipeline on an ImageFolder (for scripts/bench_data.sh).
    #[command(hide = true)]
    BenchImagenet(imagenet::bench::BenchImagenetArgs),
    /// Write BERT pre-training shards (reference HDF5 layout) from English text.
    #[cfg(feature = "torch")]
    SynthBert(bert::synth::SynthBertArgs),
    /// Per-rank token imbalance of the BERT loader over one epoch, strided vs token-balanced.
    #[cfg(feature = "torch")]
    BertBalance(bert::balance_report::BertBalanceArgs),
    /// How one epoch of a BERT data set packs into fixed rows (methods.packing): rows,
    /// sequences per row, packing efficiency against the bound.
    #[cfg(feature = "torch")]
    BertPack(bert::packing::BertPackArgs),
}

pub fn run_data(args: DataArgs) -> anyhow::Result<crate::util::ExitStatus> {
    match args.command {
        DataCommand::SynthImagenet(a) => synth_imagenet::run_synth_imagenet(a),
        DataCommand::PrepareImagenet(a) => prepare_imagenet::run_prepare_imagenet(a),
        DataCommand::BenchImagenet(a) => imagenet::bench::run_bench_imagenet(a),
        #[cfg(feature = "torch")]
        DataCommand::SynthBert(a) => bert::synth::run_synth_bert(a),
        #[cfg(feature = "torch")]
        DataCommand::BertBalance(a) => bert::balance_report::run_bert_balance(a),
        #[cfg(feature = "torch")]
        DataCommand::BertPack(a) => bert::packing::run_bert_pack(a),
    }
}
