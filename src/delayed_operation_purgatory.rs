//! Kafka's `DelayedOperationPurgatory`: operations watched under keys until they complete or
//! time out, its builder, its sharded watch lists and its expiration reaper.
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
//! - **Lock order:** an operation's lock → one shard lock. `try_complete_else_watch` takes
//!   shard locks while it holds the operation's lock; nothing takes an operation's lock
//!   while holding a shard lock, and no call holds two shard locks. No shard lock is held
//!   while the timer's locks are taken (`Timer::add`, a cancel); `docs/design.md`
//!   ("Purgatory") gives the whole order, timer and operation locks included.
//! - **An operation's life.** Pending and watched under its keys, with a timeout in the
//!   timer; then completed, by exactly one of: a `try_complete` that said yes
//!   (`try_complete_else_watch`, `check_and_complete`, [`Delayed::try_complete`]),
//!   [`Delayed::force_complete`], or the timer running its timeout. Completing cancels the
//!   timeout at once (see [`Delayed`]). A completed operation leaves a watch list when
//!   `check_and_complete` walks that key, or when the reaper purges.
//! - **Kafka's `estimatedTotalOperations`** is split so that no thread writes a counter
//!   another shard's users write: each shard's `operations` (an atomic, bumped under the
//!   shard's lock when an operation's *first* key is watched there, so each operation is
//!   counted once) only grows, and `purged_operations` (written only by `advance_clock`)
//!   holds how much of their sum purges have taken off. The estimate is the sum minus that;
//!   `advance_clock` purges once it exceeds the timer's size by more than the purge
//!   interval, as in Kafka, and then takes off only what it counted.
//! - **Reaper.** A thread named `ExpirationReaper-{broker_id}-{purgatory_name}` calls
//!   [`advance_clock`](DelayedOperationPurgatory::advance_clock) until `shutdown`, which
//!   asks it to stop, closes the timer (waking an `advance_clock` blocked in its poll), and
//!   joins the thread. It is the same reaper loop as `SystemTimerReaper`'s
//!   (`system_timer_reaper::ReaperThread`): after a poll with nothing flushed (a closed or
//!   mock timer) it waits out the rest of the poll, so it never spins and still stops at
//!   once, and a panic in a poll is logged and the loop goes on.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::delayed_operation::Expiry;
use crate::rt::reaper::ReaperThread;
use crate::{Delayed, DelayedOperation, SystemTimer, Timer};

/// Watch-list shards (Kafka's `SHARDS`): `1 << SHARD_BITS`.
const SHARDS: usize = 1 << SHARD_BITS;
/// A shard's index is this many top bits of its key's [`ShardHasher`] hash.
const SHARD_BITS: u32 = 9;
/// Hashed with a fresh `RandomState` to draw a purgatory's shard seed.
const SHARD_SEED_SALT: u64 = 0x7075_7267_6174_6f72;
/// How long one poll of the expiration reaper waits (Kafka's `advanceClock(200L)`).
const REAPER_POLL_MS: i64 = 200;
/// Kafka's default purge interval.
const PURGE_INTERVAL: usize = 1_000;

