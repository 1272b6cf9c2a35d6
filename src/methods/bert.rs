//! BERT-Large's methods (`[methods]` of configs/bert/*.toml): one struct, passed whole to the
//! model ([`crate::models::bert::BertForPreTraining::new`]) and the trainer, each method
//! declared once in [`BertMethods::declared`].

use super::declare::{Closed, Method, MethodSet};
use super::{Amp, NUMBER_FORMAT, SAME_MATH};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BertMethods {
    /// Dense layers on non-padding tokens only.
    pub unpad: bool,
    /// scaled_dot_product_attention (fused kernels) instead of explicit softmax attention.
    pub fused_attention: bool,
    /// Mixed precision: "bf16" runs the forward passes in a bf16 autocast region (matmuls in
    /// bf16; LayerNorm, softmax, losses and the weights in fp32), the GPU speed-up; it runs on
    /// the CPU too (slowly there, for tests). "none": fp32. ("fp16" needs loss scaling, which
    /// the BERT trainer does not have: refused.) The old `bf16 = true` still reads as
    /// `amp = "bf16"`, with a warning ([`migrate_legacy_keys`]).
    pub amp: Amp,
    /// Capture the training step in a CUDA graph and replay it (GPU only, fixed shapes: not
    /// with `unpad`; changes no math). See [`crate::gpu::cuda_graph`].
    pub cuda_graph: bool,
    /// Each encoder layer's "dense bias + dropout + residual + LayerNorm" as one autograd op
    /// (CUDA kernels compiled at run time, the composite ATen twin elsewhere); changes no math
    /// beyond rounding. See [`crate::fused::epilogue`].
    pub fused_epilogues: bool,
    /// Each encoder layer's query, key and value projections as one matmul over the three
    /// weights concatenated (the parameters and their names stay three); the same math. See
    /// [`crate::models::bert`].
    pub fused_qkv: bool,
    /// With `amp = "bf16"`: the residual stream between encoder layers (every LayerNorm output)
    /// in bf16 instead of autocast's fp32 (LayerNorm still computes in fp32); a choice of number
    /// format. See [`crate::models::bert`].
    pub bf16_residual: bool,
    /// Each encoder layer's feed-forward matmuls with the intermediate bias and a tanh GELU in
    /// their epilogues, as one op (cuBLASLt's GELU_AUX_BIAS / DGELU_BGRAD on a GPU, the
    /// composite ATen twin elsewhere). The reference's GELU is the erf form. See
    /// [`crate::fused::bias_gelu`].
    pub fused_bias_gelu: bool,
    /// Token load balance: each global micro-batch is dealt out to the ranks in equal sample
    /// counts by non-padding token count ([`crate::data::bert::balance`]); with `unpad` only.
    pub balance_tokens: bool,
    /// Packed sequences: the training sequences packed at load time into fixed rows of the
    /// data's sequence length, at most 3 per row, attention kept within each sequence
    /// ([`crate::data::bert::packing`]); a step has one shape (CUDA graphs) and almost no
    /// padding. Not with `unpad` (nothing left to remove) or `balance_tokens` (rows of equal
    /// token budget are balanced already).
    pub packing: bool,
    /// The encoder's linear layers (query, key, value, attention output, feed-forward in and
    /// out) in FP8 with delayed scaling, Transformer Engine's HYBRID recipe: E4M3 activations
    /// and weights, E5M2 gradients, per-tensor scales from an amax history, fp32 accumulation,
    /// bf16 out; master weights and LAMB unchanged. Needs a GPU with FP8 tensor cores
    /// (refused elsewhere before the run; tests: `MLPERF_RUN_TEST_EMULATE_FP8=1`). See
    /// [`crate::fused::fp8`].
    pub fp8: bool,
    /// With `fp8`: the steps of amax history each scale comes from (Transformer Engine's
    /// default, 1024).
    pub fp8_amax_history_len: i64,
    /// With `fp8`: the scales' margin, `fp8_max / amax / 2^margin` (Transformer Engine's
    /// default, 0).
    pub fp8_margin: i64,
    /// With `fp8` on several processes: each step's amaxes are reduced (max) across the ranks
    /// before the scales are updated, so every rank casts with the same scales (Transformer
    /// Engine's `reduce_amax`, default on). Off: each rank keeps its own.
    pub fp8_reduce_amax: bool,
}

