//! SHA-256 manifests (`sha256sum -c` format: "`<hex>`  `<path>`"), the gzipped tarball of a
//! submitter tree and the comparison that `verify` reports.

use crate::util::fs::write_atomic;
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Relative path (with "/" separators, starting with the submitter folder) -> SHA-256 hex.
pub type Manifest = BTreeMap<String, String>;

/// Hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every regular file below `base/top`, keyed "top/...". A symbolic link, FIFO, socket or
/// device in the tree is refused, naming it: a package holds regular files only, so nothing
/// from outside the tree goes into a manifest or a tarball, and nothing blocks. Files are
/// hashed as they are read (bounded memory).
pub fn manifest_of_dir(base: &Path, top: &str) -> Result<Manifest> {
    let mut m = Manifest::new();
    for path in tree_files(base, top)? {
        m.insert(rel_key(base, &path), sha256_file(&path)?);
    }
    Ok(m)
}

/// The regular files below `base/top`, sorted; anything else but a folder is an error.
pub fn tree_files(base: &Path, top: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![base.join(top)];
    while let Some(dir) = stack.pop() {
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
        {
            let e = e.with_context(|| format!("cannot read {}", dir.display()))?;
            let path = e.path();
            let ft = e
                .file_type()
                .with_context(|| format!("cannot read {}", path.display()))?;
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                files.push(path);
            } else {
                bail!(
                    "{} is {}: a package holds regular files only (nothing from outside {} may \
                     go into it); replace it with the file it stands for, or remove it",
                    path.display(),
                    crate::util::tree::kind_of(&ft),
                    base.join(top).display()
                );
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Hex SHA-256 of a regular file, read in pieces.
pub fn sha256_file(path: &Path) -> Result<String> {
    let (mut file, _) = crate::util::tree::open_regular(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| crate::util::tree::io_error(path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn rel_key(base: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(base).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Manifest text, sorted by path.
pub fn render(m: &Manifest) -> String {
    m.iter().map(|(p, h)| format!("{h}  {p}\n")).collect()
}

/// Parse manifest text; errors name the file and line.
pub fn parse(text: &str, origin: &Path) -> Result<Manifest> {
    let mut m = Manifest::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((hash, path)) = line.split_once("  ") else {
            bail!(
                "{}:{}: expected '<sha256>  <path>'",
                origin.display(),
                i + 1
            );
        };
        if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            bail!(
                "{}:{}: '{hash}' is not a SHA-256 hex digest",
                origin.display(),
                i + 1
            );
        }
        m.insert(path.to_string(), hash.to_ascii_lowercase());
    }
    Ok(m)
}

/// Differences between what the manifest records and what is there.
pub fn compare(expected: &Manifest, actual: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    for (path, hash) in expected {
        match actual.get(path) {
            None => out.push(format!("{path}: missing (listed in the manifest)")),
            Some(h) if h != hash => out.push(format!(
                "{path}: changed (SHA-256 {h}, manifest says {hash})"
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys() {
        if !expected.contains_key(path) {
            out.push(format!("{path}: not in the manifest"));
        }
    }
    out
}

/// Paths of the files written beside the submitter folder `out/ORG`.
#[derive(Debug, Clone)]
pub struct Artifacts {
    pub manifest: PathBuf,
    pub tarball: PathBuf,
    pub tarball_sha: PathBuf,
}

impl Artifacts {
    pub fn new(out: &Path, org: &str) -> Self {
        Artifacts {
            manifest: out.join(format!("{org}.sha256sums")),
            tarball: out.join(format!("{org}.tar.gz")),
            tarball_sha: out.join(format!("{org}.tar.gz.sha256")),
        }
    }
}

/// Write the tarball of `out/org` (entries "org/...", sorted, file modes kept) atomically, and
/// its own SHA-256 file. Returns the tarball's digest.
pub fn write_tarball(out: &Path, org: &str, art: &Artifacts) -> Result<String> {
    let files = tree_files(out, org)?;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    for f in &files {
        builder
            .append_path_with_name(f, rel_key(out, f))
            .with_context(|| format!("cannot add {} to the tarball", f.display()))?;
    }
    let bytes = builder
        .into_inner()
        .context("cannot finish the tarball")?
        .finish()
        .context("cannot compress")?;
    write_atomic(&art.tarball, &bytes)?;
    let hex = sha256_hex(&bytes);
    let name = art
        .tarball
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic(&art.tarball_sha, format!("{hex}  {name}\n").as_bytes())?;
    Ok(hex)
}

/// What is wrong with a tarball's own bytes (not gzip, a damaged or cut-short entry, an entry
/// that leaves the archive): a failed verification, where failing to write the unpacked copy is
/// an error of this machine.
#[derive(Debug)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

/// Extract a tarball into `dest`, refusing entries that would leave it; returns the manifest
/// of its regular files. A damaged archive is a [`Damaged`] error.
pub fn unpack_tarball(tarball: &Path, dest: &Path) -> Result<Manifest> {
    let shown = tarball.display();
    let damaged = |what: String| anyhow::Error::new(Damaged(format!("{shown}: {what}")));
    let file = std::fs::File::open(tarball).with_context(|| format!("cannot open {shown}"))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut m = Manifest::new();
    for entry in archive
        .entries()
        .map_err(|e| damaged(format!("not a gzipped tar file: {e}")))?
    {
        let mut entry = entry.map_err(|e| damaged(format!("damaged tar entry: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| damaged(format!("damaged tar entry name: {e}")))?
            .into_owned();
        let key = path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let safe = path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            return Err(damaged(format!("entry {key} points outside the archive")));
        }
        let target = dest.join(&path);
        match entry.header().entry_type() {
            t if t.is_file() => {
                let mut bytes = Vec::new();
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|e| damaged(format!("cannot read {key}: {e}")))?;
                m.insert(key.clone(), sha256_hex(&bytes));
                if let Some(dir) = target.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                std::fs::write(&target, &bytes)
                    .with_context(|| format!("cannot write {}", target.display()))?;
            }
            t if t.is_dir() => {
                std::fs::create_dir_all(&target)
                    .with_context(|| format!("cannot create {}", target.display()))?;
            }
            _ => {
                return Err(damaged(format!(
                    "entry {key} is neither a file nor a folder"
                )))
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_roundtrip_and_compare() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("Org/results")).unwrap();
        std::fs::write(dir.path().join("Org/results/a.txt"), b"abc").unwrap();
        let m = manifest_of_dir(dir.path(), "Org").unwrap();
        assert_eq!(
            m.get("Org/results/a.txt").unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let text = render(&m);
        assert_eq!(parse(&text, Path::new("m")).unwrap(), m);
        std::fs::write(dir.path().join("Org/results/a.txt"), b"abd").unwrap();
        let now = manifest_of_dir(dir.path(), "Org").unwrap();
        let diff = compare(&m, &now);
        assert_eq!(diff.len(), 1);
        assert!(
            diff[0].starts_with("Org/results/a.txt: changed"),
            "{diff:?}"
        );
        assert!(parse("xyz  a\n", Path::new("m"))
            .unwrap_err()
            .to_string()
            .contains("m:1"));
    }
}
