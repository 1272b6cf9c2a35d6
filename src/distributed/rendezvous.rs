//! Where and who: the rendezvous address, this process's rank, the world size and the local
//! rank (which GPU), from the variables of the launcher that started this process: torchrun's
//! (also `mlperf-run launch`'s), Slurm's (`srun`), Open MPI's `mpirun`, IBM LSF's `jsrun`,
//! Flux's `flux run`, HPE PALS's `mpiexec` or MPICH's and Intel MPI's `mpiexec` (Hydra); a
//! launcher that gives no world size or local rank (Cray ALPS's `aprun`, PMIx alone) is refused.
//! docs/distributed.md ("Starting the processes") lists what is read.
use super::hostlist;
use anyhow::{bail, Context, Result};
use std::time::Duration;

/// The default port when neither MASTER_PORT nor a Slurm job id gives one (torchrun's).
pub const DEFAULT_PORT: u16 = 29500;
/// Default collective timeout; MLPERF_RUN_DIST_TIMEOUT_S overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default rendezvous timeout; MLPERF_RUN_RENDEZVOUS_TIMEOUT_S overrides it.
pub const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(600);

/// Which launcher's variables the rendezvous came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (torchrun, `mlperf-run launch`).
    Torchrun,
    /// SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), first host of
    /// SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST).
    Slurm,
    /// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's
    /// `mpirun`), with MASTER_ADDR.
    OpenMpi,
    /// PMI_RANK, PMI_SIZE, MPI_LOCALRANKID (MPICH's and Intel MPI's `mpiexec`, Hydra), with
    /// MASTER_ADDR.
    Hydra,
    /// FLUX_TASK_RANK, FLUX_JOB_SIZE, FLUX_TASK_LOCAL_ID, FLUX_JOB_NNODES (`flux run`), with
    /// MASTER_ADDR.
    Flux,
    /// PALS_RANKID, PMI_SIZE (PALS itself names no world size: HPE's `mpiexec` sets Cray PMI's
    /// beside it), PALS_LOCAL_RANKID, PALS_LOCAL_SIZE (HPE PALS's `mpiexec`, Cray PBS), with
    /// MASTER_ADDR.
    Pals,
    /// JSM_NAMESPACE_RANK, JSM_NAMESPACE_SIZE, JSM_NAMESPACE_LOCAL_RANK,
    /// JSM_NAMESPACE_LOCAL_SIZE (IBM LSF's `jsrun`), with MASTER_ADDR.
    Jsm,
}

/// A launcher that gives every task its rank, the world size and its local rank in variables
/// of its own, read alike ([`mpi_launcher`]): one row each, in the order they are asked.
struct TaskVars {
    source: Source,
    /// Any of these set: this launcher started the process.
    marks: &'static [&'static str],
    rank: &'static str,
    world: &'static str,
    local: &'static str,
    /// Its tasks on this node, where it says.
    local_world: Option<&'static str>,
    /// Its nodes, where it says.
    nodes: Option<&'static str>,
    /// A job of one task is the batch script's own process (`flux batch`), which may start
    /// the tasks of another launcher that keep its variables: read as no launcher, as Slurm's
    /// ([`batch_process_of_one`]).
    one_task_is_no_launcher: bool,
    /// How to give every task MASTER_ADDR, for the message that asks for it.
    pass: &'static str,
    /// Said when the world size is missing, where the launcher itself does not give one.
    world_note: &'static str,
}

/// The MPI-like launchers, in the order they are asked: Open MPI first (its `mpirun` may run in
/// a Flux or LSF job, whose variables its ranks keep); Flux before PALS and Hydra, whose
/// PALS_RANKID and PMI_RANK a Flux task may carry too (Flux's PMI and cray-pals plugins);
/// PALS before Hydra (HPE's `mpiexec` sets PMI_RANK and PMI_SIZE beside its own).
const TASK_LAUNCHERS: [TaskVars; 5] = [
    TaskVars {
        source: Source::OpenMpi,
        marks: &["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"],
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_world: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
        nodes: None,
        one_task_is_no_launcher: false,
        pass: "mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ...",
        world_note: "",
    },
    TaskVars {
        source: Source::Jsm,
        marks: &["JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE"],
        rank: "JSM_NAMESPACE_RANK",
        world: "JSM_NAMESPACE_SIZE",
        local: "JSM_NAMESPACE_LOCAL_RANK",
        local_world: Some("JSM_NAMESPACE_LOCAL_SIZE"),
        nodes: None,
        one_task_is_no_launcher: false,
        pass: "jsrun -E MASTER_ADDR=<host of rank 0> -E MASTER_PORT=29500 ...",
        world_note: "",
    },
    TaskVars {
        source: Source::Flux,
        marks: &["FLUX_TASK_RANK", "FLUX_JOB_SIZE"],
        rank: "FLUX_TASK_RANK",
        world: "FLUX_JOB_SIZE",
        local: "FLUX_TASK_LOCAL_ID",
        local_world: None,
        nodes: Some("FLUX_JOB_NNODES"),
        one_task_is_no_launcher: true,
        pass: "flux run --env=MASTER_ADDR=<host of rank 0> --env=MASTER_PORT=29500 ...",
        world_note: "",
    },
    TaskVars {
        source: Source::Pals,
        marks: &["PALS_RANKID"],
        rank: "PALS_RANKID",
        world: "PMI_SIZE",
        local: "PALS_LOCAL_RANKID",
        local_world: Some("PALS_LOCAL_SIZE"),
        nodes: None,
        one_task_is_no_launcher: false,
        pass: "export MASTER_ADDR=$(head -n1 $PBS_NODEFILE) MASTER_PORT=29500 before mpiexec",
        world_note: "; PALS itself puts no world size in the environment (HPE's mpiexec sets \
                     Cray PMI's PMI_SIZE beside PALS_RANKID; a launcher that only sets PALS's \
                     variables, such as Flux's cray-pals plugin, may not)",
    },
    TaskVars {
        source: Source::Hydra,
        marks: &["PMI_RANK", "PMI_SIZE"],
        rank: "PMI_RANK",
        world: "PMI_SIZE",
        local: "MPI_LOCALRANKID",
        local_world: Some("MPI_LOCALNRANKS"),
        nodes: None,
        one_task_is_no_launcher: false,
        pass: "mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 ...",
        world_note: "",
    },
];

/// Variables of launchers that say too little to read: their processes are refused (each
/// would train alone over the same results), with the launcher and what it lacks.
const REFUSED: [(&str, &str, &str); 2] = [
    (
        "PMIX_RANK",
        "a PMIx launcher",
        "gives no world size that mlperf-run reads",
    ),
    (
        "ALPS_APP_PE",
        "Cray ALPS's aprun",
        "gives each process its rank alone, with no world size and no local rank",
    ),
];

impl TaskVars {
    fn of(source: Source) -> Option<&'static TaskVars> {
        TASK_LAUNCHERS.iter().find(|t| t.source == source)
    }

    /// Whether its variables describe this process.
    fn started(&self, get: &impl Fn(&str) -> Option<String>) -> bool {
        self.marks.iter().any(|k| get(k).is_some())
            && !(self.one_task_is_no_launcher && get(self.world).is_some_and(|n| n.trim() == "1"))
    }
}

impl Source {
    /// The variables of this launcher's rank, world size, local rank and processes on this
    /// node (Slurm's world size is SLURM_STEP_NUM_TASKS in a step: see
    /// [`Rendezvous::world_from`]).
    fn vars(self) -> [&'static str; 4] {
        match self {
            Source::Torchrun => ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
            Source::Slurm => [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
                "SLURM_STEP_TASKS_PER_NODE",
            ],
            task => {
                let t = TaskVars::of(task).expect("every other source has a TASK_LAUNCHERS row");
                [
                    t.rank,
                    t.world,
                    t.local,
                    t.local_world.unwrap_or("its tasks on this node"),
                ]
            }
        }
    }

