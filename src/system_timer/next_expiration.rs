//! [`SystemTimer::next_expiration_ms`]: the earliest expiration among the pending tasks,
//! for a caller that drives the timer from its own loop and needs to know how long it may
//! sleep.
//!
//! Every entry of a list expires no earlier than the list's due time plus its slack (the
//! lead its flush has: see `wheel`), so the lists give lower bounds, and the earliest
//! expiration is found by reading the entries of the lists in the order of those bounds,
//! until the next bound is no earlier than the best expiration read. The candidates: every
//! list that is queued to be flushed (its expiration is set), and the lists whose flushes
//! an earlier `advance_clock` call left unfinished. Held tasks are all due: each shard's
//! backlog, a heap, gives its oldest first.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. The lists' bounds are read under one shard's
//! lock (a read lock of the wheel, so no level's clock moves meanwhile); the unfinished
//! flushes under the flush scheduler's leaf mutex; then each shard is read under its own
//! lock, one at a time. An entry lives and moves within one shard, so each shard's part is
//! read whole; a change another thread makes meanwhile may or may not be seen, and a call
//! on a quiet timer is exact.

use super::SystemTimer;
use crate::store::thread_hint;

impl SystemTimer {
    /// Returns the earliest expiration among the pending tasks, exact (a task's own
    /// `expiration_ms`, not its bucket's start), or `None` when no task is pending: how long
    /// a caller that drives the timer from its own loop may sleep.
    ///
    /// Tasks held back by [`max_in_flight`](crate::SystemTimerBuilder::max_in_flight) are
    /// pending, and due: with any held, the result is at or before the clock's reading with
    /// a 1 ms tick, at most a tick after it with a coarser one.
    ///
    /// # Cost
    ///
    /// It locks the shards one at a time, briefly, and reads the expirations of the entries of the
    /// earliest lists: at the lowest level, the tasks due in the earliest millisecond that
    /// has any; when the earliest list is a coarser one (the next task is far away), that
    /// list's tasks; with tasks held, the oldest of each shard. `docs/performance.md` has its
    /// figures. Adds and cancels pay nothing for it.
    ///
    /// While other threads add, cancel or flush, the result may miss what they do
    /// meanwhile; on a quiet timer it is exact.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTime, SystemTimer, Timer};
    ///
    /// let time = MockTime::new();
    /// let timer = SystemTimer::builder("loop").time(time.clone()).build();
    /// assert_eq!(timer.next_expiration_ms(), None);
    /// let now = time.hi_res_clock_ms();
    /// let soon = timer.add(timer_task(250, || {}));
    /// timer.add(timer_task(90_000, || {}));
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 250));
    /// soon.cancel();
    /// assert_eq!(timer.next_expiration_ms(), Some(now + 90_000));
    /// ```
    pub fn next_expiration_ms(&self) -> Option<i64> {
        let mut candidates = {
            let read = self.timing_wheel.read(thread_hint());
            let mut lists = Vec::new();
            read.value().queued_lists(&mut lists);
            lists
        };
        self.flusher.unfinished_lists(&mut candidates);
        // One read per list, at its lowest bound, in the order of the bounds.
        candidates.sort_unstable_by_key(|&(lower_ms, id)| (id, lower_ms));
        candidates.dedup_by_key(|&mut (_, id)| id);
        candidates.sort_unstable();
        let mut earliest: Option<i64> = None;
        for stripe in 0..self.timing_wheel.stripes() {
            let mut read = self.timing_wheel.read(stripe);
            let shard = read.shard();
            earliest = earliest.into_iter().chain(shard.oldest_held_ms()).min();
            for &(lower_ms, id) in &candidates {
                if earliest.is_some_and(|earliest| lower_ms >= earliest) {
                    break;
                }
                if let Some(min) = shard.min_expiration(id) {
                    earliest = Some(earliest.map_or(min, |earliest| earliest.min(min)));
                }
            }
        }
        earliest
    }
}
