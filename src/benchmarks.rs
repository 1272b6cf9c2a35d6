//! Benchmark definitions as data: `benchmarks/<name>/benchmark.toml`, embedded at build time
//! so the binary stands alone. Set `MLPERF_RUN_BENCHMARKS_DIR` to read them from a directory
//! instead (a new round: edit data, not code).

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::OnceLock;

/// What `epoch_num` and the RCP tables count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvergenceUnit {
    Epochs,
    Samples,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalCadence {
    /// ResNet: evaluate every N epochs.
    pub every_epochs: Option<u32>,
    /// ResNet: largest allowed first-eval offset.
    pub max_offset: Option<u32>,
    /// BERT: interval = FLOOR(a * (b * GBS + c), round_to) samples.
    pub interval_a: Option<f64>,
    pub interval_b: Option<f64>,
    pub interval_c: Option<f64>,
    pub interval_round_to: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Benchmark {
    pub name: String,
    pub title: String,
    pub runs: usize,
    pub default_ruleset: String,
    pub rulesets: Vec<String>,
    pub target: f64,
    pub convergence_unit: ConvergenceUnit,
    pub train_samples: Option<u64>,
    pub eval_samples: u64,
    pub eval: EvalCadence,
}

impl Benchmark {
    /// BERT's closed-division eval interval in samples for a global batch size.
    pub fn eval_interval_samples(&self, global_batch_size: u64) -> Option<u64> {
        let e = &self.eval;
        let (a, b, c, r) = (
            e.interval_a?,
            e.interval_b?,
            e.interval_c?,
            e.interval_round_to?,
        );
        let raw = a * (b * global_batch_size as f64 + c);
        Some(((raw / r as f64).floor() as u64) * r)
    }
}

const EMBEDDED: &[(&str, &str)] = &[
    (
        "resnet",
        include_str!("../benchmarks/resnet/benchmark.toml"),
    ),
    ("bert", include_str!("../benchmarks/bert/benchmark.toml")),
];

fn load_all() -> Result<Vec<Benchmark>> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("MLPERF_RUN_BENCHMARKS_DIR").map(PathBuf::from) {
        for (name, _) in EMBEDDED {
            let path = dir.join(name).join("benchmark.toml");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            out.push(toml::from_str(&text).with_context(|| format!("invalid {}", path.display()))?);
        }
    } else {
        for (name, text) in EMBEDDED {
            out.push(
                toml::from_str(text).with_context(|| {
                    format!("invalid embedded benchmarks/{name}/benchmark.toml")
                })?,
            );
        }
    }
    Ok(out)
}

/// All known benchmarks.
pub fn all() -> &'static [Benchmark] {
    static ALL: OnceLock<Vec<Benchmark>> = OnceLock::new();
    ALL.get_or_init(|| load_all().unwrap_or_else(|e| panic!("benchmark definitions: {e:#}")))
}

/// The benchmark called `name` (as in `submission_benchmark` and result folder names).
pub fn get(name: &str) -> Result<&'static Benchmark> {
    match all().iter().find(|b| b.name == name) {
        Some(b) => Ok(b),
        None => {
            let known: Vec<&str> = all().iter().map(|b| b.name.as_str()).collect();
            bail!("unknown benchmark '{name}' (known: {})", known.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_definitions_load() {
        let r = super::get("resnet").unwrap();
        assert_eq!(r.runs, 5);
        assert_eq!(r.target, 0.759);
        let b = super::get("bert").unwrap();
        assert_eq!(b.runs, 10);
        assert_eq!(b.eval_interval_samples(448), Some(150_000));
        assert!(super::get("gpt3").is_err());
    }
}
