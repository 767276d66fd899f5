//! What the crate leaves behind in the process: every thread it starts belongs to a timer,
//! a reaper or a purgatory, and is joined when its owner closes, also after a burst of
//! adds, cancels and expiries that gives storage back (a design that freed such storage on
//! a process-wide thread of its own would fail it).
//!
//! One test in this binary, so that no other test's threads come and go while it counts
//! the process's threads (`/proc/self/task`, Linux only).

#![cfg(target_os = "linux")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::probe::Probe;
use common::sync::{barrier, eventually};
use timingwheel::{
    DelayedOperationPurgatory, SharedSystemTimerReaper, SystemTimer, SystemTimerReaper, Timer,
    TimerTaskEntry, timer_task,
};

/// Timers in the burst: enough to fill and empty many chunks of every shard.
const BURST: usize = 200_000;
/// Of which this many are left to expire.
const EXPIRING: usize = 2_000;

/// This process's threads, by thread id, in order. Ids, not names: a thread std spawns
/// names itself once it runs, so a thread read just after its spawn may still carry its
/// spawner's name.
fn threads() -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// Waits until the process's threads are `expected` again (a joined thread may linger in
/// `/proc` for a moment after its join returns); returns the last reading.
fn threads_become(expected: &[u32]) -> Vec<u32> {
    let deadline = Instant::now() + common::PATIENCE;
    loop {
        let now = threads();
        if now == expected || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_thread_the_crate_starts_is_owned_and_joined_when_its_owner_closes() {
    let before = threads();

    let ran = Arc::new(AtomicUsize::new(0));
    let timer = SystemTimerReaper::new("proc-reaper", SystemTimer::new("proc"));
    let purgatory = DelayedOperationPurgatory::<u32, Probe>::builder("proc-purgatory").build();
    let shared = SharedSystemTimerReaper::new("proc-shared");
    let driven: Vec<_> = (0..3)
        .map(|i| shared.drive(SystemTimer::new(&format!("proc-driven-{i}"))))
        .collect();
    let during = threads();
    let started: Vec<&u32> = during.iter().filter(|t| !before.contains(t)).collect();
    assert!(
        !started.is_empty(),
        "the timer, its reaper and the purgatory start threads: {during:?}"
    );

    // A burst: most cancelled at once (their storage given back), some left to expire.
    let entries: Vec<TimerTaskEntry> = (0..BURST)
        .map(|i| {
            let ran = Arc::clone(&ran);
            let delay = if i < EXPIRING { 5 } else { 60_000 };
            timer.add(timer_task(delay, move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }))
        })
        .collect();
    assert!(entries[EXPIRING..].iter().all(TimerTaskEntry::cancel));
    drop(entries);
    let driven_ran = Arc::new(AtomicUsize::new(0));
    for timer in &driven {
        let driven_ran = Arc::clone(&driven_ran);
        timer.add(timer_task(5, move || {
            driven_ran.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let operation = Probe::delayed(5);
    assert!(!purgatory.try_complete_else_watch(&operation, &[7]));

    eventually(
        common::PATIENCE,
        "the burst's tasks and the operation expire",
        || {
            ran.load(Ordering::SeqCst) == EXPIRING
                && operation.operation().expirations() == 1
                && driven_ran.load(Ordering::SeqCst) == driven.len()
        },
    );
    barrier(&timer);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        EXPIRING,
        "every uncancelled task ran"
    );
    assert_eq!(timer.size(), 0);
    // No thread appeared beyond the owners' own.
    assert_eq!(threads(), during, "threads started by the burst");

    timer.close();
    purgatory.shutdown();
    driven[0].close();
    shared.close();
    drop(timer);
    drop(purgatory);
    drop(driven);
    assert_eq!(
        threads_become(&before),
        before,
        "threads left once every owner closed"
    );
}
