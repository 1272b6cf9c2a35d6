//! `methods.fused_bn_relu` on the CPU, where the fused op runs the unfused chain's own ATen
//! calls (`shim/fused_bn.cpp`): op by op it must give the same bits as `apply_t(&bn)`, `+= z`,
//! `relu_()` (outputs, gradients of x, z, weight and bias, running statistics; NCHW and
//! channels-last; training and eval), and under bf16 autocast stay within bf16 rounding of
//! fp32; a tiny ResNet trains bit-identically with it on and off (also through the CUDA-graph
//! CPU twin) and its log passes our checker and the official one; the closed division refuses
//! it. The cuDNN path needs a GPU: `examples/fused_bn_check.rs`.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::rng::{rng_turn, seeded};
use crate::common::tensors::assert_same_state;
use crate::common::train::{open_tiny_two_micro_batches, preset, resnet_workload};
use mlperf_run::fused::bn_relu::{bn_add_relu, counts, cudnn_compiled, cudnn_probe, f_bn_add_relu};
use mlperf_run::gpu::amp::{Autocast, LowPrecision};
use mlperf_run::models::to_channels_last;
use mlperf_run::rules::Division;
use mlperf_run::train::engine::Workload;
use mlperf_run::train::resnet::config::ResnetRunConfig;
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

const MOMENTUM: f64 = 0.1;
const EPS: f64 = 1e-5;

/// A BN with random affine parameters and non-trivial running statistics.
fn make_bn(vs: &nn::VarStore, c: i64, seed: i64) -> nn::BatchNorm {
    let mut bn = nn::batch_norm2d(
        vs.root() / "bn",
        c,
        nn::BatchNormConfig {
            eps: EPS,
            momentum: MOMENTUM,
            ..Default::default()
        },
    );
    tch::manual_seed(seed);
    tch::no_grad(|| {
        bn.ws
            .as_mut()
            .unwrap()
            .copy_(&(Tensor::randn([c], (Kind::Float, Device::Cpu)) * 0.5 + 1.0));
        bn.bs
            .as_mut()
            .unwrap()
            .copy_(&(Tensor::randn([c], (Kind::Float, Device::Cpu)) * 0.2));
        bn.running_mean
            .copy_(&Tensor::randn([c], (Kind::Float, Device::Cpu)));
        bn.running_var
            .copy_(&(Tensor::rand([c], (Kind::Float, Device::Cpu)) + 0.5));
    });
    bn
}

/// What one forward + backward produces.
struct Results {
    y: Tensor,
    gx: Tensor,
    gz: Option<Tensor>,
    gw: Tensor,
    gb: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
}

/// y = relu(bn(x) + z), fused or unfused, then backward of sum(y * gy).
fn run(fused: bool, x0: &Tensor, z0: Option<&Tensor>, gy: &Tensor, train: bool) -> Results {
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = make_bn(&vs, x0.size()[1], 7);
    // copies keep the layout (NCHW or channels-last) of the originals
    let x = x0.copy().set_requires_grad(true);
    let z = z0.map(|z| z.copy().set_requires_grad(true));
    let y = if fused {
        bn_add_relu(&x, z.as_ref(), &bn, MOMENTUM, EPS, train)
    } else {
        // the unfused chain as src/models/resnet.rs runs it
        let mut y = x.apply_t(&bn, train);
        if let Some(z) = &z {
            y += z;
        }
        let _ = y.relu_();
        y
    };
    (&y * gy).sum(Kind::Float).backward();
    Results {
        y: y.detach(),
        gx: x.grad(),
        gz: z.map(|z| z.grad()),
        gw: bn.ws.as_ref().unwrap().grad(),
        gb: bn.bs.as_ref().unwrap().grad(),
        running_mean: bn.running_mean.copy(),
        running_var: bn.running_var.copy(),
    }
}

