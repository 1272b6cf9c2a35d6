//! Test modes that run the multi-process paths on a machine with one GPU (scripts/bench_gpu.sh
//! part m), each asked for by an environment variable and refused without it:
//!
//! - `MLPERF_RUN_TEST_SHARE_GPU=1`: the ranks of a CUDA run share the node's GPUs (rank r on
//!   `cuda:(LOCAL_RANK mod visible)`) and talk through Gloo over CUDA tensors, since NCCL refuses
//!   two ranks on one device; their GPUs are not claimed when the ranks compare their jobs. The
//!   overlapped all-reduce, the per-rank batch hand-off, stop agreement, shutdown and rank-failure
//!   abort then run on a GPU. `methods.cuda_graph` is refused in this mode: the graph captures
//!   the step's all-reduces, which only NCCL can do.
//! - `MLPERF_RUN_TEST_GROUP_OF_ONE=1`: a world of one process (`mlperf-run launch
//!   --nproc-per-node 1`) still forms a process group (NCCL on CUDA, Gloo on a CPU) and sends its
//!   gradients through it, so on a GPU the all-reduce is captured inside the CUDA graph as it is
//!   in an 8-GPU run.
//!
//! Neither is for submissions: the run's speed and its process layout are not a real system's.
use super::Backend;
use anyhow::{bail, Result};
use tch::Device;

/// The variable that lets ranks share a GPU.
pub const SHARE_GPU: &str = "MLPERF_RUN_TEST_SHARE_GPU";
/// The variable that makes a world of one process form a group.
pub const GROUP_OF_ONE: &str = "MLPERF_RUN_TEST_GROUP_OF_ONE";

/// The test modes this process runs in (both off unless their variables say "1").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestMode {
    pub share_gpu: bool,
    pub group_of_one: bool,
}

impl TestMode {
    pub fn from_env() -> Result<TestMode> {
        Ok(TestMode {
            share_gpu: flag(SHARE_GPU)?,
            group_of_one: flag(GROUP_OF_ONE)?,
        })
    }

    /// The device of the process with `local_rank` when it sees `visible` CUDA devices, for a
    /// run on `device`: the GPU [`super::choose_gpu`] picks (its only one, its local rank's,
    /// or, sharing, `cuda:(local_rank mod visible)`), or its refusal with the test mode's way
    /// out.
    pub fn rank_device(self, device: Device, local_rank: usize, visible: i64) -> Result<Device> {
        if !device.is_cuda() {
            return Ok(device);
        }
        let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        match super::choose_gpu(
            local_rank,
            visible.max(0) as usize,
            self.share_gpu,
            cvd.as_deref(),
        ) {
            Ok(choice) => Ok(Device::Cuda(choice.ordinal)),
            Err(why) if visible < 1 => bail!("{why}"),
            Err(why) => {
                bail!("{why}. (Tests only: {SHARE_GPU}=1 lets ranks share a GPU through Gloo.)")
            }
        }
    }

    /// The backend of a group on `device` (which [`Self::rank_device`] chose): NCCL on CUDA,
    /// Gloo on a CPU, and Gloo over CUDA tensors where ranks share a GPU.
    pub fn backend(self, device: Device) -> Backend {
        if device.is_cuda() && self.share_gpu {
            Backend::Gloo
        } else {
            Backend::for_device(device)
        }
    }

    /// Whether a world of `world_size` processes forms a process group.
    pub fn forms_group(self, world_size: usize) -> bool {
        world_size > 1 || self.group_of_one
    }

    /// Refuse what this mode cannot run: CUDA graphs with ranks sharing a GPU through Gloo (a
    /// graph captures the step's all-reduces, which Gloo's CUDA path, a copy through the host,
    /// cannot be).
    pub fn check_cuda_graph(
        self,
        device: Device,
        world_size: usize,
        cuda_graph: bool,
    ) -> Result<()> {
        if cuda_graph && device.is_cuda() && self.share_gpu && world_size > 1 {
            bail!(
                "methods.cuda_graph cannot run with {SHARE_GPU}=1: the CUDA graph captures the \
                 step's all-reduces, which needs NCCL, and ranks sharing a GPU talk through Gloo; \
                 set methods.cuda_graph = false for this test, or test the captured all-reduce \
                 with {GROUP_OF_ONE}=1 and one process"
            );
        }
        Ok(())
    }

