//! Kafka's `TimerTaskList`: the entries that come due together, one bucket of a wheel or,
//! above the lowest level, one half of a bucket (see `timing_wheel`).
//!
//! Kafka's list holds its entries. Here a [`TimerTaskList`] is an id and an expiration, and
//! each shard keeps its part of every list ([`Chains`]): slot indices in two chains of
//! blocks of 251, the *current* chain, which adds append to, and the *detached* chain,
//! which a flush takes entries from, oldest first. Detaching a list for a flush is O(1)
//! however long it is, and a flush reads indices in runs rather than chasing a pointer per
//! entry. An entry's [`Loc`] is its block and its place there; a cancel swaps the last
//! entry of the same chain into the hole and fixes that entry's `Loc`: O(1), in either
//! chain.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - `expiration_ms` is atomic. Adds set it under a read lock (the stripe they add to); a
//!   flush resets it under the write lock, just before it detaches every shard's part. An
//!   add that comes later sees the reset, sets the expiration again and queues the list
//!   again, so an entry added after the detach is never left in a list nobody will flush.
//! - [`Chains`] are part of a shard's state, guarded by its lock. A block is in its list's
//!   current chain iff its epoch is the list part's, which every detach moves on: a detach
//!   touches no block but the bottom of the current chain.
//! - A chain's blocks are linked both ways: `NEXT` down to older blocks, `PREV` up to newer
//!   ones. Adds append to the top block; a flush takes from the bottom block of the
//!   detached chain, from its `head` up, so entries come out in the order they went in; a
//!   cancel takes the last entry of its chain's top block into the hole, so only a cancel
//!   reorders. No block inside a chain is ever empty: an emptied block goes back at once.
//! - Blocks live in [`Chunks`]: adding never moves what is stored.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::store::chunks::{Chunks, Item, Loc, NIL, Region};
/// A list's expiration when it holds no expiration: never set, or flushed since.
pub(crate) const NO_EXPIRATION: i64 = i64::MIN;

/// One list of a bucket: the entries that are due to be flushed at the same time.
#[derive(Debug)]
pub(crate) struct TimerTaskList {
    id: u32,
    /// How long after the list is due its earliest entry can expire: the lead a flush has
    /// before lateness starts (0 at the lowest level).
    slack_ms: i64,
    expiration_ms: AtomicI64,
}

impl TimerTaskList {
    /// Creates an empty list whose parts are at index `id` in every shard.
    pub(crate) fn new(id: u32, slack_ms: i64) -> TimerTaskList {
        TimerTaskList {
            id,
            slack_ms,
            expiration_ms: AtomicI64::new(NO_EXPIRATION),
        }
    }

    /// Returns the index of this list's part in each shard.
    #[inline]
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Returns how long after the list is due its earliest entry can expire.
    pub(crate) fn slack_ms(&self) -> i64 {
        self.slack_ms
    }

    /// Returns the earliest expiration the list's entries can have when it is due at
    /// `due_ms`.
    pub(crate) fn earliest_expiration_ms(&self, due_ms: i64) -> i64 {
        due_ms.saturating_add(self.slack_ms)
    }

    /// Sets the list's expiration, unless it already has an earlier one. Returns true if it
    /// changed (then the caller offers the list to the delay queue).
    ///
    /// Kafka swaps unconditionally. The two differ only when one list holds entries of two
    /// rounds, which Kafka's wheels never do but this port's top level (and a wheel of one
    /// bucket) can: keeping the earlier expiration flushes the list early enough for all
    /// its entries (the later ones are re-added), and does not queue it again for every add
    /// that alternates between the rounds.
    #[inline]
    pub(crate) fn set_expiration(&self, expiration_ms: i64) -> bool {
        // Reading first keeps the common case (same list, same due time) free of writes to a
        // cache line that every adding thread reads.
        let earlier = |current| current == NO_EXPIRATION || current > expiration_ms;
        let update = |current| earlier(current).then_some(expiration_ms);
        self.expiration_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, update)
            .is_ok()
    }

    /// Returns the list's expiration, or [`NO_EXPIRATION`].
    pub(crate) fn expiration_ms(&self) -> i64 {
        self.expiration_ms.load(Ordering::Relaxed)
    }

    /// Forgets the list's expiration, as a flush does before it detaches the entries.
    pub(crate) fn reset_expiration(&self) {
        self.expiration_ms.store(NO_EXPIRATION, Ordering::Relaxed);
    }
}

