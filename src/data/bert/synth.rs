//! `mlperf-run data synth-bert`: BERT pre-training shards in the reference HDF5 layout, made
//! from real English prose that a Debian package ships.
//!
//! Text: by default the history and licence text of Python, `/usr/lib/python3.X/LICENSE.txt`,
//! shipped by Debian's `libpython3.X-stdlib` package (any plain-text file can be given with
//! `--source`). Paragraphs are joined, tables and rules skipped, and the text split into
//! sentences of 5 to 40 words; the first `--sentences` of them form one "document".
//!
//! Honest scope: the tiny presets use a few dozen sentences, sampled over and over, so a tiny
//! model can memorise them and pass MLPerf's masked-LM accuracy target (benchmarks/bert) in minutes
//! on a CPU.
//! The eval set is drawn from the same sentences with different pairings and masks. Such
//! results prove the pipeline (data format, masking, model, optimizer, logging), not the model.
//!
//! Vocabulary (`vocab.txt`, one token a line, id = line number): `[PAD] [UNK] [CLS] [SEP] [MASK]`
//! (ids 0-4), then every character of the corpus as a word-initial piece and as a `##`
//! continuation piece, then whole words by descending frequency up to `--vocab-size`.
//! Text is tokenised like BERT's uncased tokenizer: lower-cased, split on whitespace and
//! punctuation, then greedy longest-match-first WordPiece.
//!
//! Samples follow the reference's `create_pretraining_data.py`: `[CLS] A [SEP] B [SEP]` with B
//! the next sentence (label 0) or, with probability 1/2, a random other sentence (label 1); the
//! longer segment is truncated from a random end until the pair fits; 15% of the tokens
//! (rounded, at least 1, at most `--max-predictions`, 76 by default) are chosen among the non-special
//! tokens; of these 80% become `[MASK]`, 10% stay, 10% become a random vocabulary token.
//!
//! `--lengths realistic` fills sequences from documents instead, as the reference does, so that
//! about half of the tokens are padding at `--seq-len 512` (see [`super::realistic`]); the
//! default `pairs` keeps one sentence pair per sequence (mostly short).

pub use super::instance::{make_instance, pair_instance, Instance, CLS, MASK, PAD, SEP, UNK};
use super::DATASETS;
use crate::data::rng::Rng;
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Options of `data synth-bert`.
#[derive(clap::Args, Debug, Clone)]
pub struct SynthBertArgs {
    /// Output directory (gets train/, eval/ and vocab.txt).
    #[arg(long)]
    pub out: PathBuf,
    /// Plain English text to build the corpus from (default: Python's LICENSE.txt from Debian's
    /// libpython3.X-stdlib).
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// Distinct sentences used (small = memorisable, for tiny presets).
    #[arg(long, default_value_t = 24)]
    pub sentences: usize,
    #[arg(long, default_value_t = 4096)]
    pub train_samples: usize,
    #[arg(long, default_value_t = 512)]
    pub eval_samples: usize,
    /// Training shards to split the samples into.
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Maximum sequence length (the reference's phase 2: 512).
    #[arg(long, default_value_t = 64)]
    pub seq_len: usize,
    /// Maximum predictions per sequence (the reference: 76).
    #[arg(long, default_value_t = 76)]
    pub max_predictions: usize,
    /// Largest vocabulary (specials + character pieces + words).
    #[arg(long, default_value_t = 30522)]
    pub vocab_size: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sequence lengths: `pairs` (one sentence pair per sequence; short, for the tiny presets)
    /// or `realistic` (filled from documents as the reference's create_pretraining_data.py
    /// does, 10% short targets: about half of the tokens are padding at --seq-len 512).
    #[arg(long, value_enum, default_value_t = Lengths::Pairs)]
    pub lengths: Lengths,
}

impl SynthBertArgs {
    /// The command's defaults (`data synth-bert --out OUT`), for callers that set a few fields:
    /// `SynthBertArgs { seq_len: 512, ..SynthBertArgs::new(out) }`.
    pub fn new(out: &Path) -> SynthBertArgs {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: SynthBertArgs,
        }
        let out = out.as_os_str();
        <Command as clap::Parser>::parse_from([
            std::ffi::OsStr::new("synth-bert"),
            "--out".as_ref(),
            out,
        ])
        .args
    }
}

