//! Where pending entries live: each shard of a timer holds pages of 32-byte slots, one per
//! pending task, and its own part of every list (see `timer_task_list`).
//!
//! Kafka gives every `TimerTaskEntry` an object of its own, linked into its bucket's list.
//! Here an entry is a slot in a page of its shard; its list holds the slot's index in an
//! array, and the slot holds its position there ([`Loc`]). A flush then reads a list in
//! order — the processor can fetch many slots at once instead of chasing one pointer after
//! another — and a cancel still removes an entry in O(1).
//!
//! # Ground rules
//!
//! See `system_timer` for the lock order of the whole timer. Here:
//!
//! - A timer's entries are split over shards. A thread adds to the shard its hint picks, so
//!   adding threads rarely share a lock or a cache line. A shard's [`ShardState`] — its
//!   slots, its part of every list and its clone records — is guarded by the shard's mutex,
//!   which is also that stripe of the timer's reader-writer lock (`sharded_rw_lock`).
//!   [`Shard::len`] is written under the mutex (when a guard is dropped) and read without it.
//! - An entry lives and moves within one shard, so no operation holds two shard locks except
//!   the writer, which takes all of them in index order.
//! - A slot is *vacant* (no task; on its page's vacant list) or *occupied* (a task, its
//!   expiration, and where it is listed). Its generation counts its occupants. A handle
//!   names a slot by index and generation, so a stale handle never reaches a later occupant.
//!   A slot whose generation would wrap is retired instead of reused, and a page that is
//!   given back leaves its highest generation behind for the next page of that number.
//! - Shards are pooled for the life of the process, so a handle can keep a `&'static`
//!   reference to its shard and `add` touches no reference count. A shard goes back to the
//!   pool empty when its timer is dropped; the generations it handed out stay with it, so a
//!   handle of the old timer can never cancel a task of the next one.
//! - Nothing here runs user code. Tasks are moved out under the lock; the caller drops,
//!   runs or hands them to the executor. Memory follows the live set: a page whose last
//!   entry leaves is given back (one spare is kept per shard), and lists shrink as they
//!   empty (see `timer_task_list`). Page buffers are freed after the lock is released.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::TimerTask;
use crate::timer_task_list::{Blocks, ListPart};
use crate::timing_wheel::Geometry;

/// Slots per page (a power of two).
const PAGE_SHIFT: u32 = 10;
const PAGE_SLOTS: usize = 1 << PAGE_SHIFT;
const PAGE_MASK: u32 = (1 << PAGE_SHIFT) - 1;

/// Pending entries one shard can hold. Slot indices and list positions fit in 24 bits; a
/// full shard makes `add` go on to the next one.
pub(crate) const SHARD_SLOTS: usize = 1 << 24;
const MAX_PAGES: usize = SHARD_SLOTS / PAGE_SLOTS;

/// "None" for page-local links and page numbers.
const NIL: u32 = u32::MAX;

/// Names one entry within its shard: its slot, and the generation of the occupant meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    /// Page number and offset in the page (24 bits in all).
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// An entry as the wheel sees it: its slot, and when it expires (Kafka's `TimerTaskEntry`
/// without the task).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) index: u32,
    pub(crate) expiration_ms: i64,
}

/// Where an occupied slot's entry is listed: its wheel level, and its position in that
/// level's list of its shard. Positions are absolute and wrap (see `ListPart`); the list
/// itself follows from the level and the entry's expiration (`Geometry::list_for`).
///
/// Packed into 32 bits: the level in the top 7, the position in the low 25.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc(u32);

impl Loc {
    const POSITION_BITS: u32 = 25;
    /// Positions wrap at this mask.
    pub(crate) const POSITION_MASK: u32 = (1 << Self::POSITION_BITS) - 1;
    /// Levels a location can name (level 127 is [`Loc::UNLISTED`]).
    pub(crate) const MAX_LEVELS: usize = 127;
    /// In no list: just taken out of one by a flush, or in a timer without lists.
    pub(crate) const UNLISTED: Loc = Loc(u32::MAX);

