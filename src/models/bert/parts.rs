//! The encoder layer of [`super::BertForPreTraining`] made of parts chosen once, when the model
//! is built (or reconfigured), from its methods and kernel switches ([`Parts::choose`]), as
//! candle builds its layers: the layer's forward calls its parts and asks no method flag.
//!
//! | part | variants | chosen by |
//! |---|---|---|
//! | [`Projections`] | three linears, one fused QKV op | `fused_qkv` |
//! | [`Attention`] | SDPA (with FlashAttention's varlen kernel for packed tokens and packed rows), explicit softmax | `fused_attention`, [`KernelSwitches::varlen_path`] |
//! | [`Tail`] (dense + dropout + residual + LayerNorm) | plain ops, one fused epilogue op | `fused_epilogues`, [`KernelSwitches::fused_epilogue_path`] |
//! | [`FeedForward`] | plain (dense, erf GELU), fused bias + GELU epilogue (after an FP8 linear with `fp8`), cuBLASLt bias + tanh GELU over both matmuls | `fused_epilogues` + [`KernelSwitches::fused_gelu_epilogue`], `fp8`, `fused_bias_gelu` |
//! | [`Linear`] (every encoder dense) | default (fp32, or bf16 under autocast), FP8 with delayed scaling | `fp8`, [`KernelSwitches::fp8_path`] |
//! | the FP8 input casts | in each linear; in the fused op that writes the input (LayerNorm tails, bias + GELU) | `fp8` + `fused_epilogues`, [`KernelSwitches::fp8_fused_cast`] |
//!
//! The token layout (padded `[B*S]`, packed real tokens, packed rows) is the batch's, not a
//! part: one model runs padded eval batches and packed training rows, and each attention part
//! handles all three ([`Tokens`]). Errors of the fused ops come back as `Err` with their message.

use crate::fused::fp8::{Fp8Slot, Quantized};
use crate::fused::varlen_attention::{self, PackedRows, Packing};
use crate::fused::Path;
use crate::methods::BertMethods;
use anyhow::{Context, Result};
use tch::nn::{Init, Path as VPath};
use tch::{Kind, Tensor};

/// The test- and benchmark-only kernel switches of the BERT model, in one place. Training uses
/// the defaults; tests pick the emulated or reference kernels, the benchmark measures one
/// kernel against another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSwitches {
    /// The implementation the fused epilogues and fused QKV take: `Auto` (the CUDA kernels on a
    /// GPU, else the composite ATen ops); tests set `Emulated` to train through the CUDA kernels
    /// on the CPU.
    pub fused_epilogue_path: Path,
    /// With `fused_epilogues`: the intermediate dense's bias + GELU as one op too
    /// ([`crate::fused::epilogue::dense_bias_gelu`]; on by default; the benchmark turns it off
    /// to measure it).
    pub fused_gelu_epilogue: bool,
    /// How unpadded attention runs ([`crate::fused::varlen_attention`]): `Auto` takes
    /// FlashAttention's varlen kernel on a GPU; the GPU check sets `Reference` to compare.
    pub varlen_path: Path,
    /// Experimental (benchmarks only): a batch without padding attends through
    /// FlashAttention-2's varlen kernel with every sequence at full length (the batch is already
    /// "packed": `[B*S, heads, head_dim]` token-major) instead of `scaled_dot_product_attention`,
    /// which picks cuDNN's attention on an H100 / H200. Same math; for measuring the two kernels
    /// against each other in the training step (`bert_bench_step --flash-varlen`).
    pub flash_varlen_unpadded: bool,
    /// How `methods.fp8`'s linears run ([`crate::fused::fp8`]): `Auto` the `_scaled_mm`
    /// kernel; `Reference` the emulated path (the workload sets it in the test mode
    /// `MLPERF_RUN_TEST_EMULATE_FP8=1`; the GPU numerics check compares the two).
    pub fp8_path: Path,
    /// With `fp8` and `fused_epilogues`: a LayerNorm epilogue whose output feeds an FP8 linear
    /// (the intermediate dense; with `fused_qkv`, the next layer's projections) also writes the
    /// E4M3 cast and the amax that linear needs, so the linear skips its own pass over its input
    /// ([`crate::fused::epilogue::bias_dropout_add_ln_fp8`]). On by default; tests turn it off
    /// to compare (the results are the same bit for bit).
    pub fp8_fused_cast: bool,
}

