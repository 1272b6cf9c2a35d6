//! The benchmark presets of scripts/bench_gpu.sh load (ResNet's in the closed division, with the
//! closed presets' methods and GPU data path) and have the shape its timing relies on: a warm-up
//! block, then timed blocks, and an unreachable target.
#![cfg(feature = "torch")]

use mlperf_run::rules::Division;
use mlperf_run::train::bert::BertRunConfig;
use mlperf_run::train::resnet::config::ResnetRunConfig;
use std::path::PathBuf;

fn preset(kind: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(kind)
        .join(name)
}

#[test]
fn resnet_bench_presets_are_closed_with_a_warm_up_epoch_then_a_timed_block() {
    use mlperf_run::data::imagenet::{Augment, Decoder};
    use mlperf_run::train::resnet::config::Amp;
    for name in ["bench_1gpu.toml", "bench_smoke_cpu.toml"] {
        let c = ResnetRunConfig::load(&preset("resnet", name), Division::Closed)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        // block 1 = epoch 1 (warm-up), block 2 = epochs 2-5 and the last eval
        assert_eq!(c.eval_epochs(), [0, 4], "{name}");
        assert!(
            c.train.target > 0.99,
            "{name}: the target must stay out of reach"
        );
        let m = &c.methods;
        assert!(
            m.channels_last && m.fused_bn_relu && m.amp == Amp::Fp16,
            "{name}"
        );
        assert_eq!(
            (c.data.decoder, c.data.augment),
            (Decoder::Nvjpeg, Augment::Gpu),
            "{name}"
        );
    }
    let c = ResnetRunConfig::load(&preset("resnet", "bench_1gpu.toml"), Division::Closed).unwrap();
    assert_eq!((c.model.classes, c.train.global_batch_size), (100, 400));
    assert!(
        c.methods.cuda_graph,
        "the one-GPU preset runs the step as a CUDA graph"
    );
}

#[test]
fn bert_bench_presets_train_two_blocks() {
    for (name, steps) in [("bench_1gpu.toml", 100), ("bench_smoke_cpu.toml", 4)] {
        let c = BertRunConfig::load(&preset("bert", name), Division::Open)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let blocks = c.blocks(Division::Open).unwrap();
        assert_eq!(blocks.len(), 2, "{name}");
        for b in &blocks {
            assert_eq!(b.epoch_count, steps * c.train.global_batch_size, "{name}");
        }
        assert!(c.train.target > 0.99 && c.methods.bf16(), "{name}");
    }
    // part p: packed rows with every closed-legal method, 3 blocks of 100 steps of 48 rows
    let c = BertRunConfig::load(&preset("bert", "bench_1gpu_packed.toml"), Division::Open).unwrap();
    let m = &c.methods;
    assert!(m.packing && m.cuda_graph && m.fused_epilogues && m.fused_qkv && m.bf16());
    assert_eq!(c.train.global_batch_size / c.train.packing_factor, 48);
    let blocks = c.blocks(Division::Open).unwrap();
    assert_eq!(blocks.len(), 3);
    assert!(blocks
        .iter()
        .all(|b| b.epoch_count == 100 * c.train.global_batch_size));
    // the 1-GPU preset has the methods of the closed one
    let closed =
        BertRunConfig::load(&preset("bert", "closed_8xH100.toml"), Division::Closed).unwrap();
    assert_eq!(closed.methods, c.methods);
}

/// scripts/bench_plan_cpu.sh's compute-heavier preset: closed, shared by 1 and 2 processes
/// (its batch divides by 2), and a reachable target (the bench projects runs that converge).
#[test]
fn the_plan_bench_preset_is_closed_and_splits_over_two_ranks() {
    let c = ResnetRunConfig::load(&preset("resnet", "bench_plan_cpu.toml"), Division::Closed)
        .unwrap_or_else(|e| panic!("bench_plan_cpu.toml: {e:#}"));
    assert_eq!(c.local_batch(2).unwrap() * 2, c.train.global_batch_size);
    assert!(c.train.target < 0.99);
}
