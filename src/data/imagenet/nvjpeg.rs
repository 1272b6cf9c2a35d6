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
//! The few entry points are declared in `crate::shim::nvjpeg`, after NVIDIA's documentation
//! (nvjpeg.h is not needed to build).

use super::region::RegionPlan;
use crate::shim::nvjpeg::*;
use libloading::Library;
use std::ffi::{c_int, c_void, CStr};
use std::path::{Path, PathBuf};

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
    // the Python environments' site-packages: the venvs named in the environment, and those of
    // the torch whose lib folder is on LD_LIBRARY_PATH (how scripts/bench_gpu.sh runs a bundle)
    let mut sites: Vec<PathBuf> = Vec::new();
    for venv in ["MLPERF_RUN_VENV", "VIRTUAL_ENV"]
        .iter()
        .filter_map(std::env::var_os)
    {
        let lib = Path::new(&venv).join("lib");
        for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
            sites.push(py.path().join("site-packages"));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        sites.extend(std::env::split_paths(&paths).filter_map(torch_site_packages));
    }
    for site in sites {
        let nvidia = site.join("nvidia");
        for sub in ["cu13/lib", "nvjpeg/lib", "cuda_runtime/lib"] {
            dirs.push(nvidia.join(sub));
        }
    }
    let mut out: Vec<PathBuf> = sonames.iter().map(PathBuf::from).collect();
    for d in &dirs {
        out.extend(sonames.iter().map(|s| d.join(s)));
    }
    // torchvision's CUDA wheel carries its own copies under hashed names
    // (site-packages/torchvision.libs/libnvjpeg.<hash>.so.13)
    for site in dirs.iter().filter_map(|d| d.parent()?.parent()?.parent()) {
        for f in hashed_copies(&site.join("torchvision.libs"), sonames) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// The site-packages folder of a torch whose library folder is `lib` (`.../site-packages/torch/lib`).
fn torch_site_packages(lib: PathBuf) -> Option<PathBuf> {
    let torch = lib.parent()?;
    (lib.file_name()? == "lib" && torch.file_name()? == "torch")
        .then(|| torch.parent())?
        .map(Path::to_path_buf)
}

/// The libraries in `dir` named as auditwheel renames them: `libnvjpeg.<hash>.so.13` for the
/// soname `libnvjpeg.so.13` (sorted).
fn hashed_copies(dir: &Path, sonames: &[&str]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            sonames.iter().any(|s| {
                let (stem, version) = s.split_once(".so").unwrap_or((s, ""));
                name.starts_with(&format!("{stem}.")) && name.ends_with(&format!(".so{version}"))
            })
        })
        .collect();
    found.sort();
    found
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

/// Which nvJPEG backend a decoder runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The GPU's hardware JPEG engine (A100, H100, H200 and later), crop regions (ROI) only.
    Hardware,
    /// nvJPEG's CUDA decoder (Huffman on the CPU, the rest in CUDA kernels) for GPUs without an
    /// engine: whole images, the region cut out on the host.
    Cuda,
}

/// The share of each batch to send to nvJPEG by default (DALI's `hw_decoder_load`), from the
/// backend and the GPU's name. With a hardware engine: 0.99 on H100/H200/B200-class GPUs
/// (NVIDIA's MLPerf v4.0 ResNet runs on 8xH100 use 0.99), DALI's default 0.65 elsewhere (A100
/// and unknown GPUs: the engine is slower there, so the CPU decoders take a third). Without an
/// engine the CUDA decoder competes with training for the SMs: half. Measure with
/// `scripts/bench_gpu.sh --only e` and set `data.hw_decoder_load`.
pub fn default_hw_load(backend: Backend, gpu_name: &str) -> f64 {
    let name = gpu_name.to_ascii_uppercase();
    match backend {
        Backend::Cuda => 0.5,
        Backend::Hardware => {
            if [
                "H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200",
            ]
            .iter()
            .any(|m| name.contains(m))
            {
                0.99
            } else {
                0.65
            }
        }
    }
}

