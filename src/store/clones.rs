//! What the clones of a handle share with their original: whether a cancel through any of
//! them won, and the entry's latest expiration.
//!
//! # Ground rules
//!
//! - Part of a shard's state, guarded by the shard's lock (see `crate::lock_order`).
//! - A handle that was never cloned keeps its own flag and expiration (see `handle`); the
//!   first clone of a handle creates the record for both, with the original's state, and
//!   the last of them to be dropped removes it. So an entry that is never cloned costs
//!   nothing here, unless its expiration is beyond what a handle holds itself (more than
//!   278 years from the clock's zero, other than the saturated ends): its one handle then
//!   keeps a record too.

use std::collections::HashMap;

use super::slots::EntryKey;

/// The record the handles of one entry share.
#[derive(Debug)]
struct Record {
    handles: usize,
    cancelled: bool,
    expiration_ms: i64,
}

/// The records of a shard's cloned handles, keyed by their entry.
#[derive(Debug, Default)]
pub(crate) struct Clones(HashMap<EntryKey, Record>);

impl Clones {
    /// Registers one more handle of `key`'s entry: the first clone of a handle creates the
    /// record for both, with the original's state; later clones count themselves in.
    pub(crate) fn add(&mut self, key: EntryKey, cancelled: bool, expiration_ms: i64) {
        self.0
            .entry(key)
            .and_modify(|record| record.handles += 1)
            .or_insert(Record {
                handles: 2,
                cancelled,
                expiration_ms,
            });
    }

    /// Registers a handle of `key`'s entry that was never cloned but needs a record: its
    /// expiration is beyond what the handle holds itself (see `handle`). Another handle
    /// made from the entry's place (a keyed timer's) may have opened one already: this one
    /// counts itself in.
    pub(crate) fn open(&mut self, key: EntryKey, cancelled: bool, expiration_ms: i64) {
        self.0
            .entry(key)
            .and_modify(|record| {
                record.handles += 1;
                record.expiration_ms = expiration_ms;
                record.cancelled |= cancelled;
            })
            .or_insert(Record {
                handles: 1,
                cancelled,
                expiration_ms,
            });
    }

    /// Unregisters one handle of `key`'s entry.
    pub(crate) fn remove(&mut self, key: EntryKey) {
        if let Some(record) = self.0.get_mut(&key) {
            record.handles -= 1;
            if record.handles == 0 {
                self.0.remove(&key);
            }
        }
    }

    /// Records that a cancel through one of `key`'s handles won.
    pub(crate) fn set_cancelled(&mut self, key: EntryKey) {
        if let Some(record) = self.0.get_mut(&key) {
            record.cancelled = true;
        }
    }

    /// True if a cancel through one of `key`'s handles won.
    pub(crate) fn cancelled(&self, key: EntryKey) -> bool {
        self.0.get(&key).is_some_and(|record| record.cancelled)
    }

    /// Records a new expiration for the handles of `key`'s entry, if they share a record.
    pub(crate) fn set_expiration(&mut self, key: EntryKey, expiration_ms: i64) {
        if let Some(record) = self.0.get_mut(&key) {
            record.expiration_ms = expiration_ms;
        }
    }

    /// Returns the number of records.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Returns the expiration that the handles of `key`'s entry share, if they share one.
    pub(crate) fn expiration(&self, key: EntryKey) -> Option<i64> {
        self.0.get(&key).map(|record| record.expiration_ms)
    }
}
