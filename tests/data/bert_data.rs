//! BERT data: synth-bert writes reference-layout shards that we read back (and with
//! `--lengths realistic`, about half padding at 512 tokens); the loader shuffles per seed, shards
//! across ranks (strided or token-balanced) and yields every sample exactly once per epoch.
//!
//! Each test writes HDF5 files in this process, so each runs alone in a process of its own
//! (`common::alone`): libhdf5 opens files without close-on-exec and locks them, so a child that
//! another test of the binary starts meanwhile keeps the writer's lock after the writer closes
//! the file, and reading the file back then fails ("unable to lock file, errno = 11").
#![cfg(feature = "torch")]

use crate::common;
use crate::common::alone::run_alone;

use mlperf_run::data::bert::balance_report::measure;
use mlperf_run::data::bert::synth::{synth_bert, Lengths, SynthBertArgs, MASK};
use mlperf_run::data::bert::{shard_files, Assignment, EvalSet, SampleId, Shard, TrainLoader};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use tch::{Device, Kind};

fn synth(out: &Path, seed: u64) {
    let a = SynthBertArgs {
        sentences: 12,
        train_samples: 203,
        eval_samples: 40,
        shards: 3,
        seq_len: 48,
        max_predictions: 10,
        seed,
        ..SynthBertArgs::new(out)
    };
    let s = synth_bert(&a).unwrap();
    assert!(
        s.source.to_string_lossy().contains("LICENSE"),
        "{:?}",
        s.source
    );
    assert!(s.vocab_size > 50);
}

#[test]
fn synth_shards_have_reference_layout_and_masking() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 1);
    let files = shard_files(&dir.path().join("train")).unwrap();
    assert_eq!(files.len(), 3);
    let total: usize = files.iter().map(|f| Shard::count(f).unwrap()).sum();
    assert_eq!(total, 203);
    let vocab = std::fs::read_to_string(dir.path().join("vocab.txt")).unwrap();
    assert!(vocab.starts_with("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"));

    let mut l = TrainLoader::new(&dir.path().join("train"), 5, 0, 1, 16, Device::Cpu).unwrap();
    let b = l.next_batch().unwrap();
    assert_eq!(b.input_ids.size(), vec![16, 48]);
    assert_eq!(b.masked_positions.size(), vec![16, 10]);
    // Every real prediction points at a real token; about 80% of them are [MASK] in the input.
    let w = b.masked_weights.to_kind(Kind::Int64);
    let preds = w.sum(Kind::Int64).int64_value(&[]);
    let at = b.input_ids.gather(1, &b.masked_positions, false);
    let masked = (at.eq(MASK as i64).to_kind(Kind::Int64) * &w)
        .sum(Kind::Int64)
        .int64_value(&[]);
    assert!(preds > 16 * 3, "{preds}");
    assert!(
        masked * 10 >= preds * 6 && masked * 10 <= preds * 95 / 10,
        "{masked}/{preds} masked"
    );
    let mask_at = b.input_mask.gather(1, &b.masked_positions, false);
    assert_eq!((mask_at * &w).sum(Kind::Int64).int64_value(&[]), preds);
    // [CLS] first; segment 1 only inside the mask.
    assert!(b.input_ids.select(1, 0).eq(2).all().int64_value(&[]) == 1);
    let seg_out = (&b.segment_ids * b.input_mask.eq(0).to_kind(Kind::Int64))
        .sum(Kind::Int64)
        .int64_value(&[]);
    assert_eq!(seg_out, 0);

    // The reference's dtypes, checked with h5py when the venv is there.
    if let Some(py) = common::oracle("synth_dtypes") {
        let code = format!(
            "import h5py; f=h5py.File('{}','r'); print(' '.join(f[k].dtype.name for k in ['input_ids','input_mask','segment_ids','masked_lm_positions','masked_lm_ids','next_sentence_labels']))",
            files[0].display()
        );
        let o = Command::new(py).args(["-c", &code]).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "int16 int8 int8 int16 int16 int8",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    let e = EvalSet::load(&dir.path().join("eval"), 40).unwrap();
    let batches = e.batches(16, 0, 1, Device::Cpu).unwrap();
    assert_eq!(
        batches.iter().map(|b| b.size).collect::<Vec<_>>(),
        vec![16, 16, 8]
    );
    assert!(EvalSet::load(&dir.path().join("eval"), 41).is_err());
}

