//! A list of entries that come due together (Kafka's `TimerTaskList`, one bucket).
//!
//! Kafka's bucket is one doubly linked list of entry objects. Here a [`TimerTaskList`] is the
//! list's identity and expiration; its entries are stored per shard, as a ring of slot
//! indices ([`ListPart`]) in each shard's state. A flush reads a ring front to back, so the
//! processor fetches the entries' slots in parallel instead of chasing one pointer after
//! another, and it never has to stop the world for the whole list: it detaches every
//! shard's entries in O(1) (see [`ListPart::detach`]) and then re-adds them a chunk at a
//! time.
//!
//! Above the lowest level a bucket of the wheel has *two* lists: one for the first part of
//! its range, flushed ahead of the bucket's start, and one for the rest, flushed at the
//! start (see `timing_wheel`). A list's expiration is when it is due to be flushed.
//!
//! # Ground rules
//!
//! See `system_timer` for the lock order of the whole timer. Here:
//!
//! - A [`ListPart`] belongs to one shard's state and is guarded by that shard's lock.
//! - `expiration_ms` is atomic. Adds set it under a read lock (the stripe they add to);
//!   a flush resets it under the write lock, just before it detaches every shard's part.
//!   An add that comes later sees the reset, sets the expiration again and queues the list
//!   again, so an entry added after the detach is never left in a list nobody will flush.
//! - A part's ring has two regions: *detached* (`head..split`: the entries a flush took,
//!   not yet re-added) and *current* (`split..`: entries added since). Adds append to the
//!   current region. A flush takes entries from the front of the detached region. A cancel
//!   swap-removes from the current region, and leaves a hole in the detached one so that
//!   the flush's order and count stay right.
//! - Positions are absolute (they only grow, wrapping at 2^25) so that the positions slots
//!   hold stay right as the flush pops from the front. A ring never holds more than a
//!   shard's slots (2^24), so a position is never ambiguous.
//! - A ring is a deque of fixed-size blocks, aligned to absolute positions, and every
//!   shard keeps the blocks its rings let go of ([`Blocks`], up to about as many entries
//!   as it holds) for the rings that grow. A flush moves entries from one list's blocks to
//!   others', so in a steady state lists fill and drain without allocating or copying.
//!   That matters beyond the allocation itself: with glibc a large allocation first
//!   coalesces every small block freed since the last one — here, every task the executor
//!   ran — so a flush that allocates pays for the tasks' frees.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::entry_store::{Entry, Loc, ShardState};

/// A list's expiration when it holds no expiration: never set, or flushed since.
pub(crate) const NO_EXPIRATION: i64 = i64::MIN;

/// One list of a bucket: the entries that are due to be flushed at the same time.
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
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Returns how long after the list is due its earliest entry can expire.
    pub(crate) fn slack_ms(&self) -> i64 {
        self.slack_ms
    }

    /// Sets the list's expiration, unless it already has an earlier one. Returns true if it
    /// changed (then the caller offers the list to the delay queue).
    ///
    /// Kafka swaps unconditionally. The two differ only when one list holds entries of two
    /// rounds, which Kafka's wheels never do but this port's top level (and a wheel of one
    /// bucket) can: keeping the earlier expiration flushes the list early enough for all
    /// its entries (the later ones are re-added), and does not queue it again for every add
    /// that alternates between the rounds.
    pub(crate) fn set_expiration(&self, expiration_ms: i64) -> bool {
        // Reading first keeps the common case (same list, same due time) free of writes to a
        // cache line that every adding thread reads.
        let mut current = self.expiration_ms.load(Ordering::Relaxed);
        loop {
            if current != NO_EXPIRATION && current <= expiration_ms {
                return false;
            }
            match self.expiration_ms.compare_exchange_weak(
                current,
                expiration_ms,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Returns the list's expiration, or [`NO_EXPIRATION`].
    pub(crate) fn expiration_ms(&self) -> i64 {
        self.expiration_ms.load(Ordering::Relaxed)
    }

    /// Forgets the list's expiration, as a flush does before it detaches the entries.
    pub(crate) fn reset_expiration(&self) {
        self.expiration_ms.store(NO_EXPIRATION, Ordering::Relaxed);
    }

    /// Takes up to `max` of this list's detached entries in `shard` out and hands each to
    /// `f` (Kafka's `flush(addTimerTaskEntry)`, a chunk at a time); returns how many.
    pub(crate) fn flush(
        &self,
        shard: &mut ShardState,
        max: usize,
        f: impl FnMut(&mut ShardState, Entry),
    ) -> usize {
        shard.flush_list(self.id, max, f)
    }
}

impl fmt::Debug for TimerTaskList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerTaskList")
            .field("id", &self.id)
            .field("slack_ms", &self.slack_ms)
            .field("expiration_ms", &self.expiration_ms())
            .finish()
    }
}

