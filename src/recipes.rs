//! Recipes (`--recipe NAME` on `resnet` and `bert`): named bundles of open-division methods
//! and hyperparameters, as data in `configs/recipes/<benchmark>/<NAME>.toml` (embedded at build
//! time so the binary stands alone; `--recipe FILE.toml` reads one from a file).
//!
//! A recipe file holds a `description` and up to three tables, applied to the --config TOML in
//! this order:
//! - `[config]`: a partial run config set over --config (tables merge key by key);
//! - `[defaults]`: the same, but only where --config leaves the key out;
//! - `[per_256_samples]`: dotted keys whose value is multiplied by
//!   `train.global_batch_size / 256` (linear learning-rate scaling).
//!
//! The result is parsed and validated as any config, so a recipe that names an unknown key or
//! an invalid value is refused with the recipe's name. Recipes are refused in the closed
//! division; the run logs the recipe's name (`recipe`) and, as always, every hyperparameter.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The recipes shipped with mlperf-run: (benchmark, name, TOML).
const EMBEDDED: &[(&str, &str, &str)] = &[
    (
        "resnet",
        "fast",
        include_str!("../configs/recipes/resnet/fast.toml"),
    ),
    (
        "bert",
        "fast",
        include_str!("../configs/recipes/bert/fast.toml"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    description: String,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    defaults: toml::Table,
    #[serde(default)]
    per_256_samples: BTreeMap<String, f64>,
}

/// One recipe.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The name (file stem), as logged.
    pub name: String,
    pub benchmark: String,
    pub description: String,
    /// Where it came from (for messages).
    pub origin: String,
    file: RecipeFile,
}

impl Recipe {
    /// Parse a recipe's TOML text.
    pub fn parse(benchmark: &str, name: &str, origin: &str, text: &str) -> Result<Recipe> {
        let file: RecipeFile =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid recipe {origin}: {e}"))?;
        Ok(Recipe {
            name: name.to_string(),
            benchmark: benchmark.to_string(),
            description: file.description.clone(),
            origin: origin.to_string(),
            file,
        })
    }

    /// The config TOML text `base` with this recipe applied (see the module docs).
    pub fn apply(&self, base: &str) -> Result<String> {
        let mut table: toml::Table =
            toml::from_str(base).map_err(|e| anyhow::anyhow!("invalid TOML: {e}"))?;
        merge(&mut table, &self.file.config, true);
        merge(&mut table, &self.file.defaults, false);
        if !self.file.per_256_samples.is_empty() {
            let gbs = table
                .get("train")
                .and_then(|t| t.get("global_batch_size"))
                .and_then(toml::Value::as_integer)
                .filter(|&g| g > 0)
                .with_context(|| {
                    format!(
                        "recipe {} scales by train.global_batch_size, which the config lacks",
                        self.name
                    )
                })?;
            for (key, per_256) in &self.file.per_256_samples {
                set_dotted(&mut table, key, per_256 * gbs as f64 / 256.0)
                    .with_context(|| format!("recipe {} [per_256_samples]", self.name))?;
            }
        }
        toml::to_string(&table).map_err(|e| anyhow::anyhow!("cannot write the merged config: {e}"))
    }
}

/// Merge `overlay` into `base`: tables merge key by key; other values replace (`force`) or
/// fill only absent keys (not `force`).
fn merge(base: &mut toml::Table, overlay: &toml::Table, force: bool) {
    for (key, value) in overlay {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o, force),
            (Some(_), _) if !force => {}
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Set `a.b.c` to a float, creating tables on the way.
fn set_dotted(table: &mut toml::Table, key: &str, value: f64) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().context("empty key")?;
    let mut t = table;
    for p in path {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => bail!("'{key}': '{p}' is not a table in the config"),
        };
    }
    t.insert(last.to_string(), toml::Value::Float(value));
    Ok(())
}

/// The recipes shipped for `benchmark`, by name.
pub fn shipped(benchmark: &str) -> Result<Vec<Recipe>> {
    EMBEDDED
        .iter()
        .filter(|(b, _, _)| *b == benchmark)
        .map(|(b, name, text)| {
            Recipe::parse(b, name, &format!("configs/recipes/{b}/{name}.toml"), text)
        })
        .collect()
}

