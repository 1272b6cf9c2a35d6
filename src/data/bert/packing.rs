//! Packed sequences (`methods.packing`): the reference shards' sequences packed at load time into
//! fixed rows of `S` tokens (`S`: the data's max sequence length), at most `K` sequences per row
//! (default 3, as NVIDIA's packed MLPerf data), so that a step has one shape and almost no
//! padding.
//!
//! **Order.** Every rank reads the same global stream as the unpacked loader makes it (shard files
//! permuted per (seed, epoch), each shard's samples permuted per (seed, epoch, shard); not split
//! by rank). The stream is cut into windows of [`DEFAULT_WINDOW`] samples that never cross an
//! epoch boundary; each window is packed ([`pack`]) and its rows are shuffled with a stream drawn
//! from (seed, epoch, window). A step takes the next `world x rows_per_rank` rows of that row
//! stream, rank `r` the `r`-th run of `rows_per_rank` of them. So every sample is in exactly one
//! row, seen by exactly one rank, once per epoch; the order is random per seed and the same on
//! every rank (each rank computes the same packing and takes its own rows).
//!
//! **Packing.** Within a window, longest first with the best pair last ([`pack`]), under three
//! budgets: `S` tokens, `K` sequences and `P_row` masked-LM predictions ([`PackSpec`]).
//!
//! **A packed row** (`[S]` each): the sequences' tokens one after another, then the padding tail;
//! position ids restart at 0 for each sequence; segment (token type) ids are each sequence's own;
//! `slots` says which sequence of the row a token belongs to (`K` for the padding tail). The
//! attention boundaries are `cu_seqlens`: `K + 1` segments per row (the `K` sequence slots, empty
//! ones of length 0, then the tail), `R x (K + 1) + 1` int32 offsets into the `R x S` tokens. Per
//! row, `K` NSP slots (each sequence's `[CLS]` position and label; -100 for an empty slot, which the
//! loss ignores) and `P_row` masked-LM slots (positions within the row, ids, weight 1 for a real
//! prediction). Every tensor of a packed batch has a shape fixed by (R, S, K, P_row), whatever
//! the sequences are: what a CUDA graph needs.

use super::{shard_files, Sample, SampleId, TrainLoader};
use crate::data::rng::Rng;
use anyhow::{bail, Result};
use std::collections::VecDeque;
use std::io::Write as _;
use std::path::Path;
use tch::{Device, Tensor};

/// Samples packed together at a time: larger packs tighter and keeps more shards in memory.
pub const DEFAULT_WINDOW: usize = 8192;
/// NVIDIA's packed MLPerf data: at most 3 sequences per 512-token row.
pub const DEFAULT_MAX_PER_ROW: usize = 3;
/// The label of an empty NSP slot (`pretraining_loss` ignores it).
pub const NSP_IGNORE: i64 = -100;

/// The budgets of one packed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackSpec {
    /// Tokens per row (`S`).
    pub seq: usize,
    /// Sequences per row (`K`).
    pub max_per_row: usize,
    /// Masked-LM prediction slots per row (`P_row`).
    pub preds_per_row: usize,
}

impl PackSpec {
    /// Rows of `seq` tokens, `max_per_row` sequences, for shards of `preds` prediction slots per
    /// sequence: `P_row` = `min(K x P, P' + P'/8 + K)` rounded up to a multiple of 8, with
    /// `P' = min(P, S)` (at 15% masking three sequences of a row predict at most about
    /// `0.15 S + 3`; the packer keeps to the budget whatever the data).
    pub fn new(seq: usize, max_per_row: usize, preds: usize) -> Result<PackSpec> {
        if seq == 0 || max_per_row == 0 {
            bail!("a packed row needs a length and at least one sequence (got {seq} tokens, {max_per_row} sequences)");
        }
        let p = preds.min(seq);
        let budget = (p + p / 8 + max_per_row).min(max_per_row * preds.max(1));
        Ok(PackSpec {
            seq,
            max_per_row,
            preds_per_row: budget.div_ceil(8) * 8,
        })
    }
}

/// One sequence to pack: its real tokens and its masked-LM predictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub tokens: usize,
    pub preds: usize,
}

