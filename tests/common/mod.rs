//! Helpers shared by the integration-test binaries (`it`, and `mod common;` in each binary
//! of its own), one module per concern:
//!
//! - this module: [`Counted`], a task that counts its runs and drops, [`PATIENCE`] and
//!   [`NEVER_MS`], [`mocked`] (a `SystemTimer` on a mock clock), [`driven_purgatory`],
//!   [`args`] for the examples' command lines, [`panic_location`] for `#[track_caller]`
//!   checks, and [`drive_mock_until`];
//! - [`bounds`]: when each task may run at the earliest on the real clock, and when it ran;
//! - [`ledger`]: per-task run, cancel and drop counters for the counting stress tests;
//! - [`logger`]: the one capturing logger (the `error!` and `warn!` records of a test
//!   binary, installed once for all its tests);
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

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use timingwheel::{
    DelayedOperation, DelayedOperationPurgatory, MockTime, MockTimer, SystemTimer, Timer, TimerTask,
};

/// How long a test waits for something that should happen soon before it counts it as lost
/// (or deadlocked): loose, for a busy 2-core machine.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// A delay long enough never to expire during a test.
pub(crate) const NEVER_MS: i64 = 3_600_000;

/// A `SystemTimer` on a mock clock (nothing expires unless the test moves it), holding at
/// most `max_pending` tasks if given.
pub(crate) fn mocked(name: &str, max_pending: Option<usize>) -> (SystemTimer, MockTime) {
    let time = MockTime::new();
    let builder = SystemTimer::builder(name).time(time.clone());
    let builder = match max_pending {
        Some(max) => builder.max_pending(max),
        None => builder,
    };
    (builder.build(), time)
}

/// A purgatory on `timer`, with the reaper off: the test drives the clock.
pub(crate) fn driven_purgatory<Op: DelayedOperation>(
    name: &str,
    timer: &Arc<MockTimer>,
) -> DelayedOperationPurgatory<u32, Op> {
    DelayedOperationPurgatory::builder(name)
        .timer(Arc::clone(timer))
        .reaper_enabled(false)
        .build()
}

/// The words of a command line, as an example's `parse_args` takes them (without the
/// program's name).
pub(crate) fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

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

thread_local! {
    /// While [`panic_message_and_location`] runs its closure on this thread: the needle, and
    /// the file of the location of the panic whose message contained it.
    static CATCHING: RefCell<Option<(&'static str, Option<String>)>> = const { RefCell::new(None) };
}

/// Runs `f`, which must panic with a message containing `needle`, and returns the file the
/// panic reports as its location (with `#[track_caller]`, the caller's).
pub(crate) fn panic_location<T>(needle: &'static str, f: impl FnOnce() -> T) -> Option<String> {
    panic_message_and_location(needle, f).1
}

/// Runs `f`, which must panic with a message containing `needle`, and returns the message
/// and the file the panic reports as its location.
///
/// The location is only told to the panic hook, which is the process's: many tests of the
/// binary panic on purpose meanwhile, some of them at the same time on other threads. So the
/// hook is wrapped once for the whole process, never swapped per call (two calls at once
/// would restore each other's hook), and the wrapper takes only a panic of a thread that is
/// inside this function, with the needle in its message; every other panic goes on to the
/// hook it wraps.
pub(crate) fn panic_message_and_location<T>(
    needle: &'static str,
    f: impl FnOnce() -> T,
) -> (String, Option<String>) {
    static WRAP_THE_HOOK: Once = Once::new();
    WRAP_THE_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = (payload.downcast_ref::<&str>().copied())
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or_default();
            // `try_with`: a thread may panic while its thread-locals are being destroyed.
            let caught = CATCHING
                .try_with(|catching| match &mut *catching.borrow_mut() {
                    Some((needle, location)) if message.contains(*needle) => {
                        *location = info.location().map(|l| l.file().to_owned());
                        true
                    }
                    _ => false,
                })
                .unwrap_or(false);
            if !caught {
                previous(info);
            }
        }));
    });
    CATCHING.set(Some((needle, None)));
    let result = catch_unwind(AssertUnwindSafe(f));
    let location = CATCHING.take().and_then(|(_, location)| location);
    let Err(payload) = result else {
        panic!("it did not panic");
    };
    let message = match (
        payload.downcast_ref::<String>(),
        payload.downcast_ref::<&str>(),
    ) {
        (Some(message), _) => message.clone(),
        (None, Some(message)) => (*message).to_owned(),
        (None, None) => String::new(),
    };
    (message, location)
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
