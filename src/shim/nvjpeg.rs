//! nvJPEG's and the CUDA runtime's entry points that the GPU JPEG decoder
//! (`data::imagenet::nvjpeg`) calls: declared here after NVIDIA's nvJPEG and CUDA runtime
//! documentation (nvjpeg.h is not needed to build) and loaded at run time from the libraries
//! [`super::cuda_libs`] finds (no link-time dependency; not one of our shim/*.cpp files, but FFI
//! all the same).
use super::cuda_libs::symbol;
use libloading::Library;
use std::ffi::{c_int, c_uint, c_void};
use std::path::Path;

pub(crate) type Status = c_int;
pub(crate) type Handle = *mut c_void;
pub(crate) type State = *mut c_void;
pub(crate) type Params = *mut c_void;
pub(crate) type JpegStream = *mut c_void;
pub(crate) type CudaStream = *mut c_void;
pub(crate) type CudaEvent = *mut c_void;
/// cudaEventDisableTiming
pub(crate) const CUDA_EVENT_DISABLE_TIMING: c_uint = 2;

pub(crate) const NVJPEG_BACKEND_DEFAULT: c_int = 0;
pub(crate) const NVJPEG_BACKEND_HARDWARE: c_int = 3;
pub(crate) const NVJPEG_OUTPUT_RGBI: c_int = 5;
pub(crate) const CUDA_MEMCPY_DEVICE_TO_DEVICE: c_int = 3;
pub(crate) use super::cudart::{
    FnDeviceCount as FnCudaDeviceCount, FnDeviceProps as FnCudaDeviceProps,
    FnErrorString as FnCudaErrorString, DEVICE_PROP_BYTES,
};

/// nvjpegImage_t: up to four planes; interleaved RGB uses channel[0] only.
#[repr(C)]
pub(crate) struct NvjpegImage {
    pub(crate) channel: [*mut u8; 4],
    pub(crate) pitch: [usize; 4],
}

pub(crate) type FnCreateEx =
    unsafe extern "C" fn(c_int, *mut c_void, *mut c_void, c_uint, *mut Handle) -> Status;
pub(crate) type FnDestroy = unsafe extern "C" fn(*mut c_void) -> Status;
pub(crate) type FnStateCreate = unsafe extern "C" fn(Handle, *mut State) -> Status;
pub(crate) type FnBatchedInit = unsafe extern "C" fn(Handle, State, c_int, c_int, c_int) -> Status;
pub(crate) type FnBatchedEx = unsafe extern "C" fn(
    Handle,
    State,
    *const *const u8,
    *const usize,
    *mut NvjpegImage,
    *mut Params,
    CudaStream,
) -> Status;
pub(crate) type FnParamsCreate = unsafe extern "C" fn(Handle, *mut Params) -> Status;
pub(crate) type FnParamsSetOutput = unsafe extern "C" fn(Params, c_int) -> Status;
pub(crate) type FnParamsSetRoi = unsafe extern "C" fn(Params, c_int, c_int, c_int, c_int) -> Status;
pub(crate) type FnStreamCreate = unsafe extern "C" fn(Handle, *mut JpegStream) -> Status;
pub(crate) type FnStreamParse =
    unsafe extern "C" fn(Handle, *const u8, usize, c_int, c_int, JpegStream) -> Status;
pub(crate) type FnSupportedEx =
    unsafe extern "C" fn(Handle, JpegStream, Params, *mut c_int) -> Status;
pub(crate) type FnCudaMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
pub(crate) type FnCudaFree = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(crate) type FnCudaGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
pub(crate) type FnCudaSetDevice = unsafe extern "C" fn(c_int) -> c_int;
pub(crate) type FnCudaEventCreate = unsafe extern "C" fn(*mut CudaEvent, c_uint) -> c_int;
pub(crate) type FnCudaEventRecord = unsafe extern "C" fn(CudaEvent, CudaStream) -> c_int;
pub(crate) type FnCudaEventOp = unsafe extern "C" fn(CudaEvent) -> c_int;
/// cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream)
pub(crate) type FnCudaMemcpy2DAsync = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    c_int,
    CudaStream,
) -> c_int;
pub(crate) type FnBatched = unsafe extern "C" fn(
    Handle,
    State,
    *const *const u8,
    *const usize,
    *mut NvjpegImage,
    CudaStream,
) -> Status;
pub(crate) type FnImageInfo = unsafe extern "C" fn(
    Handle,
    *const u8,
    usize,
    *mut c_int,
    *mut c_int,
    *mut c_int,
    *mut c_int,
) -> Status;