    /// At `position` in a list of `level`.
    pub(crate) fn listed(level: usize, position: u32) -> Loc {
        debug_assert!(level < Self::MAX_LEVELS);
        Loc(((level as u32) << Self::POSITION_BITS) | (position & Self::POSITION_MASK))
    }

    /// The level of the list, or `None` if unlisted.
    pub(crate) fn level(self) -> Option<usize> {
        (self != Loc::UNLISTED).then_some((self.0 >> Self::POSITION_BITS) as usize)
    }

    /// The position in the list.
    pub(crate) fn position(self) -> u32 {
        self.0 & Self::POSITION_MASK
    }

    /// The same list, another position.
    fn moved_to(self, position: u32) -> Loc {
        Loc((self.0 & !Self::POSITION_MASK) | (position & Self::POSITION_MASK))
    }
}

impl fmt::Debug for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.level() {
            Some(level) => write!(f, "Loc(level {level}, position {})", self.position()),
            None => f.write_str("Loc::UNLISTED"),
        }
    }
}

/// One entry, or a vacant slot.
struct Slot {
    /// `Some` while occupied.
    task: Option<Box<dyn TimerTask>>,
    expiration_ms: i64,
    /// The generation of the current (or, vacant, the last) occupant.
    generation: u32,
    /// Occupied: where the entry is listed. Vacant: the next vacant slot of the page (a raw
    /// page offset, or `NIL`).
    loc: Loc,
}

impl Slot {
    fn next_vacant(&self) -> u32 {
        self.loc.0
    }
}

/// A page of slots.
struct Page {
    /// Capacity `PAGE_SLOTS`; grows as slots are first used, so that an unused page costs
    /// address space, not memory.
    slots: Vec<Slot>,
    /// The first vacant slot below `slots.len()`, or `NIL`.
    vacant: u32,
    live: u32,
    /// This page's index in `Slots::partial`, or `NIL` while it has no room.
    partial_at: u32,
    /// The highest generation any of its slots has had.
    max_generation: u32,
}

impl Page {
    fn has_room(&self) -> bool {
        self.vacant != NIL || self.slots.len() < PAGE_SLOTS
    }
}

/// A page number: its page, if it has one, and the highest generation its slots ever had.
struct PageEntry {
    page: Option<Page>,
    generation_base: u32,
}

/// The slots of one shard.
struct Slots {
    pages: Vec<PageEntry>,
    /// Page numbers whose page has room.
    partial: Vec<u32>,
    /// Page numbers without a page, free to be given one.
    unused: Vec<u32>,
    /// The buffer of the last page given back, kept for the next page.
    spare: Option<Vec<Slot>>,
    /// Buffers given back, to be freed once the lock is released.
    released: Vec<Vec<Slot>>,
    len: usize,
}

impl Slots {
    const fn new() -> Slots {
        Slots {
            pages: Vec::new(),
            partial: Vec::new(),
            unused: Vec::new(),
            spare: None,
            released: Vec::new(),
            len: 0,
        }
    }

    fn page(&self, index: u32) -> Option<&Page> {
        self.pages
            .get((index >> PAGE_SHIFT) as usize)?
            .page
            .as_ref()
    }

    fn slot(&self, index: u32) -> &Slot {
        &self.page(index).expect("slot of a page that is gone").slots[(index & PAGE_MASK) as usize]
    }

    fn slot_mut(&mut self, index: u32) -> &mut Slot {
        let page = self.pages[(index >> PAGE_SHIFT) as usize]
            .page
            .as_mut()
            .expect("slot of a page that is gone");
        &mut page.slots[(index & PAGE_MASK) as usize]
    }

    /// True if `key` names the current occupant of its slot.
    fn is_live(&self, key: EntryKey) -> bool {
        self.page(key.index)
            .and_then(|page| page.slots.get((key.index & PAGE_MASK) as usize))
            .is_some_and(|slot| slot.task.is_some() && slot.generation == key.generation)
    }

