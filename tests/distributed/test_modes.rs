//! The multi-process test modes (src/distributed/test_mode.rs) and the checks that scripts/bench_gpu.sh
//! part m runs on a GPU (scripts/bench/multiprocess_check.py), here over Gloo on the CPU: a world
//! of one forms a group only when MLPERF_RUN_TEST_GROUP_OF_ONE=1 says so and then trains bit for
//! bit as a lone process; a malformed value is refused, naming the variable; the checker's every
//! check passes on the CPU (so the one GPU call that runs it meets no script error).
#![cfg(feature = "torch")]

use crate::common::dist::{
    launch_command, load, max_rel_diff, open_run_args, text, tiny_config, BIN,
};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHECKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/bench/multiprocess_check.py"
);

fn resnet_args(cfg: &Path, dir: &Path, name: &str) -> Vec<String> {
    let (log, dump) = (
        dir.join(format!("{name}.txt")),
        dir.join(format!("{name}.safetensors")),
    );
    open_run_args("resnet", cfg, 99, &log, &dump)
}

#[test]
fn a_world_of_one_forms_a_group_only_in_the_test_mode_and_trains_as_a_lone_process() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let launched = |name: &str, env: &[(&str, &str)]| {
        let out = launch_command(1)
            .args(resnet_args(&cfg, dir.path(), name))
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        let t = text(&out);
        assert!(
            t.contains("run aborted: epoch limit reached"),
            "{name}: {t}"
        );
        t
    };
    let group = launched("group", &[("MLPERF_RUN_TEST_GROUP_OF_ONE", "1")]);
    assert!(group.contains("joined the gloo process group"), "{group}");
    assert!(
        group.contains("test mode: MLPERF_RUN_TEST_GROUP_OF_ONE=1"),
        "{group}"
    );
    // the control: without the variable a world of one forms no group
    let plain = launched("plain", &[]);
    assert!(!plain.contains("joined the gloo process group"), "{plain}");
    let (a, b) = (
        load(&dir.path().join("group.safetensors")),
        load(&dir.path().join("plain.safetensors")),
    );
    assert!(!a.is_empty());
    assert_eq!(
        max_rel_diff(&a, &b),
        0.0,
        "a group of one trains differently"
    );
}

#[test]
fn a_malformed_test_mode_value_is_refused_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let out = Command::new(BIN)
        .args(resnet_args(&cfg, dir.path(), "bad"))
        .env("MLPERF_RUN_TEST_SHARE_GPU", "yes")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("MLPERF_RUN_TEST_SHARE_GPU must be 0 or 1 (got \"yes\")"),
        "{t}"
    );
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn the_gpu_bench_multiprocess_checks_pass_over_gloo_on_the_cpu() {
    let Some(python) = mlperf_run::official::python() else {
        eprintln!("SKIP: no Python with torch (scripts/setup.sh makes its venv)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("results.jsonl");
    let out = Command::new(python)
        .arg(CHECKER)
        .args(["--bin", BIN, "--configs"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs"))
        .args(["--device", "cpu", "--work"])
        .arg(dir.path().join("work"))
        .arg("--append")
        .arg(&records)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = recs.iter().map(|r| r["side"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "dp-equals-accumulating",
            "overlap-equals-blocking",
            "rank-failure-abort",
            "graph-group-of-one",
            "clean-shutdown"
        ],
        "{t}"
    );
    for r in &recs {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["part"], "m");
    }
    let note = |name: &str| {
        recs.iter().find(|r| r["side"] == name).unwrap()["note"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(note("graph-group-of-one").contains("joined a gloo group of one"));
    assert!(note("graph-group-of-one").contains("1 captures, 7 replays"));
    assert!(note("rank-failure-abort").contains("run_stop (aborted)"));
}
