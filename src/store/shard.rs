//! One shard of a timer's entries: its slots and its part of every list, behind one mutex,
//! with its counts kept in atomics for readers that take no lock.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - A [`ShardState`] — slots, list chains, held entries, clone records, counts — is
//!   guarded by its shard's mutex. An entry lives and moves within one shard.
//! - [`Shard::counts`] are atomics written under the mutex, through the guard, when what
//!   they count happens, and read without it; the pending entries are derived from them.
//! - The timer's own work (a writer, a flush chunk) locks with [`Shard::lock_urgent`]: while
//!   such a thread waits, every unlock hands the lock straight to a waiter.
//! - Nothing here runs user code under the lock. Tasks are moved out under it and dropped,
//!   run or handed over by the caller; memory the shard gives back (emptied chunks) is
//!   unmapped by the guard after it unlocks (see `released`).
//!
//! # What cloned handles share
//!
//! What the clones of a handle share with their original: whether a cancel through any of
//! them won, and the entry's latest expiration.
//!
//! # Ground rules
//!
//! - Part of a shard's state, guarded by the shard's lock (see `crate::lock_order`).
//! - A handle that was never cloned keeps its own flag and expiration (see `handle`); the
//!   first clone of a handle creates the record for both, with the original's state, and
//!   the last of them to be dropped removes it. So an entry that is never cloned costs
//!   nothing here, unless its expiration is beyond what a handle holds itself (more than
//!   278 years from the clock's zero, other than the saturated ends): its one handle then
//!   keeps a record too.
//!
//! # The striped reader-writer lock
//!
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
//!
//! # The pool of shards
//!
//! The shards of all timers, pooled for the life of the process.
//!
//! # Ground rules
//!
//! - A shard is a few hundred bytes; its entries' memory is mapped and unmapped as they come
//!   and go (see `chunks`). Shards themselves are never freed: a timer takes them from
//!   [`POOL`] and gives them back, emptied, when it is dropped. So a handle can keep a
//!   `&'static` reference to its shard, and `add` touches no reference count.
//! - The generations a shard handed out stay with it (see `slots`), so a handle of an old
//!   timer can never cancel a task of the next timer to use the shard.
//! - [`POOL`]'s mutex is a leaf (see `crate::lock_order`): a timer's shards are taken and
//!   given back one lock at a time, with no other lock held.
//! - Every shard has a number, its place in [`BY_ID`], written once (under [`POOL`]'s lock)
//!   before the shard is first handed out: a handle keeps that number, 20 bits, instead of
//!   an 8-byte reference (see `handle`).
//!
//! # Memory given back after the lock
//!
//! Memory taken out of a shard under its lock, given back after it.
//!
//! # Ground rules
//!
//! - A shard's lock is held while its chunks empty and while `close` clears it, but no
//!   chunk is unmapped and no task dropped under it (see `crate::lock_order`): what was
//!   taken out waits in a [`Released`] until its owner drops it with no lock held.
//! - Dropping a `Released` drops its tasks first (user code, each once), then unmaps the
//!   chunks.

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use super::chunks::Loc;
use super::chunks::{EntryKey, Region, Slot, Slots, prefetch};
use super::held::HeldQueue;
use crate::task::{Expired, TimerTask};
use crate::timer_task_list::{Block, Chains};

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
    /// Dropped or handed back by `close` and `stop`.
    pub(crate) cleared: u64,
}

impl Counts {
    /// The sum of two counts.
    pub(crate) fn plus(self, other: Counts) -> Counts {
        Counts {
            added: self.added + other.added,
            expired: self.expired + other.expired,
            cancelled: self.cancelled + other.cancelled,
            refused: self.refused + other.refused,
            cleared: self.cleared + other.cleared,
        }
    }

    /// The entries added and still there: neither expired, cancelled nor cleared.
    pub(crate) fn pending(self) -> u64 {
        self.added
            .saturating_sub(self.expired + self.cancelled + self.cleared)
    }
}

