//! Training runs. The generic trainer ([`engine`]) carries out one MLPerf run of any
//! [`engine::Workload`]; each benchmark is a folder with its config and its workload
//! ([`resnet`], [`bert`]); [`config`] holds what their configs share. ResNet's config builds
//! without libtorch; everything that trains needs the `torch` feature.

pub mod allocator;
#[cfg(feature = "torch")]
pub mod bert;
pub mod config;
#[cfg(feature = "torch")]
pub mod engine;
#[cfg(feature = "torch")]
pub mod host_reads;
#[cfg(feature = "torch")]
pub mod job;
pub mod resnet;

use crate::rules::Division;
#[cfg(feature = "torch")]
use crate::runs::system::SystemConfig;
use crate::util::ExitStatus;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Cuda,
}

/// Flags every training subcommand shares: one run (--seed/--log) or a set, and the device.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// One run with this seed (with --log: into that file; else standard output).
    #[arg(long, conflicts_with_all = ["runs", "seeds", "resume"])]
    pub seed: Option<u64>,
    /// One run into this MLPerf log file (appended) instead of a run set.
    #[arg(long, conflicts_with_all = ["runs", "seeds", "resume"])]
    pub log: Option<PathBuf>,
    /// Device to train on.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    #[command(flatten)]
    pub set: crate::runs::driver::SetArgs,
    /// Write the final trainable parameters to this safetensors file (ranks above 0:
    /// `FILE.rank<r>`). For equivalence checks.
    #[arg(long, hide = true)]
    pub dump_params: Option<PathBuf>,
    /// Train through the CPU twin of methods.cuda_graph (N eager warm-up steps per shape, then
    /// static input buffers as a captured graph has). For equivalence checks without a GPU.
    #[arg(long, hide = true, value_name = "N")]
    pub emulate_cuda_graph: Option<u32>,
}

/// `--recipe`: shared by the training subcommands.
#[derive(clap::Args, Debug)]
pub struct RecipeArgs {
    /// Open division: apply a recipe (methods and hyperparameters, configs/recipes/) over
    /// --config; `--recipe list` shows them. A path to a recipe .toml works too.
    #[arg(long, value_name = "NAME")]
    pub recipe: Option<String>,
}

impl RecipeArgs {
    /// True for `--recipe list`.
    pub fn is_list(&self) -> bool {
        self.recipe.as_deref() == Some("list")
    }
}

/// `--recipe list` for `benchmark`.
pub fn print_recipes(benchmark: &str) -> anyhow::Result<ExitStatus> {
    crate::util::output::print(&crate::recipes::render_list(benchmark)?)?;
    Ok(ExitStatus::Success)
}

/// `e`, an error of `benchmark`'s run config, with a note where it refuses a key that the
/// other benchmark's config takes (`data.hw_decoder_load` in a BERT config is ResNet's):
/// [`config::other_benchmark_hint`], given each benchmark's [`config::ConfigKind`]. Here, in
/// the parent of both configs, so that neither names the other.
#[cfg(feature = "torch")]
pub fn with_config_hint(benchmark: &str, e: anyhow::Error) -> anyhow::Error {
    config::other_benchmark_hint(e, benchmark, &[&resnet::config::KIND, &bert::config::KIND])
}

/// Division and config of a training command (clap lets them out only for `--recipe list`).
#[cfg(feature = "torch")]
fn required<T: Clone>(value: &Option<T>, flag: &str) -> anyhow::Result<T> {
    value
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{flag} is required (only `--recipe list` runs without it)"))
}

