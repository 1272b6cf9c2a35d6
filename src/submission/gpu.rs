//! Accelerator fields through NVML (libnvidia-ml, loaded at run time by `nvml-wrapper`): on a
//! machine without NVIDIA's driver nothing is detected and the caller warns which fields to
//! fill in by hand.

use super::detect::human_bytes;
use super::system_desc::SystemDesc;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::Nvml;

/// The fields NVML fills; named in the warning when NVML is absent.
pub const GPU_FIELDS: [&str; 5] = [
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "accelerator_frequency",
    "accelerator_host_interconnect",
];

/// What NVML reported about the node's GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuInfo {
    pub count: u32,
    pub model: String,
    pub memory_bytes: Option<u64>,
    pub max_graphics_mhz: Option<u32>,
    pub pcie: Option<(u32, u32)>,
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: Option<String>,
}

/// Query NVML; Err(reason) when the library cannot be loaded or initialised.
pub fn query() -> Result<GpuInfo, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML not available ({e})"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count failed ({e})"))?;
    let mut info = GpuInfo {
        count,
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml
            .sys_cuda_driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        ..GpuInfo::default()
    };
    if count > 0 {
        let dev = nvml
            .device_by_index(0)
            .map_err(|e| format!("NVML device 0 failed ({e})"))?;
        info.model = dev.name().unwrap_or_default();
        info.memory_bytes = dev.memory_info().ok().map(|m| m.total);
        info.max_graphics_mhz = dev.max_clock_info(Clock::Graphics).ok();
        info.pcie = match (dev.max_pcie_link_gen(), dev.max_pcie_link_width()) {
            (Ok(g), Ok(w)) => Some((g, w)),
            _ => None,
        };
    }
    Ok(info)
}

/// The NVIDIA driver's version ("550.54.15"), from NVML; Err(reason) without it.
pub fn driver_version() -> Result<String, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML not available ({e})"))?;
    nvml.sys_driver_version()
        .map_err(|e| format!("NVML gives no driver version ({e})"))
}

/// Fill the accelerator fields that are still empty from `info`; returns the fields that stay
/// empty.
pub fn apply(info: &GpuInfo, desc: &mut SystemDesc) -> Vec<&'static str> {
    desc.set_if_empty("accelerators_per_node", info.count.to_string());
    if info.count == 0 {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if info.model.is_empty() {
        missing.push("accelerator_model_name");
    } else {
        desc.set_if_empty("accelerator_model_name", info.model.clone());
    }
    match info.memory_bytes {
        Some(b) => desc.set_if_empty("accelerator_memory_capacity", human_bytes(b)),
        None => missing.push("accelerator_memory_capacity"),
    }
    match info.max_graphics_mhz {
        Some(mhz) => desc.set_if_empty("accelerator_frequency", format!("{mhz} MHz")),
        None => missing.push("accelerator_frequency"),
    }
    match info.pcie {
        Some((g, w)) => {
            desc.set_if_empty("accelerator_host_interconnect", format!("PCIe Gen{g} x{w}"))
        }
        None => missing.push("accelerator_host_interconnect"),
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_fills_only_empty_fields() {
        let info = GpuInfo {
            count: 8,
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: Some(85_520_809_984),
            max_graphics_mhz: Some(1980),
            pcie: Some((5, 16)),
            ..GpuInfo::default()
        };
        let mut d = SystemDesc::default();
        d.set("accelerator_frequency", "1.98 GHz").unwrap();
        assert!(apply(&info, &mut d).is_empty());
        assert_eq!(d.get("accelerators_per_node"), "8");
        assert_eq!(d.get("accelerator_model_name"), "NVIDIA H100 80GB HBM3");
        assert_eq!(d.get("accelerator_memory_capacity"), "85.52 GB");
        assert_eq!(d.get("accelerator_frequency"), "1.98 GHz");
        assert_eq!(d.get("accelerator_host_interconnect"), "PCIe Gen5 x16");
    }
}
