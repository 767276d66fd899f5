//! Where pending entries live: a sharded slab whose slots carry the links of every bucket's
//! doubly linked list.
//!
//! Kafka gives each `TimerTaskEntry` its own object with `prev`/`next` pointers and a
//! `list` field. Here an entry is a 40-byte slot in a slab page, linked by `u32` indices,
//! which needs no `unsafe`, no allocation per entry beyond the user's own task box, and no
//! reference count.
//!
//! # Ground rules
//!
//! - The store is split into shards, each a [`Mutex`] around one [`Slab`]. A thread adds to
//!   the shard its hint picks, so adding threads rarely share a lock or a cache line.
//! - Every field of a [`Slab`] is guarded by its shard's mutex. [`Shard::len`] is written
//!   only under that mutex and read without it.
//! - A bucket ([`TimerTaskList`](crate::timer_task_list::TimerTaskList)) is one list *per
//!   shard*: an entry is linked only with entries of its own shard, so no operation ever
//!   holds two shard locks.
//! - Lock order: the timer's wheel lock, then one shard's mutex, then the delay queue's
//!   mutex. Nothing here calls user code: tasks are moved out under the lock and dropped or run
//!   after it is released.
//! - A slot's state: *vacant* (no task, generation 0, on the free list), *unlinked* (a task,
//!   `prev == next == NIL`), or *linked* into one list. The generation a slot gets when it
//!   is filled comes from a per-shard counter that never repeats, so a [`EntryKey`] can
//!   never name a later occupant of its slot.
//! - The two ends of a list carry the list's id instead of a neighbour (`END | id`), so
//!   unlinking needs no list pointer in the slot and no sentinel node.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::TimerTask;
use crate::timer_task_entry::{EntryKey, EntryOwner};

/// "No slot": an empty list's ends, and both links of an unlinked slot.
pub(crate) const NIL: u32 = u32::MAX;
/// Set on a link that points at a list's end rather than at a slot.
const END: u32 = 1 << 31;
/// The list a flush drains: entries taken out of a bucket wait here to be re-added.
pub(crate) const TRANSIT: u32 = END - 2;
/// Bucket ids must stay below this.
pub(crate) const MAX_LIST_ID: u32 = TRANSIT;

/// Slots per slab page (a power of two). Pages never move, and a shard keeps at most one
/// of them once it is empty.
const PAGE_SHIFT: u32 = 10;
const PAGE_SLOTS: usize = 1 << PAGE_SHIFT;
const PAGE_MASK: u32 = (1 << PAGE_SHIFT) - 1;

/// One pending entry (or a vacant slot).
struct Node {
    task: Option<Box<dyn TimerTask>>,
    expiration_ms: i64,
    generation: u64,
    prev: u32,
    /// The next slot of the list, `END | list` at the tail, or the free-list link of a
    /// vacant slot.
    next: u32,
}

impl Node {
    const VACANT: Node = Node {
        task: None,
        expiration_ms: 0,
        generation: 0,
        prev: NIL,
        next: NIL,
    };
}

/// The two ends of a list within one shard; `NIL` when empty.
#[derive(Clone, Copy, Debug)]
struct Ends {
    head: u32,
    tail: u32,
}

impl Ends {
    const EMPTY: Ends = Ends {
        head: NIL,
        tail: NIL,
    };
}

/// The slots and list ends of one shard. Every method expects the shard's lock held, which
/// `&mut Slab` proves.
pub(crate) struct Slab {
    pages: Vec<Box<[Node]>>,
    /// Slots below this index have been handed out at least once since the last reset.
    used: u32,
    /// Head of the vacant-slot list.
    free: u32,
    next_generation: u64,
    /// Bucket lists by id, grown on demand.
    lists: Vec<Ends>,
    transit: Ends,
    /// Pending entries; mirrored into [`Shard::len`].
    len: usize,
    /// Pages given back when the shard emptied, to be freed once the lock is released.
    released: Vec<Box<[Node]>>,
}

impl Slab {
    fn new() -> Slab {
        Slab {
            pages: Vec::new(),
            used: 0,
            free: NIL,
            next_generation: 1,
            lists: Vec::new(),
            transit: Ends::EMPTY,
            len: 0,
            released: Vec::new(),
        }
    }

    fn node(&self, index: u32) -> &Node {
        &self.pages[(index >> PAGE_SHIFT) as usize][(index & PAGE_MASK) as usize]
    }

    fn node_mut(&mut self, index: u32) -> &mut Node {
        &mut self.pages[(index >> PAGE_SHIFT) as usize][(index & PAGE_MASK) as usize]
    }

