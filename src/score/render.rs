//! Scored sets as text: a table for people, JSON, CSV (one row per set) and Markdown.

use super::{RunScore, ScalingSource, SetScore};
use comfy_table::{presets, Table};
use std::fmt::Write;

/// Output format of `mlperf-run score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
    Markdown,
}

/// Render scored sets. Scores print with 4 decimals, as the official tables are compared.
/// Only JSON can fail (serde's error is returned: it once became `{"error": ...}` with the
/// message unescaped, which is not JSON either).
pub fn render(sets: &[SetScore], format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => text(sets, false),
        Format::Markdown => text(sets, true),
        Format::Json => serde_json::to_string_pretty(sets)? + "\n",
        Format::Csv => csv(sets),
    })
}

const SET_HEADER: [&str; 15] = [
    "system",
    "benchmark",
    "division",
    "ruleset",
    "runs",
    "converged",
    "olympic_min",
    "scaling_factor",
    "scaling_source",
    "score_min",
    "rcp",
    "throughput",
    "projected_min",
    "valid",
    "dir",
];
/// Columns of [`SET_HEADER`] in the text tables (all but the folder).
const TEXT_COLUMNS: usize = 14;
const THROUGHPUT_COLUMN: usize = 11;
const PROJECTED_COLUMN: usize = 12;

fn f4(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into())
}

fn scaling_source(s: ScalingSource) -> &'static str {
    match s {
        ScalingSource::None => "none",
        ScalingSource::File => "scaling.json",
        ScalingSource::Rcp => "rcp",
    }
}

fn rcp_cell(set: &SetScore) -> String {
    match &set.rcp {
        None => "-".into(),
        Some(c) => format!("{} ({})", if c.passed { "pass" } else { "FAIL" }, c.message),
    }
}

fn set_row(set: &SetScore) -> Vec<String> {
    let converged = set.runs.iter().filter(|r| r.converged()).count();
    vec![
        set.system.clone(),
        set.benchmark.clone(),
        set.division.clone().unwrap_or_else(|| "-".into()),
        set.ruleset.clone(),
        format!("{}/{}", set.runs.len(), set.required_runs),
        converged.to_string(),
        f4(set.olympic),
        format!("{:.4}", set.scaling_factor),
        scaling_source(set.scaling_source).into(),
        f4(set.score),
        rcp_cell(set),
        set.throughput
            .map(|t| format!("{t:.1}"))
            .unwrap_or_else(|| "-".into()),
        f4(projected_score(set)),
        if set.valid() {
            "yes".into()
        } else {
            "no".into()
        },
        set.dir.display().to_string(),
    ]
}

fn projected_score(set: &SetScore) -> Option<f64> {
    set.projection.as_ref().and_then(|p| p.score)
}

fn run_row(run: &RunScore) -> Vec<String> {
    let name = run
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    vec![
        name,
        run.status.as_str().into(),
        f4(run.minutes),
        run.converged_at
            .map(|c| format!("{c}"))
            .unwrap_or_else(|| "-".into()),
        run.global_batch_size
            .map(|c| format!("{c}"))
            .unwrap_or_else(|| "-".into()),
        run.throughput
            .map(|t| format!("{t:.1}"))
            .unwrap_or_else(|| "-".into()),
        f4(run.projection.as_ref().map(|p| p.minutes)),
        run.reason.clone().unwrap_or_default(),
    ]
}

const RUN_HEADER: [&str; 8] = [
    "run",
    "status",
    "minutes",
    "converged at",
    "global batch",
    "throughput",
    "projected min",
    "note",
];

