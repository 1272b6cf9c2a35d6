//! ResNet v1.5 (the MLPerf ResNet-50 and torchvision's `resnet50`): a 7x7/2 conv-BN-ReLU stem,
//! a 3x3/2 max-pool, four stages of bottlenecks with the stride on the 3x3 conv (v1.5) and on
//! the projection, global average pooling and a fully connected classifier. BN momentum 0.1
//! (TF/MXNet 0.9), eps 1e-5. Width and blocks per stage are configurable for tiny presets.
//!
//! Open-division switches: BlurPool (Composer's `apply_blurpool`: strided convs with at least
//! 16 input channels blur first, the max-pool becomes a max-blur-pool), channels-last, and
//! fused BN+ReLU (`methods.fused_bn_relu`: every BN followed by a ReLU, with the residual add
//! in between for the last BN of a bottleneck, runs as one op; parameters unchanged).

use crate::fused::bn_relu;
use crate::methods::{blurpool, ResnetMethods};
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

/// Shape and switches of a ResNet v1.5.
#[derive(Debug, Clone, PartialEq)]
pub struct ResnetSpec {
    pub classes: i64,
    /// Planes of the first stage (64 in ResNet-50); stages use width x 1, 2, 4, 8.
    pub width: i64,
    /// Bottlenecks per stage (3, 4, 6, 3 in ResNet-50).
    pub blocks: [i64; 4],
    /// Zero-init the gamma of the last BN of every bottleneck (Goyal et al.).
    pub zero_init_last_bn: bool,
    /// The run's methods, whole ([`ResnetMethods`]); the model reads `blurpool` (Composer
    /// BlurPool: replace_convs, replace_maxpools, blur_first, min_channels 16) and
    /// `fused_bn_relu` (BN (+ residual) + ReLU as one op, [`crate::fused::bn_relu`]; same parameters and
    /// buffers).
    pub methods: ResnetMethods,
}

impl ResnetSpec {
    /// ResNet-50 v1.5 at `classes` classes.
    pub fn resnet50(classes: i64) -> Self {
        ResnetSpec {
            classes,
            width: 64,
            blocks: [3, 4, 6, 3],
            zero_init_last_bn: false,
            methods: ResnetMethods::default(),
        }
    }
}

const EXPANSION: i64 = 4;
const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

fn conv_init() -> nn::Init {
    nn::Init::Kaiming {
        dist: nn::init::NormalOrUniform::Normal,
        fan: nn::init::FanInOut::FanOut,
        non_linearity: nn::init::NonLinearity::ReLU,
    }
}

fn conv(p: nn::Path, c_in: i64, c_out: i64, k: i64, stride: i64, padding: i64) -> nn::Conv2D {
    let cfg = nn::ConvConfig {
        stride,
        padding,
        bias: false,
        ws_init: conv_init(),
        ..Default::default()
    };
    nn::conv2d(p, c_in, c_out, k, cfg)
}

fn bn(p: nn::Path, c: i64, zero_gamma: bool) -> nn::BatchNorm {
    let ws_init = if zero_gamma {
        nn::Init::Const(0.0)
    } else {
        nn::Init::Const(1.0)
    };
    let cfg = nn::BatchNormConfig {
        eps: BN_EPS,
        momentum: BN_MOMENTUM,
        ws_init,
        ..Default::default()
    };
    nn::batch_norm2d(p, c, cfg)
}

/// `relu(bn(xs) + residual)`, fused or as the unfused chain (in-place add and ReLU, as
/// torchvision: fewer large allocations). Both give the same bits on the CPU.
fn bn_relu(
    xs: &Tensor,
    bn: &nn::BatchNorm,
    residual: Option<&Tensor>,
    fused: bool,
    train: bool,
) -> Tensor {
    if fused {
        return bn_relu::bn_add_relu(xs, residual, bn, BN_MOMENTUM, BN_EPS, train);
    }
    let mut ys = xs.apply_t(bn, train);
    if let Some(z) = residual {
        ys += z;
    }
    let _ = ys.relu_();
    ys
}

/// A convolution that may blur its input first (BlurPool on strided convs).
#[derive(Debug)]
struct MaybeBlurConv {
    conv: nn::Conv2D,
    blur: Option<Tensor>,
}

impl MaybeBlurConv {
    fn new(
        p: nn::Path,
        c_in: i64,
        c_out: i64,
        k: i64,
        stride: i64,
        padding: i64,
        blurpool: bool,
    ) -> Self {
        let blur = (blurpool && stride > 1 && c_in >= blurpool::MIN_CHANNELS)
            .then(|| blurpool::filter(c_in, p.device()));
        MaybeBlurConv {
            conv: conv(p, c_in, c_out, k, stride, padding),
            blur,
        }
    }

    fn forward(&self, xs: &Tensor) -> Tensor {
        match &self.blur {
            Some(f) => blurpool::blur(xs, f, 1).apply(&self.conv),
            None => xs.apply(&self.conv),
        }
    }
}

#[derive(Debug)]
struct Bottleneck {
    conv1: nn::Conv2D,
    bn1: nn::BatchNorm,
    conv2: MaybeBlurConv,
    bn2: nn::BatchNorm,
    conv3: nn::Conv2D,
    bn3: nn::BatchNorm,
    downsample: Option<(MaybeBlurConv, nn::BatchNorm)>,
    fused_bn_relu: bool,
}

