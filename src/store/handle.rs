//! The handle `add` returns (Kafka's `TimerTaskEntry`, seen from the outside).
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - The task itself never lives in the handle. It lives in a slot of its timer's entry
//!   store and is moved out of there exactly once, under the shard's lock: to the executor
//!   (or, for a `MockTimer`, to the caller that runs it), to `close`/`stop`, or to
//!   [`TimerTaskEntry::cancel`], which drops it. Whoever moves it out decides the outcome,
//!   so cancel and run can never both happen.
//! - The handle names its slot by index and generation, and a slot never has the same
//!   generation twice, so a stale handle never reaches a later task in the same slot. It
//!   keeps a `&'static` reference to its shard: shards are pooled for the life of the
//!   process (see `pool`), so the handle stays valid after its timer is gone and
//!   costs no reference count.
//! - "Cancelled" is a flag in the handle until the handle is first cloned. From then on the
//!   handle and its clones share a record in the shard, keyed by the entry, which the last
//!   of them removes when dropped. Cloning and cancelling both set flags under the shard's
//!   lock, so a cancel through any handle is seen by all of them; and since every writer
//!   of a handle's bits holds that lock, a plain load and store set them (readers take
//!   none).

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use super::shard::{Count, Shard, ShardState};
use super::slots::EntryKey;

/// The slot index's bits in [`TimerTaskEntry::bits`].
const INDEX_MASK: u32 = (1 << 24) - 1;
/// Set once the handle (or the one it was cloned from) has been cloned: the shard keeps the
/// shared "cancelled" flag.
const SHARED: u32 = 1 << 30;
/// Set once a cancel through this handle won (or a closed timer refused the task).
const CANCELLED: u32 = 1 << 31;

/// Handle to one scheduled task, returned by [`Timer::add`](crate::Timer::add).
///
/// Cheap to clone, `Send + Sync`, 24 bytes. Dropping it does not cancel the task.
///
/// # Examples
///
/// ```
/// use timingwheel::{timer_task, MockTimer, Timer};
///
/// let timer = MockTimer::new();
/// let entry = timer.add(timer_task(1_000, || unreachable!("cancelled in time")));
/// let other = entry.clone();
/// assert!(entry.cancel());
/// assert!(!other.cancel(), "only one cancel can win");
/// assert!(other.cancelled());
/// assert!(!timer.advance_clock(5_000));
/// ```
pub struct TimerTaskEntry {
    /// `None` when the task never entered a store: it was already expired and went straight
    /// to the executor, or a closed timer refused it.
    shard: Option<&'static Shard>,
    /// The slot index, with `SHARED` and `CANCELLED` above it.
    bits: AtomicU32,
    generation: u32,
    /// Changed only by `reschedule`, under the shard's lock (see `set_expiration`).
    expiration_ms: AtomicI64,
}

impl TimerTaskEntry {
    /// A handle to a task that waits in `shard` under `key`.
    #[inline]
    pub(crate) fn pending(shard: &'static Shard, key: EntryKey, expiration_ms: i64) -> Self {
        debug_assert_eq!(key.index & !INDEX_MASK, 0);
        TimerTaskEntry {
            shard: Some(shard),
            bits: AtomicU32::new(key.index),
            generation: key.generation,
            expiration_ms: AtomicI64::new(expiration_ms),
        }
    }

    /// A handle to a task that was handed to the executor (or run) inside `add`.
    pub(crate) fn expired(expiration_ms: i64) -> Self {
        TimerTaskEntry::detached(expiration_ms, 0)
    }

    /// A handle to a task that a closed timer refused (and dropped without running).
    pub(crate) fn refused(expiration_ms: i64) -> Self {
        TimerTaskEntry::detached(expiration_ms, CANCELLED)
    }

    fn detached(expiration_ms: i64, bits: u32) -> Self {
        TimerTaskEntry {
            shard: None,
            bits: AtomicU32::new(bits),
            generation: 0,
            expiration_ms: AtomicI64::new(expiration_ms),
        }
    }

    /// Sets `flags` in the handle's bits and returns the bits before. The caller holds the
    /// shard's lock, as every writer of the bits does: a load and a store then do what a
    /// locked read-modify-write would, for a fraction of its cost.
    #[inline]
    fn set_bits(&self, flags: u32) -> u32 {
        let bits = self.bits.load(Ordering::Relaxed);
        self.bits.store(bits | flags, Ordering::Relaxed);
        bits
    }

    #[inline]
    fn key(&self) -> EntryKey {
        EntryKey {
            index: self.bits.load(Ordering::Relaxed) & INDEX_MASK,
            generation: self.generation,
        }
    }

    /// Returns the shard and the key of the entry, if the task entered a store.
    pub(crate) fn location(&self) -> Option<(&'static Shard, EntryKey)> {
        self.shard.map(|shard| (shard, self.key()))
    }

