//! An SVG plot of eval accuracy against minutes since run_start, one line per run of a set.

use crate::mllog::{keys, LogFile};
use anyhow::{Context, Result};
use plotters::prelude::*;

/// One run's curve: (minutes since run_start, accuracy).
pub fn accuracy_curve(log: &LogFile) -> Vec<(f64, f64)> {
    let Some(start) = log.first(keys::RUN_START).map(|e| e.time_ms) else {
        return Vec::new();
    };
    log.with_key(keys::EVAL_ACCURACY)
        .filter_map(|e| Some(((e.time_ms - start) / 60_000.0, e.value.as_f64()?)))
        .collect()
}

/// Render the curves of `logs` (labelled by file name) with the target line into SVG text.
pub fn accuracy_svg(title: &str, logs: &[LogFile], target: Option<f64>) -> Result<String> {
    let curves: Vec<(String, Vec<(f64, f64)>)> = logs
        .iter()
        .map(|l| {
            let name = l
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, accuracy_curve(l))
        })
        .collect();
    let x_max = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE).context("plot")?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..x_max, 0.0..1.0)
            .context("plot axes")?;
        chart
            .configure_mesh()
            .x_desc("minutes since run_start")
            .y_desc("eval accuracy")
            .draw()
            .context("plot mesh")?;
        if let Some(t) = target {
            chart
                .draw_series(LineSeries::new(vec![(0.0, t), (x_max, t)], BLACK.mix(0.5)))
                .context("plot target")?
                .label(format!("target {t}"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLACK.mix(0.5)));
        }
        for (i, (name, curve)) in curves.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    curve.iter().copied(),
                    color.stroke_width(2),
                ))
                .context("plot series")?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 15, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .context("plot legend")?;
        root.present().context("plot")?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_one_path_per_run() {
        let mk = |accs: &[f64]| {
            let mut text = String::from(":::MLLOG {\"namespace\": \"\", \"time_ms\": 0, \"event_type\": \"INTERVAL_START\", \"key\": \"run_start\", \"value\": null, \"metadata\": {}}\n");
            for (i, a) in accs.iter().enumerate() {
                text.push_str(&format!(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {}, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": {a}, \"metadata\": {{\"epoch_num\": {i}}}}}\n", (i + 1) * 60_000));
            }
            crate::mllog::parse_str(&text)
        };
        let logs = vec![mk(&[0.2, 0.5, 0.8]), mk(&[0.3, 0.77])];
        assert_eq!(
            accuracy_curve(&logs[0]),
            vec![(1.0, 0.2), (2.0, 0.5), (3.0, 0.8)]
        );
        let svg = accuracy_svg("t", &logs, Some(0.75)).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.matches("<polyline").count() >= 3, "target + two runs");
    }
}
