//! The tiny BERT presets really train: on synth-bert data a closed and an open run reach their
//! stated target (closed: MLPerf's 0.720 MLM accuracy, evaluated at the closed interval) and
//! stop there, and their logs pass our checker and the official compliance checker (ruleset 5.0.0).
//!
//! The two runs write their HDF5 shards in this process, so each runs alone in a process of its
//! own (`common::alone`): libhdf5 opens files without close-on-exec and locks them, so a child
//! that another test of the binary starts meanwhile keeps the writer's lock after the writer
//! closes the file, and the run then cannot open its shard ("unable to lock file, errno = 11").
#![cfg(feature = "torch")]

use crate::common;
use crate::common::alone::run_alone;

use mlperf_run::data::bert::synth::{synth_bert, Lengths, SynthBertArgs};
use mlperf_run::mllog::parse_file;
use mlperf_run::rules::Division;
use mlperf_run::rules::{check_log, CheckOptions};
use mlperf_run::train::bert::{run_once, BertRunConfig};
use mlperf_run::train::engine::Status;
use std::path::{Path, PathBuf};

fn data(dir: &Path) {
    synth_bert(&SynthBertArgs {
        sentences: 16,
        seq_len: 32,
        ..SynthBertArgs::new(dir)
    })
    .unwrap();
}

fn official_check(test: &str, log: &Path) {
    common::official::assert_compliant(test, log, "5.0.0");
}

