//! The benchmark presets of scripts/bench_gpu.sh load in the open division and have the shape
//! its timing relies on: a warm-up block, then timed blocks, and an unreachable target.
#![cfg(feature = "torch")]

use mlperf_run::train::bert::BertRunConfig;
use mlperf_run::train::config::{Division, ResnetRunConfig};
use std::path::PathBuf;

fn preset(kind: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(kind)
        .join(name)
}

#[test]
fn resnet_bench_presets_eval_every_epoch_after_a_warm_up_epoch() {
    for name in ["bench_1gpu.toml", "bench_smoke_cpu.toml"] {
        let c = ResnetRunConfig::load(&preset("resnet", name), Division::Open)
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(c.eval_epochs(), [0, 1], "{name}");
        assert!(
            c.train.target > 0.99,
            "{name}: the target must stay out of reach"
        );
        assert!(c.methods.channels_last, "{name}");
    }
    let c = ResnetRunConfig::load(&preset("resnet", "bench_1gpu.toml"), Division::Open).unwrap();
    assert_eq!((c.model.classes, c.train.global_batch_size), (100, 256));
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