    fn ends_mut(&mut self, list: u32) -> &mut Ends {
        if list == TRANSIT {
            return &mut self.transit;
        }
        let at = list as usize;
        if at >= self.lists.len() {
            self.lists.resize(at + 1, Ends::EMPTY);
        }
        &mut self.lists[at]
    }

    /// Returns the number of pending entries in this shard.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores a new, unlinked entry and returns its key.
    pub(crate) fn insert(&mut self, task: Box<dyn TimerTask>, expiration_ms: i64) -> EntryKey {
        let index = if self.free != NIL {
            let index = self.free;
            self.free = self.node(index).next;
            index
        } else {
            if self.used as usize == self.pages.len() * PAGE_SLOTS {
                assert!(
                    self.used < MAX_SLOTS,
                    "timingwheel: more than {MAX_SLOTS} pending timers in one shard"
                );
                self.pages
                    .push((0..PAGE_SLOTS).map(|_| Node::VACANT).collect());
            }
            self.used += 1;
            self.used - 1
        };
        let generation = self.next_generation;
        self.next_generation += 1;
        *self.node_mut(index) = Node {
            task: Some(task),
            expiration_ms,
            generation,
            prev: NIL,
            next: NIL,
        };
        self.len += 1;
        EntryKey { index, generation }
    }

    /// Returns the expiration of the entry in slot `index`.
    pub(crate) fn expiration_ms(&self, index: u32) -> i64 {
        self.node(index).expiration_ms
    }

    /// Appends the entry in slot `index` to `list`, first unlinking it from any list it is
    /// in (Kafka's rule: an entry lives in at most one list).
    pub(crate) fn link(&mut self, list: u32, index: u32) {
        debug_assert!(list < MAX_LIST_ID || list == TRANSIT);
        self.unlink(index);
        let tail = self.ends_mut(list).tail;
        let node = self.node_mut(index);
        node.next = END | list;
        if tail == NIL {
            node.prev = END | list;
            self.ends_mut(list).head = index;
        } else {
            node.prev = tail;
            self.node_mut(tail).next = index;
        }
        self.ends_mut(list).tail = index;
    }

    /// Unlinks the entry in slot `index` from its list, if it is in one.
    pub(crate) fn unlink(&mut self, index: u32) {
        let Node { prev, next, .. } = *self.node(index);
        if prev == NIL {
            return;
        }
        if prev & END != 0 {
            self.ends_mut(prev & !END).head = if next & END != 0 { NIL } else { next };
        } else {
            self.node_mut(prev).next = next;
        }
        if next & END != 0 {
            self.ends_mut(next & !END).tail = if prev & END != 0 { NIL } else { prev };
        } else {
            self.node_mut(next).prev = prev;
        }
        let node = self.node_mut(index);
        node.prev = NIL;
        node.next = NIL;
    }

    /// Unlinks and frees the entry in slot `index`, returning its task.
    pub(crate) fn remove(&mut self, index: u32) -> Box<dyn TimerTask> {
        self.unlink(index);
        let free = self.free;
        let node = self.node_mut(index);
        let task = node.task.take().expect("removing a vacant slot");
        node.generation = 0;
        node.next = free;
        self.free = index;
        self.len -= 1;
        if self.len == 0 {
            self.reset_pages();
        }
        task
    }

    /// Removes the entry `key` names, if it is still pending, and returns its task.
    pub(crate) fn take(&mut self, key: EntryKey) -> Option<Box<dyn TimerTask>> {
        let live = key.index < self.used && {
            let node = self.node(key.index);
            node.generation == key.generation && node.task.is_some()
        };
        live.then(|| self.remove(key.index))
    }

    /// Moves every entry of `list` to the end of the transit list, in O(1).
    pub(crate) fn move_to_transit(&mut self, list: u32) {
        let moved = std::mem::replace(self.ends_mut(list), Ends::EMPTY);
        if moved.head == NIL {
            return;
        }
        let transit_tail = self.transit.tail;
        if transit_tail == NIL {
            self.node_mut(moved.head).prev = END | TRANSIT;
            self.transit.head = moved.head;
        } else {
            self.node_mut(transit_tail).next = moved.head;
            self.node_mut(moved.head).prev = transit_tail;
        }
        self.node_mut(moved.tail).next = END | TRANSIT;
        self.transit.tail = moved.tail;
    }

    /// Unlinks the first entry of the transit list and returns its slot.
    pub(crate) fn pop_transit(&mut self) -> Option<u32> {
        let head = self.transit.head;
        if head == NIL {
            return None;
        }
        self.unlink(head);
        Some(head)
    }

