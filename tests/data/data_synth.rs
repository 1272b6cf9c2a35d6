//! `data synth-imagenet`: real decodable JPEGs in the asked counts, atomic and refusing to
//! clobber, deterministic per seed, and learnable but not trivially (colour histograms alone
//! beat chance by far but do not solve it).

use mlperf_run::data::imagenet::{decode_jpeg, ImagenetDir};
use mlperf_run::data::synth_imagenet::{write_synth_imagenet, SynthSpec};
use std::path::Path;
use std::process::Command;

fn spec(classes: usize, per_class: usize, val_per_class: usize, seed: u64) -> SynthSpec {
    SynthSpec {
        classes,
        per_class,
        val_per_class,
        seed,
        min_size: 48,
        max_size: 80,
        quality: 90,
        sizes: Default::default(),
    }
}

#[test]
fn writes_decodable_jpegs_in_the_asked_counts_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("inet");
    let summary = write_synth_imagenet(&out, &spec(3, 4, 2, 1), false).unwrap();
    assert_eq!((summary.train_images, summary.val_images), (12, 6));
    let set = ImagenetDir::open(&out).unwrap();
    assert_eq!(set.num_classes(), 3);
    assert_eq!(set.train.len(), 12);
    assert_eq!(set.val.len(), 6);
    for label in 0..3 {
        assert_eq!(
            set.train
                .samples
                .iter()
                .filter(|s| s.label == label)
                .count(),
            4
        );
        assert_eq!(
            set.val.samples.iter().filter(|s| s.label == label).count(),
            2
        );
    }
    let mut widths = std::collections::BTreeSet::new();
    for s in set.train.samples.iter().chain(&set.val.samples) {
        let image = decode_jpeg(&std::fs::read(&s.path).unwrap()).unwrap();
        assert!(
            (48..=80).contains(&image.width) && (48..=80).contains(&image.height),
            "{}",
            s.path.display()
        );
        widths.insert(image.width);
    }
    assert!(widths.len() > 3, "sizes should vary: {widths:?}");
    // Nothing but the set and its manifest; no temporary directory left next to it.
    let siblings: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(siblings, vec![std::ffi::OsString::from("inet")]);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("synth-imagenet.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["spec"]["per_class"], 4);
}

fn files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for split in ["train", "val"] {
        let folder = mlperf_run::data::imagenet::ImageFolder::open(&root.join(split)).unwrap();
        for s in folder.samples {
            all.push((
                s.path.strip_prefix(root).unwrap().display().to_string(),
                std::fs::read(&s.path).unwrap(),
            ));
        }
    }
    all
}

#[test]
fn same_seed_gives_identical_files_and_another_seed_does_not() {
    let dir = tempfile::tempdir().unwrap();
    write_synth_imagenet(&dir.path().join("a"), &spec(2, 3, 1, 5), false).unwrap();
    write_synth_imagenet(&dir.path().join("b"), &spec(2, 3, 1, 5), false).unwrap();
    write_synth_imagenet(&dir.path().join("c"), &spec(2, 3, 1, 6), false).unwrap();
    let (a, b, c) = (
        files(&dir.path().join("a")),
        files(&dir.path().join("b")),
        files(&dir.path().join("c")),
    );
    assert_eq!(a, b);
    assert_eq!(a.len(), c.len());
    assert!(a.iter().zip(&c).all(|(x, y)| x.0 == y.0 && x.1 != y.1));
}

