//! `shim/graph.cpp`: CUDA graph capture and replay (`at::cuda::CUDAGraph`). Use [`crate::gpu::cuda_graph`].
use std::os::raw::{c_char, c_int};

#[repr(C)]
pub struct MrGraph {
    _private: [u8; 0],
}

pub type Err = *mut *mut c_char;

extern "C" {
    pub fn mr_graph_supported() -> c_int;
    pub fn mr_graph_new(out: *mut *mut MrGraph, err: Err) -> c_int;
    pub fn mr_graph_free(g: *mut MrGraph);
    pub fn mr_graph_capture_begin(g: *mut MrGraph, device: c_int, err: Err) -> c_int;
    pub fn mr_graph_capture_end(g: *mut MrGraph, err: Err) -> c_int;
    pub fn mr_graph_replay(g: *mut MrGraph, err: Err) -> c_int;
    pub fn mr_capture_check_begin(err: Err) -> c_int;
    pub fn mr_capture_check_end(first: Err) -> i64;
}
