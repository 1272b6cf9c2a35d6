//! The source snapshot of mlperf-run that goes into `benchmarks/<b>/implementations/<impl>/`:
//! `git archive` of the commit in use when the source is a git checkout (the commit is
//! recorded), else a plain copy of the source folder, said so clearly. Paths the submission
//! repository refuses (names starting with "." or holding a space, files over 50 MB) are left
//! out and listed.

use super::repo_rules::{bad_name_reason, MAX_FILE_BYTES};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the snapshot came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// `git archive` of this commit; `dirty`: the checkout had uncommitted changes (not included).
    Git { commit: String, dirty: bool },
    /// A copy of a source folder that is not a git checkout.
    Folder(PathBuf),
}

impl Origin {
    pub fn describe(&self) -> String {
        match self {
            Origin::Git {
                commit,
                dirty: false,
            } => format!("git commit {commit}"),
            Origin::Git {
                commit,
                dirty: true,
            } => {
                format!("git commit {commit} (the checkout had uncommitted changes, which are not included)")
            }
            Origin::Folder(p) => format!(
                "a copy of {} (not a git checkout: no commit recorded)",
                p.display()
            ),
        }
    }
}

/// The files of a snapshot: relative path -> (contents, executable).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub files: Vec<(String, Vec<u8>, bool)>,
    /// Paths left out, with the reason.
    pub skipped: Vec<String>,
}

/// The default source folder: the crate this binary was built from.
pub fn default_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Take a snapshot of `source`.
pub fn take(source: &Path) -> Result<(Origin, Snapshot)> {
    if !source.join("Cargo.toml").is_file() {
        bail!(
            "{} is not mlperf-run's source folder (no Cargo.toml): pass --source DIR pointing at a checkout of mlperf-run",
            source.display()
        );
    }
    match git(source, &["rev-parse", "--show-toplevel"]) {
        Ok(top)
            if Path::new(top.trim())
                == source
                    .canonicalize()
                    .unwrap_or_else(|_| source.to_path_buf()) =>
        {
            git_snapshot(source)
        }
        _ => Ok((
            Origin::Folder(source.to_path_buf()),
            folder_snapshot(source)?,
        )),
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .with_context(|| format!("cannot run git in {}", dir.display()))?;
    if !out.status.success() {
        bail!(
            "git {} failed in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn git_snapshot(source: &Path) -> Result<(Origin, Snapshot)> {
    let commit = git(source, &["rev-parse", "HEAD"])?.trim().to_string();
    let dirty = !git(source, &["status", "--porcelain", "--untracked-files=no"])?
        .trim()
        .is_empty();
    let out = Command::new("git")
        .arg("-C")
        .arg(source)
        .args(["archive", "--format=tar", &commit])
        .output()
        .with_context(|| format!("cannot run git archive in {}", source.display()))?;
    if !out.status.success() {
        bail!(
            "git archive failed in {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut snap = Snapshot::default();
    let mut archive = tar::Archive::new(&out.stdout[..]);
    for entry in archive
        .entries()
        .context("cannot read git archive output")?
    {
        let mut entry = entry.context("damaged git archive entry")?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let rel = entry.path()?.to_string_lossy().into_owned();
        let mode = entry.header().mode().unwrap_or(0o644);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes)?;
        admit(&mut snap, rel, bytes, mode & 0o111 != 0);
    }
    Ok((Origin::Git { commit, dirty }, snap))
}

fn admit(snap: &mut Snapshot, rel: String, bytes: Vec<u8>, exec: bool) {
    if let Some(reason) = rel.split('/').find_map(bad_name_reason) {
        snap.skipped
            .push(format!("{rel} (a path component {reason})"));
    } else if bytes.len() as u64 > MAX_FILE_BYTES {
        snap.skipped.push(format!("{rel} (over 50 MB)"));
    } else {
        snap.files.push((rel, bytes, exec));
    }
}

fn folder_snapshot(source: &Path) -> Result<Snapshot> {
    let mut snap = Snapshot::default();
    let mut stack = vec![source.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let e = e?;
            let path = e.path();
            let rel = path
                .strip_prefix(source)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let name = e.file_name().to_string_lossy().into_owned();
            let ft = e.file_type()?;
            if ft.is_dir() {
                // build outputs are not source
                if name.starts_with("target") || bad_name_reason(&name).is_some() {
                    snap.skipped.push(format!("{rel}/ (not source)"));
                } else {
                    stack.push(path);
                }
            } else if ft.is_file() {
                let bytes = std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let exec = {
                    use std::os::unix::fs::PermissionsExt;
                    e.metadata()?.permissions().mode() & 0o111 != 0
                };
                admit(&mut snap, rel, bytes, exec);
            }
        }
    }
    snap.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(snap)
}
