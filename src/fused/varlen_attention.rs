//! Attention over the non-padding tokens of a batch (BERT's `methods.unpad`).
//!
//! With unpadding the encoder works on `[T, H]`: the T real tokens of the batch, sequence after
//! sequence. Attention must stay inside each sequence. Two paths give the same math:
//! - **varlen** (CUDA, bf16 / fp16): FlashAttention-2's variable-length kernel
//!   (`at::_flash_attention_forward` over `shim/varlen_attention.cpp`) reads the packed
//!   `[T, heads, head_dim]` tensors directly, with `cu_seqlens` saying where each sequence
//!   starts. No padding is scattered in, no mask is read, and no work is spent on padding pairs:
//!   the attention costs the sum of the squared lengths, not B x S^2.
//! - **scatter** (every device; the CPU twin): q, k and v are scattered back to `[B, S]` with
//!   zeros at the padding, `scaled_dot_product_attention` runs with the key-padding mask, and
//!   the real tokens' rows are gathered again.
//!
//! Before its first use in a process, [`Path::Auto`] checks the varlen kernel against the
//! scatter path on a small fixed input (forward and backward, no dropout; [`self_check`]). If
//! the kernel fails or disagrees (a libtorch built without FlashAttention, say), one warning is
//! logged and the scatter path runs from then on.

use super::Path;
use crate::shim::error::call;
use crate::shim::varlen_attention::mr_varlen_flash_attention;
use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use tch::{Device, Kind, Tensor};

/// Where the real tokens of a `[B, S]` batch are, for the unpadded encoder.
pub struct Packing {
    /// Flat indices (into `B*S`) of the real tokens, in order: sequence 0's first.
    pub idx: Tensor,
    /// `[B + 1]` int32 offsets of each sequence's first token in the packed `[T, ...]` rows.
    pub cu_seqlens: Tensor,
    pub batch: i64,
    pub seq: i64,
}

impl Packing {
    /// From an input mask `[B, S]` (1 = real token). `idx` needs the token count on the host
    /// (`nonzero` waits for the device); the offsets are computed on the device.
    pub fn from_mask(input_mask: &Tensor) -> Packing {
        let (b, s) = input_mask.size2().expect("input_mask must be [batch, seq]");
        let real = input_mask.ne(0);
        let idx = real.reshape([b * s]).nonzero().squeeze_dim(1);
        let lengths = real.sum_dim_intlist(1, false, Kind::Int);
        let cu_seqlens = Tensor::cat(
            &[
                Tensor::zeros([1], (Kind::Int, input_mask.device())),
                lengths.cumsum(0, Kind::Int),
            ],
            0,
        );
        Packing {
            idx,
            cu_seqlens,
            batch: b,
            seq: s,
        }
    }

    /// `batch` sequences of `seq` tokens each, none of them padding: the `[B*S]` token rows as
    /// they are.
    pub fn full(batch: i64, seq: i64, device: Device) -> Packing {
        Packing {
            idx: Tensor::arange(batch * seq, (Kind::Int64, device)),
            cu_seqlens: Tensor::arange_start_step(0, (batch + 1) * seq, seq, (Kind::Int, device)),
            batch,
            seq,
        }
    }
}

static VARLEN_FAILED: AtomicBool = AtomicBool::new(false);
static GAVE_UP: OnceLock<String> = OnceLock::new();
static CHECKED: OnceLock<()> = OnceLock::new();

/// Whether the varlen kernel is a candidate for these inputs.
fn varlen_candidate(q: &Tensor) -> bool {
    matches!(q.device(), Device::Cuda(_)) && matches!(q.kind(), Kind::BFloat16 | Kind::Half)
}