/// A loaded nvJPEG, ready to decode batches on one GPU: the hardware backend where the GPU has
/// a JPEG engine, else nvJPEG's CUDA decoder. Not shared between threads (the loader keeps it
/// behind a mutex).
pub struct Nvjpeg {
    api: Api,
    handle: Handle,
    state: State,
    stream: JpegStream,
    params: Vec<Params>,
    device: *mut c_void,
    device_bytes: usize,
    /// The decoder's own CUDA stream (non-blocking: it never waits for the training streams,
    /// and a CUDA graph capture on another thread does not see it).
    cuda_stream: CudaStream,
    /// The CUDA device everything lives on: the rank's GPU when the loader names it, else the
    /// one current on the thread that loaded the decoder. Decoding runs on worker threads,
    /// which make it current before each batch.
    gpu: c_int,
    gpu_name: String,
    backend: Backend,
    pub library: PathBuf,
}

// The raw handles are only used under the owner's &mut (the loader's mutex).
unsafe impl Send for Nvjpeg {}

impl Nvjpeg {
    /// Load libnvjpeg (from `explicit` when given, else `MLPERF_RUN_NVJPEG` or the search
    /// path) and libcudart, check for the CUDA device `gpu` (None: the current one) and create
    /// a hardware-backend handle, or a CUDA-backend one where the GPU has no JPEG engine.
    /// The error says what is missing and how to get it.
    pub fn load(explicit: Option<PathBuf>, gpu: Option<usize>) -> Result<Nvjpeg, String> {
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
        let api = Api::load(nvjpeg, &nv_path, cudart, &rt_path)?;
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
        let gpu: c_int = match gpu {
            Some(g) => {
                if g >= devices as usize {
                    return Err(format!(
                        "CUDA device {g} asked for, but this process sees {devices} \
                         (CUDA_VISIBLE_DEVICES?)"
                    ));
                }
                g as c_int
            }
            None => {
                let mut g: c_int = 0;
                // SAFETY: documented signature; out-pointer valid. libcudart is the instance
                // libtorch loaded (same soname), so this is the device current on this thread.
                let rc = unsafe { (api.cuda_get_device)(&mut g) };
                if rc != 0 {
                    return Err(format!("cudaGetDevice: {}", cuda_error(&api, rc)));
                }
                g
            }
        };
        // SAFETY: documented signature; `gpu` is below the device count. Everything created
        // below (handles, stream, buffers) belongs to this device.
        let rc = unsafe { (api.cuda_set_device)(gpu) };
        if rc != 0 {
            return Err(format!("cudaSetDevice({gpu}): {}", cuda_error(&api, rc)));
        }
        let gpu_name = device_name(&api, gpu);
        let mut handle: Handle = std::ptr::null_mut();
        let mut backend = Backend::Hardware;
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
            backend = Backend::Cuda;
            handle = std::ptr::null_mut();
            // SAFETY: as above, nvJPEG's default backend (the CUDA decoder).
            let rc2 = unsafe {
                (api.create_ex)(
                    NVJPEG_BACKEND_DEFAULT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    &mut handle,
                )
            };
            if rc2 != 0 {
                return Err(format!(
                    "nvJPEG cannot start on GPU {gpu} ({gpu_name}): no hardware JPEG decoder \
                     (nvjpegCreateEx status {rc}) and the CUDA decoder failed too (status {rc2})"
                ));
            }
            // one warning per process (each loader loads a decoder)
            super::loader::warn_once(&format!(
                "GPU {gpu} ({gpu_name}) has no hardware JPEG decoder nvJPEG can use \
                 (nvjpegCreateEx with the hardware backend returned status {rc}): decoding \
                 with nvJPEG's CUDA decoder (Huffman on the CPU, the rest on the GPU) instead"
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
            cuda_stream: std::ptr::null_mut(),
            gpu,
            gpu_name,
            backend,
            library: nv_path,
        };
        // SAFETY: live handle; out-pointers valid. Drop frees what was created.
        unsafe {
            let rc = (me.api.state_create)(me.handle, &mut me.state);
            me.check(rc, "nvjpegJpegStateCreate")?;
            let rc = (me.api.stream_create)(me.handle, &mut me.stream);
            me.check(rc, "nvjpegJpegStreamCreate")?;
            let rc = (me.api.cuda_stream_create)(&mut me.cuda_stream, CUDA_STREAM_NON_BLOCKING);
            if rc != 0 {
                return Err(format!(
                    "cudaStreamCreateWithFlags: {}",
                    cuda_error(&me.api, rc)
                ));
            }
        }
        Ok(me)
    }

    /// The CUDA device it decodes on.
    pub fn gpu_index(&self) -> usize {
        self.gpu as usize
    }

    /// That device's name (as CUDA reports it; "unknown GPU" when it cannot be read).
    pub fn gpu_name(&self) -> &str {
        &self.gpu_name
    }

    /// The backend in use.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Hardware => "hardware JPEG decoder",
            Backend::Cuda => "CUDA decoder",
        }
    }

    /// The share of each batch to send to it by default ([`default_hw_load`]).
    pub fn default_load(&self) -> f64 {
        default_hw_load(self.backend, &self.gpu_name)
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
        if self.backend == Backend::Cuda {
            return self.decode_whole_then_cut(items);
        }
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
        let dims: Vec<(u32, u32)> = take
            .iter()
            .map(|&i| (items[i].1.width, items[i].1.height))
            .collect();
        let (mut images, sizes) = self.rgb_destinations(&dims)?;
        let (data, lengths) = sources(items, &take);
        let mut params: Vec<Params> = take.iter().map(|&i| self.params[i]).collect();
        self.begin_batch(take.len())?;
        // SAFETY: arrays of take.len() entries; destinations inside the device buffer; the
        // decoder's own stream, which the copy below is queued on and waited for.
        unsafe {
            let rc = (self.api.batched_ex)(
                self.handle,
                self.state,
                data.as_ptr(),
                lengths.as_ptr(),
                images.as_mut_ptr(),
                params.as_mut_ptr(),
                self.cuda_stream,
            );
            self.check(rc, "nvjpegDecodeBatchedEx")?;
        }
        let host = self.copy_back(sizes.iter().sum())?;
        for (&i, region) in take.iter().zip(back_to_back(&host, &sizes)) {
            out[i] = Some(region.to_vec());
        }
        Ok(out)
    }
}