/// The config text and recipe name: --config as it is, or with --recipe applied.
#[cfg(feature = "torch")]
fn config_text(
    benchmark: &str,
    config: &std::path::Path,
    recipe: &RecipeArgs,
    division: Division,
) -> anyhow::Result<(String, Option<(String, String)>)> {
    // a missing, binary or folder --config (or recipe file) is said as such, naming it once
    let base = config::read_config_text(config)?;
    match &recipe.recipe {
        None => Ok((base, None)),
        Some(spec) => {
            let read = |path: &std::path::Path| {
                crate::util::tree::read_text_file(
                    path,
                    "recipe (TOML; `--recipe list` shows the shipped ones)",
                )
            };
            let (r, text) = crate::recipes::apply_to_config(
                benchmark,
                spec,
                &base,
                config,
                division == Division::Closed,
                &read,
            )?;
            eprintln!("recipe {}: {}", r.name, r.description);
            Ok((text, Some((r.name, base))))
        }
    }
}

/// A training command once its shared flags are read: division, config text (with the recipe
/// applied), device and the per-run flags.
#[cfg(feature = "torch")]
struct Command<'a> {
    benchmark: &'static str,
    division: Division,
    config_path: PathBuf,
    text: String,
    recipe: Option<String>,
    /// With a recipe: the --config file's own text (`text` is the recipe's merge of it).
    base_text: Option<String>,
    device: tch::Device,
    run: &'a RunArgs,
    /// `MLPERF_RUN_INJECT_FAULT`, read by [`Command::check_start`].
    fault: (Option<u64>, Option<u64>),
}

