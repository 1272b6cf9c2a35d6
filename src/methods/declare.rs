//! How a benchmark's methods say, in one place each, what they are, whether the closed division
//! allows them and why, and what the log records of them.
//!
//! A benchmark's methods are one serde struct ([`super::ResnetMethods`],
//! [`super::BertMethods`]) that implements [`MethodSet`]: its [`MethodSet::declared`] lists
//! every method with its current setting. The closed-division refusal
//! ([`MethodSet::refuse_in_closed`]), the `method_*` hyperparameter keys of the log
//! ([`MethodSet::log_keys`]) and the examples' `--methods a,b,c` flag ([`parse_list`]) all
//! come from that list and that struct, so adding a method is its field, its line in
//! `declared`, its use, a test and a docs line.
//!
//! Legality follows the MLPerf Training rules (training_rules.adoc, "Numerical formats",
//! "Graph execution", "Data"): number formats (fp32, tf32, fp16, bf16, fp8) and mathematically
//! equivalent graph changes (fused kernels, CUDA graphs) are implementation choices, allowed in
//! both divisions; what changes the math is open-division only.

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Whether the closed division allows a method at its current setting, and the rules' reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Allowed in both divisions (the same math, a number format, or sharding the rules allow).
    Allowed(&'static str),
    /// Open division only: it changes the math the reference computes.
    OpenOnly(&'static str),
}

impl Closed {
    /// The rules' reason, either way.
    pub fn why(self) -> &'static str {
        match self {
            Closed::Allowed(w) | Closed::OpenOnly(w) => w,
        }
    }
}

/// One method of a benchmark, at its current setting.
#[derive(Debug, Clone)]
pub struct Method {
    /// The config key under `[methods]` (and the name `--methods` takes).
    pub name: &'static str,
    /// Whether it is on (a setting that changes nothing counts as off).
    pub on: bool,
    /// The closed division's verdict on this setting.
    pub closed: Closed,
    /// The hyperparameter key the log records it under (`None`: logged elsewhere, as
    /// `cuda_graph` is with the device settings).
    pub log_key: Option<&'static str>,
    /// The logged value.
    pub log_value: Value,
}

impl Method {
    /// A method logged as `log_key` with `value`.
    pub fn new(
        name: &'static str,
        on: bool,
        closed: Closed,
        log_key: Option<&'static str>,
        log_value: Value,
    ) -> Method {
        Method {
            name,
            on,
            closed,
            log_key,
            log_value,
        }
    }

    /// `cuda_graph`, which both benchmarks have: the step captured once and replayed, the same
    /// kernels (closed-legal); logged as `cuda_graph` with the device settings, in both
    /// divisions, not among the `method_*` keys.
    pub fn cuda_graph(on: bool) -> Method {
        Method::new(
            "cuda_graph",
            on,
            Closed::Allowed(super::SAME_MATH),
            None,
            Value::Bool(on),
        )
    }

    /// A boolean switch logged as `method_<name>`.
    pub fn switch(name: &'static str, on: bool, closed: Closed, log_key: &'static str) -> Method {
        Method::new(name, on, closed, Some(log_key), Value::Bool(on))
    }
}

/// A benchmark's set of methods: one serde struct, its methods declared in one list.
pub trait MethodSet: DeserializeOwned + Default {
    /// Every method with its current setting, in the order the log records them.
    fn declared(&self) -> Vec<Method>;

    /// Refuse a method that is on and open-division only, naming it and the reason.
    fn refuse_in_closed(&self) -> Result<()> {
        for m in self.declared() {
            if let (true, Closed::OpenOnly(why)) = (m.on, m.closed) {
                bail!(
                    "closed division: methods.{} is an open-division method ({why}): turn it off \
                     or use --division open",
                    m.name
                );
            }
        }
        Ok(())
    }

    /// The `method_*` hyperparameter keys of the log, in declaration order.
    fn log_keys(&self) -> Vec<(&'static str, Value)> {
        self.declared()
            .into_iter()
            .filter_map(|m| m.log_key.map(|k| (k, m.log_value)))
            .collect()
    }

    /// The names of the methods that are on, for messages and reports.
    fn enabled(&self) -> Vec<&'static str> {
        self.declared()
            .into_iter()
            .filter(|m| m.on)
            .map(|m| m.name)
            .collect()
    }
}

/// Methods from a comma-separated list as the examples' `--methods` flag takes it: a bare name
/// switches a method on (`cuda_graph`), `name=value` sets it (`amp=bf16`, `label_smoothing=0.1`);
/// `-` in names is read as `_`. The list goes through the same serde struct as a config's
/// `[methods]` table, so an unknown name or a bad value is refused with the struct's own message.
pub fn parse_list<M: MethodSet>(list: &str) -> Result<M> {
    let mut table = toml::Table::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n.trim().replace('-', "_"), parse_value(v.trim())),
            None => (item.replace('-', "_"), toml::Value::Boolean(true)),
        };
        table.insert(name, value);
    }
    toml::Value::Table(table)
        .try_into()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--methods {list:?}"))
}