impl Nvjpeg {
    /// The first `total` bytes of the device buffer, after the decoder's stream has finished.
    fn copy_back(&self, total: usize) -> Result<Vec<u8>, String> {
        let mut host = vec![0u8; total];
        // SAFETY: both buffers hold `total` bytes; the copy is queued after the decode on the
        // decoder's stream, which is then waited for.
        let rc = unsafe {
            let rc = (self.api.cuda_memcpy_async)(
                host.as_mut_ptr() as *mut c_void,
                self.device,
                total,
                CUDA_MEMCPY_DEVICE_TO_HOST,
                self.cuda_stream,
            );
            if rc == 0 {
                (self.api.cuda_stream_sync)(self.cuda_stream)
            } else {
                rc
            }
        };
        if rc != 0 {
            return Err(format!("cudaMemcpyAsync: {}", cuda_error(&self.api, rc)));
        }
        Ok(host)
    }

    /// The CUDA decoder's path: nvJPEG's batched decode of whole images (its CUDA backend has no
    /// batched ROI), then each plan's region cut out on the host. Images whose headers nvJPEG
    /// cannot read are left to the CPU (`None`).
    fn decode_whole_then_cut(
        &mut self,
        items: &[(&[u8], RegionPlan)],
    ) -> Result<Vec<Option<Vec<u8>>>, String> {
        let mut take = Vec::new();
        let mut dims = Vec::new();
        for (i, (bytes, plan)) in items.iter().enumerate() {
            if plan.denom != 1 {
                return Err(format!(
                    "nvJPEG regions are full scale, got 1/{}",
                    plan.denom
                ));
            }
            let (mut comps, mut sub) = (0 as c_int, 0 as c_int);
            let (mut w, mut h) = ([0 as c_int; 4], [0 as c_int; 4]);
            // SAFETY: live handle; `bytes` valid; arrays of NVJPEG_MAX_COMPONENT (4) entries.
            let rc = unsafe {
                (self.api.image_info)(
                    self.handle,
                    bytes.as_ptr(),
                    bytes.len(),
                    &mut comps,
                    &mut sub,
                    w.as_mut_ptr(),
                    h.as_mut_ptr(),
                )
            };
            let (w, h) = (w[0].max(0) as u32, h[0].max(0) as u32);
            if rc == 0 && plan.x + plan.width <= w && plan.y + plan.height <= h {
                take.push(i);
                dims.push((w, h));
            }
        }
        let mut out: Vec<Option<Vec<u8>>> = vec![None; items.len()];
        if take.is_empty() {
            return Ok(out);
        }
        let (mut images, sizes) = self.rgb_destinations(&dims)?;
        let (data, lengths) = sources(items, &take);
        self.begin_batch(take.len())?;
        // SAFETY: arrays of take.len() entries; destinations inside the device buffer.
        unsafe {
            let rc = (self.api.batched)(
                self.handle,
                self.state,
                data.as_ptr(),
                lengths.as_ptr(),
                images.as_mut_ptr(),
                self.cuda_stream,
            );
            self.check(rc, "nvjpegDecodeBatched")?;
        }
        let host = self.copy_back(sizes.iter().sum())?;
        for ((&i, &(w, _)), whole) in take.iter().zip(&dims).zip(back_to_back(&host, &sizes)) {
            out[i] = Some(cut_region(whole, w, &items[i].1));
        }
        Ok(out)
    }