    /// A line for the log of a run in a test mode, or None.
    pub fn warning(self) -> Option<String> {
        let mut on = Vec::new();
        if self.share_gpu {
            on.push(format!("{SHARE_GPU}=1 (ranks share a GPU through Gloo)"));
        }
        if self.group_of_one {
            on.push(format!("{GROUP_OF_ONE}=1 (one process forms a group)"));
        }
        (!on.is_empty()).then(|| {
            format!(
                "test mode: {}; for testing the multi-process paths, not for submissions",
                on.join(", ")
            )
        })
    }
}

fn flag(name: &str) -> Result<bool> {
    match std::env::var(name) {
        Err(_) => Ok(false),
        Ok(v) => match v.trim() {
            "" | "0" => Ok(false),
            "1" => Ok(true),
            other => bail!("{name} must be 0 or 1 (got {other:?}); unset it for a normal run"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARE: TestMode = TestMode {
        share_gpu: true,
        group_of_one: false,
    };

    #[test]
    fn a_rank_without_a_gpu_is_refused_unless_sharing() {
        let off = TestMode::default();
        assert_eq!(
            off.rank_device(Device::Cuda(0), 0, 2).unwrap(),
            Device::Cuda(0)
        );
        let e = off
            .rank_device(Device::Cuda(0), 2, 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("LOCAL_RANK 2 has no GPU") && e.contains(SHARE_GPU),
            "{e}"
        );
        // a process that sees one GPU uses it whatever its local rank (its launcher bound it
        // there); two such processes on one GPU are found when the ranks compare their jobs
        assert_eq!(
            off.rank_device(Device::Cuda(0), 5, 1).unwrap(),
            Device::Cuda(0)
        );
        assert_eq!(
            SHARE.rank_device(Device::Cuda(0), 1, 1).unwrap(),
            Device::Cuda(0)
        );
        assert_eq!(
            SHARE.rank_device(Device::Cuda(0), 3, 2).unwrap(),
            Device::Cuda(1)
        );
        // its own GPU where the node has one, sharing or not
        assert_eq!(
            SHARE.rank_device(Device::Cuda(0), 1, 8).unwrap(),
            Device::Cuda(1)
        );
        let e = SHARE
            .rank_device(Device::Cuda(0), 0, 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no CUDA device") && !e.contains(SHARE_GPU),
            "{e}"
        );
        assert_eq!(SHARE.rank_device(Device::Cpu, 5, 0).unwrap(), Device::Cpu);
    }

    #[test]
    fn sharing_ranks_talk_through_gloo_and_refuse_cuda_graphs() {
        assert_eq!(SHARE.backend(Device::Cuda(0)), Backend::Gloo);
        assert_eq!(TestMode::default().backend(Device::Cuda(0)), Backend::Nccl);
        assert_eq!(SHARE.backend(Device::Cpu), Backend::Gloo);
        let e = SHARE
            .check_cuda_graph(Device::Cuda(0), 2, true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("methods.cuda_graph") && e.contains(GROUP_OF_ONE),
            "{e}"
        );
        SHARE.check_cuda_graph(Device::Cuda(0), 2, false).unwrap();
        SHARE.check_cuda_graph(Device::Cuda(0), 1, true).unwrap();
        TestMode::default()
            .check_cuda_graph(Device::Cuda(0), 2, true)
            .unwrap();
    }

    #[test]
    fn a_world_of_one_forms_a_group_only_when_asked() {
        assert!(!TestMode::default().forms_group(1));
        assert!(TestMode::default().forms_group(2));
        let one = TestMode {
            share_gpu: false,
            group_of_one: true,
        };
        assert!(one.forms_group(1));
        assert!(one.warning().unwrap().contains(GROUP_OF_ONE));
        assert_eq!(TestMode::default().warning(), None);
    }
}