    /// The launcher, as messages name it.
    pub fn launcher(self) -> &'static str {
        match self {
            Source::Torchrun => "torchrun (or `mlperf-run launch`)",
            Source::Slurm => "srun",
            Source::OpenMpi => "Open MPI's mpirun",
            Source::Hydra => "mpiexec (MPICH or Intel MPI)",
            Source::Flux => "Flux's flux run",
            Source::Pals => "HPE PALS's mpiexec (Cray PBS)",
            Source::Jsm => "IBM LSF's jsrun",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendezvous {
    /// Host of rank 0, which serves the TCPStore.
    pub master_addr: String,
    pub master_port: u16,
    pub rank: usize,
    pub world_size: usize,
    /// Rank on this node: which of the node's GPUs it uses where it sees them all
    /// ([`super::choose_gpu`]).
    pub local_rank: usize,
    pub source: Source,
    /// Where `master_addr` came from: "MASTER_ADDR", [`ONE_NODE`], or the Slurm variable whose
    /// first host it is ("SLURM_STEP_NODELIST", ...), for errors that name what to change.
    pub master_from: &'static str,
    /// The variable the world size came from (WORLD_SIZE, SLURM_STEP_NUM_TASKS, ...).
    pub world_from: &'static str,
    /// This job's processes on this node, as the launcher says (None: it does not say).
    pub local_world_size: Option<usize>,
    /// This job's nodes, as the launcher says.
    pub nodes: Option<usize>,
    /// Another launcher's variables also set but not read (torchrun's win over Slurm's, an
    /// MPI launcher's over the Slurm step it runs in), as `-v` says it.
    pub not_read: Option<String>,
}

/// `master_from` of a master that is this host: an MPI launcher whose ranks all run here.
pub const ONE_NODE: &str = "every rank on this node";

impl Rendezvous {
    /// A single local process (what a run without any launcher is).
    pub fn single() -> Rendezvous {
        Rendezvous {
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_PORT,
            rank: 0,
            world_size: 1,
            local_rank: 0,
            source: Source::Torchrun,
            master_from: "MASTER_ADDR",
            world_from: "WORLD_SIZE",
            local_world_size: Some(1),
            nodes: Some(1),
            not_read: None,
        }
    }

    /// How errors name the master's address: `MASTER_ADDR=host`, or `host (the first host of
    /// SLURM_STEP_NODELIST)`.
    pub fn master_named(&self) -> String {
        match self.master_from {
            "MASTER_ADDR" => format!("MASTER_ADDR={}", self.master_addr),
            ONE_NODE => format!("{} ({ONE_NODE})", self.master_addr),
            var => format!("{} (the first host of {var})", self.master_addr),
        }
    }

    /// Reads the process environment; see [`Rendezvous::from_lookup`].
    pub fn from_env() -> Result<Option<Rendezvous>> {
        Self::from_lookup(launcher_var)
    }

    /// `Ok(None)`: no launcher variables at all (a plain single-process run; also the batch
    /// script's own process in a Slurm job of one task). A blank value counts as unset. Which
    /// launcher ([`launcher`]): torchrun's variables when RANK or WORLD_SIZE is set (then
    /// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK are all required); else an MPI
    /// launcher's (the task launchers' table: Open MPI's OMPI_COMM_WORLD_*, LSF's JSM_NAMESPACE_*,
    /// Flux's FLUX_TASK_RANK and FLUX_JOB_SIZE, PALS's PALS_RANKID, Hydra's PMI_RANK and
    /// PMI_SIZE) unless they are the Slurm step's own; else Slurm's when SLURM_PROCID is set.
    /// PMIX_RANK or ALPS's ALPS_APP_PE alone, which say no world size, are an error. Every value is checked against
    /// the others; an error names the variable, its value and what to do.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Rendezvous>> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut rdv = match launcher(&get) {
            Some(Source::Torchrun) => torchrun(&get)?,
            Some(Source::Slurm) => slurm(&get)?,
            Some(mpi) => mpi_launcher(&get, mpi)?,
            None => {
                no_launcher(&get)?;
                return Ok(None);
            }
        };
        rdv.validate()?;
        rdv.not_read = not_read(&get, rdv.source);
        Ok(Some(rdv))
    }

    fn validate(&self) -> Result<()> {
        let [rank_var, _, local_var, local_world_var] = self.source.vars();
        let world_var = self.world_from;
        if self.world_size == 0 {
            bail!("{world_var} is 0; it must be at least 1");
        }
        if self.rank >= self.world_size {
            bail!(
                "{rank_var}={} is not below {world_var}={}: the ranks are numbered 0 to {} \
                 (the launcher's variables are inconsistent)",
                self.rank,
                self.world_size,
                self.world_size - 1
            );
        }
        if self.local_rank > self.rank {
            bail!(
                "{local_var}={} is larger than {rank_var}={}: the ranks are inconsistent",
                self.local_rank,
                self.rank
            );
        }
        if let Some(local) = self.local_world_size {
            if self.local_rank >= local {
                bail!(
                    "{local_var}={} is not below {local_world_var}={local}: the ranks are \
                     inconsistent",
                    self.local_rank
                );
            }
            if local > self.world_size {
                bail!(
                    "{local_world_var}={local} is larger than {world_var}={}: the ranks are \
                     inconsistent",
                    self.world_size
                );
            }
        }
        check_master_addr(&self.master_named(), &self.master_addr)
    }
}

/// Which launcher's variables describe this process, `None` without any: torchrun's (RANK or
/// WORLD_SIZE set), else the first MPI-like launcher's of Open MPI (OMPI_COMM_WORLD_RANK or
/// _SIZE), LSF's jsrun (JSM_NAMESPACE_RANK or _SIZE), Flux (FLUX_TASK_RANK or FLUX_JOB_SIZE,
/// not of a job of one task: a `flux batch` script's own process), HPE PALS (PALS_RANKID) and
/// Hydra (PMI_RANK or PMI_SIZE), unless a Slurm task's SLURM_PROCID is set and agrees with
/// them (`srun --mpi=pmi2` sets both: Slurm's also name the master), else Slurm's
/// (SLURM_PROCID). An MPI launcher run inside a Slurm job starts its ranks through one srun
/// task per node, whose Slurm variables describe that task (rank = node), not the rank.
pub fn launcher(get: &impl Fn(&str) -> Option<String>) -> Option<Source> {
    if get("RANK").is_some() || get("WORLD_SIZE").is_some() {
        return Some(Source::Torchrun);
    }
    let mpi = TASK_LAUNCHERS
        .iter()
        .find(|t| t.started(get))
        .map(|t| t.source);
    let slurm = get("SLURM_PROCID").is_some() && !batch_process_of_one(get);
    match mpi {
        Some(m) if !(slurm && slurm_agrees_with(get, m)) => Some(m),
        _ if slurm => Some(Source::Slurm),
        _ => None,
    }
}

/// True when a launcher started this process (or its variables are there but malformed, which
/// the command then refuses): it runs its own rank and starts no workers of its own.
pub fn under_a_launcher() -> bool {
    launcher(&launcher_var).is_some() || REFUSED.iter().any(|(k, ..)| launcher_var(k).is_some())
}

/// The batch script's own process (or an salloc shell's: SLURM_PROCID without SLURM_STEP_ID,
/// which only srun's tasks have) in a job of one task or of no task count: a process of its
/// own, as without a launcher (`sbatch --gpus-per-node=8 --wrap 'mlperf-run resnet ...'` may
/// start the node's workers itself). In a job of more tasks it is refused ([`slurm`]).
fn batch_process_of_one(get: &impl Fn(&str) -> Option<String>) -> bool {
    let in_step = get("SLURM_STEP_ID")
        .or_else(|| get("SLURM_STEPID"))
        .is_some();
    !in_step && get("SLURM_NTASKS").is_none_or(|n| n.trim().parse::<usize>().is_ok_and(|n| n <= 1))
}

/// Whether the Slurm task's SLURM_PROCID (and world size) are the MPI launcher's rank (and
/// size): then the MPI plugin of srun set both.
fn slurm_agrees_with(get: &impl Fn(&str) -> Option<String>, mpi: Source) -> bool {
    let [rank_var, world_var, ..] = mpi.vars();
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
    let slurm_world = num("SLURM_STEP_NUM_TASKS").or_else(|| num("SLURM_NTASKS"));
    num(rank_var) == num("SLURM_PROCID")
        && get(world_var).is_none_or(|_| num(world_var) == slurm_world)
}

/// No launcher: a variable of one set alone is an error, not a silent single process.
fn no_launcher(get: &impl Fn(&str) -> Option<String>) -> Result<()> {
    for (k, launcher, lacks) in REFUSED {
        if let Some(v) = get(k) {
            bail!(
                "{k}={v} is set: {launcher} started this process, but it {lacks}, and alone \
                 each process would train a run of its own over the same results. {WHAT_TO_DO}"
            );
        }
    }
    for k in ["MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"] {
        if get(k).is_some() {
            bail!(
                "{k} is set but RANK and WORLD_SIZE are not: set all of MASTER_ADDR, \
                 MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (or none, for one process)"
            );
        }
    }
    Ok(())
}

/// What to do where a launcher's variables do not give every process its place.
const WHAT_TO_DO: &str = "Start the workers with srun, torchrun or `mlperf-run launch` (one per \
                          node), or give every process the torchrun variables (RANK, \
                          WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)";