impl Bottleneck {
    fn new(p: nn::Path, c_in: i64, planes: i64, stride: i64, spec: &ResnetSpec) -> Self {
        let c_out = planes * EXPANSION;
        let downsample = (stride != 1 || c_in != c_out).then(|| {
            (
                MaybeBlurConv::new(
                    &p / "downsample" / "0",
                    c_in,
                    c_out,
                    1,
                    stride,
                    0,
                    spec.methods.blurpool,
                ),
                bn(&p / "downsample" / "1", c_out, false),
            )
        });
        Bottleneck {
            conv1: conv(&p / "conv1", c_in, planes, 1, 1, 0),
            bn1: bn(&p / "bn1", planes, false),
            conv2: MaybeBlurConv::new(
                &p / "conv2",
                planes,
                planes,
                3,
                stride,
                1,
                spec.methods.blurpool,
            ),
            bn2: bn(&p / "bn2", planes, false),
            conv3: conv(&p / "conv3", planes, c_out, 1, 1, 0),
            bn3: bn(&p / "bn3", c_out, spec.zero_init_last_bn),
            downsample,
            fused_bn_relu: spec.methods.fused_bn_relu,
        }
    }
}

impl ModuleT for Bottleneck {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let fused = self.fused_bn_relu;
        let ys = bn_relu(&xs.apply(&self.conv1), &self.bn1, None, fused, train);
        let ys = bn_relu(&self.conv2.forward(&ys), &self.bn2, None, fused, train);
        let ys = ys.apply(&self.conv3);
        // the projection's BN has no ReLU of its own: it stays a plain BN and is the residual
        let projected = self
            .downsample
            .as_ref()
            .map(|(c, b)| c.forward(xs).apply_t(b, train));
        let residual = projected.as_ref().unwrap_or(xs);
        bn_relu(&ys, &self.bn3, Some(residual), fused, train)
    }
}

/// ResNet v1.5. Parameter names follow torchvision (`conv1.weight`, `layer1.0.bn3.weight`, ...).
#[derive(Debug)]
pub struct Resnet {
    conv1: nn::Conv2D,
    bn1: nn::BatchNorm,
    maxpool_blur: Option<Tensor>,
    layers: Vec<Bottleneck>,
    fc: nn::Linear,
    fused_bn_relu: bool,
}

impl Resnet {
    pub fn new(root: &nn::Path, spec: &ResnetSpec) -> Resnet {
        let w = spec.width;
        let mut layers = Vec::new();
        let mut c_in = w;
        for (stage, &n) in spec.blocks.iter().enumerate() {
            let planes = w << stage;
            let p = root / format!("layer{}", stage + 1);
            for i in 0..n {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                layers.push(Bottleneck::new(&p / i, c_in, planes, stride, spec));
                c_in = planes * EXPANSION;
            }
        }
        Resnet {
            conv1: conv(root / "conv1", 3, w, 7, 2, 3),
            bn1: bn(root / "bn1", w, false),
            maxpool_blur: spec
                .methods
                .blurpool
                .then(|| blurpool::filter(w, root.device())),
            layers,
            fc: nn::linear(root / "fc", c_in, spec.classes, Default::default()),
            fused_bn_relu: spec.methods.fused_bn_relu,
        }
    }
}

impl ModuleT for Resnet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let ys = bn_relu(
            &xs.apply(&self.conv1),
            &self.bn1,
            None,
            self.fused_bn_relu,
            train,
        );
        if self.fused_bn_relu && train {
            bn_relu::warn_fallback_once();
        }
        let mut ys = match &self.maxpool_blur {
            // Composer MaxBlurPool2d: max-pool at stride 1, then blur at stride 2.
            Some(f) => blurpool::blur(&ys.max_pool2d([3, 3], [1, 1], [1, 1], [1, 1], false), f, 2),
            None => ys.max_pool2d([3, 3], [2, 2], [1, 1], [1, 1], false),
        };
        for layer in &self.layers {
            ys = layer.forward_t(&ys, train);
        }
        ys.adaptive_avg_pool2d([1, 1])
            .flatten(1, -1)
            .apply(&self.fc)
    }
}

/// Give every 4-d variable (conv weights) channels-last strides in place.
pub fn convert_channels_last(vs: &nn::VarStore) {
    tch::no_grad(|| {
        for (_, mut t) in vs.variables() {
            if t.dim() == 4 {
                let cl = super::to_channels_last(&t);
                t.set_data(&cl);
            }
        }
    });
}

/// ImageNet normalisation of u8 NHWC batches on the device: `(x - mean) / std` per channel, then
/// NCHW (a channels-last view when `channels_last`, else contiguous). The mean and std live on
/// the device, made once: normalising a batch launches a few kernels and copies nothing.
pub struct Normalize {
    mean: Tensor,
    std: Tensor,
    channels_last: bool,
}

impl Normalize {
    pub fn new(device: Device, channels_last: bool) -> Normalize {
        let mean = [0.485f32 * 255.0, 0.456 * 255.0, 0.406 * 255.0];
        let std = [0.229f32 * 255.0, 0.224 * 255.0, 0.225 * 255.0];
        Normalize {
            mean: Tensor::from_slice(&mean).to_device(device),
            std: Tensor::from_slice(&std).to_device(device),
            channels_last,
        }
    }

    /// `images`: `[n, h, w, 3]` u8 on the device; returns `[n, 3, h, w]` fp32.
    pub fn apply(&self, images: &Tensor) -> Tensor {
        let x = (images.to_kind(Kind::Float) - &self.mean) / &self.std;
        let x = x.permute([0, 3, 1, 2]);
        if self.channels_last {
            x
        } else {
            x.contiguous()
        }
    }
}

/// A ResNet on `device` with its var store.
pub fn build(spec: &ResnetSpec, device: Device) -> (nn::VarStore, Resnet) {
    let vs = nn::VarStore::new(device);
    let net = Resnet::new(&vs.root(), spec);
    (vs, net)
}
