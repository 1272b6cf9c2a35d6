//! libtorch's random generator is process-wide, and the tests of one file run on parallel
//! threads of one process. A test whose result depends on what it draws after seeding (the same
//! data twice, a reference computed from seed N) takes the turn before seeding and holds it until
//! its last draw; tests that draw without caring what they get take it too, so they cannot shift
//! another test's draws. (Runs through the trainer also hold the engine's own lock while seeding
//! and drawing the initial weights; this turn is the tests' one, never held inside the engine.)
use std::sync::{Mutex, MutexGuard};

static TURN: Mutex<()> = Mutex::new(());

/// Waits for and holds the generator. Not re-entrant: take it once, at the top of a test.
pub fn rng_turn() -> MutexGuard<'static, ()> {
    // a test that panicked while holding it leaves nothing half-done worth refusing over
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the turn, then seeds the generator.
pub fn seeded(seed: i64) -> MutexGuard<'static, ()> {
    let turn = rng_turn();
    tch::manual_seed(seed);
    turn
}
