//! `mlperf-run plan`: closed configs for N GPUs and their projected time to train.
//!
//! For each GPU count: the global batch and hyperparameters of one of the round's reference
//! convergence points ([`choose`]), written as a closed config that `resnet`/`bert` accept as
//! it is ([`mod@write`]), and the time to train projected from a measured per-GPU rate with the
//! per-GPU batch effect, the exposed gradient all-reduce and the evals ([`model`]); a table
//! and an SVG plot ([`render`]). docs/planning.md describes the model and its check against
//! published results.

pub mod choose;
pub mod given;
pub mod hardware;
pub mod measure;
pub mod model;
pub mod render;
pub mod write;

use crate::util::ExitStatus;
use anyhow::{bail, Context, Result};
use choose::{Choice, Inputs, Round};
use hardware::{Gpu, ModelCost};
use model::{Cluster, Costs, Measured};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// The benchmark: resnet or bert.
    pub benchmark: String,
    /// GPU counts to plan for, e.g. 8,16,64,256.
    #[arg(long, value_delimiter = ',', default_value = "8,16,64,256")]
    pub gpus: Vec<u64>,
    /// GPU model (H100-SXM-80GB, H200-SXM-141GB, A100-SXM-80GB, A100-SXM-40GB, B200-180GB; an
    /// nvidia-smi name works too).
    #[arg(long, default_value = "H100-SXM-80GB")]
    pub gpu: String,
    /// Memory per GPU in GiB (default: the GPU model's).
    #[arg(long)]
    pub gpu_memory_gib: Option<f64>,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u64,
    /// Link between the GPUs of a node: nvlink3, nvlink4, nvlink5, pcie4, pcie5, or GB/s per
    /// GPU (default: the GPU model's NVLink).
    #[arg(long)]
    pub intra: Option<String>,
    /// Network between nodes, per GPU: hdr, ndr, xdr, eth100, or GB/s per GPU (default: the
    /// GPU model's usual InfiniBand).
    #[arg(long)]
    pub inter: Option<String>,
    /// Measured training samples per second per GPU (default: the record holders' published
    /// rate for the GPU, said as such).
    #[arg(long, conflicts_with = "from_log")]
    pub rate: Option<f64>,
    /// Per-GPU batch (samples) --rate was measured at (default: the saturating batch).
    #[arg(long, requires = "rate")]
    pub measured_batch: Option<f64>,
    /// Read the per-GPU rate, eval time and start-up from these MLPerf logs of a short run.
    #[arg(long, num_args = 1..)]
    pub from_log: Vec<PathBuf>,
    /// GPUs the --from-log run used (its log's throughput is over all of them). Default: what
    /// the run set's sysinfo.json beside the logs says (nodes x accelerators per node), else 1;
    /// a count that disagrees with it is refused.
    #[arg(long)]
    pub measured_gpus: Option<u64>,
    /// Seconds from run_start to the first step, for --rate.
    #[arg(long, default_value_t = 15.0)]
    pub startup_s: f64,
    /// Override the model's per-step overhead (the per-GPU batch effect), milliseconds.
    #[arg(long)]
    pub step_overhead_ms: Option<f64>,
    /// Measure the per-step overhead instead: MLPerf logs of a short run on as many GPUs as
    /// --from-log's, at another per-GPU batch (the two steady step times give the overhead
    /// and the rate of an endless batch).
    #[arg(long, num_args = 1.., requires = "from_log", conflicts_with = "step_overhead_ms")]
    pub batch_effect_log: Vec<PathBuf>,
    /// Override the share of compute that hides the all-reduce, 0..1.
    #[arg(long)]
    pub overlap: Option<f64>,
    /// The round (ruleset) whose RCP table and rules apply (default: the benchmark's).
    #[arg(long)]
    pub round: Option<String>,
    /// Project this run config as it is (its global batch at every count) instead of choosing
    /// from the RCP table: the samples to converge are the --from-log runs' own.
    #[arg(long, requires = "from_log")]
    pub config: Option<PathBuf>,
    /// Where the configs, the plot and plan.json go.
    #[arg(long, default_value = "runs/plan")]
    pub out: PathBuf,
}

