//! OUT/mlperf-run-package.json: what `package` wrote in OUT (so `--force` replaces exactly
//! that and never the user's other files), and whether a package into OUT is unfinished (it
//! began to change the tree and was killed or failed before its manifest and tarball were
//! written), which `verify` reports.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The record's file name in OUT.
pub const RECORD_NAME: &str = "mlperf-run-package.json";

/// The files mlperf-run wrote in OUT, by owner.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    pub submitter: String,
    /// Path relative to OUT -> owner ("system:NAME" or "implementation:BENCHMARK/IMPL").
    pub files: BTreeMap<String, String>,
    /// True from before the first change to OUT's tree (the old manifest and tarball are
    /// removed then) until the new manifest and tarball are written: a package killed or
    /// failing in between leaves it true, and `verify` says the tree is unfinished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unfinished: bool,
}

/// The record's path in `out`.
pub fn path(out: &Path) -> PathBuf {
    out.join(RECORD_NAME)
}

/// OUT's record; None when there is none (or it cannot be read).
pub fn read(out: &Path) -> Result<Option<Record>> {
    let p = path(out);
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).with_context(|| {
        format!(
            "{} is damaged: remove it or choose another --out",
            p.display()
        )
    })
}

/// Write the record into `out`, atomically.
pub fn write(out: &Path, record: &Record) -> Result<()> {
    crate::util::fs::write_atomic(&path(out), serde_json::to_string_pretty(record)?.as_bytes())
}

/// What `verify` says of `out` when a package into it did not finish (None when it did, or
/// when `out` has no readable record, or one of another submitter than `org`).
pub fn unfinished_problem(out: &Path, org: &str) -> Option<String> {
    let record = read(out).ok().flatten()?;
    if !record.unfinished || record.submitter != org {
        return None;
    }
    Some(format!(
        "{}: a `mlperf-run package` into {} did not finish (it was killed or failed after it \
         began to change {}); the tree may be part old, part new, and its manifest and tarball \
         were removed before the first change: rerun the package command with --force",
        path(out).display(),
        out.display(),
        out.join(org).display()
    ))
}