#[test]
fn loader_every_sample_once_per_epoch_across_ranks() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 2);
    let train = dir.path().join("train");
    let world = 3;
    let mut all = Vec::new();
    for rank in 0..world {
        let mut l = TrainLoader::new(&train, 9, rank, world, 4, Device::Cpu).unwrap();
        let mut ids = Vec::new();
        while l.epoch() == 0 {
            ids.extend(l.next_ids(1).unwrap());
        }
        // the last id came from epoch 1
        ids.pop();
        all.extend(ids);
    }
    let set: BTreeSet<_> = all.iter().copied().collect();
    assert_eq!(all.len(), 203, "every sample once");
    assert_eq!(set.len(), 203);
    // Same seed, same order; another seed or epoch, another order.
    let order = |seed| {
        TrainLoader::new(&train, seed, 0, 1, 4, Device::Cpu)
            .unwrap()
            .next_ids(203 * 2)
            .unwrap()
    };
    let a = order(9);
    assert_eq!(a, order(9));
    assert_ne!(a, order(10));
    assert_ne!(a[..203], a[203..]);
    let e0: BTreeSet<_> = a[..203].iter().collect();
    let e1: BTreeSet<_> = a[203..].iter().collect();
    assert_eq!(e0, e1);
}

#[test]
fn bad_shards_are_clear_errors() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("part-0.hdf5");
    std::fs::write(&bad, b"not hdf5").unwrap();
    let err = format!("{:#}", Shard::read(&bad).unwrap_err());
    assert!(err.contains("part-0.hdf5"), "{err}");
    let err = format!(
        "{:#}",
        TrainLoader::new(&dir.path().join("none"), 1, 0, 1, 4, Device::Cpu)
            .err()
            .unwrap()
    );
    assert!(err.contains("synth-bert"), "{err}");
    // A shard without masked_lm_ids names the missing dataset.
    let f = hdf5::File::create(dir.path().join("x.hdf5")).unwrap();
    f.new_dataset::<i16>()
        .shape([2, 4])
        .create("input_ids")
        .unwrap()
        .write_raw(&[1i16; 8][..])
        .unwrap();
    drop(f);
    let err = format!("{:#}", Shard::read(&dir.path().join("x.hdf5")).unwrap_err());
    assert!(err.contains("input_mask"), "{err}");
}

/// A small realistic-length set at sequence length 512 (the corpus: all sentences of the
/// text): its padding fraction. Also the packing tests' data (bert_packing.rs).
pub(crate) fn synth_realistic(out: &Path, train_samples: usize) -> f64 {
    let a = SynthBertArgs {
        sentences: 40,
        train_samples,
        eval_samples: 16,
        seq_len: 512,
        seed: 3,
        lengths: Lengths::Realistic,
        ..SynthBertArgs::new(out)
    };
    synth_bert(&a).unwrap().padding_fraction
}

#[test]
fn realistic_lengths_are_about_half_padding_at_512() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let reported = synth_realistic(dir.path(), 1200);
    // read back from the shards: the input masks hold the lengths
    let (mut tokens, mut n, mut full, mut short) = (0usize, 0usize, 0usize, 0usize);
    for f in shard_files(&dir.path().join("train")).unwrap() {
        let s = Shard::read(&f).unwrap();
        assert_eq!(s.seq, 512);
        for i in 0..s.n {
            let t = s.tokens(i);
            tokens += t;
            full += (t == 512) as usize;
            short += (t < 128) as usize;
        }
        n += s.n;
    }
    assert_eq!(n, 1200);
    let padding = 1.0 - tokens as f64 / (n * 512) as f64;
    assert!((padding - reported).abs() < 1e-9, "{padding} vs {reported}");
    assert!((0.4..=0.6).contains(&padding), "padding {padding}");
    // a mix, as in the reference's phase-2 data: many full sequences and many short ones
    assert!(full * 5 > n, "{full} of {n} full");
    assert!(short * 10 > n, "{short} of {n} below 128 tokens");
    let readme = std::fs::read_to_string(dir.path().join("README.txt")).unwrap();
    assert!(readme.contains("Realistic"), "{readme}");
    // the hand-off marks a batch padded exactly when its mask has a 0 (one-sample batches:
    // the full sequences are batches without padding)
    let mut l = TrainLoader::new(&dir.path().join("train"), 5, 0, 1, 1, Device::Cpu).unwrap();
    let (mut with, mut without) = (0, 0);
    for _ in 0..60 {
        let b = l.next_batch().unwrap();
        let has_zero = b.input_mask.min().int64_value(&[]) == 0;
        assert_eq!(b.padded, has_zero);
        assert_eq!(b.attention_mask().is_some(), has_zero);
        if has_zero {
            with += 1;
        } else {
            without += 1;
        }
    }
    assert!(
        with > 0 && without > 0,
        "{with} padded, {without} full batches"
    );
}