/// Kafka's `DelayedOperationPurgatory`: keeps operations that wait for a condition or a
/// timeout, whichever comes first, watched under one or more keys.
///
/// A caller hands an operation to [`try_complete_else_watch`](Self::try_complete_else_watch)
/// with the keys it depends on (topic-partitions, say). When something changes for a key
/// (a replica acknowledged, bytes arrived), the caller calls
/// [`check_and_complete`](Self::check_and_complete) for it, which completes the operations
/// watched under that key that can now complete. An operation that is not completed in
/// time expires: the timer runs its `on_complete`, then its `on_expiration`.
///
/// [`new`](Self::new) gives Kafka's defaults: its own [`SystemTimer`] and an expiration
/// reaper thread that drives it and purges completed operations from the watch lists.
/// [`builder`](Self::builder) sets everything else. Share a purgatory between threads by
/// reference or `Arc`; it is `Send + Sync`. Dropping it shuts it down.
///
/// # Examples
///
/// A purgatory on a [`MockTimer`](crate::MockTimer), with the reaper off, so that the test
/// moves time itself:
///
/// ```
/// use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer, Timer};
///
/// #[derive(Default)]
/// struct Produce {
///     acks: AtomicU32,
///     responses: AtomicUsize,
///     timeouts: AtomicUsize,
/// }
///
/// impl DelayedOperation for Produce {
///     fn delay_ms(&self) -> i64 { 1_000 }
///     fn try_complete(&self) -> bool { self.acks.load(Ordering::SeqCst) >= 3 }
///     fn on_complete(&self) { self.responses.fetch_add(1, Ordering::SeqCst); }
///     fn on_expiration(&self) { self.timeouts.fetch_add(1, Ordering::SeqCst); }
/// }
///
/// let timer = Arc::new(MockTimer::new());
/// let purgatory = DelayedOperationPurgatory::<&str, Produce>::builder("produce")
///     .timer(Arc::clone(&timer))
///     .reaper_enabled(false)
///     .build();
///
/// let acked = Delayed::new(Produce::default());
/// let late = Delayed::new(Produce::default());
/// assert!(!purgatory.try_complete_else_watch(&acked, &["orders-0"]));
/// assert!(!purgatory.try_complete_else_watch(&late, &["orders-1"]));
/// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (2, 2));
///
/// // Three replicas acknowledge orders-0.
/// acked.operation().acks.store(3, Ordering::SeqCst);
/// assert_eq!(purgatory.check_and_complete(&"orders-0"), 1);
///
/// // orders-1 never gets its acknowledgements.
/// purgatory.advance_clock(1_000);
/// assert_eq!(late.operation().responses.load(Ordering::SeqCst), 1);
/// assert_eq!(late.operation().timeouts.load(Ordering::SeqCst), 1);
/// assert_eq!(acked.operation().timeouts.load(Ordering::SeqCst), 0);
/// assert_eq!(purgatory.num_delayed(), 0);
/// purgatory.shutdown();
/// ```
///
/// # Differences from Kafka
///
/// - `on_complete` runs exactly once per operation under any race (see [`Delayed`]);
///   Kafka's check-then-set can run it twice.
/// - An operation completed before its timeout has its timer entry cancelled inside the
///   completing call, and the timer's task freed at once.
/// - [`shutdown`](Self::shutdown) closes the timer before joining the reaper, which wakes
///   the reaper's poll; Kafka adds a no-op task for that. It is idempotent, and runs on
///   drop.
/// - A panic in an operation's callbacks on the reaper thread is caught and logged, and
///   the reaper goes on; Kafka's reaper thread would end.
/// - [`cancel_for_key`](Self::cancel_for_key) returns only the operations not completed.
pub struct DelayedOperationPurgatory<K, Op> {
    inner: Arc<Inner<K, Op>>,
    /// `None` when the reaper is disabled.
    reaper: Option<ReaperThread>,
}

/// What the purgatory handle and its reaper thread share.
struct Inner<K, Op> {
    purgatory_name: String,
    broker_id: i32,
    timer: Arc<dyn Timer>,
    purge_interval: usize,
    timer_enabled: bool,
    /// The watch lists; see the module's ground rules.
    shards: Box<[Shard<K, Op>]>,
    /// Seeds the [`ShardHasher`] that picks a key's shard; random per purgatory.
    /// Independent of the shards' own maps' hashers.
    shard_seed: u64,
    /// The part of the shards' `operations` sums that purges have already accounted for:
    /// Kafka's `estimatedTotalOperations` is that sum minus this. Written only by
    /// `advance_clock`, never on the hot path.
    purged_operations: AtomicUsize,
}

/// One shard of the watch lists (Kafka's `WatcherList`), on cache lines of its own so that
/// threads on neighbouring shards do not contend.
#[repr(align(128))]
struct Shard<K, Op> {
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

impl<K, Op> DelayedOperationPurgatory<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// Creates a purgatory with Kafka's defaults: its own [`SystemTimer`] named
    /// `purgatory_name`, an expiration reaper thread named
    /// `ExpirationReaper-{broker_id}-{purgatory_name}`, purge interval 1000.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory};
    /// # struct Fetch;
    /// # impl DelayedOperation for Fetch {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<(String, u32), Fetch>::new("Fetch", 1);
    /// assert_eq!(purgatory.watched(), 0);
    /// purgatory.shutdown();
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if the reaper thread cannot be spawned.
    pub fn new(purgatory_name: &str, broker_id: i32) -> Self {
        Self::builder(purgatory_name).broker_id(broker_id).build()
    }

