//! BERT pre-training data in the MLPerf reference's HDF5 layout, read natively.
//!
//! A shard is one HDF5 file with six datasets (`N` samples, `S` max sequence length, `P` max
//! predictions per sequence; any integer type, the reference uses int16/int8):
//! `input_ids [N,S]`, `input_mask [N,S]`, `segment_ids [N,S]`, `masked_lm_positions [N,P]`,
//! `masked_lm_ids [N,P]`, `next_sentence_labels [N]`. Unused prediction slots hold position 0
//! (the `[CLS]` token is never masked), so a sequence's predictions end at its first zero position,
//! as in the reference's data loader.
//!
//! Data directory: `DIR/train/*.hdf5` (or `.h5`), `DIR/eval/*.hdf5`, and for synthetic data
//! `DIR/vocab.txt` (see [`synth`]).
//!
//! Training order ([`TrainLoader`]): per epoch, the shard files are permuted with a stream drawn
//! from (seed, epoch); each shard's samples are permuted with (seed, epoch, shard); rank `r` of
//! `w` takes the permuted samples `r, r+w, r+2w, ...` of every shard. So each sample is seen by
//! exactly one rank, exactly once per epoch; one shard is in memory at a time. Batches are
//! exactly `local_batch` samples and run across shard and epoch boundaries.
//!
//! With token balancing ([`Assignment::TokenBalanced`], the open method
//! `methods.balance_tokens`) every rank reads the same global stream instead (the same
//! permutations, not split by rank) and cuts it into global micro-batches of
//! `world x local_batch` consecutive samples; [`balance::assign`] deals each one out to the
//! ranks by token count (equal sample counts, token counts within one sequence of each other).
//! Each sample is still seen by exactly one rank, once per epoch; a global batch may span two
//! shards, so two can be in memory.

pub mod balance;
pub mod balance_report;
pub mod instance;
pub mod packing;
pub mod realistic;
pub mod synth;

use crate::data::rng::Rng;
use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Device, Tensor};

/// The six reference datasets, in the order above.
pub const DATASETS: [&str; 6] = [
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
];

/// One shard in memory (values widened to i32).
#[derive(Debug, Clone)]
pub struct Shard {
    pub path: PathBuf,
    pub n: usize,
    pub seq: usize,
    pub preds: usize,
    input_ids: Vec<i32>,
    input_mask: Vec<i32>,
    segment_ids: Vec<i32>,
    masked_positions: Vec<i32>,
    masked_ids: Vec<i32>,
    nsp: Vec<i32>,
}

/// Dataset `name` of a shard: present, and of an integer type (HDF5 would convert floats and
/// bools to integers silently, truncating); with its shape. Reads no data.
fn dataset(file: &hdf5::File, path: &Path, name: &str) -> Result<(hdf5::Dataset, Vec<usize>)> {
    let ds = file.dataset(name).map_err(|e| {
        anyhow::anyhow!(
            "{}: no dataset '{name}' ({e}); a BERT shard needs {}",
            path.display(),
            DATASETS.join(", ")
        )
    })?;
    // refuse any dtype but integers, as the reference shards hold (int8/int16/int32/int64 token
    // ids and masks)
    let dtype = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .with_context(|| {
            format!(
                "{}: cannot read the type of dataset '{name}'",
                path.display()
            )
        })?;
    if !matches!(
        dtype,
        hdf5::types::TypeDescriptor::Integer(_) | hdf5::types::TypeDescriptor::Unsigned(_)
    ) {
        bail!(
            "{}: dataset '{name}' holds {dtype} values; a BERT shard holds integers",
            path.display()
        );
    }
    let shape = ds.shape();
    Ok((ds, shape))
}

/// The values of a dataset that [`dataset`] checked, widened to i32.
fn read_values(ds: &hdf5::Dataset, path: &Path, name: &str) -> Result<Vec<i32>> {
    ds.read_raw::<i32>().with_context(|| {
        format!(
            "{}: cannot read dataset '{name}' as integers (a shard cut short, or compressed \
             with a filter this HDF5 library lacks: write it again without it, e.g. \
             `h5repack -f NONE IN OUT`)",
            path.display()
        )
    })
}