fn reaches_target_and_passes(name: &str, division: Division, seed: u64) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs/bert")
        .join(name);
    let cfg = BertRunConfig::load(&path, division).unwrap();
    let dir = tempfile::tempdir().unwrap();
    data(&dir.path().join("data"));
    let log_path = dir.path().join("result_0.txt");
    let opts = common::train::cpu_run_options(&cfg.system, division, seed, &log_path);
    let out = run_once(&cfg, division, &dir.path().join("data"), None, opts).unwrap();
    eprintln!(
        "{name} {division:?}: {:?} after {} steps, evals {:?}, run {:.1} s",
        out.status, out.steps, out.evals, out.run_seconds
    );
    assert_eq!(out.status, Status::Success, "evals {:?}", out.evals);
    let (last_samples, last_acc) = *out.evals.last().unwrap();
    assert!(last_acc >= cfg.train.target);
    assert!(out.evals[..out.evals.len() - 1]
        .iter()
        .all(|&(_, a)| a < cfg.train.target));
    let interval = cfg.eval_interval(division).unwrap();
    if division == Division::Closed {
        assert_eq!(interval, 150_000);
    }
    // epoch_num is samples seen: the first eval comes at the first whole step past the interval
    assert!(out.evals[0].0 >= interval && out.evals[0].0 < interval + cfg.train.global_batch_size);
    assert_eq!(last_samples, out.steps * cfg.train.global_batch_size);
    let first = out.losses[..5].iter().sum::<f64>() / 5.0;
    let last = out.losses[out.losses.len() - 5..].iter().sum::<f64>() / 5.0;
    assert!(last < 0.5 * first, "loss {first} -> {last}");

    let log = parse_file(&log_path).unwrap();
    assert_eq!(log.last("run_stop").unwrap().status(), Some("success"));
    assert_eq!(
        log.last("eval_accuracy").unwrap().epoch_num(),
        Some(last_samples as f64)
    );
    for key in [
        "global_batch_size",
        "opt_base_learning_rate",
        "opt_lamb_epsilon",
        "opt_learning_rate_training_steps",
        "opt_learning_rate_warmup_steps",
        "num_warmup_steps",
        "start_warmup_step",
        "opt_lamb_beta_1",
        "opt_lamb_beta_2",
        "opt_lamb_weight_decay_rate",
        "gradient_accumulation_steps",
        "seed",
        "method_unpad",
        "method_balance_tokens",
        "method_fused_qkv",
        "method_bf16_residual",
    ] {
        assert_eq!(log.with_key(key).count(), 1, "{key}");
    }
    assert_eq!(
        log.first("opt_base_learning_rate").unwrap().value,
        serde_json::json!(cfg.optimizer.base_learning_rate)
    );
    assert_eq!(
        log.first("method_unpad").unwrap().value,
        serde_json::json!(cfg.methods.unpad)
    );
    assert_eq!(
        log.first("method_balance_tokens").unwrap().value,
        serde_json::json!(cfg.methods.balance_tokens)
    );
    assert_eq!(cfg.methods.balance_tokens, division == Division::Open);
    // the open preset trains through the fused query/key/value projection
    assert_eq!(cfg.methods.fused_qkv, division == Division::Open);
    assert_eq!(
        log.first("method_fused_qkv").unwrap().value,
        serde_json::json!(cfg.methods.fused_qkv)
    );
    let verdict = check_log(
        &log,
        &CheckOptions {
            ruleset: Some("5.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
    official_check(name, &log_path);
}

#[test]
fn tiny_cpu_closed_reaches_0_720_and_passes_the_checkers() {
    run_alone!();
    reaches_target_and_passes("tiny_cpu.toml", Division::Closed, 4321);
}

#[test]
fn tiny_cpu_open_unpadded_reaches_target_and_passes_the_checkers() {
    run_alone!();
    reaches_target_and_passes("tiny_cpu_open.toml", Division::Open, 77);
}

#[test]
fn closed_configs_breaking_the_rules_are_refused() {
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml"),
    )
    .unwrap();
    for (from, to, needle) in [
        ("target = 0.720", "target = 0.70", "0.720"),
        ("name = \"lamb\"", "name = \"adamw\"", "lamb"),
        (
            "max_samples = 300032",
            "max_samples = 300032\neval_interval_samples = 1000",
            "eval_interval_samples",
        ),
        (
            "max_grad_norm = 1.0",
            "max_grad_norm = 1.0\ngradient_clipping = \"bucket\"",
            "gradient_clipping",
        ),
    ] {
        let text = base.replace(from, to);
        assert_ne!(text, base, "{from}");
        let err = format!(
            "{:#}",
            BertRunConfig::parse(&text, Division::Closed).unwrap_err()
        );
        assert!(err.contains(needle), "{err}");
        BertRunConfig::parse(
            &text.replace("target = 0.70", "target = 0.72"),
            Division::Open,
        )
        .unwrap();
    }
    let err = format!(
        "{:#}",
        BertRunConfig::parse(
            &base.replace("num_heads = 2", "num_heads = 3"),
            Division::Open
        )
        .unwrap_err()
    );
    assert!(err.contains("num_heads"), "{err}");
    // token balancing: both divisions (it deals the same global batch out among the ranks),
    // and only with unpadding
    let open = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_open.toml"),
    )
    .unwrap();
    assert!(open.contains("balance_tokens = true"));
    BertRunConfig::parse(&open, Division::Open).unwrap();
    let closed = open.replace("eval_interval_samples = 16384\n", "");
    assert_ne!(closed, open);
    let c = BertRunConfig::parse(&closed, Division::Closed).unwrap();
    assert!(c.methods.balance_tokens);
    let err = format!(
        "{:#}",
        BertRunConfig::parse(
            &open.replace("unpad = true", "unpad = false"),
            Division::Open
        )
        .unwrap_err()
    );
    assert!(
        err.contains("balance_tokens") && err.contains("unpad"),
        "{err}"
    );
    // a bf16 residual stream only inside bf16 autocast
    assert!(open.contains("amp = \"none\""));
    let text = open.replace("amp = \"none\"", "amp = \"none\"\nbf16_residual = true");
    let err = format!(
        "{:#}",
        BertRunConfig::parse(&text, Division::Open).unwrap_err()
    );
    assert!(
        err.contains("bf16_residual") && err.contains("methods.amp = \"bf16\""),
        "{err}"
    );
    let c = BertRunConfig::parse(
        &text.replace("amp = \"none\"", "amp = \"bf16\""),
        Division::Open,
    )
    .unwrap();
    assert!(c.methods.bf16() && c.methods.bf16_residual);
    // the old key still reads, as amp; set against amp it is refused, naming both
    let old = text.replace("amp = \"none\"", "bf16 = true");
    let c = BertRunConfig::parse(&old, Division::Open).unwrap();
    assert_eq!(c.methods.amp, mlperf_run::methods::Amp::Bf16);
    let both = text.replace("amp = \"none\"", "amp = \"none\"\nbf16 = true");
    let err = format!(
        "{:#}",
        BertRunConfig::parse(&both, Division::Open).unwrap_err()
    );
    assert!(
        err.contains("methods.bf16") && err.contains("methods.amp"),
        "{err}"
    );
    // fp16 needs loss scaling, which the BERT trainer lacks: refused with the fix
    let err = format!(
        "{:#}",
        BertRunConfig::parse(
            &open.replace("amp = \"none\"", "amp = \"fp16\""),
            Division::Open
        )
        .unwrap_err()
    );
    assert!(
        err.contains("amp = \"fp16\"") && err.contains("bf16"),
        "{err}"
    );
}