/// Epochs with 2 decimals, samples whole.
fn amount(x: f64, unit: &str) -> String {
    if unit == "samples" {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The projection section of a set without a valid score: to what full run its runs were
/// projected, and how each run's projected minutes are made up.
fn projection_section(out: &mut String, set: &SetScore, markdown: bool) {
    let Some(p) = &set.projection else { return };
    let bullet = if markdown { "- " } else { "  " };
    if let Some(plan) = &p.plan {
        let spread = p
            .spread
            .map(|s| {
                format!(
                    " (median {:.4}, MAD {:.4}, range {:.4} - {:.4}, {} runs)",
                    s.median, s.mad, s.min, s.max, s.runs
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}Projected time to train (the runs did not converge): {} {} to target ({}), an \
             eval every {} {} on {} samples; projected score {} min{spread}",
            if markdown { "\n" } else { "" },
            amount(plan.converge_at, plan.unit),
            plan.unit,
            plan.source,
            amount(plan.eval_interval, plan.unit),
            plan.unit,
            plan.eval_samples,
            f4(p.score),
        );
        for run in &set.runs {
            let Some(r) = &run.projection else { continue };
            let name = run
                .file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{bullet}{name}: {:.4} min = train {:.4} ({:.1} samples/s after the first \
                 eval, {:.1} s of warm-up) + eval {:.4} ({:.2} evals x {:.1} s){}",
                r.minutes,
                r.train_minutes,
                r.samples_per_second,
                r.warmup_seconds,
                r.eval_minutes,
                r.evals,
                r.eval_seconds,
                r.init_minutes
                    .map(|m| format!("; init {m:.2} min"))
                    .unwrap_or_default()
            );
        }
    }
    for problem in &p.problems {
        let _ = writeln!(out, "{bullet}not projected: {problem}");
    }
}

fn text(sets: &[SetScore], markdown: bool) -> String {
    let mut out = String::new();
    let mut summary = new_table(markdown);
    summary.set_header(SET_HEADER[..TEXT_COLUMNS].to_vec());
    for set in sets {
        summary.add_row(set_row(set)[..TEXT_COLUMNS].to_vec());
    }
    let _ = writeln!(out, "{summary}\n");
    for set in sets {
        let title = format!(
            "{} / {} ({}, ruleset {} from {})",
            set.system,
            set.benchmark,
            set.dir.display(),
            set.ruleset,
            serde_json::to_value(set.ruleset_source)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "{}{title}", if markdown { "### " } else { "" });
        if markdown {
            out.push('\n');
        }
        let mut runs = new_table(markdown);
        runs.set_header(RUN_HEADER.to_vec());
        for run in &set.runs {
            runs.add_row(run_row(run));
        }
        let _ = writeln!(out, "{runs}");
        if let Some(c) = &set.rcp {
            let reference = c
                .reference
                .as_ref()
                .map(|r| format!(", RCP {} mean {:.4} min {:.4}", r.name, r.mean, r.min_mean))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{}RCP: {} ({}){reference}, set mean {}, normalization factor {:.4}",
                if markdown { "\n" } else { "" },
                if c.passed { "pass" } else { "FAIL" },
                c.message,
                f4(c.set_mean),
                c.norm_factor
            );
        }
        for p in &set.problems {
            let _ = writeln!(
                out,
                "{}no valid score: {p}",
                if markdown { "\n- " } else { "" }
            );
        }
        if !set.valid() {
            projection_section(&mut out, set, markdown);
        }
        out.push('\n');
    }
    out
}

fn new_table(markdown: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if markdown {
        presets::ASCII_MARKDOWN
    } else {
        presets::UTF8_FULL_CONDENSED
    });
    t
}

fn csv(sets: &[SetScore]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(SET_HEADER);
    for set in sets {
        let mut row = set_row(set);
        row[THROUGHPUT_COLUMN] = set.throughput.map(|t| t.to_string()).unwrap_or_default();
        row[PROJECTED_COLUMN] = projected_score(set)
            .map(|t| t.to_string())
            .unwrap_or_default();
        for cell in row.iter_mut() {
            if cell == "-" {
                cell.clear();
            }
        }
        let _ = w.write_record(&row);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}