/// How sequences are filled (`--lengths`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lengths {
    /// `[CLS] A [SEP] B [SEP]` with A and B single sentences.
    #[default]
    Pairs,
    /// Filled towards `seq_len` from documents, as the reference's create_pretraining_data.py
    /// fills them (`data::bert::realistic`).
    Realistic,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    pub source: PathBuf,
    pub sentences: usize,
    pub vocab_size: usize,
    pub train_samples: usize,
    pub eval_samples: usize,
    /// Fraction of the training set's token slots that are padding.
    pub padding_fraction: f64,
}

/// The default text source: Python's LICENSE.txt (Debian: libpython3.X-stdlib).
pub fn default_source() -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .map(|p| p.join("LICENSE.txt"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop().with_context(|| {
        "no /usr/lib/python3.*/LICENSE.txt (Debian package libpython3.X-stdlib); pass --source FILE with English text"
    })
}

/// Sentences of 5..=40 words from plain text (paragraphs joined; tables and rules skipped).
pub fn extract_sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for para in text.split("\n\n") {
        let lines: Vec<&str> = para
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty())
            .collect();
        let table_like = lines.iter().any(|l| l.trim().contains("   "));
        let rule_like = lines
            .iter()
            .any(|l| l.chars().all(|c| "=-_*".contains(c) || c.is_whitespace()));
        if lines.is_empty() || table_like || rule_like {
            continue;
        }
        let joined = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
        let mut cur = String::new();
        let chars: Vec<char> = joined.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            cur.push(c);
            // a sentence ends at . ? or ! followed by whitespace, then a capital, "(" or '"'
            let next = chars[i + 1..].iter().find(|n| !n.is_whitespace());
            let end = matches!(c, '.' | '?' | '!')
                && chars.get(i + 1).is_none_or(|n| n.is_whitespace())
                && next.is_none_or(|n| n.is_uppercase() || *n == '(' || *n == '"');
            if end {
                push_sentence(&mut out, &cur);
                cur.clear();
            }
        }
        push_sentence(&mut out, &cur);
    }
    out
}

fn push_sentence(out: &mut Vec<String>, s: &str) {
    let s = s.trim();
    let words = s.split_whitespace().count();
    let letters = s.chars().filter(|c| c.is_alphabetic()).count();
    if (5..=40).contains(&words) && letters * 2 > s.len() && !s.contains("http") {
        out.push(s.to_string());
    }
}

/// BERT's basic tokenizer (uncased): lower-case, split on whitespace and punctuation.
pub fn basic_tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_whitespace() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else if c.is_ascii_punctuation() || (!c.is_alphanumeric() && !c.is_whitespace()) {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A WordPiece vocabulary.
#[derive(Debug, Clone)]
pub struct Vocab {
    pub tokens: Vec<String>,
    index: HashMap<String, i32>,
}

impl Vocab {
    /// Specials, character pieces, then words by frequency (ties by first appearance).
    pub fn build(sentences: &[Vec<String>], max_size: usize) -> Vocab {
        let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
        let mut chars: Vec<char> = sentences.iter().flatten().flat_map(|w| w.chars()).collect();
        chars.sort();
        chars.dedup();
        for c in &chars {
            tokens.push(c.to_string());
        }
        for c in &chars {
            tokens.push(format!("##{c}"));
        }
        let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
        for (i, w) in sentences.iter().flatten().enumerate() {
            counts.entry(w.as_str()).or_insert((0, i)).0 += 1;
        }
        let mut words: Vec<(&str, (usize, usize))> = counts
            .into_iter()
            .filter(|(w, _)| w.chars().count() > 1)
            .collect();
        words.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
        for (w, _) in words {
            if tokens.len() >= max_size {
                break;
            }
            tokens.push(w.to_string());
        }
        Vocab::from_tokens(tokens)
    }

    pub fn from_tokens(tokens: Vec<String>) -> Vocab {
        let index = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as i32))
            .collect();
        Vocab { tokens, index }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Greedy longest-match-first WordPiece of one basic token; `[UNK]` if it cannot be split.
    pub fn wordpiece(&self, word: &str) -> Vec<i32> {
        let chars: Vec<char> = word.chars().collect();
        let mut out = Vec::new();
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while end > start {
                let piece: String = chars[start..end].iter().collect();
                let key = if start > 0 {
                    format!("##{piece}")
                } else {
                    piece
                };
                if let Some(&id) = self.index.get(&key) {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => out.push(id),
                None => return vec![UNK],
            }
            start = end;
        }
        out
    }

    pub fn encode(&self, words: &[String]) -> Vec<i32> {
        words.iter().flat_map(|w| self.wordpiece(w)).collect()
    }
}