/// A cancelled entry of the detached region.
const HOLE: u32 = u32::MAX;

/// Entries per block of a ring (a power of two that divides the position space).
const BLOCK: usize = 256;

/// A block of a ring.
pub(crate) type Block = Box<[u32; BLOCK]>;

/// The heap bytes one [`Block`] points to.
pub(crate) const BLOCK_BYTES: usize = std::mem::size_of::<[u32; BLOCK]>();

/// The blocks a shard's rings let go of, kept for the rings that grow.
#[derive(Default)]
pub(crate) struct Blocks {
    free: Vec<Block>,
    /// Blocks beyond the limit, to be freed once the shard's lock is released.
    released: Vec<Block>,
}

impl Blocks {
    /// Free blocks kept however small the shard: 16 KiB of them.
    const MIN_KEPT: usize = 16;

    /// Returns a block: a kept one, or a new one.
    fn take(&mut self) -> Block {
        self.free.pop().unwrap_or_else(|| Box::new([HOLE; BLOCK]))
    }

    /// Keeps a block for later. The kept blocks are trimmed to one per four blocks' worth
    /// of `live` entries (at least [`MIN_KEPT`](Self::MIN_KEPT)): enough for the lists a
    /// flush fills while it empties another, and never more than a byte per live entry.
    fn give(&mut self, block: Block, live: usize) {
        self.free.push(block);
        let keep = Self::MIN_KEPT.max(live / (4 * BLOCK));
        while self.free.len() > keep {
            let extra = self.free.pop().expect("more than kept");
            self.released.push(extra);
        }
    }

    /// True if no block was given up since the last [`take_released`](Self::take_released).
    pub(crate) fn has_no_released(&self) -> bool {
        self.released.is_empty()
    }

    /// Returns the blocks given up since the last call, for freeing outside the lock.
    pub(crate) fn take_released(&mut self) -> Vec<Block> {
        std::mem::take(&mut self.released)
    }
}

/// One shard's part of a list: a ring of slot indices (see the module's ground rules).
///
/// The entry at absolute position `p` is at offset `p % BLOCK` of the ring's block for
/// `p`; `blocks[0]` is the block of `head`.
#[derive(Default)]
pub(crate) struct ListPart {
    blocks: VecDeque<Block>,
    /// The absolute position of the first entry.
    head: u32,
    /// Entries and holes in the ring.
    len: usize,
    /// The absolute position where the current region starts.
    split: u32,
}

impl ListPart {
    /// Returns the ring offset of absolute position `position`.
    fn offset(&self, position: u32) -> usize {
        (position.wrapping_sub(self.head) & Loc::POSITION_MASK) as usize
    }

    /// Returns the absolute position `offset` entries after the head.
    fn position(&self, offset: usize) -> u32 {
        self.head.wrapping_add(offset as u32) & Loc::POSITION_MASK
    }

    /// Returns the block and the index in it of the entry at ring offset `offset`.
    fn at(&self, offset: usize) -> (usize, usize) {
        let first = self.head as usize % BLOCK;
        ((first + offset) / BLOCK, (first + offset) % BLOCK)
    }

    fn get(&self, offset: usize) -> u32 {
        let (block, index) = self.at(offset);
        self.blocks[block][index]
    }

    fn set(&mut self, offset: usize, value: u32) {
        let (block, index) = self.at(offset);
        self.blocks[block][index] = value;
    }

    /// Returns the number of slots (holes included) in the detached region.
    fn detached(&self) -> usize {
        self.offset(self.split)
    }

    /// Returns the number of entries and holes in the ring.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends the entry in slot `index` to the current region; returns its position. A
    /// new block comes from `blocks`.
    pub(crate) fn push(&mut self, index: u32, blocks: &mut Blocks) -> u32 {
        let position = self.position(self.len);
        if self.blocks.is_empty() || (position as usize).is_multiple_of(BLOCK) {
            self.blocks.push_back(blocks.take());
        }
        self.len += 1;
        self.set(self.len - 1, index);
        position
    }

