//! The time-to-train model of `plan`:
//!
//! ```text
//! step      = k x (overhead + micro-batch / r_inf)            compute, k micro-batches
//!           + max(0, allreduce - overlap x compute)            the exposed all-reduce
//! allreduce = ring over the node's NVLink (N <= G), else reduce-scatter in the node,
//!             a ring over the nodes' network of 1/G of the gradients, all-gather in the node,
//!             plus one hop latency per ring step (log2 of the nodes across the network)
//! train     = ceil(samples to converge / global batch) x step
//! evals     = samples to converge / eval interval,  each  measured eval x N_m / N
//! minutes   = (start-up + warm-up x N_m / N + train + evals) / 60
//! ```
//!
//! r_inf, the per-GPU rate of an endless micro-batch, comes from the measured per-GPU rate r_m
//! at micro-batch b_m on N_m GPUs: b_m / r_m = overhead + b_m / r_inf + exposed(N_m). The
//! samples to converge are the RCP mean at the global batch (interpolated as the RCP checker
//! does), the band its mean +- one standard deviation.

use super::hardware::{Link, ModelCost};

/// The cluster: GPUs per node and the two links.
#[derive(Debug, Clone, Copy)]
pub struct Cluster {
    pub gpus_per_node: u64,
    pub intra: Link,
    pub inter: Link,
}

impl Cluster {
    /// Seconds of one all-reduce of `bytes` over `n` GPUs.
    pub fn allreduce_s(&self, bytes: f64, n: u64) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let g = self.gpus_per_node.max(1);
        let bw_intra = self.intra.gbytes_per_s * 1e9;
        let lat_intra = self.intra.latency_us * 1e-6;
        if n <= g {
            let nf = n as f64;
            return 2.0 * (nf - 1.0) / nf * bytes / bw_intra + 2.0 * (nf - 1.0) * lat_intra;
        }
        let gf = g as f64;
        let nodes = n.div_ceil(g) as f64;
        let in_node = 2.0 * (gf - 1.0) / gf * bytes / bw_intra + 2.0 * (gf - 1.0) * lat_intra;
        let across = 2.0 * (nodes - 1.0) / nodes * (bytes / gf) / (self.inter.gbytes_per_s * 1e9)
            + 2.0 * nodes.log2() * self.inter.latency_us * 1e-6;
        in_node + across
    }
}

/// The model's costs as the projection uses them; `control()` drops the all-reduce and the
/// per-step overhead (perfectly linear scaling of the measured per-GPU rate).
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    pub model: ModelCost,
    pub with_allreduce: bool,
    pub with_batch_effect: bool,
}

impl Costs {
    pub fn full(model: ModelCost) -> Costs {
        Costs {
            model,
            with_allreduce: true,
            with_batch_effect: true,
        }
    }

    /// The control: no all-reduce term, no per-GPU batch effect.
    pub fn control(model: ModelCost) -> Costs {
        Costs {
            model,
            with_allreduce: false,
            with_batch_effect: false,
        }
    }

    fn overhead(&self) -> f64 {
        if self.with_batch_effect {
            self.model.step_overhead_s
        } else {
            0.0
        }
    }
}

/// One step's time, seconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepTime {
    pub compute_s: f64,
    pub allreduce_s: f64,
    pub exposed_s: f64,
    pub total_s: f64,
}

/// The step of `accum` micro-batches of `micro` samples per GPU on `n` GPUs.
pub fn step_time(
    costs: &Costs,
    cluster: &Cluster,
    r_inf: f64,
    micro: f64,
    accum: u64,
    n: u64,
) -> StepTime {
    let compute_s = accum.max(1) as f64 * (costs.overhead() + micro / r_inf);
    let allreduce_s = if costs.with_allreduce {
        cluster.allreduce_s(costs.model.gradient_bytes(), n)
    } else {
        0.0
    };
    let exposed_s = (allreduce_s - costs.model.overlap * compute_s).max(0.0);
    StepTime {
        compute_s,
        allreduce_s,
        exposed_s,
        total_s: compute_s + exposed_s,
    }
}

/// What a short run (or a result) measured on `gpus` GPUs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Measured {
    /// Training samples per second per GPU (steady: without the first epoch or block).
    pub per_gpu_rate: f64,
    /// Samples per GPU per micro-batch of that run.
    pub micro_batch: f64,
    /// Micro-batches per step.
    pub accum: u64,
    pub gpus: u64,
    /// Seconds of one eval of the full eval set on `gpus` GPUs (0: the evals are in the rate).
    pub eval_s: f64,
    /// Seconds from run_start to the first training step.
    pub startup_s: f64,
    /// Seconds the run took beyond its steady pace (the first pass over the data): scaled by
    /// gpus / N, each GPU reads its share of the data once.
    pub warmup_s: f64,
}

impl Measured {
    /// r_inf: the per-GPU rate of an endless micro-batch that explains the measured rate.
    pub fn r_inf(&self, costs: &Costs, cluster: &Cluster) -> Result<f64, String> {
        let per_step = self.micro_batch * self.accum as f64 / self.per_gpu_rate;
        // the exposed all-reduce depends on the compute: a few fixed-point rounds settle it
        let mut r = self.per_gpu_rate;
        for _ in 0..60 {
            let st = step_time(costs, cluster, r, self.micro_batch, self.accum, self.gpus);
            let left = per_step - st.exposed_s - self.accum as f64 * costs.overhead();
            if left <= 0.0 {
                return Err(format!(
                    "the measured rate ({:.1} samples/s per GPU at micro-batch {}) is faster \
                     than the step overhead and all-reduce allow: check --rate and the links",
                    self.per_gpu_rate, self.micro_batch
                ));
            }
            r = self.micro_batch * self.accum as f64 / left;
        }
        Ok(r)
    }
}

