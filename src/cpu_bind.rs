//! Binding a training process to its own CPUs (`[system] cpu_bind`), so that each rank of a
//! node decodes and stages its batches on cores of its own, near its GPU, as MLPerf submitters'
//! launch scripts do (`numactl`, `bindpcie`):
//!
//! - `none` (default): as started;
//! - `slices`: the CPUs this process may use are cut into one slice of whole cores per process
//!   of the job on this node (LOCAL_WORLD_SIZE, or Slurm's tasks per node); local rank r takes
//!   slice r;
//! - `gpu`: the CPUs NVML names as close to the rank's GPU (nvmlDeviceGetCpuAffinity: its NUMA
//!   node's), shared out as whole cores among the local ranks whose GPUs have the same ones. A
//!   process that sees one GPU (its launcher bound it to one: Slurm's `--gpus-per-task=1`) takes
//!   that GPU's CPUs whole, since it cannot see the other ranks' GPUs ([`LocalGpus`]). Without
//!   NVML (no NVIDIA driver) it is `slices`, with a warning.
//!
//! A process that something else already bound to fewer CPUs than its cgroup makes available
//! (Slurm's `--cpu-bind`, `numactl`, `taskset`) is left as it is; a container's or a Slurm job
//! step's CPU set, which all of its processes share, is what gets cut. Hyper-threads of one
//! core stay together: a slice is a run of whole cores, in the order of their first CPU. The
//! binding is the whole process's (Linux `sched_setaffinity` on each of its threads, as
//! `taskset -a`, listed again until no new one shows), and the threads started later inherit
//! it. The trainer binds before it joins the process group (NCCL reads the binding when it
//! places its own threads) and before it starts its decode, prefetch and libtorch threads.
//! Binding never fails a run: where the CPUs cannot be read or set, the process runs as started
//! and a warning says why.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// How a training process picks its CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuBind {
    #[default]
    None,
    Slices,
    Gpu,
}

/// Parses a Linux CPU list ("0-3,8,10-11", as in sysfs and `taskset -c`).
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        let num = |v: &str| -> Result<usize> {
            v.trim()
                .parse()
                .with_context(|| format!("{part:?} in the CPU list {s:?} is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a {
                    bail!("{part:?} in the CPU list {s:?} is a reversed range");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPUs as a Linux CPU list, ranges collapsed ("0-3,8").
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// `cpus` grouped into cores (the hyper-threads of one core together, as the topology under
/// `sysfs_cpu`, /sys/devices/system/cpu, lists each CPU's `thread_siblings_list`): cores in the
/// order of their first CPU. A CPU whose siblings cannot be read is a core of its own.
pub fn cores(cpus: &[usize], sysfs_cpu: &Path) -> Vec<Vec<usize>> {
    let mut by_siblings: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    let mut alone = Vec::new();
    for &cpu in cpus {
        let siblings = std::fs::read_to_string(
            sysfs_cpu.join(format!("cpu{cpu}/topology/thread_siblings_list")),
        )
        .ok()
        .and_then(|s| parse_cpu_list(&s).ok())
        .filter(|s| s.contains(&cpu));
        match siblings {
            Some(key) => by_siblings.entry(key).or_default().push(cpu),
            None => alone.push(vec![cpu]),
        }
    }
    let mut all: Vec<Vec<usize>> = by_siblings.into_values().chain(alone).collect();
    for core in &mut all {
        core.sort_unstable();
    }
    all.sort_by_key(|core| core[0]);
    all
}

/// Slice `k` of `n` of `cores`: contiguous runs of whole cores, the first `len % n` slices one
/// core longer. With fewer cores than slices, slice k shares core `k % len`.
pub fn slice_of_cores(cores: &[Vec<usize>], k: usize, n: usize) -> Vec<usize> {
    if cores.is_empty() || n == 0 {
        return Vec::new();
    }
    if cores.len() < n {
        return cores[k % cores.len()].clone();
    }
    let (base, extra) = (cores.len() / n, cores.len() % n);
    let start = k * base + k.min(extra);
    let len = base + usize::from(k < extra);
    cores[start..start + len].concat()
}

/// The CPUs of local rank `rank` when each local rank's candidate CPUs are `candidates[r]`
/// (all the same for `slices`; its GPU's for `gpu`): the ranks with the same candidates share
/// them out as whole cores, in rank order. `topology` groups CPUs into cores.
pub fn plan(
    candidates: &[Vec<usize>],
    rank: usize,
    topology: impl Fn(&[usize]) -> Vec<Vec<usize>>,
) -> Vec<usize> {
    let mine = &candidates[rank];
    let sharing: Vec<usize> = (0..candidates.len())
        .filter(|&r| candidates[r] == *mine)
        .collect();
    let k = sharing.iter().position(|&r| r == rank).unwrap_or(0);
    slice_of_cores(&topology(mine), k, sharing.len())
}

/// The CPUs this thread may run on.
pub fn current_affinity() -> Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes at most its size and
    // CPU_ISSET reads the set it filled
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Binds this thread (and the threads it starts from now on) to `cpus`.
pub fn set_affinity(cpus: &[usize]) -> Result<()> {
    bind_calling_thread(&cpu_set_of(cpus)?, cpus)
}

/// Binds the calling thread to `set`, which is `cpus`.
fn bind_calling_thread(set: &libc::cpu_set_t, cpus: &[usize]) -> Result<()> {
    set_thread_affinity(0, set)
        .with_context(|| format!("sched_setaffinity to CPUs {}", format_cpu_list(cpus)))
}

/// `cpus` as a `cpu_set_t`.
fn cpu_set_of(cpus: &[usize]) -> Result<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it (numbers are checked)
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                bail!("CPU {c} is beyond what sched_setaffinity can name");
            }
            libc::CPU_SET(c, &mut set);
        }
        Ok(set)
    }
}

