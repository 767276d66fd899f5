//! The shards of a timer's entries, each its slots and its part of every list behind one
//! mutex, and the striped reader-writer lock whose stripes those mutexes are.
//!
//! Kafka's `SystemTimer` takes the read lock of its wheel to add (many threads at once) and
//! the write lock to move the wheel's clocks. Here the read side is striped: a reader takes
//! the mutex of one shard, which both holds the wheel's clocks still and guards the shard it
//! then writes; a writer takes every shard's mutex, in index order. So `add` takes one
//! lock, and a writer still excludes every reader.
//!
//! Shards are pooled for the life of the process: a timer takes them from [`POOL`] and gives
//! them back, emptied, when it is dropped. So a handle keeps its shard's number, its place
//! in [`BY_ID`] (20 bits, not an 8-byte reference), touches no reference count, and stays
//! valid after its timer is gone; the generations a shard handed out stay with it, so a
//! handle of an old timer never reaches a task of the next timer to use the shard.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - A [`ShardState`] (slots, list chains, held entries, clone records) is guarded by its
//!   shard's mutex; an entry lives and moves within one shard. The lock's value is reached
//!   only through a guard, as `&T`: one `&mut` cannot be made out of many stripe guards, so
//!   what changes under the write lock is kept in atomics, written through a
//!   [`WriteGuard`].
//! - A shard's counts are atomics written under its mutex and read without it.
//! - The timer's own work (a writer, a flush chunk) locks with [`Shard::lock_urgent`]: while
//!   such a thread waits, every unlock hands the lock straight to a waiter.
//! - No task is dropped and no chunk unmapped under a shard's lock: what leaves waits in a
//!   [`Released`] until its owner drops it with no lock held.
//! - No one waits for a second stripe while holding one ([`StripedRwLock::try_read`] only
//!   tries), and [`POOL`]'s mutex is a leaf.
//! - A handle that was never cloned keeps its own flag and expiration; the first clone (or
//!   an expiration beyond what a handle holds) opens a record in [`Clones`] for all of the
//!   entry's handles, and the last of them to be dropped removes it.

use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};

use super::chunks::{EntryKey, Loc, Region, Slot, Slots, prefetch, take_tasks};
use super::held::HeldQueue;
use crate::metrics::TimerStats;
use crate::task::{Expired, TimerTask};
use crate::timer_task_list::{Block, Chains};

/// An entry as the wheel sees it: its slot, and when it expires (Kafka's `TimerTaskEntry`
/// without the task).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) index: u32,
    pub(crate) expiration_ms: i64,
}

/// One of a shard's counts of what happened to its entries (`SystemTimer::stats`), in the
/// order [`Shards::counts`] reads them: `Added` last.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Expired,
    Cancelled,
    Refused,
    /// Dropped or handed back by `close` and `stop`.
    Cleared,
    Added,
    /// Moved on by a flush to another list rather than expired: see `SystemTimer::cascades`.
    Cascaded,
}

/// A count that all the shards of a timer keep together, if the timer has one.
pub(crate) type SharedCount = Option<Arc<AtomicUsize>>;

/// Everything of one shard that its mutex guards.
#[derive(Default)]
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
    pending: SharedCount,
    /// This shard's backlog: its due entries while the executor is at `max_in_flight`.
    held: HeldQueue,
    /// The held entries of the whole timer, kept when it has a `max_in_flight` bound: every
    /// entry that enters or leaves the backlog counts itself, with `SeqCst` (see
    /// `executor`, "The bound on tasks in flight").
    held_total: SharedCount,
}

impl ShardState {
    /// Returns the number of pending entries.
    pub(crate) fn len(&self) -> usize {
        self.slots.live()
    }

