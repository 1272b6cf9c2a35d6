//! BERT for pre-training (masked LM + next-sentence prediction), as the MLPerf reference has it.
//!
//! Architecture (post-LayerNorm BERT, Devlin et al.; the MLPerf phase-2 reference model):
//! embeddings (word + position + token type) -> LayerNorm -> dropout; `num_layers` encoder layers
//! of self-attention (query/key/value projections, `scaled_dot_product_attention`, output dense,
//! dropout, residual, LayerNorm) and a feed-forward block (dense, erf-GELU, dense, dropout,
//! residual, LayerNorm); a pooler (dense + tanh on the first token) feeding the NSP classifier
//! `cls.seq_relationship`; and the MLM head (dense, GELU, LayerNorm, then a decoder whose weight
//! is tied to the word embeddings, plus its own bias `cls.predictions.bias`).
//!
//! # Parameter names and the checkpoint name map
//! Our variables carry the reference's (HuggingFace / NVIDIA `modeling.py`) names, so the map
//! from a converted reference checkpoint (see `scripts/convert_bert_checkpoint`) to ours is
//! the identity after these canonicalisations, applied by [`BertForPreTraining::load_reference`]:
//!
//! | checkpoint name                                  | ours                                 |
//! |--------------------------------------------------|--------------------------------------|
//! | `module.X` / `model.X` (DDP / wrapper prefixes)  | `X`                                  |
//! | `*.dense_act.*` (NVIDIA's fused LinearActivation) | `*.dense.*`                          |
//! | `*LayerNorm.gamma` / `*LayerNorm.beta` (old TF port) | `*LayerNorm.weight` / `*LayerNorm.bias` |
//! | `cls.predictions.decoder.weight`                 | tied: must equal `bert.embeddings.word_embeddings.weight`; not stored |
//! | `bert.embeddings.position_ids` (buffer)          | ignored                              |
//!
//! Everything else keeps its name, e.g. `bert.encoder.layer.N.attention.self.query.weight`,
//! `bert.encoder.layer.N.attention.output.LayerNorm.weight`, `bert.encoder.layer.N.intermediate.dense.weight`,
//! `bert.encoder.layer.N.output.dense.bias`, `bert.pooler.dense.weight`,
//! `cls.predictions.transform.dense.weight`, `cls.predictions.transform.LayerNorm.bias`,
//! `cls.predictions.bias`, `cls.seq_relationship.weight`. A checkpoint with the unpadded
//! vocabulary (30,522 rows) loads into a model padded to 30,528: the extra embedding rows and
//! decoder-bias entries are set to zero.
//!
//! # Parameter count
//! With V vocab, H hidden, L layers, I intermediate, P positions, T token types:
//! `V*H + P*H + T*H + 2H` (embeddings) `+ L*(4*(H*H+H) + 2*(H*I) + I + H + 4H)` (layers)
//! `+ H*H + H` (pooler) `+ H*H + H + 2H + V` (MLM transform, LayerNorm, bias; decoder tied)
//! `+ 2H + 2` (NSP). BERT-Large at V=30,522: 336,226,108; at V=30,528: 336,232,258.
//!
//! # Methods (`[methods]`; each one's division and why: docs/methods.md)
//! - `unpad`: the embeddings' output is gathered to the non-padding tokens (`[T, H]`); every
//!   dense layer, LayerNorm, GELU and dropout runs on those T tokens only. Attention runs within
//!   each packed sequence ([`crate::fused::varlen_attention`]): FlashAttention's varlen kernel on a GPU
//!   in bf16 / fp16; elsewhere q/k/v are scattered back to `[B, S]` for
//!   `scaled_dot_product_attention` with the key-padding mask and the output gathered again.
//! - bf16: run `forward` inside [`crate::gpu::amp::Autocast`] (bf16): the matmuls (linear layers,
//!   attention, decoder) run in bf16 while weights, LayerNorm and the losses stay fp32; the
//!   outputs (logits) come back in fp32 either way.
//! - `fused_epilogues`: in every encoder layer, the attention output's and the feed-forward
//!   output's "dense bias + dropout + residual + LayerNorm" run as one autograd op
//!   ([`crate::fused::epilogue`]; both the padded `[B*S, H]` and the unpadded `[T, H]` path),
//!   and so do the intermediate dense's bias + (erf) GELU (the same math; with the CUDA kernels
//!   one pass forward and one backward that also sums the bias's gradient).
//! - `fused_qkv`: every encoder layer's query, key and value projections as one matmul over the
//!   three weights concatenated (`[3H, H]`), its output viewed as the three heads' tensors; the
//!   parameters and their names stay the reference's. On the CUDA kernel path its backward puts
//!   the three gradients side by side and sums the bias's gradient in one kernel
//!   ([`crate::fused::epilogue::qkv_projection`]).
//! - `bf16_residual` (with bf16 autocast): the residual stream (each LayerNorm's output, the
//!   encoder's output) in bf16 rather than fp32: computed in fp32, rounded once. Under plain
//!   autocast every layer casts it to bf16 for its matmuls (query, key and value each their
//!   own cast) and carries fp32 gradients back; NVIDIA's MLPerf BERT keeps it in half precision.
//! - `fused_bias_gelu` (open division): every encoder layer's feed-forward matmuls with the
//!   intermediate bias and a tanh GELU fused into them, as one op ([`crate::fused::bias_gelu`]:
//!   cuBLASLt's GELU_AUX_BIAS / DGELU_BGRAD epilogues on a GPU).

