//! Unit tests per rule: a compliant log built line by line, then one rule broken at a time.

use super::*;
use crate::mllog::parse_str;

/// One MLLOG line.
fn line(time: i64, key: &str, value: &str, meta: &str) -> String {
    let sep = if meta.is_empty() { "" } else { ", " };
    format!(
        ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {time}, \"event_type\": \"POINT_IN_TIME\", \"key\": \"{key}\", \
         \"value\": {value}, \"metadata\": {{\"file\": \"t.py\", \"lineno\": 1{sep}{meta}}}}}"
    )
}

/// (key, value, metadata) of a compliant closed ResNet log at 4.0.0 (LARS).
fn resnet_closed() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("cache_clear", "true", ""),
        ("init_start", "null", ""),
        ("submission_benchmark", "\"resnet\"", ""),
        ("submission_org", "\"org\"", ""),
        ("submission_division", "\"closed\"", ""),
        ("submission_status", "\"onprem\"", ""),
        ("submission_platform", "\"box\"", ""),
        ("seed", "42", ""),
        ("global_batch_size", "3264", ""),
        ("gradient_accumulation_steps", "1", ""),
        ("train_samples", "1281167", ""),
        ("eval_samples", "50000", ""),
        ("opt_name", "\"lars\"", ""),
        ("lars_opt_base_learning_rate", "10.5", ""),
        ("lars_opt_end_learning_rate", "0.0001", ""),
        ("lars_opt_learning_rate_decay_poly_power", "2", ""),
        ("lars_opt_learning_rate_decay_steps", "1000", ""),
        ("lars_epsilon", "0.0", ""),
        ("lars_opt_learning_rate_warmup_epochs", "2", ""),
        ("lars_opt_momentum", "0.9", ""),
        ("lars_opt_weight_decay", "5e-05", ""),
        ("init_stop", "null", ""),
        ("run_start", "null", ""),
        (
            "block_start",
            "null",
            "\"first_epoch_num\": 0, \"epoch_count\": 4",
        ),
        ("block_stop", "null", "\"first_epoch_num\": 0"),
        ("eval_start", "null", "\"epoch_num\": 4"),
        ("eval_stop", "null", "\"epoch_num\": 4"),
        ("eval_accuracy", "0.76", "\"epoch_num\": 4"),
        ("run_stop", "null", "\"status\": \"success\""),
    ]
}

fn render(lines: &[(&str, &str, &str)]) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, (k, v, m))| line(1000 + i as i64, k, v, m) + "\n")
        .collect()
}

fn verdict(text: &str, ruleset: &str) -> Verdict {
    check_log(
        &parse_str(text),
        &CheckOptions {
            ruleset: Some(ruleset.into()),
        },
    )
}

fn without(key: &str) -> Vec<(&'static str, &'static str, &'static str)> {
    resnet_closed().into_iter().filter(|l| l.0 != key).collect()
}

fn with_value(key: &str, value: &'static str) -> Vec<(&'static str, &'static str, &'static str)> {
    resnet_closed()
        .into_iter()
        .map(|l| if l.0 == key { (l.0, value, l.2) } else { l })
        .collect()
}

fn assert_broken(v: &Verdict, rule: &str, key: &str) {
    assert!(
        v.findings
            .iter()
            .any(|f| f.rule == rule && f.key.as_deref() == Some(key)),
        "expected [{rule}] {key}, got {:?}",
        v.findings
    );
}

#[test]
fn compliant_closed_resnet_passes() {
    let v = verdict(&render(&resnet_closed()), "4.0.0");
    assert!(v.compliant(), "{:?}", v.findings);
    assert_eq!(v.benchmark.as_deref(), Some("resnet"));
    assert_eq!(v.division.as_deref(), Some("closed"));
}

#[test]
fn default_ruleset_comes_from_the_benchmark() {
    let v = check_log(
        &parse_str(&render(&resnet_closed())),
        &CheckOptions::default(),
    );
    assert_eq!(v.ruleset, "4.0.0");
}

