//! The fused epilogue's CUDA kernels (`shim/fused_epilogue.cu`: forward, backward and the
//! d gamma / d beta column sums) run without a GPU: `FusedPath::Emulated` sends CPU tensors
//! through the same host code as on a GPU (buffers, launch shapes, the driver API's argument
//! arrays), and the launches run on the shim's emulator of CUDA's execution model
//! (`shim/cuda_emu.hpp`: one fiber per CUDA thread, `__syncthreads` and warp shuffles as
//! barriers, waiting threads resumed in a shuffled order).
//!
//! Every output and gradient is compared with an fp64 evaluation of the same math on the same
//! (rounded) inputs: the error must stay within the rounding of the output's dtype. The
//! composite (ATen) path is measured the same way, for scale. The shapes cover a row shorter
//! than a block, a row longer than one (several elements per thread, a partly idle last pass)
//! and more rows than one column-sum chunk (64) holds.
#![cfg(feature = "torch")]

use crate::common::rng::{rng_turn, seeded};
use crate::common::tensors::max_rel;
use mlperf_run::fused::epilogue::{
    bias_dropout_add_ln, dense_bias_gelu, qkv_projection, vectorised_launches, Epilogue, FusedPath,
};
use mlperf_run::gpu::amp::{Autocast, LowPrecision};
use tch::{Device, Kind, Tensor};

const EPS: f64 = 1e-5;

struct Case {
    rows: i64,
    cols: i64,
    h: Kind,
    residual: Kind,
    /// bf16 autocast on around the op (the LayerNorm then returns fp32, as layer_norm's policy)
    autocast: bool,
    /// dropout p with a given mask (0: no dropout)
    p: f64,
    bias: bool,
    /// an output dtype asked for (`Epilogue::out`), or None: the unfused ops' one
    out: Option<Kind>,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "{}x{} h {:?} residual {:?}{} p {}{}{}",
            self.rows,
            self.cols,
            self.h,
            self.residual,
            if self.autocast { " autocast" } else { "" },
            self.p,
            if self.bias { " bias" } else { "" },
            self.out.map(|k| format!(" out {k:?}")).unwrap_or_default()
        )
    }
}

/// The op's inputs, drawn once per case.
struct Inputs {
    h: Tensor,
    bias: Option<Tensor>,
    residual: Tensor,
    gamma: Tensor,
    beta: Tensor,
    mask: Option<Tensor>,
    /// d y, in y's dtype
    dy: Tensor,
}

fn inputs(c: &Case, seed: i64) -> Inputs {
    let _turn = seeded(seed);
    let f = (Kind::Float, Device::Cpu);
    let leaf = |t: Tensor| t.set_requires_grad(true);
    let out_kind = c.out.unwrap_or(if c.autocast {
        Kind::Float
    } else {
        promote(c.h, c.residual)
    });
    Inputs {
        h: leaf((Tensor::randn([c.rows, c.cols], f) * 2.0).to_kind(c.h)),
        bias: c
            .bias
            .then(|| leaf(Tensor::randn([c.cols], f) * 0.5 + 0.25)),
        residual: leaf((Tensor::randn([c.rows, c.cols], f) + 0.5).to_kind(c.residual)),
        gamma: leaf(Tensor::randn([c.cols], f) * 0.3 + 1.0),
        beta: leaf(Tensor::randn([c.cols], f) * 0.3),
        mask: (c.p > 0.0).then(|| {
            Tensor::rand([c.rows, c.cols], f)
                .ge(c.p)
                .to_kind(Kind::Float)
        }),
        dy: Tensor::randn([c.rows, c.cols], f).to_kind(out_kind),
    }
}

fn promote(a: Kind, b: Kind) -> Kind {
    if a == b {
        a
    } else {
        Kind::Float
    }
}

const NAMES: [&str; 6] = ["y", "d h", "d bias", "d residual", "d gamma", "d beta"];

