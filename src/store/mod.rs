//! Where a timer's entries live: shards of slots and list chains, in memory the timer maps
//! itself, behind the striped reader-writer lock that guards the wheel.
//!
//! Kafka gives every `TimerTaskEntry` an object linked into its bucket, and guards the
//! wheel with one `ReentrantReadWriteLock`. Here a thread adds to the shard its hint picks,
//! so adding threads rarely share a lock or a cache line:
//!
//! - [`lock`]: the reader-writer lock, striped over the shards: a reader locks one shard
//!   (which it then writes), a writer all of them.
//! - [`shard`]: one shard, its state behind its mutex, and its published counts;
//!   [`pool`]: the shards of all timers, pooled for the life of the process.
//! - [`slots`]: 32-byte slots, one per entry; [`chains`]: each list's part in a shard, as
//!   chains of slot indices; [`held`]: the shard's backlog of due entries, a heap;
//!   [`clones`]: what cloned handles share.
//! - [`chunks`] and [`region`]: the memory both live in, mapped and unmapped in 64 KiB
//!   chunks; [`released`]: memory taken out under a lock and given back after it.
//! - [`handle`]: the [`TimerTaskEntry`] a caller holds.
//!
//! The lock order is in `crate::lock_order`.

mod chains;
mod chunks;
mod clones;
mod handle;
mod held;
mod lock;
mod pool;
mod region;
mod released;
mod shard;
mod slots;

pub use handle::TimerTaskEntry;
pub(crate) use lock::{ReadGuard, StripedRwLock, WriteGuard, thread_hint};
pub(crate) use pool::Shards;
pub(crate) use released::Released;
pub(crate) use shard::{Count, Entry, Shard, ShardState};
pub(crate) use slots::EntryKey;