/// Longest first, best pair last: `items` into rows (lists of indices into `items`) under
/// `spec`'s budgets. Each row starts with the longest item left; while it has room and two
/// sequence slots, it takes the one or two items left that fill it most (the best pair `b + c <=
/// room`, `c <= b`; of equal fills the one with the shortest `b`), or the best single); with one
/// slot left, the longest item that fits. Items of equal
/// length go in index order. Every item is in exactly one row; an item that alone exceeds a
/// budget is an error naming it.
///
/// On `synth-bert --lengths realistic` data at 512 tokens this leaves about 1.3% of the slots
/// padding where plain best-fit decreasing leaves about 10% (the three-per-row limit: short
/// sequences must go where they complete a row, not into the first gap they fit).
pub fn pack(items: &[Item], spec: &PackSpec) -> Result<Vec<Vec<usize>>> {
    use std::collections::BTreeSet;
    let (s, k, budget) = (spec.seq, spec.max_per_row, spec.preds_per_row);
    for (i, it) in items.iter().enumerate() {
        if it.tokens > s || it.preds > budget {
            bail!(
                "sequence {i} has {} tokens and {} predictions, more than a packed row's {} tokens / {} predictions",
                it.tokens,
                it.preds,
                s,
                budget
            );
        }
    }
    // items by length, each stack's top its lowest index; the lengths that have items
    let mut by_len: Vec<Vec<usize>> = vec![Vec::new(); s + 1];
    for i in (0..items.len()).rev() {
        by_len[items[i].tokens].push(i);
    }
    let mut avail: BTreeSet<usize> = (0..=s).filter(|&l| !by_len[l].is_empty()).collect();
    let take = |by_len: &mut Vec<Vec<usize>>, avail: &mut BTreeSet<usize>, l: usize| {
        let i = by_len[l].pop();
        if by_len[l].is_empty() {
            avail.remove(&l);
        }
        i
    };
    let mut rows = Vec::new();
    while let Some(&a) = avail.iter().next_back() {
        let Some(first) = take(&mut by_len, &mut avail, a) else {
            break;
        };
        let mut row = vec![first];
        let mut room = s - a;
        let mut preds = items[first].preds;
        while row.len() < k && room > 0 {
            // the n-th item of length l from the top (n = 0, 1), if it fits the predictions left
            let fits = |by_len: &Vec<Vec<usize>>, l: usize, n: usize, extra: usize| {
                let st = &by_len[l];
                (st.len() > n && preds + extra + items[st[st.len() - 1 - n]].preds <= budget)
                    .then(|| items[st[st.len() - 1 - n]].preds)
            };
            // (fill, b, c)
            let mut best: Option<(usize, usize, Option<usize>)> = None;
            // shortest b first: of the pairs that fill the row equally, the most even one, which
            // leaves the long and the short items for other rows
            for &b in avail.range(..=room) {
                let Some(pb) = fits(&by_len, b, 0, 0) else {
                    continue;
                };
                let mut c = None;
                if row.len() + 2 <= k {
                    for &cl in avail.range(..=b.min(room - b)).rev() {
                        if fits(&by_len, cl, usize::from(cl == b), pb).is_some() {
                            c = Some(cl);
                            break;
                        }
                    }
                }
                let fill = b + c.unwrap_or(0);
                if best.is_none_or(|(f, _, _)| fill > f) {
                    best = Some((fill, b, c));
                }
                if fill == room {
                    break;
                }
            }
            let Some((_, b, c)) = best else {
                break;
            };
            for l in std::iter::once(b).chain(c) {
                if let Some(i) = take(&mut by_len, &mut avail, l) {
                    row.push(i);
                    room -= l;
                    preds += items[i].preds;
                }
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// How full packed rows are.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PackStats {
    pub sequences: u64,
    pub tokens: u64,
    pub rows: u64,
    /// The fewest rows any packing of the same windows could have: per window,
    /// `max(ceil(tokens / S), ceil(sequences / K), sequences longer than S/2)`.
    pub bound_rows: u64,
    pub seq: u64,
}

impl PackStats {
    /// Add one window's packing.
    pub fn add(&mut self, items: &[Item], rows: usize, spec: &PackSpec) {
        let tokens: usize = items.iter().map(|i| i.tokens).sum();
        let long = items.iter().filter(|i| 2 * i.tokens > spec.seq).count();
        let bound = tokens
            .div_ceil(spec.seq)
            .max(items.len().div_ceil(spec.max_per_row))
            .max(long);
        self.sequences += items.len() as u64;
        self.tokens += tokens as u64;
        self.rows += rows as u64;
        self.bound_rows += bound as u64;
        self.seq = spec.seq as u64;
    }

    /// Real tokens / token slots of the rows.
    pub fn efficiency(&self) -> f64 {
        self.tokens as f64 / (self.rows * self.seq).max(1) as f64
    }

    /// The efficiency of the fewest rows possible.
    pub fn bound(&self) -> f64 {
        self.tokens as f64 / (self.bound_rows * self.seq).max(1) as f64
    }

    /// Sequences per row.
    pub fn factor(&self) -> f64 {
        self.sequences as f64 / self.rows.max(1) as f64
    }
}

/// A sample's real tokens and predictions, checked for packing: the mask a run of ones then
/// zeros, the tokens within a row, every prediction on a real token. Errors name the file.
fn item_of(s: &Sample, spec: &PackSpec, too_long: &str) -> Result<Item> {
    let sh = &s.shard;
    let i = s.index;
    let mask = &sh.input_mask[i * sh.seq..(i + 1) * sh.seq];
    let tokens = mask.iter().take_while(|&&m| m != 0).count();
    if mask[tokens..].iter().any(|&m| m != 0) {
        bail!(
            "{}: sample {i}: input_mask is not a run of ones followed by zeros; methods.packing \
             needs each sequence's real tokens first (the reference layout). Data packed \
             already (NVIDIA's packed shards) is not read: give the reference shards, or turn \
             methods.packing off",
            sh.path.display()
        );
    }
    if tokens > spec.seq {
        bail!(
            "{}: sample {i} has {tokens} tokens, more than a packed row holds ({} tokens{too_long}",
            sh.path.display(),
            spec.seq
        );
    }
    if tokens == 0 {
        bail!(
            "{}: sample {i} has no tokens (its input_mask is all zeros)",
            sh.path.display()
        );
    }
    let pos = &sh.masked_positions[i * sh.preds..(i + 1) * sh.preds];
    let preds = pos.iter().position(|&x| x == 0).unwrap_or(sh.preds);
    if let Some(&p) = pos[..preds].iter().find(|&&p| p as usize >= tokens) {
        bail!(
            "{}: sample {i} masks position {p}, past its {tokens} real tokens; packing would put \
             that prediction on another sequence's token",
            sh.path.display()
        );
    }
    if preds > spec.preds_per_row {
        bail!(
            "{}: sample {i} has {preds} predictions, more than a packed row's {}",
            sh.path.display(),
            spec.preds_per_row
        );
    }
    Ok(Item { tokens, preds })
}

/// The rows of one rank's micro-batch on the host, before they become tensors
/// ([`PackedHostBatch::to_device`]).
pub struct PackedHostBatch {
    spec: PackSpec,
    rows: usize,
    ids: Vec<i64>,
    seg: Vec<i64>,
    positions: Vec<i64>,
    slots: Vec<i64>,
    cu_seqlens: Vec<i32>,
    cls: Vec<i64>,
    nsp: Vec<i64>,
    mlm_pos: Vec<i64>,
    mlm_ids: Vec<i64>,
    mlm_w: Vec<f32>,
    /// Sequences in this micro-batch on all ranks.
    pub global_sequences: u64,
}

/// One sequence as a packed row takes it: its real tokens only.
#[derive(Debug, Clone, Copy)]
pub struct Sequence<'a> {
    /// Token ids of the real tokens (`[CLS] ... [SEP]`).
    pub ids: &'a [i32],
    /// Their token types.
    pub segments: &'a [i32],
    /// Masked positions (within the sequence) of the real predictions.
    pub masked_positions: &'a [i32],
    /// Their original token ids.
    pub masked_ids: &'a [i32],
    pub nsp: i32,
}

impl<'a> Sequence<'a> {
    /// Sample `s` of its shard (checked by [`item_of`]).
    fn of(s: &'a Sample) -> Sequence<'a> {
        let sh = &s.shard;
        let i = s.index;
        let len = sh.input_mask[i * sh.seq..(i + 1) * sh.seq]
            .iter()
            .take_while(|&&m| m != 0)
            .count();
        let pos = &sh.masked_positions[i * sh.preds..(i + 1) * sh.preds];
        let end = pos.iter().position(|&x| x == 0).unwrap_or(sh.preds);
        Sequence {
            ids: &sh.input_ids[i * sh.seq..i * sh.seq + len],
            segments: &sh.segment_ids[i * sh.seq..i * sh.seq + len],
            masked_positions: &pos[..end],
            masked_ids: &sh.masked_ids[i * sh.preds..i * sh.preds + end],
            nsp: sh.nsp[i],
        }
    }
}

impl PackedHostBatch {
    /// Rows of sequences (each row within `spec`'s budgets) as one packed micro-batch;
    /// `global_sequences` is what the micro-batch counts for over all ranks.
    pub fn from_rows(
        rows: &[Vec<Sequence<'_>>],
        spec: PackSpec,
        global_sequences: u64,
    ) -> Result<PackedHostBatch> {
        let (s, k, p) = (spec.seq, spec.max_per_row, spec.preds_per_row);
        let n = rows.len();
        let mut b = PackedHostBatch {
            spec,
            rows: n,
            ids: vec![0; n * s],
            seg: vec![0; n * s],
            positions: vec![0; n * s],
            slots: vec![k as i64; n * s],
            cu_seqlens: Vec::with_capacity(n * (k + 1) + 1),
            cls: vec![0; n * k],
            nsp: vec![NSP_IGNORE; n * k],
            mlm_pos: vec![0; n * p],
            mlm_ids: vec![0; n * p],
            mlm_w: vec![0.0; n * p],
            global_sequences,
        };
        b.cu_seqlens.push(0);
        let mut offset = 0i32;
        for (r, row) in rows.iter().enumerate() {
            let tokens: usize = row.iter().map(|q| q.ids.len()).sum();
            let preds: usize = row.iter().map(|q| q.masked_positions.len()).sum();
            if row.len() > k || tokens > s || preds > p {
                bail!(
                    "packed row {r}: {} sequences, {tokens} tokens, {preds} predictions exceed the \
                     row's {k} / {s} / {p}",
                    row.len()
                );
            }
            let base = r * s;
            let mut at = 0usize;
            let mut pred = 0usize;
            for (j, q) in row.iter().enumerate() {
                let len = q.ids.len();
                if q.segments.len() != len || q.masked_ids.len() != q.masked_positions.len() {
                    bail!("packed row {r}, sequence {j}: its ids, segments and predictions disagree in length");
                }
                for t in 0..len {
                    b.ids[base + at + t] = q.ids[t] as i64;
                    b.seg[base + at + t] = q.segments[t] as i64;
                    b.positions[base + at + t] = t as i64;
                    b.slots[base + at + t] = j as i64;
                }
                b.cls[r * k + j] = at as i64;
                b.nsp[r * k + j] = q.nsp as i64;
                for (&mp, &mid) in q.masked_positions.iter().zip(q.masked_ids) {
                    if mp < 0 || mp as usize >= len {
                        bail!("packed row {r}, sequence {j}: masked position {mp} outside its {len} tokens");
                    }
                    b.mlm_pos[r * p + pred] = (at + mp as usize) as i64;
                    b.mlm_ids[r * p + pred] = mid as i64;
                    b.mlm_w[r * p + pred] = 1.0;
                    pred += 1;
                }
                at += len;
                offset += len as i32;
                b.cu_seqlens.push(offset);
            }
            for _ in row.len()..k {
                b.cu_seqlens.push(offset);
            }
            // the padding tail: a segment of its own
            offset = ((r + 1) * s) as i32;
            b.cu_seqlens.push(offset);
        }
        Ok(b)
    }

    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The batch as device tensors through the hand-off.
    pub fn to_device(self, t: &crate::gpu::transfer::Transfer) -> Result<PackedBatch> {
        let (r, s, k, p) = (
            self.rows as i64,
            self.spec.seq as i64,
            self.spec.max_per_row as i64,
            self.spec.preds_per_row as i64,
        );
        Ok(PackedBatch {
            input_ids: t.tensor(&self.ids, &[r, s])?,
            segment_ids: t.tensor(&self.seg, &[r, s])?,
            position_ids: t.tensor(&self.positions, &[r, s])?,
            slots: t.tensor(&self.slots, &[r, s])?,
            cu_seqlens: t.tensor(&self.cu_seqlens, &[r * (k + 1) + 1])?,
            cls_positions: t.tensor(&self.cls, &[r, k])?,
            nsp_labels: t.tensor(&self.nsp, &[r * k])?,
            masked_positions: t.tensor(&self.mlm_pos, &[r, p])?,
            masked_ids: t.tensor(&self.mlm_ids, &[r, p])?,
            masked_weights: t.tensor(&self.mlm_w, &[r, p])?,
            global_sequences: self.global_sequences,
        })
    }

    /// The batch as tensors on `device` (tests, without the hand-off).
    pub fn to_tensors(&self, device: Device) -> PackedBatch {
        let (r, s, k, p) = (
            self.rows as i64,
            self.spec.seq as i64,
            self.spec.max_per_row as i64,
            self.spec.preds_per_row as i64,
        );
        let t = |v: &[i64], shape: &[i64]| Tensor::from_slice(v).view(shape).to_device(device);
        PackedBatch {
            input_ids: t(&self.ids, &[r, s]),
            segment_ids: t(&self.seg, &[r, s]),
            position_ids: t(&self.positions, &[r, s]),
            slots: t(&self.slots, &[r, s]),
            cu_seqlens: Tensor::from_slice(&self.cu_seqlens).to_device(device),
            cls_positions: t(&self.cls, &[r, k]),
            nsp_labels: t(&self.nsp, &[r * k]),
            masked_positions: t(&self.mlm_pos, &[r, p]),
            masked_ids: t(&self.mlm_ids, &[r, p]),
            masked_weights: Tensor::from_slice(&self.mlm_w)
                .view([r, p])
                .to_device(device),
            global_sequences: self.global_sequences,
        }
    }
}

/// One rank's packed micro-batch on a device (module docs for the layout).
pub struct PackedBatch {
    /// `[R, S]`
    pub input_ids: Tensor,
    /// `[R, S]` each sequence's token types.
    pub segment_ids: Tensor,
    /// `[R, S]` positions restarting at 0 for each sequence.
    pub position_ids: Tensor,
    /// `[R, S]` the sequence slot of each token in its row (`K`: the padding tail).
    pub slots: Tensor,
    /// `[R x (K + 1) + 1]` int32 segment offsets into the `R x S` tokens.
    pub cu_seqlens: Tensor,
    /// `[R, K]` each sequence's `[CLS]` position in its row (0 for an empty slot).
    pub cls_positions: Tensor,
    /// `[R x K]` NSP labels, [`NSP_IGNORE`] for an empty slot.
    pub nsp_labels: Tensor,
    /// `[R, P_row]` masked positions within the row.
    pub masked_positions: Tensor,
    /// `[R, P_row]`
    pub masked_ids: Tensor,
    /// `[R, P_row]` 1 = a real prediction.
    pub masked_weights: Tensor,
    /// Sequences in this micro-batch on all ranks.
    pub global_sequences: u64,
}

/// The number of tensors of [`PackedBatch::into_step_inputs`].
pub const STEP_INPUTS: usize = 10;

impl PackedBatch {
    /// The model's view of the batch.
    pub fn inputs(&self) -> crate::models::bert::PackedInputs<'_> {
        crate::models::bert::PackedInputs {
            input_ids: &self.input_ids,
            segment_ids: &self.segment_ids,
            position_ids: &self.position_ids,
            slots: &self.slots,
            cu_seqlens: &self.cu_seqlens,
            cls_positions: &self.cls_positions,
            masked_positions: &self.masked_positions,
        }
    }

    /// The batch as a training step's input tensors, in the order of the fields above.
    pub fn into_step_inputs(self) -> [Tensor; STEP_INPUTS] {
        [
            self.input_ids,
            self.segment_ids,
            self.position_ids,
            self.slots,
            self.cu_seqlens,
            self.cls_positions,
            self.nsp_labels,
            self.masked_positions,
            self.masked_ids,
            self.masked_weights,
        ]
    }

    pub fn tensors(&self) -> Vec<&Tensor> {
        vec![
            &self.input_ids,
            &self.segment_ids,
            &self.position_ids,
            &self.slots,
            &self.cu_seqlens,
            &self.cls_positions,
            &self.nsp_labels,
            &self.masked_positions,
            &self.masked_ids,
            &self.masked_weights,
        ]
    }
}

/// Endless, seeded packed rows: every rank the same packing, its own rows (module docs).
pub struct PackedLoader {
    stream: TrainLoader,
    spec: PackSpec,
    seed: u64,
    rank: usize,
    world: usize,
    rows_per_rank: usize,
    window: usize,
    /// Packed rows not yet taken, in order.
    rows: VecDeque<Vec<Sample>>,
    /// The first sample of the next epoch, read while closing a window.
    carry: Option<Sample>,
    /// (epoch, window in that epoch) of the next window.
    next_window: (u64, u64),
    /// How full the rows packed so far are.
    pub stats: PackStats,
    /// Samples in the whole training set.
    pub total_samples: usize,
    /// The sequences per row the run's `global_batch_size` assumes (`train.packing_factor`):
    /// one warning when the first full window packs more than 5% off it.
    expected_factor: Option<f64>,
    /// What a sample longer than a row is told to do (after the row's length).
    too_long: String,
}

/// What the trainer says of a sample longer than its rows.
const TRAINER_TOO_LONG: &str = ": the eval set's sequence length); use training shards of the \
                                eval set's sequence length, or turn methods.packing off";

impl PackedLoader {
    /// Rows of `spec` from the shards of `dir`, `rows_per_rank` per rank and micro-batch.
    pub fn new(
        dir: &Path,
        seed: u64,
        rank: usize,
        world: usize,
        rows_per_rank: usize,
        spec: PackSpec,
    ) -> Result<PackedLoader> {
        // one rank of one: the global stream, which every rank reads whole
        let stream = TrainLoader::new(dir, seed, 0, 1, 1, Device::Cpu)?;
        if world == 0 || rank >= world || rows_per_rank == 0 {
            bail!("invalid sharding: rank {rank} of world {world}, {rows_per_rank} rows per rank");
        }
        Ok(PackedLoader {
            total_samples: stream.total_samples,
            stream,
            spec,
            seed,
            rank,
            world,
            rows_per_rank,
            window: DEFAULT_WINDOW,
            rows: VecDeque::new(),
            carry: None,
            next_window: (0, 0),
            stats: PackStats::default(),
            expected_factor: None,
            too_long: TRAINER_TOO_LONG.to_string(),
        })
    }

    /// Say `hint` (after the row's length) of a sample longer than a row, instead of the
    /// trainer's advice.
    pub fn with_too_long_hint(mut self, hint: String) -> Self {
        self.too_long = hint;
        self
    }

    /// Check each shard against what the model takes when it is read
    /// ([`TrainLoader::with_fit`]).
    pub fn with_fit(mut self, fit: super::ModelFit) -> Self {
        self.stream = self.stream.with_fit(fit);
        self
    }

    /// Pack `window` samples at a time instead of [`DEFAULT_WINDOW`].
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window.max(1);
        self
    }

    /// Warn once when the data packs more than 5% off `factor` sequences per row (the run's
    /// `train.packing_factor`).
    pub fn with_expected_factor(mut self, factor: f64) -> Self {
        self.expected_factor = Some(factor);
        self
    }

    pub fn spec(&self) -> PackSpec {
        self.spec
    }

    /// Pack the next window of the stream onto the row queue.
    fn fill(&mut self) -> Result<()> {
        // a window never spans more than the epoch
        let mut samples: Vec<Sample> =
            Vec::with_capacity(self.window.min(self.total_samples.max(1)));
        let mut epoch = None;
        while samples.len() < self.window {
            let s = match self.carry.take() {
                Some(s) => s,
                None => self.stream.next_in_stream()?,
            };
            match epoch {
                None => epoch = Some(s.epoch),
                Some(e) if e != s.epoch => {
                    self.carry = Some(s);
                    break;
                }
                Some(_) => {}
            }
            samples.push(s);
        }
        let epoch = epoch.unwrap_or(0);
        if self.next_window.0 != epoch {
            self.next_window = (epoch, 0);
        }
        let items = samples
            .iter()
            .map(|s| item_of(s, &self.spec, &self.too_long))
            .collect::<Result<Vec<_>>>()?;
        let rows = pack(&items, &self.spec)?;
        self.stats.add(&items, rows.len(), &self.spec);
        if let Some(want) = self.expected_factor {
            let got = items.len() as f64 / rows.len().max(1) as f64;
            // judged on a full window (or the whole data set)
            if items.len() == self.window || self.stats.sequences >= self.total_samples as u64 {
                self.expected_factor = None;
                if (got - want).abs() > 0.05 * want {
                    tracing::warn!(
                        "methods.packing: the data packs at {got:.3} sequences per row of {} \
                         tokens, train.packing_factor is {want}: the steps (and the closed eval \
                         cadence) assume {want}, the log's epoch_num counts the sequences trained; \
                         set train.packing_factor to what `mlperf-run data bert-pack` reports",
                        self.spec.seq
                    );
                }
            }
        }
        let mut slots: Vec<Option<Sample>> = samples.into_iter().map(Some).collect();
        let mut rows: Vec<Vec<Sample>> = rows
            .into_iter()
            .map(|r| r.into_iter().filter_map(|i| slots[i].take()).collect())
            .collect();
        // "PACK" keeps these streams apart from the loader's own (seed, epoch, ...) streams
        Rng::derive(
            self.seed,
            &[0x5041_434b, self.next_window.0, self.next_window.1],
        )
        .shuffle(&mut rows);
        self.next_window.1 += 1;
        self.rows.extend(rows);
        Ok(())
    }

    /// The next micro-batch's rows of every rank, in rank order.
    fn next_global_rows(&mut self) -> Result<Vec<Vec<Sample>>> {
        let want = self.world * self.rows_per_rank;
        while self.rows.len() < want {
            self.fill()?;
        }
        Ok(self.rows.drain(..want).collect())
    }

    /// This rank's next micro-batch on the host.
    pub fn next_host_batch(&mut self) -> Result<PackedHostBatch> {
        let rows = self.next_global_rows()?;
        let global: usize = rows.iter().map(Vec::len).sum();
        let start = self.rank * self.rows_per_rank;
        let mine: Vec<Vec<Sequence<'_>>> = rows[start..start + self.rows_per_rank]
            .iter()
            .map(|row| row.iter().map(Sequence::of).collect())
            .collect();
        PackedHostBatch::from_rows(&mine, self.spec, global as u64)
    }

    /// This rank's next micro-batch as the samples of each row, and the sequences of the
    /// micro-batch on all ranks (tests and the report).
    pub fn next_batch_ids(&mut self) -> Result<(Vec<Vec<SampleId>>, usize)> {
        let rows = self.next_global_rows()?;
        let global: usize = rows.iter().map(Vec::len).sum();
        let start = self.rank * self.rows_per_rank;
        let mine = rows[start..start + self.rows_per_rank]
            .iter()
            .map(|row| {
                row.iter()
                    .map(|s| SampleId {
                        epoch: s.epoch,
                        file: s.file,
                        index: s.index,
                        tokens: s.shard.tokens(s.index),
                    })
                    .collect()
            })
            .collect();
        Ok((mine, global))
    }
}

/// `mlperf-run data bert-pack`: how one epoch of `dir` packs.
pub struct PackReport {
    pub files: usize,
    pub spec: PackSpec,
    pub stats: PackStats,
    /// Real tokens / token slots without packing (each sequence in a row of its own).
    pub unpacked_efficiency: f64,
}

/// Pack one epoch of the shards of `dir` into rows of `seq` tokens (default: the shards'),
/// `max_per_row` sequences, in windows of `window` samples.
pub fn report(
    dir: &Path,
    seq: Option<usize>,
    max_per_row: usize,
    window: usize,
    seed: u64,
) -> Result<PackReport> {
    for (flag, v) in [
        ("--row-len", seq.unwrap_or(1)),
        ("--max-per-row", max_per_row),
        ("--window", window),
    ] {
        if v == 0 {
            bail!("{flag} must be at least 1 (got 0)");
        }
    }
    let files = shard_files(dir)?;
    let first = super::Shard::read(&files[0])?;
    let spec = PackSpec::new(seq.unwrap_or(first.seq), max_per_row, first.preds)?;
    let hint = format!(
        ", --row-len); give --row-len {} (the shards' sequence length) or more",
        first.seq
    );
    let mut l = PackedLoader::new(dir, seed, 0, 1, 1, spec)?
        .with_window(window)
        .with_too_long_hint(hint);
    let total = l.total_samples as u64;
    while l.stats.sequences < total {
        l.fill()?;
    }
    let stats = l.stats;
    Ok(PackReport {
        files: files.len(),
        spec,
        unpacked_efficiency: stats.tokens as f64 / (stats.sequences * spec.seq as u64) as f64,
        stats,
    })
}

impl std::fmt::Display for PackReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.stats;
        writeln!(
            f,
            "{} sequences ({} shards) into rows of {} tokens, at most {} sequences and {} predictions per row",
            s.sequences, self.files, self.spec.seq, self.spec.max_per_row, self.spec.preds_per_row
        )?;
        writeln!(
            f,
            "rows: {} ({:.3} sequences per row); fewest possible: {}",
            s.rows,
            s.factor(),
            s.bound_rows
        )?;
        writeln!(
            f,
            "packing efficiency: {:.2}% of token slots real ({:.2}% padding); bound {:.2}%; unpacked {:.2}%",
            100.0 * s.efficiency(),
            100.0 * (1.0 - s.efficiency()),
            100.0 * s.bound(),
            100.0 * self.unpacked_efficiency
        )
    }
}

