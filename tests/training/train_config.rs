//! Config errors name the key and the allowed values; closed configs that break the closed
//! rules are refused before a run starts; the shipped presets load.

use mlperf_run::rules::Division;
use mlperf_run::train::resnet::config::{Amp, ResnetRunConfig};
use std::path::PathBuf;

fn preset(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("configs/resnet")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn err(text: &str, division: Division) -> String {
    format!("{:#}", ResnetRunConfig::parse(text, division).unwrap_err())
}

#[test]
fn presets_load_in_their_divisions() {
    for (name, closed_ok) in [
        ("tiny_cpu.toml", true),
        ("closed_8xA100.toml", true),
        ("closed_8xH100.toml", true),
        ("tiny_cpu_open.toml", false),
        ("open_8xA100.toml", false),
    ] {
        let text = preset(name);
        ResnetRunConfig::parse(&text, Division::Open).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(
            ResnetRunConfig::parse(&text, Division::Closed).is_ok(),
            closed_ok,
            "{name}"
        );
    }
    let c = ResnetRunConfig::parse(&preset("closed_8xA100.toml"), Division::Closed).unwrap();
    assert_eq!(c.train.global_batch_size, 3264);
    assert_eq!(c.optimizer.base_lr, 10.5);
    assert_eq!(c.eval_epochs()[..3], [2, 6, 10]);
    // NVIDIA's v4.0 8xH100 recipe (config_DGXH100.sh of eos_ngc24.04_mxnet)
    let h = ResnetRunConfig::parse(&preset("closed_8xH100.toml"), Division::Closed).unwrap();
    assert_eq!(h.train.global_batch_size, 3200);
    assert_eq!(h.local_batch(8).unwrap(), 400);
    let o = &h.optimizer;
    assert_eq!(
        (o.base_lr, o.warmup_epochs, o.schedule_epochs),
        (11.0, 2.0, 37.0)
    );
    assert_eq!((o.weight_decay, o.momentum, o.end_lr), (5e-5, 0.9, 1e-4));
    assert_eq!(h.methods.label_smoothing, 0.1);
    assert_eq!(h.eval_epochs()[..3], [2, 6, 10]);
    // both closed presets run every closed-legal method and the GPU data path
    for c in [&c, &h] {
        let m = &c.methods;
        assert!(m.cuda_graph && m.fused_bn_relu && m.channels_last && m.amp == Amp::Fp16);
        assert_eq!(
            (c.data.decoder, c.data.augment),
            (
                mlperf_run::data::imagenet::Decoder::Nvjpeg,
                mlperf_run::data::imagenet::Augment::Gpu
            )
        );
    }
}

#[test]
fn data_augment_and_the_decoder_split_are_checked_with_the_key_named() {
    let text = preset("tiny_cpu.toml");
    let e = err(
        &text.replace(
            "[data]
",
            "[data]
augment = \"device\"
",
        ),
        Division::Open,
    );
    assert!(
        e.contains("device") && e.contains("gpu") && e.contains("cpu"),
        "{e}"
    );
    let e = err(
        &text.replace(
            "[data]
",
            "[data]
hw_decoder_load = 0.5
",
        ),
        Division::Closed,
    );
    assert!(
        e.contains("data.hw_decoder_load") && e.contains("nvjpeg"),
        "{e}"
    );
    let e = err(
        &text.replace(
            "[data]
",
            "[data]
decoder = \"nvjpeg\"
hw_decoder_load = 1.5
",
        ),
        Division::Open,
    );
    assert!(
        e.contains("data.hw_decoder_load") && e.contains("0..1"),
        "{e}"
    );
    // the hand-off's depth: a positive count within reason, the key named
    for bad in ["0", "17"] {
        let e = err(
            &text.replace(
                "[data]
",
                &format!(
                    "[data]
prefetch_batches = {bad}
"
                ),
            ),
            Division::Open,
        );
        assert!(
            e.contains("data.prefetch_batches") && e.contains("1..16"),
            "{e}"
        );
    }
    // nvJPEG decodes into device memory: without the crops resized there it is refused
    let e = err(
        &text.replace(
            "[data]
",
            "[data]
decoder = \"nvjpeg\"
",
        ),
        Division::Open,
    );
    assert!(
        e.contains("data.decoder") && e.contains("data.augment = \"gpu\""),
        "{e}"
    );
    let ok = text.replace(
        "[data]
",
        "[data]
decoder = \"nvjpeg\"
augment = \"gpu\"
hw_decoder_load = 0.8
",
    );
    ResnetRunConfig::parse(&ok, Division::Closed).unwrap();
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_and_the_choices() {
    let text = preset("tiny_cpu.toml");
    let e = err(
        &text.replace("name = \"lars\"", "name = \"adam\""),
        Division::Open,
    );
    assert!(
        e.contains("adam") && e.contains("lars") && e.contains("sgd"),
        "{e}"
    );
    let e = err(
        &text.replace("momentum = 0.9", "momentum = 0.9\nmomentun = 0.8"),
        Division::Open,
    );
    assert!(e.contains("momentun"), "{e}");
    let e = err(
        &text.replace(
            "submission_status = \"research\"",
            "submission_status = \"lab\"",
        ),
        Division::Open,
    );
    assert!(e.contains("onprem") && e.contains("research"), "{e}");
    let e = err(
        &text.replace("global_batch_size = 64", "global_batch_size = 0"),
        Division::Open,
    );
    assert!(e.contains("global_batch_size"), "{e}");
}

#[test]
fn closed_rule_breakers_are_refused() {
    let text = preset("tiny_cpu.toml");
    for (from, to, key) in [
        ("end_lr = 0.0001", "end_lr = 0.001", "end_lr"),
        ("poly_power = 2.0", "poly_power = 1.0", "poly_power"),
        (
            "weight_decay = 0.00005",
            "weight_decay = 0.00003",
            "weight_decay",
        ),
        (
            "lars_epsilon = 0.0",
            "lars_epsilon = 0.00001",
            "lars_epsilon",
        ),
        ("eval_period = 4", "eval_period = 2", "eval_period"),
        ("eval_offset = 0", "eval_offset = 4", "eval_offset"),
        ("decay = \"poly\"", "decay = \"cosine\"", "decay"),
        ("target = 0.80", "target = 0.5", "target"),
        (
            "label_smoothing = 0.1",
            "label_smoothing = 0.2",
            "label_smoothing",
        ),
        (
            "label_smoothing = 0.1",
            "label_smoothing = 0.1\nblurpool = true",
            "blurpool",
        ),
    ] {
        let changed = text.replace(from, to);
        assert_ne!(changed, text, "{from}");
        let e = err(&changed, Division::Closed);
        assert!(e.contains("closed") && e.contains(key), "{key}: {e}");
        // the same file is fine in the open division, except where it is invalid anywhere
        if key != "eval_offset" {
            ResnetRunConfig::parse(&changed, Division::Open)
                .unwrap_or_else(|e| panic!("{key}: {e:#}"));
        }
    }
    let sgd = text
        .replace("name = \"lars\"", "name = \"sgd\"")
        .replace("base_lr = 4.0", "base_lr = 0.2345");
    assert!(err(&sgd, Division::Closed).contains("multiple of 0.001"));
}

#[test]
fn hyperparameters_come_from_the_config() {
    let c = ResnetRunConfig::parse(&preset("closed_8xA100.toml"), Division::Closed).unwrap();
    let kv = c.hyperparameters(Division::Closed, 392, 1_281_167, 50_000, 8);
    let get = |k: &str| {
        kv.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k}"))
    };
    assert_eq!(get("opt_name"), "lars");
    assert_eq!(get("lars_opt_base_learning_rate"), 10.5);
    assert_eq!(get("lars_opt_weight_decay"), 5e-5);
    assert_eq!(get("lars_opt_learning_rate_warmup_epochs"), 2.0);
    assert_eq!(get("lars_opt_learning_rate_decay_steps"), 35 * 392);
    assert_eq!(get("gradient_accumulation_steps"), 1);
    // a closed log records its methods too (those with a log key): the closed-legal ones on, the
    // open-only ones off
    assert_eq!(get("method_fused_bn_relu"), true);
    assert_eq!(get("method_amp"), "fp16");
    assert_eq!(get("method_blurpool"), false);
    assert!(kv.iter().any(|(k, _)| *k == "amp_loss_scale_init"));
    assert!(
        kv.iter()
            .all(|(k, _)| *k != "opt_learning_rate_decay_schedule"),
        "the open-only decay schedule key stays out of closed logs"
    );
    let o = ResnetRunConfig::parse(&preset("open_8xA100.toml"), Division::Open).unwrap();
    let kv = o.hyperparameters(Division::Open, 625, 1_281_167, 50_000, 8);
    assert!(kv
        .iter()
        .any(|(k, v)| *k == "method_blurpool" && *v == true));
    assert!(kv
        .iter()
        .any(|(k, v)| *k == "method_fused_bn_relu" && *v == true));
    assert!(kv.iter().any(|(k, v)| *k == "model_bn_span" && *v == 256));
}

/// `methods.amp = "fp16"` works with both ResNet optimizers (each skips overflowing steps on
/// the device) in both divisions, and `methods.loss_scale` belongs to fp16: the errors say so
/// and what to do.
#[test]
fn fp16_takes_sgd_and_lars_and_loss_scale_needs_fp16() {
    // tiny_cpu.toml is LARS
    let lars = preset("tiny_cpu.toml");
    assert!(lars.contains("name = \"lars\""));
    let lars = lars.replace(
        "label_smoothing = 0.1",
        "label_smoothing = 0.1\namp = \"fp16\"",
    );
    for division in [Division::Closed, Division::Open] {
        let c = ResnetRunConfig::parse(&lars, division).unwrap();
        assert_eq!(c.methods.amp, Amp::Fp16);
    }
    let open = preset("tiny_cpu_open.toml");
    assert!(open.contains("amp = \"none\""));
    let fp16 = open.replace("amp = \"none\"", "amp = \"fp16\"");
    let c = ResnetRunConfig::parse(&fp16, Division::Open).unwrap();
    assert_eq!(c.methods.loss_scale, None);
    let tuned = fp16.replace(
        "amp = \"fp16\"",
        "amp = \"fp16\"\nloss_scale = { init_scale = 1024.0, growth_interval = 100 }",
    );
    let c = ResnetRunConfig::parse(&tuned, Division::Open).unwrap();
    let l = c.methods.loss_scale.unwrap();
    assert_eq!((l.init_scale, l.growth_interval), (1024.0, 100));
    let e = err(
        &tuned.replace("amp = \"fp16\"", "amp = \"bf16\""),
        Division::Open,
    );
    assert!(
        e.contains("methods.loss_scale") && e.contains("fp16"),
        "{e}"
    );
    let e = err(
        &tuned.replace("growth_interval = 100", "growth_interval = 0"),
        Division::Open,
    );
    assert!(e.contains("growth_interval"), "{e}");
    for bad in ["0.0", "-1024.0", "1000.0", "1e300", "0.5"] {
        let e = err(
            &tuned.replace("init_scale = 1024.0", &format!("init_scale = {bad}")),
            Division::Open,
        );
        assert!(
            e.contains("init_scale") && e.contains("power of two"),
            "{bad}: {e}"
        );
    }
    let e = err(
        &tuned.replace("growth_interval = 100", "growth_intervall = 100"),
        Division::Open,
    );
    assert!(e.contains("growth_intervall"), "{e}");
}

fn bert_err(text: &str) -> String {
    use mlperf_run::train::bert::BertRunConfig;
    format!(
        "{:#}",
        BertRunConfig::parse(text, Division::Open).unwrap_err()
    )
}

fn bert_preset() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/bert/tiny_cpu.toml");
    std::fs::read_to_string(p).unwrap()
}

