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
