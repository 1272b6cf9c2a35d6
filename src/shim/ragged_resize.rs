//! `shim/ragged_resize.cpp`: the ragged crop + resize + flip + normalise of device-augmented
//! batches. Use [`crate::data::imagenet::device_augment`].
use torch_sys::C_tensor;

extern "C" {
    pub fn mr_ragged_resize(
        arena: *const C_tensor,
        params: *const C_tensor,
        rows: i64,
        size: i64,
        mean: *const f32,
        std: *const f32,
        out_type: std::os::raw::c_int,
        out: *mut *mut C_tensor,
        err: *mut *mut std::os::raw::c_char,
    ) -> std::os::raw::c_int;
    pub fn mr_ragged_nvrtc_compile(
        nvrtc_path: *const std::os::raw::c_char,
        arch: *const std::os::raw::c_char,
        size: *mut usize,
        err: *mut *mut std::os::raw::c_char,
    ) -> std::os::raw::c_int;
}
