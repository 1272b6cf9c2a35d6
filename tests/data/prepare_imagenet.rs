//! `data prepare-imagenet`: small tars in the real ILSVRC2012 layouts (a train tar of class
//! tars, a flat val tar) with both label formats, to the exact ImageFolder tree the trainer
//! reads; the errors (missing label, truncated outer and inner tars, unknown synset, bad label
//! lines, Kaggle's sorted synset list); resuming after an interruption; the CLI's exit status.

use mlperf_run::data::imagenet::{decode_jpeg, ImagenetDir, RgbImage};
use mlperf_run::data::prepare_imagenet::{
    prepare_imagenet, read_val_labels, PrepareSpec, STATE_DIR,
};
use mlperf_run::data::synth_imagenet::encode_jpeg;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Train images per class (tar order is not sorted on purpose).
const CLASSES: [(&str, usize); 3] = [("n02119789", 3), ("n01440764", 2), ("n01443537", 4)];
/// Val image i (1-based) is of class VAL[i - 1].
const VAL: [&str; 7] = [
    "n01443537",
    "n02119789",
    "n01440764",
    "n01443537",
    "n02119789",
    "n02119789",
    "n01440764",
];
/// The ILSVRC2012_IDs the devkit-format fixtures give the classes (made up but in 1..1000, and
/// not in wnid order, as the devkit's are not).
const IDS: [(&str, u32); 3] = [("n02119789", 1), ("n01440764", 449), ("n01443537", 2)];

fn jpeg(seed: usize) -> Vec<u8> {
    let (w, h) = (16 + (seed % 5) as u32 * 4, 12 + (seed % 3) as u32 * 4);
    let pixels = (0..w * h * 3)
        .map(|i| ((i as usize * 7 + seed * 31) % 251) as u8)
        .collect();
    encode_jpeg(
        &RgbImage {
            width: w,
            height: h,
            pixels,
        },
        90,
    )
    .unwrap()
}

fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

fn train_name(wnid: &str, k: usize) -> String {
    format!("{wnid}_{}.JPEG", 10 + k * 7)
}

fn val_name(i: usize) -> String {
    format!("ILSVRC2012_val_{i:08}.JPEG")
}

/// The class tar of `wnid` with `n` images.
fn class_tar(c: usize, wnid: &str, n: usize) -> Vec<u8> {
    let files: Vec<_> = (0..n)
        .map(|k| (train_name(wnid, k), jpeg(c * 100 + k)))
        .collect();
    tar_of(&files)
}

