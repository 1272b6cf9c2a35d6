//! `mlperf-run data prepare-imagenet`: the ILSVRC2012 tars as downloaded, to the ImageFolder
//! layout the trainer reads ([`crate::data::imagenet::ImagenetDir`]).
//!
//! Inputs: `ILSVRC2012_img_train.tar` (a tar of 1,000 class tars `<wnid>.tar`, each holding
//! `<wnid>_<n>.JPEG`), `ILSVRC2012_img_val.tar` (a flat tar of `ILSVRC2012_val_<8 digits>.JPEG`)
//! and the validation labels, in one of two formats told apart by their content (see
//! [`read_val_labels`]). Output: `OUT/train/<wnid>/<file>.JPEG` and `OUT/val/<wnid>/<file>.JPEG`
//! with the file names of the tars.
//!
//! The work, in order:
//! 1. read the labels (errors name file:line);
//! 2. list both tars by their headers only (seeking over the data), so a truncated or corrupt
//!    tar, a val image without a label, or a label whose synset has no class tar is an error
//!    before anything is written;
//! 3. each class tar is read as a stream out of the train tar (nothing is extracted to disk but
//!    the images), its images written atomically (temporary name, then rename), the file system
//!    synced, and the class's done marker `OUT/.prepare-imagenet/train/<wnid>.done` written;
//! 4. the val images, then `OUT/.prepare-imagenet/val.done`;
//! 5. `OUT` is opened with the trainer's own reader and its counts checked: per class against
//!    the tars, and, unless `--subset`, against the full set (1,000 classes, 1,281,167 train,
//!    50,000 val images).
//!
//! Resume rule: a class is skipped when its marker exists, records the same class-tar size, and
//! its folder holds the marker's number of JPEG files; the val set likewise (same val tar size,
//! same labels, same file count). Anything else is redone, and a file whose final name already
//! exists with the size of its tar entry is kept rather than rewritten: files only reach their
//! final names complete (rename of a temporary `.NAME.tmp-HOST-PID`, which a resumed run removes).

use crate::data::imagenet::folder::is_jpeg_name;
use crate::data::imagenet::{
    ImagenetDir, IMAGENET_CLASSES, IMAGENET_TRAIN_SAMPLES, IMAGENET_VAL_SAMPLES,
};
use crate::util::fs as fsutil;
use anyhow::{anyhow, bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The folder under `--out` that holds the done markers (hidden, so the trainer never sees it).
pub const STATE_DIR: &str = ".prepare-imagenet";

const BLOCK: u64 = 512;

const AFTER_HELP: &str = "\
Validation labels (--val-labels), told apart by their content:
  LOC_val_solution.csv (Kaggle)   header `ImageId,PredictionString`, rows like
                                  `ILSVRC2012_val_00008726,n02119789 255 142 454 329 ...`;
                                  the first word of PredictionString is the synset.
                                  Takes no --val-synsets.
  ILSVRC2012_validation_ground_truth.txt (devkit)
                                  one ILSVRC2012_ID (1..1000) per line, line i for
                                  ILSVRC2012_val_<i>; needs --val-synsets.

Synset mapping (--val-synsets, only with the ground-truth file), ILSVRC2012_ID to wnid:
  `ID wnid [words]` lines         the devkit's meta.mat written out as text (`1 n02119789 kit fox`)
  `wnid ID [words]` lines         the ILSVRC2014 devkit's map_clsloc.txt (`n02119789 1 kit_fox`)
  `wnid [words]` lines            line i = ILSVRC2012_ID i, in the devkit's (meta.mat) order.
The devkit's ID order is not alphabetical (ID 1 is n02119789, kit fox), so a wnid list sorted by
wnid, such as Kaggle's LOC_synset_mapping.txt (which starts with n01440764 tench), is refused:
read as ID order it would mislabel nearly every val image. With the Kaggle files, use
LOC_val_solution.csv instead.

Output: OUT/train/<wnid>/<wnid>_<n>.JPEG and OUT/val/<wnid>/ILSVRC2012_val_<i>.JPEG (the
ImageFolder layout `mlperf-run resnet --data OUT` reads); done markers in OUT/.prepare-imagenet/.

Resume: rerun the same command. A class is skipped when its marker exists, records the same
class-tar size and its folder holds the marker's number of images (the val set likewise); other
classes are redone, keeping each file that already exists with its tar entry's size. Files only
appear under their final names complete (written to .NAME.tmp-HOST-PID, then renamed).

Checks: every val image has a label, every label's synset has a class tar, no class is empty,
train/ and val/ have the same classes, each class folder holds its tar's images; and, unless
--subset, 1,000 classes, 1,281,167 train and 50,000 val images. Errors exit with status 2.

Example:
  mlperf-run data prepare-imagenet --train-tar ILSVRC2012_img_train.tar \\
      --val-tar ILSVRC2012_img_val.tar --val-labels LOC_val_solution.csv --out /data/imagenet";

#[derive(clap::Args, Debug, Clone)]
#[command(after_long_help = AFTER_HELP)]
pub struct PrepareImagenetArgs {
    /// ILSVRC2012_img_train.tar: a tar of class tars `<wnid>.tar`, each holding `<wnid>_<n>.JPEG`.
    #[arg(long, value_name = "FILE")]
    pub train_tar: PathBuf,
    /// ILSVRC2012_img_val.tar: a flat tar of ILSVRC2012_val_<8 digits>.JPEG.
    #[arg(long, value_name = "FILE")]
    pub val_tar: PathBuf,
    /// Validation labels: Kaggle's LOC_val_solution.csv, or the devkit's
    /// ILSVRC2012_validation_ground_truth.txt with --val-synsets (told apart by content).
    #[arg(long, value_name = "FILE")]
    pub val_labels: PathBuf,
    /// ILSVRC2012_ID to wnid mapping, needed with ILSVRC2012_validation_ground_truth.txt only:
    /// `ID wnid` lines (meta.mat as text), `wnid ID` lines (map_clsloc.txt), or wnids in ID
    /// order. Not Kaggle's LOC_synset_mapping.txt, which is sorted by wnid (see --help).
    #[arg(long, value_name = "FILE")]
    pub val_synsets: Option<PathBuf>,
    /// Output folder: gets train/ and val/ (ImageFolder) and the resume state .prepare-imagenet/.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The tars are a subset of ILSVRC2012: skip the check against the full set's counts
    /// (1,000 classes, 1,281,167 train, 50,000 val images); the consistency checks still run.
    #[arg(long)]
    pub subset: bool,
}

/// What to prepare (the library form of the arguments).
#[derive(Clone, Debug)]
pub struct PrepareSpec {
    pub train_tar: PathBuf,
    pub val_tar: PathBuf,
    pub val_labels: PathBuf,
    pub val_synsets: Option<PathBuf>,
    pub out: PathBuf,
    /// Skip the full-set count check.
    pub subset: bool,
    /// Stop after this many classes have been extracted in this call (not counting skipped
    /// ones), leaving the val set and the verification undone: an interruption, for tests.
    pub stop_after_train_classes: Option<usize>,
}

impl PrepareSpec {
    pub fn from_args(a: &PrepareImagenetArgs) -> PrepareSpec {
        PrepareSpec {
            train_tar: a.train_tar.clone(),
            val_tar: a.val_tar.clone(),
            val_labels: a.val_labels.clone(),
            val_synsets: a.val_synsets.clone(),
            out: a.out.clone(),
            subset: a.subset,
            stop_after_train_classes: None,
        }
    }
}

/// What a call did and found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PrepareSummary {
    /// Classes in OUT (train/ and val/ hold the same ones).
    pub classes: usize,
    /// Images in OUT/train and OUT/val, counted by the trainer's reader at the end.
    pub train_images: usize,
    pub val_images: usize,
    /// Classes skipped because their done marker said they were complete.
    pub classes_skipped: usize,
    /// The val set was skipped because its done marker said it was complete.
    pub val_skipped: bool,
    /// Images written by this call, and their bytes.
    pub files_written: usize,
    pub bytes_written: u64,
    /// Images found already in place (final name, right size) and kept.
    pub files_kept: usize,
    /// Stale temporary files of an interrupted run removed.
    pub temps_removed: usize,
    /// `stop_after_train_classes` stopped the call before the val set.
    pub stopped_early: bool,
    pub seconds: f64,
}