mod parts;

pub use parts::KernelSwitches;

use crate::fused::fp8::Fp8State;
use crate::fused::varlen_attention::{PackedRows, Packing};
use crate::methods::BertMethods;
use anyhow::{bail, Context, Result};
use parts::{Dense, Dropout, Layer, LayerCall, LayerNorm, Parts, Tokens};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tch::nn::{Init, Path as VPath};
use tch::{Device, Kind, Tensor};

/// Model shape. `BertConfig::large()` is the MLPerf model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BertConfig {
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub num_layers: i64,
    pub num_heads: i64,
    pub intermediate_size: i64,
    #[serde(default = "default_max_position")]
    pub max_position: i64,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: i64,
    #[serde(default = "default_dropout")]
    pub hidden_dropout: f64,
    #[serde(default = "default_dropout")]
    pub attention_dropout: f64,
    #[serde(default = "default_ln_eps")]
    pub layer_norm_eps: f64,
}

fn default_max_position() -> i64 {
    512
}
fn default_type_vocab() -> i64 {
    2
}
fn default_dropout() -> f64 {
    0.1
}
fn default_ln_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// BERT-Large as MLPerf trains it (uncased vocabulary of 30,522; NVIDIA pads to 30,528).
    pub fn large() -> Self {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 1024,
            num_layers: 24,
            num_heads: 16,
            intermediate_size: 4096,
            max_position: 512,
            type_vocab_size: 2,
            hidden_dropout: 0.1,
            attention_dropout: 0.1,
            layer_norm_eps: 1e-12,
        }
    }

    /// BERT-Base (12 layers, hidden 768, 12 heads, intermediate 3072).
    pub fn base() -> Self {
        BertConfig {
            hidden_size: 768,
            num_layers: 12,
            num_heads: 12,
            intermediate_size: 3072,
            ..Self::large()
        }
    }

    /// Check the shape is buildable; errors name the field.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position", self.max_position),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v <= 0 {
                bail!("model.{name} must be > 0 (got {v})");
            }
        }
        if self.hidden_size % self.num_heads != 0 {
            bail!(
                "model.hidden_size ({}) must be a multiple of model.num_heads ({})",
                self.hidden_size,
                self.num_heads
            );
        }
        for (name, p) in [
            ("hidden_dropout", self.hidden_dropout),
            ("attention_dropout", self.attention_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                bail!("model.{name} must be in [0, 1) (got {p})");
            }
        }
        Ok(())
    }

    /// The exact number of trainable parameters (formula in the module docs). Counted in f64,
    /// exact while under 2^53 (every term is a positive integer); an absurd shape (a hidden size
    /// of a million) saturates at `i64::MAX` instead of overflowing.
    pub fn param_count(&self) -> i64 {
        let f = |x: i64| x as f64;
        let (v, h, l, i, p, t) = (
            f(self.vocab_size),
            f(self.hidden_size),
            f(self.num_layers),
            f(self.intermediate_size),
            f(self.max_position),
            f(self.type_vocab_size),
        );
        let embeddings = v * h + p * h + t * h + 2.0 * h;
        let layer = 4.0 * (h * h + h) + 2.0 * (h * i) + i + h + 4.0 * h;
        let pooler = h * h + h;
        let mlm = h * h + h + 2.0 * h + v;
        let nsp = 2.0 * h + 2.0;
        (embeddings + l * layer + pooler + mlm + nsp) as i64
    }
}