#[test]
fn missing_required_keys() {
    for key in [
        "run_stop",
        "run_start",
        "init_stop",
        "submission_org",
        "train_samples",
        "gradient_accumulation_steps",
        "lars_epsilon",
        "global_batch_size",
    ] {
        assert_broken(
            &verdict(&render(&without(key)), "4.0.0"),
            "exactly-one",
            key,
        );
    }
    assert_broken(
        &verdict(&render(&without("cache_clear")), "4.0.0"),
        "at-least-one",
        "cache_clear",
    );
    assert_broken(
        &verdict(&render(&without("eval_accuracy")), "4.0.0"),
        "at-least-one",
        "eval_accuracy",
    );
}

#[test]
fn five_zero_drops_submission_meta_and_resnet() {
    // 5.0.0 no longer requires submission_org...
    let bert_only = verdict(&render(&without("submission_org")), "5.0.0");
    assert!(!bert_only
        .findings
        .iter()
        .any(|f| f.key.as_deref() == Some("submission_org")));
    // ...and has no ResNet.
    assert_broken(&bert_only, "value", "submission_benchmark");
}

#[test]
fn four_one_drops_submission_status_and_has_no_resnet_rules() {
    // 4.1.0 still requires submission_org, no longer submission_status...
    assert_broken(
        &verdict(&render(&without("submission_org")), "4.1.0"),
        "exactly-one",
        "submission_org",
    );
    let no_status = verdict(&render(&without("submission_status")), "4.1.0");
    assert!(!no_status
        .findings
        .iter()
        .any(|f| f.key.as_deref() == Some("submission_status")));
    // ...and lists resnet without shipping its rule file (the official checker errors out).
    let v = verdict(&render(&resnet_closed()), "4.1.0");
    assert!(
        v.findings.iter().any(|f| f.rule == "unsupported"
            && f.message.contains("closed_resnet")
            && f.message.contains("--ruleset 4.0.0")),
        "{:?}",
        v.findings
    );
}

#[test]
fn duplicates_with_same_value_only_warn() {
    let mut lines = resnet_closed();
    lines.push(("run_stop", "null", "\"status\": \"success\""));
    let v = verdict(&render(&lines), "4.0.0");
    assert!(v.compliant(), "{:?}", v.findings);
    assert_eq!(v.warnings.len(), 1);
    let mut lines = resnet_closed();
    lines.insert(10, ("global_batch_size", "1632", ""));
    assert_broken(
        &verdict(&render(&lines), "4.0.0"),
        "exactly-one",
        "global_batch_size",
    );
}

#[test]
fn value_rules() {
    assert_broken(
        &verdict(
            &render(&with_value("submission_division", "\"closed-ish\"")),
            "4.0.0",
        ),
        "value",
        "submission_division",
    );
    assert_broken(
        &verdict(
            &render(&with_value("submission_status", "\"lab\"")),
            "4.0.0",
        ),
        "value",
        "submission_status",
    );
    assert_broken(
        &verdict(&render(&with_value("submission_org", "\"\"")), "4.0.0"),
        "value",
        "submission_org",
    );
    assert_broken(
        &verdict(&render(&with_value("global_batch_size", "0")), "4.0.0"),
        "value",
        "global_batch_size",
    );
    assert_broken(
        &verdict(
            &render(&with_value("gradient_accumulation_steps", "\"1\"")),
            "4.0.0",
        ),
        "value",
        "gradient_accumulation_steps",
    );
    assert_broken(
        &verdict(
            &render(&with_value("lars_opt_end_learning_rate", "0.001")),
            "4.0.0",
        ),
        "value",
        "lars_opt_end_learning_rate",
    );
    assert_broken(
        &verdict(
            &render(&with_value("lars_opt_weight_decay", "0.0003")),
            "4.0.0",
        ),
        "value",
        "lars_opt_weight_decay",
    );
    assert_broken(
        &verdict(
            &render(&with_value("lars_opt_learning_rate_decay_poly_power", "3")),
            "4.0.0",
        ),
        "value",
        "lars_opt_learning_rate_decay_poly_power",
    );
    // Python semantics: 2.0 == 2 and False == 0.0.
    assert!(verdict(
        &render(&with_value(
            "lars_opt_learning_rate_decay_poly_power",
            "2.0"
        )),
        "4.0.0"
    )
    .compliant());
    assert!(verdict(&render(&with_value("lars_epsilon", "false")), "4.0.0").compliant());
}

#[test]
fn unknown_optimizer_is_rejected() {
    assert_broken(
        &verdict(&render(&with_value("opt_name", "\"adam\"")), "4.0.0"),
        "value",
        "opt_name",
    );
}

