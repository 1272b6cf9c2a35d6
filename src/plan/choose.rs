//! Per GPU count: the global batch from the round's RCP table and the closed hyperparameters
//! that go with it. Every reference point of the table is a candidate: its batch size rounded
//! down to a whole per-GPU batch (BERT: whole packed rows), split into micro-batches that fit
//! the per-GPU memory limit; the candidate with the shortest projected time to train wins.
//! The hyperparameters are the point's own (the reference runs that converged at that batch).

use super::hardware::ModelCost;
use super::model::{project, Cluster, Convergence, Costs, Measured, Projection};
use crate::benchmarks::{Benchmark, ConvergenceUnit};
use crate::score::rcp::RcpTable;
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

/// One reference point of the RCP file: its batch size and hyperparameters.
#[derive(Debug, Clone)]
pub struct RefPoint {
    pub name: String,
    pub batch_size: u64,
    pub hyperparams: Map<String, Value>,
}

/// The round's RCP table, with the points' hyperparameters.
pub struct Round {
    pub name: String,
    pub table: RcpTable,
    pub points: Vec<RefPoint>,
}

impl Round {
    /// The RCP table of `bench` at `round`.
    pub fn load(bench: &Benchmark, round: &str) -> Result<Round> {
        let r = bench.round(round).with_context(|| {
            format!(
                "--round {round}: {} has no such round (known: {})",
                bench.name,
                bench.round_names().join(", ")
            )
        })?;
        let (text, origin) = crate::benchmarks::rcp_text(bench, r)?;
        let table = RcpTable::from_json(&text, &bench.name, round, bench.runs)
            .with_context(|| format!("invalid RCP table {origin}"))?;
        let raw: Value = serde_json::from_str(&text).with_context(|| origin.clone())?;
        let mut points = Vec::new();
        for (name, rec) in raw.as_object().into_iter().flatten() {
            let bs = rec.get("BS").and_then(Value::as_f64);
            let hp = rec.get("Hyperparams").and_then(Value::as_object);
            if let (Some(bs), Some(hp)) = (bs, hp) {
                points.push(RefPoint {
                    name: name.clone(),
                    batch_size: bs as u64,
                    hyperparams: hp.clone(),
                });
            }
        }
        points.sort_by_key(|p| p.batch_size);
        Ok(Round {
            name: round.into(),
            table,
            points,
        })
    }

    /// The convergence of global batch `gbs`: the RCP mean (interpolated as the checker does)
    /// and mean +- one standard deviation, in samples; None above the largest point.
    pub fn convergence(&self, bench: &Benchmark, gbs: u64) -> Option<Convergence> {
        let (point, _) = self.table.reference(gbs as f64).ok()?;
        let (per_unit, interval) = match bench.convergence_unit {
            ConvergenceUnit::Epochs => {
                let n = bench.train_samples? as f64;
                (n, bench.eval.every_epochs? as f64 * n)
            }
            ConvergenceUnit::Samples => (1.0, bench.eval_interval_samples(gbs)? as f64),
        };
        Some(Convergence {
            rcp: point.name.clone(),
            mean_samples: point.mean * per_unit,
            low_samples: (point.mean - point.stdev).max(point.min_mean) * per_unit,
            high_samples: (point.mean + point.stdev) * per_unit,
            eval_interval_samples: interval,
        })
    }
}

/// What the plan needs to pick.
pub struct Inputs<'a> {
    pub bench: &'a Benchmark,
    pub round: &'a Round,
    pub measured: Measured,
    pub costs: Costs,
    pub cluster: Cluster,
    pub memory_gib: f64,
    /// Samples per packed row (BERT packing); 1 for ResNet.
    pub samples_per_row: u64,
}

/// One count's choice.
#[derive(Debug, Clone)]
pub struct Choice {
    pub point: RefPoint,
    pub projection: Projection,
    pub convergence: Convergence,
}

/// The micro-batch split of `rows` per GPU under `limit`: the fewest micro-batches of equal size.
fn split(rows: u64, limit: u64) -> Option<u64> {
    (1..=rows).find(|k| rows.is_multiple_of(*k) && rows / k <= limit)
}

/// The per-GPU micro-batch limit (rows): the memory's, and at most twice the saturating batch.
pub fn micro_limit(model: &ModelCost, memory_gib: f64) -> u64 {
    model
        .max_micro_batch(memory_gib)
        .min(2 * model.saturating_batch)
}

/// The best candidate for `gpus`, or an error saying why none fits.
pub fn choose(inp: &Inputs, gpus: u64) -> Result<Choice> {
    let limit = micro_limit(&inp.costs.model, inp.memory_gib);
    if limit == 0 {
        bail!(
            "{} GiB per GPU holds no {} sample (the model's fixed {} GiB): give a GPU with \
             more memory (--gpu-memory-gib)",
            inp.memory_gib,
            inp.bench.name,
            inp.costs.model.fixed_gib
        );
    }
    let mut best: Option<Choice> = None;
    for p in &inp.round.points {
        let rows = p.batch_size / (gpus * inp.samples_per_row);
        let Some(accum) = (rows > 0).then(|| split(rows, limit)).flatten() else {
            continue;
        };
        let gbs = rows * gpus * inp.samples_per_row;
        let Some(conv) = inp.round.convergence(inp.bench, gbs) else {
            continue;
        };
        let proj = project(
            &inp.measured,
            &inp.costs,
            &inp.cluster,
            gpus,
            gbs,
            accum,
            &conv,
        )
        .map_err(anyhow::Error::msg)?;
        if best
            .as_ref()
            .is_none_or(|b| proj.minutes < b.projection.minutes)
        {
            best = Some(Choice {
                point: p.clone(),
                projection: proj,
                convergence: conv,
            });
        }
    }
    best.with_context(|| {
        format!(
            "{gpus} GPUs: no reference point of the {} {} RCP table gives every GPU a batch \
             (the largest is {}): use fewer GPUs",
            inp.bench.name,
            inp.round.name,
            inp.round.points.last().map_or(0, |p| p.batch_size)
        )
    })
}

/// A hyperparameter of the point as a number.
pub fn hp(point: &RefPoint, key: &str) -> Result<f64> {
    point
        .hyperparams
        .get(key)
        .and_then(Value::as_f64)
        .with_context(|| format!("RCP point {} has no numeric {key}", point.name))
}