#[cfg(feature = "torch")]
impl<'a> Command<'a> {
    fn prepare(
        benchmark: &'static str,
        division: &Option<Division>,
        config: &Option<PathBuf>,
        recipe: &RecipeArgs,
        run: &'a RunArgs,
    ) -> anyhow::Result<Command<'a>> {
        let division = required(division, "--division")?;
        let config_path = required(config, "--config")?;
        let (text, recipe) = config_text(benchmark, &config_path, recipe, division)?;
        let (recipe, base_text) = recipe.unzip();
        let device = match run.device {
            DeviceArg::Cpu => tch::Device::Cpu,
            DeviceArg::Cuda if tch::Cuda::is_available() => tch::Device::Cuda(0),
            DeviceArg::Cuda => {
                anyhow::bail!("--device cuda: no CUDA device is available to libtorch")
            }
        };
        Ok(Command {
            benchmark,
            division,
            config_path,
            text,
            recipe,
            base_text,
            device,
            run,
            fault: (None, None),
        })
    }

    /// The run config, parsed from the config text; an error names the file (and recipe).
    fn parse<C>(
        &self,
        parse: impl FnOnce(&str, Division) -> anyhow::Result<C>,
    ) -> anyhow::Result<C> {
        parse(&self.text, self.division)
            .map_err(|e| with_config_hint(self.benchmark, e))
            .map_err(|e| match (&self.recipe, &self.base_text) {
                (Some(r), Some(base)) => {
                    // the merged text's lines are no file's: the line in --config, or the recipe
                    let why = config::recipe_error(&format!("{e:#}"), &self.text, base, r);
                    let file = self.config_path.display();
                    anyhow::anyhow!("invalid config {file} with recipe {r}: {why}")
                }
                _ => self.in_config(e),
            })
    }

    /// On a CPU run, a config whose `floor` (the memory each process certainly needs, for a
    /// world size) alone exceeds what this machine has available is refused before the first
    /// run ([`config::check_memory`]): the kernel's OOM killer would end the run without a word.
    /// On a GPU, libtorch's out-of-memory error says so ([`crate::util::libtorch_errors`]).
    fn check_memory(
        &self,
        floor: impl FnOnce(u64) -> Vec<config::MemoryPart>,
    ) -> anyhow::Result<()> {
        if self.device != tch::Device::Cpu {
            return Ok(());
        }
        let Some(available) = crate::util::memory::available_bytes() else {
            return Ok(());
        };
        // the processes of the job share the batch; a launcher's variables that are refused
        // leave the split unknown, and then nothing is refused here
        let world = match crate::distributed::Rendezvous::from_env() {
            Ok(Some(r)) => Some(r.world_size as u64),
            Ok(None) => Some(1),
            Err(_) => None,
        };
        let Some(world) = world else { return Ok(()) };
        config::check_memory(&floor(world), available).map_err(|e| self.in_config(e))
    }

    /// `methods.cuda_graph` on a device that cannot capture (the CPU, a build without CUDA
    /// graphs) is refused before the first run, naming the file: each run refused it, a set
    /// writing a log per run that ended aborted (exit 1).
    fn check_cuda_graph(&self, cuda_graph: bool) -> anyhow::Result<()> {
        if !cuda_graph {
            return Ok(());
        }
        crate::gpu::cuda_graph::StepGraphs::usable_on(self.device)
            .map(drop)
            .map_err(|e| self.in_config(e))
    }

    /// `e`, a refusal of something the config asks for, as one of the config file: "invalid
    /// config FILE: ...".
    fn in_config(&self, e: anyhow::Error) -> anyhow::Error {
        e.context(format!("invalid config {}", self.config_path.display()))
    }

    /// What is checked once before the first run, so that a malformed value or a failing
    /// command stops a set before it starts: MLPERF_RUN_INJECT_FAULT, the launcher's
    /// environment, and `system.cache_clear_command` (a command that fails, such as a drop of
    /// the page cache without the rights, ended every run of a set as aborted, each writing its
    /// log).
    fn check_start(&mut self, sys: &SystemConfig) -> anyhow::Result<()> {
        self.fault = injected_fault(std::env::var("MLPERF_RUN_INJECT_FAULT").ok())?;
        anyhow::Context::context(
            crate::distributed::check_environment(),
            "the launcher's environment (no run was started)",
        )?;
        engine::clear_caches(sys.cache_clear_command.as_deref()).map_err(|e| {
            self.in_config(e.context("system.cache_clear_command (no run was started)"))
        })?;
        Ok(())
    }

    /// This command's job as the ranks of a data-parallel job compare it ([`job`]; the data's
    /// shape is added by the caller, the binary and the GPU by [`job::agree`]): the benchmark,
    /// division, device kind, recipe, the resolved `config`, the run or the set, and the
    /// environment that changes the collectives.
    fn job(&self, config: &impl serde::Serialize, sys: &SystemConfig) -> anyhow::Result<job::Job> {
        let device = if self.device.is_cuda() { "cuda" } else { "cpu" };
        let mut items = vec![
            job::item("benchmark", self.benchmark),
            job::item("division", self.division.as_str()),
            job::item("device", device),
            job::item("recipe", self.recipe.as_deref().unwrap_or("none")),
        ];
        items.extend(job::config_items(config)?);
        let one = self.run.log.is_some() || self.run.seed.is_some();
        items.push(job::item(
            "run",
            match (one, self.run.seed) {
                (true, Some(s)) => format!("one run, seed {s}"),
                (true, None) => "one run, seed drawn by rank 0".into(),
                (false, _) => "a set".into(),
            },
        ));
        if !one {
            items.extend(crate::runs::driver::set_items(
                self.benchmark,
                &self.run.set,
                sys,
            )?);
        }
        items.extend([
            job::item(
                "MLPERF_RUN_GRAD_OVERLAP",
                crate::distributed::overlap_from_env()?.to_string(),
            ),
            job::item(
                "test modes",
                format!("{:?}", crate::distributed::TestMode::from_env()?),
            ),
            job::item(
                "--emulate-cuda-graph",
                format!("{:?}", self.run.emulate_cuda_graph),
            ),
        ]);
        Ok(job::Job {
            items,
            cuda: self.device.is_cuda(),
        })
    }

    /// One run (`--seed`/`--log`, reported as `metric` at `unit`) or a run set; `one` trains
    /// a run with the options given.
    fn single_or_set(
        &self,
        benchmark: &str,
        sys: &SystemConfig,
        (metric, unit): (&str, &str),
        one: impl Fn(engine::RunOptions) -> anyhow::Result<engine::RunOutcome>,
    ) -> anyhow::Result<ExitStatus> {
        let fault = self.fault;
        let run = |seed: Option<u64>, log: Option<PathBuf>| {
            let mut opts = run_options(self.device, sys, self.division, seed, log, fault);
            opts.test_hooks.dump_params = self.run.dump_params.clone();
            opts.test_hooks.emulate_cuda_graph = self.run.emulate_cuda_graph;
            opts.recipe = self.recipe.clone();
            one(opts)
        };
        if self.run.log.is_some() || self.run.seed.is_some() {
            let out = run(self.run.seed, self.run.log.clone())?;
            return Ok(report_single(&out, metric, unit));
        }
        crate::runs::driver::run_and_report(
            benchmark,
            &self.run.set,
            sys,
            self.division,
            self.device == tch::Device::Cpu,
            |seed, log| run(Some(seed), Some(log)),
        )
    }
}