/// Each rank's batches of `steps` steps with token balancing.
fn balanced_batches(
    train: &Path,
    seed: u64,
    world: usize,
    local: usize,
    steps: usize,
) -> Vec<Vec<Vec<SampleId>>> {
    (0..world)
        .map(|rank| {
            let mut l = TrainLoader::new(train, seed, rank, world, local, Device::Cpu)
                .unwrap()
                .with_assignment(Assignment::TokenBalanced);
            (0..steps).map(|_| l.next_batch_ids().unwrap()).collect()
        })
        .collect()
}

#[test]
fn balanced_loader_uses_every_sample_once_per_epoch_and_evens_tokens() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 4);
    let train = dir.path().join("train");
    let (world, local, steps) = (4, 5, 11); // 11 global batches of 20 > 203 samples
    let ranks = balanced_batches(&train, 9, world, local, steps);
    // the global stream itself: one rank taking whole global batches
    let mut global = TrainLoader::new(&train, 9, 0, 1, world * local, Device::Cpu)
        .unwrap()
        .with_assignment(Assignment::TokenBalanced);
    let mut epoch0 = BTreeMap::new();
    for step in 0..steps {
        let group: BTreeSet<SampleId> = global.next_batch_ids().unwrap().into_iter().collect();
        let mut union = BTreeSet::new();
        let mut loads = Vec::new();
        for r in &ranks {
            assert_eq!(r[step].len(), local);
            union.extend(r[step].iter().copied());
            loads.push(r[step].iter().map(|s| s.tokens).sum::<usize>());
        }
        assert_eq!(
            union, group,
            "step {step}: the ranks split the global batch"
        );
        let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
        assert!(
            max - min <= 48,
            "step {step}: {loads:?} differ by more than one sequence"
        );
        for s in union.iter().filter(|s| s.epoch == 0) {
            *epoch0.entry((s.file, s.index)).or_insert(0) += 1;
        }
    }
    assert_eq!(epoch0.len(), 203, "every sample in epoch 0");
    assert!(epoch0.values().all(|&c| c == 1), "each once");
    // deterministic per seed; another seed, another order
    assert_eq!(balanced_batches(&train, 9, world, local, steps), ranks);
    assert_ne!(balanced_batches(&train, 10, world, local, steps), ranks);
    // the same global batches as the strided split draws from, in the same epoch order
    let strided: BTreeSet<(usize, usize)> = (0..world)
        .flat_map(|rank| {
            let mut l = TrainLoader::new(&train, 9, rank, world, local, Device::Cpu).unwrap();
            let mut ids = Vec::new();
            while l.epoch() == 0 {
                ids.extend(l.next_ids(1).unwrap());
            }
            ids.pop();
            ids
        })
        .collect();
    assert_eq!(strided, epoch0.keys().copied().collect());
}

#[test]
fn balancing_evens_realistic_tokens_at_8_ranks() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    synth_realistic(dir.path(), 8 * 24 * 6);
    let r = measure(dir.path(), 8, 24, 1).unwrap();
    assert_eq!(r.steps, 6);
    assert!((0.4..=0.6).contains(&r.padding_fraction), "{r:?}");
    eprintln!("{r:?}");
    assert!(r.strided.epoch_max_over_mean > 1.05, "{r:?}");
    assert!(r.balanced.epoch_max_over_mean <= 1.02, "{r:?}");
    assert!(r.balanced.worst_step_spread <= 512, "{r:?}");
    assert!((r.strided.mean_rank_tokens - r.balanced.mean_rank_tokens).abs() < 1e-6);
}