/// Words of a block: a header, then entries.
const BLOCK_WORDS: usize = 256;
/// Header words, in this order: the list, the next block down the chain (older), the one up
/// (newer), the length, the epoch.
const LIST: usize = 0;
const NEXT: usize = 1;
const PREV: usize = 2;
const LEN: usize = 3;
const EPOCH: usize = 4;
const HEADER: usize = 5;
/// Entries per block.
const BLOCK_ENTRIES: usize = BLOCK_WORDS - HEADER;

/// Blocks per chunk: 2^6, 64 KiB of 1 KiB blocks.
const CHUNK_SHIFT: u32 = 6;
/// Block ids fit 24 bits (see [`Loc`]).
const MAX_BLOCKS: usize = 1 << 24;

/// A block of a chain: its header and up to [`BLOCK_ENTRIES`] slot indices.
pub(crate) struct Block([u32; BLOCK_WORDS]);

impl Item for Block {
    const CHUNK_SHIFT: u32 = CHUNK_SHIFT;
    const MAX_CHUNKS: usize = MAX_BLOCKS >> CHUNK_SHIFT;
    fn vacant(next: u32, _generation: u32) -> Block {
        let mut words = [0; BLOCK_WORDS];
        words[NEXT] = next;
        Block(words)
    }

    fn link(&mut self) -> &mut u32 {
        &mut self.0[NEXT]
    }
}

/// One chain of blocks: its top (where entries are added and taken) and its bottom (where
/// another chain is hung below it).
#[derive(Clone, Copy, Debug)]
struct Chain {
    top: u32,
    bottom: u32,
}

impl Chain {
    const EMPTY: Chain = Chain {
        top: NIL,
        bottom: NIL,
    };
}

/// One shard's part of one list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListPart {
    current: Chain,
    detached: Chain,
    /// Entries of the detached chain's bottom block that a flush already took.
    head: u32,
    /// The epoch of the blocks of the current chain.
    epoch: u32,
}

impl ListPart {
    const EMPTY: ListPart = ListPart {
        current: Chain::EMPTY,
        detached: Chain::EMPTY,
        head: 0,
        epoch: 0,
    };
}

/// The list parts of one shard and the blocks they are made of.
#[derive(Default)]
pub(crate) struct Chains {
    pub(crate) blocks: Chunks<Block>,
    /// The last block a chain let go of, kept for the next chain that needs one: an entry
    /// added and cancelled over and over at a block's edge then costs a block neither taken
    /// from nor given back to the chunks.
    spare: Option<u32>,
    /// By list id; grown when an entry is first added to a list of a higher id.
    parts: Vec<ListPart>,
}

impl Chains {
    /// Returns word `at` of `block`: a header word, or `HEADER + offset` for an entry.
    fn word(&self, block: u32, at: usize) -> u32 {
        self.blocks.get(block).0[at]
    }

    fn set_word(&mut self, block: u32, at: usize, value: u32) {
        self.blocks.get_mut(block).0[at] = value;
    }

    /// Appends slot `index` to the current chain of list `id`; returns where it went.
    #[inline]
    pub(crate) fn push(&mut self, id: u32, index: u32) -> Loc {
        let at = id as usize;
        if at >= self.parts.len() {
            // Grown on the adding path, for the highest list an add reaches first: a flush
            // only moves entries down, to lists of lower ids, so it never grows `parts`.
            self.parts.resize(at + 1, ListPart::EMPTY);
        }
        let top = self.parts[at].current.top;
        if top != NIL {
            let words = &mut self.blocks.get_mut(top).0;
            let len = words[LEN] as usize;
            if len < BLOCK_ENTRIES {
                words[HEADER + len] = index;
                words[LEN] = len as u32 + 1;
                return Loc::new(top, len);
            }
        }
        self.push_block(id, index)
    }