    /// True if no slot is left: every slot is occupied, or no page can be added.
    fn is_full(&self) -> bool {
        self.len == SHARD_SLOTS
            || (self.partial.is_empty() && self.unused.is_empty() && self.pages.len() == MAX_PAGES)
    }

    /// Stores an occupant in a vacant slot and returns its key.
    ///
    /// # Panics
    ///
    /// Panics if the shard [is full](Slots::is_full): callers check first.
    fn insert(&mut self, task: Box<dyn TimerTask>, expiration_ms: i64) -> EntryKey {
        let number = match self.partial.last() {
            Some(&number) => number,
            None => self.new_page().expect("insert into a full shard"),
        };
        let entry = &mut self.pages[number as usize];
        let page = entry.page.as_mut().expect("a partial page exists");
        let offset = if page.vacant != NIL {
            let offset = page.vacant;
            page.vacant = page.slots[offset as usize].next_vacant();
            offset
        } else {
            // A slot used for the first time since its page was made.
            page.slots.push(Slot {
                task: None,
                expiration_ms: 0,
                generation: entry.generation_base,
                loc: Loc(NIL),
            });
            (page.slots.len() - 1) as u32
        };
        let slot = &mut page.slots[offset as usize];
        // Never wraps: a slot at u32::MAX is retired, and a page base of u32::MAX retires
        // its page number (see `vacate` and `give_back`).
        let generation = slot.generation + 1;
        *slot = Slot {
            task: Some(task),
            expiration_ms,
            generation,
            loc: Loc::UNLISTED,
        };
        page.max_generation = page.max_generation.max(generation);
        page.live += 1;
        if !page.has_room() {
            let at = std::mem::replace(&mut page.partial_at, NIL);
            self.unlist_partial(at);
        }
        self.len += 1;
        EntryKey {
            index: (number << PAGE_SHIFT) | offset,
            generation,
        }
    }

    /// Gives an empty page to a page number with none; `None` if every number is in use.
    fn new_page(&mut self) -> Option<u32> {
        let number = match self.unused.pop() {
            Some(number) => number,
            None if self.pages.len() < MAX_PAGES => {
                self.pages.push(PageEntry {
                    page: None,
                    generation_base: 0,
                });
                // Sized here, where pages are added, so that giving pages back (in a flush)
                // never allocates.
                let pages = self.pages.len();
                self.unused.reserve(pages - self.unused.len());
                self.partial.reserve(pages - self.partial.len());
                (pages - 1) as u32
            }
            None => return None,
        };
        let slots = self
            .spare
            .take()
            .unwrap_or_else(|| Vec::with_capacity(PAGE_SLOTS));
        let generation_base = self.pages[number as usize].generation_base;
        self.pages[number as usize].page = Some(Page {
            slots,
            vacant: NIL,
            live: 0,
            partial_at: self.partial.len() as u32,
            max_generation: generation_base,
        });
        self.partial.push(number);
        Some(number)
    }

    /// Removes `partial[at]`, keeping the moved page's `partial_at` right.
    fn unlist_partial(&mut self, at: u32) {
        self.partial.swap_remove(at as usize);
        if let Some(&moved) = self.partial.get(at as usize) {
            self.pages[moved as usize]
                .page
                .as_mut()
                .expect("partial pages exist")
                .partial_at = at;
        }
    }

    /// Empties an occupied slot and returns its task.
    fn vacate(&mut self, index: u32) -> Box<dyn TimerTask> {
        let number = index >> PAGE_SHIFT;
        let offset = index & PAGE_MASK;
        let page = self.pages[number as usize]
            .page
            .as_mut()
            .expect("slot of a page that is gone");
        let had_room = page.has_room();
        let slot = &mut page.slots[offset as usize];
        let task = slot.task.take().expect("vacating a vacant slot");
        if slot.generation != u32::MAX {
            slot.loc = Loc(page.vacant);
            page.vacant = offset;
        }
        page.live -= 1;
        let now_empty = page.live == 0;
        if !had_room && page.has_room() {
            page.partial_at = self.partial.len() as u32;
            self.partial.push(number);
        }
        self.len -= 1;
        if now_empty {
            self.give_back(number);
        }
        task
    }