/// The convergence of a global batch: the RCP mean and its band, in samples.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Convergence {
    /// The RCP point (or its interpolation) used.
    pub rcp: String,
    pub mean_samples: f64,
    pub low_samples: f64,
    pub high_samples: f64,
    /// Samples between evals at the closed cadence.
    pub eval_interval_samples: f64,
}

/// One projected configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Projection {
    pub gpus: u64,
    pub global_batch: u64,
    /// Samples per GPU per micro-batch.
    pub micro_batch: f64,
    pub accum: u64,
    pub step: StepTime,
    pub evals: f64,
    pub eval_s: f64,
    pub startup_s: f64,
    pub minutes: f64,
    pub minutes_low: f64,
    pub minutes_high: f64,
    /// Training samples per second per GPU at this size.
    pub per_gpu_rate: f64,
    /// per_gpu_rate over the measured one.
    pub efficiency: f64,
}

/// Project `m` to `gpus` GPUs at global batch `gbs` (in `accum` micro-batches) converging as
/// `conv` says.
pub fn project(
    m: &Measured,
    costs: &Costs,
    cluster: &Cluster,
    gpus: u64,
    gbs: u64,
    accum: u64,
    conv: &Convergence,
) -> Result<Projection, String> {
    if gpus == 0 || gbs < gpus {
        return Err(format!("global batch {gbs} cannot spread over {gpus} GPUs"));
    }
    let r_inf = m.r_inf(costs, cluster)?;
    let micro = gbs as f64 / gpus as f64 / accum.max(1) as f64;
    let step = step_time(costs, cluster, r_inf, micro, accum, gpus);
    let scale = m.gpus as f64 / gpus as f64;
    let eval_s = m.eval_s * scale;
    let startup_s = m.startup_s + m.warmup_s * scale;
    let minutes_at = |samples: f64| {
        let steps = (samples / gbs as f64).ceil();
        let evals = samples / conv.eval_interval_samples;
        (startup_s + steps * step.total_s + evals * eval_s) / 60.0
    };
    let per_gpu_rate = gbs as f64 / gpus as f64 / step.total_s;
    Ok(Projection {
        gpus,
        global_batch: gbs,
        micro_batch: micro,
        accum,
        step,
        evals: conv.mean_samples / conv.eval_interval_samples,
        eval_s,
        startup_s,
        minutes: minutes_at(conv.mean_samples),
        minutes_low: minutes_at(conv.low_samples),
        minutes_high: minutes_at(conv.high_samples),
        per_gpu_rate,
        efficiency: per_gpu_rate / m.per_gpu_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::hardware::{link, ModelCost};

    fn cluster() -> Cluster {
        Cluster {
            gpus_per_node: 8,
            intra: link("nvlink4", "--intra").unwrap(),
            inter: link("ndr", "--inter").unwrap(),
        }
    }

    fn measured() -> Measured {
        Measured {
            per_gpu_rate: 7000.0,
            micro_batch: 400.0,
            accum: 1,
            gpus: 8,
            eval_s: 0.4,
            startup_s: 1.0,
            warmup_s: 8.0,
        }
    }

    fn conv() -> Convergence {
        Convergence {
            rcp: "t".into(),
            mean_samples: 35.0 * 1_281_167.0,
            low_samples: 34.0 * 1_281_167.0,
            high_samples: 36.0 * 1_281_167.0,
            eval_interval_samples: 4.0 * 1_281_167.0,
        }
    }

    #[test]
    fn allreduce_grows_across_nodes_and_is_zero_alone() {
        let c = cluster();
        assert_eq!(c.allreduce_s(5e7, 1), 0.0);
        let one_node = c.allreduce_s(5e7, 8);
        let two = c.allreduce_s(5e7, 16);
        assert!(two > one_node, "{two} > {one_node}");
        assert!(c.allreduce_s(5e7, 1024) > two);
    }

    #[test]
    fn projecting_the_measured_size_gives_the_measured_rate() {
        let m = measured();
        let costs = Costs::full(ModelCost::of("resnet").unwrap());
        let p = project(&m, &costs, &cluster(), 8, 3200, 1, &conv()).unwrap();
        assert!((p.per_gpu_rate - 7000.0).abs() < 1.0, "{}", p.per_gpu_rate);
        assert!(p.minutes_low < p.minutes && p.minutes < p.minutes_high);
    }

    #[test]
    fn smaller_per_gpu_batches_lose_rate_and_the_control_does_not() {
        let m = measured();
        let model = ModelCost::of("resnet").unwrap();
        let full = project(&m, &Costs::full(model), &cluster(), 64, 3200, 1, &conv()).unwrap();
        let ctrl = project(&m, &Costs::control(model), &cluster(), 64, 3200, 1, &conv()).unwrap();
        assert!(full.efficiency < 0.9, "{}", full.efficiency);
        assert!((ctrl.efficiency - 1.0).abs() < 1e-9);
        assert!(full.minutes > ctrl.minutes);
    }

    #[test]
    fn a_rate_the_overhead_cannot_explain_is_an_error() {
        let mut m = measured();
        m.micro_batch = 1.0;
        m.per_gpu_rate = 1e6;
        let costs = Costs::full(ModelCost::of("resnet").unwrap());
        assert!(project(&m, &costs, &cluster(), 16, 16, 1, &conv()).is_err());
    }
}
