//! One bucket of a timing wheel (Kafka's `TimerTaskList`).
//!
//! # Ground rules
//!
//! - A bucket's entries are linked through the slots of the
//!   [`EntryStore`](crate::entry_store::EntryStore), one list per shard, all under the id
//!   of the bucket. Linking and unlinking need that shard's lock (`&mut Slab`).
//! - `expiration_ms` is atomic. It is set by adds and re-adds (under the lock of the shard
//!   they link into) and reset by a flush before it moves any shard's list. An add may run
//!   during a flush: if it still reads the old expiration (and so does not queue the
//!   bucket), it linked its entry before the flush moved that shard's list, so the flush
//!   re-adds the entry, and that re-add queues the bucket.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::entry_store::{EntryStore, Released, Slab};

/// A bucket's expiration when it holds no expiration: never set, or flushed since.
pub(crate) const NO_EXPIRATION: i64 = i64::MIN;

/// Entries a flush re-adds per lock hold of one shard, so that a cancel on another thread
/// waits for at most one chunk.
const FLUSH_CHUNK: usize = 256;

/// One bucket: the entries whose expirations fall in one tick of one wheel.
pub(crate) struct TimerTaskList {
    id: u32,
    expiration_ms: AtomicI64,
}

impl TimerTaskList {
    /// Creates an empty bucket whose lists carry `id` in every shard.
    pub(crate) fn new(id: u32) -> TimerTaskList {
        TimerTaskList {
            id,
            expiration_ms: AtomicI64::new(NO_EXPIRATION),
        }
    }

    /// Sets the bucket's expiration, unless it already has an earlier one. Returns true if
    /// it changed (then the caller offers the bucket to the delay queue).
    ///
    /// Kafka swaps unconditionally. The two differ only when one bucket holds entries of
    /// two rounds, which Kafka's wheels never do but this port's top level (and a wheel of
    /// size 1) can: keeping the earlier expiration flushes the bucket early enough for all
    /// its entries (the later ones are re-added), and does not queue the bucket again for
    /// every add that alternates between the rounds.
    pub(crate) fn set_expiration(&self, expiration_ms: i64) -> bool {
        // Reading first keeps the common case (same tick, same bucket) free of writes to a
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

    /// Returns the bucket's expiration, or [`NO_EXPIRATION`].
    pub(crate) fn expiration_ms(&self) -> i64 {
        self.expiration_ms.load(Ordering::Relaxed)
    }

    /// Appends the entry in slot `index` of a shard to this bucket, taking it out of any
    /// other bucket first.
    pub(crate) fn add(&self, slab: &mut Slab, index: u32) {
        slab.link(self.id, index);
    }

    /// Takes the entry in slot `index` of a shard out of this bucket.
    #[cfg(test)]
    pub(crate) fn remove(&self, slab: &mut Slab, index: u32) {
        slab.unlink(index);
    }

    /// Empties the bucket, resets its expiration, and hands every entry to `f` (which
    /// re-adds it or takes it out of the store), shard by shard and in insertion order.
    ///
    /// A shard's whole list moves to the shard's transit list at once; the transit list is
    /// then drained [`FLUSH_CHUNK`] entries per lock hold. A cancel may take an entry out of
    /// the transit list meanwhile, exactly as out of a bucket.
    ///
    /// Returns the slab pages that shards gave back on emptying, for the caller to free
    /// after it has released the wheel's lock and handed the expired tasks over.
    pub(crate) fn flush(&self, store: &EntryStore, mut f: impl FnMut(&mut Slab, u32)) -> Released {
        self.expiration_ms.store(NO_EXPIRATION, Ordering::Relaxed);
        let mut released = Released::default();
        for shard in store.shards() {
            shard.lock().move_to_transit(self.id);
            loop {
                let mut slab = shard.lock();
                let mut drained = false;
                for _ in 0..FLUSH_CHUNK {
                    let Some(index) = slab.pop_transit() else {
                        drained = true;
                        break;
                    };
                    f(&mut slab, index);
                }
                released.absorb(slab.take_released());
                if drained {
                    break;
                }
            }
        }
        released
    }

    /// Calls `f` with every entry's key, shard by shard.
    #[cfg(test)]
    pub(crate) fn for_each(
        &self,
        store: &EntryStore,
        mut f: impl FnMut(&std::sync::Arc<crate::entry_store::Shard>, crate::timer_task_entry::EntryKey),
    ) {
        for shard in store.shards() {
            let mut keys = Vec::new();
            shard.lock().for_each_in(self.id, |key| keys.push(key));
            for key in keys {
                f(shard, key);
            }
        }
    }
}

impl fmt::Debug for TimerTaskList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerTaskList")
            .field("id", &self.id)
            .field("expiration_ms", &self.expiration_ms())
            .finish()
    }
}

