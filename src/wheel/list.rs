//! A list of entries that come due together (Kafka's `TimerTaskList`): one bucket of a
//! wheel, or, above the lowest level, one half of a bucket (see the `wheel` module).
//!
//! Kafka's list holds its entries. Here a [`TimerTaskList`] is the list's identity and its
//! expiration; its entries are stored per shard, as chains of slot indices in each shard
//! (see `store::chains`), and [`TimerTaskList::flush`] takes them out of one shard a chunk
//! at a time.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - `expiration_ms` is atomic. Adds set it under a read lock (the stripe they add to); a
//!   flush resets it under the write lock, just before it detaches every shard's part. An
//!   add that comes later sees the reset, sets the expiration again and queues the list
//!   again, so an entry added after the detach is never left in a list nobody will flush.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::store::{Entry, ShardState};

/// A list's expiration when it holds no expiration: never set, or flushed since.
pub(crate) const NO_EXPIRATION: i64 = i64::MIN;

/// One list of a bucket: the entries that are due to be flushed at the same time.
pub(crate) struct TimerTaskList {
    id: u32,
    /// How long after the list is due its earliest entry can expire: the lead a flush has
    /// before lateness starts (0 at the lowest level).
    slack_ms: i64,
    expiration_ms: AtomicI64,
}

impl TimerTaskList {
    /// Creates an empty list whose parts are at index `id` in every shard.
    pub(crate) fn new(id: u32, slack_ms: i64) -> TimerTaskList {
        TimerTaskList {
            id,
            slack_ms,
            expiration_ms: AtomicI64::new(NO_EXPIRATION),
        }
    }

    /// Returns the index of this list's part in each shard.
    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Returns how long after the list is due its earliest entry can expire.
    pub(crate) fn slack_ms(&self) -> i64 {
        self.slack_ms
    }

    /// Returns the earliest expiration the list's entries can have when it is due at
    /// `due_ms`.
    pub(crate) fn earliest_expiration_ms(&self, due_ms: i64) -> i64 {
        due_ms.saturating_add(self.slack_ms)
    }

    /// Appends the entry in slot `index` of `shard`, in no list yet, to this list. The caller
    /// holds the shard's lock, a read lock of the wheel.
    #[inline]
    pub(crate) fn add(&self, shard: &mut ShardState, index: u32) {
        shard.link(self.id, index);
    }

    /// Sets the list's expiration, unless it already has an earlier one. Returns true if it
    /// changed (then the caller offers the list to the delay queue).
    ///
    /// Kafka swaps unconditionally. The two differ only when one list holds entries of two
    /// rounds, which Kafka's wheels never do but this port's top level (and a wheel of one
    /// bucket) can: keeping the earlier expiration flushes the list early enough for all
    /// its entries (the later ones are re-added), and does not queue it again for every add
    /// that alternates between the rounds.
    #[inline]
    pub(crate) fn set_expiration(&self, expiration_ms: i64) -> bool {
        // Reading first keeps the common case (same list, same due time) free of writes to a
        // cache line that every adding thread reads.
        let mut current = self.expiration_ms.load(Ordering::Relaxed);
        loop {
            if current != NO_EXPIRATION && current <= expiration_ms {
                return false;
            }
            match self.expiration_ms.compare_exchange_weak(
                current,
                expiration_ms,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Returns the list's expiration, or [`NO_EXPIRATION`].
    pub(crate) fn expiration_ms(&self) -> i64 {
        self.expiration_ms.load(Ordering::Relaxed)
    }

    /// Forgets the list's expiration, as a flush does before it detaches the entries.
    pub(crate) fn reset_expiration(&self) {
        self.expiration_ms.store(NO_EXPIRATION, Ordering::Relaxed);
    }

    /// Takes up to `max` of this list's detached entries in `shard` out, oldest first, and
    /// hands each to `f` with the shard, to be re-added or expired (Kafka's
    /// `flush(addTimerTaskEntry)`, a chunk at a time); returns how many. The caller holds
    /// the shard's lock, a read lock of the wheel.
    pub(crate) fn flush(
        &self,
        shard: &mut ShardState,
        max: usize,
        mut f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        let mut entries = shard.flush_buffer();
        shard.take_detached(self.id, max, &mut entries);
        let count = entries.len();
        for entry in entries.drain(..) {
            f(shard, entry);
        }
        shard.return_flush_buffer(entries);
        count
    }
}

impl fmt::Debug for TimerTaskList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerTaskList")
            .field("id", &self.id)
            .field("slack_ms", &self.slack_ms)
            .field("expiration_ms", &self.expiration_ms())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_expiration_keeps_the_earliest_and_reports_changes() {
        let list = TimerTaskList::new(0, 0);
        assert_eq!(list.expiration_ms(), NO_EXPIRATION);
        assert!(list.set_expiration(10));
        assert!(!list.set_expiration(10));
        assert!(
            !list.set_expiration(13),
            "a later round waits for the earlier flush"
        );
        assert_eq!(list.expiration_ms(), 10);
        assert!(list.set_expiration(7));
        assert_eq!(list.expiration_ms(), 7);
        list.reset_expiration();
        assert!(
            list.set_expiration(13),
            "after a flush any expiration is new"
        );
    }
}