/// The realistic-length tiny data of configs/bert/tiny_cpu_packed.toml.
fn realistic_data(dir: &Path) {
    synth_bert(&SynthBertArgs {
        sentences: 16,
        max_predictions: 20,
        lengths: Lengths::Realistic,
        ..SynthBertArgs::new(dir)
    })
    .unwrap();
}

/// The tiny closed preset with packed sequences on realistic-length data reaches 0.720 at the
/// closed interval, counts the sequences it trained in epoch_num, and its log passes our checker
/// and the official one (5.0.0).
#[test]
fn tiny_cpu_packed_closed_reaches_0_720_and_passes_the_checkers() {
    run_alone!();
    tiny_packed_run(None);
}

/// The same through the CPU twin of methods.cuda_graph (the packed step's one shape captured
/// after 3 eager steps and replayed from then on).
#[test]
fn tiny_cpu_packed_through_the_cuda_graph_twin_reaches_0_720_and_passes_the_checkers() {
    run_alone!();
    tiny_packed_run(Some(3));
}

fn tiny_packed_run(graph_twin: Option<u32>) {
    let division = Division::Closed;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_packed.toml");
    let cfg = BertRunConfig::load(&path, division).unwrap();
    assert!(cfg.methods.packing && !cfg.methods.unpad);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    realistic_data(&data);
    let log_path = dir.path().join("result_0.txt");
    let mut opts = common::train::cpu_run_options(&cfg.system, division, 4321, &log_path);
    opts.test_hooks.emulate_cuda_graph = graph_twin;
    let out = run_once(&cfg, division, &data, None, opts).unwrap();
    eprintln!(
        "tiny_cpu_packed (graph twin: {graph_twin:?}): {:?} after {} steps, evals {:?}, run {:.1} s",
        out.status, out.steps, out.evals, out.run_seconds
    );
    assert_eq!(out.status, Status::Success, "evals {:?}", out.evals);
    let (last_samples, last_acc) = *out.evals.last().unwrap();
    assert!(last_acc >= 0.720);
    // the eval comes after the steps of the closed interval; epoch_num counts the sequences those
    // rows held: at least one per row, at most max_sequences_per_row
    let rows = out.steps * cfg.train.global_batch_size / cfg.train.packing_factor;
    assert!(out.steps * cfg.train.global_batch_size >= 150_000);
    assert!(
        last_samples >= rows && last_samples <= 3 * rows,
        "{last_samples} for {rows} rows"
    );
    assert!(last_samples > rows, "some rows hold several sequences");
    let log = parse_file(&log_path).unwrap();
    assert_eq!(log.last("run_stop").unwrap().status(), Some("success"));
    assert_eq!(
        log.last("eval_accuracy").unwrap().epoch_num(),
        Some(last_samples as f64)
    );
    for key in ["method_packing", "packing_factor", "global_batch_size"] {
        assert_eq!(log.with_key(key).count(), 1, "{key}");
    }
    assert_eq!(
        log.first("method_packing").unwrap().value,
        serde_json::json!(true)
    );
    let verdict = check_log(
        &log,
        &CheckOptions {
            ruleset: Some("5.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
    official_check("tiny_cpu_packed.toml", &log_path);
}

/// Packing asked of data that cannot be packed ends the run with an error naming the file, not a
/// panic: training sequences longer than the packed row (the eval set's length).
#[test]
fn packing_training_shards_longer_than_the_row_end_the_run_naming_the_file() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    // eval at 32 tokens (the pairs set), training at 64 (the realistic one): rows of 32 tokens
    let (s32, s64) = (dir.path().join("s32"), dir.path().join("s64"));
    data(&s32);
    realistic_data(&s64);
    let mixed = dir.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::rename(s32.join("eval"), mixed.join("eval")).unwrap();
    std::fs::rename(s64.join("train"), mixed.join("train")).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_packed.toml");
    let cfg = BertRunConfig::load(&path, Division::Closed).unwrap();
    let log_path = dir.path().join("result_0.txt");
    let opts = common::train::cpu_run_options(&cfg.system, Division::Closed, 1, &log_path);
    let msg = match run_once(&cfg, Division::Closed, &mixed, None, opts) {
        Err(e) => format!("{e:#}"),
        Ok(out) => match out.status {
            Status::Aborted(why) => why,
            other => panic!("the run must fail: {other:?}"),
        },
    };
    assert!(
        msg.contains(".hdf5") && msg.contains("more than a packed row holds"),
        "{msg}"
    );
}

/// The closed 8-GPU presets (packed sequences and every closed-legal method on) log
/// hyperparameters that our checker and the official one (5.0.0, closed BERT rules) accept: a log
/// with each preset's hyperparameter keys as the trainer writes them, its blocks at the closed
/// eval interval and a last eval at 0.7205.
#[test]
fn closed_presets_log_hyperparameters_the_checkers_accept() {
    use mlperf_run::meta;
    use serde_json::Value;
    let dir = tempfile::tempdir().unwrap();
    for name in ["closed_8xA100.toml", "closed_8xH100.toml"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("configs/bert")
            .join(name);
        let cfg = BertRunConfig::load(&path, Division::Closed).unwrap();
        let log_path = dir.path().join(name.replace(".toml", ".txt"));
        let mut w = common::emitter_logs::Writer::new(&log_path);
        common::emitter_logs::header(&mut w, "bert", "closed", 20261127);
        let hp = cfg.hyperparameters(Division::Closed, 156_725_653, 512);
        for (k, v) in &hp {
            w.em.event(k, v.clone()).unwrap();
        }
        w.wait_ms(60_000);
        w.em.end("init_stop", Value::Null, meta! {}).unwrap();
        w.em.start("run_start", Value::Null, meta! {}).unwrap();
        for (i, b) in cfg
            .blocks(Division::Closed)
            .unwrap()
            .iter()
            .take(3)
            .enumerate()
        {
            w.em.start(
                "block_start",
                Value::Null,
                meta! {"first_epoch_num" => b.first_epoch_num, "epoch_count" => b.epoch_count},
            )
            .unwrap();
            w.wait_ms(30_000);
            w.em.end(
                "block_stop",
                Value::Null,
                meta! {"first_epoch_num" => b.first_epoch_num},
            )
            .unwrap();
            w.em.start(
                "eval_start",
                Value::Null,
                meta! {"epoch_num" => b.eval_epoch_num},
            )
            .unwrap();
            let acc = if i == 2 { 0.7205 } else { 0.5 + 0.1 * i as f64 };
            w.em.event_with(
                "eval_accuracy",
                acc,
                meta! {"epoch_num" => b.eval_epoch_num},
            )
            .unwrap();
            w.em.end(
                "eval_stop",
                Value::Null,
                meta! {"epoch_num" => b.eval_epoch_num},
            )
            .unwrap();
        }
        w.em.end("run_stop", Value::Null, meta! {"status" => "success"})
            .unwrap();
        drop(w);
        let log = parse_file(&log_path).unwrap();
        for key in [
            "method_packing",
            "cuda_graph",
            "method_fused_epilogues",
            "method_fused_qkv",
            "packing_factor",
        ] {
            let v = hp.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
            assert!(v.is_some_and(|v| v != Value::Bool(false)), "{name}: {key}");
        }
        let verdict = check_log(
            &log,
            &CheckOptions {
                ruleset: Some("5.0.0".into()),
            },
        );
        assert!(
            verdict.compliant(),
            "{name}, our checker: {:?}",
            verdict.findings
        );
        official_check(name, &log_path);
    }
}

#[test]
fn full_size_configs_load_with_the_reference_recipe() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert");
    let c = BertRunConfig::load(&dir.join("closed_8xA100.toml"), Division::Closed).unwrap();
    assert_eq!(
        (c.train.global_batch_size, c.optimizer.training_steps),
        (448, 6700)
    );
    assert_eq!(
        (
            c.optimizer.base_learning_rate,
            c.optimizer.beta1,
            c.optimizer.beta2,
            c.optimizer.weight_decay
        ),
        (4.25e-4, 0.9, 0.999, 0.01)
    );
    assert_eq!(c.eval_interval(Division::Closed).unwrap(), 150_000);
    assert_eq!(c.model.param_count(), 336_232_258);
    // every closed-legal method that speeds the step
    let fast = |m: &mlperf_run::methods::BertMethods| {
        m.packing && m.cuda_graph && m.fused_epilogues && m.fused_qkv && m.bf16() && !m.unpad
    };
    assert!(fast(&c.methods), "{:?}", c.methods);
    assert_eq!(c.train.packing_factor, 2);
    // NVIDIA's v3.0 H100 recipe (config_DGXH100_1x8x48x1_pack.sh)
    let h = BertRunConfig::load(&dir.join("closed_8xH100.toml"), Division::Closed).unwrap();
    assert!(fast(&h.methods), "{:?}", h.methods);
    // FP8 on the H100 preset (its recipe's defaults), bf16 on the A100 one (no FP8 there)
    assert!(h.methods.fp8 && !c.methods.fp8);
    assert_eq!(
        (h.methods.fp8_amax_history_len, h.methods.fp8_margin),
        (1024, 0)
    );
    assert_eq!(
        (
            h.train.global_batch_size,
            h.train.packing_factor,
            h.optimizer.training_steps,
            h.optimizer.warmup_steps
        ),
        (768, 2, 3680, 0)
    );
    assert_eq!(
        (
            h.optimizer.base_learning_rate,
            h.optimizer.beta1,
            h.optimizer.beta2,
            h.optimizer.weight_decay,
            h.optimizer.epsilon
        ),
        (9.6e-4, 0.60466, 0.85437, 0.1, 1e-6)
    );
    // 48 rows per GPU on 8 GPUs; evaluated every 150,000 samples
    assert_eq!(h.train.global_batch_size / h.train.packing_factor / 8, 48);
    assert_eq!(h.eval_interval(Division::Closed).unwrap(), 150_000);
    let o = BertRunConfig::load(&dir.join("open_8xA100.toml"), Division::Open).unwrap();
    assert!(
        fast(&o.methods) && o.methods.fused_bias_gelu,
        "{:?}",
        o.methods
    );
    assert_eq!(o.eval_interval(Division::Open).unwrap(), 100_000);
    assert!(BertRunConfig::load(&dir.join("open_8xA100.toml"), Division::Closed).is_err());
}

/// `methods.fp8` through the CLI on the tiny packed closed preset: without
/// MLPERF_RUN_TEST_EMULATE_FP8 a CPU run is refused before the run (no log) naming the reason;
/// with it the emulated FP8 path reaches 0.720 at the closed interval, the log records
/// `method_fp8`, and our checker and the official one (5.0.0) pass it.
#[test]
fn tiny_cpu_packed_fp8_runs_emulated_in_the_test_mode_and_is_refused_without_it() {
    use mlperf_run::fused::fp8::EMULATE_FP8;
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    realistic_data(&data);
    let preset =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu_packed.toml");
    let text = std::fs::read_to_string(preset).unwrap();
    assert_eq!(text.matches("[methods]").count(), 1);
    let cfg = dir.path().join("tiny_cpu_packed_fp8.toml");
    std::fs::write(&cfg, text.replace("[methods]", "[methods]\nfp8 = true")).unwrap();
    let cmd = |log: &Path| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
        c.args(["bert", "--division", "closed", "--config"])
            .arg(&cfg)
            .arg("--data")
            .arg(&data)
            .args(["--seed", "4321", "--log"])
            .arg(log);
        c
    };
    let refused = dir.path().join("refused.txt");
    let out = cmd(&refused).env_remove(EMULATE_FP8).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("methods.fp8 cannot run") && err.contains("CPU") && err.contains(EMULATE_FP8),
        "{err}"
    );
    // the file is named, as for every other config refusal
    assert!(
        err.contains(&format!("invalid config {}", cfg.display())),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!refused.exists(), "refused before the run: no log");
    let log_path = dir.path().join("result_0.txt");
    let out = cmd(&log_path).env(EMULATE_FP8, "1").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = parse_file(&log_path).unwrap();
    assert_eq!(log.last("run_stop").unwrap().status(), Some("success"));
    assert_eq!(
        log.first("method_fp8").unwrap().value,
        serde_json::json!(true)
    );
    // the recipe is on record: format, history length, margin, how the history is reduced,
    // whether the ranks agree on the amaxes
    let recipe: Vec<_> = [
        "fp8_format",
        "fp8_amax_history_len",
        "fp8_margin",
        "fp8_amax_compute_algo",
        "fp8_reduce_amax",
    ]
    .iter()
    .map(|k| log.first(k).map(|e| e.value.clone()))
    .collect();
    assert_eq!(
        recipe,
        [
            Some(serde_json::json!("hybrid")),
            Some(serde_json::json!(1024)),
            Some(serde_json::json!(0)),
            Some(serde_json::json!("max")),
            Some(serde_json::json!(true))
        ]
    );
    let acc = log.last("eval_accuracy").unwrap().value.as_f64().unwrap();
    assert!(acc >= 0.720, "{acc}");
    let verdict = check_log(
        &log,
        &CheckOptions {
            ruleset: Some("5.0.0".into()),
        },
    );
    assert!(verdict.compliant(), "our checker: {:?}", verdict.findings);
    official_check("tiny_cpu_packed.toml + fp8 (emulated)", &log_path);
}

