//! Kafka's reader-writer lock around the wheel, striped over a timer's shards.
//!
//! Kafka's `SystemTimer` takes the read lock to add (many threads at once) and the write
//! lock to move the wheel's clocks. Here the read side is striped: a reader takes the mutex
//! of one shard, which both holds the wheel's clocks still and guards the shard it then
//! writes; a writer takes every shard's mutex, in index order. So `add` takes one lock, and
//! a writer still excludes every reader.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - The guarded value is reachable only through a guard. Both guards hand out `&T`, never
//!   `&mut T`: one `&mut` cannot be made out of many stripe guards. A value that changes
//!   under the write lock keeps that state in atomics, and its writing methods take the
//!   [`WriteGuard`] as proof that the caller holds it.
//! - No one waits for a second stripe while holding one: [`StripedRwLock::try_read`] only
//!   tries.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::handle::TimerTaskEntry;
use super::pool::Shards;
use super::shard::{Count, Shard, ShardGuard, ShardState};
use super::slots::EntryKey;

/// A reader-writer lock around a `T` whose read side is striped over the shards of a
/// timer's entries (see the module docs).
pub(crate) struct StripedRwLock<T> {
    value: T,
    shards: Shards,
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

impl<T> StripedRwLock<T> {
    /// Creates the lock around `value`, with `stripes` shards (a power of two). With
    /// `pending` and `held`, the shards keep the timer's counts of pending and held entries
    /// there (see `ShardState::reset`).
    pub(crate) fn new(
        value: T,
        stripes: usize,
        pending: Option<Arc<AtomicUsize>>,
        held: Option<Arc<AtomicUsize>>,
    ) -> Self {
        assert!(stripes.is_power_of_two());
        StripedRwLock {
            value,
            shards: Shards::take(stripes, pending, held),
        }
    }

    /// Returns the number of stripes a `SystemTimer` gets: one per hardware thread, times
    /// four (a power of two, at most 64), so that threads rarely share one.
    pub(crate) fn default_stripes() -> usize {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        (threads * 4).next_power_of_two().min(64)
    }

    #[inline]
    fn shard(&self, stripe: usize) -> &'static Shard {
        self.shards[stripe & (self.shards.len() - 1)]
    }

    /// Takes the read lock of stripe `stripe` (modulo the number of stripes).
    #[inline]
    pub(crate) fn read(&self, stripe: usize) -> ReadGuard<'_, T> {
        let shard = self.shard(stripe);
        ReadGuard {
            value: &self.value,
            shard,
            guard: shard.lock(),
        }
    }

    /// Takes the read lock of stripe `stripe` ahead of the threads that add and cancel
    /// there (see `Shard::lock_urgent`): for the timer's own work, a flush.
    pub(crate) fn read_urgent(&self, stripe: usize) -> ReadGuard<'_, T> {
        let shard = self.shard(stripe);
        ReadGuard {
            value: &self.value,
            shard,
            guard: shard.lock_urgent(),
        }
    }

    /// Takes the read lock of stripe `stripe` if no one holds it.
    pub(crate) fn try_read(&self, stripe: usize) -> Option<ReadGuard<'_, T>> {
        let shard = self.shard(stripe);
        Some(ReadGuard {
            value: &self.value,
            shard,
            guard: shard.try_lock()?,
        })
    }

    /// Takes the write lock: every stripe, in index order, ahead of adds and cancels.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        WriteGuard {
            value: &self.value,
            shards: self
                .shards
                .iter()
                .map(|shard| shard.lock_urgent())
                .collect(),
        }
    }

    /// Returns the number of stripes.
    pub(crate) fn stripes(&self) -> usize {
        self.shards.len()
    }

    /// Returns the stripe of `shard`, if it is one of this lock's.
    #[inline]
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        self.shards.stripe_of(shard)
    }

    /// Returns the shards, for readings that need no lock.
    pub(crate) fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Returns the value without a lock, for tests that own it outright.
    #[cfg(test)]
    pub(crate) fn value_for_tests(&self) -> &T {
        &self.value
    }
}

impl<T> fmt::Debug for StripedRwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripedRwLock")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl<'a, T> ReadGuard<'a, T> {
    /// Returns the guarded value: it cannot change while this guard lives.
    #[inline]
    pub(crate) fn value(&self) -> &'a T {
        self.value
    }

    /// Returns the state of the stripe's shard, locked.
    #[inline]
    pub(crate) fn shard(&mut self) -> &mut ShardState {
        &mut self.guard
    }

    /// Returns the handle of the entry `key` of the stripe's shard, expiring at
    /// `expiration_ms`.
    #[inline]
    pub(crate) fn handle(&mut self, key: EntryKey, expiration_ms: i64) -> TimerTaskEntry {
        TimerTaskEntry::pending(self.shard, &mut self.guard, key, expiration_ms)
    }

    /// Counts `n` more of `count` in the stripe's shard (see `ShardGuard::count`).
    #[inline]
    pub(crate) fn count(&self, count: Count, n: u64) {
        self.guard.count(count, n);
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

/// A small number that differs between threads, fixed for each thread's life: the stripe
/// (and so the shard) a thread reads and adds to.
#[inline]
pub(crate) fn thread_hint() -> usize {
    use std::sync::atomic::Ordering;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|hint| *hint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;
    use std::time::Duration;

    #[test]
    fn a_writer_excludes_readers_on_every_stripe() {
        let lock = StripedRwLock::new((AtomicUsize::new(0), AtomicBool::new(false)), 4, None, None);
        thread::scope(|s| {
            for t in 0..4 {
                let lock = &lock;
                s.spawn(move || {
                    for _ in 0..2_000 {
                        let guard = lock.read(t);
                        let value = guard.value();
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
        let lock = StripedRwLock::new((), 8, None, None);
        let held = lock.read(0);
        assert!(lock.try_read(0).is_none());
        thread::scope(|s| {
            s.spawn(|| assert!(lock.try_read(1).is_some()));
        });
        drop(held);
        drop(lock.write());
    }
}