/// Every number of `[system]` and `[optimizer]` is checked, finite and in its range, with the
/// key and the value named: a negative or NaN time limit used to panic when the run began
/// (exit 101); an infinite learning rate, NaN weight decay, beta1 = 1.5 or more warm-up steps
/// than steps used to start a run.
#[test]
fn out_of_range_numbers_name_the_key_and_the_value() {
    let text = preset("tiny_cpu.toml");
    for (from, to, words) in [
        (
            "time_limit_minutes = 3.0",
            "time_limit_minutes = -1.0",
            "system.time_limit_minutes must be a number of minutes above 0 (at most 525600), got -1",
        ),
        (
            "time_limit_minutes = 3.0",
            "time_limit_minutes = nan",
            "system.time_limit_minutes must be a number of minutes above 0 (at most 525600), got NaN",
        ),
        ("threads = 1", "threads = -2", "system.threads must be 0 or more"),
        (
            "noise = 60.0",
            "noise = -3.0",
            "data.synthetic.noise must be at least 0, got -3",
        ),
        // it printed the value's 301 digits
        (
            "noise = 60.0",
            "noise = -1e300",
            "data.synthetic.noise must be at least 0, got -1e300",
        ),
        ("base_lr = 4.0", "base_lr = inf", "optimizer.base_lr must be above 0, got inf"),
        ("end_lr = 0.0001", "end_lr = nan", "optimizer.end_lr must be at least 0, got NaN"),
        (
            "warmup_epochs = 1.0",
            "warmup_epochs = 30.0",
            "optimizer.schedule_epochs must be above optimizer.warmup_epochs (30), got 24",
        ),
        (
            "weight_decay = 0.00005",
            "weight_decay = -1.0",
            "optimizer.weight_decay must be at least 0, got -1",
        ),
        // an infinite half-life ran with an average that never moved (exit 1 at the epoch
        // limit); an update interval of 0 ran as 1 and was logged as 0
        (
            "label_smoothing = 0.1",
            "label_smoothing = 0.1\nema = { half_life_steps = inf }",
            "methods.ema.half_life_steps must be above 0, got inf",
        ),
        (
            "label_smoothing = 0.1",
            "label_smoothing = 0.1\nema = { half_life_steps = 10.0, update_interval = 0 }",
            "methods.ema.update_interval must be at least 1",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = err(&text.replace(from, to), Division::Open);
        assert!(e.contains(words), "{to}: {e}");
    }

    let text = bert_preset();
    for (from, to, words) in [
        (
            "time_limit_minutes = 8.0",
            "time_limit_minutes = -8.0",
            "system.time_limit_minutes must be",
        ),
        (
            "base_learning_rate = 0.02",
            "base_learning_rate = inf",
            "optimizer.base_learning_rate must be above 0, got inf",
        ),
        (
            "beta1 = 0.9",
            "beta1 = 1.5",
            "optimizer.beta1 must be in [0, 1), got 1.5",
        ),
        (
            "epsilon = 1e-6",
            "epsilon = 0.0",
            "optimizer.epsilon must be above 0, got 0",
        ),
        (
            "weight_decay = 0.01",
            "weight_decay = nan",
            "optimizer.weight_decay must be at least 0, got NaN",
        ),
        (
            "warmup_steps = 200",
            "warmup_steps = 5000",
            "optimizer.warmup_steps must be in 0..=optimizer.training_steps (4688), got 5000",
        ),
        (
            "max_grad_norm = 1.0",
            "max_grad_norm = -1.0",
            "optimizer.max_grad_norm must be above 0, got -1",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = bert_err(&text.replace(from, to));
        assert!(e.contains(words), "{to}: {e}");
    }
}

/// A number beyond fp32's range (`base_lr = 1e300`) passed the checks and reached libtorch as
/// an fp32 scalar: every run of a set started, wrote its log and ended aborted ("value cannot
/// be converted to type float without overflow", exit 1). Each is refused with the key named.
#[test]
fn numbers_beyond_fp32_name_the_key() {
    let text = preset("tiny_cpu.toml");
    for (from, to, key) in [
        ("base_lr = 4.0", "base_lr = 1e300", "optimizer.base_lr"),
        (
            "weight_decay = 0.00005",
            "weight_decay = 1e39",
            "optimizer.weight_decay",
        ),
        ("lars_eta = 0.001", "lars_eta = 1e300", "optimizer.lars_eta"),
    ] {
        assert!(text.contains(from), "{from}");
        let e = err(&text.replace(from, to), Division::Open);
        assert!(
            e.contains(key) && e.contains("fp32") && e.contains("got 1e"),
            "{to}: {e}"
        );
    }
    let text = bert_preset();
    for (from, to, key) in [
        (
            "base_learning_rate = 0.02",
            "base_learning_rate = 1e300",
            "optimizer.base_learning_rate",
        ),
        (
            "max_grad_norm = 1.0",
            "max_grad_norm = 1e300",
            "optimizer.max_grad_norm",
        ),
        (
            "weight_decay = 0.01",
            "weight_decay = 1e300",
            "optimizer.weight_decay",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = bert_err(&text.replace(from, to));
        assert!(
            e.contains(key) && e.contains("fp32") && e.contains("got 1e300"),
            "{to}: {e}"
        );
    }
}

/// A synthetic set of 10^11 training images (`train_per_class = 10000000000`) passed the
/// checks: its first epoch's shuffled order (8 bytes an image) failed to allocate and the
/// process aborted (exit 134, a backtrace, the run's log cut short). A set beyond 2^27 images
/// (about 100 ImageNets, made in memory for tests) is refused naming the keys.
#[test]
fn synthetic_sets_beyond_2_pow_27_images_are_refused() {
    let text = preset("tiny_cpu.toml");
    for (from, to) in [
        ("train_per_class = 128", "train_per_class = 10000000000"),
        (
            "eval_per_class = 50",
            "eval_per_class = 9223372036854775807",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = err(&text.replace(from, to), Division::Open);
        assert!(
            e.contains("data.synthetic.") && e.contains("at most 134217728"),
            "{to}: {e}"
        );
    }
}

/// `system.threads = 100000` was handed to libtorch, which started that many threads: the
/// process grew by gigabytes and ignored SIGTERM for minutes. A count beyond any machine's
/// CPUs is refused with the key named.
#[test]
fn absurd_thread_counts_are_refused() {
    let text = preset("tiny_cpu.toml");
    let e = err(
        &text.replace("threads = 1", "threads = 100000"),
        Division::Open,
    );
    assert!(
        e.contains("system.threads must be at most 1024") && e.contains("got 100000"),
        "{e}"
    );
    assert!(
        ResnetRunConfig::parse(&text.replace("threads = 1", "threads = 64"), Division::Open)
            .is_ok()
    );
}

/// `system.loss_check_steps = 0` ran as 1 without a word (the docs say: every this many
/// steps). It is refused with the key named, in both benchmarks' configs.
#[test]
fn a_loss_check_interval_of_zero_is_refused() {
    let with_zero = |t: String| t.replace("[system]", "[system]\nloss_check_steps = 0");
    let e = err(&with_zero(preset("tiny_cpu.toml")), Division::Open);
    assert!(
        e.contains("system.loss_check_steps must be at least 1"),
        "{e}"
    );
    let e = bert_err(&with_zero(bert_preset()));
    assert!(
        e.contains("system.loss_check_steps must be at least 1"),
        "{e}"
    );
}

/// A misspelt key or value gets the nearest allowed one; BERT's errors (found after the
/// legacy keys are migrated, so toml gives no position) get the key's line; an empty file
/// says so and names a preset.
#[test]
fn typos_get_a_suggestion_and_a_line_and_empty_files_a_preset() {
    let text = preset("tiny_cpu.toml");
    let e = err(&text.replace("base_lr = ", "base_lrr = "), Division::Open);
    assert!(
        e.contains("unknown field `base_lrr`") && e.contains("did you mean `base_lr`?"),
        "{e}"
    );
    let e = err(&text.replace("[optimizer]", "[optimiser]"), Division::Open);
    assert!(e.contains("did you mean `optimizer`?"), "{e}");
    let e = err(&text.replace("\"lars\"", "\"larss\""), Division::Open);
    assert!(e.contains("did you mean `lars`?"), "{e}");
    // nothing near: the list of allowed keys, no guess
    let e = err(&text.replace("base_lr = ", "colour = "), Division::Open);
    assert!(
        e.contains("expected one of") && !e.contains("did you mean"),
        "{e}"
    );

    let text = bert_preset();
    let line = text
        .lines()
        .position(|l| l.starts_with("base_learning_rate"))
        .unwrap()
        + 1;
    let e = bert_err(&text.replace("base_learning_rate =", "base_learning_rte ="));
    assert!(
        e.contains(&format!("line {line}: unknown field `base_learning_rte`"))
            && e.contains("did you mean `base_learning_rate`?"),
        "{e}"
    );
    let line = text.lines().position(|l| l.starts_with("amp =")).unwrap() + 1;
    let e = bert_err(&text.replace("amp = \"none\"", "amp = \"bf15\""));
    assert!(
        e.contains(&format!("line {line}: unknown variant `bf15`"))
            && e.contains("did you mean `bf16`?"),
        "{e}"
    );

    for blank in ["", "\n  \n# only a comment\n"] {
        let e = err(blank, Division::Open);
        assert!(
            e.contains("the config is empty") && e.contains("configs/resnet/tiny_cpu.toml"),
            "{e}"
        );
        let e = bert_err(blank);
        assert!(
            e.contains("the config is empty") && e.contains("configs/bert/tiny_cpu.toml"),
            "{e}"
        );
    }
}

/// On the command line: a negative time limit is exit 2 naming the file and the key (it was a
/// panic, exit 101, as the run began).
#[test]
fn the_cli_refuses_a_bad_time_limit_before_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("neg.toml");
    let text =
        preset("tiny_cpu.toml").replace("time_limit_minutes = 3.0", "time_limit_minutes = -1.0");
    std::fs::write(&cfg, text).unwrap();
    let log = tmp.path().join("run.txt");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["resnet", "--division", "open", "--seed", "1", "--log"])
        .arg(&log)
        .arg("--config")
        .arg(&cfg)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("invalid config {}", cfg.display()))
            && stderr.contains("system.time_limit_minutes must be")
            && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(!log.exists(), "no run started");
}

/// A malformed launcher environment (MASTER_PORT=0, RANK not below WORLD_SIZE, a SLURM_JOB_ID
/// that is no number) was found inside the first run: it was logged as crashed, the set went
/// on as "aborted" runs and ended with exit 1, each run leaving a log in the results folder.
/// It is refused before the set starts (exit 2), naming the variable, and nothing is written.
#[test]
fn a_malformed_launcher_environment_is_refused_before_any_run() {
    let torchrun = [
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_RANK", "0"),
    ];
    let with = |k: &str, v: &str| -> Vec<(String, String)> {
        torchrun
            .iter()
            .map(|&(a, b)| (a.to_string(), if a == k { v } else { b }.to_string()))
            .collect()
    };
    let slurm: Vec<(String, String)> = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_JOB_NODELIST", "localhost"),
        ("SLURM_JOB_ID", "abc"),
        // a task srun started (the batch script's own process in a job of one task is a
        // process of its own, which reads no Slurm variable)
        ("SLURM_STEP_ID", "0"),
    ]
    .iter()
    .map(|&(a, b)| (a.to_string(), b.to_string()))
    .collect();
    for (vars, words) in [
        (
            with("MASTER_PORT", "0"),
            "MASTER_PORT=\"0\" is not a TCP port",
        ),
        (with("LOCAL_RANK", "5"), "LOCAL_RANK=5"),
        (slurm, "SLURM_JOB_ID=\"abc\""),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let results = tmp.path().join("results");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
        cmd.args(["resnet", "--division", "open", "--runs", "1", "--config"])
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"))
            .arg("--results")
            .arg(&results);
        for k in [
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "SLURM_PROCID",
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
        ] {
            cmd.env_remove(k);
        }
        let out = cmd.envs(vars).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{words}: {stderr}");
        assert!(
            stderr.contains(words) && !stderr.contains("crashed"),
            "{stderr}"
        );
        assert!(!results.exists(), "{words}: nothing is written: {stderr}");
    }
}

