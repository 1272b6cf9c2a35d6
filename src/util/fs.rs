//! File helpers shared by every writer of results: atomic replace (of a file, or of a folder
//! through a staging folder) and refusal to clobber.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `contents` to `path` atomically: a temporary file in the same directory, fsync, rename.
/// A crash leaves either the old file or the new one, never a torn one.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, contents, true)
}

/// [`write_atomic`] without the fsyncs, for writers of many files (`data prepare-imagenet`):
/// a killed process still leaves the old file or the new one under `path`, never a torn one,
/// but after a power loss the new file may be incomplete, so such a writer syncs the file
/// system itself before it records the files as done. The temporary name is
/// `.NAME.tmp-HOST-PID` (see [`is_temp_name`]).
pub fn write_atomic_unsynced(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, contents, false)
}

/// True for the temporary names [`write_atomic`] and [`write_atomic_unsynced`] use
/// (`.NAME.tmp-HOST-PID`, or `.NAME.tmp-PID` as they were named before the host was recorded):
/// what a killed writer leaves behind.
pub fn is_temp_name(name: &str) -> bool {
    temp_owner(name).is_some()
}

/// The `HOST-PID` (or `PID`) part of a temporary name ([`is_temp_name`]).
fn temp_owner(name: &str) -> Option<&str> {
    let (_, rest) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    (leftover(rest, "", |_| true) != Leftover::Unknown).then_some(rest)
}

/// The folder `path` lies in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn write_atomic_with(path: &Path, contents: &[u8], sync: bool) -> Result<()> {
    write_atomic_by(path, |tmp| {
        (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(tmp)?;
            f.write_all(contents)?;
            if sync {
                f.sync_all()?;
            }
            Ok(())
        })()
        .with_context(|| format!("cannot write {}", path.display()))
    })?;
    if sync {
        if let Ok(d) = std::fs::File::open(parent_dir(path)) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Have `write` write the file at a temporary path beside `path` (`.NAME.tmp-HOST-PID`, see
/// [`is_temp_name`]), then rename it to `path`; on failure the temporary file is removed. For
/// writers that need a path rather than bytes (HDF5 shards); no fsync ([`write_atomic_unsynced`]
/// says what that leaves after a power loss).
pub fn write_atomic_by(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let dir = parent_dir(path);
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        this_host(),
        std::process::id()
    ));
    let result = write(&tmp).and_then(|()| {
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Remove the temporary files ([`is_temp_name`]) that killed writers left directly in `dir`:
/// those this host's processes made and whose process is gone. A live writer's (this
/// process's own included) is left alone, and so is another host's (on a shared file system
/// its live writer would look gone from here), said at -v. Nothing when `dir` does not exist.
/// Returns how many were removed.
pub fn remove_stale_temps(dir: &Path) -> Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let host = this_host();
    let mut n = 0;
    for entry in entries {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(owner) = temp_owner(&name) else {
            continue;
        };
        match leftover(owner, host, process_alive) {
            Leftover::Stale { .. } => {
                std::fs::remove_file(&path)
                    .with_context(|| format!("cannot remove {}", path.display()))?;
                n += 1;
            }
            Leftover::OtherHost { host: other, pid } => tracing::info!(
                "left {} alone: written by process {pid} on host {other}, whose processes \
                 cannot be seen from {host}; remove it by hand once that run is over",
                path.display()
            ),
            Leftover::Live { .. } | Leftover::Unknown => {}
        }
    }
    Ok(n)
}

/// Run `fill` on a fresh, empty staging folder next to `dest` (`.NAME.TAG-HOST-PID` in the
/// same parent, which is created, so a rename into place never crosses file systems; HOST:
/// [`this_host`]), then remove the
/// staging folder whether `fill` succeeded or not. `fill` moves what it wants to keep into place:
/// the whole folder with [`replace_dir`], or file by file (keeping the rest of `dest`).
pub fn with_staging_dir<T>(
    dest: &Path,
    tag: &str,
    fill: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let staging = staging_dir(dest, tag)?;
    let result = fill(&staging);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn staging_dir(dest: &Path, tag: &str) -> Result<PathBuf> {
    let parent = parent_dir(dest);
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let dir = free_sibling(dest, tag)?;
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create staging folder {}", dir.display()))?;
    Ok(dir)
}

/// The path `.NAME.TAG-HOST-PID` beside `dest` (NAME: `dest`'s name, HOST: [`this_host`],
/// PID: this process's), free: what stood there is removed, and so are the `.NAME.TAG-*`
/// folders of this host's processes that are gone ([`remove_stale_staging`]).
fn free_sibling(dest: &Path, tag: &str) -> Result<PathBuf> {
    let parent = parent_dir(dest);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let prefix = format!(".{name}.{tag}-");
    remove_stale_staging(parent, &prefix);
    let path = parent.join(format!("{prefix}{}-{}", this_host(), std::process::id()));
    if path.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("cannot remove stale {}", path.display()))?;
    }
    Ok(path)
}

/// This host's name as a staging folder records it ([`with_staging_dir`]): the kernel's host
/// name, each character other than a letter, digit, '.', '_' or '-' made '_' ("localhost"
/// when there is none). Staging folders beside a folder on a shared file system may come from
/// several hosts, and only this host's processes can be seen from here.
pub fn this_host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        host_component(raw.trim())
    })
}