pub fn run_prepare_imagenet(args: PrepareImagenetArgs) -> Result<crate::util::ExitStatus> {
    let spec = PrepareSpec::from_args(&args);
    // Ctrl-C stops it between two images (exit 130); a rerun continues where it stopped
    crate::util::interrupt::install_with_notice(None);
    let s = prepare_imagenet(&spec)?;
    let mut out = crate::util::output::stdout();
    writeln!(out, "prepared {}", spec.out.display())?;
    writeln!(out, "  classes        {}", s.classes)?;
    writeln!(out, "  train images   {}", s.train_images)?;
    writeln!(out, "  val images     {}", s.val_images)?;
    writeln!(
        out,
        "  written        {} images ({:.1} MB)",
        s.files_written,
        s.bytes_written as f64 / 1e6
    )?;
    writeln!(
        out,
        "  skipped        {} classes already done{}, {} images already in place",
        s.classes_skipped,
        if s.val_skipped {
            " and the val set"
        } else {
            ""
        },
        s.files_kept
    )?;
    if s.temps_removed > 0 {
        writeln!(
            out,
            "  removed        {} temporary files of an interrupted run",
            s.temps_removed
        )?;
    }
    writeln!(
        out,
        "  check          {}",
        if spec.subset {
            "consistent (--subset: full-set counts not checked)"
        } else {
            "the full ILSVRC2012 set: 1000 classes, 1281167 train, 50000 val images"
        }
    )?;
    writeln!(out, "  seconds        {:.1}", s.seconds)?;
    Ok(crate::util::ExitStatus::Success)
}

// ----------------------------------------------------------------------------------------------
// Labels

/// Which label file was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum LabelFormat {
    /// Kaggle's LOC_val_solution.csv.
    KaggleCsv,
    /// The devkit's ILSVRC2012_validation_ground_truth.txt with a synset mapping.
    DevkitGroundTruth,
}

/// One val image's label and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValLabel {
    pub synset: String,
    /// 1-based line of the labels file.
    pub line: usize,
}

/// The val labels by image name without extension (`ILSVRC2012_val_00000001`).
#[derive(Clone, Debug)]
pub struct ValLabels {
    pub format: LabelFormat,
    pub file: PathBuf,
    pub by_image: HashMap<String, ValLabel>,
    /// sha256 over the labels file and the synsets file: the val done marker records it, so
    /// other labels redo the val set.
    pub digest: String,
}

/// True for a WordNet id as ImageNet names its synsets: `n` and 8 digits.
pub fn is_wnid(s: &str) -> bool {
    s.len() == 9 && s.starts_with('n') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

/// The text of the labels or synsets file `path` (given by `flag`, holding `what`); a FIFO, a
/// folder or a binary file is named as such (a FIFO was waited on for ever).
fn read_text(path: &Path, flag: &str, what: &str) -> Result<String> {
    let text = crate::util::tree::read_text_file(path, what).context(flag.to_string())?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(&text).to_string())
}

