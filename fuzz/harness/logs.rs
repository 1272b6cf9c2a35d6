//! Fuzz harnesses for the log readers: the MLLOG parser with the rule checker, and the run
//! configs. Shared by the fuzz targets (fuzz/fuzz_targets/) and the replay of their findings
//! in `cargo test` (tests/logs_rules/fuzz_regressions.rs), so a regression input runs the
//! same code in both. Each returns what the readers answered, one line per call.
#![allow(dead_code)]

use mlperf_run::mllog::{self, LogFile};
use mlperf_run::rules::{self, CheckOptions};
use std::path::PathBuf;

/// One to four logs (split at the byte 0x1E, the ASCII record separator); each is parsed as a
/// file's bytes and checked against a ruleset chosen by the first byte (the log's benchmark
/// default, or one of the shipped rulesets), then all are checked together as one result set.
pub fn mllog_rules(data: &[u8]) -> Vec<String> {
    let (choice, rest) = match data.split_first() {
        Some((c, r)) => (*c, r),
        None => (0, data),
    };
    let names = rules::tables::names();
    let ruleset = match choice as usize % (names.len() + 1) {
        0 => None,
        k => Some(names[k - 1].to_string()),
    };
    let opts = CheckOptions { ruleset };
    let mut out = Vec::new();
    let mut logs: Vec<LogFile> = Vec::new();
    for (i, part) in rest.split(|&b| b == 0x1E).take(4).enumerate() {
        let mut log = mllog::parse_bytes(part);
        log.path = PathBuf::from(format!("set/result_{i}.txt"));
        let verdict = rules::check_log(&log, &opts);
        out.push(format!(
            "{}: {} events, {} findings{}",
            log.path.display(),
            log.events.len(),
            verdict.findings.len(),
            verdict
                .findings
                .first()
                .map(|f| format!(", first: {}", f.located(&log.path)))
                .unwrap_or_default()
        ));
        for e in &log.events {
            let _ = mllog::pyjson::to_string(&e.value);
        }
        logs.push(log);
    }
    let division = if choice & 0x80 != 0 { "open" } else { "closed" };
    for benchmark in ["resnet", "bert"] {
        let set = rules::check_set(&logs, benchmark, division);
        out.push(format!("{benchmark} set: {} findings", set.len()));
    }
    out
}

/// The run config, TOML text to a validated config: the first byte picks the benchmark (bit 1:
/// BERT) and the division (bit 0: open); then what the trainer derives from a config that
/// validated (local batch, logged hyperparameters, eval cadence, BERT's blocks).
pub fn run_config(data: &[u8]) -> Vec<String> {
    use mlperf_run::rules::Division;
    use mlperf_run::train::resnet::config::ResnetRunConfig;
    let Some((&choice, rest)) = data.split_first() else {
        return vec!["empty input".into()];
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return vec!["not UTF-8".into()];
    };
    let division = if choice & 1 == 0 {
        Division::Closed
    } else {
        Division::Open
    };
    let mut out = Vec::new();
    if choice & 2 == 0 {
        match ResnetRunConfig::parse(text, division) {
            Ok(cfg) => {
                for world in [1u64, 8] {
                    if cfg.local_batch(world).is_ok() {
                        let _ = cfg.hyperparameters(division, 1251, 1_281_167, 50_000, world);
                    }
                }
                out.push(format!("resnet: ok, {} evals", cfg.eval_epochs().len()));
            }
            Err(e) => out.push(format!("resnet: error: {e:#}")),
        }
    } else {
        #[cfg(feature = "torch")]
        {
            use mlperf_run::train::bert::BertRunConfig;
            match BertRunConfig::parse(text, division) {
                Ok(cfg) => {
                    let _ = cfg.eval_interval(division);
                    let blocks = cfg.blocks(division);
                    let _ = cfg.hyperparameters(division, 1000, 512);
                    out.push(format!(
                        "bert: ok, blocks: {}",
                        match blocks {
                            Ok(b) => b.len().to_string(),
                            Err(e) => format!("error: {e:#}"),
                        }
                    ));
                }
                Err(e) => out.push(format!("bert: error: {e:#}")),
            }
        }
    }
    out
}
