//! One shard of a timer's entries: its slots and its part of every list, behind one mutex.
//!
//! # Ground rules
//!
//! See [`store`](super) for the lock order of the whole timer. Here:
//!
//! - A [`ShardState`] — slots, list parts, clone records, counts — is guarded by its
//!   shard's mutex. An entry lives and moves within one shard.
//! - [`Shard::len`] and [`Shard::counts`] mirror the state's; they are written under the
//!   mutex (when a guard is dropped, or by [`ShardGuard::publish_len`]) and read without it.
//! - Nothing here runs user code under the lock. Tasks are moved out under it and dropped,
//!   run or handed over by the caller; memory the shard gives back (emptied chunks) is
//!   unmapped by the guard after it unlocks.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::region::Region;
use super::ring::{Block, Loc, Rings};
use super::slab::{EntryKey, Slot, Slots};
use crate::TimerTask;
use crate::prefetch::prefetch;

/// An entry as the wheel sees it: its slot, and when it expires (Kafka's `TimerTaskEntry`
/// without the task).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) index: u32,
    pub(crate) expiration_ms: i64,
}

/// What happened to a shard's entries since its timer was built (`SystemTimer::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) added: u64,
    pub(crate) expired: u64,
    pub(crate) cancelled: u64,
    pub(crate) refused: u64,
}

impl Counts {
    fn as_array(self) -> [u64; 4] {
        [self.added, self.expired, self.cancelled, self.refused]
    }

    fn from_array([added, expired, cancelled, refused]: [u64; 4]) -> Counts {
        Counts {
            added,
            expired,
            cancelled,
            refused,
        }
    }

    /// The sum of two counts.
    pub(crate) fn plus(self, other: Counts) -> Counts {
        let (a, b) = (self.as_array(), other.as_array());
        Counts::from_array([a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]])
    }
}

/// What a clone of a handle shares with its original: whether a cancel through any of them
/// won, and the entry's latest expiration. Kept by the shard, keyed by the entry, for as
/// long as such handles live.
#[derive(Debug)]
struct CloneRecord {
    handles: usize,
    cancelled: bool,
    expiration_ms: i64,
}

/// Everything of one shard that its mutex guards.
pub(crate) struct ShardState {
    slots: Slots,
    rings: Rings,
    /// The entries of a flush chunk between taking them out and re-adding them (kept to
    /// reuse its buffer).
    flushed: Vec<Entry>,
    clones: HashMap<EntryKey, CloneRecord>,
    /// What happened here since the timer was built.
    pub(crate) counts: Counts,
    /// The pending entries of the whole timer, kept exactly when it has a `max_pending`
    /// bound: every entry that leaves this shard takes itself off.
    pending: Option<Arc<AtomicUsize>>,
}

impl ShardState {
    fn new() -> ShardState {
        ShardState {
            slots: Slots::new(),
            rings: Rings::new(),
            flushed: Vec::new(),
            clones: HashMap::new(),
            counts: Counts::default(),
            pending: None,
        }
    }