/// BERT with the pre-training heads (MLM + NSP).
#[derive(Debug)]
pub struct BertForPreTraining {
    pub config: BertConfig,
    word_emb: Tensor,
    pos_emb: Tensor,
    type_emb: Tensor,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    pooler: Dense,
    transform: Dense,
    transform_ln: LayerNorm,
    mlm_bias: Tensor,
    nsp: Dense,
    /// The methods this model runs with (`[methods]` of the config, whole): unpadding, fused
    /// attention, fused epilogues, fused QKV, the bf16 residual stream, fused bias + GELU
    /// ([`crate::methods::BertMethods`]). Tests and benchmarks change it with
    /// [`Self::configure`], which chooses the layers' parts again.
    methods: BertMethods,
    /// The FP8 scales and amax histories of the encoder's linears (6 per layer, in the order
    /// query, key, value, attention output, intermediate, output; used with `methods.fp8`).
    fp8: Fp8State,
    /// The test- and benchmark-only kernel switches.
    kernels: KernelSwitches,
    /// Every encoder layer's parts, chosen from `methods` and `kernels`.
    parts: Parts,
}

/// One packed micro-batch as the model reads it (`methods.packing`;
/// [`crate::data::bert::packing`] has the layout): `R` rows of `S` tokens, at most `K` sequences
/// per row, `P` masked-LM slots per row.
pub struct PackedInputs<'a> {
    /// `[R, S]` token ids.
    pub input_ids: &'a Tensor,
    /// `[R, S]` each sequence's token types.
    pub segment_ids: &'a Tensor,
    /// `[R, S]` position ids, restarting at 0 for each sequence.
    pub position_ids: &'a Tensor,
    /// `[R, S]` the sequence slot of each token in its row (`K`: the padding tail).
    pub slots: &'a Tensor,
    /// `[R x (K + 1) + 1]` int32 offsets of the segments (the `K` slots and the tail of each row)
    /// in the `R x S` tokens.
    pub cu_seqlens: &'a Tensor,
    /// `[R, K]` each sequence's `[CLS]` position in its row.
    pub cls_positions: &'a Tensor,
    /// `[R, P]` masked positions within the row.
    pub masked_positions: &'a Tensor,
}

/// Masked positions per sequence for the MLM head, or the whole sequence.
pub enum MlmOn<'a> {
    /// `[B, P]` positions (int64); the head runs on these only.
    Positions(&'a Tensor),
    /// Every position (`[B, S, V]` logits; tests and debugging).
    All,
}