/// One of the [`Counts`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Added,
    Expired,
    Cancelled,
    Refused,
    Cleared,
}

/// Everything of one shard that its mutex guards.
pub(crate) struct ShardState {
    slots: Slots,
    chains: Chains,
    /// The entries of a flush chunk between taking them out and re-adding them (kept to
    /// reuse its buffer).
    flushed: Vec<Entry>,
    /// What the cloned handles of its entries share.
    pub(crate) clones: Clones,
    /// The pending entries of the whole timer, kept exactly when it has a `max_pending`
    /// bound: every entry that leaves this shard takes itself off.
    pending: Option<Arc<AtomicUsize>>,
    /// This shard's backlog: its due entries while the executor is at `max_in_flight`.
    held: HeldQueue,
    /// The held entries of the whole timer, kept when it has a `max_in_flight` bound: every
    /// entry that enters or leaves the backlog counts itself, with `SeqCst` (see
    /// `threads::executor`, "The bound on tasks in flight").
    held_total: Option<Arc<AtomicUsize>>,
}

impl ShardState {
    fn new() -> ShardState {
        ShardState {
            slots: Slots::new(),
            chains: Chains::new(),
            flushed: Vec::new(),
            clones: Clones::default(),
            pending: None,
            held: HeldQueue::new(),
            held_total: None,
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

    /// Stores a new entry in list `id` and returns its key; gives the task back if the
    /// shard is full.
    #[inline]
    pub(crate) fn insert(
        &mut self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
        id: u32,
    ) -> Result<EntryKey, Box<dyn TimerTask>> {
        let chains = &mut self.chains;
        self.slots
            .insert(task, expiration_ms, |index| chains.push(id, index))
    }

    /// Stores a new entry in no list (a timer that orders its entries itself) and returns
    /// its key; gives the task back if the shard is full.
    pub(crate) fn insert_unlisted(
        &mut self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
    ) -> Result<EntryKey, Box<dyn TimerTask>> {
        self.slots.insert(task, expiration_ms, |_| Loc::UNLISTED)
    }

    /// True if `key` names a pending entry.
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.slots.is_live(key)
    }

    /// The expiration of the pending entry named by `key`.
    pub(crate) fn expiration(&self, key: EntryKey) -> Option<i64> {
        self.is_live(key)
            .then(|| self.slots.get(key.index).expiration_ms())
    }

    /// Appends the unlisted entry in slot `index` to list `id`.
    #[inline]
    pub(crate) fn link(&mut self, id: u32, index: u32) {
        let loc = self.chains.push(id, index);
        let slot = self.slots.get_mut(index);
        debug_assert_eq!(slot.loc(), Loc::UNLISTED);
        slot.set_loc(loc);
    }

    /// Returns the number of entries of list `id` in this shard.
    #[cfg(test)]
    pub(crate) fn list_len(&self, id: u32) -> usize {
        self.chains.entries(id).len()
    }

    /// Detaches list `id`'s entries in this shard for a flush (see `Chains::detach`).
    pub(crate) fn detach(&mut self, id: u32) {
        self.chains.detach(id);
    }

    /// Takes up to `max` detached entries of list `id` out of the list (see
    /// `Chains::detach`), oldest first, and appends them to `out`, unlisted, with their
    /// expirations: a chunk of the list's flush.
    ///
    /// The entries' slots are read in a loop of their own, after the indices: each read is
    /// likely a cache miss, and with nothing else in the loop the processor overlaps them.
    fn take_detached(&mut self, id: u32, max: usize, out: &mut Vec<Entry>) {
        let first = out.len();
        while out.len() - first < max {
            let Some(index) = self.chains.pop_detached(id) else {
                break;
            };
            out.push(Entry {
                index,
                expiration_ms: 0,
            });
        }
        let taken = &mut out[first..];
        for entry in taken.iter() {
            prefetch(self.slots.get(entry.index));
        }
        for entry in taken {
            let slot = self.slots.get_mut(entry.index);
            entry.expiration_ms = slot.expiration_ms();
            slot.set_loc(Loc::UNLISTED);
        }
    }

    /// Takes up to `max` detached entries of list `id` out of the list, oldest first, and
    /// hands each to `f` with the shard, to be re-added or expired (Kafka's
    /// `flush(addTimerTaskEntry)`, a chunk at a time); returns how many.
    pub(crate) fn flush(
        &mut self,
        id: u32,
        max: usize,
        mut f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        let mut entries = std::mem::take(&mut self.flushed);
        self.take_detached(id, max, &mut entries);
        let count = entries.len();
        for entry in entries.drain(..) {
            f(self, entry);
        }
        self.flushed = entries;
        count
    }

    /// Takes the occupant named by `key` out of its list and its slot, if it is still
    /// there, and returns its task.
    #[inline]
    pub(crate) fn take(&mut self, key: EntryKey) -> Option<Box<dyn TimerTask>> {
        let (task, loc) = self.slots.take(key)?;
        Some(self.left(task, loc))
    }

    /// Takes the occupant of slot `index` out of its list and its slot and returns its task.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> Box<dyn TimerTask> {
        let (task, loc) = self.slots.vacate(index);
        self.left(task, loc)
    }