    /// Returns the number of pending entries.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if the shard cannot take another entry.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.is_full()
    }

    /// Stores a new, unlisted entry and returns its key; gives the task back if the shard
    /// is full.
    pub(crate) fn insert(
        &mut self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
    ) -> Result<EntryKey, Box<dyn TimerTask>> {
        self.slots.insert(task, expiration_ms)
    }

    /// True if `key` names a pending entry.
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.slots.is_live(key)
    }

    /// Appends the unlisted entry in slot `index` to list `id`.
    pub(crate) fn link(&mut self, id: u32, index: u32) {
        let loc = self.rings.push(id, index);
        let slot = self.slots.get_mut(index);
        debug_assert_eq!(slot.loc(), Loc::UNLISTED);
        slot.set_loc(loc);
    }

    /// Returns the number of entries of list `id` in this shard.
    #[cfg(test)]
    pub(crate) fn list_len(&self, id: u32) -> usize {
        self.rings.entries(id).len()
    }

    /// Detaches list `id`'s entries in this shard for a flush (see `Rings::detach`).
    pub(crate) fn detach(&mut self, id: u32) {
        self.rings.detach(id);
    }

    /// Takes up to `max` detached entries of list `id` out of the list and hands each to
    /// `f`, with the shard, to be re-added or expired; returns how many.
    ///
    /// The entries' slots are read in a loop of their own, after the indices: each read is
    /// likely a cache miss, and with nothing else in the loop the processor overlaps them.
    pub(crate) fn flush_list(
        &mut self,
        id: u32,
        max: usize,
        mut f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        let mut entries = std::mem::take(&mut self.flushed);
        while entries.len() < max {
            let Some(index) = self.rings.pop_detached(id) else {
                break;
            };
            entries.push(Entry {
                index,
                expiration_ms: 0,
            });
        }
        // Each slot is likely a cache and TLB miss: asked for all at once, they overlap.
        for entry in &entries {
            prefetch(self.slots.get(entry.index));
        }
        for entry in &mut entries {
            entry.expiration_ms = self.slots.get(entry.index).expiration_ms();
        }
        let count = entries.len();
        for entry in entries.drain(..) {
            self.slots.get_mut(entry.index).set_loc(Loc::UNLISTED);
            f(self, entry);
        }
        self.flushed = entries;
        count
    }

    /// Takes the occupant named by `key` out of its list and its slot, if it is still
    /// there, and returns its task.
    pub(crate) fn take(&mut self, key: EntryKey) -> Option<Box<dyn TimerTask>> {
        self.slots.is_live(key).then(|| self.remove(key.index))
    }

    /// Takes the occupant of slot `index` out of its list and its slot and returns its task.
    pub(crate) fn remove(&mut self, index: u32) -> Box<dyn TimerTask> {
        self.unlink(index);
        if let Some(pending) = &self.pending {
            pending.fetch_sub(1, Ordering::Relaxed);
        }
        self.slots.vacate(index)
    }

    /// Moves the occupant named by `key`, if it is still there, out of its list and gives it
    /// `expiration_ms`: returns it, unlisted, for the caller to add to the wheel again.
    pub(crate) fn reschedule(&mut self, key: EntryKey, expiration_ms: i64) -> Option<Entry> {
        if !self.slots.is_live(key) {
            return None;
        }
        self.unlink(key.index);
        self.slots
            .get_mut(key.index)
            .set_expiration_ms(expiration_ms);
        Some(Entry {
            index: key.index,
            expiration_ms,
        })
    }

    /// Takes the occupant of slot `index` out of its list, if it is in one.
    fn unlink(&mut self, index: u32) {
        let slot = self.slots.get_mut(index);
        let loc = slot.loc();
        if loc == Loc::UNLISTED {
            return;
        }
        slot.set_loc(Loc::UNLISTED);
        if let Some((moved, at)) = self.rings.remove(loc) {
            self.slots.get_mut(moved).set_loc(at);
        }
    }

    /// Empties the shard and returns what it held, tasks included, for the caller to drop
    /// (or hand back) once it holds no lock.
    pub(crate) fn clear(&mut self) -> Released {
        if let Some(pending) = &self.pending {
            pending.fetch_sub(self.slots.len(), Ordering::Relaxed);
        }
        let mut released = self.take_released();
        released.holds_tasks = true;
        self.slots.chunks().clear(&mut released.slots);
        self.rings.clear(&mut released.blocks);
        released
    }

    /// Readies a pooled shard for a new timer: no counts, and `pending` to keep.
    pub(crate) fn reset(&mut self, pending: Option<Arc<AtomicUsize>>) {
        self.counts = Counts::default();
        self.pending = pending;
    }

    /// Returns the chunks emptied since the last call, to be unmapped with no lock held.
    fn take_released(&mut self) -> Released {
        let mut released = Released::default();
        self.slots.chunks().take_released(&mut released.slots);
        self.rings.blocks().take_released(&mut released.blocks);
        released
    }

    fn has_released(&mut self) -> bool {
        self.slots.chunks().has_released() || self.rings.blocks().has_released()
    }

    /// Returns the bytes of the chunks mapped for this shard.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.slots.mapped_bytes() + self.rings.mapped_bytes()
    }

    /// Registers one more handle of `key`'s entry: the first clone of a handle creates the
    /// record for both, with the original's state; later clones count themselves in.
    pub(crate) fn add_clone(&mut self, key: EntryKey, cancelled: bool, expiration_ms: i64) {
        self.clones
            .entry(key)
            .and_modify(|record| record.handles += 1)
            .or_insert(CloneRecord {
                handles: 2,
                cancelled,
                expiration_ms,
            });
    }

    /// Unregisters one handle of `key`'s entry.
    pub(crate) fn drop_clone(&mut self, key: EntryKey) {
        if let Some(record) = self.clones.get_mut(&key) {
            record.handles -= 1;
            if record.handles == 0 {
                self.clones.remove(&key);
            }
        }
    }

    /// Records that a cancel through one of `key`'s handles won.
    pub(crate) fn set_clone_cancelled(&mut self, key: EntryKey) {
        if let Some(record) = self.clones.get_mut(&key) {
            record.cancelled = true;
        }
    }

    /// True if a cancel through one of `key`'s handles won.
    pub(crate) fn clone_cancelled(&self, key: EntryKey) -> bool {
        self.clones.get(&key).is_some_and(|record| record.cancelled)
    }

    /// Records a new expiration for the handles of `key`'s entry, if they share a record.
    pub(crate) fn set_clone_expiration(&mut self, key: EntryKey, expiration_ms: i64) {
        if let Some(record) = self.clones.get_mut(&key) {
            record.expiration_ms = expiration_ms;
        }
    }

    /// Returns the expiration that the handles of `key`'s entry share, if they share one.
    pub(crate) fn clone_expiration(&self, key: EntryKey) -> Option<i64> {
        self.clones.get(&key).map(|record| record.expiration_ms)
    }
}