#[test]
fn cli_refuses_a_non_empty_out_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("set");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "precious").unwrap();
    let run = |force: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
        cmd.args(["data", "synth-imagenet", "--out"]).arg(&out);
        cmd.args([
            "--classes",
            "2",
            "--per-class",
            "2",
            "--min-size",
            "32",
            "--max-size",
            "40",
        ]);
        if force {
            cmd.arg("--force");
        }
        cmd.output().unwrap()
    };
    let refused = run(false);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("not empty") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(out.join("keep.txt").exists());

    let forced = run(true);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert!(!out.join("keep.txt").exists());
    let set = ImagenetDir::open(&out).unwrap();
    assert_eq!((set.train.len(), set.val.len()), (4, 2)); // val-per-class defaults to max(1, 2/5)

    let bad = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["data", "synth-imagenet", "--out"])
        .arg(dir.path().join("other"))
        .args(["--min-size", "90", "--max-size", "50"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--min-size 90 --max-size 50"));
}

/// A colour histogram: 12 hue bins over the saturated, not-dark pixels (saturation > 0.5,
/// value > 0.3) plus one bin counting all other pixels, normalised to sum 1.
fn colour_histogram(path: &Path) -> Vec<f64> {
    let image = decode_jpeg(&std::fs::read(path).unwrap()).unwrap();
    let mut hist = vec![0.0; 13];
    for px in image.pixels.chunks_exact(3) {
        let [r, g, b] = [px[0], px[1], px[2]].map(|c| c as f64 / 255.0);
        let (max, min) = (r.max(g).max(b), r.min(g).min(b));
        let delta = max - min;
        if max <= 0.3 || delta / max <= 0.5 {
            hist[12] += 1.0;
            continue;
        }
        let hue = if max == r {
            ((g - b) / delta).rem_euclid(6.0)
        } else if max == g {
            (b - r) / delta + 2.0
        } else {
            (r - g) / delta + 4.0
        } / 6.0;
        hist[((hue * 12.0) as usize).min(11)] += 1.0;
    }
    let total: f64 = hist.iter().sum();
    hist.iter_mut().for_each(|h| *h /= total);
    hist
}

#[test]
fn colour_histograms_beat_chance_widely_but_do_not_solve_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("set");
    write_synth_imagenet(&out, &spec(10, 20, 10, 0), false).unwrap();
    let set = ImagenetDir::open(&out).unwrap();
    let classes = set.num_classes();
    let mut means = vec![vec![0.0; 13]; classes];
    let mut counts = vec![0.0; classes];
    for s in &set.train.samples {
        let h = colour_histogram(&s.path);
        means[s.label as usize]
            .iter_mut()
            .zip(&h)
            .for_each(|(m, v)| *m += v);
        counts[s.label as usize] += 1.0;
    }
    for (m, n) in means.iter_mut().zip(&counts) {
        m.iter_mut().for_each(|v| *v /= n);
    }
    let mut correct = 0;
    for s in &set.val.samples {
        let h = colour_histogram(&s.path);
        let dist = |m: &Vec<f64>| {
            m.iter()
                .zip(&h)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
        };
        let best = (0..classes)
            .min_by(|&a, &b| dist(&means[a]).total_cmp(&dist(&means[b])))
            .unwrap();
        correct += (best as i64 == s.label) as usize;
    }
    let accuracy = correct as f64 / set.val.len() as f64;
    eprintln!("nearest-class-mean on colour histograms: val top-1 {accuracy:.3} (chance 0.100)");
    // Each class has its own hue, but hue jitter brings neighbouring classes' hues together,
    // so colour alone confuses neighbours; their textures (which a histogram cannot see) differ.
    assert!(accuracy >= 0.35, "colour signal too weak: {accuracy}");
    assert!(
        accuracy <= 0.9,
        "colour alone nearly solves the task: {accuracy}"
    );
}