/// Lines numbered from 1, with trailing blank lines dropped and `\r` trimmed. A blank line
/// before the last non-blank one is an error (it would shift the line numbers that carry meaning).
fn numbered_lines<'a>(text: &'a str, path: &Path) -> Result<Vec<(usize, &'a str)>> {
    let mut lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .collect();
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    if let Some((n, _)) = lines.iter().find(|(_, l)| l.trim().is_empty()) {
        bail!(
            "{}:{n}: blank line; the file must hold one entry per line with no gaps",
            path.display()
        );
    }
    Ok(lines)
}

/// Read the val labels: `labels` is told apart by its content (Kaggle's LOC_val_solution.csv,
/// or the devkit's ILSVRC2012_validation_ground_truth.txt, which needs `synsets`).
pub fn read_val_labels(labels: &Path, synsets: Option<&Path>) -> Result<ValLabels> {
    let text = read_text(
        labels,
        "--val-labels",
        "val labels file (LOC_val_solution.csv or ILSVRC2012_validation_ground_truth.txt)",
    )?;
    let lines = numbered_lines(&text, labels)?;
    let Some(&(_, first)) = lines.first() else {
        bail!(
            "labels file {} is empty; give LOC_val_solution.csv or ILSVRC2012_validation_ground_truth.txt",
            labels.display()
        );
    };
    let first = first.trim();
    let first_field = first.split(',').next().unwrap_or("").trim();
    let first_word = first.split_whitespace().next().unwrap_or("");
    let format = if first_field.eq_ignore_ascii_case("ImageId")
        || (first.contains(',') && first_field.starts_with("ILSVRC2012_val_"))
    {
        LabelFormat::KaggleCsv
    } else if first_word.parse::<i64>().is_ok() && first.split_whitespace().count() == 1 {
        LabelFormat::DevkitGroundTruth
    } else if is_wnid(first_word) {
        bail!(
            "{}:1: `{first}` is a synset mapping line, not a val label: pass this file as \
             --val-synsets and the labels (LOC_val_solution.csv or \
             ILSVRC2012_validation_ground_truth.txt) as --val-labels",
            labels.display()
        );
    } else {
        bail!(
            "{}:1: cannot tell the labels format from `{first}`: expected Kaggle's \
             LOC_val_solution.csv (header `ImageId,PredictionString`) or the devkit's \
             ILSVRC2012_validation_ground_truth.txt (one ILSVRC2012_ID per line)",
            labels.display()
        );
    };
    let mut hasher = Sha256::new();
    hasher.update(text.as_bytes());
    let by_image = match format {
        LabelFormat::KaggleCsv => {
            if let Some(s) = synsets {
                bail!(
                    "--val-synsets {} is only for ILSVRC2012_validation_ground_truth.txt; {} \
                     (LOC_val_solution.csv) names the synsets itself: drop --val-synsets",
                    s.display(),
                    labels.display()
                );
            }
            parse_kaggle_csv(&lines, labels)?
        }
        LabelFormat::DevkitGroundTruth => {
            let Some(synsets) = synsets else {
                bail!(
                    "{} holds ILSVRC2012_IDs (the devkit's ILSVRC2012_validation_ground_truth.txt): \
                     pass the devkit's ID-to-wnid mapping with --val-synsets (see --help), or use \
                     Kaggle's LOC_val_solution.csv as --val-labels instead",
                    labels.display()
                );
            };
            let map_text = read_text(
                synsets,
                "--val-synsets",
                "synset mapping (the devkit's ID-to-wnid list)",
            )?;
            hasher.update([0u8]);
            hasher.update(map_text.as_bytes());
            let map = parse_synset_mapping(&map_text, synsets)?;
            parse_ground_truth(&lines, labels, &map, synsets)?
        }
    };
    Ok(ValLabels {
        format,
        file: labels.to_path_buf(),
        by_image,
        digest: format!("{:x}", hasher.finalize()),
    })
}

fn parse_kaggle_csv(lines: &[(usize, &str)], path: &Path) -> Result<HashMap<String, ValLabel>> {
    let mut out: HashMap<String, ValLabel> = HashMap::with_capacity(lines.len());
    for &(n, line) in lines {
        let (id, rest) = match line.split_once(',') {
            Some((id, rest)) => (id.trim(), rest.trim()),
            None => bail!(
                "{}:{n}: `{line}` is not a row `ImageId,PredictionString` (no comma)",
                path.display()
            ),
        };
        if n == lines[0].0 && id.eq_ignore_ascii_case("ImageId") {
            continue;
        }
        if id.is_empty() || id.contains(['/', '\\']) || id.contains(char::is_whitespace) {
            bail!(
                "{}:{n}: `{id}` is not an image id like ILSVRC2012_val_00000001",
                path.display()
            );
        }
        let synset = rest.split_whitespace().next().unwrap_or("");
        if !is_wnid(synset) {
            bail!(
                "{}:{n}: expected a synset (n and 8 digits) as the first word of \
                 PredictionString, found `{synset}`",
                path.display()
            );
        }
        if let Some(prev) = out.get(id) {
            bail!(
                "{}:{n}: {id} is labelled twice (also on line {})",
                path.display(),
                prev.line
            );
        }
        out.insert(
            id.to_string(),
            ValLabel {
                synset: synset.to_string(),
                line: n,
            },
        );
    }
    Ok(out)
}

/// An ILSVRC2012_ID: an integer 1..=1000.
fn parse_id(word: &str, path: &Path, n: usize) -> Result<u32> {
    let id: i64 = word.parse().map_err(|_| {
        anyhow!(
            "{}:{n}: `{word}` is not an ILSVRC2012_ID (an integer 1..1000)",
            path.display()
        )
    })?;
    if !(1..=IMAGENET_CLASSES as i64).contains(&id) {
        bail!(
            "{}:{n}: ILSVRC2012_ID {id} is outside 1..{IMAGENET_CLASSES}",
            path.display()
        );
    }
    Ok(id as u32)
}

