//! Memory taken out of a shard under its lock, given back after it.
//!
//! # Ground rules
//!
//! - A shard's lock is held while its chunks empty and while `close` clears it, but no
//!   chunk is unmapped and no task dropped under it (see `crate::lock_order`): what was
//!   taken out waits in a [`Released`] until its owner drops it with no lock held.
//! - Dropping a `Released` drops its tasks first (user code, each once), then unmaps the
//!   chunks.

use super::chains::Block;
use super::region::Region;
use super::slots::{Slot, Slots};
use crate::task::TimerTask;

/// Memory taken out of a shard — emptied chunks, or everything a `clear` took, tasks
/// included — to be dropped with no lock held.
#[derive(Default)]
#[must_use = "dropping this drops the tasks: do it after releasing every lock"]
pub(crate) struct Released {
    pub(super) slots: Vec<Region<Slot>>,
    pub(super) blocks: Vec<Region<Block>>,
    /// False for chunks that a shard emptied and gave back: no task to look for.
    pub(super) holds_tasks: bool,
}

impl Released {
    /// Adds `other`'s memory to this.
    pub(crate) fn absorb(&mut self, mut other: Released) {
        self.slots.append(&mut other.slots);
        self.blocks.append(&mut other.blocks);
        self.holds_tasks |= other.holds_tasks;
    }

    /// Returns the number of tasks in it.
    pub(crate) fn task_count(&self) -> usize {
        Slots::count_tasks(&self.slots)
    }

    /// Takes the tasks out.
    pub(crate) fn into_tasks(mut self) -> Vec<Box<dyn TimerTask>> {
        Slots::take_tasks(&mut self.slots)
    }
}

impl Drop for Released {
    fn drop(&mut self) {
        if self.holds_tasks {
            drop(Slots::take_tasks(&mut self.slots));
        }
    }
}
