//! BERT data: synth-bert writes reference-layout shards that we read back; the loader shuffles
//! per seed, shards across ranks and yields every sample exactly once per epoch.
#![cfg(feature = "torch")]

mod common;

use mlperf_run::data::bert::synth::{synth_bert, SynthBertArgs, MASK};
use mlperf_run::data::bert::{shard_files, EvalSet, Shard, TrainLoader};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use tch::{Device, Kind};

fn synth(out: &Path, seed: u64) {
    let a = SynthBertArgs {
        out: out.to_path_buf(),
        source: None,
        sentences: 12,
        train_samples: 203,
        eval_samples: 40,
        shards: 3,
        seq_len: 48,
        max_predictions: 10,
        vocab_size: 30522,
        seed,
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
