//! What `plan` knows about the hardware and the models, as tables: the GPUs (memory, the
//! NVLink generation and network of the nodes they usually come in), the interconnects (the
//! bus bandwidth an NCCL ring reaches per GPU), and per benchmark the costs that set the step
//! time and the per-GPU memory limit. Every value is an estimate with its source in
//! docs/planning.md; each can be overridden by a flag of `plan`.

use anyhow::{bail, Result};

/// One GPU model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    /// What `--gpu` takes (case-insensitive), and what the written configs record.
    pub name: &'static str,
    /// Other spellings: nvidia-smi's names contain one of them.
    pub aliases: &'static [&'static str],
    /// Memory per GPU, GiB.
    pub memory_gib: f64,
    /// The NVLink generation of its usual 8-GPU node (a key of [`LINKS`]).
    pub intra: &'static str,
    /// The network per GPU of its usual cluster (a key of [`LINKS`]).
    pub inter: &'static str,
}

/// The GPUs `--gpu` knows.
pub const GPUS: &[Gpu] = &[
    Gpu {
        name: "H100-SXM-80GB",
        aliases: &["h100", "h100-sxm", "h100 80gb hbm3"],
        memory_gib: 80.0,
        intra: "nvlink4",
        inter: "ndr",
    },
    Gpu {
        name: "H200-SXM-141GB",
        aliases: &["h200"],
        memory_gib: 141.0,
        intra: "nvlink4",
        inter: "ndr",
    },
    Gpu {
        name: "A100-SXM-80GB",
        aliases: &["a100", "a100-80gb", "a100-sxm4-80gb"],
        memory_gib: 80.0,
        intra: "nvlink3",
        inter: "hdr",
    },
    Gpu {
        name: "A100-SXM-40GB",
        aliases: &["a100-40gb", "a100-sxm4-40gb"],
        memory_gib: 40.0,
        intra: "nvlink3",
        inter: "hdr",
    },
    Gpu {
        name: "B200-180GB",
        aliases: &["b200"],
        memory_gib: 180.0,
        intra: "nvlink5",
        inter: "xdr",
    },
];

/// An interconnect: the bus bandwidth per GPU an NCCL ring reaches on it, GB/s (10^9 bytes),
/// and the latency of one hop, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub name: &'static str,
    pub what: &'static str,
    pub gbytes_per_s: f64,
    pub latency_us: f64,
}

/// The links `--intra` and `--inter` take by name (or a number: GB/s per GPU).
pub const LINKS: &[Link] = &[
    Link {
        name: "nvlink3",
        what: "NVLink 3 (A100, 600 GB/s total per GPU)",
        gbytes_per_s: 230.0,
        latency_us: 10.0,
    },
    Link {
        name: "nvlink4",
        what: "NVLink 4 (H100/H200, 900 GB/s total per GPU)",
        gbytes_per_s: 360.0,
        latency_us: 10.0,
    },
    Link {
        name: "nvlink5",
        what: "NVLink 5 (B200, 1.8 TB/s total per GPU)",
        gbytes_per_s: 720.0,
        latency_us: 10.0,
    },
    Link {
        name: "pcie4",
        what: "PCIe 4.0 x16, no NVLink",
        gbytes_per_s: 20.0,
        latency_us: 15.0,
    },
    Link {
        name: "pcie5",
        what: "PCIe 5.0 x16, no NVLink",
        gbytes_per_s: 40.0,
        latency_us: 15.0,
    },
    Link {
        name: "hdr",
        what: "InfiniBand HDR, 200 Gb/s per GPU",
        gbytes_per_s: 22.0,
        latency_us: 20.0,
    },
    Link {
        name: "ndr",
        what: "InfiniBand NDR, 400 Gb/s per GPU",
        gbytes_per_s: 45.0,
        latency_us: 20.0,
    },
    Link {
        name: "xdr",
        what: "InfiniBand XDR, 800 Gb/s per GPU",
        gbytes_per_s: 90.0,
        latency_us: 20.0,
    },
    Link {
        name: "eth100",
        what: "100 Gb/s Ethernet (RoCE) per GPU",
        gbytes_per_s: 11.0,
        latency_us: 30.0,
    },
];

/// What sets one benchmark's step time and memory use beyond its measured throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelCost {
    pub benchmark: &'static str,
    /// Trainable parameters (the gradients all-reduced each step).
    pub parameters: f64,
    /// Bytes per gradient element on the wire (fp16/bf16 gradients: 2).
    pub grad_bytes: f64,
    /// Seconds of a step that do not shrink with the per-GPU batch: kernel launches and
    /// latency-bound kernels of a CUDA-graphed step, the optimizer (the per-GPU batch effect).
    pub step_overhead_s: f64,
    /// Share of a step's compute that the gradient all-reduce can run under (the backward's
    /// bucketed reduction); the rest of the all-reduce is exposed.
    pub overlap: f64,
    /// GPU memory that does not grow with the batch: weights, optimizer state, workspace, GiB.
    pub fixed_gib: f64,
    /// GPU memory per sample of the per-GPU batch (per 512-token packed row for BERT), GiB.
    pub per_sample_gib: f64,
    /// The per-GPU batch beyond which the measured rate no longer grows (ResNet: NVIDIA's 400
    /// images per H100; BERT: 48 packed rows); plan does not pick batches above twice this.
    pub saturating_batch: u64,
}

