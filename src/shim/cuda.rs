//! `shim/cuda.cpp`: CUDA streams, events, device queries and memory. Use [`crate::gpu::cuda`].
use std::os::raw::{c_char, c_int};
use torch_sys::C_tensor;

#[repr(C)]
pub struct MrStream {
    _private: [u8; 0],
}

#[repr(C)]
pub struct MrEvent {
    _private: [u8; 0],
}

pub type Err = *mut *mut c_char;

extern "C" {
    pub fn mr_set_device(index: c_int, err: Err) -> c_int;
    pub fn mr_stream_from_pool(index: c_int, out: *mut *mut MrStream, err: Err) -> c_int;
    pub fn mr_stream_current(index: c_int, out: *mut *mut MrStream, err: Err) -> c_int;
    pub fn mr_stream_exchange(s: *const MrStream, prev: *mut *mut MrStream, err: Err) -> c_int;
    pub fn mr_stream_synchronize(s: *const MrStream, err: Err) -> c_int;
    pub fn mr_stream_native(s: *const MrStream, out: *mut *mut std::ffi::c_void, err: Err)
        -> c_int;
    pub fn mr_stream_free(s: *mut MrStream);
    pub fn mr_event_new(out: *mut *mut MrEvent, err: Err) -> c_int;
    pub fn mr_event_record(e: *mut MrEvent, s: *const MrStream, err: Err) -> c_int;
    pub fn mr_event_block(e: *const MrEvent, s: *const MrStream, err: Err) -> c_int;
    pub fn mr_event_query(e: *const MrEvent, done: *mut c_int, err: Err) -> c_int;
    pub fn mr_event_free(e: *mut MrEvent);
    pub fn mr_tensor_record_stream(t: *const C_tensor, s: *const MrStream, err: Err) -> c_int;
    pub fn mr_copy_nonblocking(dst: *const C_tensor, src: *const C_tensor, err: Err) -> c_int;
    pub fn mr_empty_pinned(numel: i64, dtype: c_int, out: *mut *mut C_tensor, err: Err) -> c_int;
    pub fn mr_set_tf32(matmul: c_int, cudnn: c_int, err: Err) -> c_int;
    pub fn mr_get_tf32(matmul: *mut c_int, cudnn: *mut c_int, err: Err) -> c_int;
    pub fn mr_set_cudnn_benchmark(on: c_int, err: Err) -> c_int;
    pub fn mr_get_cudnn_benchmark(on: *mut c_int, err: Err) -> c_int;
}