#[derive(clap::Args, Debug)]
pub struct ResnetArgs {
    /// MLPerf division: closed configs are checked against the closed rules before the run.
    #[arg(long, value_enum, required_unless_present = "recipe")]
    pub division: Option<Division>,
    /// Run configuration (TOML), e.g. configs/resnet/tiny_cpu.toml. Absent: the config
    /// `mlperf-run plan` writes for this machine's GPUs (needs --data), or without a GPU the
    /// tiny preset on data the command makes itself.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// ImageFolder root with train/ and val/ (not needed for synthetic-memory configs).
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Train in one process as N data-parallel ranks would (every rank's micro-batch
    /// accumulated per step). For the data-parallel equivalence check.
    #[arg(long, hide = true, default_value_t = 1)]
    pub emulate_world: usize,
}

#[cfg(not(feature = "torch"))]
pub fn run_resnet(_args: ResnetArgs) -> anyhow::Result<ExitStatus> {
    anyhow::bail!("this mlperf-run binary was built without libtorch (feature `torch`); rebuild with default features to train")
}

#[cfg(feature = "torch")]
fn submission(sys: &SystemConfig, division: Division) -> engine::Submission {
    engine::Submission {
        org: sys.submission_org.clone(),
        platform: sys.submission_platform.clone(),
        division: division.as_str().into(),
        status: sys.submission_status.as_str().into(),
    }
}

#[cfg(feature = "torch")]
fn run_options(
    device: tch::Device,
    sys: &SystemConfig,
    division: Division,
    seed: Option<u64>,
    log: Option<PathBuf>,
    fault: (Option<u64>, Option<u64>),
) -> engine::RunOptions {
    let mut opts = engine::RunOptions::new(device, submission(sys, division));
    opts.seed = seed;
    opts.log_path = log;
    opts.cache_clear_command = sys.cache_clear_command.clone();
    opts.time_limit = Some(std::time::Duration::from_secs_f64(
        sys.time_limit_minutes * 60.0,
    ));
    opts.loss_check_steps = sys.loss_check_steps.max(1);
    let (step, capture) = fault;
    opts.test_hooks.inject_fault_at_step = step;
    opts.test_hooks.inject_capture_failure_on_rank = capture.map(|r| r as usize);
    opts
}

#[cfg(feature = "torch")]
/// `MLPERF_RUN_INJECT_FAULT` (tests): `step:N` fails the run at step N, `capture:R` fails the
/// CUDA graph capture on rank R; unset or blank: neither. Anything else is an error naming the
/// variable (it used to be ignored, and the run that was meant to fail succeeded).
fn injected_fault(value: Option<String>) -> anyhow::Result<(Option<u64>, Option<u64>)> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok((None, None));
    };
    let number = |n: &str| n.trim().parse::<u64>().ok();
    match v.trim().split_once(':') {
        Some(("step", n)) if number(n).is_some() => Ok((number(n), None)),
        Some(("capture", r)) if number(r).is_some() => Ok((None, number(r))),
        _ => anyhow::bail!(
            "MLPERF_RUN_INJECT_FAULT={v:?}: give step:N (fail at step N) or capture:R (fail the \
             CUDA graph capture on rank R), or unset it"
        ),
    }
}