impl PlanArgs {
    /// `plan BENCHMARK` with every flag at its default, as the command line would have it
    /// (clap's defaults above are the only copy).
    pub fn defaults(benchmark: &str) -> Result<PlanArgs> {
        #[derive(clap::Parser)]
        struct Plan {
            #[command(flatten)]
            args: PlanArgs,
        }
        use clap::Parser;
        Ok(Plan::try_parse_from(["plan", benchmark])?.args)
    }
}

/// The GPU, its memory and the cluster of `args`.
fn hardware(args: &PlanArgs) -> Result<(Gpu, f64, Cluster)> {
    let gpu = hardware::gpu(&args.gpu)?;
    let memory = args.gpu_memory_gib.unwrap_or(gpu.memory_gib);
    let cluster = Cluster {
        gpus_per_node: args.gpus_per_node,
        intra: hardware::link(args.intra.as_deref().unwrap_or(gpu.intra), "--intra")?,
        inter: hardware::link(args.inter.as_deref().unwrap_or(gpu.inter), "--inter")?,
    };
    Ok((gpu, memory, cluster))
}

/// The model costs with the overrides of `args`.
fn costs(args: &PlanArgs) -> Result<ModelCost> {
    let mut m = ModelCost::of(&args.benchmark)?;
    if let Some(ms) = args.step_overhead_ms {
        m.step_overhead_s = ms / 1e3;
    }
    if let Some(o) = args.overlap {
        m.overlap = o;
    }
    Ok(m)
}

/// What was measured, and where it comes from.
fn measured(
    args: &PlanArgs,
    bench: &crate::benchmarks::Benchmark,
    gpu: &Gpu,
    m: &ModelCost,
) -> Result<(Measured, String)> {
    if !args.from_log.is_empty() {
        let logs = from_logs(args)?;
        let gpus = measured_gpus(args)?;
        let meas = measure::from_logs(&logs, bench, gpus)
            .map_err(|e| anyhow::anyhow!("--from-log: {e}"))?;
        return Ok((
            meas,
            format!("measured: {} log(s), {gpus} GPU(s)", logs.len()),
        ));
    }
    let (rate, batch, source) = match (args.rate, reference_rate_of(gpu, &bench.name)) {
        (Some(r), _) => {
            let b = args.measured_batch.unwrap_or(m.saturating_batch as f64);
            (
                r,
                b,
                format!("given: {r} samples/s per GPU at per-GPU batch {b}"),
            )
        }
        (None, Some(r)) => (
            r.rate,
            r.batch,
            format!(
            "not measured: the published per-GPU rate of {} ({} samples/s per GPU at batch {}); \
             measure this machine with --from-log",
            r.source, r.rate, r.batch
        ),
        ),
        (None, None) => bail!(
            "no published rate for {} on {}: measure a short run and give --from-log LOG \
             --measured-gpus N, or --rate",
            bench.name,
            gpu.name
        ),
    };
    let eval_s = bench.eval_samples as f64 / (3.0 * rate * 8.0);
    Ok((
        Measured {
            per_gpu_rate: rate,
            micro_batch: batch,
            accum: 1,
            gpus: 8,
            eval_s,
            startup_s: args.startup_s,
            warmup_s: 0.0,
        },
        source,
    ))
}

fn reference_rate_of(gpu: &Gpu, bench: &str) -> Option<hardware::ReferenceRate> {
    hardware::reference_rate(gpu.name, bench)
}

/// The per-step overhead measured by --batch-effect-log against `meas` (seconds), and how it
/// is said; None without those logs.
fn measured_overhead(
    args: &PlanArgs,
    bench: &crate::benchmarks::Benchmark,
    meas: &Measured,
) -> Result<Option<(f64, String)>> {
    if args.batch_effect_log.is_empty() {
        return Ok(None);
    }
    let logs = parse_logs(&args.batch_effect_log, "--batch-effect-log")?;
    // on as many GPUs as --from-log's run (resolved once, into `meas`)
    let other = measure::from_logs(&logs, bench, meas.gpus)
        .map_err(|e| anyhow::anyhow!("--batch-effect-log: {e}"))?;
    let o = measure::step_overhead(meas, &other)
        .map_err(|e| anyhow::anyhow!("--batch-effect-log: {e}"))?;
    let said = format!(
        "; step overhead {:.2} ms, measured at per-GPU batches {} and {}",
        o * 1e3,
        meas.micro_batch,
        other.micro_batch
    );
    Ok(Some((o, said)))
}