    /// Takes the empty page of `number` away, remembering its highest generation.
    fn give_back(&mut self, number: u32) {
        let entry = &mut self.pages[number as usize];
        let page = entry.page.take().expect("giving back a page that is gone");
        debug_assert_eq!(page.live, 0);
        let base = page.max_generation;
        entry.generation_base = base;
        if base != u32::MAX {
            self.unused.push(number);
        }
        if page.partial_at != NIL {
            self.unlist_partial(page.partial_at);
        }
        let mut slots = page.slots;
        if self.spare.is_none() {
            slots.clear();
            self.spare = Some(slots);
        } else {
            self.released.push(slots);
        }
    }

    /// Empties the shard and returns its page buffers, tasks included.
    fn clear(&mut self) -> Vec<Vec<Slot>> {
        let mut buffers = std::mem::take(&mut self.released);
        self.partial.clear();
        self.unused.clear();
        for (number, entry) in self.pages.iter_mut().enumerate() {
            if let Some(page) = entry.page.take() {
                entry.generation_base = page.max_generation;
                buffers.push(page.slots);
            }
            if entry.generation_base != u32::MAX {
                self.unused.push(number as u32);
            }
        }
        self.spare = None;
        self.len = 0;
        buffers
    }
}

/// What a clone of a handle shares with its original: whether a cancel through any of them
/// won. Kept by the shard, keyed by the entry, for as long as such handles live.
#[derive(Debug)]
struct CloneRecord {
    handles: usize,
    cancelled: bool,
    /// The entry's expiration, as the last `reschedule` through any of the handles set it.
    expiration_ms: i64,
}

/// What happened to a shard's entries since its timer was built, for `SystemTimer::stats`.
/// Counted under the shard's lock, published when it is released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) added: u64,
    pub(crate) expired: u64,
    pub(crate) cancelled: u64,
    pub(crate) refused: u64,
}

/// Everything of one shard that its mutex guards.
pub(crate) struct ShardState {
    slots: Slots,
    /// This shard's part of every list of the wheel, by list id; grown on demand.
    lists: Vec<ListPart>,
    /// Blocks the lists let go of, for lists that grow.
    blocks: Blocks,
    /// The entries of a flush chunk, between taking them out and re-adding them (kept to
    /// reuse its buffer).
    flushed: Vec<Entry>,
    /// The wheel's shape, to find the list of a listed entry (`None`: a timer without lists).
    geometry: Option<Arc<Geometry>>,
    clones: HashMap<EntryKey, CloneRecord>,
    /// What happened here since the timer was built (see [`Counts`]).
    pub(crate) counts: Counts,
    /// The pending entries of the whole timer, kept exactly when it has a `max_pending`
    /// bound: every entry that leaves this shard takes itself off.
    pending: Option<Arc<AtomicUsize>>,
}

impl ShardState {
    fn new() -> ShardState {
        ShardState {
            slots: Slots::new(),
            lists: Vec::new(),
            blocks: Blocks::default(),
            flushed: Vec::new(),
            geometry: None,
            clones: HashMap::new(),
            counts: Counts::default(),
            pending: None,
        }
    }

    /// Returns the number of pending entries.
    pub(crate) fn len(&self) -> usize {
        self.slots.len
    }

    /// Stores a new, unlisted entry and returns its key.
    ///
    /// # Panics
    ///
    /// Panics if the shard [is full](ShardState::is_full): callers check first.
    pub(crate) fn insert(&mut self, task: Box<dyn TimerTask>, expiration_ms: i64) -> EntryKey {
        self.slots.insert(task, expiration_ms)
    }