    /// Appends slot `index` to list `id` in a new block on top of its current chain.
    #[cold]
    fn push_block(&mut self, id: u32, index: u32) -> Loc {
        let part = self.parts[id as usize];
        let top = part.current.top;
        let block = self.spare.take().unwrap_or_else(|| {
            let vacant = self.blocks.take_vacant();
            vacant.expect("block ids for every slot of a shard").0
        });
        // The header, then the entry.
        let words = &mut self.blocks.get_mut(block).0;
        words[LIST..=HEADER].copy_from_slice(&[id, top, NIL, 1, part.epoch, index]);
        if top != NIL {
            self.set_word(top, PREV, block);
        }
        let part = &mut self.parts[id as usize];
        part.current.top = block;
        if top == NIL {
            part.current.bottom = block;
        }
        Loc::new(block, 0)
    }

    /// Moves list `id`'s current chain onto its detached chain, in O(1): a flush then takes
    /// these entries out with [`pop_detached`](Chains::pop_detached), while later adds start
    /// a new current chain. Detaching again before the flush is done extends it.
    pub(crate) fn detach(&mut self, id: u32) {
        let Some(part) = self.parts.get(id as usize).copied() else {
            return;
        };
        let (mut detached, mut head) = (part.detached, part.head);
        if part.current.top != NIL {
            if detached.top == NIL {
                (detached, head) = (part.current, 0);
            } else {
                // The newer entries go above the older ones, which a flush takes first.
                self.set_word(part.current.bottom, NEXT, detached.top);
                self.set_word(detached.top, PREV, part.current.bottom);
                detached.top = part.current.top;
            }
        }
        self.parts[id as usize] = ListPart {
            current: Chain::EMPTY,
            detached,
            head,
            epoch: part.epoch.wrapping_add(1),
        };
    }

    /// Takes the oldest entry of list `id`'s detached chain out and returns its slot;
    /// `None` once the chain is empty.
    pub(crate) fn pop_detached(&mut self, id: u32) -> Option<u32> {
        let part = *self.parts.get(id as usize)?;
        let bottom = part.detached.bottom;
        if bottom == NIL {
            return None;
        }
        let index = self.word(bottom, HEADER + part.head as usize);
        let head = part.head + 1;
        if head < self.word(bottom, LEN) {
            self.parts[id as usize].head = head;
        } else {
            // The bottom block is used up: the next one up is the new bottom.
            let up = self.word(bottom, PREV);
            let part = &mut self.parts[id as usize];
            part.head = 0;
            part.detached.bottom = up;
            if up == NIL {
                part.detached.top = NIL;
            } else {
                self.set_word(up, NEXT, NIL);
            }
            self.give_back(bottom);
        }
        Some(index)
    }

    /// Calls `f` with the slot of every entry of list `id` in this shard, detached ones
    /// first, each chain oldest first.
    pub(crate) fn for_each_entry(&self, id: u32, mut f: impl FnMut(u32)) {
        let Some(part) = self.parts.get(id as usize) else {
            return;
        };
        for (chain, head) in [(part.detached, part.head), (part.current, 0)] {
            let mut block = chain.bottom;
            while block != NIL {
                let from = if block == chain.bottom { head } else { 0 } as usize;
                let len = self.word(block, LEN) as usize;
                (from..len).for_each(|offset| f(self.word(block, HEADER + offset)));
                block = self.word(block, PREV);
            }
        }
    }

    /// Takes the emptied block `top` off the top of one of list `id`'s chains.
    #[cold]
    fn drop_top(&mut self, id: u32, top: u32, current: bool) {
        let next = self.word(top, NEXT);
        let part = &mut self.parts[id as usize];
        let chain = if current {
            &mut part.current
        } else {
            &mut part.detached
        };
        chain.top = next;
        if next == NIL {
            chain.bottom = NIL;
            if !current {
                part.head = 0;
            }
        } else {
            self.set_word(next, PREV, NIL);
        }
        self.give_back(top);
    }