    /// True if the shard cannot take another entry.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.is_full()
    }

    /// True if `key` names a pending entry.
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.slots.is_live(key)
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

    /// The expiration of the pending entry named by `key`.
    pub(crate) fn expiration(&self, key: EntryKey) -> Option<i64> {
        self.is_live(key)
            .then(|| self.slots.get(key.index).expiration_ms)
    }

    /// Appends the unlisted entry in slot `index` to list `id`.
    #[inline]
    pub(crate) fn link(&mut self, id: u32, index: u32) {
        let loc = self.chains.push(id, index);
        let slot = self.slots.get_mut(index);
        debug_assert_eq!(slot.loc, Loc::UNLISTED);
        slot.loc = loc;
    }

    /// Detaches list `id`'s entries in this shard for a flush (see `Chains::detach`).
    pub(crate) fn detach(&mut self, id: u32) {
        self.chains.detach(id);
    }

    /// Takes up to `max` detached entries of list `id` out of the list, oldest first, and
    /// hands each, unlisted, to `f` with the shard, to be re-added or expired (Kafka's
    /// `flush(addTimerTaskEntry)`, a chunk at a time); returns how many.
    ///
    /// The slots are read in a loop of their own, after the indices: each read is likely a
    /// cache miss, and with nothing else in the loop the processor overlaps them.
    pub(crate) fn flush(
        &mut self,
        id: u32,
        max: usize,
        mut f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        let mut entries = std::mem::take(&mut self.flushed);
        let chains = &mut self.chains;
        let detached = std::iter::from_fn(|| chains.pop_detached(id)).take(max);
        entries.extend(detached.map(|index| Entry {
            index,
            expiration_ms: 0,
        }));
        for entry in &entries {
            prefetch(self.slots.get(entry.index));
        }
        for entry in &mut entries {
            let slot = self.slots.get_mut(entry.index);
            entry.expiration_ms = slot.expiration_ms;
            slot.loc = Loc::UNLISTED;
        }
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
    // `cancel` after unrelated changes elsewhere (the `instructions` workload showed it).
    #[inline(always)]
    fn left(&mut self, task: Box<dyn TimerTask>, loc: Loc) -> Box<dyn TimerTask> {
        self.unlist(loc);
        if let Some(pending) = &self.pending {
            pending.fetch_sub(1, Ordering::Relaxed);
        }
        task
    }

    /// Gives the occupant named by `key`, if it is still there (`None` otherwise),
    /// `expiration_ms`. If it `may_stay`, sits in a wheel's list and its deadline only moves
    /// later, it stays there (`Some(None)`): its list comes due no later than before, and
    /// the flush re-places it by its own expiration. Otherwise it leaves its list or the
    /// backlog and comes back, unlisted, for the caller to add to the wheel again.
    #[inline]
    pub(crate) fn reschedule(
        &mut self,
        key: EntryKey,
        expiration_ms: i64,
        may_stay: bool,
    ) -> Option<Option<Entry>> {
        if !self.slots.is_live(key) {
            return None;
        }
        let slot = self.slots.get_mut(key.index);
        let listed = slot.loc != Loc::UNLISTED && slot.loc.held_at().is_none();
        let stays = may_stay && listed && expiration_ms >= slot.expiration_ms;
        slot.expiration_ms = expiration_ms;
        if stays {
            return Some(None);
        }
        let loc = std::mem::replace(&mut slot.loc, Loc::UNLISTED);
        self.unlist(loc);
        Some(Some(Entry {
            index: key.index,
            expiration_ms,
        }))
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
        } else if let Some((moved, at)) = self.chains.remove(loc) {
            self.slots.get_mut(moved).loc = at;
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
        debug_assert_eq!(self.slots.get(index).loc, Loc::UNLISTED);
        self.held.push(&mut self.slots, index);
        if let Some(total) = &self.held_total {
            total.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts `count` entries out of the backlog.
    fn count_held_out(&self, count: usize) {
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
        while let Some(expiration_ms) = self.oldest_held_ms() {
            if taken == max || (taken > 0 && expiration_ms > until_ms) {
                break;
            }
            let index = self.unhold(0);
            // Out of the backlog already: its slot's place is stale.
            self.slots.get_mut(index).loc = Loc::UNLISTED;
            out.push(Expired {
                task: self.remove(index),
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
            min = Some(
                min.unwrap_or(i64::MAX)
                    .min(self.slots.get(index).expiration_ms),
            );
        });
        min
    }

    /// Returns the chunks emptied since the last call, to be unmapped with no lock held.
    #[cold]
    fn take_released(&mut self) -> Released {
        let mut released = Released::default();
        released.slots.append(&mut self.slots.released);
        released.blocks.append(&mut self.chains.blocks.released);
        released
    }
}

/// One shard of a timer's entries: its state behind its own lock, on cache lines of its
/// own.
#[repr(align(128))]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// By [`Count`]: written under `state`'s lock (a load and a store, not a locked
    /// read-modify-write), read without it.
    counts: [AtomicU64; 6],
    /// `ShardState::oldest_held_ms`, published at each unlock (`i64::MAX`: none held).
    oldest_held_ms: AtomicI64,
    /// The set of shards this one is in (its number, 0 while pooled) and its place there,
    /// packed (`id << 8 | stripe`). Written when a set takes or gives back the shard,
    /// before any handle of that set can read it.
    home: AtomicU64,
    /// Threads waiting for (or about to wait for) `state` on the timer's behalf: a writer,
    /// or a flush. While it is not zero, every unlock hands the lock straight to a waiter.
    urgent: AtomicUsize,
    /// The shard's number in [`BY_ID`] (see [`shard_by_id`]), never 0.
    pub(crate) id: u32,
}

impl Shard {
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

    /// Records that the shard is at place `stripe` (below 256) of the set numbered `id`.
    fn set_home(&self, id: u64, stripe: usize) {
        debug_assert!(stripe < 256);
        self.home.store(id << 8 | stripe as u64, Ordering::Release);
    }

    /// Returns the expiration of the oldest entry of the backlog, as of the last
    /// publication (`i64::MAX`: none).
    pub(crate) fn oldest_held_ms(&self) -> i64 {
        self.oldest_held_ms.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard").finish_non_exhaustive()
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
        let tasks = self.len();
        self.count(Count::Cleared, tasks as u64);
        if let Some(pending) = &self.pending {
            pending.fetch_sub(tasks, Ordering::Relaxed);
        }
        self.count_held_out(self.held.len());
        self.held = HeldQueue::default();
        let mut released = Released::default();
        released.tasks = tasks;
        self.slots.clear(&mut released.slots);
        self.chains.clear(&mut released.blocks);
        released
    }

    /// Readies a pooled shard for a new timer: no counts, and the timer's `pending` and
    /// `held_total` (see their fields) to keep.
    fn reset(&mut self, pending: SharedCount, held_total: SharedCount) {
        debug_assert_eq!(self.held.len(), 0);
        for counter in &self.shard.counts {
            counter.store(0, Ordering::Relaxed);
        }
        self.pending = pending;
        self.held_total = held_total;
    }
}

impl Deref for ShardGuard<'_> {
    type Target = ShardState;
    #[inline]
    fn deref(&self) -> &ShardState {
        self.state.as_deref().expect("guard used after drop")
    }
}

impl DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut ShardState {
        self.state.as_deref_mut().expect("guard used after drop")
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.state.take().expect("a guard is dropped once");
        // Published for a refill, which looks for held entries in the shards that published
        // some first. Only a timer with `max_in_flight` holds entries.
        if state.held_total.is_some() {
            let oldest = state.oldest_held_ms().unwrap_or(i64::MAX);
            self.shard.oldest_held_ms.store(oldest, Ordering::Relaxed);
        }
        let emptied = !state.slots.released.is_empty() || !state.chains.blocks.released.is_empty();
        let released = emptied.then(|| state.take_released());
        if self.shard.urgent.load(Ordering::SeqCst) != 0 {
            MutexGuard::unlock_fair(state);
        } else {
            drop(state);
        }
        drop(released);
    }
}

