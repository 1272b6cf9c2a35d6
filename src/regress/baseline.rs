//! The recorded baselines: the CSV file's rows ([`Baseline`], [`BaselineRow`]), read with
//! errors that name the file and line, and written back atomically.

use crate::score::Spread;
use crate::util::fs as fsutil;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Columns of the baseline CSV, in the order written. Files from before the throughput and
/// projection gates have the first seven; the others are optional when reading.
pub const COLUMNS: [&str; 12] = [
    "benchmark",
    "config",
    "system",
    "score_min",
    "throughput",
    "tolerance_pct",
    "recorded_at",
    "throughput_spread",
    "throughput_runs",
    "projected_min",
    "projected_spread",
    "projected_runs",
];

/// A recorded median with its spread and run count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recorded {
    pub value: f64,
    /// Median absolute deviation of the runs (None in rows written before spreads were kept:
    /// read as 0).
    pub spread: Option<f64>,
    pub runs: Option<usize>,
}

impl Recorded {
    /// The median, spread and run count of a set's runs.
    pub(super) fn from_spread(s: &Spread) -> Recorded {
        Recorded {
            value: s.median,
            spread: Some(s.mad),
            runs: Some(s.runs),
        }
    }
}

/// One recorded baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineRow {
    pub benchmark: String,
    pub config: String,
    pub system: String,
    /// Olympic score in minutes (after scaling); None for rows of sets without a score (short
    /// runs).
    pub score_min: Option<f64>,
    /// Median throughput of the runs as the logs record it (e.g. images/s). Rows written before
    /// medians were kept hold the mean of the converged runs.
    pub throughput: Option<Recorded>,
    /// Median projected time to train of the runs, minutes.
    pub projected: Option<Recorded>,
    /// Allowed change in percent; None: [`DEFAULT_TOLERANCE_PCT`] (or --tolerance).
    ///
    /// [`DEFAULT_TOLERANCE_PCT`]: super::DEFAULT_TOLERANCE_PCT
    pub tolerance_pct: Option<f64>,
    /// When the row was recorded (RFC 3339), informational.
    pub recorded_at: String,
    /// 1-based line in the CSV it was read from (0 for new rows).
    pub line: usize,
}

impl BaselineRow {
    /// (benchmark, config, system): what identifies a row.
    pub(super) fn key(&self) -> (&str, &str, &str) {
        (&self.benchmark, &self.config, &self.system)
    }

    /// The recorded value of `column` ("score_min", "throughput" or "projected_min").
    pub fn metric(&self, column: &str) -> Option<Recorded> {
        match column {
            "score_min" => self.score_min.map(|value| Recorded {
                value,
                spread: None,
                runs: None,
            }),
            "throughput" => self.throughput,
            "projected_min" => self.projected,
            _ => None,
        }
    }
}

/// The baseline file.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    pub rows: Vec<BaselineRow>,
}

impl Baseline {
    /// Read a baseline CSV. Errors name the file and line.
    pub fn load(path: &Path) -> Result<Baseline> {
        let text =
            crate::util::tree::read_text_file(path, "baseline CSV (`regress --record` writes one)")
                .context("--baseline")?;
        Self::parse(&text, path)
    }

    /// Parse baseline CSV text; `path` is for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Baseline> {
        let at = |line: u64| format!("{}:{line}", path.display());
        if text.trim().is_empty() {
            bail!(
                "{}: the baseline is empty: it starts with the header line {} (`regress \
                 --record` writes the file, header and rows)",
                path.display(),
                COLUMNS[..7].join(",")
            );
        }
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let header = reader
            .headers()
            .map_err(|e| anyhow::anyhow!("{}: {e}", at(1)))?
            .clone();
        let columns = HeaderColumns::find(&header, &at(1))?;
        let mut rows: Vec<BaselineRow> = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                match e.kind() {
                    // it was the csv crate's "found record with 6 fields, but the previous
                    // record has 7 fields"
                    csv::ErrorKind::UnequalLengths {
                        expected_len, len, ..
                    } => anyhow::anyhow!(
                        "{}: the row has {len} fields but the header has {expected_len} ({}): \
                         give every row one field per header column (an empty field, as in \
                         `,,`, leaves a value out)",
                        at(line),
                        header.iter().collect::<Vec<_>>().join(",")
                    ),
                    _ => anyhow::anyhow!("{}: malformed CSV record: {e}", at(line)),
                }
            })?;
            let line = record.position().map(|p| p.line()).unwrap_or(0);
            let fields = Fields {
                record: &record,
                at: at(line),
            };
            let row = fields.row(&columns, line as usize)?;
            check_new_row(&rows, &row, &fields.at)?;
            rows.push(row);
        }
        Ok(Baseline { rows })
    }

    /// The row for (benchmark, config, system).
    pub fn find(&self, benchmark: &str, config: &str, system: &str) -> Option<&BaselineRow> {
        self.rows
            .iter()
            .find(|r| r.key() == (benchmark, config, system))
    }

    /// Add a row or replace the one with the same key (keeping its place).
    pub fn upsert(&mut self, row: BaselineRow) {
        match self.rows.iter_mut().find(|r| r.key() == row.key()) {
            Some(existing) => *existing = row,
            None => self.rows.push(row),
        }
    }

    /// The CSV text.
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record(COLUMNS);
        let opt = |x: Option<f64>| x.map(|v| v.to_string()).unwrap_or_default();
        let runs = |x: Option<usize>| x.map(|v| v.to_string()).unwrap_or_default();
        for r in &self.rows {
            let (tp, pj) = (r.throughput, r.projected);
            let _ = w.write_record([
                r.benchmark.clone(),
                r.config.clone(),
                r.system.clone(),
                opt(r.score_min),
                opt(tp.map(|t| t.value)),
                opt(r.tolerance_pct),
                r.recorded_at.clone(),
                opt(tp.and_then(|t| t.spread)),
                runs(tp.and_then(|t| t.runs)),
                opt(pj.map(|p| p.value)),
                opt(pj.and_then(|p| p.spread)),
                runs(pj.and_then(|p| p.runs)),
            ]);
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }

    /// Write atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        fsutil::write_atomic(path, self.to_csv().as_bytes())
    }
}