/// The devkit mapping ILSVRC2012_ID -> wnid, in any of the forms described in `--help`.
pub fn parse_synset_mapping(text: &str, path: &Path) -> Result<BTreeMap<u32, String>> {
    #[derive(PartialEq, Clone, Copy, Debug)]
    enum Form {
        IdWnid,
        WnidId,
        List,
    }
    let lines = numbered_lines(text, path)?;
    if lines.is_empty() {
        bail!("synset mapping {} is empty", path.display());
    }
    let mut form = None;
    let mut by_id: BTreeMap<u32, (String, usize)> = BTreeMap::new();
    let mut by_wnid: HashMap<String, usize> = HashMap::new();
    let mut list = Vec::new();
    for (i, &(n, line)) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (w0, w1) = (words[0], words.get(1).copied().unwrap_or(""));
        let this = if is_wnid(w1) && w0.parse::<i64>().is_ok() {
            Form::IdWnid
        } else if is_wnid(w0) && w1.parse::<i64>().is_ok() {
            Form::WnidId
        } else if is_wnid(w0) {
            Form::List
        } else {
            bail!(
                "{}:{n}: `{line}` is not a synset mapping line (`ID wnid`, `wnid ID` or `wnid ...`)",
                path.display()
            );
        };
        let form = *form.get_or_insert(this);
        if this != form {
            bail!(
                "{}:{n}: `{line}` is not in the form of line {} ({form:?}); one file holds one form",
                path.display(),
                lines[0].0
            );
        }
        let (id, wnid) = match form {
            Form::IdWnid => (parse_id(w0, path, n)?, w1),
            Form::WnidId => (parse_id(w1, path, n)?, w0),
            Form::List => {
                list.push(w0);
                ((i + 1) as u32, w0)
            }
        };
        if id as usize > IMAGENET_CLASSES {
            bail!(
                "{}:{n}: line {} of a wnid list would be ILSVRC2012_ID {id}, outside 1..{IMAGENET_CLASSES}",
                path.display(),
                i + 1
            );
        }
        if let Some((_, prev)) = by_id.get(&id) {
            bail!(
                "{}:{n}: ILSVRC2012_ID {id} is mapped twice (also on line {prev})",
                path.display()
            );
        }
        if let Some(prev) = by_wnid.get(wnid) {
            bail!(
                "{}:{n}: {wnid} is mapped twice (also on line {prev})",
                path.display()
            );
        }
        by_wnid.insert(wnid.to_string(), n);
        by_id.insert(id, (wnid.to_string(), n));
    }
    if form == Some(Form::List) && list.len() > 1 && list.windows(2).all(|w| w[0] < w[1]) {
        bail!(
            "{}: these {} wnids are sorted by wnid, as in Kaggle's LOC_synset_mapping.txt, but \
             ILSVRC2012_validation_ground_truth.txt counts synsets in the devkit's meta.mat order, \
             which is not sorted (ID 1 is n02119789): reading this list as ID order would \
             mislabel the val images. Use Kaggle's LOC_val_solution.csv as --val-labels (no \
             --val-synsets), or give the devkit mapping as `ID wnid` lines",
            path.display(),
            list.len()
        );
    }
    Ok(by_id.into_iter().map(|(id, (w, _))| (id, w)).collect())
}

fn parse_ground_truth(
    lines: &[(usize, &str)],
    path: &Path,
    map: &BTreeMap<u32, String>,
    map_path: &Path,
) -> Result<HashMap<String, ValLabel>> {
    let mut out = HashMap::with_capacity(lines.len());
    for &(n, line) in lines {
        let word = line.trim();
        if word.split_whitespace().count() != 1 {
            bail!(
                "{}:{n}: `{line}` is not one ILSVRC2012_ID (the ground truth holds one integer per line)",
                path.display()
            );
        }
        let id = parse_id(word, path, n)?;
        let Some(wnid) = map.get(&id) else {
            bail!(
                "{}:{n}: ILSVRC2012_ID {id} is not in the synset mapping {}",
                path.display(),
                map_path.display()
            );
        };
        out.insert(
            format!("ILSVRC2012_val_{n:08}"),
            ValLabel {
                synset: wnid.clone(),
                line: n,
            },
        );
    }
    Ok(out)
}

// ----------------------------------------------------------------------------------------------
// Tars

/// One regular file in a tar: its name (last path component), where its data starts, its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TarMember {
    pub name: String,
    pub pos: u64,
    pub size: u64,
}

fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK) * BLOCK
}

/// A safe point between two images ([`crate::util::interrupt::stop_if_requested`]): every
/// image already under its final name is complete, and so is every class with its done marker.
fn stop_point(out: &Path, at: &str) -> Result<()> {
    crate::util::interrupt::stop_if_requested(|| {
        format!(
            "interrupted: data prepare-imagenet stopped at {at}: nothing already written was lost \
             (each image in {} is complete, and each class marked done); rerun the same command \
             to continue where it stopped",
            out.display()
        )
    })
}

fn redo_hint() -> &'static str {
    "re-download or re-copy it, then rerun (finished classes are kept)"
}

