//! `mlperf-run verify TARBALL|DIR`: the tarball's own SHA-256, every file against the
//! manifest (naming each changed, missing or extra file), then the tree's contents against
//! our checks. A package into OUT that did not finish ([`super::record`]) fails verification
//! of OUT, OUT/ORG and OUT/ORG.tar.gz, whatever is left there.

use super::manifest::{self, Artifacts, Manifest};
use super::record;
use super::tree_check;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// What verify found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// What was checked, for the user.
    pub checked: Vec<String>,
    /// Mismatches and rule problems; empty: verified.
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

fn is_tarball(p: &Path) -> bool {
    let n = p.to_string_lossy();
    p.is_file() && (n.ends_with(".tar.gz") || n.ends_with(".tgz"))
}

/// Verify a tarball (`OUT/ORG.tar.gz`), an output folder (`OUT`, holding `ORG/` and
/// `ORG.sha256sums`) or a submitter folder (`OUT/ORG`), at the ruleset of the tree's
/// benchmarks ([`verify_at`] with none).
pub fn verify(path: &Path) -> Result<VerifyReport> {
    verify_at(path, None)
}

/// [`verify`] with the tree's contents checked at `ruleset` (`package --ruleset`), else at the
/// one of the tree's benchmarks.
pub fn verify_at(path: &Path, ruleset: Option<&str>) -> Result<VerifyReport> {
    if !path.exists() {
        // OUT/ORG.tar.gz or OUT/ORG.sha256sums, removed by a package that did not finish
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let org = [".tar.gz", ".tgz", ".sha256sums"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix));
        if let Some(unfinished) =
            org.and_then(|org| record::unfinished_problem(crate::util::fs::parent_dir(path), org))
        {
            bail!("{} does not exist: {unfinished}", path.display());
        }
        bail!("{} does not exist", path.display());
    }
    if is_tarball(path) {
        verify_tarball(path, ruleset)
    } else if path.is_dir() {
        verify_dir(path, ruleset)
    } else {
        bail!("{}: expected a .tar.gz written by `mlperf-run package --tarball`, or a packaged folder", path.display())
    }
}

fn read_manifest(path: &Path) -> Result<Manifest> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read manifest {} (written by mlperf-run package)",
            path.display()
        )
    })?;
    manifest::parse(&text, path)
}

fn verify_tarball(tarball: &Path, ruleset: Option<&str>) -> Result<VerifyReport> {
    let name = tarball
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let org = name
        .trim_end_matches(".tar.gz")
        .trim_end_matches(".tgz")
        .to_string();
    let dir = crate::util::fs::parent_dir(tarball);
    let art = Artifacts::new(dir, &org);
    let mut report = VerifyReport::default();
    if let Some(unfinished) = record::unfinished_problem(dir, &org) {
        // a tarball left by a package killed before it removed it: it is not of the tree
        report.problems.push(unfinished);
        return Ok(report);
    }
    let mut sha_file = tarball.as_os_str().to_owned();
    sha_file.push(".sha256");
    let sha_file = PathBuf::from(sha_file);
    let bytes =
        std::fs::read(tarball).with_context(|| format!("cannot read {}", tarball.display()))?;
    match std::fs::read_to_string(&sha_file) {
        Ok(text) => {
            let expected = text
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            let actual = manifest::sha256_hex(&bytes);
            if expected != actual {
                report.problems.push(format!(
                    "{}: SHA-256 {actual} does not match {} ({expected})",
                    tarball.display(),
                    sha_file.display()
                ));
            }
            report.checked.push(format!(
                "{} against {}",
                tarball.display(),
                sha_file.display()
            ));
        }
        Err(_) => report.warnings.push(format!(
            "{} not found: the tarball's own digest is not checked",
            sha_file.display()
        )),
    }
    let expected = read_manifest(&art.manifest)?;
    let tmp = tempdir_near(dir)?;
    let result = (|| -> Result<()> {
        let actual = match manifest::unpack_tarball(tarball, &tmp) {
            Ok(m) => m,
            Err(e) => match e.downcast::<manifest::Damaged>() {
                Ok(d) => {
                    report.problems.push(format!(
                        "{d}: the tarball is damaged or cut short; copy it again, or write it \
                         again with `mlperf-run package --tarball`"
                    ));
                    return Ok(());
                }
                Err(e) => return Err(e),
            },
        };
        report.problems.extend(
            manifest::compare(&expected, &actual)
                .into_iter()
                .map(|d| format!("{} in {}", d, tarball.display())),
        );
        report.checked.push(format!(
            "{} files against {}",
            expected.len(),
            art.manifest.display()
        ));
        let (errors, warnings) = tree_check::check_tree(&tmp.join(&org), ruleset);
        report.problems.extend(
            errors
                .into_iter()
                .map(|e| e.replace(&tmp.display().to_string(), &name)),
        );
        report.warnings.extend(
            warnings
                .into_iter()
                .map(|e| e.replace(&tmp.display().to_string(), &name)),
        );
        report.checked.push(format!(
            "contents of {} against the rules",
            tarball.display()
        ));
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    Ok(report)
}

fn tempdir_near(dir: &Path) -> Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("mlperf-run-verify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).with_context(|| {
        format!(
            "cannot create {} (verifying {})",
            base.display(),
            dir.display()
        )
    })?;
    Ok(base)
}

fn verify_dir(dir: &Path, ruleset: Option<&str>) -> Result<VerifyReport> {
    // OUT/ORG given (manifest beside it) or OUT given (one or more ORG.sha256sums inside).
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = crate::util::fs::parent_dir(dir);
    // OUT given (its record names the submitter) or OUT/ORG given
    let unfinished = record::read(dir)
        .ok()
        .flatten()
        .and_then(|r| record::unfinished_problem(dir, &r.submitter))
        .or_else(|| record::unfinished_problem(parent, &name));
    if let Some(unfinished) = unfinished {
        return Ok(VerifyReport {
            problems: vec![unfinished],
            ..VerifyReport::default()
        });
    }
    let mut pairs: Vec<(PathBuf, String)> = Vec::new();
    if Artifacts::new(parent, &name).manifest.is_file() {
        pairs.push((parent.to_path_buf(), name));
    } else {
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .strip_suffix(".sha256sums")
                    .map(String::from)
            })
            .collect();
        found.sort();
        for org in found {
            pairs.push((dir.to_path_buf(), org));
        }
    }
    if pairs.is_empty() {
        bail!(
            "{}: no SHA-256 manifest (ORG.sha256sums) found in it or beside it: is it a folder written by mlperf-run package?",
            dir.display()
        );
    }
    let mut report = VerifyReport::default();
    for (out, org) in pairs {
        let art = Artifacts::new(&out, &org);
        let expected = read_manifest(&art.manifest)?;
        let org_dir = out.join(&org);
        if !org_dir.is_dir() {
            report.problems.push(format!(
                "{}: missing (the manifest {} lists it)",
                org_dir.display(),
                art.manifest.display()
            ));
            continue;
        }
        let actual = manifest::manifest_of_dir(&out, &org)?;
        report.problems.extend(
            manifest::compare(&expected, &actual)
                .into_iter()
                .map(|d| format!("{}", out.join(d).display())),
        );
        report.checked.push(format!(
            "{} files against {}",
            expected.len(),
            art.manifest.display()
        ));
        let (errors, warnings) = tree_check::check_tree(&org_dir, ruleset);
        report.problems.extend(errors);
        report.warnings.extend(warnings);
        report.checked.push(format!(
            "contents of {} against the rules",
            org_dir.display()
        ));
    }
    Ok(report)
}