/// `host` as a file name component (see [`this_host`]).
fn host_component(host: &str) -> String {
    let clean: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "localhost".into()
    } else {
        clean
    }
}

/// What a folder `PREFIX<rest>` beside a staging folder's destination is to this process.
#[derive(Debug, PartialEq, Eq)]
enum Leftover<'a> {
    /// Not a staging folder's name (no PID after the prefix).
    Unknown,
    /// Made on this host by process `pid`, which is gone: remove it.
    Stale { pid: i32 },
    /// Made on this host by process `pid`, which runs (or may): leave it.
    Live { pid: i32 },
    /// Made on host `host` by its process `pid`, which cannot be seen from here: leave it.
    OtherHost { host: &'a str, pid: i32 },
}

/// Classify the `rest` of a name `PREFIX<rest>`: `HOST-PID` (this naming) or `PID` (the
/// naming before the host was recorded, taken as this host's, as it was then). `alive` says
/// whether a PID of this host runs.
fn leftover<'a>(rest: &'a str, this_host: &str, alive: impl Fn(i32) -> bool) -> Leftover<'a> {
    let (host, pid) = match rest.rsplit_once('-') {
        Some((host, pid)) if !host.is_empty() => (Some(host), pid),
        Some(_) => return Leftover::Unknown,
        None => (None, rest),
    };
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return Leftover::Unknown;
    }
    let Ok(pid) = pid.parse::<i32>() else {
        return Leftover::Unknown;
    };
    if pid <= 0 {
        return Leftover::Unknown;
    }
    match host {
        Some(host) if host != this_host => Leftover::OtherHost { host, pid },
        _ if alive(pid) => Leftover::Live { pid },
        _ => Leftover::Stale { pid },
    }
}

/// Remove the folders `PREFIX<HOST>-<PID>` (or `PREFIX<PID>`, as they were named before) in
/// `parent` that this host made and whose process is gone: staging folders of a run that was
/// killed or stopped by Ctrl-C (no destructor ran), which no later run removes otherwise, as
/// each stages under its own PID. A live process's folder is left alone, and so is another
/// host's (on a shared file system its live process would look gone from here), said at -v.
fn remove_stale_staging(parent: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let host = this_host();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        let pid = match leftover(rest, host, process_alive) {
            Leftover::Stale { pid } => pid,
            Leftover::OtherHost { host: other, pid } => {
                tracing::info!(
                    "left {} alone: made by process {pid} on host {other}, whose processes \
                     cannot be seen from {host}; remove it by hand once that run is over",
                    path.display()
                );
                continue;
            }
            Leftover::Live { .. } | Leftover::Unknown => continue,
        };
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::info!(
                "removed {}, left by a run that was stopped (pid {pid})",
                path.display()
            ),
            Err(err) => tracing::warn!(
                "cannot remove {}, left by a run that was stopped (pid {pid}): {err}; remove it \
                 by hand",
                path.display()
            ),
        }
    }
}