/// List the regular files of the tar `path` by their headers, seeking over the data. Errors
/// name the tar (and the entry) when a header is corrupt, an entry's data runs past the end of
/// the file, or the end-of-archive block is missing (a copy cut at a block boundary).
pub fn list_tar(path: &Path) -> Result<Vec<TarMember>> {
    let file = File::open(path).with_context(|| format!("cannot open tar {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.is_dir() {
        bail!(
            "{} is a folder, not a tar file: give the downloaded .tar itself",
            path.display()
        );
    }
    let len = meta.len();
    let mut archive = tar::Archive::new(file);
    let mut members = Vec::new();
    let mut end = 0u64;
    let entries = archive
        .entries_with_seek()
        .with_context(|| format!("cannot read tar {}", path.display()))?;
    for entry in entries {
        let after = members
            .last()
            .map(|m: &TarMember| format!(" after entry {}", m.name))
            .unwrap_or_default();
        let entry = entry.map_err(|e| {
            anyhow!(
                "tar {} is corrupt or truncated{after} (at byte {end}): {e}; {}",
                path.display(),
                redo_hint()
            )
        })?;
        let raw = entry.path_bytes();
        let full = String::from_utf8_lossy(&raw).into_owned();
        let (pos, size) = (entry.raw_file_position(), entry.size());
        end = pos + padded(size);
        if pos + size > len {
            bail!(
                "tar {} is truncated: entry {full} needs bytes up to {} but the file has {len}; {}",
                path.display(),
                pos + size,
                redo_hint()
            );
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if !kind.is_file() {
            bail!(
                "tar {} holds {full}, which is not a regular file ({kind:?}); is this the right tar?",
                path.display()
            );
        }
        let name = full.rsplit('/').next().unwrap_or("").to_string();
        if name.is_empty() || name.starts_with('.') {
            bail!(
                "tar {} holds {full}, which has no usable file name; is this the right tar?",
                path.display()
            );
        }
        members.push(TarMember { name, pos, size });
    }
    if len < end + BLOCK {
        bail!(
            "tar {} is truncated: it ends at byte {len} without the end-of-archive block after \
             its last entry{}; {}",
            path.display(),
            members
                .last()
                .map(|m| format!(" ({})", m.name))
                .unwrap_or_default(),
            redo_hint()
        );
    }
    Ok(members)
}

/// Counts the bytes read through it (to find where a streamed tar stopped).
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

// ----------------------------------------------------------------------------------------------
// Output state

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct DoneMarker {
    /// Size of the class tar (train) or of the val tar (val).
    tar_bytes: u64,
    images: usize,
    /// Val only: the labels' digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels_sha256: Option<String>,
}

fn read_marker(path: &Path) -> Option<DoneMarker> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_marker(path: &Path, marker: &DoneMarker) -> Result<()> {
    let text = serde_json::to_string(marker).expect("marker serializes");
    fsutil::write_atomic(path, text.as_bytes())
}

/// The paths of the entries of `dir` as the listing reads them (none when `dir` does not
/// exist); a failed read names `dir`.
fn dir_paths(dir: &Path) -> Result<impl Iterator<Item = Result<PathBuf>> + '_> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => Some(e),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    Ok(entries.into_iter().flatten().map(move |entry| {
        Ok(entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path())
    }))
}

/// JPEG files directly in `dir` (0 when it does not exist).
fn count_jpegs(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for path in dir_paths(dir)? {
        let path = path?;
        if is_jpeg_name(&path) && path.is_file() {
            n += 1;
        }
    }
    Ok(n)
}

/// Flush what this run wrote to the file system holding `dir`, before a done marker says so.
fn sync_filesystem(dir: &Path) -> Result<()> {
    let f = File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs takes a valid open descriptor, which `f` holds for the call.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot sync the file system of {}", dir.display()));
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        drop(f);
        // SAFETY: sync has no arguments and cannot fail.
        unsafe { libc::sync() };
    }
    Ok(())
}

/// A line on stderr at most every few seconds.
struct Progress {
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new() -> Progress {
        let now = Instant::now();
        Progress {
            start: now,
            last: now,
        }
    }

    fn tick(&mut self, line: impl FnOnce() -> String) {
        if self.last.elapsed() >= Duration::from_secs(10) {
            self.last = Instant::now();
            eprintln!(
                "prepare-imagenet: {} ({:.0} s)",
                line(),
                self.start.elapsed().as_secs_f64()
            );
        }
    }
}

// ----------------------------------------------------------------------------------------------
// The work

/// A val image to write, with its label (the plan holds them in val-tar order).
type ValItem<'a> = (&'a TarMember, &'a ValLabel);

/// Prepare `spec.out` from the tars; see the module documentation for the steps and the resume
/// rule. Errors say what is wrong and what to do.
pub fn prepare_imagenet(spec: &PrepareSpec) -> Result<PrepareSummary> {
    let start = Instant::now();
    let mut summary = PrepareSummary::default();

    // 1. Labels, 2. both tars' listings, checked against each other.
    let labels = read_val_labels(&spec.val_labels, spec.val_synsets.as_deref())?;
    let classes = list_train_classes(&spec.train_tar)?;
    let class_set: BTreeSet<&str> = classes.iter().map(|(w, _)| w.as_str()).collect();
    let val_members = list_tar(&spec.val_tar)?;
    let val_plan = plan_val(spec, &labels, &class_set, &val_members)?;
    check_val_covers_classes(spec, &class_set, &val_plan)?;
    if !spec.subset {
        check_full_tars(spec, classes.len(), val_members.len())?;
    }
    let state = make_state_dir(&spec.out, &mut summary)?;

    // 3. Train classes, streamed one class tar at a time.
    let mut progress = Progress::new();
    let Some(expected_train) =
        extract_train_classes(spec, &classes, &state, &mut summary, &mut progress)?
    else {
        summary.stopped_early = true;
        summary.seconds = start.elapsed().as_secs_f64();
        return Ok(summary);
    };

    // 4. The val set.
    extract_val_set(
        spec,
        &labels,
        &val_plan,
        &state,
        &mut summary,
        &mut progress,
    )?;

    // 5. Verify with the trainer's reader.
    verify_output(spec, &val_plan, &expected_train, &state, &mut summary)?;
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}

