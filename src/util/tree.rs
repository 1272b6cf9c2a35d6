//! Reading folders and files that come from other people (result folders, submitter trees):
//! a file is opened only when it is a regular file and never blocks (a FIFO is refused, not
//! waited on), a folder is listed without following symbolic links out of the tree or round a
//! loop, and every refusal names the path and what to do. The policy, as `score`, `check` and
//! `package` apply it (docs/packaging.md, "Hostile trees"):
//!
//! - a path named on the command line is followed wherever it points (the user chose it);
//! - inside a walked folder, a symbolic link to a file is read when its target lies inside the
//!   walked root ([`Links::FollowInside`]: `score`, `check`), and refused otherwise; `package`
//!   reads no link at all ([`Links::Refuse`]), so nothing from outside the tree and no file
//!   twice goes into a package;
//! - a symbolic link to a folder is never followed (it would walk a folder twice, or round a
//!   loop): skipped with a warning when it points inside the root, refused when it points out;
//! - a link that does not resolve is refused when it loops, or when its name is one the walker
//!   reads (a dangling `result_0.txt`); other dangling links are skipped with a warning;
//! - a FIFO, socket or device is refused when its name is one the walker reads, else ignored;
//! - an unreadable file or folder is refused, naming it and the `chmod` that fixes it.

use anyhow::{bail, Result};
use std::fs::{File, FileType};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a file of this type is, for messages ("a named pipe (FIFO)").
pub fn kind_of(ft: &FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a folder"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a named pipe (FIFO)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, ft: &FileType) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is {}, not a regular file: mlperf-run reads regular files only (nothing is waited \
         on or read from a device); give a file, or put the file it stands for in its place",
        path.display(),
        kind_of(ft)
    )
}

/// An error opening or reading `path`, naming it and what to do.
pub fn io_error(path: &Path, e: &io::Error) -> anyhow::Error {
    let p = path.display();
    if e.raw_os_error() == Some(libc::ELOOP) {
        return anyhow::anyhow!(
            "{p}: too many levels of symbolic links (a link loop): remove the link, or point it \
             at the file it stands for"
        );
    }
    match e.kind() {
        io::ErrorKind::NotFound => match std::fs::read_link(path) {
            // the path itself is there: a link whose target is not
            Ok(target) => anyhow::anyhow!(
                "{p} is a symbolic link to {}, which does not exist: point the link at the \
                 file it stands for, or remove it",
                target.display()
            ),
            Err(_) => anyhow::anyhow!("{p} does not exist"),
        },
        io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot read {p}: permission denied: make it readable (chmod a+r {p}) or move it \
             out of the tree"
        ),
        _ => anyhow::anyhow!("cannot read {p}: {e}"),
    }
}

fn dir_error(dir: &Path, e: &io::Error) -> anyhow::Error {
    let d = dir.display();
    match e.kind() {
        io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot list folder {d}: permission denied: make it readable (chmod a+rx {d}) or \
             move it out of the tree"
        ),
        _ => anyhow::anyhow!("cannot list folder {d}: {}", io_error(dir, e)),
    }
}