impl Default for KernelSwitches {
    fn default() -> Self {
        KernelSwitches {
            fused_epilogue_path: Path::Auto,
            fused_gelu_epilogue: true,
            varlen_path: Path::Auto,
            flash_varlen_unpadded: false,
            fp8_path: Path::Auto,
            fp8_fused_cast: true,
        }
    }
}

/// A dense layer `y = x W^T + b` with the reference's init (normal 0.02, zero bias).
#[derive(Debug)]
pub(super) struct Dense {
    pub w: Tensor,
    pub b: Tensor,
    /// Its FP8 scales and amax history (an encoder linear; used with `methods.fp8`).
    pub fp8: Option<Fp8Slot>,
}

impl Dense {
    pub fn new(p: VPath, input: i64, output: i64) -> Dense {
        Dense {
            fp8: None,
            w: p.var(
                "weight",
                &[output, input],
                Init::Randn {
                    mean: 0.0,
                    stdev: 0.02,
                },
            ),
            b: p.var("bias", &[output], Init::Const(0.0)),
        }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.w, Some(&self.b))
    }
}

#[derive(Debug)]
pub(super) struct LayerNorm {
    pub w: Tensor,
    pub b: Tensor,
    pub eps: f64,
    pub dim: i64,
}

impl LayerNorm {
    pub fn new(p: VPath, dim: i64, eps: f64) -> LayerNorm {
        LayerNorm {
            w: p.var("weight", &[dim], Init::Const(1.0)),
            b: p.var("bias", &[dim], Init::Const(0.0)),
            eps,
            dim,
        }
    }

    /// In fp32 (autocast runs layer norm in fp32 and casts a bf16 input up).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.layer_norm([self.dim], Some(&self.w), Some(&self.b), self.eps, true)
    }
}

/// One encoder layer's parameters.
#[derive(Debug)]
pub(super) struct Layer {
    pub query: Dense,
    pub key: Dense,
    pub value: Dense,
    pub attn_out: Dense,
    pub attn_ln: LayerNorm,
    pub intermediate: Dense,
    pub output: Dense,
    pub out_ln: LayerNorm,
}

/// The tokens an encoder layer holds: all `B*S` (with the attention's key mask, `None` when no
/// token is padding), or the real ones packed sequence after sequence (`unpad`).
#[derive(Clone, Copy)]
pub(super) enum Tokens<'a> {
    /// `[B*S]` tokens of `b` sequences of `s`, with the key mask.
    Padded {
        mask: Option<&'a Tensor>,
        b: i64,
        s: i64,
    },
    Packed(&'a Packing),
    /// Packed rows (`methods.packing`): all `R*S` tokens, attention within each sequence slot.
    Rows(&'a PackedRows),
}

/// How every encoder dense layer computes `x W^T + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Linear {
    /// `linear` (fp32, or bf16 under autocast).
    Default,
    /// FP8 with delayed scaling (`methods.fp8`, [`crate::fused::fp8`]): `_scaled_mm`, or the
    /// emulated path with `Reference`.
    Fp8(Path),
}

impl Linear {
    /// `x W^T + b`.
    fn forward(self, d: &Dense, x: &Tensor) -> Result<Tensor> {
        self.with_bias(d, x, Some(&d.b))
    }

    /// `x W^T + b` with `bias` (None: without).
    fn with_bias(self, d: &Dense, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        self.cast_input(d, x, None, bias)
    }

    /// `x W^T + b` with `x` perhaps already cast for FP8 (`pre`; only the FP8 linear takes it).
    fn cast_input(
        self,
        d: &Dense,
        x: &Tensor,
        pre: Option<&Quantized>,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        match self {
            Linear::Default => Ok(x.linear(&d.w, bias)),
            Linear::Fp8(path) => {
                let slot = d
                    .fp8
                    .as_ref()
                    .context("methods.fp8: this dense layer has no FP8 scales")?;
                crate::fused::fp8::linear_cast(x, pre, &d.w, bias, slot, path)
            }
        }
    }
}