/// The GPUs the --from-log run used: --measured-gpus, checked against what the run set's
/// sysinfo.json beside the logs says (nodes x accelerators per node, where it names
/// accelerators); without the flag, that count, else 1.
fn measured_gpus(args: &PlanArgs) -> Result<u64> {
    let mut recorded = None;
    for log in &args.from_log {
        let dir = log.parent().unwrap_or(Path::new("."));
        if let Some((path, desc)) = crate::submission::sysinfo::read_recorded(dir)? {
            let count = |f: &str| desc.get(f).trim().parse::<u64>().ok();
            let n = count("number_of_nodes").zip(count("accelerators_per_node"));
            if let Some(n) = n.map(|(a, b)| a * b).filter(|&n| n > 0) {
                recorded = Some((n, path));
                break;
            }
        }
    }
    match (args.measured_gpus, recorded) {
        (Some(0), _) => bail!("--measured-gpus must be at least 1"),
        (Some(given), Some((n, desc))) if given != n => bail!(
            "--measured-gpus {given}, but {} says the run used {n} GPU(s) (number_of_nodes x \
             accelerators_per_node): give --measured-gpus {n}, or logs of a run on {given}",
            desc.display()
        ),
        (Some(given), _) => Ok(given),
        (None, Some((n, _))) => Ok(n),
        (None, None) => Ok(1),
    }
}

/// The logs of --from-log, parsed.
fn from_logs(args: &PlanArgs) -> Result<Vec<crate::mllog::LogFile>> {
    parse_logs(&args.from_log, "--from-log")
}

/// `paths` (of `flag`) parsed as MLPerf logs with the parser `check` uses: a log with a
/// `:::MLLOG` line that cannot be read is refused naming the file and the line (a value the
/// measure needs could be on it: it said only "no global_batch_size").
fn parse_logs(paths: &[PathBuf], flag: &str) -> Result<Vec<crate::mllog::LogFile>> {
    let parse = |path: &PathBuf| {
        let log = crate::mllog::parse_file(path).with_context(|| flag.to_string())?;
        if let Some(issue) = log.issues.first() {
            bail!(
                "{flag} {}: cannot read this :::MLLOG line: {} (`mlperf-run check {}` lists every \
                 such line): fix or remove the line, or give the log as the run wrote it",
                log.at(issue.line),
                issue.message,
                path.display()
            );
        }
        Ok(log)
    };
    paths.iter().map(parse).collect()
}

/// A finished plan: the rows (choice, config path) and what the rate came from.
pub struct Planned {
    pub rows: Vec<(Choice, String)>,
    pub source: String,
    pub svg: PathBuf,
}

/// A numeric flag of `plan` and the values it takes (docs/planning.md, "Inputs", lists them):
/// wide of anything a machine or a measurement gives, narrow enough that no figure `plan`
/// prints runs to hundreds of digits (`--rate 1e-300` printed step times of 300 digits).
struct Range {
    flag: &'static str,
    /// What the value is, with its unit.
    what: &'static str,
    min: f64,
    max: f64,
    /// The maximum in words, if any (" (a week)").
    max_is: &'static str,
}

impl Range {
    /// Refuses `value` (`shown` as given) outside the range, NaN and infinities included,
    /// naming the flag, the value and the range.
    fn check(&self, value: f64, shown: &dyn std::fmt::Display) -> Result<()> {
        if value >= self.min && value <= self.max {
            return Ok(());
        }
        bail!(
            "{} {shown}: {} must be from {} to {}{}; docs/planning.md (Inputs) gives each flag's \
             range",
            self.flag,
            self.what,
            self.min,
            self.max,
            self.max_is
        );
    }
}

