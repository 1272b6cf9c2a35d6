//! `mlperf-run package`: checks result logs, then writes the submitter tree
//! `OUT/ORG/{systems,results,benchmarks}`, a SHA-256 manifest beside it and, on request, the
//! tarball. Files are staged next to OUT and moved into place only after every check passed;
//! a record (OUT/mlperf-run-package.json, [`super::record`]) lists what mlperf-run wrote, so
//! `--force` replaces exactly that and never touches the user's other files. Ctrl-C stops it
//! at a safe point before anything in OUT changes; from the first change to OUT's tree until
//! the new manifest and tarball are written, the record says the package is unfinished and the
//! old manifest and tarball are gone, so a package killed in between leaves nothing that
//! verifies as the old package beside a changed tree.

use super::manifest::{self, Artifacts};
use super::record::{self, Record};
use super::repo_rules;
use super::result_sets::{self, ResultSet};
use super::snapshot::{self, Origin};
use super::sysinfo::{self, DescribeOptions};
use super::system_desc::{self, normalize_division, SystemDesc};
use super::tree_check;
use crate::score;
use crate::util::fs::{with_staging_dir, write_atomic};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What to package.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    pub submitter: String,
    pub system: String,
    pub division: String,
    pub results: Vec<PathBuf>,
    pub out: PathBuf,
    pub tarball: bool,
    /// Replace what mlperf-run wrote in OUT before.
    pub force: bool,
    /// Add this system to an existing tree in OUT.
    pub add: bool,
    /// Implementation folder name under `benchmarks/<b>/implementations/`.
    pub implementation: String,
    /// mlperf-run's source folder for the snapshot.
    pub source: PathBuf,
    /// Ruleset for compliance, RCP and the package (None: the benchmark's default, 4.0.0 for a
    /// tree holding both benchmarks; see `result_sets::package_ruleset`).
    pub ruleset: Option<String>,
    /// System description detection (TOML, host root, NVML).
    pub describe: DescribeOptions,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct PackageReport {
    pub org_dir: PathBuf,
    pub manifest: PathBuf,
    pub tarball: Option<(PathBuf, String)>,
    pub origin: Origin,
    pub warnings: Vec<String>,
    pub score_table: String,
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
        bail!("{what} '{name}' must be a plain folder name (no '/')");
    }
    if let Some(reason) = repo_rules::bad_name_reason(name) {
        bail!("{what} '{name}' {reason}: the submission repository refuses such names");
    }
    Ok(())
}

/// The system description the run sets recorded beside their logs ([`sysinfo::RECORDED_FILE`]),
/// if any. Sets that recorded different systems are refused: one package system is one
/// system.
pub fn recorded_description(sets: &[ResultSet]) -> Result<Option<(PathBuf, SystemDesc)>> {
    let dirs: BTreeSet<PathBuf> = sets
        .iter()
        .flat_map(|s| s.logs.iter())
        .filter_map(|l| l.path.parent().map(Path::to_path_buf))
        .collect();
    let mut found: Option<(PathBuf, SystemDesc)> = None;
    for dir in dirs {
        let Some((path, desc)) = sysinfo::read_recorded(&dir)? else {
            continue;
        };
        if let Some((first_path, first)) = &found {
            let differs = system_desc::FIELDS
                .iter()
                .find(|f| !sysinfo::IDENTITY_FIELDS.contains(f) && first.value(f) != desc.value(f));
            if let Some(f) = differs {
                bail!(
                    "{} and {} describe different systems ({f}: {} vs {}): package each as its own --system, or pass --system-config",
                    first_path.display(),
                    path.display(),
                    first.value(f).map(|v| v.to_string()).unwrap_or_default(),
                    desc.value(f).map(|v| v.to_string()).unwrap_or_default()
                );
            }
        } else {
            found = Some((path, desc));
        }
    }
    Ok(found)
}

