//! The C++ shim's FFI declarations, one file per `shim/*.cpp` (and `shim/jpeg_region.c`; and
//! `nvjpeg.rs` and `cudart.rs`, the entry points of the nvJPEG and CUDA runtime libraries loaded
//! at run time, which `cuda_libs.rs` finds), and
//! the one error convention every entry point follows ([`error::call`]: returns 0 or -1, the
//! message handed back as a malloc'd C string). Only the modules that wrap them (gpu, fused,
//! distributed, optim, data) use these; nothing else calls the shim.
#![allow(dead_code)]

#[cfg(feature = "torch")]
pub mod cuda;
#[cfg(feature = "torch")]
pub mod cuda_emu_entry;
pub mod cuda_libs;
pub mod cudart;
#[cfg(feature = "torch")]
pub mod dist;
#[cfg(feature = "torch")]
pub mod error;
#[cfg(feature = "torch")]
pub mod foreach;
#[cfg(feature = "torch")]
pub mod fp8;
#[cfg(feature = "torch")]
pub mod fused_bias_gelu;
#[cfg(feature = "torch")]
pub mod fused_bn;
#[cfg(feature = "torch")]
pub mod fused_epilogue;
#[cfg(feature = "torch")]
pub mod graph;
pub mod jpeg_region;
pub mod nvjpeg;
#[cfg(feature = "torch")]
pub mod ragged_resize;
#[cfg(feature = "torch")]
pub mod reducer;
#[cfg(feature = "torch")]
pub mod tensor;
#[cfg(feature = "torch")]
pub mod varlen_attention;
