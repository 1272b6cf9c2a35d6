//! Python value semantics the official checker's rule expressions rely on (`==` between
//! numbers and booleans, comparisons that raise `TypeError` on non-numbers, `is_integer`).
//! Our verdicts must agree with what those expressions evaluate to on the same JSON values.

use serde_json::Value;

/// The value as a Python number: JSON numbers, and booleans (a `bool` is an `int` in Python).
/// None where Python would raise `TypeError` in an arithmetic comparison.
pub fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

/// Python `a == b` on JSON-decoded values.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| equal(p, q)))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// The checker's `is_integer(x)`: `abs(round(x) - x) < 0.00001`; `round` raises on NaN and
/// infinities, which the checker reports as a failed check.
pub fn is_integer(x: f64) -> bool {
    x.is_finite() && (x.round() - x).abs() < 0.00001
}

/// `is_integer(math.log2(x / base))`: x is base times a power of two (`log2` raises for
/// x/base <= 0).
pub fn is_power_of_two_multiple(x: f64, base: f64) -> bool {
    let ratio = x / base;
    ratio > 0.0 && is_integer(ratio.log2())
}

/// Python's `min(a, b)`: returns `a` unless `b < a` (so NaN in `b` never wins).
pub fn min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// Python's `int(v)` as the seed checker applies it to a seed value.
pub fn int(v: &Value) -> Option<i128> {
    match v {
        Value::Bool(b) => Some(*b as i128),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i as i128)
            } else if let Some(u) = n.as_u64() {
                Some(u as i128)
            } else {
                let f = n.as_f64()?;
                (f.is_finite() && f.abs() < 1e38).then(|| f.trunc() as i128)
            }
        }
        Value::String(s) => {
            let t = s.trim().replace('_', "");
            t.parse::<i128>().ok()
        }
        _ => None,
    }
}

/// A short rendering of a value for messages.
pub fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_follows_python() {
        assert!(equal(&json!(1), &json!(1.0)));
        assert!(equal(&json!(true), &json!(1)));
        assert!(!equal(&json!("1"), &json!(1)));
        assert!(equal(&json!(null), &json!(null)));
        assert!(equal(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!equal(&json!({"a": 1}), &json!({"b": 1})));
    }

    #[test]
    fn integer_and_power_checks() {
        assert!(is_integer(3.000001));
        assert!(!is_integer(3.1));
        assert!(!is_integer(f64::NAN));
        assert!(!is_integer(f64::INFINITY));
        assert!(is_power_of_two_multiple(0.0004, 0.0001));
        assert!(is_power_of_two_multiple(0.00005, 0.0001));
        assert!(!is_power_of_two_multiple(0.0003, 0.0001));
        assert!(!is_power_of_two_multiple(0.0, 0.0001));
        assert!(!is_power_of_two_multiple(-0.0002, 0.0001));
    }

    #[test]
    fn int_conversion() {
        assert_eq!(int(&json!(7)), Some(7));
        assert_eq!(int(&json!(7.9)), Some(7));
        assert_eq!(int(&json!(" 12 ")), Some(12));
        assert_eq!(int(&json!("1.5")), None);
        assert_eq!(int(&json!(null)), None);
        assert_eq!(int(&json!(true)), Some(1));
    }
}
