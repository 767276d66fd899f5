//! No leaks: a million timers (a quarter million in debug builds) added and cancelled, and
//! a million added and fired, leave the live heap and the timer's mapped memory where they
//! were.
//!
//! A counting `#[global_allocator]` (this test binary only) keeps the live byte count; the
//! slots and list blocks a `SystemTimer` maps outside the heap are counted through
//! `SystemTimer::storage_bytes`, and must go back as well. Each
//! test first runs its workload once at full scale as a warm-up, so that the structures
//! that legitimately keep their high-water mark are at it: the lists and overflow wheels
//! (created on demand, kept for the timer's life), each used shard's page table (48 B per
//! 1,024 peak timers) and list table, and the delay queue's heap capacity. Then it
//! measures, runs the workload again, and requires the live heap to come back within
//! `TOLERANCE` of the measurement. A leak of even one byte per timer (1 MB in release, 250 KB
//! in debug) fails by far. It also reports, and bounds, what the first round left behind.
//!
//! The two tests share the counter, so they take turns through a lock.
//!
//! Debug builds run these with a quarter of the timers, in a few seconds; for the figures at
//! full scale, in release:
//! `cargo test --release --test leaks -- --nocapture`.

use std::alloc::System;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use timingwheel::{MockTime, SystemTimer, Timer, TimerTask, timer_task};

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use common::sync::barrier;
use counting_alloc::{Counting, allocated_bytes};

/// Timers per round: 10^6 in release; a quarter of that in debug builds, so that
/// `cargo test` stays quick (a leak of one byte per timer, 250 KB, still fails the warm
/// round's check by far).
const TIMERS: usize = if cfg!(debug_assertions) {
    250_000
} else {
    1_000_000
};
/// Allowed difference between the live heap before and after a warmed-up round: the
/// executor keeps up to 8 emptied batch buffers of 8 KiB for reuse, and how many it holds
/// when a round ends depends on how far it lagged the driver (measured 0-28 KiB); plus noise
/// from the test harness and the executor's channel. Not per-timer memory.
const TOLERANCE: isize = 64 * 1024;
/// Allowed leftover of the first (cold) round: the high-water structures listed above, the
/// one emptied chunk of slots and one of list blocks (64 KiB each) that a used shard keeps
/// mapped, and the executor's batch buffers. Measured 131-290 KiB; a per-timer leak of one
/// byte would be 1 MB in release (the warm round's check catches it in debug builds too).
const COLD_TOLERANCE: isize = 384 * 1024;

#[global_allocator]
static GLOBAL: Counting<System> = Counting(System);

/// The tests take turns: they share the count.
static TURN: Mutex<()> = Mutex::new(());

fn live() -> isize {
    allocated_bytes()
}

/// Returns the live heap bytes plus what `timer` has mapped, once the heap count has
/// stopped changing (the executor frees the batch buffers of the last tasks a moment
/// after they ran).
fn settled(timer: &SystemTimer) -> isize {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut last = live();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = live();
        if now == last || std::time::Instant::now() > deadline {
            return now + timer.storage_bytes() as isize;
        }
        last = now;
    }
}

struct Counted {
    delay_ms: i64,
    events: Arc<AtomicUsize>,
}

impl TimerTask for Counted {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `round` three times (cold, warm, measured) and checks the live heap and the
/// memory `timer` maps.
fn assert_rounds_leave_nothing(timer: &SystemTimer, what: &str, mut round: impl FnMut()) {
    let before_cold = settled(timer);
    round();
    let after_cold = settled(timer);
    round();
    let before = settled(timer);
    round();
    let after = settled(timer);
    eprintln!(
        "{what}: cold round left {} B, warm round left {} B",
        after_cold - before_cold,
        after - before
    );
    assert!(
        after - before <= TOLERANCE,
        "{what}: a warmed-up round of {TIMERS} timers left {} B live (tolerance {TOLERANCE})",
        after - before
    );
    assert!(
        after_cold - before_cold <= COLD_TOLERANCE,
        "{what}: the first round left {} B live (tolerance {COLD_TOLERANCE})",
        after_cold - before_cold
    );
}

#[test]
fn a_million_long_timers_added_and_cancelled_leave_no_heap_behind() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let timer = SystemTimer::builder("leak-cancel")
        .time(MockTime::new())
        .build();
    let ran = Arc::new(AtomicUsize::new(0));
    barrier(&timer);
    let mut entries = Vec::with_capacity(TIMERS);
    assert_rounds_leave_nothing(&timer, "add+cancel", || {
        for i in 0..TIMERS {
            entries.push(timer.add(Box::new(Counted {
                // 30 s to ~3 h: several levels of wheels.
                delay_ms: 30_000 + (i as i64 * 7_919) % 10_000_000,
                events: Arc::clone(&ran),
            })));
        }
        assert_eq!(timer.size(), TIMERS);
        for entry in entries.drain(..) {
            assert!(entry.cancel());
        }
        assert_eq!(timer.size(), 0);
    });
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    drop(entries);
    timer.close();
}