impl BertForPreTraining {
    /// Create the variables under `root` (use `vs.root()`) with the reference names.
    pub fn new(root: &VPath, config: &BertConfig, methods: &BertMethods) -> Result<Self> {
        config.validate()?;
        methods.check_fp8_shapes(config.hidden_size, config.intermediate_size)?;
        let c = config;
        let emb_init = Init::Randn {
            mean: 0.0,
            stdev: 0.02,
        };
        let bert = root / "bert";
        let e = &bert / "embeddings";
        let word_emb =
            (&e / "word_embeddings").var("weight", &[c.vocab_size, c.hidden_size], emb_init);
        let pos_emb =
            (&e / "position_embeddings").var("weight", &[c.max_position, c.hidden_size], emb_init);
        let type_emb = (&e / "token_type_embeddings").var(
            "weight",
            &[c.type_vocab_size, c.hidden_size],
            emb_init,
        );
        let emb_ln = LayerNorm::new(&e / "LayerNorm", c.hidden_size, c.layer_norm_eps);
        let mut layers = Vec::with_capacity(c.num_layers as usize);
        for n in 0..c.num_layers {
            let l = &bert / "encoder" / "layer" / n;
            let a = &l / "attention";
            let h = c.hidden_size;
            layers.push(Layer {
                query: Dense::new(&a / "self" / "query", h, h),
                key: Dense::new(&a / "self" / "key", h, h),
                value: Dense::new(&a / "self" / "value", h, h),
                attn_out: Dense::new(&a / "output" / "dense", h, h),
                attn_ln: LayerNorm::new(&a / "output" / "LayerNorm", h, c.layer_norm_eps),
                intermediate: Dense::new(&l / "intermediate" / "dense", h, c.intermediate_size),
                output: Dense::new(&l / "output" / "dense", c.intermediate_size, h),
                out_ln: LayerNorm::new(&l / "output" / "LayerNorm", h, c.layer_norm_eps),
            });
        }
        let fp8 = Fp8State::new(6 * c.num_layers, methods.fp8_recipe(), root.device());
        for (i, l) in layers.iter_mut().enumerate() {
            let dense = [
                &mut l.query,
                &mut l.key,
                &mut l.value,
                &mut l.attn_out,
                &mut l.intermediate,
                &mut l.output,
            ];
            for (j, d) in dense.into_iter().enumerate() {
                d.fp8 = Some(fp8.slot((6 * i + j) as i64));
            }
        }
        let pooler = Dense::new(&bert / "pooler" / "dense", c.hidden_size, c.hidden_size);
        let cls = root / "cls";
        let pred = &cls / "predictions";
        let transform = Dense::new(&pred / "transform" / "dense", c.hidden_size, c.hidden_size);
        let transform_ln = LayerNorm::new(
            &pred / "transform" / "LayerNorm",
            c.hidden_size,
            c.layer_norm_eps,
        );
        let mlm_bias = pred.var("bias", &[c.vocab_size], Init::Const(0.0));
        let nsp = Dense::new(&cls / "seq_relationship", c.hidden_size, 2);
        Ok(BertForPreTraining {
            methods: methods.clone(),
            config: c.clone(),
            word_emb,
            pos_emb,
            type_emb,
            emb_ln,
            layers,
            pooler,
            transform,
            transform_ln,
            mlm_bias,
            nsp,
            fp8,
            kernels: KernelSwitches::default(),
            parts: Parts::choose(methods, &KernelSwitches::default()),
        })
    }

    /// The methods this model runs with.
    pub fn methods(&self) -> &BertMethods {
        &self.methods
    }

    /// The kernel switches this model runs with.
    pub fn kernels(&self) -> &KernelSwitches {
        &self.kernels
    }

    /// Change the methods and kernel switches (tests and benchmarks: `|m, k| m.unpad = true`)
    /// and choose the layers' parts again. The parameters stay as they are.
    pub fn configure(&mut self, change: impl FnOnce(&mut BertMethods, &mut KernelSwitches)) {
        change(&mut self.methods, &mut self.kernels);
        self.parts = Parts::choose(&self.methods, &self.kernels);
    }

    /// After a training step with `methods.fp8`: the delayed-scaling update of every FP8
    /// linear's scales from its amax history ([`Fp8State::update`]; on the device, capturable
    /// in the step's CUDA graph). Nothing without `fp8`.
    pub fn fp8_update(&self) {
        if self.methods.fp8 {
            self.fp8.update();
        }
    }

    /// With `methods.fp8` and `fp8_reduce_amax`: this step's amaxes (a view of the history),
    /// to be reduced (max) across the ranks before [`Self::fp8_update`].
    pub fn fp8_amax_to_reduce(&self) -> Option<Tensor> {
        (self.methods.fp8 && self.methods.fp8_reduce_amax).then(|| self.fp8.step_amax())
    }

    /// The FP8 scales and amax histories (tests and the GPU check).
    pub fn fp8_state(&self) -> &Fp8State {
        &self.fp8
    }

