//! The shim's CPU emulator of CUDA's execution model (`shim/cuda_emu.hpp`), which runs the
//! fused epilogue's CUDA kernels in CI (`tests/fused_epilogue_kernels.rs`): its block and warp
//! semantics on kernels with a known answer (`shim/cuda_emu_selftest.cpp`), and the errors it
//! gives instead of a hang or a silent wrong answer.
#![cfg(feature = "torch")]

use mlperf_run::models::fused_epilogue::emulator_selftest;

/// Runs self-test `which` on a (gx, gy) grid; the per-block outputs, or the emulator's error.
fn run(which: i32, gx: u32, gy: u32, threads: u32) -> Result<Vec<f32>, String> {
    emulator_selftest(which, gx, gy, threads).map_err(|e| format!("{e:#}"))
}

#[test]
fn warp_shuffles_shared_memory_and_block_indices_give_the_known_sums() {
    for threads in [32u32, 96, 256, 1024] {
        let n = threads as f32;
        let out = run(0, 3, 2, threads).unwrap_or_else(|e| panic!("{threads} threads: {e}"));
        // every block of the (3, 2) grid wrote its own slot with 0 + 1 + ... + (threads - 1)
        assert_eq!(out, vec![n * (n - 1.0) / 2.0; 6], "{threads} threads");
    }
}

#[test]
fn barriers_that_can_never_complete_are_an_error_not_a_hang() {
    let msg = run(1, 1, 1, 64).unwrap_err();
    assert!(msg.contains("wait at a barrier"), "{msg}");
    assert!(
        !msg.contains("Exception raised from"),
        "C++ backtrace in: {msg}"
    );
}

#[test]
fn unmodelled_uses_and_launches_outside_cuda_limits_are_refused() {
    let msg = run(2, 1, 1, 32).unwrap_err();
    assert!(msg.contains("only the full warp"), "{msg}");
    let msg = run(0, 1, 1, 2048).unwrap_err();
    assert!(msg.contains("1 to 1024"), "{msg}");
    let msg = run(0, 1, 70_000, 32).unwrap_err();
    assert!(msg.contains("outside CUDA's limits"), "{msg}");
    // and the emulator is usable again after each error
    assert_eq!(run(0, 1, 1, 32).unwrap(), vec![496.0]);
}
