//! Which visible CUDA device a rank uses ([`choose_gpu`]), the one rule behind the trainer's
//! device, the GPU the ranks compare and claim before the first run, the NCCL group's control
//! tensors and `cpu_bind = "gpu"` ([`local_gpus`]). Two layouts of a node are real:
//!
//! - every process sees all of the node's GPUs (`mlperf-run launch`, torchrun, `srun` without
//!   GPU binding): local rank r takes `cuda:r`, so at most as many processes per node as GPUs;
//! - each task is bound to exactly one GPU (Slurm's `--gpus-per-task=1` or
//!   `--gpu-bind=single:1`, a container given one device, CUDA_VISIBLE_DEVICES set per
//!   process): the process sees that one GPU alone, as `cuda:0`, whatever its local rank.
//!
//! Two processes that end up on one physical GPU this way (CUDA_VISIBLE_DEVICES=0 exported to
//! every process) are found when the ranks compare their jobs (their GPU claims clash), not here:
//! a process cannot see which GPU another one took.
use crate::cpu_bind::LocalGpus;

/// Why a rank uses the device [`choose_gpu`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The process sees exactly one GPU: its launcher bound it to that one.
    Bound,
    /// The process sees the node's GPUs: local rank r takes the r-th.
    LocalRank,
    /// Tests only (`MLPERF_RUN_TEST_SHARE_GPU`): more local ranks than GPUs, `local_rank mod
    /// visible`.
    Shared,
}

/// The CUDA device (its ordinal after CUDA_VISIBLE_DEVICES) a rank uses, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuChoice {
    pub ordinal: usize,
    pub why: Why,
}

/// The visible CUDA device of the process with `local_rank` when it sees `visible` devices:
/// with exactly one, that one, whatever its local rank (the launcher bound it); else
/// `cuda:local_rank` while there is one; else, with `share` (the test mode), `cuda:(local_rank
/// mod visible)`; else a refusal that names LOCAL_RANK, the count and `cvd`
/// (CUDA_VISIBLE_DEVICES, None: unset) and says both layouts that work.
pub fn choose_gpu(
    local_rank: usize,
    visible: usize,
    share: bool,
    cvd: Option<&str>,
) -> Result<GpuChoice, String> {
    let cvd_said = match cvd {
        Some(v) => format!("CUDA_VISIBLE_DEVICES={v:?}"),
        None => "CUDA_VISIBLE_DEVICES unset".to_string(),
    };
    match visible {
        0 => Err(format!(
            "no CUDA device is visible to this process ({cvd_said}): run with --device cpu, \
             or give each process a GPU"
        )),
        1 => Ok(GpuChoice {
            ordinal: 0,
            why: Why::Bound,
        }),
        n if local_rank < n => Ok(GpuChoice {
            ordinal: local_rank,
            why: Why::LocalRank,
        }),
        n if share => Ok(GpuChoice {
            ordinal: local_rank % n,
            why: Why::Shared,
        }),
        n => Err(format!(
            "LOCAL_RANK {local_rank} has no GPU: this process sees {n} CUDA devices \
             ({cvd_said}), and with more than one visible, local rank r takes the r-th. Either \
             every process sees all of the node's GPUs and at most {n} processes run per node \
             (`mlperf-run launch --nproc-per-node {n}`, `srun --ntasks-per-node={n}`), or each \
             task is bound to exactly one GPU, the only one it sees (`srun --gpus-per-task=1`, \
             `--gpu-bind=single:1`, or CUDA_VISIBLE_DEVICES set to one GPU per process)"
        )),
    }
}

/// The name NVML finds CUDA device `ordinal` by: CUDA_VISIBLE_DEVICES' entry for it (an index
/// or a UUID), else the ordinal itself.
pub fn nvml_name(ordinal: usize, cvd: Option<&str>) -> String {
    cvd.and_then(|v| v.split(',').nth(ordinal))
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| ordinal.to_string())
}

