//! `advance_clock` when the only item that comes due in the delay queue is stale: a list was
//! offered for a later time, then for an earlier one (which is flushed), so the later item
//! stands for nothing any more. The call must not return false before its timeout
//! (`Timer::advance_clock` promises an early false only on a closed timer), and a list that
//! comes due during the rest of the wait is flushed by the same call.
//!
//! Such items arise where one list mixes rounds: a wheel of size 1 (its one list holds
//! every expiration), or the top level near `i64::MAX`. The timers here are of size 1 on a
//! `MockTime`, so the stale item is due at a time the test chooses; the timeouts are real
//! time, as they always are.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::sync::barrier;
use common::{PATIENCE, counted};
use timingwheel::{MockTime, SystemTimer, Timer};

/// The wheel's tick: its one list covers 10 ms per round.
const TICK_MS: i64 = 10;
/// How long the calls under test may wait.
const TIMEOUT_MS: i64 = 200;

/// A timer of one list on a `MockTime` whose delay queue holds one stale item, due now,
/// and nothing else. Returns the timer and its clock.
fn timer_with_a_stale_item_due() -> (SystemTimer, MockTime) {
    let time = MockTime::new();
    let timer = SystemTimer::builder("stale")
        .time(time.clone())
        .tick_ms(TICK_MS)
        .wheel_size(1)
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    // The later one queues the list for +50, the earlier one again for +10.
    let later = timer.add(counted(5 * TICK_MS, &runs, &drops));
    timer.add(counted(TICK_MS, &runs, &drops));
    assert!(later.cancel());
    time.sleep(TICK_MS);
    assert!(timer.advance_clock(0), "the earlier round is flushed");
    barrier(&timer);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The item queued for +50 is still in the delay queue, and now due: stale.
    time.sleep(4 * TICK_MS);
    assert_eq!(timer.size(), 0);
    (timer, time)
}

#[test]
fn a_stale_item_alone_does_not_end_the_wait_early() {
    let (timer, _time) = timer_with_a_stale_item_due();
    let start = Instant::now();
    let flushed = timer.advance_clock(TIMEOUT_MS);
    let waited = start.elapsed();
    assert!(!flushed, "nothing but a stale item was due");
    assert!(
        waited >= Duration::from_millis(TIMEOUT_MS as u64),
        "returned false after {waited:?}, before its timeout of {TIMEOUT_MS} ms, on an open timer"
    );
    assert!(waited < PATIENCE, "{waited:?}");
}

#[test]
fn a_list_due_after_a_stale_item_is_flushed_by_the_same_call() {
    let (timer, time) = timer_with_a_stale_item_due();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    timer.add(counted(2 * TICK_MS, &runs, &drops));
    let flushed = thread::scope(|s| {
        let call = s.spawn(|| timer.advance_clock(TIMEOUT_MS * 10));
        // Well inside the call's timeout, the new task's list comes due.
        thread::sleep(Duration::from_millis(50));
        time.sleep(2 * TICK_MS);
        call.join().unwrap()
    });
    assert!(flushed, "the call returned before the list came due");
    barrier(&timer);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