/// `methods.cuda_graph = true` with `--device cpu` was found by each run: every run of a set
/// wrote a log that ended aborted, and the set ended with exit 1. It is refused before the
/// first run (exit 2), naming the file and the key, and nothing is written.
#[test]
fn cuda_graphs_on_the_cpu_are_refused_before_any_run() {
    let text = preset("tiny_cpu.toml").replace(
        "label_smoothing = 0.1",
        "label_smoothing = 0.1\ncuda_graph = true",
    );
    assert_refused_before_any_run(&text, "methods.cuda_graph = true needs a CUDA device");
}

/// A cache clear command that fails (a page-cache drop without the rights) ended every run of a
/// set as aborted, each writing its log (5 aborted logs, exit 1). It is run once before the
/// first run, and a failure is refused naming the key, with nothing written.
#[test]
fn a_failing_cache_clear_command_is_refused_before_any_run() {
    let text = preset("tiny_cpu.toml");
    assert!(text.contains("cache_clear_command = \"\""));
    let text = text.replace(
        "cache_clear_command = \"\"",
        "cache_clear_command = \"false\"",
    );
    assert_refused_before_any_run(
        &text,
        "system.cache_clear_command (no run was started): the cache clear command `false` failed",
    );
}

/// `resnet --runs 2` on the CPU with the config `text` exits 2 naming the config file and
/// `want`, and writes no results.
fn assert_refused_before_any_run(text: &str, want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("refused.toml");
    std::fs::write(&cfg, text).unwrap();
    let results = tmp.path().join("results");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args([
            "resnet",
            "--division",
            "open",
            "--runs",
            "2",
            "--device",
            "cpu",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--results")
        .arg(&results)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("invalid config {}", cfg.display())) && stderr.contains(want),
        "{stderr}"
    );
    assert!(!results.exists(), "nothing is written: {stderr}");
}