    /// Takes an entry that left its slot out of its list (at `loc`) and the pending count,
    /// and returns its task.
    // Always: left to itself, LLVM stopped inlining this (and `Chunks::give_back`) into
    // `cancel` after unrelated changes elsewhere, at a cost of 31 instructions per cancel
    // ("The 16-byte handle" in docs/performance.md).
    #[inline(always)]
    fn left(&mut self, task: Box<dyn TimerTask>, loc: Loc) -> Box<dyn TimerTask> {
        self.unlist(loc);
        if let Some(pending) = &self.pending {
            pending.fetch_sub(1, Ordering::Relaxed);
        }
        task
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
    #[inline]
    fn unlink(&mut self, index: u32) {
        let slot = self.slots.get_mut(index);
        let loc = slot.loc();
        slot.set_loc(Loc::UNLISTED);
        self.unlist(loc);
    }

    /// Takes the entry listed at `loc` out of its list or the backlog (nothing for
    /// `Loc::UNLISTED`); the entries that move record their new places.
    #[inline]
    fn unlist(&mut self, loc: Loc) {
        if loc == Loc::UNLISTED {
            return;
        }
        if let Some(at) = loc.held_at() {
            self.unhold(at);
            return;
        }
        if let Some((moved, at)) = self.chains.remove(loc) {
            self.slots.get_mut(moved).set_loc(at);
        }
    }

    /// Takes the entry at place `at` of the backlog out of it, and returns its slot. Apart,
    /// so that a cancel on a timer that holds nothing does not carry it.
    #[cold]
    fn unhold(&mut self, at: usize) -> u32 {
        self.count_held_out(1);
        self.held.remove(&mut self.slots, at)
    }

    /// Puts the unlisted entry in slot `index`, which is due, into the backlog: it stays
    /// pending, and cancellable, until [`take_held`](Self::take_held) takes it out.
    pub(crate) fn hold(&mut self, index: u32) {
        debug_assert_eq!(self.slots.get(index).loc(), Loc::UNLISTED);
        self.held.push(&mut self.slots, index);
        if let Some(total) = &self.held_total {
            total.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts `count` entries out of the backlog.
    fn count_held_out(&mut self, count: usize) {
        if let Some(total) = &self.held_total {
            total.fetch_sub(count, Ordering::SeqCst);
        }
    }

    /// Returns the expiration of the oldest entry of the backlog: the one
    /// [`take_held`](Self::take_held) takes next.
    pub(crate) fn oldest_held_ms(&self) -> Option<i64> {
        self.held.oldest_ms()
    }

    /// Takes entries out of the backlog, oldest expiration first (then the order they came
    /// due), and appends their tasks to `out`: at most `max`, and after the first only while
    /// they expire no later than `until_ms`. Returns how many (the caller counts them
    /// expired).
    pub(crate) fn take_held(&mut self, max: usize, until_ms: i64, out: &mut Vec<Expired>) -> usize {
        let mut taken = 0;
        while taken < max {
            let Some(expiration_ms) = self.oldest_held_ms() else {
                break;
            };
            if taken > 0 && expiration_ms > until_ms {
                break;
            }
            let index = self.unhold(0);
            // Out of the backlog already: its slot's place is stale.
            let (task, _) = self.slots.vacate(index);
            if let Some(pending) = &self.pending {
                pending.fetch_sub(1, Ordering::Relaxed);
            }
            out.push(Expired {
                task,
                expiration_ms,
            });
            taken += 1;
        }
        taken
    }

    /// Returns the earliest expiration among the entries of list `id` in this shard, by
    /// reading each of them.
    pub(crate) fn min_expiration(&self, id: u32) -> Option<i64> {
        let mut min = None;
        self.chains.for_each_entry(id, |index| {
            let expiration_ms = self.slots.get(index).expiration_ms();
            min = Some(min.map_or(expiration_ms, |min: i64| min.min(expiration_ms)));
        });
        min
    }

    /// Empties the shard and returns what it held, tasks included, for the caller to drop
    /// (or hand back) once it holds no lock.
    fn clear(&mut self) -> Released {
        if let Some(pending) = &self.pending {
            pending.fetch_sub(self.slots.len(), Ordering::Relaxed);
        }
        self.count_held_out(self.held.len());
        self.held.clear();
        let mut released = self.take_released();
        released.holds_tasks = true;
        self.slots.chunks().clear(&mut released.slots);
        self.chains.clear(&mut released.blocks);
        released
    }

    /// Readies a pooled shard for a new timer: `pending` and `held_total` to keep (see
    /// their fields; the guard resets the counts, see `ShardGuard::reset`).
    fn reset(&mut self, pending: Option<Arc<AtomicUsize>>, held_total: Option<Arc<AtomicUsize>>) {
        debug_assert_eq!(self.held.len(), 0);
        self.pending = pending;
        self.held_total = held_total;
    }

    /// Returns the chunks emptied since the last call, to be unmapped with no lock held.
    fn take_released(&mut self) -> Released {
        let mut released = Released::default();
        self.slots.chunks().take_released(&mut released.slots);
        self.chains.blocks().take_released(&mut released.blocks);
        released
    }

    fn has_released(&mut self) -> bool {
        self.slots.chunks().has_released() || self.chains.blocks().has_released()
    }

    /// Returns the bytes of the chunks mapped for this shard.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.slots.mapped_bytes() + self.chains.mapped_bytes()
    }
}

/// One shard of a timer's entries: its state behind its own lock, on cache lines of its
/// own. Pooled: see `pool`.
#[repr(align(128))]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// The [`Counts`], by [`Count`]: written under `state`'s lock (a load and a store, not a
    /// locked read-modify-write), read without it.
    counts: [AtomicU64; 5],
    /// `ShardState::oldest_held_ms`, published at each unlock (`i64::MAX`: none held).
    oldest_held_ms: AtomicI64,
    /// The set of shards this one is in (its number, 0 while pooled) and its place there,
    /// packed (`id << 8 | stripe`; see `pool::Shards`). Written when a set takes or gives
    /// back the shard, before any handle of that set can read it.
    home: AtomicU64,
    /// Threads waiting for (or about to wait for) `state` on the timer's behalf: a writer,
    /// or a flush. While it is not zero, every unlock hands the lock straight to a waiter.
    urgent: AtomicUsize,
    /// The shard's number in the pool, never 0 (see `pool`).
    id: u32,
}

impl Shard {
    /// A shard numbered `id`; only the pool makes them.
    pub(crate) fn new(id: u32) -> Shard {
        Shard {
            id,
            state: Mutex::new(ShardState::new()),
            counts: [const { AtomicU64::new(0) }; 5],
            oldest_held_ms: AtomicI64::new(i64::MAX),
            home: AtomicU64::new(0),
            urgent: AtomicUsize::new(0),
        }
    }