/// y and the gradients of h, bias, residual, gamma and beta (bias: an empty tensor when absent),
/// and whether the kernel path ran.
fn run(c: &Case, i: &Inputs, path: FusedPath) -> (Vec<Tensor>, bool) {
    let leaves: Vec<&Tensor> = [&i.h, &i.residual, &i.gamma, &i.beta]
        .into_iter()
        .chain(i.bias.as_ref())
        .collect();
    for t in &leaves {
        let mut g = t.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    let e = Epilogue {
        residual: &i.residual,
        gamma: &i.gamma,
        beta: &i.beta,
        eps: EPS,
        p: c.p,
        train: c.p > 0.0,
        mask: i.mask.as_ref(),
        path,
        out: c.out,
    };
    let (y, kernel) = {
        let _ac = c
            .autocast
            .then(|| Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap());
        bias_dropout_add_ln(&i.h, i.bias.as_ref(), &e)
            .unwrap_or_else(|err| panic!("{} {path:?}: {err:#}", c.name()))
    };
    assert_eq!(y.kind(), i.dy.kind(), "{} {path:?}: y's dtype", c.name());
    (&y * &i.dy).sum(Kind::Float).backward();
    let bias_grad = i.bias.as_ref().map_or_else(
        || Tensor::zeros([0], (Kind::Float, Device::Cpu)),
        Tensor::grad,
    );
    let out = vec![
        y.detach(),
        i.h.grad().copy(),
        bias_grad.copy(),
        i.residual.grad().copy(),
        i.gamma.grad().copy(),
        i.beta.grad().copy(),
    ];
    (out, kernel)
}

/// The same math in fp64 from the same inputs (as rounded to their dtypes).
fn reference(c: &Case, i: &Inputs) -> Vec<Tensor> {
    let d = |t: &Tensor| t.detach().to_kind(Kind::Double).set_requires_grad(true);
    let (h, res, gamma, beta) = (d(&i.h), d(&i.residual), d(&i.gamma), d(&i.beta));
    let bias = i.bias.as_ref().map(d);
    let mut x = match &bias {
        Some(b) => &h + b,
        None => h.shallow_clone(),
    };
    if let Some(m) = &i.mask {
        x = x * m.to_kind(Kind::Double) / (1.0 - c.p);
    }
    let y = (x + &res).layer_norm([c.cols], Some(&gamma), Some(&beta), EPS, false);
    (&y * i.dy.to_kind(Kind::Double))
        .sum(Kind::Double)
        .backward();
    let bias_grad = bias.as_ref().map_or_else(
        || Tensor::zeros([0], (Kind::Double, Device::Cpu)),
        Tensor::grad,
    );
    vec![
        y.detach(),
        h.grad(),
        bias_grad,
        res.grad(),
        gamma.grad(),
        beta.grad(),
    ]
}

/// The bound on max_rel for a result of dtype k: one unit in the last place at the largest
/// magnitude for bf16 / fp16 (each element is within half of one of its own), and fp32's
/// accumulated rounding.
fn bound(k: Kind) -> f64 {
    match k {
        Kind::BFloat16 => 2f64.powi(-8),
        Kind::Half => 2f64.powi(-11),
        _ => 2e-5,
    }
}

/// For a bf16 / fp16 result that the kernels round once from fp32 (y, d h, d residual): the
/// largest error in units of the element's own last place, after allowing fp32's rounding
/// (1e-6 of the largest value). Rounding to nearest keeps it at most 0.5; truncating would not.
fn ulps(a: &Tensor, reference: &Tensor) -> Option<f64> {
    let mantissa = match a.kind() {
        Kind::BFloat16 => 7.0,
        Kind::Half => 10.0,
        _ => return None,
    };
    let min_exp = if a.kind() == Kind::Half {
        -14.0
    } else {
        -126.0
    };
    let slack = 1e-6 * reference.abs().max().double_value(&[]);
    let exp = reference
        .abs()
        .clamp_min(1e-300)
        .log2()
        .floor()
        .clamp_min(min_exp);
    let ulp = (exp - mantissa).exp2();
    let err = (a.to_kind(Kind::Double) - reference).abs() - slack;
    Some((err.clamp_min(0.0) / ulp).max().double_value(&[]))
}

fn check(c: &Case, seed: i64) {
    let what = c.name();
    let i = inputs(c, seed);
    let reference = reference(c, &i);
    let before = vectorised_launches();
    let (kernel, ran) = run(c, &i, FusedPath::Emulated);
    assert!(ran, "{what}: the emulated kernel path did not run");
    // rows of a multiple of 4 elements, up to 1,024 (a warp per row, 8 groups of 4 per lane),
    // take the vectorised row kernels (the test's tensors are fresh allocations, so aligned)
    let v4 = c.cols % 4 == 0 && c.cols <= 1024;
    let after = vectorised_launches();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        if v4 { (1, 1) } else { (0, 0) },
        "{what}: vectorised (forward, backward) launches"
    );
    let (composite, ran) = run(c, &i, FusedPath::Composite);
    assert!(!ran, "{what}: the composite path reported the kernel");
    // d bias is the column sum of d h in h's dtype (rounded, summed, rounded again)
    let limit = |n: usize| {
        if NAMES[n] == "d bias" {
            2.0 * bound(c.h)
        } else {
            bound(kernel[n].kind())
        }
    };
    within_bound(&what, &NAMES, &kernel, &composite, &reference, limit);
    for (n, name) in NAMES.iter().enumerate() {
        if ["y", "d h", "d residual"].contains(name) {
            if let Some(u) = ulps(&kernel[n], &reference[n]) {
                assert!(
                    u <= 0.5,
                    "{what}: {name}: {u:.2} units in the last place off (rounding to nearest \
                     gives at most 0.5)"
                );
            }
        }
    }
}