/// Binds thread `tid` (0: the calling thread) to `set`.
fn set_thread_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> Result<(), std::io::Error> {
    // SAFETY: sched_setaffinity reads at most size_of::<cpu_set_t>() bytes of `set`
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How [`set_process_affinity`] went for the threads other than the calling one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OtherThreads {
    /// Threads bound.
    pub bound: usize,
    /// Why some could not be (the listing, or a thread: tid and error); they keep their CPUs.
    pub failures: Vec<String>,
}

/// Binds every thread of this process to `cpus`, as `taskset -a` does: the threads already
/// running (a process group's, started before the trainer builds its workload; the signal
/// handler's) and, through the calling thread, the ones started from now on. Fails only when
/// the calling thread cannot be bound; after that, what other threads could not be bound is
/// reported, not an error. A thread that ends meanwhile is neither.
///
/// Unlike `taskset -a`, which lists the threads once, the listing is repeated until it names
/// no thread that was not already bound: a thread that a not-yet-bound one starts during a pass
/// inherits the old CPUs, and the next pass binds it.
pub fn set_process_affinity(cpus: &[usize]) -> Result<OtherThreads> {
    let set = cpu_set_of(cpus)?;
    bind_calling_thread(&set, cpus)?;
    // SAFETY: gettid has no preconditions
    let me = unsafe { libc::gettid() };
    let tasks = Path::new("/proc/self/task");
    Ok(bind_listed_threads(
        me,
        || {
            let entries = std::fs::read_dir(tasks)
                .map_err(|e| format!("listing the threads in {}: {e}", tasks.display()))?;
            Ok(entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
                .collect())
        },
        |tid| set_thread_affinity(tid, &set),
    ))
}

/// How many listings [`bind_listed_threads`] makes at most: a process that keeps starting
/// threads from unbound ones faster than they are bound is reported after this many.
const MAX_BINDING_PASSES: usize = 16;

/// Binds, with `bind`, each thread that `list` names other than `me`, once; lists again until a
/// listing names none not seen before (at most [`MAX_BINDING_PASSES`] listings).
fn bind_listed_threads(
    me: libc::pid_t,
    mut list: impl FnMut() -> Result<Vec<libc::pid_t>, String>,
    mut bind: impl FnMut(libc::pid_t) -> Result<(), std::io::Error>,
) -> OtherThreads {
    let mut others = OtherThreads::default();
    let mut seen = std::collections::BTreeSet::from([me]);
    for _ in 0..MAX_BINDING_PASSES {
        let tids = match list() {
            Ok(tids) => tids,
            Err(why) => {
                others.failures.push(why);
                return others;
            }
        };
        let new: Vec<libc::pid_t> = tids.into_iter().filter(|&t| seen.insert(t)).collect();
        if new.is_empty() {
            return others;
        }
        for tid in new {
            match bind(tid) {
                Ok(()) => others.bound += 1,
                // the thread ended between the listing and the call
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => others.failures.push(format!("thread {tid}: {e}")),
            }
        }
    }
    others.failures.push(format!(
        "threads kept starting through {MAX_BINDING_PASSES} listings of the process's threads; \
         the newest may keep their CPUs"
    ));
    others
}

/// The CPUs that this process's cgroup lets all of its processes use (what a container or a
/// Slurm job step gives its tasks together): cgroup v2's `cpuset.cpus.effective`, or v1's
/// `cpuset.effective_cpus`, else the online CPUs. Empty when none of them can be read.
pub fn available_cpus() -> Vec<usize> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    available_cpus_from(&cgroup, Path::new("/sys/fs/cgroup"), || {
        std::fs::read_to_string("/sys/devices/system/cpu/online").ok()
    })
}

