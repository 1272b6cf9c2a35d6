//! Token load balance across data-parallel ranks (the open method `methods.balance_tokens`).
//!
//! With unpadding a rank's step costs about its number of real (non-padding) tokens, and every
//! rank waits for the slowest at the gradient all-reduce. [`assign`] splits one global
//! micro-batch (the same samples on every rank, from the same seeded stream) into equal-count
//! rank batches with nearly equal token counts: the samples sorted by tokens, largest first
//! (ties by position), are dealt in rounds of one sample per rank, the largest of a round to the
//! rank with the fewest tokens so far (ties by rank). After every round the spread between the
//! most and least loaded rank is at most the spread of the token counts of the batch
//! (`max - min`, so less than one sequence): a round widens no gap between two ranks beyond the
//! spread of its own samples, and never widens the earlier gap of a lighter rank that receives
//! a larger sample. This is the sorted greedy of "local presorting" in "Breaking MLPerf
//! Training" (the sort is local to one global batch, so the batches and their order stay those
//! of the seeded shuffle).

use anyhow::{bail, Result};

/// The rank of each sample of a global micro-batch with token counts `tokens`
/// (`ranks * per_rank` of them, in stream order): every rank gets `per_rank` samples.
/// Deterministic: the same counts give the same assignment on every rank.
pub fn assign(tokens: &[usize], ranks: usize) -> Result<Vec<usize>> {
    if ranks == 0 || !tokens.len().is_multiple_of(ranks) {
        bail!(
            "a global batch of {} samples cannot be split evenly over {ranks} ranks",
            tokens.len()
        );
    }
    let mut order: Vec<usize> = (0..tokens.len()).collect();
    order.sort_by(|&a, &b| tokens[b].cmp(&tokens[a]).then(a.cmp(&b)));
    let mut load = vec![0usize; ranks];
    let mut by_load: Vec<usize> = (0..ranks).collect();
    let mut out = vec![0usize; tokens.len()];
    for round in order.chunks(ranks) {
        by_load.sort_by(|&a, &b| load[a].cmp(&load[b]).then(a.cmp(&b)));
        for (&sample, &rank) in round.iter().zip(&by_load) {
            out[sample] = rank;
            load[rank] += tokens[sample];
        }
    }
    Ok(out)
}

/// Token imbalance of a sequence of steps: for each step, the tokens of every rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Imbalance {
    pub steps: usize,
    /// Sum over steps of the busiest rank's tokens / sum over steps of the mean: the time an
    /// epoch takes relative to perfect balance when a step costs its busiest rank's tokens.
    pub epoch_max_over_mean: f64,
    /// The largest per-step max/mean.
    pub worst_step_max_over_mean: f64,
    /// The largest per-step difference between the busiest and the idlest rank, in tokens.
    pub worst_step_spread: usize,
    /// Mean tokens per rank and step.
    pub mean_rank_tokens: f64,
}

impl Imbalance {
    /// `steps[s][r]`: tokens of rank `r` in step `s`.
    pub fn of(steps: &[Vec<usize>]) -> Imbalance {
        let mut im = Imbalance {
            steps: steps.len(),
            ..Imbalance::default()
        };
        let (mut sum_max, mut sum_mean) = (0.0, 0.0);
        for ranks in steps.iter().filter(|r| !r.is_empty()) {
            let max = *ranks.iter().max().unwrap_or(&0);
            let min = *ranks.iter().min().unwrap_or(&0);
            let mean = ranks.iter().sum::<usize>() as f64 / ranks.len() as f64;
            sum_max += max as f64;
            sum_mean += mean;
            if mean > 0.0 {
                im.worst_step_max_over_mean = im.worst_step_max_over_mean.max(max as f64 / mean);
            }
            im.worst_step_spread = im.worst_step_spread.max(max - min);
        }
        if sum_mean > 0.0 {
            im.epoch_max_over_mean = sum_max / sum_mean;
            im.mean_rank_tokens = sum_mean / steps.len() as f64;
        }
        im
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::rng::Rng;

    fn loads(tokens: &[usize], ranks: usize, a: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let mut load = vec![0; ranks];
        let mut count = vec![0; ranks];
        for (k, &r) in a.iter().enumerate() {
            load[r] += tokens[k];
            count[r] += 1;
        }
        (load, count)
    }

    #[test]
    fn equal_counts_and_spread_within_the_token_range() {
        let mut rng = Rng::from_state(42);
        for case in 0..300 {
            let ranks = 1 + rng.below(16) as usize;
            let per_rank = 1 + rng.below(40) as usize;
            let seq = [32usize, 128, 512][case % 3];
            let tokens: Vec<usize> = (0..ranks * per_rank)
                .map(|_| 5 + rng.below(seq as u64 - 4) as usize)
                .collect();
            let a = assign(&tokens, ranks).unwrap();
            let (load, count) = loads(&tokens, ranks, &a);
            assert!(count.iter().all(|&c| c == per_rank), "{count:?}");
            let spread = load.iter().max().unwrap() - load.iter().min().unwrap();
            let range = tokens.iter().max().unwrap() - tokens.iter().min().unwrap();
            assert!(spread <= range, "spread {spread} > range {range} ({case})");
            assert!(spread <= seq);
            assert_eq!(a, assign(&tokens, ranks).unwrap(), "deterministic");
        }
    }

    #[test]
    fn beats_the_strided_split_on_skewed_lengths() {
        // half full sequences, half short ones, in an unlucky order for a strided split
        let ranks = 8;
        let tokens: Vec<usize> = (0..ranks * 16)
            .map(|k| {
                if (k / ranks) % 2 == 0 && k % 2 == 0 {
                    512
                } else {
                    40
                }
            })
            .collect();
        let strided: Vec<usize> = (0..tokens.len()).map(|k| k % ranks).collect();
        let (before, _) = loads(&tokens, ranks, &strided);
        let (after, _) = loads(&tokens, ranks, &assign(&tokens, ranks).unwrap());
        let im_before = Imbalance::of(&[before]);
        let im_after = Imbalance::of(&[after]);
        assert!(im_before.epoch_max_over_mean > 1.5, "{im_before:?}");
        assert!(im_after.epoch_max_over_mean < 1.02, "{im_after:?}");
    }

    #[test]
    fn uneven_batches_are_refused() {
        let err = assign(&[1, 2, 3], 2).unwrap_err().to_string();
        assert!(
            err.contains("3 samples") && err.contains("2 ranks"),
            "{err}"
        );
        assert!(assign(&[1, 2], 0).is_err());
        assert_eq!(assign(&[], 4).unwrap(), Vec::<usize>::new());
    }

    #[test]
    fn imbalance_numbers() {
        let im = Imbalance::of(&[vec![10, 10], vec![30, 10]]);
        assert_eq!(im.steps, 2);
        assert!((im.epoch_max_over_mean - 40.0 / 30.0).abs() < 1e-12);
        assert!((im.worst_step_max_over_mean - 1.5).abs() < 1e-12);
        assert_eq!(im.worst_step_spread, 20);
        assert!((im.mean_rank_tokens - 15.0).abs() < 1e-12);
    }
}