/// The record the handles of one entry share (see `TimerTaskEntry`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    /// The handles that share it: the last one dropped removes it.
    pub(crate) handles: usize,
    /// True once a cancel through one of the handles won.
    pub(crate) cancelled: bool,
    pub(crate) expiration_ms: i64,
}

/// What the clones of a handle share with their original, keyed by their entry: whether a
/// cancel through any of them won, and the entry's latest expiration.
pub(crate) type Clones = HashMap<EntryKey, Record>;

/// A reader-writer lock around a `T` whose read side is striped over the shards of a
/// timer's entries (see the module docs).
pub(crate) struct StripedRwLock<T> {
    value: T,
    shards: Shards,
}

/// Shared access to the value, and exclusive access to one stripe's shard.
pub(crate) struct ReadGuard<'a, T> {
    value: &'a T,
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
    /// there (see `Shards::take`).
    pub(crate) fn new(value: T, stripes: usize, pending: SharedCount, held: SharedCount) -> Self {
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

    /// Returns the shard of stripe `stripe` (modulo the number of stripes).
    #[inline]
    fn shard(&self, stripe: usize) -> &'static Shard {
        self.shards[stripe & (self.shards.len() - 1)]
    }

    /// A read guard holding `guard`, a stripe's shard locked.
    #[inline]
    fn guard(&self, guard: ShardGuard<'static>) -> ReadGuard<'_, T> {
        ReadGuard {
            value: &self.value,
            guard,
        }
    }

    /// Takes the read lock of stripe `stripe` (modulo the number of stripes).
    #[inline]
    pub(crate) fn read(&self, stripe: usize) -> ReadGuard<'_, T> {
        self.guard(self.shard(stripe).lock())
    }

    /// Takes the read lock of stripe `stripe` ahead of the threads that add and cancel
    /// there (see `Shard::lock_urgent`): for the timer's own work, a flush.
    pub(crate) fn read_urgent(&self, stripe: usize) -> ReadGuard<'_, T> {
        self.guard(self.shard(stripe).lock_urgent())
    }

    /// Takes the read lock of stripe `stripe` if no one holds it.
    pub(crate) fn try_read(&self, stripe: usize) -> Option<ReadGuard<'_, T>> {
        Some(self.guard(self.shard(stripe).try_lock()?))
    }

    /// Takes the write lock: every stripe, in index order, ahead of adds and cancels.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        WriteGuard {
            value: &self.value,
            shards: self.shards.iter().map(|s| s.lock_urgent()).collect(),
        }
    }

    /// Returns the number of stripes.
    pub(crate) fn stripes(&self) -> usize {
        self.shards.len()
    }

    /// Returns the stripe of `shard`, if it is one of this lock's: O(1), from what the
    /// shard recorded when this lock's set took it.
    #[inline]
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        let home = shard.home.load(Ordering::Acquire);
        (home >> 8 == self.shards.id).then_some((home & 0xFF) as usize)
    }

    /// Returns the shards, for readings that need no lock.
    pub(crate) fn shards(&self) -> &Shards {
        &self.shards
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
        self.guard.shard
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
/// made as shards are: a flat table of `OnceLock`s would put 16 MiB into every binary's
/// data.
static BY_ID: [OnceLock<Box<Leaf>>; 1 << (SHARD_ID_BITS - LEAF_BITS)] =
    [const { OnceLock::new() }; 1 << (SHARD_ID_BITS - LEAF_BITS)];

/// Bits of a shard's number that pick its place in a leaf of [`BY_ID`].
const LEAF_BITS: u32 = 10;
const LEAF_MASK: usize = (1 << LEAF_BITS) - 1;

/// One leaf of [`BY_ID`].
type Leaf = [OnceLock<&'static Shard>; 1 << LEAF_BITS];

/// Makes a shard for the life of the process and numbers it. The caller holds [`POOL`]'s
/// lock, which keeps the numbers apart.
fn make_shard() -> &'static Shard {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let id = MADE.fetch_add(1, Ordering::Relaxed) + 1;
    assert!(
        id < 1 << SHARD_ID_BITS,
        "more than {} timer shards at once: too many live timers",
        (1 << SHARD_ID_BITS) - 1,
    );
    let leaf = BY_ID[id >> LEAF_BITS]
        .get_or_init(|| Box::new([const { OnceLock::new() }; 1 << LEAF_BITS]));
    leaf[id & LEAF_MASK].get_or_init(|| {
        Box::leak(Box::new(Shard {
            state: Mutex::default(),
            counts: Default::default(),
            oldest_held_ms: AtomicI64::new(i64::MAX),
            home: AtomicU64::new(0),
            urgent: AtomicUsize::new(0),
            id: id as u32,
        }))
    })
}

/// Returns the shard numbered `id` (its `Shard::id`), if there is one.
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
    /// place in the set (see `StripedRwLock::stripe_of`).
    id: u64,
}

