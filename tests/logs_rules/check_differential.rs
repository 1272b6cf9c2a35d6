//! Differential test: our verdict equals the official checker's on every file: the real
//! published logs at their own ruleset, logs written by our emitter, and mutated copies of
//! both. The official checker runs through compliance/official_batch.py (one Python process
//! per ruleset); a sample is cross-checked against the real command line tool.

use crate::common;

use crate::common::emitter_logs::{write_bert, write_resnet};
use mlperf_run::mllog::parse_file;
use mlperf_run::rules::{check_log, check_set, CheckOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::official::{seed_errors as official_seed_errors, verdicts as official_verdicts};

// ---------- mutations ----------

/// Split a line into (text before the JSON, the JSON event) when it is an MLLOG line.
fn split_event(line: &str) -> Option<(&str, serde_json::Map<String, Value>)> {
    let at = line.rfind(":::MLLOG ")? + ":::MLLOG ".len();
    match serde_json::from_str(&line[at..]) {
        Ok(Value::Object(m)) => Some((&line[..at], m)),
        _ => None,
    }
}

fn key_of(line: &str) -> Option<String> {
    split_event(line).and_then(|(_, m)| m.get("key").and_then(Value::as_str).map(String::from))
}

/// Rewrite every line of `key` (or only the first with `first_only`) with `f`.
fn edit(
    text: &str,
    key: &str,
    first_only: bool,
    f: impl Fn(&mut serde_json::Map<String, Value>),
) -> String {
    let mut done = false;
    let mut out = Vec::new();
    for line in text.lines() {
        match split_event(line) {
            Some((prefix, mut m))
                if m.get("key").and_then(Value::as_str) == Some(key) && !(first_only && done) =>
            {
                f(&mut m);
                done = true;
                out.push(format!("{prefix}{}", serde_json::to_string(&m).unwrap()));
            }
            _ => out.push(line.to_string()),
        }
    }
    out.join("\n") + "\n"
}

fn drop_key(text: &str, key: &str) -> String {
    text.lines()
        .filter(|l| key_of(l).as_deref() != Some(key))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn duplicate(text: &str, key: &str, new_value: Option<Value>) -> String {
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if key_of(line).as_deref() == Some(key) {
            let dup = match &new_value {
                Some(v) => edit(line, key, false, |m| {
                    m.insert("value".into(), v.clone());
                }),
                None => format!("{line}\n"),
            };
            out.push_str(&dup);
        }
    }
    out
}

fn time_of(text: &str, key: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let (_, m) = split_event(l)?;
        (m.get("key")?.as_str()? == key)
            .then(|| m.get("time_ms")?.as_i64())
            .flatten()
    })
}

fn shift_init_stop(text: &str, minutes: i64) -> String {
    let Some(start) = time_of(text, "init_start") else {
        return text.to_string();
    };
    edit(text, "init_stop", false, |m| {
        m.insert("time_ms".into(), Value::from(start + minutes * 60_000));
    })
}

fn swap_lines_of(text: &str, a: &str, b: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    let (Some(i), Some(j)) = (
        lines.iter().position(|l| key_of(l).as_deref() == Some(a)),
        lines.iter().position(|l| key_of(l).as_deref() == Some(b)),
    ) else {
        return text.to_string();
    };
    lines.swap(i, j);
    lines.join("\n") + "\n"
}

fn set_value(text: &str, key: &str, v: Value) -> String {
    edit(text, key, false, |m| {
        m.insert("value".into(), v.clone());
    })
}

