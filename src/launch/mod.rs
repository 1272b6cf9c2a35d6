//! `mlperf-run launch`: start N local workers of this binary with torchrun's environment
//! (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), on one node or
//! as node `--node-rank` of `--nnodes` (started once on every node, as torchrun is), prefix and
//! forward their output, and fail fast: when a worker fails, the others get a grace period
//! to notice (their next collective fails, so they can log the run as aborted), then are
//! terminated, and launch exits non-zero naming the failed rank.
//!
//! Also holds the arguments of the hidden `dist-selftest` subcommand (its work is in
//! [`selftest`], which needs the `torch` feature).
#[cfg(feature = "torch")]
pub mod selftest;

use crate::util::ExitStatus;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example: mlperf-run launch --nproc-per-node 8 -- resnet --division closed \
                  --config configs/resnet/closed_8xA100.toml --device cuda --data /data/imagenet"
)]
pub struct LaunchArgs {
    /// Worker processes to start on this node (one per GPU).
    #[arg(long)]
    pub nproc_per_node: usize,
    /// Nodes in the job; every node runs `launch` with the same --nnodes, --nproc-per-node,
    /// --master-addr and --master-port, and its own --node-rank.
    #[arg(long, default_value_t = 1)]
    pub nnodes: usize,
    /// This node's index, 0 to --nnodes - 1 (node 0 runs rank 0, which serves the rendezvous).
    #[arg(long, default_value_t = 0)]
    pub node_rank: usize,
    /// Address of node 0 that every node reaches (required with --nnodes above 1).
    #[arg(long)]
    pub master_addr: Option<String>,
    /// Rendezvous port on the master (0: pick a free one; one node only).
    #[arg(long, default_value_t = 29500)]
    pub master_port: u16,
    /// Seconds the other workers get to stop on their own after one fails, before they are
    /// terminated.
    #[arg(long, default_value_t = 30.0)]
    pub grace_s: f64,
    /// The mlperf-run arguments every worker runs, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub worker_args: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelftestMode {
    /// Check every collective's result.
    Collectives,
    /// Train a tiny model data-parallel and save its trainable parameters (see --out).
    Equiv,
    /// Allreduce every --step-ms for --steps steps (failure tests: --die-rank).
    Loop,
    /// Measure how much of the gradient all-reduce hides behind the backward (per-bucket
    /// timestamps) for a ResNet (--model, --image-size, --batch).
    Overlap,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelftestModel {
    /// The tiny ResNet of configs/resnet/tiny_cpu.toml (width 8, one block per stage).
    Tiny,
    /// ResNet-50 v1.5, 1000 classes.
    Resnet50,
}

#[derive(clap::Args, Debug)]
pub struct SelftestArgs {
    #[arg(long, value_enum, default_value = "collectives")]
    pub mode: SelftestMode,
    /// Use NCCL on cuda:LOCAL_RANK instead of Gloo on the CPU.
    #[arg(long)]
    pub nccl: bool,
    /// Collective timeout in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
    /// Training steps (equiv) or allreduce steps (loop).
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    /// Micro-batches accumulated per step on each rank (equiv).
    #[arg(long, default_value_t = 1)]
    pub accum: usize,
    /// Gradient bucket size in bytes (default: 1024 for equiv, where small buckets exercise
    /// several; 25 MB for overlap).
    #[arg(long)]
    pub bucket_bytes: Option<usize>,
    /// All-reduce each gradient bucket during the backward (equiv, overlap; default on for
    /// overlap, off for equiv).
    #[arg(long, value_name = "BOOL")]
    pub overlap: Option<bool>,
    /// Gradients from autograd.grad added into an accumulator (the ResNet trainer's path)
    /// instead of loss.backward() into .grad (equiv).
    #[arg(long)]
    pub returned_grads: bool,
    /// Bucket-wise gradient clipping to this norm before the all-reduce (equiv).
    #[arg(long)]
    pub bucket_clip: Option<f64>,
    /// Model (overlap).
    #[arg(long, value_enum, default_value = "tiny")]
    pub model: SelftestModel,
    /// Image side in pixels (overlap).
    #[arg(long, default_value_t = 32)]
    pub image_size: i64,
    /// Images per rank per step (overlap).
    #[arg(long, default_value_t = 16)]
    pub batch: i64,
    /// Folder for `rank<r>.safetensors` with the final trainable parameters (equiv).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// This rank exits with status 3 at step --die-after (loop).
    #[arg(long)]
    pub die_rank: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub die_after: usize,
    /// Pause between loop steps, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub step_ms: u64,
}

pub fn run_selftest(args: SelftestArgs) -> Result<ExitStatus> {
    #[cfg(feature = "torch")]
    {
        selftest::run(&args)
    }
    #[cfg(not(feature = "torch"))]
    {
        let _ = args;
        bail!("dist-selftest needs libtorch: rebuild mlperf-run with the `torch` feature")
    }
}

/// The most workers `launch` starts on one node.
pub const MAX_NPROC_PER_NODE: usize = 1024;

/// A TCP port that was free on 127.0.0.1 a moment ago.
pub fn free_local_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .context("binding 127.0.0.1:0 to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// How a finished worker ended.
fn describe(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "an unknown status".into(),
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid; a child that already exited (zombie until
    // waited) ignores the signal.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

/// Forwards a worker's stream line by line with a `[rank r]` prefix.
fn forward(
    stream: impl std::io::Read + Send + 'static,
    rank: usize,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line);
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "[rank {rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[rank {rank}] {line}");
            }
        }
    })
}