    /// Every encoder layer on `x` over `tokens`.
    fn encoder(&self, mut x: Tensor, tokens: Tokens<'_>, train: bool) -> Result<Tensor> {
        let c = &self.config;
        let call = LayerCall {
            heads: c.num_heads,
            tokens,
            attention_p: if train { c.attention_dropout } else { 0.0 },
            hidden: Dropout {
                p: c.hidden_dropout,
                train,
            },
        };
        // a layer's input as its FP8 projections read it, cast by the tail before
        let mut cast = None;
        for (i, layer) in self.layers.iter().enumerate() {
            let next = self
                .layers
                .get(i + 1)
                .and_then(|l| self.parts.cast_for_layer(l));
            let (y, c) = layer.forward(&self.parts, &x, cast.as_ref(), next, call)?;
            x = y;
            cast = c;
        }
        Ok(x)
    }

    /// Whether a padded batch runs on the unpadded path (its padding left out): with `unpad`, and
    /// with `packing` when not training. Packing's training rows come through
    /// [`Self::forward_packed`]; the eval set is not packed, and leaving its padding out (about
    /// half of its tokens at sequence length 512) is the same exact saving, with no shape to
    /// keep fixed (the eval is not captured in a CUDA graph).
    pub fn runs_unpadded(&self, train: bool) -> bool {
        self.methods.unpad || (self.methods.packing && !train)
    }

