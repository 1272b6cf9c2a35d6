//! Property tests of the parser and the checker: arbitrary bytes and mutated log lines never
//! panic, and every finding points at a line that exists in the input.

use mlperf_run::mllog::parse_str;
use mlperf_run::rules::{check_log, check_set, CheckOptions};
use proptest::prelude::*;

const GOOD: &str = concat!(
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"INTERVAL_START\", \"key\": \"init_start\", \"value\": null, \"metadata\": {\"file\": \"a.py\", \"lineno\": 1}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 2, \"event_type\": \"POINT_IN_TIME\", \"key\": \"submission_division\", \"value\": \"closed\", \"metadata\": {\"file\": \"a.py\", \"lineno\": 2}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 3, \"event_type\": \"POINT_IN_TIME\", \"key\": \"submission_benchmark\", \"value\": \"resnet\", \"metadata\": {\"file\": \"a.py\", \"lineno\": 3}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 4, \"event_type\": \"INTERVAL_END\", \"key\": \"init_stop\", \"value\": null, \"metadata\": {\"file\": \"a.py\", \"lineno\": 4}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 5, \"event_type\": \"INTERVAL_START\", \"key\": \"run_start\", \"value\": null, \"metadata\": {\"file\": \"a.py\", \"lineno\": 5}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 6, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": 0.77, \"metadata\": {\"file\": \"a.py\", \"lineno\": 6, \"epoch_num\": 4}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 7, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", \"value\": 3, \"metadata\": {\"file\": \"a.py\", \"lineno\": 7}}\n",
    ":::MLLOG {\"namespace\": \"\", \"time_ms\": 8, \"event_type\": \"INTERVAL_END\", \"key\": \"run_stop\", \"value\": null, \"metadata\": {\"file\": \"a.py\", \"lineno\": 8, \"status\": \"success\"}}\n",
);

fn assert_findings_in_range(text: &str, ruleset: &str) -> Result<(), TestCaseError> {
    let log = parse_str(text);
    let lines = text.split('\n').count();
    prop_assert!(log.total_lines <= lines);
    for e in &log.events {
        prop_assert!(e.line >= 1 && e.line <= lines);
    }
    let v = check_log(
        &log,
        &CheckOptions {
            ruleset: Some(ruleset.into()),
        },
    );
    for f in v.findings.iter().chain(&v.warnings) {
        if let Some(l) = f.line {
            prop_assert!(
                l >= 1 && l <= lines,
                "finding {f:?} points past the {lines} lines"
            );
        }
        prop_assert!(!f.rule.is_empty() && !f.message.is_empty());
    }
    let _ = check_set(std::slice::from_ref(&log), "resnet", "closed");
    Ok(())
}

fn rulesets() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "5.0.0", "0.0.1",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), ruleset in rulesets()) {
        // Decoded as Latin-1, as the parser reads files.
        let text: String = bytes.iter().map(|&b| b as char).collect();
        assert_findings_in_range(&text, ruleset)?;
    }

    #[test]
    fn mllog_prefixed_garbage_never_panics(tail in "\\PC{0,120}", ruleset in rulesets()) {
        assert_findings_in_range(&format!(":::MLLOG {tail}\n{GOOD}"), ruleset)?;
    }

    #[test]
    fn mutated_lines_never_panic(
        edits in prop::collection::vec((0usize..2000, any::<u8>(), 0u8..3), 1..8),
        ruleset in rulesets(),
    ) {
        let mut bytes = GOOD.as_bytes().to_vec();
        for (pos, byte, op) in edits {
            let at = pos % (bytes.len() + 1);
            match op {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => { bytes.remove(at); }
                _ if at < bytes.len() => bytes[at] = byte,
                _ => {}
            }
        }
        let text: String = bytes.iter().map(|&b| b as char).collect();
        assert_findings_in_range(&text, ruleset)?;
    }

    #[test]
    fn json_values_of_any_type_never_panic(
        key in prop::sample::select(vec!["eval_accuracy", "global_batch_size", "submission_division", "opt_name",
            "lars_opt_weight_decay", "block_start", "run_stop", "seed", "init_stop", "weights_initialization"]),
        value in prop::sample::select(vec!["null", "true", "-1", "0", "1e308", "-1e-308", "NaN", "Infinity", "\"\"",
            "\"x\"", "[]", "[1,2]", "{}", "{\"a\": null}", "12345678901234567890123"]),
        meta in prop::sample::select(vec!["null", "{}", "{\"epoch_count\": \"4\"}", "{\"epoch_num\": null, \"status\": 1}",
            "{\"tensor\": 5}", "{\"file\": [], \"lineno\": {}}", "{\"samples_count\": -1, \"step_num\": NaN}"]),
        time in prop::sample::select(vec!["0", "-5", "1.5", "\"7\"", "\"x\"", "1e300", "null"]),
        ruleset in rulesets(),
    ) {
        let line = format!(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {time}, \"event_type\": \"POINT_IN_TIME\", \
            \"key\": \"{key}\", \"value\": {value}, \"metadata\": {meta}}}\n");
        assert_findings_in_range(&format!("{GOOD}{line}"), ruleset)?;
        assert_findings_in_range(&format!("{line}{GOOD}"), ruleset)?;
    }
}