/// BERT's config is read into a table first (for its legacy keys), so toml gives no position:
/// a value of the wrong type or a missing key named no line (an unknown key did). Each names
/// the line of its key (or of its table's header), and `train.max_samples = 0`, which used to
/// start runs that ended aborted at once ("epoch limit reached"), is refused.
#[test]
fn bert_type_errors_and_missing_keys_name_the_line() {
    let text = bert_preset();
    let line_of = |t: &str, start: &str| t.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    let typed = text.replace("global_batch_size = 64", "global_batch_size = \"64\"");
    assert_ne!(
        typed, text,
        "tiny_cpu.toml changed: update this test's edit"
    );
    let e = bert_err(&typed);
    assert!(
        e.contains(&format!(
            "line {}: invalid type: string \"64\", expected u64",
            line_of(&typed, "global_batch_size")
        )) && e.contains("train.global_batch_size"),
        "{e}"
    );
    let missing = text.replace("target = 0.720\n", "");
    assert_ne!(missing, text);
    let e = bert_err(&missing);
    assert!(
        e.contains(&format!(
            "line {}: missing field `target`",
            line_of(&missing, "[train]")
        )),
        "{e}"
    );
    let e = bert_err(&text.replace("max_samples = 300032", "max_samples = 0"));
    assert!(e.contains("train.max_samples must be at least 1"), "{e}");
}