/// Where this node's workers meet: (master address, first rank on this node, world size).
fn node_layout(args: &LaunchArgs) -> Result<(String, usize, usize)> {
    let n = args.nproc_per_node;
    if n == 0 {
        bail!("--nproc-per-node must be at least 1");
    }
    if n > MAX_NPROC_PER_NODE {
        bail!(
            "--nproc-per-node {n} is more than {MAX_NPROC_PER_NODE} workers on one node: start \
             one worker per GPU (or a few on a CPU node)"
        );
    }
    if args.nnodes == 0 {
        bail!("--nnodes must be at least 1");
    }
    if args.node_rank >= args.nnodes {
        bail!(
            "--node-rank {} is not a node of --nnodes {}: give 0 to {}",
            args.node_rank,
            args.nnodes,
            args.nnodes - 1
        );
    }
    let addr = match (&args.master_addr, args.nnodes) {
        (Some(a), _) if a.trim().is_empty() => bail!("--master-addr is empty"),
        (Some(a), _) => a.trim().to_string(),
        (None, 1) => "127.0.0.1".to_string(),
        (None, _) => bail!(
            "--nnodes {} needs --master-addr: the address of node 0 that every node reaches",
            args.nnodes
        ),
    };
    if args.nnodes > 1 && args.master_port == 0 {
        bail!("--master-port 0 picks a port on one node only: give every node the same port");
    }
    let world = n
        .checked_mul(args.nnodes)
        .context("--nnodes x --nproc-per-node is too large")?;
    Ok((addr, args.node_rank * n, world))
}

/// `launch` run as a task of an srun step or of mpirun: one task per node, each with its own
/// node: the tasks are `--nnodes` and this task's rank is `--node-rank`. Otherwise every task
/// started a job of its own (each training alone over the same results, or colliding on the
/// port), or several tasks started the same ranks (`--node-rank $SLURM_PROCID` expanded once,
/// by the batch script's shell).
fn check_launcher_task(
    args: &LaunchArgs,
    task: Option<crate::distributed::LauncherTask>,
) -> Result<()> {
    let Some(t) = task.filter(|t| t.tasks > 1) else {
        return Ok(());
    };
    let vars = &t.vars;
    if let Some(here) = t.on_this_node.filter(|&n| n > 1) {
        bail!(
            "launch runs as one of {here} tasks on this node ({vars}): each would start \
             --nproc-per-node workers of its own. Run one launch per node (srun \
             --ntasks-per-node=1, mpirun --map-by ppr:1:node), or let srun start the workers \
             themselves (srun --ntasks-per-node=8 mlperf-run resnet ...); no worker was started"
        );
    }
    if args.nnodes != t.tasks || args.node_rank != t.rank {
        bail!(
            "launch runs as task {} of {} ({vars}) but was given --nnodes {} --node-rank {}: \
             give every task --nnodes {} and its own rank as --node-rank (with srun: `srun \
             --ntasks-per-node=1 bash -c 'mlperf-run launch --nnodes {} --node-rank \
             $SLURM_PROCID ...'`, so that each task expands its own); no worker was started",
            t.rank,
            t.tasks,
            args.nnodes,
            args.node_rank,
            t.tasks,
            t.tasks
        );
    }
    Ok(())
}

