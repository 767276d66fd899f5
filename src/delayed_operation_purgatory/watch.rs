//! The purgatory's watch lists (Kafka's `WatcherList`s and their `Watchers`): 512 shards of
//! key → operations, the hasher that picks a key's shard, and the small batch that copies a
//! list out of its lock.
//!
//! # Ground rules
//!
//! - **Watch lists.** 512 shards (Kafka's `SHARDS`); a key belongs to the shard that the
//!   top bits of its FxHash-style hash (seeded per purgatory, see `ShardHasher`) pick.
//!   Each shard is one [`Mutex`] around a `HashMap<K, Vec<Delayed<Op>>>` (Kafka's
//!   `WatcherList` and its `Watchers`) and the shard's entry count. The mutex guards both;
//!   a key is inserted and removed, and an operation appended to or dropped from its list,
//!   only under it. A key with an empty list is removed in the same critical section that
//!   emptied it, so no operation is ever appended to a list that has left the map.
//! - **No user code under a shard lock.** `check_and_complete` copies the key's list
//!   (clones of `Delayed`, an `Arc` each; on the stack up to 8 of them) under the lock,
//!   releases it, and only then asks each operation. Operations dropped from a list are
//!   moved out and dropped after the lock is released, so an operation's `Drop` never runs
//!   under it either. (A key's `Drop` may; keys are plain values.)
//! - **Lock order:** a shard lock is a leaf here: no call holds two, and nothing takes an
//!   operation's lock or a timer's lock while holding one. It may be taken under an
//!   operation's lock (`try_complete_else_watch` watches under it). The whole order is in
//!   the [purgatory's ground rules](super).
//! - **Kafka's `estimatedTotalOperations`** is split so that no thread writes a counter
//!   another shard's users write: each shard's `operations` (an atomic, bumped under the
//!   shard's lock when an operation's *first* key is watched there, so each operation is
//!   counted once) only grows; [`WatchLists::operations_ever`] sums them, and the
//!   purgatory keeps what its purges have taken off that sum.

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
/// Hashed with a fresh `RandomState` to draw a purgatory's shard seed.
const SHARD_SEED_SALT: u64 = 0x7075_7267_6174_6f72;

/// The watch lists of one purgatory: [`SHARDS`] shards, and the seed that spreads keys
/// over them.
pub(super) struct WatchLists<K, Op> {
    /// See the module's ground rules.
    shards: Box<[Shard<K, Op>]>,
    /// Seeds the [`ShardHasher`] that picks a key's shard; random per purgatory.
    /// Independent of the shards' own maps' hashers.
    shard_seed: u64,
}

impl<K, Op> WatchLists<K, Op> {
    /// Returns the number of watch-list entries, completed operations not yet purged
    /// included. Takes each shard's lock in turn.
    pub(super) fn watched(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lists.lock().watched)
            .sum()
    }

    /// Operations ever watched, each counted once (Kafka's `estimatedTotalOperations` before
    /// any purge): 512 relaxed loads.
    pub(super) fn operations_ever(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.operations.load(Ordering::Relaxed))
            .fold(0, usize::wrapping_add)
    }
}

/// One shard of the watch lists (Kafka's `WatcherList`), on cache lines of its own so that
/// threads on neighbouring shards do not contend.
#[repr(align(128))]
pub(super) struct Shard<K, Op> {
    lists: Mutex<ShardLists<K, Op>>,
    /// Operations whose first key is in this shard, ever watched: this shard's part of
    /// Kafka's `estimatedTotalOperations`. Only grows; bumped under `lists`' lock (so the
    /// cache line is already this thread's), read without it by `advance_clock`.
    operations: AtomicUsize,
}

/// What a shard's mutex guards.
struct ShardLists<K, Op> {
    /// The operations watched under each key (Kafka's `Watchers`), in watch order. Never an
    /// empty list.
    watchers: HashMap<K, Vec<Delayed<Op>>>,
    /// Entries in all of `watchers`' lists.
    watched: usize,
}

