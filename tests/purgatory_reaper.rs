//! The purgatory's expiration reaper and its shutdown, on the real clock: shutdown is
//! prompt (it wakes the reaper instead of waiting out its poll), idempotent, also on drop;
//! the reaper purges, and does not spin on a timer closed by someone else.
//!
//! Real-clock bounds are a strict lower bound or a loose upper one, never a narrow window.

mod purgatory_common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use purgatory_common::Probe;
use timingwheel::{
    DelayedOperationPurgatory, SystemTimer, Timer, TimerTask, TimerTaskEntry, timer_task,
};

/// A loose upper bound for anything that should happen "soon" on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// A reaper poll far longer than any test: a shutdown that waited for it would be caught.
const LONG_POLL_MS: i64 = 60_000;
/// Long enough never to expire during a test.
const NEVER_MS: i64 = 3_600_000;

type Purgatory = DelayedOperationPurgatory<u32, Probe>;

/// A `SystemTimer` that counts the calls to `advance_clock`, and those still running.
struct Counting {
    timer: SystemTimer,
    advances: AtomicUsize,
    in_flight: AtomicUsize,
}

impl Counting {
    fn new() -> Arc<Counting> {
        Arc::new(Counting {
            timer: SystemTimer::new("counted"),
            advances: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn advances(&self) -> usize {
        self.advances.load(Ordering::SeqCst)
    }

    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

impl Timer for Counting {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        self.timer.add(task)
    }
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.advances.fetch_add(1, Ordering::SeqCst);
        let flushed = self.timer.advance_clock(timeout_ms);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        flushed
    }
    fn size(&self) -> usize {
        self.timer.size()
    }
    fn close(&self) {
        self.timer.close()
    }
    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.timer.stop()
    }
}

/// Waits until `done()` holds, checking every few milliseconds; panics after [`PATIENCE`].
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}: not after {PATIENCE:?}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// A purgatory whose reaper polls `timer` every `poll_ms`.
fn reaped(timer: &Arc<Counting>, poll_ms: i64) -> Purgatory {
    Purgatory::builder("reaped")
        .timer(Arc::clone(timer))
        .reaper_poll_ms(poll_ms)
        .build()
}

#[test]
fn shutdown_wakes_the_reaper_instead_of_waiting_out_its_poll() {
    let timer = Counting::new();
    let purgatory = reaped(&timer, LONG_POLL_MS);
    eventually("the reaper polls", || timer.in_flight() == 1);
    let start = Instant::now();
    purgatory.shutdown();
    let took = start.elapsed();
    assert!(
        took < PATIENCE,
        "shutdown took {took:?}: it waited for the {LONG_POLL_MS} ms poll"
    );
    assert_eq!(
        timer.in_flight(),
        0,
        "the reaper left its poll before shutdown returned"
    );
    assert!(
        timer.add(timer_task(1, || {})).cancelled(),
        "the timer is closed"
    );
}

#[test]
fn shutdown_is_idempotent_and_concurrent_callers_all_return_after_the_reaper_ended() {
    const CALLERS: usize = 4;
    let timer = Counting::new();
    let purgatory = reaped(&timer, LONG_POLL_MS);
    eventually("the reaper polls", || timer.in_flight() == 1);
    let barrier = Barrier::new(CALLERS);
    let advances = thread::scope(|s| {
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    purgatory.shutdown();
                    assert_eq!(timer.in_flight(), 0);
                    timer.advances()
                })
            })
            .collect();
        let seen: Vec<usize> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        seen
    });
    purgatory.shutdown();
    thread::sleep(Duration::from_millis(50));
    assert!(
        advances.iter().all(|&seen| seen == timer.advances()),
        "no advance_clock after any shutdown returned: {advances:?} then {}",
        timer.advances()
    );
}

#[test]
fn dropping_the_purgatory_shuts_it_down_and_lets_go_of_the_timer() {
    let timer = Counting::new();
    let purgatory = reaped(&timer, LONG_POLL_MS);
    eventually("the reaper polls", || timer.in_flight() == 1);
    drop(purgatory);
    assert_eq!(
        Arc::strong_count(&timer),
        1,
        "the reaper thread ended and dropped its share"
    );
    assert!(
        timer.add(timer_task(1, || {})).cancelled(),
        "the timer is closed"
    );
}

#[test]
fn shutdown_leaves_pending_operations_neither_completed_nor_expired() {
    let purgatory = Purgatory::new("pending", 0);
    let op = Probe::delayed(50);
    let drops = Arc::clone(&op.operation().drops);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    purgatory.shutdown();
    assert_eq!(
        purgatory.num_delayed(),
        0,
        "the closed timer dropped the timeout"
    );
    assert!(!op.is_completed());
    drop(purgatory);
    assert_eq!(op.operation().completions(), 0);
    drop(op);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "nothing kept it alive");
}

#[test]
fn a_reaper_whose_timer_was_closed_elsewhere_does_not_spin() {
    const POLL_MS: i64 = 20;
    const WATCH: Duration = Duration::from_millis(400);
    let timer = Counting::new();
    let purgatory = reaped(&timer, POLL_MS);
    timer.close();
    let before = timer.advances();
    thread::sleep(WATCH);
    let polls = timer.advances() - before;
    // One poll per POLL_MS at most, with room to spare; a spinning reaper makes thousands.
    let bound = (WATCH.as_millis() as usize) / (POLL_MS as usize) * 3;
    assert!(polls <= bound, "{polls} polls in {WATCH:?} (bound {bound})");
    let start = Instant::now();
    purgatory.shutdown();
    assert!(start.elapsed() < PATIENCE);
}

#[test]
fn the_reaper_purges_completed_operations_from_the_watch_lists() {
    const OPERATIONS: usize = 200;
    let purgatory = Purgatory::builder("purged")
        .purge_interval(10)
        .reaper_poll_ms(5)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    for i in 0..OPERATIONS as u32 {
        let mut probe = Probe::new(NEVER_MS);
        probe.drops = Arc::clone(&drops);
        let op = timingwheel::Delayed::new(probe);
        assert!(!purgatory.try_complete_else_watch(&op, &[i % 16, 100 + i]));
        assert!(op.force_complete());
    }
    assert_eq!(purgatory.num_delayed(), 0);
    eventually("the reaper purges", || purgatory.watched() == 0);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        OPERATIONS,
        "and the operations are freed"
    );
    purgatory.shutdown();
}
