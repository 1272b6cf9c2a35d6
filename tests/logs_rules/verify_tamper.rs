//! Tamper test: one changed byte in a packaged result file makes `verify` fail and name the
//! file, in the folder and in the tarball.

use crate::common::package as ps;
use mlperf_run::submission::{manifest, package, verify};
use std::io::Read;

#[test]
fn one_changed_byte_fails_verify_and_names_the_file() {
    let (_dir, out, mut opts) = ps::set_to_package("open", "sys_o", "rdi", "out".as_ref());
    opts.tarball = true;
    package::package(&opts).unwrap();
    let tarball = out.join("Org.tar.gz");
    for p in [&out, &out.join("Org"), &tarball] {
        let r = verify::verify(p).unwrap();
        assert!(r.ok(), "{}: {:#?}", p.display(), r.problems);
    }

    // The folder: flip one byte of result_2.txt.
    let rel = "Org/results/sys_o/resnet/result_2.txt";
    let file = out.join(rel);
    let original = std::fs::read(&file).unwrap();
    let mut bytes = original.clone();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let r = verify::verify(&out).unwrap();
    assert!(!r.ok());
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains(rel) && p.contains("changed")),
        "{:#?}",
        r.problems
    );
    std::fs::write(&file, &original).unwrap();
    assert!(verify::verify(&out).unwrap().ok());

    // The tarball: the same byte changed inside it, its own digest file updated to match, so
    // only the manifest can tell.
    let mut entries = Vec::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&tarball).unwrap(),
    ));
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        if path == rel {
            data[i] ^= 0x01;
        }
        entries.push((path, data));
    }
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, data) in &entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        builder.append_data(&mut h, path, &data[..]).unwrap();
    }
    let tampered = builder.into_inner().unwrap().finish().unwrap();
    std::fs::write(&tarball, &tampered).unwrap();
    std::fs::write(
        out.join("Org.tar.gz.sha256"),
        format!("{}  Org.tar.gz\n", manifest::sha256_hex(&tampered)),
    )
    .unwrap();
    let r = verify::verify(&tarball).unwrap();
    assert!(!r.ok());
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains(rel) && p.contains("changed")),
        "{:#?}",
        r.problems
    );

    // Without the digest update the tarball's own SHA-256 fails first, naming the tarball.
    std::fs::write(&tarball, [&tampered[..], b"x"].concat()).unwrap();
    let r = verify::verify(&tarball).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("Org.tar.gz: SHA-256")),
        "{:#?}",
        r.problems
    );
}

#[test]
fn cli_package_then_verify_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let toml = ps::write_system_toml(dir.path(), "cloud");
    ps::write_set(
        &dir.path().join("runs"),
        "open",
        "sys_cli",
        &ps::distinct_seeds(5),
    );
    let out = dir.path().join("out");
    let exe = env!("CARGO_BIN_EXE_mlperf-run");
    let run =
        |args: &[&std::ffi::OsStr]| std::process::Command::new(exe).args(args).output().unwrap();
    let o = run(&[
        "package".as_ref(),
        "--submitter".as_ref(),
        "Org".as_ref(),
        "--system".as_ref(),
        "sys_cli".as_ref(),
        "--division".as_ref(),
        "open".as_ref(),
        "--system-config".as_ref(),
        toml.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--tarball".as_ref(),
        dir.path().join("runs").as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("olympic_min")
            && stdout.contains("packaged from:")
            && stdout.contains("tarball:"),
        "{stdout}"
    );
    let o = run(&["verify".as_ref(), out.join("Org.tar.gz").as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = out.join("Org/systems/sys_cli.json");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("Available cloud", "Available clouD");
    std::fs::write(&file, text).unwrap();
    let o = run(&["verify".as_ref(), out.as_os_str()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Org/systems/sys_cli.json: changed"),
        "{stderr}"
    );
    assert!(stderr.contains("status 'Available clouD'"), "{stderr}");
}

/// A tarball cut short (a copy that stopped half-way) is a failed verification (exit 1) that
/// names the digest mismatch and says what to do, not an error (exit 2) that only says
/// "incomplete deflate stream"; one in a folder whose name is not UTF-8 still has its own
/// digest file checked.
#[test]
fn a_cut_short_tarball_fails_verify_naming_its_digest_and_a_non_utf8_folder_is_verified() {
    use std::os::unix::ffi::OsStrExt;
    let (_dir, out, mut opts) = ps::set_to_package(
        "open",
        "sys_o",
        "rdi",
        std::ffi::OsStr::from_bytes(b"out \xff"),
    );
    opts.tarball = true;
    package::package(&opts).unwrap();
    let tarball = out.join("Org.tar.gz");
    let r = verify::verify(&tarball).unwrap();
    assert!(r.ok(), "{:#?}", r.problems);
    assert!(
        r.warnings.iter().all(|w| !w.contains("not found")),
        "{:#?}",
        r.warnings
    );
    assert!(
        r.checked.iter().any(|c| c.contains("Org.tar.gz.sha256")),
        "{:#?}",
        r.checked
    );

    let bytes = std::fs::read(&tarball).unwrap();
    std::fs::write(&tarball, &bytes[..bytes.len() / 2]).unwrap();
    let exe = env!("CARGO_BIN_EXE_mlperf-run");
    let o = std::process::Command::new(exe)
        .arg("verify")
        .arg(&tarball)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Org.tar.gz: SHA-256"), "{stderr}");
    assert!(stderr.contains("damaged or cut short"), "{stderr}");
    assert!(stderr.contains("copy it again"), "{stderr}");
}

/// `verify` checked a tree at the benchmark's own ruleset even when `package --ruleset` had
/// chosen another; `verify --ruleset` (as the official package checker's) checks it at that one.
#[test]
fn verify_checks_the_tree_at_the_ruleset_it_is_given() {
    let (_dir, out, mut opts) = ps::set_to_package("open", "sys_o", "rdi", "out".as_ref());
    opts.ruleset = Some("3.0.0".into());
    package::package(&opts).unwrap();
    assert!(verify::verify_at(&out, Some("3.0.0")).unwrap().ok());
    // two logs without their run_stop: more than olympic scoring forgives, at either ruleset
    for i in [1, 2] {
        let file = out.join(format!("Org/results/sys_o/resnet/result_{i}.txt"));
        let text = std::fs::read_to_string(&file).unwrap();
        let kept: String = text
            .lines()
            .filter(|l| !l.contains("\"run_stop\""))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_ne!(kept, text);
        std::fs::write(&file, kept).unwrap();
    }
    for (given, at) in [(Some("3.0.0"), "3.0.0"), (None, "4.0.0")] {
        let r = verify::verify_at(&out, given).unwrap();
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains(&format!("at ruleset {at}"))),
            "{given:?}: {:#?}",
            r.problems
        );
    }
}