/// A shard HDF5 cannot open: what it is and what to do.
fn not_hdf5(path: &Path) -> String {
    format!(
        "cannot open {} as HDF5 (a shard cut short or damaged, e.g. by a copy that stopped: \
         copy it again, or write the data again, e.g. `mlperf-run data synth-bert`)",
        path.display()
    )
}

/// Open a shard file with HDF5. A FIFO, socket, device or folder named like a shard, a link that
/// leads nowhere and a file this process may not read are refused by name first (HDF5 would wait
/// on a FIFO for ever, and call the others damaged).
fn open_shard(path: &Path) -> Result<hdf5::File> {
    crate::util::tree::open_regular(path)?;
    hdf5::File::open(path).with_context(|| not_hdf5(path))
}

/// A shard's shape, from its headers alone (no data read): every dataset present, of an integer
/// type and of the shape `input_ids [samples, seq_len]` and `masked_lm_positions [samples,
/// predictions]` give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardShape {
    pub samples: usize,
    pub seq: usize,
    pub preds: usize,
}

/// The six datasets of a shard, in [`DATASETS`] order, with the shape they were checked to have.
fn open_datasets(file: &hdf5::File, path: &Path) -> Result<(ShardShape, [hdf5::Dataset; 6])> {
    let (ids, s_ids) = dataset(file, path, "input_ids")?;
    if s_ids.len() != 2 || s_ids[1] == 0 {
        bail!(
            "{}: input_ids must be [samples, seq_len], got {s_ids:?}",
            path.display()
        );
    }
    let (n, seq) = (s_ids[0], s_ids[1]);
    let get = |name: &str, want: &[usize]| -> Result<hdf5::Dataset> {
        let (ds, shape) = dataset(file, path, name)?;
        if shape != want {
            bail!(
                "{}: dataset '{name}' has shape {shape:?}, expected {want:?} (from input_ids)",
                path.display()
            );
        }
        Ok(ds)
    };
    let mask = get("input_mask", &[n, seq])?;
    let seg = get("segment_ids", &[n, seq])?;
    let (pos, s_pos) = dataset(file, path, "masked_lm_positions")?;
    if s_pos.len() != 2 || s_pos[0] != n {
        bail!(
            "{}: masked_lm_positions must be [{n}, predictions], got {s_pos:?}",
            path.display()
        );
    }
    let preds = s_pos[1];
    let mids = get("masked_lm_ids", &[n, preds])?;
    let nsp = get("next_sentence_labels", &[n])?;
    let shape = ShardShape {
        samples: n,
        seq,
        preds,
    };
    Ok((shape, [ids, mask, seg, pos, mids, nsp]))
}

impl Shard {
    /// Read and validate one shard: its layout ([`Shard::shape`]), and values any BERT takes:
    /// no negative token or segment id, masked positions inside the sequence, next-sentence
    /// labels 0 or 1. What depends on the model (the vocabulary) is [`Shard::check_fits`].
    pub fn read(path: &Path) -> Result<Shard> {
        let file = open_shard(path)?;
        let (shape, [ids, mask, seg, pos, mids, nsp]) = open_datasets(&file, path)?;
        let input_ids = read_values(&ids, path, "input_ids")?;
        let input_mask = read_values(&mask, path, "input_mask")?;
        let segment_ids = read_values(&seg, path, "segment_ids")?;
        let masked_positions = read_values(&pos, path, "masked_lm_positions")?;
        let masked_ids = read_values(&mids, path, "masked_lm_ids")?;
        let nsp = read_values(&nsp, path, "next_sentence_labels")?;
        let ShardShape {
            samples: n,
            seq,
            preds,
        } = shape;
        if let Some(p) = masked_positions
            .iter()
            .find(|&&p| p < 0 || p as usize >= seq)
        {
            bail!(
                "{}: masked_lm_positions holds {p}, outside 0..{seq}",
                path.display()
            );
        }
        if let Some(v) = input_ids.iter().chain(&masked_ids).find(|&&v| v < 0) {
            bail!("{}: negative token id {v}", path.display());
        }
        if let Some(v) = segment_ids.iter().find(|&&v| v < 0) {
            bail!(
                "{}: segment_ids holds {v}; segment ids are 0 (first segment) or 1",
                path.display()
            );
        }
        if let Some(v) = nsp.iter().find(|&&v| v != 0 && v != 1) {
            bail!(
                "{}: next_sentence_labels holds {v}; the labels are 0 (next sentence) or 1 \
                 (random sentence)",
                path.display()
            );
        }
        Ok(Shard {
            path: path.to_path_buf(),
            n,
            seq,
            preds,
            input_ids,
            input_mask,
            segment_ids,
            masked_positions,
            masked_ids,
            nsp,
        })
    }

