//! The handle `add` returns (Kafka's `TimerTaskEntry`, seen from the outside): 16 bytes
//! that name a slot of a pooled shard (see `store::shard`).
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - The task never lives in the handle. It lives in a slot and is moved out of there
//!   exactly once, under the shard's lock: to the executor (or, for a `MockTimer`, to the
//!   caller that runs it), to `close`/`stop`, or to [`TimerTaskEntry::cancel`], which drops
//!   it. Whoever moves it out decides the outcome, so cancel and run never both happen.
//! - The handle names its slot by index and generation, and a slot never has the same
//!   generation twice, so a stale handle never reaches a later task in the same slot.
//! - The expiration is packed beside the shard's number: exact within 278 years of the
//!   clock's zero and at the saturated ends. Any other is kept in the shard's record (see
//!   `Clones`), as a clone's is, so every handle reads its exact expiration.
//! - "Cancelled" is a flag in the handle until it is first cloned; from then on the handle
//!   and its clones share the record. Every writer of a handle's bits holds the shard's
//!   lock, so a plain load and store set them (readers take none), and a cancel through
//!   any handle is seen by all of them.

use std::collections::hash_map::Entry;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::store::chunks::EntryKey;
use crate::store::shard::{Count, Record, SHARD_ID_BITS, Shard, ShardState, shard_by_id};

/// The slot index's bits in [`TimerTaskEntry::bits`].
const INDEX_MASK: u32 = (1 << 24) - 1;
/// Set once the handle (or the one it was cloned from) has been cloned, or was given an
/// expiration its word cannot hold: the shard keeps the shared "cancelled" flag and the
/// expiration.
const SHARED: u32 = 1 << 30;
/// Set once a cancel through this handle won (or a closed timer refused the task).
const CANCELLED: u32 = 1 << 31;

/// The shard number's bits in [`TimerTaskEntry::word`]; the expiration is above them.
const SHARD_MASK: u64 = (1 << SHARD_ID_BITS) - 1;
/// The expirations a pending handle's word holds as they are: `(NEVER_BEFORE, NEVER_AFTER)`,
/// 278 years either side of the clock's zero. The two ends stand for `i64::MIN` and
/// `i64::MAX`, where saturated expirations land.
const NEVER_AFTER: i64 = (1 << (63 - SHARD_ID_BITS)) - 1;
const NEVER_BEFORE: i64 = -NEVER_AFTER - 1;

/// Handle to one scheduled task, returned by [`Timer::add`](crate::Timer::add).
///
/// Cheap to clone, `Send + Sync`, 16 bytes. Dropping it does not cancel the task.
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
    /// The slot index, with `SHARED` and `CANCELLED` above it.
    bits: AtomicU32,
    /// The occupant's generation; for a handle without a shard, the expiration's low half.
    generation: u32,
    /// The shard's number (see `shard_by_id`) in the low `SHARD_ID_BITS`, 0 when the task never
    /// entered a store (it was already expired and went straight to the executor, or a
    /// closed timer refused it). Above them the expiration: its code (see [`encode`]) for a
    /// pending task, its high half for one without a shard. Changed only by `reschedule`,
    /// under the shard's lock (see `set_expiration`).
    word: AtomicU64,
}

/// Returns how a pending handle's word holds `expiration_ms`, if it can.
#[inline]
fn encode(expiration_ms: i64) -> Option<i64> {
    // One comparison for what a clock reads: strictly between the two ends.
    if expiration_ms.wrapping_sub(NEVER_BEFORE + 1) as u64
        <= (NEVER_AFTER - NEVER_BEFORE - 2) as u64
    {
        Some(expiration_ms)
    } else {
        encode_edge(expiration_ms)
    }
}

/// [`encode`] for the ends and beyond them.
#[cold]
fn encode_edge(expiration_ms: i64) -> Option<i64> {
    match expiration_ms {
        i64::MAX => Some(NEVER_AFTER),
        i64::MIN => Some(NEVER_BEFORE),
        _ => None,
    }
}

/// A word of shard number `shard_id` and expiration bits `high` (sign-extended on reading).
#[inline]
fn word(shard_id: u32, high: i64) -> u64 {
    ((high as u64) << SHARD_ID_BITS) | u64::from(shard_id)
}