/// Reads a recipe file's text; its errors name the file (the caller's text-file reader: a
/// folder or a binary file is said as such).
pub type ReadFile<'a> = &'a dyn Fn(&Path) -> Result<String>;

/// The recipe `spec` for `benchmark`: a shipped name, or a path to a recipe TOML file (it
/// contains '/' or ends in .toml), read with `read`.
pub fn find(benchmark: &str, spec: &str, read: ReadFile<'_>) -> Result<Recipe> {
    if spec.contains('/') || spec.ends_with(".toml") {
        let path = Path::new(spec);
        let text = read(path).context("--recipe")?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string());
        return Recipe::parse(benchmark, &name, &path.display().to_string(), &text);
    }
    let all = shipped(benchmark)?;
    let names: Vec<String> = all.iter().map(|r| r.name.clone()).collect();
    all.into_iter().find(|r| r.name == spec).with_context(|| {
        format!(
            "unknown {benchmark} recipe '{spec}' (known: {}; `--recipe list` describes them, or pass a recipe .toml file)",
            names.join(", ")
        )
    })
}

/// `--recipe list`: one line per shipped recipe.
pub fn render_list(benchmark: &str) -> Result<String> {
    let mut out = String::new();
    for r in shipped(benchmark)? {
        out.push_str(&format!("{:8} {}\n", r.name, r.description));
    }
    out.push_str(&format!(
        "(open division; applied over --config: mlperf-run {benchmark} --division open --config FILE --recipe NAME)\n"
    ));
    Ok(out)
}

/// The --config text `base` (read from `config`) with recipe `spec` applied (a recipe file
/// read with `read`), refused in the closed division.
pub fn apply_to_config(
    benchmark: &str,
    spec: &str,
    base: &str,
    config: &Path,
    closed: bool,
    read: ReadFile<'_>,
) -> Result<(Recipe, String)> {
    if closed {
        bail!(
            "--recipe {spec}: recipes bundle open-division methods and hyperparameters; the closed division allows none of them (use --division open)"
        );
    }
    let recipe = find(benchmark, spec, read)?;
    let merged = recipe.apply(base).with_context(|| {
        format!(
            "applying recipe {} to config {}",
            recipe.name,
            config.display()
        )
    })?;
    Ok((recipe, merged))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sets_fills_and_scales() {
        let r = Recipe::parse(
            "resnet",
            "t",
            "test",
            "description = \"d\"\n[config.methods]\nblurpool = true\n[defaults.methods]\nlabel_smoothing = 0.5\nchannels_last = true\n[per_256_samples]\n\"optimizer.base_lr\" = 0.1\n",
        )
        .unwrap();
        let out = r
            .apply("[train]\nglobal_batch_size = 512\n[methods]\nlabel_smoothing = 0.1\n[optimizer]\nbase_lr = 9.0\n")
            .unwrap();
        let t: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(t["methods"]["blurpool"].as_bool(), Some(true));
        assert_eq!(
            t["methods"]["label_smoothing"].as_float(),
            Some(0.1),
            "config kept"
        );
        assert_eq!(
            t["methods"]["channels_last"].as_bool(),
            Some(true),
            "default filled"
        );
        assert_eq!(t["optimizer"]["base_lr"].as_float(), Some(0.2));
        let err = r.apply("[methods]\n").unwrap_err().to_string();
        assert!(err.contains("global_batch_size"), "{err}");
    }

    #[test]
    fn unknown_names_and_closed_division_are_refused() {
        let read = |_: &Path| -> Result<String> { unreachable!("no file is read") };
        let err = find("resnet", "slow", &read).unwrap_err().to_string();
        assert!(err.contains("'slow'") && err.contains("fast"), "{err}");
        let err = apply_to_config("resnet", "fast", "", Path::new("x.toml"), true, &read)
            .unwrap_err()
            .to_string();
        assert!(err.contains("closed division"), "{err}");
        assert!(Recipe::parse("bert", "b", "t", "description = \"d\"\nextra = 1\n").is_err());
        let list = render_list("bert").unwrap();
        assert!(
            list.starts_with("fast ") && list.contains("packed sequences"),
            "{list}"
        );
    }
}