struct Fixture {
    dir: tempfile::TempDir,
    train_tar: PathBuf,
    val_tar: PathBuf,
    csv: PathBuf,
    ground_truth: PathBuf,
    id_wnid: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let inner: Vec<_> = CLASSES
            .iter()
            .enumerate()
            .map(|(c, (w, n))| (format!("{w}.tar"), class_tar(c, w, *n)))
            .collect();
        std::fs::write(p("ILSVRC2012_img_train.tar"), tar_of(&inner)).unwrap();
        let val: Vec<_> = (1..=VAL.len())
            .map(|i| (val_name(i), jpeg(1000 + i)))
            .collect();
        std::fs::write(p("ILSVRC2012_img_val.tar"), tar_of(&val)).unwrap();
        // Kaggle: header, rows in another order than the images, boxes after the synset.
        let mut csv = String::from("ImageId,PredictionString\n");
        for i in (1..=VAL.len()).rev() {
            let w = VAL[i - 1];
            csv += &format!("ILSVRC2012_val_{i:08},{w} 10 20 30 40 {w} 1 2 3 4 \n");
        }
        std::fs::write(p("LOC_val_solution.csv"), csv).unwrap();
        let id = |w: &str| IDS.iter().find(|(x, _)| *x == w).unwrap().1;
        let gt: String = VAL.iter().map(|w| format!("{}\n", id(w))).collect();
        std::fs::write(p("ILSVRC2012_validation_ground_truth.txt"), gt).unwrap();
        let map: String = IDS
            .iter()
            .map(|(w, i)| format!("{i} {w} some words, more\n"))
            .collect();
        std::fs::write(p("synsets_id_wnid.txt"), map).unwrap();
        Fixture {
            train_tar: p("ILSVRC2012_img_train.tar"),
            val_tar: p("ILSVRC2012_img_val.tar"),
            csv: p("LOC_val_solution.csv"),
            ground_truth: p("ILSVRC2012_validation_ground_truth.txt"),
            id_wnid: p("synsets_id_wnid.txt"),
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spec(&self, out: &str) -> PrepareSpec {
        PrepareSpec {
            train_tar: self.train_tar.clone(),
            val_tar: self.val_tar.clone(),
            val_labels: self.csv.clone(),
            val_synsets: None,
            out: self.path(out),
            subset: true,
            stop_after_train_classes: None,
        }
    }
}

/// Every file under `root` (relative path -> bytes), hidden state included.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The image files the fixture must give, with their bytes.
fn expected_images() -> BTreeMap<String, Vec<u8>> {
    let mut want = BTreeMap::new();
    for (c, (w, n)) in CLASSES.iter().enumerate() {
        for k in 0..*n {
            want.insert(format!("train/{w}/{}", train_name(w, k)), jpeg(c * 100 + k));
        }
    }
    for (i, w) in VAL.iter().enumerate() {
        want.insert(format!("val/{w}/{}", val_name(i + 1)), jpeg(1001 + i));
    }
    want
}

fn images_only(t: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    t.iter()
        .filter(|(k, _)| !k.starts_with(STATE_DIR))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn state_files(t: &BTreeMap<String, Vec<u8>>) -> BTreeSet<String> {
    t.keys()
        .filter(|k| k.starts_with(STATE_DIR))
        .cloned()
        .collect()
}

fn assert_prepared(out: &Path) {
    let t = tree(out);
    assert_eq!(images_only(&t), expected_images());
    let mut markers: BTreeSet<String> = CLASSES
        .iter()
        .map(|(w, _)| format!("{STATE_DIR}/train/{w}.done"))
        .collect();
    markers.insert(format!("{STATE_DIR}/val.done"));
    assert_eq!(state_files(&t), markers);
    // The trainer's reader takes it, and every image decodes.
    let set = ImagenetDir::open(out).unwrap();
    assert_eq!(
        set.train.classes,
        ["n01440764", "n01443537", "n02119789"].map(String::from)
    );
    assert_eq!((set.train.len(), set.val.len()), (9, 7));
    for s in set.train.samples.iter().chain(&set.val.samples) {
        let img = decode_jpeg(&std::fs::read(&s.path).unwrap()).unwrap();
        assert!(img.width >= 16 && img.height >= 12, "{}", s.path.display());
    }
}

fn err_of(spec: &PrepareSpec) -> String {
    format!("{:#}", prepare_imagenet(spec).unwrap_err())
}

#[test]
fn kaggle_csv_labels_give_the_exact_tree_and_counts() {
    let f = Fixture::new();
    let spec = f.spec("out");
    let s = prepare_imagenet(&spec).unwrap();
    assert_prepared(&spec.out);
    assert_eq!(
        (s.classes, s.train_images, s.val_images, s.files_written),
        (3, 9, 7, 16)
    );
    assert_eq!(
        s.bytes_written,
        expected_images()
            .values()
            .map(|v| v.len() as u64)
            .sum::<u64>()
    );
    assert_eq!(
        (
            s.classes_skipped,
            s.files_kept,
            s.val_skipped,
            s.stopped_early
        ),
        (0, 0, false, false)
    );
}

#[test]
fn devkit_ground_truth_with_each_mapping_form_gives_the_same_tree() {
    let f = Fixture::new();
    // meta.mat as `ID wnid words`; map_clsloc.txt's `wnid ID name`; wnids in ID order.
    let clsloc: String = IDS
        .iter()
        .map(|(w, i)| format!("{w} {i} a_name\n"))
        .collect();
    std::fs::write(f.path("map_clsloc.txt"), clsloc).unwrap();
    let mut by_id = IDS.to_vec();
    by_id.sort_by_key(|(_, i)| *i);
    // A list is line i = ID i: fill IDs 3..448 with other wnids so n01440764 is line 449.
    let mut list: Vec<String> = vec![by_id[0].0.into(), by_id[1].0.into()];
    list.extend((3..449).map(|i| format!("n09{i:06}")));
    list.push(by_id[2].0.into());
    std::fs::write(f.path("wnid_list.txt"), list.join("\n")).unwrap();
    for (k, map) in ["synsets_id_wnid.txt", "map_clsloc.txt", "wnid_list.txt"]
        .iter()
        .enumerate()
    {
        let mut spec = f.spec(&format!("out{k}"));
        spec.val_labels = f.ground_truth.clone();
        spec.val_synsets = Some(f.path(map));
        let s = prepare_imagenet(&spec).unwrap_or_else(|e| panic!("{map}: {e:#}"));
        assert_prepared(&spec.out);
        assert_eq!((s.train_images, s.val_images), (9, 7));
    }
    let labels = read_val_labels(&f.ground_truth, Some(&f.id_wnid)).unwrap();
    assert_eq!(labels.by_image["ILSVRC2012_val_00000001"].synset, VAL[0]);
    assert_eq!(labels.by_image["ILSVRC2012_val_00000007"].line, 7);
}

#[test]
fn kaggle_sorted_synset_list_is_refused_with_the_reason() {
    let f = Fixture::new();
    std::fs::write(
        f.path("LOC_synset_mapping.txt"),
        "n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\nn02119789 kit fox\n",
    )
    .unwrap();
    let mut spec = f.spec("out");
    spec.val_labels = f.ground_truth.clone();
    spec.val_synsets = Some(f.path("LOC_synset_mapping.txt"));
    let e = err_of(&spec);
    assert!(
        e.contains("LOC_synset_mapping.txt")
            && e.contains("sorted")
            && e.contains("LOC_val_solution.csv"),
        "{e}"
    );
    assert!(
        !spec.out.join("train").exists(),
        "nothing written on a refusal"
    );
    // Ground truth without a mapping, a mapping with the CSV, a mapping given as labels.
    spec.val_synsets = None;
    assert!(err_of(&spec).contains("--val-synsets"), "{}", err_of(&spec));
    let mut spec = f.spec("out");
    spec.val_synsets = Some(f.id_wnid.clone());
    assert!(
        err_of(&spec).contains("drop --val-synsets"),
        "{}",
        err_of(&spec)
    );
    spec.val_labels = f.path("LOC_synset_mapping.txt");
    spec.val_synsets = None;
    let e = err_of(&spec);
    assert!(
        e.contains("LOC_synset_mapping.txt:1") && e.contains("as --val-synsets"),
        "{e}"
    );
}

#[test]
fn a_val_image_without_a_label_is_named_with_the_labels_file() {
    let f = Fixture::new();
    let csv = std::fs::read_to_string(&f.csv).unwrap();
    let csv: String = csv
        .lines()
        .filter(|l| !l.starts_with("ILSVRC2012_val_00000005,"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&f.csv, csv).unwrap();
    let spec = f.spec("out");
    let e = err_of(&spec);
    assert!(
        e.contains("ILSVRC2012_val_00000005.JPEG")
            && e.contains("has no label in")
            && e.contains("LOC_val_solution.csv"),
        "{e}"
    );
    assert!(!spec.out.join("train").exists(), "checked before writing");
}

#[test]
fn a_label_synset_without_a_class_tar_is_named() {
    let f = Fixture::new();
    let csv = std::fs::read_to_string(&f.csv).unwrap().replace(
        "ILSVRC2012_val_00000003,n01440764",
        "ILSVRC2012_val_00000003,n09999999",
    );
    std::fs::write(&f.csv, csv).unwrap();
    let e = err_of(&f.spec("out"));
    // Rows are written in reverse, after the header: image 3 is on line 1 + (7 - 3 + 1) = 6.
    assert!(
        e.contains("LOC_val_solution.csv:6")
            && e.contains("n09999999")
            && e.contains("not a train class"),
        "{e}"
    );
    // Through the devkit mapping: an ID the mapping sends to an unknown wnid.
    let map = std::fs::read_to_string(&f.id_wnid)
        .unwrap()
        .replace("449 n01440764", "449 n01440765");
    std::fs::write(&f.id_wnid, map).unwrap();
    let mut spec = f.spec("out");
    spec.val_labels = f.ground_truth.clone();
    spec.val_synsets = Some(f.id_wnid.clone());
    let e = err_of(&spec);
    assert!(
        e.contains("ILSVRC2012_validation_ground_truth.txt:3") && e.contains("n01440765"),
        "{e}"
    );
}

#[test]
fn label_lines_that_do_not_parse_name_file_and_line() {
    let f = Fixture::new();
    let cases: [(&str, &str, Option<&str>, &str); 7] = [
        (
            "LOC_val_solution.csv",
            "ImageId,PredictionString\nILSVRC2012_val_00000001,n01443537 1 2 3 4\nILSVRC2012_val_00000002,kitfox 1 2 3 4\n",
            None,
            "LOC_val_solution.csv:3",
        ),
        (
            "LOC_val_solution.csv",
            "ImageId,PredictionString\nILSVRC2012_val_00000001 n01443537\n",
            None,
            "LOC_val_solution.csv:2",
        ),
        (
            "LOC_val_solution.csv",
            "ImageId,PredictionString\nILSVRC2012_val_00000001,n01443537\nILSVRC2012_val_00000001,n01443537\n",
            None,
            "LOC_val_solution.csv:3: ILSVRC2012_val_00000001 is labelled twice (also on line 2)",
        ),
        ("ILSVRC2012_validation_ground_truth.txt", "1\n2\nx\n", Some("synsets_id_wnid.txt"), "ground_truth.txt:3: `x` is not an ILSVRC2012_ID"),
        ("ILSVRC2012_validation_ground_truth.txt", "1\n2\n1001\n", Some("synsets_id_wnid.txt"), "ground_truth.txt:3: ILSVRC2012_ID 1001 is outside 1..1000"),
        ("ILSVRC2012_validation_ground_truth.txt", "1\n\n2\n", Some("synsets_id_wnid.txt"), "ground_truth.txt:2: blank line"),
        ("ILSVRC2012_validation_ground_truth.txt", "1\n3\n", Some("synsets_id_wnid.txt"), "ground_truth.txt:2: ILSVRC2012_ID 3 is not in the synset mapping"),
    ];
    for (name, text, map, want) in cases {
        std::fs::write(f.path(name), text).unwrap();
        let e = format!(
            "{:#}",
            read_val_labels(&f.path(name), map.map(|m| f.path(m)).as_deref()).unwrap_err()
        );
        assert!(e.contains(want), "want `{want}` in: {e}");
    }
    // Mapping files: an ID out of range, and a line in neither form.
    for (text, want) in [
        (
            "1 n02119789\n0 n01440764\n",
            "bad_map.txt:2: ILSVRC2012_ID 0 is outside 1..1000",
        ),
        (
            "1 n02119789\n2 n01440764\n1001 n01443537\n",
            "bad_map.txt:3: ILSVRC2012_ID 1001",
        ),
        ("1 n02119789\nn01440764 2\n", "bad_map.txt:2:"),
        (
            "1 n02119789\ntench 2\n",
            "bad_map.txt:2: `tench 2` is not a synset mapping line",
        ),
        (
            "1 n02119789\n2 n02119789\n",
            "bad_map.txt:2: n02119789 is mapped twice (also on line 1)",
        ),
    ] {
        std::fs::write(f.path("bad_map.txt"), text).unwrap();
        std::fs::write(f.path("gt.txt"), "1\n").unwrap();
        let e = format!(
            "{:#}",
            read_val_labels(&f.path("gt.txt"), Some(&f.path("bad_map.txt"))).unwrap_err()
        );
        assert!(e.contains(want), "want `{want}` in: {e}");
    }
}

/// A copy of the train tar cut at `len` bytes.
fn cut(f: &Fixture, from: &Path, name: &str, len: usize) -> PathBuf {
    let bytes = std::fs::read(from).unwrap();
    let p = f.path(name);
    std::fs::write(&p, &bytes[..len]).unwrap();
    p
}

#[test]
fn a_truncated_outer_tar_is_named_with_the_class_tar_it_cuts() {
    let f = Fixture::new();
    let total = std::fs::read(&f.train_tar).unwrap().len();
    let members = mlperf_run::data::prepare_imagenet::list_tar(&f.train_tar).unwrap();
    assert_eq!(
        members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["n02119789.tar", "n01440764.tar", "n01443537.tar"]
    );
    let last = &members[2];
    // Cut inside the last class tar's data, then exactly at the end of its data (a block
    // boundary: the tar reader alone would take that for the end of the archive).
    for (k, len) in [
        (last.pos + last.size / 2) as usize,
        (last.pos + last.size) as usize,
    ]
    .into_iter()
    .enumerate()
    {
        assert!(len < total);
        let mut spec = f.spec(&format!("out{k}"));
        spec.train_tar = cut(&f, &f.train_tar, &format!("cut{k}.tar"), len);
        let e = err_of(&spec);
        assert!(
            e.contains(&format!("cut{k}.tar is truncated")) && e.contains("n01443537.tar"),
            "{e}"
        );
        assert!(e.contains("re-download"), "{e}");
    }
    // Cut inside a header.
    let mut spec = f.spec("out3");
    spec.train_tar = cut(
        &f,
        &f.train_tar,
        "cut3.tar",
        (members[1].pos - 300) as usize,
    );
    let e = err_of(&spec);
    assert!(
        e.contains("cut3.tar is corrupt or truncated after entry n02119789.tar"),
        "{e}"
    );
}

#[test]
fn a_truncated_inner_tar_is_named_with_the_outer_tar() {
    let f = Fixture::new();
    // The middle class's tar cut (inside an image, then at a block boundary), packed whole.
    let whole = class_tar(1, "n01440764", 2);
    let inner_members = {
        std::fs::write(f.path("inner.tar"), &whole).unwrap();
        mlperf_run::data::prepare_imagenet::list_tar(&f.path("inner.tar")).unwrap()
    };
    let second = &inner_members[1];
    for (k, len) in [
        (second.pos + 100) as usize,
        (second.pos + second.size.div_ceil(512) * 512) as usize,
    ]
    .into_iter()
    .enumerate()
    {
        let inner: Vec<_> = CLASSES
            .iter()
            .enumerate()
            .map(|(c, (w, n))| {
                let mut t = class_tar(c, w, *n);
                if c == 1 {
                    t.truncate(len);
                }
                (format!("{w}.tar"), t)
            })
            .collect();
        let train = f.path(&format!("train_bad_inner{k}.tar"));
        std::fs::write(&train, tar_of(&inner)).unwrap();
        let mut spec = f.spec(&format!("out{k}"));
        spec.train_tar = train;
        let e = err_of(&spec);
        assert!(
            e.contains(&format!(
                "class tar n01440764.tar in {}",
                spec.train_tar.display()
            )) && e.contains("truncated"),
            "{e}"
        );
        // The class before it is complete and marked; the cut class is not.
        let state = spec.out.join(STATE_DIR).join("train");
        assert!(state.join("n02119789.done").is_file());
        assert!(!state.join("n01440764.done").exists());
    }
    // A cut val tar names itself.
    let val_len = std::fs::read(&f.val_tar).unwrap().len();
    let mut spec = f.spec("out_val");
    spec.val_tar = cut(&f, &f.val_tar, "val_cut.tar", val_len - 1500);
    let e = err_of(&spec);
    assert!(e.contains("val_cut.tar is truncated"), "{e}");
}

#[test]
fn full_set_counts_are_checked_unless_subset() {
    let f = Fixture::new();
    let mut spec = f.spec("out");
    spec.subset = false;
    let e = err_of(&spec);
    assert!(
        e.contains("holds 3 class tars") && e.contains("1000") && e.contains("--subset"),
        "{e}"
    );
}

#[test]
fn a_rerun_resumes_after_an_interruption_and_then_skips_everything() {
    let f = Fixture::new();
    let mut spec = f.spec("out");
    // Interrupted after one class: its marker is there, nothing of val.
    spec.stop_after_train_classes = Some(1);
    let s = prepare_imagenet(&spec).unwrap();
    assert!(s.stopped_early);
    assert_eq!(s.files_written, 3);
    let t = tree(&spec.out);
    assert_eq!(
        state_files(&t),
        BTreeSet::from([format!("{STATE_DIR}/train/n02119789.done")])
    );
    assert!(!spec.out.join("val").exists());
    // A killed run's leftovers in the next class: one finished image, one temporary file.
    let next = spec.out.join("train/n01440764");
    std::fs::create_dir_all(&next).unwrap();
    std::fs::write(next.join(train_name("n01440764", 0)), jpeg(100)).unwrap();
    std::fs::write(next.join(".n01440764_17.JPEG.tmp-999999"), b"half").unwrap();
    let marker_tmp = spec
        .out
        .join(STATE_DIR)
        .join("train/.n01440764.done.tmp-999999");
    std::fs::write(&marker_tmp, b"{").unwrap();
    spec.stop_after_train_classes = None;
    let s = prepare_imagenet(&spec).unwrap();
    assert_prepared(&spec.out);
    assert_eq!(
        (
            s.classes_skipped,
            s.files_kept,
            s.files_written,
            s.temps_removed
        ),
        (1, 1, 16 - 3 - 1, 2)
    );
    assert!(!marker_tmp.exists());
    let done = tree(&spec.out);

    // A second full run skips everything and changes nothing.
    let s = prepare_imagenet(&spec).unwrap();
    assert_eq!(
        (
            s.classes_skipped,
            s.val_skipped,
            s.files_written,
            s.files_kept
        ),
        (3, true, 0, 0)
    );
    assert_eq!((s.train_images, s.val_images), (9, 7));
    assert_eq!(tree(&spec.out), done);

    // A class whose marker and one file are gone, and a val image gone: only those are written.
    std::fs::remove_file(spec.out.join(STATE_DIR).join("train/n01443537.done")).unwrap();
    std::fs::remove_file(
        spec.out
            .join("train/n01443537")
            .join(train_name("n01443537", 2)),
    )
    .unwrap();
    std::fs::remove_file(spec.out.join("val/n02119789").join(val_name(6))).unwrap();
    let s = prepare_imagenet(&spec).unwrap();
    assert_eq!(
        (
            s.classes_skipped,
            s.val_skipped,
            s.files_written,
            s.files_kept
        ),
        (2, false, 2, 3 + 6)
    );
    assert_eq!(tree(&spec.out), done);
    // A file of the wrong size under a final name (not one this tool leaves) is rewritten.
    std::fs::remove_file(spec.out.join(STATE_DIR).join("train/n01440764.done")).unwrap();
    std::fs::write(
        spec.out
            .join("train/n01440764")
            .join(train_name("n01440764", 1)),
        b"x",
    )
    .unwrap();
    let s = prepare_imagenet(&spec).unwrap();
    assert_eq!((s.files_written, s.files_kept), (1, 1));
    assert_eq!(tree(&spec.out), done);
}

#[test]
fn other_labels_redo_the_val_set_and_leftovers_in_the_wrong_class_are_named() {
    let f = Fixture::new();
    let spec = f.spec("out");
    prepare_imagenet(&spec).unwrap();
    // Image 7 moves from n01440764 to n02119789: the labels digest differs, so val is redone;
    // the old copy is still in n01440764, which the check finds.
    let csv = std::fs::read_to_string(&f.csv).unwrap().replace(
        "ILSVRC2012_val_00000007,n01440764",
        "ILSVRC2012_val_00000007,n02119789",
    );
    std::fs::write(&f.csv, csv).unwrap();
    let e = err_of(&spec);
    assert!(
        e.contains("ILSVRC2012_val_00000007.JPEG") && e.contains("same val image in two classes"),
        "{e}"
    );
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mlperf-run"))
}

#[test]
fn cli_prepares_prints_a_summary_and_exits_2_on_errors() {
    let f = Fixture::new();
    let out = f.path("cli_out");
    let run = |labels: &Path, extra: &[&str]| {
        bin()
            .args(["data", "prepare-imagenet", "--train-tar"])
            .arg(&f.train_tar)
            .arg("--val-tar")
            .arg(&f.val_tar)
            .arg("--val-labels")
            .arg(labels)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&f.csv, &["--subset"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for want in [
        "classes        3",
        "train images   9",
        "val images     7",
        "written        16 images",
    ] {
        assert!(stdout.contains(want), "want `{want}` in:\n{stdout}");
    }
    assert_prepared(&out);
    let o = run(&f.csv, &["--subset"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("skipped        3 classes already done and the val set"),
        "{stdout}"
    );
    // Errors: exit status 2 and a message on stderr, no panic.
    let o = run(&f.csv, &[]);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--subset") && !stderr.contains("panicked"),
        "{stderr}"
    );
    let o = run(&f.ground_truth, &["--subset"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--val-synsets"));
    // --help says which label file is which.
    let o = bin()
        .args(["data", "prepare-imagenet", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for want in [
        "LOC_val_solution.csv",
        "ILSVRC2012_validation_ground_truth.txt",
        "map_clsloc.txt",
        "LOC_synset_mapping.txt",
        "--subset",
        "Resume",
    ] {
        assert!(help.contains(want), "want `{want}` in --help:\n{help}");
    }
}

/// A folder given as a tar (a mistaken path, or the extracted tar) is said to be a folder, not
/// called a corrupt or truncated tar.
#[test]
fn a_folder_given_as_a_tar_is_named_as_a_folder() {
    let f = Fixture::new();
    let o = bin()
        .args(["data", "prepare-imagenet", "--subset", "--train-tar"])
        .arg(f.dir.path())
        .arg("--val-tar")
        .arg(&f.val_tar)
        .arg("--val-labels")
        .arg(&f.csv)
        .arg("--out")
        .arg(f.path("out_dir_tar"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "{} is a folder, not a tar file",
            f.dir.path().display()
        )) && !stderr.contains("corrupt"),
        "{stderr}"
    );
}

#[test]
fn the_packaged_init_datasets_script_points_at_prepare_imagenet() {
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/submission/templates/init_datasets.sh"),
    )
    .unwrap()
    .replace("{{BENCHMARK}}", "resnet")
    .replace("{{VERSION}}", "test");
    let f = Fixture::new();
    let script = f.path("init_datasets.sh");
    std::fs::write(&script, template).unwrap();
    let missing = f.path("no_such_data");
    let o = Command::new("bash")
        .arg(&script)
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("data prepare-imagenet --train-tar ILSVRC2012_img_train.tar")
            && stderr.contains(&format!("--out {}", missing.display())),
        "{stderr}"
    );
    // What it did before stays: a prepared folder passes.
    let spec = f.spec("prepared");
    prepare_imagenet(&spec).unwrap();
    let o = Command::new("bash")
        .arg(&script)
        .arg(&spec.out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("classes: 3 train, 3 val") && stdout.contains("looks ready"),
        "{stdout}"
    );
}

/// Ctrl-C stops prepare-imagenet between two images with one line that says nothing written
/// was lost and to rerun (exit 130, not a silent death by signal); the rerun continues and
/// finishes the same tree.
#[test]
fn ctrl_c_stops_prepare_imagenet_between_images_and_a_rerun_finishes() {
    use std::process::Stdio;
    let f = Fixture::new();
    // 3,000 small train images: a moment of writing, stopped after the first
    const PER_CLASS: usize = 1_000;
    let shared: Vec<Vec<u8>> = (0..7).map(jpeg).collect();
    let inner: Vec<_> = CLASSES
        .iter()
        .map(|(w, _)| {
            let files: Vec<_> = (0..PER_CLASS)
                .map(|k| (train_name(w, k), shared[k % shared.len()].clone()))
                .collect();
            (format!("{w}.tar"), tar_of(&files))
        })
        .collect();
    std::fs::write(&f.train_tar, tar_of(&inner)).unwrap();
    let out = f.path("out");
    let run = || {
        let mut cmd = bin();
        cmd.args(["data", "prepare-imagenet", "--subset", "--train-tar"])
            .arg(&f.train_tar)
            .arg("--val-tar")
            .arg(&f.val_tar)
            .arg("--val-labels")
            .arg(&f.csv)
            .arg("--out")
            .arg(&out)
            .env("RUST_LOG", "error");
        cmd
    };
    let child = run()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first_class = out.join("train").join(CLASSES[0].0);
    let started = || std::fs::read_dir(&first_class).is_ok_and(|mut d| d.next().is_some());
    let ended = crate::common::interrupt::ctrl_c_once(child, "prepare-imagenet", started);
    crate::common::interrupt::assert_stopped_in_one_line(
        &ended,
        "data prepare-imagenet stopped at train class",
    );
    let written: usize = CLASSES
        .iter()
        .map(|(w, _)| std::fs::read_dir(out.join("train").join(w)).map_or(0, |d| d.count()))
        .sum();
    assert!(
        written < CLASSES.len() * PER_CLASS,
        "every train image was written ({written}) before the stop"
    );
    let o = run().output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for want in [
        "classes        3".to_string(),
        format!("train images   {}", 3 * PER_CLASS),
        format!("val images     {}", VAL.len()),
    ] {
        assert!(stdout.contains(&want), "want `{want}` in:\n{stdout}");
    }
    for (w, _) in CLASSES {
        let n = std::fs::read_dir(out.join("train").join(w))
            .unwrap()
            .count();
        assert_eq!(n, PER_CLASS, "{w}");
    }
}