/// Say how a single run ended; exit 0 on success, 1 when aborted.
#[cfg(feature = "torch")]
fn report_single(out: &engine::RunOutcome, metric: &str, unit: &str) -> ExitStatus {
    let last = out
        .evals
        .last()
        .map(|(e, a)| format!(" ({metric} {a:.4} at {unit} {e})"))
        .unwrap_or_default();
    match &out.status {
        engine::Status::Success => {
            eprintln!(
                "run succeeded in {:.1} s{last}, seed {}",
                out.run_seconds, out.seed
            );
            ExitStatus::Success
        }
        engine::Status::Aborted(why) => {
            eprintln!("run aborted: {why}{last}, seed {}", out.seed);
            crate::util::ExitStatus::Negative
        }
    }
}

#[cfg(feature = "torch")]
pub fn run_resnet(args: ResnetArgs) -> anyhow::Result<ExitStatus> {
    if args.recipe.is_list() {
        return print_recipes("resnet");
    }
    // every rank of a data-parallel job prepares its job, then the ranks compare them: one
    // that differs, or refuses, stops them all here
    let (cmd, cfg, listed) = match job::agree(prepare_resnet(&args))? {
        job::Start::Go(prepared) => prepared,
        job::Start::Stop(status) => return Ok(status),
    };
    let run = resnet::ResnetRun {
        config: &cfg,
        division: cmd.division,
        data_dir: args.data.clone(),
        listed,
    };
    cmd.single_or_set("resnet", &cfg.system, ("eval accuracy", "epoch"), |opts| {
        if args.emulate_world > 1 {
            resnet::run_once_emulating(&run, opts, args.emulate_world)
        } else {
            resnet::run_once(&run, opts)
        }
    })
}

/// What a ResNet command was asked to do, read and checked before its first run, with its job
/// ([`job`]).
#[cfg(feature = "torch")]
type PreparedResnet<'a> = (
    Command<'a>,
    resnet::ResnetRunConfig,
    Option<std::sync::Arc<crate::data::imagenet::ImagenetDir>>,
);

#[cfg(feature = "torch")]
fn prepare_resnet(args: &ResnetArgs) -> anyhow::Result<(PreparedResnet<'_>, job::Job)> {
    let mut cmd = Command::prepare(
        "resnet",
        &args.division,
        &args.config,
        &args.recipe,
        &args.run,
    )?;
    let cfg = cmd.parse(resnet::ResnetRunConfig::parse)?;
    cmd.check_memory(|world| cfg.memory_floor(world))?;
    cmd.check_cuda_graph(cfg.methods.cuda_graph)?;
    if let (Some(dir), resnet::config::DataSource::SyntheticMemory) = (&args.data, cfg.data.source)
    {
        anyhow::bail!(
            "--data {}: the config {} has data.source = \"synthetic-memory\" (its images are \
             made in memory), so the folder would not be read; drop --data, or train on it \
             with a config whose data.source is \"imagefolder\" (--config FILE)",
            dir.display(),
            cmd.config_path.display()
        );
    }
    // an ImageFolder set is listed once, here, and checked against the batch: a set that
    // cannot feed a run is refused before the first run's log (and not listed again per run)
    let listed = anyhow::Context::context(resnet::list_data(&cfg, args.data.as_deref()), "--data")?;
    cmd.check_start(&cfg.system)?;
    let mut mine = cmd.job(&cfg, &cfg.system)?;
    mine.items
        .push(job::item("--emulate-world", args.emulate_world.to_string()));
    if let Some(listed) = &listed {
        mine.items.extend(job::imagenet_items(listed));
    }
    Ok(((cmd, cfg, listed), mine))
}