    /// Records the expiration a `reschedule` gave the entry, for this handle and its clones.
    /// `state` is the entry's shard, locked.
    pub(crate) fn set_expiration(&self, state: &mut ShardState, expiration_ms: i64) {
        self.expiration_ms.store(expiration_ms, Ordering::Relaxed);
        if self.bits.load(Ordering::Relaxed) & SHARED != 0 {
            state.clones.set_expiration(self.key(), expiration_ms);
        }
    }

    /// Returns the absolute expiration on the timer's clock: the time of `add` plus the
    /// task's delay, saturating at `i64::MIN` and `i64::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let now = timer.time().hi_res_clock_ms();
    /// assert_eq!(timer.add(timer_task(250, || {})).expiration_ms(), now + 250);
    /// assert_eq!(timer.add(timer_task(i64::MAX, || {})).expiration_ms(), i64::MAX);
    /// ```
    pub fn expiration_ms(&self) -> i64 {
        match self.shard {
            // A clone may have rescheduled the entry: the shared record knows.
            Some(shard) if self.bits.load(Ordering::Relaxed) & SHARED != 0 => shard
                .lock()
                .clones
                .expiration(self.key())
                .unwrap_or_else(|| self.expiration_ms.load(Ordering::Relaxed)),
            _ => self.expiration_ms.load(Ordering::Relaxed),
        }
    }

    /// Stops the timer for this task. Returns true iff this call prevented the task from
    /// ever running.
    ///
    /// O(1): the task is taken out of its bucket and dropped inside this call, so a
    /// cancelled timeout holds no memory. Returns false if the task already ran or was
    /// handed to the executor, if it was cancelled before (through this handle or a clone),
    /// or if its timer was closed, stopped or dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(100, || {}));
    /// assert!(entry.cancel());
    /// assert!(!entry.cancel());
    /// assert_eq!(timer.size(), 0);
    /// ```
    ///
    /// # Differences from Kafka
    ///
    /// Kafka cancels through the task (`TimerTask.cancel`), which unlinks its entry from its
    /// bucket; it reports nothing, and a concurrent flush can link a cancelled entry again
    /// (the race its source admits). Here the entry's slot decides: exactly one of `cancel`
    /// and the executor gets the task, and `cancel` says which.
    pub fn cancel(&self) -> bool {
        let Some(shard) = self.shard else {
            return false;
        };
        let key = self.key();
        let mut state = shard.lock();
        let Some(task) = state.take(key) else {
            return false;
        };
        state.count(Count::Cancelled, 1);
        if self.set_bits(CANCELLED) & SHARED != 0 {
            state.clones.set_cancelled(key);
        }
        drop(state);
        // Dropped after the lock is released: a task's `Drop` may call back into the timer.
        drop(task);
        true
    }

    /// Returns true once the task was cancelled through this handle or one of its clones,
    /// or refused by a closed timer.
    ///
    /// Stays false for a task that ran, or that a closed timer dropped while it waited.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(100, || {}));
    /// assert!(!entry.cancelled());
    /// entry.cancel();
    /// assert!(entry.cancelled());
    /// ```
    pub fn cancelled(&self) -> bool {
        let bits = self.bits.load(Ordering::Relaxed);
        if bits & CANCELLED != 0 {
            return true;
        }
        match self.shard {
            Some(shard) if bits & SHARED != 0 => shard.lock().clones.cancelled(self.key()),
            _ => false,
        }
    }
}

impl Clone for TimerTaskEntry {
    fn clone(&self) -> Self {
        let Some(shard) = self.shard else {
            // Nothing can change for a handle without an entry: a copy will do.
            return TimerTaskEntry::detached(
                self.expiration_ms.load(Ordering::Relaxed),
                self.bits.load(Ordering::Relaxed),
            );
        };
        let key = self.key();
        let mut state = shard.lock();
        let bits = self.set_bits(SHARED);
        let expiration_ms = self.expiration_ms.load(Ordering::Relaxed);
        state.clones.add(key, bits & CANCELLED != 0, expiration_ms);
        let expiration_ms = state.clones.expiration(key).unwrap_or(expiration_ms);
        drop(state);
        TimerTaskEntry {
            shard: Some(shard),
            bits: AtomicU32::new(key.index | SHARED),
            generation: self.generation,
            expiration_ms: AtomicI64::new(expiration_ms),
        }
    }
}

impl Drop for TimerTaskEntry {
    fn drop(&mut self) {
        if let Some(shard) = self.shard
            && *self.bits.get_mut() & SHARED != 0
        {
            shard.lock().clones.remove(self.key());
        }
    }
}

impl fmt::Debug for TimerTaskEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock: a clone's cancel is not seen here (`cancelled()` sees it).
        let bits = self.bits.load(Ordering::Relaxed);
        f.debug_struct("TimerTaskEntry")
            .field("expiration_ms", &self.expiration_ms.load(Ordering::Relaxed))
            .field("cancelled_here", &(bits & CANCELLED != 0))
            .finish_non_exhaustive()
    }
}