    /// Locks the shard.
    #[inline]
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

    /// Returns the counts, without locking: while other threads hold the lock they may lag
    /// by a moment (`expired`, `cancelled` and `cleared` are read before `added`, so an entry
    /// that left is never counted as pending).
    pub(crate) fn counts(&self) -> Counts {
        let read = |count: Count| self.counts[count as usize].load(Ordering::Acquire);
        let (expired, cancelled, cleared, refused) = (
            read(Count::Expired),
            read(Count::Cancelled),
            read(Count::Cleared),
            read(Count::Refused),
        );
        Counts {
            added: read(Count::Added),
            expired,
            cancelled,
            refused,
            cleared,
        }
    }
}

impl Shard {
    /// Returns the shard's number in the pool (see `pool::shard_by_id`).
    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Records that the shard is at place `stripe` (below 256) of the set numbered `id`.
    pub(crate) fn set_home(&self, id: u64, stripe: usize) {
        debug_assert!(stripe < 256);
        self.home.store(id << 8 | stripe as u64, Ordering::Release);
    }

    /// Returns the number of the set the shard is in and its place there.
    #[inline]
    pub(crate) fn home(&self) -> (u64, usize) {
        let home = self.home.load(Ordering::Acquire);
        (home >> 8, (home & 0xFF) as usize)
    }