/// Each numeric flag's range (the order of `plan --help`).
const RANGES: [Range; 11] = [
    range("--gpus", "a GPU count", 1.0, 1e6, ""),
    range("--gpu-memory-gib", "the memory per GPU (GiB)", 1.0, 1e4, ""),
    range("--gpus-per-node", "the GPUs per node", 1.0, 4096.0, ""),
    range(
        "--intra",
        "the bandwidth between a node's GPUs (GB/s per GPU)",
        0.01,
        1e5,
        "",
    ),
    range(
        "--inter",
        "the bandwidth between nodes (GB/s per GPU)",
        0.01,
        1e5,
        "",
    ),
    range(
        "--rate",
        "the training samples per second per GPU",
        1e-3,
        1e6,
        "",
    ),
    range(
        "--measured-batch",
        "the per-GPU batch (samples)",
        1.0,
        1e6,
        "",
    ),
    range(
        "--measured-gpus",
        "the GPUs of the measured run",
        1.0,
        1e6,
        "",
    ),
    range(
        "--startup-s",
        "the seconds from run_start to the first step",
        0.0,
        604800.0,
        " (a week)",
    ),
    range(
        "--step-overhead-ms",
        "the per-step overhead (milliseconds)",
        0.0,
        60000.0,
        " (a minute)",
    ),
    range(
        "--overlap",
        "the share of compute that hides the all-reduce",
        0.0,
        1.0,
        "",
    ),
];

const fn range(
    flag: &'static str,
    what: &'static str,
    min: f64,
    max: f64,
    max_is: &'static str,
) -> Range {
    Range {
        flag,
        what,
        min,
        max,
        max_is,
    }
}

/// The range of `flag`, one of [`RANGES`].
fn range_of(flag: &str) -> &'static Range {
    RANGES
        .iter()
        .find(|r| r.flag == flag)
        .unwrap_or_else(|| panic!("no range for {flag}"))
}

/// Every number of the command line in its flag's range ([`RANGES`]), checked here, in one
/// place, before anything is read or planned.
fn check_numbers(args: &PlanArgs) -> Result<()> {
    let float = |flag: &str, v: Option<f64>| match v {
        Some(v) => range_of(flag).check(v, &format!("{v:?}")),
        None => Ok(()),
    };
    let count = |flag: &str, n: u64| range_of(flag).check(n as f64, &n);
    for &n in &args.gpus {
        count("--gpus", n)?;
    }
    count("--gpus-per-node", args.gpus_per_node)?;
    args.measured_gpus
        .map_or(Ok(()), |n| count("--measured-gpus", n))?;
    float("--gpu-memory-gib", args.gpu_memory_gib)?;
    for (flag, spec) in [("--intra", &args.intra), ("--inter", &args.inter)] {
        // a bandwidth in GB/s (a link's name, or anything else, is for hardware::link)
        if let Some((v, spec)) = spec
            .as_deref()
            .and_then(|s| Some((s.parse::<f64>().ok()?, s)))
        {
            range_of(flag).check(v, &spec)?;
        }
    }
    float("--rate", args.rate)?;
    float("--measured-batch", args.measured_batch)?;
    float("--startup-s", Some(args.startup_s))?;
    float("--step-overhead-ms", args.step_overhead_ms)?;
    float("--overlap", args.overlap)
}

/// --gpus: counts of at least 1, each once (a count given twice would be planned and its config
/// written twice); a count above one node fills whole nodes of `per_node` (a submission's
/// system has nodes of one size).
fn check_gpus(gpus: &[u64], per_node: u64) -> Result<()> {
    if gpus.is_empty() {
        bail!("--gpus: give GPU counts of at least 1, e.g. --gpus 8,16,64");
    }
    if let Some(n) = gpus
        .iter()
        .find(|&&n| per_node > 0 && n > per_node && n % per_node != 0)
    {
        bail!(
            "--gpus: {n} GPUs do not fill whole nodes of --gpus-per-node {per_node}: give \
             multiples of {per_node} above one node ({} or {}), or the nodes' real \
             --gpus-per-node",
            n / per_node * per_node,
            n.div_ceil(per_node) * per_node
        );
    }
    if let Some((i, n)) = gpus
        .iter()
        .enumerate()
        .find(|(i, n)| gpus[..*i].contains(n))
    {
        bail!(
            "--gpus: {n} is given twice (as count {} and {}): give each GPU count once",
            gpus[..i].iter().position(|m| m == n).unwrap_or(0) + 1,
            i + 1
        );
    }
    Ok(())
}