    /// Returns a builder for Kafka's six-argument constructor (name, timer, broker id, purge
    /// interval, reaper enabled, timer enabled), with [`new`](Self::new)'s defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<u64, Op>::builder("Heartbeat")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(3)
    ///     .purge_interval(100)
    ///     .reaper_enabled(false)
    ///     .build();
    /// # drop(purgatory);
    /// ```
    pub fn builder(purgatory_name: &str) -> DelayedOperationPurgatoryBuilder<K, Op> {
        DelayedOperationPurgatoryBuilder {
            purgatory_name: purgatory_name.to_owned(),
            timer: None,
            broker_id: 0,
            purge_interval: PURGE_INTERVAL,
            reaper_enabled: true,
            timer_enabled: true,
            reaper_poll_ms: REAPER_POLL_MS,
            _types: PhantomData,
        }
    }

    /// Completes `operation` now if it can; else watches it under every key and adds its
    /// timeout to the timer, checking once more after watching, so that a completion that
    /// became possible in between is not missed. Returns true iff this call completed it.
    ///
    /// Under the operation's lock: the user's `try_complete`; if false, the operation is
    /// appended to the watch list of each key (stopping early should it complete
    /// meanwhile), then `try_complete` once more. Then, without the lock, unless it
    /// completed: its timeout goes to the timer (if the timer is enabled), and is cancelled
    /// again at once if the operation completed in the meantime.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    ///
    /// struct Op(AtomicBool);
    /// impl DelayedOperation for Op {
    ///     fn delay_ms(&self) -> i64 { 500 }
    ///     fn try_complete(&self) -> bool { self.0.load(Ordering::SeqCst) }
    ///     fn on_complete(&self) {}
    ///     fn on_expiration(&self) {}
    /// }
    ///
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// let ready = Delayed::new(Op(AtomicBool::new(true)));
    /// assert!(purgatory.try_complete_else_watch(&ready, &[1, 2]), "completed at once");
    /// let waiting = Delayed::new(Op(AtomicBool::new(false)));
    /// assert!(!purgatory.try_complete_else_watch(&waiting, &[1, 2]));
    /// assert_eq!(purgatory.watched(), 2, "one entry per key");
    /// assert_eq!(purgatory.num_delayed(), 1, "one timeout per operation");
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `watch_keys` is empty. A panic in the operation's `try_complete` or
    /// `on_complete` propagates to the caller; the purgatory stays usable.
    #[track_caller]
    pub fn try_complete_else_watch(&self, operation: &Delayed<Op>, watch_keys: &[K]) -> bool {
        assert!(
            !watch_keys.is_empty(),
            "DelayedOperationPurgatory::try_complete_else_watch: watch_keys must not be empty \
             (an operation watched under no key could only expire)"
        );
        let inner = &*self.inner;
        {
            let _locked = operation.lock();
            if operation.try_complete_locked() {
                return true;
            }
            for (i, key) in watch_keys.iter().enumerate() {
                if operation.is_completed() {
                    break;
                }
                // Counted once, in the shard of its first key (see `Shard::operations`).
                inner.watch(key, operation, i == 0);
            }
            // Watched under every key now: whatever makes it completable from here on is
            // followed by a `check_and_complete` that finds it.
            if operation.try_complete_locked() {
                return true;
            }
        }
        if inner.timer_enabled && !operation.is_completed() {
            let entry = inner.timer.add(Expiry::task(operation.clone()));
            operation.set_timeout(entry);
        }
        false
    }

