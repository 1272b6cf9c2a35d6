//! A c10d process group (TCPStore rendezvous + Gloo or NCCL) behind a safe, Drop-safe handle.
use super::rendezvous::{Rendezvous, Timeouts};
use crate::shim::dist as ffi;
use crate::shim::tensor::{cpp_log_level, set_cpp_log_level, CppLogLevel};
use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::time::Duration;
use tch::{Device, Kind, Tensor};

/// The communication backend: Gloo for CPU tensors, NCCL for CUDA tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Gloo,
    Nccl,
}

impl Backend {
    /// NCCL when training on CUDA, Gloo otherwise.
    pub fn for_device(device: Device) -> Backend {
        if device.is_cuda() {
            Backend::Nccl
        } else {
            Backend::Gloo
        }
    }

    fn id(self) -> c_int {
        match self {
            Backend::Gloo => 0,
            Backend::Nccl => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

/// Element-wise reduction for [`ProcessGroup::allreduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size.
    Avg,
    Max,
    Min,
}

impl ReduceOp {
    fn id(self) -> c_int {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
        }
    }
}

/// The group could not form (the master cannot be reached, a rank never came), or one of its
/// calls failed or timed out (a peer died, stopped, or was cut off). The run that meets it cannot go on, and neither can its set in this
/// process (a next run could not form a group without that peer): the trainer ends the run as
/// aborted and stops the set as Ctrl-C does, for `--resume` (`RunOutcome::stop_set`). Travels
/// inside anyhow errors; find it with `downcast_ref::<GroupFailure>()`.
#[derive(Debug)]
pub struct GroupFailure {
    message: String,
}

impl GroupFailure {
    pub fn new(message: impl Into<String>) -> GroupFailure {
        GroupFailure {
            message: message.into(),
        }
    }
}

impl std::fmt::Display for GroupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GroupFailure {}

/// One process's membership in a group of `size` processes. Every collective waits at most
/// the group's timeout: a peer that died or stopped ends the call with an error, never a hang.
/// After an error the group is unusable (the run must end as aborted).
pub struct ProcessGroup {
    raw: NonNull<c_void>,
    rank: usize,
    size: usize,
    backend: Backend,
    timeout: Duration,
    /// Where small control tensors (eval counts, flags) live: CPU for Gloo, the rank's GPU for
    /// NCCL.
    control_device: Device,
    failed: bool,
}

// The shim's group may be used from any one thread at a time (not shared).
unsafe impl Send for ProcessGroup {}

impl ProcessGroup {
    /// Joins the group described by `rdv` (rank 0 hosts the TCPStore) from `device`, this
    /// rank's (for NCCL its GPU, which [`super::choose_gpu`] picked: `cuda:LOCAL_RANK`, or
    /// `cuda:0` for a process bound to one GPU). Blocks until every rank has joined or
    /// `timeouts.rendezvous` passes (then names the ranks that never came); every later call
    /// waits at most `timeouts.collective`. A master address that cannot be resolved or reached
    /// (no route, no host answering) fails at once, naming it.
    pub fn new(
        rdv: &Rendezvous,
        backend: Backend,
        device: Device,
        timeouts: Timeouts,
    ) -> Result<ProcessGroup> {
        let control_device = match (backend, device) {
            (Backend::Gloo, _) => Device::Cpu,
            (Backend::Nccl, Device::Cuda(_)) => device,
            (Backend::Nccl, other) => {
                bail!("the nccl backend needs the rank's GPU, not {other:?}")
            }
        };
        let what = format!("the {} process group", backend.name());
        let raw = form(rdv, backend.id(), &what, timeouts)?;
        Ok(ProcessGroup {
            raw,
            rank: rdv.rank,
            size: rdv.world_size,
            backend,
            timeout: timeouts.collective,
            control_device,
            failed: false,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Marks the group failed: it is aborted (not shut down) when dropped, and later
    /// collectives are refused.
    pub fn mark_failed(&mut self) {
        self.failed = true;
        // SAFETY: a live group from mr_dist_new.
        unsafe { ffi::mr_dist_mark_failed(self.raw.as_ptr()) }
    }

    /// Whether the shim will abort this group when it is dropped (it failed, or was marked so).
    pub fn aborts_on_drop(&self) -> bool {
        // SAFETY: a live group from mr_dist_new.
        unsafe { ffi::mr_dist_is_failed(self.raw.as_ptr()) != 0 }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Where small control tensors (counts, flags) must live for this backend.
    pub fn control_device(&self) -> Device {
        self.control_device
    }

    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Reduces every tensor in place across all ranks (each tensor on its own; dense,
    /// contiguous, on the backend's device).
    pub fn allreduce(&mut self, tensors: &[&Tensor], op: ReduceOp) -> Result<()> {
        let ptrs = self.ptrs(tensors)?;
        self.call("allreduce", |raw, err| unsafe {
            ffi::mr_dist_allreduce(raw, ptrs.as_ptr(), ptrs.len(), op.id(), err)
        })
    }

    /// Overwrites every tensor with rank `root`'s values.
    pub fn broadcast(&mut self, tensors: &[&Tensor], root: usize) -> Result<()> {
        if root >= self.size {
            bail!(
                "broadcast root {root} is outside the world of {} ranks",
                self.size
            );
        }
        let root = to_c_int(root)?;
        let ptrs = self.ptrs(tensors)?;
        self.call("broadcast", |raw, err| unsafe {
            ffi::mr_dist_broadcast(raw, ptrs.as_ptr(), ptrs.len(), root, err)
        })
    }

    /// Waits until every rank reaches this point.
    pub fn barrier(&mut self) -> Result<()> {
        self.call("barrier", |raw, err| unsafe {
            ffi::mr_dist_barrier(raw, err)
        })
    }

    /// Every rank's failure at this point: each rank posts its own (`failure`, None when it did
    /// its part) and gets them all back, by rank (empty when no rank failed). The exchange goes
    /// through the group's TCPStore on the host, so it works when the device or the backend's
    /// communicator cannot (a failed CUDA graph capture); it waits at most the group's timeout.
    /// Every rank must call it at the same points of a run.
    pub fn share_failures(&mut self, failure: Option<&str>) -> Result<Vec<(usize, String)>> {
        self.ensure_usable()?;
        gather_records(failure, |note, report| {
            self.call("sharing the ranks' outcomes", |raw, err| unsafe {
                // SAFETY: `note` outlives the call; report and err are valid out-pointers.
                ffi::mr_dist_agree(raw, note, report, err)
            })
        })
    }

    /// Sums (correct, total) eval counts over all ranks: the global accuracy is
    /// `correct / total` of the result, identical on every rank.
    pub fn reduce_counts(&mut self, correct: f64, total: f64) -> Result<(f64, f64)> {
        let t = Tensor::from_slice(&[correct, total]).to_device(self.control_device);
        self.allreduce(&[&t], ReduceOp::Sum)?;
        let v = Vec::<f64>::try_from(&t.to_device(Device::Cpu))?;
        Ok((v[0], v[1]))
    }

    /// True on every rank if `flag` is true on any rank: lets all ranks stop together (target
    /// reached, or one rank must abort).
    pub fn any(&mut self, flag: bool) -> Result<bool> {
        let t = Tensor::from_slice(&[flag as i32])
            .to_kind(Kind::Float)
            .to_device(self.control_device);
        self.allreduce(&[&t], ReduceOp::Max)?;
        Ok(t.double_value(&[0]) > 0.5)
    }

    /// An error once a collective has failed (the group is unusable then).
    pub(super) fn ensure_usable(&self) -> Result<()> {
        if self.failed {
            return Err(GroupFailure::new(format!(
                "the process group (rank {} of {}) already failed; the run must end as aborted",
                self.rank, self.size
            ))
            .into());
        }
        Ok(())
    }

    pub(super) fn ptrs(&self, tensors: &[&Tensor]) -> Result<Vec<*const torch_sys::C_tensor>> {
        self.ensure_usable()?;
        for (i, t) in tensors.iter().enumerate() {
            if !t.defined() {
                bail!("tensor #{i} passed to a collective is undefined");
            }
            let dev = t.device();
            match (self.backend, dev) {
                // Gloo takes CUDA tensors too (through the host): ranks sharing a GPU in a test
                // mode (super::TestMode)
                (Backend::Gloo, Device::Cpu | Device::Cuda(_))
                | (Backend::Nccl, Device::Cuda(_)) => {}
                _ => bail!(
                    "tensor #{i} is on {dev:?}, which the {} backend cannot reduce \
                     (gloo: CPU or CUDA tensors, nccl: CUDA tensors)",
                    self.backend.name()
                ),
            }
            if !t.is_contiguous() {
                bail!("tensor #{i} passed to a collective is not contiguous");
            }
        }
        Ok(tensors.iter().map(|t| t.as_ptr()).collect())
    }

    /// The shim's group, for the gradient reducer (which must be freed before the group).
    pub(super) fn raw(&self) -> *mut c_void {
        self.raw.as_ptr()
    }

    /// Runs a shim call that may fail; a failure marks the group failed and names the rank.
    pub(super) fn call(
        &mut self,
        what: &str,
        f: impl FnOnce(*mut c_void, *mut *mut c_char) -> c_int,
    ) -> Result<()> {
        let raw = self.raw.as_ptr();
        let Err(msg) = crate::shim::error::call("", |err| f(raw, err)) else {
            return Ok(());
        };
        self.failed = true;
        Err(GroupFailure::new(format!(
            "{what} failed on rank {} of {} ({}, timeout {} s): {msg}. A peer probably died, \
             stopped, or failed; this run is aborted",
            self.rank,
            self.size,
            self.backend.name(),
            self.timeout.as_secs_f64()
        ))
        .into())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: raw came from mr_dist_new and is freed once. A failed group is leaked by the
        // shim (its threads may be stuck on a dead peer).
        unsafe { ffi::mr_dist_free(self.raw.as_ptr()) }
    }
}

/// The shim's group `rdv` describes with backend `backend_id` ([`Backend::id`], or
/// [`STORE_ONLY`]): see [`ProcessGroup::new`]. A failure is a [`GroupFailure`] naming `what`
/// ("the gloo process group"), the rendezvous and what to check.
fn form(
    rdv: &Rendezvous,
    backend_id: c_int,
    what: &str,
    timeouts: Timeouts,
) -> Result<NonNull<c_void>> {
    if timeouts.collective.is_zero() || timeouts.rendezvous.is_zero() {
        bail!("the distributed timeouts must be positive");
    }
    probe_master(rdv)?;
    let addr = CString::new(rdv.master_addr.as_str())
        .map_err(|_| anyhow::anyhow!("MASTER_ADDR contains a NUL byte"))?;
    let (rank, size) = (to_c_int(rdv.rank)?, to_c_int(rdv.world_size)?);
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let mut err: *mut c_char = std::ptr::null_mut();
    let quiet = QuietStore::new();
    // SAFETY: addr outlives the call; err is a valid out-pointer.
    let raw = unsafe {
        ffi::mr_dist_new(
            addr.as_ptr(),
            rdv.master_port,
            rank,
            size,
            backend_id,
            ms(timeouts.collective),
            ms(timeouts.rendezvous),
            &mut err,
        )
    };
    drop(quiet);
    if let Some(raw) = NonNull::new(raw) {
        return Ok(raw);
    }
    // SAFETY: on failure the shim set err (or left it null).
    let msg = unsafe { crate::shim::error::take(err) };
    Err(GroupFailure::new(format!(
        "could not form {what} as rank {} of {} through {}:{} (rendezvous timeout {} s, \
         collective timeout {} s): {}{}. Check that every rank was started with the same \
         MASTER_ADDR, MASTER_PORT and WORLD_SIZE, that the port is free on the master, and \
         that rank 0 is running{}",
        rdv.rank,
        rdv.world_size,
        rdv.master_addr,
        rdv.master_port,
        timeouts.rendezvous.as_secs_f64(),
        timeouts.collective.as_secs_f64(),
        msg.trim_end_matches('.'),
        missing_nodes(&msg, super::local_processes()),
        slurm_hint(rdv)
    ))
    .into())
}

/// The shim's backend id of a group without one: the rendezvous and rank 0's store only.
const STORE_ONLY: c_int = 2;

/// The rendezvous and rank 0's store without a communication backend: what the ranks need to
/// compare notes before their first run ([`super::agree`]), without a Gloo mesh or an NCCL
/// communicator. Every call waits at most the collective timeout; after an error the group is
/// unusable.
pub(super) struct StoreGroup {
    raw: NonNull<c_void>,
    rank: usize,
    size: usize,
    timeout: Duration,
}

impl StoreGroup {
    /// Joins the store of the group `rdv` describes (rank 0 hosts it), as [`ProcessGroup::new`]
    /// does: waits for every rank at most `timeouts.rendezvous`.
    pub(super) fn new(rdv: &Rendezvous, timeouts: Timeouts) -> Result<StoreGroup> {
        let raw = form(rdv, STORE_ONLY, "the process group", timeouts)?;
        Ok(StoreGroup {
            raw,
            rank: rdv.rank,
            size: rdv.world_size,
            timeout: timeouts.collective,
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.rank
    }

    /// Sets `key` in the store (any rank may read it with [`StoreGroup::get`]).
    pub(super) fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (CString::new(key)?, CString::new(value)?);
        self.call("writing to rank 0's store", |raw, err| unsafe {
            // SAFETY: key and value outlive the call; err is a valid out-pointer.
            ffi::mr_dist_store_set(raw, key.as_ptr(), value.as_ptr(), err)
        })
    }

    /// Adds `delta` to the counter `key` (0 until a rank adds to it) and returns its new value,
    /// atomically across the ranks: the rank that gets 1 for adding 1 was the first.
    pub(super) fn add(&mut self, key: &str, delta: i64) -> Result<i64> {
        let key = CString::new(key)?;
        let mut out: i64 = 0;
        self.call("counting in rank 0's store", |raw, err| unsafe {
            // SAFETY: key outlives the call; out and err are valid out-pointers.
            ffi::mr_dist_store_add(raw, key.as_ptr(), delta, &mut out, err)
        })?;
        Ok(out)
    }

    /// The value of `key`, once a rank has set it (waiting at most the timeout).
    pub(super) fn get(&mut self, key: &str) -> Result<String> {
        let key = CString::new(key)?;
        let mut out: *mut c_char = std::ptr::null_mut();
        self.call("reading rank 0's store", |raw, err| unsafe {
            // SAFETY: key outlives the call; out and err are valid out-pointers.
            ffi::mr_dist_store_get(raw, key.as_ptr(), &mut out, err)
        })?;
        // SAFETY: set (malloc'd) by the shim on success.
        Ok(unsafe { crate::shim::error::take(out) })
    }

    /// The notes of the ranks that have one at this point (`note` is this rank's), by rank, on
    /// every rank; empty when none has. Every rank must call it at the same points; each makes
    /// a few store calls plus one per note, however many ranks there are.
    pub(super) fn gather_notes(&mut self, note: Option<&str>) -> Result<Vec<(usize, String)>> {
        gather_records(note, |note, report| {
            self.call("gathering the ranks' notes", |raw, err| unsafe {
                // SAFETY: `note` outlives the call; report and err are valid out-pointers.
                ffi::mr_dist_gather_notes(raw, note, report, err)
            })
        })
    }

    /// The last call: rank 0 waits until every other rank has read what it needed from its
    /// store before it closes it (when the group is dropped).
    pub(super) fn leave(&mut self) -> Result<()> {
        self.call("leaving the group", |raw, err| unsafe {
            ffi::mr_dist_leave(raw, err)
        })
    }

    fn call(
        &mut self,
        what: &str,
        f: impl FnOnce(*mut c_void, *mut *mut c_char) -> c_int,
    ) -> Result<()> {
        let raw = self.raw.as_ptr();
        crate::shim::error::call("", |err| f(raw, err)).map_err(|msg| {
            GroupFailure::new(format!(
                "{what} failed on rank {} of {} (timeout {} s): {msg:#}. A peer probably \
                 died or stopped",
                self.rank,
                self.size,
                self.timeout.as_secs_f64()
            ))
            .into()
        })
    }
}

impl Drop for StoreGroup {
    fn drop(&mut self) {
        // SAFETY: raw came from mr_dist_new and is freed once (a failed one is leaked).
        unsafe { ffi::mr_dist_free(self.raw.as_ptr()) }
    }
}

/// While the store connects, c10d logs each retry and the final timeout as errors, each with a
/// whole C++ stack trace, all of which the group's failure says in one line: at the default
/// verbosity (libtorch's level Error, [`super::libtorch_logs`]) they are not printed while
/// `mr_dist_new` runs; with `-v` they are.
struct QuietStore(Option<CppLogLevel>);

impl QuietStore {
    fn new() -> QuietStore {
        if cpp_log_level() != CppLogLevel::Error as i32 {
            return QuietStore(None);
        }
        set_cpp_log_level(CppLogLevel::Fatal);
        QuietStore(Some(CppLogLevel::Error))
    }
}

impl Drop for QuietStore {
    fn drop(&mut self) {
        if let Some(level) = self.0 {
            set_cpp_log_level(level);
        }
    }
}

/// Before the store: the master address must resolve and answer. A name that does not resolve,
/// no route to it, or no host answering at it (EHOSTUNREACH, ENETUNREACH) will not get better
/// by waiting: a [`GroupFailure`] naming MASTER_ADDR at once, not a wait for the whole
/// rendezvous timeout. A refused connection (the host is up, rank 0 not yet listening) or no
/// answer within 5 s passes: the store's own connect retries until the rendezvous timeout. A
/// name with several addresses (IPv6 and IPv4) fails only when none of them can be reached, as
/// the store tries each.
fn probe_master(rdv: &Rendezvous) -> Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let fail = |why: String| -> anyhow::Error {
        GroupFailure::new(format!(
            "rank {} of {}: {} (port {}) {why}: set MASTER_ADDR to the address of the node \
             that runs rank 0, one that every node reaches",
            rdv.rank,
            rdv.world_size,
            rdv.master_named(),
            rdv.master_port
        ))
        .into()
    };
    let addrs: Vec<_> = match (rdv.master_addr.as_str(), rdv.master_port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Err(fail(format!("does not resolve ({e})"))),
    };
    if addrs.is_empty() {
        return Err(fail("resolves to no address".into()));
    }
    unreachable_everywhere(&addrs, |addr| {
        TcpStream::connect_timeout(addr, Duration::from_secs(5)).map(drop)
    })
    .map_or(Ok(()), |why| Err(fail(why)))
}

/// Why no address of `addrs` can be reached (every `connect` failed with no route or no host
/// answering), or None when one may answer: it connected, refused, or did not answer in time.
fn unreachable_everywhere(
    addrs: &[std::net::SocketAddr],
    connect: impl Fn(&std::net::SocketAddr) -> std::io::Result<()>,
) -> Option<String> {
    let mut why = Vec::new();
    for addr in addrs {
        match connect(addr) {
            Err(e) if e.raw_os_error() == Some(libc::EHOSTUNREACH) => {
                why.push(format!("has no host answering at {addr} ({e})"))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENETUNREACH) => {
                why.push(format!("has no route from this host to {addr} ({e})"))
            }
            _ => return None,
        }
    }
    Some(why.join("; it "))
}

/// With Slurm's variables, what can still keep the group from forming once the rendezvous
/// variables were accepted (the batch script's own process, SLURM_PROCID 0 of a job of many
/// tasks without a step, is refused before: [`Rendezvous::from_env`]): ranks that are tasks of
/// different srun steps (one srun per node numbers each node's tasks from 0), a task that
/// exited before the rendezvous, a master (the step's first host) that other nodes cannot
/// reach by that name.
fn slurm_hint(rdv: &Rendezvous) -> &'static str {
    match rdv.source {
        super::rendezvous::Source::Slurm if rdv.world_size > 1 => {
            ". With Slurm, every rank must be a task of one srun step: separate srun calls (one \
             per node) each number their tasks from 0 and form no group together. A task that \
             exited before the rendezvous says why in its own output (srun --label), and the \
             master, the step's first host unless MASTER_ADDR is exported before srun, must \
             answer on every node by that name"
        }
        _ => "",
    }
}

/// For a rendezvous timeout naming the missing ranks ("missing ranks: 2, 3"): the nodes they
/// belong to, when every node runs `per_node` processes; empty otherwise.
fn missing_nodes(msg: &str, per_node: Option<usize>) -> String {
    let (Some(per_node), Some(list)) = (per_node, msg.split("missing ranks: ").nth(1)) else {
        return String::new();
    };
    let mut nodes: Vec<usize> = list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|r| r.parse::<usize>().ok())
        .map(|r| r / per_node.max(1))
        .collect();
    nodes.dedup();
    if nodes.is_empty() {
        return String::new();
    }
    let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    format!(
        " (node rank {} with {per_node} process(es) per node: start it, or check its \
         MASTER_ADDR and MASTER_PORT)",
        nodes.join(", ")
    )
}

/// One exchange of the ranks' notes through the shim (`exchange(note, report)`: this rank's
/// note or null, and the out-pointer the shim sets to the records when some rank has one):
/// the notes by rank, empty when no rank has one. The records' separators cannot be part of a
/// note, so they are blanked in it first.
fn gather_records(
    note: Option<&str>,
    exchange: impl FnOnce(*const c_char, *mut *mut c_char) -> Result<()>,
) -> Result<Vec<(usize, String)>> {
    let note = note
        .map(|m| CString::new(m.replace(['\x1e', '\x1f', '\0'], " ")))
        .transpose()?;
    let mut report: *mut c_char = std::ptr::null_mut();
    exchange(
        note.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        &mut report,
    )?;
    if report.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: set (malloc'd) by the shim when a rank had a note.
    let report = unsafe { crate::shim::error::take(report) };
    let mut notes = parse_failures(&report)?;
    notes.sort_by_key(|(rank, _)| *rank);
    Ok(notes)
}

/// The shim's failure report: `<rank>\x1f<message>` records separated by `\x1e`.
fn parse_failures(report: &str) -> Result<Vec<(usize, String)>> {
    report
        .split('\x1e')
        .map(|record| {
            let parsed = record
                .split_once('\x1f')
                .and_then(|(r, m)| Some((r.parse::<usize>().ok()?, m.to_string())));
            parsed.with_context(|| format!("a malformed failure record from the shim: {record:?}"))
        })
        .collect()
}

fn to_c_int(v: usize) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| anyhow::anyhow!("rank or world size {v} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Gloo group of this process alone, on a free local port.
    #[test]
    fn a_rendezvous_timeout_names_the_missing_nodes() {
        let msg = "rendezvous timed out after 5 s: 1 of 4 ranks joined; missing ranks: 1, 2, 3";
        assert_eq!(
            missing_nodes(msg, Some(2)),
            " (node rank 0, 1 with 2 process(es) per node: start it, or check its MASTER_ADDR \
             and MASTER_PORT)"
        );
        assert!(missing_nodes(msg, Some(1)).contains("node rank 1, 2, 3 with 1"));
        assert_eq!(missing_nodes(msg, None), "");
        assert_eq!(missing_nodes("connection reset", Some(8)), "");
    }

    #[test]
    fn an_unreachable_master_fails_at_once_naming_it() {
        let rdv = Rendezvous {
            master_addr: "no-such-host.invalid".into(),
            master_port: 29_999,
            rank: 1,
            world_size: 2,
            ..Rendezvous::single()
        };
        let t0 = std::time::Instant::now();
        let e = ProcessGroup::new(
            &rdv,
            Backend::Gloo,
            Device::Cpu,
            Timeouts::both(Duration::from_secs(60)),
        )
        .err()
        .expect("an address that does not resolve");
        assert!(e.downcast_ref::<GroupFailure>().is_some());
        let msg = format!("{e:#}");
        assert!(
            msg.contains("MASTER_ADDR=no-such-host.invalid") && msg.contains("does not resolve"),
            "{msg}"
        );
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());

        // a master taken from Slurm's node list is named as such, not as MASTER_ADDR
        let slurm = Rendezvous {
            source: super::super::rendezvous::Source::Slurm,
            master_from: "SLURM_JOB_NODELIST",
            ..rdv
        };
        let e = ProcessGroup::new(
            &slurm,
            Backend::Gloo,
            Device::Cpu,
            Timeouts::both(Duration::from_secs(60)),
        )
        .err()
        .expect("an address that does not resolve");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("no-such-host.invalid (the first host of SLURM_JOB_NODELIST)")
                && !msg.contains("MASTER_ADDR=no-such-host"),
            "{msg}"
        );
    }

    /// A name with an IPv6 address this host cannot reach and an IPv4 one it can (common
    /// without IPv6 routes): the probe tried the first address alone and failed at once,
    /// where the store, which tries each address, would have connected.
    #[test]
    fn the_master_probe_fails_only_when_no_address_can_be_reached() {
        let v6: std::net::SocketAddr = "[2001:db8::1]:29500".parse().unwrap();
        let v4: std::net::SocketAddr = "192.0.2.9:29500".parse().unwrap();
        let os = |code| std::io::Error::from_raw_os_error(code);
        let connect = |a: &std::net::SocketAddr| match a.is_ipv6() {
            true => Err(os(libc::ENETUNREACH)),
            false => Ok(()),
        };
        assert_eq!(unreachable_everywhere(&[v6, v4], connect), None);
        let refused = |a: &std::net::SocketAddr| match a.is_ipv6() {
            true => Err(os(libc::EHOSTUNREACH)),
            false => Err(os(libc::ECONNREFUSED)),
        };
        assert_eq!(
            unreachable_everywhere(&[v6, v4], refused),
            None,
            "rank 0 not up yet"
        );
        let why = unreachable_everywhere(&[v6, v4], |a| match a.is_ipv6() {
            true => Err(os(libc::ENETUNREACH)),
            false => Err(os(libc::EHOSTUNREACH)),
        })
        .unwrap();
        assert!(
            why.starts_with("has no route from this host to [2001:db8::1]:29500")
                && why.contains("; it has no host answering at 192.0.2.9:29500"),
            "{why}"
        );
    }

    #[test]
    fn a_slurm_group_that_does_not_form_names_what_can_still_go_wrong() {
        let rdv = Rendezvous {
            world_size: 8,
            source: super::super::rendezvous::Source::Slurm,
            ..Rendezvous::single()
        };
        let hint = slurm_hint(&rdv);
        assert!(
            hint.contains("every rank must be a task of one srun step")
                && hint.contains("srun --label")
                && !hint.contains("batch script"),
            "{hint}"
        );
        let one = Rendezvous {
            world_size: 1,
            ..rdv.clone()
        };
        assert_eq!(slurm_hint(&one), "");
        let torchrun = Rendezvous {
            source: super::super::rendezvous::Source::Torchrun,
            ..rdv
        };
        assert_eq!(slurm_hint(&torchrun), "");
    }

    fn one_rank_group() -> ProcessGroup {
        let rdv = Rendezvous {
            master_port: crate::launch::free_local_port().unwrap(),
            ..Rendezvous::single()
        };
        ProcessGroup::new(
            &rdv,
            Backend::Gloo,
            Device::Cpu,
            Timeouts::both(Duration::from_secs(30)),
        )
        .unwrap()
    }

    #[test]
    fn a_group_marked_failed_refuses_collectives_and_is_aborted_when_dropped() {
        let mut pg = one_rank_group();
        assert!(pg.any(true).unwrap(), "a healthy group answers");
        assert!(!pg.aborts_on_drop(), "a healthy group is shut down");
        pg.mark_failed();
        // the shim sees the mark: the group is aborted when dropped, never shut down (a
        // shutdown would wait for collectives a dead peer holds)
        assert!(pg.aborts_on_drop());
        let msg = format!("{:#}", pg.any(true).unwrap_err());
        assert!(msg.contains("already failed"), "{msg}");
        let msg = format!("{:#}", pg.share_failures(None).unwrap_err());
        assert!(msg.contains("already failed"), "{msg}");
    }

    #[test]
    fn shared_failures_come_back_by_rank_round_after_round() {
        let mut pg = one_rank_group();
        assert_eq!(pg.share_failures(None).unwrap(), vec![]);
        // a later round does not see an earlier one's outcome, and separators are neutralised
        let failed = pg.share_failures(Some("capture\x1efailed")).unwrap();
        assert_eq!(failed, vec![(0, "capture failed".to_string())]);
        assert_eq!(pg.share_failures(None).unwrap(), vec![]);
    }

    #[test]
    fn failure_reports_parse_and_malformed_ones_are_errors() {
        assert_eq!(
            parse_failures("1\x1fout of memory\x1e3\x1fa:b").unwrap(),
            vec![(1, "out of memory".into()), (3, "a:b".into())]
        );
        assert!(parse_failures("one\x1fx").is_err());
        assert!(parse_failures("1 no separator").is_err());
    }
}