/// The benchmarks' costs (docs/planning.md says where each number comes from).
pub const MODELS: &[ModelCost] = &[
    ModelCost {
        benchmark: "resnet",
        parameters: 25_557_032.0,
        grad_bytes: 2.0,
        step_overhead_s: 3.5e-3,
        overlap: 0.5,
        fixed_gib: 6.0,
        per_sample_gib: 0.15,
        saturating_batch: 400,
    },
    ModelCost {
        benchmark: "bert",
        parameters: 335_174_458.0,
        grad_bytes: 2.0,
        step_overhead_s: 5.0e-3,
        overlap: 0.0,
        fixed_gib: 8.0,
        per_sample_gib: 1.0,
        saturating_batch: 48,
    },
];

impl ModelCost {
    /// The costs of `benchmark`.
    pub fn of(benchmark: &str) -> Result<ModelCost> {
        match MODELS.iter().find(|m| m.benchmark == benchmark) {
            Some(m) => Ok(*m),
            None => bail!("no model costs for benchmark {benchmark:?} (known: resnet, bert)"),
        }
    }

    /// The largest per-GPU micro-batch (samples, or BERT packed rows) that fits `memory_gib`.
    pub fn max_micro_batch(&self, memory_gib: f64) -> u64 {
        ((memory_gib - self.fixed_gib) / self.per_sample_gib)
            .floor()
            .max(0.0) as u64
    }

    /// Bytes all-reduced per step.
    pub fn gradient_bytes(&self) -> f64 {
        self.parameters * self.grad_bytes
    }
}

/// The GPU `name` names (its name or an alias, case-insensitive; nvidia-smi's model names
/// match by their alias, "NVIDIA H100 80GB HBM3" is the H100).
pub fn gpu(name: &str) -> Result<Gpu> {
    let n = name.to_ascii_lowercase();
    if let Some(g) = GPUS.iter().find(|g| g.name.to_ascii_lowercase() == n) {
        return Ok(*g);
    }
    if let Some(g) = GPUS.iter().find(|g| g.aliases.contains(&n.as_str())) {
        return Ok(*g);
    }
    // nvidia-smi names: the most specific alias contained in the name
    let mut best: Option<(&Gpu, usize)> = None;
    for g in GPUS {
        for a in g.aliases {
            if n.contains(a) && best.is_none_or(|(_, l)| a.len() > l) {
                best = Some((g, a.len()));
            }
        }
    }
    match best {
        Some((g, _)) => Ok(*g),
        None => bail!(
            "--gpu {name:?}: unknown GPU (known: {}); give --gpu-memory-gib and the links \
             (--intra, --inter) for another",
            GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The link `spec` names: a name of [`LINKS`] or a bandwidth in GB/s per GPU.
pub fn link(spec: &str, flag: &str) -> Result<Link> {
    if let Some(l) = LINKS.iter().find(|l| l.name.eq_ignore_ascii_case(spec)) {
        return Ok(*l);
    }
    match spec.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Link {
            name: "custom",
            what: "given by hand",
            gbytes_per_s: v,
            latency_us: 20.0,
        }),
        _ => bail!(
            "{flag} {spec:?}: give a link name ({}) or a bandwidth in GB/s per GPU (> 0)",
            LINKS.iter().map(|l| l.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A per-GPU rate to plan with when nothing was measured: the record holders' closed results
/// (NVIDIA's logs, mlperf-facts section 11), at their per-GPU batch. Not this machine's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReferenceRate {
    pub gpu: &'static str,
    pub benchmark: &'static str,
    /// Training samples per second per GPU.
    pub rate: f64,
    /// The per-GPU batch (samples) it was measured at.
    pub batch: f64,
    pub source: &'static str,
}

pub const REFERENCE_RATES: &[ReferenceRate] = &[
    ReferenceRate {
        gpu: "H100-SXM-80GB",
        benchmark: "resnet",
        rate: 7160.0,
        batch: 400.0,
        source: "NVIDIA v4.0 eos_ngc24.04_mxnet, 8xH100",
    },
    ReferenceRate {
        gpu: "H100-SXM-80GB",
        benchmark: "bert",
        rate: 970.0,
        batch: 96.0,
        source: "NVIDIA v3.0 dgxh100_ngc23.04_pytorch, 8xH100",
    },
    ReferenceRate {
        gpu: "H200-SXM-141GB",
        benchmark: "resnet",
        rate: 7770.0,
        batch: 400.0,
        source: "NVIDIA v4.0 h200_ngc24.04_mxnet, 8xH200",
    },
    ReferenceRate {
        gpu: "H200-SXM-141GB",
        benchmark: "bert",
        rate: 1020.0,
        batch: 96.0,
        source: "v4.1 Supermicro / v5.0 HPE 8xH200",
    },
    ReferenceRate {
        gpu: "A100-SXM-80GB",
        benchmark: "resnet",
        rate: 3400.0,
        batch: 408.0,
        source: "NVIDIA v2.0 dgxa100_ngc22.04_mxnet, 8xA100",
    },
    ReferenceRate {
        gpu: "A100-SXM-80GB",
        benchmark: "bert",
        rate: 300.0,
        batch: 56.0,
        source: "NVIDIA v2.0 8xA100",
    },
];

/// The reference rate of `gpu` for `benchmark`, if one is known.
pub fn reference_rate(gpu: &str, benchmark: &str) -> Option<ReferenceRate> {
    REFERENCE_RATES
        .iter()
        .find(|r| r.gpu == gpu && r.benchmark == benchmark)
        .copied()
}
