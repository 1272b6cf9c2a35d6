//! `plan` for 8, 16 and 64 H100s (issue 44, acceptance): three closed configs per benchmark,
//! each accepted by the closed rules of `resnet`/`bert`, each trained as a tiny-scale dry run
//! whose log the official closed checker accepts but for the target. ResNet: its batch,
//! hyperparameters and eval cadence, the tiny model on a synthetic set of one global batch per
//! epoch, to its first eval. BERT: its batch, LAMB hyperparameters and packing, the tiny packed
//! model on a synthetic corpus, to its first eval (the closed cadence: about 100,000 sequences,
//! some 50 s a config on 2 cores).
#![cfg(feature = "torch")]

use mlperf_run::data::bert::synth::{synth_bert, Lengths, SynthBertArgs};
use mlperf_run::plan::{plan, PlanArgs};
use mlperf_run::rules::Division;
use mlperf_run::train::bert::BertRunConfig;
use mlperf_run::train::resnet::ResnetRunConfig;
use std::path::{Path, PathBuf};
use std::process::Command;

fn args(benchmark: &str, out: &Path) -> PlanArgs {
    PlanArgs {
        gpus: vec![8, 16, 64],
        gpu: "H100".into(),
        out: out.to_path_buf(),
        ..PlanArgs::defaults(benchmark).unwrap()
    }
}

fn planned(benchmark: &str, out: &Path) -> Vec<PathBuf> {
    let p = plan(&args(benchmark, out)).unwrap();
    let paths: Vec<PathBuf> = p.rows.iter().map(|(_, path)| PathBuf::from(path)).collect();
    assert_eq!(paths.len(), 3);
    for path in &paths {
        assert!(path.exists(), "{}", path.display());
    }
    assert!(p.svg.exists());
    paths
}

/// The planned config with the tiny model, a synthetic set of one global batch per epoch at
/// 16 px, and max_epochs just past its first eval.
fn tiny_scale(planned: &Path) -> String {
    let mut t: toml::Table = toml::from_str(&std::fs::read_to_string(planned).unwrap()).unwrap();
    let tiny: toml::Table = toml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"),
        )
        .unwrap(),
    )
    .unwrap();
    for k in ["system", "model", "methods"] {
        t.insert(k.into(), tiny[k].clone());
    }
    let train = t["train"].as_table().unwrap().clone();
    let gbs = train["global_batch_size"].as_integer().unwrap();
    let offset = train["eval_offset"].as_integer().unwrap();
    let mut data = tiny["data"].as_table().unwrap().clone();
    data.insert("train_image_size".into(), 16.into());
    data.insert("eval_image_size".into(), 16.into());
    let syn = data["synthetic"].as_table_mut().unwrap();
    syn.insert("train_per_class".into(), ((gbs + 9) / 10).into());
    syn.insert("eval_per_class".into(), 5.into());
    t.insert("data".into(), data.into());
    let tr = t["train"].as_table_mut().unwrap();
    tr.insert("max_epochs".into(), (offset + 1).into());
    // the label smoothing of the plan (the template's) stays on record
    t["methods"]
        .as_table_mut()
        .unwrap()
        .insert("label_smoothing".into(), 0.1.into());
    toml::to_string(&t).unwrap()
}

/// The dry run of planned config `planned` as `tiny` (its tiny-scale text), written beside it:
/// `mlperf-run BENCHMARK --division closed` with `extra` flags, seed 3, into `<planned>.log`.
/// It stops at its first eval, below the target (exit 0 or 1), and logs the planned global
/// batch `gbs`. Returns the log.
fn dry_run(
    planned: &Path,
    tiny: &str,
    benchmark: &str,
    extra: &[&std::ffi::OsStr],
    gbs: u64,
) -> PathBuf {
    let cfg = planned.with_extension("tiny.toml");
    std::fs::write(&cfg, tiny).unwrap();
    let log = planned.with_extension("log");
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args([benchmark, "--division", "closed", "--config"])
        .arg(&cfg)
        .args(extra)
        .args(["--seed", "3", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{}: {err}",
        planned.display()
    );
    let logged = mlperf_run::mllog::parse_file(&log).unwrap();
    let value = logged.first("global_batch_size").map(|e| e.value.as_u64());
    assert_eq!(value, Some(Some(gbs)), "{}: {err}", log.display());
    log
}

#[test]
fn plan_writes_closed_resnet_configs_that_run_and_pass_the_official_checker() {
    let dir = tempfile::tempdir().unwrap();
    for path in planned("resnet", dir.path()) {
        let gbs = ResnetRunConfig::load(&path, Division::Closed)
            .unwrap()
            .train
            .global_batch_size;
        let log = dry_run(&path, &tiny_scale(&path), "resnet", &[], gbs);
        crate::common::official::assert_only_the_target_fails(
            "plan_configs resnet",
            &log,
            "4.0.0",
            "closed_resnet_lars.yaml",
            "0.759",
        );
    }
}

/// The planned BERT config with the tiny packed model (configs/bert/tiny_cpu_packed.toml's
/// system, model, methods and data settings; packing on), stopping at its first eval: training
/// goes by the closed eval blocks, and `max_samples` of one global batch ends the run after the
/// first.
fn tiny_bert_scale(planned: &Path) -> String {
    let mut t: toml::Table = toml::from_str(&std::fs::read_to_string(planned).unwrap()).unwrap();
    let tiny: toml::Table = toml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_packed.toml"),
        )
        .unwrap(),
    )
    .unwrap();
    for k in ["system", "model", "methods", "data"] {
        t.insert(k.into(), tiny[k].clone());
    }
    let tr = t["train"].as_table_mut().unwrap();
    let gbs = tr["global_batch_size"].as_integer().unwrap();
    tr.insert("max_samples".into(), gbs.into());
    toml::to_string(&t).unwrap()
}

#[test]
fn plan_writes_closed_bert_configs_that_run_and_pass_the_official_checker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    synth_bert(&SynthBertArgs {
        lengths: Lengths::Realistic,
        seq_len: 64,
        sentences: 16,
        train_samples: 2048,
        eval_samples: 512,
        shards: 2,
        max_predictions: 20,
        ..SynthBertArgs::new(&data)
    })
    .unwrap();
    for path in planned("bert", dir.path()) {
        let cfg = BertRunConfig::load(&path, Division::Closed).unwrap();
        assert!(cfg.methods.packing);
        assert_eq!(cfg.train.global_batch_size % 16, 0);
        let log = dry_run(
            &path,
            &tiny_bert_scale(&path),
            "bert",
            &["--data".as_ref(), data.as_os_str()],
            cfg.train.global_batch_size,
        );
        let logged = mlperf_run::mllog::parse_file(&log).unwrap();
        for key in ["opt_base_learning_rate", "opt_lamb_weight_decay_rate"] {
            assert!(logged.first(key).is_some(), "{key} not logged");
        }
        crate::common::official::assert_only_the_target_fails(
            "plan_configs bert",
            &log,
            "5.0.0",
            "closed_bert.yaml",
            "0.720",
        );
    }
}