#[test]
fn sgd_rules() {
    let lars = resnet_closed();
    let mut lines: Vec<_> = lars
        .into_iter()
        .filter(|l| !l.0.starts_with("lars"))
        .collect();
    let at = lines.iter().position(|l| l.0 == "opt_name").unwrap();
    lines[at].1 = "\"sgd\"";
    let sgd = [
        ("sgd_opt_base_learning_rate", "2.048", ""),
        ("sgd_opt_end_learning_rate", "0.0001", ""),
        ("sgd_opt_learning_rate_decay_poly_power", "2", ""),
        ("sgd_opt_learning_rate_decay_steps", "100", ""),
        ("sgd_opt_weight_decay", "0.0008", ""),
        ("sgd_opt_momentum", "0.875", ""),
        ("model_bn_span", "256", ""),
        ("opt_learning_rate_warmup_epochs", "5", ""),
    ];
    for (i, l) in sgd.iter().enumerate() {
        lines.insert(at + 1 + i, *l);
    }
    assert!(verdict(&render(&lines), "4.0.0").compliant());
    let bad: Vec<_> = lines
        .iter()
        .map(|l| {
            if l.0 == "sgd_opt_base_learning_rate" {
                (l.0, "2.0485", l.2)
            } else {
                *l
            }
        })
        .collect();
    assert_broken(
        &verdict(&render(&bad), "4.0.0"),
        "value",
        "sgd_opt_base_learning_rate",
    );
    let missing: Vec<_> = lines
        .iter()
        .filter(|l| l.0 != "model_bn_span")
        .copied()
        .collect();
    assert_broken(
        &verdict(&render(&missing), "4.0.0"),
        "exactly-one",
        "model_bn_span",
    );
}

#[test]
fn order_rules() {
    let mut lines = resnet_closed();
    let start = lines.iter().position(|l| l.0 == "run_start").unwrap();
    let stop = lines.iter().position(|l| l.0 == "init_stop").unwrap();
    lines.swap(start, stop);
    let v = verdict(&render(&lines), "4.0.0");
    assert_broken(&v, "order", "run_start");
    assert_broken(&v, "order", "init_stop");
    // run_stop before run_start
    let mut lines = resnet_closed();
    let stop = lines.pop().unwrap();
    lines.insert(1, stop);
    assert_broken(&verdict(&render(&lines), "4.0.0"), "order", "run_stop");
}

#[test]
fn init_time_limit_depends_on_division() {
    let mut text = String::new();
    for (i, (k, v, m)) in resnet_closed().iter().enumerate() {
        let t = if *k == "init_stop" {
            1000 + 31 * 60_000
        } else {
            1000 + i as i64
        };
        text += &(line(t, k, v, m) + "\n");
    }
    let v = verdict(&text, "4.0.0");
    let f = v
        .findings
        .iter()
        .find(|f| f.rule == "init-time")
        .expect("init-time finding");
    assert_eq!(f.key.as_deref(), Some("init_stop"));
    assert!(f.line.is_some());
    // Open allows 240 minutes.
    let open = text.replace("\"closed\"", "\"open\"");
    assert!(!verdict(&open, "4.0.0")
        .findings
        .iter()
        .any(|f| f.rule == "init-time"));
}

#[test]
fn division_after_init_stop_leaves_no_init_time() {
    let mut lines = resnet_closed();
    let div = lines
        .iter()
        .position(|l| l.0 == "submission_division")
        .unwrap();
    let d = lines.remove(div);
    let stop = lines.iter().position(|l| l.0 == "init_stop").unwrap();
    lines.insert(stop + 1, d);
    assert_broken(&verdict(&render(&lines), "4.0.0"), "init-time", "init_stop");
}

#[test]
fn closed_target_and_open_target() {
    let low = with_value("eval_accuracy", "0.75");
    assert_broken(&verdict(&render(&low), "4.0.0"), "target", "eval_accuracy");
    let open: Vec<_> = low
        .iter()
        .map(|l| {
            if l.0 == "submission_division" {
                (l.0, "\"open\"", l.2)
            } else {
                *l
            }
        })
        .collect();
    assert!(verdict(&render(&open), "4.0.0").compliant());
    assert_broken(
        &verdict(&render(&with_value("eval_accuracy", "1.0")), "4.0.0"),
        "target",
        "eval_accuracy",
    );
    // A string accuracy crashes the official checker: non-compliant here.
    assert_broken(
        &verdict(&render(&with_value("eval_accuracy", "\"0.76\"")), "4.0.0"),
        "value",
        "eval_accuracy",
    );
}

