//! Benchmark facts as data, from one source: `benchmarks/<name>/benchmark.toml`.
//!
//! Each file holds a benchmark's quality target, its closed-division eval cadence, the number
//! of runs in a result set, its default ruleset and its MLPerf Training rounds (`[[rounds]]`:
//! the ruleset name, the submission window, the RCP file, and which of the code's rule
//! tables checks the round). benchmarks/README.md describes the schema and what a new round
//! takes (data only, when the round reuses an earlier round's rules).
//!
//! build.rs embeds the files and every round's RCP file ([`generated`]) so the binary stands
//! alone, and generates the `<NAME>_TARGET` consts that the const rule tables
//! (src/rules/tables.rs) use. Set `MLPERF_RUN_BENCHMARKS_DIR` to read the definitions, their
//! rounds and their RCP files from a directory laid out like `benchmarks/` instead (the rule
//! tables' compile-time targets still come from the embedded files).

use anyhow::{bail, ensure, Context, Result};
use chrono::{NaiveDate, NaiveTime};
use serde::{Deserialize, Deserializer};
use std::path::PathBuf;
use std::sync::OnceLock;

/// What build.rs generates from `benchmarks/*/benchmark.toml`: the embedded files, the
/// targets of the const rule tables, and summaries for help texts.
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/benchmark_data.rs"));
}

/// The environment variable that points at a directory laid out like `benchmarks/`.
pub const DIR_ENV: &str = "MLPERF_RUN_BENCHMARKS_DIR";

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

/// One MLPerf Training round of a benchmark (`[[rounds]]` in benchmark.toml).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    /// The training ruleset, e.g. "4.0.0" (what `--ruleset` names).
    pub name: String,
    /// First day of the submission window (UTC, inclusive): logs whose run_start falls in
    /// [from, until) belong to this round.
    #[serde(deserialize_with = "date")]
    pub from: NaiveDate,
    /// Day after the window (UTC, exclusive).
    #[serde(deserialize_with = "date")]
    pub until: NaiveDate,
    /// The round's RCP file (the official rcp_checker JSON), relative to the benchmark's folder.
    pub rcp: String,
    /// Which of the code's rule tables (src/rules/tables.rs) check this round's logs; default:
    /// the round's own name. A new round that reuses the last round's rules sets this.
    #[serde(default)]
    pub rules: Option<String>,
}

impl Round {
    /// The rule tables that check this round's logs.
    pub fn rules(&self) -> &str {
        self.rules.as_deref().unwrap_or(&self.name)
    }

    /// The window as Unix milliseconds: [start, end).
    pub fn window_ms(&self) -> (i64, i64) {
        let ms = |d: NaiveDate| d.and_time(NaiveTime::MIN).and_utc().timestamp_millis();
        (ms(self.from), ms(self.until))
    }

    /// True when `time_ms` (Unix ms) falls in the submission window.
    pub fn holds(&self, time_ms: f64) -> bool {
        let (start, end) = self.window_ms();
        let t = time_ms as i64;
        start <= t && t < end
    }
}