/// Launchers whose variables are set besides `used`'s, for `-v` to say they are not read.
fn not_read(get: &impl Fn(&str) -> Option<String>, used: Source) -> Option<String> {
    let others: Vec<String> = [Source::Torchrun]
        .into_iter()
        .chain(TASK_LAUNCHERS.iter().map(|t| t.source))
        .chain([Source::Slurm])
        .filter(|&s| s != used)
        .filter_map(|s| {
            let var = s.vars()[0];
            get(var).map(|v| format!("{var}={v} ({})", s.launcher()))
        })
        .collect();
    (!others.is_empty()).then(|| others.join(", "))
}

/// torchrun's variables, all required.
fn torchrun(get: &impl Fn(&str) -> Option<String>) -> Result<Rendezvous> {
    let why = "torchrun-style launch: set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and \
               LOCAL_RANK, or start the workers with `mlperf-run launch`";
    let need =
        |k: &str| get(k).with_context(|| format!("environment variable {k} is not set ({why})"));
    let world_size = parse_num("WORLD_SIZE", &need("WORLD_SIZE")?)?;
    let local_world_size = get("LOCAL_WORLD_SIZE")
        .map(|v| parse_positive("LOCAL_WORLD_SIZE", &v, "the processes on this node"))
        .transpose()?;
    Ok(Rendezvous {
        master_addr: master_addr(&need("MASTER_ADDR")?),
        master_port: parse_port("MASTER_PORT", &need("MASTER_PORT")?)?,
        rank: parse_num("RANK", &need("RANK")?)?,
        world_size,
        local_rank: parse_num("LOCAL_RANK", &need("LOCAL_RANK")?)?,
        source: Source::Torchrun,
        master_from: "MASTER_ADDR",
        world_from: "WORLD_SIZE",
        local_world_size,
        nodes: local_world_size.map(|l| world_size.div_ceil(l).max(1)),
        not_read: None,
    })
}

/// An MPI-like launcher's variables ([`TASK_LAUNCHERS`]): rank, size and local rank required;
/// the master is MASTER_ADDR, or this host when every rank runs here (its tasks on this node
/// are the world size, or its nodes are 1); the port MASTER_PORT, else 29500.
fn mpi_launcher(get: &impl Fn(&str) -> Option<String>, source: Source) -> Result<Rendezvous> {
    let t = TaskVars::of(source).expect("mpi_launcher reads a TASK_LAUNCHERS row");
    let (rank_var, world_var, local_var) = (t.rank, t.world, t.local);
    let launcher = source.launcher();
    let need = |k: &str| {
        get(k).with_context(|| {
            let mark = t
                .marks
                .iter()
                .find_map(|m| get(m).map(|v| format!("{m}={v}")));
            format!(
                "{k} is not set: {launcher} started this process ({} is set){}, and without \
                 {rank_var}, {world_var} and {local_var} each process would train a run of its \
                 own over the same results. {WHAT_TO_DO}",
                mark.unwrap_or_else(|| rank_var.to_string()),
                if k == world_var { t.world_note } else { "" }
            )
        })
    };
    let world_size = parse_num(world_var, &need(world_var)?)?;
    let rank = parse_num(rank_var, &need(rank_var)?)?;
    let local_rank = parse_num(local_var, &need(local_var)?)?;
    let counted = |var: Option<&'static str>, what: &str| -> Result<Option<(&str, usize)>> {
        var.and_then(|k| get(k).map(|v| (k, v)))
            .map(|(k, v)| parse_positive(k, &v, what).map(|n| (k, n)))
            .transpose()
    };
    let local_world = counted(t.local_world, "the processes on this node")?;
    let nodes_said = counted(t.nodes, "the nodes of the job")?;
    let local_world_size = local_world.map(|(_, n)| n);
    let one_node = local_world_size == Some(world_size) || nodes_said.is_some_and(|(_, n)| n == 1);
    let (master_addr, master_from) = match get("MASTER_ADDR") {
        Some(a) => (master_addr(&a), "MASTER_ADDR"),
        None if one_node => ("127.0.0.1".to_string(), ONE_NODE),
        None => bail!(
            "{launcher} started this process as one of {world_var}={world_size} ranks, {}, \
             and names no host for the rendezvous: set MASTER_ADDR (and MASTER_PORT) for every \
             rank to the host of rank 0, e.g. `{}`",
            match (nodes_said, local_world) {
                (Some((k, n)), _) => format!("on {k}={n} nodes"),
                (None, Some((_, l))) => format!("{l} on this node"),
                (None, None) => format!(
                    "{} not set",
                    t.local_world.unwrap_or("its tasks on this node")
                ),
            },
            t.pass
        ),
    };
    Ok(Rendezvous {
        master_addr,
        master_port: match get("MASTER_PORT") {
            Some(p) => parse_port("MASTER_PORT", &p)?,
            None => DEFAULT_PORT,
        },
        rank,
        world_size,
        local_rank,
        source,
        master_from,
        world_from: world_var,
        local_world_size,
        nodes: nodes_said
            .map(|(_, n)| n)
            .or_else(|| local_world_size.map(|l| world_size.div_ceil(l).max(1))),
        not_read: None,
    })
}

/// Slurm's variables, in a task that srun started: the rank SLURM_PROCID, the world size the
/// step's SLURM_STEP_NUM_TASKS (SLURM_NTASKS, which `srun --export`/`-E` may leave at the
/// job's, without it), the local rank SLURM_LOCALID; the master MASTER_ADDR, else the first
/// host of the step's node list (SLURM_STEP_NODELIST: a step may run on part of the job's
/// nodes), else of SLURM_JOB_NODELIST or SLURM_NODELIST; the port MASTER_PORT, else
/// 20000 + SLURM_JOB_ID % 10000 (all tasks of a job agree; concurrent jobs on a node rarely
/// collide), else 29500. The tasks on this node are SLURM_STEP_TASKS_PER_NODE's count for
/// SLURM_NODEID (`8(x2),4`).
fn slurm(get: &impl Fn(&str) -> Option<String>) -> Result<Rendezvous> {
    let procid = get("SLURM_PROCID").unwrap_or_default();
    let world = ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]
        .into_iter()
        .find_map(|k| get(k).map(|v| (k, v)));
    let nodelist = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .iter()
    .any(|k| get(k).is_some());
    let missing: Vec<&str> = [
        ("SLURM_NTASKS", world.is_some()),
        ("SLURM_LOCALID", get("SLURM_LOCALID").is_some()),
        (
            "SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST, or MASTER_ADDR)",
            nodelist || get("MASTER_ADDR").is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(k, set)| (!set).then_some(k))
    .collect();
    let (Some((world_from, world)), true) = (world, missing.is_empty()) else {
        bail!(
            "SLURM_PROCID={procid} is set but {} not: a Slurm launch needs SLURM_PROCID, \
             SLURM_NTASKS, SLURM_LOCALID and a node list, as srun gives every task (see \
             scripts/slurm/run.sub); unset SLURM_PROCID for one process",
            match missing.as_slice() {
                [one] => format!("{one} is"),
                many => format!("{} are", many.join(", ")),
            }
        );
    };
    let rank = parse_num("SLURM_PROCID", &procid)?;
    let world_size = parse_num(world_from, &world)?;
    let local_rank = parse_num("SLURM_LOCALID", &get("SLURM_LOCALID").unwrap_or_default())?;
    let in_step = get("SLURM_STEP_ID")
        .or_else(|| get("SLURM_STEPID"))
        .is_some();
    if !in_step && world_size > 1 {
        bail!(
            "SLURM_PROCID={procid} and {world_from}={world_size} are set but SLURM_STEP_ID is \
             not: the batch script (or an salloc shell) started this process itself, not srun, \
             so it is one process where the job has {world_size} tasks, and the others would \
             never come. Start one process per task with srun (`srun --ntasks-per-node=8 \
             mlperf-run ...`, scripts/slurm/run.sub), or this node's workers with `mlperf-run \
             launch --nproc-per-node N -- ...`"
        );
    }
    let (master_addr, master_from) = slurm_master(get)?;
    if rank == 0 && world_size > 1 && master_from != "MASTER_ADDR" {
        if let Some(node) = get("SLURMD_NODENAME").filter(|n| !n.eq_ignore_ascii_case(&master_addr))
        {
            bail!(
                "rank 0 (SLURM_PROCID=0) runs on {node} (SLURMD_NODENAME), but the rendezvous \
                 master is {master_addr}, the first host of {master_from}: every rank would wait \
                 for a store that no process serves there. Set MASTER_ADDR to {node}'s address \
                 for every task (export it before srun)"
            );
        }
    }
    let (local_world_size, nodes) = slurm_tasks_here(get, local_rank, (world_from, world_size))?;
    let master_port = match (get("MASTER_PORT"), get("SLURM_JOB_ID")) {
        (Some(p), _) => parse_port("MASTER_PORT", &p)?,
        (None, Some(job)) => 20000 + (parse_num("SLURM_JOB_ID", &job)? % 10000) as u16,
        (None, None) => DEFAULT_PORT,
    };
    Ok(Rendezvous {
        master_addr,
        master_port,
        rank,
        world_size,
        local_rank,
        source: Source::Slurm,
        master_from,
        world_from,
        local_world_size,
        nodes,
        not_read: None,
    })
}