/// The query, key and value projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Projections {
    /// Three linears (no slicing of one output: the backward of narrow/select would zero-fill
    /// and sum full-size buffers).
    Separate(Linear),
    /// One `[N, 3H]` projection over the three weights stacked (x is read, cast and
    /// differentiated once); its backward puts the three gradients side by side and sums the
    /// bias's gradient in one kernel on a GPU ([`crate::fused::epilogue::qkv_projection`]).
    Fused(Path),
    /// `fused_qkv` with `fp8`: one FP8 linear over the three weights stacked (one cast of x,
    /// one GEMM), with the query's FP8 scales; its output unbound into q, k and v.
    Fp8Fused(Path),
}

impl Projections {
    /// q, k, v of `x` (`[N, H]`), each viewed `[N, heads, head_dim]` (token-major); `pre`: `x`
    /// already cast with the query's FP8 input scale (`Fp8Fused` only: [`Parts::cast_for`]).
    fn forward(
        self,
        l: &Layer,
        x: &Tensor,
        pre: Option<&Quantized>,
        heads: i64,
    ) -> Result<[Tensor; 3]> {
        match self {
            Projections::Separate(linear) => {
                let d = l.query.w.size()[0] / heads;
                let mut out = Vec::with_capacity(3);
                for dense in [&l.query, &l.key, &l.value] {
                    out.push(linear.forward(dense, x)?.view([-1, heads, d]));
                }
                let [q, k, v]: [Tensor; 3] = out.try_into().expect("three projections");
                Ok([q, k, v])
            }
            Projections::Fused(path) => {
                let w = Tensor::cat(&[&l.query.w, &l.key.w, &l.value.w], 0);
                let bias = Tensor::cat(&[&l.query.b, &l.key.b, &l.value.b], 0);
                Ok(crate::fused::epilogue::qkv_projection(x, &w, &bias, heads, path)?.0)
            }
            Projections::Fp8Fused(path) => {
                let stacked = Dense {
                    w: Tensor::cat(&[&l.query.w, &l.key.w, &l.value.w], 0),
                    b: Tensor::cat(&[&l.query.b, &l.key.b, &l.value.b], 0),
                    fp8: l.query.fp8.as_ref().map(|s| Fp8Slot {
                        scale: s.scale.shallow_clone(),
                        history: s.history.shallow_clone(),
                    }),
                };
                let d = l.query.w.size()[0] / heads;
                let qkv = Linear::Fp8(path)
                    .cast_input(&stacked, x, pre, Some(&stacked.b))?
                    .view([-1, 3, heads, d])
                    .unbind(1);
                let [q, k, v]: [Tensor; 3] = qkv.try_into().expect("three projections");
                Ok([q, k, v])
            }
        }
    }
}

/// The attention core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attention {
    /// `scaled_dot_product_attention` on padded batches; packed tokens and packed rows through
    /// FlashAttention's varlen kernel where `varlen` allows it (on a GPU), else their padded
    /// twins.
    Sdpa { varlen: Path },
    /// The reference's explicit softmax(QK^T/sqrt(d) - 10000*masked) V.
    Explicit,
}

