//! `shim/cuda_emu_entry.cpp`: the CUDA emulator's self-checks, through the main shim (the emulator
//! itself is linked into the test programs only; see `shim/cuda_emu_entry.hpp`).
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