    /// A shard's layout without reading its data: every dataset there, of an integer type and
    /// of a consistent shape (what [`Shard::read`] checks before it reads).
    pub fn shape(path: &Path) -> Result<ShardShape> {
        let file = open_shard(path)?;
        Ok(open_datasets(&file, path)?.0)
    }

    /// Number of samples without reading the data (the layout checked as [`Shard::shape`]).
    pub fn count(path: &Path) -> Result<usize> {
        Ok(Self::shape(path)?.samples)
    }

    /// Whether the model can take every sample: token ids (inputs and masked targets) below
    /// its vocabulary, segment ids below its token types. A shard that does not fit is named
    /// with the value and the key to change (libtorch would stop the run with "index out of
    /// range", naming nothing).
    pub fn check_fits(&self, fit: &ModelFit) -> Result<()> {
        check_vocab(self.max_token(), fit.vocab_size, &self.path)?;
        let seg = self.segment_ids.iter().copied().max().unwrap_or(0);
        if seg as i64 >= fit.type_vocab_size {
            bail!(
                "{}: segment id {seg} does not fit the model's type_vocab_size {}; BERT shards \
                 hold segment ids 0 and 1",
                self.path.display(),
                fit.type_vocab_size
            );
        }
        Ok(())
    }

    /// Non-padding tokens of sample `i` (its `input_mask` ones).
    pub fn tokens(&self, i: usize) -> usize {
        self.input_mask[i * self.seq..(i + 1) * self.seq]
            .iter()
            .filter(|&&m| m != 0)
            .count()
    }

