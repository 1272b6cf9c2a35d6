//! Packed sequences (`methods.packing`): the packed loader puts every sample in exactly one row,
//! once per epoch, in a random order per seed, the same packing on every rank with each rank
//! taking its own rows; on random length distributions. `data bert-pack` prints the packing
//! efficiency; on realistic 512-token data it leaves at most 3% padding. Bad input (sequences
//! longer than a row, a mask that is not a prefix) is a clear error naming the file.
//!
//! Each test writes HDF5 files, so each runs alone in a process of its own (`common::alone`; see
//! `bert_data.rs`).
#![cfg(feature = "torch")]

use crate::common;
use crate::common::alone::run_alone;

use super::bert_data::synth_realistic;
use mlperf_run::data::bert::packing::{PackSpec, PackedLoader};
use mlperf_run::data::bert::synth::{synth_bert, SynthBertArgs};
use mlperf_run::data::bert::SampleId;
use mlperf_run::data::rng::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const PREDS: usize = 8;

/// A reference-layout shard with sequences of the given lengths (`mask_hole`: sample 0's mask
/// gets a zero inside it).
fn write_shard(path: &Path, lengths: &[usize], seq: usize, mask_hole: bool) {
    let n = lengths.len();
    let mut ids = vec![0i16; n * seq];
    let mut mask = vec![0i8; n * seq];
    let mut seg = vec![0i8; n * seq];
    let mut pos = vec![0i16; n * PREDS];
    let mut mids = vec![0i16; n * PREDS];
    let mut nsp = vec![0i8; n];
    for (i, &len) in lengths.iter().enumerate() {
        for t in 0..len {
            ids[i * seq + t] = if t == 0 {
                2
            } else {
                (5 + (i * 7 + t) % 50) as i16
            };
            mask[i * seq + t] = 1;
            seg[i * seq + t] = (2 * t >= len) as i8;
        }
        let preds = (len / 6).clamp(1, PREDS).min(len - 1);
        for q in 0..preds {
            pos[i * PREDS + q] = (1 + q * (len - 1) / preds) as i16;
            mids[i * PREDS + q] = 9;
        }
        nsp[i] = (i % 2) as i8;
    }
    if mask_hole {
        mask[2] = 0;
    }
    let f = hdf5::File::create(path).unwrap();
    let put2 = |name: &str, v: &[i16], cols: usize| {
        f.new_dataset::<i16>()
            .shape([n, cols])
            .create(name)
            .unwrap()
            .write_raw(v)
            .unwrap();
    };
    put2("input_ids", &ids, seq);
    put2("masked_lm_positions", &pos, PREDS);
    put2("masked_lm_ids", &mids, PREDS);
    for (name, v) in [("input_mask", &mask), ("segment_ids", &seg)] {
        f.new_dataset::<i8>()
            .shape([n, seq])
            .create(name)
            .unwrap()
            .write_raw(&v[..])
            .unwrap();
    }
    f.new_dataset::<i8>()
        .shape([n])
        .create("next_sentence_labels")
        .unwrap()
        .write_raw(&nsp[..])
        .unwrap();
}

/// Lengths in 3..=seq from one of three distributions: uniform, mostly short, or bimodal (many
/// full rows and many short ones, like the phase-2 data).
fn lengths(rng: &mut Rng, kind: usize, n: usize, seq: usize) -> Vec<usize> {
    (0..n)
        .map(|_| {
            let u = rng.below(1 << 20) as f64 / (1 << 20) as f64;
            let len = match kind {
                0 => 3 + (u * (seq - 2) as f64) as usize,
                1 => 3 + (u * u * u * (seq - 2) as f64) as usize,
                _ => {
                    if rng.below(2) == 0 {
                        seq - rng.below(4) as usize
                    } else {
                        3 + (u * (seq / 2) as f64) as usize
                    }
                }
            };
            len.clamp(3, seq)
        })
        .collect()
}

/// One rank's steps: the samples of each of its rows.
type RankSteps = Vec<Vec<Vec<SampleId>>>;