    /// Device destinations for interleaved RGB images of these (width, height)s, back to back
    /// in the device buffer (grown as needed): nvJPEG's image descriptors and each image's size
    /// in bytes.
    fn rgb_destinations(
        &mut self,
        dims: &[(u32, u32)],
    ) -> Result<(Vec<NvjpegImage>, Vec<usize>), String> {
        let sizes: Vec<usize> = dims
            .iter()
            .map(|&(w, h)| w as usize * h as usize * 3)
            .collect();
        self.ensure_device(sizes.iter().sum())?;
        let mut images = Vec::with_capacity(dims.len());
        let mut offset = 0;
        for (&(w, _), &size) in dims.iter().zip(&sizes) {
            let mut channel = [std::ptr::null_mut(); 4];
            // SAFETY: offset + size <= the sum of sizes <= device_bytes.
            channel[0] = unsafe { (self.device as *mut u8).add(offset) };
            images.push(NvjpegImage {
                channel,
                pitch: [w as usize * 3, 0, 0, 0],
            });
            offset += size;
        }
        Ok((images, sizes))
    }

    /// nvjpegDecodeBatchedInitialize for `n` images of interleaved RGB, one CPU thread.
    fn begin_batch(&self, n: usize) -> Result<(), String> {
        // SAFETY: live handle and state.
        let rc = unsafe {
            (self.api.batched_init)(self.handle, self.state, n as c_int, 1, NVJPEG_OUTPUT_RGBI)
        };
        self.check(rc, "nvjpegDecodeBatchedInitialize")
    }
}

/// The batched decode's inputs for the items at `take`: their data pointers and lengths.
fn sources(items: &[(&[u8], RegionPlan)], take: &[usize]) -> (Vec<*const u8>, Vec<usize>) {
    take.iter()
        .map(|&i| (items[i].0.as_ptr(), items[i].0.len()))
        .unzip()
}

/// `host` cut into consecutive pieces of `sizes` bytes (the images as [`Nvjpeg::rgb_destinations`]
/// laid them out).
fn back_to_back<'a>(host: &'a [u8], sizes: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    sizes.iter().scan(0usize, move |offset, &size| {
        let piece = &host[*offset..*offset + size];
        *offset += size;
        Some(piece)
    })
}

/// The `plan` region (full scale) of a whole RGB image `width` pixels wide.
fn cut_region(whole: &[u8], width: u32, plan: &RegionPlan) -> Vec<u8> {
    let row = plan.width as usize * 3;
    let mut out = Vec::with_capacity(row * plan.height as usize);
    for y in plan.y..plan.y + plan.height {
        let start = (y as usize * width as usize + plan.x as usize) * 3;
        out.extend_from_slice(&whole[start..start + row]);
    }
    out
}

