//! The plan as a table (text) and as an SVG plot: projected minutes against GPUs with the RCP
//! band, and the per-GPU efficiency, drawn with plotters as `score`'s accuracy plot is.

use super::choose::Choice;
use anyhow::{Context, Result};
use plotters::prelude::*;
use std::fmt::Write;

/// One row per count.
pub fn table(rows: &[(Choice, String)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6} {:>7} {:>9} {:>5} {:>9} {:>9} {:>9} {:>8} {:>21} {:>6}  {:<18} config",
        "GPUs",
        "GBS",
        "per GPU",
        "accum",
        "step ms",
        "allred ms",
        "exposed",
        "evals",
        "minutes (band)",
        "eff",
        "convergence"
    );
    for (c, path) in rows {
        let p = &c.projection;
        let _ = writeln!(
            s,
            "{:>6} {:>7} {:>9.1} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>8.1} {:>7.2} ({:>5.2}-{:>5.2}) {:>5.0}%  {:<18} {}",
            p.gpus,
            p.global_batch,
            p.micro_batch * p.accum as f64,
            p.accum,
            p.step.total_s * 1e3,
            p.step.allreduce_s * 1e3,
            p.step.exposed_s * 1e3,
            p.evals,
            p.minutes,
            p.minutes_low,
            p.minutes_high,
            p.efficiency * 100.0,
            c.point.name,
            path
        );
    }
    s
}

/// Minutes (with the band) and efficiency against GPUs, log2 x axis.
pub fn svg(title: &str, rows: &[(Choice, String)]) -> Result<String> {
    let pts: Vec<(f64, f64, f64, f64, f64)> = rows
        .iter()
        .map(|(c, _)| {
            let p = &c.projection;
            let x = (p.gpus as f64).log2();
            (x, p.minutes, p.minutes_low, p.minutes_high, p.efficiency)
        })
        .collect();
    let x0 = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x1 = pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = if x0.is_finite() {
        (x0 - 0.5, x1 + 0.5)
    } else {
        (0.0, 1.0)
    };
    let y1 = pts.iter().map(|p| p.3).fold(0.0f64, f64::max).max(1e-3) * 1.1;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (800, 700)).into_drawing_area();
        root.fill(&WHITE).context("plot")?;
        let (upper, lower) = root.split_vertically(450);
        let mut chart = ChartBuilder::on(&upper)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .context("plot axes")?;
        chart
            .configure_mesh()
            .x_desc("GPUs")
            .x_label_formatter(&|x| format!("{:.0}", 2f64.powf(*x)))
            .y_desc("projected minutes to train")
            .draw()
            .context("plot mesh")?;
        let band = BLUE.mix(0.2);
        for p in &pts {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(p.0, p.2), (p.0, p.3)],
                    band.stroke_width(8),
                )))
                .context("plot band")?;
        }
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                BLUE.stroke_width(2),
            ))
            .context("plot minutes")?
            .label("minutes (bar: RCP mean +- 1 sd)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLUE.stroke_width(2)));
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.1), 4, BLUE.filled())),
            )
            .context("plot points")?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .context("plot legend")?;
        let mut eff = ChartBuilder::on(&lower)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..1.1)
            .context("plot axes")?;
        eff.configure_mesh()
            .x_desc("GPUs")
            .x_label_formatter(&|x| format!("{:.0}", 2f64.powf(*x)))
            .y_desc("per-GPU efficiency")
            .draw()
            .context("plot mesh")?;
        eff.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.0, p.4)),
            RED.stroke_width(2),
        ))
        .context("plot efficiency")?;
        root.present().context("plot")?;
    }
    Ok(out)
}