/// Where each column is in the header: the first four are required, the others optional.
struct HeaderColumns {
    benchmark: usize,
    config: usize,
    system: usize,
    score: usize,
    throughput: Option<usize>,
    tolerance: Option<usize>,
    recorded_at: Option<usize>,
    throughput_spread: Option<usize>,
    throughput_runs: Option<usize>,
    projected: Option<usize>,
    projected_spread: Option<usize>,
    projected_runs: Option<usize>,
}

impl HeaderColumns {
    /// The columns of `header`; `at` (file:1) is for the missing-column error.
    fn find(header: &csv::StringRecord, at: &str) -> Result<HeaderColumns> {
        let col = |name: &str| header.iter().position(|h| h == name);
        let required = |name: &str| {
            col(name).with_context(|| {
                format!(
                    "{at}: missing column '{name}' (the header must name at least: {})",
                    COLUMNS[..7].join(",")
                )
            })
        };
        for name in header.iter() {
            if !COLUMNS.contains(&name) {
                let hint = match crate::util::suggest::closest(name, COLUMNS) {
                    Some(near) => format!("did you mean '{near}'? "),
                    None => String::new(),
                };
                bail!(
                    "{at}: unknown column '{name}' ({hint}the columns are: {}; `regress --record` \
                     would drop it)",
                    COLUMNS.join(",")
                );
            }
        }
        Ok(HeaderColumns {
            benchmark: required("benchmark")?,
            config: required("config")?,
            system: required("system")?,
            score: required("score_min")?,
            throughput: col("throughput"),
            tolerance: col("tolerance_pct"),
            recorded_at: col("recorded_at"),
            throughput_spread: col("throughput_spread"),
            throughput_runs: col("throughput_runs"),
            projected: col("projected_min"),
            projected_spread: col("projected_spread"),
            projected_runs: col("projected_runs"),
        })
    }
}

/// One CSV record's fields, with its file:line for messages.
struct Fields<'a> {
    record: &'a csv::StringRecord,
    at: String,
}

