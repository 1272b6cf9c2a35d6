//! Comparing tensors in tests of fused ops against their unfused twins.
use tch::{Kind, Tensor};

/// Each of `a` equals its counterpart in `b` to the bit, with the same dtype and shape;
/// `names` labels them (the output, then the gradients) in the failure message.
pub fn assert_bit_identical(what: &str, names: &[&str], a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len(), "{what}: tensor counts");
    for ((x, y), name) in a.iter().zip(b).zip(names) {
        assert_eq!(x.kind(), y.kind(), "{what}: {name} dtype");
        assert_eq!(x.size(), y.size(), "{what}: {name} shape");
        let diff = (x.to_kind(Kind::Double) - y.to_kind(Kind::Double))
            .abs()
            .max()
            .double_value(&[]);
        assert!(x.equal(y), "{what}: {name} differs (max abs diff {diff:e})");
    }
}

/// Two models' variables (parameters and buffers, in the same order) are equal to the bit.
pub fn assert_same_state(what: &str, a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len(), "{what}: variable count");
    assert!(!a.is_empty(), "{what}: no variables");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(x.equal(y), "{what}: variable #{i} differs");
    }
}

/// The largest difference of `a` from `reference`, relative to the largest magnitude in
/// `reference` (both compared in fp64); 0 for empty tensors.
pub fn max_rel(a: &Tensor, reference: &Tensor) -> f64 {
    if reference.numel() == 0 {
        return 0.0;
    }
    let (a, r) = (a.to_kind(Kind::Double), reference.to_kind(Kind::Double));
    let scale = r.abs().max().double_value(&[]).max(1e-30);
    (a - r).abs().max().double_value(&[]) / scale
}
