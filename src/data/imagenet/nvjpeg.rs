//! GPU JPEG decoding with nvJPEG (`data.decoder = "nvjpeg"`), loaded at run time so that CPU
//! builds and machines without it are unaffected.
//!
//! The crop box is chosen on the host exactly as for the CPU decoders; nvJPEG's hardware
//! backend (the JPEG engines of A100/H100-class GPUs) decodes each batch's crop regions (ROI)
//! at full scale into one device buffer, which is copied back for the resize on the host.
//! Images the engine cannot take (progressive, unusual subsampling) and whole batches that fail
//! go to the CPU region decoder, which also names corrupt files as usual.
//!
//! libnvjpeg and libcudart come from `MLPERF_RUN_NVJPEG` / `MLPERF_RUN_CUDART` (paths), the
//! dynamic loader's path (`libnvjpeg.so.13`, `.12`), `CUDA_HOME/lib64`, /usr/local/cuda/lib64
//! or the venv's nvidia pip packages (`MLPERF_RUN_VENV` or `VIRTUAL_ENV`; pip: nvidia-nvjpeg).
//! The few entry points are declared here after NVIDIA's nvJPEG documentation (nvjpeg.h is not
//! needed to build).

use super::region::RegionPlan;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::{Path, PathBuf};

type Status = c_int;
type Handle = *mut c_void;
type State = *mut c_void;
type Params = *mut c_void;
type JpegStream = *mut c_void;
type CudaStream = *mut c_void;

const NVJPEG_BACKEND_HARDWARE: c_int = 3;
const NVJPEG_OUTPUT_RGBI: c_int = 5;
const CUDA_MEMCPY_DEVICE_TO_HOST: c_int = 2;

/// nvjpegImage_t: up to four planes; interleaved RGB uses channel[0] only.
#[repr(C)]
struct NvjpegImage {
    channel: [*mut u8; 4],
    pitch: [usize; 4],
}

type FnCreateEx =
    unsafe extern "C" fn(c_int, *mut c_void, *mut c_void, c_uint, *mut Handle) -> Status;
type FnDestroy = unsafe extern "C" fn(*mut c_void) -> Status;
type FnStateCreate = unsafe extern "C" fn(Handle, *mut State) -> Status;
type FnBatchedInit = unsafe extern "C" fn(Handle, State, c_int, c_int, c_int) -> Status;
type FnBatchedEx = unsafe extern "C" fn(
    Handle,
    State,
    *const *const u8,
    *const usize,
    *mut NvjpegImage,
    *mut Params,
    CudaStream,
) -> Status;
type FnParamsCreate = unsafe extern "C" fn(Handle, *mut Params) -> Status;
type FnParamsSetOutput = unsafe extern "C" fn(Params, c_int) -> Status;
type FnParamsSetRoi = unsafe extern "C" fn(Params, c_int, c_int, c_int, c_int) -> Status;
type FnStreamCreate = unsafe extern "C" fn(Handle, *mut JpegStream) -> Status;
type FnStreamParse =
    unsafe extern "C" fn(Handle, *const u8, usize, c_int, c_int, JpegStream) -> Status;
type FnSupportedEx = unsafe extern "C" fn(Handle, JpegStream, Params, *mut c_int) -> Status;
type FnCudaMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type FnCudaFree = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnCudaMemcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type FnCudaDeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnCudaGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnCudaSetDevice = unsafe extern "C" fn(c_int) -> c_int;
type FnCudaErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

struct Api {
    create_ex: FnCreateEx,
    destroy: FnDestroy,
    state_create: FnStateCreate,
    state_destroy: FnDestroy,
    batched_init: FnBatchedInit,
    batched_ex: FnBatchedEx,
    params_create: FnParamsCreate,
    params_destroy: FnDestroy,
    params_set_output: FnParamsSetOutput,
    params_set_roi: FnParamsSetRoi,
    stream_create: FnStreamCreate,
    stream_destroy: FnDestroy,
    stream_parse: FnStreamParse,
    supported_ex: FnSupportedEx,
    cuda_malloc: FnCudaMalloc,
    cuda_free: FnCudaFree,
    cuda_memcpy: FnCudaMemcpy,
    cuda_device_count: FnCudaDeviceCount,
    cuda_get_device: FnCudaGetDevice,
    cuda_set_device: FnCudaSetDevice,
    cuda_error_string: FnCudaErrorString,
    // Kept loaded while the function pointers above are in use.
    _nvjpeg: Library,
    _cudart: Library,
}