#[test]
fn the_kernels_match_fp64_in_fp32_on_rows_shorter_and_longer_than_a_block() {
    for (n, (rows, cols)) in [(3, 200), (2, 1030)].into_iter().enumerate() {
        for (p, bias) in [(0.1, true), (0.0, false)] {
            check(
                &Case {
                    rows,
                    cols,
                    h: Kind::Float,
                    residual: Kind::Float,
                    autocast: false,
                    p,
                    bias,
                    out: None,
                },
                n as i64,
            );
        }
    }
}

#[test]
fn the_vectorised_row_kernels_match_fp64_at_and_beyond_their_widths() {
    // rows of a multiple of 4 up to 1,024 take the _v4 kernels (a warp per row): 1024 (BERT's
    // width: 8 groups of 4 per lane), 328 (a partly idle third pass) and 1028 (past the groups a
    // lane holds: the scalar kernels again); 1030 (not a multiple of 4) is the scalar case of
    // the test above. 11 rows: the last block of 8 rows is partly empty
    for (n, cols) in [1024, 328, 1028].into_iter().enumerate() {
        for (h, residual, out) in [
            (Kind::Float, Kind::Float, None),
            (Kind::BFloat16, Kind::BFloat16, Some(Kind::BFloat16)),
        ] {
            check(
                &Case {
                    rows: 11,
                    cols,
                    h,
                    residual,
                    autocast: h == Kind::BFloat16,
                    p: 0.1,
                    bias: true,
                    out,
                },
                20 + n as i64,
            );
        }
    }
}

#[test]
fn the_column_sums_cover_every_chunk_of_rows() {
    // The vectorised backward sums chunks of 32 rows (a block: 4 warps of 8 rows; warps past
    // the last row add zeros) and mr_fe_colsum_final sums the chunks with 8 warps, eight chunks
    // at a time plus a remainder. 4,161 rows: 131 chunks, the last of 1 row; 130 rows: four
    // chunks of 32 and one of 2, all in the remainder loop. Rows of 42 take the scalar kernels,
    // whose column-sum kernel has chunks of 64 rows.
    for (rows, cols, seed) in [(4161, 40, 6), (130, 40, 5), (130, 42, 7)] {
        check(
            &Case {
                rows,
                cols,
                h: Kind::Float,
                residual: Kind::Float,
                autocast: false,
                p: 0.2,
                bias: true,
                out: None,
            },
            seed,
        );
    }
}

#[test]
fn the_kernels_match_fp64_in_bf16_and_fp16_and_under_autocast() {
    let cases = [
        // BERT under bf16 autocast: bf16 dense output, fp32 residual stream, fp32 out
        (Kind::BFloat16, Kind::Float, true, None),
        (Kind::BFloat16, Kind::BFloat16, true, None),
        // pure low precision: the output in the inputs' dtype
        (Kind::BFloat16, Kind::BFloat16, false, None),
        (Kind::Half, Kind::Half, false, None),
        (Kind::Half, Kind::Float, false, None),
        // methods.bf16_residual: bf16 in, bf16 out under autocast (LayerNorm in fp32 inside)
        (Kind::BFloat16, Kind::BFloat16, true, Some(Kind::BFloat16)),
        // an fp32 output asked for outside autocast
        (Kind::BFloat16, Kind::BFloat16, false, Some(Kind::Float)),
    ];
    for (n, (h, residual, autocast, out)) in cases.into_iter().enumerate() {
        check(
            &Case {
                rows: 4,
                cols: 320,
                h,
                residual,
                autocast,
                p: 0.1,
                bias: true,
                out,
            },
            10 + n as i64,
        );
    }
}