pub(crate) struct Api {
    pub(crate) create_ex: FnCreateEx,
    pub(crate) destroy: FnDestroy,
    pub(crate) state_create: FnStateCreate,
    pub(crate) state_destroy: FnDestroy,
    pub(crate) batched_init: FnBatchedInit,
    pub(crate) batched_ex: FnBatchedEx,
    pub(crate) params_create: FnParamsCreate,
    pub(crate) params_destroy: FnDestroy,
    pub(crate) params_set_output: FnParamsSetOutput,
    pub(crate) params_set_roi: FnParamsSetRoi,
    pub(crate) stream_create: FnStreamCreate,
    pub(crate) stream_destroy: FnDestroy,
    pub(crate) stream_parse: FnStreamParse,
    pub(crate) supported_ex: FnSupportedEx,
    pub(crate) cuda_malloc: FnCudaMalloc,
    pub(crate) cuda_free: FnCudaFree,
    pub(crate) cuda_device_count: FnCudaDeviceCount,
    pub(crate) cuda_get_device: FnCudaGetDevice,
    pub(crate) cuda_set_device: FnCudaSetDevice,
    pub(crate) cuda_error_string: FnCudaErrorString,
    pub(crate) cuda_memcpy_2d_async: FnCudaMemcpy2DAsync,
    pub(crate) cuda_event_create: FnCudaEventCreate,
    pub(crate) cuda_event_record: FnCudaEventRecord,
    pub(crate) cuda_event_sync: FnCudaEventOp,
    pub(crate) cuda_event_destroy: FnCudaEventOp,
    pub(crate) cuda_device_props: Option<FnCudaDeviceProps>,
    pub(crate) batched: FnBatched,
    pub(crate) image_info: FnImageInfo,
    // Kept loaded while the function pointers above are in use.
    pub(crate) _nvjpeg: Library,
    pub(crate) _cudart: Library,
}

impl Api {
    /// The entry points out of libnvjpeg (`nvjpeg`, loaded from `n`) and libcudart (`cudart`,
    /// from `r`), which the table keeps loaded; an error names the library and the symbol.
    pub(crate) fn load(
        nvjpeg: Library,
        n: &Path,
        cudart: Library,
        r: &Path,
    ) -> Result<Api, String> {
        Ok(Api {
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
            batched: symbol(&nvjpeg, n, "nvjpegDecodeBatched")?,
            image_info: symbol(&nvjpeg, n, "nvjpegGetImageInfo")?,
            cuda_malloc: symbol(&cudart, r, "cudaMalloc")?,
            cuda_free: symbol(&cudart, r, "cudaFree")?,
            cuda_device_count: symbol(&cudart, r, "cudaGetDeviceCount")?,
            cuda_get_device: symbol(&cudart, r, "cudaGetDevice")?,
            cuda_set_device: symbol(&cudart, r, "cudaSetDevice")?,
            cuda_error_string: symbol(&cudart, r, "cudaGetErrorString")?,
            cuda_memcpy_2d_async: symbol(&cudart, r, "cudaMemcpy2DAsync")?,
            cuda_event_create: symbol(&cudart, r, "cudaEventCreateWithFlags")?,
            cuda_event_record: symbol(&cudart, r, "cudaEventRecord")?,
            cuda_event_sync: symbol(&cudart, r, "cudaEventSynchronize")?,
            cuda_event_destroy: symbol(&cudart, r, "cudaEventDestroy")?,
            // CUDA 12 and later spell it _v2; the name is only for the default split and logs
            cuda_device_props: symbol(&cudart, r, "cudaGetDeviceProperties_v2")
                .or_else(|_| symbol(&cudart, r, "cudaGetDeviceProperties"))
                .ok(),
            _nvjpeg: nvjpeg,
            _cudart: cudart,
        })
    }
}