/// Build the system description for the package: TOML over the description the run sets
/// recorded where they ran (else over detection of this machine), then the command line's
/// submitter, division and system name, and the status from the logs when not given.
pub fn system_description(
    opts: &PackageOptions,
    sets: &[ResultSet],
) -> Result<(SystemDesc, Vec<String>)> {
    let described = match recorded_description(sets)? {
        Some((path, recorded)) => {
            tracing::info!(
                "system description recorded by the run set: {}",
                path.display()
            );
            sysinfo::describe_recorded(&opts.describe, &recorded)?
        }
        None => sysinfo::describe(&opts.describe)?,
    };
    let mut desc = described.desc;
    let identity = ["submitter", "division", "system_name"];
    let mut warnings: Vec<String> = described
        .warnings
        .into_iter()
        .filter(|w| {
            !identity
                .iter()
                .any(|f| w.starts_with(&format!("{f} is not set")))
        })
        .collect();
    for (field, value) in [
        ("submitter", &opts.submitter),
        ("division", &opts.division),
        ("system_name", &opts.system),
    ] {
        let current = desc.get(field);
        if !current.is_empty() && current != value {
            bail!(
                "the system config says {field} = \"{current}\" but the command line says \"{value}\": make them agree"
            );
        }
        desc.set(field, value.clone())?;
    }
    let log_statuses: Vec<(String, PathBuf)> = sets
        .iter()
        .flat_map(|s| s.logs.iter())
        .filter_map(|l| l.status().map(|st| (st, l.path.clone())))
        .collect();
    if desc.get("status").is_empty() {
        if let Some((st, path)) = log_statuses.first() {
            let status = system_desc::normalize_status(st).with_context(|| {
                format!(
                    "submission_status of {}; set status in the system config",
                    path.display()
                )
            })?;
            desc.set("status", status)?;
        } else {
            warnings.push(
                "status: no log has submission_status; set status in the system config".into(),
            );
        }
    }
    if let Some(expected) = system_desc::log_status_for(desc.get("status")) {
        for (st, path) in &log_statuses {
            if st != expected {
                warnings.push(format!(
                    "{} logs submission_status '{st}' but the system status is \"{}\" ('{expected}' in logs)",
                    path.display(),
                    desc.get("status")
                ));
            }
        }
    }
    Ok((desc, warnings))
}

/// What to do about system description problems.
fn system_config_hint(opts: &PackageOptions) -> String {
    match &opts.describe.system_config {
        Some(path) => format!(
            "system description: set the fields above in {} (--system-config)",
            path.display()
        ),
        None => format!(
            "system description: pass --system-config FILE with the fields above; start from \
             configs/systems/example_8xH100.toml (configs/systems/cpu_only.toml for CPU runs). \
             Run sets record their node's description as {} beside their logs, which package \
             uses when no --system-config is given",
            sysinfo::RECORDED_FILE
        ),
    }
}

/// Run every check, then write the tree.
pub fn package(opts: &PackageOptions) -> Result<PackageReport> {
    check_name("--submitter", &opts.submitter)?;
    check_name("--system", &opts.system)?;
    check_name("--implementation", &opts.implementation)?;
    let division = normalize_division(&opts.division)?;
    let opts = &PackageOptions {
        division: division.to_string(),
        ..opts.clone()
    };
    check_out_dir(opts)?;
    let org_dir = opts.out.join(&opts.submitter);
    if org_dir.symlink_metadata().is_ok() {
        // a link or FIFO planted in the tree would go into the manifest and tarball: refuse
        // before anything is written
        manifest::tree_files(&opts.out, &opts.submitter)?;
    }

    let logs = result_sets::find_logs(&opts.results)?;
    let sets = result_sets::group(logs, division)?;
    let mut warnings = Vec::new();
    for l in sets.iter().flat_map(|s| s.logs.iter()) {
        if let Some(org) = l.org() {
            if org != opts.submitter {
                warnings.push(format!(
                    "{} logs submission_org '{org}', packaged as '{}'",
                    l.path.display(),
                    opts.submitter
                ));
            }
        }
    }
    let (desc, desc_warnings) = system_description(opts, &sets)?;
    warnings.extend(desc_warnings);

    let ruleset = result_sets::package_ruleset(
        opts.ruleset.as_deref(),
        tree_benchmarks(opts, &sets).iter().map(String::as_str),
    );

    let mut errors = Vec::new();
    for p in desc.problems() {
        errors.push(format!("system description: {p}"));
    }
    if !errors.is_empty() {
        errors.push(system_config_hint(opts));
    }
    for set in &sets {
        let report = result_sets::check_set(set, division, &ruleset);
        errors.extend(report.errors);
        warnings.extend(report.warnings);
    }
    if !errors.is_empty() {
        bail!("{}", refusal(&errors));
    }

    let stop = || stop_if_requested(opts);
    stop()?;
    let (origin, snap) = snapshot::take(&opts.source)?;
    if !snap.skipped.is_empty() {
        warnings.push(format!(
            "source snapshot leaves out {}",
            snap.skipped.join(", ")
        ));
    }
    stop()?;
    let (score_table, (written, mut record)) =
        with_staging_dir(&opts.out, "mlperf-run-staging", |staging| {
            let mut staged = stage(opts, &desc, &sets, &origin, &snap, staging)?;
            let (table, score_warnings) =
                score_staged(opts, &sets, &ruleset, staging, &mut staged)?;
            warnings.extend(score_warnings);
            // the last safe point: from here on OUT changes, and the package is finished
            // whatever comes (a second Ctrl-C exits at once, as a kill)
            stop()?;
            let installed = install(opts, &sets, &staged, staging)?;
            Ok((table, installed))
        })?;

    let (manifest, tarball) = finish(opts, &org_dir, &ruleset, &mut record)?;
    tracing::info!("wrote {} files under {}", written, org_dir.display());
    Ok(PackageReport {
        org_dir,
        manifest,
        tarball,
        origin,
        warnings,
        score_table,
    })
}

