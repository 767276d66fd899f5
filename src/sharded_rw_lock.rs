//! Kafka's reader-writer lock around the timing wheel, with its read side striped over the
//! shards of the entry store.
//!
//! Kafka guards its wheel with one `ReentrantReadWriteLock`: `add` reads, the flush writes.
//! With a single lock word every adding thread writes the same cache line twice per add,
//! and each add then also locks the bucket it links into. Here the stripes of the read side
//! *are* the entry store's shard mutexes: a reader takes the mutex of its thread's shard —
//! shared with no thread of another stripe, exclusive among threads of the same one, which
//! write that shard's entries anyway — and a writer takes every shard's mutex in index
//! order. So `add` takes one lock, which both holds the wheel's clocks still and guards
//! the shard it writes, and a writer still excludes every reader.
//!
//! # Ground rules
//!
//! See `system_timer` for the lock order of the whole timer. Here:
//!
//! - The guarded value (the wheel) is reachable only through a guard. Both guards hand out
//!   `&T`, never `&mut T`: without `unsafe`, one `&mut` cannot be made out of many stripe
//!   guards. A value that changes under the write lock keeps that state in atomics, and its
//!   writing methods take the [`WriteGuard`] as proof that the caller holds it.
//! - A reader holds one stripe; a writer takes all of them, in index order. Nothing takes
//!   two stripes otherwise.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::entry_store::{Counts, EntryStore, Shard, ShardGuard, ShardState};
use crate::timing_wheel::Geometry;

/// A reader-writer lock around a `T` whose stripes are the shards of an entry store.
pub(crate) struct ShardedRwLock<T> {
    value: T,
    store: EntryStore,
}

/// Shared access to the value, and exclusive access to one stripe's shard.
pub(crate) struct ReadGuard<'a, T> {
    value: &'a T,
    shard: &'static Shard,
    guard: ShardGuard<'static>,
}

/// Exclusive access: every stripe.
pub(crate) struct WriteGuard<'a, T> {
    value: &'a T,
    shards: Vec<ShardGuard<'static>>,
}

impl<T> ShardedRwLock<T> {
    /// Creates the lock with `stripes` stripes (a power of two), whose shards are set up
    /// for a wheel of shape `geometry` and keep `pending` (see `EntryStore::with_pending`).
    pub(crate) fn new(
        value: T,
        stripes: usize,
        geometry: Option<Arc<Geometry>>,
        pending: Option<Arc<AtomicUsize>>,
    ) -> Self {
        assert!(stripes.is_power_of_two());
        ShardedRwLock {
            value,
            store: EntryStore::with_pending(stripes, geometry, pending),
        }
    }

    /// Takes the read lock of stripe `stripe` if no one holds it; `None` otherwise.
    pub(crate) fn try_read_stripe(&self, stripe: usize) -> Option<ReadGuard<'_, T>> {
        let shards = self.store.shards();
        let shard = shards[stripe & (shards.len() - 1)];
        Some(ReadGuard {
            value: &self.value,
            shard,
            guard: shard.try_lock()?,
        })
    }

    /// Returns the stripe of `shard`, if it is one of this lock's.
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        self.store.stripe_of(shard)
    }

    /// Returns the counts of every shard (see `EntryStore::counts`).
    pub(crate) fn counts(&self) -> Counts {
        self.store.counts()
    }

    /// Takes the read lock of the calling thread's stripe.
    #[cfg(test)]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        self.read_stripe(thread_hint())
    }

    /// Takes the read lock of stripe `stripe` (modulo the number of stripes).
    pub(crate) fn read_stripe(&self, stripe: usize) -> ReadGuard<'_, T> {
        self.read_with(stripe, Shard::lock)
    }

    /// Takes the read lock of stripe `stripe` ahead of the threads that add and cancel
    /// there (see `Shard::lock_urgent`): for the timer's own work, a flush.
    pub(crate) fn read_stripe_urgent(&self, stripe: usize) -> ReadGuard<'_, T> {
        self.read_with(stripe, Shard::lock_urgent)
    }

    fn read_with(
        &self,
        stripe: usize,
        lock: fn(&'static Shard) -> ShardGuard<'static>,
    ) -> ReadGuard<'_, T> {
        let shards = self.store.shards();
        let shard = shards[stripe & (shards.len() - 1)];
        ReadGuard {
            value: &self.value,
            shard,
            guard: lock(shard),
        }
    }

    /// Takes the write lock: every stripe, in index order, ahead of adds and cancels.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        WriteGuard {
            value: &self.value,
            shards: self
                .store
                .shards()
                .iter()
                .map(|shard| shard.lock_urgent())
                .collect(),
        }
    }

    /// Returns the number of stripes.
    pub(crate) fn stripes(&self) -> usize {
        self.store.shards().len()
    }

    /// Returns the number of entries in all shards, without locking.
    pub(crate) fn len(&self) -> usize {
        self.store.len()
    }

    /// Returns the value without a lock, for tests that own it outright.
    #[cfg(test)]
    pub(crate) fn value_for_tests(&self) -> &T {
        &self.value
    }
}

impl<'a, T> ReadGuard<'a, T> {
    /// Returns the guarded value and the stripe's shard, together.
    pub(crate) fn parts(&mut self) -> (&'a T, &mut ShardState) {
        (self.value, &mut self.guard)
    }

    /// Publishes the shard's length now (see `ShardGuard::publish_len`).
    pub(crate) fn publish_len(&self) {
        self.guard.publish_len();
    }

    /// Returns the stripe's shard, for a handle to find its entry again.
    pub(crate) fn shard(&self) -> &'static Shard {
        self.shard
    }

    /// Gives up the value, keeping the shard locked.
    #[cfg(test)]
    pub(crate) fn into_shard(self) -> ShardGuard<'static> {
        self.guard
    }
}

impl<'a, T> WriteGuard<'a, T> {
    /// Returns the guarded value.
    pub(crate) fn value(&self) -> &'a T {
        self.value
    }

    /// Returns every stripe's shard.
    pub(crate) fn shards_mut(&mut self) -> &mut [ShardGuard<'static>] {
        &mut self.shards
    }
}

impl<T: fmt::Debug> fmt::Debug for ShardedRwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedRwLock")
            .field("stripes", &self.stripes())
            .finish_non_exhaustive()
    }
}

/// A small number that differs between threads, fixed for each thread's life: the stripe
/// (and so the shard) a thread reads and adds to.
pub(crate) fn thread_hint() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|hint| *hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::thread;
    use std::time::Duration;

    #[test]
    fn a_writer_excludes_readers_on_every_stripe() {
        let lock = ShardedRwLock::new((AtomicUsize::new(0), AtomicBool::new(false)), 4, None, None);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2_000 {
                        let mut guard = lock.read();
                        let (value, _) = guard.parts();
                        assert!(!value.1.load(Ordering::SeqCst), "a reader saw a writer");
                        value.0.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..200 {
                    let guard = lock.write();
                    guard.value().1.store(true, Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(20));
                    guard.value().1.store(false, Ordering::SeqCst);
                }
            });
        });
        assert_eq!(lock.value_for_tests().0.load(Ordering::SeqCst), 8_000);
    }

    #[test]
    fn readers_of_different_stripes_do_not_wait_for_each_other() {
        let lock = ShardedRwLock::new((), 8, None, None);
        let held = lock.read_stripe(0);
        thread::scope(|s| {
            s.spawn(|| drop(lock.read_stripe(1)));
        });
        drop(held);
        drop(lock.write());
    }
}