/// The longest `--grace-s`: a day.
const MAX_GRACE_S: f64 = 86_400.0;

pub fn run_launch(args: LaunchArgs) -> Result<ExitStatus> {
    let n = args.nproc_per_node;
    let (addr, first_rank, world) = node_layout(&args)?;
    check_launcher_task(
        &args,
        crate::distributed::launcher_task(&|k: &str| std::env::var(k).ok()),
    )?;
    // bounded: a Duration cannot hold 1e300 s (launch panicked after starting its workers)
    if !(args.grace_s >= 0.0 && args.grace_s <= MAX_GRACE_S) {
        bail!(
            "--grace-s must be a number of seconds within 0..={MAX_GRACE_S} (the time the \
             other workers get to stop after one fails), got {}",
            args.grace_s
        );
    }
    let port = if args.master_port == 0 {
        free_local_port()?
    } else {
        args.master_port
    };
    let exe = std::env::current_exe().context("finding this mlperf-run binary to start workers")?;
    eprintln!(
        "launch: node {} of {}: starting ranks {first_rank}-{} of {world} ({} with the \
         rendezvous at {addr}:{port}): {}",
        args.node_rank,
        args.nnodes,
        first_rank + n - 1,
        exe.display(),
        args.worker_args.join(" ")
    );
    let mut children: Vec<Option<Child>> = Vec::with_capacity(n);
    let mut pipes = Vec::new();
    for local in 0..n {
        let rank = first_rank + local;
        let spawned = Command::new(&exe)
            .args(&args.worker_args)
            .env("MASTER_ADDR", &addr)
            .env("MASTER_PORT", port.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(mut c) => {
                pipes.push(forward(c.stdout.take().expect("piped stdout"), rank, false));
                pipes.push(forward(c.stderr.take().expect("piped stderr"), rank, true));
                children.push(Some(c));
            }
            Err(e) => {
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                bail!("starting worker rank {rank} ({}): {e}", exe.display());
            }
        }
    }
    let code = supervise(
        &mut children,
        Duration::from_secs_f64(args.grace_s),
        first_rank,
    )?;
    for p in pipes {
        let _ = p.join();
    }
    Ok(code)
}