/// Open `path` for reading when it is a regular file (following links: a path given here was
/// chosen by the caller), with its size. A FIFO, socket, device or folder is refused before it
/// is opened, so nothing blocks and no device is touched; the open itself is non-blocking and
/// the type checked again on the open file.
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error(path, &e))?;
    let meta = file.metadata().map_err(|e| io_error(path, &e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// Bytes as "2.0 GiB", "50.0 MiB", "512 bytes".
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

/// Read a regular file of at most `max` bytes ([`open_regular`]); a larger one is refused
/// without reading it, naming `what` it should be.
pub fn read_limited(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    let too_big = |n: u64| {
        anyhow::anyhow!(
            "{} is {}, over the {} a {what} may be: is it the right file?",
            path.display(),
            human_size(n),
            human_size(max)
        )
    };
    if len > max {
        return Err(too_big(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, &e))?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_limited`] as UTF-8 text; a file that is not (a binary, or another encoding) is
/// named with the first byte that is not and `what` it should be.
pub fn read_text_limited(path: &Path, max: u64, what: &str) -> Result<String> {
    let bytes = read_limited(path, max, what)?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not UTF-8 text (byte {} is not; is it a binary file?): give a {what}",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// The most bytes [`read_text_file`] reads: far more than any config, recipe or baseline.
pub const MAX_TEXT_FILE_BYTES: u64 = 64 << 20;

/// A text file a user gives (a run config, a recipe, a system config, a baseline CSV), read as
/// [`read_text_limited`]: a missing path, a folder, a FIFO, a binary file are each said as
/// such, with the file's name and `what` it should be (it was std's bare "stream did not
/// contain valid UTF-8", and a FIFO was waited on).
pub fn read_text_file(path: &Path, what: &str) -> Result<String> {
    if path.is_dir() {
        bail!("{} is a folder: give a {what}", path.display());
    }
    read_text_limited(path, MAX_TEXT_FILE_BYTES, what)
}

/// How a walk treats symbolic links to files inside the walked folder (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Read a link to a regular file inside the root (`score`, `check`).
    FollowInside,
    /// Read no link (`package`).
    Refuse,
}

/// What a folder holds, as [`Walk::list`] saw it: full paths, sorted.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Regular files (or, with [`Links::FollowInside`], links to them inside the root) whose
    /// name the caller reads.
    pub files: Vec<PathBuf>,
    /// Real folders (never links).
    pub dirs: Vec<PathBuf>,
}

/// A walk below one root folder under the link policy of the module docs.
#[derive(Debug, Clone)]
pub struct Walk {
    root: PathBuf,
    shown_root: PathBuf,
    links: Links,
}

impl Walk {
    /// A walk below `root` (followed when it is itself a link: the user named it).
    pub fn new(root: &Path, links: Links) -> Result<Walk> {
        let canonical = std::fs::canonicalize(root).map_err(|e| io_error(root, &e))?;
        Ok(Walk {
            root: canonical,
            shown_root: root.to_path_buf(),
            links,
        })
    }

    /// The files (named as `wanted` accepts) and folders directly in `dir`, a folder at or
    /// below the root. Errors name the path and what to do.
    pub fn list(&self, dir: &Path, wanted: &dyn Fn(&str) -> bool) -> Result<Listing> {
        let entries = std::fs::read_dir(dir).map_err(|e| dir_error(dir, &e))?;
        let mut out = Listing::default();
        for entry in entries {
            let entry = entry.map_err(|e| dir_error(dir, &e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let ft = entry.file_type().map_err(|e| io_error(&path, &e))?;
            if ft.is_dir() {
                out.dirs.push(path);
            } else if ft.is_file() {
                if wanted(&name) {
                    out.files.push(path);
                }
            } else if ft.is_symlink() {
                if self.link(&path, wanted(&name))? {
                    out.files.push(path);
                }
            } else if wanted(&name) {
                return Err(not_regular(&path, &ft));
            }
        }
        out.files.sort();
        out.dirs.sort();
        Ok(out)
    }

    /// Whether to read the link `path` as a file (`wanted`: its name is one the caller reads);
    /// an error where the policy refuses it.
    fn link(&self, path: &Path, wanted: bool) -> Result<bool> {
        let p = path.display();
        let root = self.shown_root.display();
        let shown_target = std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".into());
        let target = match std::fs::canonicalize(path) {
            Ok(t) => t,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => bail!(
                "{p} is a symbolic link loop (-> {shown_target}): remove the link, or point it at \
                 the file it stands for"
            ),
            Err(e) if wanted => bail!(
                "{p} is a symbolic link that does not resolve (-> {shown_target}: {e}): remove \
                 it, or point it at the file it stands for"
            ),
            Err(_) => {
                tracing::warn!("{p}: dangling symbolic link (-> {shown_target}), skipped");
                return Ok(false);
            }
        };
        let inside = target.starts_with(&self.root);
        let meta = std::fs::metadata(&target).map_err(|e| io_error(&target, &e))?;
        if meta.is_dir() {
            if inside {
                tracing::warn!(
                    "{p}: a symbolic link to a folder inside {root} is not followed (the folder \
                     is read where it is)"
                );
                return Ok(false);
            }
            bail!(
                "{p} is a symbolic link to the folder {}, outside {root}: links out of the tree \
                 are not followed; copy that folder into the tree, or name it on the command \
                 line itself",
                target.display()
            );
        }
        if !wanted {
            return Ok(false);
        }
        if self.links == Links::Refuse {
            bail!(
                "{p} is a symbolic link (-> {shown_target}): no link inside a results folder is \
                 read into a package (nothing from outside the tree, no file twice); put the \
                 file itself in place of the link, or name the file on the command line"
            );
        }
        if !inside {
            bail!(
                "{p} is a symbolic link to {}, outside {root}: links out of the tree are not \
                 read; copy the file into the tree in place of the link",
                target.display()
            );
        }
        if !meta.is_file() {
            return Err(not_regular(path, &meta.file_type()));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("result_0.txt");
        fifo(&p);
        let err = open_regular(&p).unwrap_err().to_string();
        assert!(
            err.contains("is a named pipe (FIFO), not a regular file"),
            "{err}"
        );
        let err = Walk::new(dir.path(), Links::FollowInside)
            .unwrap()
            .list(dir.path(), &|n| n.ends_with(".txt"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("result_0.txt is a named pipe"), "{err}");
        // a FIFO whose name is not read is ignored
        let l = Walk::new(dir.path(), Links::FollowInside)
            .unwrap()
            .list(dir.path(), &|n| n.ends_with(".log"))
            .unwrap();
        assert!(l.files.is_empty());
    }

    #[test]
    fn links_follow_the_policy() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), b"x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), b"a").unwrap();
        symlink(root.join("sub/a.txt"), root.join("in.txt")).unwrap();
        symlink(root, root.join("sub/up")).unwrap();
        let all = |_: &str| true;
        let follow = Walk::new(root, Links::FollowInside).unwrap();
        let l = follow.list(root, &all).unwrap();
        assert_eq!(l.files, vec![root.join("in.txt")]);
        assert_eq!(l.dirs, vec![root.join("sub")]);
        // a link to a folder inside the root is skipped, not walked round the loop
        let l = follow.list(&root.join("sub"), &all).unwrap();
        assert_eq!(l.dirs, Vec::<PathBuf>::new());
        let refuse = Walk::new(root, Links::Refuse).unwrap();
        let err = refuse.list(root, &all).unwrap_err().to_string();
        assert!(err.contains("in.txt is a symbolic link"), "{err}");
        symlink(outside.path().join("secret.txt"), root.join("sub/out.txt")).unwrap();
        let err = follow
            .list(&root.join("sub"), &all)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("outside") && err.contains("secret.txt"),
            "{err}"
        );
        std::fs::remove_file(root.join("sub/out.txt")).unwrap();
        symlink("loop_b", root.join("sub/loop_a")).unwrap();
        symlink("loop_a", root.join("sub/loop_b")).unwrap();
        let err = follow
            .list(&root.join("sub"), &all)
            .unwrap_err()
            .to_string();
        assert!(err.contains("symbolic link loop"), "{err}");
    }

    #[test]
    fn read_limited_refuses_big_files_unread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        let f = File::create(&p).unwrap();
        f.set_len(3 << 30).unwrap();
        let err = read_limited(&p, 1 << 20, "system description")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is 3.0 GiB, over the 1.0 MiB"), "{err}");
        assert_eq!(
            read_limited(&dir.path().join("no"), 1, "x")
                .unwrap_err()
                .to_string(),
            format!("{} does not exist", dir.path().join("no").display())
        );
    }
}
