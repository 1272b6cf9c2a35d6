//! `sysinfo`: detection from a fake host tree, TOML overrides, typing, and the official system
//! description checker on the JSON we generate.

use crate::common;

use mlperf_run::submission::detect::HostRoot;
use mlperf_run::submission::sysinfo::{describe, DescribeOptions};
use std::path::Path;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn fake_host(root: &Path) {
    let mut cpuinfo = String::new();
    for socket in 0..2 {
        for core in 0..4 {
            cpuinfo.push_str(&format!(
                "processor\t: {}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\ncpu MHz\t\t: 2000.000\nphysical id\t: {socket}\ncore id\t\t: {core}\ncpu cores\t: 4\n\n",
                socket * 4 + core
            ));
        }
    }
    write(root, "proc/cpuinfo", &cpuinfo);
    write(
        root,
        "proc/meminfo",
        "MemTotal:       2113323008 kB\nMemFree: 1 kB\n",
    );
    write(root, "proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
    write(
        root,
        "etc/os-release",
        "NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.3 LTS\"\n",
    );
    write(
        root,
        "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
        "3800000\n",
    );
    for (idx, level, kind, size) in [
        (0, 1, "Data", "48K"),
        (1, 1, "Instruction", "32K"),
        (2, 2, "Unified", "2048K"),
        (3, 3, "Unified", "107520K"),
    ] {
        let d = format!("sys/devices/system/cpu/cpu0/cache/index{idx}");
        write(root, &format!("{d}/level"), &format!("{level}\n"));
        write(root, &format!("{d}/type"), &format!("{kind}\n"));
        write(root, &format!("{d}/size"), &format!("{size}\n"));
    }
    for (dev, sectors, rot) in [
        ("nvme0n1", 3750748848u64, "0"),
        ("nvme1n1", 3750748848, "0"),
        ("sda", 3907029168, "1"),
        ("loop0", 100, "0"),
    ] {
        write(
            root,
            &format!("sys/block/{dev}/size"),
            &format!("{sectors}\n"),
        );
        write(
            root,
            &format!("sys/block/{dev}/queue/rotational"),
            &format!("{rot}\n"),
        );
    }
}

#[test]
fn detects_a_fake_host_and_toml_wins() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    fake_host(&root);
    let toml = dir.path().join("sys.toml");
    std::fs::write(
        &toml,
        "submitter = \"Org\"\ndivision = \"closed\"\nsystem_name = \"xeon_8xh100\"\nstatus = \"preview\"\n\
         host_processors_per_node = 2\naccelerators_per_node = 8\naccelerator_model_name = \"NVIDIA H100 80GB HBM3\"\n\
         operating_system = \"Ubuntu 22.04 (custom)\"\n",
    )
    .unwrap();
    let opts = DescribeOptions {
        root: HostRoot(root.clone()),
        system_config: Some(toml),
        use_nvml: false,
    };
    let d = describe(&opts).unwrap();
    let s = &d.desc;
    assert_eq!(
        s.get("host_processor_model_name"),
        "Intel(R) Xeon(R) Platinum 8480+"
    );
    assert_eq!(s.get("host_processors_per_node"), "2");
    assert_eq!(s.get("host_processor_core_count"), "4");
    assert_eq!(s.get("host_processor_vcpu_count"), "8");
    assert_eq!(s.get("host_processor_frequency"), "3.80 GHz");
    assert_eq!(
        s.get("host_processor_caches"),
        "L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 105 MiB"
    );
    assert_eq!(s.get("host_memory_capacity"), "2.16 TB");
    assert_eq!(s.get("host_storage_type"), "HDD, NVMe SSD");
    assert_eq!(
        s.get("host_storage_capacity"),
        "2x 1.92 TB NVMe SSD + 1x 2 TB HDD"
    );
    assert_eq!(
        s.get("operating_system"),
        "Ubuntu 22.04 (custom)",
        "the TOML wins over detection"
    );
    assert_eq!(s.get("status"), "Preview");
    assert_eq!(s.get("number_of_nodes"), "1");
    assert!(s.get("framework").starts_with("mlperf-run "));
    assert_eq!(
        s.value("other_software_stack").unwrap()["kernel_version"],
        "5.15.0-91-generic"
    );
    assert!(s.problems().is_empty(), "{:?}", s.problems());
    // Without NVML the GPU fields the TOML did not set are named in a warning.
    let w = d.warnings.join("\n");
    assert!(
        w.contains("accelerator_memory_capacity") && !w.contains("set accelerators_per_node"),
        "{w}"
    );

    let json_path = dir.path().join("xeon_8xh100.json");
    std::fs::write(&json_path, s.to_json_string()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&s.to_json_string()).unwrap();
    let obj = json.as_object().unwrap();
    assert_eq!(obj.len(), 33);
    for f in [
        "submitter",
        "system_name",
        "host_processor_model_name",
        "host_processor_core_count",
        "accelerator_model_name",
        "accelerators_per_node",
        "framework",
    ] {
        assert!(obj[f].is_string(), "{f} must be a JSON string");
    }
    if common::oracle("detects_a_fake_host_and_toml_wins").is_some() {
        let (ok, log) = common::package::official_system_check(&json_path, "4.0.0").unwrap();
        assert!(ok, "{log}");
    }
}