    /// Tries to complete the operations watched under `key`; returns how many this call
    /// completed.
    ///
    /// Asks each pending operation of the key's list, in watch order, under its lock
    /// (waiting for the lock if another thread holds it). Then drops the completed
    /// operations from the list, and the key once its list is empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    ///
    /// /// A fetch waiting until the log end offset reaches `wanted`.
    /// struct Fetch { log_end: Arc<AtomicU64>, wanted: u64 }
    /// impl DelayedOperation for Fetch {
    ///     fn delay_ms(&self) -> i64 { 500 }
    ///     fn try_complete(&self) -> bool { self.log_end.load(Ordering::SeqCst) >= self.wanted }
    ///     fn on_complete(&self) {}
    ///     fn on_expiration(&self) {}
    /// }
    ///
    /// let purgatory = DelayedOperationPurgatory::<&str, Fetch>::builder("Fetch")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// let log_end = Arc::new(AtomicU64::new(0));
    /// for wanted in [10, 20, 30] {
    ///     let fetch = Delayed::new(Fetch { log_end: Arc::clone(&log_end), wanted });
    ///     purgatory.try_complete_else_watch(&fetch, &["t-0"]);
    /// }
    /// log_end.store(25, Ordering::SeqCst);
    /// assert_eq!(purgatory.check_and_complete(&"t-0"), 2);
    /// assert_eq!(purgatory.watched(), 1, "the completed ones left the list");
    /// assert_eq!(purgatory.check_and_complete(&"no-such-key"), 0);
    /// ```
    ///
    /// # Panics
    ///
    /// A panic in an operation's `try_complete` or `on_complete` propagates to the caller;
    /// the purgatory stays usable, and the operations not yet asked stay watched.
    pub fn check_and_complete(&self, key: &K) -> usize {
        let inner = &*self.inner;
        let shard = inner.shard(key);
        let Some(watched) = shard.watched_under(key) else {
            return 0;
        };
        let mut completed = 0;
        let mut stale = false;
        for operation in watched.iter() {
            if operation.is_completed() {
                // Completed through another key, by force or by expiry: only to be dropped.
                stale = true;
            } else if operation.try_complete() {
                completed += 1;
            }
        }
        if stale || completed > 0 {
            shard.remove_completed(key);
        }
        completed
    }

