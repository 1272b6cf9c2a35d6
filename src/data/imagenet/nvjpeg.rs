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
//! or the venv's nvidia pip packages (`MLPERF_RUN_VENV` or `VIRTUAL_ENV`; pip: nvidia-nvjpeg),
//! as `crate::shim::cuda_libs` finds them.
//! The few entry points are declared in `crate::shim::nvjpeg`, after NVIDIA's documentation
//! (nvjpeg.h is not needed to build).

use super::region::RegionPlan;
use crate::shim::cuda_libs::{candidates, open_cudart, open_first};
use crate::shim::cudart::{error_string, ordinal_beyond, prop_name};
use crate::shim::nvjpeg::*;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// A loaded nvJPEG on one GPU: the hardware backend where the GPU has a JPEG engine, else
/// nvJPEG's CUDA decoder. Shared by the loader's threads: the handle is thread-safe (nvJPEG's
/// documentation); each parse uses a JPEG stream of its own from a pool ([`Nvjpeg::supports`],
/// on the decode workers, in parallel); the batched decode's state is used by one caller at a
/// time ([`Nvjpeg::decode_into`], the batch hand-off of the rank).
pub struct Nvjpeg {
    api: Api,
    handle: Handle,
    /// Parse objects (a JPEG stream and decode parameters each), taken by one worker at a time.
    parsers: Mutex<Vec<Parser>>,
    /// The batched decode's state, parameters and scratch.
    decoder: Mutex<BatchDecoder>,
    /// The CUDA device everything lives on: the rank's GPU when the loader names it, else the
    /// one current on the thread that loaded the decoder. Callers on other threads make it
    /// current first.
    gpu: c_int,
    gpu_name: String,
    backend: Backend,
    pub library: PathBuf,
}

/// One worker's parse objects.
struct Parser {
    stream: JpegStream,
    params: Params,
}

/// Batched decodes that may be in flight at once (the hand-off runs a few batches ahead): each
/// has a slot of its own, reused only after its last decode has finished on the device.
const DECODE_SLOTS: usize = 3;

/// One batched decode's state, as nvImageCodec and DALI keep it: the engine reads its inputs and
/// uses its state asynchronously, so neither is touched again until its event has passed.
struct DecodeSlot {
    state: State,
    /// One parameter object (ROI, output format) per image of the largest batch so far.
    params: Vec<Params>,
    /// Recorded on the decode's stream after it.
    event: CudaEvent,
    recorded: bool,
    /// The files of the decode in flight, kept alive until the event has passed.
    inputs: Vec<(Vec<u8>, RegionPlan)>,
    /// The CUDA backend's whole images (it has no batched ROI): a device buffer, grown as needed.
    /// One per slot, like the state: the 2-D copies that cut the regions out of it run on the
    /// stream of the hand-off that queued them, and the next epoch's hand-off decodes on another
    /// stream; reuse waits for the slot's event, which covers those copies.
    scratch: *mut c_void,
    scratch_bytes: usize,
}

/// What the batched decode keeps between batches.
struct BatchDecoder {
    slots: Vec<DecodeSlot>,
    /// The slot the next batch uses.
    next: usize,
}

/// A batch nvJPEG could not decode: why, and its files back for the CPU decoder.
pub struct DecodeFailure {
    pub why: String,
    pub jpegs: Vec<(Vec<u8>, RegionPlan)>,
}

// SAFETY: the raw handles are used under the mutexes above, or (the handle) by nvJPEG's
// thread-safe entry points.
unsafe impl Send for Nvjpeg {}
unsafe impl Sync for Nvjpeg {}

