//! One run set at a time per results folder: the set's writer holds
//! `RESULTS/SYSTEM/BENCHMARK/run_set.lock` ([`LOCK_FILE`]) while it runs, so a second
//! `mlperf-run resnet|bert` started into the same folder is refused, naming the folder and the
//! process that holds it, and two runs never write `result_<i>.txt` for the same i.
//!
//! The lock is an advisory `flock` on that file, which holds the holder's pid, host, start time
//! and command line. The kernel drops the lock when the holder dies, however it dies; so a lock
//! file nobody holds was left by a process that was killed (SIGKILL, a crash, a power cut): the
//! next set takes it over, saying so. The holder removes the file when it ends: [`SetLock`]'s
//! destructor on success, error and the first Ctrl-C (which ends the set through its normal
//! path), and the Ctrl-C handler itself when a second Ctrl-C exits at once
//! ([`crate::util::interrupt::remove_on_exit_now`]).

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The lock file's name in the set's folder.
pub const LOCK_FILE: &str = "run_set.lock";

/// A held lock on a run set's folder; dropping it removes the lock file.
#[derive(Debug)]
pub struct SetLock {
    path: PathBuf,
    /// Open for as long as the lock is held: closing it releases the flock.
    file: File,
    /// What the lock file said when this process took it over from a killed one.
    stale: Option<String>,
}

/// What a lock file says about its holder.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub started: Option<String>,
    pub command: Option<String>,
}

impl Holder {
    /// This process.
    fn this_process() -> Holder {
        Holder {
            pid: Some(std::process::id()),
            host: hostname(),
            started: Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            command: Some(
                std::env::args()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replace('\n', " "),
            ),
        }
    }

    fn parse(text: &str) -> Holder {
        let mut h = Holder::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim().to_string();
            match key.trim() {
                "pid" => h.pid = value.parse().ok(),
                "host" => h.host = Some(value),
                "started" => h.started = Some(value),
                "command" => h.command = Some(value),
                _ => {}
            }
        }
        h
    }

    fn render(&self) -> String {
        let mut s = String::new();
        let fields = [
            ("pid", self.pid.map(|p| p.to_string())),
            ("host", self.host.clone()),
            ("started", self.started.clone()),
            ("command", self.command.clone()),
        ];
        for (key, value) in fields {
            if let Some(v) = value {
                s += &format!("{key}: {v}\n");
            }
        }
        s
    }

    /// "pid 123 on host h (started ..., `command`)", as much as is known.
    pub fn describe(&self) -> String {
        let mut s = match self.pid {
            Some(pid) => format!("pid {pid}"),
            None => "a process whose pid the lock file does not name".to_string(),
        };
        if let Some(host) = &self.host {
            s += &format!(" on host {host}");
        }
        let mut extra = Vec::new();
        if let Some(started) = &self.started {
            extra.push(format!("started {started}"));
        }
        if let Some(command) = &self.command {
            extra.push(format!("`{command}`"));
        }
        if !extra.is_empty() {
            s += &format!(" ({})", extra.join(", "));
        }
        s
    }
}

/// This host's name (gethostname); None where it has none.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned()).filter(|h| !h.is_empty())
}

/// What the lock file says; bytes that are not UTF-8 (a file damaged or written by something
/// else) are read as replacement characters, not refused: the flock, not the text, is the lock.
fn read_holder(file: &mut File) -> std::io::Result<Holder> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    Ok(Holder::parse(&String::from_utf8_lossy(&bytes)))
}

