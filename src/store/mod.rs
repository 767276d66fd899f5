//! The entries of a timer, sharded, and the reader-writer lock around its wheel that the
//! shards' mutexes make up.
//!
//! Kafka guards its wheel with one `ReentrantReadWriteLock` (`add` reads, the flush writes)
//! and gives each entry an object linked into its bucket. Here a timer's entries live in
//! shards: a thread adds to the shard its hint picks, so adding threads rarely share a lock
//! or a cache line. Each shard holds 32-byte slots ([`slab`]) and its part of every list, as
//! chains of slot indices ([`ring`]), in memory it maps itself ([`chunks`], [`region`]).
//!
//! The read side of the wheel's lock is striped over those shards: a reader takes the mutex
//! of one shard — which it then writes — and a writer takes every shard's mutex in index
//! order. So `add` takes one lock, which both holds the wheel's clocks still and guards the
//! shard it writes, and a writer still excludes every reader. [`EntryStore<T>`] is that lock
//! around a `T` (the wheel).
//!
//! # Ground rules
//!
//! This is the one place that states the crate's lock order, with every lock placed in it;
//! the other modules link here. From outermost to innermost: a thread takes a lock only
//! while it holds no lock of a later item.
//!
//! 1. Locks of what is built on a timer, some of them held while it calls the timer:
//!    - the purgatory's (see `purgatory`): an operation's re-entrant lock, then either one
//!      watch-list shard's mutex or the operation's `timeout` slot, never both and never
//!      two shards. Completing cancels the operation's timeout under the operation's lock,
//!      once the slot is released; no watch-list shard or slot is held while the timer is
//!      called, and `Timer::add` is called with no purgatory lock held.
//!    - a periodic schedule's `state` (`periodic`): the next tick's task is added and
//!      rescheduled, and the timer's clock read through it, under it. Taken by
//!      `schedule_periodic`, by the tick's `run` and `Drop` (which timers call with no lock
//!      of theirs held), and by the handle's `cancel`, which waits on the schedule's `idle`
//!      condvar with it.
//! 2. `MockTimer`'s order map (`mock_timer`): taken before its one shard's mutex by `add`,
//!    `reschedule`, `advance_clock` (released before a task runs), `close` and `stop`.
//! 3. A shard's mutex. A reader holds one: `add`, `Timer::reschedule`, a flush chunk, a
//!    handle's `cancel`, and a cloned handle's `clone`, `drop`, `cancelled` and
//!    `expiration_ms`. A writer holds all of them, taken in index order: `advance_clock` to
//!    move the wheel's clocks and detach due lists, `close`, `stop`. No one else waits for a
//!    second shard's mutex while holding one: an `add` whose shard is full only *tries* the
//!    others (`try_read`), and `mapped_bytes` and a store's creation and drop lock them one
//!    at a time. A writer and a flush chunk lock with `Shard::lock_urgent`.
//! 4. Leaves under a shard's mutex (nothing is taken under them):
//!    - the delay queue's mutex (`rt::delay_queue`), with its condvar: offered to by an add
//!      or a flush under a shard's mutex, closed under the write lock, polled under no lock.
//!      The timer's `Time`, which may be the caller's, is read under it.
//!    - the flush scheduler's `unfinished` list (`system_timer::flush`): taken under no lock
//!      at the start and end of an `advance_clock` call, and under the write lock by
//!      `close` and `stop`.
//!    - the overflow wheel's `OnceLock` (`wheel`): created by an add or a flush's re-add,
//!      under a read lock.
//! 5. Leaves taken with no lock of items 2-4 held (one of item 1 may be):
//!    - the executor's job queue, a `crossbeam-channel` (`rt::executor`): expired tasks are
//!      counted in flight under the shard's mutex that took them out of the store, so that
//!      `close` waits for them, and sent once it is released (`Executor::hand_over`). The
//!      executor's `lock` and `idle` condvar: a `close` waiting for the tasks in flight, a
//!      pool thread that finished a job. Its `threads`: held by `close` and the executor's
//!      drop while they send the stop messages into the queue and join the pool's threads.
//!      Its `buffers`: a flush chunk takes an empty batch buffer before it locks its shard
//!      (a new one is an allocation), and the pool gives buffers back under no lock.
//!    - the reapers' `stop` and `thread` mutexes (`rt::reaper`), never held together:
//!      `stop` while the stop channel's sender is dropped, `thread` while the reaper thread
//!      is joined. That thread's polls take the timer's locks, but never these two.
//!    - the shard pool (`POOL`, here): taken when a store is created or dropped.
//!    - a `KeyedTimer`'s maps (`keyed`), one at a time: the timer is called, and handles
//!      and tasks dropped, after it is released. Its wrapper task takes one in `run` and
//!      `Drop`, which timers call with no lock of theirs held.
//!    - a `Sleep`'s state (`future`): taken by `poll`, `is_elapsed`, `reset` (not while it
//!      calls the timer) and its task's drop; wakers are woken and dropped after it is
//!      released.
//!    - the channel of a `send_task` task (`channel`): its `run` sends on an executor thread
//!      (or in `MockTimer::advance_clock`), and its drop drops the sender.
//!    - metrics (`metrics`): the crate holds no lock of its own there; the recorder's
//!      handles are set after each `advance_clock` step and at shutdown.
//!
//! No user code runs and no task is dropped under the locks of items 2-4, but for the
//! timer's `Time` (above): `delay_ms` is called before locking, tasks run on the executor
//! (or on the caller of `MockTimer::advance_clock`), and tasks that are cancelled or closed
//! away are dropped after the locks are released.
//!
//! - The guarded value is reachable only through a guard. Both guards hand out `&T`, never
//!   `&mut T`: one `&mut` cannot be made out of many stripe guards. A value that changes
//!   under the write lock keeps that state in atomics, and its writing methods take the
//!   [`WriteGuard`] as proof that the caller holds it.
//! - Shards are pooled for the life of the process (a few hundred bytes each, their memory
//!   unmapped when emptied), so that a handle can keep a `&'static` reference to its shard
//!   and `add` touches no reference count. A shard goes back to the pool empty when its
//!   timer is dropped; the generations it handed out stay with it, so a handle of the old
//!   timer can never cancel a task of the next one.