    /// Largest token id (vocabulary size check).
    pub fn max_token(&self) -> i32 {
        self.input_ids
            .iter()
            .chain(&self.masked_ids)
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// One batch on a device: `[B,S]` int64 inputs, `[B,P]` masked positions/ids, `[B,P]` float
/// weights (1 = real prediction), `[B]` NSP labels.
pub struct BertBatch {
    pub input_ids: Tensor,
    pub segment_ids: Tensor,
    pub input_mask: Tensor,
    pub masked_positions: Tensor,
    pub masked_ids: Tensor,
    pub masked_weights: Tensor,
    pub nsp_labels: Tensor,
    pub size: usize,
    /// Whether some token of the batch is padding (a 0 in `input_mask`), decided on the host
    /// from the samples before the hand-off, so the step needs no device read to know it.
    pub padded: bool,
}

impl BertBatch {
    /// The mask the model attends with: `input_mask` when the batch has padding, `None` when
    /// every token is real (see `BertForPreTraining::encode`).
    pub fn attention_mask(&self) -> Option<&Tensor> {
        self.padded.then_some(&self.input_mask)
    }

    /// The batch as a training step's 7 input tensors (ids, segments, mask, masked positions,
    /// masked ids, masked weights, NSP labels): the input list a captured step graph is keyed
    /// and fed by. Without padding the mask slot holds an empty `[B, 0]` tensor, so a batch
    /// with padding and one without have different keys (their steps run different attention
    /// kernels); [`step_attention_mask`] reads the slot back.
    pub fn into_step_inputs(self) -> [Tensor; 7] {
        let mask = step_mask_slot(self.input_mask, self.padded);
        [
            self.input_ids,
            self.segment_ids,
            mask,
            self.masked_positions,
            self.masked_ids,
            self.masked_weights,
            self.nsp_labels,
        ]
    }
}

/// The mask slot of a step's inputs ([`BertBatch::into_step_inputs`]): `input_mask` when
/// `padded`, else an empty `[B, 0]` tensor of its kind on its device.
pub fn step_mask_slot(input_mask: Tensor, padded: bool) -> Tensor {
    if padded {
        input_mask
    } else {
        input_mask.narrow(1, 0, 0)
    }
}

/// The attention mask a step's mask slot stands for ([`BertBatch::into_step_inputs`]).
pub fn step_attention_mask(slot: &Tensor) -> Option<&Tensor> {
    (slot.size().get(1).copied().unwrap_or(0) > 0).then_some(slot)
}

/// Whether a host mask (1 = real token) has padding.
fn has_padding(mask: &[i64]) -> bool {
    mask.contains(&0)
}

/// Samples gathered from shards, before they become tensors: a training batch on the host,
/// handed to the device by the batch hand-off ([`HostBatch::to_device`]).
#[derive(Default)]
pub struct HostBatch {
    seq: usize,
    preds: usize,
    ids: Vec<i64>,
    mask: Vec<i64>,
    seg: Vec<i64>,
    pos: Vec<i64>,
    mids: Vec<i64>,
    w: Vec<f32>,
    nsp: Vec<i64>,
}

impl HostBatch {
    fn push(&mut self, sh: &Shard, i: usize) -> Result<()> {
        if self.nsp.is_empty() {
            self.seq = sh.seq;
            self.preds = sh.preds;
        } else if (self.seq, self.preds) != (sh.seq, sh.preds) {
            bail!(
                "{}: seq_len {} / predictions {} differ from the other shards' {} / {}",
                sh.path.display(),
                sh.seq,
                sh.preds,
                self.seq,
                self.preds
            );
        }
        let (s, p) = (sh.seq, sh.preds);
        let wide = |v: &[i32]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        self.ids.extend(wide(&sh.input_ids[i * s..(i + 1) * s]));
        self.mask.extend(wide(&sh.input_mask[i * s..(i + 1) * s]));
        self.seg.extend(wide(&sh.segment_ids[i * s..(i + 1) * s]));
        let pos = &sh.masked_positions[i * p..(i + 1) * p];
        let end = pos.iter().position(|&x| x == 0).unwrap_or(p);
        self.pos.extend(wide(pos));
        self.mids.extend(wide(&sh.masked_ids[i * p..(i + 1) * p]));
        self.w
            .extend((0..p).map(|j| if j < end { 1.0f32 } else { 0.0 }));
        self.nsp.push(sh.nsp[i] as i64);
        Ok(())
    }

    fn len(&self) -> usize {
        self.nsp.len()
    }

    /// The batch as device tensors through the hand-off (pinned, non-blocking on CUDA).
    pub fn to_device(self, t: &crate::gpu::transfer::Transfer) -> Result<BertBatch> {
        let b = self.len() as i64;
        let (s, p) = (self.seq as i64, self.preds as i64);
        Ok(BertBatch {
            input_ids: t.tensor(&self.ids, &[b, s])?,
            input_mask: t.tensor(&self.mask, &[b, s])?,
            segment_ids: t.tensor(&self.seg, &[b, s])?,
            masked_positions: t.tensor(&self.pos, &[b, p])?,
            masked_ids: t.tensor(&self.mids, &[b, p])?,
            masked_weights: t.tensor(&self.w, &[b, p])?,
            nsp_labels: t.tensor(&self.nsp, &[b])?,
            size: b as usize,
            padded: has_padding(&self.mask),
        })
    }

    fn take(&mut self, device: Device) -> BertBatch {
        let b = self.len() as i64;
        let (s, p) = (self.seq as i64, self.preds as i64);
        let t = |v: &mut Vec<i64>, cols: i64| {
            Tensor::from_slice(&std::mem::take(v))
                .view([b, cols])
                .to_device(device)
        };
        let padded = has_padding(&self.mask);
        BertBatch {
            padded,
            input_ids: t(&mut self.ids, s),
            input_mask: t(&mut self.mask, s),
            segment_ids: t(&mut self.seg, s),
            masked_positions: t(&mut self.pos, p),
            masked_ids: t(&mut self.mids, p),
            masked_weights: Tensor::from_slice(&std::mem::take(&mut self.w))
                .view([b, p])
                .to_device(device),
            nsp_labels: Tensor::from_slice(&std::mem::take(&mut self.nsp)).to_device(device),
            size: b as usize,
        }
    }
}

/// The error for a training folder `dir` whose `shards` shard files hold no samples.
pub fn no_training_samples(dir: &Path, shards: usize) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: its {shards} shard(s) hold no samples (input_ids has 0 rows in each); write the \
         training shards again (e.g. `mlperf-run data synth-bert`)",
        dir.display()
    )
}

/// The shard files (`*.hdf5`, `*.h5`) of a directory, sorted by name; at least one.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let files = shards_in(dir)?;
    if files.is_empty() {
        bail!(
            "{} holds no .hdf5 or .h5 shards: a BERT data folder holds train/ and eval/ with \
             HDF5 shards (`mlperf-run data synth-bert --out DIR` makes one)",
            dir.display()
        );
    }
    Ok(files)
}

