//! BlurPool (Zhang 2019, as Composer's `apply_blurpool`): a fixed [1, 2, 1] x [1, 2, 1] / 16
//! depthwise low-pass filter before strided convolutions (blur_first) and after a stride-1
//! max-pool (MaxBlurPool2d). The filter is a constant, not a parameter.

use tch::{Device, Tensor};

/// Convs with fewer input channels are left alone (Composer's default `min_channels`).
pub const MIN_CHANNELS: i64 = 16;

/// The depthwise blur filter for `channels` channels: shape [channels, 1, 3, 3].
pub fn filter(channels: i64, device: Device) -> Tensor {
    let k = Tensor::from_slice(&[1f32, 2., 1.]);
    let k2 = k.outer(&k) / 16.0;
    k2.view([1, 1, 3, 3])
        .repeat([channels, 1, 1, 1])
        .to_device(device)
}

/// Blur `xs` (NCHW) with `filter` at `stride`, padding 1 (same size at stride 1).
pub fn blur(xs: &Tensor, filter: &Tensor, stride: i64) -> Tensor {
    let channels = xs.size()[1];
    let f = if filter.kind() == xs.kind() {
        filter.shallow_clone()
    } else {
        filter.to_kind(xs.kind())
    };
    xs.conv2d(
        &f,
        None::<Tensor>,
        [stride, stride],
        [1, 1],
        [1, 1],
        channels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn blur_keeps_constants_and_smooths_a_spike() {
        let f = filter(2, Device::Cpu);
        let ones = Tensor::ones([1, 2, 6, 6], (Kind::Float, Device::Cpu));
        let out = blur(&ones, &f, 1);
        // interior pixels of a constant image stay constant
        assert!((out.double_value(&[0, 1, 3, 3]) - 1.0).abs() < 1e-6);
        let spike = Tensor::zeros([1, 1, 5, 5], (Kind::Float, Device::Cpu));
        let _ = spike.narrow(2, 2, 1).narrow(3, 2, 1).fill_(16.0);
        let out = blur(&spike, &filter(1, Device::Cpu), 1);
        assert!((out.double_value(&[0, 0, 2, 2]) - 4.0).abs() < 1e-6);
        assert!((out.double_value(&[0, 0, 1, 1]) - 1.0).abs() < 1e-6);
        assert_eq!(
            blur(&spike, &filter(1, Device::Cpu), 2).size(),
            vec![1, 1, 3, 3]
        );
    }
}