impl Nvjpeg {
    /// Load libnvjpeg (from `explicit` when given, else `MLPERF_RUN_NVJPEG` or the search
    /// path) and libcudart, check for the CUDA device `gpu` (None: the current one) and create
    /// a hardware-backend handle, or a CUDA-backend one where the GPU has no JPEG engine.
    /// The error says what is missing and how to get it.
    pub fn load(explicit: Option<PathBuf>, gpu: Option<usize>) -> Result<Nvjpeg, String> {
        let (api, nv_path, rt_path) = Self::open_libraries(explicit)?;
        let gpu = Self::select_device(&api, &rt_path, gpu)?;
        let gpu_name = device_name(&api, gpu);
        let (handle, backend) = Self::create_handle(&api, gpu, &gpu_name)?;
        let mut me = Nvjpeg {
            api,
            handle,
            parsers: Mutex::new(Vec::new()),
            decoder: Mutex::new(BatchDecoder {
                slots: Vec::new(),
                next: 0,
            }),
            gpu,
            gpu_name,
            backend,
            library: nv_path,
        };
        // the first slot now: a state nvJPEG cannot create is an error at load, not mid-run
        let d = me
            .decoder
            .get_mut()
            .map_err(|_| "the nvJPEG decoder's lock is poisoned".to_string())?;
        let slot = Self::new_slot(&me.api, me.handle)?;
        d.slots.push(slot);
        Ok(me)
    }

    /// Open libnvjpeg (`explicit`, else `MLPERF_RUN_NVJPEG`, else the search path) and
    /// libcudart and resolve their entry points; returns them with both libraries' paths.
    fn open_libraries(explicit: Option<PathBuf>) -> Result<(Api, PathBuf, PathBuf), String> {
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
        let (cudart, rt_path) = open_cudart()?;
        let api = Api::load(nvjpeg, &nv_path, cudart, &rt_path)?;
        Ok((api, nv_path, rt_path))
    }

