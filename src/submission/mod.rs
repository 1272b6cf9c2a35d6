//! System description, submitter tree, tarball and verification
//! (`mlperf-run sysinfo`, `package`, `verify`).
//!
//! - [`system_desc`]: the 33-field system JSON, status strings, TOML overrides
//! - [`detect`], [`gpu`], [`framework`]: what this machine is (host files, NVML, libtorch)
//! - [`sysinfo`]: the two combined; the description a run set records beside its results
//! - [`result_sets`], [`repo_rules`], [`tree_check`]: the checks run before writing and by verify
//! - [`package`], [`snapshot`], [`manifest`]: the tree, the source snapshot, manifest and tarball
//! - [`record`]: what `package` wrote in OUT, and whether it finished
//! - [`verify`]: re-checking a packaged tree or tarball

pub mod detect;
pub mod framework;
pub mod gpu;
pub mod manifest;
pub mod package;
pub mod record;
pub mod repo_rules;
pub mod result_sets;
pub mod snapshot;
pub mod sysinfo;
pub mod system_desc;
pub mod tree_check;
pub mod verify;

use crate::util::ExitStatus;
use anyhow::Result;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SysinfoArgs {
    /// A system TOML (e.g. configs/systems/NAME.toml) whose keys override detected fields.
    #[arg(long, value_name = "FILE")]
    pub system_config: Option<PathBuf>,
    /// Print the system JSON (as written to `systems/<system>.json`) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run_sysinfo(args: SysinfoArgs) -> Result<ExitStatus> {
    let opts = sysinfo::DescribeOptions {
        system_config: args.system_config,
        ..Default::default()
    };
    let described = sysinfo::describe(&opts)?;
    for w in &described.warnings {
        eprintln!("warning: {w}");
    }
    if args.json {
        crate::util::output::print(&described.desc.to_json_string())?;
    } else {
        let mut out = crate::util::output::stdout();
        let json = described.desc.to_json();
        for (k, v) in json.as_object().into_iter().flatten() {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            writeln!(out, "{k:34} {text}")?;
        }
    }
    Ok(ExitStatus::Success)
}

#[derive(clap::Args, Debug)]
pub struct PackageArgs {
    /// Submitting organization (the top folder of the tree).
    #[arg(long, value_name = "ORG")]
    pub submitter: String,
    /// System name (systems/NAME.json, results/NAME/).
    #[arg(long, value_name = "NAME")]
    pub system: String,
    /// closed or open (every log must say the same).
    #[arg(long)]
    pub division: String,
    /// Result logs, or folders holding them (*.txt, *.log).
    #[arg(required = true, value_name = "RESULTS")]
    pub results: Vec<PathBuf>,
    /// Output folder: the tree goes to OUT/ORG, the manifest to OUT/ORG.sha256sums.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also write OUT/ORG.tar.gz and OUT/ORG.tar.gz.sha256.
    #[arg(long)]
    pub tarball: bool,
    /// Replace what mlperf-run wrote in OUT before (other files are never touched).
    #[arg(long)]
    pub force: bool,
    /// Add this system to the tree already in OUT (closed and open systems can share one tree).
    #[arg(long)]
    pub add: bool,
    /// A system TOML (configs/systems/NAME.toml) whose keys override the description the run
    /// sets recorded beside their logs (sysinfo.json), or else the fields detected here.
    #[arg(long, value_name = "FILE")]
    pub system_config: Option<PathBuf>,
    /// Implementation folder name under `benchmarks/<benchmark>/implementations/`.
    #[arg(long, default_value = "mlperf-run")]
    pub implementation: String,
    /// mlperf-run's source checkout to snapshot (default: the one this binary was built from).
    #[arg(long, value_name = "DIR")]
    pub source: Option<PathBuf>,
    /// Training ruleset for the compliance, RCP and package checks (default: the benchmark's
    /// own, resnet 4.0.0, bert 5.0.0; 4.0.0 for a tree holding both).
    #[arg(long)]
    pub ruleset: Option<String>,
}

pub fn run_package(args: PackageArgs) -> Result<ExitStatus> {
    crate::rules::check_ruleset_flag(args.ruleset.as_deref())?;
    let args_ruleset = args.ruleset.clone();
    let opts = package::PackageOptions {
        submitter: args.submitter,
        system: args.system,
        division: args.division,
        results: args.results,
        out: args.out,
        tarball: args.tarball,
        force: args.force,
        add: args.add,
        implementation: args.implementation,
        source: args.source.unwrap_or_else(snapshot::default_source),
        ruleset: args.ruleset,
        describe: sysinfo::DescribeOptions {
            system_config: args.system_config,
            ..Default::default()
        },
    };
    // Ctrl-C stops it at a safe point, before anything in OUT changes (exit 130)
    crate::util::interrupt::install_with_notice(None);
    // package() prints the score table itself, before it writes anything.
    let report = package::package(&opts)?;
    if crate::util::interrupt::requested() {
        eprintln!(
            "interrupt: it came while the package was put in place, which was finished: {} \
             holds the whole new package",
            opts.out.display()
        );
    }
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let mut out = crate::util::output::stdout();
    writeln!(out, "source snapshot: {}", report.origin.describe())?;
    writeln!(out, "tree:     {}", report.org_dir.display())?;
    writeln!(out, "manifest: {}", report.manifest.display())?;
    if let Some((path, hex)) = &report.tarball {
        writeln!(out, "tarball:  {} (SHA-256 {hex})", path.display())?;
    }
    if let Some(r) = &args_ruleset {
        // verify checks at the benchmark's own ruleset unless told: say how to check this one
        writeln!(
            out,
            "verify:   mlperf-run verify {} --ruleset {r}",
            report.org_dir.display()
        )?;
    }
    Ok(ExitStatus::Success)
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// OUT/ORG.tar.gz, OUT or OUT/ORG as written by `mlperf-run package`.
    #[arg(value_name = "TARBALL|DIR")]
    pub path: PathBuf,
    /// Training ruleset for the compliance and package checks: the one `package --ruleset`
    /// was given (default: the benchmark's own, resnet 4.0.0, bert 5.0.0; 4.0.0 for a tree
    /// holding both).
    #[arg(long)]
    pub ruleset: Option<String>,
}

pub fn run_verify(args: VerifyArgs) -> Result<ExitStatus> {
    crate::rules::check_ruleset_flag(args.ruleset.as_deref())?;
    let report = verify::verify_at(&args.path, args.ruleset.as_deref())?;
    // the verdict comes after the list: a closed stdout must not hide a failed verification
    let checked: String = report
        .checked
        .iter()
        .map(|c| format!("checked {c}\n"))
        .collect();
    crate::util::output::print_beside_work(&checked)?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if report.ok() {
        crate::util::output::print(&format!("verified: {}\n", args.path.display()))?;
        Ok(ExitStatus::Success)
    } else {
        for p in &report.problems {
            eprintln!("FAILED: {p}");
        }
        eprintln!(
            "verify failed: {} problems in {}",
            report.problems.len(),
            args.path.display()
        );
        Ok(crate::util::ExitStatus::Negative)
    }
}
