//! A run set: N seeded runs of one benchmark into `RESULTS/SYSTEM/BENCHMARK/result_<i>.txt`,
//! resumable, with the set going on after a run that crashes or diverges. Each run's
//! [`RunOutcome`] says how it ended; only a crashed run's log is read back, to close it.
//!
//! Durability: a run's log is appended line by line, each line flushed as it is written
//! (see [`crate::mllog::Sink`]), so Ctrl-C or a crash leaves a valid partial log. A result file
//! is *finished* once it holds a `run_stop` event; finished files are never rewritten. On
//! `--resume`, an unfinished file (killed mid-run) is moved to `interrupted/` beside the set
//! and its run is done again with a fresh seed (its own with `--seeds`).
//!
//! A run that was cut rather than finished on its own merits (Ctrl-C on any rank, a peer that
//! died, was cut off or never came, a failed CUDA graph capture: its outcome's `stop_set`)
//! stops the set: its log, closed with run_stop aborted, goes to `interrupted/` at once, the
//! runs before it are kept, and `--resume` runs it again. A string of runs that abort at once
//! because their group cannot form never fills the set.
//!
//! One set at a time per folder: the writer holds the folder's lock ([`super::lock`]) from
//! before it looks at the result files until the set returns.

use super::lock::SetLock;
use super::outcome::RunOutcome;
use crate::mllog::{self, keys, Emitter, LogFile, Sink};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// What set to run and where.
#[derive(Debug, Clone)]
pub struct SetSpec {
    /// Root of the results tree (`--results`).
    pub results_root: PathBuf,
    /// System name (`--system`): the folder under the results root.
    pub system: String,
    /// Benchmark name (resnet, bert): the folder under the system.
    pub benchmark: String,
    /// Number of runs (`--runs`).
    pub runs: usize,
    /// Seeds to use, by run index (`--seeds`); None draws each from the OS.
    pub seeds: Option<Vec<u64>>,
    /// Continue an existing set (`--resume`).
    pub resume: bool,
    /// True on the process that owns the result files (rank 0). Other ranks of a data-parallel
    /// set run the same runs in step but only read the results folder (which must then be on
    /// a file system all ranks share) and never write, move or close a log.
    pub writer: bool,
}

impl SetSpec {
    /// `RESULTS/SYSTEM/BENCHMARK`.
    pub fn set_dir(&self) -> PathBuf {
        self.results_root.join(&self.system).join(&self.benchmark)
    }

    /// `RESULTS/SYSTEM/BENCHMARK/result_<i>.txt`.
    pub fn result_path(&self, index: usize) -> PathBuf {
        self.set_dir().join(format!("result_{index}.txt"))
    }
}

/// One run for the executor to perform.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub index: usize,
    pub runs: usize,
    pub seed: u64,
    /// The log to append to (created by the executor's emitter).
    pub log_path: PathBuf,
}

/// Performs one seeded run, writing its MLPerf log to `req.log_path` (closed with run_stop), and
/// says how it ended. An `Err` means the run crashed; the set closes its log as aborted if the
/// run did not, and goes on.
pub trait RunExecutor {
    fn run(&mut self, req: &RunRequest) -> Result<RunOutcome>;
}

impl<F: FnMut(&RunRequest) -> Result<RunOutcome>> RunExecutor for F {
    fn run(&mut self, req: &RunRequest) -> Result<RunOutcome> {
        self(req)
    }
}

/// How one run of the set ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub index: usize,
    pub seed: Option<u64>,
    /// run_stop status (success, aborted), or None when the log has no run_stop.
    pub status: Option<String>,
    /// True when this invocation ran it (false: kept from an earlier, resumed invocation).
    pub ran_now: bool,
    /// The crash message, when the executor failed.
    pub error: Option<String>,
}

