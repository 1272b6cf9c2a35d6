//! `mlperf-run sysinfo`: the system description of this machine, user TOML first (it wins),
//! then detection fills what is still empty, with warnings naming the fields left to fill.

use super::detect::{self, HostRoot};
use super::framework;
use super::gpu;
use super::system_desc::{self, SystemDesc};
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The file a run set writes beside its result logs: the system description of the node its
/// runs ran on (detected there, NVML included), which `package` uses when it runs elsewhere.
pub const RECORDED_FILE: &str = "sysinfo.json";

/// The fields `package` takes from its command line, never from a recorded description.
pub const IDENTITY_FIELDS: [&str; 3] = ["submitter", "division", "system_name"];

/// How to describe the system.
#[derive(Debug, Clone)]
pub struct DescribeOptions {
    /// Root of the host files (/proc, /sys, /etc).
    pub root: HostRoot,
    /// configs/systems/NAME.toml: overrides any field.
    pub system_config: Option<PathBuf>,
    /// Query NVML for the GPU fields.
    pub use_nvml: bool,
}

impl Default for DescribeOptions {
    fn default() -> Self {
        DescribeOptions {
            root: HostRoot::default(),
            system_config: None,
            use_nvml: true,
        }
    }
}

/// A described system and what the user should know about it.
#[derive(Debug, Clone)]
pub struct Described {
    pub desc: SystemDesc,
    pub warnings: Vec<String>,
}

/// Describe this machine: overrides from the TOML, then detection of the rest.
pub fn describe(opts: &DescribeOptions) -> Result<Described> {
    let mut desc = SystemDesc::default();
    let mut warnings = Vec::new();
    if let Some(path) = &opts.system_config {
        desc.apply_toml_file(path)?;
    }
    let config_hint = opts
        .system_config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "configs/systems/NAME.toml (--system-config)".to_string());
    let missing_host = detect::detect_host(&opts.root, &mut desc);
    let still_missing: Vec<&str> = missing_host
        .into_iter()
        .filter(|f| desc.get(f).is_empty())
        .collect();
    if !still_missing.is_empty() {
        warnings.push(format!(
            "could not detect {}: set them in {config_hint}",
            still_missing.join(", ")
        ));
    }

    let gpu = if opts.use_nvml {
        gpu::query()
    } else {
        Err("NVML not queried".to_string())
    };
    match &gpu {
        Ok(info) => {
            let missing = gpu::apply(info, &mut desc);
            if !missing.is_empty() {
                warnings.push(format!(
                    "NVML did not report {}: set them in {config_hint}",
                    missing.join(", ")
                ));
            }
        }
        Err(reason) => {
            let unset: Vec<&str> = gpu::GPU_FIELDS
                .iter()
                .copied()
                .filter(|f| desc.get(f).is_empty())
                .collect();
            if !unset.is_empty() {
                warnings.push(format!(
                    "{reason}: GPU fields left empty; set {} in {config_hint}",
                    unset.join(", ")
                ));
            }
        }
    }

    let libtorch = framework::find_libtorch();
    desc.set_if_empty("framework", framework::framework_string(libtorch.as_ref()));
    let stack_empty = match desc.value("other_software_stack") {
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Object(m)) => m.is_empty(),
        _ => true,
    };
    if stack_empty {
        let (driver, cuda_driver) = match &gpu {
            Ok(g) => (g.driver_version.clone(), g.cuda_driver_version.clone()),
            Err(_) => (None, None),
        };
        let stack = framework::software_stack(
            libtorch.as_ref(),
            driver.as_deref(),
            cuda_driver.as_deref(),
            detect::kernel_release(&opts.root).as_deref(),
        );
        desc.set_value("other_software_stack", Value::Object(stack));
    }
    for f in ["submitter", "division", "status", "system_name"] {
        if desc.get(f).is_empty() {
            warnings.push(format!(
                "{f} is not set: set it in {config_hint} (package sets it from its arguments)"
            ));
        }
    }
    Ok(Described { desc, warnings })
}

/// How the runs of a set ran, as the trainer knows it.
#[derive(Debug, Clone)]
pub struct RunSetNode {
    /// submission_org of the logs.
    pub submitter: String,
    pub division: String,
    /// submission_status of the logs (onprem, cloud, preview, research).
    pub status: String,
    /// The set's system folder name.
    pub system_name: String,
    /// The runs trained on the CPU: no accelerators, whatever NVML sees.
    pub cpu_only: bool,
}

/// Nodes of a data-parallel job from the launcher's environment, as the launcher that started
/// this process says ([`crate::distributed::nodes_from_lookup`]: WORLD_SIZE / LOCAL_WORLD_SIZE
/// as torchrun and `mlperf-run launch` set them, a Slurm step's nodes, an MPI launcher's), else
/// the Slurm allocation's node count. (It took the allocation's first, so `launch` on two nodes
/// of a four-node job said four.)
pub fn nodes_from_env(get: impl Fn(&str) -> Option<String>) -> Option<u64> {
    crate::distributed::nodes_from_lookup(get).map(|n| n as u64)
}