/// The defaults of every key left out (all off, `amp` none) but `fused_attention`, on.
impl Default for BertMethods {
    fn default() -> Self {
        BertMethods {
            unpad: false,
            fused_attention: true,
            amp: Amp::None,
            cuda_graph: false,
            fused_epilogues: false,
            fused_qkv: false,
            bf16_residual: false,
            fused_bias_gelu: false,
            balance_tokens: false,
            packing: false,
            fp8: false,
            // Transformer Engine's DelayedScaling defaults (`fused::fp8::Recipe::default()`)
            fp8_amax_history_len: 1024,
            fp8_margin: 0,
            fp8_reduce_amax: true,
        }
    }
}

impl MethodSet for BertMethods {
    fn declared(&self) -> Vec<Method> {
        use Closed::{Allowed, OpenOnly};
        vec![
            Method::switch(
                "unpad",
                self.unpad,
                Allowed(
                    "the same math on the real tokens only: unpadding was agreed as allowed by \
                     the submitters' working group (training_policies issue 376)",
                ),
                "method_unpad",
            ),
            Method::switch(
                "fused_attention",
                self.fused_attention,
                Allowed(SAME_MATH),
                "method_fused_attention",
            ),
            // logged under its old key `method_bf16` (true for amp = "bf16"), so logs and
            // recorded sets compare across versions
            Method::new(
                "amp",
                self.amp != Amp::None,
                Allowed(NUMBER_FORMAT),
                Some("method_bf16"),
                json!(self.amp == Amp::Bf16),
            ),
            Method::switch(
                "fused_epilogues",
                self.fused_epilogues,
                Allowed(SAME_MATH),
                "method_fused_epilogues",
            ),
            Method::switch(
                "fused_qkv",
                self.fused_qkv,
                Allowed(SAME_MATH),
                "method_fused_qkv",
            ),
            Method::switch(
                "bf16_residual",
                self.bf16_residual,
                Allowed(NUMBER_FORMAT),
                "method_bf16_residual",
            ),
            Method::switch(
                "fused_bias_gelu",
                self.fused_bias_gelu,
                OpenOnly(
                    "its GELU is the tanh approximation cuBLASLt fuses; the reference's is the \
                     erf form, another function",
                ),
                "method_fused_bias_gelu",
            ),
            Method::switch(
                "balance_tokens",
                self.balance_tokens,
                Allowed(
                    "it deals the same global batch among the ranks in equal counts: the rules \
                     allow arbitrary sharding and batching while the data stays randomly ordered \
                     and each sample is seen once",
                ),
                "method_balance_tokens",
            ),
            Method::switch(
                "packing",
                self.packing,
                Allowed(
                    "the rules allow \"arbitrary sharding, batching, and packing ... provided that \
                     the data is still overall randomly ordered and each datum still appears \
                     exactly once\"; attention stays within each sequence, so the math is the \
                     reference's",
                ),
                "method_packing",
            ),
            Method::switch(
                "fp8",
                self.fp8,
                Allowed(
                    "a number format: the rules (training_rules.adoc, \"Numerical formats\") \
                     pre-approve fp64, fp32, tf32, fp16, fp8 and bfloat16, with scaling where the \
                     precision needs it (its delayed per-tensor scales); the model function and \
                     the optimizer are the reference's",
                ),
                "method_fp8",
            ),
            Method::cuda_graph(self.cuda_graph),
        ]
    }
}

impl BertMethods {
    /// Settings that cannot run together, named with the fix.
    pub fn validate(&self) -> Result<()> {
        if self.amp == Amp::Fp16 {
            bail!(
                "methods.amp = \"fp16\" is not available for bert (it needs loss scaling, which the \
                 BERT trainer does not have): use amp = \"bf16\" or \"none\""
            );
        }
        if self.cuda_graph && self.unpad {
            bail!(
                "methods.cuda_graph = true needs fixed tensor shapes, and methods.unpad = true \
                 changes the token count every step: turn one of them off (methods.packing = \
                 true removes the padding with fixed shapes, and works with cuda_graph)"
            );
        }
        if self.bf16_residual && self.amp != Amp::Bf16 {
            bail!(
                "methods.bf16_residual = true keeps the residual stream in bf16 inside bf16 \
                 autocast: set methods.amp = \"bf16\" as well, or remove it"
            );
        }
        if self.packing && self.unpad {
            bail!(
                "methods.packing = true leaves almost no padding for methods.unpad to remove (and \
                 keeps the fixed shapes that cuda_graph needs): turn methods.unpad off"
            );
        }
        if self.balance_tokens && !self.unpad {
            bail!(
                "methods.balance_tokens balances non-padding tokens, which only set a rank's \
                 step time with methods.unpad = true: set both or neither"
            );
        }
        if self.fp8 && self.fused_bias_gelu {
            bail!(
                "methods.fp8 runs the feed-forward matmuls in FP8 and methods.fused_bias_gelu in \
                 cuBLASLt's bf16 epilogues: turn one of them off"
            );
        }
        if self.fp8_amax_history_len < 1 || self.fp8_margin < 0 {
            bail!(
                "methods.fp8_amax_history_len must be >= 1 and methods.fp8_margin >= 0 (got {} \
                 and {})",
                self.fp8_amax_history_len,
                self.fp8_margin
            );
        }
        Ok(())
    }