    /// Returns the expiration of the oldest entry of the backlog, as of the last
    /// publication (`i64::MAX`: none).
    pub(crate) fn oldest_held_ms(&self) -> i64 {
        self.oldest_held_ms.load(Ordering::Relaxed)
    }

    /// Publishes the expiration of the oldest held entry (at the unlock: a refill looks for
    /// held entries in the shards that published some first). Only a timer with
    /// `max_in_flight` holds entries: for any other, one load and nothing to do.
    fn publish_oldest_held(&self, state: &ShardState) {
        if state.held_total.is_some() {
            let oldest_held_ms = state.oldest_held_ms().unwrap_or(i64::MAX);
            self.oldest_held_ms.store(oldest_held_ms, Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("pending", &self.counts().pending())
            .finish_non_exhaustive()
    }
}

/// A locked shard. When dropped it unlocks, and then unmaps the chunks the shard emptied
/// while it was locked.
pub(crate) struct ShardGuard<'a> {
    /// `Some` until dropped.
    state: Option<MutexGuard<'a, ShardState>>,
    shard: &'a Shard,
}

impl ShardGuard<'_> {
    /// Counts `n` more of `count`, at once: before tasks taken out under this lock are
    /// handed over, so that `size()` never counts a task that may run.
    #[inline]
    pub(crate) fn count(&self, count: Count, n: u64) {
        let counter = &self.shard.counts[count as usize];
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Release);
    }

    /// Empties the shard, counting what it held as cleared, and returns it, tasks included,
    /// for the caller to drop (or hand back) once it holds no lock.
    pub(crate) fn clear(&mut self) -> Released {
        let held = self.len() as u64;
        self.count(Count::Cleared, held);
        ShardState::clear(self)
    }

