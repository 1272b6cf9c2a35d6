//! The CUDA runtime's entry points that say which GPU a CUDA device is (`crate::gpu::identity`):
//! its PCI bus id, its properties (name, UUID, memory) and the driver's CUDA version. Declared
//! here after NVIDIA's CUDA runtime documentation and loaded at run time from the libcudart
//! [`super::cuda_libs`] finds, the instance libtorch loaded where it did (no link-time
//! dependency: a CPU run never loads it).
use super::cuda_libs::{open_cudart, symbol};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;

/// cudaDeviceProp is about 1 KB (CUDA 12/13): a buffer of this size holds any release's.
pub(crate) const DEVICE_PROP_BYTES: usize = 4096;
/// Where cudaDeviceProp's fields start (CUDA 11 to 13 alike): `char name[256]`, then
/// `cudaUUID_t uuid` (16 bytes), `char luid[8]`, `unsigned int luidDeviceNodeMask`, and
/// `size_t totalGlobalMem` aligned to 8.
pub(crate) const PROP_NAME_BYTES: usize = 256;
pub(crate) const PROP_UUID_OFFSET: usize = 256;
pub(crate) const PROP_TOTAL_MEM_OFFSET: usize = 288;

pub(crate) type FnDeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
pub(crate) type FnDeviceProps = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
/// cudaDeviceGetPCIBusId(char* pciBusId, int len, int device)
pub(crate) type FnPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
pub(crate) type FnDriverVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
pub(crate) type FnErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

pub(crate) struct Cudart {
    pub(crate) device_count: FnDeviceCount,
    pub(crate) device_props: FnDeviceProps,
    /// Whether `device_props` is CUDA 12's `cudaGetDeviceProperties_v2` (the layout above).
    pub(crate) props_v2: bool,
    pub(crate) pci_bus_id: FnPciBusId,
    pub(crate) driver_version: FnDriverVersion,
    pub(crate) error_string: FnErrorString,
    /// Where libcudart was found, for messages.
    pub(crate) path: PathBuf,
    // Kept loaded while the function pointers above are in use.
    _lib: Library,
}

impl Cudart {
    /// libcudart and the entry points above; an error names the library and the symbol.
    pub(crate) fn load() -> Result<Cudart, String> {
        let (lib, path) = open_cudart()?;
        let p = path.as_path();
        // CUDA 12 and later spell it _v2
        let (device_props, props_v2) = match symbol(&lib, p, "cudaGetDeviceProperties_v2") {
            Ok(f) => (f, true),
            Err(_) => (symbol(&lib, p, "cudaGetDeviceProperties")?, false),
        };
        Ok(Cudart {
            device_count: symbol(&lib, p, "cudaGetDeviceCount")?,
            device_props,
            props_v2,
            pci_bus_id: symbol(&lib, p, "cudaDeviceGetPCIBusId")?,
            driver_version: symbol(&lib, p, "cudaDriverGetVersion")?,
            error_string: symbol(&lib, p, "cudaGetErrorString")?,
            path,
            _lib: lib,
        })
    }
}

/// The runtime's words for error `rc` (cudaGetErrorString through `f`), or "CUDA error N".
pub(crate) fn error_string(f: FnErrorString, rc: c_int) -> String {
    // SAFETY: cudaGetErrorString returns a static string for any code.
    let p = unsafe { f(rc) };
    if p.is_null() {
        format!("CUDA error {rc}")
    } else {
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The device name a cudaDeviceProp starts with (`char name[256]`, NUL-terminated).
pub(crate) fn prop_name(props: &[u8]) -> String {
    let name = &props[..PROP_NAME_BYTES.min(props.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).trim().to_string()
}

/// Why CUDA device `ordinal` cannot be used by a process that sees `count` devices, or None.
pub(crate) fn ordinal_beyond(ordinal: usize, count: c_int) -> Option<String> {
    (ordinal >= count.max(0) as usize).then(|| {
        format!(
            "CUDA device {ordinal} asked for, but this process sees {count} (CUDA_VISIBLE_DEVICES?)"
        )
    })
}