fn pairs(a: &Results, b: &Results) -> Vec<(&'static str, Tensor, Tensor)> {
    let mut v = vec![
        ("y", a.y.shallow_clone(), b.y.shallow_clone()),
        ("dx", a.gx.shallow_clone(), b.gx.shallow_clone()),
        ("dweight", a.gw.shallow_clone(), b.gw.shallow_clone()),
        ("dbias", a.gb.shallow_clone(), b.gb.shallow_clone()),
        (
            "running_mean",
            a.running_mean.shallow_clone(),
            b.running_mean.shallow_clone(),
        ),
        (
            "running_var",
            a.running_var.shallow_clone(),
            b.running_var.shallow_clone(),
        ),
    ];
    match (&a.gz, &b.gz) {
        (Some(p), Some(q)) => v.push(("dz", p.shallow_clone(), q.shallow_clone())),
        (None, None) => {}
        _ => panic!("one side has a residual gradient, the other not"),
    }
    v
}

fn inputs(
    n: i64,
    c: i64,
    h: i64,
    w: i64,
    channels_last: bool,
    residual: bool,
    kind: Kind,
) -> (Tensor, Option<Tensor>, Tensor) {
    let opts = (Kind::Float, Device::Cpu);
    let layout = |t: Tensor| {
        let t = t.to_kind(kind);
        if channels_last {
            to_channels_last(&t)
        } else {
            t
        }
    };
    // a mean and spread per channel, as conv outputs have
    let x = Tensor::randn([n, c, h, w], opts) * 2.0 + 0.3;
    let z = residual.then(|| layout(Tensor::randn([n, c, h, w], opts)));
    let gy = Tensor::randn([n, c, h, w], opts);
    (layout(x), z, layout(gy))
}

