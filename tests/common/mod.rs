//! Helpers shared by the integration-test binaries (`mod common;` in each), one module per
//! concern:
//!
//! - this module: [`Counted`], a task that counts its runs and drops, [`PATIENCE`],
//!   [`panic_location`] for `#[track_caller]` checks, and [`drive_mock_until`];
//! - [`bounds`]: when each task may run at the earliest on the real clock, and when it ran;
//! - [`ledger`]: per-task run, cancel and drop counters for the counting stress tests;
//! - [`logger`]: the one capturing logger (the `error!` records of a test binary);
//! - [`probe`]: `Probe`, a purgatory operation that records its callbacks;
//! - [`rng`]: the one seeded random number generator;
//! - [`sync`]: the executor barrier, a driver thread, a gate that holds the executor busy,
//!   and guards against hanging tests;
//! - [`waker`]: hand-made wakers and a tiny executor for the futures' tests.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub(crate) mod bounds;
pub(crate) mod ledger;
pub(crate) mod logger;
pub(crate) mod probe;
pub(crate) mod rng;
pub(crate) mod sync;
pub(crate) mod waker;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use timingwheel::{MockTimer, Timer, TimerTask};

/// How long a test waits for something that should happen soon before it counts it as lost
/// (or deadlocked): loose, for a busy 2-core machine.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

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

/// Runs `f`, which must panic with a message containing `needle`, and returns the file the
/// panic reports as its location (with `#[track_caller]`, the caller's). The panic hook is
/// the process's: it is replaced only while `f` runs.
pub(crate) fn panic_location<T>(needle: &'static str, f: impl FnOnce() -> T) -> Option<String> {
    let location = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&location);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload_as_str().unwrap_or_default();
        if message.contains(needle) {
            *seen.lock().unwrap() = info.location().map(|l| l.file().to_owned());
        }
    }));
    let result = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    assert!(result.is_err(), "it did not panic");
    location.lock().unwrap().take()
}

/// Drives a `MockTimer` one millisecond at a time until `until_ms` after `start`, running
/// what is due at each step (also what came due during a run that moved the clock).
pub(crate) fn drive_mock_until(timer: &MockTimer, start: i64, until_ms: i64) {
    loop {
        if timer.advance_clock(0) {
            continue;
        }
        if timer.time().hi_res_clock_ms() - start >= until_ms {
            return;
        }
        timer.advance_clock(1);
    }
}