/// Whether `path` is named like a shard: `.hdf5` or `.h5`, in any case (as `.JPEG` and `.jpg`
/// are images to the ImageNet reader); hidden names (`.NAME`, e.g. a temporary file) are not.
pub fn is_shard_name(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'));
    !hidden
        && path
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| x.eq_ignore_ascii_case("hdf5") || x.eq_ignore_ascii_case("h5"))
}

/// The shard files (`*.hdf5`, `*.h5`) of a directory, sorted by name: what a loader of it reads.
pub fn shards_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).with_context(|| {
        format!("cannot read {} (a BERT data directory holds train/ and eval/ with HDF5 shards; `mlperf-run data synth-bert --out DIR` makes one)", dir.display())
    })?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_shard_name(p))
        .collect();
    files.sort();
    Ok(files)
}

/// The one shape of the shards `files`, read by their headers ([`Shard::shape`]): the sequence
/// length and prediction slots that all of them have, with their samples in all. Shards of two
/// shapes cannot share a batch (one sequence per row), so the first that differs from the first
/// shard is named with both shapes.
pub fn common_shape(files: &[PathBuf]) -> Result<ShardShape> {
    let mut common: Option<(&PathBuf, ShardShape)> = None;
    let mut samples = 0;
    for f in files {
        let shape = Shard::shape(f)?;
        samples += shape.samples;
        match common {
            None => common = Some((f, shape)),
            Some((first, c)) if (c.seq, c.preds) != (shape.seq, shape.preds) => bail!(
                "{}: seq_len {} with {} prediction slots, but {} has seq_len {} with {}: the \
                 shards of a data set share one shape; write them again with one --seq-len and \
                 --max-predictions (or keep the shards of one shape only)",
                f.display(),
                shape.seq,
                shape.preds,
                first.display(),
                c.seq,
                c.preds
            ),
            Some(_) => {}
        }
    }
    let (_, c) = common.context("no shards given")?;
    Ok(ShardShape { samples, ..c })
}

/// How the samples of the training stream are split among the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignment {
    /// Rank `r` of `w` takes the permuted samples `r, r+w, ...` of every shard.
    #[default]
    Strided,
    /// Global micro-batches dealt out by token count ([`balance::assign`]).
    TokenBalanced,
}

/// One sample of the stream: where it lives and which epoch it belongs to.
struct Sample {
    shard: Arc<Shard>,
    file: usize,
    epoch: u64,
    index: usize,
}

/// A sample a rank trains on (for tests and the balance report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampleId {
    pub epoch: u64,
    /// Index into the sorted shard files.
    pub file: usize,
    /// Index in that file.
    pub index: usize,
    /// Non-padding tokens.
    pub tokens: usize,
}

/// The shard being read: its permuted (and for [`Assignment::Strided`], rank-split) samples.
struct Current {
    shard: Arc<Shard>,
    file: usize,
    epoch: u64,
    order: Vec<usize>,
    at: usize,
}

/// Endless, seeded, rank-sharded training batches.
pub struct TrainLoader {
    files: Vec<PathBuf>,
    seed: u64,
    rank: usize,
    world: usize,
    local_batch: usize,
    device: Device,
    assignment: Assignment,
    epoch: u64,
    file_order: Vec<usize>,
    next_file: usize,
    current: Option<Current>,
    /// This rank's next samples, in stream order.
    pending: VecDeque<Sample>,
    /// Samples in the whole training set (all ranks).
    pub total_samples: usize,
    /// What the model takes: each shard is checked against it when it is read.
    fit: Option<ModelFit>,
}

impl TrainLoader {
    pub fn new(
        dir: &Path,
        seed: u64,
        rank: usize,
        world: usize,
        local_batch: usize,
        device: Device,
    ) -> Result<Self> {
        if world == 0 || rank >= world || local_batch == 0 {
            bail!("invalid sharding: rank {rank} of world {world}, local batch {local_batch}");
        }
        let files = shard_files(dir)?;
        let mut total = 0;
        for f in &files {
            total += Shard::count(f)?;
        }
        if total == 0 {
            return Err(no_training_samples(dir, files.len()));
        }
        if total < world {
            bail!(
                "{}: {total} training samples cannot be shared by {world} ranks",
                dir.display()
            );
        }
        let mut l = TrainLoader {
            files,
            seed,
            rank,
            world,
            local_batch,
            device,
            assignment: Assignment::Strided,
            epoch: 0,
            file_order: Vec::new(),
            next_file: 0,
            current: None,
            pending: VecDeque::new(),
            total_samples: total,
            fit: None,
        };
        l.start_epoch(0);
        Ok(l)
    }