/// Copy function pointer `name` out of `lib`.
fn symbol<T: Copy>(lib: &Library, file: &Path, name: &str) -> Result<T, String> {
    // SAFETY: the type T is the documented C signature of `name`.
    unsafe {
        lib.get::<T>(name.as_bytes())
            .map(|s| *s)
            .map_err(|e| format!("{} lacks {name}: {e}", file.display()))
    }
}

/// Where to look for a shared library: the explicit path alone when given, else the loader's
/// path by soname, then the CUDA and venv folders.
fn candidates(explicit: Option<PathBuf>, sonames: &[&str]) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p];
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        dirs.push(Path::new(&home).join("lib64"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for venv in ["MLPERF_RUN_VENV", "VIRTUAL_ENV"]
        .iter()
        .filter_map(std::env::var_os)
    {
        let lib = Path::new(&venv).join("lib");
        for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
            let nvidia = py.path().join("site-packages/nvidia");
            for sub in ["cu13/lib", "nvjpeg/lib", "cuda_runtime/lib"] {
                dirs.push(nvidia.join(sub));
            }
        }
    }
    let mut out: Vec<PathBuf> = sonames.iter().map(PathBuf::from).collect();
    for d in dirs {
        out.extend(sonames.iter().map(|s| d.join(s)));
    }
    out
}

fn open_first(what: &str, paths: &[PathBuf]) -> Result<(Library, PathBuf), String> {
    let mut last = String::new();
    for p in paths {
        // A bare soname goes through the dynamic loader's search; a path must exist.
        if p.components().count() > 1 && !p.exists() {
            continue;
        }
        // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
        match unsafe { Library::new(p) } {
            Ok(lib) => return Ok((lib, p.clone())),
            Err(e) => last = e.to_string(),
        }
    }
    let tried: Vec<String> = paths
        .iter()
        .take(6)
        .map(|p| p.display().to_string())
        .collect();
    Err(format!(
        "{what} not found (tried {}{}){}",
        tried.join(", "),
        if paths.len() > 6 { ", ..." } else { "" },
        if last.is_empty() {
            String::new()
        } else {
            format!("; last error: {last}")
        }
    ))
}

/// A loaded nvJPEG with the hardware backend, ready to decode batches. Not shared between
/// threads (the loader keeps it behind a mutex).
pub struct Nvjpeg {
    api: Api,
    handle: Handle,
    state: State,
    stream: JpegStream,
    params: Vec<Params>,
    device: *mut c_void,
    device_bytes: usize,
    /// The CUDA device everything lives on: the one current on the thread that loaded the
    /// decoder (the trainer's: each data-parallel rank decodes on its own GPU). Decoding runs
    /// on worker threads, whose current device is 0 until set.
    gpu: c_int,
    pub library: PathBuf,
}

// The raw handles are only used under the owner's &mut (the loader's mutex).
unsafe impl Send for Nvjpeg {}