/// The master of a Slurm launch: MASTER_ADDR, or the first host of the step's node list.
fn slurm_master(get: &impl Fn(&str) -> Option<String>) -> Result<(String, &'static str)> {
    if let Some(a) = get("MASTER_ADDR") {
        return Ok((master_addr(&a), "MASTER_ADDR"));
    }
    for var in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        if let Some(list) = get(var) {
            let host = hostlist::first_host(&list).with_context(|| format!("reading {var}"))?;
            return Ok((host, var));
        }
    }
    bail!("no Slurm node list is set (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): set MASTER_ADDR")
}

/// This node's tasks of the step and the step's nodes, from SLURM_STEP_TASKS_PER_NODE (else
/// SLURM_TASKS_PER_NODE) and SLURM_NODEID, else SLURM_NTASKS_PER_NODE; the local rank must be
/// below the tasks on this node, and the counts must add up to the world size.
fn slurm_tasks_here(
    get: &impl Fn(&str) -> Option<String>,
    local_rank: usize,
    (world_var, world): (&str, usize),
) -> Result<(Option<usize>, Option<usize>)> {
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
    let nodes_said = num("SLURM_STEP_NUM_NODES").or_else(|| num("SLURM_JOB_NUM_NODES"));
    let Some((var, list)) = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .into_iter()
        .find_map(|k| get(k).map(|v| (k, v)))
    else {
        return Ok((num("SLURM_NTASKS_PER_NODE").filter(|&n| n > 0), nodes_said));
    };
    let counts = hostlist::tasks_per_node(&list).with_context(|| format!("reading {var}"))?;
    let total: usize = counts.iter().sum();
    if total != world {
        bail!(
            "{var}={list:?} adds up to {total} tasks but {world_var}={world}: the Slurm \
             variables are inconsistent (was the environment of another step or job kept?)"
        );
    }
    let here = match get("SLURM_NODEID") {
        Some(id) => {
            let id = parse_num("SLURM_NODEID", &id)?;
            let Some(&n) = counts.get(id) else {
                bail!(
                    "SLURM_NODEID={id} is not a node of {var}={list:?} ({} nodes): the Slurm \
                     variables are inconsistent",
                    counts.len()
                );
            };
            if local_rank >= n {
                bail!(
                    "SLURM_LOCALID={local_rank} is not below the {n} task(s) that {var}={list:?} \
                     gives this node (SLURM_NODEID={id}): the Slurm variables are inconsistent"
                );
            }
            Some(n)
        }
        None => counts.iter().all(|&n| n == counts[0]).then_some(counts[0]),
    };
    Ok((here, Some(counts.len())))
}

/// A task of another launcher that `mlperf-run launch` runs as ([`launcher_task`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LauncherTask {
    pub rank: usize,
    pub tasks: usize,
    /// The launcher's tasks on this node, when it says.
    pub on_this_node: Option<usize>,
    /// The variables, as messages name them: `SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2`.
    pub vars: String,
}

/// The task of another launcher that `mlperf-run launch` runs as, when a Slurm step (SLURM_STEP_ID
/// set) or an MPI-like launcher (Open MPI, jsrun, Flux, PALS, Hydra) started it. torchrun's variables are not asked: `launch` gives its
/// workers their own, and a shell may keep ones set by hand.
pub fn launcher_task(get: &impl Fn(&str) -> Option<String>) -> Option<LauncherTask> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let num = |k: &str| get(k)?.trim().parse::<usize>().ok();
    let mpi = TASK_LAUNCHERS.iter().find(|t| t.started(&get));
    let (rank_var, world_var, on_this_node) = match mpi {
        Some(t) if !(get("SLURM_PROCID").is_some() && slurm_agrees_with(&get, t.source)) => {
            (t.rank, t.world, t.local_world.and_then(num))
        }
        _ if get("SLURM_STEP_ID")
            .or_else(|| get("SLURM_STEPID"))
            .is_some() =>
        {
            let here = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
                .into_iter()
                .find_map(&get)
                .and_then(|l| hostlist::tasks_per_node(&l).ok())
                .and_then(|counts| counts.get(num("SLURM_NODEID")?).copied());
            let world = ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]
                .into_iter()
                .find(|k| get(k).is_some())?;
            ("SLURM_PROCID", world, here)
        }
        _ => return None,
    };
    let (rank, tasks) = (num(rank_var)?, num(world_var)?);
    Some(LauncherTask {
        rank,
        tasks,
        on_this_node,
        vars: format!("{rank_var}={rank}, {world_var}={tasks}"),
    })
}

/// How long a data-parallel run waits for its peers, the two settings of
/// docs/distributed.md ("Timeouts").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Forming the group: connecting to rank 0's store and rank 0's wait for every rank
    /// (MLPERF_RUN_RENDEZVOUS_TIMEOUT_S, default 600 s: nodes of a job start minutes apart).
    pub rendezvous: Duration,
    /// Every collective and store call once the group has formed, and NCCL's watchdog
    /// (MLPERF_RUN_DIST_TIMEOUT_S, default 300 s): a dead, stopped or cut-off peer ends the
    /// run on every rank within it.
    pub collective: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            rendezvous: DEFAULT_RENDEZVOUS_TIMEOUT,
            collective: DEFAULT_TIMEOUT,
        }
    }
}

/// The shortest timeout: c10d counts milliseconds, so anything shorter would be 0 ms (every
/// call failing at once).
pub const MIN_TIMEOUT_S: f64 = 0.001;
/// The longest timeout, about 31 years (longer ones do not fit c10d's milliseconds).
pub const MAX_TIMEOUT_S: f64 = 1e9;

impl Timeouts {
    /// Both timeouts the same (tests, `dist-selftest --timeout-s`).
    pub fn both(t: Duration) -> Timeouts {
        Timeouts {
            rendezvous: t,
            collective: t,
        }
    }

    /// From the process environment; see [`Timeouts::from_lookup`].
    pub fn from_env() -> Result<Timeouts> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// MLPERF_RUN_RENDEZVOUS_TIMEOUT_S and MLPERF_RUN_DIST_TIMEOUT_S (seconds, from
    /// [`MIN_TIMEOUT_S`] to [`MAX_TIMEOUT_S`]), each defaulting when unset or blank; anything
    /// else is an error naming it.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Timeouts> {
        let secs = |var: &str, default: Duration| -> Result<Duration> {
            match get(var).filter(|v| !v.trim().is_empty()) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (MIN_TIMEOUT_S..MAX_TIMEOUT_S).contains(s))
                    .map(Duration::from_secs_f64)
                    .with_context(|| {
                        format!(
                            "{var}={v:?} is not a number of seconds from {MIN_TIMEOUT_S} to \
                             {MAX_TIMEOUT_S:e} (unset it for the default of {} s)",
                            default.as_secs()
                        )
                    }),
            }
        };
        Ok(Timeouts {
            rendezvous: secs(
                "MLPERF_RUN_RENDEZVOUS_TIMEOUT_S",
                DEFAULT_RENDEZVOUS_TIMEOUT,
            )?,
            collective: secs("MLPERF_RUN_DIST_TIMEOUT_S", DEFAULT_TIMEOUT)?,
        })
    }
}

/// How many processes of this job run on this node, as the launcher that started this process
/// says ([`Rendezvous::local_world_size`]): LOCAL_WORLD_SIZE (torchrun, `mlperf-run launch`),
/// this node's count in SLURM_STEP_TASKS_PER_NODE (`8(x2),4`: 4 on the third node), an MPI
/// launcher's local size. `None` without a launcher, when it does not say, or when its
/// variables are refused (the caller then assumes one process).
pub fn local_processes_from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<usize> {
    Rendezvous::from_lookup(get)
        .ok()
        .flatten()?
        .local_world_size
}

/// [`local_processes_from_lookup`] on the process environment.
pub fn local_processes() -> Option<usize> {
    local_processes_from_lookup(launcher_var)
}

