//! Data-parallel training through libtorch's c10d, reached by the project's C++ shim
//! (`shim/dist.cpp`): one process per device, rendezvous through a TCPStore that rank 0
//! hosts, Gloo on CPUs and NCCL on GPUs (feature `nccl`).
//!
//! - [`Rendezvous`]: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK, or Slurm's or an MPI
//!   launcher's variables
//! - [`Peers`]: what the trainer needs of the other ranks (rank, sums, agreement, rank 0's
//!   state, failure sharing), apart from the gradient reducer; [`ProcessGroup`] implements it
//! - [`ProcessGroup`]: allreduce, broadcast, barrier, eval-count reduction, stop agreement;
//!   every call bounded by a timeout, so a dead peer aborts the run instead of hanging it
//! - [`BucketedGradSync`]: gradient averaging in ~25 MB buckets, the trainer's
//!   [`GradSync`] (the trainer's contract); each bucket's all-reduce overlaps the
//!   backward (autograd hooks in the shim, `reducer`), with optional bucket-wise clipping
//! - [`broadcast_from_root`]: rank 0's initial parameters to every rank
//! - [`compare_jobs`]: before the first run, every rank's job against rank 0's, and the
//!   resources each rank claims for itself (its GPU) against every other rank's (through the
//!   rendezvous and rank 0's store only); what a job is, the caller says
//! - [`choose_gpu`]: which visible CUDA device a rank uses (one per process either way: every
//!   process sees the node's GPUs and takes its local rank's, or sees the one it is bound to)
//!
//! Failure contract: any error from a collective means this run is aborted on this rank;
//! the peers see their next collective fail (closed connection) or time out, so every rank
//! ends within the timeout. Only rank 0 writes the MLPerf log.
//!
//! Without the `torch` feature only the launcher's environment is here ([`Rendezvous`],
//! [`Timeouts`], [`hostlist`]): the lite build's commands ask it which rank they are.
#[cfg(feature = "torch")]
mod agree;
#[cfg(feature = "torch")]
mod buckets;
mod device;
#[cfg(feature = "torch")]
mod gradsync;
#[cfg(feature = "torch")]
mod group;
pub mod hostlist;
#[cfg(feature = "torch")]
mod peers;
#[cfg(feature = "torch")]
mod reducer;
mod rendezvous;
#[cfg(feature = "torch")]
mod sync;
#[cfg(feature = "torch")]
mod test_mode;

#[cfg(feature = "torch")]
pub use agree::{compare_jobs, Claim, Difference, ItemDifference, JobView, MAX_ITEMS};
#[cfg(feature = "torch")]
pub use buckets::{broadcast_from_root, Buckets, DEFAULT_BUCKET_BYTES};
pub use device::{choose_gpu, local_gpus, nvml_name, GpuChoice, Why};
#[cfg(feature = "torch")]
pub use gradsync::{overlap_from_env, BucketedGradSync};
#[cfg(feature = "torch")]
pub use group::{Backend, GroupFailure, ProcessGroup, ReduceOp};
#[cfg(feature = "torch")]
pub use peers::Peers;
#[cfg(feature = "torch")]
pub use reducer::{BucketTimes, OverlapTimings};
pub use rendezvous::{
    launcher, launcher_task, local_processes, local_processes_from_lookup, nodes_from_lookup,
    under_a_launcher, LauncherTask, Rendezvous, Source, Timeouts, DEFAULT_PORT,
    DEFAULT_RENDEZVOUS_TIMEOUT, DEFAULT_TIMEOUT, MAX_TIMEOUT_S, MIN_TIMEOUT_S, ONE_NODE,
};
#[cfg(feature = "torch")]
pub use sync::{GradSource, GradSync, NoSync};
#[cfg(feature = "torch")]
pub use test_mode::{TestMode, GROUP_OF_ONE, SHARE_GPU};

/// The launcher's environment, read once before a training command's first run: the test
/// modes, the rendezvous variables (of whichever launcher started it) and, for a multi-process
/// job, the timeouts and MLPERF_RUN_GRAD_OVERLAP. A malformed or inconsistent one is refused here,
/// naming the variable; found by each run instead, it was logged as that run's crash and the
/// set went on, every run ending aborted. With `-v` it says which launcher's variables it
/// read, and which others it found but did not read.
#[cfg(feature = "torch")]
pub fn check_environment() -> anyhow::Result<()> {
    TestMode::from_env()?;
    if let Some(rdv) = Rendezvous::from_env()? {
        Timeouts::from_env()?;
        overlap_from_env()?;
        tracing::info!(
            "rank {} of {} (local rank {}), from the variables of {}{}",
            rdv.rank,
            rdv.world_size,
            rdv.local_rank,
            rdv.source.launcher(),
            rdv.not_read
                .map(|o| format!("; also set, not read: {o}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// libtorch's own log lines at the command's verbosity: without `-v`, only its errors (c10d's
/// warnings, such as a connection retry printed with a whole C++ stack trace, say nothing our
/// own error does not; while the store connects even its errors wait, see
/// [`ProcessGroup::new`]); with `-v`, its warnings too, as libtorch's default; `-vv`, its info
/// lines. A `TORCH_CPP_LOG_LEVEL` in the environment is the user's choice and is left as it is.
#[cfg(feature = "torch")]
pub fn libtorch_logs(verbose: u8) {
    let user_set = std::env::var_os("TORCH_CPP_LOG_LEVEL").is_some();
    if let Some(level) = libtorch_log_level(verbose, user_set) {
        crate::shim::tensor::set_cpp_log_level(level);
    }
}

/// The level [`libtorch_logs`] sets; None: the user's `TORCH_CPP_LOG_LEVEL` stands.
#[cfg(feature = "torch")]
fn libtorch_log_level(verbose: u8, user_set: bool) -> Option<crate::shim::tensor::CppLogLevel> {
    use crate::shim::tensor::CppLogLevel;
    (!user_set).then_some(match verbose {
        0 => CppLogLevel::Error,
        1 => CppLogLevel::Warning,
        _ => CppLogLevel::Info,
    })
}

#[cfg(all(test, feature = "torch"))]
mod log_level_tests {
    use crate::shim::tensor::{cpp_log_level, set_cpp_log_level, CppLogLevel};

    /// The level follows -v, a TORCH_CPP_LOG_LEVEL the user set wins, and the level set is the
    /// one c10 reads. (Error is not set here: a group formed meanwhile by another test would
    /// then quiet the store, see `QuietStore`.)
    #[test]
    fn libtorch_log_level_follows_the_verbosity_unless_the_user_set_one() {
        let level = super::libtorch_log_level;
        assert_eq!(level(0, false), Some(CppLogLevel::Error));
        assert_eq!(level(1, false), Some(CppLogLevel::Warning));
        assert_eq!(level(3, false), Some(CppLogLevel::Info));
        assert_eq!(level(0, true), None);
        let before = cpp_log_level();
        set_cpp_log_level(CppLogLevel::Info);
        assert_eq!(cpp_log_level(), 0);
        set_cpp_log_level(CppLogLevel::Warning);
        assert_eq!(cpp_log_level(), 1);
        assert_eq!(
            before, 1,
            "libtorch's default level when TORCH_CPP_LOG_LEVEL is unset"
        );
    }
}