/// Check the tree now in OUT, write its manifest (and tarball), and only then mark the record
/// finished. Returns the manifest's path and the tarball's with its digest.
fn finish(
    opts: &PackageOptions,
    org_dir: &Path,
    ruleset: &str,
    record: &mut Record,
) -> Result<(PathBuf, Option<(PathBuf, String)>)> {
    let (tree_errors, _) = tree_check::check_tree(org_dir, Some(ruleset));
    if !tree_errors.is_empty() {
        bail!(
            "the packaged tree {} fails its checks:\n  - {}",
            org_dir.display(),
            tree_errors.join("\n  - ")
        );
    }
    let art = Artifacts::new(&opts.out, &opts.submitter);
    let m = manifest::manifest_of_dir(&opts.out, &opts.submitter)?;
    write_atomic(&art.manifest, manifest::render(&m).as_bytes())?;
    let tarball = if opts.tarball {
        let hex = manifest::write_tarball(&opts.out, &opts.submitter, &art)?;
        Some((art.tarball.clone(), hex))
    } else {
        None
    };
    // the manifest and tarball are those of the tree: finished
    record.unfinished = false;
    record::write(&opts.out, record)?;
    Ok((art.manifest, tarball))
}

/// A safe point of `package` ([`crate::util::interrupt::stop_if_requested`]): nothing in OUT
/// has changed yet.
fn stop_if_requested(opts: &PackageOptions) -> Result<()> {
    crate::util::interrupt::stop_if_requested(|| {
        format!(
            "interrupted: package stopped before it changed anything in {out}: nothing already \
             written was lost ({out} is as it was; the staging folder beside it is removed); \
             rerun the same command to write the package",
            out = opts.out.display()
        )
    })
}

/// "refusing to package (N problems):" and the first problems, one a line (a folder of
/// 10,000 bad logs gets a screenful, not 10,000 lines).
fn refusal(errors: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut text = format!(
        "refusing to package ({} problems):\n  - {}",
        errors.len(),
        errors[..errors.len().min(SHOWN)].join("\n  - ")
    );
    if errors.len() > SHOWN {
        text.push_str(&format!("\n  - and {} more", errors.len() - SHOWN));
    }
    text
}