mod chunks;
mod region;
mod ring;
mod shard;
mod slab;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use parking_lot::Mutex;

pub(crate) use shard::{Counts, Entry, Released, Shard, ShardGuard, ShardState};
pub(crate) use slab::EntryKey;

/// Shards not in use by any timer.
static POOL: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

/// A timer's entries in shards, and the striped reader-writer lock around a `T` that the
/// shards' mutexes make up (see the module's ground rules).
pub(crate) struct EntryStore<T> {
    value: T,
    shards: Box<[&'static Shard]>,
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

impl<T> EntryStore<T> {
    /// Creates the store with `stripes` shards (a power of two) around `value`. With
    /// `pending`, the shards keep the timer's exact count of pending entries there.
    pub(crate) fn new(value: T, stripes: usize, pending: Option<Arc<AtomicUsize>>) -> Self {
        assert!(stripes.is_power_of_two());
        let mut pool = POOL.lock();
        let shards: Box<[&'static Shard]> = (0..stripes)
            .map(|_| {
                pool.pop()
                    .unwrap_or_else(|| Box::leak(Box::new(Shard::new())))
            })
            .collect();
        drop(pool);
        for shard in &shards {
            shard.lock().reset(pending.clone());
        }
        EntryStore { value, shards }
    }

    /// Returns the number of shards a `SystemTimer` gets: one per hardware thread, times
    /// four (a power of two, at most 64), so that threads rarely share one.
    pub(crate) fn default_stripes() -> usize {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        (threads * 4).next_power_of_two().min(64)
    }

    fn shard(&self, stripe: usize) -> &'static Shard {
        self.shards[stripe & (self.shards.len() - 1)]
    }

    /// Takes the read lock of stripe `stripe` (modulo the number of stripes).
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

    /// Returns the stripe of `shard`, if it is one of this store's.
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        self.shards.iter().position(|s| std::ptr::eq(*s, shard))
    }

    /// Returns the number of entries in all shards, without locking.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.len()).sum()
    }

    /// Returns the counts of all shards, without locking.
    pub(crate) fn counts(&self) -> Counts {
        self.shards
            .iter()
            .map(|shard| shard.counts())
            .fold(Counts::default(), Counts::plus)
    }

    /// Returns the bytes mapped for the entries of all shards (each locked in turn).
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().mapped_bytes())
            .sum()
    }

    /// Returns the value without a lock, for tests that own it outright.
    #[cfg(test)]
    pub(crate) fn value_for_tests(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for EntryStore<T> {
    fn drop(&mut self) {
        let mut cleared = Released::default();
        for shard in &self.shards {
            let mut state = shard.lock();
            cleared.absorb(state.clear());
            state.reset(None);
        }
        // Whatever was still waiting is dropped here, with no lock held.
        drop(cleared);
        POOL.lock().extend(self.shards.iter().copied());
    }
}

impl<T> fmt::Debug for EntryStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntryStore")
            .field("stripes", &self.stripes())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<'a, T> ReadGuard<'a, T> {
    /// Returns the guarded value and the stripe's shard, together.
    pub(crate) fn parts(&mut self) -> (&'a T, &mut ShardState) {
        (self.value, &mut self.guard)
    }

    /// Publishes the shard's length and counts now (see `ShardGuard::publish_len`).
    pub(crate) fn publish_len(&self) {
        self.guard.publish_len();
    }

    /// Returns the stripe's shard, for a handle to find its entry again.
    pub(crate) fn shard(&self) -> &'static Shard {
        self.shard
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
        let store = EntryStore::new((AtomicUsize::new(0), AtomicBool::new(false)), 4, None);
        thread::scope(|s| {
            for t in 0..4 {
                let store = &store;
                s.spawn(move || {
                    for _ in 0..2_000 {
                        let mut guard = store.read(t);
                        let (value, _) = guard.parts();
                        assert!(!value.1.load(Ordering::SeqCst), "a reader saw a writer");
                        value.0.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..200 {
                    let guard = store.write();
                    guard.value().1.store(true, Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(20));
                    guard.value().1.store(false, Ordering::SeqCst);
                }
            });
        });
        assert_eq!(store.value_for_tests().0.load(Ordering::SeqCst), 8_000);
    }

    #[test]
    fn readers_of_different_stripes_do_not_wait_for_each_other() {
        let store = EntryStore::new((), 8, None);
        let held = store.read(0);
        assert!(store.try_read(0).is_none());
        thread::scope(|s| {
            s.spawn(|| assert!(store.try_read(1).is_some()));
        });
        drop(held);
        drop(store.write());
    }
}