/// Pair each val-tar image with its label, refusing a non-JPEG or repeated member, an image
/// without a label and a label that is not a train class.
fn plan_val<'a>(
    spec: &PrepareSpec,
    labels: &'a ValLabels,
    class_set: &BTreeSet<&str>,
    val_members: &'a [TarMember],
) -> Result<Vec<ValItem<'a>>> {
    let mut val_plan: Vec<ValItem> = Vec::with_capacity(val_members.len());
    let mut val_names = HashSet::new();
    for m in val_members {
        if !is_jpeg_name(Path::new(&m.name)) {
            bail!(
                "val tar {} holds {}, which is not a .JPEG image; is this ILSVRC2012_img_val.tar?",
                spec.val_tar.display(),
                m.name
            );
        }
        if !val_names.insert(m.name.as_str()) {
            bail!(
                "val tar {} holds {} twice; re-download it",
                spec.val_tar.display(),
                m.name
            );
        }
        let stem = Path::new(&m.name)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("");
        let Some(label) = labels.by_image.get(stem) else {
            bail!(
                "val image {} (in {}) has no label in {}: give the labels of this val set \
                 (LOC_val_solution.csv, or ILSVRC2012_validation_ground_truth.txt with --val-synsets)",
                m.name,
                spec.val_tar.display(),
                labels.file.display()
            );
        };
        if !class_set.contains(label.synset.as_str()) {
            bail!(
                "{}:{}: val image {} is labelled {}, which is not a train class (no {}.tar in {}): \
                 wrong labels file or synset mapping?",
                labels.file.display(),
                label.line,
                m.name,
                label.synset,
                label.synset,
                spec.train_tar.display()
            );
        }
        val_plan.push((m, label));
    }
    Ok(val_plan)
}

/// The classes of the val images, in order.
fn val_classes<'a>(val_plan: &[ValItem<'a>]) -> BTreeSet<&'a str> {
    val_plan.iter().map(|(_, l)| l.synset.as_str()).collect()
}

/// Every train class must have a val image (the trainer needs the same classes in both).
fn check_val_covers_classes(
    spec: &PrepareSpec,
    class_set: &BTreeSet<&str>,
    val_plan: &[ValItem],
) -> Result<()> {
    let val_classes = val_classes(val_plan);
    let without_val: Vec<&&str> = class_set.difference(&val_classes).collect();
    if !without_val.is_empty() {
        bail!(
            "{} train class(es) have no val image in {}: {}{}; the trainer needs the same classes \
             in train/ and val/ (is this the val tar and labels file of this train tar?)",
            without_val.len(),
            spec.val_tar.display(),
            without_val
                .iter()
                .take(5)
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if without_val.len() > 5 { ", ..." } else { "" }
        );
    }
    Ok(())
}

/// Without --subset, the tars must hold the full set's classes and val images.
fn check_full_tars(spec: &PrepareSpec, classes: usize, val_images: usize) -> Result<()> {
    if classes != IMAGENET_CLASSES {
        bail!(
            "{} holds {} class tars; the full ILSVRC2012 train set has {IMAGENET_CLASSES}: \
             pass --subset if this is a subset on purpose, else re-download it",
            spec.train_tar.display(),
            classes
        );
    }
    if val_images as u64 != IMAGENET_VAL_SAMPLES {
        bail!(
            "{} holds {} images; the full ILSVRC2012 val set has {IMAGENET_VAL_SAMPLES}: \
             pass --subset if this is a subset on purpose, else re-download it",
            spec.val_tar.display(),
            val_images
        );
    }
    Ok(())
}

/// Create `out`'s state folder (removing an interrupted run's temporary files there); returns
/// its path.
fn make_state_dir(out: &Path, summary: &mut PrepareSummary) -> Result<PathBuf> {
    if out.exists() && !out.is_dir() {
        bail!("--out {} exists and is not a folder", out.display());
    }
    let state = out.join(STATE_DIR);
    std::fs::create_dir_all(state.join("train"))
        .with_context(|| format!("cannot create {}", state.display()))?;
    summary.temps_removed +=
        fsutil::remove_stale_temps(&state)? + fsutil::remove_stale_temps(&state.join("train"))?;
    Ok(state)
}

/// Extract the class tars not done yet (step 3); returns each class's image count, or None
/// when `stop_after_train_classes` stopped it.
fn extract_train_classes(
    spec: &PrepareSpec,
    classes: &[(String, TarMember)],
    state: &Path,
    summary: &mut PrepareSummary,
    progress: &mut Progress,
) -> Result<Option<BTreeMap<String, usize>>> {
    let mut train_file = File::open(&spec.train_tar)
        .with_context(|| format!("cannot open {}", spec.train_tar.display()))?;
    let mut expected_train: BTreeMap<String, usize> = BTreeMap::new();
    let mut extracted = 0usize;
    for (i, (wnid, member)) in classes.iter().enumerate() {
        let dir = spec.out.join("train").join(wnid);
        let marker_path = state.join("train").join(format!("{wnid}.done"));
        if let Some(m) = read_marker(&marker_path) {
            if m.tar_bytes == member.size && count_jpegs(&dir)? == m.images {
                expected_train.insert(wnid.clone(), m.images);
                summary.classes_skipped += 1;
                continue;
            }
        }
        if spec
            .stop_after_train_classes
            .is_some_and(|n| extracted >= n)
        {
            return Ok(None);
        }
        summary.temps_removed += fsutil::remove_stale_temps(&dir)?;
        let images = extract_class(
            &spec.train_tar,
            &mut train_file,
            member,
            wnid,
            &dir,
            summary,
        )?;
        sync_filesystem(&dir)?;
        write_marker(
            &marker_path,
            &DoneMarker {
                tar_bytes: member.size,
                images,
                labels_sha256: None,
            },
        )?;
        expected_train.insert(wnid.clone(), images);
        extracted += 1;
        progress.tick(|| {
            format!(
                "train {}/{} classes, {} images written",
                i + 1,
                classes.len(),
                summary.files_written
            )
        });
    }
    Ok(Some(expected_train))
}