    /// Check that CUDA sees device `gpu` (None: the one current on this thread) and make it
    /// current; returns its index. `rt_path` (libcudart) is for messages.
    fn select_device(api: &Api, rt_path: &Path, gpu: Option<usize>) -> Result<c_int, String> {
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
                cuda_error(api, rc)
            ));
        }
        let gpu: c_int = match gpu {
            Some(g) => {
                if let Some(why) = ordinal_beyond(g, devices) {
                    return Err(why);
                }
                g as c_int
            }
            None => {
                let mut g: c_int = 0;
                // SAFETY: documented signature; out-pointer valid. libcudart is the instance
                // libtorch loaded (same soname), so this is the device current on this thread.
                let rc = unsafe { (api.cuda_get_device)(&mut g) };
                if rc != 0 {
                    return Err(format!("cudaGetDevice: {}", cuda_error(api, rc)));
                }
                g
            }
        };
        // SAFETY: documented signature; `gpu` is below the device count. Everything created
        // below (handles, stream, buffers) belongs to this device.
        let rc = unsafe { (api.cuda_set_device)(gpu) };
        if rc != 0 {
            return Err(format!("cudaSetDevice({gpu}): {}", cuda_error(api, rc)));
        }
        Ok(gpu)
    }

    /// An nvJPEG handle on the current device: the hardware backend, else (with a warning,
    /// once per process) the CUDA decoder.
    fn create_handle(api: &Api, gpu: c_int, gpu_name: &str) -> Result<(Handle, Backend), String> {
        let create = |backend| {
            let mut handle: Handle = std::ptr::null_mut();
            // SAFETY: default allocators (null), flags 0; out-pointer valid.
            let rc = unsafe {
                (api.create_ex)(
                    backend,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    &mut handle,
                )
            };
            (rc, handle)
        };
        let (rc, handle) = create(NVJPEG_BACKEND_HARDWARE);
        if rc == 0 {
            return Ok((handle, Backend::Hardware));
        }
        // nvJPEG's default backend (the CUDA decoder)
        let (rc2, handle) = create(NVJPEG_BACKEND_DEFAULT);
        if rc2 != 0 {
            return Err(format!(
                "nvJPEG cannot start on GPU {gpu} ({gpu_name}): no hardware JPEG decoder \
                 (nvjpegCreateEx status {rc}) and the CUDA decoder failed too (status {rc2})"
            ));
        }
        // one warning per process (each loader loads a decoder)
        crate::util::logging::warn_once(&format!(
            "GPU {gpu} ({gpu_name}) has no hardware JPEG decoder nvJPEG can use \
             (nvjpegCreateEx with the hardware backend returned status {rc}): decoding \
             with nvJPEG's CUDA decoder (Huffman on the CPU, the rest on the GPU) instead"
        ));
        Ok((handle, Backend::Cuda))
    }

    /// A fresh decode slot: a JPEG state and an event.
    fn new_slot(api: &Api, handle: Handle) -> Result<DecodeSlot, String> {
        let mut slot = DecodeSlot {
            state: std::ptr::null_mut(),
            params: Vec::new(),
            event: std::ptr::null_mut(),
            recorded: false,
            inputs: Vec::new(),
            scratch: std::ptr::null_mut(),
            scratch_bytes: 0,
        };
        // SAFETY: live handle; out-pointers valid; a failure frees what was made.
        unsafe {
            let rc = (api.state_create)(handle, &mut slot.state);
            if rc != 0 {
                return Err(format!("nvjpegJpegStateCreate returned nvJPEG status {rc}"));
            }
            let rc = (api.cuda_event_create)(&mut slot.event, CUDA_EVENT_DISABLE_TIMING);
            if rc != 0 {
                (api.state_destroy)(slot.state);
                return Err(format!("cudaEventCreateWithFlags: {}", cuda_error(api, rc)));
            }
        }
        Ok(slot)
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

    /// Whether nvJPEG decodes `plan`'s region of the JPEG `bytes` (parsed here, on the calling
    /// worker, with parse objects of its own: workers parse in parallel). The hardware engine
    /// takes baseline JPEGs with common subsampling; progressive, CMYK and other unusual files,
    /// and regions at a DCT scale, go to the CPU decoder.
    pub fn supports(&self, bytes: &[u8], plan: &RegionPlan) -> bool {
        if plan.denom != 1 {
            return false;
        }
        let Some(parser) = self.take_parser() else {
            return false;
        };
        // SAFETY: live handle and parse objects owned by this call; `bytes` outlives the calls
        // (save_stream 0 parses without keeping a reference).
        let ok = unsafe {
            (self.api.stream_parse)(
                self.handle,
                bytes.as_ptr(),
                bytes.len(),
                0,
                0,
                parser.stream,
            ) == 0
                && match self.backend {
                    // the CUDA decoder decodes whole images: the region must lie inside
                    Backend::Cuda => self.image_size(bytes).is_some_and(|(w, h)| {
                        plan.x + plan.width <= w && plan.y + plan.height <= h
                    }),
                    Backend::Hardware => {
                        (self.api.params_set_output)(parser.params, NVJPEG_OUTPUT_RGBI) == 0
                            && (self.api.params_set_roi)(
                                parser.params,
                                plan.x as c_int,
                                plan.y as c_int,
                                plan.width as c_int,
                                plan.height as c_int,
                            ) == 0
                            && {
                                let mut flag: c_int = -1;
                                (self.api.supported_ex)(
                                    self.handle,
                                    parser.stream,
                                    parser.params,
                                    &mut flag,
                                ) == 0
                                    && flag == 0
                            }
                    }
                }
        };
        if let Ok(mut pool) = self.parsers.lock() {
            pool.push(parser);
        }
        ok
    }

    /// A parser from the pool, or a new one.
    fn take_parser(&self) -> Option<Parser> {
        if let Some(p) = self.parsers.lock().ok()?.pop() {
            return Some(p);
        }
        let mut p = Parser {
            stream: std::ptr::null_mut(),
            params: std::ptr::null_mut(),
        };
        // SAFETY: live handle; out-pointers valid. A failure frees what was made.
        unsafe {
            if (self.api.stream_create)(self.handle, &mut p.stream) != 0 {
                return None;
            }
            if (self.api.params_create)(self.handle, &mut p.params) != 0 {
                (self.api.stream_destroy)(p.stream);
                return None;
            }
        }
        Some(p)
    }

    /// The (width, height) nvJPEG reads from a JPEG's header.
    fn image_size(&self, bytes: &[u8]) -> Option<(u32, u32)> {
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
        (rc == 0 && w[0] > 0 && h[0] > 0).then_some((w[0] as u32, h[0] as u32))
    }

    /// Decode each file's `plan` region (full scale) into device memory: file `k`'s
    /// `plan.width * plan.height * 3` bytes of interleaved RGB at `arena + offsets[k]`, queued
    /// on the CUDA stream `stream` of the decoder's GPU (the caller's: the hand-off's copy
    /// stream). Nothing is copied back. The hardware backend's `nvjpegDecodeBatchedEx` returns
    /// only once its decode has (nearly) run on the device: measured on an H200 with nvJPEG
    /// 13.0.1 (results/gpu-bench/h200-2026-11-28-nvjpeg.txt), 7 to 10 ms for 128 regions on an
    /// idle GPU with the work on `stream` done under a millisecond after the return, and about
    /// 70 ms when 70 ms of matmuls were queued before it on another stream (with `stream` of high
    /// priority too): the calling thread waits for the work the GPU had queued before the decode.
    /// The files are still kept until the slot's event has passed (`DECODE_SLOTS` batches in
    /// flight; the host waits there only when a slot's decode of that many batches ago is still
    /// running). Every file must have passed [`Nvjpeg::supports`]; on failure the batch as a
    /// whole comes back with the reason (decode it on the CPU).
    ///
    /// # Safety
    /// `arena` is device memory of the decoder's GPU holding every `offsets[k]` plus its region's
    /// bytes, alive and not written by other work until `stream` has passed this decode.
    pub unsafe fn decode_into(
        &self,
        jpegs: Vec<(Vec<u8>, RegionPlan)>,
        arena: *mut u8,
        offsets: &[usize],
        stream: *mut c_void,
    ) -> Result<(), DecodeFailure> {
        if jpegs.is_empty() {
            return Ok(());
        }
        let fail = |why: String, jpegs| Err(DecodeFailure { why, jpegs });
        if offsets.len() != jpegs.len() || jpegs.iter().any(|(_, p)| p.denom != 1) {
            return fail(
                "nvJPEG takes full-scale regions, one offset each".into(),
                jpegs,
            );
        }
        if let Err(why) = self.use_gpu() {
            return fail(why, jpegs);
        }
        let Ok(mut d) = self.decoder.lock() else {
            return fail("the nvJPEG decoder's lock is poisoned".into(), jpegs);
        };
        let d = &mut *d;
        if d.slots.len() < DECODE_SLOTS && d.next >= d.slots.len() {
            match Self::new_slot(&self.api, self.handle) {
                Ok(slot) => d.slots.push(slot),
                // fewer slots in flight: reuse the oldest
                Err(_) => d.next = 0,
            }
        }
        let k = d.next % d.slots.len();
        d.next = (k + 1) % DECODE_SLOTS;
        let slot = &mut d.slots[k];
        if slot.recorded {
            // the slot's previous decode (DECODE_SLOTS batches ago) must be over before its
            // state and inputs are reused: normally long done, so no wait
            // SAFETY: a live event.
            let rc = (self.api.cuda_event_sync)(slot.event);
            if rc != 0 {
                return fail(
                    format!("cudaEventSynchronize: {}", cuda_error(&self.api, rc)),
                    jpegs,
                );
            }
            slot.recorded = false;
        }
        slot.inputs.clear();
        let items: Vec<(&[u8], RegionPlan)> =
            jpegs.iter().map(|(b, p)| (b.as_slice(), *p)).collect();
        let done = match self.backend {
            Backend::Hardware => {
                self.decode_regions_on_engine(slot, &items, arena, offsets, stream)
            }
            Backend::Cuda => self.decode_whole_then_cut(slot, &items, arena, offsets, stream),
        };
        drop(items);
        let slot = &mut d.slots[k];
        // SAFETY: a live event, recorded after the decode's work on its stream.
        let rc = (self.api.cuda_event_record)(slot.event, stream);
        slot.recorded = rc == 0;
        match done {
            Ok(()) => {
                slot.inputs = jpegs;
                Ok(())
            }
            Err(why) => {
                // whatever was queued may still read the files: the slot keeps a copy
                slot.inputs = jpegs.clone();
                fail(why, jpegs)
            }
        }
    }

    /// The hardware engine's batched ROI decode, each region straight to its arena place.
    fn decode_regions_on_engine(
        &self,
        d: &mut DecodeSlot,
        items: &[(&[u8], RegionPlan)],
        arena: *mut u8,
        offsets: &[usize],
        stream: *mut c_void,
    ) -> Result<(), String> {
        self.ensure_params(d, items.len())?;
        for ((_, plan), &p) in items.iter().zip(&d.params) {
            // SAFETY: live params object.
            let rc = unsafe {
                let rc = (self.api.params_set_output)(p, NVJPEG_OUTPUT_RGBI);
                if rc != 0 {
                    rc
                } else {
                    (self.api.params_set_roi)(
                        p,
                        plan.x as c_int,
                        plan.y as c_int,
                        plan.width as c_int,
                        plan.height as c_int,
                    )
                }
            };
            self.check(rc, "nvjpegDecodeParamsSetROI")?;
        }
        let mut images: Vec<NvjpegImage> = items
            .iter()
            .zip(offsets)
            // SAFETY: the caller guarantees each offset plus its region lies in the arena.
            .map(|((_, plan), &o)| rgb_image(unsafe { arena.add(o) }, plan.width))
            .collect();
        let (data, lengths): (Vec<*const u8>, Vec<usize>) =
            items.iter().map(|(b, _)| (b.as_ptr(), b.len())).unzip();
        let mut params: Vec<Params> = d.params[..items.len()].to_vec();
        self.begin_batch(d, items.len())?;
        // SAFETY: arrays of items.len() entries; destinations inside the arena (the caller's
        // promise); the caller's stream on the decoder's GPU.
        let rc = unsafe {
            (self.api.batched_ex)(
                self.handle,
                d.state,
                data.as_ptr(),
                lengths.as_ptr(),
                images.as_mut_ptr(),
                params.as_mut_ptr(),
                stream,
            )
        };
        self.check(rc, "nvjpegDecodeBatchedEx")
    }

    /// The CUDA decoder's path (no engine, no batched ROI): nvJPEG's batched decode of whole
    /// images into the slot's scratch buffer, then each plan's region copied to its arena place
    /// on the device (a 2-D copy on the same stream).
    fn decode_whole_then_cut(
        &self,
        d: &mut DecodeSlot,
        items: &[(&[u8], RegionPlan)],
        arena: *mut u8,
        offsets: &[usize],
        stream: *mut c_void,
    ) -> Result<(), String> {
        let mut dims = Vec::with_capacity(items.len());
        for (bytes, plan) in items {
            let (w, h) = self
                .image_size(bytes)
                .filter(|&(w, h)| plan.x + plan.width <= w && plan.y + plan.height <= h)
                .ok_or_else(|| "nvJPEG cannot read a header it took before".to_string())?;
            dims.push((w, h));
        }
        let sizes: Vec<usize> = dims
            .iter()
            .map(|&(w, h)| w as usize * h as usize * 3)
            .collect();
        self.ensure_scratch(d, sizes.iter().sum())?;
        let scratch = d.scratch as *mut u8;
        let mut wholes = Vec::with_capacity(items.len());
        let mut at = 0usize;
        for (&(w, _), &size) in dims.iter().zip(&sizes) {
            // SAFETY: at + size <= the sum of sizes <= scratch_bytes.
            wholes.push(rgb_image(unsafe { scratch.add(at) }, w));
            at += size;
        }
        let (data, lengths): (Vec<*const u8>, Vec<usize>) =
            items.iter().map(|(b, _)| (b.as_ptr(), b.len())).unzip();
        self.begin_batch(d, items.len())?;
        // SAFETY: arrays of items.len() entries; destinations inside the scratch buffer.
        let rc = unsafe {
            (self.api.batched)(
                self.handle,
                d.state,
                data.as_ptr(),
                lengths.as_ptr(),
                wholes.as_mut_ptr(),
                stream,
            )
        };
        self.check(rc, "nvjpegDecodeBatched")?;
        for (((_, plan), whole), (&o, &(w, _))) in
            items.iter().zip(&wholes).zip(offsets.iter().zip(&dims))
        {
            let row = plan.width as usize * 3;
            let pitch = w as usize * 3;
            // SAFETY: the region lies inside the whole image (checked above) and its arena
            // place inside the arena (the caller's promise); queued after the decode.
            let rc = unsafe {
                (self.api.cuda_memcpy_2d_async)(
                    arena.add(o) as *mut c_void,
                    row,
                    whole.channel[0].add(plan.y as usize * pitch + plan.x as usize * 3)
                        as *const c_void,
                    pitch,
                    row,
                    plan.height as usize,
                    CUDA_MEMCPY_DEVICE_TO_DEVICE,
                    stream,
                )
            };
            if rc != 0 {
                return Err(format!("cudaMemcpy2DAsync: {}", cuda_error(&self.api, rc)));
            }
        }
        Ok(())
    }

    fn ensure_params(&self, d: &mut DecodeSlot, n: usize) -> Result<(), String> {
        while d.params.len() < n {
            let mut p: Params = std::ptr::null_mut();
            // SAFETY: live handle; out-pointer valid.
            let rc = unsafe { (self.api.params_create)(self.handle, &mut p) };
            self.check(rc, "nvjpegDecodeParamsCreate")?;
            d.params.push(p);
        }
        Ok(())
    }

    /// The slot's scratch buffer grown to at least `bytes` (its previous decode is over: the
    /// caller waited for the slot's event).
    fn ensure_scratch(&self, d: &mut DecodeSlot, bytes: usize) -> Result<(), String> {
        if bytes <= d.scratch_bytes {
            return Ok(());
        }
        if !d.scratch.is_null() {
            // SAFETY: allocated by cudaMalloc below (cudaFree waits for the device's work).
            unsafe { (self.api.cuda_free)(d.scratch) };
            d.scratch = std::ptr::null_mut();
            d.scratch_bytes = 0;
        }
        let bytes = bytes.next_power_of_two();
        // SAFETY: out-pointer valid.
        let rc = unsafe { (self.api.cuda_malloc)(&mut d.scratch, bytes) };
        if rc != 0 {
            return Err(format!(
                "cudaMalloc of {bytes} bytes: {}",
                cuda_error(&self.api, rc)
            ));
        }
        d.scratch_bytes = bytes;
        Ok(())
    }

    /// nvjpegDecodeBatchedInitialize for `n` images of interleaved RGB, one CPU thread.
    fn begin_batch(&self, d: &DecodeSlot, n: usize) -> Result<(), String> {
        // SAFETY: live handle and state.
        let rc = unsafe {
            (self.api.batched_init)(self.handle, d.state, n as c_int, 1, NVJPEG_OUTPUT_RGBI)
        };
        self.check(rc, "nvjpegDecodeBatchedInitialize")
    }
}