    /// Calls `f` with the key of every entry of `list`, in list order.
    #[cfg(test)]
    pub(crate) fn for_each_in(&mut self, list: u32, mut f: impl FnMut(EntryKey)) {
        let mut at = self.ends_mut(list).head;
        while at != NIL && at & END == 0 {
            let node = self.node(at);
            f(EntryKey {
                index: at,
                generation: node.generation,
            });
            at = node.next;
        }
    }

    /// Once the shard is empty, gives back all pages but the first and restarts the bump
    /// allocator, so a burst of timers does not pin its memory forever. The pages are only
    /// set aside here: freeing a thousand of them can take milliseconds, which must not
    /// happen under a lock (see [`Slab::take_released`]).
    fn reset_pages(&mut self) {
        if self.pages.len() > 1 {
            self.released.extend(self.pages.drain(1..));
        }
        self.used = 0;
        self.free = NIL;
    }

    /// Returns the pages given back since the last call, for the caller to drop once it
    /// holds no lock.
    pub(crate) fn take_released(&mut self) -> Released {
        Released(std::mem::take(&mut self.released))
    }

    /// Empties the shard and returns its pages (with the tasks in them) for the caller to
    /// drop after releasing the lock.
    fn clear(&mut self) -> Vec<Box<[Node]>> {
        let mut pages = std::mem::take(&mut self.pages);
        pages.append(&mut self.released);
        self.used = 0;
        self.free = NIL;
        self.lists.clear();
        self.transit = Ends::EMPTY;
        self.len = 0;
        pages
    }
}

/// Slot indices must leave `END` free for list tags.
const MAX_SLOTS: u32 = END - 1;

/// One shard of the store: a slab behind its own lock, on its own cache lines.
#[repr(align(128))]
pub(crate) struct Shard {
    slab: Mutex<Slab>,
    /// Pending entries in this shard (written under `slab`'s lock, read without it).
    len: AtomicUsize,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            slab: Mutex::new(Slab::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Locks the shard.
    pub(crate) fn lock(&self) -> ShardGuard<'_> {
        ShardGuard {
            slab: Some(self.slab.lock()),
            len: &self.len,
        }
    }
}

impl EntryOwner for Shard {
    fn take_pending(&self, key: EntryKey) -> Option<Box<dyn TimerTask>> {
        self.lock().take(key)
    }
}

/// A locked shard. Publishes the shard's length when dropped.
///
/// Pages the shard gave back while locked are freed after the unlock, unless the holder
/// took them with [`Slab::take_released`] to free even later.
pub(crate) struct ShardGuard<'a> {
    /// `Some` until dropped.
    slab: Option<MutexGuard<'a, Slab>>,
    len: &'a AtomicUsize,
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Slab;
    fn deref(&self) -> &Slab {
        self.slab.as_deref().expect("ShardGuard used after drop")
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Slab {
        self.slab
            .as_deref_mut()
            .expect("ShardGuard used after drop")
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let Some(mut slab) = self.slab.take() else {
            return;
        };
        self.len.store(slab.len, Ordering::Relaxed);
        let released = slab.take_released();
        drop(slab);
        drop(released);
    }
}

/// Slab pages given back by an emptied shard; freeing them is the holder's job, outside
/// every lock.
#[derive(Default)]
#[must_use = "dropping this frees the pages: do it after releasing every lock"]
pub(crate) struct Released(Vec<Box<[Node]>>);

impl Released {
    /// Adds `other`'s pages to these.
    pub(crate) fn absorb(&mut self, mut other: Released) {
        self.0.append(&mut other.0);
    }
}

/// All shards of one timer.
pub(crate) struct EntryStore {
    shards: Box<[Arc<Shard>]>,
}

impl EntryStore {
    /// Creates a store with one shard per hardware thread, times four (a power of two, at
    /// most 64), so that threads rarely share a shard.
    pub(crate) fn new() -> EntryStore {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        EntryStore::with_shards((threads * 4).next_power_of_two().min(64))
    }

    /// Creates a store with `count` shards (a power of two).
    pub(crate) fn with_shards(count: usize) -> EntryStore {
        assert!(count.is_power_of_two());
        EntryStore {
            shards: (0..count).map(|_| Arc::new(Shard::new())).collect(),
        }
    }

    /// Returns the shard a thread with hint `hint` ([`thread_hint`]) adds to.
    pub(crate) fn shard_for(&self, hint: usize) -> &Arc<Shard> {
        &self.shards[hint & (self.shards.len() - 1)]
    }