/// Write the val images (step 4) unless the val done marker says they are complete.
fn extract_val_set(
    spec: &PrepareSpec,
    labels: &ValLabels,
    val_plan: &[ValItem],
    state: &Path,
    summary: &mut PrepareSummary,
    progress: &mut Progress,
) -> Result<()> {
    let val_dir = spec.out.join("val");
    let val_marker_path = state.join("val.done");
    let val_len = std::fs::metadata(&spec.val_tar)
        .with_context(|| format!("cannot stat {}", spec.val_tar.display()))?
        .len();
    let val_done = read_marker(&val_marker_path).is_some_and(|m| {
        m.tar_bytes == val_len
            && m.images == val_plan.len()
            && m.labels_sha256.as_deref() == Some(labels.digest.as_str())
    }) && count_val_images(&val_dir)? == val_plan.len();
    if val_done {
        summary.val_skipped = true;
        return Ok(());
    }
    for class in &val_classes(val_plan) {
        summary.temps_removed += fsutil::remove_stale_temps(&val_dir.join(class))?;
    }
    write_val_images(spec, val_plan, &val_dir, summary, progress)?;
    std::fs::create_dir_all(&val_dir)
        .with_context(|| format!("cannot create {}", val_dir.display()))?;
    sync_filesystem(&val_dir)?;
    write_marker(
        &val_marker_path,
        &DoneMarker {
            tar_bytes: val_len,
            images: val_plan.len(),
            labels_sha256: Some(labels.digest.clone()),
        },
    )
}

/// Copy each val image out of the val tar into `val_dir/<synset>/`, keeping those already in
/// place with the right size.
fn write_val_images(
    spec: &PrepareSpec,
    val_plan: &[ValItem],
    val_dir: &Path,
    summary: &mut PrepareSummary,
    progress: &mut Progress,
) -> Result<()> {
    let mut file = File::open(&spec.val_tar)
        .with_context(|| format!("cannot open {}", spec.val_tar.display()))?;
    let mut buf = Vec::new();
    for (k, (m, label)) in val_plan.iter().enumerate() {
        let dest = val_dir.join(&label.synset).join(&m.name);
        if std::fs::metadata(&dest).is_ok_and(|d| d.is_file() && d.len() == m.size) {
            summary.files_kept += 1;
            continue;
        }
        stop_point(
            &spec.out,
            &format!("val image {} of {}", k + 1, val_plan.len()),
        )?;
        buf.resize(m.size as usize, 0);
        file.seek(SeekFrom::Start(m.pos))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(|e| {
                anyhow!(
                    "cannot read {} from val tar {}: {e}; {}",
                    m.name,
                    spec.val_tar.display(),
                    redo_hint()
                )
            })?;
        fsutil::write_atomic_unsynced(&dest, &buf)?;
        summary.files_written += 1;
        summary.bytes_written += m.size;
        progress.tick(|| format!("val {}/{} images", k + 1, val_plan.len()));
    }
    Ok(())
}

/// Open `spec.out` with the trainer's reader (step 5) and check its classes and counts against
/// the tars (and, without --subset, the full set); fills the summary's counts.
fn verify_output(
    spec: &PrepareSpec,
    val_plan: &[ValItem],
    expected_train: &BTreeMap<String, usize>,
    state: &Path,
    summary: &mut PrepareSummary,
) -> Result<()> {
    let out = &spec.out;
    let mut expected_val: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, l) in val_plan {
        *expected_val.entry(l.synset.as_str()).or_default() += 1;
    }
    let set = ImagenetDir::open(out).with_context(|| {
        format!(
            "the trainer cannot read {} as ImageNet (train/ and val/ ImageFolders)",
            out.display()
        )
    })?;
    check_val_names_unique(&set.val, &out.join("val"), &state.join("val.done"))?;
    check_folder(&set.train, expected_train, state, "train")?;
    let expected_val: BTreeMap<String, usize> = expected_val
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    check_folder(&set.val, &expected_val, state, "val")?;
    summary.classes = set.num_classes();
    summary.train_images = set.train.len();
    summary.val_images = set.val.len();
    if !spec.subset
        && (summary.classes != IMAGENET_CLASSES
            || summary.train_images as u64 != IMAGENET_TRAIN_SAMPLES
            || summary.val_images as u64 != IMAGENET_VAL_SAMPLES)
    {
        bail!(
            "{} holds {} classes, {} train and {} val images; the full ILSVRC2012 set has \
             {IMAGENET_CLASSES}, {IMAGENET_TRAIN_SAMPLES} and {IMAGENET_VAL_SAMPLES}: are the \
             tars complete? (pass --subset if they are a subset on purpose)",
            out.display(),
            summary.classes,
            summary.train_images,
            summary.val_images
        );
    }
    Ok(())
}

/// No val image may be in two classes (`val_dir` and `val_marker_path` are for the message).
fn check_val_names_unique(
    val: &crate::data::imagenet::ImageFolder,
    val_dir: &Path,
    val_marker_path: &Path,
) -> Result<()> {
    let mut seen: HashMap<&std::ffi::OsStr, &Path> = HashMap::new();
    for s in &val.samples {
        let name = s.path.file_name().unwrap_or_default();
        if let Some(prev) = seen.insert(name, &s.path) {
            bail!(
                "{} and {} are the same val image in two classes (left by a run with other \
                 labels?): remove {} and {} and rerun",
                prev.display(),
                s.path.display(),
                val_dir.display(),
                val_marker_path.display()
            );
        }
    }
    Ok(())
}