/// nvJPEG's descriptor of an interleaved RGB image `width` pixels wide at `at`.
fn rgb_image(at: *mut u8, width: u32) -> NvjpegImage {
    let mut channel = [std::ptr::null_mut(); 4];
    channel[0] = at;
    NvjpegImage {
        channel,
        pitch: [width as usize * 3, 0, 0, 0],
    }
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
    prop_name(&buf)
}

fn cuda_error(api: &Api, rc: c_int) -> String {
    error_string(api.cuda_error_string, rc)
}

impl Drop for Nvjpeg {
    fn drop(&mut self) {
        // the scratch buffer belongs to the decoder's GPU (a failure leaves nothing better to do)
        let _ = self.use_gpu();
        // SAFETY: each object was created by the matching nvJPEG/CUDA call and is freed once;
        // no other thread holds the decoder any more (&mut self).
        unsafe {
            if let Ok(parsers) = self.parsers.get_mut() {
                for p in parsers.drain(..) {
                    (self.api.params_destroy)(p.params);
                    (self.api.stream_destroy)(p.stream);
                }
            }
            if let Ok(d) = self.decoder.get_mut() {
                for slot in d.slots.drain(..) {
                    if slot.recorded {
                        // the device may still read the slot's state and files
                        (self.api.cuda_event_sync)(slot.event);
                    }
                    (self.api.cuda_event_destroy)(slot.event);
                    for &p in &slot.params {
                        (self.api.params_destroy)(p);
                    }
                    (self.api.state_destroy)(slot.state);
                    if !slot.scratch.is_null() {
                        (self.api.cuda_free)(slot.scratch);
                    }
                }
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
    fn an_rgb_descriptor_points_at_its_place_with_the_row_pitch() {
        let mut buf = [0u8; 64];
        let at = buf.as_mut_ptr().wrapping_add(12);
        let d = rgb_image(at, 5);
        assert_eq!(d.channel[0], at);
        assert!(d.channel[1..].iter().all(|p| p.is_null()));
        assert_eq!(d.pitch, [15, 0, 0, 0]);
    }
}
