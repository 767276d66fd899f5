//! Where pending tasks live: 32-byte slots in mapped chunks, named by index and generation.
//!
//! Kafka gives every `TimerTaskEntry` an object of its own. Here an entry is a slot: its
//! task, its expiration, the generation of its occupant and where it is listed ([`Loc`]).
//! A slot's index never changes while it is occupied, so a handle names it by index; the
//! generation tells a handle's own occupant from a later one.
//!
//! # Ground rules
//!
//! - Part of a shard's state, guarded by the shard's lock (see `crate::lock_order`).
//! - A slot is *vacant* (no task) or *occupied*. Its generation counts its occupants; a
//!   slot whose generation would wrap is retired instead of reused, and chunk numbers keep
//!   their highest generation when their chunk is unmapped (see `chunks`), so a key never
//!   names a later occupant.

use super::chains::Loc;
use super::chunks::{Chunks, Item};
use super::region::Region;
use crate::task::TimerTask;

/// Slots per chunk: 2^11, 64 KiB of 32-byte slots.
const CHUNK_SHIFT: u32 = 11;

/// Slots one shard can hold. Indices fit 24 bits (the handle keeps flags above them).
pub(crate) const SHARD_SLOTS: usize = 1 << 24;

/// Names one entry within its shard: its slot, and the generation of the occupant meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// One entry, or a vacant slot.
pub(crate) struct Slot {
    /// `Some` while occupied.
    task: Option<Box<dyn TimerTask>>,
    expiration_ms: i64,
    /// The generation of the current (or, vacant, the last) occupant.
    generation: u32,
    /// Occupied: where the entry is listed. Vacant: the next vacant slot of its chunk.
    link: u32,
}

impl Slot {
    /// Returns the occupant's expiration.
    pub(crate) fn expiration_ms(&self) -> i64 {
        self.expiration_ms
    }

    /// Sets the occupant's expiration.
    pub(crate) fn set_expiration_ms(&mut self, expiration_ms: i64) {
        self.expiration_ms = expiration_ms;
    }

    /// Returns where the occupant is listed.
    #[inline]
    pub(crate) fn loc(&self) -> Loc {
        Loc::from_raw(self.link)
    }

    /// Records where the occupant is listed.
    #[inline]
    pub(crate) fn set_loc(&mut self, loc: Loc) {
        self.link = loc.into_raw();
    }
}

impl Item for Slot {
    const CHUNK_SHIFT: u32 = CHUNK_SHIFT;
    const MAX_CHUNKS: usize = SHARD_SLOTS >> CHUNK_SHIFT;
    fn vacant(next: u32, generation: u32) -> Slot {
        Slot {
            task: None,
            expiration_ms: 0,
            generation,
            link: next,
        }
    }

    fn next_vacant(&self) -> u32 {
        self.link
    }

    fn vacate(&mut self, next: u32) -> bool {
        debug_assert!(self.task.is_none());
        self.link = next;
        self.generation != u32::MAX
    }

    fn generation(&self) -> u32 {
        self.generation
    }
}