/// The name of CUDA device `gpu` ("unknown GPU" when the runtime cannot say).
fn device_name(api: &Api, gpu: c_int) -> String {
    let Some(props) = api.cuda_device_props else {
        return "unknown GPU".to_string();
    };
    let mut buf = vec![0u8; DEVICE_PROP_BYTES];
    // SAFETY: the buffer is larger than cudaDeviceProp of any CUDA release so far; its first
    // field is the NUL-terminated name.
    let rc = unsafe { props(buf.as_mut_ptr() as *mut c_void, gpu) };
    if rc != 0 {
        return "unknown GPU".to_string();
    }
    let end = buf.iter().take(256).position(|&b| b == 0).unwrap_or(0);
    String::from_utf8_lossy(&buf[..end]).into_owned()
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
            if !self.cuda_stream.is_null() {
                (self.api.cuda_stream_destroy)(self.cuda_stream);
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
        let err = Nvjpeg::load(Some(PathBuf::from("/nonexistent/libnvjpeg.so.12")), Some(1))
            .err()
            .expect("no libnvjpeg there");
        assert!(err.contains("/nonexistent/libnvjpeg.so.12"), "{err}");
        assert!(err.contains("nvidia-nvjpeg"), "{err}");
    }

    #[test]
    fn the_default_split_follows_the_gpu_model() {
        assert_eq!(
            default_hw_load(Backend::Hardware, "NVIDIA H100 80GB HBM3"),
            0.99
        );
        assert_eq!(default_hw_load(Backend::Hardware, "NVIDIA H200"), 0.99);
        assert_eq!(
            default_hw_load(Backend::Hardware, "NVIDIA A100-SXM4-80GB"),
            0.65
        );
        assert_eq!(default_hw_load(Backend::Cuda, "NVIDIA L40S"), 0.5);
    }

    #[test]
    fn a_region_is_cut_from_the_whole_image_row_by_row() {
        // 4x3 image, pixel (x, y) = [10y + x; 3]
        let whole: Vec<u8> = (0..3u8)
            .flat_map(|y| (0..4u8).flat_map(move |x| [10 * y + x; 3]))
            .collect();
        let plan = RegionPlan {
            denom: 1,
            x: 1,
            y: 1,
            width: 2,
            height: 2,
            crop: crate::data::imagenet::CropBox {
                left: 0.0,
                top: 0.0,
                width: 2.0,
                height: 2.0,
            },
        };
        let cut = cut_region(&whole, 4, &plan);
        assert_eq!(cut, [[11u8; 3], [12; 3], [21; 3], [22; 3]].concat());
    }

    #[test]
    fn the_batch_copy_is_cut_back_into_its_images_in_order() {
        let host: Vec<u8> = (0..10).collect();
        let pieces: Vec<&[u8]> = back_to_back(&host, &[3, 0, 6, 1]).collect();
        assert_eq!(pieces, [&[0u8, 1, 2][..], &[], &[3, 4, 5, 6, 7, 8], &[9]]);
    }

    #[test]
    fn a_torch_lib_folder_leads_to_its_site_packages() {
        let site = torch_site_packages(PathBuf::from("/v/lib/python3.12/site-packages/torch/lib"));
        assert_eq!(site, Some(PathBuf::from("/v/lib/python3.12/site-packages")));
        assert_eq!(torch_site_packages(PathBuf::from("/usr/lib")), None);
        assert_eq!(torch_site_packages(PathBuf::from("/opt/bundle/lib")), None);
    }

    #[test]
    fn torchvisions_renamed_copies_are_found() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "libnvjpeg.36e11081.so.13",
            "libcudart.faf08d9a.so.13",
            "libnvjpeg.x.so.12",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let found = hashed_copies(dir.path(), &["libnvjpeg.so.13"]);
        assert_eq!(found, [dir.path().join("libnvjpeg.36e11081.so.13")]);
        assert!(hashed_copies(&dir.path().join("missing"), &["libnvjpeg.so.13"]).is_empty());
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