/// [`available_cpus`] from the text of /proc/self/cgroup, the cgroup mount point and the online
/// CPU list.
pub fn available_cpus_from(
    proc_self_cgroup: &str,
    cgroup_root: &Path,
    online: impl Fn() -> Option<String>,
) -> Vec<usize> {
    let read = |path: std::path::PathBuf| -> Option<Vec<usize>> {
        let text = std::fs::read_to_string(path).ok()?;
        parse_cpu_list(&text).ok().filter(|c| !c.is_empty())
    };
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = match (f.next(), f.next(), f.next()) {
            (Some(id), Some(c), Some(p)) => (id, c, p.trim_start_matches('/')),
            _ => continue,
        };
        let found = if controllers.is_empty() {
            read(cgroup_root.join(path).join("cpuset.cpus.effective"))
        } else if controllers.split(',').any(|c| c == "cpuset") {
            read(
                cgroup_root
                    .join("cpuset")
                    .join(path)
                    .join("cpuset.effective_cpus"),
            )
        } else {
            None
        };
        if let Some(cpus) = found {
            return cpus;
        }
    }
    online()
        .and_then(|s| parse_cpu_list(&s).ok())
        .unwrap_or_default()
}

/// Whether something bound this thread to fewer CPUs than its cgroup makes available: a
/// launcher's per-process binding (Slurm's `--cpu-bind`, `numactl`, `taskset`, or ours), not a
/// container's or a job's CPU set, which all of its processes share.
pub fn launcher_bound() -> Result<bool> {
    Ok(narrower_than_cgroup(&current_affinity()?))
}

/// Whether an affinity of `mine` leaves out CPUs that the cgroup makes available.
fn narrower_than_cgroup(mine: &[usize]) -> bool {
    let available = available_cpus();
    !available.is_empty() && mine.len() < available.len()
}

/// The GPUs whose CPUs `gpu` mode follows, as far as this process can tell, by the names NVML
/// finds a GPU by: an index, a UUID (as CUDA_VISIBLE_DEVICES lists them) or a PCI bus id. The
/// caller says which GPU each local rank uses (the trainer's rule,
/// `crate::distributed::choose_gpu`); this module only reads their CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalGpus {
    /// This process sees one GPU, the one its launcher bound it to (Slurm's
    /// `--gpus-per-task=1`, a container's devices): the other local ranks' GPUs are not visible
    /// from here, so the rank takes its GPU's CPUs whole, without sharing them out.
    Own(String),
    /// Every local process sees the node's GPUs: local rank r uses the r-th name (None: a rank
    /// without a GPU; a rank past the list has none either).
    Each(Vec<Option<String>>),
}

impl Default for LocalGpus {
    /// No GPU known: `gpu` mode is taken as `slices`, with a warning.
    fn default() -> Self {
        LocalGpus::Each(Vec::new())
    }
}