    /// The encoder's output `[B, S, H]` (fp32; bf16 with `bf16_residual`). Padding rows are zeros
    /// on the unpadded path ([`Self::runs_unpadded`]).
    /// `input_mask` (`[B, S]`, 1 = real token) is `None` when every token of the batch is real:
    /// the attention then runs without a mask, which lets `scaled_dot_product_attention` take
    /// FlashAttention on a GPU (it refuses any mask, even one of all ones, and the
    /// memory-efficient kernel it falls back to is slower). Same math either way.
    pub fn encode(
        &self,
        input_ids: &Tensor,
        segment_ids: &Tensor,
        input_mask: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, s) = input_ids
            .size2()
            .context("input_ids must be [batch, seq]")?;
        let h = c.hidden_size;
        let positions = Tensor::arange(s, (Kind::Int64, input_ids.device()));
        let emb = Tensor::embedding(&self.word_emb, input_ids, -1, false, false)
            + Tensor::embedding(&self.pos_emb, &positions, -1, false, false).unsqueeze(0)
            + Tensor::embedding(&self.type_emb, segment_ids, -1, false, false);
        // without padding there is nothing to leave out: the padded path is the unpadded one
        if let (true, Some(input_mask)) = (self.runs_unpadded(train), input_mask) {
            let pack = Packing::from_mask(input_mask);
            let x = self
                .stream(
                    self.emb_ln
                        .forward(&emb.view([b * s, h]).index_select(0, &pack.idx)),
                )
                .dropout(c.hidden_dropout, train);
            let x = self.encoder(x, Tokens::Packed(&pack), train)?;
            Ok(Tensor::zeros([b * s, h], (x.kind(), x.device()))
                .index_copy(0, &pack.idx, &x)
                .view([b, s, h]))
        } else {
            let x = self
                .stream(self.emb_ln.forward(&emb))
                .dropout(c.hidden_dropout, train)
                .view([b * s, h]);
            // SDPA boolean mask: true = attend; [B, 1, 1, S] broadcasts over heads and queries
            let attn_mask = input_mask.map(|m| m.ne(0).view([b, 1, 1, s]));
            // no padding and flash_varlen_unpadded: B sequences of S tokens, packed already
            let full = (input_mask.is_none()
                && self.kernels.flash_varlen_unpadded
                && self.methods.fused_attention)
                .then(|| Packing::full(b, s, input_ids.device()));
            let tokens = match &full {
                Some(pack) => Tokens::Packed(pack),
                None => Tokens::Padded {
                    mask: attn_mask.as_ref(),
                    b,
                    s,
                },
            };
            Ok(self.encoder(x, tokens, train)?.view([b, s, h]))
        }
    }

    /// The encoder's output `[R, S, H]` on packed rows (`methods.packing`): position ids and
    /// token types per sequence, attention within each sequence ([`crate::fused::varlen_attention::rows_attention`]).
    pub fn encode_packed(&self, x: &PackedInputs<'_>, train: bool) -> Result<Tensor> {
        let c = &self.config;
        let (r, s) = x
            .input_ids
            .size2()
            .context("packed input_ids must be [rows, seq]")?;
        let h = c.hidden_size;
        let emb = Tensor::embedding(&self.word_emb, x.input_ids, -1, false, false)
            + Tensor::embedding(&self.pos_emb, x.position_ids, -1, false, false)
            + Tensor::embedding(&self.type_emb, x.segment_ids, -1, false, false);
        let rows = PackedRows::new(x.cu_seqlens, x.slots)?;
        let t = self
            .stream(self.emb_ln.forward(&emb))
            .dropout(c.hidden_dropout, train)
            .view([r * s, h]);
        Ok(self.encoder(t, Tokens::Rows(&rows), train)?.view([r, s, h]))
    }

    /// MLM logits `[R, P, V]` (the masked slots of each row) and NSP logits `[R x K, 2]` (each
    /// sequence slot's, from its own `[CLS]` token) of packed rows.
    pub fn forward_packed(&self, x: &PackedInputs<'_>, train: bool) -> Result<(Tensor, Tensor)> {
        let seq = self.encode_packed(x, train)?;
        let (r, k) = x
            .cls_positions
            .size2()
            .context("cls_positions must be [rows, sequences]")?;
        let h = self.config.hidden_size;
        let cls = seq.gather(
            1,
            &x.cls_positions.unsqueeze(-1).expand([r, k, h], false),
            false,
        );
        let nsp = self.nsp_head(&cls.view([r * k, h]));
        Ok((
            self.mlm_head(&seq, MlmOn::Positions(x.masked_positions))?,
            nsp,
        ))
    }

    /// A LayerNorm's output as the residual stream carries it: bf16 with `bf16_residual`, else
    /// as it is (fp32 under autocast, as layer_norm's policy returns it).
    fn stream(&self, t: Tensor) -> Tensor {
        parts::to_stream(t, self.methods.bf16_residual.then_some(Kind::BFloat16))
    }

    /// MLM logits (`[B, P, V]` at `Positions`, `[B, S, V]` for `All`) and NSP logits `[B, 2]`.
    /// `input_mask` as for [`Self::encode`]: `None` when no token of the batch is padding.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        segment_ids: &Tensor,
        input_mask: Option<&Tensor>,
        mlm_on: MlmOn<'_>,
        train: bool,
    ) -> Result<(Tensor, Tensor)> {
        let seq = self.encode(input_ids, segment_ids, input_mask, train)?;
        let nsp = self.nsp_head(&seq.select(1, 0));
        Ok((self.mlm_head(&seq, mlm_on)?, nsp))
    }

    /// The NSP head on `[CLS]` tokens' encoder outputs (`[N, H]`): pooler (dense + tanh), then the
    /// two logits, fp32.
    fn nsp_head(&self, cls: &Tensor) -> Tensor {
        let pooled = self.pooler.forward(cls).tanh();
        self.nsp.forward(&pooled).to_kind(Kind::Float)
    }

    /// The MLM head on the encoder's output `seq` (`[B, S, H]`): logits at the masked positions
    /// (`[B, P, V]`) or everywhere (`[B, S, V]`), fp32.
    fn mlm_head(&self, seq: &Tensor, mlm_on: MlmOn<'_>) -> Result<Tensor> {
        let picked = match mlm_on {
            MlmOn::Positions(pos) => {
                let (b, p) = pos
                    .size2()
                    .context("masked positions must be [batch, predictions]")?;
                seq.gather(
                    1,
                    &pos.unsqueeze(-1)
                        .expand([b, p, self.config.hidden_size], false),
                    false,
                )
            }
            MlmOn::All => seq.shallow_clone(),
        };
        let t = self
            .transform_ln
            .forward(&self.transform.forward(&picked).gelu("none"));
        // linear (not matmul with word_emb.tr()): its weight gradient comes out [V, H]
        // contiguous, so adding it to the embedding's gradient is a streaming pass.
        Ok(t.linear(&self.word_emb, Some(&self.mlm_bias))
            .to_kind(Kind::Float))
    }

    /// Whether `path` can be a converted reference checkpoint: a regular file in the
    /// safetensors layout (a little-endian u64 header length, then a JSON object of that many
    /// bytes, then the tensors' bytes). Read before a run starts, so that a missing, truncated
    /// or foreign file is bad input (exit 2) rather than every run of a set ending aborted in
    /// [`BertForPreTraining::load_reference`].
    pub fn check_reference_file(path: &Path) -> Result<()> {
        use std::io::Read;
        let convert = "convert the reference .pt checkpoint with scripts/convert_bert_checkpoint \
                       IN.pt OUT.safetensors";
        let p = path.display();
        if path.is_dir() {
            bail!("{p} is a folder: give the checkpoint file (.safetensors); {convert}");
        }
        let (mut file, len) = crate::util::tree::open_regular(path)?;
        let mut head = [0u8; 8];
        if len < 8 || file.read_exact(&mut head).is_err() {
            bail!("{p}: {len} bytes, too short for a safetensors file: {convert}");
        }
        let n = u64::from_le_bytes(head);
        if n < 2 || n > len - 8 || n > 100 << 20 {
            bail!(
                "{p} is not a safetensors file (its first 8 bytes give a header of {n} bytes in a \
                 file of {len}): {convert}"
            );
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|e| crate::util::tree::io_error(path, &e))?;
        let parsed: std::result::Result<serde_json::Map<String, serde_json::Value>, _> =
            serde_json::from_slice(&header);
        if let Err(e) = parsed {
            bail!(
                "{p} is not a safetensors file (its header is not a JSON object: {e}): {convert}"
            );
        }
        Ok(())
    }

    /// Load a converted reference checkpoint (safetensors) into the variables of `vs`.
    /// Names are mapped as the module docs describe; a missing, unexpected or mis-shaped tensor
    /// is an error naming it.
    pub fn load_reference(&self, vs: &tch::nn::VarStore, path: &Path) -> Result<LoadReport> {
        let tensors = Tensor::read_safetensors(path).with_context(|| {
            format!(
                "cannot read {} as safetensors (convert the reference .pt checkpoint first: \
                 scripts/convert_bert_checkpoint IN.pt OUT.safetensors)",
                path.display()
            )
        })?;
        let mut ckpt: BTreeMap<String, Tensor> = BTreeMap::new();
        let mut report = LoadReport::default();
        for (name, t) in tensors {
            let canon = canonical_name(&name);
            if canon == "bert.embeddings.position_ids" {
                report.ignored.push(name);
                continue;
            }
            if ckpt.insert(canon.clone(), t).is_some() {
                bail!(
                    "{}: two tensors map to the same name '{canon}' (one is '{name}')",
                    path.display()
                );
            }
        }
        let decoder = ckpt.remove("cls.predictions.decoder.weight");
        let vars: HashMap<String, Tensor> = vs.variables();
        let mut missing: Vec<&String> = vars.keys().filter(|k| !ckpt.contains_key(*k)).collect();
        missing.sort();
        if !missing.is_empty() {
            bail!(
                "{}: checkpoint lacks {} of the model's tensors, e.g. {:?} (is the model config the checkpoint's?)",
                path.display(),
                missing.len(),
                &missing[..missing.len().min(5)]
            );
        }
        let unexpected: Vec<&String> = ckpt.keys().filter(|k| !vars.contains_key(*k)).collect();
        if !unexpected.is_empty() {
            bail!(
                "{}: checkpoint has {} tensors the model does not know, e.g. {:?} (see the name map in src/models/bert/mod.rs)",
                path.display(),
                unexpected.len(),
                &unexpected[..unexpected.len().min(5)]
            );
        }
        tch::no_grad(|| -> Result<()> {
            for (name, src) in &ckpt {
                let dst = &vars[name];
                let src = src.to_kind(dst.kind()).to_device(dst.device());
                let (ds, ss) = (dst.size(), src.size());
                let vocab_padded = (name == "bert.embeddings.word_embeddings.weight"
                    || name == "cls.predictions.bias")
                    && ss.len() == ds.len()
                    && ss[0] < ds[0]
                    && ss[1..] == ds[1..];
                if vocab_padded {
                    let mut dst = dst.shallow_clone();
                    let _ = dst.zero_();
                    dst.narrow(0, 0, ss[0]).copy_(&src);
                    report.padded_vocab = Some((ss[0], ds[0]));
                } else if ds == ss {
                    let mut dst = dst.shallow_clone();
                    dst.copy_(&src);
                } else {
                    bail!(
                        "{}: tensor '{name}' has shape {ss:?}, the model wants {ds:?}",
                        path.display()
                    );
                }
                report.loaded += 1;
            }
            Ok(())
        })?;
        if let Some(dec) = decoder {
            let emb = &vars["bert.embeddings.word_embeddings.weight"];
            let rows = dec.size()[0];
            let same = dec.size().len() == 2
                && rows <= emb.size()[0]
                && emb.narrow(0, 0, rows).to_device(Device::Cpu).allclose(
                    &dec.to_kind(emb.kind()),
                    0.0,
                    0.0,
                    false,
                );
            if !same {
                bail!(
                    "{}: cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight; \
                     this model ties them (the reference does too)",
                    path.display()
                );
            }
            report
                .ignored
                .push("cls.predictions.decoder.weight (tied)".into());
        }
        Ok(report)
    }
}