impl TimerTaskEntry {
    /// A handle to a task that waits in `shard` under `key`. `state` is `shard`, locked: an
    /// expiration the handle cannot hold goes to a record there.
    #[inline]
    pub(crate) fn pending(
        shard: &'static Shard,
        state: &mut ShardState,
        key: EntryKey,
        expiration_ms: i64,
    ) -> Self {
        let mut entry = TimerTaskEntry::at(shard, key);
        match encode(expiration_ms) {
            Some(code) => *entry.word.get_mut() = word(shard.id, code),
            None => entry.set_expiration(state, expiration_ms),
        }
        entry
    }

    /// A handle to the task that waits in `shard` under `key`, whose expiration it does not
    /// know (it reads 0): for callers that only cancel or move the entry.
    #[inline]
    pub(crate) fn at(shard: &'static Shard, key: EntryKey) -> Self {
        debug_assert_eq!(key.index & !INDEX_MASK, 0);
        TimerTaskEntry {
            bits: AtomicU32::new(key.index),
            generation: key.generation,
            word: AtomicU64::new(word(shard.id, 0)),
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
            bits: AtomicU32::new(bits),
            generation: expiration_ms as u32,
            word: AtomicU64::new(word(0, expiration_ms >> 32)),
        }
    }

    /// Returns the handle's shard, if its task entered a store.
    #[inline]
    fn shard(&self) -> Option<&'static Shard> {
        match (self.word.load(Ordering::Relaxed) & SHARD_MASK) as u32 {
            0 => None,
            id => shard_by_id(id),
        }
    }

    /// Returns the shard that keeps the record this handle shares, if it shares one.
    #[inline]
    fn record_shard(&self) -> Option<&'static Shard> {
        let shared = self.bits.load(Ordering::Relaxed) & SHARED != 0;
        shared.then(|| self.shard()).flatten()
    }

    /// Returns the record this handle shares, if it shares one.
    fn record(&self) -> Option<Record> {
        self.record_shard()?.lock().clones.get(&self.key()).copied()
    }

    /// Returns the expiration the handle holds itself: exact for a handle without a shard,
    /// and for one whose bits say nothing is `SHARED`.
    fn own_expiration_ms(&self) -> i64 {
        let word = self.word.load(Ordering::Relaxed);
        // Without a shard, the high half; with one, what `encode` made of it.
        match (word & SHARD_MASK, word as i64 >> SHARD_ID_BITS) {
            (0, high) => (high << 32) | i64::from(self.generation),
            (_, NEVER_AFTER) => i64::MAX,
            (_, NEVER_BEFORE) => i64::MIN,
            (_, ms) => ms,
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
        self.shard().map(|shard| (shard, self.key()))
    }

    /// Records the expiration a `reschedule` (or the `add`) gave the entry, for this handle
    /// and its clones. `state` is the entry's shard, locked.
    #[inline]
    pub(crate) fn set_expiration(&self, state: &mut ShardState, expiration_ms: i64) {
        let code = encode(expiration_ms);
        if let Some(code) = code {
            let shard_id = self.word.load(Ordering::Relaxed) & SHARD_MASK;
            self.word
                .store(word(shard_id as u32, code), Ordering::Relaxed);
        }
        // Shared, or beyond what the word holds: the record keeps it. A handle without a share
        // in it takes one, as clones do (another handle made from the entry's place, a keyed
        // timer's, may have opened it).
        if self.bits.load(Ordering::Relaxed) & SHARED != 0 || code.is_none() {
            self.share(state, 0).expiration_ms = expiration_ms;
        }
    }

    /// Gives the handle a share in its entry's record (`state` is the entry's shard, locked),
    /// with `more` other handles; the first share opens the record, with the handle's flag
    /// and expiration.
    #[cold]
    fn share<'s>(&self, state: &'s mut ShardState, more: usize) -> &'s mut Record {
        let bits = self.set_bits(SHARED);
        let record = state.clones.entry(self.key()).or_insert(Record {
            handles: 0,
            cancelled: bits & CANCELLED != 0,
            expiration_ms: self.own_expiration_ms(),
        });
        record.handles += more + usize::from(bits & SHARED == 0);
        record
    }

    /// Takes the handle's share out of its entry's record: the last one removes the record.
    #[cold]
    fn unshare(&self, shard: &Shard) {
        if let Entry::Occupied(mut record) = shard.lock().clones.entry(self.key()) {
            record.get_mut().handles -= 1;
            if record.get().handles == 0 {
                record.remove();
            }
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
        // A clone may have rescheduled the entry, or the expiration is beyond the handle's
        // own word: the shared record knows.
        self.record()
            .map_or_else(|| self.own_expiration_ms(), |record| record.expiration_ms)
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
        let Some(shard) = self.shard() else {
            return false;
        };
        let key = self.key();
        let mut state = shard.lock();
        let Some(task) = state.take(key) else {
            return false;
        };
        state.count(Count::Cancelled, 1);
        if self.set_bits(CANCELLED) & SHARED != 0 {
            self.share(&mut state, 0).cancelled = true;
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
        let cancelled_here = self.bits.load(Ordering::Relaxed) & CANCELLED != 0;
        cancelled_here || self.record().is_some_and(|record| record.cancelled)
    }
}

impl Clone for TimerTaskEntry {
    fn clone(&self) -> Self {
        let Some(shard) = self.shard() else {
            // Nothing can change for a handle without an entry: a copy will do.
            let bits = self.bits.load(Ordering::Relaxed);
            return TimerTaskEntry::detached(self.own_expiration_ms(), bits);
        };
        // The clone's own copy is for `Debug` only: being shared, it reads the record.
        let shared = *self.share(&mut shard.lock(), 1);
        TimerTaskEntry {
            bits: AtomicU32::new(self.key().index | SHARED),
            generation: self.generation,
            word: AtomicU64::new(word(shard.id, encode(shared.expiration_ms).unwrap_or(0))),
        }
    }
}

impl Drop for TimerTaskEntry {
    fn drop(&mut self) {
        if let Some(shard) = self.record_shard() {
            self.unshare(shard);
        }
    }
}

impl fmt::Debug for TimerTaskEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Waits for no lock: a shared record is read only if its shard's lock is free at
        // once (else the handle's own copy is shown), and a clone's cancel is not seen here
        // (`cancelled()` sees it).
        let shared = self
            .record_shard()
            .and_then(|shard| shard.try_lock()?.clones.get(&self.key()).copied());
        let expiration_ms =
            shared.map_or_else(|| self.own_expiration_ms(), |record| record.expiration_ms);
        let cancelled = self.bits.load(Ordering::Relaxed) & CANCELLED != 0;
        f.debug_struct("TimerTaskEntry")
            .field("expiration_ms", &expiration_ms)
            .field("cancelled_here", &cancelled)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::shard::Shards;
    use crate::task::timer_task;

    /// A task in a slot of `shard`, in no list, for the handles under test to name.
    fn unlisted(shard: &'static Shard, ms: i64) -> EntryKey {
        let task = timer_task(1, || {});
        shard.lock().insert_unlisted(task, ms).ok().unwrap()
    }

    /// Once every handle is gone, no record is left and the task is still in its slot.
    fn no_record_left(shard: &'static Shard, key: EntryKey) {
        let mut state = shard.lock();
        assert_eq!(state.clones.len(), 0, "the last handle removes the record");
        assert!(state.take(key).is_some());
    }

    /// Expirations at and around every edge of what a handle's word holds.
    const EDGES: [i64; 12] = [
        i64::MIN,
        i64::MIN + 1,
        NEVER_BEFORE,
        NEVER_BEFORE + 1,
        -1,
        0,
        1,
        1 << 40,
        NEVER_AFTER - 1,
        NEVER_AFTER,
        i64::MAX - 1,
        i64::MAX,
    ];

    #[test]
    fn a_handle_is_16_bytes() {
        assert_eq!(size_of::<TimerTaskEntry>(), 16);
    }

    #[test]
    fn a_handle_without_a_shard_keeps_any_expiration_exactly() {
        for ms in EDGES {
            assert_eq!(TimerTaskEntry::expired(ms).expiration_ms(), ms);
            let refused = TimerTaskEntry::refused(ms);
            assert_eq!(refused.clone().expiration_ms(), ms);
            assert!(refused.cancelled());
        }
    }

    #[test]
    fn a_pending_handle_keeps_any_expiration_exactly_and_a_record_only_when_it_must() {
        let shards = Shards::take(1, None, None);
        let shard = shards[0];
        for ms in EDGES {
            let mut state = shard.lock();
            let key = state
                .insert_unlisted(timer_task(1, || {}), ms)
                .ok()
                .unwrap();
            let entry = TimerTaskEntry::pending(shard, &mut state, key, ms);
            let recorded = usize::from(encode(ms).is_none());
            assert_eq!(state.clones.len(), recorded, "{ms}");
            drop(state);
            assert_eq!(entry.expiration_ms(), ms, "{ms}");
            let clone = entry.clone();
            assert_eq!(clone.expiration_ms(), ms, "{ms}");
            assert_eq!(
                shard.lock().clones.len(),
                1,
                "{ms}: a clone shares one record"
            );
            // Moved into and out of what the word holds, through either handle.
            for (handle, to) in [(&clone, 5), (&entry, ms), (&clone, i64::MAX - 7)] {
                handle.set_expiration(&mut shard.lock(), to);
                assert_eq!((entry.expiration_ms(), clone.expiration_ms()), (to, to));
            }
            drop(clone);
            drop(entry);
            let mut state = shard.lock();
            assert_eq!(
                state.clones.len(),
                0,
                "{ms}: the last handle removes the record"
            );
            assert!(state.take(key).is_some());
        }
    }

    #[test]
    fn two_handles_made_from_one_place_each_count_in_a_record_they_open() {
        let shards = Shards::take(1, None, None);
        let shard = shards[0];
        let key = unlisted(shard, 10);
        let (a, b) = (
            TimerTaskEntry::at(shard, key),
            TimerTaskEntry::at(shard, key),
        );
        a.set_expiration(&mut shard.lock(), NEVER_AFTER + 1);
        b.set_expiration(&mut shard.lock(), NEVER_AFTER + 2);
        assert_eq!(
            a.expiration_ms(),
            NEVER_AFTER + 2,
            "one record, the latest move"
        );
        drop(a);
        assert_eq!(
            b.expiration_ms(),
            NEVER_AFTER + 2,
            "still there for the other"
        );
        drop(b);
        no_record_left(shard, key);
    }

    #[test]
    fn a_clone_of_a_handle_without_a_share_counts_both_in_the_record_its_place_opened() {
        let shards = Shards::take(1, None, None);
        let shard = shards[0];
        let key = unlisted(shard, 10);
        let (opener, other) = (
            TimerTaskEntry::at(shard, key),
            TimerTaskEntry::at(shard, key),
        );
        opener.set_expiration(&mut shard.lock(), NEVER_AFTER + 1);
        let clone = other.clone();
        drop((opener, other));
        assert_eq!(
            clone.expiration_ms(),
            NEVER_AFTER + 1,
            "the record outlives them"
        );
        drop(clone);
        no_record_left(shard, key);
    }

    #[test]
    fn debug_shows_an_expiration_beyond_the_word() {
        let shards = Shards::take(1, None, None);
        let shard = shards[0];
        let mut state = shard.lock();
        let far = NEVER_AFTER + 10;
        let key = state
            .insert_unlisted(timer_task(1, || {}), far)
            .ok()
            .unwrap();
        let entry = TimerTaskEntry::pending(shard, &mut state, key, far);
        drop(state);
        assert!(format!("{entry:?}").contains(&format!("expiration_ms: {far}")));
        assert!(shard.lock().take(key).is_some());
    }

    #[test]
    fn a_handle_moved_beyond_its_word_records_its_cancel_there() {
        let shards = Shards::take(1, None, None);
        let shard = shards[0];
        let mut state = shard.lock();
        let key = state
            .insert_unlisted(timer_task(1, || {}), 10)
            .ok()
            .unwrap();
        let entry = TimerTaskEntry::pending(shard, &mut state, key, 10);
        assert_eq!(state.clones.len(), 0);
        entry.set_expiration(&mut state, NEVER_AFTER + 1);
        drop(state);
        assert!(entry.cancel());
        let clone = entry.clone();
        assert!(clone.cancelled() && !clone.cancel());
        assert_eq!(clone.expiration_ms(), NEVER_AFTER + 1);
        drop((entry, clone));
        assert_eq!(shard.lock().clones.len(), 0);
    }
}
