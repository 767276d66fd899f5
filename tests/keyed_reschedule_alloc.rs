//! `KeyedTimer::reschedule` allocates nothing: a heartbeat moves the task it has, on a
//! `SystemTimer`, without touching the heap.
//!
//! A binary of its own, because it replaces the process's global allocator with one that
//! counts the allocations of each thread.

use std::sync::Arc;

use timingwheel::{KeyedTimer, SystemTimer, Timer, timer_task};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, allocations};

#[global_allocator]
static ALLOCATOR: Counting<std::alloc::System> = Counting(std::alloc::System);

#[test]
fn a_heartbeat_allocates_nothing() {
    const SESSIONS: u64 = 10_000;
    const HEARTBEATS: u64 = 100_000;
    let timer = Arc::new(SystemTimer::new("keyed-alloc"));
    let sessions = KeyedTimer::new(timer.clone());
    for session in 0..SESSIONS {
        sessions.schedule(session, timer_task(60_000, || {}));
    }
    // Warm: the first move of an entry into a new list may map the wheel's memory.
    for session in 0..SESSIONS {
        assert!(sessions.reschedule(&session, 30_000));
    }
    let before = allocations();
    for beat in 0..HEARTBEATS {
        let delay_ms = 1_000 + (beat * 7_919 % 50_000) as i64;
        assert!(sessions.reschedule(&(beat % SESSIONS), delay_ms));
    }
    let allocated = allocations() - before;
    assert_eq!(
        allocated, 0,
        "{allocated} allocations in {HEARTBEATS} heartbeats"
    );
    // The count can see an allocation: scheduling a new task allocates its box.
    let before = allocations();
    sessions.schedule(SESSIONS, timer_task(60_000, || {}));
    assert!(allocations() > before, "the allocator counts");
    timer.close();
}
