//! `shim/jpeg_region.c`: libjpeg-turbo's region decode. Use [`crate::data::imagenet::region`].
use std::os::raw::{c_char, c_int};

#[repr(C)]
pub struct MrJpeg {
    _private: [u8; 0],
}

extern "C" {
    pub fn mr_jpeg_open(
        data: *const u8,
        len: usize,
        out: *mut *mut MrJpeg,
        width: *mut u32,
        height: *mut u32,
        components: *mut c_int,
        msg: *mut c_char,
        msg_len: usize,
    ) -> c_int;
    pub fn mr_jpeg_free(j: *mut MrJpeg);
    #[allow(clippy::too_many_arguments)]
    pub fn mr_jpeg_decode_region(
        j: *mut MrJpeg,
        denom: u32,
        x: u32,
        y: u32,
        w: u32,
        h: u32,
        out: *mut u8,
        msg: *mut c_char,
        msg_len: usize,
    ) -> c_int;
}