/// Options of `data bert-pack`.
#[derive(clap::Args, Debug, Clone)]
pub struct BertPackArgs {
    /// BERT data directory (its train/ holds the shards).
    #[arg(long)]
    pub dir: std::path::PathBuf,
    /// Tokens per packed row (default: the shards' sequence length).
    #[arg(long)]
    pub row_len: Option<usize>,
    /// Sequences per row at most.
    #[arg(long, default_value_t = DEFAULT_MAX_PER_ROW)]
    pub max_per_row: usize,
    /// Samples packed together at a time (the trainer's: 8192).
    #[arg(long, default_value_t = DEFAULT_WINDOW)]
    pub window: usize,
    /// The loader's shuffle seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// `mlperf-run data bert-pack`.
pub fn run_bert_pack(a: BertPackArgs) -> Result<crate::util::ExitStatus> {
    // a folder without shards names the flag that gave it
    anyhow::Context::context(shard_files(&a.dir.join("train")), "--dir")?;
    let r = report(
        &a.dir.join("train"),
        a.row_len,
        a.max_per_row,
        a.window,
        a.seed,
    )?;
    let mut out = crate::util::output::stdout();
    if a.json {
        let s = &r.stats;
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "sequences": s.sequences,
                "shards": r.files,
                "row_len": r.spec.seq,
                "max_per_row": r.spec.max_per_row,
                "preds_per_row": r.spec.preds_per_row,
                "rows": s.rows,
                "bound_rows": s.bound_rows,
                "sequences_per_row": s.factor(),
                "efficiency": s.efficiency(),
                "padding": 1.0 - s.efficiency(),
                "bound_efficiency": s.bound(),
                "unpacked_efficiency": r.unpacked_efficiency,
            })
        )?;
    } else {
        write!(out, "{r}")?;
    }
    Ok(crate::util::ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seq: usize) -> PackSpec {
        PackSpec::new(seq, 3, 76).unwrap()
    }

    #[test]
    fn the_prediction_budget_covers_three_sequences_at_15_percent() {
        assert_eq!(PackSpec::new(512, 3, 76).unwrap().preds_per_row, 88);
        assert_eq!(PackSpec::new(32, 3, 76).unwrap().preds_per_row, 40);
        assert_eq!(PackSpec::new(128, 1, 20).unwrap().preds_per_row, 24);
    }

    #[test]
    fn every_item_lands_in_one_row_within_the_budgets() {
        let mut rng = Rng::derive(7, &[1]);
        let items: Vec<Item> = (0..3000)
            .map(|_| {
                let t = 1 + rng.below(512) as usize;
                Item {
                    tokens: t,
                    preds: (t * 15 / 100).clamp(1, 76),
                }
            })
            .collect();
        let sp = spec(512);
        let rows = pack(&items, &sp).unwrap();
        let mut seen = vec![0; items.len()];
        for r in &rows {
            assert!(!r.is_empty() && r.len() <= 3);
            assert!(r.iter().map(|&i| items[i].tokens).sum::<usize>() <= 512);
            assert!(r.iter().map(|&i| items[i].preds).sum::<usize>() <= sp.preds_per_row);
            for &i in r {
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        let mut st = PackStats::default();
        st.add(&items, rows.len(), &sp);
        assert!(st.efficiency() <= st.bound() + 1e-12);
        assert!(st.efficiency() > 0.95 * st.bound(), "{st:?}");
    }

    #[test]
    fn an_item_longer_than_a_row_is_an_error() {
        let err = pack(
            &[Item {
                tokens: 40,
                preds: 2,
            }],
            &spec(32),
        )
        .unwrap_err();
        assert!(err.to_string().contains("40 tokens"), "{err}");
    }
}