/// Memory taken out of a shard — emptied chunks, or everything a `clear` took, tasks
/// included — to be dropped with no lock held: dropping it drops the tasks (user code) on
/// the dropping thread, then unmaps the chunks.
#[derive(Default)]
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Released {
    slots: Vec<Region<Slot>>,
    blocks: Vec<Region<Block>>,
    /// False for chunks that a shard emptied and gave back: no task to look for.
    holds_tasks: bool,
}

impl Released {
    /// Adds `other`'s memory to this.
    pub(crate) fn absorb(&mut self, mut other: Released) {
        self.slots.append(&mut other.slots);
        self.blocks.append(&mut other.blocks);
        self.holds_tasks |= other.holds_tasks;
    }

    /// Returns the number of tasks in it.
    pub(crate) fn task_count(&self) -> usize {
        Slots::count_tasks(&self.slots)
    }

    /// Takes the tasks out.
    pub(crate) fn into_tasks(mut self) -> Vec<Box<dyn TimerTask>> {
        Slots::take_tasks(&mut self.slots)
    }
}

/// One shard of a timer's entries: its state behind its own lock, on cache lines of its
/// own. Pooled: see `store`.
#[repr(align(128))]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// Pending entries (published under `state`'s lock).
    len: AtomicUsize,
    /// `ShardState::counts`, published with `len`.
    counts: [AtomicU64; 4],
    /// Threads waiting for (or about to wait for) `state` on the timer's behalf: a writer,
    /// or a flush. While it is not zero, every unlock hands the lock straight to a waiter.
    urgent: AtomicUsize,
}

impl Shard {
    pub(crate) fn new() -> Shard {
        Shard {
            state: Mutex::new(ShardState::new()),
            len: AtomicUsize::new(0),
            counts: [const { AtomicU64::new(0) }; 4],
            urgent: AtomicUsize::new(0),
        }
    }

    /// Locks the shard.
    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        ShardGuard {
            state: Some(self.state.lock()),
            shard: self,
        }
    }

    /// Locks the shard if no one holds it.
    pub(crate) fn try_lock(&self) -> Option<ShardGuard<'_>> {
        Some(ShardGuard {
            state: Some(self.state.try_lock()?),
            shard: self,
        })
    }

    /// Locks the shard ahead of adds and cancels: until this thread has the lock, each of
    /// them hands it over fairly when it unlocks, instead of taking it straight back.
    ///
    /// parking_lot's mutex lets the thread that unlocks take the lock again at once, and
    /// is fair only after a waiter has waited 0.5 ms. A thread adding in a loop would then
    /// hold off the timer's driver for that long at every flush.
    pub(crate) fn lock_urgent(&self) -> ShardGuard<'_> {
        self.urgent.fetch_add(1, Ordering::SeqCst);
        let guard = self.lock();
        self.urgent.fetch_sub(1, Ordering::Relaxed);
        guard
    }

    /// Returns the number of pending entries, as of the last publication.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Returns the counts, as of the last publication.
    pub(crate) fn counts(&self) -> Counts {
        Counts::from_array(self.counts.each_ref().map(|c| c.load(Ordering::Relaxed)))
    }

    fn publish(&self, state: &ShardState) {
        self.len.store(state.len(), Ordering::Relaxed);
        for (published, value) in self.counts.iter().zip(state.counts.as_array()) {
            published.store(value, Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// A locked shard. When dropped it publishes the shard's length and counts, unlocks, and
/// then unmaps the chunks the shard emptied while it was locked.
pub(crate) struct ShardGuard<'a> {
    /// `Some` until dropped.
    state: Option<MutexGuard<'a, ShardState>>,
    shard: &'a Shard,
}

impl ShardGuard<'_> {
    /// Publishes the shard's length and counts now, rather than at the unlock: before tasks
    /// taken out under this lock are handed over, so that `size()` never counts a task that
    /// may run.
    pub(crate) fn publish_len(&self) {
        self.shard.publish(self);
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ShardState;
    fn deref(&self) -> &ShardState {
        self.state.as_deref().expect("ShardGuard used after drop")
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        self.state
            .as_deref_mut()
            .expect("ShardGuard used after drop")
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let Some(mut state) = self.state.take() else {
            return;
        };
        self.shard.publish(&state);
        let released = state.has_released().then(|| state.take_released());
        if self.shard.urgent.load(Ordering::SeqCst) != 0 {
            MutexGuard::unlock_fair(state);
        } else {
            drop(state);
        }
        debug_assert!(released.as_ref().is_none_or(|r| r.task_count() == 0));
        drop(released);
    }
}

impl Drop for Released {
    fn drop(&mut self) {
        // The tasks first (user code), each dropped once; the chunks unmap after them.
        if self.holds_tasks {
            drop(Slots::take_tasks(&mut self.slots));
        }
    }
}