/// A small BERT data folder made by `mlperf-run data synth-bert` under `dir` (the CLI's own
/// path, as a user makes one): its path.
fn cli_synth_bert(dir: &std::path::Path) -> PathBuf {
    let data = dir.join("data");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args([
            "data",
            "synth-bert",
            "--seq-len",
            "32",
            "--sentences",
            "16",
            "--out",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    data
}

/// An --init-checkpoint that is missing, empty, a folder or not safetensors used to be found
/// when each run built its model: every run of a set ended aborted (exit 1) with a log. It is
/// refused before the first run (exit 2), naming the flag, the file and how to convert one.
#[test]
fn a_bad_init_checkpoint_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_mlperf-run");
    let data = cli_synth_bert(dir.path());
    let garbage = dir.path().join("garbage.safetensors");
    std::fs::write(
        &garbage,
        b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a checkpoint",
    )
    .unwrap();
    let empty = dir.path().join("empty.safetensors");
    std::fs::write(&empty, b"").unwrap();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml");
    for (ck, words) in [
        (dir.path().join("missing.safetensors"), "does not exist"),
        (empty, "too short for a safetensors file"),
        (garbage, "is not a safetensors file"),
        (data.clone(), "is a folder"),
    ] {
        let log = dir.path().join("run.txt");
        let out = std::process::Command::new(bin)
            .args(["bert", "--division", "open", "--seed", "1", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(&data)
            .arg("--init-checkpoint")
            .arg(&ck)
            .arg("--log")
            .arg(&log)
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", ck.display());
        assert!(
            err.contains(&format!("--init-checkpoint: {}", ck.display())) && err.contains(words),
            "{err}"
        );
        if words != "does not exist" {
            assert!(err.contains("scripts/convert_bert_checkpoint"), "{err}");
        }
        assert!(!log.exists(), "no run started: {err}");
    }
}

/// A config that does not fit its data (more eval samples than the eval shards hold, a
/// vocabulary smaller than the token ids, sequences longer than model.max_position) used to be
/// found by each run's set-up: every run of a set ended aborted (exit 1) with a log. It is
/// refused before the first run (exit 2), naming the data, the key and the value to set.
#[test]
fn a_config_that_does_not_fit_its_data_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_mlperf-run");
    let data = cli_synth_bert(dir.path());
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml"),
    )
    .unwrap();
    for (from, to, words) in [
        (
            "eval_samples = 512",
            "eval_samples = 100000",
            "eval set has 512 samples, the config asks for 100000",
        ),
        (
            "vocab_size = 256",
            "vocab_size = 100",
            "does not fit the model's vocab_size 100; set model.vocab_size to at least",
        ),
        (
            "max_position = 32",
            "max_position = 16",
            "the data's seq_len 32 exceeds model.max_position 16: set model.max_position to at \
             least 32",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let config = dir.path().join("config.toml");
        std::fs::write(&config, text.replace(from, to)).unwrap();
        let results = dir.path().join("results");
        let out = std::process::Command::new(bin)
            .args(["bert", "--division", "open", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(&data)
            .arg("--results")
            .arg(&results)
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {err}");
        assert!(
            err.contains(&format!("--data: {}", data.join("eval").display()))
                && err.contains(words),
            "{to}: {err}"
        );
        assert!(!results.exists(), "{to}: no run set started: {err}");
    }
}

/// A training shard cut short (a copy that stopped half-way) was found when the run's loader
/// opened it: every run of a set ended aborted (exit 1) with a log. It is refused before the
/// first run (exit 2), naming --data, the shard and what to do.
#[test]
fn a_cut_short_training_shard_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_mlperf-run");
    let data = cli_synth_bert(dir.path());
    let shard = data.join("train/part-00003-of-00004.hdf5");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml");
    let results = dir.path().join("results");
    let out = std::process::Command::new(bin)
        .args(["bert", "--division", "open", "--runs", "2", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(&data)
        .arg("--results")
        .arg(&results)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--data: cannot open {}", shard.display()))
            && err.contains("truncated file")
            && err.contains("copy it again"),
        "{err}"
    );
    assert!(!results.exists(), "no run set started: {err}");
}

/// A BERT with a hidden size of 2^20 (1.1e13 parameters, 1.8e14 bytes with their gradients and
/// LAMB's moments) was built until the kernel's OOM killer ended the process (exit 137, no
/// message). On a CPU run it is refused before the first run (exit 2), naming the model keys
/// and the estimate; BERT-Large itself needs 5.4e9 bytes by the same count.
#[test]
fn a_model_that_cannot_fit_in_memory_is_refused_before_the_run() {
    use mlperf_run::train::config::check_memory;
    let dir = tempfile::tempdir().unwrap();
    let data = cli_synth_bert(dir.path());
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml"),
    )
    .unwrap();
    let huge = text.replace("hidden_size = 32", "hidden_size = 1048576");
    let cfg = BertRunConfig::parse(&huge, Division::Open).unwrap();
    let floor = cfg.memory_floor();
    assert!(floor[0].bytes > 1.7e14, "{floor:?}");
    let large = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/closed_8xH100.toml"),
    )
    .unwrap();
    let large = BertRunConfig::parse(&large, Division::Closed).unwrap();
    check_memory(&large.memory_floor(), 8 << 30).unwrap();
    let config = dir.path().join("huge.toml");
    std::fs::write(&config, &huge).unwrap();
    let log = dir.path().join("run.txt");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["bert", "--division", "open", "--seed", "1", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(&data)
        .arg("--log")
        .arg(&log)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("invalid config {}", config.display()))
            && err.contains("model.hidden_size 1048576")
            && err.contains("MemAvailable"),
        "{err}"
    );
    assert!(!log.exists(), "no run started: {err}");
}
