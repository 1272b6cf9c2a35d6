//! The plan as a table (text) and as an SVG plot: projected minutes against GPUs with the RCP
//! band, and the per-GPU efficiency, drawn with plotters as `score`'s accuracy plot is.

use super::choose::Choice;
use anyhow::{Context, Result};
use plotters::prelude::*;

/// One row per count. Each column is as wide as its widest cell (and at least as wide as it
/// is for the usual figures), so the columns stay in line for every value the flags' ranges
/// allow: under fixed widths, `--rate 0.001` gave step times of 9 digits before the point,
/// which pushed the rest of their row out of line.
pub fn table(rows: &[(Choice, String)]) -> String {
    // the header, its column's least width, right-aligned or not; "minutes (band)" heads the
    // minutes and the band, each right-aligned in its part of the column
    const COLUMNS: [(&str, usize, bool); 11] = [
        ("GPUs", 6, true),
        ("GBS", 7, true),
        ("per GPU", 9, true),
        ("accum", 5, true),
        ("step ms", 9, true),
        ("allred ms", 9, true),
        ("exposed", 9, true),
        ("evals", 8, true),
        ("minutes (band)", 21, true),
        ("eff", 6, true),
        ("convergence", 18, false),
    ];
    const MINUTES: usize = 8;
    let cells: Vec<(Vec<String>, &str)> = rows
        .iter()
        .map(|(c, path)| {
            let p = &c.projection;
            let cells = vec![
                p.gpus.to_string(),
                p.global_batch.to_string(),
                format!("{:.1}", p.micro_batch * p.accum as f64),
                p.accum.to_string(),
                format!("{:.2}", p.step.total_s * 1e3),
                format!("{:.2}", p.step.allreduce_s * 1e3),
                format!("{:.2}", p.step.exposed_s * 1e3),
                format!("{:.1}", p.evals),
                // the minutes and the band, one column
                format!("{:.2}", p.minutes),
                format!("({:.2}-{:.2})", p.minutes_low, p.minutes_high),
                format!("{:.0}%", p.efficiency * 100.0),
                c.point.name.clone(),
            ];
            (cells, path.as_str())
        })
        .collect();
    let widest = |i: usize| cells.iter().map(|(c, _)| c[i].len()).max().unwrap_or(0);
    let minutes_w = widest(MINUTES).max(7);
    let band_w = widest(MINUTES + 1).max(13);
    // the width of each column: its least, its header's, its widest cell's
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(j, (header, least, _))| {
            let cell = match j {
                MINUTES => minutes_w + 1 + band_w,
                j if j > MINUTES => widest(j + 1),
                j => widest(j),
            };
            cell.max(*least).max(header.len())
        })
        .collect();
    // one space between columns, two before the convergence point (left-aligned, as the
    // config's path after it)
    let line = |cols: &[String], last: &str| {
        let mut l = String::new();
        for (j, ((_, _, right), (text, w))) in
            COLUMNS.iter().zip(cols.iter().zip(&widths)).enumerate()
        {
            let sep = match j {
                0 => "",
                10 => "  ",
                _ => " ",
            };
            l.push_str(sep);
            if *right {
                l.push_str(&format!("{text:>w$}"));
            } else {
                l.push_str(&format!("{text:<w$}"));
            }
        }
        format!("{l} {last}\n")
    };
    let header: Vec<String> = COLUMNS.iter().map(|(h, _, _)| h.to_string()).collect();
    let mut s = line(&header, "config");
    for (c, path) in &cells {
        let mut cols: Vec<String> = c[..MINUTES].to_vec();
        cols.push(format!(
            "{:>minutes_w$} {:>band_w$}",
            c[MINUTES],
            c[MINUTES + 1]
        ));
        cols.extend(c[MINUTES + 2..].iter().cloned());
        s.push_str(&line(&cols, path));
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
