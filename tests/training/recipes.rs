//! Recipes (`--recipe NAME`, configs/recipes/): every shipped recipe parses and applies to
//! every tiny preset of its benchmark (the merged config validates in the open division and
//! carries the recipe's values), `--recipe list` shows them, the closed division refuses them,
//! and a tiny open ResNet run with `--recipe fast` trains to its target with a log that logs
//! the recipe and passes the official compliance checker.
#![cfg(feature = "torch")]

use crate::common;

use mlperf_run::recipes;
use mlperf_run::rules::Division;
use mlperf_run::train::bert::BertRunConfig;
use mlperf_run::train::resnet::config::{DecayKind, OptName, ResnetRunConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// configs/<benchmark>/tiny_cpu*.toml
fn tiny_presets(benchmark: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("configs").join(benchmark))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tiny_cpu")
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no tiny presets for {benchmark}");
    out
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
}

/// `recipes::apply_to_config` over the preset at `config`, reading files as `resnet` does.
fn apply(benchmark: &str, spec: &str, config: &Path) -> anyhow::Result<(recipes::Recipe, String)> {
    let read = |p: &Path| mlperf_run::util::tree::read_text_file(p, "recipe (TOML)");
    let base = std::fs::read_to_string(config).unwrap();
    recipes::apply_to_config(benchmark, spec, &base, config, false, &read)
}

#[test]
fn every_resnet_recipe_applies_to_every_tiny_preset() {
    let shipped = recipes::shipped("resnet").unwrap();
    assert!(shipped.iter().any(|r| r.name == "fast"));
    for recipe in &shipped {
        for preset in tiny_presets("resnet") {
            let (_, text) = apply("resnet", &recipe.name, &preset)
                .unwrap_or_else(|e| panic!("{} on {}: {e:#}", recipe.name, preset.display()));
            let cfg = ResnetRunConfig::parse(&text, Division::Open)
                .unwrap_or_else(|e| panic!("{} on {}: {e:#}", recipe.name, preset.display()));
            let base = ResnetRunConfig::load(&preset, Division::Open).unwrap();
            if recipe.name == "fast" {
                let m = &cfg.methods;
                assert!(m.blurpool && m.channels_last && m.progressive_resizing.is_some());
                assert_eq!(m.label_smoothing, 0.08);
                assert!(
                    m.ema.is_some(),
                    "EMA on (the config's or the recipe's default)"
                );
                if let (Some(b), Some(c)) = (&base.methods.ema, &m.ema) {
                    assert_eq!(b.half_life_steps, c.half_life_steps, "config's EMA kept");
                }
                assert_eq!(cfg.optimizer.name, OptName::Sgd);
                assert_eq!(cfg.optimizer.decay, DecayKind::Cosine);
                // lr 0.256 per 256 samples of the config's batch size
                let expect = 0.256 * base.train.global_batch_size as f64 / 256.0;
                assert!((cfg.optimizer.base_lr - expect).abs() < 1e-12);
                // what depends on the run's scale stays the config's
                assert_eq!(cfg.train.max_epochs, base.train.max_epochs);
                assert_eq!(cfg.data.train_image_size, base.data.train_image_size);
                assert_eq!(cfg.methods.amp, base.methods.amp);
            }
        }
    }
}

#[test]
fn every_bert_recipe_applies_to_every_tiny_preset() {
    let shipped = recipes::shipped("bert").unwrap();
    assert!(shipped.iter().any(|r| r.name == "fast"));
    for recipe in &shipped {
        for preset in tiny_presets("bert") {
            let (_, text) = apply("bert", &recipe.name, &preset)
                .unwrap_or_else(|e| panic!("{} on {}: {e:#}", recipe.name, preset.display()));
            let cfg = BertRunConfig::parse(&text, Division::Open)
                .unwrap_or_else(|e| panic!("{} on {}: {e:#}", recipe.name, preset.display()));
            if recipe.name == "fast" {
                let m = &cfg.methods;
                assert!(m.packing && m.fused_attention && m.fused_epilogues && m.fused_qkv);
                assert!(!m.unpad && !m.balance_tokens);
            }
        }
    }
}

