//! `shim/cuda_emu_selftest.cpp`: the CUDA emulator's self-test.
use std::os::raw::{c_char, c_int};

pub type Err = *mut *mut c_char;

extern "C" {
    pub fn mr_cuda_emu_selftest(
        which: c_int,
        gx: u32,
        gy: u32,
        threads: u32,
        out: *mut f32,
        err: Err,
    ) -> c_int;
}