    /// True if the shard cannot take another entry.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.is_full()
    }

    /// True if `key` names a pending entry.
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.slots.is_live(key)
    }

    /// Returns this shard's part of list `id`.
    pub(crate) fn list(&mut self, id: u32) -> &mut ListPart {
        let at = id as usize;
        if at >= self.lists.len() {
            self.lists.resize_with(at + 1, ListPart::default);
        }
        &mut self.lists[at]
    }

    /// Appends the unlisted entry in slot `index` to list `id` of `level`.
    pub(crate) fn link(&mut self, id: u32, level: usize, index: u32) {
        debug_assert_eq!(self.slots.slot(index).loc, Loc::UNLISTED);
        self.list(id);
        let position = self.lists[id as usize].push(index, &mut self.blocks);
        self.slots.slot_mut(index).loc = Loc::listed(level, position);
    }

    /// Detaches list `id`'s entries in this shard for a flush (see `ListPart::detach`).
    pub(crate) fn detach(&mut self, id: u32) {
        if let Some(part) = self.lists.get_mut(id as usize) {
            part.detach();
        }
    }

    /// Takes up to `max` entries of list `id`'s detached region out of the list and hands
    /// each to `f`, with the shard, to be re-added or expired; returns how many.
    ///
    /// The entries' slots are read in a loop of their own, after the indices: each read is
    /// likely a cache miss, and with nothing else in the loop the processor overlaps them.
    pub(crate) fn flush_list(
        &mut self,
        id: u32,
        max: usize,
        mut f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        let limit = self.slots.len;
        let Some(part) = self.lists.get_mut(id as usize) else {
            return 0;
        };
        let mut entries = std::mem::take(&mut self.flushed);
        while entries.len() < max {
            let Some(index) = part.pop_flushed(&mut self.blocks, limit) else {
                break;
            };
            entries.push(Entry {
                index,
                expiration_ms: 0,
            });
        }
        for entry in &mut entries {
            let slot = self.slots.slot_mut(entry.index);
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
        self.slots.slot_mut(key.index).expiration_ms = expiration_ms;
        Some(Entry {
            index: key.index,
            expiration_ms,
        })
    }

    /// Takes the occupant of slot `index` out of its list, if it is in one.
    fn unlink(&mut self, index: u32) {
        let slot = self.slots.slot(index);
        if let Some(level) = slot.loc.level() {
            let loc = slot.loc;
            let geometry = self
                .geometry
                .as_ref()
                .expect("a listed entry has a geometry");
            let id = geometry.list_for(level, slot.expiration_ms).id;
            let limit = self.slots.len;
            let removed = self.lists[id as usize].remove(loc.position(), &mut self.blocks, limit);
            if let Some((moved, position)) = removed {
                let moved = self.slots.slot_mut(moved);
                moved.loc = moved.loc.moved_to(position);
            }
            self.slots.slot_mut(index).loc = Loc::UNLISTED;
        }
    }

    /// Empties the shard and returns what it held, for the caller to drop (or hand back)
    /// once it holds no lock.
    pub(crate) fn clear(&mut self) -> Cleared {
        if let Some(pending) = &self.pending {
            pending.fetch_sub(self.slots.len, Ordering::Relaxed);
        }
        self.lists = Vec::new();
        self.blocks = Blocks::default();
        Cleared(self.slots.clear())
    }

    /// Registers one more handle of `key`'s entry: the first clone of a handle creates the
    /// record for both, with the original's `cancelled`; later clones count themselves in.
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

    /// Returns the memory given back since the last call — empty page buffers and list
    /// blocks — for the reclaim thread to free (see `reclaim`).
    fn take_released(&mut self) -> (Vec<Vec<Slot>>, Vec<crate::timer_task_list::Block>) {
        (
            std::mem::take(&mut self.slots.released),
            self.blocks.take_released(),
        )
    }
}

