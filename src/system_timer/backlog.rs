//! The backlog of a timer with `max_in_flight`: where tasks that came due wait while the
//! executor has its maximum of tasks in flight. Kafka queues expired tasks on its executor
//! without bound, where they can no longer be cancelled; here they stay in the store until
//! the executor has room.
//!
//! Each shard keeps its held entries in a priority queue by expiration, then the order
//! they came due (`store::held`): an entry that comes due under a shard's lock goes there
//! rather than out of the store (`Expiring`), so it stays pending, counted by `size()`, and
//! a `cancel` takes it out in O(log n). A refill (`threads::executor`, "The bound on tasks
//! in flight") takes held entries out of the shard whose oldest one expired first, which
//! each shard publishes as it unlocks (`Shard::oldest_held_ms`): the shards' queues merged,
//! oldest expiration first.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - [`Backlog::take`] locks one shard at a time, with no other lock held, and takes
//!   nothing once `closed` is set (under every shard's lock, by `close`), so no task reaches
//!   the executor after `close` cleared the store.
//! - `held` counts the entries of every shard's backlog; shards change it under their lock,
//!   with `SeqCst` (see `ShardState::hold`).
//! - Tasks of one expiration held in different shards go over in no promised order, as
//!   tasks due in the same tick run in none.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::executor::HeldTasks;
use crate::store::shard::{Count, Shard};
use crate::task::Expired;

/// The held tasks of one timer, across its shards.
#[derive(Debug)]
pub(super) struct Backlog {
    shards: Box<[&'static Shard]>,
    /// The timer's `closed` flag.
    closed: Arc<AtomicBool>,
    /// Entries held in all shards.
    held: Arc<AtomicUsize>,
}

impl Backlog {
    pub(super) fn new(
        shards: &[&'static Shard],
        closed: Arc<AtomicBool>,
        held: Arc<AtomicUsize>,
    ) -> Backlog {
        Backlog {
            shards: shards.into(),
            closed,
            held,
        }
    }

    /// The shard whose oldest held entry expires first, and the expiration of the next
    /// shard's oldest one, from what the shards published.
    fn oldest_two(&self) -> Option<(usize, i64)> {
        let (mut first, mut first_ms, mut second_ms) = (None, i64::MAX, i64::MAX);
        for (at, shard) in self.shards.iter().enumerate() {
            let oldest_ms = shard.oldest_held_ms();
            if oldest_ms == i64::MAX {
                continue;
            }
            if first.is_none() || oldest_ms < first_ms {
                second_ms = first_ms;
                (first, first_ms) = (Some(at), oldest_ms);
            } else {
                second_ms = second_ms.min(oldest_ms);
            }
        }
        first.map(|at| (at, second_ms))
    }

    /// Takes up to `max` held entries out of every shard in turn, for when no shard has
    /// published any yet (a holder still has its shard locked): this waits for its lock.
    fn take_any(&self, max: usize, out: &mut Vec<Expired>) -> usize {
        let mut taken = 0;
        for shard in self.shards.iter() {
            if taken == max {
                break;
            }
            let mut state = shard.lock();
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            let n = state.take_held(max - taken, i64::MAX, out);
            state.count(Count::Expired, n as u64);
            taken += n;
        }
        taken
    }
}

impl HeldTasks for Backlog {
    fn len(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    fn take(&self, max: usize, out: &mut Vec<Expired>) -> usize {
        let mut taken = 0;
        while taken < max {
            let Some((at, second_ms)) = self.oldest_two() else {
                return taken + self.take_any(max - taken, out);
            };
            let mut state = self.shards[at].lock();
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            // From this shard while its entries are no later than the next shard's oldest.
            // None, if what it published is gone (cancelled, or taken by another refill):
            // unlocking publishes it anew.
            let n = state.take_held(max - taken, second_ms, out);
            state.count(Count::Expired, n as u64);
            taken += n;
        }
        taken
    }
}