    /// Takes the entry at `position` out. In the current region the last entry moves into
    /// its place: returns that entry's slot and new position, for the caller to record.
    /// A block left empty goes back to `blocks`.
    pub(crate) fn remove(
        &mut self,
        position: u32,
        blocks: &mut Blocks,
        limit: usize,
    ) -> Option<(u32, u32)> {
        let at = self.offset(position);
        debug_assert!(at < self.len);
        if at < self.detached() {
            self.set(at, HOLE);
            return None;
        }
        let last = self.get(self.len - 1);
        self.len -= 1;
        if self.len == 0 || (self.position(self.len) as usize).is_multiple_of(BLOCK) {
            let block = self.blocks.pop_back().expect("the last entry has a block");
            blocks.give(block, limit);
        }
        if at == self.len {
            return None;
        }
        self.set(at, last);
        Some((last, position))
    }

    /// Moves the whole current region into the detached one, in O(1): a flush then takes
    /// these entries out with [`pop_flushed`](ListPart::pop_flushed). Entries added later go
    /// to a new current region.
    pub(crate) fn detach(&mut self) {
        self.split = self.position(self.len);
    }

    /// True if the detached region still holds entries (or holes).
    #[cfg(test)]
    pub(crate) fn has_detached(&self) -> bool {
        self.detached() > 0
    }

    /// Takes the first entry of the detached region out and returns its slot, skipping
    /// holes; `None` once the region is empty. A block left empty goes back to `blocks`.
    pub(crate) fn pop_flushed(&mut self, blocks: &mut Blocks, limit: usize) -> Option<u32> {
        while self.detached() > 0 {
            let index = self.get(0);
            self.head = self.position(1);
            self.len -= 1;
            if self.len == 0 || (self.head as usize).is_multiple_of(BLOCK) {
                let block = self.blocks.pop_front().expect("the head has a block");
                blocks.give(block, limit);
            }
            if index != HOLE {
                return Some(index);
            }
        }
        None
    }

    /// Calls `f` with the slot of every entry, detached ones first.
    #[cfg(test)]
    pub(crate) fn for_each(&self, mut f: impl FnMut(u32)) {
        for offset in 0..self.len {
            let index = self.get(offset);
            if index != HOLE {
                f(index);
            }
        }
    }
}