/// Mutated copies of one log: (name, content). Only mutations that apply to the log.
fn mutations(text: &str) -> Vec<(String, String)> {
    let has = |k: &str| text.lines().any(|l| key_of(l).as_deref() == Some(k));
    let mut out: Vec<(String, String)> = Vec::new();
    let required = [
        "run_stop",
        "run_start",
        "init_stop",
        "init_start",
        "cache_clear",
        "submission_division",
        "submission_benchmark",
        "submission_org",
        "submission_status",
        "submission_platform",
        "train_samples",
        "eval_samples",
        "eval_accuracy",
        "global_batch_size",
        "gradient_accumulation_steps",
        "opt_name",
        "lars_epsilon",
        "lars_opt_weight_decay",
        "sgd_opt_momentum",
        "opt_lamb_beta_1",
        "opt_lamb_epsilon",
        "block_start",
        "block_stop",
        "eval_start",
        "epoch_start",
        "weights_initialization",
    ];
    for key in required.iter().filter(|k| has(k)) {
        out.push((format!("drop-{key}"), drop_key(text, key)));
    }
    if has("weights_initialization") {
        let first_tensor = text
            .lines()
            .position(|l| key_of(l).as_deref() == Some("weights_initialization"))
            .unwrap();
        let dropped: String = text
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != first_tensor)
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        out.push(("drop-one-tensor".into(), dropped));
    }
    let values: &[(&str, Value)] = &[
        ("submission_division", Value::from("closed-ish")),
        ("submission_status", Value::from("lab")),
        ("submission_org", Value::from("")),
        // Not a benchmark of the round (a benchmark of the round that mlperf-run does not
        // check, e.g. "ssd", is out of scope: see compliance/README.md).
        ("submission_benchmark", Value::from("resnet50")),
        ("global_batch_size", Value::from(0)),
        ("global_batch_size", Value::from("3264")),
        ("gradient_accumulation_steps", Value::from(0)),
        ("opt_name", Value::from("adam")),
        ("lars_opt_end_learning_rate", Value::from(0.001)),
        ("lars_opt_weight_decay", Value::from(0.0003)),
        ("lars_epsilon", Value::from(false)),
        ("sgd_opt_base_learning_rate", Value::from(2.0485)),
        ("eval_accuracy", Value::from(0.5)),
        ("eval_accuracy", Value::from(0.74)),
        ("eval_accuracy", Value::from(1.0)),
        ("eval_accuracy", Value::from("0.76")),
        ("train_samples", Value::from("")),
    ];
    for (i, (key, v)) in values.iter().enumerate().filter(|(_, (k, _))| has(k)) {
        out.push((format!("value{i}-{key}"), set_value(text, key, v.clone())));
    }
    for division in ["open", "closed"] {
        if has("submission_division") {
            out.push((
                format!("division-{division}"),
                set_value(text, "submission_division", Value::from(division)),
            ));
        }
    }
    if has("run_stop") {
        out.push((
            "run_stop-no-status".into(),
            edit(text, "run_stop", false, |m| {
                m.insert(
                    "metadata".into(),
                    serde_json::json!({"file": "x.py", "lineno": 1}),
                );
            }),
        ));
        out.push((
            "run_stop-aborted".into(),
            edit(text, "run_stop", false, |m| {
                m["metadata"]["status"] = Value::from("aborted");
            }),
        ));
        out.push((
            "run_stop-twice-same".into(),
            duplicate(text, "run_stop", None),
        ));
        out.push((
            "run_stop-no-value".into(),
            edit(text, "run_stop", false, |m| {
                m.remove("value");
            }),
        ));
    }
    if has("global_batch_size") {
        out.push((
            "gbs-twice-different".into(),
            duplicate(text, "global_batch_size", Some(Value::from(1))),
        ));
    }
    if has("eval_accuracy") {
        out.push((
            "eval_accuracy-no-epoch".into(),
            edit(text, "eval_accuracy", true, |m| {
                m.insert(
                    "metadata".into(),
                    serde_json::json!({"file": "x.py", "lineno": 1}),
                );
            }),
        ));
    }
    if has("block_start") {
        out.push((
            "block-epoch_count-0".into(),
            edit(text, "block_start", true, |m| {
                m["metadata"]["epoch_count"] = Value::from(0);
            }),
        ));
    }
    for minutes in [29, 31, 239, 241] {
        if has("init_stop") && has("init_start") {
            out.push((format!("init-{minutes}min"), shift_init_stop(text, minutes)));
        }
    }
    out.push((
        "run_start-before-init_stop".into(),
        swap_lines_of(text, "run_start", "init_stop"),
    ));
    out.push((
        "division-after-init_stop".into(),
        swap_lines_of(text, "submission_division", "init_stop"),
    ));
    out.push((
        "run_stop-first".into(),
        swap_lines_of(text, "run_stop", "cache_clear"),
    ));
    let lines: Vec<&str> = text.lines().collect();
    let mid = lines.len() / 2;
    let mut broken: Vec<String> = lines.iter().map(|l| format!("{l}\n")).collect();
    broken.insert(
        mid,
        ":::MLLOG {\"namespace\": \"\", \"time_ms\": 12\n".to_string(),
    );
    out.push(("broken-json-line".into(), broken.concat()));
    let cut = text.len() * 2 / 3;
    let cut = (0..=cut).rev().find(|&i| text.is_char_boundary(i)).unwrap();
    out.push(("truncated".into(), text[..cut].to_string()));
    out
}

fn write(path: &Path, content: &[u8]) -> PathBuf {
    std::fs::write(path, content).unwrap();
    path.to_path_buf()
}