/// The --out folder, made if missing; a file in its place is named as such.
fn create_out(out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        bail!(
            "--out {} is a file, not a folder: give a folder for the configs, the plot and \
             plan.json",
            out.display()
        );
    }
    std::fs::create_dir_all(out)
        .with_context(|| format!("--out {}: cannot create it", out.display()))
}

/// Plan `args` and write the configs, the plot and plan.json.
pub fn plan(args: &PlanArgs) -> Result<Planned> {
    let bench = crate::benchmarks::get(&args.benchmark)?;
    check_numbers(args)?;
    check_gpus(&args.gpus, args.gpus_per_node)?;
    let (gpu, memory, cluster) = hardware(args)?;
    let mut model = costs(args)?;
    if let Some(config) = &args.config {
        return plan_given(args, bench, config, model, cluster);
    }
    let round_name = args
        .round
        .clone()
        .unwrap_or_else(|| bench.default_ruleset.clone());
    let round = Round::load(bench, &round_name)?;
    let (meas, mut source) = measured(args, bench, &gpu, &model)?;
    if let Some((o, said)) = measured_overhead(args, bench, &meas)? {
        model.step_overhead_s = o;
        source.push_str(&said);
    }
    let inputs = Inputs {
        bench,
        round: &round,
        measured: meas,
        costs: Costs::full(model),
        cluster,
        memory_gib: memory,
        samples_per_row: if bench.name == "bert" { 2 } else { 1 },
    };
    create_out(&args.out)?;
    let mut rows = Vec::new();
    for &n in &args.gpus {
        let c = choose::choose(&inputs, n)?;
        let path = args.out.join(config_name(&bench.name, n, gpu.name));
        let header = format!(
            "# Written by `mlperf-run plan {}` for {n}x{} ({memory} GiB), round {round_name}.\n\
             # Projected: {:.2} minutes (RCP band {:.2}-{:.2}); per-GPU rate {source}.\n",
            bench.name,
            gpu.name,
            c.projection.minutes,
            c.projection.minutes_low,
            c.projection.minutes_high
        );
        let text = write::config_text(&c, bench, gpu.name, &round_name, &header)?;
        crate::util::fs::write_atomic(&path, text.as_bytes())?;
        rows.push((c, path.display().to_string()));
    }
    let title = format!("{} on {}, round {round_name}", bench.name, gpu.name);
    finish(args, &bench.name, &title, rows, source)
}

/// Write the plot and plan.json of `rows` under --out.
fn finish(
    args: &PlanArgs,
    benchmark: &str,
    title: &str,
    rows: Vec<(Choice, String)>,
    source: String,
) -> Result<Planned> {
    let svg = args.out.join(format!("{benchmark}_plan.svg"));
    crate::util::fs::write_atomic(&svg, render::svg(title, &rows)?.as_bytes())?;
    let json: Vec<_> = rows.iter().map(|(c, p)| serde_json::json!({
        "config": p, "rcp_point": c.point.name, "convergence": c.convergence, "projection": c.projection,
    })).collect();
    let json_path = args.out.join(format!("{benchmark}_plan.json"));
    crate::util::fs::write_atomic(&json_path, serde_json::to_string_pretty(&json)?.as_bytes())?;
    Ok(Planned { rows, source, svg })
}

