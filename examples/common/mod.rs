//! What the benchmark and check examples share: a small command-line flag reader (switches,
//! typed values, `--device`, `-h/--help`, the same error wording everywhere), timing helpers
//! (device-synchronised rounds, their median, wall-clock seconds) and, for the fused-op checks,
//! the flags they share ([`OpShape`]), zeroing gradients and the max differences of a set of
//! tensors. Each example keeps its own usage line and any flags of its own.
//!
//! Each of those examples includes this file with `mod common;` and uses only part of it.
#![allow(dead_code)]

use anyhow::{anyhow, bail, Context, Result};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};
use tch::{Device, Kind, Tensor};

/// Reads `--flag [value]` arguments one flag at a time.
///
/// ```ignore
/// let mut f = Flags::new(USAGE);
/// while let Some(flag) = f.next() {
///     match flag.as_str() {
///         "--bf16" => a.bf16 = true,          // a switch: nothing to read
///         "--steps" => a.steps = f.parse()?,  // a typed value
///         "--device" => a.device = f.device()?,
///         _ => return Err(f.unknown()),
///     }
/// }
/// ```
pub struct Flags {
    usage: &'static str,
    args: std::iter::Skip<std::env::Args>,
    flag: String,
}

impl Flags {
    /// Over the process's arguments; `usage` is printed by `-h/--help` and after errors.
    pub fn new(usage: &'static str) -> Flags {
        Flags {
            usage,
            args: std::env::args().skip(1),
            flag: String::new(),
        }
    }

    /// The next flag, or None after the last. `-h`/`--help` prints the usage and exits 0.
    pub fn next(&mut self) -> Option<String> {
        let flag = self.args.next()?;
        if flag == "-h" || flag == "--help" {
            println!("usage: {}", self.usage);
            std::process::exit(0);
        }
        self.flag = flag.clone();
        Some(flag)
    }

    /// The current flag's value (the next argument).
    pub fn value(&mut self) -> Result<String> {
        let flag = &self.flag;
        let usage = self.usage;
        self.args
            .next()
            .with_context(|| format!("{flag} needs a value\nusage: {usage}"))
    }

    /// The current flag's value parsed as `T`.
    pub fn parse<T>(&mut self) -> Result<T>
    where
        T: FromStr,
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        let v = self.value()?;
        let flag = &self.flag;
        v.parse()
            .with_context(|| format!("bad value {v:?} for {flag}"))
    }

    /// The current flag's value, which must be one of `choices`.
    pub fn one_of(&mut self, choices: &[&str]) -> Result<String> {
        let v = self.value()?;
        if !choices.contains(&v.as_str()) {
            bail!(
                "bad value {v:?} for {}: one of {}",
                self.flag,
                choices.join(", ")
            );
        }
        Ok(v)
    }

    /// The current flag's value as a device: `cpu`, or `cuda` (the first GPU; an error when
    /// libtorch sees none).
    pub fn device(&mut self) -> Result<Device> {
        match self.one_of(&["cpu", "cuda"])?.as_str() {
            "cpu" => Ok(Device::Cpu),
            _ if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
            _ => bail!(
                "{} cuda: no CUDA device is available to libtorch",
                self.flag
            ),
        }
    }

    /// The error for a flag the example does not have.
    pub fn unknown(&self) -> anyhow::Error {
        anyhow!("unknown flag {}\nusage: {}", self.flag, self.usage)
    }
}

/// The flags the fused-op checks share: a matrix of `tokens x hidden` through an `inner`-wide
/// op (BERT-Large: 56 x 512 tokens, hidden 1024), `rounds` timed rounds, bf16 autocast unless
/// `--no-bf16`.
pub struct OpShape {
    pub device: Device,
    pub tokens: i64,
    pub hidden: i64,
    pub inner: i64,
    pub rounds: usize,
    pub bf16: bool,
}

impl OpShape {
    /// BERT-Large's micro-batch with the given inner width, 20 rounds, bf16, the default device.
    pub fn bert_large(inner: i64) -> OpShape {
        OpShape {
            device: default_device(),
            tokens: 56 * 512,
            hidden: 1024,
            inner,
            rounds: 20,
            bf16: true,
        }
    }

    /// Takes `flag` when it is one of the shared flags (`--device --tokens --hidden --inner
    /// --rounds --no-bf16`); false for any other, which the caller then handles.
    pub fn take(&mut self, flag: &str, f: &mut Flags) -> Result<bool> {
        match flag {
            "--no-bf16" => self.bf16 = false,
            "--device" => self.device = f.device()?,
            "--tokens" => self.tokens = f.parse()?,
            "--hidden" => self.hidden = f.parse()?,
            "--inner" => self.inner = f.parse()?,
            "--rounds" => self.rounds = f.parse()?,
            _ => return Ok(false),
        }
        Ok(true)
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
        mlperf_run::cuda::synchronize(device);
        let t0 = std::time::Instant::now();
        last = Some(f()?);
        mlperf_run::cuda::synchronize(device);
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