/// `data synth-bert` on bad input: exit 2 with a message that names the flag or the file, and
/// nothing in --out lost or mixed (a folder of other files, shards of an earlier set with
/// another --shards, which the trainer would read with the new ones).
#[test]
fn synth_bert_cli_refuses_bad_input_naming_flag_or_file() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let synth = |out: &Path, extra: &[&str]| {
        let o = Command::new(common::dist::BIN)
            .args(["data", "synth-bert", "--out"])
            .arg(out)
            .args([
                "--sentences",
                "16",
                "--seq-len",
                "32",
                "--eval-samples",
                "8",
            ])
            .args(if extra.contains(&"--train-samples") {
                &[][..]
            } else {
                &["--train-samples", "64"][..]
            })
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let out = dir.path().join("bert");
    let (code, err) = synth(&out, &["--shards", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--shards must be at least 1"), "{err}");
    let (code, err) = synth(&out, &["--train-samples", "2", "--shards", "4"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--train-samples 2 is fewer than --shards 4"),
        "{err}"
    );
    let (code, err) = synth(&out, &["--vocab-size", "10"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--vocab-size 10 is smaller than"), "{err}");
    let (code, err) = synth(&out, &["--train-samples", "2000000000"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("token slots"), "{err}");
    assert!(!out.exists(), "nothing written for refused flags");

    let binary = dir.path().join("binary.txt");
    std::fs::write(&binary, [b'a', b' ', 0xff, 0xfe, b'\n']).unwrap();
    let (code, err) = synth(&out, &["--source", binary.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("binary.txt is not UTF-8 text"), "{err}");

    // a folder of other files is not written into
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "keep").unwrap();
    let (code, err) = synth(&other, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("holds notes.txt"), "{err}");
    assert!(!other.join("vocab.txt").exists());

    // the same command again replaces its own set; fewer shards would leave stale ones
    assert_eq!(synth(&out, &["--shards", "2"]).0, Some(0));
    assert_eq!(synth(&out, &["--shards", "2"]).0, Some(0));
    let (code, err) = synth(&out, &["--shards", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("part-00000-of-00002.hdf5") && err.contains("would not replace"),
        "{err}"
    );
    assert!(out.join("train/part-00001-of-00002.hdf5").exists());
    assert!(!out.join("train/part-00000-of-00001.hdf5").exists());
}

/// An interrupted `data synth-bert` (killed, or failed part-way) wrote its shards under their
/// final names, HDF5 straight into `part-K-of-N.hdf5`, and left the README.txt of the set it
/// was replacing: a shard cut short, or a set missing shards (which the trainer silently trained
/// on: 2 of 4 shards gave half the train_samples) looked finished, and `demo`, which took
/// vocab.txt (written before the shards) as the mark of a finished set, trained on it. Shards
/// are now written to `.NAME.tmp-HOST-PID` and renamed, README.txt (the mark) is removed first and
/// written last, and a rerun removes the temporary shards a killed run left.
#[test]
fn an_interrupted_synth_bert_leaves_no_finished_mark_and_a_rerun_cleans_up() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bert");
    let synth = || {
        let o = Command::new(common::dist::BIN)
            .args(["data", "synth-bert", "--out"])
            .arg(&out)
            .args([
                "--sentences",
                "16",
                "--seq-len",
                "32",
                "--eval-samples",
                "8",
            ])
            .args(["--train-samples", "64", "--shards", "2"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = synth();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("README.txt").is_file());
    // what a killed run leaves: a temporary shard
    let leftover = out.join("train/.part-00000-of-00002.hdf5.tmp-999999999");
    std::fs::write(&leftover, b"cut short").unwrap();
    // a run that fails after the training shards (eval.hdf5 cannot be replaced)
    std::fs::remove_file(out.join("eval/eval.hdf5")).unwrap();
    std::fs::create_dir(out.join("eval/eval.hdf5")).unwrap();
    let (code, err) = synth();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("eval.hdf5"), "{err}");
    assert!(
        !out.join("README.txt").exists(),
        "an unfinished set keeps the mark of a finished one"
    );
    let names = |sub: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(out.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names("train"),
        ["part-00000-of-00002.hdf5", "part-00001-of-00002.hdf5"],
        "temporary shards left behind"
    );
    assert_eq!(names("eval"), ["eval.hdf5"], "temporary shard left behind");
    std::fs::remove_dir(out.join("eval/eval.hdf5")).unwrap();
    let (code, err) = synth();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("README.txt").is_file());
    assert!(out.join("eval/eval.hdf5").is_file());
}

/// A data set that `configs/bert/tiny_cpu.toml`'s model takes (seq_len 32, under 256 token ids)
/// in `dir`, with 2 training shards of 128 samples, and a copy of that config for it in
/// `dir/tiny.toml`: 64 eval samples, an eval every 256 samples, 512 samples in all (both
/// shards read), open division.
fn tiny_bert_set(dir: &Path) -> std::path::PathBuf {
    let a = SynthBertArgs {
        sentences: 16,
        train_samples: 256,
        eval_samples: 64,
        shards: 2,
        seq_len: 32,
        ..SynthBertArgs::new(&dir.join("data"))
    };
    synth_bert(&a).unwrap();
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/bert/tiny_cpu.toml"
    ))
    .unwrap()
    .replace("eval_samples = 512", "eval_samples = 64")
    .replace("eval_batch_size = 128", "eval_batch_size = 64")
    .replace(
        "max_samples = 300032",
        "max_samples = 512\neval_interval_samples = 256",
    );
    let path = dir.join("tiny.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// Replace dataset `name` of the shard at `path` by `values` of `shape`, as type `T`.
fn rewrite<T: hdf5::H5Type>(path: &Path, name: &str, shape: &[usize], values: &[T]) {
    let file = hdf5::File::open_rw(path).unwrap();
    file.unlink(name).unwrap();
    file.new_dataset::<T>()
        .shape(shape)
        .create(name)
        .unwrap()
        .write_raw(values)
        .unwrap();
}

/// Dataset `name` of the shard at `path`, with its shape.
fn values(path: &Path, name: &str) -> (Vec<usize>, Vec<i64>) {
    let ds = hdf5::File::open(path).unwrap().dataset(name).unwrap();
    (ds.shape(), ds.read_raw().unwrap())
}

/// `mlperf-run bert` on `data` with `config`, one run logged into `dir/run.log`: its exit status
/// and standard error.
fn run_bert(dir: &Path, config: &Path, data: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
        .args(["bert", "--division", "open", "--seed", "1"])
        .arg("--config")
        .arg(config)
        .arg("--data")
        .arg(data)
        .arg("--log")
        .arg(dir.join("run.log"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn training_shard_values_the_model_cannot_take_name_the_shard() {
    run_alone!();
    // A training shard is read during the run; a token id beyond model.vocab_size, a segment id
    // beyond type_vocab_size or a next-sentence label other than 0/1 stopped the run with
    // libtorch's "index out of range in self" / "Target 2 is out of bounds", naming nothing.
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_bert_set(dir.path());
    let base = dir.path().join("data");
    for (name, bad, want) in [
        (
            "input_ids",
            300,
            "token id 300 does not fit the model's vocab_size 256",
        ),
        (
            "masked_lm_ids",
            300,
            "token id 300 does not fit the model's vocab_size 256",
        ),
        (
            "segment_ids",
            2,
            "segment id 2 does not fit the model's type_vocab_size 2",
        ),
        ("next_sentence_labels", 2, "next_sentence_labels holds 2"),
    ] {
        let data = dir.path().join(name);
        let copy = Command::new("cp")
            .arg("-a")
            .arg(&base)
            .arg(&data)
            .status()
            .unwrap();
        assert!(copy.success());
        let shard = shard_files(&data.join("train")).unwrap().remove(1);
        let (shape, mut v) = values(&shard, name);
        v[0] = bad;
        rewrite(&shard, name, &shape, &v);
        let (code, err) = run_bert(dir.path(), &config, &data);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            err.contains(&shard.display().to_string()) && err.contains(want),
            "{name}: {err}"
        );
        assert!(!err.contains("libtorch"), "{name}: {err}");
        std::fs::remove_dir_all(&data).unwrap();
    }
}

#[test]
fn training_shard_layouts_are_checked_before_the_first_run() {
    run_alone!();
    // The training shards were only counted before the run: a shard of floats, without a
    // dataset, of another shape than the others, or longer than model.max_position, was found
    // by each run (exit 1, an aborted log per run of a set; the last with libtorch's "index
    // out of range in self"). Now their headers are read first: exit 2, the shard named, no log.
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_bert_set(dir.path());
    let base = dir.path().join("data");
    type Break = fn(&Path);
    let cases: [(&str, Break, &str); 5] = [
        (
            "floats",
            |shard| {
                let (shape, v) = values(shard, "input_ids");
                let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                rewrite(shard, "input_ids", &shape, &f);
            },
            "dataset 'input_ids' holds float32 values",
        ),
        (
            "no_nsp",
            |shard| {
                let file = hdf5::File::open_rw(shard).unwrap();
                file.unlink("next_sentence_labels").unwrap();
            },
            "no dataset 'next_sentence_labels'",
        ),
        (
            "fewer_predictions",
            |shard| {
                for name in ["masked_lm_positions", "masked_lm_ids"] {
                    let (shape, v) = values(shard, name);
                    let p = shape[1];
                    let cut: Vec<i64> = v.chunks(p).flat_map(|r| r[..10].to_vec()).collect();
                    rewrite(shard, name, &[shape[0], 10], &cut);
                }
            },
            "the shards of a data set share one shape",
        ),
        (
            "longer",
            |shard| {
                for name in ["input_ids", "input_mask", "segment_ids"] {
                    let (shape, v) = values(shard, name);
                    let wide: Vec<i64> = v
                        .chunks(shape[1])
                        .flat_map(|r| r.iter().copied().chain(std::iter::repeat_n(0, 96)))
                        .collect();
                    rewrite(shard, name, &[shape[0], shape[1] + 96], &wide);
                }
            },
            "seq_len 128 with 76 prediction slots",
        ),
        (
            "empty",
            |shard| {
                for name in mlperf_run::data::bert::DATASETS {
                    let (mut shape, _) = values(shard, name);
                    shape[0] = 0;
                    rewrite::<i16>(shard, name, &shape, &[]);
                }
            },
            "",
        ),
    ];
    for (case, break_it, want) in cases {
        let data = dir.path().join(case);
        let copy = Command::new("cp")
            .arg("-a")
            .arg(&base)
            .arg(&data)
            .status()
            .unwrap();
        assert!(copy.success());
        let shards = shard_files(&data.join("train")).unwrap();
        if case == "empty" {
            // every training shard empty
            shards.iter().for_each(|s| break_it(s));
        } else {
            break_it(&shards[1]);
        }
        let (code, err) = run_bert(dir.path(), &config, &data);
        assert_eq!(code, Some(2), "{case}: {err}");
        if case == "empty" {
            assert!(
                err.contains("its 2 shard(s) hold no samples")
                    && err.contains(&data.join("train").display().to_string()),
                "{case}: {err}"
            );
        } else {
            assert!(
                err.contains(&shards[1].display().to_string()) && err.contains(want),
                "{case}: {err}"
            );
        }
        assert!(
            !dir.path().join("run.log").exists(),
            "{case}: a run started"
        );
        std::fs::remove_dir_all(&data).unwrap();
    }
    // every training shard longer than model.max_position (32)
    let data = dir.path().join("all_longer");
    let copy = Command::new("cp")
        .arg("-a")
        .arg(&base)
        .arg(&data)
        .status()
        .unwrap();
    assert!(copy.success());
    for shard in shard_files(&data.join("train")).unwrap() {
        (cases[3].1)(&shard);
    }
    let (code, err) = run_bert(dir.path(), &config, &data);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the training shards' seq_len 128 exceeds model.max_position 32"),
        "{err}"
    );
}

#[test]
fn shard_names_that_are_not_shard_files_are_named_and_never_waited_on() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    // a FIFO named like a shard: HDF5 waited on it for ever
    let fifo = dir.path().join("part-9.hdf5");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let f = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(Shard::count(&f).map_err(|e| format!("{e:#}")));
    });
    let err = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("reading a FIFO named like a shard hangs")
        .unwrap_err();
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("named pipe (FIFO)"),
        "{err}"
    );
    std::fs::remove_file(&fifo).unwrap();
    // a link to a shard that is gone: it was called a shard "cut short or damaged"
    let link = dir.path().join("part-8.hdf5");
    std::os::unix::fs::symlink("/nonexistent/part-8.hdf5", &link).unwrap();
    let err = format!("{:#}", Shard::read(&link).unwrap_err());
    assert!(
        err.contains("is a symbolic link to /nonexistent/part-8.hdf5, which does not exist")
            && !err.contains("cut short"),
        "{err}"
    );
    std::fs::remove_file(&link).unwrap();
    let folder = dir.path().join("part-7.hdf5");
    std::fs::create_dir(&folder).unwrap();
    let err = format!("{:#}", Shard::count(&folder).unwrap_err());
    assert!(
        err.contains("is a folder") && !err.contains("cut short"),
        "{err}"
    );
}

#[test]
fn shards_named_in_upper_case_are_read() {
    run_alone!();
    // `.HDF5` shards were passed over: the run trained on the others without a word
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 3);
    let train = dir.path().join("train");
    let first = shard_files(&train).unwrap().remove(0);
    let upper = first.with_extension("HDF5");
    std::fs::rename(&first, &upper).unwrap();
    // and a hidden file (`._NAME`, a macOS copy) is not a shard
    std::fs::write(train.join("._part.hdf5"), b"\0\x05\x16\x07").unwrap();
    let files = shard_files(&train).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.contains(&upper), "{files:?}");
    let l = TrainLoader::new(&train, 1, 0, 1, 4, Device::Cpu).unwrap();
    assert_eq!(l.total_samples, 203);
}