/// One shard of a timer's entries: its state behind its own lock, on cache lines of its
/// own. Pooled: see the module's ground rules.
#[repr(align(128))]
pub(crate) struct Shard {
    state: Mutex<ShardState>,
    /// Pending entries (written under `state`'s lock when a guard is dropped).
    len: AtomicUsize,
    /// `ShardState::counts`, published like `len`: added, expired, cancelled, refused.
    counts: [AtomicU64; 4],
    /// Threads waiting for (or about to wait for) `state` on the timer's behalf: a writer,
    /// or a flush. While it is not zero, every unlock hands the lock straight to a waiter.
    urgent: AtomicUsize,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            state: Mutex::new(ShardState::new()),
            len: AtomicUsize::new(0),
            counts: Default::default(),
            urgent: AtomicUsize::new(0),
        }
    }

    /// Returns the counts as of the last unlock.
    pub(crate) fn counts(&self) -> Counts {
        let [added, expired, cancelled, refused] =
            self.counts.each_ref().map(|c| c.load(Ordering::Relaxed));
        Counts {
            added,
            expired,
            cancelled,
            refused,
        }
    }

    fn publish(&self, state: &ShardState) {
        self.len.store(state.len(), Ordering::Relaxed);
        let Counts {
            added,
            expired,
            cancelled,
            refused,
        } = state.counts;
        for (published, value) in self.counts.iter().zip([added, expired, cancelled, refused]) {
            published.store(value, Ordering::Relaxed);
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

    /// Returns the number of pending entries, as of the last unlock.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// A locked shard. When dropped it publishes the shard's length, unlocks, and hands the
/// memory the shard gave back while locked to the reclaim thread.
pub(crate) struct ShardGuard<'a> {
    /// `Some` until dropped.
    state: Option<MutexGuard<'a, ShardState>>,
    shard: &'a Shard,
}

impl ShardGuard<'_> {
    /// Publishes the shard's length now, rather than at the unlock: before tasks taken out
    /// under this lock are handed over, so that `size()` never counts a task that may run.
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
        let released = (!state.slots.released.is_empty() || !state.blocks.has_no_released())
            .then(|| state.take_released());
        if self.shard.urgent.load(Ordering::SeqCst) != 0 {
            MutexGuard::unlock_fair(state);
        } else {
            drop(state);
        }
        if let Some(released) = released {
            let bytes =
                slot_bytes(&released.0) + released.1.len() * crate::timer_task_list::BLOCK_BYTES;
            crate::reclaim::free_later(released, bytes);
        }
    }
}

/// The bytes that page buffers take.
fn slot_bytes(buffers: &[Vec<Slot>]) -> usize {
    buffers
        .iter()
        .map(|buffer| buffer.capacity() * std::mem::size_of::<Slot>())
        .sum()
}

/// Shards not in use by any timer.
static POOL: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

/// The shards of one timer, taken from the pool and given back when dropped.
pub(crate) struct EntryStore {
    shards: Box<[&'static Shard]>,
}

impl EntryStore {
    /// Returns the number of shards a `SystemTimer` gets: one per hardware thread, times
    /// four (a power of two, at most 64), so that threads rarely share one.
    pub(crate) fn default_shards() -> usize {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        (threads * 4).next_power_of_two().min(64)
    }

    /// Takes `count` shards from the pool (making new ones if it runs out), set up for a
    /// wheel of shape `geometry` (`None` for a timer without lists).
    pub(crate) fn new(count: usize, geometry: Option<Arc<Geometry>>) -> EntryStore {
        EntryStore::with_pending(count, geometry, None)
    }

    /// Like [`new`](EntryStore::new), keeping `pending` exactly (for a `max_pending` bound).
    pub(crate) fn with_pending(
        count: usize,
        geometry: Option<Arc<Geometry>>,
        pending: Option<Arc<AtomicUsize>>,
    ) -> EntryStore {
        let mut pool = POOL.lock();
        let shards: Box<[&'static Shard]> = (0..count)
            .map(|_| {
                pool.pop()
                    .unwrap_or_else(|| Box::leak(Box::new(Shard::new())))
            })
            .collect();
        drop(pool);
        for shard in &shards {
            let mut state = shard.lock();
            state.geometry = geometry.clone();
            state.counts = Counts::default();
            state.pending = pending.clone();
        }
        EntryStore { shards }
    }

    /// Returns every shard, in lock order.
    pub(crate) fn shards(&self) -> &[&'static Shard] {
        &self.shards
    }

    /// Returns the number of pending entries in all shards.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.len()).sum()
    }