/// Write instances as one reference-layout shard (int16 ids/positions, int8 masks/labels),
/// atomically: HDF5 writes `.NAME.tmp-HOST-PID` beside `path`, which is renamed to `path` when it is
/// complete, so a killed writer never leaves a cut-short shard under a name the loader reads.
pub fn write_shard(path: &Path, items: &[Instance], seq_len: usize, max_pred: usize) -> Result<()> {
    crate::util::fs::write_atomic_by(path, |tmp| write_shard_at(tmp, items, seq_len, max_pred))
}

/// [`write_shard`]'s HDF5 writing, straight to `path`.
fn write_shard_at(path: &Path, items: &[Instance], seq_len: usize, max_pred: usize) -> Result<()> {
    let n = items.len();
    let mut ids = vec![0i16; n * seq_len];
    let mut mask = vec![0i8; n * seq_len];
    let mut seg = vec![0i8; n * seq_len];
    let mut pos = vec![0i16; n * max_pred];
    let mut mids = vec![0i16; n * max_pred];
    let mut nsp = vec![0i8; n];
    for (k, it) in items.iter().enumerate() {
        for (j, &t) in it.tokens.iter().enumerate() {
            ids[k * seq_len + j] =
                i16::try_from(t).context("token id above 32767 does not fit int16")?;
            mask[k * seq_len + j] = 1;
            seg[k * seq_len + j] = it.segment_ids[j] as i8;
        }
        for (j, (&p, &m)) in it.masked_positions.iter().zip(&it.masked_ids).enumerate() {
            pos[k * max_pred + j] = p as i16;
            mids[k * max_pred + j] = m as i16;
        }
        nsp[k] = it.is_random_next as i8;
    }
    let f =
        hdf5::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let w = || -> hdf5::Result<()> {
        f.new_dataset::<i16>()
            .shape([n, seq_len])
            .create(DATASETS[0])?
            .write_raw(&ids[..])?;
        f.new_dataset::<i8>()
            .shape([n, seq_len])
            .create(DATASETS[1])?
            .write_raw(&mask[..])?;
        f.new_dataset::<i8>()
            .shape([n, seq_len])
            .create(DATASETS[2])?
            .write_raw(&seg[..])?;
        f.new_dataset::<i16>()
            .shape([n, max_pred])
            .create(DATASETS[3])?
            .write_raw(&pos[..])?;
        f.new_dataset::<i16>()
            .shape([n, max_pred])
            .create(DATASETS[4])?
            .write_raw(&mids[..])?;
        f.new_dataset::<i8>()
            .shape([n])
            .create(DATASETS[5])?
            .write_raw(&nsp[..])?;
        Ok(())
    };
    w().with_context(|| format!("cannot write {}", path.display()))
}