#[test]
fn the_emulated_path_refuses_what_the_kernels_do_not_take() {
    let _turn = seeded(1);
    let f = (Kind::Double, Device::Cpu);
    let h = Tensor::randn([2, 32], f);
    let (gamma, beta) = (Tensor::ones([32], f), Tensor::zeros([32], f));
    let e = Epilogue {
        residual: &h,
        gamma: &gamma,
        beta: &beta,
        eps: EPS,
        p: 0.0,
        train: false,
        mask: None,
        path: FusedPath::Emulated,
        out: None,
    };
    let msg = format!("{:#}", bias_dropout_add_ln(&h, None, &e).unwrap_err());
    assert!(
        msg.contains("emulated kernel path is not usable") && msg.contains("Double"),
        "{msg}"
    );
    assert!(
        !msg.contains("Exception raised from"),
        "C++ backtrace in: {msg}"
    );
}

/// The vectorised forward draws the dropout mask itself when none is given (Philox in the
/// kernel; the backward reads the mask it wrote): about 1 - p of the elements kept, the output
/// and every gradient those of the fp64 math with exactly that mask, a new mask every call, and
/// the same one again after the same manual seed.
#[test]
fn the_vectorised_forward_draws_its_own_mask() {
    let c = Case {
        rows: 48,
        cols: 1024,
        h: Kind::Float,
        residual: Kind::Float,
        autocast: false,
        p: 0.1,
        bias: true,
        out: None,
    };
    let mut i = inputs(&c, 40);
    i.mask = None;
    // the mask a call applied: where d h is exactly 0 (d y is random, so d s is not)
    let draw = |seed: Option<i64>| {
        // unseeded too: a draw outside the turn would shift another test's seeded sequence
        let _turn = match seed {
            Some(seed) => seeded(seed),
            None => rng_turn(),
        };
        let before = vectorised_launches();
        let (out, ran) = run(&c, &i, FusedPath::Emulated);
        assert!(ran, "the emulated kernel path did not run");
        assert_eq!(
            vectorised_launches().0 - before.0,
            1,
            "the vectorised forward did not run"
        );
        let mask = out[1].ne(0.0).to_kind(Kind::Float);
        (out, mask)
    };
    let (out, mask) = draw(Some(3));
    let n = (c.rows * c.cols) as f64;
    let kept = mask.sum(Kind::Double).double_value(&[]) / n;
    // 1 - p within 4.4 standard deviations of a binomial share
    let sd = (c.p * (1.0 - c.p) / n).sqrt();
    assert!(
        (kept - (1.0 - c.p)).abs() < 4.4 * sd,
        "kept {kept:.4} of the elements, expected {:.4} +- {:.4}",
        1.0 - c.p,
        4.4 * sd
    );
    let mut with_mask = inputs(&c, 40);
    with_mask.mask = Some(mask.shallow_clone());
    let reference = reference(&c, &with_mask);
    for (k, name) in NAMES.iter().enumerate() {
        let e = max_rel(&out[k], &reference[k]);
        let limit = if *name == "d bias" {
            2.0 * bound(c.h)
        } else {
            bound(out[k].kind())
        };
        assert!(
            e <= limit,
            "{name}: {e:e} off the fp64 math with the drawn mask (bound {limit:e})"
        );
    }
    let (_, again) = draw(None);
    assert!(!again.equal(&mask), "a second call drew the same mask");
    let (_, reseeded) = draw(Some(3));
    assert!(
        reseeded.equal(&mask),
        "the same manual seed drew another mask"
    );
}