/// Describe this node for a run set: detection (NVML included), then what the set knows
/// (identity, status, CPU-only runs, node count).
pub fn describe_run_set_node(node: &RunSetNode, opts: &DescribeOptions) -> Result<Described> {
    let mut described = describe(opts)?;
    let desc = &mut described.desc;
    desc.set("submitter", node.submitter.clone())?;
    desc.set("division", node.division.clone())?;
    desc.set("system_name", node.system_name.clone())?;
    let mut set_here: Vec<&str> = IDENTITY_FIELDS.to_vec();
    if let Ok(status) = system_desc::normalize_status(&node.status) {
        desc.set("status", status)?;
        set_here.push("status");
    }
    if node.cpu_only {
        desc.set("accelerators_per_node", "0")?;
        desc.set("accelerator_model_name", "none (CPU only)")?;
        described
            .warnings
            .retain(|w| !w.contains("GPU fields") && !w.starts_with("NVML"));
    }
    if let Some(n) = nodes_from_env(|k| std::env::var(k).ok()) {
        described.desc.set("number_of_nodes", n.to_string())?;
    }
    described.warnings.retain(|w| {
        !set_here
            .iter()
            .any(|f| w.starts_with(&format!("{f} is not set")))
    });
    Ok(described)
}

/// Write `described` to `set_dir`/[`RECORDED_FILE`] (atomically); returns the path.
pub fn write_recorded(set_dir: &Path, desc: &SystemDesc) -> Result<PathBuf> {
    let path = set_dir.join(RECORDED_FILE);
    crate::util::fs::write_atomic(&path, desc.to_json_string().as_bytes()).with_context(|| {
        format!(
            "cannot write the node's system description {}",
            path.display()
        )
    })?;
    Ok(path)
}

/// The description a run set recorded in `dir`, if there is one; a file that cannot be read
/// is an error naming it.
pub fn read_recorded(dir: &Path) -> Result<Option<(PathBuf, SystemDesc)>> {
    let path = dir.join(RECORDED_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let desc = SystemDesc::from_json_str(&text).with_context(|| {
        format!(
            "{} is not a system description (delete it, or pass --system-config)",
            path.display()
        )
    })?;
    Ok(Some((path, desc)))
}

/// Describe the system from a description recorded where the runs ran (instead of detecting
/// this machine): the recorded fields, the identity fields left to the caller, then the TOML
/// of `opts` on top (it wins, as with detection).
pub fn describe_recorded(opts: &DescribeOptions, recorded: &SystemDesc) -> Result<Described> {
    let mut desc = recorded.clone();
    for f in IDENTITY_FIELDS {
        desc.set(f, "")?;
    }
    if let Some(path) = &opts.system_config {
        desc.apply_toml_file(path)?;
    }
    Ok(Described {
        desc,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_count_from_launcher_environment() {
        let env = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(
            nodes_from_env(env(&[("SLURM_JOB_NUM_NODES", "4")])),
            Some(4)
        );
        let torchrun = [
            ("MASTER_ADDR", "n1"),
            ("MASTER_PORT", "29500"),
            ("RANK", "9"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_RANK", "1"),
        ];
        let mut launch = torchrun.to_vec();
        launch.push(("LOCAL_WORLD_SIZE", "8"));
        assert_eq!(nodes_from_env(env(&launch)), Some(2));
        assert_eq!(nodes_from_env(env(&torchrun)), None);
        // launch's workers on 2 nodes of a 4-node allocation: launch's count
        launch.push(("SLURM_JOB_NUM_NODES", "4"));
        assert_eq!(nodes_from_env(env(&launch)), Some(2));
        assert_eq!(nodes_from_env(env(&[])), None);
    }

    #[test]
    fn recorded_description_round_trips_and_toml_wins() {
        let dir = tempfile::tempdir().unwrap();
        let mut desc = SystemDesc::default();
        desc.apply_toml_str(
            "submitter = \"Org\"\nsystem_name = \"node\"\naccelerators_per_node = 8\ncooling = \"air\"\n",
        )
        .unwrap();
        let path = write_recorded(dir.path(), &desc).unwrap();
        assert_eq!(path, dir.path().join(RECORDED_FILE));
        let (_, back) = read_recorded(dir.path()).unwrap().unwrap();
        assert_eq!(back, desc);
        let toml = dir.path().join("sys.toml");
        std::fs::write(&toml, "cooling = \"liquid\"\n").unwrap();
        let opts = DescribeOptions {
            system_config: Some(toml),
            use_nvml: false,
            ..Default::default()
        };
        let d = describe_recorded(&opts, &back).unwrap().desc;
        assert_eq!(d.get("cooling"), "liquid");
        assert_eq!(d.get("accelerators_per_node"), "8");
        assert_eq!(
            d.get("submitter"),
            "",
            "identity comes from the package command line"
        );
        std::fs::write(dir.path().join(RECORDED_FILE), "{\"gpus\": 1}").unwrap();
        let err = format!("{:#}", read_recorded(dir.path()).unwrap_err());
        assert!(
            err.contains(RECORDED_FILE) && err.contains("'gpus'"),
            "{err}"
        );
        assert!(read_recorded(&dir.path().join("none")).unwrap().is_none());
    }
}
