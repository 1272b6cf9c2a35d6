//! Which GPU a CUDA device of this process is: its PCI bus id, model name, memory and UUID, and
//! the CUDA version its driver supports, from the CUDA runtime (libcudart, loaded at run time
//! through `crate::shim::cudart`; a CPU run never calls this). The ranks of a data-parallel job
//! compare their GPUs' models and claim each its own GPU before the first run
//! (`crate::train::job`).
use crate::shim::cudart::{
    ordinal_beyond, prop_name, Cudart, DEVICE_PROP_BYTES, PROP_TOTAL_MEM_OFFSET, PROP_UUID_OFFSET,
};
use std::ffi::{c_char, c_int, c_void, CStr};

/// A CUDA device as the runtime describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIdentity {
    /// The CUDA ordinal (after CUDA_VISIBLE_DEVICES) it was asked for.
    pub ordinal: usize,
    /// "0000:1B:00.0" (domain:bus:device.function), as cudaDeviceGetPCIBusId writes it.
    pub pci_bus_id: String,
    /// "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Its global memory; None where the runtime's property layout is not known to us.
    pub memory_bytes: Option<u64>,
    /// "GPU-5d3c...": the physical GPU (or MIG instance), unique across hosts; None as above.
    pub uuid: Option<String>,
}

impl GpuIdentity {
    /// Its model as the ranks compare it: "NVIDIA H100 80GB HBM3, 79.1 GiB".
    pub fn model(&self) -> String {
        match self.memory_bytes {
            Some(b) => format!("{}, {:.1} GiB", self.name, b as f64 / (1u64 << 30) as f64),
            None => self.name.clone(),
        }
    }
}

/// The identity of CUDA device `ordinal`; an error says why it cannot be read (no libcudart,
/// no such device, the runtime's error).
pub fn identify(ordinal: usize) -> Result<GpuIdentity, String> {
    let rt = Cudart::load()?;
    let ctx = |what: &str, rc: c_int| {
        format!(
            "{what} failed for CUDA device {ordinal} ({}): {}",
            rt.path.display(),
            error_string(&rt, rc)
        )
    };
    let mut count: c_int = 0;
    // SAFETY: documented signature; the out-pointer is valid.
    let rc = unsafe { (rt.device_count)(&mut count) };
    if rc != 0 {
        return Err(ctx("cudaGetDeviceCount", rc));
    }
    if let Some(why) = ordinal_beyond(ordinal, count) {
        return Err(why);
    }
    let device = ordinal as c_int;
    let mut bus = [0 as c_char; 64];
    // SAFETY: documented signature; the buffer is `len` bytes long and the runtime NUL-ends it.
    let rc = unsafe { (rt.pci_bus_id)(bus.as_mut_ptr(), bus.len() as c_int, device) };
    if rc != 0 {
        return Err(ctx("cudaDeviceGetPCIBusId", rc));
    }
    // SAFETY: NUL-terminated within the buffer (zeroed, one byte longer than any bus id)
    let pci_bus_id = unsafe { CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut props = vec![0u8; DEVICE_PROP_BYTES];
    // SAFETY: the buffer is larger than cudaDeviceProp of any CUDA release so far.
    let rc = unsafe { (rt.device_props)(props.as_mut_ptr() as *mut c_void, device) };
    if rc != 0 {
        return Err(ctx("cudaGetDeviceProperties", rc));
    }
    let (name, uuid, memory_bytes) = parse_props(&props, rt.props_v2);
    Ok(GpuIdentity {
        ordinal,
        pci_bus_id,
        name,
        memory_bytes,
        uuid,
    })
}

/// The CUDA version the driver supports ("CUDA 12.4", cudaDriverGetVersion), where NVML cannot
/// name the driver itself.
pub fn driver_cuda_version() -> Result<String, String> {
    let rt = Cudart::load()?;
    let mut v: c_int = 0;
    // SAFETY: documented signature; the out-pointer is valid.
    let rc = unsafe { (rt.driver_version)(&mut v) };
    if rc != 0 {
        return Err(format!(
            "cudaDriverGetVersion failed ({}): {}",
            rt.path.display(),
            error_string(&rt, rc)
        ));
    }
    Ok(format!("CUDA {}.{}", v / 1000, (v % 1000) / 10))
}

/// The name, UUID and memory in a cudaDeviceProp (`v2`: the CUDA 11-13 layout, whose UUID and
/// memory are read; otherwise the name alone, the one field every layout starts with).
fn parse_props(props: &[u8], v2: bool) -> (String, Option<String>, Option<u64>) {
    let name = prop_name(props);
    if !v2 || props.len() < PROP_TOTAL_MEM_OFFSET + 8 {
        return (name, None, None);
    }
    let u = &props[PROP_UUID_OFFSET..PROP_UUID_OFFSET + 16];
    let hex =
        |r: std::ops::Range<usize>| -> String { u[r].iter().map(|b| format!("{b:02x}")).collect() };
    if u.iter().all(|&b| b == 0) {
        // not a UUID: a layout we misread, or a runtime that leaves it blank
        return (name, None, None);
    }
    let uuid = format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    );
    let mut mem = [0u8; 8];
    mem.copy_from_slice(&props[PROP_TOTAL_MEM_OFFSET..PROP_TOTAL_MEM_OFFSET + 8]);
    let memory = u64::from_ne_bytes(mem);
    (name, Some(uuid), (memory > 0).then_some(memory))
}

fn error_string(rt: &Cudart, rc: c_int) -> String {
    crate::shim::cudart::error_string(rt.error_string, rc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_prop_gives_the_name_uuid_and_memory() {
        let mut p = vec![0u8; DEVICE_PROP_BYTES];
        p[..21].copy_from_slice(b"NVIDIA H100 80GB HBM3");
        for (i, b) in p[PROP_UUID_OFFSET..PROP_UUID_OFFSET + 16]
            .iter_mut()
            .enumerate()
        {
            *b = i as u8 * 17;
        }
        p[PROP_TOTAL_MEM_OFFSET..PROP_TOTAL_MEM_OFFSET + 8]
            .copy_from_slice(&85_029_158_912u64.to_ne_bytes());
        let (name, uuid, mem) = parse_props(&p, true);
        assert_eq!(name, "NVIDIA H100 80GB HBM3");
        assert_eq!(
            uuid.as_deref(),
            Some("GPU-00112233-4455-6677-8899-aabbccddeeff")
        );
        assert_eq!(mem, Some(85_029_158_912));
        // an older layout: the name alone; a blank UUID is none
        assert_eq!(parse_props(&p, false), (name.clone(), None, None));
        let mut blank = p.clone();
        blank[PROP_UUID_OFFSET..PROP_UUID_OFFSET + 16].fill(0);
        assert_eq!(parse_props(&blank, true), (name.clone(), None, None));
        let id = GpuIdentity {
            ordinal: 0,
            pci_bus_id: "0000:1B:00.0".into(),
            name,
            memory_bytes: mem,
            uuid,
        };
        assert_eq!(id.model(), "NVIDIA H100 80GB HBM3, 79.2 GiB");
    }

    /// Without libcudart (a machine without CUDA) or without a GPU, the error says why.
    #[test]
    fn no_device_is_an_error_not_a_panic() {
        if let Err(e) = identify(10_000) {
            assert!(!e.is_empty());
        } else {
            panic!("no machine has 10001 CUDA devices");
        }
    }
}