/// Each of the kernel path's tensors has the composite path's dtype and shape and lies within
/// `bound(n)` (relative to the largest reference value) of the fp64 reference; the composite path's
/// error is printed beside it, for scale.
fn within_bound(
    what: &str,
    names: &[&str],
    kernel: &[Tensor],
    composite: &[Tensor],
    reference: &[Tensor],
    bound: impl Fn(usize) -> f64,
) {
    for (n, name) in names.iter().enumerate() {
        assert_eq!(
            kernel[n].kind(),
            composite[n].kind(),
            "{what}: {name} dtype"
        );
        assert_eq!(
            kernel[n].size(),
            composite[n].size(),
            "{what}: {name} shape"
        );
        let (ek, ec, limit) = (
            max_rel(&kernel[n], &reference[n]),
            max_rel(&composite[n], &reference[n]),
            bound(n),
        );
        eprintln!("{what}: {name}: kernel {ek:.2e}, composite {ec:.2e} (bound {limit:.1e})");
        assert!(
            ek.is_finite() && ek <= limit,
            "{what}: {name}: the kernels' max error is {ek:e} of the largest value (bound \
             {limit:e}; the composite path's: {ec:e})"
        );
    }
}

/// One path's outputs, then the gradients of x, W and b: `f` runs on fresh leaves made from
/// their values, under `autocast` when given, and the fp64 sum of each output times its given
/// gradient (`dys`) is backpropagated. Also whether `f` reported the kernel path.
fn outputs_and_grads(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    dys: &[Tensor],
    autocast: Option<LowPrecision>,
    f: impl FnOnce(&Tensor, &Tensor, &Tensor) -> (Vec<Tensor>, bool),
) -> (Vec<Tensor>, bool) {
    let leaf = |t: &Tensor| t.detach().copy().set_requires_grad(true);
    let (x, w, b) = (leaf(x), leaf(w), leaf(b));
    let (outs, used) = {
        let _ac = autocast.map(|p| Autocast::enter(Device::Cpu, p).unwrap());
        f(&x, &w, &b)
    };
    let mut loss = Tensor::zeros([], (Kind::Double, Device::Cpu));
    for (t, dy) in outs.iter().zip(dys) {
        loss += (t.to_kind(Kind::Double) * dy.to_kind(Kind::Double)).sum(Kind::Double);
    }
    loss.backward();
    let mut all: Vec<Tensor> = outs.iter().map(|t| t.detach()).collect();
    all.extend([x.grad(), w.grad(), b.grad()]);
    (all, used)
}

/// `GELU(x W^T + b)` and its gradients (x, W, b) from one path (None: the unfused ops, the fp64
/// reference on inputs widened to fp64), under `autocast` when given (the matmul, so z and y,
/// in that dtype); the output gradient `dy` is given.
fn dense_gelu_grads(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    dy: &Tensor,
    path: Option<FusedPath>,
    autocast: Option<LowPrecision>,
) -> (Vec<Tensor>, bool) {
    outputs_and_grads(
        x,
        w,
        b,
        std::slice::from_ref(dy),
        autocast,
        |x, w, b| match path {
            Some(path) => {
                let (y, used) = dense_bias_gelu(x, w, b, path).expect("dense_bias_gelu");
                (vec![y], used)
            }
            None => (vec![x.linear(w, Some(b)).gelu("none")], false),
        },
    )
}

/// The intermediate dense's bias + GELU kernels (forward; backward with the bias's column sums
/// over chunks of 64 rows, then mr_fe_colsum_final) against fp64: in fp32, and under bf16 and
/// fp16 autocast (as BERT trains), with more rows than one chunk and a short last chunk; the
/// composite path (exactly the unfused `linear(x, w, b).gelu()`) is measured the same way.
#[test]
fn the_bias_gelu_kernels_match_fp64() {
    let _turn = seeded(11);
    // (autocast, rows, columns: a block's 1,024 columns and more, with idle threads; bound)
    let cases = [
        (None, 130, 1032, 2e-5),
        (Some(LowPrecision::BFloat16), 70, 40, 2.0 * 2f64.powi(-8)),
        (Some(LowPrecision::Float16), 200, 8, 2.0 * 2f64.powi(-11)),
    ];
    for (autocast, rows, cols, bound) in cases {
        let f = (Kind::Float, Device::Cpu);
        let low = match autocast {
            Some(LowPrecision::BFloat16) => Kind::BFloat16,
            Some(LowPrecision::Float16) => Kind::Half,
            None => Kind::Float,
        };
        let x = Tensor::randn([rows, 24], f);
        let w = Tensor::randn([cols, 24], f) * 0.3;
        let b = Tensor::randn([cols], f);
        let dy = Tensor::randn([rows, cols], f).to_kind(low);
        // the reference sees the matmul's inputs as autocast rounds them
        let wide = |t: &Tensor| t.to_kind(low).to_kind(Kind::Double);
        let (reference, _) = dense_gelu_grads(
            &wide(&x),
            &wide(&w),
            &b.to_kind(Kind::Double),
            &dy,
            None,
            None,
        );
        let (kernel, used) = dense_gelu_grads(&x, &w, &b, &dy, Some(FusedPath::Emulated), autocast);
        assert!(used, "{low:?}: the emulated kernels did not run");
        let (composite, used) =
            dense_gelu_grads(&x, &w, &b, &dy, Some(FusedPath::Composite), autocast);
        assert!(!used, "{low:?}: the composite path reported the kernels");
        assert_eq!(kernel[0].kind(), low, "y is in the matmul's dtype");
        let what = format!("{low:?} {rows}x{cols}");
        within_bound(
            &what,
            &["y", "d x", "d W", "d b"],
            &kernel,
            &composite,
            &reference,
            |_| bound,
        );
    }
}