/// The varlen kernel on packed `[T, heads, head_dim]` q, k, v.
pub fn varlen_flash(q: &Tensor, k: &Tensor, v: &Tensor, pack: &Packing, p: f64) -> Result<Tensor> {
    let mut out = std::ptr::null_mut();
    // SAFETY: the tensors are live for the call; on success `out` is a new tensor we own.
    call("varlen attention", |err| unsafe {
        mr_varlen_flash_attention(
            q.as_ptr(),
            k.as_ptr(),
            v.as_ptr(),
            pack.cu_seqlens.as_ptr(),
            pack.seq,
            p,
            &mut out,
            err,
        )
    })?;
    // SAFETY: the shim handed over a new at::Tensor.
    Ok(unsafe { Tensor::from_ptr(out) })
}

/// The scatter path: q, k, v (`[T, heads, head_dim]`) scattered to `[B, heads, S, head_dim]`,
/// SDPA with the key-padding mask, the real tokens' rows gathered back.
pub fn scatter(q: &Tensor, k: &Tensor, v: &Tensor, pack: &Packing, p: f64) -> Tensor {
    scatter_with(q, k, v, pack, |q, k, v, keep| {
        Tensor::scaled_dot_product_attention(q, k, v, Some(keep), p, false, None, false)
    })
}

/// The scatter path around any padded attention: q, k, v (`[T, heads, head_dim]`) scattered
/// to `[B, heads, S, head_dim]` with zeros at the padding, `attend(q, k, v, keep)` with the key
/// mask `keep` (`[B, 1, 1, S]` bool, true = real token), the real tokens' rows gathered back.
pub fn scatter_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pack: &Packing,
    attend: impl FnOnce(&Tensor, &Tensor, &Tensor, &Tensor) -> Tensor,
) -> Tensor {
    let (b, s) = (pack.batch, pack.seq);
    let (nh, d) = (q.size()[1], q.size()[2]);
    let heads = |t: &Tensor| {
        Tensor::zeros([b * s, nh, d], (t.kind(), t.device()))
            .index_copy(0, &pack.idx, t)
            .view([b, s, nh, d])
            .permute([0, 2, 1, 3])
    };
    let keep = Tensor::zeros([b * s], (Kind::Bool, q.device()))
        .index_fill(0, &pack.idx, 1)
        .view([b, 1, 1, s]);
    attend(&heads(q), &heads(k), &heads(v), &keep)
        .permute([0, 2, 1, 3])
        .reshape([b * s, nh, d])
        .index_select(0, &pack.idx)
}

/// Attention of the packed `[T, heads, head_dim]` q over k, v within each sequence of `pack`,
/// dropout `p` on the probabilities; `[T, heads, head_dim]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pack: &Packing,
    p: f64,
    path: Path,
) -> Result<Tensor> {
    match path {
        Path::Emulated => Err(super::no_emulator("varlen attention")),
        Path::Reference => Ok(scatter(q, k, v, pack, p)),
        Path::Fast => varlen_flash(q, k, v, pack, p),
        Path::Auto => match try_varlen(q, k, v, pack, p, Fallback::Scatter) {
            Some(t) => Ok(t),
            None => Ok(scatter(q, k, v, pack, p)),
        },
    }
}

/// What runs instead of the varlen kernel: the scatter path (`methods.unpad`) or the rows'
/// block-diagonal mask (`methods.packing`); the warning names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fallback {
    Scatter,
    BlockMask,
}

impl Fallback {
    /// The method whose fallback it is, and the warning.
    fn warning(self) -> (&'static str, &'static str) {
        match self {
            Fallback::Scatter => (
                "unpad",
                "FlashAttention's varlen kernel is not usable, using the scatter path (q, k, v \
                 scattered to padded rows, SDPA with the key-padding mask) from now on",
            ),
            Fallback::BlockMask => (
                "packing",
                "FlashAttention's varlen kernel is not usable, using the rows' block-diagonal \
                 mask (SDPA over each packed row, attention kept inside each sequence) from now on",
            ),
        }
    }
}