/// The local ranks' GPUs for `cpu_bind = "gpu"`, as this process sees them: its own alone when
/// it sees one GPU (`own`: a name NVML finds it by, such as its PCI bus id, where known; else
/// CUDA_VISIBLE_DEVICES' entry), else each local rank's by [`choose_gpu`] (`local` ranks).
pub fn local_gpus(
    visible: usize,
    local: usize,
    share: bool,
    cvd: Option<&str>,
    own: Option<String>,
) -> LocalGpus {
    if visible == 1 {
        return LocalGpus::Own(own.unwrap_or_else(|| nvml_name(0, cvd)));
    }
    LocalGpus::Each(
        (0..local)
            .map(|r| {
                choose_gpu(r, visible, share, cvd)
                    .ok()
                    .map(|c| nvml_name(c.ordinal, cvd))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (local rank, visible, share, CUDA_VISIBLE_DEVICES) and the choice.
    type Case = (
        usize,
        usize,
        bool,
        Option<&'static str>,
        Result<GpuChoice, String>,
    );

    #[test]
    fn the_device_of_each_layout() {
        let bound = |o| {
            Ok(GpuChoice {
                ordinal: o,
                why: Why::Bound,
            })
        };
        let own = |o| {
            Ok(GpuChoice {
                ordinal: o,
                why: Why::LocalRank,
            })
        };
        let shared = |o| {
            Ok(GpuChoice {
                ordinal: o,
                why: Why::Shared,
            })
        };
        // (local rank, visible, share, CUDA_VISIBLE_DEVICES) -> the choice
        let cases: [Case; 12] = [
            // 8 processes per node, each seeing the node's 8 GPUs
            (0, 8, false, None, own(0)),
            (7, 8, false, None, own(7)),
            (3, 8, false, Some("0,1,2,3,4,5,6,7"), own(3)),
            // srun --gpus-per-task=1: local rank 3 sees its one GPU as cuda:0
            (3, 1, false, Some("3"), bound(0)),
            (7, 1, false, Some("GPU-5d3c1a2b"), bound(0)),
            // cgroup-bound: every task sees "0"
            (5, 1, false, Some("0"), bound(0)),
            (0, 1, false, None, bound(0)),
            // the same sharing or not
            (5, 1, true, Some("0"), bound(0)),
            // the test mode shares where there are fewer GPUs than ranks
            (3, 2, true, None, shared(1)),
            (1, 8, true, None, own(1)),
            // refused
            (2, 2, false, Some("0,1"), Err(String::new())),
            (0, 0, false, Some(""), Err(String::new())),
        ];
        for (rank, visible, share, cvd, want) in cases {
            let got = choose_gpu(rank, visible, share, cvd);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "rank {rank}, {visible} visible, {cvd:?}"),
                (Err(_), Err(_)) => {}
                _ => panic!("rank {rank}, {visible} visible, {cvd:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_refusal_names_the_rank_the_count_the_variable_and_both_layouts() {
        let e = choose_gpu(3, 2, false, Some("0,1")).unwrap_err();
        for want in [
            "LOCAL_RANK 3 has no GPU",
            "sees 2 CUDA devices",
            "CUDA_VISIBLE_DEVICES=\"0,1\"",
            "at most 2 processes run per node",
            "--nproc-per-node 2",
            "each task is bound to exactly one GPU",
            "--gpus-per-task=1",
        ] {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
        assert!(!e.contains("start at most"), "{e}");
        let e = choose_gpu(3, 2, false, None).unwrap_err();
        assert!(e.contains("CUDA_VISIBLE_DEVICES unset"), "{e}");
        let e = choose_gpu(0, 0, false, None).unwrap_err();
        assert!(
            e.contains("no CUDA device") && e.contains("--device cpu"),
            "{e}"
        );
    }

    #[test]
    fn cpu_binding_follows_the_same_rule() {
        // bound to one GPU: its own, by the name given (its PCI bus id) or its one entry
        assert_eq!(
            local_gpus(1, 8, false, Some("3"), Some("0000:9A:00.0".into())),
            LocalGpus::Own("0000:9A:00.0".into())
        );
        assert_eq!(
            local_gpus(1, 8, false, Some("3"), None),
            LocalGpus::Own("3".into())
        );
        assert_eq!(
            local_gpus(1, 8, false, None, None),
            LocalGpus::Own("0".into())
        );
        // every GPU visible: each rank's CUDA_VISIBLE_DEVICES entry; a rank past them has none
        assert_eq!(
            local_gpus(2, 3, false, Some("4, GPU-ab"), None),
            LocalGpus::Each(vec![Some("4".into()), Some("GPU-ab".into()), None])
        );
        assert_eq!(
            local_gpus(2, 3, true, None, None),
            LocalGpus::Each(vec![Some("0".into()), Some("1".into()), Some("0".into())])
        );
    }
}