fn date<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<NaiveDate, D::Error> {
    let s = String::deserialize(d)?;
    NaiveDate::parse_from_str(&s, "%Y-%m-%d")
        .map_err(|e| serde::de::Error::custom(format!("'{s}' is not a date (YYYY-MM-DD): {e}")))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Benchmark {
    pub name: String,
    pub title: String,
    /// `result_<i>.txt` files in one result set.
    pub runs: usize,
    /// The ruleset used when the user and the log name none (one of the rounds).
    pub default_ruleset: String,
    /// Closed division: the quality target for eval_accuracy (a fraction).
    pub target: f64,
    pub convergence_unit: ConvergenceUnit,
    pub train_samples: Option<u64>,
    pub eval_samples: u64,
    pub eval: EvalCadence,
    /// The rounds this tool knows for the benchmark, oldest first.
    pub rounds: Vec<Round>,
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

    /// ResNet's closed-division eval cadence: (`[eval] every_epochs`, `[eval] max_offset`).
    pub fn eval_epochs(&self) -> Result<(u64, u64)> {
        match (self.eval.every_epochs, self.eval.max_offset) {
            (Some(every), Some(max_offset)) => Ok((every.into(), max_offset.into())),
            _ => bail!(
                "benchmarks/{}/benchmark.toml: [eval] needs every_epochs and max_offset",
                self.name
            ),
        }
    }

    /// The quality target as written in messages: at least three decimals ("0.750", "0.7615").
    pub fn target_text(&self) -> String {
        let text = format!("{}", self.target);
        let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
        match decimals {
            0 => format!("{:.3}", self.target),
            d if d < 3 => format!("{text}{}", "0".repeat(3 - d)),
            _ => text,
        }
    }

    /// The round called `name` (a training ruleset, e.g. "4.0.0").
    pub fn round(&self, name: &str) -> Option<&Round> {
        self.rounds.iter().find(|r| r.name == name)
    }

    /// The rounds' names, oldest first.
    pub fn round_names(&self) -> Vec<&str> {
        self.rounds.iter().map(|r| r.name.as_str()).collect()
    }

    /// The round whose submission window holds `time_ms` (Unix ms).
    pub fn round_at(&self, time_ms: f64) -> Option<&Round> {
        self.rounds.iter().find(|r| r.holds(time_ms))
    }

    /// What loading checks beyond the schema: the default ruleset is a round, round names
    /// are unique, every window is non-empty and the windows do not overlap.
    fn validate(&self) -> Result<()> {
        ensure!(self.runs >= 3, "runs must be at least 3, got {}", self.runs);
        ensure!(
            self.target > 0.0 && self.target < 1.0,
            "target must be a fraction in (0, 1), got {}",
            self.target
        );
        ensure!(!self.rounds.is_empty(), "no [[rounds]]");
        for (i, r) in self.rounds.iter().enumerate() {
            ensure!(
                r.from < r.until,
                "round {}: from ({}) must be before until ({})",
                r.name,
                r.from,
                r.until
            );
            for other in &self.rounds[..i] {
                ensure!(other.name != r.name, "round {} is listed twice", r.name);
                ensure!(
                    r.until <= other.from || other.until <= r.from,
                    "the windows of rounds {} and {} overlap",
                    other.name,
                    r.name
                );
            }
        }
        ensure!(
            self.round(&self.default_ruleset).is_some(),
            "default_ruleset {} is not one of the rounds ({})",
            self.default_ruleset,
            self.round_names().join(", ")
        );
        Ok(())
    }
}

fn parse(text: &str, origin: &str) -> Result<Benchmark> {
    let b: Benchmark = toml::from_str(text).with_context(|| format!("invalid {origin}"))?;
    b.validate().with_context(|| format!("invalid {origin}"))?;
    Ok(b)
}

fn load_all() -> Result<Vec<Benchmark>> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os(DIR_ENV).map(PathBuf::from) {
        let names: Vec<&str> = generated::BENCHMARK_TOMLS.iter().map(|(n, _)| *n).collect();
        let hint = || {
            format!(
                "{DIR_ENV}={}: the folder must hold <name>/benchmark.toml (and its RCP files) \
                 for each of {}; unset it for the embedded definitions",
                dir.display(),
                names.join(", ")
            )
        };
        for name in &names {
            let path = dir.join(name).join("benchmark.toml");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))
                .with_context(hint)?;
            out.push(parse(&text, &path.display().to_string()).with_context(hint)?);
        }
    } else {
        for (name, text) in generated::BENCHMARK_TOMLS {
            out.push(parse(
                text,
                &format!("embedded benchmarks/{name}/benchmark.toml"),
            )?);
        }
    }
    for (b, (name, _)) in out.iter().zip(generated::BENCHMARK_TOMLS) {
        ensure!(
            b.name == *name,
            "benchmarks/{name}/benchmark.toml: name must be \"{name}\", got \"{}\"",
            b.name
        );
    }
    Ok(out)
}

/// The benchmark definitions, loaded once (an error as its message).
fn loaded() -> &'static std::result::Result<Vec<Benchmark>, String> {
    static ALL: OnceLock<std::result::Result<Vec<Benchmark>, String>> = OnceLock::new();
    ALL.get_or_init(|| load_all().map_err(|e| format!("benchmark definitions: {e:#}")))
}

/// Loads the benchmark definitions now: `cli::main` calls it before any subcommand, so that a
/// bad `MLPERF_RUN_BENCHMARKS_DIR` is an error naming it (exit status 2), not a panic of
/// [`all`] inside the subcommand.
pub fn ensure_loaded() -> Result<()> {
    match loaded() {
        Ok(_) => Ok(()),
        Err(e) => bail!("{e}"),
    }
}

/// All known benchmarks (ordered by name). Panics when the definitions do not load, which
/// [`ensure_loaded`] has already refused in the binary.
pub fn all() -> &'static [Benchmark] {
    match loaded() {
        Ok(all) => all,
        Err(e) => panic!("{e}"),
    }
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