/// [`Path::Auto`]'s kernel attempt: the varlen kernel's output when it is a candidate for
/// these inputs and has not failed (self-checked before its first use), else None (then the
/// caller runs `fallback`, which a failure's warning names).
fn try_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    pack: &Packing,
    p: f64,
    fallback: Fallback,
) -> Option<Tensor> {
    if !varlen_candidate(q) {
        return None;
    }
    CHECKED.get_or_init(|| {
        if let Err(err) = self_check(q.device(), q.kind()) {
            give_up(&err, fallback);
        }
    });
    if VARLEN_FAILED.load(Ordering::Relaxed) {
        return None;
    }
    match varlen_flash(q, k, v, pack, p) {
        Ok(t) => Some(t),
        Err(err) => {
            give_up(&err, fallback);
            None
        }
    }
}

/// Packed rows (`methods.packing`): `[R*S]` tokens in `cu_seqlens` segments (`pack`) and the
/// sequence slot of each token (`slots`, `[R, S]`), for [`rows_attention`]. Every token is in the
/// token array (a row's padding tail is a segment of its own), so the shapes are fixed.
pub struct PackedRows {
    pub pack: Packing,
    pub slots: Tensor,
}

impl PackedRows {
    /// From `cu_seqlens` (`[segments + 1]` int32) and `slots` (`[R, S]`).
    pub fn new(cu_seqlens: &Tensor, slots: &Tensor) -> Result<PackedRows> {
        let (r, s) = slots.size2()?;
        Ok(PackedRows {
            pack: Packing {
                idx: Tensor::arange(r * s, (Kind::Int64, slots.device())),
                cu_seqlens: cu_seqlens.shallow_clone(),
                batch: cu_seqlens.size()[0] - 1,
                seq: s,
            },
            slots: slots.shallow_clone(),
        })
    }
}

/// The block-diagonal mask of packed rows: `[R, 1, S, S]` bool, true where query and key are in
/// the same sequence slot of their row (`slots`: `[R, S]`, the slot of each token).
pub fn block_mask(slots: &Tensor) -> Tensor {
    let (r, s) = slots.size2().expect("slots must be [rows, seq]");
    slots
        .unsqueeze(2)
        .eq_tensor(&slots.unsqueeze(1))
        .view([r, 1, s, s])
}

/// Attention within each sequence of packed rows: q, k, v `[R*S, heads, head_dim]` (token-major,
/// every token of the rows) -> `[R*S, heads, head_dim]`. FlashAttention's varlen kernel over the
/// `cu_seqlens` segments on a GPU in bf16 / fp16 (`Auto`, `Varlen`); elsewhere (the CPU twin,
/// `Scatter`) `attend(q, k, v, mask)` on `[R, heads, S, head_dim]` with the rows' block-diagonal
/// mask ([`block_mask`] of the slots). Padding-tail tokens attend among themselves; nothing reads
/// their outputs.
pub fn rows_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rows: &PackedRows,
    p: f64,
    path: Path,
    attend: impl FnOnce(&Tensor, &Tensor, &Tensor, &Tensor) -> Tensor,
) -> Result<Tensor> {
    let kernel = match path {
        Path::Fast => Some(varlen_flash(q, k, v, &rows.pack, p)?),
        Path::Auto => try_varlen(q, k, v, &rows.pack, p, Fallback::BlockMask),
        Path::Reference => None,
        Path::Emulated => return Err(super::no_emulator("varlen attention")),
    };
    if let Some(t) = kernel {
        return Ok(t);
    }
    let (r, s) = rows.slots.size2()?;
    let (nh, d) = (q.size()[1], q.size()[2]);
    let heads = |t: &Tensor| t.view([r, s, nh, d]).permute([0, 2, 1, 3]);
    Ok(
        attend(&heads(q), &heads(k), &heads(v), &block_mask(&rows.slots))
            .permute([0, 2, 1, 3])
            .reshape([r * s, nh, d]),
    )
}

/// One warning naming the `fallback` that runs, and no varlen kernel for the rest of the process.
fn give_up(err: &anyhow::Error, fallback: Fallback) {
    let why = format!("{err:#}");
    let _ = GAVE_UP.set(why.clone());
    let (method, what) = fallback.warning();
    super::warn_fallback_once(&VARLEN_FAILED, method, what, || Some(why));
}