impl Attention {
    /// The context (`[N, heads, head_dim]`) of q, k, v (`[N, heads, head_dim]`) over `tokens`,
    /// dropout `p` on the probabilities.
    fn forward(
        self,
        [q, k, v]: &[Tensor; 3],
        tokens: Tokens<'_>,
        p: f64,
        train: bool,
    ) -> Result<Tensor> {
        let core = |q: &Tensor, k: &Tensor, v: &Tensor, m: Option<&Tensor>| {
            self.padded(q, k, v, m, p, train)
        };
        Ok(match (self, tokens) {
            // unpadded: attention within each packed sequence (FlashAttention's varlen kernel
            // on a GPU)
            (Attention::Sdpa { varlen }, Tokens::Packed(pack)) => {
                varlen_attention::attention(q, k, v, pack, p, varlen)?
            }
            (Attention::Explicit, Tokens::Packed(pack)) => {
                varlen_attention::scatter_with(q, k, v, pack, |q, k, v, keep| {
                    core(q, k, v, Some(keep))
                })
            }
            // packed rows: the varlen kernel over the sequences (SDPA, on a GPU), else
            // attention on the rows with their block-diagonal mask
            (_, Tokens::Rows(rows)) => {
                let path = match self {
                    Attention::Sdpa { varlen } => varlen,
                    Attention::Explicit => Path::Reference,
                };
                varlen_attention::rows_attention(q, k, v, rows, p, path, |q, k, v, m| {
                    core(q, k, v, Some(m))
                })?
            }
            (_, Tokens::Padded { mask, b, s }) => {
                let (nh, d) = (q.size()[1], q.size()[2]);
                let heads = |t: &Tensor| t.view([b, s, nh, d]).permute([0, 2, 1, 3]);
                core(&heads(q), &heads(k), &heads(v), mask)
                    .permute([0, 2, 1, 3])
                    .reshape([b * s, nh, d])
            }
        })
    }

    /// Attention over `[B, heads, S, head_dim]` q, k, v with the key mask `attn_mask` (`[B, 1,
    /// 1, S]` bool, true = attend; `None`: every key).
    fn padded(
        self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        attn_mask: Option<&Tensor>,
        p: f64,
        train: bool,
    ) -> Tensor {
        if let Attention::Sdpa { .. } = self {
            return Tensor::scaled_dot_product_attention(q, k, v, attn_mask, p, false, None, false);
        }
        let d = q.size()[3];
        let scores = (q.matmul(&k.transpose(-1, -2)) / (d as f64).sqrt()).to_kind(Kind::Float);
        let scores = match attn_mask {
            Some(m) => scores + (m.logical_not().to_kind(Kind::Float) * -10000.0),
            None => scores,
        };
        scores
            .softmax(-1, Kind::Float)
            .dropout(p, train)
            .to_kind(v.kind())
            .matmul(v)
    }
}

/// A dense layer's output through dropout, the residual add and LayerNorm, as the residual
/// stream carries it (`stream`: bf16 with `bf16_residual`, else as LayerNorm returns it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tail {
    /// The unfused ops.
    Plain {
        linear: Linear,
        stream: Option<Kind>,
    },
    /// One autograd op ([`crate::fused::epilogue`]); with an FP8 `linear` the dense runs
    /// through it without its bias, and the op adds the bias.
    Fused {
        linear: Linear,
        path: Path,
        stream: Option<Kind>,
    },
}

