//! The system description is captured where the runs ran: a tiny open ResNet set trained here
//! by `mlperf-run resnet` writes `sysinfo.json` beside its results, and `package` with no
//! --system-config builds the systems JSON from it (not from the machine packaging), which the
//! official package checker accepts. Without the file, packaging refuses with a message that
//! names the missing field, --system-config and the file to start from.
#![cfg(feature = "torch")]

use crate::common;

use crate::common::package as ps;
use mlperf_run::submission::package::{self, PackageOptions};
use mlperf_run::submission::sysinfo::RECORDED_FILE;
use std::path::{Path, PathBuf};
use std::process::Command;

/// tiny_cpu_open.toml cut down to a few seconds a run: fewer images and epochs, a lower
/// target, no EMA or progressive resizing (they pay off only over longer runs).
fn quick_config(dir: &Path) -> PathBuf {
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu_open.toml"),
    )
    .unwrap();
    let mut t: toml::Table = toml::from_str(&base).unwrap();
    fn table<'a>(t: &'a mut toml::Table, name: &str) -> &'a mut toml::Table {
        t.get_mut(name).and_then(toml::Value::as_table_mut).unwrap()
    }
    let train = table(&mut t, "train");
    train.insert("max_epochs".into(), 8.into());
    train.insert("eval_period".into(), 1.into());
    train.insert("target".into(), 0.5.into());
    table(&mut t, "optimizer").insert("schedule_epochs".into(), 8.0.into());
    let methods = table(&mut t, "methods");
    methods.remove("ema");
    methods.remove("progressive_resizing");
    table(table(&mut t, "data"), "synthetic").insert("train_per_class".into(), 64.into());
    let p = dir.join("quick_open.toml");
    std::fs::write(&p, toml::to_string(&t).unwrap()).unwrap();
    p
}

/// The shared test options with no --system-config: the recorded sysinfo.json must serve.
fn options(results: PathBuf, out: &Path) -> PackageOptions {
    let mut o = ps::options(
        "mlperf-run",
        "cpu-node",
        "open",
        vec![results],
        out,
        Path::new(""),
    );
    o.describe.system_config = None;
    o
}

#[test]
fn a_set_trained_here_packages_without_system_config_and_passes_the_official_checker() {
    let test = "a_set_trained_here_packages_without_system_config_and_passes_the_official_checker";
    let dir = tempfile::tempdir().unwrap();
    let config = quick_config(dir.path());
    let results = dir.path().join("results");
    let t0 = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["resnet", "--division", "open", "--config"])
        .arg(&config)
        .arg("--results")
        .arg(&results)
        .args(["--system", "cpu-node", "--seeds", "11,12,13,14,15"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}\nset: {:.1} s", t0.elapsed().as_secs_f64());
    assert!(out.status.success(), "set failed: {err}");
    let set_dir = results.join("cpu-node/resnet");
    let recorded = set_dir.join(RECORDED_FILE);
    assert!(err.contains(&recorded.display().to_string()), "{err}");

    // What the set recorded: this node, its CPU-only runs, the set's identity.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&recorded).unwrap()).unwrap();
    assert_eq!(json.as_object().unwrap().len(), 33);
    assert_eq!(json["accelerators_per_node"], "0");
    assert_eq!(json["accelerator_model_name"], "none (CPU only)");
    assert_eq!(json["number_of_nodes"], "1");
    assert_eq!(json["system_name"], "cpu-node");
    assert_eq!(json["division"], "open");
    assert_eq!(json["status"], "Research, Development, or Internal (RDI)");

    // Packaged elsewhere with no --system-config: the recorded description is used. A field
    // changed in the file shows that it (not this machine) is the source.
    let mut edited = json.clone();
    edited["host_processor_model_name"] = "Recorded CPU 9000".into();
    std::fs::write(&recorded, serde_json::to_string_pretty(&edited).unwrap()).unwrap();
    let pkg = dir.path().join("pkg");
    package::package(&options(set_dir.clone(), &pkg))
        .unwrap_or_else(|e| panic!("package without --system-config: {e:#}"));
    let org = pkg.join("mlperf-run");
    let packaged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(org.join("systems/cpu-node.json")).unwrap())
            .unwrap();
    assert_eq!(packaged["host_processor_model_name"], "Recorded CPU 9000");
    assert_eq!(packaged["accelerators_per_node"], "0");
    assert_eq!(packaged["submitter"], "mlperf-run");
    assert!(
        !org.join("results/cpu-node/resnet")
            .join(RECORDED_FILE)
            .exists(),
        "only result logs go into the tree"
    );
    if common::oracle(test).is_some() {
        let (ok, log) = ps::official_package_check(&org, "4.0.0").expect("package checker ran");
        assert!(ok, "official package checker at 4.0.0:\n{log}");
        let (ok, log) =
            ps::official_system_check(&org.join("systems/cpu-node.json"), "4.0.0").unwrap();
        assert!(ok, "system_desc_checker:\n{log}");
    }

    // Without the recorded file and without --system-config (and no NVML): a refusal that
    // names the field, --system-config and the file to start from.
    std::fs::remove_file(&recorded).unwrap();
    let err = format!(
        "{:#}",
        package::package(&options(set_dir, &dir.path().join("pkg2"))).unwrap_err()
    );
    assert!(
        err.contains("accelerators_per_node is missing")
            && err.contains("--system-config")
            && err.contains("configs/systems/"),
        "{err}"
    );
}