/// Every rank's samples per step (rows of sample ids) and each step's global sequence count,
/// until every rank has started epoch `epochs`.
fn run_ranks(
    train: &Path,
    seed: u64,
    world: usize,
    rows: usize,
    spec: PackSpec,
    epochs: u64,
) -> (Vec<RankSteps>, Vec<usize>) {
    let mut loaders: Vec<PackedLoader> = (0..world)
        .map(|r| {
            PackedLoader::new(train, seed, r, world, rows, spec)
                .unwrap()
                .with_window(97)
        })
        .collect();
    let mut per_rank: Vec<RankSteps> = vec![Vec::new(); world];
    let mut globals = Vec::new();
    loop {
        let mut global = None;
        for (r, l) in loaders.iter_mut().enumerate() {
            let (mine, g) = l.next_batch_ids().unwrap();
            // every rank counts the same sequences for the step
            assert_eq!(*global.get_or_insert(g), g, "rank {r}");
            assert_eq!(mine.len(), rows);
            per_rank[r].push(mine);
        }
        globals.push(global.unwrap());
        let past = per_rank
            .iter()
            .flatten()
            .flatten()
            .flatten()
            .any(|s| s.epoch >= epochs);
        if past {
            return (per_rank, globals);
        }
    }
}

#[test]
fn packed_rows_hold_every_sample_once_per_epoch_in_seeded_order_on_every_rank() {
    run_alone!();
    let seq = 64;
    let spec = PackSpec::new(seq, 3, PREDS).unwrap();
    for kind in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let train = dir.path().join("train");
        std::fs::create_dir_all(&train).unwrap();
        let mut rng = Rng::derive(11, &[kind as u64]);
        let sizes = [211, 157, 240];
        let mut all: Vec<(usize, usize, usize)> = Vec::new();
        for (f, &n) in sizes.iter().enumerate() {
            let ls = lengths(&mut rng, kind, n, seq);
            write_shard(&train.join(format!("part-{f}.hdf5")), &ls, seq, false);
            all.extend(ls.iter().enumerate().map(|(i, &l)| (f, i, l)));
        }
        let (world, rows) = (3, 4);
        let (per_rank, globals) = run_ranks(&train, 5, world, rows, spec, 2);
        // each row within its budgets; the global count is the rows' sequences
        let mut counts: BTreeMap<(u64, usize, usize), usize> = BTreeMap::new();
        for step in 0..globals.len() {
            let mut n = 0;
            for r in per_rank.iter() {
                for row in &r[step] {
                    assert!(!row.is_empty() && row.len() <= 3, "{row:?}");
                    assert!(row.iter().map(|s| s.tokens).sum::<usize>() <= seq);
                    n += row.len();
                    for s in row {
                        assert_eq!(
                            s.tokens,
                            all.iter()
                                .find(|a| (a.0, a.1) == (s.file, s.index))
                                .unwrap()
                                .2
                        );
                        *counts.entry((s.epoch, s.file, s.index)).or_default() += 1;
                    }
                }
            }
            assert_eq!(n, globals[step]);
        }
        // epochs 0 and 1 complete: every sample exactly once in each (on exactly one rank)
        for epoch in 0..2u64 {
            for &(f, i, _) in &all {
                assert_eq!(
                    counts.get(&(epoch, f, i)),
                    Some(&1),
                    "kind {kind}: epoch {epoch}, sample {f}/{i}"
                );
            }
        }
        assert!(counts.values().all(|&c| c == 1));
        // packed: more than one sequence per row on average
        let seqs: usize = counts.keys().filter(|k| k.0 == 0).count();
        let rows_e0: usize = per_rank
            .iter()
            .flatten()
            .flatten()
            .filter(|row| row.iter().all(|s| s.epoch == 0))
            .count();
        eprintln!("kind {kind}: {seqs} sequences in about {rows_e0} rows");
        assert!(
            seqs as f64 > 1.3 * rows_e0 as f64,
            "kind {kind}: {seqs} in {rows_e0} rows"
        );

        // the same seed gives the same rows on a rerun; another seed another order; epoch 1 is
        // ordered differently from epoch 0
        let (again, _) = run_ranks(&train, 5, world, rows, spec, 1);
        let n = again[1].len().min(per_rank[1].len());
        assert_eq!(again[1][..n], per_rank[1][..n]);
        let (other, _) = run_ranks(&train, 6, world, rows, spec, 1);
        assert_ne!(other[0][..3], per_rank[0][..3]);
        let order = |e: u64| -> Vec<(usize, usize)> {
            per_rank[0]
                .iter()
                .flatten()
                .flatten()
                .filter(|s| s.epoch == e)
                .map(|s| (s.file, s.index))
                .take(20)
                .collect()
        };
        assert_ne!(order(0), order(1));
    }
}