/// Waits for every worker (ranks `first_rank`..); on the first failure gives the rest `grace`,
/// then SIGTERM, then (5 s later) SIGKILL.
fn supervise(
    children: &mut [Option<Child>],
    grace: Duration,
    first_rank: usize,
) -> Result<ExitStatus> {
    let mut first_failure: Option<(usize, String, i32)> = None;
    let mut deadline: Option<Instant> = None;
    let mut termed = false;
    loop {
        for (local, slot) in children.iter_mut().enumerate() {
            let rank = first_rank + local;
            let Some(child) = slot else { continue };
            if let Some(status) = child.try_wait().context("waiting for a worker")? {
                *slot = None;
                if !status.success() && first_failure.is_none() {
                    let how = describe(&status);
                    eprintln!("launch: worker rank {rank} failed ({how}); stopping the others");
                    first_failure = Some((rank, how, status.code().unwrap_or(1)));
                    deadline = Some(Instant::now() + grace);
                }
            }
        }
        if children.iter().all(Option::is_none) {
            break;
        }
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d && !termed {
                for c in children.iter().flatten() {
                    signal(c, libc::SIGTERM);
                }
                termed = true;
                deadline = Some(now + Duration::from_secs(5));
            } else if now >= d {
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match first_failure {
        None => Ok(ExitStatus::Success),
        Some((rank, how, code)) => {
            eprintln!("launch: failed: worker rank {rank} ended with {how}");
            Ok(ExitStatus::Worker(
                u8::try_from(code).ok().filter(|c| *c != 0).unwrap_or(1),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        launch: LaunchArgs,
    }

    fn layout(flags: &[&str]) -> Result<(String, usize, usize)> {
        let mut argv = vec!["launch"];
        argv.extend_from_slice(flags);
        argv.extend_from_slice(&["--", "resnet"]);
        node_layout(&Cli::try_parse_from(argv).unwrap().launch)
    }

    #[test]
    fn nodes_get_consecutive_ranks_and_share_the_master() {
        assert_eq!(
            layout(&["--nproc-per-node", "8"]).unwrap(),
            ("127.0.0.1".into(), 0, 8)
        );
        assert_eq!(
            layout(&[
                "--nproc-per-node",
                "2",
                "--nnodes",
                "3",
                "--node-rank",
                "2",
                "--master-addr",
                "10.0.0.1"
            ])
            .unwrap(),
            ("10.0.0.1".into(), 4, 6)
        );
    }

    /// Inside an srun step or under mpirun, a launch per node with its own --node-rank; each
    /// task once started a job of its own (`srun -N2 mlperf-run launch --nproc-per-node 8`:
    /// two 8-rank jobs writing the same results), or the same ranks twice.
    #[test]
    fn launch_as_a_task_of_srun_or_mpirun_must_be_one_node_of_them() {
        use crate::distributed::LauncherTask;
        let args = |flags: &[&str]| {
            let mut argv = vec!["launch", "--nproc-per-node", "8", "--master-addr", "n1"];
            argv.extend_from_slice(flags);
            argv.extend_from_slice(&["--", "resnet"]);
            Cli::try_parse_from(argv).unwrap().launch
        };
        let task = |rank, tasks, here| {
            Some(LauncherTask {
                rank,
                tasks,
                on_this_node: here,
                vars: format!("SLURM_PROCID={rank}, SLURM_STEP_NUM_TASKS={tasks}"),
            })
        };
        let check = |flags: &[&str], t| check_launcher_task(&args(flags), t);
        assert!(check(&[], None).is_ok());
        assert!(
            check(&[], task(0, 1, Some(1))).is_ok(),
            "a step of one task"
        );
        assert!(check(&["--nnodes", "2", "--node-rank", "1"], task(1, 2, Some(1))).is_ok());
        let e = format!("{:#}", check(&[], task(1, 2, Some(1))).unwrap_err());
        assert!(
            e.contains("launch runs as task 1 of 2 (SLURM_PROCID=1, SLURM_STEP_NUM_TASKS=2)")
                && e.contains("--nnodes 1 --node-rank 0")
                && e.contains("no worker was started"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            check(&["--nnodes", "2", "--node-rank", "0"], task(1, 2, None)).unwrap_err()
        );
        assert!(e.contains("--node-rank $SLURM_PROCID"), "{e}");
        let e = format!(
            "{:#}",
            check(
                &["--nnodes", "16", "--node-rank", "9"],
                task(9, 16, Some(8))
            )
            .unwrap_err()
        );
        assert!(e.contains("one of 8 tasks on this node"), "{e}");
    }

    #[test]
    fn a_multi_node_launch_names_what_is_missing_or_wrong() {
        let err = |flags: &[&str]| format!("{:#}", layout(flags).unwrap_err());
        let e = err(&["--nproc-per-node", "1", "--nnodes", "2"]);
        assert!(e.contains("--master-addr"), "{e}");
        let e = err(&[
            "--nproc-per-node",
            "1",
            "--nnodes",
            "2",
            "--node-rank",
            "2",
            "--master-addr",
            "h",
        ]);
        assert!(e.contains("--node-rank 2") && e.contains("0 to 1"), "{e}");
        let e = err(&[
            "--nproc-per-node",
            "1",
            "--nnodes",
            "2",
            "--master-addr",
            "h",
            "--master-port",
            "0",
        ]);
        assert!(e.contains("--master-port 0"), "{e}");
        let e = err(&["--nproc-per-node", "0"]);
        assert!(e.contains("--nproc-per-node"), "{e}");
    }
}