/// A synthetic-memory set whose sizes cannot feed a step or an eval is known from the config:
/// it used to start every run of a set, each ending aborted ("the training set (0 images) is
/// smaller than ...", "the evaluation set is empty"), five logs in the results folder and exit
/// 1. It is a config error now (exit 2, the keys named, nothing written).
#[test]
fn synthetic_sets_too_small_for_a_batch_are_refused_before_any_run() {
    let text = preset("tiny_cpu.toml");
    for (from, to, words) in [
        (
            "train_per_class = 128",
            "train_per_class = 0",
            "data.synthetic.train_per_class and data.synthetic.eval_per_class must be at least 1",
        ),
        (
            "eval_per_class = 50",
            "eval_per_class = 0",
            "data.synthetic.train_per_class and data.synthetic.eval_per_class must be at least 1",
        ),
        (
            "train_per_class = 128",
            "train_per_class = 6",
            "(model.classes 10 x data.synthetic.train_per_class 6 = 60 images) is smaller than \
             train.global_batch_size (64): raise data.synthetic.train_per_class to at least 7",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = err(&text.replace(from, to), Division::Open);
        assert!(e.contains(words), "{to}: {e}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("empty_set.toml");
    std::fs::write(
        &cfg,
        text.replace("train_per_class = 128", "train_per_class = 0"),
    )
    .unwrap();
    let results = tmp.path().join("results");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["resnet", "--division", "open", "--results"])
        .arg(&results)
        .arg("--config")
        .arg(&cfg)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("invalid config {}", cfg.display()))
            && stderr.contains("data.synthetic.train_per_class"),
        "{stderr}"
    );
    assert!(!results.exists(), "no run set started: {stderr}");
}