/// A `--methods` value as TOML would read it: a boolean, a number, or else a string.
fn parse_value(v: &str) -> toml::Value {
    if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else {
        toml::Value::String(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{Amp, BertMethods, ResnetMethods};

    #[test]
    fn a_list_goes_through_the_struct() {
        let m: BertMethods = parse_list("cuda-graph, fused_qkv,amp=bf16").unwrap();
        assert!(m.cuda_graph && m.fused_qkv && !m.fused_epilogues);
        assert_eq!(m.amp, Amp::Bf16);
        // defaults stay (fused attention is on unless turned off)
        assert!(m.fused_attention);
        let m: BertMethods = parse_list("fused_attention=false").unwrap();
        assert!(!m.fused_attention);
        let m: ResnetMethods = parse_list("label_smoothing=0.1,channels_last").unwrap();
        assert_eq!(m.label_smoothing, 0.1);
        assert!(m.channels_last);
        assert_eq!(parse_list::<ResnetMethods>("").unwrap().amp, Amp::None);
        // an unknown method and a bad value are refused by the struct, naming them
        let e = format!("{:#}", parse_list::<BertMethods>("cuda_graf").unwrap_err());
        assert!(e.contains("cuda_graf") && e.contains("--methods"), "{e}");
        let e = format!("{:#}", parse_list::<BertMethods>("amp=fp8").unwrap_err());
        assert!(e.contains("fp8"), "{e}");
        // a later value wins
        let m: ResnetMethods = parse_list("amp=bf16,channels_last,amp=fp16").unwrap();
        assert_eq!(m.amp, Amp::Fp16);
    }

    #[test]
    fn the_closed_refusal_names_the_method_and_why() {
        let mut m = ResnetMethods {
            fused_bn_relu: true,
            cuda_graph: true,
            amp: Amp::Fp16,
            channels_last: true,
            label_smoothing: 0.1,
            ..ResnetMethods::default()
        };
        m.refuse_in_closed().unwrap();
        m.label_smoothing = 0.08;
        let e = m.refuse_in_closed().unwrap_err().to_string();
        assert!(
            e.contains("methods.label_smoothing") && e.contains("0 or 0.1"),
            "{e}"
        );
        let b = BertMethods {
            fused_bias_gelu: true,
            ..BertMethods::default()
        };
        let e = b.refuse_in_closed().unwrap_err().to_string();
        assert!(
            e.contains("methods.fused_bias_gelu") && e.contains("tanh"),
            "{e}"
        );
        // every open-only method is refused when on, and each declaration says why
        for d in ResnetMethods::default().declared() {
            assert!(!d.closed.why().is_empty(), "{}", d.name);
            assert!(!d.on, "{} is on by default", d.name);
        }
    }

    #[test]
    fn log_keys_follow_the_declarations() {
        let m = BertMethods {
            amp: Amp::Bf16,
            fused_qkv: true,
            ..BertMethods::default()
        };
        let keys = m.log_keys();
        let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "method_unpad",
                "method_fused_attention",
                "method_bf16",
                "method_fused_epilogues",
                "method_fused_qkv",
                "method_bf16_residual",
                "method_fused_bias_gelu",
                "method_balance_tokens",
                "method_packing",
                "method_fp8"
            ]
        );
        assert_eq!(keys[2].1, Value::Bool(true));
        assert_eq!(keys[4].1, Value::Bool(true));
        assert_eq!(m.enabled(), ["fused_attention", "amp", "fused_qkv"]);
        let r = ResnetMethods::default().log_keys();
        assert_eq!(r.len(), 7);
        assert_eq!(r[5], ("method_amp", Value::from("none")));
    }
}

#[cfg(test)]
mod docs {
    use super::MethodSet;
    use crate::methods::{BertMethods, ResnetMethods};

    /// docs/methods.md has a table row for every declared method of each benchmark.
    #[test]
    fn methods_are_documented() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/methods.md");
        let text = std::fs::read_to_string(path).expect("docs/methods.md");
        let section = |title: &str| -> String {
            let start = text
                .find(title)
                .unwrap_or_else(|| panic!("{path}: no {title}"));
            let rest = &text[start + title.len()..];
            rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
        };
        let sets = [
            ("## ResNet-50", ResnetMethods::default().declared()),
            ("## BERT-Large", BertMethods::default().declared()),
        ];
        for (title, declared) in sets {
            let rows = section(title);
            for m in declared {
                assert!(
                    rows.contains(&format!("| `{}` |", m.name)),
                    "{path}: section {title} has no row for the method `{}`",
                    m.name
                );
            }
        }
    }
}