/// True when `path` still names the file open as `file` (not removed, nor replaced, since it was
/// opened).
fn still_at(file: &File, path: &Path) -> std::io::Result<bool> {
    let open = file.metadata()?;
    Ok(match std::fs::metadata(path) {
        Ok(now) => now.dev() == open.dev() && now.ino() == open.ino(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    })
}

impl SetLock {
    /// Take the lock of the run set in `set_dir` (which must exist), or refuse, naming the
    /// folder and the process that holds it. A lock file left by a killed process is taken over
    /// (a warning says so; [`SetLock::took_over`] has it).
    pub fn acquire(set_dir: &Path) -> Result<SetLock> {
        let path = set_dir.join(LOCK_FILE);
        let cannot =
            |what: &str| format!("cannot {what} the run set's lock file {}", path.display());
        loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .with_context(|| cannot("create"))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Err(held(set_dir, &mut file, &path)),
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| {
                        format!(
                            "{}: the results folder must be on a file system with file locks \
                             (flock), or choose another --results",
                            cannot("lock")
                        )
                    })
                }
            }
            // Between our open and our lock, the holder may have ended and removed the file (and
            // another set made a new one): then this lock guards nothing; start again.
            if !still_at(&file, &path).with_context(|| cannot("check"))? {
                continue;
            }
            let previous = read_holder(&mut file).with_context(|| cannot("read"))?;
            // a file with anything in it was left by someone, even if it names nobody readable
            let left = file.metadata().map(|m| m.len() > 0).unwrap_or(false);
            let stale = (previous != Holder::default() || left).then(|| {
                let note = format!(
                    "took over the run set's lock {} from {}, which no longer runs (killed?)",
                    path.display(),
                    previous.describe()
                );
                tracing::warn!("{note}");
                note
            });
            file.set_len(0)
                .and_then(|_| file.seek(SeekFrom::Start(0)))
                .and_then(|_| file.write_all(Holder::this_process().render().as_bytes()))
                .and_then(|_| file.flush())
                .with_context(|| cannot("write"))?;
            crate::util::interrupt::remove_on_exit_now(&path);
            return Ok(SetLock { path, file, stale });
        }
    }

    /// Refuse, as [`SetLock::acquire`] would, when another set holds the lock of `set_dir`;
    /// read only (nothing is created or written; a free lock is taken and let go at once). For
    /// the ranks of a data-parallel set, which compare what they would refuse before the first
    /// run.
    pub fn check_free(set_dir: &Path) -> Result<()> {
        let path = set_dir.join(LOCK_FILE);
        let Ok(mut file) = File::open(&path) else {
            return Ok(());
        };
        match file.try_lock_shared() {
            Err(TryLockError::WouldBlock) => Err(held(set_dir, &mut file, &path)),
            Ok(()) | Err(TryLockError::Error(_)) => Ok(()),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The warning given when this lock was taken over from a killed process.
    pub fn took_over(&self) -> Option<&str> {
        self.stale.as_deref()
    }
}

/// The refusal of a set whose folder's lock another set holds.
fn held(set_dir: &Path, file: &mut File, path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "another run set is writing {}: {} holds its lock {}. Wait for it to end, or give this \
         set another --results or --system",
        set_dir.display(),
        held_by(file).describe(),
        path.display()
    )
}

/// Who holds the lock open as `file`: its holder writes itself in just after it locks, so an
/// empty file is read again a few times.
fn held_by(file: &mut File) -> Holder {
    for _ in 0..20 {
        match read_holder(file) {
            Ok(h) if h != Holder::default() => return h,
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            Err(_) => break,
        }
    }
    Holder::default()
}

impl Drop for SetLock {
    fn drop(&mut self) {
        crate::util::interrupt::keep_on_exit_now(&self.path);
        // Remove the file while still holding the lock (the flock goes when `file` closes);
        // a set that opened it meanwhile sees it gone and starts again.
        if still_at(&self.file, &self.path).unwrap_or(false) {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(
                    "cannot remove the run set's lock {}: {e} (the next set takes it over)",
                    self.path.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_names_its_holder() {
        let h = Holder::this_process();
        let back = Holder::parse(&h.render());
        assert_eq!(back, h);
        assert!(h
            .describe()
            .starts_with(&format!("pid {}", std::process::id())));
        assert_eq!(Holder::parse("garbage\n"), Holder::default());
    }

    #[test]
    fn a_lock_file_of_binary_garbage_nobody_holds_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), [0xff, 0xfe, 0x00, 0x80, b'\n']).unwrap();
        let lock = SetLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert!(
            text.contains(&format!("pid: {}", std::process::id())),
            "{text}"
        );
        // the take-over is said, as for a lock a killed process left
        let note = lock.took_over().expect("a take-over note");
        assert!(
            note.contains("whose pid the lock file does not name"),
            "{note}"
        );
        drop(lock);
        // an empty lock file (a holder killed before it wrote itself in) is no take-over to tell
        std::fs::write(dir.path().join(LOCK_FILE), "").unwrap();
        assert_eq!(SetLock::acquire(dir.path()).unwrap().took_over(), None);
    }
}