/// Auto on CPU tensors is exactly the unfused ops; the kernel paths refuse what they cannot run,
/// with messages that say why.
#[test]
fn the_bias_gelu_op_is_the_unfused_ops_on_a_cpu_and_refuses_cleanly() {
    let _turn = seeded(12);
    let f = (Kind::Float, Device::Cpu);
    let (x, w, b) = (
        Tensor::randn([6, 8], f),
        Tensor::randn([12, 8], f),
        Tensor::randn([12], f),
    );
    let dy = Tensor::randn([6, 12], f);
    let (auto, used) = dense_gelu_grads(&x, &w, &b, &dy, Some(FusedPath::Auto), None);
    assert!(!used);
    let leaf = |t: &Tensor| t.detach().copy().set_requires_grad(true);
    let (lx, lw, lb) = (leaf(&x), leaf(&w), leaf(&b));
    let y = lx.linear(&lw, Some(&lb)).gelu("none");
    (y.to_kind(Kind::Double) * dy.to_kind(Kind::Double))
        .sum(Kind::Double)
        .backward();
    for (a, u) in auto
        .iter()
        .zip([y.detach(), lx.grad(), lw.grad(), lb.grad()])
    {
        assert!(a.equal(&u), "Auto on a CPU differs from the unfused ops");
    }
    let msg = format!(
        "{:#}",
        dense_bias_gelu(&x, &w, &b, FusedPath::Kernel).unwrap_err()
    );
    assert!(msg.contains("CUDA kernel path takes CUDA tensors"), "{msg}");
    // 6 columns: not a multiple of 4
    let w6 = Tensor::randn([6, 8], f);
    let b6 = Tensor::randn([6], f);
    let msg = format!(
        "{:#}",
        dense_bias_gelu(&x, &w6, &b6, FusedPath::Emulated).unwrap_err()
    );
    assert!(
        msg.contains("emulated kernel path is not usable") && msg.contains("6 columns"),
        "{msg}"
    );
    assert!(
        !msg.contains("Exception raised from"),
        "C++ backtrace in: {msg}"
    );
}

/// Fused QKV's q, k, v and the gradients of x, W (`[3H, H]`) and b (`[3H]`) from one path, on
/// fresh leaves; the output gradients `dys` are given. `None`: the unbind path in fp64 on the
/// inputs as autocast rounds them (the reference).
fn qkv_grads(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    dys: &[Tensor; 3],
    heads: i64,
    path: Option<FusedPath>,
    autocast: Option<LowPrecision>,
) -> (Vec<Tensor>, bool) {
    outputs_and_grads(x, w, b, dys, autocast, |x, w, b| match path {
        Some(path) => {
            let (qkv, used) = qkv_projection(x, w, b, heads, path).expect("qkv_projection");
            (Vec::from(qkv), used)
        }
        None => {
            let h = w.size()[1];
            let v = x.linear(w, Some(b)).view([-1, 3, heads, h / heads]);
            (vec![v.select(1, 0), v.select(1, 1), v.select(1, 2)], false)
        }
    })
}

