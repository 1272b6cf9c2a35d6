//! Fuzz harnesses for `score`, `package` and `verify` on trees and tarballs made from the
//! input. Shared by the fuzz targets (fuzz/fuzz_targets/) and the replay of their findings in
//! `cargo test` (tests/logs_rules/fuzz_regressions.rs). Each returns what the commands
//! answered, one line per call.
#![allow(dead_code)]

use flate2::write::GzEncoder;
use mlperf_run::score::{self, Format, ScoreOptions};
use mlperf_run::submission::detect::HostRoot;
use mlperf_run::submission::manifest;
use mlperf_run::submission::package::{package, PackageOptions};
use mlperf_run::submission::sysinfo::DescribeOptions;
use mlperf_run::submission::verify::{verify, VerifyReport};
use std::io::Write;

const SYSTEM_TOML: &str = include_str!("../../configs/systems/cpu_only.toml");

fn verified(what: &str, r: anyhow::Result<VerifyReport>) -> String {
    match r {
        Ok(report) => format!(
            "verify {what}: {} problems{}",
            report.problems.len(),
            report
                .problems
                .first()
                .map(|p| format!(", first: {p}"))
                .unwrap_or_default()
        ),
        Err(e) => format!("verify {what}: error: {e:#}"),
    }
}

/// `score` and `package` on a result tree: the first byte picks the benchmark (bit 0: BERT),
/// the division (bit 1: open), a round folder in the path (bit 2: `v3.1/`) and two systems
/// (bit 3: odd logs under a second one); the rest is split at the byte 0x1E into up to 10
/// logs, `results/<system>/<benchmark>/result_<i>.txt`. A tree that packages is verified.
pub fn score_package(data: &[u8]) -> Vec<String> {
    let Some((&choice, rest)) = data.split_first() else {
        return vec!["empty input".into()];
    };
    let benchmark = if choice & 1 == 0 { "resnet" } else { "bert" };
    let division = if choice & 2 == 0 { "closed" } else { "open" };
    let tmp = tempfile::tempdir().expect("temp dir");
    let base = if choice & 4 == 0 {
        tmp.path().to_path_buf()
    } else {
        tmp.path().join("v3.1")
    };
    let results = base.join("results");
    for (i, part) in rest.split(|&b| b == 0x1E).take(10).enumerate() {
        let system = if choice & 8 != 0 && i % 2 == 1 {
            "sys_b"
        } else {
            "sys_a"
        };
        let dir = results.join(system).join(benchmark);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(format!("result_{i}.txt")), part).expect("write log");
    }
    let mut out = Vec::new();
    let hide = |s: String| s.replace(&tmp.path().display().to_string(), "TMP");
    match score::score_path(&results, &ScoreOptions::default()) {
        Ok(sets) => {
            for format in [Format::Table, Format::Json, Format::Csv, Format::Markdown] {
                let _ = score::render(&sets, format);
            }
            out.push(format!("score: {} sets", sets.len()));
        }
        Err(e) => out.push(hide(format!("score: error: {e:#}"))),
    }
    let source = tmp.path().join("source");
    std::fs::create_dir_all(&source).expect("mkdir");
    std::fs::write(source.join("Cargo.toml"), "[package]\nname = \"x\"\n").expect("write");
    let system_config = tmp.path().join("system.toml");
    std::fs::write(&system_config, SYSTEM_TOML).expect("write");
    let out_dir = tmp.path().join("out");
    let opts = PackageOptions {
        submitter: "mlperf-run".into(),
        system: "sys_a".into(),
        division: division.into(),
        results: vec![results.join("sys_a")],
        out: out_dir.clone(),
        tarball: true,
        force: false,
        add: false,
        implementation: "mlperf-run".into(),
        source,
        ruleset: None,
        describe: DescribeOptions {
            root: HostRoot(tmp.path().join("no-host")),
            system_config: Some(system_config),
            use_nvml: false,
        },
    };
    match package(&opts) {
        Ok(report) => {
            out.push("package: ok".into());
            // what package wrote must verify
            if let Some((tarball, _)) = &report.tarball {
                out.push(hide(verified("tarball", verify(tarball))));
            }
            out.push(hide(verified("folder", verify(&out_dir))));
        }
        Err(e) => out.push(hide(format!("package: error: {e:#}"))),
    }
    out
}

/// `verify`'s tarball and manifest reader: the input is split at the first byte 0x1E into
/// the manifest text (`Org.sha256sums`) and the tarball. First byte: bit 0 off, the tarball
/// part is a plain tar gzipped here, on, it is written as given; bit 1: a `.tar.gz.sha256`
/// file beside it; bit 2: also unpack the tarball and verify the folder.
pub fn verify_tarball(data: &[u8]) -> Vec<String> {
    let Some((&choice, rest)) = data.split_first() else {
        return vec!["empty input".into()];
    };
    let (manifest_text, tar) = match rest.iter().position(|&b| b == 0x1E) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let hide = |s: String| s.replace(&dir.display().to_string(), "TMP");
    std::fs::write(dir.join("Org.sha256sums"), manifest_text).expect("write manifest");
    let tarball = dir.join("Org.tar.gz");
    let bytes = if choice & 1 == 0 {
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(tar).expect("gzip");
        gz.finish().expect("gzip")
    } else {
        tar.to_vec()
    };
    std::fs::write(&tarball, &bytes).expect("write tarball");
    if choice & 2 != 0 {
        let sha = manifest::sha256_hex(&bytes);
        std::fs::write(
            dir.join("Org.tar.gz.sha256"),
            format!("{sha}  Org.tar.gz\n"),
        )
        .expect("write sha");
    }
    let mut out = vec![hide(verified("tarball", verify(&tarball)))];
    if choice & 4 != 0 {
        let folder = dir.join("out");
        std::fs::create_dir_all(&folder).expect("mkdir");
        std::fs::write(folder.join("Org.sha256sums"), manifest_text).expect("write manifest");
        match manifest::unpack_tarball(&tarball, &folder) {
            Ok(_) => {
                out.push(hide(verified("folder", verify(&folder))));
                out.push(hide(verified("org folder", verify(&folder.join("Org")))));
            }
            Err(e) => out.push(hide(format!("unpack: error: {e:#}"))),
        }
    }
    out
}