#[test]
fn bert_pack_prints_the_packing_efficiency_and_realistic_data_packs_within_3_percent() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    synth_realistic(dir.path(), 6000);
    let out = Command::new(common::dist::BIN)
        .args(["data", "bert-pack", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    assert!(text.contains("packing efficiency"), "{text}");
    let out = Command::new(common::dist::BIN)
        .args(["data", "bert-pack", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let padding = v["padding"].as_f64().unwrap();
    let eff = v["efficiency"].as_f64().unwrap();
    let bound = v["bound_efficiency"].as_f64().unwrap();
    let unpacked = v["unpacked_efficiency"].as_f64().unwrap();
    assert_eq!(v["sequences"], 6000);
    assert!((0.4..0.6).contains(&unpacked), "{v}");
    assert!(eff <= bound + 1e-12, "{v}");
    assert!(padding <= 0.03, "{v}");
    let factor = v["sequences_per_row"].as_f64().unwrap();
    assert!(factor > 1.8, "{v}");
}

#[test]
fn packing_bad_shards_are_clear_errors_naming_the_file() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let spec = PackSpec::new(32, 3, PREDS).unwrap();
    // the packed loader's first error on one shard `name` (write_shard's lengths, seq, hole)
    let first_error = |name: &str, lengths: &[usize], seq: usize, hole: bool| {
        let folder = dir.path().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        write_shard(&folder.join(format!("{name}.hdf5")), lengths, seq, hole);
        let mut l = PackedLoader::new(&folder, 1, 0, 1, 1, spec).unwrap();
        format!("{:#}", l.next_host_batch().err().unwrap())
    };
    // sequences of 40 tokens in a shard of 48, packed into rows of 32
    let err = first_error("part-long", &[40, 10, 12], 48, false);
    assert!(
        err.contains("part-long.hdf5") && err.contains("40 tokens"),
        "{err}"
    );
    // a mask with a hole: not the reference layout packing needs
    let err = first_error("part-hole", &[20, 10], 32, true);
    assert!(
        err.contains("part-hole.hdf5") && err.contains("input_mask"),
        "{err}"
    );
    // data packed already (no input_mask dataset): the missing dataset, named with the file,
    // when the loader is made (the shards' headers are read then)
    let packed = dir.path().join("packed");
    std::fs::create_dir_all(&packed).unwrap();
    let f = hdf5::File::create(packed.join("part-packed.hdf5")).unwrap();
    f.new_dataset::<i16>()
        .shape([2, 8])
        .create("input_ids")
        .unwrap()
        .write_raw(&[1i16; 16][..])
        .unwrap();
    drop(f);
    let err = format!(
        "{:#}",
        PackedLoader::new(&packed, 1, 0, 1, 1, spec).err().unwrap()
    );
    assert!(
        err.contains("part-packed.hdf5") && err.contains("input_mask"),
        "{err}"
    );
}

/// `data bert-pack` flags out of range: exit 2 naming the flag, and a --window far beyond the
/// data set is the whole epoch (not an allocation that aborts the process).
#[test]
fn bert_pack_names_bad_flags_and_takes_a_huge_window() {
    run_alone!();
    let dir = tempfile::tempdir().unwrap();
    let a = SynthBertArgs {
        sentences: 16,
        seq_len: 32,
        train_samples: 64,
        eval_samples: 8,
        ..SynthBertArgs::new(dir.path())
    };
    synth_bert(&a).unwrap();
    let pack = |extra: &[&str]| {
        let o = Command::new(common::dist::BIN)
            .args(["data", "bert-pack", "--dir"])
            .arg(dir.path())
            .args(extra)
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code(), text)
    };
    for (flag, want) in [
        ("--window", "--window must be at least 1"),
        ("--row-len", "--row-len must be at least 1"),
        ("--max-per-row", "--max-per-row must be at least 1"),
    ] {
        let (code, text) = pack(&[flag, "0"]);
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains(want), "{text}");
    }
    // a folder without shards: the flag, the folder and how to make one (it said only
    // "D/train: no .hdf5 or .h5 shards")
    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir(empty.path().join("train")).unwrap();
    for sub in ["bert-pack", "bert-balance"] {
        let o = Command::new(common::dist::BIN)
            .args(["data", sub, "--dir"])
            .arg(empty.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{sub}: {text}");
        assert!(
            text.contains(&format!(
                "error: --dir: {} holds no .hdf5 or .h5 shards: a BERT data folder holds train/ \
                 and eval/ with HDF5 shards (`mlperf-run data synth-bert --out DIR` makes one)",
                empty.path().join("train").display()
            )),
            "{sub}: {text}"
        );
    }
    let (code, text) = pack(&["--window", "10000000000"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("64 sequences"), "{text}");
    // rows shorter than the samples: the flag to change, not the trainer's advice
    let (code, text) = pack(&["--row-len", "8"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--row-len")
            && text.contains("give --row-len 32")
            && !text.contains("eval set"),
        "{text}"
    );
}
