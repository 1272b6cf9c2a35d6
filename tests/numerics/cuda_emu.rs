//! The shim's CPU emulator of CUDA's execution model (`shim/cuda_emu.hpp`), which runs the
//! fused epilogue's CUDA kernels in CI (`tests/numerics/fused_epilogue_kernels.rs`): its block
//! and warp semantics on kernels with a known answer (`shim/cuda_emu_selftest.cpp`), and the
//! errors it gives instead of a hang or a silent wrong answer.
#![cfg(feature = "torch")]

use mlperf_run::fused::epilogue::emulator_selftest;

/// Runs self-test `which` on a (gx, gy) grid; the per-block outputs, or the emulator's error.
fn run(which: i32, gx: u32, gy: u32, threads: u32) -> Result<Vec<f32>, String> {
    emulator_selftest(which, gx, gy, threads).map_err(|e| format!("{e:#}"))
}

#[test]
fn warp_shuffles_shared_memory_and_block_indices_give_the_known_sums() {
    for threads in [32u32, 96, 256, 1024] {
        let n = threads as f32;
        let out = run(0, 3, 2, threads).unwrap_or_else(|e| panic!("{threads} threads: {e}"));
        // block b of the (3, 2) grid (b = y * 3 + x) wrote its own slot with the sum of
        // t + 1024 b over its threads t (all exact in fp32)
        let want: Vec<f32> = (0..6)
            .map(|b| n * (n - 1.0) / 2.0 + n * 1024.0 * b as f32)
            .collect();
        assert_eq!(out, want, "{threads} threads");
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
    // a lane that returns while the others shuffle: an error whichever runs first. When it
    // runs last (1 launch in 32 of one warp), the others already wait in the shuffle and would
    // be released to read its slot, never written: 400 launches meet that order (all but
    // surely), and each must fail
    for launch in 0..400 {
        let msg = run(3, 1, 1, 32).unwrap_err();
        assert!(msg.contains("__shfl_xor_sync"), "launch {launch}: {msg}");
    }
    // while lanes that return right after a completed shuffle are fine (a warp reduction, then
    // only lane 0 goes on), in every resume order
    for launch in 0..50 {
        let out = run(4, 2, 1, 64).unwrap_or_else(|e| panic!("launch {launch}: {e}"));
        assert_eq!(out, vec![496.0, 496.0], "launch {launch}");
    }
    let msg = run(0, 1, 1, 2048).unwrap_err();
    assert!(msg.contains("1 to 1024"), "{msg}");
    let msg = run(0, 1, 70_000, 32).unwrap_err();
    assert!(msg.contains("outside CUDA's limits"), "{msg}");
    // and the emulator is usable again after each error
    assert_eq!(run(0, 1, 1, 32).unwrap(), vec![496.0]);
}

/// The emulator is linked into the test programs (this one runs its kernels above) and not into
/// mlperf-run: the binary defines no symbol of it (`nm --defined-only`), while the main shim's
/// weak references to it are there, unresolved.
#[test]
fn the_emulator_is_in_the_test_programs_only() {
    let defined = |path: &str| -> String {
        let out = std::process::Command::new("nm")
            .args(["--defined-only", "-C", path])
            .output()
            .unwrap_or_else(|e| panic!("nm (binutils, which the build's linker comes with): {e}"));
        assert!(
            out.status.success(),
            "nm {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let emulator = |syms: &str| {
        syms.lines()
            .filter(|l| l.contains("mr::cuda_emu::") || l.contains("mr::fe_emu::"))
            .count()
    };
    let me = std::env::current_exe().unwrap();
    let here = defined(me.to_str().unwrap());
    assert!(
        emulator(&here) > 0,
        "the test program has no emulator symbols"
    );
    let bin = defined(env!("CARGO_BIN_EXE_mlperf-run"));
    assert!(
        bin.contains("mr_fe_bias_dropout_add_ln"),
        "nm found no shim symbols in mlperf-run"
    );
    let n = emulator(&bin);
    assert_eq!(n, 0, "mlperf-run defines {n} emulator symbols");
}
