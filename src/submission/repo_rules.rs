//! The repository rules of `mlperf_logging.repo_checker`, checked on a tree before it is
//! published: no file or folder name starting with "." or holding a space, no file over
//! 50 MB, no broken symbolic links.

use std::path::{Path, PathBuf};

/// Largest file the repository accepts (50 MiB, as the official checker computes it).
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;

/// Why a name is not acceptable in a submission repository, if it is not.
pub fn bad_name_reason(name: &str) -> Option<&'static str> {
    if name.starts_with('.') {
        Some("starts with '.'")
    } else if name.contains(' ') {
        Some("holds a space")
    } else {
        None
    }
}

/// One broken repository rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RepoProblem {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for RepoProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// Check every file and folder below `root` (not `root` itself).
pub fn check_tree(root: &Path) -> Vec<RepoProblem> {
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

fn walk(dir: &Path, out: &mut Vec<RepoProblem>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            out.push(RepoProblem {
                path: dir.to_path_buf(),
                message: format!("cannot read folder: {e}"),
            });
            return;
        }
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(reason) = bad_name_reason(&name) {
            out.push(RepoProblem {
                path: path.clone(),
                message: format!("name {reason} (git-unfriendly)"),
            });
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if std::fs::metadata(&path).is_err() {
                out.push(RepoProblem {
                    path,
                    message: "broken symbolic link".into(),
                });
            }
        } else if meta.is_dir() {
            walk(&path, out);
        } else if meta.len() > MAX_FILE_BYTES {
            out.push(RepoProblem {
                path,
                message: format!("{} bytes: over the 50 MB limit", meta.len()),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_bad_names_big_files_and_broken_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/.hidden")).unwrap();
        std::fs::write(root.join("a/ok.txt"), b"x").unwrap();
        std::fs::write(root.join("a/with space.txt"), b"x").unwrap();
        let big = std::fs::File::create(root.join("a/big.bin")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        std::os::unix::fs::symlink("does-not-exist", root.join("a/link")).unwrap();
        std::os::unix::fs::symlink("ok.txt", root.join("a/good-link")).unwrap();
        let problems = check_tree(root);
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 4, "{text:#?}");
        assert!(text
            .iter()
            .any(|t| t.ends_with(".hidden: name starts with '.' (git-unfriendly)")));
        assert!(text
            .iter()
            .any(|t| t.contains("with space.txt: name holds a space")));
        assert!(text.iter().any(|t| t.contains("big.bin: 52428801 bytes")));
        assert!(text
            .iter()
            .any(|t| t.contains("a/link: broken symbolic link")));
    }
}
