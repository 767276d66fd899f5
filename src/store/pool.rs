//! The shards of all timers, pooled for the life of the process.
//!
//! # Ground rules
//!
//! - A shard is a few hundred bytes; its entries' memory is mapped and unmapped as they come
//!   and go (see `chunks`). Shards themselves are never freed: a timer takes them from
//!   [`POOL`] and gives them back, emptied, when it is dropped. So a handle can keep a
//!   `&'static` reference to its shard, and `add` touches no reference count.
//! - The generations a shard handed out stay with it (see `slots`), so a handle of an old
//!   timer can never cancel a task of the next timer to use the shard.
//! - [`POOL`]'s mutex is a leaf (see `crate::lock_order`): a timer's shards are taken and
//!   given back one lock at a time, with no other lock held.
//! - Every shard has a number, its place in [`BY_ID`], written once (under [`POOL`]'s lock)
//!   before the shard is first handed out: a handle keeps that number, 20 bits, instead of
//!   an 8-byte reference (see `handle`).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::released::Released;
use super::shard::{Counts, Shard};

/// Shards not in use by any timer.
static POOL: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

/// Bits of a shard's number.
pub(crate) const SHARD_ID_BITS: u32 = 20;

/// Every shard made, by number (number 0 is none), in leaves of `1 << LEAF_BITS` numbers
/// made as shards are: a flat table would put 16 MiB into every binary's data.
static BY_ID: [OnceLock<Box<Leaf>>; 1 << (SHARD_ID_BITS - LEAF_BITS)] =
    [const { OnceLock::new() }; 1 << (SHARD_ID_BITS - LEAF_BITS)];

/// Bits of a shard's number that pick its place in a leaf of [`BY_ID`].
const LEAF_BITS: u32 = 10;
const LEAF_MASK: usize = (1 << LEAF_BITS) - 1;

/// One leaf of [`BY_ID`].
type Leaf = [OnceLock<&'static Shard>; 1 << LEAF_BITS];

/// Makes a shard for the life of the process and numbers it. The caller holds [`POOL`]'s
/// lock, which keeps the numbers apart.
fn make_shard(pool: &[&'static Shard]) -> &'static Shard {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let id = MADE.load(Ordering::Relaxed) + 1;
    assert!(
        id < 1 << SHARD_ID_BITS,
        "more than {} timer shards at once ({} pooled): too many live timers",
        (1 << SHARD_ID_BITS) - 1,
        pool.len()
    );
    MADE.store(id, Ordering::Relaxed);
    let leaf = BY_ID[id >> LEAF_BITS]
        .get_or_init(|| Box::new([const { OnceLock::new() }; 1 << LEAF_BITS]));
    leaf[id & LEAF_MASK].get_or_init(|| Box::leak(Box::new(Shard::new(id as u32))))
}

/// Returns the shard numbered `id` (see [`Shard::id`]), if there is one.
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
    /// place in the set (see `Shard::home`).
    id: u64,
}

impl Shards {
    /// Takes `count` shards from the pool (making new ones if it runs out). With `pending`,
    /// the shards keep the timer's exact count of pending entries there; with `held`, of
    /// held ones (see `ShardState::reset`).
    pub(crate) fn take(
        count: usize,
        pending: Option<Arc<AtomicUsize>>,
        held: Option<Arc<AtomicUsize>>,
    ) -> Shards {
        let mut pool = POOL.lock();
        let shards: Box<[&'static Shard]> = (0..count)
            .map(|_| pool.pop().unwrap_or_else(|| make_shard(&pool)))
            .collect();
        drop(pool);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        for (stripe, shard) in shards.iter().enumerate() {
            shard.set_home(id, stripe);
        }
        for shard in &shards {
            shard.lock().reset(pending.clone(), held.clone());
        }
        Shards { shards, id }
    }

    /// Returns the counts of all shards, without locking.
    pub(crate) fn counts(&self) -> Counts {
        self.shards
            .iter()
            .map(|shard| shard.counts())
            .fold(Counts::default(), Counts::plus)
    }

    /// Returns the bytes mapped for the entries of all shards (each locked in turn).
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().mapped_bytes())
            .sum()
    }
}

impl Shards {
    /// Returns the place of `shard` in this set, if it is one of its shards: O(1), from
    /// what the shard recorded when the set took it.
    #[inline]
    pub(crate) fn stripe_of(&self, shard: &Shard) -> Option<usize> {
        let (id, stripe) = shard.home();
        (id == self.id).then_some(stripe)
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
        for shard in self.shards.iter() {
            shard.set_home(0, 0);
            let mut state = shard.lock();
            cleared.absorb(state.clear());
            state.reset(None, None);
        }
        // Whatever was still waiting is dropped here, with no lock held.
        drop(cleared);
        POOL.lock().extend(self.shards.iter().copied());
    }
}

impl fmt::Debug for Shards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shards")
            .field("count", &self.shards.len())
            .field("pending", &self.counts().pending())
            .finish()
    }
}