/// What the tail adds the residual to: a dense layer's input, or a dense output still without
/// its bias (after `fused_bias_gelu`).
pub(super) enum TailInput<'a> {
    /// The dense layer and its input (perhaps already cast for its FP8 linear).
    Dense(&'a Dense, Tensor, Option<Quantized>),
    /// A dense output without its bias, and that bias.
    NoBias(Tensor, &'a Tensor),
}

/// The dropout probability and whether training: what every tail needs besides its tensors.
#[derive(Clone, Copy)]
pub(super) struct Dropout {
    pub p: f64,
    pub train: bool,
}

impl Tail {
    /// `ln(residual + dropout(input))` for the dense output `input`; `next`: the FP8 scales of
    /// the linear that reads the output, when the fused op is to cast it for that linear
    /// ([`Parts::cast_for`]): the cast comes back too.
    fn forward(
        self,
        input: TailInput<'_>,
        ln: &LayerNorm,
        residual: &Tensor,
        drop: Dropout,
        next: Option<&Fp8Slot>,
    ) -> Result<(Tensor, Option<Quantized>)> {
        match self {
            Tail::Plain { linear, stream } => {
                let h = match input {
                    TailInput::Dense(d, x, pre) => {
                        linear.cast_input(d, &x, pre.as_ref(), Some(&d.b))?
                    }
                    // the output dense's bias in the matmul's dtype, as linear casts it
                    TailInput::NoBias(z, b) => &z + b.to_kind(z.kind()),
                };
                let h = h.dropout(drop.p, drop.train);
                Ok((to_stream(ln.forward(&(h + residual)), stream), None))
            }
            Tail::Fused {
                linear,
                path,
                stream,
            } => {
                use crate::fused::epilogue::{
                    bias_dropout_add_ln, bias_dropout_add_ln_fp8, dense_dropout_add_ln, Epilogue,
                };
                let e = Epilogue {
                    residual,
                    gamma: &ln.w,
                    beta: &ln.b,
                    eps: ln.eps,
                    p: drop.p,
                    train: drop.train,
                    mask: None,
                    path,
                    out: stream,
                };
                let (h, bias) = match (input, linear) {
                    // (no FP8 linear reads it without methods.fp8: `next` is None)
                    (TailInput::Dense(d, x, _), Linear::Default) => {
                        return Ok((dense_dropout_add_ln(&x, &d.w, &d.b, &e)?.0, None));
                    }
                    (TailInput::Dense(d, x, pre), fp8) => {
                        (fp8.cast_input(d, &x, pre.as_ref(), None)?, &d.b)
                    }
                    (TailInput::NoBias(z, b), _) => (z, b),
                };
                Ok(match next {
                    Some(slot) => {
                        let scale = slot.scale.get(0);
                        let (y, cast, _) = bias_dropout_add_ln_fp8(&h, Some(bias), &e, &scale)?;
                        (y, Some(cast))
                    }
                    None => (bias_dropout_add_ln(&h, Some(bias), &e)?.0, None),
                })
            }
        }
    }
}

/// A LayerNorm's output as the residual stream carries it.
pub(super) fn to_stream(t: Tensor, stream: Option<Kind>) -> Tensor {
    match stream {
        Some(kind) => t.to_kind(kind),
        None => t,
    }
}

/// The feed-forward block's first dense and activation (what feeds the output dense's tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FeedForward {
    /// `gelu(x W1^T + b1)` (erf GELU), unfused.
    Plain(Linear),
    /// The bias + erf GELU in the matmul's epilogue ([`crate::fused::epilogue::dense_bias_gelu`]).
    GeluEpilogue(Path),
    /// With `fp8`: the intermediate dense as an FP8 linear without its bias, then the bias +
    /// erf GELU in one op ([`crate::fused::epilogue::bias_gelu`]), which with
    /// [`KernelSwitches::fp8_fused_cast`] also writes the output dense's E4M3 input and amax.
    Fp8GeluEpilogue { fp8: Path, epilogue: Path },
    /// Both matmuls with the intermediate bias and a tanh GELU fused into them,
    /// `gelu_tanh(x W1^T + b1) W2^T` without the output dense's bias
    /// ([`crate::fused::bias_gelu`]; `methods.fused_bias_gelu`).
    BiasGelu,
}

impl FeedForward {
    /// What the output tail takes for the layer `l` on `x` (`pre`: `x` already cast with the
    /// intermediate dense's FP8 input scale; `cast`: the output dense's FP8 scales, to cast the
    /// GELU's output with in its op: [`Parts::cast_for`]).
    fn forward<'a>(
        self,
        l: &'a Layer,
        x: &'a Tensor,
        pre: Option<&Quantized>,
        cast: Option<&Fp8Slot>,
    ) -> Result<TailInput<'a>> {
        Ok(match self {
            FeedForward::Plain(linear) => {
                let inter = linear
                    .cast_input(&l.intermediate, x, pre, Some(&l.intermediate.b))?
                    .gelu("none");
                TailInput::Dense(&l.output, inter, None)
            }
            FeedForward::Fp8GeluEpilogue { fp8, epilogue } => {
                let z = Linear::Fp8(fp8).cast_input(&l.intermediate, x, pre, None)?;
                let scale = cast.map(|s| s.scale.get(0));
                let (inter, cast, _) = crate::fused::epilogue::bias_gelu(
                    &z,
                    &l.intermediate.b,
                    scale.as_ref(),
                    epilogue,
                )?;
                TailInput::Dense(&l.output, inter, cast)
            }
            FeedForward::GeluEpilogue(path) => {
                let inter = crate::fused::epilogue::dense_bias_gelu(
                    x,
                    &l.intermediate.w,
                    &l.intermediate.b,
                    path,
                )?
                .0;
                TailInput::Dense(&l.output, inter, None)
            }
            FeedForward::BiasGelu => {
                let (z, _) = crate::fused::bias_gelu::dense_gelu_dense(
                    x,
                    &l.intermediate.w,
                    &l.intermediate.b,
                    &l.output.w,
                    Path::Auto,
                )?;
                TailInput::NoBias(z, &l.output.b)
            }
        })
    }
}