#[test]
fn fp32_fused_op_is_bit_identical_to_the_unfused_chain() {
    let _turn = seeded(1);
    let (cudnn_before, composite_before) = counts();
    let mut cases = 0;
    for &channels_last in &[false, true] {
        for &residual in &[false, true] {
            for &train in &[true, false] {
                // odd sizes too: the CPU kernels vectorise in chunks, remainders must agree
                for &(n, c, h, w) in &[(4, 16, 7, 7), (3, 12, 5, 9)] {
                    let what = format!(
                        "{n}x{c}x{h}x{w} channels_last={channels_last} residual={residual} train={train}"
                    );
                    let (x, z, gy) = inputs(n, c, h, w, channels_last, residual, Kind::Float);
                    let a = run(false, &x, z.as_ref(), &gy, train);
                    let b = run(true, &x, z.as_ref(), &gy, train);
                    assert_eq!(a.y.stride(), b.y.stride(), "{what}: output layout");
                    for (name, p, q) in pairs(&a, &b) {
                        assert!(p.defined() && q.defined(), "{what}: {name} undefined");
                        assert!(
                            p.equal(&q),
                            "{what}: {name} differs, max abs diff {}",
                            (&p - &q).abs().max().double_value(&[])
                        );
                    }
                    // training updates the running statistics (the test can see a difference)
                    if train {
                        let vs = nn::VarStore::new(Device::Cpu);
                        let fresh = make_bn(&vs, c, 7);
                        assert!(!fresh.running_mean.equal(&a.running_mean), "{what}");
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 16);
    // every training call took the composite path (8 of the 16 cases train)
    let (cudnn_after, composite_after) = counts();
    assert_eq!(cudnn_after, cudnn_before, "no cuDNN on the CPU");
    assert!(composite_after - composite_before >= 8);
}

#[test]
fn fused_op_under_bf16_autocast_runs_and_stays_within_bf16_rounding() {
    let _turn = seeded(2);
    for &residual in &[false, true] {
        for &train in &[true, false] {
            let what = format!("bf16 residual={residual} train={train}");
            // the fp32 reference on the bf16-rounded inputs
            let (x, z, gy) = inputs(4, 16, 6, 6, true, residual, Kind::BFloat16);
            let reference = run(
                false,
                &x.to_kind(Kind::Float),
                z.as_ref().map(|z| z.to_kind(Kind::Float)).as_ref(),
                &gy.to_kind(Kind::Float),
                train,
            );
            let (unfused, fused) = {
                let _ac = Autocast::enter(Device::Cpu, LowPrecision::BFloat16).unwrap();
                (
                    run(false, &x, z.as_ref(), &gy, train),
                    run(true, &x, z.as_ref(), &gy, train),
                )
            };
            assert_eq!(fused.y.kind(), Kind::BFloat16, "{what}: output dtype");
            for (name, p, q) in pairs(&unfused, &fused) {
                // same calls under autocast too: same bits
                assert!(p.equal(&q), "{what}: {name} differs from the unfused chain");
            }
            for (name, p, q) in pairs(&reference, &fused) {
                let p = p.to_kind(Kind::Float);
                let q = q.to_kind(Kind::Float);
                // relative L2 error. bf16 keeps 8 significant bits (rounding 2^-9 = 0.2%): the
                // outputs are within 1%. Gradients get more: where bn(x) + z lies within bf16
                // rounding of 0 the ReLU gate flips against fp32's, which moves single elements
                // by O(1) (measured: dz, which is just the gated gradient, 5% with a residual;
                // dx, dweight, dbias 3-5%), so no max-abs bound fits and the norm gets 10%.
                let rel = (&p - &q).norm().double_value(&[]) / p.norm().double_value(&[]).max(1e-6);
                let bound = if name == "y" { 0.01 } else { 0.1 };
                assert!(
                    rel <= bound,
                    "{what}: {name} off fp32 by {rel} (relative L2, bound {bound})"
                );
            }
        }
    }
}

#[test]
fn shim_errors_come_back_as_messages() {
    let _turn = rng_turn();
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = make_bn(&vs, 8, 3);
    let x = Tensor::randn([2, 8, 4, 4], (Kind::Float, Device::Cpu));
    let z = Tensor::randn([2, 8, 4, 5], (Kind::Float, Device::Cpu));
    let e = f_bn_add_relu(&x, Some(&z), &bn, MOMENTUM, EPS, true).unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.starts_with("fused BN+ReLU:"), "{msg}");
    assert!(msg.contains("residual"), "{msg}");
    assert!(!msg.contains("Exception raised from"), "{msg}");
    // a channel count the BN does not have: libtorch's own message, no C++ backtrace
    let x = Tensor::randn([2, 6, 4, 4], (Kind::Float, Device::Cpu));
    let msg = format!(
        "{:#}",
        f_bn_add_relu(&x, None, &bn, MOMENTUM, EPS, true).unwrap_err()
    );
    assert!(
        msg.contains("running_mean should contain 6 elements"),
        "{msg}"
    );
    assert!(!msg.contains("frame #"), "{msg}");
}

/// The open tiny preset (BlurPool, channels-last, progressive resizing, EMA) to its target
/// with fused BN+ReLU: the same losses, evals and final parameters and buffers as without, and
/// a log both checkers accept.
#[test]
fn tiny_open_run_trains_bit_identically_and_passes_the_checkers() {
    let _turn = rng_turn();
    let plain = ResnetRunConfig::load(&preset("configs/resnet/tiny_cpu_open.toml"), Division::Open)
        .unwrap();
    assert!(!plain.methods.fused_bn_relu);
    let mut fused = plain.clone();
    fused.methods.fused_bn_relu = true;
    let dir = tempfile::tempdir().unwrap();
    let seed = 99;
    let (a, wa) = resnet_workload(&plain, None, seed, None, &dir.path().join("plain.txt"));
    let (_, composite_before) = counts();
    let log = dir.path().join("result_0.txt");
    let (b, wb) = resnet_workload(&fused, None, seed, None, &log);
    let (_, composite_after) = counts();
    assert!(
        composite_after > composite_before,
        "the fused op did not run"
    );
    assert!(a.steps > 20, "{:?} after {} steps", a.status, a.steps);
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.losses, b.losses, "losses");
    assert_eq!(a.evals, b.evals, "evals");
    assert_same_state("fused vs unfused", &wa.state_tensors(), &wb.state_tensors());
    let parsed =
        common::train::assert_reached_target_and_compliant("fused_bn_relu", &fused, &b, seed, &log);
    assert_eq!(
        parsed.first("method_fused_bn_relu").unwrap().value,
        serde_json::json!(true)
    );
}

/// Fused BN+ReLU through the CUDA-graph CPU twin (static buffers, warm-up / capture / replay,
/// 2 micro-batches per step) trains as the plain eager step does.
#[test]
fn composes_with_the_cuda_graph_twin() {
    let _turn = rng_turn();
    let plain = open_tiny_two_micro_batches(4);
    let mut fused = plain.clone();
    fused.methods.fused_bn_relu = true;
    let dir = tempfile::tempdir().unwrap();
    let (a, wa) = resnet_workload(&plain, None, 11, None, &dir.path().join("eager.txt"));
    let (b, wb) = resnet_workload(&fused, None, 11, Some(2), &dir.path().join("graph.txt"));
    assert!(a.steps > 10, "{:?} after {} steps", a.status, a.steps);
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.losses, b.losses, "losses");
    assert_eq!(a.evals, b.evals, "evals");
    assert_same_state(
        "fused twin vs eager",
        &wa.state_tensors(),
        &wb.state_tensors(),
    );
    assert!(wb.graph_stats().unwrap().replays > 0);
}

#[test]
fn both_divisions_allow_it() {
    let text = common::preset_with_method("resnet/tiny_cpu.toml", "fused_bn_relu = true");
    // the same math in one kernel (what NVIDIA's closed ResNet runs): a closed-division method
    let cfg = ResnetRunConfig::parse(&text, Division::Closed).unwrap();
    assert!(cfg.methods.fused_bn_relu);
    let cfg = ResnetRunConfig::parse(&text, Division::Open).unwrap();
    assert!(cfg.methods.fused_bn_relu);
    // an open-only method beside it is still refused, named with the reason
    let blur = text.replace(
        "fused_bn_relu = true",
        "fused_bn_relu = true\nblurpool = true",
    );
    let msg = format!(
        "{:#}",
        ResnetRunConfig::parse(&blur, Division::Closed).unwrap_err()
    );
    assert!(
        msg.contains("methods.blurpool is an open-division method")
            && msg.contains("changes the model"),
        "{msg}"
    );
}

/// The model switch itself: same parameter names, and a ResNet forward in eval mode is the
/// same with and without it (the op tests cover training).
#[test]
fn resnet_with_the_switch_has_the_same_parameters_and_output() {
    let _turn = rng_turn();
    use mlperf_run::models::resnet::{build, ResnetSpec};
    let spec = ResnetSpec {
        classes: 5,
        width: 8,
        blocks: [1, 2, 1, 1],
        zero_init_last_bn: false,
        methods: Default::default(),
    };
    tch::manual_seed(4);
    let (va, na) = build(&spec, Device::Cpu);
    tch::manual_seed(4);
    let (vb, nb) = build(
        &ResnetSpec {
            methods: mlperf_run::methods::ResnetMethods {
                fused_bn_relu: true,
                ..Default::default()
            },
            ..spec.clone()
        },
        Device::Cpu,
    );
    let (ka, kb) = (va.variables(), vb.variables());
    let mut names: Vec<_> = ka.keys().collect();
    names.sort();
    let mut names_b: Vec<_> = kb.keys().collect();
    names_b.sort();
    assert_eq!(names, names_b);
    let x = Tensor::randn([3, 3, 32, 32], (Kind::Float, Device::Cpu));
    for train in [false, true] {
        let ya = na.forward_t(&x, train);
        let yb = nb.forward_t(&x, train);
        assert!(
            ya.equal(&yb),
            "train={train}: max abs diff {}",
            (&ya - &yb).abs().max().double_value(&[])
        );
    }
    for n in names {
        assert!(ka[n].equal(&kb[n]), "{n} after a training forward");
    }
}

#[test]
fn cudnn_entry_points_resolve_in_a_cuda_build() {
    if !cudnn_compiled() {
        let msg = format!("{:#}", cudnn_probe().unwrap_err());
        assert!(msg.contains("without the `cuda` feature"), "{msg}");
        eprintln!("SKIP cudnn_entry_points_resolve_in_a_cuda_build: a build without `cuda`");
        return;
    }
    // libtorch_cuda links libcudnn.so.9, so it is loaded even on a machine without a GPU
    cudnn_probe().unwrap_or_else(|e| panic!("cuDNN entry points: {e:#}"));
}