/// Make the data set.
pub fn synth_bert(a: &SynthBertArgs) -> Result<SynthSummary> {
    check_args(a)?;
    check_out(a)?;
    let (source, words) = read_sentences(a)?;
    let vocab = Vocab::build(&words, a.vocab_size.max(SPECIALS.len() + 2));
    if vocab.len() > a.vocab_size {
        bail!(
            "--vocab-size {} is smaller than the {} special and character-piece tokens the text \
             of {} needs: give --vocab-size {} or more",
            a.vocab_size,
            vocab.len(),
            source.display(),
            vocab.len()
        );
    }
    if vocab.len() > i16::MAX as usize {
        bail!(
            "--vocab-size {} is above what int16 shards hold",
            vocab.len()
        );
    }
    let sents: Vec<Vec<i32>> = words.iter().map(|w| vocab.encode(w)).collect();
    std::fs::create_dir_all(a.out.join("train")).with_context(|| {
        format!(
            "--out {}: cannot create the folder; choose a writable --out",
            a.out.display()
        )
    })?;
    std::fs::create_dir_all(a.out.join("eval"))?;
    // README.txt is written last: without it the folder is an interrupted (or failed) run,
    // which `demo` makes again
    remove_unfinished(a)?;
    crate::util::fs::write_atomic(
        &a.out.join("vocab.txt"),
        (vocab.tokens.join("\n") + "\n").as_bytes(),
    )?;
    let train = make_instances(a, &sents, vocab.len(), a.seed, a.train_samples);
    let tokens: usize = train.iter().map(|it| it.tokens.len()).sum();
    let padding_fraction = 1.0 - tokens as f64 / (train.len() * a.seq_len) as f64;
    let per = a.train_samples.div_ceil(a.shards);
    for (k, chunk) in train.chunks(per).enumerate() {
        let name = shard_name(k, a.shards);
        write_shard(
            &a.out.join("train").join(name),
            chunk,
            a.seq_len,
            a.max_predictions,
        )?;
    }
    let eval = make_instances(
        a,
        &sents,
        vocab.len(),
        a.seed ^ 0xE7A1_0000_0000_0001,
        a.eval_samples,
    );
    write_shard(
        &a.out.join("eval").join(EVAL_SHARD),
        &eval,
        a.seq_len,
        a.max_predictions,
    )?;
    write_readme(a, &source, vocab.len(), padding_fraction)?;
    Ok(SynthSummary {
        source,
        sentences: a.sentences,
        vocab_size: vocab.len(),
        train_samples: a.train_samples,
        eval_samples: a.eval_samples,
        padding_fraction,
    })
}

/// The most token slots ((train + eval samples) x seq_len) a data set may have: the samples are
/// made in memory before they are written.
pub const MAX_TOKEN_SLOTS: usize = 500_000_000;

/// Refuse sizes the data set cannot have, naming the flag.
fn check_args(a: &SynthBertArgs) -> Result<()> {
    if a.seq_len < 8 || a.seq_len > 512 {
        bail!("--seq-len must be in 8..=512 (got {})", a.seq_len);
    }
    for (flag, v) in [
        ("--max-predictions", a.max_predictions),
        ("--shards", a.shards),
        ("--eval-samples", a.eval_samples),
    ] {
        if v == 0 {
            bail!("{flag} must be at least 1 (got 0)");
        }
    }
    if a.train_samples < a.shards {
        bail!(
            "--train-samples {} is fewer than --shards {}: every shard needs a sample",
            a.train_samples,
            a.shards
        );
    }
    let slots = a
        .train_samples
        .saturating_add(a.eval_samples)
        .saturating_mul(a.seq_len);
    if slots > MAX_TOKEN_SLOTS {
        bail!(
            "--train-samples {} + --eval-samples {} at --seq-len {} is {slots} token slots, more \
             than {MAX_TOKEN_SLOTS} (the samples are made in memory): ask for fewer samples",
            a.train_samples,
            a.eval_samples,
            a.seq_len
        );
    }
    if a.sentences < 3 {
        bail!("--sentences must be at least 3 (got {})", a.sentences);
    }
    Ok(())
}

/// The evaluation shard synth-bert writes in `eval/`.
const EVAL_SHARD: &str = "eval.hdf5";

/// What synth-bert writes at the top of --out.
const OUT_ENTRIES: [&str; 4] = ["train", "eval", "vocab.txt", "README.txt"];