/// True when process `pid` exists on this machine (or may: only "no such process" is no).
fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Put the folder `from` in place of `dest` (same file system: `from` is a staging folder
/// from [`with_staging_dir`]). The old `dest` is renamed aside (`.NAME.old-HOST-PID`) before the new
/// one is renamed in, and only then deleted: a run killed on the way leaves `dest` whole, or
/// absent, never half deleted (it was deleted in place, and a kill during that left a partial
/// data set that training would have used). An aside folder of a killed run is removed by the
/// next run here.
pub fn replace_dir(from: &Path, dest: &Path) -> Result<()> {
    let rename_in = || {
        std::fs::rename(from, dest)
            .with_context(|| format!("cannot rename {} to {}", from.display(), dest.display()))
    };
    if dest.symlink_metadata().is_err() {
        return rename_in();
    }
    let aside = free_sibling(dest, "old")?;
    std::fs::rename(dest, &aside).with_context(|| format!("cannot replace {}", dest.display()))?;
    if let Err(e) = rename_in() {
        // put the old one back: nothing lost
        let _ = std::fs::rename(&aside, dest);
        return Err(e);
    }
    if let Err(e) = std::fs::remove_dir_all(&aside) {
        tracing::warn!(
            "cannot remove {} (the folder {} replaced): {e}; remove it by hand",
            aside.display(),
            dest.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn atomic_write_replaces_contents() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        super::write_atomic(&p, b"one").unwrap();
        super::write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn unsynced_write_replaces_contents_and_names_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c/x.JPEG");
        super::write_atomic_unsynced(&p, b"one").unwrap();
        super::write_atomic_unsynced(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
        let tmp = format!(".x.JPEG.tmp-{}-{}", super::this_host(), std::process::id());
        assert!(super::is_temp_name(&tmp));
        assert!(
            super::is_temp_name(".x.JPEG.tmp-12"),
            "the naming before the host"
        );
        for name in [
            "x.JPEG",
            ".x.JPEG",
            ".x.tmp-",
            ".x.tmp-12a",
            "x.tmp-12",
            ".x.tmp--12",
        ] {
            assert!(!super::is_temp_name(name), "{name}");
        }
    }

    /// Only the temporary files of this host's gone writers are removed: a live writer's
    /// (this process, PID 1) and another host's are left alone, a file of another name too.
    #[test]
    fn only_this_hosts_temporary_files_of_gone_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let host = super::this_host();
        let gone = [
            format!(".a.tmp-{host}-999999999"),
            ".b.tmp-999999998".to_string(),
        ];
        let kept = [
            format!(".c.tmp-{host}-{}", std::process::id()),
            format!(".d.tmp-{}", std::process::id()),
            format!(".e.tmp-{host}-1"),
            format!(".f.tmp-not-{host}-999999999"),
            "g.txt".to_string(),
        ];
        for name in gone.iter().chain(&kept) {
            std::fs::write(dir.path().join(name), b"half").unwrap();
        }
        assert_eq!(super::remove_stale_temps(dir.path()).unwrap(), gone.len());
        for name in &gone {
            assert!(!dir.path().join(name).exists(), "{name} was left");
        }
        for name in &kept {
            assert!(dir.path().join(name).exists(), "{name} was removed");
        }
    }

    /// A staging folder of a killed run (its PID gone) is removed by the next run there; a
    /// live process's (PID 1), or a file of that name, is left alone.
    #[test]
    fn a_dead_process_staging_folder_is_removed_by_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        let stale = dir.path().join(".out.tmp-999999999");
        std::fs::create_dir_all(stale.join("train")).unwrap();
        std::fs::write(stale.join("train/a.JPEG"), b"half").unwrap();
        let live = dir.path().join(".out.tmp-1");
        std::fs::create_dir(&live).unwrap();
        let file = dir.path().join(".out.tmp-999999998");
        std::fs::write(&file, b"not a staging folder").unwrap();
        super::with_staging_dir(&dest, "tmp", |_| Ok(())).unwrap();
        assert!(!stale.exists());
        assert!(live.exists());
        assert!(file.exists());
    }

    /// Staging folders name their host; one is removed only when this host made it and its
    /// process is gone. Another host's is left alone whatever its PID (on a shared file
    /// system its live process looks gone from here); names of the old form (`PREFIX<PID>`)
    /// are this host's, as they were.
    #[test]
    fn only_this_hosts_staging_folders_of_gone_processes_are_removed() {
        use super::{leftover, Leftover};
        let alive = |pid: i32| pid == 7;
        assert_eq!(
            leftover("node1-123", "node1", alive),
            Leftover::Stale { pid: 123 }
        );
        assert_eq!(
            leftover("node1-7", "node1", alive),
            Leftover::Live { pid: 7 }
        );
        assert_eq!(
            leftover("node2-123", "node1", alive),
            Leftover::OtherHost {
                host: "node2",
                pid: 123
            }
        );
        assert_eq!(
            leftover("node2-7", "node1", alive),
            Leftover::OtherHost {
                host: "node2",
                pid: 7
            }
        );
        // host names hold '-' and '.': the PID is after the last '-'
        assert_eq!(
            leftover("gpu-node-3.cluster-99", "gpu-node-3.cluster", alive),
            Leftover::Stale { pid: 99 }
        );
        assert_eq!(
            leftover("gpu-node-4.cluster-99", "gpu-node-3.cluster", alive),
            Leftover::OtherHost {
                host: "gpu-node-4.cluster",
                pid: 99
            }
        );
        // the old naming: this host's
        assert_eq!(
            leftover("123", "node1", alive),
            Leftover::Stale { pid: 123 }
        );
        assert_eq!(leftover("7", "node1", alive), Leftover::Live { pid: 7 });
        for rest in [
            "",
            "-12",
            "node1-",
            "node1-12a",
            "node1-0",
            "0",
            "x",
            "node1-99999999999",
        ] {
            assert_eq!(leftover(rest, "node1", alive), Leftover::Unknown, "{rest}");
        }
        assert_eq!(super::host_component("a b/c-d.e_f"), "a_b_c-d.e_f");
        assert_eq!(super::host_component(""), "localhost");
    }

    /// The staging folder's name records this host and PID; another host's folder beside it,
    /// of a PID no process here has, is left alone, and this host's is removed.
    #[test]
    fn a_staging_folder_names_its_host_and_another_hosts_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        let host = super::this_host();
        assert!(!host.is_empty() && !host.contains('/'), "{host}");
        let other = dir.path().join(format!(".out.tmp-not-{host}-999999999"));
        std::fs::create_dir(&other).unwrap();
        let stale = dir.path().join(format!(".out.tmp-{host}-999999999"));
        std::fs::create_dir(&stale).unwrap();
        let mut seen = None;
        super::with_staging_dir(&dest, "tmp", |staging| {
            seen = Some(staging.to_path_buf());
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen.unwrap().file_name().unwrap().to_string_lossy(),
            format!(".out.tmp-{host}-{}", std::process::id())
        );
        assert!(other.exists(), "another host's staging folder was removed");
        assert!(
            !stale.exists(),
            "this host's stale staging folder is still there"
        );
    }

    /// The old folder set aside by a run killed between its two renames is removed by the
    /// next replacement; a live process's is kept.
    #[test]
    fn an_old_folder_set_aside_by_a_killed_run_is_removed_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let stale = dir.path().join(".out.old-999999999");
        std::fs::create_dir_all(stale.join("train")).unwrap();
        let live = dir.path().join(".out.old-1");
        std::fs::create_dir(&live).unwrap();
        let new = dir.path().join("new");
        std::fs::create_dir(&new).unwrap();
        std::fs::write(new.join("a.txt"), b"a").unwrap();
        super::replace_dir(&new, &dest).unwrap();
        assert_eq!(std::fs::read(dest.join("a.txt")).unwrap(), b"a");
        assert!(!stale.exists() && live.exists() && !new.exists());
        assert!(!dir
            .path()
            .join(format!(
                ".out.old-{}-{}",
                super::this_host(),
                std::process::id()
            ))
            .exists());
    }

    #[test]
    fn staging_folder_replaces_dest_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("sub/out");
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("old.txt"), b"old").unwrap();
        super::with_staging_dir(&dest, "tmp", |staging| {
            assert_eq!(staging.parent(), dest.parent());
            assert_eq!(std::fs::read_dir(staging).unwrap().count(), 0);
            std::fs::write(staging.join("new.txt"), b"new")?;
            super::replace_dir(staging, &dest)
        })
        .unwrap();
        assert!(!dest.join("old.txt").exists());
        assert_eq!(std::fs::read(dest.join("new.txt")).unwrap(), b"new");
        // nothing beside it: no staging folder, no old folder set aside
        let names: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out"]);
        // A failing fill leaves dest alone and removes the staging folder.
        let err = super::with_staging_dir(&dest, "tmp", |staging| -> anyhow::Result<()> {
            std::fs::write(staging.join("half.txt"), b"half")?;
            anyhow::bail!("fill failed")
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "fill failed");
        assert!(dest.join("new.txt").exists());
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            1
        );
    }
}