/// An ImageFolder --data set with fewer training images than train.global_batch_size, or with
/// an empty val/, was found by each run's data load: a run set wrote an aborted log per run and
/// exited 1. Now it is refused before the first run (exit 2), naming the folder, its count and
/// the key; the set's listing is made once, before the runs.
#[test]
fn image_folders_too_small_for_a_batch_are_refused_before_any_run() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_mlperf-run");
    // 10 classes x 5 training images (and 1 val image each): 50 < the preset's batch of 64
    let synth = |out: &std::path::Path| {
        let o = std::process::Command::new(bin)
            .args([
                "data",
                "synth-imagenet",
                "--classes",
                "10",
                "--per-class",
                "5",
            ])
            .args([
                "--val-per-class",
                "1",
                "--min-size",
                "40",
                "--max-size",
                "48",
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    let small = tmp.path().join("small");
    synth(&small);
    // the same with an empty val/
    let no_val = tmp.path().join("no_val");
    synth(&no_val);
    std::fs::remove_dir_all(no_val.join("val")).unwrap();
    std::fs::create_dir(no_val.join("val")).unwrap();
    let config =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu_jpeg.toml");
    for (data, words) in [
        (
            &small,
            format!(
                "--data: {} holds 50 training images, fewer than train.global_batch_size (64), \
                 the images of one training step: lower train.global_batch_size in the config \
                 to at most 50",
                small.join("train").display()
            ),
        ),
        // the flag, the folder (once) and what to put there
        (
            &no_val,
            format!(
                "--data: image folder {} has no class subdirectories: put its images in it as \
                 <class>/<image>.JPEG, one folder per class (train/ and val/ with the same \
                 classes)",
                no_val.join("val").display()
            ),
        ),
    ] {
        let results = tmp.path().join("results");
        let out = std::process::Command::new(bin)
            .args(["resnet", "--division", "open", "--runs", "2", "--results"])
            .arg(&results)
            .arg("--config")
            .arg(&config)
            .arg("--data")
            .arg(data)
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&words), "want `{words}` in {stderr}");
        assert!(!results.exists(), "no run set started: {stderr}");
    }
    // val/ listed with no image (the listing refuses it first; the check says it too)
    let cfg = ResnetRunConfig::parse(&preset("tiny_cpu_jpeg.toml"), Division::Open).unwrap();
    let e = format!(
        "{:#}",
        cfg.check_folder_sizes(std::path::Path::new("/d"), 64, 0)
            .unwrap_err()
    );
    assert!(e.contains("/d/val holds no images"), "{e}");
    assert!(cfg
        .check_folder_sizes(std::path::Path::new("/d"), 64, 1)
        .is_ok());
}