/// An --out that is a folder holding nothing but an earlier synth-bert data set whose shards
/// this run replaces: a file, other files, or shards this run would not overwrite (the loader
/// would read them with the new ones) are refused before anything is written.
fn check_out(a: &SynthBertArgs) -> Result<()> {
    let out = &a.out;
    if out.to_str().is_none() {
        // it was refused by the HDF5 library at the first shard, after train/, eval/ and
        // vocab.txt were written, with no word on what to do
        bail!(
            "--out {} is not a UTF-8 path: the shards are HDF5 files, whose library takes only \
             UTF-8 file names; choose another --out",
            out.display()
        );
    }
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        bail!(
            "--out {} exists and is not a folder: choose another --out",
            out.display()
        );
    }
    let mut names = Vec::new();
    for e in std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))? {
        names.push(e?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    if let Some(other) = names
        .into_iter()
        .find(|n| !OUT_ENTRIES.contains(&n.as_str()))
    {
        bail!(
            "--out {} holds {other}, which synth-bert does not write: give an empty or new \
             folder (synth-bert writes train/, eval/, vocab.txt and README.txt)",
            out.display()
        );
    }
    let mine: Vec<String> = (0..a.shards).map(|k| shard_name(k, a.shards)).collect();
    for (sub, written) in [("train", mine), ("eval", vec![EVAL_SHARD.to_string()])] {
        let dir = out.join(sub);
        if !dir.is_dir() {
            continue;
        }
        // the shards a loader of this folder reads that this run does not write
        let stale: Vec<String> = super::shards_in(&dir)?
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| !written.contains(n))
            .collect();
        if let Some(first) = stale.first() {
            bail!(
                "{} already holds {} shard(s) this run would not replace (e.g. {first}): the \
                 trainer would read them with the new ones. Remove {} or give another --out",
                dir.display(),
                stale.len(),
                out.display()
            );
        }
    }
    Ok(())
}

/// Before writing: remove README.txt (the mark of a finished data set, written last) and the
/// temporary shards a killed synth-bert left in train/ and eval/.
fn remove_unfinished(a: &SynthBertArgs) -> Result<()> {
    let readme = a.out.join("README.txt");
    if readme.symlink_metadata().is_ok() {
        std::fs::remove_file(&readme)
            .with_context(|| format!("cannot remove {}", readme.display()))?;
    }
    for sub in ["train", "eval"] {
        crate::util::fs::remove_stale_temps(&a.out.join(sub))?;
    }
    Ok(())
}

/// The name of training shard `k` of `shards`.
fn shard_name(k: usize, shards: usize) -> String {
    format!("part-{k:05}-of-{shards:05}.hdf5")
}

/// The source text's first `--sentences` sentences as words; returns the source's path too.
fn read_sentences(a: &SynthBertArgs) -> Result<(PathBuf, Vec<Vec<String>>)> {
    let source = match &a.source {
        Some(p) => p.clone(),
        None => default_source()?,
    };
    // a FIFO was waited on for ever; a folder said "Is a directory (os error 21)"
    let text = crate::util::tree::read_text_file(&source, "file of plain English text")
        .context("--source")?;
    let sentences = extract_sentences(&text);
    if sentences.len() < a.sentences {
        bail!(
            "{}: only {} usable sentences (5-40 words), --sentences asks for {}",
            source.display(),
            sentences.len(),
            a.sentences
        );
    }
    let words: Vec<Vec<String>> = sentences[..a.sentences]
        .iter()
        .map(|s| basic_tokenize(s))
        .collect();
    Ok((source, words))
}

/// `n` instances from the encoded sentences, drawn with `seed` (`--lengths` picks how).
fn make_instances(
    a: &SynthBertArgs,
    sents: &[Vec<i32>],
    vocab_len: usize,
    seed: u64,
    n: usize,
) -> Vec<Instance> {
    let mut rng = Rng::derive(seed, &[0x5e17]);
    if a.lengths == Lengths::Realistic {
        return super::realistic::instances(
            &mut rng,
            sents,
            n,
            a.seq_len,
            a.max_predictions,
            vocab_len,
        );
    }
    (0..n)
        .map(|_| {
            let i = rng.below(sents.len() as u64) as usize;
            make_instance(&mut rng, sents, i, a.seq_len, a.max_predictions, vocab_len)
        })
        .collect()
}