/// Fused QKV's backward kernel (d q, d k, d v side by side, the bias's column sums over chunks of
/// 64 rows, then mr_fe_colsum_final) against fp64: in fp32, under bf16 autocast with an fp32 x
/// and with a bf16 x (methods.bf16_residual), over more rows than a chunk holds and a width whose
/// last block has idle threads; the composite (unbind) path is measured the same way.
#[test]
fn the_fused_qkv_backward_kernel_matches_fp64() {
    let _turn = seeded(13);
    // (autocast, x's dtype, rows, hidden, heads, bound)
    let cases = [
        (None, Kind::Float, 150, 360, 6, 2e-5),
        (
            Some(LowPrecision::BFloat16),
            Kind::Float,
            70,
            64,
            4,
            2.0 * 2f64.powi(-8),
        ),
        (
            Some(LowPrecision::BFloat16),
            Kind::BFloat16,
            130,
            32,
            2,
            2.0 * 2f64.powi(-8),
        ),
    ];
    for (autocast, xk, rows, h, heads, bound) in cases {
        let f = (Kind::Float, Device::Cpu);
        let low = if autocast.is_some() {
            Kind::BFloat16
        } else {
            Kind::Float
        };
        let x = Tensor::randn([rows, h], f).to_kind(xk);
        let w = Tensor::randn([3 * h, h], f) * 0.2;
        let b = Tensor::randn([3 * h], f);
        let dys = [0, 1, 2].map(|_| Tensor::randn([rows, heads, h / heads], f).to_kind(low));
        let wide = |t: &Tensor| t.to_kind(low).to_kind(Kind::Double);
        let (reference, _) = qkv_grads(
            &wide(&x),
            &wide(&w),
            &b.to_kind(Kind::Double),
            &dys,
            heads,
            None,
            None,
        );
        let what = format!("{autocast:?} x {xk:?} {rows}x{h}");
        let (kernel, used) =
            qkv_grads(&x, &w, &b, &dys, heads, Some(FusedPath::Emulated), autocast);
        assert!(used, "{what}: the emulated kernel did not run");
        let (composite, used) = qkv_grads(
            &x,
            &w,
            &b,
            &dys,
            heads,
            Some(FusedPath::Composite),
            autocast,
        );
        assert!(!used, "{what}: the composite path reported the kernel");
        let names = ["q", "k", "v", "d x", "d W", "d b"];
        within_bound(&what, &names, &kernel, &composite, &reference, |_| bound);
        // the forward is the same matmul on both paths
        for n in 0..3 {
            assert!(kernel[n].equal(&composite[n]), "{what}: output {n} differs");
        }
    }
}

/// Auto on CPU tensors is exactly the unbind path; the kernel paths refuse what they cannot run.
#[test]
fn fused_qkv_is_the_unfused_ops_on_a_cpu_and_refuses_cleanly() {
    let _turn = seeded(14);
    let f = (Kind::Float, Device::Cpu);
    let (x, w, b) = (
        Tensor::randn([5, 8], f),
        Tensor::randn([24, 8], f),
        Tensor::randn([24], f),
    );
    let dys = [0, 1, 2].map(|_| Tensor::randn([5, 2, 4], f));
    let (auto, used) = qkv_grads(&x, &w, &b, &dys, 2, Some(FusedPath::Auto), None);
    assert!(!used);
    let (unbind, _) = qkv_grads(&x, &w, &b, &dys, 2, None, None);
    for (a, u) in auto.iter().zip(&unbind) {
        assert!(a.equal(u), "Auto on a CPU differs from the unbind path");
    }
    let msg = format!(
        "{:#}",
        qkv_projection(&x, &w, &b, 2, FusedPath::Kernel).unwrap_err()
    );
    assert!(msg.contains("CUDA kernel path is not usable"), "{msg}");
    let msg = format!(
        "{:#}",
        qkv_projection(&x, &w, &b, 3, FusedPath::Emulated).unwrap_err()
    );
    assert!(msg.contains("multiple of 3 heads"), "{msg}");
    // 6 columns: not a multiple of 4
    let (x6, w6, b6) = (
        Tensor::randn([5, 6], f),
        Tensor::randn([18, 6], f),
        Tensor::randn([18], f),
    );
    let msg = format!(
        "{:#}",
        qkv_projection(&x6, &w6, &b6, 2, FusedPath::Emulated).unwrap_err()
    );
    assert!(msg.contains("emulated kernel path is not usable"), "{msg}");
    assert!(
        !msg.contains("Exception raised from"),
        "C++ backtrace in: {msg}"
    );
}