    /// Returns the number of watch-list entries, completed operations not yet purged
    /// included (Kafka's `watched`). An operation watched under three keys counts three
    /// times.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<&str, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// let op = Delayed::new(Op);
    /// purgatory.try_complete_else_watch(&op, &["a", "b", "c"]);
    /// assert_eq!(purgatory.watched(), 3);
    /// op.force_complete();
    /// assert_eq!(purgatory.watched(), 3, "completed, still listed until checked or purged");
    /// purgatory.check_and_complete(&"a");
    /// assert_eq!(purgatory.watched(), 2);
    /// ```
    pub fn watched(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| shard.lists.lock().watched)
            .sum()
    }

    /// Returns the number of operations whose timeout is pending: the timer's size.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[7]);
    /// assert_eq!(purgatory.num_delayed(), 1);
    /// timer.time().sleep(500);
    /// purgatory.advance_clock(0); // the timeout expires
    /// assert_eq!(purgatory.num_delayed(), 0);
    /// ```
    pub fn num_delayed(&self) -> usize {
        self.inner.timer.size()
    }

    /// Stops watching `key`, and returns the operations that were watched under it and
    /// had not completed, with their timeouts cancelled. They are not completed, and they
    /// stay watched under their other keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) { unreachable!("cancelled, not completed") }
    /// #     fn on_expiration(&self) {}
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<&str, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// let op = Delayed::new(Op);
    /// purgatory.try_complete_else_watch(&op, &["gone"]);
    /// let cancelled = purgatory.cancel_for_key(&"gone");
    /// assert_eq!(cancelled.len(), 1);
    /// assert!(cancelled[0].ptr_eq(&op) && !op.is_completed());
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
    /// purgatory.advance_clock(1_000); // nothing expires
    /// ```
    ///
    /// # Differences from Kafka
    ///
    /// Kafka also returns (and cancels) operations that had completed but were still in the
    /// list; they are left out here.
    pub fn cancel_for_key(&self, key: &K) -> Vec<Delayed<Op>> {
        let removed = {
            let mut guard = self.inner.shard(key).lists.lock();
            let shard = &mut *guard;
            match shard.watchers.remove(key) {
                Some(list) => {
                    shard.watched -= list.len();
                    list
                }
                None => return Vec::new(),
            }
        };
        let mut cancelled = removed;
        cancelled.retain(|operation| !operation.is_completed());
        for operation in &cancelled {
            operation.cancel_timeout();
        }
        cancelled
    }

    /// The reaper's step: advances the timer (waiting up to `timeout_ms` for a timeout to
    /// expire, and running or handing over the expired ones), then purges completed
    /// operations from the watch lists once more than the purge interval of them may be
    /// there. Returns what the timer's `advance_clock` returned.
    ///
    /// Call it yourself when the reaper is disabled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 60_000 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .purge_interval(2)
    ///     .reaper_enabled(false)
    ///     .build();
    /// for _ in 0..3 {
    ///     let op = Delayed::new(Op);
    ///     purgatory.try_complete_else_watch(&op, &[1, 2]);
    ///     op.force_complete(); // still in the lists of keys 1 and 2
    /// }
    /// assert_eq!(purgatory.watched(), 6);
    /// assert!(!purgatory.advance_clock(0), "nothing expired");
    /// assert_eq!(purgatory.watched(), 0, "3 completed > purge interval 2: purged");
    /// ```
    ///
    /// # Panics
    ///
    /// A panic in an operation's `on_complete` or `on_expiration` run by the timer on this
    /// thread (as [`MockTimer`](crate::MockTimer) does) propagates to the caller; the
    /// purgatory stays usable.
    pub fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.inner.advance_clock(timeout_ms)
    }

    /// Stops the reaper and closes the timer. Idempotent; also runs on drop.
    ///
    /// Closing the timer wakes a reaper blocked in its poll, so this returns as soon as the
    /// reaper has finished the step it is in; it does not wait out the poll. Pending
    /// operations are neither completed nor expired (as in Kafka); timeouts that the
    /// timer's executor already runs finish first. Concurrent calls all return once the
    /// reaper has ended; a call on the reaper thread itself (from an operation's callback)
    /// does not wait for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::new("Produce", 0);
    /// purgatory.shutdown(); // returns at once, not after the reaper's 200 ms poll
    /// purgatory.shutdown(); // nothing left to do
    /// ```
    pub fn shutdown(&self) {
        self.stop();
    }
}

impl<K, Op> DelayedOperationPurgatory<K, Op> {
    /// [`shutdown`](Self::shutdown), for `Drop` too.
    fn stop(&self) {
        if let Some(reaper) = &self.reaper {
            reaper.request_stop();
        }
        // Wakes a reaper blocked in the timer's poll.
        self.inner.timer.close();
        if let Some(reaper) = &self.reaper {
            reaper.join();
        }
    }
}

impl<K, Op> Inner<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// The shard `key` belongs to: the top bits of its [`ShardHasher`] hash.
    fn shard(&self, key: &K) -> &Shard<K, Op> {
        let mut hasher = ShardHasher::new(self.shard_seed);
        key.hash(&mut hasher);
        &self.shards[(hasher.finish() >> (u64::BITS - SHARD_BITS)) as usize]
    }

    /// Appends `operation` to the watch list of `key` (Kafka's `watchForOperation`); if
    /// `count`, adds it to the estimate of watched operations too.
    fn watch(&self, key: &K, operation: &Delayed<Op>, count: bool) {
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
    fn purge_completed(&self) -> usize {
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

    /// See [`DelayedOperationPurgatory::advance_clock`].
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let flushed = self.timer.advance_clock(timeout_ms);
        let delayed = self.timer.size();
        // Kafka's `estimatedTotalOperations`: 512 relaxed loads, once per step.
        let watched_ever = self
            .shards
            .iter()
            .map(|shard| shard.operations.load(Ordering::Relaxed))
            .fold(0, usize::wrapping_add);
        let estimated = watched_ever.saturating_sub(self.purged_operations.load(Ordering::Relaxed));
        let completed = estimated.saturating_sub(delayed);
        if completed > self.purge_interval {
            // Only what was counted is taken off: operations watched meanwhile stay counted.
            // Never past the sum read (concurrent callers of `advance_clock`).
            let _ = self.purged_operations.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |purged| Some(purged.saturating_add(completed).min(watched_ever)),
            );
            let purged = self.purge_completed();
            log::debug!(
                "purgatory {}: purged {purged} completed entries from the watch lists",
                self.purgatory_name
            );
        }
        flushed
    }
}

