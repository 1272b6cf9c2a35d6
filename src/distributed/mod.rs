//! Data-parallel training through libtorch's c10d, reached by the project's C++ shim
//! (`shim/dist.cpp`): one process per device, rendezvous through a TCPStore that rank 0
//! hosts, Gloo on CPUs and NCCL on GPUs (feature `nccl`).
//!
//! - [`Rendezvous`]: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK, or Slurm's variables
//! - [`Peers`]: what the trainer needs of the other ranks (rank, sums, agreement, rank 0's
//!   state, failure sharing), apart from the gradient reducer; [`ProcessGroup`] implements it
//! - [`ProcessGroup`]: allreduce, broadcast, barrier, eval-count reduction, stop agreement;
//!   every call bounded by a timeout, so a dead peer aborts the run instead of hanging it
//! - [`BucketedGradSync`]: gradient averaging in ~25 MB buckets, the trainer's
//!   [`GradSync`] (the trainer's contract); each bucket's all-reduce overlaps the
//!   backward (autograd hooks in the shim, `reducer`), with optional bucket-wise clipping
//! - [`broadcast_from_root`]: rank 0's initial parameters to every rank
//!
//! Failure contract: any error from a collective means this run is aborted on this rank;
//! the peers see their next collective fail (closed connection) or time out, so every rank
//! ends within the timeout. Only rank 0 writes the MLPerf log.
mod buckets;
mod gradsync;
mod group;
pub mod hostlist;
mod peers;
mod reducer;
mod rendezvous;
mod sync;
mod test_mode;

pub use buckets::{broadcast_from_root, Buckets, DEFAULT_BUCKET_BYTES};
pub use gradsync::{overlap_from_env, BucketedGradSync};
pub use group::{Backend, GroupFailure, ProcessGroup, ReduceOp};
pub use peers::Peers;
pub use reducer::{BucketTimes, OverlapTimings};
pub use rendezvous::{
    local_processes, local_processes_from_lookup, Rendezvous, Source, Timeouts, DEFAULT_PORT,
    DEFAULT_RENDEZVOUS_TIMEOUT, DEFAULT_TIMEOUT,
};
pub use sync::{GradSource, GradSync, NoSync};
pub use test_mode::{TestMode, GROUP_OF_ONE, SHARE_GPU};

/// libtorch's own log lines at the command's verbosity: without `-v`, only its errors (c10d's
/// warnings, such as a connection retry printed with a whole C++ stack trace, say nothing our
/// own error does not; while the store connects even its errors wait, see
/// [`ProcessGroup::new`]); with `-v`, its warnings too, as libtorch's default; `-vv`, its info
/// lines. A `TORCH_CPP_LOG_LEVEL` in the environment is the user's choice and is left as it is.
pub fn libtorch_logs(verbose: u8) {
    use crate::shim::tensor::{set_cpp_log_level, CppLogLevel};
    if std::env::var_os("TORCH_CPP_LOG_LEVEL").is_some() {
        return;
    }
    set_cpp_log_level(match verbose {
        0 => CppLogLevel::Error,
        1 => CppLogLevel::Warning,
        _ => CppLogLevel::Info,
    });
}

#[cfg(test)]
mod log_level_tests {
    /// The level follows -v, and a TORCH_CPP_LOG_LEVEL the user set wins.
    #[test]
    fn libtorch_log_level_follows_the_verbosity_unless_the_user_set_one() {
        use crate::shim::tensor::cpp_log_level;
        let before = cpp_log_level();
        if std::env::var_os("TORCH_CPP_LOG_LEVEL").is_none() {
            super::libtorch_logs(0);
            assert_eq!(cpp_log_level(), 2);
            super::libtorch_logs(1);
            assert_eq!(cpp_log_level(), 1);
            super::libtorch_logs(2);
            assert_eq!(cpp_log_level(), 0);
        }
        crate::shim::tensor::set_cpp_log_level(match before {
            0 => crate::shim::tensor::CppLogLevel::Info,
            2 => crate::shim::tensor::CppLogLevel::Error,
            _ => crate::shim::tensor::CppLogLevel::Warning,
        });
    }
}