/// The parts of every encoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Parts {
    pub projections: Projections,
    pub attention: Attention,
    /// After the attention: its output dense, dropout, residual, LayerNorm.
    pub attn_tail: Tail,
    pub feed_forward: FeedForward,
    /// After the feed-forward block: its output dense (or bias), dropout, residual, LayerNorm.
    pub out_tail: Tail,
    /// The fused tails cast their output for the FP8 linear that reads it
    /// ([`KernelSwitches::fp8_fused_cast`]; [`Parts::cast_for`]).
    pub fp8_fused_cast: bool,
}

impl Parts {
    /// The parts the methods `m` and the kernel switches `k` ask for.
    /// With `fp8`, every encoder dense runs through FP8: the query, key and value projections
    /// as three FP8 linears, or with `fused_qkv` one over the stacked weights; the intermediate
    /// dense with its plain GELU (not the GELU epilogue); the fused tails take the FP8 matmul's
    /// output and add the bias.
    pub fn choose(m: &BertMethods, k: &KernelSwitches) -> Parts {
        let linear = if m.fp8 {
            Linear::Fp8(k.fp8_path)
        } else {
            Linear::Default
        };
        let stream = m.bf16_residual.then_some(Kind::BFloat16);
        let tail = if m.fused_epilogues {
            Tail::Fused {
                linear,
                path: k.fused_epilogue_path,
                stream,
            }
        } else {
            Tail::Plain { linear, stream }
        };
        let feed_forward = if m.fused_bias_gelu {
            FeedForward::BiasGelu
        } else if m.fused_epilogues && k.fused_gelu_epilogue && m.fp8 {
            FeedForward::Fp8GeluEpilogue {
                fp8: k.fp8_path,
                epilogue: k.fused_epilogue_path,
            }
        } else if m.fused_epilogues && k.fused_gelu_epilogue {
            FeedForward::GeluEpilogue(k.fused_epilogue_path)
        } else {
            FeedForward::Plain(linear)
        };
        Parts {
            projections: if m.fused_qkv && m.fp8 {
                Projections::Fp8Fused(k.fp8_path)
            } else if m.fused_qkv {
                Projections::Fused(k.fused_epilogue_path)
            } else {
                Projections::Separate(linear)
            },
            attention: if m.fused_attention {
                Attention::Sdpa {
                    varlen: k.varlen_path,
                }
            } else {
                Attention::Explicit
            },
            attn_tail: tail,
            feed_forward,
            out_tail: tail,
            fp8_fused_cast: m.fp8 && m.fused_epilogues && k.fp8_fused_cast,
        }
    }

    /// The FP8 scales a tail's output is cast with in the fused op, `reader` being the dense
    /// that reads that output (`reads`: as its FP8 input: the query of a layer with `Fp8Fused`
    /// projections, one scale for the three; the intermediate dense of a `Plain` FP8
    /// feed-forward block), when the cast is fused; else None (the linear casts its input).
    fn cast_for<'a>(&self, reader: &'a Dense, reads: bool) -> Option<&'a Fp8Slot> {
        (self.fp8_fused_cast && reads)
            .then_some(reader.fp8.as_ref())
            .flatten()
    }

    /// The FP8 scales the output of the layer before `next` is cast with
    /// ([`Self::cast_for`]): `next`'s query's, with fused FP8 projections.
    pub fn cast_for_layer<'a>(&self, next: &'a Layer) -> Option<&'a Fp8Slot> {
        let reads = matches!(self.projections, Projections::Fp8Fused(_));
        self.cast_for(&next.query, reads)
    }
}

