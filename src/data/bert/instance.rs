//! One BERT pre-training instance as the reference's `create_pretraining_data.py` makes it:
//! `[CLS] A [SEP] B [SEP]`, truncated to the sequence length, with the masked-LM predictions
//! chosen (15% of the tokens, at most `max_predictions`; of these 80% become `[MASK]`, 10% stay,
//! 10% become a random vocabulary token). Both of `synth-bert`'s modes build their pairs here:
//! `pairs` ([`make_instance`]) and `realistic` ([`super::realistic`]).

use crate::data::rng::Rng;

/// The special tokens' ids: the first five lines of `vocab.txt`.
pub const PAD: i32 = 0;
pub const UNK: i32 = 1;
pub const CLS: i32 = 2;
pub const SEP: i32 = 3;
pub const MASK: i32 = 4;

/// One training instance, unpadded.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub tokens: Vec<i32>,
    pub segment_ids: Vec<i32>,
    pub masked_positions: Vec<i32>,
    pub masked_ids: Vec<i32>,
    pub is_random_next: bool,
}

/// Build one instance from sentence `i` as segment A (the `pairs` mode; see the module docs).
pub fn make_instance(
    rng: &mut Rng,
    sents: &[Vec<i32>],
    i: usize,
    seq_len: usize,
    max_pred: usize,
    vocab_len: usize,
) -> Instance {
    let n = sents.len();
    let a = sents[i].clone();
    let random_next = i + 1 >= n || rng.next_f64() < 0.5;
    let b = if random_next {
        let mut j = rng.below(n as u64) as usize;
        while n > 2 && (j == i + 1 || j == i) {
            j = rng.below(n as u64) as usize;
        }
        sents[j].clone()
    } else {
        sents[i + 1].clone()
    };
    pair_instance(rng, a, b, random_next, seq_len, max_pred, vocab_len)
}

/// `[CLS] A [SEP] B [SEP]` from two segments: the longer one truncated from a random end until
/// the pair fits `seq_len`, then the masked-LM predictions chosen (see the module docs).
pub fn pair_instance(
    rng: &mut Rng,
    mut a: Vec<i32>,
    mut b: Vec<i32>,
    random_next: bool,
    seq_len: usize,
    max_pred: usize,
    vocab_len: usize,
) -> Instance {
    let max_tokens = seq_len.saturating_sub(3).max(2);
    while a.len() + b.len() > max_tokens {
        let longer = if a.len() > b.len() { &mut a } else { &mut b };
        if rng.next_f64() < 0.5 {
            longer.remove(0);
        } else {
            longer.pop();
        }
    }
    let mut tokens = vec![CLS];
    tokens.extend(&a);
    tokens.push(SEP);
    let mut segment_ids = vec![0; tokens.len()];
    tokens.extend(&b);
    tokens.push(SEP);
    segment_ids.resize(tokens.len(), 1);
    let mut cand: Vec<usize> = (0..tokens.len())
        .filter(|&k| tokens[k] != CLS && tokens[k] != SEP)
        .collect();
    rng.shuffle(&mut cand);
    let num = max_pred
        .min(((tokens.len() as f64 * 0.15).round() as usize).max(1))
        .min(cand.len());
    let mut picked: Vec<usize> = cand[..num].to_vec();
    picked.sort();
    let mut masked_ids = Vec::with_capacity(num);
    for &p in &picked {
        masked_ids.push(tokens[p]);
        let r = rng.next_f64();
        if r < 0.8 {
            tokens[p] = MASK;
        } else if r >= 0.9 {
            tokens[p] = rng.below(vocab_len as u64) as i32;
        }
    }
    Instance {
        tokens,
        segment_ids,
        masked_positions: picked.iter().map(|&p| p as i32).collect(),
        masked_ids,
        is_random_next: random_next,
    }
}
