//! What every benchmark's run config shares: reading the file (`load_file`) and the batch
//! checks (`check_batch`, and `local_batch` for a world size). Each benchmark's own config is beside its workload
//! (`train::resnet::config`, `train::bert::config`); the `[system]` table is
//! `runs::system::SystemConfig`, the division `rules::Division`.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Reads the run config at `path` and parses it with `parse` (which validates it); an error
/// names the file.
pub(crate) fn load_file<C>(path: &Path, parse: impl FnOnce(&str) -> Result<C>) -> Result<C> {
    let text = read_config_text(path)?;
    parse(&text).with_context(|| format!("invalid config {}", path.display()))
}

/// The text of the run config at `path` (`--config`); a missing, binary or folder path is said
/// as such, naming it once.
pub(crate) fn read_config_text(path: &Path) -> Result<String> {
    crate::util::tree::read_text_file(path, "run config (TOML)").context("--config")
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
/// into a table, as BERT's config is for its legacy keys) gets the line of the key it is about
/// (`in `train.global_batch_size``: that key; `in `train``: the table's header), and an unknown
/// key or value gets the nearest allowed one ("did you mean `base_lr`?"). An unknown key is an
/// [`UnknownKey`] error, which says its dotted path to [`other_benchmark_hint`].
pub(crate) fn toml_error(text: &str, message: &str) -> anyhow::Error {
    let message = message.trim_end();
    let located = message.contains("TOML parse error at line");
    let unknown = Unknown::of(message);
    let line = if located {
        None
    } else {
        match &unknown {
            Some(u) => u.line(text),
            None => error_path(message).and_then(|p| key_line(text, p)),
        }
    };
    let mut out = match line {
        Some(n) => format!("line {n}: {message}"),
        None => message.to_string(),
    };
    let Some(unknown) = unknown else {
        return anyhow::anyhow!("{out}");
    };
    let candidates = unknown.expected.iter().copied();
    if let Some(near) = crate::util::suggest::closest(unknown.name, candidates) {
        out.push_str(&format!("\ndid you mean `{near}`?"));
    }
    match unknown.key_path(text, message) {
        Some(path) => anyhow::Error::new(UnknownKey { path, message: out }),
        None => anyhow::anyhow!("{out}"),
    }
}

/// A key that a run config does not take (serde's "unknown field"), by its dotted path
/// (`data.hw_decoder_load`; `data.synthetic` for a table): the error `toml_error` gives for
/// it, which a caller that knows the other benchmarks' configs reads through
/// [`other_benchmark_hint`].
#[derive(Debug)]
pub struct UnknownKey {
    pub path: String,
    message: String,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UnknownKey {}

/// A benchmark's run config as the note on a key of another benchmark's names it: the
/// benchmark, a preset to start from, and whether its config type takes a dotted key path
/// ([`takes_key`] of the type).
pub struct ConfigKind {
    pub benchmark: &'static str,
    pub preset: &'static str,
    pub takes: fn(&str) -> bool,
}

/// Whether the config type `C` takes the key at dotted `path`, asked of the type itself (so
/// no list of keys can drift from it): `C` is read from a table holding only that key, an
/// empty table as its value. serde's derive refuses an unknown key as it meets it, before it
/// counts the missing ones, so an "unknown field" error means `C` has no such key (or no
/// such table on the way to it), and anything else (a missing key, a wrong type) means it has.
pub fn takes_key<C: serde::de::DeserializeOwned>(path: &str) -> bool {
    let mut value = toml::Value::Table(toml::Table::new());
    for part in path.rsplit('.') {
        value = toml::Value::Table(toml::Table::from_iter([(part.to_string(), value)]));
    }
    match value.try_into::<C>() {
        Ok(_) => true,
        Err(e) => !e.to_string().contains("unknown field `"),
    }
}

/// `e`, an error of the `this` benchmark's run config, with a note where it refuses a key
/// ([`UnknownKey`]) that another benchmark's config of `kinds` takes: the key is refused all
/// the same, and the note says whose it is and what trains such a config. Other errors are
/// returned as they are. (The caller knows every benchmark's config; this module, below them
/// all, names none.)
pub fn other_benchmark_hint(e: anyhow::Error, this: &str, kinds: &[&ConfigKind]) -> anyhow::Error {
    let Some(path) = e
        .chain()
        .find_map(|c| c.downcast_ref::<UnknownKey>())
        .map(|u| u.path.clone())
    else {
        return e;
    };
    let Some(other) = kinds
        .iter()
        .find(|k| k.benchmark != this && (k.takes)(&path))
    else {
        return e;
    };
    anyhow::anyhow!(
        "{e:#}\n`{path}` is a {o} key, and this is a {this} config: remove it here, or train a {o} \
         config (such as {preset}) with `mlperf-run {o}`",
        o = other.benchmark,
        preset = other.preset
    )
}

/// The key path serde's message ends with (`in `train.global_batch_size``), if any.
fn error_path(message: &str) -> Option<&str> {
    message
        .lines()
        .last()
        .and_then(|l| l.trim().strip_prefix("in `"))
        .and_then(|l| l.strip_suffix('`'))
}

/// The 1-based line of the key at dotted `path` in `text`: the `[path]` header when it is a
/// table, else the `key = ...` line under its table's header (the top level for a path
/// without a dot); None when it is not found.
fn key_line(text: &str, path: &str) -> Option<usize> {
    let (table, key) = path.rsplit_once('.').unwrap_or(("", path));
    find_line(text, table, key, true)
}

/// The line of `key = ...` in `table` ("" for the top level), or with `header_ok` of the
/// header `[table.key]`.
fn find_line(text: &str, table: &str, key: &str, header_ok: bool) -> Option<usize> {
    let subtable = match table {
        "" => key.to_string(),
        t => format!("{t}.{key}"),
    };
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            current = header
                .split('#')
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            if header_ok && current == subtable {
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

/// An error of the run config with a recipe applied: `merged` is the text the recipe module
/// wrote afresh, so a line the error names (toml's `TOML parse error at line N` with its
/// snippet, or [`toml_error`]'s `line N:`) is no line of any file. It becomes the key's line in
/// the user's config `base` where the value is the config's, else the key is said to be the
/// recipe's; an error that names no line is returned as it is. (The commands that apply recipes
/// train, so the lite build without libtorch has no caller.)
#[cfg(feature = "torch")]
pub(crate) fn recipe_error(message: &str, merged: &str, base: &str, recipe: &str) -> String {
    let message = message.trim_end();
    let (line, core) = if let Some(rest) = message.strip_prefix("TOML parse error at line ") {
        let n = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap_or("");
        // the snippet: lines of `|` and `NN |` after the first; the message follows them
        let snippet = |l: &str| {
            let t = l.trim_start();
            t.starts_with('|')
                || t.split_once(" |")
                    .is_some_and(|(d, _)| d.parse::<u64>().is_ok())
        };
        let core: Vec<&str> = message.lines().skip(1).skip_while(|l| snippet(l)).collect();
        (n.parse::<usize>().ok(), core.join("\n"))
    } else if let Some((n, rest)) = message
        .strip_prefix("line ")
        .and_then(|r| r.split_once(": "))
    {
        (n.parse::<usize>().ok(), rest.to_string())
    } else {
        (None, String::new())
    };
    let Some(path) = line.and_then(|n| path_at_line(merged, n)) else {
        return message.to_string();
    };
    let value = |text: &str| -> Option<toml::Value> {
        let table: toml::Table = toml::from_str(text).ok()?;
        let mut v = toml::Value::Table(table);
        for part in path.split('.') {
            v = v.as_table()?.get(part)?.clone();
        }
        Some(v)
    };
    // a base with a syntax error cannot be read as a table: the line is then the base's own
    let from_config = toml::from_str::<toml::Table>(base).is_err() || value(base) == value(merged);
    match key_line(base, &path).filter(|_| from_config) {
        Some(n) => format!("line {n}: {core}"),
        None => format!("`{path}` as recipe {recipe} sets it: {core}"),
    }
}

/// The dotted path of the key (or `[table]` header) on 1-based line `n` of `text`.
fn path_at_line(text: &str, n: usize) -> Option<String> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate().take(n) {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            current = header
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            if i + 1 == n {
                return Some(current);
            }
            continue;
        }
        if i + 1 == n {
            let key = line.split_once('=')?.0.trim().trim_matches('"');
            return Some(match current.as_str() {
                "" => key.to_string(),
                t => format!("{t}.{key}"),
            });
        }
    }
    None
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
        Some(Unknown {
            variant,
            name,
            expected,
            path: error_path(message),
        })
    }

    /// The dotted path of the unknown key (not of a variant): its table and name as `message`
    /// says them, or for toml's own error (`TOML parse error at line N`, no table named) the
    /// path of the key on that line, where it is this key.
    fn key_path(&self, text: &str, message: &str) -> Option<String> {
        if self.variant {
            return None;
        }
        if let Some(rest) = message.strip_prefix("TOML parse error at line ") {
            let n = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()?;
            let path = path_at_line(text, n)?;
            let last = path.rsplit('.').next().unwrap_or("").trim_matches('"');
            return (last == self.name).then_some(path);
        }
        Some(match self.path {
            Some(table) if !table.is_empty() => format!("{table}.{}", self.name),
            _ => self.name.to_string(),
        })
    }

    /// The 1-based line of the key (of the value, for a variant) in `text`, found by its
    /// table (none named: the top level) and key; None when it is not found.
    fn line(&self, text: &str) -> Option<usize> {
        let path = self.path.unwrap_or("");
        if self.variant {
            key_line(text, path)
        } else {
            find_line(text, path, self.name, true)
        }
    }
}

/// A number of the config: finite, within fp32's range (libtorch takes it as an fp32 scalar:
/// `base_lr = 1e300` started every run of a set, each ending aborted at its first step) and
/// `ok` (its range, tested by the caller), else an error naming the key, what it must be and
/// what it is.
pub(crate) fn check_number(key: &str, value: f64, ok: bool, must_be: &str) -> Result<()> {
    if !(value.is_finite() && ok) {
        let value = crate::util::output::number(value);
        bail!("{key} must be {must_be}, got {value}");
    }
    if value.abs() > f64::from(f32::MAX) {
        bail!(
            "{key} must be {must_be} and within fp32's range (at most {:e}, as libtorch takes \
             it), got {value:e}",
            f32::MAX
        );
    }
    Ok(())
}

/// A part of the memory a run certainly needs in each process: what it is, naming the config
/// keys that size it, and its bytes (f64: an absurd config must not overflow the sum).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPart {
    pub what: String,
    pub bytes: f64,
}

/// Refuses a config whose `parts` (the memory a process needs at the least: the model's
/// parameters, their gradients and the optimizer's state, one input micro-batch; never the
/// activations) alone exceed `available` bytes (MemAvailable on a CPU run), naming each part
/// with its keys and what to lower. Such a run would allocate until the kernel's OOM killer
/// ended it (exit 137, no message, the run's log cut short).
pub fn check_memory(parts: &[MemoryPart], available: u64) -> Result<()> {
    let need: f64 = parts.iter().map(|p| p.bytes).sum();
    if need <= available as f64 {
        return Ok(());
    }
    let size = |b: f64| crate::util::tree::human_size(b.min(u64::MAX as f64) as u64);
    let list: Vec<String> = parts
        .iter()
        .map(|p| format!("{}: {}", p.what, size(p.bytes)))
        .collect();
    bail!(
        "the config needs at least {} of memory in each process, more than the {} this machine \
         has available (MemAvailable of /proc/meminfo), before counting any activation: {}. \
         Lower the keys named, or raise train.gradient_accumulation_steps to split the batch",
        size(need),
        size(available as f64),
        list.join("; ")
    );
}
