//! scripts/slurm/run.sub in dry-run mode: per-run cache clear, fresh distinct seeds, the srun
//! line for 8 tasks per node, and refusal of a seed list of the wrong length.
use std::process::Command;

fn dry_run(extra: &[(&str, &str)]) -> std::process::Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/slurm/run.sub");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("DRY_RUN", "1")
        .env("SLURM_JOB_ID", "4242")
        .env("SLURM_JOB_NODELIST", "dgx[03-04]")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("RESULTS", "/tmp/res")
        .env_remove("MASTER_ADDR")
        .env_remove("MASTER_PORT")
        .env_remove("SEEDS");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output().expect("bash runs")
}

#[test]
fn five_resnet_runs_each_with_cache_clear_and_a_fresh_seed() {
    let out = dry_run(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let clears = stdout
        .lines()
        .filter(|l| l.contains("vm.drop_caches=3"))
        .count();
    assert_eq!(clears, 5, "{stdout}");
    let seeds: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("run ").and_then(|r| r.split("seed ").nth(1)))
        .collect();
    assert_eq!(seeds.len(), 5, "{stdout}");
    let mut distinct = seeds.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "seeds repeat: {seeds:?}");
    let last = stdout
        .lines()
        .rfind(|l| l.contains("--ntasks-per-node=8"))
        .unwrap();
    assert!(
        last.contains("mlperf-run resnet --runs 5 --resume"),
        "{last}"
    );
    assert!(
        last.contains("--system 2x8") && last.contains("--kill-on-bad-exit=1"),
        "{last}"
    );
    assert!(
        stdout.contains(":24242"),
        "master port from the job id: {stdout}"
    );
}

#[test]
fn given_seeds_are_used_in_order_and_must_match_nexp() {
    let out = dry_run(&[("BENCHMARK", "bert"), ("NEXP", "2"), ("SEEDS", "7 9")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("mlperf-run bert --runs 2 --resume --seeds 7\\,9"),
        "{stdout}"
    );
    let out = dry_run(&[("NEXP", "3"), ("SEEDS", "7 9")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SEEDS has 2 seeds but NEXP=3"));
}

#[test]
fn refuses_to_run_outside_slurm() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/slurm/run.sub");
    let out = Command::new("bash")
        .arg(script)
        .env("DRY_RUN", "1")
        .env_remove("SLURM_JOB_ID")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SLURM_JOB_ID is not set"));
}

/// A run that every task ends with 130 (cut: a node died, was cut off, or scancel) stops the
/// job there, saying how to resume; a run that failed otherwise (1) lets the job go on. A fake
/// `srun` on PATH plays the tasks: run 1 fails, run 2 is cut, run 3 must never start.
#[test]
fn a_cut_run_stops_the_job_and_a_failed_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.txt");
    let srun = dir.path().join("srun");
    std::fs::write(
        &srun,
        format!(
            "#!/bin/bash\necho \"$*\" >> {calls}\ncase \"$*\" in\n  *drop_caches*) exit 0 ;;\n  \
             *'--runs 1 '*) exit 1 ;;\n  *'--runs 2 '*) exit 130 ;;\n  *) exit 0 ;;\nesac\n",
            calls = calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = dry_run(&[("DRY_RUN", "0"), ("PATH", &path), ("NEXP", "3")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("run 1 failed (status 1); going on"),
        "{stderr}"
    );
    assert!(
        stderr.contains("run 2 was cut (status 130)") && stderr.contains("submit this job again"),
        "{stderr}"
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert!(calls.contains("--runs 2 "), "{calls}");
    assert!(
        !calls.contains("--runs 3 "),
        "run 3 started after the cut: {calls}"
    );
}