/// For `gpu` mode: the candidate CPUs of the local ranks this one shares out CPUs with (each
/// GPU's CPUs, `near`, within `allowed`: all of `allowed` where none of them is) and this rank's
/// place among them. A rank bound to its one GPU ([`LocalGpus::Own`]) is alone with its GPU's
/// CPUs; otherwise local rank r's GPU is the r-th, and a rank without one shares nothing.
pub fn gpu_candidates(
    gpus: &LocalGpus,
    rank: usize,
    local: usize,
    allowed: &[usize],
    near: impl Fn(&str) -> std::result::Result<Vec<usize>, String>,
) -> std::result::Result<(Vec<Vec<usize>>, usize), String> {
    let within = |name: &str| -> std::result::Result<Vec<usize>, String> {
        let near: Vec<usize> = near(name)?
            .into_iter()
            .filter(|c| allowed.contains(c))
            .collect();
        Ok(if near.is_empty() {
            allowed.to_vec()
        } else {
            near
        })
    };
    match gpus {
        LocalGpus::Own(name) => Ok((vec![within(name)?], 0)),
        LocalGpus::Each(names) => {
            let name = |r: usize| names.get(r).cloned().flatten();
            if name(rank).is_none() {
                return Err(format!("local rank {rank} has no GPU"));
            }
            let candidates = (0..local.max(rank + 1))
                .map(|r| match name(r) {
                    Some(n) => within(&n),
                    None => Ok(allowed.to_vec()),
                })
                .collect::<std::result::Result<Vec<_>, String>>()?;
            Ok((candidates, rank))
        }
    }
}

/// The CPUs NVML names as near GPU `name` (an index, a UUID or a PCI bus id: see [`LocalGpus`]).
fn nvml_gpu_cpus(nvml: &nvml_wrapper::Nvml, name: &str) -> std::result::Result<Vec<usize>, String> {
    let words = (libc::CPU_SETSIZE as usize).div_ceil(8 * std::mem::size_of::<libc::c_ulong>());
    let dev = if let Ok(i) = name.parse::<u32>() {
        nvml.device_by_index(i)
    } else if name.contains(':') {
        nvml.device_by_pci_bus_id(name)
    } else {
        nvml.device_by_uuid(name)
    }
    .map_err(|e| format!("NVML has no GPU {name:?} ({e})"))?;
    let mask = dev
        .cpu_affinity(words)
        .map_err(|e| format!("NVML gives no CPU affinity for GPU {name:?} ({e})"))?;
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    Ok((0..words * bits)
        .filter(|&c| (mask[c / bits] >> (c % bits)) & 1 == 1)
        .collect())
}

/// What [`apply`] did, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub message: String,
    /// Not what was asked: `gpu` without NVML, or no binding at all.
    pub warning: bool,
}

/// Applies `mode` for local rank `rank` of `local` processes on this node and says what it did
/// (`None` for `none`); `gpus` are the local ranks' GPUs, for `gpu`. It never fails a run: where
/// the CPUs cannot be read or set, the process runs as started and the outcome is a warning
/// that says why.
pub fn apply(mode: CpuBind, rank: usize, local: usize, gpus: &LocalGpus) -> Option<Outcome> {
    if mode == CpuBind::None {
        return None;
    }
    Some(match bind(mode, rank, local, gpus) {
        Ok((message, warning)) => Outcome { message, warning },
        Err(e) => Outcome {
            message: format!("cpu_bind: running as started: {e:#}"),
            warning: true,
        },
    })
}

