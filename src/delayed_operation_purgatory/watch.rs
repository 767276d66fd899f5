//! The purgatory's watch lists (Kafka's `WatcherList`s and their `Watchers`): 512 shards of
//! key → operations, the hasher that picks a key's shard, and the small batch that copies a
//! list out of its lock.
//!
//! # Ground rules
//!
//! - **Watch lists.** 512 shards (Kafka's `SHARDS`); a key belongs to the shard that the
//!   top bits of its FxHash-style hash (seeded per purgatory, see `ShardHasher`) pick.
//!   Each shard is one [`Mutex`] around a `HashMap<K, Vec<Delayed<Op>>>`: a key is inserted
//!   and removed, and an operation appended to or dropped from its list, only under it. A
//!   key whose list empties is removed in the same critical section, so no operation is
//!   ever appended to a list that has left the map.
//! - **No user code under a shard lock.** `check_and_complete` copies the key's list
//!   (clones of `Delayed`, an `Arc` each; on the stack up to 8 of them) under the lock,
//!   releases it, and only then asks each operation. Operations dropped from a list are
//!   moved out and dropped after the lock is released, so an operation's `Drop` never runs
//!   under it either. (A key's `Drop` may; keys are plain values.)
//! - **Lock order:** a shard lock is a leaf here: no call holds two, and nothing is locked
//!   under one ([`crate::lock_order`]).
//! - **Kafka's `estimatedTotalOperations`** is split so that no thread writes a counter
//!   another shard's users write: each shard's `operations` (bumped under the shard's lock
//!   when an operation's *first* key is watched there, so each operation is counted once)
//!   only grows; [`WatchLists::operations_ever`] sums them.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::delayed_operation::{Delayed, DelayedOperation};

/// Watch-list shards (Kafka's `SHARDS`): `1 << SHARD_BITS`.
const SHARDS: usize = 1 << SHARD_BITS;
/// A shard's index is this many top bits of its key's [`ShardHasher`] hash.
const SHARD_BITS: u32 = 9;
/// Items a [`Batch`] keeps on the stack.
const BATCH_INLINE: usize = 8;

/// The watch lists of one purgatory: [`SHARDS`] shards, and the seed that spreads keys
/// over them.
pub(super) struct WatchLists<K, Op> {
    /// See the module's ground rules.
    shards: Box<[Shard<K, Op>]>,
    /// Seeds the [`ShardHasher`] that picks a key's shard; random per purgatory.
    /// Independent of the shards' own maps' hashers.
    shard_seed: u64,
}

/// One shard of the watch lists (Kafka's `WatcherList`), on cache lines of its own so that
/// threads on neighbouring shards do not contend.
#[repr(align(128))]
pub(super) struct Shard<K, Op> {
    /// The operations watched under each key (Kafka's `Watchers`), in watch order. Never an
    /// empty list.
    lists: Mutex<HashMap<K, Vec<Delayed<Op>>>>,
    /// Operations whose first key is in this shard, ever watched: this shard's part of
    /// Kafka's `estimatedTotalOperations`. Only grows; bumped under `lists`' lock (so the
    /// cache line is already this thread's), read without it by the purge's decision.
    operations: AtomicUsize,
}

impl<K, Op> WatchLists<K, Op> {
    /// Returns the number of watch-list entries, completed operations not yet purged
    /// included (Kafka's `watched`, which also walks every list). Takes each shard's lock
    /// in turn.
    pub(super) fn watched(&self) -> usize {
        let watched_in =
            |shard: &Shard<K, Op>| shard.lists.lock().values().map(Vec::len).sum::<usize>();
        self.shards.iter().map(watched_in).sum()
    }

    /// Operations ever watched, each counted once (Kafka's `estimatedTotalOperations` before
    /// any purge): 512 relaxed loads.
    pub(super) fn operations_ever(&self) -> usize {
        let operations = |shard: &Shard<K, Op>| shard.operations.load(Ordering::Relaxed);
        self.shards
            .iter()
            .map(operations)
            .fold(0, usize::wrapping_add)
    }
}

impl<K: Eq + Hash + Clone, Op: DelayedOperation> WatchLists<K, Op> {
    /// Empty lists, with a fresh random seed.
    pub(super) fn new() -> WatchLists<K, Op> {
        let shard = |_| Shard {
            lists: Mutex::new(HashMap::new()),
            operations: AtomicUsize::new(0),
        };
        WatchLists {
            shards: (0..SHARDS).map(shard).collect(),
            shard_seed: RandomState::new().build_hasher().finish(),
        }
    }

    /// The shard `key` belongs to: the top bits of its [`ShardHasher`] hash.
    pub(super) fn shard(&self, key: &K) -> &Shard<K, Op> {
        let mut hasher = ShardHasher(self.shard_seed);
        key.hash(&mut hasher);
        &self.shards[(hasher.finish() >> (u64::BITS - SHARD_BITS)) as usize]
    }

