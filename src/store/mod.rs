//! Where a timer's entries live: shards of slots and list chains, in memory the timer maps
//! itself, behind the striped reader-writer lock that guards the wheel (Kafka gives every
//! `TimerTaskEntry` an object linked into its bucket, and guards the wheel with one lock).
//!
//! - [`shard`]: one shard, its state behind its mutex, the striped lock whose stripes the
//!   shards are, and the pool of shards.
//! - [`chunks`]: the slots and the memory they live in, mapped in 64 KiB chunks.
//! - [`held`]: a shard's backlog of due tasks held by `max_in_flight`.

pub(crate) mod chunks;
pub(crate) mod held;
pub(crate) mod shard;