impl Shards {
    /// Takes `count` shards from the pool (making new ones if it runs out). With `pending`,
    /// the shards keep the timer's exact count of pending entries there; with `held`, of
    /// held ones (see `ShardState`'s fields).
    pub(crate) fn take(count: usize, pending: SharedCount, held: SharedCount) -> Shards {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // `make_shard` runs under the pool's lock.
        let take = |_| POOL.lock().pop().unwrap_or_else(make_shard);
        let shards: Box<[&'static Shard]> = (0..count).map(take).collect();
        for (stripe, shard) in shards.iter().enumerate() {
            shard.set_home(id, stripe);
            shard.lock().reset(pending.clone(), held.clone());
        }
        Shards { shards, id }
    }

    /// Returns what the shards counted, `pending` the entries added and neither expired,
    /// cancelled nor cleared. Without locking: while other threads hold the locks, it may
    /// lag by a moment (`Added` is read last, so an entry that left never counts as pending).
    pub(crate) fn counts(&self) -> TimerStats {
        let mut sums = [0; 6];
        for shard in self.iter() {
            for (sum, counter) in sums.iter_mut().zip(&shard.counts) {
                *sum += counter.load(Ordering::Acquire);
            }
        }
        let [expired, cancelled, refused, cleared, added, _] = sums; // `Count`'s order
        TimerStats {
            added,
            expired,
            cancelled,
            refused,
            pending: added.saturating_sub(expired + cancelled + cleared),
        }
    }

    /// Returns the sum of one count over the shards, without locking.
    pub(crate) fn count(&self, count: Count) -> u64 {
        let count = |shard: &&Shard| shard.counts[count as usize].load(Ordering::Acquire);
        self.iter().map(count).sum()
    }

    /// Returns the bytes mapped for the entries of all shards (each locked in turn).
    pub(crate) fn mapped_bytes(&self) -> usize {
        let bytes =
            |state: &ShardState| state.slots.mapped_bytes() + state.chains.blocks.mapped_bytes();
        self.iter().map(|shard| bytes(&shard.lock())).sum()
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
        for shard in self.iter() {
            shard.set_home(0, 0);
            let mut state = shard.lock();
            cleared.absorb(state.clear());
            state.reset(None, None);
        }
        // Whatever was still waiting is dropped here, with no lock held.
        drop(cleared);
        POOL.lock().extend(self.iter().copied());
    }
}

/// Memory taken out of a shard (emptied chunks, or all that a `clear` took, tasks
/// included) to be dropped with no lock held: its tasks first (user code, each once), then
/// the chunks unmapped.
#[derive(Default)]
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Released {
    slots: Vec<Region<Slot>>,
    blocks: Vec<Region<Block>>,
    /// The tasks in `slots`: none in the chunks a shard emptied.
    tasks: usize,
}

impl Released {
    /// Adds `other`'s memory to this.
    pub(crate) fn absorb(&mut self, mut other: Released) {
        self.slots.append(&mut other.slots);
        self.blocks.append(&mut other.blocks);
        self.tasks += other.tasks;
    }

    /// Returns the number of tasks in it.
    pub(crate) fn task_count(&self) -> usize {
        self.tasks
    }

    /// Takes the tasks out.
    pub(crate) fn into_tasks(mut self) -> Vec<Box<dyn TimerTask>> {
        take_tasks(&mut self.slots)
    }
}

impl Drop for Released {
    fn drop(&mut self) {
        if self.tasks > 0 {
            drop(take_tasks(&mut self.slots));
        }
    }
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
        assert_eq!(lock.read(0).value().0.load(Ordering::SeqCst), 8_000);
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