    /// Returns the counts of all shards, as of their last unlocks.
    pub(crate) fn counts(&self) -> Counts {
        self.shards
            .iter()
            .map(|shard| shard.counts())
            .fold(Counts::default(), |a, b| Counts {
                added: a.added + b.added,
                expired: a.expired + b.expired,
                cancelled: a.cancelled + b.cancelled,
                refused: a.refused + b.refused,
            })
    }

    /// Returns the index of `shard` among this store's, if it is one of them.
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        self.shards.iter().position(|s| std::ptr::eq(*s, shard))
    }
}

impl Drop for EntryStore {
    fn drop(&mut self) {
        let mut cleared = Cleared::default();
        for shard in &self.shards {
            let mut state = shard.lock();
            cleared.absorb(state.clear());
            state.geometry = None;
            state.pending = None;
        }
        // Whatever was still waiting is dropped here, with no lock held.
        drop(cleared);
        POOL.lock().extend(self.shards.iter().copied());
    }
}

impl fmt::Debug for EntryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntryStore")
            .field("shards", &self.shards.len())
            .field("len", &self.len())
            .finish()
    }
}

/// The tasks of cleared shards, to be dropped (or handed back) outside every lock. When
/// dropped, the tasks are dropped on the dropping thread (their `Drop` is user code) and
/// the emptied buffers go to the reclaim thread.
#[derive(Default)]
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Cleared(Vec<Vec<Slot>>);

impl Cleared {
    /// Adds `other`'s tasks to these.
    pub(crate) fn absorb(&mut self, mut other: Cleared) {
        self.0.append(&mut other.0);
    }

    /// Returns the number of tasks.
    pub(crate) fn len(&self) -> usize {
        self.0
            .iter()
            .flatten()
            .filter(|slot| slot.task.is_some())
            .count()
    }

    /// Takes the tasks out.
    pub(crate) fn into_tasks(mut self) -> Vec<Box<dyn TimerTask>> {
        self.0
            .iter_mut()
            .flatten()
            .filter_map(|slot| slot.task.take())
            .collect()
    }
}