impl Nvjpeg {
    /// Load libnvjpeg (from `explicit` when given, else `MLPERF_RUN_NVJPEG` or the search
    /// path) and libcudart, check for a CUDA device and create a hardware-backend handle.
    /// The error says what is missing and how to get it.
    pub fn load(explicit: Option<PathBuf>) -> Result<Nvjpeg, String> {
        let explicit =
            explicit.or_else(|| std::env::var_os("MLPERF_RUN_NVJPEG").map(PathBuf::from));
        let (nvjpeg, nv_path) = open_first(
            "libnvjpeg",
            &candidates(
                explicit,
                &["libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"],
            ),
        )
        .map_err(|e| {
            format!(
                "{e}: install the pip package nvidia-nvjpeg (for the torch venv's CUDA) or the \
                 CUDA toolkit, or set MLPERF_RUN_NVJPEG to libnvjpeg.so's path"
            )
        })?;
        let (cudart, rt_path) = open_first(
            "libcudart",
            &candidates(
                std::env::var_os("MLPERF_RUN_CUDART").map(PathBuf::from),
                &["libcudart.so.13", "libcudart.so.12", "libcudart.so"],
            ),
        )
        .map_err(|e| format!("{e}: install the CUDA runtime (pip: nvidia-cuda-runtime)"))?;
        let n = &nv_path;
        let r = &rt_path;
        let api = Api {
            create_ex: symbol(&nvjpeg, n, "nvjpegCreateEx")?,
            destroy: symbol(&nvjpeg, n, "nvjpegDestroy")?,
            state_create: symbol(&nvjpeg, n, "nvjpegJpegStateCreate")?,
            state_destroy: symbol(&nvjpeg, n, "nvjpegJpegStateDestroy")?,
            batched_init: symbol(&nvjpeg, n, "nvjpegDecodeBatchedInitialize")?,
            batched_ex: symbol(&nvjpeg, n, "nvjpegDecodeBatchedEx")?,
            params_create: symbol(&nvjpeg, n, "nvjpegDecodeParamsCreate")?,
            params_destroy: symbol(&nvjpeg, n, "nvjpegDecodeParamsDestroy")?,
            params_set_output: symbol(&nvjpeg, n, "nvjpegDecodeParamsSetOutputFormat")?,
            params_set_roi: symbol(&nvjpeg, n, "nvjpegDecodeParamsSetROI")?,
            stream_create: symbol(&nvjpeg, n, "nvjpegJpegStreamCreate")?,
            stream_destroy: symbol(&nvjpeg, n, "nvjpegJpegStreamDestroy")?,
            stream_parse: symbol(&nvjpeg, n, "nvjpegJpegStreamParse")?,
            supported_ex: symbol(&nvjpeg, n, "nvjpegDecodeBatchedSupportedEx")?,
            cuda_malloc: symbol(&cudart, r, "cudaMalloc")?,
            cuda_free: symbol(&cudart, r, "cudaFree")?,
            cuda_memcpy: symbol(&cudart, r, "cudaMemcpy")?,
            cuda_device_count: symbol(&cudart, r, "cudaGetDeviceCount")?,
            cuda_get_device: symbol(&cudart, r, "cudaGetDevice")?,
            cuda_set_device: symbol(&cudart, r, "cudaSetDevice")?,
            cuda_error_string: symbol(&cudart, r, "cudaGetErrorString")?,
            _nvjpeg: nvjpeg,
            _cudart: cudart,
        };
        let mut devices: c_int = 0;
        // SAFETY: documented signature; out-pointer valid.
        let rc = unsafe { (api.cuda_device_count)(&mut devices) };
        if rc != 0 || devices == 0 {
            return Err(format!(
                "no CUDA device ({} from {}: {})",
                if rc != 0 {
                    "cudaGetDeviceCount failed"
                } else {
                    "cudaGetDeviceCount = 0"
                },
                rt_path.display(),
                cuda_error(&api, rc)
            ));
        }
        let mut gpu: c_int = 0;
        // SAFETY: documented signature; out-pointer valid. libcudart is the instance libtorch
        // loaded (same soname), so this is the device the trainer set on this thread.
        let rc = unsafe { (api.cuda_get_device)(&mut gpu) };
        if rc != 0 {
            return Err(format!("cudaGetDevice: {}", cuda_error(&api, rc)));
        }
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: default allocators (null), flags 0; out-pointer valid.
        let rc = unsafe {
            (api.create_ex)(
                NVJPEG_BACKEND_HARDWARE,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                &mut handle,
            )
        };
        if rc != 0 {
            return Err(format!(
                "this GPU has no hardware JPEG decoder or nvJPEG cannot use it \
                 (nvjpegCreateEx with the hardware backend returned status {rc}; A100/H100-class \
                 GPUs have one)"
            ));
        }
        let mut me = Nvjpeg {
            api,
            handle,
            state: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            params: Vec::new(),
            device: std::ptr::null_mut(),
            device_bytes: 0,
            gpu,
            library: nv_path,
        };
        // SAFETY: live handle; out-pointers valid. Drop frees what was created.
        unsafe {
            let rc = (me.api.state_create)(me.handle, &mut me.state);
            me.check(rc, "nvjpegJpegStateCreate")?;
            let rc = (me.api.stream_create)(me.handle, &mut me.stream);
            me.check(rc, "nvjpegJpegStreamCreate")?;
        }
        Ok(me)
    }