/// The slots of one shard.
pub(crate) struct Slots(Chunks<Slot>);

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots(Chunks::new())
    }

    /// Returns the number of occupied slots.
    pub(crate) fn len(&self) -> usize {
        self.0.live()
    }

    /// True if no slot can be taken.
    pub(crate) fn is_full(&self) -> bool {
        self.0.is_full()
    }

    /// Stores an occupant, listed where `list` puts it (given the slot's index), and returns
    /// its key; gives the task back if no slot can be had (the shard is full).
    #[inline]
    pub(crate) fn insert(
        &mut self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
        list: impl FnOnce(u32) -> Loc,
    ) -> Result<EntryKey, Box<dyn TimerTask>> {
        let Some((index, slot)) = self.0.take() else {
            return Err(task);
        };
        // Never wraps: a slot at u32::MAX is retired (see `Item::vacate`).
        slot.generation += 1;
        slot.task = Some(task);
        slot.expiration_ms = expiration_ms;
        slot.link = list(index).into_raw();
        Ok(EntryKey {
            index,
            generation: slot.generation,
        })
    }

    /// True if `key` names the current occupant of its slot.
    #[inline]
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.0
            .try_get(key.index)
            .is_some_and(|slot| slot.task.is_some() && slot.generation == key.generation)
    }

    /// Returns the slot `index`.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> &Slot {
        self.0.get(index)
    }

    /// Returns the slot `index`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, index: u32) -> &mut Slot {
        self.0.get_mut(index)
    }

    /// Empties the slot of `key`'s occupant, if it is still there, and returns its task and
    /// where it was listed (for the caller to take it out of the list).
    #[inline]
    pub(crate) fn take(&mut self, key: EntryKey) -> Option<(Box<dyn TimerTask>, Loc)> {
        let slot = self.0.try_get_mut(key.index)?;
        if slot.generation != key.generation {
            return None;
        }
        let task = slot.task.take()?;
        let loc = slot.loc();
        self.0.give_back(key.index);
        Some((task, loc))
    }

    /// Empties the occupied slot `index` and returns its task and where it was listed.
    #[inline]
    pub(crate) fn vacate(&mut self, index: u32) -> (Box<dyn TimerTask>, Loc) {
        let slot = self.0.get_mut(index);
        let task = slot.task.take().expect("vacating a vacant slot");
        let loc = slot.loc();
        self.0.give_back(index);
        (task, loc)
    }

    /// The storage underneath, for releasing and clearing.
    pub(crate) fn chunks(&mut self) -> &mut Chunks<Slot> {
        &mut self.0
    }

    /// The bytes of the mapped chunks.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.0.mapped_bytes()
    }

    /// Returns the number of tasks in `chunks` (taken out of a shard by a clear).
    pub(crate) fn count_tasks(chunks: &[Region<Slot>]) -> usize {
        chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .filter(|slot| slot.task.is_some())
            .count()
    }

    /// Takes the tasks out of `chunks`.
    pub(crate) fn take_tasks(chunks: &mut [Region<Slot>]) -> Vec<Box<dyn TimerTask>> {
        chunks
            .iter_mut()
            .flat_map(|chunk| chunk.iter_mut())
            .filter_map(|slot| slot.task.take())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(slots: &mut Slots, expiration_ms: i64) -> EntryKey {
        slots
            .insert(crate::task::timer_task(0, || {}), expiration_ms, |_| {
                Loc::UNLISTED
            })
            .ok()
            .unwrap()
    }

    #[test]
    fn slots_are_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    #[test]
    fn stale_keys_never_reach_a_new_occupant() {
        let mut slots = Slots::new();
        let keep = insert(&mut slots, 1);
        let old = insert(&mut slots, 1);
        drop(slots.take(old));
        let new = insert(&mut slots, 1);
        assert_eq!(new.index, old.index, "the slot is reused");
        assert_ne!(new.generation, old.generation);
        assert!(!slots.is_live(old) && slots.is_live(new) && slots.is_live(keep));
        assert_eq!(slots.len(), 2);
    }

    #[test]
    fn a_remapped_chunk_number_never_repeats_a_generation() {
        let mut slots = Slots::new();
        let per_chunk = 1usize << CHUNK_SHIFT;
        let first: Vec<EntryKey> = (0..2 * per_chunk)
            .map(|i| insert(&mut slots, i as i64))
            .collect();
        for key in &first {
            drop(slots.take(*key));
        }
        let mut released = Vec::new();
        slots.chunks().take_released(&mut released);
        assert_eq!(
            released.len(),
            1,
            "one chunk unmapped, one kept as the spare"
        );
        let again: Vec<EntryKey> = (0..2 * per_chunk)
            .map(|i| insert(&mut slots, i as i64))
            .collect();
        assert!(first.iter().all(|key| !slots.is_live(*key)));
        assert!(again.iter().all(|key| slots.is_live(*key)));
    }
}