impl Drop for Cleared {
    fn drop(&mut self) {
        let mut buffers = std::mem::take(&mut self.0);
        for slot in buffers.iter_mut().flatten() {
            drop(slot.task.take());
        }
        if !buffers.is_empty() {
            let bytes = slot_bytes(&buffers);
            crate::reclaim::free_later(buffers, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nop;
    impl TimerTask for Nop {
        fn delay_ms(&self) -> i64 {
            0
        }
        fn run(self: Box<Self>) {}
    }

    fn unlisted_state() -> ShardState {
        ShardState::new()
    }

    #[test]
    fn slots_are_32_bytes_and_locations_pack_level_and_position() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
        let loc = Loc::listed(126, Loc::POSITION_MASK);
        assert_eq!(loc.level(), Some(126));
        assert_eq!(loc.position(), Loc::POSITION_MASK);
        assert_eq!(loc.moved_to(7).level(), Some(126));
        assert_eq!(loc.moved_to(7).position(), 7);
        assert_eq!(Loc::listed(0, 0).level(), Some(0));
        assert_eq!(Loc::UNLISTED.level(), None);
    }

    #[test]
    fn stale_keys_never_reach_a_new_occupant() {
        let mut state = unlisted_state();
        let old = state.insert(Box::new(Nop), 1);
        assert!(state.take(old).is_some());
        let new = state.insert(Box::new(Nop), 1);
        assert_eq!(new.index, old.index, "the slot is reused");
        assert_ne!(new.generation, old.generation);
        assert!(state.take(old).is_none());
        assert_eq!(state.len(), 1);
        assert!(state.take(new).is_some());
        assert!(state.take(new).is_none());
    }

    #[test]
    fn an_emptied_page_is_given_back_and_its_number_never_repeats_a_generation() {
        let mut state = unlisted_state();
        let pages = |state: &ShardState| {
            state
                .slots
                .pages
                .iter()
                .filter(|p| p.page.is_some())
                .count()
        };
        let keys: Vec<EntryKey> = (0..3 * PAGE_SLOTS)
            .map(|i| state.insert(Box::new(Nop), i as i64))
            .collect();
        assert_eq!(pages(&state), 3);
        for &key in &keys[..2 * PAGE_SLOTS] {
            assert!(state.take(key).is_some());
        }
        assert_eq!(pages(&state), 1);
        assert!(
            state.slots.spare.is_some(),
            "one buffer kept for the next page"
        );
        assert_eq!(state.take_released().0.len(), 1, "the other one freed");
        // The numbers come back with fresh pages; no old key reaches a new occupant.
        let again: Vec<EntryKey> = (0..2 * PAGE_SLOTS)
            .map(|i| state.insert(Box::new(Nop), i as i64))
            .collect();
        for key in &keys[..2 * PAGE_SLOTS] {
            assert!(!state.slots.is_live(*key));
        }
        for key in again.iter().chain(&keys[2 * PAGE_SLOTS..]) {
            assert!(state.take(*key).is_some());
        }
        assert_eq!(state.len(), 0);
    }

    #[test]
    fn a_slot_at_the_last_generation_is_retired() {
        let mut state = unlisted_state();
        let first = state.insert(Box::new(Nop), 0);
        let keep = state.insert(Box::new(Nop), 0);
        // As if the slot had had u32::MAX - 1 occupants before.
        state.slots.slot_mut(first.index).generation = u32::MAX;
        let number = (first.index >> PAGE_SHIFT) as usize;
        state.slots.pages[number]
            .page
            .as_mut()
            .unwrap()
            .max_generation = u32::MAX;
        let last = EntryKey {
            index: first.index,
            generation: u32::MAX,
        };
        assert!(state.take(last).is_some());
        let next = state.insert(Box::new(Nop), 0);
        assert_ne!(next.index, first.index, "the retired slot is not reused");
        assert!(state.take(next).is_some());
        assert!(state.take(keep).is_some());
        // The emptied page leaves u32::MAX as its number's base: the number is retired too.
        assert!(state.slots.unused.is_empty());
        let fresh = state.insert(Box::new(Nop), 0);
        assert_ne!(fresh.index >> PAGE_SHIFT, first.index >> PAGE_SHIFT);
    }

    #[test]
    fn a_shard_is_full_when_its_slots_or_its_page_numbers_run_out() {
        let mut state = unlisted_state();
        assert!(!state.is_full());
        state.slots.len = SHARD_SLOTS;
        assert!(state.is_full());
        state.slots.len = 0;
        state.slots.pages.resize_with(MAX_PAGES, || PageEntry {
            page: None,
            generation_base: u32::MAX,
        });
        assert!(state.is_full(), "every page number retired");
    }

    #[test]
    fn clear_hands_back_every_task_and_keeps_generations() {
        let mut state = unlisted_state();
        let keys: Vec<EntryKey> = (0..10).map(|i| state.insert(Box::new(Nop), i)).collect();
        let cleared = state.clear();
        assert_eq!(cleared.len(), 10);
        assert_eq!(cleared.into_tasks().len(), 10);
        assert_eq!(state.len(), 0);
        let new = state.insert(Box::new(Nop), 0);
        assert!(keys.iter().all(|key| *key != new));
        assert!(keys.iter().all(|key| state.take(*key).is_none()));
    }

    #[test]
    fn clone_records_live_as_long_as_their_handles() {
        let mut state = unlisted_state();
        let key = state.insert(Box::new(Nop), 0);
        state.add_clone(key, false, 0);
        state.add_clone(key, false, 0);
        state.set_clone_cancelled(key);
        assert!(state.clone_cancelled(key));
        state.drop_clone(key);
        state.drop_clone(key);
        assert!(state.clone_cancelled(key), "one handle left");
        state.drop_clone(key);
        assert!(!state.clone_cancelled(key));
        assert!(state.clones.is_empty());
    }
}