#[derive(clap::Args, Debug)]
pub struct BertArgs {
    /// MLPerf division: closed configs are checked against the closed rules before the run.
    #[arg(long, value_enum, required_unless_present = "recipe")]
    pub division: Option<Division>,
    /// Run configuration (TOML), e.g. configs/bert/tiny_cpu.toml. Absent: the config
    /// `mlperf-run plan` writes for this machine's GPUs (needs --data), or without a GPU the
    /// tiny preset on a tiny corpus the command makes itself.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub recipe: RecipeArgs,
    /// Data directory with train/ and eval/ HDF5 shards (`mlperf-run data synth-bert` makes one).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Starting checkpoint: the reference checkpoint converted to safetensors
    /// (scripts/convert_bert_checkpoint); absent: random initialisation.
    #[arg(long)]
    pub init_checkpoint: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[cfg(not(feature = "torch"))]
pub fn run_bert(_args: BertArgs) -> anyhow::Result<ExitStatus> {
    anyhow::bail!("this mlperf-run binary was built without libtorch (feature `torch`); rebuild with default features to train")
}

#[cfg(feature = "torch")]
pub fn run_bert(args: BertArgs) -> anyhow::Result<ExitStatus> {
    if args.recipe.is_list() {
        return print_recipes("bert");
    }
    // as run_resnet: the ranks compare their jobs before the first run
    let (cmd, cfg, data) = match job::agree(prepare_bert(&args))? {
        job::Start::Go(prepared) => prepared,
        job::Start::Stop(status) => return Ok(status),
    };
    let init = args.init_checkpoint.as_deref();
    cmd.single_or_set("bert", &cfg.system, ("MLM accuracy", "samples"), |opts| {
        bert::run_once(&cfg, cmd.division, &data, init, opts)
    })
}

/// What a BERT command was asked to do, read and checked before its first run, with its job.
#[cfg(feature = "torch")]
type PreparedBert<'a> = (Command<'a>, bert::BertRunConfig, PathBuf);

#[cfg(feature = "torch")]
fn prepare_bert(args: &BertArgs) -> anyhow::Result<(PreparedBert<'_>, job::Job)> {
    let mut cmd = Command::prepare(
        "bert",
        &args.division,
        &args.config,
        &args.recipe,
        &args.run,
    )?;
    let data = required(&args.data, "--data")?;
    // a data directory without its train/ or eval/ shards, or with a training shard that HDF5
    // cannot open (cut short in a copy), is bad input: refused before the run (and its log), not
    // a run aborted on its first read
    let mut train = Vec::new();
    let mut eval_files = Vec::new();
    for split in ["train", "eval"] {
        let files =
            anyhow::Context::context(crate::data::bert::shard_files(&data.join(split)), "--data")?;
        for f in &files {
            let name = f
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if split == "train" {
                let n = anyhow::Context::context(crate::data::bert::Shard::count(f), "--data")?;
                train.push((name, n));
            } else {
                eval_files.push(name);
            }
        }
    }
    if let Some(ck) = &args.init_checkpoint {
        // as --data: a checkpoint that cannot be read is refused before the first run's log
        anyhow::Context::context(
            crate::models::bert::BertForPreTraining::check_reference_file(ck),
            "--init-checkpoint",
        )?;
    }
    let cfg = cmd.parse(bert::BertRunConfig::parse)?;
    cmd.check_memory(|_| cfg.memory_floor())?;
    cmd.check_cuda_graph(cfg.methods.cuda_graph)?;
    // the eval set against the model (samples, vocabulary, sequence length): a config that does
    // not fit its data is refused here, not found by every run of a set
    let eval = anyhow::Context::context(bert::load_eval(&cfg, &data), "--data")?;
    if cfg.methods.fp8 {
        // refused before the run where FP8 cannot run, naming why and the file
        crate::fused::fp8::path_for(cmd.device).map_err(|e| cmd.in_config(e))?;
    }
    cmd.check_start(&cfg.system)?;
    let mut mine = cmd.job(&cfg, &cfg.system)?;
    mine.items
        .extend(job::bert_items(&train, eval.samples, &eval_files));
    let checkpoint = match &args.init_checkpoint {
        Some(ck) => format!(
            "given ({} bytes)",
            std::fs::metadata(ck).map_or(0, |m| m.len())
        ),
        None => "none".into(),
    };
    mine.items.push(job::item("--init-checkpoint", checkpoint));
    Ok(((cmd, cfg, data), mine))
}