    fn check(&self, status: Status, what: &str) -> Result<(), String> {
        if status == 0 {
            Ok(())
        } else {
            Err(format!("{what} returned nvJPEG status {status}"))
        }
    }

    fn ensure_params(&mut self, n: usize) -> Result<(), String> {
        while self.params.len() < n {
            let mut p: Params = std::ptr::null_mut();
            // SAFETY: live handle; out-pointer valid.
            let rc = unsafe { (self.api.params_create)(self.handle, &mut p) };
            self.check(rc, "nvjpegDecodeParamsCreate")?;
            self.params.push(p);
        }
        Ok(())
    }

    /// Make the decoder's GPU current on the calling (worker) thread.
    fn use_gpu(&self) -> Result<(), String> {
        // SAFETY: documented signature; `gpu` was a valid device when loaded.
        let rc = unsafe { (self.api.cuda_set_device)(self.gpu) };
        if rc != 0 {
            return Err(format!(
                "cudaSetDevice({}): {}",
                self.gpu,
                cuda_error(&self.api, rc)
            ));
        }
        Ok(())
    }

    fn ensure_device(&mut self, bytes: usize) -> Result<(), String> {
        if bytes <= self.device_bytes {
            return Ok(());
        }
        if !self.device.is_null() {
            // SAFETY: allocated by cudaMalloc below.
            unsafe { (self.api.cuda_free)(self.device) };
            self.device = std::ptr::null_mut();
            self.device_bytes = 0;
        }
        let bytes = bytes.next_power_of_two();
        // SAFETY: out-pointer valid.
        let rc = unsafe { (self.api.cuda_malloc)(&mut self.device, bytes) };
        if rc != 0 {
            return Err(format!(
                "cudaMalloc of {bytes} bytes: {}",
                cuda_error(&self.api, rc)
            ));
        }
        self.device_bytes = bytes;
        Ok(())
    }