/// Every benchmark's rounds, for messages: "bert 2.0.0, 2.1.0, ...; resnet 2.0.0, ...".
pub fn rounds_summary() -> String {
    all()
        .iter()
        .map(|b| format!("{} {}", b.name, b.round_names().join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The text of a round's RCP file and where it came from (for messages): from
/// `MLPERF_RUN_BENCHMARKS_DIR` when set, else embedded.
pub fn rcp_text(benchmark: &Benchmark, round: &Round) -> Result<(String, String)> {
    if let Some(dir) = std::env::var_os(DIR_ENV).map(PathBuf::from) {
        let path = dir.join(&benchmark.name).join(&round.rcp);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "no RCP table for {} at ruleset {}: cannot read {}",
                benchmark.name,
                round.name,
                path.display()
            )
        })?;
        return Ok((text, path.display().to_string()));
    }
    match generated::RCP_FILES
        .iter()
        .find(|(b, path, _)| *b == benchmark.name && *path == round.rcp)
    {
        Some((_, path, text)) => Ok((
            text.to_string(),
            format!("benchmarks/{}/{path} (embedded)", benchmark.name),
        )),
        None => bail!(
            "no RCP table for {} at ruleset {}: benchmarks/{}/{} is not embedded",
            benchmark.name,
            round.name,
            benchmark.name,
            round.rcp
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_definitions_load() {
        let r = get("resnet").unwrap();
        assert_eq!(r.runs, 5);
        assert_eq!(r.target, generated::RESNET_TARGET);
        assert_eq!(r.eval_epochs().unwrap(), (4, 3));
        let b = get("bert").unwrap();
        assert_eq!(b.runs, 10);
        assert_eq!(b.target, generated::BERT_TARGET);
        assert_eq!(b.target_text(), format!("{:.3}", generated::BERT_TARGET));
        assert_eq!(b.eval_interval_samples(448), Some(150_000));
        assert!(b.eval_epochs().is_err());
        assert!(get("gpt3").is_err());
    }

    #[test]
    fn rounds_and_windows() {
        let r = get("resnet").unwrap();
        assert_eq!(
            r.round_names(),
            ["2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0"]
        );
        let b = get("bert").unwrap();
        assert_eq!(b.rounds.last().unwrap().name, "5.0.0");
        // the first window starts 2022-02-01; 4.0.0's is [2024-02-01, 2024-08-01)
        assert_eq!(b.rounds[0].window_ms().0, 1_643_673_600_000);
        assert_eq!(
            r.round("4.0.0").unwrap().window_ms(),
            (1_706_745_600_000, 1_722_470_400_000)
        );
        assert_eq!(r.round_at(1_722_470_399_999.0).unwrap().name, "4.0.0");
        assert!(r.round_at(1_722_470_400_000.0).is_none());
        assert_eq!(b.round_at(1_722_470_400_000.0).unwrap().name, "4.1.0");
        for bench in all() {
            for round in &bench.rounds {
                assert_eq!(round.rules(), round.name, "{} {}", bench.name, round.name);
                rcp_text(bench, round).unwrap();
            }
        }
    }

    #[test]
    fn target_text_has_three_decimals() {
        let mut b = get("bert").unwrap().clone();
        for (x, text) in [
            (0.75, "0.750"),
            (0.5, "0.500"),
            (0.7615, "0.7615"),
            (1.0, "1.000"),
        ] {
            b.target = x;
            assert_eq!(b.target_text(), text);
        }
    }

    #[test]
    fn bad_definitions_are_refused() {
        let text = generated::BENCHMARK_TOMLS
            .iter()
            .find(|(n, _)| *n == "resnet")
            .unwrap()
            .1;
        parse(text, "resnet").unwrap();
        for (from, to, needle) in [
            (
                "default_ruleset = \"4.0.0\"",
                "default_ruleset = \"9.0.0\"",
                "default_ruleset",
            ),
            (
                "until = \"2022-08-01\"",
                "until = \"2022-09-01\"",
                "overlap",
            ),
            (
                "until = \"2022-08-01\"",
                "until = \"2022-02-01\"",
                "before until",
            ),
            (
                "from = \"2022-02-01\"",
                "from = \"2022-02-31\"",
                "not a date",
            ),
            (
                "rcp = \"rcp/training_4.0.0.json\"",
                "rcp = \"x\"\nfoo = 1",
                "foo",
            ),
        ] {
            let changed = text.replacen(from, to, 1);
            assert_ne!(changed, text, "{from}");
            let e = format!("{:#}", parse(&changed, "resnet").unwrap_err());
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
