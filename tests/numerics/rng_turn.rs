//! The tests' rng turn (tests/common/rng.rs) does what the tests that compare seeded draws rely
//! on: threads that seed libtorch's one process-wide generator and then draw get exactly the
//! single-threaded sequence, however their draws would otherwise interleave.
#![cfg(feature = "torch")]

use crate::common::rng::seeded;
use tch::{Device, Kind, Tensor};

/// `n` draws of one value each, so that another thread's draws could fall between any two.
fn draws(n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| Tensor::randn([1], (Kind::Double, Device::Cpu)).double_value(&[0]))
        .collect()
}

#[test]
fn threads_holding_the_turn_draw_the_seeds_own_sequence() {
    const N: usize = 200;
    let expected: Vec<Vec<f64>> = (0..4)
        .map(|seed| {
            let _turn = seeded(seed);
            draws(N)
        })
        .collect();
    assert_ne!(expected[0], expected[1], "two seeds drew the same sequence");
    let threads: Vec<_> = (0..4i64)
        .flat_map(|seed| (0..3).map(move |_| seed))
        .map(|seed| {
            std::thread::spawn(move || {
                let _turn = seeded(seed);
                (seed, draws(N))
            })
        })
        .collect();
    for t in threads {
        let (seed, got) = t.join().unwrap();
        assert_eq!(
            got, expected[seed as usize],
            "seed {seed}: another thread's draws came in between"
        );
    }
}