/// The nodes of this job as its launcher says ([`Rendezvous::nodes`]: WORLD_SIZE /
/// LOCAL_WORLD_SIZE, a Slurm step's nodes, an MPI launcher's size / local size); without a
/// launcher, the Slurm allocation's SLURM_JOB_NUM_NODES (or SLURM_NNODES) when set.
pub fn nodes_from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<usize> {
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<usize>().ok());
    match Rendezvous::from_lookup(&get) {
        Ok(Some(r)) => r.nodes,
        Ok(None) => num("SLURM_JOB_NUM_NODES")
            .or_else(|| num("SLURM_NNODES"))
            .map(|n| n.max(1)),
        Err(_) => None,
    }
}

/// A launcher variable from the process environment; set but blank counts as unset.
fn launcher_var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

fn parse_num(var: &str, v: &str) -> Result<usize> {
    v.trim()
        .parse()
        .with_context(|| format!("{var}={v:?} is not a non-negative integer"))
}

fn parse_positive(var: &str, v: &str, what: &str) -> Result<usize> {
    match v.trim().parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("{var}={v:?} is not a positive integer ({what})"),
    }
}

fn parse_port(var: &str, v: &str) -> Result<u16> {
    match v.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => bail!("{var}={v:?} is not a TCP port (1-65535)"),
    }
}

/// A master address as given, trimmed, an IPv6 address without the brackets of a URL
/// (`[::1]` is `::1`).
fn master_addr(v: &str) -> String {
    let v = v.trim();
    match v.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
        Some(inner) if inner.parse::<std::net::Ipv6Addr>().is_ok() => inner.to_string(),
        _ => v.to_string(),
    }
}

