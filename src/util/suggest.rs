//! "Did you mean ...?": the nearest of the names a mistyped one could have been, for messages
//! about unknown config keys, CSV columns and the like.

/// The edit distance (insertions, deletions, substitutions) between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate nearest to `word`, when it is near enough to be a typo of it (at most a
/// third of its letters changed, at least one allowed); ties go to the first candidate.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::{closest, distance};

    #[test]
    fn distances() {
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("base_lrr", "base_lr"), 1);
        assert_eq!(distance("optimiser", "optimizer"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn typos_find_their_key_and_strangers_find_none() {
        let keys = ["base_lr", "end_lr", "warmup_epochs", "momentum"];
        assert_eq!(closest("base_lrr", keys), Some("base_lr"));
        assert_eq!(closest("warmup_epoch", keys), Some("warmup_epochs"));
        assert_eq!(closest("momentun", keys), Some("momentum"));
        assert_eq!(closest("colour", keys), None);
        assert_eq!(
            closest("tolerence_pct", ["tolerance_pct", "throughput"]),
            Some("tolerance_pct")
        );
    }
}
