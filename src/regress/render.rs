//! The comparisons as a table, with a line for each note (why a set regressed or has no
//! value or baseline).

use super::compare::Comparison;
use comfy_table::{presets, Table};

/// A table of comparisons.
pub fn render(comparisons: &[Comparison]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "benchmark",
        "config",
        "system",
        "metric",
        "before",
        "after",
        "ratio",
        "tolerance",
        "limit",
        "verdict",
    ]);
    let num = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    // a median with its spread and runs: "1234.5000 ±12.0000 (5 runs)"
    let cell = |x: Option<f64>, spread: Option<f64>, runs: Option<usize>| {
        let mut s = num(x);
        if x.is_some() {
            if let Some(d) = spread {
                s.push_str(&format!(" ±{d:.4}"));
            }
            if let Some(n) = runs {
                s.push_str(&format!(" ({n} runs)"));
            }
        }
        s
    };
    for c in comparisons {
        t.add_row([
            c.benchmark.clone(),
            c.config.clone(),
            c.system.clone(),
            c.metric.to_string(),
            cell(c.before, c.before_spread, c.before_runs),
            cell(c.after, c.after_spread, c.after_runs),
            c.ratio()
                .map(|r| format!("{r:.4}"))
                .unwrap_or_else(|| "-".into()),
            format!("{}%", c.tolerance_pct),
            num(c.limit),
            c.verdict.as_str().to_string(),
        ]);
    }
    let mut s = format!("{t}\n");
    for c in comparisons.iter().filter(|c| !c.note.is_empty()) {
        s.push_str(&format!(
            "{} {}/{}/{}: {}: {}\n",
            c.verdict.as_str(),
            c.benchmark,
            c.config,
            c.system,
            c.metric,
            c.note
        ));
    }
    s
}