/// `plan --config`: `config` as it is at each count of --gpus, converging as the --from-log
/// runs did ([`given`]). The per-step overhead is 0 unless --step-overhead-ms gives it: the
/// benchmark's full-size figure says nothing of a config's own model.
fn plan_given(
    args: &PlanArgs,
    bench: &crate::benchmarks::Benchmark,
    config: &Path,
    cost: ModelCost,
    cluster: Cluster,
) -> Result<Planned> {
    // its errors name the file (and the line)
    let given = given::read(&bench.name, config)?;
    let logs = from_logs(args)?;
    let gpus = measured_gpus(args)?;
    let meas =
        measure::from_logs(&logs, bench, gpus).map_err(|e| anyhow::anyhow!("--from-log: {e}"))?;
    let conv = measure::convergence_from_logs(&logs, bench)
        .map_err(|e| anyhow::anyhow!("--from-log: {e}"))?;
    let logged = meas.micro_batch * meas.accum as f64 * meas.gpus as f64;
    if (logged - given.global_batch as f64).abs() > 0.5 {
        bail!(
            "--from-log: the runs were measured at global batch {logged}, {} has {}: their \
             convergence says nothing about this batch; measure runs of this config",
            config.display(),
            given.global_batch
        );
    }
    let (overhead, said) = match measured_overhead(args, bench, &meas)? {
        Some((o, said)) => (o, said),
        None => (args.step_overhead_ms.unwrap_or(0.0) / 1e3, String::new()),
    };
    let costs = Costs::full(given.costs(cost, overhead));
    create_out(&args.out)?;
    let mut rows = Vec::new();
    for &n in &args.gpus {
        if !given.fits(n) {
            bail!(
                "--gpus {n}: {} cannot share its global batch ({} in {} micro-batches) over {n} \
                 processes: give counts that divide it",
                config.display(),
                given.global_batch,
                given.accum
            );
        }
        let projection = model::project(
            &meas,
            &costs,
            &cluster,
            n,
            given.global_batch,
            given.accum,
            &conv,
        )
        .map_err(anyhow::Error::msg)?;
        let point = choose::RefPoint {
            name: conv.rcp.clone(),
            batch_size: given.global_batch,
            hyperparams: Default::default(),
        };
        rows.push((
            Choice {
                point,
                projection,
                convergence: conv.clone(),
            },
            config.display().to_string(),
        ));
    }
    let source = format!(
        "measured: {} log(s), {gpus} process(es); model {:.0} parameters, fp32 gradients{said}",
        logs.len(),
        given.parameters
    );
    let title = format!("{} as {}", bench.name, config.display());
    finish(args, &bench.name, &title, rows, source)
}

/// The file name of a planned config.
pub fn config_name(benchmark: &str, gpus: u64, gpu: &str) -> String {
    format!("{benchmark}_closed_{gpus}x{gpu}.toml")
}

/// `mlperf-run plan`.
pub fn run_plan(args: PlanArgs) -> Result<ExitStatus> {
    let planned = plan(&args)?;
    let mut out = format!("per-GPU rate: {}\n", planned.source);
    out.push_str(&render::table(&planned.rows));
    out.push_str(&format!("plot: {}\n", planned.svg.display()));
    crate::util::output::print(&out)?;
    Ok(ExitStatus::Success)
}

/// The config `plan` writes for this machine's `gpus` x `gpu_name` into `out` (one count).
pub fn plan_for_machine(
    benchmark: &str,
    gpus: u64,
    gpu_name: &str,
    memory_gib: Option<f64>,
    out: &Path,
) -> Result<PathBuf> {
    let args = PlanArgs {
        gpus: vec![gpus],
        gpu: gpu_name.into(),
        gpu_memory_gib: memory_gib,
        gpus_per_node: gpus.max(1), // this machine: one node with all of its GPUs
        out: out.to_path_buf(),
        ..PlanArgs::defaults(benchmark)?
    };
    let planned = plan(&args)?;
    Ok(PathBuf::from(&planned.rows[0].1))
}

#[cfg(test)]
mod tests {
    /// The config for "this machine" plans one node holding all of its GPUs, however many: a
    /// 12-GPU machine is not refused as 1.5 nodes of 8.
    #[test]
    fn this_machine_is_one_node_of_all_its_gpus() {
        let dir = tempfile::tempdir().unwrap();
        for gpus in [1, 8, 12] {
            let config = super::plan_for_machine("resnet", gpus, "H100", None, dir.path())
                .unwrap_or_else(|e| panic!("{gpus} GPUs: {e:#}"));
            assert!(config.is_file(), "{}", config.display());
        }
        let err = super::check_gpus(&[12], 8).unwrap_err().to_string();
        assert!(err.contains("12 GPUs do not fill whole nodes"), "{err}");
        super::check_gpus(&[4, 8, 16], 8).unwrap();
    }

