//! Data: the ImageNet ImageFolder reader and batch pipeline, `data synth-imagenet`,
//! `data prepare-imagenet` on tars in the real ILSVRC2012 layouts, and the BERT shards (synth-bert,
//! the loader, token balancing). One test binary (tests/<area>/main.rs: one per area, each
//! linking libtorch once); the modules are the former one-file test crates, the helpers are
//! tests/common/. The modules marked `#![cfg(feature = "torch")]` need the trainer; the rest run
//! in the lite build too (`--no-default-features`).

#[path = "../common/mod.rs"]
mod common;

mod bert_data;
mod bert_packing;
mod data_imagenet;
mod data_synth;
mod decoded_cache;
mod fuzz_regressions;
mod gpu_augment;
mod prepare_imagenet;