#[test]
fn our_verdicts_equal_the_official_checker() {
    let Some(python) = common::oracle("our_verdicts_equal_the_official_checker") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // (file, ruleset) cases
    let mut cases: Vec<(PathBuf, String)> = Vec::new();
    let mut bases: Vec<(String, PathBuf, Vec<String>)> = Vec::new();

    if let Some(fixtures) = common::fixtures("our_verdicts_equal_the_official_checker") {
        let mut real = Vec::new();
        for round in ["v2.0", "v2.1"] {
            let ruleset = if round == "v2.0" { "2.0.0" } else { "2.1.0" };
            let pattern_root = fixtures.join(round);
            let mut stack = vec![pattern_root];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("result_")
                    {
                        real.push((p, ruleset.to_string()));
                    }
                }
            }
        }
        real.sort();
        assert_eq!(real.len(), 25, "expected the 25 published result files");
        for (i, (p, r)) in real.iter().enumerate() {
            // Mutate one closed ResNet, one open ResNet and one open BERT log.
            let s = p.to_string_lossy();
            if s.ends_with("result_0.txt") && !s.contains("baseline") {
                bases.push((format!("real{i}"), p.clone(), vec![r.clone()]));
            }
        }
        cases.extend(real);
    }

    // Logs written by our emitter, checked at the pinned and older rulesets.
    // 4.1.0 lists resnet but has no ResNet rule files: both checkers fail a ResNet log there.
    let resnet_rulesets: Vec<String> = ["2.0.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0"]
        .map(String::from)
        .to_vec();
    let bert_rulesets: Vec<String> = ["2.0.0", "2.1.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0"]
        .map(String::from)
        .to_vec();
    for division in ["closed", "open"] {
        let p = dir.path().join(format!("emit_resnet_{division}.txt"));
        write_resnet(&p, division, 7);
        for r in &resnet_rulesets {
            cases.push((p.clone(), r.clone()));
        }
        bases.push((format!("emit_resnet_{division}"), p, vec!["4.0.0".into()]));
        let p = dir.path().join(format!("emit_bert_{division}.txt"));
        write_bert(&p, division, 7);
        for r in &bert_rulesets {
            cases.push((p.clone(), r.clone()));
        }
        // 4.1.0 differs from 4.0.0 (no submission_status) and 5.0.0 (org and platform kept):
        // every mutation is judged at both of BERT's last rounds.
        bases.push((
            format!("emit_bert_{division}"),
            p,
            vec!["4.1.0".into(), "5.0.0".into()],
        ));
    }

    // Mutated copies.
    for (name, path, rulesets) in &bases {
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        for (m, content) in mutations(&text) {
            let p = write(
                &dir.path().join(format!("{name}__{m}.txt")),
                content.as_bytes(),
            );
            for r in rulesets {
                cases.push((p.clone(), r.clone()));
            }
        }
    }
    // Inputs that are not logs at all.
    let junk = [
        ("empty.txt", b"".to_vec()),
        (
            "binary.bin",
            (0u8..=255).cycle().take(4096).collect::<Vec<u8>>(),
        ),
        ("no_mllog.txt", b"hello\nworld\n".to_vec()),
        ("only_broken.txt", b":::MLLOG {not json}\n".to_vec()),
    ];
    for (name, bytes) in junk {
        let p = write(&dir.path().join(name), &bytes);
        cases.push((p, "4.0.0".into()));
    }

    // Official verdicts: one Python process per ruleset.
    let mut by_ruleset: HashMap<String, Vec<PathBuf>> = HashMap::new();
    for (p, r) in &cases {
        by_ruleset.entry(r.clone()).or_default().push(p.clone());
    }
    let mut official: HashMap<(PathBuf, String), bool> = HashMap::new();
    for (r, files) in &by_ruleset {
        for (p, ok) in official_verdicts(&python, r, files) {
            official.insert((p, r.clone()), ok);
        }
    }

    let mut mismatches = Vec::new();
    let (mut compliant, mut failing) = (0, 0);
    let (mut compliant_4_1, mut failing_4_1) = (0, 0);
    for (p, r) in &cases {
        let log = parse_file(p).unwrap();
        let ours = check_log(
            &log,
            &CheckOptions {
                ruleset: Some(r.clone()),
            },
        );
        let theirs = official[&(p.clone(), r.clone())];
        if ours.compliant() {
            compliant += 1;
        } else {
            failing += 1;
        }
        if r == "4.1.0" {
            if theirs {
                compliant_4_1 += 1;
            } else {
                failing_4_1 += 1;
            }
        }
        if ours.compliant() != theirs {
            mismatches.push(format!(
                "{} at {r}: ours {} official {}: {:?}",
                p.display(),
                ours.compliant(),
                theirs,
                ours.findings
            ));
        }
    }
    eprintln!(
        "differential: {} verdicts ({} files) agree on {}; {compliant} compliant, {failing} not",
        cases.len(),
        cases
            .iter()
            .map(|c| &c.0)
            .collect::<std::collections::HashSet<_>>()
            .len(),
        cases.len() - mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} verdicts differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        compliant >= 20 && failing >= 50,
        "the corpus must hold both kinds: {compliant} / {failing}"
    );
    assert!(
        compliant_4_1 >= 10 && failing_4_1 >= 20,
        "4.1.0 must be judged on both kinds: {compliant_4_1} / {failing_4_1}"
    );

    // The batch wrapper answers as the official command line tool does (sample).
    let sample: Vec<&(PathBuf, String)> = cases
        .iter()
        .filter(|(p, _)| {
            let n = p.to_string_lossy();
            n.ends_with("emit_resnet_closed.txt")
                || n.contains("run_stop-no-value")
                || n.ends_with("binary.bin")
        })
        .take(4)
        .collect();
    assert!(sample.len() >= 3);
    for (p, r) in sample {
        let log_out = dir.path().join("cc.log");
        let out = mlperf_run::official::run_module(
            "mlperf_logging.compliance_checker",
            &[
                "--usage",
                "training",
                "--ruleset",
                r,
                "--log_output",
                &log_out.to_string_lossy(),
                &p.to_string_lossy(),
            ],
        )
        .unwrap();
        let cli_ok = out.code == Some(0) && out.text().contains("SUCCESS");
        assert_eq!(
            cli_ok,
            official[&(p.clone(), r.clone())],
            "batch wrapper and CLI disagree on {}",
            p.display()
        );
    }
}