/// The message, and whether it is a warning.
fn bind(mode: CpuBind, rank: usize, local: usize, gpus: &LocalGpus) -> Result<(String, bool)> {
    let allowed = current_affinity()?;
    if narrower_than_cgroup(&allowed) {
        let message = format!(
            "cpu_bind: left as started, on CPUs {} (bound by the launcher)",
            format_cpu_list(&allowed)
        );
        return Ok((message, false));
    }
    let local = local.max(rank + 1);
    let mut note = String::new();
    let slices = || (vec![allowed.clone(); local], rank);
    let (candidates, place) = match mode {
        CpuBind::Gpu => {
            let found = nvml_wrapper::Nvml::init()
                .map_err(|e| format!("NVML is not available ({e})"))
                .and_then(|nvml| {
                    gpu_candidates(gpus, rank, local, &allowed, |g| nvml_gpu_cpus(&nvml, g))
                });
            match found {
                Ok(found) => {
                    if let LocalGpus::Own(g) = gpus {
                        note = format!(
                            " (its one GPU {g}'s CPUs: the other ranks' GPUs are not visible \
                             to it)"
                        );
                    }
                    found
                }
                Err(why) => {
                    note = format!(" (`gpu` taken as `slices`: {why})");
                    slices()
                }
            }
        }
        _ => slices(),
    };
    let sysfs = Path::new("/sys/devices/system/cpu");
    let cpus = plan(&candidates, place, |c| cores(c, sysfs));
    if cpus.is_empty() {
        bail!("no CPUs to bind to{note}");
    }
    let others = set_process_affinity(&cpus)?;
    let unbound = match others.failures.len() {
        0 => String::new(),
        n => format!(
            "; {n} other thread(s) keep their CPUs: {}",
            others.failures.join("; ")
        ),
    };
    let message = format!(
        "cpu_bind: local rank {rank} of {local} on CPUs {} (with the {} other thread(s) it \
         had){unbound}{note}",
        format_cpu_list(&cpus),
        others.bound
    );
    let fell_back = note.contains("taken as `slices`");
    Ok((message, fell_back || !unbound.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_format() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5,1,1").unwrap(), [1, 5]);
        assert_eq!(format_cpu_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert!(format!("{:#}", parse_cpu_list("3-1").unwrap_err()).contains("reversed"));
        assert!(format!("{:#}", parse_cpu_list("0-x").unwrap_err()).contains("not a CPU"));
    }

    /// A sysfs with 4 cores x 2 threads, numbered as Linux does on such machines: CPUs 0-3 the
    /// first thread of each core, 4-7 their siblings.
    fn fake_sysfs() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for cpu in 0..8 {
            let t = d.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            let core = cpu % 4;
            std::fs::write(
                t.join("thread_siblings_list"),
                format!("{core},{}\n", core + 4),
            )
            .unwrap();
        }
        d
    }

    #[test]
    fn hyper_threads_of_a_core_stay_together() {
        let d = fake_sysfs();
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(
            cores(&all, d.path()),
            [vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        // without topology every CPU is a core
        assert_eq!(
            cores(&[2, 1], Path::new("/nonexistent")),
            [vec![1], vec![2]]
        );
    }

    #[test]
    fn slices_are_runs_of_whole_cores() {
        let c = vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7], vec![8]];
        assert_eq!(slice_of_cores(&c, 0, 2), [0, 4, 1, 5, 2, 6]);
        assert_eq!(slice_of_cores(&c, 1, 2), [3, 7, 8]);
        // more slices than cores: shared, round robin
        assert_eq!(slice_of_cores(&c[..2], 3, 4), [1, 5]);
        // every CPU in exactly one slice
        for n in 1..=5 {
            let mut all: Vec<usize> = (0..n).flat_map(|k| slice_of_cores(&c, k, n)).collect();
            all.sort_unstable();
            assert_eq!(all, [0, 1, 2, 3, 4, 5, 6, 7, 8], "{n} slices");
        }
    }

    #[test]
    fn ranks_with_the_same_gpu_cpus_share_them_out() {
        let d = fake_sysfs();
        let topo = |c: &[usize]| cores(c, d.path());
        // 4 GPUs, 2 per package: package 0 is CPUs 0,1 and siblings 4,5
        let p0 = vec![0, 1, 4, 5];
        let p1 = vec![2, 3, 6, 7];
        let cands = vec![p0.clone(), p0, p1.clone(), p1];
        assert_eq!(plan(&cands, 0, topo), [0, 4]);
        assert_eq!(plan(&cands, 1, topo), [1, 5]);
        assert_eq!(plan(&cands, 2, topo), [2, 6]);
        assert_eq!(plan(&cands, 3, topo), [3, 7]);
        // slices: 2 ranks over the whole machine
        let all: Vec<usize> = (0..8).collect();
        let same = vec![all.clone(), all];
        assert_eq!(plan(&same, 1, topo), [2, 6, 3, 7]);
    }

    /// NVML's answer on a node of 4 GPUs, 2 per package (package 0: CPUs 0,1,4,5), by index
    /// or by PCI bus id.
    fn fake_near(name: &str) -> std::result::Result<Vec<usize>, String> {
        match name {
            "0" | "1" | "0000:1B:00.0" => Ok(vec![0, 1, 4, 5]),
            "2" | "3" | "0000:9A:00.0" => Ok(vec![2, 3, 6, 7]),
            other => Err(format!("NVML has no GPU {other:?}")),
        }
    }

    #[test]
    fn a_rank_bound_to_one_gpu_takes_that_gpus_cpus_whole() {
        let d = fake_sysfs();
        let topo = |c: &[usize]| cores(c, d.path());
        let all: Vec<usize> = (0..8).collect();
        // local rank 3 of 4, bound by its launcher to the GPU at 0000:9A:00.0 (it sees only
        // that one, as cuda:0): its GPU's CPUs, not GPU 3's of an index list it does not have,
        // and not a quarter of them (the other ranks' GPUs are not known here)
        let own = LocalGpus::Own("0000:9A:00.0".into());
        let (cands, place) = gpu_candidates(&own, 3, 4, &all, fake_near).unwrap();
        assert_eq!((cands.clone(), place), (vec![vec![2, 3, 6, 7]], 0));
        assert_eq!(plan(&cands, place, topo), [2, 6, 3, 7], "both of its cores");
        // the same on local rank 0 bound to the package-0 GPU
        let own = LocalGpus::Own("0".into());
        let (cands, place) = gpu_candidates(&own, 0, 4, &all, fake_near).unwrap();
        assert_eq!(plan(&cands, place, topo), [0, 4, 1, 5]);
        // its GPU's CPUs outside what the process may use: all that it may use
        let (cands, _) = gpu_candidates(&own, 0, 4, &[2, 6], fake_near).unwrap();
        assert_eq!(cands, vec![vec![2, 6]]);
    }

    #[test]
    fn ranks_that_see_every_gpu_share_out_their_gpus_cpus() {
        let d = fake_sysfs();
        let topo = |c: &[usize]| cores(c, d.path());
        let all: Vec<usize> = (0..8).collect();
        let each = LocalGpus::Each((0..4).map(|g| Some(g.to_string())).collect());
        let got: Vec<Vec<usize>> = (0..4)
            .map(|r| {
                let (cands, place) = gpu_candidates(&each, r, 4, &all, fake_near).unwrap();
                assert_eq!(place, r);
                plan(&cands, place, topo)
            })
            .collect();
        assert_eq!(got, [vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
        // a rank without a GPU (past the list) is refused, and `gpu` falls back to `slices`
        let e = gpu_candidates(&each, 5, 6, &all, fake_near).unwrap_err();
        assert!(e.contains("local rank 5 has no GPU"), "{e}");
        assert!(gpu_candidates(&LocalGpus::default(), 0, 1, &all, fake_near).is_err());
        // a GPU NVML does not know is an error, not a guess
        let unknown = LocalGpus::Own("GPU-nope".into());
        assert!(gpu_candidates(&unknown, 0, 1, &all, fake_near).is_err());
    }

    #[test]
    fn the_cgroup_cpu_set_is_what_the_processes_share() {
        let d = tempfile::tempdir().unwrap();
        let v2 = d.path().join("job/step");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("cpuset.cpus.effective"), "4-7\n").unwrap();
        let v1 = d.path().join("cpuset/docker/abc");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("cpuset.effective_cpus"), "0-1,8\n").unwrap();
        let online = || Some("0-15".to_string());
        let from = |text: &str| available_cpus_from(text, d.path(), online);
        assert_eq!(from("0::/job/step\n"), [4, 5, 6, 7]);
        assert_eq!(
            from("4:memory:/x\n3:cpuset,cpu:/docker/abc\n0::/\n"),
            [0, 1, 8]
        );
        // no cpuset readable: the online CPUs; nothing at all: empty
        assert_eq!(from("0::/elsewhere\n").len(), 16);
        assert!(available_cpus_from("", d.path(), || None).is_empty());
    }

    /// A fake process for [`bind_listed_threads`]: the threads each listing names, and the
    /// threads that binding one of them finds it had started meanwhile.
    struct FakeThreads {
        running: Vec<libc::pid_t>,
        started_by: BTreeMap<libc::pid_t, Vec<libc::pid_t>>,
        ended: Vec<libc::pid_t>,
        listings: usize,
    }

    impl FakeThreads {
        fn run(&mut self, me: libc::pid_t) -> (OtherThreads, Vec<libc::pid_t>) {
            let state = std::cell::RefCell::new((self, Vec::new()));
            let others = bind_listed_threads(
                me,
                || {
                    let (p, _) = &mut *state.borrow_mut();
                    p.listings += 1;
                    Ok(p.running.clone())
                },
                |tid| {
                    let (p, bound) = &mut *state.borrow_mut();
                    if p.ended.contains(&tid) {
                        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    if tid == 99 {
                        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
                    }
                    bound.push(tid);
                    let started = p.started_by.remove(&tid).unwrap_or_default();
                    p.running.extend(started);
                    Ok(())
                },
            );
            let (_, bound) = state.into_inner();
            (others, bound)
        }
    }

    #[test]
    fn threads_started_by_unbound_threads_during_a_pass_are_bound_by_the_next() {
        // thread 3, unbound until the first pass reaches it, has started 4, which started 5
        let mut p = FakeThreads {
            running: vec![1, 2, 3],
            started_by: BTreeMap::from([(3, vec![4]), (4, vec![5])]),
            ended: vec![2],
            listings: 0,
        };
        let (others, bound) = p.run(1);
        assert_eq!(bound, [3, 4, 5], "each thread once, the caller never");
        assert_eq!(
            others,
            OtherThreads {
                bound: 3,
                failures: vec![]
            }
        );
        // three passes that found new threads and one that found none
        assert_eq!(p.listings, 4);

        // a thread that cannot be bound is reported and not retried
        let mut p = FakeThreads {
            running: vec![1, 99, 7],
            started_by: BTreeMap::new(),
            ended: vec![],
            listings: 0,
        };
        let (others, bound) = p.run(1);
        assert_eq!(bound, [7]);
        assert_eq!(others.bound, 1);
        assert_eq!(others.failures.len(), 1, "{others:?}");
        assert!(others.failures[0].starts_with("thread 99: "), "{others:?}");
        assert_eq!(p.listings, 2);
    }

    #[test]
    fn a_process_that_keeps_starting_threads_is_reported_and_a_failed_listing_ends_the_binding() {
        // every thread bound has started another meanwhile
        let mut p = FakeThreads {
            running: vec![1, 10],
            started_by: (10..10 + MAX_BINDING_PASSES as libc::pid_t)
                .map(|t| (t, vec![t + 1]))
                .collect(),
            ended: vec![],
            listings: 0,
        };
        let (others, bound) = p.run(1);
        assert_eq!(bound.len(), MAX_BINDING_PASSES);
        assert_eq!(p.listings, MAX_BINDING_PASSES);
        assert_eq!(others.failures.len(), 1, "{others:?}");
        assert!(others.failures[0].contains("kept starting"), "{others:?}");

        let mut listings = 0;
        let others = bind_listed_threads(
            1,
            || {
                listings += 1;
                match listings {
                    1 => Ok(vec![1, 2]),
                    _ => Err("listing the threads in /proc/self/task: gone".to_string()),
                }
            },
            |_| Ok(()),
        );
        assert_eq!(others.bound, 1);
        assert_eq!(
            others.failures,
            ["listing the threads in /proc/self/task: gone"]
        );
    }

    #[test]
    fn binding_a_thread_takes_effect_and_none_does_nothing() {
        let got = std::thread::spawn(|| {
            let before = current_affinity().unwrap();
            assert!(apply(CpuBind::None, 0, 1, &LocalGpus::default()).is_none());
            assert_eq!(current_affinity().unwrap(), before);
            let bound_before = launcher_bound().unwrap();
            set_affinity(&before[..1]).unwrap();
            let after = current_affinity().unwrap();
            let bound_after = launcher_bound().unwrap();
            // already bound by "the launcher": slices leaves it
            let said = apply(CpuBind::Slices, 0, 2, &LocalGpus::default())
                .unwrap()
                .message;
            (
                before,
                bound_before,
                after,
                bound_after,
                said,
                current_affinity().unwrap(),
            )
        })
        .join()
        .unwrap();
        let (before, bound_before, after, bound_after, said, last) = got;
        assert_eq!(after, [before[0]]);
        // the test process runs on its cgroup's CPUs unless something bound it
        assert_eq!(bound_before, before.len() < available_cpus().len());
        if available_cpus().len() > 1 {
            assert!(
                bound_after,
                "bound to CPU {} alone, not seen as bound",
                before[0]
            );
            assert!(said.contains("left as started"), "{said}");
        }
        assert_eq!(last, after);
    }
}