    /// With `fp8`: refuse a model whose encoder linears `_scaled_mm` cannot multiply. Its CUDA
    /// kernel (ATen's `_scaled_mm_out_cuda`) wants mat1's inner dimension and both of mat2's a
    /// multiple of 16, and each linear's three GEMMs (forward `x W^T`, `dx = g W`, `dW = g^T x`)
    /// put the weight's two dimensions there: hidden x hidden, hidden x 3 hidden (fused QKV),
    /// hidden x intermediate and back. (The token count the op pads itself.) Refused here for
    /// every path, the emulated one too, so a CPU run of a config fails as its GPU run would,
    /// before the run instead of at its first step.
    pub fn check_fp8_shapes(&self, hidden_size: i64, intermediate_size: i64) -> Result<()> {
        if !self.fp8 {
            return Ok(());
        }
        for (name, v) in [
            ("hidden_size", hidden_size),
            ("intermediate_size", intermediate_size),
        ] {
            if v % 16 != 0 {
                bail!(
                    "methods.fp8 needs model.{name} to be a multiple of 16 (got {v}): \
                     _scaled_mm (cuBLASLt's FP8 GEMM) multiplies only matrices whose dimensions \
                     are multiples of 16; change the model's size or turn methods.fp8 off"
                );
            }
        }
        Ok(())
    }

    /// The FP8 recipe's settings.
    #[cfg(feature = "torch")]
    pub fn fp8_recipe(&self) -> crate::fused::fp8::Recipe {
        crate::fused::fp8::Recipe {
            amax_history_len: self.fp8_amax_history_len,
            margin: self.fp8_margin,
            reduce_amax: self.fp8_reduce_amax,
        }
    }

    /// bf16 autocast is on.
    pub fn bf16(&self) -> bool {
        self.amp == Amp::Bf16
    }
}

/// Rewrites keys of older configs in a parsed `[methods]` table to today's, returning one
/// warning per rewrite that names the new key: `bf16 = true` becomes `amp = "bf16"` (false:
/// `amp = "none"`). A table that sets both, differently, is refused.
pub fn migrate_legacy_keys(methods: &mut toml::Table) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    if let Some(old) = methods.remove("bf16") {
        let Some(on) = old.as_bool() else {
            bail!("methods.bf16 must be true or false (better: methods.amp = \"bf16\" | \"none\")");
        };
        let amp = if on { "bf16" } else { "none" };
        match methods.get("amp").and_then(|v| v.as_str()) {
            Some(a) if a != amp => bail!(
                "methods.bf16 = {on} and methods.amp = \"{a}\" disagree: remove methods.bf16 \
                 (methods.amp is the key now)"
            ),
            _ => {}
        }
        methods.insert("amp".into(), toml::Value::String(amp.into()));
        warnings.push(format!(
            "methods.bf16 = {on} is the old key: write methods.amp = \"{amp}\" instead"
        ));
    }
    Ok(warnings)
}

#[cfg(test)]
mod fp8_shape_tests {
    use super::BertMethods;

    /// `_scaled_mm` multiplies only dimensions that are multiples of 16: a model whose hidden or
    /// intermediate size is not is refused with methods.fp8 (and kept without it).
    #[test]
    fn fp8_refuses_linear_sizes_that_are_not_multiples_of_16() {
        let fp8 = BertMethods {
            fp8: true,
            ..BertMethods::default()
        };
        // BERT-Large and the tiny presets
        for (h, i) in [(1024, 4096), (32, 128), (32, 64), (128, 512)] {
            fp8.check_fp8_shapes(h, i).unwrap();
        }
        for (h, i, field) in [
            (24, 128, "model.hidden_size"),
            (32, 100, "model.intermediate_size"),
            (1000, 4096, "model.hidden_size"),
        ] {
            let e = fp8.check_fp8_shapes(h, i).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("multiple of 16"), "{e}");
        }
        BertMethods::default().check_fp8_shapes(24, 100).unwrap();
    }
}

#[cfg(all(test, feature = "torch"))]
mod fp8_tests {
    #[test]
    fn the_fp8_defaults_are_the_recipe_defaults() {
        assert_eq!(
            super::BertMethods::default().fp8_recipe(),
            crate::fused::fp8::Recipe::default()
        );
    }
}