/// Why [`Path::Auto`] gave up on the varlen kernel in this process, if it did.
pub fn fallback_reason() -> Option<String> {
    GAVE_UP.get().cloned()
}

/// The varlen kernel against the scatter path on `device` in `kind`: three sequences (64, 17
/// and 1 tokens of 64 positions, 2 heads of 64) from a fixed pattern (no random draws, so the
/// run's generators are untouched); output and q/k/v gradients must agree within 2e-2 of the
/// largest value (bf16 rounding). An error says which differs, or why the kernel failed.
pub fn self_check(device: Device, kind: Kind) -> Result<()> {
    let mask = Tensor::arange(64, (Kind::Int64, Device::Cpu))
        .unsqueeze(0)
        .lt_tensor(&Tensor::from_slice(&[64i64, 17, 1]).unsqueeze(1))
        .to_kind(Kind::Int64)
        .to_device(device);
    let pack = Packing::from_mask(&mask);
    let n = 82 * 2 * 64;
    let pattern = |phase: f64| {
        (Tensor::arange(n, (Kind::Float, device)) * 0.37 + phase)
            .sin()
            .view([82, 2, 64])
            .to_kind(kind)
            .set_requires_grad(true)
    };
    tch::with_grad(|| {
        let (q, k, v) = (pattern(0.0), pattern(1.0), pattern(2.0));
        let dy = (Tensor::arange(n, (Kind::Float, device)) * 0.11)
            .cos()
            .view([82, 2, 64])
            .to_kind(kind);
        let scatter = forward_backward(&q, &k, &v, &dy, &pack, Path::Reference)?;
        let varlen = forward_backward(&q, &k, &v, &dy, &pack, Path::Fast)?;
        for (name, (a, b)) in ["output", "d q", "d k", "d v"]
            .iter()
            .zip(varlen.iter().zip(&scatter))
        {
            let (a, b) = (a.to_kind(Kind::Float), b.to_kind(Kind::Float));
            let scale = b.abs().max().double_value(&[]).max(1e-6);
            let diff = (&a - &b).abs().max().double_value(&[]);
            // (a NaN difference fails too)
            if diff.is_nan() || diff > 2e-2 * scale {
                anyhow::bail!(
                    "its {name} differs from the scatter path's by {diff:.3e} (largest value \
                     {scale:.3e}) on the self-check"
                );
            }
        }
        Ok(())
    })
}