/// A binary --config said std's bare "stream did not contain valid UTF-8", a folder "Is a
/// directory (os error 21)"; both name the file and what to give, with or without a recipe. A
/// missing one is named once ("cannot read config X: X does not exist" named it twice).
#[test]
fn a_binary_or_folder_config_is_named_with_what_to_give() {
    let tmp = tempfile::tempdir().unwrap();
    let binary = tmp.path().join("model.bin");
    std::fs::write(&binary, b"\x89PNG\r\n\x1a\n\x00\x00").unwrap();
    let folder = tmp.path().join("configs");
    std::fs::create_dir(&folder).unwrap();
    let missing = tmp.path().join("missing.toml");
    for (config, words) in [
        (
            &binary,
            "is not UTF-8 text (byte 0 is not; is it a binary file?): give a run config (TOML)",
        ),
        (&folder, "is a folder: give a run config (TOML)"),
        (&missing, "does not exist"),
    ] {
        for recipe in [None, Some("fast")] {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
            cmd.args(["resnet", "--division", "open", "--seed", "1", "--config"])
                .arg(config)
                .arg("--log")
                .arg(tmp.path().join("run.txt"));
            if let Some(r) = recipe {
                cmd.args(["--recipe", r]);
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{recipe:?}: {stderr}");
            assert!(
                stderr.contains(&format!("--config: {} {words}", config.display())),
                "{recipe:?}: {stderr}"
            );
            assert_eq!(
                stderr.matches(&config.display().to_string()).count(),
                1,
                "{recipe:?}: the path once: {stderr}"
            );
        }
    }
}

/// A config asking for more memory than any machine has (a 100,000-pixel image side: 7.7e12
/// bytes for one batch of 64 images) allocated until the kernel's OOM killer ended the process
/// (exit 137, no message; under a memory limit an abort, 134), its log cut after run_start. On
/// a CPU run it is refused before the first run (exit 2), naming the keys, the estimate and
/// what this machine has; the estimate counts only what a run certainly holds, so the shipped
/// presets pass on any machine with a few GiB free.
#[test]
fn configs_that_cannot_fit_in_memory_are_refused_before_any_run() {
    use mlperf_run::train::config::check_memory;
    let text = preset("tiny_cpu.toml");
    let big = text.replace("train_image_size = 32", "train_image_size = 100000");
    let cfg = ResnetRunConfig::parse(&big, Division::Open).unwrap();
    let floor = cfg.memory_floor(1);
    assert!(
        floor.iter().map(|p| p.bytes).sum::<f64>() > 7e12,
        "{floor:?}"
    );
    let e = format!("{:#}", check_memory(&floor, 64 << 30).unwrap_err());
    for words in [
        "data.train_image_size 100000",
        "train.global_batch_size 64",
        "one micro-batch of 64 images of 3 x 100000 x 100000 as fp32",
        "64.0 GiB this machine has available",
    ] {
        assert!(e.contains(words), "want `{words}` in {e}");
    }
    // the batch is split over the processes and micro-batches
    let split = cfg.memory_floor(8);
    assert!(
        split[1].what.contains("one micro-batch of 8 images"),
        "{split:?}"
    );
    // a million-wide model: its parameters alone
    let wide = text.replace("width = 8", "width = 1000000");
    let cfg = ResnetRunConfig::parse(&wide, Division::Open).unwrap();
    let e = format!(
        "{:#}",
        check_memory(&cfg.memory_floor(1), 64 << 30).unwrap_err()
    );
    assert!(e.contains("model.width 1000000"), "{e}");
    // every shipped preset fits in 8 GiB on one process (the 8-GPU ones: per GPU)
    for name in [
        "tiny_cpu.toml",
        "tiny_cpu_jpeg.toml",
        "bench_smoke_cpu.toml",
    ] {
        let cfg = ResnetRunConfig::parse(&preset(name), Division::Open).unwrap();
        check_memory(&cfg.memory_floor(1), 8 << 30).unwrap();
    }
    for name in [
        "closed_8xA100.toml",
        "closed_8xH100.toml",
        "open_8xA100.toml",
    ] {
        let cfg = ResnetRunConfig::parse(&preset(name), Division::Open).unwrap();
        check_memory(&cfg.memory_floor(8), 8 << 30).unwrap();
    }
    // the command: exit 2 before any run, the keys named, nothing written
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("big.toml");
    std::fs::write(&path, &big).unwrap();
    let results = tmp.path().join("results");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["resnet", "--division", "open", "--results"])
        .arg(&results)
        .arg("--config")
        .arg(&path)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("SLURM_PROCID")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("invalid config {}", path.display()))
            && stderr.contains("data.train_image_size 100000")
            && stderr.contains("MemAvailable"),
        "{stderr}"
    );
    assert!(!results.exists(), "no run set started: {stderr}");
}

