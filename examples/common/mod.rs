//! What the benchmark and check examples share: clap value parsers for `--device` and
//! `--methods` (the benchmark's methods struct, as a config's `[methods]` table names them),
//! timing helpers (device-synchronised rounds, their median, wall-clock seconds) and, for the
//! fused-op checks, the flags they share ([`OpShapeArgs`]), the BERT examples' model shape
//! ([`BertShapeArgs`]), zeroing gradients and the max
//! differences of a set of tensors. Each example parses its own flags with clap.
//!
//! Each of those examples includes this file with `mod common;` and uses only part of it.
#![allow(dead_code)]

use anyhow::{bail, Result};
use mlperf_run::methods::MethodSet;
use std::time::{SystemTime, UNIX_EPOCH};
use tch::{Device, Kind, Tensor};

/// `--device`: `cpu`, `cuda` (the first GPU; an error when libtorch sees none) or `auto` (the
/// first GPU when there is one, else the CPU).
pub fn parse_device(v: &str) -> Result<Device> {
    match v {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(default_device()),
        "cuda" if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
        "cuda" => bail!("no CUDA device is available to libtorch"),
        _ => bail!("one of cpu, cuda, auto"),
    }
}

/// `--methods a,b,name=value`: the benchmark's methods through its own struct
/// ([`mlperf_run::methods::parse_list`]), checked as a config's `[methods]` table is.
pub fn parse_methods<M: MethodSet + Clone + Send + Sync + 'static>(v: &str) -> Result<M> {
    mlperf_run::methods::parse_list(v)
}

/// The BERT model's shape as the BERT examples take it (BERT-Large by default); `config()`
/// gives the model config, the rest of it BERT-Large's.
#[derive(clap::Args, Debug, Clone)]
pub struct BertShapeArgs {
    #[arg(long, default_value_t = 24)]
    pub layers: i64,
    #[arg(long, default_value_t = 1024)]
    pub hidden: i64,
    #[arg(long, default_value_t = 16)]
    pub heads: i64,
    #[arg(long, default_value_t = 4096)]
    pub inter: i64,
    #[arg(long, default_value_t = 30528)]
    pub vocab: i64,
}

impl BertShapeArgs {
    /// BERT-Large's config with this shape (not yet validated).
    pub fn config(&self) -> mlperf_run::models::bert::BertConfig {
        mlperf_run::models::bert::BertConfig {
            num_layers: self.layers,
            hidden_size: self.hidden,
            num_heads: self.heads,
            intermediate_size: self.inter,
            vocab_size: self.vocab,
            ..mlperf_run::models::bert::BertConfig::large()
        }
    }
}

/// The flags the fused-op checks share: a matrix of `tokens x hidden` through an `inner`-wide
/// op (BERT-Large: 56 x 512 tokens, hidden 1024), `rounds` timed rounds, bf16 autocast unless
/// `--no-bf16`.
#[derive(clap::Args, Debug, Clone)]
pub struct OpShapeArgs {
    #[arg(long, value_parser = parse_device, default_value = "auto")]
    pub device: Device,
    #[arg(long, default_value_t = 56 * 512)]
    pub tokens: i64,
    #[arg(long, default_value_t = 1024)]
    pub hidden: i64,
    /// The op's inner width (default: the check's own, BERT-Large's).
    #[arg(long)]
    pub inner: Option<i64>,
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// fp32 instead of bf16 autocast.
    #[arg(long)]
    pub no_bf16: bool,
}

/// [`OpShapeArgs`] with the inner width decided.
pub struct OpShape {
    pub device: Device,
    pub tokens: i64,
    pub hidden: i64,
    pub inner: i64,
    pub rounds: usize,
    pub bf16: bool,
}

impl OpShapeArgs {
    /// The shape, with `default_inner` where `--inner` was not given.
    pub fn resolve(&self, default_inner: i64) -> OpShape {
        OpShape {
            device: self.device,
            tokens: self.tokens,
            hidden: self.hidden,
            inner: self.inner.unwrap_or(default_inner),
            rounds: self.rounds,
            bf16: !self.no_bf16,
        }
    }
}

/// The first GPU when libtorch sees one, else the CPU.
pub fn default_device() -> Device {
    if tch::Cuda::is_available() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    }
}

/// The median (the upper one of an even count) of `v`, which must not be empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs `f` `warmup + rounds` times, each run bracketed by device synchronisations, and
/// returns the wall time of each of the last `rounds` runs (in order) and the last result.
pub fn time_rounds<T>(
    device: Device,
    warmup: usize,
    rounds: usize,
    mut f: impl FnMut() -> Result<T>,
) -> Result<(Vec<f64>, T)> {
    let mut times = Vec::with_capacity(rounds);
    let mut last = None;
    for i in 0..warmup + rounds.max(1) {
        mlperf_run::gpu::cuda::synchronize(device);
        let t0 = std::time::Instant::now();
        last = Some(f()?);
        mlperf_run::gpu::cuda::synchronize(device);
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok((times, last.expect("at least one round ran")))
}

/// Seconds since the Unix epoch of `t` (0 for a time before it).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Zeroes the gradient of each tensor that has one (in place, keeping its memory).
pub fn zero_grads(tensors: &[&Tensor]) {
    for t in tensors {
        let mut g = t.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
}

/// How far each tensor of `a` is from the one at the same place in `reference`: per name, the
/// max abs difference, that over the max |reference| (`max_rel`) and `a`'s dtype; and the worst
/// `max_rel` (a NaN counts as infinite).
pub fn max_diffs(
    a: &[Tensor],
    reference: &[Tensor],
    names: &[&str],
) -> (serde_json::Map<String, serde_json::Value>, f64) {
    let mut out = serde_json::Map::new();
    let mut worst: f64 = 0.0;
    for ((x, r), name) in a.iter().zip(reference).zip(names) {
        let kind = x.kind();
        let (x, r) = (x.to_kind(Kind::Double), r.to_kind(Kind::Double));
        let abs = (&x - &r).abs().max().double_value(&[]);
        let rel = abs / r.abs().max().double_value(&[]).max(1e-30);
        worst = worst.max(if rel.is_nan() { f64::INFINITY } else { rel });
        out.insert(
            name.to_string(),
            serde_json::json!({"max_abs": abs, "max_rel": rel, "dtype": format!("{kind:?}")}),
        );
    }
    (out, worst)
}
