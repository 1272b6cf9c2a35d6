//! `synth-bert --lengths realistic`: sequences filled from documents the way the reference's
//! `create_pretraining_data.py` (google-research/bert, used by the MLPerf data scripts) fills
//! them, so that padding is as common as in the real phase-2 data (about half of the tokens at
//! sequence length 512).
//!
//! Documents: runs of consecutive corpus sentences (wrapping around the corpus) whose length in
//! sentences is log-uniform between 1 and [`MAX_DOC_SENTENCES`] (short stubs as common per octave
//! as long articles). The length distribution does not depend on the sequence length, so the
//! same corpus has little padding at 128 and about half at 512, as Wikipedia does.
//!
//! Per document (the reference's rule): the target length is `seq_len - 3` tokens, or with
//! probability [`SHORT_SEQ_PROB`] (0.1) a uniform length in `2..=seq_len-3` for the whole
//! document. Sentences are gathered into a chunk until it reaches the target or the document
//! ends; the first `a_end` sentences (uniform in `1..len-1`, or 1) form segment A. With
//! probability 1/2 (always for a one-sentence chunk) B is a random-next segment: sentences of
//! another document, from a random start, until B reaches the target's remainder, and the
//! chunk's unused sentences go back to the document; otherwise B is the rest of the chunk. The
//! pair is truncated and masked as in the `pairs` mode ([`super::instance::pair_instance`]). The
//! instances of all documents are shuffled.

use super::instance::{pair_instance, Instance};
use crate::data::rng::Rng;

/// The reference's `short_seq_prob`.
pub const SHORT_SEQ_PROB: f64 = 0.1;
/// The longest document, in sentences.
pub const MAX_DOC_SENTENCES: usize = 80;

/// A document's length in sentences: log-uniform in `1..=MAX_DOC_SENTENCES`.
fn document_sentences(rng: &mut Rng) -> usize {
    let x = rng
        .uniform(0.0, ((MAX_DOC_SENTENCES + 1) as f64).ln())
        .exp();
    (x.floor() as usize).clamp(1, MAX_DOC_SENTENCES)
}

/// A document: indices into the sentence list, consecutive from a random start (wrapping).
fn new_document(rng: &mut Rng, sentences: usize) -> Vec<usize> {
    let len = document_sentences(rng);
    let start = rng.below(sentences as u64) as usize;
    (0..len).map(|j| (start + j) % sentences).collect()
}

/// `n` shuffled instances made from documents of the encoded sentences `sents` (at least one,
/// each at least one token), for `seq_len >= 8`.
pub fn instances(
    rng: &mut Rng,
    sents: &[Vec<i32>],
    n: usize,
    seq_len: usize,
    max_pred: usize,
    vocab_len: usize,
) -> Vec<Instance> {
    let shape = Shape {
        seq_len,
        max_pred,
        vocab_len,
    };
    // a few documents ahead, so that a random-next segment can come from another document
    let mut docs: Vec<Vec<usize>> = (0..4).map(|_| new_document(rng, sents.len())).collect();
    let mut out = Vec::with_capacity(n + 2 * MAX_DOC_SENTENCES);
    let mut d = 0;
    while out.len() < n {
        docs.push(new_document(rng, sents.len()));
        from_document(rng, sents, &docs, d, shape, &mut out);
        d += 1;
    }
    rng.shuffle(&mut out);
    out.truncate(n);
    out
}

#[derive(Clone, Copy)]
struct Shape {
    seq_len: usize,
    max_pred: usize,
    vocab_len: usize,
}

fn concat(sents: &[Vec<i32>], ids: &[usize]) -> Vec<i32> {
    ids.iter().flat_map(|&s| sents[s].iter().copied()).collect()
}