/// Kafka's `TimerTaskListTest` (server-common `.../util/timer/TimerTaskListTest.java`,
/// Apache License 2.0), ported as unit tests because lists are crate-private.
///
/// Deviations: an entry is a slot of the entry store rather than an object, and "adding a
/// task's new entry to another list" is linking its slot into that list; the shared
/// counter is the store's length. `testGetDelay` checks the delay queue instead, which is
/// where this port computes a bucket's delay (see `delay_queue.rs`).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::TimerTask;
    use crate::entry_store::Shard;
    use crate::timer_task_entry::EntryKey;
    use std::sync::Arc;

    struct TestTask;
    impl TimerTask for TestTask {
        fn delay_ms(&self) -> i64 {
            0
        }
        fn run(self: Box<Self>) {}
    }

    fn size(list: &TimerTaskList, store: &EntryStore) -> usize {
        let mut count = 0;
        list.for_each(store, |_, _| count += 1);
        count
    }

    fn cancel_all(list: &TimerTaskList, store: &EntryStore) {
        let mut keys: Vec<(Arc<Shard>, EntryKey)> = Vec::new();
        list.for_each(store, |shard, key| keys.push((Arc::clone(shard), key)));
        for (shard, key) in keys {
            assert!(shard.lock().take(key).is_some());
        }
    }

    #[test]
    fn all() {
        let store = EntryStore::with_shards(1);
        let shard = &store.shards()[0];
        let (list1, list2, list3) = (
            TimerTaskList::new(0),
            TimerTaskList::new(1),
            TimerTaskList::new(2),
        );
        let mut tasks = Vec::new();
        for i in 1..=10 {
            let mut slab = shard.lock();
            let key = slab.insert(Box::new(TestTask), 10);
            list1.add(&mut slab, key.index);
            drop(slab);
            assert_eq!(store.len(), i);
            tasks.push(key);
        }
        assert_eq!(store.len(), tasks.len());

        // Re-adding existing tasks to another list does not change the count.
        for key in &tasks[..4] {
            let before = store.len();
            list2.add(&mut shard.lock(), key.index);
            assert_eq!(store.len(), before);
        }
        assert_eq!(size(&list1, &store), 10 - 4);
        assert_eq!(size(&list2, &store), 4);
        assert_eq!(store.len(), tasks.len());

        for key in &tasks[4..] {
            let before = store.len();
            list3.add(&mut shard.lock(), key.index);
            assert_eq!(store.len(), before);
        }
        assert_eq!(size(&list1, &store), 0);
        assert_eq!(size(&list2, &store), 4);
        assert_eq!(size(&list3, &store), 6);
        assert_eq!(store.len(), tasks.len());

        // Cancelling the tasks of each list empties it, and only it.
        cancel_all(&list1, &store);
        assert_eq!([&list1, &list2, &list3].map(|l| size(l, &store)), [0, 4, 6]);
        cancel_all(&list2, &store);
        assert_eq!([&list1, &list2, &list3].map(|l| size(l, &store)), [0, 0, 6]);
        cancel_all(&list3, &store);
        assert_eq!([&list1, &list2, &list3].map(|l| size(l, &store)), [0, 0, 0]);
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn remove_takes_an_entry_out_of_its_list_only() {
        let store = EntryStore::with_shards(1);
        let shard = &store.shards()[0];
        let list = TimerTaskList::new(0);
        let key = shard.lock().insert(Box::new(TestTask), 10);
        list.add(&mut shard.lock(), key.index);
        list.remove(&mut shard.lock(), key.index);
        assert_eq!(size(&list, &store), 0);
        assert_eq!(store.len(), 1, "still pending, just in no list");
    }

    #[test]
    fn set_expiration_keeps_the_earliest_and_reports_changes() {
        let list = TimerTaskList::new(0);
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
    }

    #[test]
    fn flush_empties_the_bucket_in_insertion_order_and_resets_its_expiration() {
        let store = EntryStore::with_shards(2);
        let list = TimerTaskList::new(3);
        let mut keys = Vec::new();
        for (i, shard) in store.shards().iter().cycle().take(6).enumerate() {
            let mut slab = shard.lock();
            let key = slab.insert(Box::new(TestTask), i as i64);
            list.add(&mut slab, key.index);
            keys.push(key.index);
        }
        list.set_expiration(5);
        let mut seen = Vec::new();
        drop(list.flush(&store, |slab, index| {
            seen.push(slab.expiration_ms(index));
            drop(slab.remove(index));
        }));
        // Shard by shard: shard 0 had 0, 2, 4; shard 1 had 1, 3, 5.
        assert_eq!(seen, [0, 2, 4, 1, 3, 5]);
        assert_eq!(size(&list, &store), 0);
        assert_eq!(list.expiration_ms(), NO_EXPIRATION);
        assert_eq!(store.len(), 0);
    }
}