/// What [`BertForPreTraining::load_reference`] did.
#[derive(Debug, Default)]
pub struct LoadReport {
    pub loaded: usize,
    pub ignored: Vec<String>,
    /// (rows in the checkpoint, rows in the model) when the vocabulary was padded.
    pub padded_vocab: Option<(i64, i64)>,
}

/// Reference checkpoint name -> our name (see the table in the module docs).
pub fn canonical_name(name: &str) -> String {
    let mut n = name;
    for prefix in ["module.", "model."] {
        if let Some(rest) = n.strip_prefix(prefix) {
            n = rest;
        }
    }
    let mut n = n.replace(".dense_act.", ".dense.");
    if n.contains("LayerNorm.") {
        if let Some(stem) = n.strip_suffix(".gamma") {
            n = format!("{stem}.weight");
        } else if let Some(stem) = n.strip_suffix(".beta") {
            n = format!("{stem}.bias");
        }
    }
    n
}

/// Masked-LM and NSP losses (summed, as the reference does) for one batch.
/// `masked_ids` `[B, P]` with `masked_weights` `[B, P]` (1 = a real prediction, 0 = padding).
pub fn pretraining_loss(
    mlm_logits: &Tensor,
    nsp_logits: &Tensor,
    masked_ids: &Tensor,
    masked_weights: &Tensor,
    nsp_labels: &Tensor,
) -> Tensor {
    let v = mlm_logits.size()[mlm_logits.dim() - 1];
    let labels = masked_ids
        .where_self(&masked_weights.gt(0.0), &masked_ids.full_like(-1))
        .reshape([-1]);
    let mlm = mlm_logits.reshape([-1, v]).cross_entropy_loss::<Tensor>(
        &labels,
        None,
        tch::Reduction::Mean,
        -1,
        0.0,
    );
    let nsp = nsp_logits.cross_entropy_loss::<Tensor>(
        &nsp_labels.reshape([-1]),
        None,
        tch::Reduction::Mean,
        -100,
        0.0,
    );
    mlm + nsp
}

