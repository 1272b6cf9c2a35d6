//! The `[system]` table of a run config, shared by every benchmark: the submission's system
//! fields, the time limit, and the process-wide settings a run starts with (CPU binding,
//! threads, cuDNN benchmark mode, TF32, how often losses are read back).

#[cfg(feature = "torch")]
use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SubmissionStatus {
    Onprem,
    Cloud,
    Preview,
    Research,
}

impl SubmissionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SubmissionStatus::Onprem => "onprem",
            SubmissionStatus::Cloud => "cloud",
            SubmissionStatus::Preview => "preview",
            SubmissionStatus::Research => "research",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    pub submission_org: String,
    pub submission_platform: String,
    pub submission_status: SubmissionStatus,
    /// Shell command run before each run to drop the page cache (logged as cache_clear true);
    /// absent or empty: none, logged as cache_clear false.
    #[serde(default)]
    pub cache_clear_command: Option<String>,
    /// Intra-op threads for libtorch on CPU (0 or absent: libtorch's default).
    #[serde(default)]
    pub threads: Option<i32>,
    /// Which CPUs each process of a node runs on: "none" (default, as started), "slices" (the
    /// CPUs cut into one run of whole cores per local process) or "gpu" (the CPUs near the
    /// rank's GPU, per NVML, shared among the ranks whose GPUs have the same ones). A process
    /// already bound by its launcher is left as it is. See [`crate::cpu_bind`].
    #[serde(default)]
    pub cpu_bind: crate::cpu_bind::CpuBind,
    /// Abort the run (run_stop aborted) after this many minutes of training.
    pub time_limit_minutes: f64,
    /// CUDA: cuDNN benchmark mode (time the convolution algorithms once per input shape and
    /// keep the fastest). Logged as `cudnn_benchmark`. Default true.
    #[serde(default = "default_true")]
    pub cudnn_benchmark: bool,
    /// CUDA: TF32 tensor cores for fp32 matmuls and convolutions (bf16 autocast regions are
    /// unaffected). Logged as `tf32`. Default false (IEEE fp32).
    #[serde(default)]
    pub tf32: bool,
    /// Read the step losses back to the host every this many steps (and at the end of every
    /// block) for the divergence/NaN abort: between reads the host never waits for the device.
    /// Default 8.
    #[serde(default = "default_loss_check_steps")]
    pub loss_check_steps: u64,
}

#[cfg(feature = "torch")]
impl SystemConfig {
    /// Apply the process-wide settings a run starts with, before it joins its process group:
    /// the CPU binding, libtorch's CPU threads and, on a GPU, the device, cuDNN benchmark mode
    /// and TF32.
    pub fn configure_process(&self, device: tch::Device) -> Result<()> {
        // first, once per process: the whole process is bound (threads already running too),
        // and the threads started from here on (the process group's, libtorch's, the data
        // pipeline's) inherit the binding
        static CPU_BIND: std::sync::Once = std::sync::Once::new();
        if !CPU_BIND.is_completed() {
            let rendezvous = crate::distributed::Rendezvous::from_env()?;
            let share = crate::distributed::TestMode::from_env()?.share_gpu;
            CPU_BIND.call_once(|| {
                let local_rank = rendezvous.map_or(0, |r| r.local_rank);
                let local = crate::distributed::local_processes().unwrap_or(1);
                let gpus = match self.cpu_bind {
                    crate::cpu_bind::CpuBind::Gpu => local_gpus(device, local, share),
                    _ => crate::cpu_bind::LocalGpus::default(),
                };
                match crate::cpu_bind::apply(self.cpu_bind, local_rank, local, &gpus) {
                    Some(o) if o.warning => tracing::warn!("{}", o.message),
                    Some(o) => tracing::info!("{}", o.message),
                    None => {}
                }
            });
        }
        if let Some(t) = self.threads.filter(|&t| t > 0) {
            tch::set_num_threads(t);
        }
        crate::gpu::cuda::configure(
            device,
            crate::gpu::cuda::DeviceSettings {
                cudnn_benchmark: self.cudnn_benchmark,
                tf32: self.tf32,
            },
        )
    }
}

/// The local ranks' GPUs for `cpu_bind = "gpu"`, by the trainer's rule
/// ([`crate::distributed::choose_gpu`]): a process that sees one GPU has that one (named by its
/// PCI bus id where the CUDA runtime gives it, which NVML finds whatever the process's
/// CUDA_VISIBLE_DEVICES says), else local rank r has the r-th visible. A CPU run (`device`) sees
/// the node's GPUs, as before: CUDA is not asked.
#[cfg(feature = "torch")]
fn local_gpus(device: tch::Device, local: usize, share: bool) -> crate::cpu_bind::LocalGpus {
    let cvd = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let cvd = cvd.as_deref();
    let tch::Device::Cuda(ordinal) = device else {
        return crate::cpu_bind::LocalGpus::Each(
            (0..local)
                .map(|r| Some(crate::distributed::nvml_name(r, cvd)))
                .collect(),
        );
    };
    let visible = tch::Cuda::device_count().max(0) as usize;
    let own = (visible == 1)
        .then(|| crate::gpu::identity::identify(ordinal).ok())
        .flatten()
        .map(|id| id.pci_bus_id);
    crate::distributed::local_gpus(visible, local, share, cvd, own)
}

fn default_loss_check_steps() -> u64 {
    8
}

fn default_true() -> bool {
    true
}

impl SystemConfig {
    /// The most `system.threads`: more CPUs than any one machine's.
    pub const MAX_THREADS: i32 = 1024;

    /// The longest `system.time_limit_minutes`: a year, far beyond any run.
    pub const MAX_TIME_LIMIT_MINUTES: f64 = 525_600.0;

    /// Refuse what no run can start with: a time limit that is not a positive number of
    /// minutes (a negative or NaN one used to panic when the run began), negative threads.
    pub fn validate(&self) -> anyhow::Result<()> {
        let t = self.time_limit_minutes;
        if !(t.is_finite() && t > 0.0 && t <= Self::MAX_TIME_LIMIT_MINUTES) {
            anyhow::bail!(
                "system.time_limit_minutes must be a number of minutes above 0 (at most {}), \
                 got {t}",
                Self::MAX_TIME_LIMIT_MINUTES
            );
        }
        if let Some(n) = self.threads.filter(|&n| n < 0) {
            anyhow::bail!(
                "system.threads must be 0 or more (0 or absent: libtorch's default), got {n}"
            );
        }
        if self.loss_check_steps == 0 {
            // it ran as 1 without a word
            anyhow::bail!(
                "system.loss_check_steps must be at least 1 (the steps between reads of the \
                 losses for the divergence check; absent: 8), got 0"
            );
        }
        if let Some(n) = self.threads.filter(|&n| n > Self::MAX_THREADS) {
            // libtorch starts them all: 100000 grew the process by gigabytes, deaf to SIGTERM
            anyhow::bail!(
                "system.threads must be at most {} (libtorch's intra-op threads per process; 0 \
                 or absent: libtorch's default), got {n}",
                Self::MAX_THREADS
            );
        }
        Ok(())
    }

    /// The hyperparameter-log entries of the device switches.
    pub fn device_log_keys(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("cudnn_benchmark", json!(self.cudnn_benchmark)),
            ("tf32", json!(self.tf32)),
        ]
    }
}