#[test]
fn metadata_rules() {
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .map(|l| {
            if l.0 == "eval_accuracy" {
                (l.0, l.1, "")
            } else {
                l
            }
        })
        .collect();
    assert_broken(
        &verdict(&render(&lines), "4.0.0"),
        "metadata",
        "eval_accuracy",
    );
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .map(|l| if l.0 == "run_stop" { (l.0, l.1, "") } else { l })
        .collect();
    assert_broken(&verdict(&render(&lines), "4.0.0"), "metadata", "run_stop");
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .map(|l| {
            if l.0 == "block_start" {
                (l.0, l.1, "\"first_epoch_num\": 0, \"epoch_count\": 0")
            } else {
                l
            }
        })
        .collect();
    assert_broken(
        &verdict(&render(&lines), "4.0.0"),
        "metadata",
        "block_start",
    );
    // 4.0.0 accepts samples_count blocks; 2.0.0 does not.
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .map(|l| {
            if l.0 == "block_start" {
                (l.0, l.1, "\"samples_count\": 0")
            } else {
                l
            }
        })
        .collect();
    assert!(verdict(&render(&lines), "4.0.0").compliant());
    assert_broken(
        &verdict(&render(&lines), "3.0.0"),
        "metadata",
        "block_start",
    );
}

#[test]
fn blocks_or_epochs_are_required() {
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .filter(|l| !l.0.starts_with("block_"))
        .collect();
    let v = verdict(&render(&lines), "4.0.0");
    assert!(
        v.findings
            .iter()
            .any(|f| f.rule == "at-least-one"
                && f.message.contains("'block_start' or 'epoch_start'")),
        "{:?}",
        v.findings
    );
}

#[test]
fn weights_initialization_in_2_x_closed() {
    let v = verdict(&render(&resnet_closed()), "2.0.0");
    assert_broken(&v, "at-least-one", "weights_initialization");
    assert_broken(&v, "weights-init", "weights_initialization");
    assert!(verdict(&render(&resnet_closed()), "3.0.0").compliant());
}

#[test]
fn bad_input_gives_findings_not_panics() {
    let v = verdict("", "4.0.0");
    assert!(v.findings.iter().any(|f| f.rule == "empty"));
    let v = check_log(
        &parse_str("\u{0}\u{1}\u{ff}:::MLLOG {"),
        &CheckOptions::default(),
    );
    assert!(v
        .findings
        .iter()
        .any(|f| f.rule == "parse" && f.line == Some(1)));
    assert!(v
        .findings
        .iter()
        .any(|f| f.rule == "empty" && f.message.contains("binary")));
    let mut text = render(&resnet_closed());
    text.insert_str(0, ":::MLLOG {\"broken\n");
    let v = verdict(&text, "4.0.0");
    assert_eq!(v.findings.len(), 1, "{:?}", v.findings);
    assert_eq!(v.findings[0].line, Some(1));
    let v = verdict(&render(&resnet_closed()), "9.9.9");
    assert!(v.findings.iter().any(|f| f.rule == "ruleset"));
}

#[test]
fn other_benchmarks_are_unsupported() {
    let lines: Vec<_> = resnet_closed()
        .into_iter()
        .map(|l| {
            if l.0 == "submission_benchmark" {
                (l.0, "\"ssd\"", l.2)
            } else {
                l
            }
        })
        .collect();
    let v = verdict(&render(&lines), "4.0.0");
    assert!(
        v.findings
            .iter()
            .any(|f| f.rule == "unsupported" && f.message.contains("ssd")),
        "{:?}",
        v.findings
    );
}

#[test]
fn missing_value_says_the_official_checker_crashes() {
    let text = render(&resnet_closed()).replacen("\"value\": null, ", "", 1);
    let v = verdict(&text, "4.0.0");
    let f = v
        .findings
        .iter()
        .find(|f| f.rule == "parse")
        .expect("parse finding");
    assert!(
        f.message.contains("'value'") && f.message.contains("crashes"),
        "{}",
        f.message
    );
}