/// A host name or an address: not a URL, not with a port (MASTER_PORT holds that), no spaces.
fn check_master_addr(named: &str, addr: &str) -> Result<()> {
    if addr.is_empty() {
        bail!("the master address is empty");
    }
    if addr.contains("://") || addr.contains('/') {
        bail!(
            "{named} is not a host name or an address (give the host alone, without a scheme \
             or path)"
        );
    }
    if addr.chars().any(char::is_whitespace) {
        bail!("{named} is not a host name or an address (it holds a space)");
    }
    if addr.contains(':') && addr.parse::<std::net::Ipv6Addr>().is_err() {
        bail!(
            "{named} is not a host name or an address: give the host alone and the port in \
             MASTER_PORT (an IPv6 address is written without a port, e.g. fd00::1)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn rdv(vars: &[(&str, &str)]) -> Result<Option<Rendezvous>> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Rendezvous::from_lookup(|k| m.get(k).cloned())
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "1234"),
        ("RANK", "9"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "1"),
    ];

    /// Task 9 of a 16-task srun step on 2 nodes (8 each), node 1, job 123456 on n[1-4], the
    /// step on n[3-4].
    const SLURM_STEP: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "123456"),
        ("SLURM_JOB_NODELIST", "n[1-4]"),
        ("SLURM_NTASKS", "32"),
        ("SLURM_TASKS_PER_NODE", "8(x4)"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NODELIST", "n[3-4]"),
        ("SLURM_STEP_NUM_TASKS", "16"),
        ("SLURM_STEP_TASKS_PER_NODE", "8(x2)"),
        ("SLURM_PROCID", "9"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURMD_NODENAME", "n4"),
    ];

    fn local(vars: &[(&str, &str)]) -> Option<usize> {
        let m: HashMap<&str, &str> = vars.iter().copied().collect();
        local_processes_from_lookup(|k| m.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn processes_on_this_node_from_torchrun_or_slurm() {
        assert_eq!(local(&[]), None);
        let mut torchrun = TORCHRUN.to_vec();
        torchrun.push(("LOCAL_WORLD_SIZE", "8"));
        assert_eq!(local(&torchrun), Some(8));
        assert_eq!(
            local(TORCHRUN),
            None,
            "torchrun without LOCAL_WORLD_SIZE does not say"
        );
        let mut slurm = SLURM_STEP.to_vec();
        slurm.push(("SLURM_NTASKS_PER_NODE", "4"));
        assert_eq!(
            local(&slurm),
            Some(8),
            "the step's count for this node wins"
        );
        slurm.retain(|(k, _)| !["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"].contains(k));
        assert_eq!(local(&slurm), Some(4), "else SLURM_NTASKS_PER_NODE");
        // outside a launcher, Slurm's counts are the allocation's, not this process's
        assert_eq!(local(&[("SLURM_TASKS_PER_NODE", "2")]), None);
        // refused variables: unknown, not a guess
        let mut bad = torchrun.clone();
        bad.retain(|(k, _)| *k != "LOCAL_WORLD_SIZE");
        bad.push(("LOCAL_WORLD_SIZE", "eight"));
        assert_eq!(local(&bad), None);
    }

    /// SLURM_STEP_TASKS_PER_NODE `8(x2),4` is 8 tasks on nodes 0 and 1 and 4 on node 2: a
    /// rank of node 2 shares its CPUs 4 ways (it took the first count, 8, for every node).
    #[test]
    fn the_tasks_on_this_node_are_its_own_count() {
        let node = |id: &'static str, local: &'static str| {
            let mut v = SLURM_STEP.to_vec();
            v.retain(|(k, _)| !["SLURM_NODEID", "SLURM_LOCALID", "SLURM_PROCID"].contains(k));
            v.extend([
                ("SLURM_NODEID", id),
                ("SLURM_LOCALID", local),
                ("SLURM_PROCID", "18"),
            ]);
            v.retain(|(k, _)| !["SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"].contains(k));
            v.extend([
                ("SLURM_STEP_TASKS_PER_NODE", "8(x2),4"),
                ("SLURM_STEP_NUM_TASKS", "20"),
            ]);
            v
        };
        let r = rdv(&node("2", "2")).unwrap().unwrap();
        assert_eq!((r.local_world_size, r.nodes), (Some(4), Some(3)));
        assert_eq!(local(&node("0", "2")), Some(8));
        let err = |v: &[(&str, &str)]| format!("{:#}", rdv(v).unwrap_err());
        let e = err(&node("2", "5"));
        assert!(
            e.contains("SLURM_LOCALID=5 is not below the 4 task(s)")
                && e.contains("SLURM_STEP_TASKS_PER_NODE=\"8(x2),4\"")
                && e.contains("SLURM_NODEID=2"),
            "{e}"
        );
        let e = err(&node("3", "0"));
        assert!(e.contains("SLURM_NODEID=3 is not a node of"), "{e}");
        let mut wrong_sum = node("2", "0");
        wrong_sum.push(("SLURM_STEP_NUM_TASKS", "24"));
        wrong_sum.retain(|&(k, v)| !(k == "SLURM_STEP_NUM_TASKS" && v == "20"));
        let e = err(&wrong_sum);
        assert!(
            e.contains("adds up to 20 tasks but SLURM_STEP_NUM_TASKS=24"),
            "{e}"
        );
        let mut malformed = node("2", "0");
        malformed.retain(|(k, _)| *k != "SLURM_STEP_TASKS_PER_NODE");
        malformed.push(("SLURM_STEP_TASKS_PER_NODE", "8(x2"));
        let e = err(&malformed);
        assert!(e.contains("reading SLURM_STEP_TASKS_PER_NODE"), "{e}");
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        assert_eq!(rdv(&[]).unwrap(), None);
        assert_eq!(rdv(&[("SLURM_JOB_ID", "5")]).unwrap(), None);
    }

    #[test]
    fn torchrun_variables() {
        let r = rdv(TORCHRUN).unwrap().unwrap();
        assert_eq!(
            r,
            Rendezvous {
                master_addr: "10.0.0.1".into(),
                master_port: 1234,
                rank: 9,
                world_size: 16,
                local_rank: 1,
                source: Source::Torchrun,
                master_from: "MASTER_ADDR",
                world_from: "WORLD_SIZE",
                local_world_size: None,
                nodes: None,
                not_read: None,
            }
        );
    }

    #[test]
    fn torchrun_errors_name_the_missing_variable() {
        for missing in ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK"] {
            let vars: Vec<_> = TORCHRUN
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let err = format!("{:#}", rdv(&vars).unwrap_err());
            assert!(err.contains(&format!("{missing} is not set")), "{err}");
        }
        let err = format!("{:#}", rdv(&[("MASTER_ADDR", "h")]).unwrap_err());
        assert!(err.contains("RANK and WORLD_SIZE are not"), "{err}");
    }

    #[test]
    fn torchrun_bad_values() {
        let with = |k: &str, v: &str| -> String {
            let mut vars: Vec<(&str, &str)> = TORCHRUN.to_vec();
            vars.retain(|(kk, _)| *kk != k);
            vars.push((k, v));
            format!("{:#}", rdv(&vars).unwrap_err())
        };
        assert!(with("RANK", "16").contains("RANK=16 is not below WORLD_SIZE=16"));
        assert!(with("RANK", "-1").contains("RANK=\"-1\" is not a non-negative integer"));
        assert!(with("MASTER_PORT", "70000").contains("MASTER_PORT=\"70000\" is not a TCP port"));
        assert!(with("MASTER_PORT", "0").contains("not a TCP port"));
        assert!(with("WORLD_SIZE", "0").contains("WORLD_SIZE is 0"));
        assert!(with("LOCAL_RANK", "12").contains("LOCAL_RANK=12 is larger than RANK=9"));
    }

    #[test]
    fn local_world_size_must_agree_with_the_ranks() {
        let with = |v: &str| {
            let mut vars: Vec<(&str, &str)> = TORCHRUN.to_vec();
            vars.push(("LOCAL_WORLD_SIZE", v));
            rdv(&vars).map_err(|e| format!("{e:#}"))
        };
        assert!(with("8").is_ok());
        assert!(with("eight")
            .unwrap_err()
            .contains("LOCAL_WORLD_SIZE=\"eight\" is not a positive integer"));
        assert!(with("0").unwrap_err().contains("not a positive integer"));
        assert!(with("1")
            .unwrap_err()
            .contains("LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"));
        assert!(with("32")
            .unwrap_err()
            .contains("LOCAL_WORLD_SIZE=32 is larger than WORLD_SIZE=16"));
    }

    #[test]
    fn slurm_variables() {
        let r = rdv(&[
            ("SLURM_PROCID", "11"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_NODELIST", "dgx[07-08],login2"),
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(r.master_addr, "dgx07");
        assert_eq!(r.master_port, 23456);
        assert_eq!((r.rank, r.world_size, r.local_rank), (11, 16, 3));
        assert_eq!(r.source, Source::Slurm);
        assert_eq!(
            r.master_named(),
            "dgx07 (the first host of SLURM_JOB_NODELIST)"
        );
    }

    #[test]
    fn slurm_honours_master_overrides_and_falls_back_to_nodelist() {
        let r = rdv(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NODELIST", "n[5-6]"),
            ("MASTER_ADDR", "ib0-host"),
            ("MASTER_PORT", "4000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((r.master_addr.as_str(), r.master_port), ("ib0-host", 4000));
        assert_eq!(r.master_named(), "MASTER_ADDR=ib0-host");
        let r = rdv(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_NODELIST", "n[5-6]"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.master_addr.as_str(), r.master_port),
            ("n5", DEFAULT_PORT)
        );
        assert_eq!(r.master_from, "SLURM_NODELIST");
    }

    #[test]
    fn slurm_errors_name_the_missing_variable() {
        let base = [
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_STEP_ID", "0"),
        ];
        for missing in ["SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST"] {
            let vars: Vec<_> = base
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let err = format!("{:#}", rdv(&vars).unwrap_err());
            assert!(err.contains(missing), "{err}");
        }
        let mut bad = base.to_vec();
        bad[3] = ("SLURM_JOB_NODELIST", "n[1-");
        // one message names every missing variable (it named the node list alone, then the
        // next one on the next try)
        let step = [("SLURM_PROCID", "0"), ("SLURM_STEP_ID", "0")];
        let err = format!("{:#}", rdv(&step).unwrap_err());
        assert!(
            err.contains(
                "SLURM_PROCID=0 is set but SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST"
            ) && err.contains("are not"),
            "{err}"
        );
        let err = format!("{:#}", rdv(&bad).unwrap_err());
        assert!(
            err.contains("SLURM_JOB_NODELIST") && err.contains("unclosed"),
            "{err}"
        );
    }

    #[test]
    fn timeouts_default_parse_and_name_a_bad_value() {
        let t = |vars: &[(&str, &str)]| {
            Timeouts::from_lookup(|k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert_eq!(t(&[]).unwrap(), Timeouts::default());
        assert_eq!(
            t(&[("MLPERF_RUN_DIST_TIMEOUT_S", " ")]).unwrap(),
            Timeouts::default()
        );
        assert_eq!(
            t(&[
                ("MLPERF_RUN_DIST_TIMEOUT_S", "12.5"),
                ("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "90")
            ])
            .unwrap(),
            Timeouts {
                rendezvous: Duration::from_secs(90),
                collective: Duration::from_millis(12_500)
            }
        );
        for bad in ["0", "-3", "soon", "inf", "NaN"] {
            let e = t(&[("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", bad)]).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S") && msg.contains("600 s"),
                "{msg}"
            );
        }
    }

    #[test]
    fn torchrun_wins_over_slurm() {
        let mut vars = TORCHRUN.to_vec();
        vars.push(("SLURM_PROCID", "0"));
        assert_eq!(rdv(&vars).unwrap().unwrap().source, Source::Torchrun);
    }

    fn set(
        base: &[(&'static str, &'static str)],
        changes: &[(&'static str, &'static str)],
    ) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = base
            .iter()
            .copied()
            .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
            .collect();
        v.extend(changes.iter().copied().filter(|(_, v)| !v.is_empty()));
        v
    }

    fn err(vars: &[(&str, &str)]) -> String {
        format!("{:#}", rdv(vars).unwrap_err())
    }

    /// A step on part of the job's nodes (`srun -N2` in a 4-node job) meets on the step's
    /// first host with the step's task count: the job's first host (n1) runs no task of it,
    /// and SLURM_NTASKS may be the job's (`srun --export`, `-E`).
    #[test]
    fn a_step_meets_on_its_own_first_host_with_its_own_task_count() {
        let r = rdv(SLURM_STEP).unwrap().unwrap();
        assert_eq!(
            (
                r.master_addr.as_str(),
                r.master_from,
                r.world_size,
                r.world_from
            ),
            ("n3", "SLURM_STEP_NODELIST", 16, "SLURM_STEP_NUM_TASKS")
        );
        assert_eq!(
            (r.rank, r.local_rank, r.local_world_size, r.nodes),
            (9, 1, Some(8), Some(2))
        );
        assert_eq!(r.master_port, 23456);
        assert_eq!(
            r.master_named(),
            "n3 (the first host of SLURM_STEP_NODELIST)"
        );
    }

    /// The batch script's own process (or an salloc shell's) sees SLURM_PROCID=0 and the job's
    /// SLURM_NTASKS but no step: it waited the whole rendezvous timeout (600 s) for tasks that
    /// never come.
    #[test]
    fn the_batch_scripts_own_process_is_refused_at_once() {
        let batch = [
            ("SLURM_JOB_ID", "77"),
            ("SLURM_JOB_NODELIST", "gnode[10,20]"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_TASKS_PER_NODE", "8(x2)"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURMD_NODENAME", "gnode10"),
        ];
        let e = err(&batch);
        assert!(
            e.contains("SLURM_PROCID=0 and SLURM_NTASKS=16 are set but SLURM_STEP_ID is not")
                && e.contains("srun --ntasks-per-node=8")
                && e.contains("mlperf-run launch"),
            "{e}"
        );
        // in a job of one task, or of no task count (`sbatch -N1 --gpus-per-node=8`, whose
        // batch process sees no SLURM_NTASKS), it is a process of its own, as without a
        // launcher (it was refused: "SLURM_NTASKS is not set")
        let one = set(
            &batch,
            &[("SLURM_NTASKS", "1"), ("SLURM_TASKS_PER_NODE", "1")],
        );
        assert_eq!(rdv(&one).unwrap(), None);
        let no_count = set(
            &batch,
            &[("SLURM_NTASKS", ""), ("SLURM_TASKS_PER_NODE", "64")],
        );
        assert_eq!(rdv(&no_count).unwrap(), None);
        let get = |k: &str| {
            no_count
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(
            launcher(&get),
            None,
            "not under a launcher: it may start workers"
        );
        // old Slurm's SLURM_STEPID marks a step too
        let old = set(&batch, &[("SLURM_STEPID", "3")]);
        assert_eq!(rdv(&old).unwrap().unwrap().world_size, 16);
    }

    /// Rank 0 hosts the store; when it runs on another node than the first host of the list
    /// (a distribution or heterogeneous step that places it elsewhere), every rank waited the
    /// whole rendezvous timeout.
    #[test]
    fn rank_0_on_another_host_than_the_master_is_refused() {
        let rank0 = set(
            SLURM_STEP,
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_NODEID", "0"),
            ],
        );
        let e = err(&set(&rank0, &[("SLURMD_NODENAME", "n4")]));
        assert!(
            e.contains("rank 0 (SLURM_PROCID=0) runs on n4 (SLURMD_NODENAME)")
                && e.contains("the first host of SLURM_STEP_NODELIST")
                && e.contains("Set MASTER_ADDR"),
            "{e}"
        );
        assert!(rdv(&set(&rank0, &[("SLURMD_NODENAME", "N3")])).is_ok());
        assert!(rdv(&set(
            &rank0,
            &[("SLURMD_NODENAME", "n4"), ("MASTER_ADDR", "n4")]
        ))
        .is_ok());
    }

    const OMPI: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "8"),
    ];

    /// Processes that mpirun started each trained alone as rank 0 of 1, over the same results.
    #[test]
    fn open_mpi_and_hydra_ranks_join_one_group() {
        let r = rdv(OMPI).unwrap().unwrap();
        assert_eq!(
            (
                r.source,
                r.rank,
                r.world_size,
                r.local_rank,
                r.local_world_size
            ),
            (Source::OpenMpi, 3, 8, 3, Some(8))
        );
        assert_eq!(
            (r.master_addr.as_str(), r.master_port),
            ("127.0.0.1", DEFAULT_PORT)
        );
        assert_eq!(r.master_named(), format!("127.0.0.1 ({ONE_NODE})"));
        // across nodes mpirun names no master
        let two_nodes = set(OMPI, &[("OMPI_COMM_WORLD_SIZE", "16")]);
        let e = err(&two_nodes);
        assert!(
            e.contains("Open MPI's mpirun started this process as one of OMPI_COMM_WORLD_SIZE=16")
                && e.contains("mpirun -x MASTER_ADDR="),
            "{e}"
        );
        let given = set(
            &two_nodes,
            &[("MASTER_ADDR", "n1"), ("MASTER_PORT", "4000")],
        );
        let r = rdv(&given).unwrap().unwrap();
        assert_eq!(
            (r.master_addr.as_str(), r.master_port, r.nodes),
            ("n1", 4000, Some(2))
        );
        let e = err(&set(OMPI, &[("OMPI_COMM_WORLD_LOCAL_RANK", "")]));
        assert!(e.contains("OMPI_COMM_WORLD_LOCAL_RANK is not set"), "{e}");
        let e = err(&set(OMPI, &[("OMPI_COMM_WORLD_RANK", "8")]));
        assert!(
            e.contains("OMPI_COMM_WORLD_RANK=8 is not below OMPI_COMM_WORLD_SIZE=8"),
            "{e}"
        );

        let hydra = [
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("MPI_LOCALRANKID", "1"),
            ("MPI_LOCALNRANKS", "2"),
        ];
        let r = rdv(&hydra).unwrap().unwrap();
        assert_eq!((r.source, r.rank, r.world_size), (Source::Hydra, 1, 2));
        let e = err(&set(&hydra, &[("MPI_LOCALNRANKS", "1")]));
        assert!(e.contains("mpiexec -genv MASTER_ADDR"), "{e}");
    }

    /// mpirun inside a Slurm job starts its ranks through one srun task per node: their
    /// SLURM_PROCID is the node's, and read as the rank every rank of a node was the same one.
    /// srun's own MPI plugins set both, alike: then Slurm's variables (with the master) serve.
    #[test]
    fn an_mpi_launcher_wins_over_the_slurm_task_it_runs_in_unless_they_agree() {
        let orted = set(
            SLURM_STEP,
            &[
                ("SLURM_PROCID", "1"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_STEP_NUM_TASKS", "2"),
                ("SLURM_STEP_TASKS_PER_NODE", "1(x2)"),
            ],
        );
        let mut vars = set(&orted, &[("MASTER_ADDR", "n3")]);
        vars.extend(set(
            OMPI,
            &[
                ("OMPI_COMM_WORLD_RANK", "11"),
                ("OMPI_COMM_WORLD_SIZE", "16"),
            ],
        ));
        let r = rdv(&vars).unwrap().unwrap();
        assert_eq!(
            (r.source, r.rank, r.world_size, r.local_rank),
            (Source::OpenMpi, 11, 16, 3)
        );
        assert!(
            r.not_read
                .as_deref()
                .unwrap()
                .contains("SLURM_PROCID=1 (srun)"),
            "{r:?}"
        );

        let mut pmi2 = SLURM_STEP.to_vec();
        pmi2.extend([("PMI_RANK", "9"), ("PMI_SIZE", "16")]);
        let r = rdv(&pmi2).unwrap().unwrap();
        assert_eq!((r.source, r.master_addr.as_str()), (Source::Slurm, "n3"));
    }

    /// Task 5 of `flux run -N1 -n8`.
    const FLUX: &[(&str, &str)] = &[
        ("FLUX_JOB_ID", "f2oLkTLb"),
        ("FLUX_TASK_RANK", "5"),
        ("FLUX_TASK_LOCAL_ID", "5"),
        ("FLUX_JOB_SIZE", "8"),
        ("FLUX_JOB_NNODES", "1"),
    ];

    /// Processes that `flux run` started each trained alone as rank 0 of 1 (no variable of
    /// theirs was read), all over the same results.
    #[test]
    fn flux_tasks_join_one_group() {
        let r = rdv(FLUX).unwrap().unwrap();
        assert_eq!(
            (r.source, r.rank, r.world_size, r.local_rank, r.nodes),
            (Source::Flux, 5, 8, 5, Some(1))
        );
        assert_eq!(
            (r.master_addr.as_str(), r.master_from, r.world_from),
            ("127.0.0.1", ONE_NODE, "FLUX_JOB_SIZE")
        );
        // across nodes Flux names no master
        let two = set(FLUX, &[("FLUX_JOB_SIZE", "16"), ("FLUX_JOB_NNODES", "2")]);
        let e = err(&two);
        assert!(
            e.contains("Flux's flux run started this process as one of FLUX_JOB_SIZE=16 ranks, on FLUX_JOB_NNODES=2 nodes")
                && e.contains("flux run --env=MASTER_ADDR="),
            "{e}"
        );
        let r = rdv(&set(&two, &[("MASTER_ADDR", "n1")])).unwrap().unwrap();
        assert_eq!((r.master_addr.as_str(), r.nodes), ("n1", Some(2)));
        let e = err(&set(FLUX, &[("FLUX_TASK_LOCAL_ID", "")]));
        assert!(
            e.contains("FLUX_TASK_LOCAL_ID is not set: Flux's flux run started this process")
                && e.contains("RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
            "{e}"
        );
        let e = err(&set(FLUX, &[("FLUX_TASK_RANK", "8")]));
        assert!(
            e.contains("FLUX_TASK_RANK=8 is not below FLUX_JOB_SIZE=8"),
            "{e}"
        );
        // Flux's PMI and cray-pals plugins set PMI_RANK, PMI_SIZE, PALS_RANKID beside: Flux's
        // are read (Hydra's asked for MPI_LOCALRANKID), and -v names the others
        let mut plugins = FLUX.to_vec();
        plugins.extend([("PMI_RANK", "5"), ("PMI_SIZE", "8"), ("PALS_RANKID", "5")]);
        let r = rdv(&plugins).unwrap().unwrap();
        assert_eq!(r.source, Source::Flux);
        let not_read = r.not_read.unwrap();
        assert!(
            not_read.contains("PALS_RANKID=5 (HPE PALS's mpiexec (Cray PBS))")
                && not_read.contains("PMI_RANK=5"),
            "{not_read}"
        );
        // `launch` as a Flux task (one per node) is found
        let m: HashMap<&str, &str> = two.iter().copied().collect();
        let task = launcher_task(&|k: &str| m.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!((task.rank, task.tasks, task.on_this_node), (5, 16, None));
    }

    /// The script of `flux batch` is the one task of its job: a process of its own, as without
    /// a launcher (it may start the node's workers), and what it starts is read by its own
    /// launcher's variables, not by the FLUX_TASK_RANK=0 they keep.
    #[test]
    fn a_flux_job_of_one_task_is_no_launcher() {
        let batch = set(
            FLUX,
            &[
                ("FLUX_TASK_RANK", "0"),
                ("FLUX_TASK_LOCAL_ID", "0"),
                ("FLUX_JOB_SIZE", "1"),
            ],
        );
        assert_eq!(rdv(&batch).unwrap(), None);
        let mut hydra = batch.clone();
        hydra.extend([
            ("PMI_RANK", "3"),
            ("PMI_SIZE", "4"),
            ("MPI_LOCALRANKID", "3"),
            ("MPI_LOCALNRANKS", "4"),
        ]);
        let r = rdv(&hydra).unwrap().unwrap();
        assert_eq!((r.source, r.rank, r.world_size), (Source::Hydra, 3, 4));
    }

    /// Rank 3 of `mpiexec -n 8 --ppn 4` under PBS with HPE PALS.
    const PALS: &[(&str, &str)] = &[
        ("PALS_APID", "a1b2"),
        ("PALS_NODEID", "0"),
        ("PALS_RANKID", "3"),
        ("PALS_LOCAL_RANKID", "3"),
        ("PALS_LOCAL_SIZE", "4"),
        ("PALS_DEPTH", "1"),
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "8"),
        ("PMI_LOCAL_RANK", "3"),
        ("PMI_LOCAL_SIZE", "4"),
    ];

    /// PALS's ranks each trained alone; with Cray PMI's PMI_RANK and PMI_SIZE beside, they
    /// were taken for Hydra's and refused for its MPI_LOCALRANKID.
    #[test]
    fn pals_ranks_join_one_group_with_pmi_size_and_are_refused_without() {
        let across = err(PALS);
        assert!(
            across.contains("HPE PALS's mpiexec (Cray PBS) started this process as one of PMI_SIZE=8 ranks, 4 on this node")
                && across.contains("$PBS_NODEFILE"),
            "{across}"
        );
        let r = rdv(&set(PALS, &[("MASTER_ADDR", "x1000c0s0b0n0")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                r.source,
                r.rank,
                r.world_size,
                r.local_rank,
                r.local_world_size,
                r.nodes
            ),
            (Source::Pals, 3, 8, 3, Some(4), Some(2))
        );
        let one_node = rdv(&set(PALS, &[("PMI_SIZE", "4")])).unwrap().unwrap();
        assert_eq!(one_node.master_from, ONE_NODE);
        // PALS alone names no world size: refused, never one process of its own
        let pals_only: Vec<_> = PALS
            .iter()
            .copied()
            .filter(|(k, _)| k.starts_with("PALS_"))
            .collect();
        let e = err(&pals_only);
        assert!(
            e.contains("PMI_SIZE is not set: HPE PALS's mpiexec (Cray PBS) started this process (PALS_RANKID=3 is set)")
                && e.contains("PALS itself puts no world size")
                && e.contains("`mlperf-run launch`"),
            "{e}"
        );
    }

    /// Task 7 of `jsrun -n12 -a1 -r6` (two hosts, six tasks each).
    #[test]
    fn jsrun_tasks_join_one_group() {
        let jsm = [
            ("JSM_NAMESPACE_RANK", "7"),
            ("JSM_NAMESPACE_SIZE", "12"),
            ("JSM_NAMESPACE_LOCAL_RANK", "1"),
            ("JSM_NAMESPACE_LOCAL_SIZE", "6"),
            ("PMIX_RANK", "7"),
        ];
        let e = err(&jsm);
        assert!(
            e.contains("IBM LSF's jsrun started this process as one of JSM_NAMESPACE_SIZE=12 ranks, 6 on this node")
                && e.contains("jsrun -E MASTER_ADDR="),
            "{e}"
        );
        let r = rdv(&set(
            &jsm,
            &[("MASTER_ADDR", "h1"), ("MASTER_PORT", "4000")],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.source, r.rank, r.world_size, r.local_rank, r.nodes),
            (Source::Jsm, 7, 12, 1, Some(2))
        );
        let e = err(&set(&jsm, &[("JSM_NAMESPACE_SIZE", "")]));
        assert!(
            e.contains("JSM_NAMESPACE_SIZE is not set: IBM LSF's jsrun started this process (JSM_NAMESPACE_RANK=7 is set)"),
            "{e}"
        );
    }

    /// aprun gives each process ALPS_APP_PE, its rank, and nothing of the world or the node.
    #[test]
    fn an_alps_rank_alone_is_refused() {
        let e = err(&[("ALPS_APP_PE", "5"), ("ALPS_APP_ID", "123")]);
        assert!(
            e.contains("ALPS_APP_PE=5 is set: Cray ALPS's aprun started this process")
                && e.contains("no world size and no local rank")
                && e.contains("torchrun variables"),
            "{e}"
        );
    }

    #[test]
    fn a_pmix_rank_alone_is_refused() {
        let e = err(&[("PMIX_RANK", "2")]);
        assert!(
            e.contains("PMIX_RANK=2 is set") && e.contains("no world size"),
            "{e}"
        );
        // srun --mpi=pmix sets it beside Slurm's
        let mut vars = SLURM_STEP.to_vec();
        vars.push(("PMIX_RANK", "9"));
        assert_eq!(rdv(&vars).unwrap().unwrap().source, Source::Slurm);
    }

    #[test]
    fn the_master_address_is_a_host_alone() {
        let addr = |a: &'static str| rdv(&set(TORCHRUN, &[("MASTER_ADDR", a)]));
        assert_eq!(addr("[::1]").unwrap().unwrap().master_addr, "::1");
        assert_eq!(addr("fd00::1").unwrap().unwrap().master_addr, "fd00::1");
        assert_eq!(addr(" node1 ").unwrap().unwrap().master_addr, "node1");
        for (bad, want) in [
            ("10.0.0.1:29500", "the port in MASTER_PORT"),
            ("[::1]:29500", "the port in MASTER_PORT"),
            ("tcp://10.0.0.1", "without a scheme"),
            ("a b", "holds a space"),
        ] {
            let e = format!("{:#}", addr(bad).unwrap_err());
            assert!(
                e.contains(&format!("MASTER_ADDR={bad} is not a host name")) && e.contains(want),
                "{e}"
            );
        }
    }

    #[test]
    fn timeouts_below_a_millisecond_or_huge_are_named_with_the_range() {
        let t = |v: &str| {
            Timeouts::from_lookup(|k| (k == "MLPERF_RUN_DIST_TIMEOUT_S").then(|| v.to_string()))
        };
        for bad in ["0.0004", "1e12", "1e9"] {
            let e = format!("{:#}", t(bad).unwrap_err());
            assert!(
                e.contains(&format!(
                    "MLPERF_RUN_DIST_TIMEOUT_S=\"{bad}\" is not a number of seconds from 0.001 \
                     to 1e9"
                )),
                "{e}"
            );
        }
        assert_eq!(t("0.001").unwrap().collective, Duration::from_millis(1));
        assert_eq!(
            t("999999999").unwrap().collective,
            Duration::from_secs(999_999_999)
        );
    }

    /// Workers of `mlperf-run launch` inside an srun step see the step's variables too: the
    /// node count is launch's (world / local world), not the allocation's.
    #[test]
    fn nodes_follow_the_launcher_that_started_the_process() {
        let nodes = |vars: &[(&str, &str)]| {
            let m: HashMap<&str, &str> = vars.iter().copied().collect();
            nodes_from_lookup(|k| m.get(k).map(|v| v.to_string()))
        };
        let mut launch_in_srun = SLURM_STEP.to_vec();
        launch_in_srun.extend(set(TORCHRUN, &[("LOCAL_WORLD_SIZE", "8")]));
        launch_in_srun.push(("SLURM_JOB_NUM_NODES", "4"));
        assert_eq!(nodes(&launch_in_srun), Some(2));
        assert_eq!(nodes(SLURM_STEP), Some(2));
        assert_eq!(nodes(&[("SLURM_JOB_NUM_NODES", "4")]), Some(4));
        assert_eq!(nodes(&[]), None);
    }

    /// `mlperf-run launch` as a task of an srun step or of mpirun: its rank and task count.
    #[test]
    fn a_launch_task_of_srun_or_mpirun_is_found() {
        let task = |vars: &[(&str, &str)]| {
            let m: HashMap<&str, &str> = vars.iter().copied().collect();
            launcher_task(&|k: &str| m.get(k).map(|v| v.to_string()))
        };
        assert_eq!(
            task(SLURM_STEP),
            Some(LauncherTask {
                rank: 9,
                tasks: 16,
                on_this_node: Some(8),
                vars: "SLURM_PROCID=9, SLURM_STEP_NUM_TASKS=16".to_string()
            })
        );
        let t = task(OMPI).unwrap();
        assert_eq!((t.rank, t.tasks, t.on_this_node), (3, 8, Some(8)));
        // the batch script's own process is no task; torchrun's variables are not asked
        let batch: Vec<_> = SLURM_STEP
            .iter()
            .copied()
            .filter(|(k, _)| !k.starts_with("SLURM_STEP"))
            .collect();
        assert_eq!(task(&batch), None);
        assert_eq!(task(TORCHRUN), None);
    }

    #[test]
    fn torchrun_wins_over_slurm_and_says_so() {
        let mut vars = TORCHRUN.to_vec();
        vars.extend(SLURM_STEP.iter().copied());
        let r = rdv(&vars).unwrap().unwrap();
        assert_eq!((r.source, r.rank, r.world_size), (Source::Torchrun, 9, 16));
        assert_eq!(r.not_read.as_deref(), Some("SLURM_PROCID=9 (srun)"));
    }
}