/// The outcome of [`run_set`].
#[derive(Debug, Clone)]
pub struct SetOutcome {
    pub set_dir: PathBuf,
    pub runs: Vec<RunRecord>,
    /// Logs moved to `interrupted/`: unfinished logs of killed runs (on resume) and the log
    /// of a run that was cut.
    pub moved_aside: Vec<PathBuf>,
    /// True when the set stopped early: Ctrl-C, or a run that was cut ([`SetOutcome::cut`]).
    pub interrupted: bool,
    /// The run that was cut and why (its outcome's `stop_set`); it runs again on `--resume`.
    pub cut: Option<(usize, String)>,
    /// The warning given when the folder's lock was taken over from a killed set
    /// ([`super::lock`]).
    pub took_over_lock: Option<String>,
}

/// Progress notifications for a display.
#[derive(Debug, Clone)]
pub enum SetEvent<'a> {
    Kept(&'a RunRecord),
    Starting(&'a RunRequest),
    Finished(&'a RunRecord),
}

fn seed_of(log: &LogFile) -> Option<u64> {
    log.first(keys::SEED).and_then(|e| e.value.as_u64())
}

fn status_of(log: &LogFile) -> Option<String> {
    log.last(keys::RUN_STOP)
        .map(|e| e.status().unwrap_or("unknown").to_string())
}

/// A seed from the OS (getrandom, as the closed rules want: not a counter) that is not in
/// `used`, below 2^31 so every consumer (libtorch's generators, the data order) can take it.
pub fn os_seed(used: &BTreeSet<u64>) -> Result<u64> {
    loop {
        let mut buf = [0u8; 8];
        getrandom::getrandom(&mut buf)
            .map_err(|e| anyhow::anyhow!("cannot draw a seed from the OS: {e}"))?;
        let seed = u64::from_le_bytes(buf) & 0x7fff_ffff;
        if !used.contains(&seed) {
            return Ok(seed);
        }
    }
}

/// `--runs` and `--seeds`: at least one run, one distinct seed per run; and a system name that
/// is one folder under the results root.
fn check_runs_and_seeds(spec: &SetSpec) -> Result<()> {
    let system = spec.system.as_str();
    if system.trim().is_empty()
        || system.contains('/')
        || system.contains('\\')
        || system == "."
        || system == ".."
    {
        bail!(
            "the system name {system:?} (--system, by default the config's [system] \
             submission_platform) must be one plain folder name under {}: not empty, no '/', \
             not '.' or '..'; give --system NAME",
            spec.results_root.display()
        );
    }
    if spec.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if let Some(seeds) = &spec.seeds {
        if seeds.len() < spec.runs {
            bail!(
                "--seeds lists {} seeds for {} runs: give one seed per run",
                seeds.len(),
                spec.runs
            );
        }
        let distinct: BTreeSet<_> = seeds.iter().collect();
        if distinct.len() != seeds.len() {
            bail!("--seeds repeats a seed: every run of a set needs its own seed");
        }
    }
    Ok(())
}

/// The result files already in the set's folder: refused without `--resume`, and beyond
/// `--runs`.
fn check_existing(spec: &SetSpec, set_dir: &std::path::Path) -> Result<()> {
    let existing: Vec<usize> = (0..spec.runs.max(64))
        .filter(|i| spec.result_path(*i).exists())
        .collect();
    if spec.writer && !existing.is_empty() && !spec.resume {
        bail!(
            "{} already holds {} result file(s): pass --resume to continue this set, or choose another --results or --system",
            set_dir.display(),
            existing.len()
        );
    }
    if let Some(extra) = existing.iter().find(|i| **i >= spec.runs) {
        bail!(
            "{} holds {} beyond the {} runs asked for: pass the set's original --runs",
            set_dir.display(),
            spec.result_path(*extra).display(),
            spec.runs
        );
    }
    Ok(())
}

/// What the set's folder holds for run `index`.
enum Found {
    Missing,
    /// A log with run_stop, checked against the set (its benchmark, its seed).
    Finished(LogFile),
    /// A log without run_stop: the run was killed.
    Unfinished(LogFile),
}

fn found(spec: &SetSpec, index: usize) -> Result<Found> {
    let path = spec.result_path(index);
    if !path.exists() {
        return Ok(Found::Missing);
    }
    let log = mllog::parse_file(&path)?;
    if status_of(&log).is_none() {
        return Ok(Found::Unfinished(log));
    }
    check_kept_benchmark(spec, &path, &log)?;
    check_kept_seed(spec, index, &path, seed_of(&log))?;
    Ok(Found::Finished(log))
}

/// The runs already in the folder: a finished log is kept (its seed used), an unfinished one
/// (killed mid-run) is moved aside into `interrupted/` and its run redone. Returns the indices
/// left to run, in order.
fn keep_finished_runs(
    spec: &SetSpec,
    outcome: &mut SetOutcome,
    used_seeds: &mut BTreeSet<u64>,
    on_event: &mut impl FnMut(SetEvent<'_>),
) -> Result<Vec<usize>> {
    let mut todo = Vec::new();
    for index in 0..spec.runs {
        let path = spec.result_path(index);
        match found(spec, index)? {
            Found::Missing => todo.push(index),
            Found::Finished(log) => {
                let record = RunRecord {
                    index,
                    seed: seed_of(&log),
                    status: status_of(&log),
                    ran_now: false,
                    error: None,
                };
                if let Some(s) = record.seed {
                    used_seeds.insert(s);
                }
                on_event(SetEvent::Kept(&record));
                outcome.runs.push(record);
            }
            Found::Unfinished(_) if !spec.writer => todo.push(index),
            Found::Unfinished(log) => {
                // Killed mid-run: keep the partial log for the user, outside the set.
                let aside = move_to_interrupted(&outcome.set_dir, index, &path)?;
                tracing::warn!(
                    "{} had no run_stop (killed mid-run): moved to {}",
                    path.display(),
                    aside.display()
                );
                if let Some(s) = seed_of(&log) {
                    used_seeds.insert(s);
                }
                outcome.moved_aside.push(aside);
                todo.push(index);
            }
        }
    }
    Ok(todo)
}

/// The set as [`run_set`] will start it, read only (nothing is locked, created, moved or
/// written): its checks of the flags and of the folder, then the finished runs it will keep,
/// as (index, seed). For the ranks of a data-parallel set to compare before the first run: a
/// rank that would refuse the set says so to the others, and a results folder that is not one
/// all ranks share shows as other finished runs. [`run_set`] checks again, under the lock.
pub fn preview(spec: &SetSpec) -> Result<Vec<(usize, Option<u64>)>> {
    check_runs_and_seeds(spec)?;
    let set_dir = spec.set_dir();
    if spec.writer {
        check_not_a_file(&set_dir)?;
        SetLock::check_free(&set_dir)?;
    } else {
        check_seeds_given(spec)?;
    }
    check_existing(spec, &set_dir)?;
    let mut kept = Vec::new();
    for index in 0..spec.runs {
        if let Found::Finished(log) = found(spec, index)? {
            kept.push((index, seed_of(&log)));
        }
    }
    Ok(kept)
}

/// The set's folder can be made: nothing on its path is a file (or a broken link).
fn check_not_a_file(set_dir: &std::path::Path) -> Result<()> {
    if let Some(file) = set_dir
        .ancestors()
        .find(|p| p.is_file() || (p.is_symlink() && !p.exists()))
    {
        bail!(
            "cannot make the set's folder {}: {} is a file (or a broken link), not a folder; \
             move it away or choose another --results or --system",
            set_dir.display(),
            file.display()
        );
    }
    Ok(())
}

/// A rank that does not write (rank 1 and up) runs the set's runs in step with rank 0: with
/// their seeds, which it cannot draw itself.
fn check_seeds_given(spec: &SetSpec) -> Result<()> {
    if spec.seeds.is_none() {
        bail!("a data-parallel run set needs --seeds so that every rank runs the same seeds");
    }
    Ok(())
}

/// A finished run kept on `--resume` is a run of this set's benchmark: a log of another one
/// (copied in, or a set folder reused) would be kept and scored as one of its runs.
fn check_kept_benchmark(spec: &SetSpec, path: &std::path::Path, log: &LogFile) -> Result<()> {
    let logged = log
        .first(keys::SUBMISSION_BENCHMARK)
        .and_then(|e| e.value.as_str());
    match logged {
        Some(b) if b != spec.benchmark => bail!(
            "{} is a finished {b} run (its submission_benchmark), not a {} run of this set: \
             move it out of {}, or resume the set it belongs to (another --results or \
             --system)",
            path.display(),
            spec.benchmark,
            spec.set_dir().display()
        ),
        _ => Ok(()),
    }
}

/// A finished run kept on `--resume` ran the seed `--seeds` gives it: resumed with other
/// seeds, the set would mix two seed lists (and could repeat a seed).
fn check_kept_seed(
    spec: &SetSpec,
    index: usize,
    path: &std::path::Path,
    logged: Option<u64>,
) -> Result<()> {
    match (&spec.seeds, logged) {
        (Some(seeds), Some(seed)) if seeds[index] != seed => bail!(
            "{} ran seed {seed}, but --seeds gives {} for run {index}: resume with the set's \
             original --seeds (or start a new set in another --results or --system)",
            path.display(),
            seeds[index]
        ),
        _ => Ok(()),
    }
}

/// Moves the log of run `index` (unfinished, or cut) into `interrupted/` beside the set, under
/// a name that keeps every earlier one; returns where it went.
fn move_to_interrupted(
    set_dir: &std::path::Path,
    index: usize,
    path: &std::path::Path,
) -> Result<PathBuf> {
    let aside_dir = set_dir.join("interrupted");
    std::fs::create_dir_all(&aside_dir)
        .with_context(|| format!("cannot create {}", aside_dir.display()))?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let mut aside = aside_dir.join(format!("result_{index}-{stamp}.txt"));
    let mut n = 1;
    while aside.exists() {
        aside = aside_dir.join(format!("result_{index}-{stamp}-{n}.txt"));
        n += 1;
    }
    std::fs::rename(path, &aside).with_context(|| {
        format!(
            "cannot move {} aside to {} (move it there by hand, then continue with --resume)",
            path.display(),
            aside.display()
        )
    })?;
    Ok(aside)
}

/// One run of the set: its run_stop status (None when it crashed), the crash, and why the set
/// cannot go on after it in this process, if its outcome says so.
fn run_one(
    executor: &mut dyn RunExecutor,
    req: &RunRequest,
) -> (Option<String>, Option<String>, Option<String>) {
    match executor.run(req) {
        Ok(out) => (Some(out.status.as_str().to_string()), None, out.stop_set),
        Err(e) => {
            let msg = format!("{e:#}");
            tracing::error!("run {} crashed: {msg}", req.index);
            (None, Some(msg), None)
        }
    }
}

/// Run (or resume) a set. `on_event` sees every run kept, started and finished.
pub fn run_set(
    spec: &SetSpec,
    executor: &mut dyn RunExecutor,
    mut on_event: impl FnMut(SetEvent<'_>),
) -> Result<SetOutcome> {
    check_runs_and_seeds(spec)?;
    let set_dir = spec.set_dir();
    // The writer holds the folder's lock until the set returns (on every path): a second set
    // into the same folder is refused before it looks at, moves or writes any result file.
    let lock = if spec.writer {
        check_not_a_file(&set_dir)?;
        std::fs::create_dir_all(&set_dir)
            .with_context(|| format!("cannot create {}", set_dir.display()))?;
        Some(SetLock::acquire(&set_dir)?)
    } else {
        check_seeds_given(spec)?;
        None
    };

    check_existing(spec, &set_dir)?;

    let mut outcome = SetOutcome {
        set_dir: set_dir.clone(),
        runs: Vec::new(),
        moved_aside: Vec::new(),
        interrupted: false,
        cut: None,
        took_over_lock: lock
            .as_ref()
            .and_then(|l| l.took_over())
            .map(str::to_string),
    };
    let mut used_seeds = BTreeSet::new();
    let todo = keep_finished_runs(spec, &mut outcome, &mut used_seeds, &mut on_event)?;
    if let Some(seeds) = &spec.seeds {
        used_seeds.extend(seeds.iter().copied());
    }

    for index in todo {
        if crate::util::interrupt::requested() {
            outcome.interrupted = true;
            break;
        }
        let seed = match &spec.seeds {
            Some(seeds) => seeds[index],
            None => os_seed(&used_seeds)?,
        };
        used_seeds.insert(seed);
        let req = RunRequest {
            index,
            runs: spec.runs,
            seed,
            log_path: spec.result_path(index),
        };
        on_event(SetEvent::Starting(&req));
        let ran = run_one(executor, &req);
        if !record_run(spec, &req, ran, &mut outcome, &mut on_event)? {
            break;
        }
        if crate::util::interrupt::requested() {
            outcome.interrupted = true;
            break;
        }
    }
    outcome.runs.sort_by_key(|r| r.index);
    drop(lock);
    Ok(outcome)
}

/// Records run `req` in `outcome` from how it went (`run_one`'s status, crash and cut); false
/// when the set stops after it. The writer closes a crashed run's log; a cut run (its
/// `stop_set`) is not a result: its log goes to interrupted/ and `--resume` runs it again.
/// Other ranks only note what happened.
fn record_run(
    spec: &SetSpec,
    req: &RunRequest,
    (status, error, stop): (Option<String>, Option<String>, Option<String>),
    outcome: &mut SetOutcome,
    on_event: &mut impl FnMut(SetEvent<'_>),
) -> Result<bool> {
    let index = req.index;
    if let Some(why) = stop {
        if spec.writer && req.log_path.exists() {
            let aside = move_to_interrupted(&outcome.set_dir, index, &req.log_path)?;
            tracing::warn!(
                "run {} was cut ({why}): its log is kept at {}",
                index + 1,
                aside.display()
            );
            outcome.moved_aside.push(aside);
        }
        outcome.cut = Some((index, why));
        outcome.interrupted = true;
        return Ok(false);
    }
    let status = match status {
        Some(s) => s,
        None if spec.writer => close_crashed_log(&req.log_path, error.as_deref())?,
        None => keys::STATUS_ABORTED.to_string(),
    };
    let record = RunRecord {
        index,
        seed: Some(req.seed),
        status: Some(status),
        ran_now: true,
        error,
    };
    if spec.writer {
        on_event(SetEvent::Finished(&record));
    }
    outcome.runs.push(record);
    Ok(true)
}

/// The run_stop status of a crashed run's log: the one it wrote, or, when it died without one,
/// "aborted", written now (with the crash as the reason) so the run counts as non-converged and
/// a resume does not redo it.
fn close_crashed_log(path: &std::path::Path, error: Option<&str>) -> Result<String> {
    let log = mllog::parse_file(path).unwrap_or_default();
    if let Some(status) = status_of(&log) {
        return Ok(status);
    }
    let cannot = || {
        format!(
            "cannot close the crashed run's log {} with run_stop aborted (check that it is a \
             writable file, then continue the set with --resume)",
            path.display()
        )
    };
    let mut emitter = Emitter::new(vec![Sink::file(path, true).with_context(cannot)?]);
    let reason = error.unwrap_or("run ended without run_stop").to_string();
    emitter
        .end(
            keys::RUN_STOP,
            Value::Null,
            crate::meta! {"status" => keys::STATUS_ABORTED, "reason" => reason},
        )
        .with_context(cannot)?;
    Ok(keys::STATUS_ABORTED.to_string())
}

/// Parse `--seeds 1,2,3`.
pub fn parse_seed_list(text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .with_context(|| format!("--seeds: '{s}' is not a non-negative integer"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta;
    use crate::runs::Status;
    use std::path::Path;

    /// A fake run: a minimal log with seed, run_start and (unless `crash`) run_stop.
    fn fake_run(req: &RunRequest, crash: bool) -> Result<RunOutcome> {
        let mut e = Emitter::new(vec![Sink::file(&req.log_path, false)?]);
        e.event(keys::SEED, req.seed)?;
        e.start(keys::RUN_START, Value::Null, meta!())?;
        if crash {
            bail!("simulated crash");
        }
        e.end(keys::RUN_STOP, Value::Null, meta! {"status" => "success"})?;
        Ok(RunOutcome::new(req.seed, Status::Success))
    }

    fn spec(root: &Path, resume: bool) -> SetSpec {
        SetSpec {
            results_root: root.into(),
            system: "sys".into(),
            benchmark: "resnet".into(),
            runs: 5,
            seeds: None,
            resume,
            writer: true,
        }
    }

    #[test]
    fn crashed_run_is_closed_as_aborted_and_set_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut exec = |req: &RunRequest| fake_run(req, req.index == 1);
        let out = run_set(&spec(dir.path(), false), &mut exec, |_| {}).unwrap();
        assert_eq!(out.runs.len(), 5);
        assert_eq!(out.runs[1].status.as_deref(), Some("aborted"));
        assert!(out.runs[1]
            .error
            .as_deref()
            .unwrap()
            .contains("simulated crash"));
        assert_eq!(
            out.runs
                .iter()
                .filter(|r| r.status.as_deref() == Some("success"))
                .count(),
            4
        );
        let seeds: BTreeSet<_> = out.runs.iter().map(|r| r.seed.unwrap()).collect();
        assert_eq!(seeds.len(), 5, "seeds must be distinct");
    }

    #[test]
    fn resume_keeps_finished_runs_and_redoes_killed_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), false);
        // First invocation: two finished runs, then killed during the third (no run_stop).
        for i in 0..2 {
            fake_run(
                &RunRequest {
                    index: i,
                    runs: 5,
                    seed: 100 + i as u64,
                    log_path: s.result_path(i),
                },
                false,
            )
            .unwrap();
        }
        let mut partial = Emitter::new(vec![Sink::file(&s.result_path(2), false).unwrap()]);
        partial.event(keys::SEED, 102u64).unwrap();
        let before0 = std::fs::read(s.result_path(0)).unwrap();

        assert!(
            run_set(&s, &mut |r: &RunRequest| fake_run(r, false), |_| {}).is_err(),
            "refuses without --resume"
        );
        let mut ran = Vec::new();
        let out = run_set(
            &spec(dir.path(), true),
            &mut |r: &RunRequest| {
                ran.push(r.index);
                fake_run(r, false)
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(ran, vec![2, 3, 4]);
        assert_eq!(out.moved_aside.len(), 1);
        assert_eq!(crate::score::result_files(&s.set_dir()).unwrap().len(), 5);
        assert_eq!(
            std::fs::read(s.result_path(0)).unwrap(),
            before0,
            "finished file untouched"
        );
        let seeds: BTreeSet<_> = out.runs.iter().map(|r| r.seed.unwrap()).collect();
        assert_eq!(seeds.len(), 5);
        assert!(!seeds.contains(&102), "the killed run's seed is not reused");
    }

    /// A finished log of another benchmark in the set's folder (copied in by hand, or a set
    /// folder reused) was kept on `--resume` as one of this set's runs, and scored with them.
    /// It is refused, naming the file, both benchmarks and what to do; it stays where it is.
    #[test]
    fn resume_refuses_a_finished_log_of_another_benchmark() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), true);
        std::fs::create_dir_all(s.set_dir()).unwrap();
        let path = s.result_path(0);
        let mut e = Emitter::new(vec![Sink::file(&path, false).unwrap()]);
        e.event(keys::SUBMISSION_BENCHMARK, "bert").unwrap();
        e.event(keys::SEED, 7u64).unwrap();
        e.start(keys::RUN_START, Value::Null, meta!()).unwrap();
        e.end(keys::RUN_STOP, Value::Null, meta! {"status" => "success"})
            .unwrap();
        drop(e);
        let before = std::fs::read(&path).unwrap();
        let mut ran = Vec::new();
        let err = run_set(
            &s,
            &mut |r: &RunRequest| {
                ran.push(r.index);
                fake_run(r, false)
            },
            |_| {},
        )
        .unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains(&path.display().to_string())
                && err.contains("bert")
                && err.contains("resnet")
                && err.contains("--results"),
            "{err}"
        );
        assert!(ran.is_empty(), "no run starts");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the log is untouched"
        );
    }

    /// What the ranks of a data-parallel set compare: the refusals run_set would give, and
    /// the finished runs it would keep, read without writing, moving or locking anything.
    #[test]
    fn preview_refuses_as_run_set_would_and_lists_the_kept_runs_touching_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(dir.path(), false);
        assert_eq!(preview(&s).unwrap(), vec![]);
        assert!(!s.set_dir().exists(), "the set's folder was made");
        let req = |index: usize| RunRequest {
            index,
            runs: 5,
            seed: 100 + index as u64,
            log_path: s.result_path(index),
        };
        std::fs::create_dir_all(s.set_dir()).unwrap();
        fake_run(&req(0), false).unwrap();
        let _ = fake_run(&req(1), true);
        let err = format!("{:#}", preview(&s).unwrap_err());
        assert!(err.contains("pass --resume"), "{err}");
        let resumed = spec(dir.path(), true);
        assert_eq!(preview(&resumed).unwrap(), vec![(0, Some(100))]);
        assert!(s.result_path(1).exists(), "the unfinished log was moved");
        assert!(!s.set_dir().join("interrupted").exists());
        assert!(!s.set_dir().join(super::super::lock::LOCK_FILE).exists());
        let other_rank = SetSpec {
            writer: false,
            ..resumed.clone()
        };
        let err = format!("{:#}", preview(&other_rank).unwrap_err());
        assert!(err.contains("needs --seeds"), "{err}");
        let wrong_seeds = SetSpec {
            seeds: Some(vec![7, 8, 9, 10, 11]),
            ..resumed
        };
        let err = format!("{:#}", preview(&wrong_seeds).unwrap_err());
        assert!(err.contains("ran seed 100, but --seeds gives 7"), "{err}");
    }

    #[test]
    fn os_seeds_are_31_bit_and_skip_the_used_ones() {
        let mut used = BTreeSet::new();
        for _ in 0..64 {
            let s = os_seed(&used).unwrap();
            assert!(s < (1 << 31), "{s}");
            assert!(used.insert(s), "{s} drawn twice");
        }
    }

    #[test]
    fn seed_list_is_validated() {
        assert_eq!(parse_seed_list("1, 2,3").unwrap(), vec![1, 2, 3]);
        assert!(parse_seed_list("1,x").is_err());
        let dir = tempfile::tempdir().unwrap();
        let s = SetSpec {
            seeds: Some(vec![1, 1, 2, 3, 4]),
            ..spec(dir.path(), false)
        };
        assert!(run_set(&s, &mut |r: &RunRequest| fake_run(r, false), |_| {}).is_err());
    }

    #[test]
    fn non_writer_rank_runs_the_same_runs_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let writer = spec(dir.path(), true);
        for i in 0..2 {
            let req = RunRequest {
                index: i,
                runs: 5,
                seed: 10 + i as u64,
                log_path: writer.result_path(i),
            };
            fake_run(&req, false).unwrap();
        }
        let mut partial = Emitter::new(vec![Sink::file(&writer.result_path(2), false).unwrap()]);
        partial.event(keys::SEED, 12u64).unwrap();
        let other = SetSpec {
            writer: false,
            seeds: Some(vec![10, 11, 12, 13, 14]),
            ..writer.clone()
        };
        let mut ran = Vec::new();
        let out = run_set(
            &other,
            &mut |r: &RunRequest| {
                ran.push((r.index, r.seed));
                Ok(RunOutcome::new(r.seed, Status::Aborted("diverged".into())))
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(ran, vec![(2, 12), (3, 13), (4, 14)]);
        // the status of a run made now comes from its outcome (this rank writes no log)
        let made_now: Vec<_> = out.runs.iter().filter(|r| r.ran_now).collect();
        assert_eq!(made_now.len(), 3);
        assert!(made_now
            .iter()
            .all(|r| r.status.as_deref() == Some("aborted")));
        assert!(out.moved_aside.is_empty());
        assert!(
            !writer.result_path(3).exists(),
            "a non-writer rank creates no result file"
        );
        assert!(
            writer.result_path(2).exists(),
            "a non-writer rank moves nothing aside"
        );
        let no_seeds = SetSpec {
            seeds: None,
            ..other
        };
        assert!(run_set(
            &no_seeds,
            &mut |r: &RunRequest| Ok(RunOutcome::new(r.seed, Status::Success)),
            |_| {}
        )
        .is_err());
    }
}