#[test]
fn a_million_short_timers_fired_leave_no_heap_behind() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let time = MockTime::new();
    let timer = SystemTimer::builder("leak-fire").time(time.clone()).build();
    let ran = Arc::new(AtomicUsize::new(0));
    barrier(&timer);
    let mut rounds = 0;
    assert_rounds_leave_nothing(&timer, "add+fire", || {
        for i in 0..TIMERS {
            timer.add(Box::new(Counted {
                delay_ms: 1 + (i % 1_000) as i64,
                events: Arc::clone(&ran),
            }));
        }
        assert_eq!(timer.size(), TIMERS);
        // Fire them as a driver would: in many small steps, not one.
        for _ in 0..100 {
            time.sleep(10);
            while timer.advance_clock(0) {}
        }
        barrier(&timer);
        rounds += 1;
        assert_eq!(timer.size(), 0);
        assert_eq!(
            ran.load(Ordering::SeqCst),
            rounds * TIMERS,
            "every timer fired"
        );
    });
    timer.close();
}

/// Regression: with wheel size 1 (allowed) the one bucket holds every round, and each `add`
/// that moved its expiration earlier pushed another item onto the delay queue; the items
/// stayed until their due time, even when every task was cancelled (10^6 add+cancel
/// alternating 10 ms and 1 h left ~25 MB live, and so did delays counting down, which move
/// it earlier on every add). A list now keeps its earliest expiration, and the delay queue
/// prunes the items its lists have since been queued again over.
#[test]
fn wheel_size_one_add_and_cancel_leaves_no_heap_behind() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let timer = SystemTimer::builder("leak-one")
        .wheel_size(1)
        .time(MockTime::new())
        .build();
    barrier(&timer);
    assert_rounds_leave_nothing(&timer, "wheel size 1 add+cancel, alternating", || {
        for i in 0..TIMERS {
            let delay_ms = if i % 2 == 0 { 10 } else { 3_600_000 };
            assert!(timer.add(timer_task(delay_ms, || {})).cancel());
        }
        assert_eq!(timer.size(), 0);
    });
    timer.close();
    // A new timer: the one above keeps its list's expiration at 10 ms (nothing flushes it),
    // so delays counting down from there would never move it.
    let timer = SystemTimer::builder("leak-one-down")
        .wheel_size(1)
        .time(MockTime::new())
        .build();
    barrier(&timer);
    assert_rounds_leave_nothing(&timer, "wheel size 1 add+cancel, counting down", || {
        for i in 0..TIMERS {
            let delay_ms = 10 + (TIMERS - i) as i64;
            assert!(timer.add(timer_task(delay_ms, || {})).cancel());
        }
        assert_eq!(timer.size(), 0);
    });
    timer.close();
}

/// Memory follows the live set: a burst cancelled down to a few unmaps what it mapped, with
/// no call to make. What stays: per shard, one emptied chunk of slots and one of list
/// blocks (64 KiB each), and the chunks the survivors sit in.
#[test]
fn a_burst_cancelled_down_to_a_few_unmaps_its_memory() {
    const SURVIVORS: usize = 10;
    const CHUNK: usize = 64 * 1024;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let timer = SystemTimer::builder("burst").time(MockTime::new()).build();
    let empty = timer.storage_bytes();
    let mut entries: Vec<_> = (0..TIMERS)
        .map(|i| timer.add(timer_task(60_000 + i as i64, || {})))
        .collect();
    let peak = timer.storage_bytes();
    assert!(
        peak >= TIMERS * 32,
        "a 32-byte slot per timer at least: {peak}"
    );
    let survivors = entries.split_off(TIMERS - SURVIVORS);
    for entry in entries {
        assert!(entry.cancel());
    }
    let stripes = std::thread::available_parallelism()
        .map_or(1, |n| n.get() * 4)
        .next_power_of_two()
        .min(64);
    let kept = timer.storage_bytes() - empty;
    assert!(
        kept <= (2 * stripes + 2 * SURVIVORS) * CHUNK,
        "{kept} B still mapped after cancelling {} of {TIMERS} (peak {peak} B)",
        TIMERS - SURVIVORS
    );
    eprintln!(
        "burst: {peak} B mapped at the peak, {kept} B after cancelling down to {SURVIVORS}: {:.1} % given back",
        100.0 * (peak - kept) as f64 / peak as f64
    );
    drop(survivors);
    timer.close();
    assert!(timer.storage_bytes() <= empty + 2 * stripes * CHUNK);
}