    /// Readies a pooled shard for a new timer: no counts, and `pending` and `held_total` to
    /// keep.
    pub(crate) fn reset(
        &mut self,
        pending: Option<Arc<AtomicUsize>>,
        held_total: Option<Arc<AtomicUsize>>,
    ) {
        for counter in &self.shard.counts {
            counter.store(0, Ordering::Relaxed);
        }
        ShardState::reset(self, pending, held_total);
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ShardState;
    #[inline]
    fn deref(&self) -> &ShardState {
        self.state.as_deref().expect("ShardGuard used after drop")
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    #[inline]
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
        self.shard.publish_oldest_held(&state);
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

/// The record the handles of one entry share.
#[derive(Debug)]
struct Record {
    handles: usize,
    cancelled: bool,
    expiration_ms: i64,
}

/// The records of a shard's cloned handles, keyed by their entry.
#[derive(Debug, Default)]
pub(crate) struct Clones(HashMap<EntryKey, Record>);

impl Clones {
    /// Registers one more handle of `key`'s entry: the first clone of a handle creates the
    /// record for both, with the original's state; later clones count themselves in.
    pub(crate) fn add(&mut self, key: EntryKey, cancelled: bool, expiration_ms: i64) {
        self.0
            .entry(key)
            .and_modify(|record| record.handles += 1)
            .or_insert(Record {
                handles: 2,
                cancelled,
                expiration_ms,
            });
    }

    /// Registers a handle of `key`'s entry that was never cloned but needs a record: its
    /// expiration is beyond what the handle holds itself (see `handle`). Another handle
    /// made from the entry's place (a keyed timer's) may have opened one already: this one
    /// counts itself in.
    pub(crate) fn open(&mut self, key: EntryKey, cancelled: bool, expiration_ms: i64) {
        self.0
            .entry(key)
            .and_modify(|record| {
                record.handles += 1;
                record.expiration_ms = expiration_ms;
                record.cancelled |= cancelled;
            })
            .or_insert(Record {
                handles: 1,
                cancelled,
                expiration_ms,
            });
    }

    /// Unregisters one handle of `key`'s entry.
    pub(crate) fn remove(&mut self, key: EntryKey) {
        if let Some(record) = self.0.get_mut(&key) {
            record.handles -= 1;
            if record.handles == 0 {
                self.0.remove(&key);
            }
        }
    }

    /// Records that a cancel through one of `key`'s handles won.
    pub(crate) fn set_cancelled(&mut self, key: EntryKey) {
        if let Some(record) = self.0.get_mut(&key) {
            record.cancelled = true;
        }
    }

    /// True if a cancel through one of `key`'s handles won.
    pub(crate) fn cancelled(&self, key: EntryKey) -> bool {
        self.0.get(&key).is_some_and(|record| record.cancelled)
    }

    /// Records a new expiration for the handles of `key`'s entry, if they share a record.
    pub(crate) fn set_expiration(&mut self, key: EntryKey, expiration_ms: i64) {
        if let Some(record) = self.0.get_mut(&key) {
            record.expiration_ms = expiration_ms;
        }
    }

    /// Returns the number of records.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Returns the expiration that the handles of `key`'s entry share, if they share one.
    pub(crate) fn expiration(&self, key: EntryKey) -> Option<i64> {
        self.0.get(&key).map(|record| record.expiration_ms)
    }
}

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

    /// Returns the stripe's shard, for the handles of its entries.
    #[inline]
    pub(crate) fn home(&self) -> &'static Shard {
        self.shard
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

/// Shards not in use by any timer.
static POOL: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

/// Bits of a shard's number.
pub(crate) const SHARD_ID_BITS: u32 = 20;

/// Every shard made, by number (number 0 is none), in leaves of `1 << LEAF_BITS` numbers
/// made as shards are: a flat table would put 16 MiB into every binary's data.
static BY_ID: [OnceLock<Box<Leaf>>; 1 << (SHARD_ID_BITS - LEAF_BITS)] =
    [const { OnceLock::new() }; 1 << (SHARD_ID_BITS - LEAF_BITS)];

/// Bits of a shard's number that pick its place in a leaf of [`BY_ID`].
const LEAF_BITS: u32 = 10;
const LEAF_MASK: usize = (1 << LEAF_BITS) - 1;

/// One leaf of [`BY_ID`].
type Leaf = [OnceLock<&'static Shard>; 1 << LEAF_BITS];

/// Makes a shard for the life of the process and numbers it. The caller holds [`POOL`]'s
/// lock, which keeps the numbers apart.
fn make_shard(pool: &[&'static Shard]) -> &'static Shard {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let id = MADE.load(Ordering::Relaxed) + 1;
    assert!(
        id < 1 << SHARD_ID_BITS,
        "more than {} timer shards at once ({} pooled): too many live timers",
        (1 << SHARD_ID_BITS) - 1,
        pool.len()
    );
    MADE.store(id, Ordering::Relaxed);
    let leaf = BY_ID[id >> LEAF_BITS]
        .get_or_init(|| Box::new([const { OnceLock::new() }; 1 << LEAF_BITS]));
    leaf[id & LEAF_MASK].get_or_init(|| Box::leak(Box::new(Shard::new(id as u32))))
}

/// Returns the shard numbered `id` (see [`Shard::id`]), if there is one.
#[inline]
pub(crate) fn shard_by_id(id: u32) -> Option<&'static Shard> {
    let id = id as usize;
    BY_ID.get(id >> LEAF_BITS)?.get()?[id & LEAF_MASK]
        .get()
        .copied()
}

/// The shards of one timer, taken from the pool; emptied and given back when dropped.
pub(crate) struct Shards {
    shards: Box<[&'static Shard]>,
    /// This set's number, unique in the process: each of its shards records it with its
    /// place in the set (see `Shard::home`).
    id: u64,
}

impl Shards {
    /// Takes `count` shards from the pool (making new ones if it runs out). With `pending`,
    /// the shards keep the timer's exact count of pending entries there; with `held`, of
    /// held ones (see `ShardState::reset`).
    pub(crate) fn take(
        count: usize,
        pending: Option<Arc<AtomicUsize>>,
        held: Option<Arc<AtomicUsize>>,
    ) -> Shards {
        let mut pool = POOL.lock();
        let shards: Box<[&'static Shard]> = (0..count)
            .map(|_| pool.pop().unwrap_or_else(|| make_shard(&pool)))
            .collect();
        drop(pool);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        for (stripe, shard) in shards.iter().enumerate() {
            shard.set_home(id, stripe);
        }
        for shard in &shards {
            shard.lock().reset(pending.clone(), held.clone());
        }
        Shards { shards, id }
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
}

impl Shards {
    /// Returns the place of `shard` in this set, if it is one of its shards: O(1), from
    /// what the shard recorded when the set took it.
    #[inline]
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        let (id, stripe) = shard.home();
        (id == self.id).then_some(stripe)
    }
}

impl Deref for Shards {
    type Target = [&'static Shard];
    fn deref(&self) -> &[&'static Shard] {
        &self.shards
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        let mut cleared = Released::default();
        for shard in self.shards.iter() {
            shard.set_home(0, 0);
            let mut state = shard.lock();
            cleared.absorb(state.clear());
            state.reset(None, None);
        }
        // Whatever was still waiting is dropped here, with no lock held.
        drop(cleared);
        POOL.lock().extend(self.shards.iter().copied());
    }
}

impl fmt::Debug for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shards")
            .field("count", &self.shards.len())
            .field("pending", &self.counts().pending())
            .finish()
    }
}

/// Memory taken out of a shard — emptied chunks, or everything a `clear` took, tasks
/// included — to be dropped with no lock held.
#[derive(Default)]
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Released {
    pub(super) slots: Vec<Region<Slot>>,
    pub(super) blocks: Vec<Region<Block>>,
    /// False for chunks that a shard emptied and gave back: no task to look for.
    pub(super) holds_tasks: bool,
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

impl Drop for Released {
    fn drop(&mut self) {
        if self.holds_tasks {
            drop(Slots::take_tasks(&mut self.slots));
        }
    }
}

#[cfg(test)]
mod lock_tests {
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
