//! One shard's backlog (see `system_timer::backlog`): the due entries `max_in_flight` holds
//! back, in a binary heap by expiration, then by the order they came due, so a refill takes
//! the oldest first. Part of a shard's state, guarded by its lock.
//!
//! A held entry's [`Loc`] is its place in the heap ([`Loc::held`]), rewritten as the heap
//! moves it: a cancel takes it out in O(log n), and the heap holds nothing but live entries,
//! so its memory follows them (it gives back half once under a quarter is used).

use super::chunks::{Loc, Slots};

/// A held entry: its place in the order (its fields' order), and its slot.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    expiration_ms: i64,
    /// Its place among held entries of the same expiration: the order they came due
    /// (unique, so `index` never decides).
    seq: u64,
    index: u32,
}

/// The held entries of one shard, oldest expiration at the root.
#[derive(Default)]
pub(crate) struct HeldQueue {
    heap: Vec<Held>,
    next_seq: u64,
}

impl HeldQueue {
    /// Returns the number of held entries.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Returns the expiration of the entry [`remove`](Self::remove) at 0 takes.
    pub(crate) fn oldest_ms(&self) -> Option<i64> {
        self.heap.first().map(|held| held.expiration_ms)
    }

    /// Holds the entry in slot `index`, after those of its expiration held before it.
    pub(crate) fn push(&mut self, slots: &mut Slots, index: u32) {
        let expiration_ms = slots.get(index).expiration_ms;
        self.heap.push(Held {
            expiration_ms,
            seq: self.next_seq,
            index,
        });
        self.next_seq += 1;
        self.sift_up(slots, self.heap.len() - 1);
    }

    /// Takes the entry at place `at` out and returns its slot, whose `Loc` it leaves as it
    /// was (the caller vacates or relists the slot).
    pub(crate) fn remove(&mut self, slots: &mut Slots, at: usize) -> u32 {
        let last = self.heap.pop().expect("removing from an empty backlog");
        let removed = if at < self.heap.len() {
            let removed = std::mem::replace(&mut self.heap[at], last).index;
            let at = self.sift_up(slots, at);
            self.sift_down(slots, at);
            removed
        } else {
            last.index
        };
        let capacity = self.heap.capacity();
        if capacity > 64 && self.heap.len() < capacity / 4 {
            self.heap.shrink_to(capacity / 2);
        }
        removed
    }

    /// Puts the entry at `at` in its place, given `at` is between its parent and its
    /// children; returns the place.
    fn place(&mut self, slots: &mut Slots, at: usize, held: Held) -> usize {
        self.heap[at] = held;
        slots.get_mut(held.index).loc = Loc::held(at);
        at
    }

    /// Moves the entry at `at` up past the parents that come after it; returns its place.
    fn sift_up(&mut self, slots: &mut Slots, mut at: usize) -> usize {
        let held = self.heap[at];
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent] <= held {
                break;
            }
            self.place(slots, at, self.heap[parent]);
            at = parent;
        }
        self.place(slots, at, held)
    }

    /// Moves the entry at `at` down past the children that come before it.
    fn sift_down(&mut self, slots: &mut Slots, mut at: usize) {
        let held = self.heap[at];
        loop {
            let left = 2 * at + 1;
            let Some(first) = self.heap.get(left) else {
                break;
            };
            let child = match self.heap.get(left + 1) {
                Some(right) if right < first => left + 1,
                _ => left,
            };
            if held <= self.heap[child] {
                break;
            }
            self.place(slots, at, self.heap[child]);
            at = child;
        }
        self.place(slots, at, held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn entries_leave_by_expiration_then_arrival_and_every_loc_stays_right() {
        let (mut slots, mut held) = (Slots::default(), HeldQueue::default());
        // What the queue should hold: (expiration, arrival, slot).
        let mut model = BTreeSet::new();
        let mut x = 0x9E37_79B9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for arrival in 0..5_000u64 {
            let expiration_ms = i64::from(next() % 50);
            let index = slots
                .insert(crate::task::timer_task(0, || {}), expiration_ms, |_| {
                    Loc::UNLISTED
                })
                .ok()
                .unwrap()
                .index;
            held.push(&mut slots, index);
            model.insert((expiration_ms, arrival, index));
            if next() % 3 == 0 {
                // A cancel, anywhere.
                let &entry = model.iter().nth(next() as usize % model.len()).unwrap();
                let at = slots.get(entry.2).loc.held_at().unwrap();
                assert_eq!(held.remove(&mut slots, at), entry.2);
                model.remove(&entry);
                drop(slots.vacate(entry.2));
            }
            if next() % 4 == 0 {
                let oldest = model.pop_first().unwrap();
                assert_eq!(held.oldest_ms(), Some(oldest.0));
                assert_eq!(held.remove(&mut slots, 0), oldest.2);
                drop(slots.vacate(oldest.2));
            }
        }
        for &(_, _, index) in &model {
            let at = slots.get(index).loc.held_at().unwrap();
            assert_eq!(held.heap[at].index, index);
        }
        while let Some((_, _, index)) = model.pop_first() {
            assert_eq!(held.remove(&mut slots, 0), index);
        }
        assert!(held.len() == 0 && held.heap.capacity() <= 64, "given back");
    }
}