/// `--sizes imagenet` at quality 90 (scripts/bench_gpu.sh part b's set) is shaped like ImageNet
/// train: about 400x350 on average, mostly landscape, about 110 KB a file; `--sizes uniform`
/// (the default) is not.
#[test]
fn imagenet_sizes_average_about_400_by_350_and_110_kb() {
    use mlperf_run::data::synth_imagenet::SizeDist;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("like");
    let spec = SynthSpec {
        min_size: 120,
        max_size: 800,
        sizes: SizeDist::Imagenet,
        ..spec(2, 60, 1, 5)
    };
    let summary = write_synth_imagenet(&out, &spec, false).unwrap();
    let set = ImagenetDir::open(&out).unwrap();
    let (mut w, mut h, mut landscape) = (0.0, 0.0, 0);
    for s in &set.train.samples {
        let img = decode_jpeg(&std::fs::read(&s.path).unwrap()).unwrap();
        w += img.width as f64;
        h += img.height as f64;
        landscape += usize::from(img.width > img.height);
    }
    let n = set.train.len() as f64;
    let kb = summary.bytes as f64 / (n + 2.0) / 1000.0;
    eprintln!(
        "--sizes imagenet: mean {:.0}x{:.0}, {kb:.0} KB a file, {landscape} of {n} landscape",
        w / n,
        h / n
    );
    assert!((360.0..440.0).contains(&(w / n)), "mean width {}", w / n);
    assert!((310.0..390.0).contains(&(h / n)), "mean height {}", h / n);
    assert!(landscape as f64 > n / 2.0, "{landscape} of {n} landscape");
    assert!((80.0..150.0).contains(&kb), "{kb:.0} KB a file");
    // the default draw is unchanged: each side uniform in min..max
    let uniform = SynthSpec {
        sizes: SizeDist::Uniform,
        ..spec
    };
    let a = mlperf_run::data::synth_imagenet::render_image(
        &uniform,
        mlperf_run::data::synth_imagenet::Split::Train,
        0,
        0,
    );
    assert!((120..=800).contains(&a.width) && (120..=800).contains(&a.height));
}

/// Counts the data set cannot have are refused before anything is made, naming the flag: a
/// per-class count beyond the file names' 6 digits (once an allocation that aborted the
/// process), no val images (the trainer evaluates on every class of val/), too many images.
#[test]
fn cli_refuses_counts_it_cannot_write_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("set");
    let run = |flags: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
            .args(["data", "synth-imagenet", "--out"])
            .arg(&out)
            .args(flags)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for (flags, want) in [
        (
            &["--classes", "1", "--per-class", "4000000000"][..],
            "--per-class 4000000000 must be within 1..=1000000",
        ),
        (
            &["--classes", "2", "--per-class", "2", "--val-per-class", "0"][..],
            "--val-per-class 0 must be within 1..=1000000",
        ),
        (
            &["--classes", "100000", "--per-class", "1000"][..],
            "images, more than 20000000",
        ),
    ] {
        let (code, err) = run(flags);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
        assert!(!err.contains("panicked") && !out.exists(), "{err}");
    }
}

/// `data synth-imagenet` had no Ctrl-C handler: SIGINT ended it at once (status 130 in the
/// shell, not a word), its unfinished set left beside --out. Ctrl-C now stops it at a safe
/// point before --out changes: the unfinished set is removed, one line says what was stopped,
/// that nothing already written was lost and how to rerun, the status is 130, and the set
/// already in --out (a `--force` over it was stopped) is as it was.
#[test]
fn ctrl_c_stops_synth_imagenet_and_keeps_the_set_already_there() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let synth = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlperf-run"));
        cmd.args(["data", "synth-imagenet", "--out"])
            .arg(&out)
            .args(["--min-size", "32", "--max-size", "40"])
            .args(extra)
            .env("RUST_LOG", "error");
        cmd
    };
    let first = synth(&["--classes", "2", "--per-class", "2"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    let before = files(&out);
    // 100,000 images: minutes of work, stopped after a moment
    let child = synth(&["--classes", "100", "--per-class", "1000", "--force"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let staging = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".out.tmp-")
            })
    };
    // once it writes images (its class folders are there), Ctrl-C
    let ended = crate::common::interrupt::ctrl_c_once(child, "synth-imagenet", || {
        staging().is_some_and(|s| s.join("val/n00000099").is_dir())
    });
    crate::common::interrupt::assert_stopped_in_one_line(&ended, "data synth-imagenet stopped");
    assert_eq!(staging(), None, "the unfinished set is still beside --out");
    assert!(files(&out) == before, "the set in --out changed");
}
