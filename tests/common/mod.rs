//! Helpers shared by several integration-test binaries (`mod common;` in each).

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use timingwheel::TimerTask;

/// A task that counts its runs and its drops, so a test can tell "ran", "cancelled" (dropped
/// without running) and "still pending" apart.
pub(crate) struct Counted {
    pub(crate) delay_ms: i64,
    pub(crate) runs: Arc<AtomicUsize>,
    pub(crate) drops: Arc<AtomicUsize>,
}

impl TimerTask for Counted {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        self.runs.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A boxed [`Counted`] reporting to `runs` and `drops`.
pub(crate) fn counted(
    delay_ms: i64,
    runs: &Arc<AtomicUsize>,
    drops: &Arc<AtomicUsize>,
) -> Box<Counted> {
    Box::new(Counted {
        delay_ms,
        runs: Arc::clone(runs),
        drops: Arc::clone(drops),
    })
}