    /// Gives a block a chain let go of back: as the spare, or to the chunks.
    fn give_back(&mut self, block: u32) {
        if self.spare.is_none() {
            self.spare = Some(block);
        } else {
            self.blocks.give_back(block);
        }
    }

    /// Takes the entry at `loc` out of its list. The last entry of the same chain moves
    /// into its place: returns that entry's slot and new place, for the caller to record.
    #[inline]
    pub(crate) fn remove(&mut self, loc: Loc) -> Option<(u32, Loc)> {
        let block = loc.block();
        let (id, epoch) = {
            let words = &self.blocks.get(block).0;
            (words[LIST], words[EPOCH])
        };
        let part = &self.parts[id as usize];
        let current = epoch == part.epoch;
        let (top, floor) = if current {
            (part.current.top, 0)
        } else if part.detached.top == part.detached.bottom {
            // The detached bottom's entries below `head` are gone already.
            (part.detached.top, part.head)
        } else {
            (part.detached.top, 0)
        };
        // The last entry of the chain: the top block's.
        let words = &mut self.blocks.get_mut(top).0;
        let len = words[LEN] - 1;
        let last = words[HEADER + len as usize];
        words[LEN] = len;
        if len == floor {
            self.drop_top(id, top, current);
        }
        if Loc::new(top, len as usize) == loc {
            return None;
        }
        self.blocks.get_mut(block).0[HEADER + loc.offset()] = last;
        Some((last, loc))
    }