/// [correct masked predictions, all masked predictions] of one batch as a 2-element int64
/// tensor on the device (not read: eval sums these and reads once).
pub fn mlm_correct(mlm_logits: &Tensor, masked_ids: &Tensor, masked_weights: &Tensor) -> Tensor {
    let valid = masked_weights.gt(0.0);
    let pred = mlm_logits.argmax(-1, false);
    let correct = pred
        .eq_tensor(masked_ids)
        .logical_and(&valid)
        .sum(Kind::Int64);
    let total = valid.sum(Kind::Int64);
    Tensor::stack(&[correct, total], 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names() {
        assert_eq!(
            canonical_name("module.bert.pooler.dense_act.weight"),
            "bert.pooler.dense.weight"
        );
        assert_eq!(
            canonical_name("bert.encoder.layer.3.output.LayerNorm.gamma"),
            "bert.encoder.layer.3.output.LayerNorm.weight"
        );
        assert_eq!(
            canonical_name("cls.predictions.bias"),
            "cls.predictions.bias"
        );
    }

    #[test]
    fn large_formula() {
        assert_eq!(BertConfig::large().param_count(), 336_226_108);
        let padded = BertConfig {
            vocab_size: 30528,
            ..BertConfig::large()
        };
        assert_eq!(
            padded.param_count() - BertConfig::large().param_count(),
            6 * 1024 + 6
        );
    }
}