impl Fields<'_> {
    /// The field in column `c` ("" when the column or the field is absent).
    fn get(&self, c: Option<usize>) -> &str {
        c.and_then(|c| self.record.get(c)).unwrap_or("")
    }

    /// A required text field.
    fn text(&self, c: usize, name: &str) -> Result<String> {
        let v = self.get(Some(c));
        if v.is_empty() {
            bail!("{}: column '{name}' is empty", self.at);
        }
        Ok(v.to_string())
    }

    /// An optional non-negative number.
    fn number(&self, c: Option<usize>, name: &str) -> Result<Option<f64>> {
        let v = self.get(c);
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => bail!(
                "{}: column '{name}' is not a non-negative number: {v:?}",
                self.at
            ),
        }
    }

    /// An optional recorded metric: a number above 0 (a time or a rate; 0 would make every
    /// result a regression, or none).
    fn metric(&self, c: Option<usize>, name: &str) -> Result<Option<f64>> {
        match self.number(c, name)? {
            Some(0.0) => bail!(
                "{}: column '{name}' must be above 0 (a recorded time or rate), got 0; leave it \
                 empty if the row does not record it",
                self.at
            ),
            x => Ok(x),
        }
    }

    /// An optional date: RFC 3339 (as `--record` writes it) or a plain YYYY-MM-DD.
    fn date(&self, c: Option<usize>, name: &str) -> Result<String> {
        let v = self.get(c);
        let plain_date = || chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").is_ok();
        if v.is_empty() || chrono::DateTime::parse_from_rfc3339(v).is_ok() || plain_date() {
            return Ok(v.to_string());
        }
        bail!(
            "{}: column '{name}' is not a date: {v:?}; write it as RFC 3339 \
             (2026-12-07T16:00:00Z, as `regress --record` writes it), as 2026-12-07, or leave \
             it empty",
            self.at
        )
    }

    /// An optional positive run count.
    fn count(&self, c: Option<usize>, name: &str) -> Result<Option<usize>> {
        let v = self.get(c);
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => bail!(
                "{}: column '{name}' is not a positive whole number of runs: {v:?}",
                self.at
            ),
        }
    }

    /// A median with its spread and runs columns (None when the median is empty; the spread
    /// and runs are checked either way).
    fn recorded(
        &self,
        value: Option<f64>,
        spread: (Option<usize>, &str),
        runs: (Option<usize>, &str),
    ) -> Result<Option<Recorded>> {
        let spread = self.number(spread.0, spread.1)?;
        let runs = self.count(runs.0, runs.1)?;
        Ok(value.map(|value| Recorded {
            value,
            spread,
            runs,
        }))
    }

    /// The row these fields hold (`line`: where it was read).
    fn row(&self, c: &HeaderColumns, line: usize) -> Result<BaselineRow> {
        Ok(BaselineRow {
            benchmark: self.text(c.benchmark, "benchmark")?,
            config: self.text(c.config, "config")?,
            system: self.text(c.system, "system")?,
            score_min: self.metric(Some(c.score), "score_min")?,
            throughput: self.recorded(
                self.metric(c.throughput, "throughput")?,
                (c.throughput_spread, "throughput_spread"),
                (c.throughput_runs, "throughput_runs"),
            )?,
            projected: self.recorded(
                self.metric(c.projected, "projected_min")?,
                (c.projected_spread, "projected_spread"),
                (c.projected_runs, "projected_runs"),
            )?,
            tolerance_pct: self.number(c.tolerance, "tolerance_pct")?,
            recorded_at: self.date(c.recorded_at, "recorded_at")?,
            line,
        })
    }
}

/// Refuse a row that records no metric or repeats an earlier row's key (`at`: its file:line).
fn check_new_row(rows: &[BaselineRow], row: &BaselineRow, at: &str) -> Result<()> {
    if row.score_min.is_none() && row.throughput.is_none() && row.projected.is_none() {
        bail!(
            "{at}: the row records no metric: fill score_min, throughput or projected_min \
             (or record it with `mlperf-run regress --record --metric ...`)"
        );
    }
    if let Some(dup) = rows.iter().find(|r| r.key() == row.key()) {
        bail!(
            "{at}: duplicate row for benchmark={}, config={}, system={} (first at line {})",
            row.benchmark,
            row.config,
            row.system,
            dup.line
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trip_keeps_rows() {
        let text = "benchmark,config,system,score_min,throughput,tolerance_pct,recorded_at\n\
                    resnet,default,a,23.5,,2.5,2026-01-01T00:00:00Z\nbert,x,b,7.9,100.5,,\n";
        let b = Baseline::parse(text, Path::new("b.csv")).unwrap();
        assert_eq!(b.rows.len(), 2);
        assert_eq!(b.rows[0].tolerance_pct, Some(2.5));
        assert_eq!(b.rows[1].throughput.map(|t| t.value), Some(100.5));
        assert_eq!(b.rows[1].throughput.and_then(|t| t.spread), None);
        assert_eq!(b.rows[1].line, 3);
        let again = Baseline::parse(&b.to_csv(), Path::new("b.csv")).unwrap();
        assert_eq!(
            again.rows,
            b.rows
                .iter()
                .cloned()
                .map(|mut r| {
                    r.line = again.rows.iter().find(|a| a.key() == r.key()).unwrap().line;
                    r
                })
                .collect::<Vec<_>>()
        );
        // the new columns: a short-run row without a score
        let text = format!(
            "{}\nresnet,bench,gpu,,1234.5,,,12.5,5,61.25,0.5,5\n",
            COLUMNS.join(",")
        );
        let b = Baseline::parse(&text, Path::new("n.csv")).unwrap();
        let r = &b.rows[0];
        assert_eq!(r.score_min, None);
        assert_eq!(
            r.throughput,
            Some(Recorded {
                value: 1234.5,
                spread: Some(12.5),
                runs: Some(5)
            })
        );
        assert_eq!(
            r.projected.map(|p| (p.value, p.runs)),
            Some((61.25, Some(5)))
        );
        assert_eq!(
            Baseline::parse(&b.to_csv(), Path::new("n.csv"))
                .unwrap()
                .rows[0]
                .throughput,
            r.throughput
        );
        // a row with no metric at all, and a bad run count, name the line
        let e = Baseline::parse(
            &format!("{}\nresnet,bench,gpu,,,,,,,,,\n", COLUMNS.join(",")),
            Path::new("n.csv"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("n.csv:2") && e.contains("no metric"), "{e}");
        let e = Baseline::parse(
            &format!("{}\nresnet,bench,gpu,,5,,,1,2.5,,,\n", COLUMNS.join(",")),
            Path::new("n.csv"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("n.csv:2") && e.contains("throughput_runs"),
            "{e}"
        );
    }
}