    /// Empties every list and moves every block chunk into `out`, for the caller to unmap
    /// with no lock held.
    pub(crate) fn clear(&mut self, out: &mut Vec<Region<Block>>) {
        self.parts.clear();
        self.spare = None;
        self.blocks.clear(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn set_expiration_keeps_the_earliest_and_reports_changes() {
        let list = TimerTaskList::new(0, 0);
        assert_eq!(list.expiration_ms(), NO_EXPIRATION);
        assert!(list.set_expiration(10));
        assert!(!list.set_expiration(10));
        assert!(
            !list.set_expiration(13),
            "a later round waits for the earlier flush"
        );
        assert_eq!(list.expiration_ms(), 10);
        assert!(list.set_expiration(7));
        assert_eq!(list.expiration_ms(), 7);
        list.reset_expiration();
        assert!(
            list.set_expiration(13),
            "after a flush any expiration is new"
        );
    }

    impl Chains {
        /// Returns the number of blocks in chains (the spare not counted).
        fn blocks_in_use(&self) -> usize {
            self.blocks.live() - usize::from(self.spare.is_some())
        }

        /// Returns the entries of list `id`, detached ones first, each chain oldest first.
        fn entries(&self, id: u32) -> Vec<u32> {
            let mut out = Vec::new();
            self.for_each_entry(id, |index| out.push(index));
            out
        }
    }

    /// Chains plus where each slot is, fixed up as a shard does.
    struct Model {
        chains: Chains,
        locs: HashMap<u32, Loc>,
    }

    impl Model {
        fn new() -> Model {
            Model {
                chains: Chains::default(),
                locs: HashMap::new(),
            }
        }
        fn push(&mut self, id: u32, index: u32) {
            let loc = self.chains.push(id, index);
            self.locs.insert(index, loc);
        }
        fn remove(&mut self, index: u32) {
            let loc = self.locs.remove(&index).unwrap();
            if let Some((moved, at)) = self.chains.remove(loc) {
                self.locs.insert(moved, at);
            }
        }
        fn pop(&mut self, id: u32) -> Option<u32> {
            let index = self.chains.pop_detached(id)?;
            self.locs.remove(&index);
            Some(index)
        }
        fn sorted(&self, id: u32) -> Vec<u32> {
            let mut entries = self.chains.entries(id);
            entries.sort_unstable();
            entries
        }
    }

    #[test]
    fn a_flush_takes_the_detached_entries_while_adds_and_cancels_go_on() {
        let mut m = Model::new();
        for index in 0..600 {
            m.push(3, index);
        }
        m.chains.detach(3);
        m.push(3, 1_000); // after the detach: not part of this flush
        m.remove(5); // cancels in the detached chain
        m.remove(599);
        m.remove(1_000); // and in the current one
        m.push(3, 1_001);
        let mut flushed = Vec::new();
        while let Some(index) = m.pop(3) {
            flushed.push(index);
        }
        flushed.sort_unstable();
        let expected: Vec<u32> = (0..599).filter(|&i| i != 5).collect();
        assert_eq!(flushed, expected);
        assert_eq!(m.sorted(3), [1_001]);
        m.chains.detach(3);
        assert_eq!(m.pop(3), Some(1_001));
        assert_eq!(m.pop(3), None);
        assert_eq!(m.chains.blocks_in_use(), 0, "every block went back");
    }

    #[test]
    fn a_flush_takes_entries_in_the_order_they_were_added_but_for_cancels() {
        let mut m = Model::new();
        for index in 0..1_000 {
            m.push(7, index);
        }
        m.remove(10); // the last entry of the chain, 999, takes its place
        m.chains.detach(7);
        let flushed: Vec<u32> = std::iter::from_fn(|| m.pop(7)).collect();
        let mut expected: Vec<u32> = (0..1_000).filter(|&i| i != 10 && i != 999).collect();
        expected.insert(10, 999);
        assert_eq!(flushed, expected);
    }

    #[test]
    fn a_second_detach_before_the_flush_ends_extends_it() {
        let mut m = Model::new();
        for index in 0..300 {
            m.push(0, index);
        }
        m.chains.detach(0);
        for _ in 0..100 {
            m.pop(0).unwrap();
        }
        for index in 300..700 {
            m.push(0, index);
        }
        m.chains.detach(0);
        // Cancels reach entries of both detaches.
        m.remove(650);
        let remaining: Vec<u32> = m.sorted(0);
        let mut flushed = Vec::new();
        while let Some(index) = m.pop(0) {
            flushed.push(index);
        }
        flushed.sort_unstable();
        assert_eq!(flushed, remaining);
        assert_eq!(flushed.len(), 599);
        assert_eq!(m.chains.blocks_in_use(), 0);
    }

    #[test]
    fn cancels_anywhere_keep_every_other_entry_and_every_loc_right() {
        let mut m = Model::new();
        let mut live: Vec<u32> = Vec::new();
        let mut x = 0x9E37_79B9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for index in 0..5_000u32 {
            let id = next() % 4;
            m.push(id, index);
            live.push(index);
            if next() % 3 == 0 {
                let at = next() as usize % live.len();
                m.remove(live.swap_remove(at));
            }
            if next() % 500 == 0 {
                m.chains.detach(next() % 4);
            }
        }
        // Every remaining entry's loc points at it.
        for (&index, &loc) in &m.locs {
            assert_eq!(m.chains.word(loc.block(), HEADER + loc.offset()), index);
        }
        let mut all: Vec<u32> = (0..4).flat_map(|id| m.chains.entries(id)).collect();
        all.sort_unstable();
        live.sort_unstable();
        assert_eq!(all, live);
        for index in live {
            m.remove(index);
        }
        assert_eq!(m.chains.blocks_in_use(), 0);
    }

    #[test]
    fn locs_pack_block_and_offset() {
        let loc = Loc::new((1 << 24) - 1, BLOCK_ENTRIES - 1);
        assert_eq!(loc.block(), (1 << 24) - 1);
        assert_eq!(loc.offset(), BLOCK_ENTRIES - 1);
        assert_ne!(loc, Loc::UNLISTED);
        assert_eq!(loc.held_at(), None);
        assert_eq!(Loc::UNLISTED.held_at(), None);
        let held = Loc::held(MAX_BLOCKS - 1);
        assert_eq!(held.held_at(), Some(MAX_BLOCKS - 1));
        assert_ne!(held, Loc::UNLISTED);
    }
}
