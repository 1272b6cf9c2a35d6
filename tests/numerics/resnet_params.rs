//! ResNet-50 v1.5 has exactly torchvision's 25,557,032 parameters at 1000 classes.
#![cfg(feature = "torch")]

use crate::common::rng::{rng_turn, seeded};
use mlperf_run::methods::ResnetMethods;
use mlperf_run::models::parameter_count;
use mlperf_run::models::resnet::{build, ResnetSpec};
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};

#[test]
fn resnet50_has_25_557_032_parameters() {
    let _turn = rng_turn();
    let (vs, _) = build(&ResnetSpec::resnet50(1000), Device::Cpu);
    assert_eq!(parameter_count(&vs), 25_557_032);
    // 1001 classes (the MLPerf reference's extra background class) adds one row of fc
    let (vs, _) = build(&ResnetSpec::resnet50(1001), Device::Cpu);
    assert_eq!(parameter_count(&vs), 25_557_032 + 2048 + 1);
    // BlurPool adds fixed filters, not parameters; names follow torchvision
    let (vs, _) = build(
        &ResnetSpec {
            methods: ResnetMethods {
                blurpool: true,
                ..Default::default()
            },
            ..ResnetSpec::resnet50(1000)
        },
        Device::Cpu,
    );
    assert_eq!(parameter_count(&vs), 25_557_032);
    let names = vs.variables();
    for n in [
        "conv1.weight",
        "layer1.0.conv2.weight",
        "layer4.2.bn3.weight",
        "layer2.0.downsample.0.weight",
        "fc.bias",
    ] {
        assert!(names.contains_key(n), "missing {n}");
    }
    assert!(names.contains_key("layer3.5.bn3.running_var"));
    assert!(!names.contains_key("layer3.6.conv1.weight"));
}

#[test]
fn tiny_resnet_forward_shapes_and_zero_init() {
    let _turn = rng_turn();
    let spec = ResnetSpec {
        classes: 10,
        width: 8,
        blocks: [1, 1, 1, 1],
        zero_init_last_bn: true,
        methods: ResnetMethods {
            blurpool: true,
            ..Default::default()
        },
    };
    let (vs, net) = build(&spec, Device::Cpu);
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    assert_eq!(net.forward_t(&x, true).size(), vec![2, 10]);
    assert_eq!(net.forward_t(&x, false).size(), vec![2, 10]);
    let g = &vs.variables()["layer2.0.bn3.weight"];
    assert_eq!(g.abs().sum(Kind::Float).double_value(&[]), 0.0);
    let g1 = &vs.variables()["layer2.0.bn1.weight"];
    assert_eq!(g1.sum(Kind::Float).double_value(&[]), 16.0);
}

#[test]
fn channels_last_gives_the_same_output() {
    let _turn = seeded(3);
    let spec = ResnetSpec {
        classes: 5,
        width: 8,
        blocks: [1, 1, 1, 1],
        zero_init_last_bn: false,
        methods: ResnetMethods::default(),
    };
    let (vs, net) = build(&spec, Device::Cpu);
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    let a = net.forward_t(&x, false);
    mlperf_run::models::resnet::convert_channels_last(&vs);
    let w = &vs.variables()["conv1.weight"];
    assert_eq!(w.stride()[1], 1, "conv weights should have NHWC strides");
    let b = net.forward_t(&mlperf_run::models::to_channels_last(&x), false);
    let diff = (a - b).abs().max().double_value(&[]);
    assert!(diff < 1e-4, "{diff}");
}