    /// Returns every shard.
    pub(crate) fn shards(&self) -> &[Arc<Shard>] {
        &self.shards
    }

    /// Returns the number of pending entries in all shards.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.len.load(Ordering::Relaxed))
            .sum()
    }

    /// Empties every shard and returns what it held. The caller drops it once it holds no
    /// lock at all: dropping runs the tasks' `Drop`, which may call back into the timer.
    pub(crate) fn clear(&self) -> Cleared {
        Cleared(
            self.shards
                .iter()
                .map(|shard| shard.lock().clear())
                .collect(),
        )
    }
}

/// The tasks of a cleared store, to be dropped outside every lock.
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Cleared(Vec<Vec<Box<[Node]>>>);

impl Cleared {
    /// Returns the number of tasks in the cleared pages.
    pub(crate) fn len(&self) -> usize {
        self.0
            .iter()
            .flatten()
            .flat_map(|page| page.iter())
            .filter(|node| node.task.is_some())
            .count()
    }

    /// Takes the tasks out of the cleared pages.
    pub(crate) fn into_tasks(self) -> Vec<Box<dyn TimerTask>> {
        self.0
            .into_iter()
            .flatten()
            .flat_map(|page| page.into_vec())
            .filter_map(|node| node.task)
            .collect()
    }
}

/// A small number that differs between threads, fixed for each thread's life.
pub(crate) fn thread_hint() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|hint| *hint)
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

    fn keys(slab: &mut Slab, list: u32) -> Vec<u32> {
        let mut out = Vec::new();
        slab.for_each_in(list, |key| out.push(key.index));
        out
    }

    #[test]
    fn slots_are_40_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 40);
    }

    #[test]
    fn link_unlink_keep_both_ends_right() {
        let mut slab = Slab::new();
        let a = slab.insert(Box::new(Nop), 1).index;
        let b = slab.insert(Box::new(Nop), 2).index;
        let c = slab.insert(Box::new(Nop), 3).index;
        for i in [a, b, c] {
            slab.link(5, i);
        }
        assert_eq!(keys(&mut slab, 5), [a, b, c]);
        slab.unlink(b);
        assert_eq!(keys(&mut slab, 5), [a, c]);
        slab.unlink(c);
        assert_eq!(keys(&mut slab, 5), [a]);
        slab.link(5, b);
        assert_eq!(keys(&mut slab, 5), [a, b]);
        slab.unlink(a);
        slab.unlink(b);
        assert!(keys(&mut slab, 5).is_empty());
        slab.link(5, c);
        assert_eq!(keys(&mut slab, 5), [c]);
    }

    #[test]
    fn transit_takes_whole_lists_in_order() {
        let mut slab = Slab::new();
        let ids: Vec<u32> = (0..6)
            .map(|i| slab.insert(Box::new(Nop), i).index)
            .collect();
        for &i in &ids[..3] {
            slab.link(1, i);
        }
        for &i in &ids[3..] {
            slab.link(2, i);
        }
        slab.move_to_transit(1);
        slab.move_to_transit(2);
        assert!(keys(&mut slab, 1).is_empty());
        assert_eq!(keys(&mut slab, TRANSIT), ids);
        // A transit entry can still be unlinked (cancelled) in the middle.
        slab.unlink(ids[2]);
        let popped: Vec<u32> = std::iter::from_fn(|| slab.pop_transit()).collect();
        assert_eq!(popped, [ids[0], ids[1], ids[3], ids[4], ids[5]]);
    }

    #[test]
    fn stale_keys_never_reach_a_new_occupant() {
        let mut slab = Slab::new();
        let old = slab.insert(Box::new(Nop), 1);
        assert!(slab.take(old).is_some());
        let new = slab.insert(Box::new(Nop), 1);
        assert_eq!(new.index, old.index, "the slot is reused");
        assert!(slab.take(old).is_none());
        assert_eq!(slab.len(), 1);
        assert!(slab.take(new).is_some());
        assert!(slab.take(new).is_none());
    }

    #[test]
    fn an_empty_shard_keeps_one_page() {
        let mut slab = Slab::new();
        let keys: Vec<EntryKey> = (0..3 * PAGE_SLOTS)
            .map(|i| slab.insert(Box::new(Nop), i as i64))
            .collect();
        assert_eq!(slab.pages.len(), 3);
        for key in keys {
            assert!(slab.take(key).is_some());
        }
        assert_eq!(slab.pages.len(), 1);
        assert_eq!(slab.len(), 0);
    }
}