impl<K, Op> WatchLists<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// Empty lists, with a fresh random seed.
    pub(super) fn new() -> WatchLists<K, Op> {
        WatchLists {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    lists: Mutex::new(ShardLists {
                        watchers: HashMap::new(),
                        watched: 0,
                    }),
                    operations: AtomicUsize::new(0),
                })
                .collect(),
            shard_seed: RandomState::new().hash_one(SHARD_SEED_SALT),
        }
    }

    /// The shard `key` belongs to: the top bits of its [`ShardHasher`] hash.
    pub(super) fn shard(&self, key: &K) -> &Shard<K, Op> {
        let mut hasher = ShardHasher::new(self.shard_seed);
        key.hash(&mut hasher);
        &self.shards[(hasher.finish() >> (u64::BITS - SHARD_BITS)) as usize]
    }

    /// Appends `operation` to the watch list of `key` (Kafka's `watchForOperation`); if
    /// `count`, adds it to the estimate of watched operations too.
    pub(super) fn watch(&self, key: &K, operation: &Delayed<Op>, count: bool) {
        let shard = self.shard(key);
        let mut guard = shard.lists.lock();
        let lists = &mut *guard;
        match lists.watchers.get_mut(key) {
            Some(list) => list.push(operation.clone()),
            None => {
                // Room for 4 from the start: what the first push would grow it to anyway.
                let mut list = Vec::with_capacity(4);
                list.push(operation.clone());
                lists.watchers.insert(key.clone(), list);
            }
        }
        lists.watched += 1;
        if count {
            shard.operations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops every completed operation from every watch list (Kafka's purge). Returns how
    /// many entries it dropped.
    pub(super) fn purge_completed(&self) -> usize {
        let mut purged = 0;
        let mut removed = Batch::with_capacity(0);
        for shard in self.shards.iter() {
            {
                let mut guard = shard.lists.lock();
                let shard = &mut *guard;
                let before = removed.len();
                shard.watchers.retain(|_, list| {
                    move_out_completed(list, &mut removed);
                    !list.is_empty()
                });
                shrink_if_sparse(&mut shard.watchers);
                shard.watched -= removed.len() - before;
            }
            purged += removed.len();
            // Dropped shard by shard, with no lock held.
            removed.clear();
        }
        purged
    }

    /// Stops watching `key`: removes its list, and returns the operations that were in it.
    pub(super) fn remove_key(&self, key: &K) -> Vec<Delayed<Op>> {
        let mut guard = self.shard(key).lists.lock();
        let shard = &mut *guard;
        match shard.watchers.remove(key) {
            Some(list) => {
                shard.watched -= list.len();
                list
            }
            None => Vec::new(),
        }
    }
}

impl<K, Op> Shard<K, Op>
where
    K: Eq + Hash,
    Op: DelayedOperation,
{
    /// A copy of the watch list of `key`, if it has one: clones (an `Arc` each) on the
    /// stack for a short list, so that the common check allocates nothing.
    pub(super) fn watched_under(&self, key: &K) -> Option<Batch<Delayed<Op>>> {
        let guard = self.lists.lock();
        let list = guard.watchers.get(key)?;
        let mut copy = Batch::with_capacity(list.len());
        for operation in list {
            copy.push(operation.clone());
        }
        Some(copy)
    }

    /// Drops the completed operations from the list of `key`, and the key if its list is
    /// left empty. Returns how many it dropped.
    pub(super) fn remove_completed(&self, key: &K) -> usize {
        let mut removed = Batch::with_capacity(0);
        {
            let mut guard = self.lists.lock();
            let lists = &mut *guard;
            let Some(list) = lists.watchers.get_mut(key) else {
                return 0;
            };
            move_out_completed(list, &mut removed);
            if list.is_empty() {
                lists.watchers.remove(key);
                shrink_if_sparse(&mut lists.watchers);
            }
            lists.watched -= removed.len();
        }
        // The operations are dropped here, after the lock was released.
        removed.len()
    }
}

/// Moves the completed operations of `list` to `removed`, keeping the order of the others,
/// and gives back the list's memory once it is mostly empty.
fn move_out_completed<Op: DelayedOperation>(
    list: &mut Vec<Delayed<Op>>,
    removed: &mut Batch<Delayed<Op>>,
) {
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
}

/// Gives back a shard map's memory once most of its keys are gone.
fn shrink_if_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Picks a key's shard: FxHash's scheme (rustc's hasher: one rotate, xor and multiply per
/// word of the key) with the golden-ratio multiplier, started from a per-purgatory seed. A few nanoseconds for a small key, against
/// some twenty for SipHash. The multiply carries every bit of the key into the top bits,
/// which are the ones [`WatchLists::shard`] uses. Not resistant to keys chosen to collide: the
/// worst such keys can do is crowd one shard's mutex, as each shard's map still hashes with
/// SipHash.
struct ShardHasher {
    hash: u64,
}

impl ShardHasher {
    /// 2^64 divided by the golden ratio (Knuth's Fibonacci hashing), not FxHash's 2^64 / pi:
    /// multiples of it spread evenly over the top bits, where pi's close fraction 113/355
    /// bunches sequential keys into some 355 of the 512 shards.
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    fn new(seed: u64) -> ShardHasher {
        ShardHasher { hash: seed }
    }

    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

/// `Hasher::write_u8` and its siblings: the integer, widened, as one word.
macro_rules! write_words {
    ($($name:ident: $int:ty),*) => {
        $(
            #[inline]
            fn $name(&mut self, i: $int) {
                self.add(i as u64);
            }
        )*
    };
}

impl Hasher for ShardHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    // Integers are one word each, as in rustc's FxHasher.
    write_words!(write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64, write_usize: usize);

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Items kept on the stack while there are at most [`Batch::INLINE`] of them, the rest in
/// a `Vec`: the copy of a watch list that `check_and_complete` walks, and the completed
/// operations taken out of a list to be dropped after its lock is released. Most lists are
/// short, so most calls allocate nothing.
pub(super) struct Batch<T> {
    inline: [Option<T>; Batch::<()>::INLINE],
    len: usize,
    spilled: Vec<T>,
}

impl<T> Batch<T> {
    const INLINE: usize = 8;

    /// An empty batch, with room for `capacity` items in all.
    fn with_capacity(capacity: usize) -> Batch<T> {
        Batch {
            inline: [const { None }; Batch::<()>::INLINE],
            len: 0,
            spilled: Vec::with_capacity(capacity.saturating_sub(Self::INLINE)),
        }
    }

    fn push(&mut self, item: T) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = Some(item),
            None => self.spilled.push(item),
        }
        self.len += 1;
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Drops the items, keeping the `Vec`'s memory.
    fn clear(&mut self) {
        self.inline.iter_mut().for_each(|slot| *slot = None);
        self.spilled.clear();
        self.len = 0;
    }

    /// The items, in push order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline.iter().flatten().chain(&self.spilled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys per shard for `keys`, hashed the way `WatchLists::shard` does.
    fn spread(keys: impl Iterator<Item = impl Hash>) -> Vec<usize> {
        let mut per_shard = vec![0; SHARDS];
        for key in keys {
            let mut hasher = ShardHasher::new(0x1234_5678_9abc_def0);
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
        let mut batch = Batch::with_capacity(20);
        (0..20).for_each(|i| batch.push(i));
        assert_eq!(batch.len(), 20);
        assert!(batch.iter().copied().eq(0..20));
        batch.clear();
        assert_eq!((batch.len(), batch.iter().count()), (0, 0));
    }
}
