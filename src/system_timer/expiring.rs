//! Where the entries that come due under a shard's lock go (Kafka's `addTimerTaskEntry`
//! and the hand-over of its executor): out of the store into a batch for the executor, or,
//! on a timer with `max_in_flight`, into the shard's backlog (see `backlog`). `add`,
//! `reschedule` and the flush all end here.

use crate::store::{Count, Entry, ReadGuard, ShardState};
use crate::task::Expired;
use crate::threads::executor::Executor;
use crate::wheel::TimingWheel;

/// Kafka's `addTimerTaskEntry`: puts `entry` of `shard` into the wheel, or, if the wheel
/// says it is expired, hands it to `expiring`.
#[inline]
pub(super) fn add_timer_task_entry(
    wheel: &TimingWheel,
    shard: &mut ShardState,
    entry: Entry,
    expiring: &mut Expiring,
) {
    if !wheel.add(shard, entry) {
        expiring.expire(shard, entry);
    }
}

/// Where the entries that come due under a shard's lock go: out of the store into a batch
/// for the executor, or, on a timer with `max_in_flight`, into the shard's backlog, where
/// they stay pending until a refill hands them over (see `backlog`).
///
/// Its methods are `#[inline]`: `add`, `reschedule` and the flush live in other codegen
/// units, and without it `reschedule` took 12 more instructions (`benches/instructions.sh`).
pub(super) struct Expiring {
    batch: Vec<Expired>,
    /// True on a timer with `max_in_flight`.
    hold: bool,
    held: usize,
}

impl Expiring {
    /// For a few entries at most: a batch buffer is allocated only if one expires.
    #[inline]
    pub(super) fn unbatched(executor: &Executor) -> Expiring {
        Expiring {
            batch: Vec::new(),
            hold: executor.is_bounded(),
            held: 0,
        }
    }

    /// For a flush chunk: a batch buffer taken before the shard is locked (a new one is an
    /// allocation, which with glibc may consolidate an arena; see `threads::delay_queue`).
    pub(super) fn batched(executor: &Executor) -> Expiring {
        let hold = executor.is_bounded();
        Expiring {
            batch: if hold { Vec::new() } else { executor.batch() },
            hold,
            held: 0,
        }
    }

    /// Takes the due `entry` of `shard`, unlisted, out of the store into the batch, or holds
    /// it in the backlog.
    #[inline]
    pub(super) fn expire(&mut self, shard: &mut ShardState, entry: Entry) {
        if self.hold {
            shard.hold(entry.index);
            self.held += 1;
        } else {
            self.batch.push(Expired {
                task: shard.remove(entry.index),
                expiration_ms: entry.expiration_ms,
            });
        }
    }

    /// True if an entry came due.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.held == 0
    }

    /// Hands the batch to the executor and unlocks `read`, the shard the entries came from:
    /// counted expired and in flight under the lock that took them out of the store, so that
    /// `size()` no longer counts them and a `close` waits for them; sent once the lock is
    /// released (see `Executor::hand_over`). Then, if entries were held, asks for a refill.
    #[inline]
    pub(super) fn finish<T>(self, executor: &Executor, read: ReadGuard<'_, T>) {
        read.count(Count::Expired, self.batch.len() as u64);
        let handover = executor.hand_over(self.batch);
        drop(read);
        handover.send();
        if self.held > 0 {
            executor.refill();
        }
    }
}
