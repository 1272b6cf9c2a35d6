//! What every benchmark's run config shares: reading the file (`load_file`) and the batch
//! checks (`check_batch`, and `local_batch` for a world size). Each benchmark's own config is beside its workload
//! (`train::resnet::config`, `train::bert::config`); the `[system]` table is
//! `runs::system::SystemConfig`, the division `rules::Division`.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Reads the run config at `path` and parses it with `parse` (which validates it); an error
/// names the file.
pub(crate) fn load_file<C>(path: &Path, parse: impl FnOnce(&str) -> Result<C>) -> Result<C> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    parse(&text).with_context(|| format!("invalid config {}", path.display()))
}

/// `train.global_batch_size` and `train.gradient_accumulation_steps`: both at least 1, the
/// first a multiple of the second (a step's micro-batches are equal).
pub(crate) fn check_batch(global_batch_size: u64, gradient_accumulation_steps: u64) -> Result<()> {
    if global_batch_size == 0 || gradient_accumulation_steps == 0 {
        bail!("train.global_batch_size and train.gradient_accumulation_steps must be at least 1");
    }
    if !global_batch_size.is_multiple_of(gradient_accumulation_steps) {
        bail!(
            "train.global_batch_size ({global_batch_size}) must be a multiple of \
             train.gradient_accumulation_steps ({gradient_accumulation_steps})"
        );
    }
    Ok(())
}

/// The per-process micro-batch of `global_batch_size` over `world_size` processes that each
/// accumulate `gradient_accumulation_steps` micro-batches per step (`what` names the batch in
/// the error: "train.global_batch_size (1024)", or BERT's packed rows).
pub(crate) fn local_batch(
    what: &str,
    global_batch_size: u64,
    world_size: u64,
    gradient_accumulation_steps: u64,
) -> Result<u64> {
    let div = world_size * gradient_accumulation_steps;
    if div == 0 || !global_batch_size.is_multiple_of(div) {
        bail!(
            "{what} must divide by world size ({world_size}) x \
             train.gradient_accumulation_steps ({gradient_accumulation_steps})"
        );
    }
    Ok(global_batch_size / div)
}

/// Refuses a config with nothing in it (an empty file, or only blank lines and comments),
/// naming a preset to start from.
pub(crate) fn refuse_empty(text: &str, preset: &str) -> Result<()> {
    if toml::from_str::<toml::Table>(text).is_ok_and(|t| t.is_empty()) {
        bail!("the config is empty: start from a preset such as {preset}");
    }
    Ok(())
}

/// A TOML error made clearer: an error that names no line (one found after the text was read
/// into a table) gets the line of the key it is about, and an unknown key or value gets the
/// nearest allowed one ("did you mean `base_lr`?").
pub(crate) fn toml_error(text: &str, message: &str) -> anyhow::Error {
    let message = message.trim_end();
    let Some(unknown) = Unknown::of(message) else {
        return anyhow::anyhow!("{message}");
    };
    let line = if message.contains("TOML parse error at line") {
        None
    } else {
        unknown.line(text)
    };
    let mut out = match line {
        Some(n) => format!("line {n}: {message}"),
        None => message.to_string(),
    };
    let candidates = unknown.expected.iter().copied();
    if let Some(near) = crate::util::suggest::closest(unknown.name, candidates) {
        out.push_str(&format!("\ndid you mean `{near}`?"));
    }
    anyhow::anyhow!("{out}")
}

/// An "unknown field `x`" or "unknown variant `x`" error of serde: the name, what was
/// expected, and where (`in `optimizer``, `in `methods.amp``), as far as the message says.
struct Unknown<'a> {
    variant: bool,
    name: &'a str,
    expected: Vec<&'a str>,
    path: Option<&'a str>,
}

impl<'a> Unknown<'a> {
    fn of(message: &'a str) -> Option<Unknown<'a>> {
        let (variant, rest) = match message.split_once("unknown field `") {
            Some((_, rest)) => (false, rest),
            None => (true, message.split_once("unknown variant `")?.1),
        };
        let (name, rest) = rest.split_once('`')?;
        let expected_text = rest.split_once("expected")?.1.lines().next().unwrap_or("");
        let expected = expected_text.split('`').skip(1).step_by(2).collect();
        let path = message
            .lines()
            .last()
            .and_then(|l| l.trim().strip_prefix("in `"))
            .and_then(|l| l.strip_suffix('`'));
        Some(Unknown {
            variant,
            name,
            expected,
            path,
        })
    }

    /// The 1-based line of the key (of the value, for a variant) in `text`, found by its
    /// table (none named: the top level) and key; None when it is not found.
    fn line(&self, text: &str) -> Option<usize> {
        let path = self.path.unwrap_or("");
        let (table, key) = if self.variant {
            path.rsplit_once('.').unwrap_or(("", path))
        } else {
            (path, self.name)
        };
        let subtable = match table {
            "" => key.to_string(),
            t => format!("{t}.{key}"),
        };
        let mut current = String::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if let Some(header) = line.strip_prefix('[') {
                current = header
                    .trim_matches(|c| c == '[' || c == ']')
                    .trim()
                    .to_string();
                if !self.variant && current == subtable {
                    return Some(i + 1);
                }
                continue;
            }
            let Some((k, _)) = line.split_once('=') else {
                continue;
            };
            if current == table && k.trim().trim_matches('"') == key {
                return Some(i + 1);
            }
        }
        None
    }
}

/// A number of the config: finite and `ok` (its range, tested by the caller), else an error
/// naming the key, what it must be and what it is.
pub(crate) fn check_number(key: &str, value: f64, ok: bool, must_be: &str) -> Result<()> {
    if !(value.is_finite() && ok) {
        bail!("{key} must be {must_be}, got {value}");
    }
    Ok(())
}