    /// Check each shard against what the model takes ([`Shard::check_fits`]) when it is read,
    /// so that a shard with a token id beyond the vocabulary stops the run naming the shard.
    pub fn with_fit(mut self, fit: ModelFit) -> Self {
        self.fit = Some(fit);
        self
    }

    /// The loader with samples split among ranks by `assignment`, restarted at epoch 0.
    pub fn with_assignment(mut self, assignment: Assignment) -> Self {
        self.assignment = assignment;
        self.current = None;
        self.pending.clear();
        self.start_epoch(0);
        self
    }

    fn start_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.file_order = (0..self.files.len()).collect();
        Rng::derive(self.seed, &[epoch]).shuffle(&mut self.file_order);
        self.next_file = 0;
    }

    /// The epoch the next sample comes from (0-based).
    pub fn epoch(&self) -> u64 {
        self.pending.front().map_or(self.epoch, |s| s.epoch)
    }

    /// The next sample of the stream: this rank's own (strided), or the global stream's
    /// (balanced).
    fn next_in_stream(&mut self) -> Result<Sample> {
        loop {
            if let Some(c) = &mut self.current {
                if c.at < c.order.len() {
                    let s = Sample {
                        shard: Arc::clone(&c.shard),
                        file: c.file,
                        epoch: c.epoch,
                        index: c.order[c.at],
                    };
                    c.at += 1;
                    return Ok(s);
                }
            }
            if self.next_file == self.file_order.len() {
                self.start_epoch(self.epoch + 1);
            }
            let fi = self.file_order[self.next_file];
            self.next_file += 1;
            let shard = Shard::read(&self.files[fi])?;
            if let Some(fit) = &self.fit {
                shard.check_fits(fit)?;
            }
            let shard = Arc::new(shard);
            let mut order: Vec<usize> = (0..shard.n).collect();
            Rng::derive(self.seed, &[self.epoch, fi as u64 + 1]).shuffle(&mut order);
            if self.assignment == Assignment::Strided {
                order = order
                    .into_iter()
                    .skip(self.rank)
                    .step_by(self.world)
                    .collect();
            }
            self.current = Some(Current {
                shard,
                file: fi,
                epoch: self.epoch,
                order,
                at: 0,
            });
        }
    }

    /// This rank's next sample.
    fn next_sample(&mut self) -> Result<Sample> {
        while self.pending.is_empty() {
            match self.assignment {
                Assignment::Strided => {
                    let s = self.next_in_stream()?;
                    self.pending.push_back(s);
                }
                Assignment::TokenBalanced => {
                    let group = (0..self.world * self.local_batch)
                        .map(|_| self.next_in_stream())
                        .collect::<Result<Vec<_>>>()?;
                    let tokens: Vec<usize> =
                        group.iter().map(|s| s.shard.tokens(s.index)).collect();
                    let ranks = balance::assign(&tokens, self.world)?;
                    self.pending.extend(
                        group
                            .into_iter()
                            .zip(ranks)
                            .filter(|&(_, r)| r == self.rank)
                            .map(|(s, _)| s),
                    );
                }
            }
        }
        self.pending.pop_front().context("no sample pending")
    }

    /// The sample indices (file, index in file) of the next `n` samples, advancing the loader
    /// (tests use it to check the order).
    pub fn next_ids(&mut self, n: usize) -> Result<Vec<(usize, usize)>> {
        (0..n)
            .map(|_| self.next_sample().map(|s| (s.file, s.index)))
            .collect()
    }

    /// The samples of the next batch (exactly `local_batch`), advancing the loader.
    pub fn next_batch_ids(&mut self) -> Result<Vec<SampleId>> {
        (0..self.local_batch)
            .map(|_| {
                self.next_sample().map(|s| SampleId {
                    epoch: s.epoch,
                    file: s.file,
                    index: s.index,
                    tokens: s.shard.tokens(s.index),
                })
            })
            .collect()
    }

    /// The next batch of exactly `local_batch` samples.
    pub fn next_batch(&mut self) -> Result<BertBatch> {
        let device = self.device;
        Ok(self.next_host_batch()?.take(device))
    }

    /// The next batch of exactly `local_batch` samples, still on the host.
    pub fn next_host_batch(&mut self) -> Result<HostBatch> {
        let mut b = HostBatch::default();
        while b.len() < self.local_batch {
            let s = self.next_sample()?;
            b.push(&s.shard, s.index)?;
        }
        Ok(b)
    }
}

