//! Counter-based random streams for data pipelines.
//!
//! Every draw in a pipeline (epoch shuffles, per-sample augmentation, synthetic images) comes
//! from a stream keyed by a tuple such as (seed, epoch, sample index), so the result never
//! depends on which worker thread ran first. The stream is SplitMix64 started from a hash of
//! the key: small, fast, and good enough for augmentation and shuffling. [`Rng::from_state`]
//! (a raw seed) and [`Rng::derive`] (a seed and a path such as epoch, shard) give the streams
//! of the synthetic in-memory image set and of the BERT loader.

/// A small deterministic random stream (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

/// The SplitMix64 finaliser: a bijective 64-bit mixer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// A stream keyed by a tuple of integers; distinct keys give independent-looking streams.
    pub fn keyed(key: &[u64]) -> Rng {
        let mut h = 0x6a09_e667_f3bc_c909u64;
        for &k in key {
            h = mix(h ^ mix(k.wrapping_add(0x9e37_79b9_7f4a_7c15)));
        }
        Rng { state: h }
    }

    /// The stream whose raw SplitMix64 state is `state` (its first draw mixes `state` plus the
    /// golden-ratio increment): a plain seeded generator.
    pub fn from_state(state: u64) -> Rng {
        Rng { state }
    }

    /// A stream derived from a seed and a path of integers (epoch, shard, ...): each step draws
    /// from the current stream and restarts it at that draw mixed with the next path element.
    pub fn derive(seed: u64, path: &[u64]) -> Rng {
        let mut r = Rng::from_state(seed);
        for &x in path {
            let v = r.next_u64();
            r = Rng::from_state(v ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in [0, n); n must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift; the tiny bias is irrelevant for augmentation.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform integer in [lo, hi] inclusive.
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// Standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Approximately standard normal from one draw (Irwin-Hall sum of four 16-bit uniforms):
    /// cheap pixel noise.
    pub fn approx_normal(&mut self) -> f64 {
        let x = self.next_u64();
        let sum: u64 = (0..4).map(|i| (x >> (16 * i)) & 0xffff).sum();
        (sum as f64 / 65536.0 - 2.0) * 3.0f64.sqrt()
    }

    /// Fisher-Yates shuffle in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    fn draws(key: &[u64]) -> Vec<u64> {
        let mut r = Rng::keyed(key);
        (0..4).map(|_| r.next_u64()).collect()
    }

    #[test]
    fn same_key_same_stream_different_key_different_stream() {
        assert_eq!(draws(&[1, 2, 3]), draws(&[1, 2, 3]));
        assert_ne!(draws(&[1, 2, 3]), draws(&[1, 2, 4]));
        // Key order matters.
        assert_ne!(draws(&[1, 2]), draws(&[2, 1]));
    }

    #[test]
    fn draws_stay_in_range_and_cover_it() {
        let mut r = Rng::keyed(&[7]);
        let mut seen = [0usize; 5];
        for _ in 0..5000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            seen[r.below(5) as usize] += 1;
            let v = r.range_inclusive(3, 4);
            assert!(v == 3 || v == 4);
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }

    #[test]
    fn from_state_is_raw_splitmix64() {
        // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = Rng::from_state(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        // derive with an empty path is the seed's own stream; a path changes it.
        assert_eq!(
            Rng::derive(5, &[]).next_u64(),
            Rng::from_state(5).next_u64()
        );
        assert_ne!(
            Rng::derive(5, &[1]).next_u64(),
            Rng::derive(5, &[2]).next_u64()
        );
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<usize> = (0..100).collect();
        Rng::keyed(&[9]).shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }
}