impl<K, Op> Shard<K, Op>
where
    K: Eq + Hash,
    Op: DelayedOperation,
{
    /// A copy of the watch list of `key`, if it has one: clones (an `Arc` each) on the
    /// stack for a short list, so that the common check allocates nothing.
    fn watched_under(&self, key: &K) -> Option<Batch<Delayed<Op>>> {
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
    fn remove_completed(&self, key: &K) -> usize {
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
    // Moved, not dropped: the operation is dropped with `removed`, after the caller
    // releases its lock.
    for operation in list.extract_if(.., |operation| operation.is_completed()) {
        removed.push(operation);
    }
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
/// which are the ones [`Inner::shard`] uses. Not resistant to keys chosen to collide: the
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
struct Batch<T> {
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
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline.iter().flatten().chain(&self.spilled)
    }
}

impl<K, Op> Drop for DelayedOperationPurgatory<K, Op> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<K, Op> fmt::Debug for DelayedOperationPurgatory<K, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedOperationPurgatory")
            .field("purgatory_name", &self.inner.purgatory_name)
            .field("broker_id", &self.inner.broker_id)
            .field("purge_interval", &self.inner.purge_interval)
            .field("timer_enabled", &self.inner.timer_enabled)
            .field("reaper_enabled", &self.reaper.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a [`DelayedOperationPurgatory`]: Kafka's six-argument constructor, with the
/// defaults of [`DelayedOperationPurgatory::new`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
/// # struct Op;
/// # impl DelayedOperation for Op {
/// #     fn delay_ms(&self) -> i64 { 500 }
/// #     fn try_complete(&self) -> bool { false }
/// #     fn on_complete(&self) {}
/// #     fn on_expiration(&self) {}
/// # }
///
/// let timer = Arc::new(MockTimer::new());
/// let purgatory = DelayedOperationPurgatory::<String, Op>::builder("DeleteRecords")
///     .timer(Arc::clone(&timer))
///     .broker_id(2)
///     .purge_interval(10)
///     .reaper_enabled(false)
///     .timer_enabled(true)
///     .build();
/// assert_eq!(purgatory.num_delayed(), 0);
/// ```
pub struct DelayedOperationPurgatoryBuilder<K, Op> {
    purgatory_name: String,
    timer: Option<Arc<dyn Timer>>,
    broker_id: i32,
    purge_interval: usize,
    reaper_enabled: bool,
    timer_enabled: bool,
    reaper_poll_ms: i64,
    _types: PhantomData<fn() -> (K, Op)>,
}

impl<K, Op> DelayedOperationPurgatoryBuilder<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// Sets the timer of the operations' timeouts. Default: `SystemTimer::new(purgatory_name)`.
    ///
    /// Pass an `Arc<MockTimer>` (and turn the reaper off) to drive time from a test. The
    /// purgatory closes the timer when it shuts down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, Timer, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// assert_eq!(timer.size(), 1, "the timeout went to this timer");
    /// ```
    pub fn timer(mut self, timer: impl Timer + 'static) -> Self {
        self.timer = Some(Arc::new(timer));
        self
    }

    /// Sets the broker id, which names the reaper thread. Default 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("Fetch")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(7) // its reaper thread: ExpirationReaper-7-Fetch
    ///     .build();
    /// assert!(format!("{purgatory:?}").contains("broker_id: 7"));
    /// purgatory.shutdown();
    /// ```
    pub fn broker_id(mut self, broker_id: i32) -> Self {
        self.broker_id = broker_id;
        self
    }

    /// Sets how many completed operations may sit in the watch lists before the reaper
    /// purges them. Default 1000.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .purge_interval(0)
    ///     .reaper_enabled(false)
    ///     .build();
    /// let op = Delayed::new(Op);
    /// purgatory.try_complete_else_watch(&op, &[1, 2]);
    /// op.force_complete();
    /// purgatory.advance_clock(0);
    /// assert_eq!(purgatory.watched(), 0, "1 completed > purge interval 0: purged");
    /// ```
    pub fn purge_interval(mut self, purge_interval: usize) -> Self {
        self.purge_interval = purge_interval;
        self
    }

    /// Sets whether a reaper thread drives the timer and purges. Default true. Turn it off
    /// on a [`MockTimer`](crate::MockTimer), or to call
    /// [`advance_clock`](DelayedOperationPurgatory::advance_clock) yourself.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false) // this test moves time itself
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// timer.time().sleep(500);
    /// assert!(purgatory.advance_clock(0), "the timeout expired on this thread");
    /// ```
    pub fn reaper_enabled(mut self, reaper_enabled: bool) -> Self {
        self.reaper_enabled = reaper_enabled;
        self
    }

    /// Sets whether operations get a timeout in the timer. Default true. Without one, an
    /// operation waits until it completes or its key is cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) { unreachable!("no timeouts") }
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u8, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .timer_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (1, 0));
    /// purgatory.advance_clock(10_000);
    /// ```
    pub fn timer_enabled(mut self, timer_enabled: bool) -> Self {
        self.timer_enabled = timer_enabled;
        self
    }

    /// Sets how long one poll of the reaper waits for a timeout to expire. Default 200 ms,
    /// as in Kafka. Shutdown does not wait for a poll to end, whatever its length.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u8, Op>::builder("p")
    ///     .reaper_poll_ms(60_000)
    ///     .build();
    /// purgatory.shutdown(); // still prompt
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `reaper_poll_ms` is not positive.
    #[track_caller]
    pub fn reaper_poll_ms(mut self, reaper_poll_ms: i64) -> Self {
        assert!(
            reaper_poll_ms > 0,
            "DelayedOperationPurgatoryBuilder::reaper_poll_ms: reaper_poll_ms must be positive, \
             got {reaper_poll_ms}"
        );
        self.reaper_poll_ms = reaper_poll_ms;
        self
    }

    /// Builds the purgatory, and starts its reaper thread
    /// `ExpirationReaper-{broker_id}-{purgatory_name}` if enabled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if the reaper thread cannot be spawned.
    pub fn build(self) -> DelayedOperationPurgatory<K, Op> {
        let timer = self
            .timer
            .unwrap_or_else(|| Arc::new(SystemTimer::new(&self.purgatory_name)));
        let inner = Arc::new(Inner {
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
            purged_operations: AtomicUsize::new(0),
            purgatory_name: self.purgatory_name,
            broker_id: self.broker_id,
            timer,
            purge_interval: self.purge_interval,
            timer_enabled: self.timer_enabled,
        });
        let reaper = self
            .reaper_enabled
            .then(|| start_reaper(Arc::clone(&inner), self.reaper_poll_ms));
        DelayedOperationPurgatory { inner, reaper }
    }
}

impl<K, Op> fmt::Debug for DelayedOperationPurgatoryBuilder<K, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedOperationPurgatoryBuilder")
            .field("purgatory_name", &self.purgatory_name)
            .field("broker_id", &self.broker_id)
            .field("purge_interval", &self.purge_interval)
            .field("reaper_enabled", &self.reaper_enabled)
            .field("timer_enabled", &self.timer_enabled)
            .field("reaper_poll_ms", &self.reaper_poll_ms)
            .finish_non_exhaustive()
    }
}

/// Starts the expiration reaper thread (Kafka's `ExpiredOperationReaper`), named
/// `ExpirationReaper-{broker_id}-{purgatory_name}`.
fn start_reaper<K, Op>(inner: Arc<Inner<K, Op>>, poll_ms: i64) -> ReaperThread
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    let name = format!(
        "ExpirationReaper-{}-{}",
        inner.broker_id, inner.purgatory_name
    );
    ReaperThread::spawn(
        name.clone(),
        name,
        Duration::from_millis(poll_ms.unsigned_abs()),
        move || inner.advance_clock(poll_ms),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys per shard for `keys`, hashed the way `Inner::shard` does.
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