    /// Decode each item's `plan` region (full scale: `plan.denom` must be 1) on the GPU.
    /// Returns one entry per item: `Some(pixels)` (plan.width x plan.height RGB) when the
    /// hardware decoded it, `None` when the engine does not take that image (decode it on the
    /// CPU). An `Err` means the batch as a whole failed (decode it all on the CPU).
    pub fn decode_regions(
        &mut self,
        items: &[(&[u8], RegionPlan)],
    ) -> Result<Vec<Option<Vec<u8>>>, String> {
        self.use_gpu()?;
        self.ensure_params(items.len())?;
        let mut take = Vec::new();
        for (i, (bytes, plan)) in items.iter().enumerate() {
            if plan.denom != 1 {
                return Err(format!(
                    "nvJPEG regions are full scale, got 1/{}",
                    plan.denom
                ));
            }
            let p = self.params[i];
            // SAFETY: live handle, stream and params; `bytes` outlives the calls (save_stream 0
            // parses without keeping a reference).
            let supported = unsafe {
                (self.api.stream_parse)(self.handle, bytes.as_ptr(), bytes.len(), 0, 0, self.stream)
                    == 0
                    && (self.api.params_set_output)(p, NVJPEG_OUTPUT_RGBI) == 0
                    && (self.api.params_set_roi)(
                        p,
                        plan.x as c_int,
                        plan.y as c_int,
                        plan.width as c_int,
                        plan.height as c_int,
                    ) == 0
                    && {
                        let mut flag: c_int = -1;
                        (self.api.supported_ex)(self.handle, self.stream, p, &mut flag) == 0
                            && flag == 0
                    }
            };
            if supported {
                take.push(i);
            }
        }
        let mut out: Vec<Option<Vec<u8>>> = vec![None; items.len()];
        if take.is_empty() {
            return Ok(out);
        }
        let sizes: Vec<usize> = take
            .iter()
            .map(|&i| items[i].1.width as usize * items[i].1.height as usize * 3)
            .collect();
        let total: usize = sizes.iter().sum();
        self.ensure_device(total)?;
        let mut images = Vec::with_capacity(take.len());
        let mut offset = 0;
        for (&i, &size) in take.iter().zip(&sizes) {
            let mut channel = [std::ptr::null_mut(); 4];
            // SAFETY: offset + size <= total <= device_bytes.
            channel[0] = unsafe { (self.device as *mut u8).add(offset) };
            images.push(NvjpegImage {
                channel,
                pitch: [items[i].1.width as usize * 3, 0, 0, 0],
            });
            offset += size;
        }
        let data: Vec<*const u8> = take.iter().map(|&i| items[i].0.as_ptr()).collect();
        let lengths: Vec<usize> = take.iter().map(|&i| items[i].0.len()).collect();
        let mut params: Vec<Params> = take.iter().map(|&i| self.params[i]).collect();
        // SAFETY: arrays of take.len() entries; destinations inside the device buffer; the
        // legacy default stream (null), so the cudaMemcpy below waits for the decode.
        unsafe {
            let rc = (self.api.batched_init)(
                self.handle,
                self.state,
                take.len() as c_int,
                1,
                NVJPEG_OUTPUT_RGBI,
            );
            self.check(rc, "nvjpegDecodeBatchedInitialize")?;
            let rc = (self.api.batched_ex)(
                self.handle,
                self.state,
                data.as_ptr(),
                lengths.as_ptr(),
                images.as_mut_ptr(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            );
            self.check(rc, "nvjpegDecodeBatchedEx")?;
        }
        let mut host = vec![0u8; total];
        // SAFETY: both buffers hold `total` bytes.
        let rc = unsafe {
            (self.api.cuda_memcpy)(
                host.as_mut_ptr() as *mut c_void,
                self.device,
                total,
                CUDA_MEMCPY_DEVICE_TO_HOST,
            )
        };
        if rc != 0 {
            return Err(format!("cudaMemcpy: {}", cuda_error(&self.api, rc)));
        }
        let mut offset = 0;
        for (&i, &size) in take.iter().zip(&sizes) {
            out[i] = Some(host[offset..offset + size].to_vec());
            offset += size;
        }
        Ok(out)
    }
}

fn cuda_error(api: &Api, rc: c_int) -> String {
    // SAFETY: cudaGetErrorString returns a static string for any code.
    let p = unsafe { (api.cuda_error_string)(rc) };
    if p.is_null() {
        format!("CUDA error {rc}")
    } else {
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Drop for Nvjpeg {
    fn drop(&mut self) {
        // the device buffer belongs to the decoder's GPU (a failure leaves nothing better to do)
        let _ = self.use_gpu();
        // SAFETY: each object was created by the matching nvJPEG/CUDA call and is freed once.
        unsafe {
            for &p in &self.params {
                (self.api.params_destroy)(p);
            }
            if !self.stream.is_null() {
                (self.api.stream_destroy)(self.stream);
            }
            if !self.state.is_null() {
                (self.api.state_destroy)(self.state);
            }
            if !self.device.is_null() {
                (self.api.cuda_free)(self.device);
            }
            (self.api.destroy)(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_missing_library_is_named_with_what_to_install() {
        let err = Nvjpeg::load(Some(PathBuf::from("/nonexistent/libnvjpeg.so.12")))
            .err()
            .expect("no libnvjpeg there");
        assert!(err.contains("/nonexistent/libnvjpeg.so.12"), "{err}");
        assert!(err.contains("nvidia-nvjpeg"), "{err}");
    }

    #[test]
    fn search_covers_sonames_cuda_home_and_the_venv() {
        let c = candidates(None, &["libnvjpeg.so.12"]);
        assert_eq!(c[0], PathBuf::from("libnvjpeg.so.12"));
        assert!(c
            .iter()
            .any(|p| p == Path::new("/usr/local/cuda/lib64/libnvjpeg.so.12")));
        let only = candidates(Some(PathBuf::from("/x/lib.so")), &["libnvjpeg.so.12"]);
        assert_eq!(only, vec![PathBuf::from("/x/lib.so")]);
    }
}