#[test]
fn cli_prints_json_and_refuses_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("s.toml");
    std::fs::write(&toml, "status = \"cloud\"\nsubmitter = \"Org\"\n").unwrap();
    let exe = env!("CARGO_BIN_EXE_mlperf-run");
    let out = std::process::Command::new(exe)
        .args(["sysinfo", "--json", "--system-config"])
        .arg(&toml)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "Available cloud");
    assert_eq!(json["submitter"], "Org");
    assert_eq!(json.as_object().unwrap().len(), 33);

    std::fs::write(&toml, "status = \"cloud\"\nnum_gpus = 8\n").unwrap();
    let out = std::process::Command::new(exe)
        .args(["sysinfo", "--system-config"])
        .arg(&toml)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("unknown system description key 'num_gpus'") && err.contains("s.toml"),
        "{err}"
    );
    // a missing file or a folder is named once, with the flag ("cannot read system config X:
    // X does not exist" named it twice)
    for (path, words) in [
        (dir.path().join("missing.toml"), "does not exist"),
        (
            dir.path().to_path_buf(),
            "is a folder: give a system config (TOML)",
        ),
    ] {
        let out = std::process::Command::new(exe)
            .args(["sysinfo", "--system-config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "error: --system-config: {} {words}",
                path.display()
            )) && err.matches(&path.display().to_string()).count() == 1,
            "{err}"
        );
    }
}

/// `sysinfo --system-config` with a mistyped key says which key was meant, a run config's
/// [system] table is told apart, and a count that is no whole number (the result summarizer
/// reads it with int()) is refused naming the file and the key instead of printed as given.
#[test]
fn cli_suggests_keys_and_refuses_counts_that_are_not_whole_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("s.toml");
    let sysinfo = |text: &str| {
        std::fs::write(&toml, text).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .args(["sysinfo", "--system-config"])
            .arg(&toml)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for (text, want) in [
        (
            "submiter = \"Org\"\n",
            "'submiter' (did you mean 'submitter'?)",
        ),
        (
            "[system]\nsubmitter = \"Org\"\n",
            "without a [system] table",
        ),
        (
            "number_of_nodes = \"two\"\n",
            "number_of_nodes = \"two\": must be a whole number",
        ),
        (
            "number_of_nodes = -1\n",
            "number_of_nodes = \"-1\": must be a whole number",
        ),
        (
            "accelerators_per_node = 1.5\n",
            "accelerators_per_node = \"1.5\": must be a whole number",
        ),
    ] {
        let (code, err) = sysinfo(text);
        assert_eq!(code, Some(2), "{text}: {err}");
        assert!(
            err.contains(want) && err.contains("s.toml"),
            "{text}: {err}"
        );
    }
    assert_eq!(
        sysinfo("number_of_nodes = 2\naccelerators_per_node = \"8\"\n").0,
        Some(0)
    );
}
