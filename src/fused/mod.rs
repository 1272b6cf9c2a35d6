//! The fused ops: each is one autograd op with a fast kernel on a GPU and a reference path
//! made of plain ATen ops (the CPU twin that tests compare against), reporting which path ran
//! and why a fallback happened.
//!
//! - [`bn_relu`]: batch norm + residual add + ReLU (`methods.fused_bn_relu`, cuDNN's fused
//!   kernel, `shim/fused_bn.cpp`)
//! - [`epilogue`]: the encoder's dense + bias + dropout + residual + LayerNorm epilogues and
//!   fused QKV (`methods.fused_epilogues`, `methods.fused_qkv`; CUDA kernels compiled at run
//!   time, `shim/fused_epilogue.cpp`)
//! - [`bias_gelu`]: the feed-forward matmuls with bias + tanh GELU in cuBLASLt's epilogues
//!   (`methods.fused_bias_gelu`, `shim/fused_bias_gelu.cpp`)
//! - [`fp8`]: the encoder's linear layers in FP8 with delayed scaling (`methods.fp8`;
//!   `_scaled_mm`, `shim/fp8.cpp`)
//! - [`varlen_attention`]: attention within each packed sequence (`methods.unpad`;
//!   FlashAttention's varlen kernel, `shim/varlen_attention.cpp`)

pub mod bias_gelu;
pub mod bn_relu;
pub mod epilogue;
pub mod fp8;
pub mod varlen_attention;

use anyhow::Result;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

/// Which implementation a fused op runs: one choice for every op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Path {
    /// The fast kernel where it can run (the op's device, dtype and shape rules, and it has not
    /// failed in this process), else the reference path. What training uses.
    #[default]
    Auto,
    /// Plain ATen ops only: the CPU path, and on a GPU the reference the fast kernel is checked
    /// against.
    Reference,
    /// The fast kernel, or an error saying why not (the GPU checks).
    Fast,
    /// The fast kernel's own source run on CPU tensors by the shim's emulator of CUDA's
    /// execution model (`shim/cuda_emu.hpp`): tests of the kernels without a GPU. Only ops whose
    /// kernels are CUDA C++ of ours have it (the epilogues); the others refuse it. The emulator
    /// is linked into the test programs only (build.rs): in mlperf-run this path is an error.
    Emulated,
}

impl Path {
    /// The shim's mode code: 0 auto, 1 reference, 2 fast or an error, 3 emulated.
    pub(crate) fn code(self) -> c_int {
        match self {
            Path::Auto => 0,
            Path::Reference => 1,
            Path::Fast => 2,
            Path::Emulated => 3,
        }
    }

    /// An error for [`Path::Emulated`] on an op (`op`) that has no emulated kernels.
    pub(crate) fn refuse_emulated(self, op: &str) -> Result<()> {
        if self == Path::Emulated {
            return Err(no_emulator(op));
        }
        Ok(())
    }
}

/// Why an op (`op`) without emulated kernels cannot take [`Path::Emulated`].
pub(crate) fn no_emulator(op: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{op} has no emulated path (its fast kernel is a library's: cuBLASLt, cuDNN, \
         FlashAttention); use Path::Reference or Path::Auto on a CPU"
    )
}

/// What one fused op did in this process: how often each path ran (where the op counts it)
/// and why the fast path fell back, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathReport {
    /// The method that uses the op (`methods.<name>`).
    pub method: &'static str,
    /// The fast kernel's name.
    pub fast: &'static str,
    /// Calls that ran the fast kernel and the reference path, where the op counts them.
    pub counts: Option<(i64, i64)>,
    /// The first reason the fast path fell back to the reference one (or was found unusable).
    pub fallback: Option<String>,
}

/// What every fused op did in this process, in one report (the GPU checks print it; training
/// warns once per op through `warn_fallback_once`).
pub fn report() -> Vec<PathReport> {
    vec![
        PathReport {
            method: "fused_bn_relu",
            fast: "cuDNN's fused BN+add+ReLU",
            counts: Some(bn_relu::counts()),
            fallback: bn_relu::fallback_reason(),
        },
        PathReport {
            method: "fused_epilogues",
            fast: "the NVRTC epilogue kernels",
            counts: None,
            fallback: epilogue::fallback_reason(),
        },
        PathReport {
            method: "fused_bias_gelu",
            fast: "cuBLASLt's GELU epilogues",
            counts: None,
            fallback: bias_gelu::fallback_reason(),
        },
        PathReport {
            method: "unpad",
            fast: "FlashAttention's varlen kernel",
            counts: None,
            fallback: varlen_attention::fallback_reason(),
        },
    ]
}

/// One warning per process and op (`warned` is the op's flag) when its fast path fell back:
/// `methods.<method>: <what>: <why>` (the first line of why). `why` asks for the reason (None:
/// no fallback yet); it is not asked once the op has warned, so after the warning a call costs
/// one atomic load.
pub(crate) fn warn_fallback_once(
    warned: &AtomicBool,
    method: &str,
    what: &str,
    why: impl FnOnce() -> Option<String>,
) {
    if warned.load(Ordering::Relaxed) {
        return;
    }
    if let Some(why) = why() {
        if !warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "methods.{method}: {what}: {}",
                why.lines().next().unwrap_or("")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_path_choice_maps_to_the_shim_modes_and_emulation_is_refused_where_absent() {
        let codes: Vec<c_int> = [Path::Auto, Path::Reference, Path::Fast, Path::Emulated]
            .iter()
            .map(|p| p.code())
            .collect();
        assert_eq!(codes, [0, 1, 2, 3]);
        assert_eq!(Path::default(), Path::Auto);
        let e = Path::Emulated
            .refuse_emulated("varlen attention")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("varlen attention has no emulated path"),
            "{e}"
        );
        Path::Fast.refuse_emulated("x").unwrap();
    }

    #[test]
    fn the_report_names_every_fused_op_once() {
        let r = report();
        let methods: Vec<&str> = r.iter().map(|x| x.method).collect();
        assert_eq!(
            methods,
            [
                "fused_bn_relu",
                "fused_epilogues",
                "fused_bias_gelu",
                "unpad"
            ]
        );
        // fused BN+ReLU counts its paths; the others report only why they fell back
        assert!(r[0].counts.is_some() && r[1..].iter().all(|x| x.counts.is_none()));
    }
}
