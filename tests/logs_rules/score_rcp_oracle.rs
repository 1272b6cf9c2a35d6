//! Differential test of the RCP statistics: every point of every shipped table (mean, stdev,
//! minimum acceptable mean), the pruned set, and interpolated points, against
//! mlperf_logging.rcp_checker run in the same test.

use crate::common;

use mlperf_run::score::{rcp, RcpTable};
use std::process::Command;

const PROBE: &str = r#"
import json, sys
from mlperf_logging.rcp_checker import rcp_checker as r
out = []
for bench, ruleset, bs_list in json.loads(sys.argv[1]):
    c = r.RCP_Checker("training", ruleset, bench, False)
    points = [[x["BS"], float(x["RCP Mean"]), float(x["RCP Stdev"]), float(x["Min Epochs"])] for x in c.rcp_data.values()]
    pruned = [x["BS"] for x in c.pruned_rcp_data.values()]
    interp = []
    for bs in bs_list:
        lo = c._find_top_min_rcp(bs, "pruned_rcps")
        hi = c._find_bottom_max_rcp(bs, "pruned_rcps")
        _, rec = c._create_interp_rcp(bs, lo, hi)
        interp.append([bs, float(rec["RCP Mean"]), float(rec["Min Epochs"])])
    out.append({"points": points, "pruned": pruned, "interp": interp})
print(json.dumps(out))
"#;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn rcp_tables_agree_with_the_official_checker() {
    let Some(py) = common::oracle("rcp_tables_agree_with_the_official_checker") else {
        return;
    };
    let mut tables = Vec::new();
    for (bench, runs) in [("resnet", 5usize), ("bert", 10)] {
        for ruleset in rcp::rulesets(bench) {
            tables.push((RcpTable::load(bench, ruleset, runs).unwrap(), runs));
        }
    }
    // One official run for all tables; interpolate halfway between neighbouring pruned points.
    let spec: Vec<serde_json::Value> = tables
        .iter()
        .map(|(t, _)| {
            let mids: Vec<f64> = t
                .pruned
                .windows(2)
                .map(|w| ((w[0].batch_size + w[1].batch_size) / 2.0).floor())
                .collect();
            serde_json::json!([t.benchmark, t.ruleset, mids])
        })
        .collect();
    let spec = serde_json::to_string(&spec).unwrap();
    let out = Command::new(&py)
        .args(["-c", PROBE, &spec])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut checked = 0;
    for ((ours, runs), v) in tables.iter().zip(all.as_array().unwrap()) {
        let (bench, ruleset) = (&ours.benchmark, &ours.ruleset);
        let points = v["points"].as_array().unwrap();
        assert_eq!(points.len(), ours.points.len(), "{bench} {ruleset}");
        for (o, p) in points.iter().zip(&ours.points) {
            let o: Vec<f64> = o
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert_eq!(o[0], p.batch_size, "{bench} {ruleset}");
            assert!(
                close(o[1], p.mean) && close(o[2], p.stdev),
                "{bench} {ruleset} {}: {o:?} vs {p:?}",
                p.name
            );
            // The binary search stops within 1e-4; both sides take the same steps.
            assert!(
                (o[3] - p.min_mean).abs() < 1e-6 * o[3].max(1.0),
                "{bench} {ruleset} {}: min {o:?} vs {p:?}",
                p.name
            );
            checked += 1;
        }
        let pruned: Vec<f64> = v["pruned"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let ours_pruned: Vec<f64> = ours.pruned.iter().map(|p| p.batch_size).collect();
        assert_eq!(pruned, ours_pruned, "{bench} {ruleset} pruned points");
        for o in v["interp"].as_array().unwrap() {
            let o: Vec<f64> = o
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let c = ours.check(o[0], &vec![Some(1e12); *runs]);
            let r = c.reference.unwrap();
            assert!(
                close(o[1], r.mean),
                "{bench} {ruleset} interp {}: {o:?} vs {r:?}",
                o[0]
            );
            assert!(
                (o[2] - r.min_mean).abs() < 1e-6 * o[2].max(1.0),
                "{bench} {ruleset} interp {}: {o:?} vs {r:?}",
                o[0]
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "compared {checked} points");
}
