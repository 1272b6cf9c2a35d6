//! `mlperf-run sysinfo`: the system description of this machine, user TOML first (it wins),
//! then detection fills what is still empty, with warnings naming the fields left to fill.

use super::detect::{self, HostRoot};
use super::framework;
use super::gpu;
use super::system_desc::SystemDesc;
use anyhow::Result;
use serde_json::Value;
use std::path::PathBuf;

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