/// The benchmarks the tree in OUT will hold: the sets packaged now, and with --add the other
/// systems' sets already there (this system's are replaced).
fn tree_benchmarks(opts: &PackageOptions, sets: &[ResultSet]) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = sets.iter().map(|s| s.benchmark.name.clone()).collect();
    if opts.add {
        let results = opts.out.join(&opts.submitter).join("results");
        for system in std::fs::read_dir(&results).into_iter().flatten().flatten() {
            if system.file_name().to_string_lossy() == opts.system.as_str() {
                continue;
            }
            for b in std::fs::read_dir(system.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = b.file_name().to_string_lossy().into_owned();
                if b.path().is_dir() && crate::benchmarks::get(&name).is_ok() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// Score the staged sets with [`score::score_set`] at `ruleset` and print the table (paths as
/// they will be in OUT, each result file with the log it comes from). Closed sets: a set that
/// fails the RCP check is refused; one that passes faster than the RCP mean gets scaling.json
/// with the RCP normalization factor, as the official package checker writes it. Returns the
/// table and warnings (score problems other than the RCP).
fn score_staged(
    opts: &PackageOptions,
    sets: &[ResultSet],
    ruleset: &str,
    staging: &Path,
    staged: &mut BTreeMap<String, String>,
) -> Result<(String, Vec<String>)> {
    let org = &opts.submitter;
    let score_opts = score::ScoreOptions {
        ruleset: Some(ruleset.to_string()),
    };
    let mut scored = Vec::new();
    let mut sources = String::new();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for set in sets {
        stop_if_requested(opts)?;
        let b = &set.benchmark.name;
        let rel_dir = format!("{org}/results/{}/{b}", opts.system);
        let mut s = score::score_set(&staging.join(&rel_dir), &score_opts)?;
        s.dir = opts.out.join(&rel_dir);
        for r in &mut s.runs {
            if let Some(name) = r.file.file_name() {
                r.file = s.dir.join(name);
            }
        }
        let given = set
            .logs
            .iter()
            .map(|l| l.path.display().to_string())
            .collect::<Vec<_>>();
        for (i, g) in given.iter().enumerate() {
            sources.push_str(&format!("{}/result_{i}.txt <- {g}\n", s.dir.display()));
        }
        warnings.extend(
            s.problems
                .iter()
                .filter(|p| !p.starts_with("RCP check failed"))
                .map(|p| format!("{}: {p}", s.dir.display())),
        );
        if let Some(rcp) = &s.rcp {
            if !rcp.passed {
                let detail = match (&rcp.reference, rcp.set_mean) {
                    (Some(r), Some(m)) => format!(
                        "; the set converges at {m:.4} on average (olympic), the RCP {} at batch size {} needs at least {:.4} (mean {:.4})",
                        r.name, r.batch_size, r.min_mean, r.mean
                    ),
                    _ => String::new(),
                };
                errors.push(format!(
                    "{b}: the closed set fails the RCP check at ruleset {ruleset}: {}{detail} (logs: {})",
                    rcp.message,
                    given.join(", ")
                ));
            } else if let Some(f) = tree_check::scaling_json_factor(rcp) {
                let rel = format!("{rel_dir}/{}", tree_check::SCALING_JSON);
                write_file(
                    &staging.join(&rel),
                    tree_check::scaling_json_text(f).as_bytes(),
                    false,
                )?;
                staged.insert(rel, format!("system:{}", opts.system));
            }
        }
        scored.push(s);
    }
    let table = format!(
        "{}packaged from:\n{sources}",
        score::render(&scored, score::Format::Table)?
    );
    // the tree is written (or refused) whether or not anyone still reads stdout
    crate::util::output::print_beside_work(&table)?;
    if !errors.is_empty() {
        bail!("{}", refusal(&errors));
    }
    Ok((table, warnings))
}

fn check_out_dir(opts: &PackageOptions) -> Result<()> {
    let out = &opts.out;
    if out.exists() && !out.is_dir() {
        bail!(
            "--out {} exists and is not a folder: choose another --out (the tree goes to \
             OUT/ORG, the manifest to OUT/ORG.sha256sums)",
            out.display()
        );
    }
    let non_empty = out.is_dir()
        && std::fs::read_dir(out)
            .map(|mut r| r.next().is_some())
            .unwrap_or(false);
    if non_empty && !opts.force && !opts.add {
        bail!(
            "output folder {} already exists: pass --add to add this system to the tree there, \
             --force to replace what mlperf-run wrote there before, or choose another --out",
            out.display()
        );
    }
    // a tree written into a results folder is read back as results by the next package, score
    // or check of that folder (its copies of the logs, the source snapshot's files), which then
    // all fail
    let out_at = resolved(out);
    if let Some(r) = opts
        .results
        .iter()
        .find(|r| out_at.starts_with(resolved(r)))
    {
        bail!(
            "--out {} is inside the results folder {}: the tree would be read as results by the \
             next package, score or check of it; choose an --out outside the results",
            out.display(),
            r.display()
        );
    }
    Ok(())
}

/// `path` absolute, `..` taken away, with its links resolved as far as it exists (the rest
/// joined as given).
fn resolved(path: &Path) -> PathBuf {
    use std::path::Component;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut head = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                head.pop();
            }
            Component::CurDir => {}
            c => head.push(c),
        }
    }
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&head) {
            return rest.iter().rev().fold(c, |p, n| p.join(n));
        }
        match (head.file_name().map(|n| n.to_os_string()), head.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                head = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The implementation templates, with their placeholders filled.
fn templates(
    set: &ResultSet,
    opts: &PackageOptions,
    origin: &Origin,
) -> Vec<(&'static str, String, bool)> {
    const FILES: [(&str, &str, bool); 4] = [
        ("README.md", include_str!("templates/README.md"), false),
        (
            "run_and_time.sh",
            include_str!("templates/run_and_time.sh"),
            true,
        ),
        ("setup.sh", include_str!("templates/setup.sh"), true),
        (
            "init_datasets.sh",
            include_str!("templates/init_datasets.sh"),
            true,
        ),
    ];
    let vars = [
        ("{{BENCHMARK}}", set.benchmark.name.clone()),
        ("{{TITLE}}", set.benchmark.title.clone()),
        ("{{RUNS}}", set.benchmark.runs.to_string()),
        ("{{VERSION}}", env!("CARGO_PKG_VERSION").to_string()),
        ("{{SOURCE}}", origin.describe()),
        ("{{SUBMITTER}}", opts.submitter.clone()),
        ("{{SYSTEM}}", opts.system.clone()),
        ("{{DIVISION}}", opts.division.clone()),
    ];
    FILES
        .iter()
        .map(|(name, text, exec)| {
            let mut t = text.to_string();
            for (k, v) in &vars {
                t = t.replace(k, v);
            }
            (*name, t, *exec)
        })
        .collect()
}

fn write_file(path: &Path, bytes: &[u8], exec: bool) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    let mode = if exec { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set permissions of {}", path.display()))
}

/// Write everything into `staging` (same layout as OUT) and check the repository rules.
/// Returns what was staged: path relative to OUT -> owner.
fn stage(
    opts: &PackageOptions,
    desc: &SystemDesc,
    sets: &[ResultSet],
    origin: &Origin,
    snap: &snapshot::Snapshot,
    staging: &Path,
) -> Result<BTreeMap<String, String>> {
    let org = &opts.submitter;
    let sys_owner = format!("system:{}", opts.system);
    let mut staged: BTreeMap<String, String> = BTreeMap::new();
    // a safe point before each file
    let write_file = |path: &Path, bytes: &[u8], exec: bool| {
        stop_if_requested(opts)?;
        write_file(path, bytes, exec)
    };
    let rel_sys = format!("{org}/systems/{}.json", opts.system);
    write_file(
        &staging.join(&rel_sys),
        desc.to_json_string().as_bytes(),
        false,
    )?;
    staged.insert(rel_sys, sys_owner.clone());
    for set in sets {
        let b = &set.benchmark.name;
        for (i, l) in set.logs.iter().enumerate() {
            stop_if_requested(opts)?;
            let rel = format!("{org}/results/{}/{b}/result_{i}.txt", opts.system);
            let bytes =
                crate::util::tree::read_limited(&l.path, repo_rules::MAX_FILE_BYTES, "result log")?;
            write_file(&staging.join(&rel), &bytes, false)?;
            staged.insert(rel, sys_owner.clone());
        }
        let impl_rel = format!(
            "{org}/benchmarks/{b}/implementations/{}",
            opts.implementation
        );
        let impl_owner = format!("implementation:{b}/{}", opts.implementation);
        for (name, text, exec) in templates(set, opts, origin) {
            let rel = format!("{impl_rel}/{name}");
            write_file(&staging.join(&rel), text.as_bytes(), exec)?;
            staged.insert(rel, impl_owner.clone());
        }
        for (path, bytes, exec) in &snap.files {
            let rel = format!("{impl_rel}/mlperf-run/{path}");
            write_file(&staging.join(&rel), bytes, *exec)?;
            staged.insert(rel, impl_owner.clone());
        }
    }
    let problems = repo_rules::check_tree(&staging.join(org));
    if !problems.is_empty() {
        bail!(
            "refusing to package: the tree breaks the repository rules:\n  - {}",
            problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n  - ")
        );
    }
    Ok(staged)
}

/// Move what `stage` (and the scoring) wrote into OUT, replacing only what mlperf-run wrote
/// there before. Returns the number of files written and the record of OUT as it is now, still
/// marked unfinished (the caller clears that once the manifest and tarball are written).
fn install(
    opts: &PackageOptions,
    sets: &[ResultSet],
    staged: &BTreeMap<String, String>,
    staging: &Path,
) -> Result<(usize, Record)> {
    let out = &opts.out;
    let (mut record, replaced) = plan_install(opts, sets, staged, &record::path(out))?;
    // Nothing refused. Record first what OUT may hold from here on (the old files and the new):
    // a package killed (or failing) while it moves files leaves no file of its own that the
    // record does not list, which a rerun with --force would refuse as not written by
    // mlperf-run. The record also says, until the end, that the package is unfinished.
    record.unfinished = true;
    let mut ahead = record.clone();
    ahead.submitter = opts.submitter.clone();
    ahead.files.extend(staged.clone());
    record::write(out, &ahead)?;
    // Then the old manifest and tarball go, before the first change to the tree: a package
    // killed after that change left them beside a tree they no longer described, and `verify
    // OUT/ORG.tar.gz` called the old tarball valid. The tarball first: it is what gets
    // uploaded.
    let art = Artifacts::new(out, &opts.submitter);
    for old in [&art.tarball, &art.tarball_sha, &art.manifest] {
        match std::fs::remove_file(old) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", old.display())),
        }
    }
    for rel in &replaced {
        let p = out.join(rel);
        if p.symlink_metadata().is_ok() {
            std::fs::remove_file(&p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
        record.files.remove(rel);
        remove_empty_parents(&p, out);
    }
    for (rel, owner) in staged {
        let target = out.join(rel);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::rename(staging.join(rel), &target)
            .with_context(|| format!("cannot move {} into place", target.display()))?;
        record.files.insert(rel.clone(), owner.clone());
    }
    record.submitter = opts.submitter.clone();
    record::write(out, &record)?;
    Ok((staged.len(), record))
}

/// Read OUT's record and decide what may be replaced in OUT: refuse another submitter's tree,
/// a system already there (`--add` without `--force`), a link on the way, and any file in
/// the way that mlperf-run did not write. Returns the record and the files to remove.
fn plan_install(
    opts: &PackageOptions,
    sets: &[ResultSet],
    staged: &BTreeMap<String, String>,
    record_path: &Path,
) -> Result<(Record, Vec<String>)> {
    let org = &opts.submitter;
    let sys_owner = format!("system:{}", opts.system);
    let out = &opts.out;
    let record = record::read(out)?.unwrap_or_else(|| Record {
        submitter: org.clone(),
        ..Record::default()
    });
    if record.unfinished && !opts.force {
        bail!(
            "{} says that a package into {} did not finish (killed or failed half-way): rerun \
             the command that was stopped, with --force",
            record_path.display(),
            out.display()
        );
    }
    if !record.files.is_empty() && record.submitter != *org {
        bail!(
            "{} holds a tree of submitter '{}' (see {}): one submitter per output folder",
            out.display(),
            record.submitter,
            record_path.display()
        );
    }
    if opts.add && !opts.force && record.files.values().any(|o| *o == sys_owner) {
        bail!(
            "system '{}' is already in {}: pass --force to replace it",
            opts.system,
            out.join(org).display()
        );
    }
    let impl_owners: Vec<String> = sets
        .iter()
        .map(|s| {
            format!(
                "implementation:{}/{}",
                s.benchmark.name, opts.implementation
            )
        })
        .collect();
    let replaced: Vec<String> = record
        .files
        .iter()
        .filter(|(_, owner)| {
            (opts.force && !opts.add) || **owner == sys_owner || impl_owners.contains(owner)
        })
        .map(|(p, _)| p.clone())
        .collect();
    for rel in staged.keys() {
        refuse_links_on_the_way(out, rel)?;
        let target = out.join(rel);
        if target.symlink_metadata().is_ok() && !record.files.contains_key(rel) {
            bail!(
                "{} exists and was not written by mlperf-run: move it away or choose another --out",
                target.display()
            );
        }
    }
    Ok((record, replaced))
}

/// Refuse to write `out/rel` when a folder on the way below `out` is a symbolic link: package
/// writes inside OUT only, never through a link to somewhere else.
fn refuse_links_on_the_way(out: &Path, rel: &str) -> Result<()> {
    let mut at = out.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match at.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => bail!(
                "{} is a symbolic link: package writes only inside {}, never through a link; \
                 remove the link, or choose another --out",
                at.display(),
                out.display()
            ),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn remove_empty_parents(file: &Path, stop: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == stop || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}