impl fmt::Debug for ListPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListPart")
            .field("len", &self.len)
            .field("detached", &self.detached())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part with blocks of its own, as a shard would give it.
    #[derive(Default)]
    struct Part {
        part: ListPart,
        blocks: Blocks,
    }

    impl Part {
        fn push(&mut self, index: u32) -> u32 {
            self.part.push(index, &mut self.blocks)
        }
        fn pop_flushed(&mut self) -> Option<u32> {
            self.part.pop_flushed(&mut self.blocks, 0)
        }
        fn remove(&mut self, position: u32) -> Option<(u32, u32)> {
            self.part.remove(position, &mut self.blocks, 0)
        }
        fn detach(&mut self) {
            self.part.detach()
        }
    }

    fn entries(part: &Part) -> Vec<u32> {
        let part = &part.part;
        let mut out = Vec::new();
        part.for_each(|index| out.push(index));
        out
    }

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

    #[test]
    fn cancel_in_the_current_region_swaps_the_last_entry_in() {
        let mut part = Part::default();
        let positions: Vec<u32> = (10..15).map(|index| part.push(index)).collect();
        assert_eq!(positions, [0, 1, 2, 3, 4]);
        assert_eq!(part.remove(positions[1]), Some((14, 1)));
        assert_eq!(entries(&part), [10, 14, 12, 13]);
        assert_eq!(part.remove(3), None, "the last entry moves nowhere");
        assert_eq!(entries(&part), [10, 14, 12]);
    }

    #[test]
    fn a_flush_takes_the_detached_entries_in_order_while_adds_and_cancels_go_on() {
        let mut part = Part::default();
        for index in 0..6 {
            part.push(index);
        }
        part.detach();
        assert!(part.part.has_detached());
        // An add after the detach is not part of this flush.
        let late = part.push(100);
        assert_eq!(part.pop_flushed(), Some(0));
        // Cancelling a detached entry leaves a hole: nothing moves, the order stays.
        assert_eq!(part.remove(2), None);
        // Cancelling in the current region swaps within the current region only.
        let later = part.push(101);
        assert_eq!(part.remove(late), Some((101, late)));
        let _ = later;
        let flushed: Vec<u32> = std::iter::from_fn(|| part.pop_flushed()).collect();
        assert_eq!(flushed, [1, 3, 4, 5]);
        assert!(!part.part.has_detached());
        assert_eq!(entries(&part), [101]);
        // A second detach takes what came since.
        part.detach();
        assert_eq!(part.pop_flushed(), Some(101));
        assert_eq!(part.pop_flushed(), None);
        assert_eq!(part.part.len(), 0);
    }

    #[test]
    fn a_second_detach_before_the_flush_ends_extends_it() {
        let mut part = Part::default();
        part.push(1);
        part.push(2);
        part.detach();
        assert_eq!(part.pop_flushed(), Some(1));
        part.push(3);
        part.detach();
        let flushed: Vec<u32> = std::iter::from_fn(|| part.pop_flushed()).collect();
        assert_eq!(flushed, [2, 3]);
    }

    #[test]
    fn positions_wrap_without_ambiguity() {
        let mut part = Part {
            part: ListPart {
                head: Loc::POSITION_MASK - 1,
                split: Loc::POSITION_MASK - 1,
                ..ListPart::default()
            },
            ..Part::default()
        };
        let positions: Vec<u32> = (0..4).map(|index| part.push(index)).collect();
        assert_eq!(
            positions,
            [Loc::POSITION_MASK - 1, Loc::POSITION_MASK, 0, 1]
        );
        assert_eq!(part.remove(0), Some((3, 0)));
        part.detach();
        let flushed: Vec<u32> = std::iter::from_fn(|| part.pop_flushed()).collect();
        assert_eq!(flushed, [0, 1, 3]);
    }

    #[test]
    fn rings_take_blocks_from_the_shard_and_give_them_back() {
        let mut part = Part::default();
        let positions: Vec<u32> = (0..10 * BLOCK as u32)
            .map(|index| part.push(index))
            .collect();
        assert_eq!(part.part.blocks.len(), 10);
        // Cancels from the back free blocks as they empty.
        for &position in positions[5 * BLOCK..].iter().rev() {
            assert_eq!(part.remove(position), None);
        }
        assert_eq!(part.part.blocks.len(), 5);
        assert_eq!(part.blocks.free.len(), 5);
        // A flush frees blocks from the front; the pushes it makes elsewhere reuse them.
        part.detach();
        let mut other = ListPart::default();
        while let Some(index) = part.part.pop_flushed(&mut part.blocks, 0) {
            other.push(index, &mut part.blocks);
        }
        assert!(part.part.blocks.is_empty());
        assert_eq!(other.blocks.len(), 5);
        assert_eq!(
            part.blocks.free.len(),
            5,
            "no block was allocated for `other`"
        );
        // Beyond the limit a block is released (freed after the unlock), not kept; the
        // limit follows the shard's live entries down.
        let mut blocks = Blocks::default();
        let taken: Vec<Block> = (0..100).map(|_| blocks.take()).collect();
        for block in taken {
            blocks.give(block, 100 * 4 * BLOCK);
        }
        assert_eq!(blocks.free.len(), 100);
        let block = blocks.take();
        blocks.give(block, 0);
        assert_eq!(blocks.free.len(), Blocks::MIN_KEPT);
        assert_eq!(blocks.take_released().len(), 100 - Blocks::MIN_KEPT);
    }

    #[test]
    fn cancels_and_a_flush_across_block_boundaries_keep_every_entry() {
        let mut part = Part::default();
        let mut live: Vec<(u32, u32)> = (0..3 * BLOCK as u32 + 7)
            .map(|index| (index, part.push(index)))
            .collect();
        // Cancel every third entry, fixing up the moved ones as a shard does.
        let mut at = 0;
        while at < live.len() {
            let (_, position) = live.swap_remove(at);
            if let Some((moved, new_position)) = part.remove(position) {
                live.iter_mut().find(|(i, _)| *i == moved).unwrap().1 = new_position;
            }
            at += 2;
        }
        part.detach();
        let mut flushed: Vec<u32> = std::iter::from_fn(|| part.pop_flushed()).collect();
        let mut expected: Vec<u32> = live.iter().map(|&(index, _)| index).collect();
        flushed.sort_unstable();
        expected.sort_unstable();
        assert_eq!(flushed, expected);
        assert!(part.part.blocks.is_empty());
    }
}