/// README.txt: where the data came from and its sizes.
fn write_readme(
    a: &SynthBertArgs,
    source: &Path,
    vocab_len: usize,
    padding_fraction: f64,
) -> Result<()> {
    let readme = format!(
        "Synthetic BERT pre-training data written by `mlperf-run data synth-bert`.\n\
         Text: the first {} sentences of {}.\n\
         {} training samples in {} shards, {} eval samples, seq_len {}, max_predictions {}, vocabulary {} tokens, seed {}.\n\
         Lengths: {:?}; {:.1}% of the training token slots are padding.\n\
         Small and repetitive on purpose: it proves the pipeline, not the model.\n",
        a.sentences,
        source.display(),
        a.train_samples,
        a.shards,
        a.eval_samples,
        a.seq_len,
        a.max_predictions,
        vocab_len,
        a.seed,
        a.lengths,
        100.0 * padding_fraction
    );
    crate::util::fs::write_atomic(&a.out.join("README.txt"), readme.as_bytes())
}

/// Entry point of `mlperf-run data synth-bert`.
pub fn run_synth_bert(a: SynthBertArgs) -> Result<crate::util::ExitStatus> {
    let s = synth_bert(&a)?;
    let mut out = crate::util::output::stdout();
    writeln!(
        out,
        "wrote {}: {} train + {} eval samples from {} sentences of {}; vocabulary {} tokens (vocab.txt); {:.1}% padding",
        a.out.display(),
        s.train_samples,
        s.eval_samples,
        s.sentences,
        s.source.display(),
        s.vocab_size,
        100.0 * s.padding_fraction
    )?;
    Ok(crate::util::ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_and_wordpiece() {
        let text = "A. TITLE\n======\n\nPython was created in the early 1990s by Guido. It is a language!\n\n    table   row   here\n";
        let s = extract_sentences(text);
        assert_eq!(
            s,
            vec!["Python was created in the early 1990s by Guido.".to_string()]
        );
        let words = basic_tokenize(&s[0]);
        assert_eq!(words.last().unwrap(), ".");
        assert_eq!(words[0], "python");
        let v = Vocab::build(std::slice::from_ref(&words), 5 + 40);
        let ids = v.encode(&words);
        assert!(ids.iter().all(|&i| i != UNK));
        // a word outside the vocabulary falls back to character pieces
        let pieces = v.wordpiece("tried");
        assert!(pieces.len() >= 2, "{pieces:?}");
        assert!(v.tokens[pieces[1] as usize].starts_with("##"));
    }

    #[test]
    fn masking_follows_reference_rates() {
        let sents: Vec<Vec<i32>> = (0..10)
            .map(|k| (0..30).map(|j| 10 + (k * 30 + j) % 200).collect())
            .collect();
        let mut rng = Rng::from_state(7);
        let (mut masked, mut total, mut mask_tok, mut random_next) =
            (0usize, 0usize, 0usize, 0usize);
        for i in 0..2000 {
            let it = make_instance(&mut rng, &sents, i % 10, 48, 76, 210);
            assert!(it.tokens.len() <= 48);
            assert_eq!(it.tokens[0], CLS);
            assert!(it.masked_positions.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(
                it.masked_positions.len(),
                ((it.tokens.len() as f64 * 0.15).round() as usize).max(1)
            );
            total += it.tokens.len();
            masked += it.masked_positions.len();
            mask_tok += it
                .masked_positions
                .iter()
                .filter(|&&p| it.tokens[p as usize] == MASK)
                .count();
            random_next += it.is_random_next as usize;
        }
        let rate = masked as f64 / total as f64;
        assert!((rate - 0.15).abs() < 0.01, "{rate}");
        let mrate = mask_tok as f64 / masked as f64;
        assert!((mrate - 0.8).abs() < 0.03, "{mrate}");
        let nrate = random_next as f64 / 2000.0;
        assert!((nrate - 0.5).abs() < 0.1, "{nrate}");
    }
}