/// The parameters counted from `[model]` (for the memory estimate and `plan --config`, without
/// building the model) are the built model's, with and without BlurPool.
#[test]
fn the_counted_parameters_are_the_built_models() {
    for name in ["tiny_cpu.toml", "closed_8xA100.toml", "open_8xA100.toml"] {
        let cfg = ResnetRunConfig::parse(&preset(name), Division::Open).unwrap();
        let built = mlperf_run::train::resnet::model_parameters(&cfg);
        assert_eq!(cfg.param_count(), built as f64, "{name}");
    }
}

/// A key of the other benchmark's config (resnet's `data.hw_decoder_load` or
/// `optimizer.lars_eta` in a bert config, bert's `data.max_sequences_per_row` or
/// `methods.packing` in a resnet one, a whole `[data.synthetic]` table) is refused as an
/// unknown key, as before, and now also named as that benchmark's, with the command that
/// trains it; a key neither takes gets no such note. Through each command that reads a
/// config: `resnet`, `bert` and `plan --config`.
#[test]
fn a_key_of_the_other_benchmark_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    mlperf_run::data::bert::synth::synth_bert(&mlperf_run::data::bert::synth::SynthBertArgs {
        sentences: 16,
        seq_len: 32,
        ..mlperf_run::data::bert::synth::SynthBertArgs::new(&data)
    })
    .unwrap();
    let with = |text: &str, header: &str, line: &str| {
        text.replacen(&format!("{header}\n"), &format!("{header}\n{line}\n"), 1)
    };
    let resnet = preset("tiny_cpu.toml");
    let bert = bert_preset();
    let to_resnet = "this is a bert config: remove it here, or train a resnet config (such as \
                     configs/resnet/tiny_cpu.toml) with `mlperf-run resnet`";
    let to_bert = "this is a resnet config: remove it here, or train a bert config (such as \
                   configs/bert/tiny_cpu.toml) with `mlperf-run bert`";
    let cases = [
        (
            "bert",
            with(&bert, "[data]", "hw_decoder_load = 0.5"),
            Some(("data.hw_decoder_load", "resnet", to_resnet)),
        ),
        (
            "bert",
            with(&bert, "[optimizer]", "lars_eta = 0.001"),
            Some(("optimizer.lars_eta", "resnet", to_resnet)),
        ),
        (
            "bert",
            format!("{bert}\n[data.synthetic]\nnoise = 1.0\n"),
            Some(("data.synthetic", "resnet", to_resnet)),
        ),
        (
            "resnet",
            with(&resnet, "[data]", "max_sequences_per_row = 3"),
            Some(("data.max_sequences_per_row", "bert", to_bert)),
        ),
        (
            "resnet",
            with(&resnet, "[methods]", "packing = true"),
            Some(("methods.packing", "bert", to_bert)),
        ),
        ("resnet", with(&resnet, "[optimizer]", "colour = 1"), None),
        ("bert", with(&bert, "[optimizer]", "colour = 1"), None),
    ];
    for (i, (bench, text, hint)) in cases.iter().enumerate() {
        let cfg = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&cfg, text).unwrap();
        let log = dir.path().join(format!("l{i}.txt"));
        let mut train = vec![*bench, "--division", "open", "--seed", "1", "--log"];
        train.extend([log.to_str().unwrap(), "--config", cfg.to_str().unwrap()]);
        if *bench == "bert" {
            train.extend(["--data", data.to_str().unwrap()]);
        }
        let out = dir.path().join(format!("plan{i}"));
        let plan = [
            "plan",
            bench,
            "--config",
            cfg.to_str().unwrap(),
            "--from-log",
            log.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        for args in [&train[..], &plan[..]] {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
                .args(args)
                .env_remove("RANK")
                .env_remove("WORLD_SIZE")
                .output()
                .unwrap();
            let e = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(e.contains("unknown field"), "{args:?}: {e}");
            match hint {
                Some((key, other, what)) => {
                    let want = format!("`{key}` is a {other} key, and {what}");
                    assert!(e.contains(&want), "{args:?}: want `{want}` in {e}");
                }
                None => assert!(!e.contains(" key, and this is a "), "{args:?}: {e}"),
            }
            assert!(!log.exists() && !out.exists(), "{args:?}: nothing ran");
        }
    }
}