/// What a layer's forward needs besides its input: the head count, the dropouts, the tokens.
#[derive(Clone, Copy)]
pub(super) struct LayerCall<'a> {
    pub heads: i64,
    pub tokens: Tokens<'a>,
    /// The attention probabilities' dropout (0 when not training).
    pub attention_p: f64,
    /// The hidden dropout of both tails.
    pub hidden: Dropout,
}

impl Layer {
    /// One encoder layer on `x`: `[B*S, H]`, or `[T, H]` (the real tokens of a packing) when
    /// unpadded. `pre`: `x` already cast for this layer's FP8 projections
    /// ([`Parts::cast_for_layer`]); `next`: the scales to cast the output with for the next
    /// layer's (the cast comes back with the output).
    pub fn forward(
        &self,
        parts: &Parts,
        x: &Tensor,
        pre: Option<&Quantized>,
        next: Option<&Fp8Slot>,
        c: LayerCall<'_>,
    ) -> Result<(Tensor, Option<Quantized>)> {
        let h = x.size()[1];
        let qkv = parts.projections.forward(self, x, pre, c.heads)?;
        let ctx = parts
            .attention
            .forward(&qkv, c.tokens, c.attention_p, c.hidden.train)?
            .reshape([-1, h]);
        let ffn_reads = matches!(
            parts.feed_forward,
            FeedForward::Plain(Linear::Fp8(_)) | FeedForward::Fp8GeluEpilogue { .. }
        );
        let gelu_casts = matches!(parts.feed_forward, FeedForward::Fp8GeluEpilogue { .. });
        let (x, cast) = parts.attn_tail.forward(
            TailInput::Dense(&self.attn_out, ctx, None),
            &self.attn_ln,
            x,
            c.hidden,
            parts.cast_for(&self.intermediate, ffn_reads),
        )?;
        let inner = parts.feed_forward.forward(
            self,
            &x,
            cast.as_ref(),
            parts.cast_for(&self.output, gelu_casts),
        )?;
        parts
            .out_tail
            .forward(inner, &self.out_ln, &x, c.hidden, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the FP8 casts are fused: with `fp8`, `fused_epilogues` and `fused_qkv` every tail
    /// and the GELU cast for the linear that reads them; turning a piece off moves the cast back
    /// into the linear.
    #[test]
    fn the_fused_fp8_casts_follow_the_methods_and_the_switch() {
        let m = BertMethods {
            fp8: true,
            fused_epilogues: true,
            fused_qkv: true,
            ..BertMethods::default()
        };
        let k = KernelSwitches::default();
        let p = Parts::choose(&m, &k);
        assert!(p.fp8_fused_cast);
        assert!(matches!(
            p.feed_forward,
            FeedForward::Fp8GeluEpilogue { .. }
        ));
        assert!(matches!(p.projections, Projections::Fp8Fused(_)));
        let off = KernelSwitches {
            fp8_fused_cast: false,
            ..k
        };
        assert!(!Parts::choose(&m, &off).fp8_fused_cast);
        let plain_gelu = KernelSwitches {
            fused_gelu_epilogue: false,
            ..k
        };
        let p = Parts::choose(&m, &plain_gelu);
        assert!(matches!(p.feed_forward, FeedForward::Plain(Linear::Fp8(_))));
        for (fp8, fused_epilogues) in [(false, true), (true, false)] {
            let m = BertMethods {
                fp8,
                fused_epilogues,
                ..m.clone()
            };
            let p = Parts::choose(&m, &k);
            assert!(
                !p.fp8_fused_cast,
                "fp8 {fp8} fused_epilogues {fused_epilogues}"
            );
            assert!(!matches!(
                p.feed_forward,
                FeedForward::Fp8GeluEpilogue { .. }
            ));
        }
    }
}
