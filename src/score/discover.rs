//! Finding result sets under a path, and choosing the ruleset to score them under.

use crate::benchmarks::Benchmark;
use crate::util::tree::{self, Links};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How deep below the given path result sets are looked for (a folder of rounds holding
/// submitter trees is 5 levels: round/submitter/results/system/benchmark).
const MAX_DEPTH: usize = 6;

fn is_result_name(name: &str) -> bool {
    name.starts_with("result_") && name.ends_with(".txt")
}

/// The `result_<i>.txt` files directly in `dir`, ordered by index (then name). Links are read
/// as [`tree::Walk`] says, with `dir` as the root (see [`result_files_under`]).
pub fn result_files(dir: &Path) -> Result<Vec<PathBuf>> {
    result_files_under(&tree::Walk::new(dir, Links::FollowInside)?, dir)
}

/// [`result_files`] of `dir`, a folder of `walk`'s tree: a link is read only when it points
/// to a file inside that tree; a FIFO, a link loop or a link out of the tree named
/// `result_*.txt` is an error naming it.
pub fn result_files_under(walk: &tree::Walk, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = walk.list(dir, &is_result_name)?.files;
    files.sort_by_key(|p| {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let index = name
            .trim_start_matches("result_")
            .trim_end_matches(".txt")
            .parse::<u64>()
            .ok();
        (index.is_none(), index, name)
    });
    Ok(files)
}

/// Every result-set folder at or below `path`: `path` itself when it holds result_*.txt
/// (one `results/<system>/<benchmark>` folder), otherwise its sub-folders recursively (a
/// `results/<system>` folder, a submitter tree, or a folder of submitter trees). Sorted by path.
/// Symbolic links to folders are not followed (see [`tree`]).
pub fn find_sets(path: &Path) -> Result<Vec<PathBuf>> {
    Ok(find_sets_walk(path)?.1)
}

/// [`find_sets`] with the walk it used (its root is `path`).
pub(super) fn find_sets_walk(path: &Path) -> Result<(tree::Walk, Vec<PathBuf>)> {
    if !path.exists() {
        bail!("{} does not exist", path.display());
    }
    if !path.is_dir() {
        bail!(
            "{} is not a directory: pass a submitter tree, a results/<system> folder or a \
             results/<system>/<benchmark> folder",
            path.display()
        );
    }
    let tree = tree::Walk::new(path, Links::FollowInside)?;
    let mut sets = Vec::new();
    walk(&tree, path, 0, &mut sets)?;
    if sets.is_empty() {
        bail!(
            "no result files (result_*.txt) under {}: pass a submitter tree, a results/<system> \
             folder or a results/<system>/<benchmark> folder",
            path.display()
        );
    }
    Ok((tree, sets))
}

fn walk(tree: &tree::Walk, dir: &Path, depth: usize, sets: &mut Vec<PathBuf>) -> Result<()> {
    let listing = tree.list(dir, &is_result_name)?;
    if !listing.files.is_empty() {
        sets.push(dir.to_path_buf());
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    for sub in listing.dirs {
        let hidden = sub
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !hidden {
            walk(tree, &sub, depth + 1, sets)?;
        }
    }
    Ok(())
}

/// Where the ruleset of a set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RulesetSource {
    /// --ruleset
    User,
    /// A `vX.Y` component of the set's path (training_results_v2.0/..., v2.1/...).
    Path,
    /// The round whose submission window holds the logs' run_start date.
    LogDate,
    /// The benchmark's default (`benchmarks/<name>/benchmark.toml`).
    Default,
}

/// The ruleset for a set: the user's, else a `vX.Y` path component, else the round of the
/// logs' run_start date, else the benchmark default. Rounds and their submission windows come
/// from the benchmark's `[[rounds]]` (`benchmarks/<name>/benchmark.toml`); inferred rulesets the
/// benchmark does not know (e.g. resnet at 4.1.0, after its last round) fall back to the
/// default.
pub fn choose_ruleset(
    user: Option<&str>,
    dir: &Path,
    run_start_ms: Option<f64>,
    bench: &Benchmark,
) -> (String, RulesetSource) {
    if let Some(r) = user {
        return (r.to_string(), RulesetSource::User);
    }
    if let Some(r) = ruleset_from_path(dir).filter(|r| bench.round(r).is_some()) {
        return (r, RulesetSource::Path);
    }
    if let Some(r) = run_start_ms.and_then(|t| bench.round_at(t)) {
        return (r.name.clone(), RulesetSource::LogDate);
    }
    (bench.default_ruleset.clone(), RulesetSource::Default)
}

/// "X.Y.0" from the deepest path component ending in `vX.Y` (e.g. `training_results_v2.0`).
pub fn ruleset_from_path(dir: &Path) -> Option<String> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    abs.components().rev().find_map(|c| {
        let s = c.as_os_str().to_string_lossy();
        let pos = s.rfind('v')?;
        if pos > 0 && s.as_bytes()[pos - 1].is_ascii_alphanumeric() {
            return None;
        }
        let (major, minor) = s[pos + 1..].split_once('.')?;
        if major.is_empty()
            || minor.is_empty()
            || !major
                .bytes()
                .chain(minor.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(format!(
            "{}.{}.0",
            major.parse::<u32>().ok()?,
            minor.parse::<u32>().ok()?
        ))
    })
}

/// The round whose submission window holds `time_ms`, in any benchmark's `[[rounds]]`
/// (rounds are MLPerf-wide: every benchmark of a round has the same window).
pub fn ruleset_from_date(time_ms: f64) -> Option<&'static str> {
    crate::benchmarks::all()
        .iter()
        .find_map(|b| b.round_at(time_ms))
        .map(|r| r.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_from_path_components() {
        assert_eq!(
            ruleset_from_path(Path::new("/x/v2.0/NVIDIA/results/s/resnet")).as_deref(),
            Some("2.0.0")
        );
        assert_eq!(
            ruleset_from_path(Path::new("/x/training_results_v3.1/A/results")).as_deref(),
            Some("3.1.0")
        );
        assert_eq!(ruleset_from_path(Path::new("/x/dev2.0/y")), None);
        assert_eq!(ruleset_from_path(Path::new("/x/v2/y")), None);
    }

    #[test]
    fn ruleset_from_run_start_date() {
        assert_eq!(ruleset_from_date(1_652_653_411_923.0), Some("2.0.0")); // 2022-05-15
        assert_eq!(ruleset_from_date(1_665_709_593_574.0), Some("2.1.0")); // 2022-10-14
        assert_eq!(ruleset_from_date(1_600_000_000_000.0), None); // 2020
        assert_eq!(ruleset_from_date(1_800_000_000_000.0), None); // 2027
    }

    #[test]
    fn windows_come_from_the_rounds() {
        assert_eq!(ruleset_from_date(1_643_673_599_999.0), None); // just before 2022-02-01
        assert_eq!(ruleset_from_date(1_643_673_600_000.0), Some("2.0.0")); // 2022-02-01
        assert_eq!(ruleset_from_date(1_754_006_399_999.0), Some("5.0.0")); // 2025-07-31
        assert_eq!(ruleset_from_date(1_754_006_400_000.0), None); // 2025-08-01
        let resnet = crate::benchmarks::get("resnet").unwrap();
        let at = |t: f64| choose_ruleset(None, Path::new("/nowhere"), Some(t), resnet);
        assert_eq!(
            at(1_722_470_399_999.0),
            ("4.0.0".to_string(), RulesetSource::LogDate)
        );
        assert_eq!(
            at(1_652_653_411_923.0),
            ("2.0.0".to_string(), RulesetSource::LogDate)
        );
        // a vX.Y path component names a round only when the benchmark has it
        let (r, s) = choose_ruleset(None, Path::new("/x/v4.1/a"), None, resnet);
        assert_eq!((r.as_str(), s), ("4.0.0", RulesetSource::Default));
    }

    #[test]
    fn choose_falls_back_to_default_for_unknown_rounds() {
        let resnet = crate::benchmarks::get("resnet").unwrap();
        let (r, s) = choose_ruleset(
            None,
            Path::new("/nowhere"),
            Some(1_730_000_000_000.0),
            resnet,
        );
        assert_eq!((r.as_str(), s), ("4.0.0", RulesetSource::Default)); // 4.1.0 has no resnet
                                                                        // BERT was a v4.1 benchmark: a log of that window is scored at 4.1.0.
        let bert = crate::benchmarks::get("bert").unwrap();
        let (r, s) = choose_ruleset(None, Path::new("/nowhere"), Some(1_730_000_000_000.0), bert);
        assert_eq!((r.as_str(), s), ("4.1.0", RulesetSource::LogDate));
        let (r, s) = choose_ruleset(Some("3.0.0"), Path::new("/x/v2.0"), None, resnet);
        assert_eq!((r.as_str(), s), ("3.0.0", RulesetSource::User));
    }
}