/// The instances of document `d` (the reference's `create_instances_from_document`).
fn from_document(
    rng: &mut Rng,
    sents: &[Vec<i32>],
    docs: &[Vec<usize>],
    d: usize,
    shape: Shape,
    out: &mut Vec<Instance>,
) {
    let doc = &docs[d];
    let max_tokens = shape.seq_len.saturating_sub(3).max(2);
    let target = if rng.next_f64() < SHORT_SEQ_PROB {
        rng.range_inclusive(2, max_tokens as u64) as usize
    } else {
        max_tokens
    };
    let mut chunk: Vec<usize> = Vec::new();
    let mut chunk_tokens = 0;
    let mut i = 0;
    while i < doc.len() {
        chunk.push(doc[i]);
        chunk_tokens += sents[doc[i]].len();
        if i == doc.len() - 1 || chunk_tokens >= target {
            let a_end = if chunk.len() >= 2 {
                rng.range_inclusive(1, chunk.len() as u64 - 1) as usize
            } else {
                1
            };
            let a = concat(sents, &chunk[..a_end]);
            let random_next = chunk.len() == 1 || rng.next_f64() < 0.5;
            let b = if random_next {
                let want = target.saturating_sub(a.len());
                let mut other = d;
                for _ in 0..10 {
                    other = rng.below(docs.len() as u64) as usize;
                    if other != d {
                        break;
                    }
                }
                let od = &docs[other];
                let start = rng.below(od.len() as u64) as usize;
                let mut b = Vec::new();
                for &s in &od[start..] {
                    b.extend(&sents[s]);
                    if b.len() >= want {
                        break;
                    }
                }
                // the chunk's sentences after A were not used: they start the next chunk
                i -= chunk.len() - a_end;
                b
            } else {
                concat(sents, &chunk[a_end..])
            };
            out.push(pair_instance(
                rng,
                a,
                b,
                random_next,
                shape.seq_len,
                shape.max_pred,
                shape.vocab_len,
            ));
            chunk.clear();
            chunk_tokens = 0;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 40 sentences of 10..=39 tokens.
    fn corpus() -> Vec<Vec<i32>> {
        (0..40)
            .map(|k| {
                (0..10 + (k * 7) % 30)
                    .map(|j| 10 + ((k * 31 + j) % 200))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn documents_are_log_uniform_in_length() {
        let mut rng = Rng::from_state(3);
        let lens: Vec<usize> = (0..20_000).map(|_| document_sentences(&mut rng)).collect();
        assert!(lens.iter().all(|&l| (1..=MAX_DOC_SENTENCES).contains(&l)));
        // log-uniform: as many documents of 1..=8 sentences as of 9..=80 (ln 9 / ln 81 = 1/2)
        let short = lens.iter().filter(|&&l| l <= 8).count() as f64 / lens.len() as f64;
        assert!((short - 0.5).abs() < 0.02, "{short}");
    }

    #[test]
    fn about_half_padding_at_512_little_at_128() {
        let sents = corpus();
        let pad = |seq_len: usize| {
            let mut rng = Rng::from_state(11);
            let items = instances(&mut rng, &sents, 3000, seq_len, 76, 300);
            assert_eq!(items.len(), 3000);
            assert!(items.iter().all(|it| it.tokens.len() <= seq_len));
            let toks: usize = items.iter().map(|it| it.tokens.len()).sum();
            1.0 - toks as f64 / (items.len() * seq_len) as f64
        };
        let (p512, p128) = (pad(512), pad(128));
        assert!((0.4..0.6).contains(&p512), "padding at 512: {p512}");
        assert!(p128 < 0.3, "padding at 128: {p128}");
    }

    #[test]
    fn full_sequences_dominate_and_short_ones_exist() {
        let sents = corpus();
        let mut rng = Rng::from_state(5);
        let items = instances(&mut rng, &sents, 4000, 128, 20, 300);
        let full = items.iter().filter(|it| it.tokens.len() == 128).count();
        let short = items.iter().filter(|it| it.tokens.len() < 64).count();
        // a 128-token target is reached by most chunks; document ends, random-next segments
        // and the 10% short targets give the short ones
        assert!(full * 2 > items.len(), "{full} of {} full", items.len());
        assert!(short * 20 > items.len(), "{short} of {} short", items.len());
        // segment A then B, both present
        for it in &items {
            // [CLS] A [SEP]: at least 3 tokens of segment 0; B [SEP]: at least 2 of segment 1
            let a_len = it.segment_ids.iter().filter(|&&g| g == 0).count();
            assert!(a_len >= 3 && it.tokens.len() >= a_len + 2, "{it:?}");
            assert_eq!(it.tokens[a_len - 1], super::super::instance::SEP);
            assert_eq!(*it.tokens.last().unwrap(), super::super::instance::SEP);
        }
        // deterministic per seed
        let mut again = Rng::from_state(5);
        assert_eq!(instances(&mut again, &sents, 4000, 128, 20, 300), items);
    }
}