    /// The words of `line` with the char positions where each starts and ends.
    fn words(line: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in line.char_indices().chain([(line.len(), ' ')]) {
            match (c.is_whitespace(), start) {
                (false, None) => start = Some(i),
                (true, Some(s)) => {
                    out.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        out
    }

    /// The table's columns are in line: every row has the same words, the numbers' columns
    /// (GPUs to eff, the band one word) end at the same place in every row and under the end
    /// of their header, the convergence point and the config start under theirs.
    fn assert_aligned(table: &str, case: &str) {
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        let rows: Vec<Vec<(usize, usize)>> = lines.map(words).collect();
        assert!(rows.len() >= 2, "{case}: {table}");
        assert!(
            rows.iter().all(|r| r.len() == 13),
            "{case}: 13 words a row\n{table}"
        );
        let ends = |i: usize| rows.iter().map(|r| r[i].1).collect::<Vec<_>>();
        let starts = |i: usize| rows.iter().map(|r| r[i].0).collect::<Vec<_>>();
        let end_of = |label: &str| header.find(label).unwrap() + label.len();
        let right = [
            "GPUs",
            "GBS",
            "per GPU",
            "accum",
            "step ms",
            "allred ms",
            "exposed",
            "evals",
        ];
        for (i, label) in right.iter().enumerate() {
            assert!(
                ends(i).iter().all(|&e| e == end_of(label)),
                "{case}: column {label} out of line\n{table}"
            );
        }
        // the minutes end at one place, the band under the end of "minutes (band)"
        assert!(
            ends(8).windows(2).all(|w| w[0] == w[1]),
            "{case}: minutes\n{table}"
        );
        for (i, label) in [(9, "minutes (band)"), (10, "eff")] {
            assert!(
                ends(i).iter().all(|&e| e == end_of(label)),
                "{case}: column {label} out of line\n{table}"
            );
        }
        for (i, label) in [(11, "convergence"), (12, "config")] {
            assert!(
                starts(i).iter().all(|&s| s == header.find(label).unwrap()),
                "{case}: column {label} out of line\n{table}"
            );
        }
    }

    /// `plan` at the ends of the flags' ranges (docs/planning.md) prints a table whose columns
    /// are in line: at `--rate 0.001` the step times of 9 digits before the point pushed
    /// their rows' columns out of line under the fixed widths.
    #[test]
    fn the_table_is_in_line_at_the_ends_of_the_ranges() {
        #[derive(clap::Parser)]
        struct Plan {
            #[command(flatten)]
            args: super::PlanArgs,
        }
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        for case in [
            "resnet --gpus 8,16,64,256 --rate 0.001",
            "resnet --gpus 8,32768 --rate 0.001 --measured-batch 1 --startup-s 604800 \
             --step-overhead-ms 60000 --intra 0.01 --inter 0.01 --overlap 0",
            "resnet --gpus 8,64 --gpu-memory-gib 10000 --rate 1000000 --measured-batch 1000000 \
             --startup-s 0 --step-overhead-ms 0 --intra 100000 --inter 100000 --overlap 1",
            "bert --gpus 1,8,4096 --gpus-per-node 4096 --rate 1000 --intra 100000",
            "bert --gpus 8,1024 --rate 0.001 --measured-batch 1000000 --startup-s 604800 \
             --step-overhead-ms 60000",
            "bert --gpus 8,64,512 --rate 0.001 --gpu-memory-gib 10000",
        ] {
            let argv = std::iter::once("plan").chain(case.split_whitespace());
            let mut args = Plan::try_parse_from(argv).unwrap().args;
            args.out = dir.path().to_path_buf();
            let planned = super::plan(&args).unwrap_or_else(|e| panic!("{case}: {e:#}"));
            assert_aligned(&super::render::table(&planned.rows), case);
        }
    }

    /// docs/planning.md gives each numeric flag's range as `check_numbers` takes it.
    #[test]
    fn the_documented_ranges_are_the_checked_ones() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/planning.md"),
        )
        .unwrap();
        for r in &super::RANGES {
            // the flag itself, not one it begins (`--gpus` of `--gpus-per-node`)
            let names = |l: &str| {
                l.match_indices(r.flag).any(|(i, _)| {
                    !l[i + r.flag.len()..].starts_with(|c: char| c == '-' || c.is_alphanumeric())
                })
            };
            let row = doc
                .lines()
                .find(|l| l.starts_with("| `") && names(l))
                .unwrap_or_else(|| panic!("docs/planning.md has no row for {}", r.flag));
            let said = format!("{} to {}", r.min, r.max);
            assert!(row.contains(&said), "{}: want `{said}` in {row}", r.flag);
        }
    }
}