#[test]
fn recipe_list_and_refusals_on_the_command_line() {
    for bench in ["resnet", "bert"] {
        let out = bin().args([bench, "--recipe", "list"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{bench} --recipe list: {out:?}");
        assert!(text.lines().any(|l| l.starts_with("fast ")), "{text}");
    }
    let config = root().join("configs/resnet/tiny_cpu.toml");
    let out = bin()
        .args([
            "resnet",
            "--division",
            "closed",
            "--recipe",
            "fast",
            "--config",
        ])
        .arg(&config)
        .args(["--seed", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("closed division") && err.contains("--division open"),
        "{err}"
    );
    let out = bin()
        .args([
            "resnet",
            "--division",
            "open",
            "--recipe",
            "turbo",
            "--config",
        ])
        .arg(&config)
        .args(["--seed", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown resnet recipe 'turbo'") && err.contains("fast"),
        "{err}"
    );
    // A recipe naming a key the config does not know is refused, naming recipe and key.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "description = \"x\"\n[config.methods]\nmixup = true\n",
    )
    .unwrap();
    let (_, text) = apply("resnet", bad.to_str().unwrap(), &config).unwrap();
    let err = format!(
        "{:#}",
        ResnetRunConfig::parse(&text, Division::Open).unwrap_err()
    );
    assert!(err.contains("mixup"), "{err}");
}

/// `mlperf-run resnet --division open --config tiny_cpu_open.toml --recipe fast --seed S --log F`
/// trains to the preset's target; the log names the recipe and passes the official checker.
#[test]
fn tiny_run_with_the_fast_recipe_reaches_target_and_passes_the_official_checker() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("result_0.txt");
    let config = root().join("configs/resnet/tiny_cpu_open.toml");
    let t0 = std::time::Instant::now();
    let out = bin()
        .args([
            "resnet",
            "--division",
            "open",
            "--recipe",
            "fast",
            "--config",
        ])
        .arg(&config)
        .args(["--seed", "7", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}\n{:.1} s", t0.elapsed().as_secs_f64());
    assert!(out.status.success(), "run failed: {err}");
    assert!(err.contains("recipe fast:"), "{err}");
    let parsed = mlperf_run::mllog::parse_file(&log).unwrap();
    let value = |k: &str| parsed.first(k).map(|e| e.value.clone());
    assert_eq!(value("recipe"), Some(serde_json::json!("fast")));
    assert_eq!(
        value("method_label_smoothing"),
        Some(serde_json::json!(0.08))
    );
    assert_eq!(
        value("sgd_opt_base_learning_rate"),
        Some(serde_json::json!(0.064))
    );
    assert_eq!(
        value("opt_learning_rate_decay_schedule"),
        Some(serde_json::json!("cosine"))
    );
    assert_eq!(
        parsed.last("run_stop").unwrap().status(),
        Some("success"),
        "the run reaches its target"
    );
    let ours = mlperf_run::rules::check_log(&parsed, &Default::default());
    assert!(ours.compliant(), "{:?}", ours.findings);
    common::official::assert_compliant(
        "tiny_run_with_the_fast_recipe_reaches_target_and_passes_the_official_checker",
        Path::new(&log),
        "4.0.0",
    );
}

/// With --recipe, the config is parsed from the recipe's merge of it, which the recipe module
/// writes afresh: an error used to name the merged text's line (`line 31: widht = 3` for a key
/// on line 18 of the file). It names the line in --config, or says the key is the recipe's.
#[test]
fn recipe_errors_name_the_line_of_the_config_file_or_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/resnet/tiny_cpu.toml")).unwrap();
    let typo = text.replace("width = 8\n", "width = 8\nwidht = 3\n");
    assert_ne!(typo, text, "tiny_cpu.toml changed: update this test's edit");
    let line = typo.lines().position(|l| l.starts_with("widht")).unwrap() + 1;
    let config = dir.path().join("typo.toml");
    std::fs::write(&config, &typo).unwrap();
    let run = |config: &Path, recipe: &str| {
        let out = bin()
            .args([
                "resnet",
                "--division",
                "open",
                "--seed",
                "1",
                "--recipe",
                recipe,
            ])
            .arg("--config")
            .arg(config)
            .arg("--log")
            .arg(dir.path().join("run.txt"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            !dir.path().join("run.txt").exists(),
            "no run started: {err}"
        );
        err
    };
    let err = run(&config, "fast");
    assert!(
        err.contains(&format!(
            "invalid config {} with recipe fast: line {line}: unknown field `widht`",
            config.display()
        )),
        "{err}"
    );
    // the key comes from a recipe file: named as the recipe's, with no line of the config
    let recipe = dir.path().join("typo_recipe.toml");
    std::fs::write(
        &recipe,
        "description = \"d\"\n[config.optimizer]\ndecay = \"cosin\"\n",
    )
    .unwrap();
    let err = run(
        &root().join("configs/resnet/tiny_cpu.toml"),
        recipe.to_str().unwrap(),
    );
    assert!(
        err.contains("`optimizer.decay` as recipe typo_recipe sets it: unknown variant `cosin`")
            && err.contains("did you mean `cosine`?")
            && !err.contains("line "),
        "{err}"
    );
}

/// `--recipe FILE.toml` that is a binary file, a folder or missing said std's bare "stream did
/// not contain valid UTF-8" / "Is a directory (os error 21)": now the flag, the file once and
/// what to give, refused before any run (exit 2).
#[test]
fn a_binary_folder_or_missing_recipe_file_is_named_with_what_to_give() {
    let tmp = tempfile::tempdir().unwrap();
    let binary = tmp.path().join("weights.toml");
    std::fs::write(&binary, b"\x89PNG\r\n\x1a\n\x00\xff").unwrap();
    let folder = tmp.path().join("recipes.toml");
    std::fs::create_dir(&folder).unwrap();
    let missing = tmp.path().join("missing.toml");
    let config = root().join("configs/resnet/tiny_cpu_open.toml");
    for (recipe, words) in [
        (
            &binary,
            "is not UTF-8 text (byte 0 is not; is it a binary file?): give a recipe (TOML; \
             `--recipe list` shows the shipped ones)",
        ),
        (
            &folder,
            "is a folder: give a recipe (TOML; `--recipe list` shows the shipped ones)",
        ),
        (&missing, "does not exist"),
    ] {
        let log = tmp.path().join("run.txt");
        let out = bin()
            .args(["resnet", "--division", "open", "--seed", "1", "--config"])
            .arg(&config)
            .arg("--recipe")
            .arg(recipe)
            .arg("--log")
            .arg(&log)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("--recipe: {} {words}", recipe.display())),
            "{err}"
        );
        assert_eq!(
            err.matches(&recipe.display().to_string()).count(),
            1,
            "{err}"
        );
        assert!(!log.exists(), "no run started: {err}");
    }
}