/// One forward and backward of [`attention`] by `path` on leaves q, k, v with output gradient
/// `dy`: the output and the q, k, v gradients (their earlier gradients zeroed first). What the
/// self-check and the GPU check (`examples/varlen_attention_check.rs`) compare.
pub fn forward_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    dy: &Tensor,
    pack: &Packing,
    path: Path,
) -> Result<Vec<Tensor>> {
    for t in [q, k, v] {
        let mut g = t.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    let out = attention(q, k, v, pack, 0.0, path)?;
    (&out * dy).sum(Kind::Float).backward();
    Ok(vec![
        out.detach(),
        q.grad().copy(),
        k.grad().copy(),
        v.grad().copy(),
    ])
}

/// Whether [`Path::Auto`] gave up on the varlen kernel in this process.
pub fn varlen_failed() -> bool {
    VARLEN_FAILED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {

    #[test]
    fn each_fallback_warning_names_its_method_and_what_runs_instead() {
        let (method, what) = Fallback::Scatter.warning();
        assert_eq!(method, "unpad");
        assert!(
            what.contains("scatter path") && !what.contains("block"),
            "{what}"
        );
        let (method, what) = Fallback::BlockMask.warning();
        assert_eq!(method, "packing");
        assert!(
            what.contains("block-diagonal mask") && !what.contains("scatter"),
            "{what}"
        );
    }

    use super::*;

    fn mask(lengths: &[i64], s: i64) -> Tensor {
        Tensor::arange(s, (Kind::Int64, Device::Cpu))
            .unsqueeze(0)
            .lt_tensor(&Tensor::from_slice(lengths).unsqueeze(1))
            .to_kind(Kind::Int64)
    }

    #[test]
    fn packing_lists_the_real_tokens_and_where_each_sequence_starts() {
        // a hole in the last row: tokens stay grouped by sequence, in order
        let m = Tensor::from_slice(&[1i64, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0]).view([3, 4]);
        let p = Packing::from_mask(&m);
        assert_eq!(
            Vec::<i64>::try_from(&p.idx).unwrap(),
            [0, 1, 4, 5, 6, 7, 8, 10]
        );
        assert_eq!(p.cu_seqlens.kind(), Kind::Int);
        assert_eq!(Vec::<i32>::try_from(&p.cu_seqlens).unwrap(), [0, 2, 6, 8]);
        assert_eq!((p.batch, p.seq), (3, 4));
    }

    /// The scatter path is attention within each sequence: the same as running each sequence
    /// alone, unmasked, on its own tokens.
    #[test]
    fn the_scatter_path_attends_within_each_sequence_only() {
        let (nh, d, s) = (2, 8, 7);
        let lengths = [7i64, 3, 5, 1];
        let p = Packing::from_mask(&mask(&lengths, s));
        let t: i64 = lengths.iter().sum();
        let _g = tch::no_grad_guard();
        let [q, k, v] =
            [1.0, 2.0, 3.0].map(|_| Tensor::randn([t, nh, d], (Kind::Float, Device::Cpu)));
        let out = attention(&q, &k, &v, &p, 0.0, Path::Auto).unwrap();
        assert_eq!(out.size(), [t, nh, d]);
        // one sequence's [len, heads, d] rows attended alone, without a mask
        let alone = |q: &Tensor, k: &Tensor, v: &Tensor| {
            let heads = |x: &Tensor| x.permute([1, 0, 2]).unsqueeze(0);
            Tensor::scaled_dot_product_attention(
                &heads(q),
                &heads(k),
                &heads(v),
                None::<&Tensor>,
                0.0,
                false,
                None,
                false,
            )
            .squeeze_dim(0)
            .permute([1, 0, 2])
        };
        let mut start = 0;
        for &len in &lengths {
            let one = |x: &Tensor| x.narrow(0, start, len);
            let want = alone(&one(&q), &one(&k), &one(&v));
            let diff = (out.narrow(0, start, len) - want)
                .abs()
                .max()
                .double_value(&[]);
            assert!(diff < 1e-5, "sequence of {len}: {diff}");
            start += len;
        }
        // the comparison can fail: attending across sequences gives something else
        let across = alone(&q, &k, &v);
        assert!((&out - across).abs().max().double_value(&[]) > 1e-2);
    }

    #[test]
    fn the_varlen_kernel_is_a_clear_error_off_cuda_and_auto_takes_the_scatter_path() {
        let p = Packing::from_mask(&mask(&[3, 2], 4));
        let x = Tensor::randn([5, 2, 8], (Kind::BFloat16, Device::Cpu));
        let err = format!(
            "{:#}",
            attention(&x, &x, &x, &p, 0.0, Path::Fast).unwrap_err()
        );
        assert!(
            err.contains("varlen attention") && err.contains("CUDA"),
            "{err}"
        );
        let auto = attention(&x, &x, &x, &p, 0.0, Path::Auto).unwrap();
        let scatter = attention(&x, &x, &x, &p, 0.0, Path::Reference).unwrap();
        assert!(auto.equal(&scatter));
        assert!(
            !varlen_failed(),
            "a CPU tensor is no reason to give up the kernel"
        );
        // the self-check runs the scatter side, then fails on the kernel's CPU refusal
        let err = format!("{:#}", self_check(Device::Cpu, Kind::Float).unwrap_err());
        assert!(err.contains("CUDA"), "{err}");
    }
}