/// The fixed evaluation set: the first `max_samples` samples of the eval shards, in file order.
pub struct EvalSet {
    shards: Vec<Shard>,
    pub samples: usize,
}

impl EvalSet {
    pub fn load(dir: &Path, max_samples: usize) -> Result<EvalSet> {
        let mut shards = Vec::new();
        let mut n = 0;
        for f in shard_files(dir)? {
            if n >= max_samples {
                break;
            }
            let s = Shard::read(&f)?;
            n += s.n;
            shards.push(s);
        }
        let samples = n.min(max_samples);
        if samples < max_samples {
            bail!(
                "{}: eval set has {samples} samples, the config asks for {max_samples}",
                dir.display()
            );
        }
        Ok(EvalSet { shards, samples })
    }

    /// The eval set in batches of `batch` (the last may be smaller); for rank `rank` of `world`,
    /// batch `k` belongs to rank `k % world`.
    pub fn batches(
        &self,
        batch: usize,
        rank: usize,
        world: usize,
        device: Device,
    ) -> Result<Vec<BertBatch>> {
        let mut out = Vec::new();
        let mut b = HostBatch::default();
        let mut k = 0usize;
        let mut seen = 0;
        'outer: for sh in &self.shards {
            for i in 0..sh.n {
                if seen == self.samples {
                    break 'outer;
                }
                seen += 1;
                if k % world == rank {
                    b.push(sh, i)?;
                }
                if seen % batch == 0 {
                    if b.len() > 0 {
                        out.push(b.take(device));
                    }
                    k += 1;
                }
            }
        }
        if b.len() > 0 {
            out.push(b.take(device));
        }
        Ok(out)
    }

    /// (sequence length, prediction slots) of the eval shards (the first one's), the same on
    /// every rank whatever batches it gets.
    pub fn shape(&self) -> (usize, usize) {
        self.shards.first().map_or((0, 0), |s| (s.seq, s.preds))
    }

    /// Largest token id in the eval set.
    pub fn max_token(&self) -> i32 {
        self.shards.iter().map(|s| s.max_token()).max().unwrap_or(0)
    }

    /// Whether the model takes every eval shard ([`Shard::check_fits`]), naming the first that
    /// it does not.
    pub fn check_fits(&self, fit: &ModelFit) -> Result<()> {
        self.shards.iter().try_for_each(|s| s.check_fits(fit))
    }
}

/// What a model takes from a shard ([`Shard::check_fits`]): token ids below `vocab_size`,
/// segment ids below `type_vocab_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelFit {
    pub vocab_size: i64,
    pub type_vocab_size: i64,
}

/// Every token id of a data set must index the model's embedding table.
pub fn check_vocab(max_token: i32, vocab_size: i64, what: &Path) -> Result<()> {
    if max_token as i64 >= vocab_size {
        bail!(
            "{}: token id {max_token} does not fit the model's vocab_size {vocab_size}; set model.vocab_size to at least {}",
            what.display(),
            max_token as i64 + 1
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_mask_slot_is_empty_exactly_for_batches_without_padding() {
        assert!(has_padding(&[1, 1, 0, 1]));
        assert!(!has_padding(&[1, 1, 1, 1]));
        let mask = Tensor::from_slice(&[1i64, 1, 1, 0, 1, 1]).view([2, 3]);
        let slot = step_mask_slot(mask.shallow_clone(), true);
        assert_eq!(slot.size(), [2, 3]);
        assert!(step_attention_mask(&slot).is_some());
        let slot = step_mask_slot(mask, false);
        // the same rows (a graph key of the same batch size), no columns
        assert_eq!(slot.size(), [2, 0]);
        assert!(step_attention_mask(&slot).is_none());
    }
}