/// The class tars of the train tar, in tar order: (wnid, member).
fn list_train_classes(train_tar: &Path) -> Result<Vec<(String, TarMember)>> {
    let mut seen = HashSet::new();
    let mut classes = Vec::new();
    for m in list_tar(train_tar)? {
        let wnid = m.name.strip_suffix(".tar").unwrap_or("");
        if !is_wnid(wnid) {
            bail!(
                "train tar {} holds {}, not a class tar <wnid>.tar (like n01440764.tar); is this \
                 ILSVRC2012_img_train.tar?",
                train_tar.display(),
                m.name
            );
        }
        if !seen.insert(wnid.to_string()) {
            bail!(
                "train tar {} holds {} twice; re-download it",
                train_tar.display(),
                m.name
            );
        }
        classes.push((wnid.to_string(), m));
    }
    if classes.is_empty() {
        bail!(
            "train tar {} holds no class tars; is this ILSVRC2012_img_train.tar?",
            train_tar.display()
        );
    }
    Ok(classes)
}

/// Stream the class tar `member` of `train_tar` into `dir`; returns its number of images.
fn extract_class(
    train_tar: &Path,
    file: &mut File,
    member: &TarMember,
    wnid: &str,
    dir: &Path,
    summary: &mut PrepareSummary,
) -> Result<usize> {
    let inner = &member.name;
    let what = || format!("class tar {inner} in {}", train_tar.display());
    file.seek(SeekFrom::Start(member.pos))
        .with_context(|| format!("cannot read {}", what()))?;
    let reader = Counting {
        inner: BufReader::with_capacity(1 << 18, (&mut *file).take(member.size)),
        count: 0,
    };
    let mut archive = tar::Archive::new(reader);
    let mut names: HashSet<String> = HashSet::new();
    let mut end = 0u64;
    let mut buf = Vec::new();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    {
        let entries = archive
            .entries()
            .with_context(|| format!("cannot read {}", what()))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| {
                anyhow!(
                    "{} is corrupt or truncated (at byte {end} of it): {e}; {}",
                    what(),
                    redo_hint()
                )
            })?;
            let full = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let size = entry.size();
            end = entry.raw_file_position() + padded(size);
            let kind = entry.header().entry_type();
            if kind.is_dir() {
                continue;
            }
            let name = full.rsplit('/').next().unwrap_or("").to_string();
            if !kind.is_file() || name.starts_with('.') || !is_jpeg_name(Path::new(&name)) {
                bail!(
                    "{} holds {full}, which is not a .JPEG image; is this ILSVRC2012_img_train.tar?",
                    what()
                );
            }
            if !names.insert(name.clone()) {
                bail!("{} holds {name} twice; {}", what(), redo_hint());
            }
            let dest = dir.join(&name);
            if std::fs::metadata(&dest).is_ok_and(|d| d.is_file() && d.len() == size) {
                summary.files_kept += 1;
                continue;
            }
            stop_point(
                dir.ancestors().nth(2).unwrap_or(dir),
                &format!("train class {wnid}"),
            )?;
            buf.clear();
            entry
                .read_to_end(&mut buf)
                .map_err(|e| anyhow!("cannot read {name} from {}: {e}; {}", what(), redo_hint()))?;
            if buf.len() as u64 != size {
                bail!(
                    "{} is truncated: {name} has {} of its {size} bytes; {}",
                    what(),
                    buf.len(),
                    redo_hint()
                );
            }
            fsutil::write_atomic_unsynced(&dest, &buf)?;
            summary.files_written += 1;
            summary.bytes_written += size;
        }
    }
    let consumed = archive.into_inner().count;
    if consumed < end + BLOCK {
        bail!(
            "{} is truncated: it ends without the end-of-archive block after its last entry; {}",
            what(),
            redo_hint()
        );
    }
    if names.is_empty() {
        bail!(
            "{} holds no images; a class folder may not be empty ({wnid}): is the train tar complete?",
            what()
        );
    }
    Ok(names.len())
}

/// JPEG files in the class folders of `val_dir`.
fn count_val_images(val_dir: &Path) -> Result<usize> {
    let mut n = 0;
    for path in dir_paths(val_dir)? {
        let path = path?;
        if path.is_dir() {
            n += count_jpegs(&path)?;
        }
    }
    Ok(n)
}

/// `folder`'s classes and per-class image counts must be those of the tars.
fn check_folder(
    folder: &crate::data::imagenet::ImageFolder,
    expected: &BTreeMap<String, usize>,
    state: &Path,
    split: &str,
) -> Result<()> {
    let mut found: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &folder.samples {
        *found
            .entry(folder.classes[s.label as usize].as_str())
            .or_default() += 1;
    }
    for class in &folder.classes {
        if !expected.contains_key(class) {
            bail!(
                "{} is not a class of the tars: remove it (left from another data set?)",
                folder.root.join(class).display()
            );
        }
    }
    for (class, &want) in expected {
        let have = found.get(class.as_str()).copied().unwrap_or(0);
        if have != want {
            let redo = if split == "train" {
                state.join("train").join(format!("{class}.done"))
            } else {
                state.join("val.done")
            };
            bail!(
                "{} holds {have} images but the tars give it {want}: remove {} and rerun \
                 (extra files there: remove them too)",
                folder.root.join(class).display(),
                redo.display()
            );
        }
    }
    Ok(())
}
