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