    /// Appends `operation` to the watch list of `key` (Kafka's `watchForOperation`); if
    /// `count`, adds it to the estimate of watched operations too.
    pub(super) fn watch(&self, key: &K, operation: &Delayed<Op>, count: bool) {
        let shard = self.shard(key);
        let mut lists = shard.lists.lock();
        if let Some(list) = lists.get_mut(key) {
            list.push(operation.clone());
        } else {
            // Room for 4 from the start: what the first push would grow it to anyway.
            let mut list = Vec::with_capacity(4);
            list.push(operation.clone());
            lists.insert(key.clone(), list);
        }
        if count {
            shard.operations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops every completed operation from every watch list (Kafka's purge). Returns how
    /// many entries it dropped.
    pub(super) fn purge_completed(&self) -> usize {
        let purge = |shard: &Shard<K, Op>| {
            // Declared before the guard, so dropped after the lock is released.
            let mut removed = Batch::new();
            let mut lists = shard.lists.lock();
            lists.retain(|_, list| move_out_completed(list, &mut removed));
            shrink_if_sparse(&mut lists);
            removed.iter().count()
        };
        self.shards.iter().map(purge).sum()
    }

    /// Stops watching `key`: removes its list, and returns the operations that were in it.
    pub(super) fn remove_key(&self, key: &K) -> Vec<Delayed<Op>> {
        self.shard(key).lists.lock().remove(key).unwrap_or_default()
    }
}

impl<K: Eq + Hash, Op: DelayedOperation> Shard<K, Op> {
    /// A copy of the watch list of `key` (empty if it has none): clones (an `Arc` each) on
    /// the stack for a short list, so that the common check allocates nothing.
    pub(super) fn watched_under(&self, key: &K) -> Batch<Delayed<Op>> {
        let mut copy = Batch::new();
        for operation in self.lists.lock().get(key).into_iter().flatten() {
            copy.push(operation.clone());
        }
        copy
    }

    /// Drops the completed operations from the list of `key`, and the key if its list is
    /// left empty.
    pub(super) fn remove_completed(&self, key: &K) {
        // Declared before the guard, so dropped after the lock is released.
        let mut removed = Batch::new();
        let mut lists = self.lists.lock();
        if let Some(list) = lists.get_mut(key) {
            if !move_out_completed(list, &mut removed) {
                lists.remove(key);
                shrink_if_sparse(&mut lists);
            }
        }
    }
}

/// Moves the completed operations of `list` to `removed`, keeping the order of the others,
/// and gives back the list's memory once it is mostly empty. Returns whether any are left.
fn move_out_completed<Op: DelayedOperation>(
    list: &mut Vec<Delayed<Op>>,
    removed: &mut Batch<Delayed<Op>>,
) -> bool {
    // A clone goes to `removed`, so the last reference is dropped after the caller
    // releases its lock.
    list.retain(|operation| {
        let completed = operation.is_completed();
        if completed {
            removed.push(operation.clone());
        }
        !completed
    });
    if list.capacity() > 16 && list.len() * 4 < list.capacity() {
        list.shrink_to(list.len() * 2);
    }
    !list.is_empty()
}

/// Gives back a shard map's memory once most of its keys are gone.
fn shrink_if_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Picks a key's shard: FxHash's scheme (rustc's hasher: one rotate, xor and multiply per
/// word of the key, an integer being one word) with the golden-ratio multiplier, started
/// from a per-purgatory seed. A few nanoseconds for a small key, against some twenty for
/// SipHash. The multiply carries every bit of the key into the top bits, which are the ones
/// [`WatchLists::shard`] uses. Not resistant to keys chosen to collide: the worst such keys
/// can do is crowd one shard's mutex, as each shard's map still hashes with SipHash.
struct ShardHasher(u64);

/// 2^64 divided by the golden ratio (Knuth's Fibonacci hashing), not FxHash's 2^64 / pi:
/// multiples of it spread evenly over the top bits, where pi's close fraction 113/355
/// bunches sequential keys into some 355 of the 512 shards.
const SHARD_HASH_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for ShardHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(SHARD_HASH_MULTIPLIER);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Items kept on the stack while there are at most [`BATCH_INLINE`] of them (in the
/// array), the rest in the `Vec`: the copy of a watch list that `check_and_complete` walks,
/// and the completed operations taken out of a list to be dropped after its lock is
/// released. Most lists are short, so most calls allocate nothing.
pub(super) struct Batch<T>([Option<T>; BATCH_INLINE], Vec<T>);

impl<T> Batch<T> {
    fn new() -> Batch<T> {
        Batch([const { None }; BATCH_INLINE], Vec::new())
    }

    fn push(&mut self, item: T) {
        match self.0.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(item),
            None => self.1.push(item),
        }
    }

    /// The items, in push order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flatten().chain(&self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys per shard for `keys`, hashed the way `WatchLists::shard` does.
    fn spread(keys: impl Iterator<Item = impl Hash>) -> Vec<usize> {
        let mut per_shard = vec![0; SHARDS];
        for key in keys {
            let mut hasher = ShardHasher(0x1234_5678_9abc_def0);
            key.hash(&mut hasher);
            per_shard[(hasher.finish() >> (u64::BITS - SHARD_BITS)) as usize] += 1;
        }
        per_shard
    }

    #[test]
    fn shard_hash_spreads_keys_that_a_modulo_would_not() {
        // 16 keys per shard on average; sequential keys, multiples of the shard count (all
        // in shard 0 under `hash % 512` of an identity hash), and short strings.
        let sequential = spread(0..SHARDS as u64 * 16);
        let strided = spread((0..SHARDS as u64 * 16).map(|i| i * SHARDS as u64));
        let names = spread((0..SHARDS * 16).map(|i| format!("orders-{i}")));
        for per_shard in [sequential, strided, names] {
            let (min, max) = (per_shard.iter().min(), per_shard.iter().max());
            assert!(min >= Some(&2) && max <= Some(&40), "{min:?}..{max:?}");
        }
    }

    #[test]
    fn batch_keeps_push_order_past_its_inline_part() {
        let mut batch = Batch::new();
        assert_eq!(batch.iter().count(), 0);
        (0..20).for_each(|i| batch.push(i));
        assert_eq!(batch.iter().count(), 20);
        assert!(batch.iter().copied().eq(0..20));
    }
}