#[test]
fn seed_rule_equals_the_official_seed_checker() {
    let Some(python) = common::oracle("seed_rule_equals_the_official_seed_checker") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut unique = Vec::new();
    for (i, seed) in [11, 12, 13, 14, 15].iter().enumerate() {
        let p = dir.path().join(format!("result_{i}.txt"));
        write_resnet(&p, "closed", *seed);
        unique.push(p);
    }
    let dup_dir = dir.path().join("dup");
    std::fs::create_dir(&dup_dir).unwrap();
    let mut dup = Vec::new();
    for (i, p) in unique.iter().enumerate() {
        let q = dup_dir.join(format!("result_{i}.txt"));
        let text = std::fs::read_to_string(p).unwrap();
        let text = if i == 3 {
            set_value(&text, "seed", Value::from(11))
        } else {
            text
        };
        std::fs::write(&q, text).unwrap();
        dup.push(q);
    }
    let noseed_dir = dir.path().join("noseed");
    std::fs::create_dir(&noseed_dir).unwrap();
    let noseed: Vec<PathBuf> = unique
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let text = std::fs::read_to_string(p).unwrap();
            let text = if i == 0 {
                drop_key(&text, "seed")
            } else {
                text
            };
            write(&noseed_dir.join(format!("result_{i}.txt")), text.as_bytes())
        })
        .collect();
    let mut sets = vec![("unique", unique), ("duplicated", dup), ("missing", noseed)];
    if let Some(fixtures) = common::fixtures("seed_rule_equals_the_official_seed_checker") {
        let set = fixtures.join("v2.0/NVIDIA/results/dgxa100_ngc22.04_mxnet/resnet");
        let real: Vec<PathBuf> = (0..5)
            .map(|i| set.join(format!("result_{i}.txt")))
            .collect();
        let copied_dir = dir.path().join("nvidia_dup");
        std::fs::create_dir(&copied_dir).unwrap();
        let seed0 = parse_file(&real[0])
            .unwrap()
            .first("seed")
            .unwrap()
            .value
            .clone();
        let copied: Vec<PathBuf> = real
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let text = String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
                let text = if i == 4 {
                    set_value(&text, "seed", seed0.clone())
                } else {
                    text
                };
                write(&copied_dir.join(format!("result_{i}.txt")), text.as_bytes())
            })
            .collect();
        sets.push(("nvidia", real));
        sets.push(("nvidia_duplicated", copied));
    }
    for (name, files) in sets {
        let logs: Vec<_> = files.iter().map(|p| parse_file(p).unwrap()).collect();
        let ours: Vec<_> = check_set(&logs, "resnet", "closed")
            .into_iter()
            .filter(|(_, f)| f.rule == "seed")
            .collect();
        for ruleset in ["4.0.0", "4.1.0"] {
            let theirs = official_seed_errors(&python, ruleset, &files);
            assert_eq!(
                ours.is_empty(),
                theirs.is_empty(),
                "set {name} at {ruleset}: ours {ours:?} official {theirs:?}"
            );
            assert_eq!(
                ours.len(),
                theirs.len(),
                "set {name} at {ruleset}: one finding per official error: {ours:?} vs {theirs:?}"
            );
        }
    }
}
