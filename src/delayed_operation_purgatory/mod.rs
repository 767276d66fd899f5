//! Kafka's `DelayedOperationPurgatory`: operations watched under keys until they complete or
//! time out; its builder; the watch lists in `watch.rs`, the operation's side in
//! `crate::delayed_operation`. The purgatory, its watch lists, purge and reaper follow Kafka
//! 4.x's trunk (`server-common`'s `org.apache.kafka.server.purgatory`); `docs/design.md`
//! ("Purgatory") lists every difference with the source it was read from.
//!
//! # Ground rules
//!
//! - **Watch lists.** 512 shards of key → operations, each behind its own mutex; no user
//!   code runs under a shard lock (see `watch.rs`). Lock order: an operation's lock, then
//!   one shard's ([`crate::lock_order`]).
//! - **An operation's life.** Pending and watched under its keys, with a timeout in the
//!   timer; then completed, by exactly one of: a `try_complete` that said yes
//!   (`try_complete_else_watch`, `check_and_complete`, [`Delayed::try_complete`]),
//!   [`Delayed::force_complete`], or the timer running its timeout. Completing cancels the
//!   timeout at once (see [`Delayed`]). A completed operation leaves a watch list when
//!   `check_and_complete` walks that key, or when a purge runs.
//! - **Purge.** Kafka's `estimatedTotalOperations` is the watch lists' count of operations
//!   ever watched (kept per shard) minus `purged_operations`, what purges have taken off
//!   it. [`Inner::purge_if_due`], the one place that decides a purge, purges once the
//!   estimate exceeds the timer's size by more than the purge interval, as in Kafka; the
//!   reaper's step (`advance_clock`) calls it.
//! - **Reaper.** A thread named `ExpirationReaper-{broker_id}-{purgatory_name}` calls
//!   [`advance_clock`](DelayedOperationPurgatory::advance_clock) until `shutdown`, which
//!   asks it to stop, closes the timer (waking an `advance_clock` blocked in its poll), and
//!   joins the thread. It is `SystemTimerReaper`'s loop (`ReaperThread`): it never spins on
//!   a closed or mock timer, and a panic in a poll is logged and the loop goes on. On a
//!   shared reaper there is no such thread: the purgatory's timer is driven with others,
//!   and watching and completing purge, at most once per reaper poll (`next_purge_ms`).

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::delayed_operation::{Delayed, DelayedOperation, ExpiredCount, Expiry};
use crate::metrics::PurgatoryMetrics;
use crate::system_timer::SystemTimer;
use crate::system_timer_reaper::{ReaperThread, SharedSystemTimerReaper};
use crate::time::hi_res_clock_ms;
use crate::timer::{AddError, Timer};
use watch::WatchLists;

mod watch;

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
/// [`new`](Self::new) gives Kafka's defaults: its own [`SystemTimer`](crate::SystemTimer)
/// and an expiration reaper thread that drives it and purges completed operations from the
/// watch lists.
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
/// Compared with Kafka's purgatory in Kafka 4.x's trunk (`server-common`,
/// `org.apache.kafka.server.purgatory`); the operation's locking follows KAFKA-19312, see
/// [`Delayed`]. As in every Kafka version, `on_complete` runs
/// exactly once per operation, and an operation completed before its timeout has its timer
/// entry cancelled (unlinked at once) by the completing call; here the timer's task is also
/// dropped inside that call.
///
/// - [`shutdown`](Self::shutdown) closes the timer before joining the reaper, which wakes
///   the reaper's poll; Kafka adds a no-op task for that. It is idempotent, and runs on
///   drop.
/// - An operation handed to the purgatory after `shutdown`, or whose timeout the timer
///   refuses (closed, or full), is completed at once as expired; in Kafka it is watched
///   and its timeout added to the closed timer, which never runs it (or, if already due,
///   the add throws `RejectedExecutionException`), so it is never answered.
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
    /// What the builder set.
    settings: Settings,
    timer: Arc<dyn Timer>,
    /// `timer`, when it is the purgatory's own (no `.timer(..)` given).
    system_timer: Option<Arc<SystemTimer>>,
    /// The watch lists (`watch.rs`).
    watch_lists: WatchLists<K, Op>,
    /// The part of [`WatchLists::operations_ever`] that purges have already accounted for:
    /// Kafka's `estimatedTotalOperations` is that sum minus this. Written only by
    /// [`Inner::purge_if_due`].
    purged_operations: AtomicUsize,
    /// Operations completed by expiring (`expired_count`).
    expired: ExpiredCount,
    /// Set by `shutdown`, before the timer is closed: from then on an operation handed to
    /// `try_complete_else_watch` is answered at once.
    shut_down: AtomicBool,
    /// Whether the one warning about operations answered at once because the timer was
    /// closed (`[0]`) or full (`[1]`) was logged.
    warned: [AtomicBool; 2],
    /// Its gauges and counter (the `metrics` feature; empty without it).
    metrics: PurgatoryMetrics,
    /// On a shared reaper, when watching or completing next looks for a purge
    /// (`i64::MAX`: never, a reaper thread of its own purges).
    next_purge_ms: AtomicI64,
}

/// What a [`DelayedOperationPurgatoryBuilder`] sets (but the timer), kept by the purgatory.
#[derive(Debug)]
struct Settings {
    purgatory_name: String,
    broker_id: i32,
    purge_interval: usize,
    reaper_enabled: bool,
    timer_enabled: bool,
    reaper_poll_ms: i64,
}

impl<K: Eq + Hash + Clone + Send + Sync + 'static, Op: DelayedOperation>
    DelayedOperationPurgatory<K, Op>
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
    ///
    /// let purgatory = DelayedOperationPurgatory::<u64, Op>::builder("Heartbeat")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(3)
    ///     .purge_interval(100)
    ///     .reaper_enabled(false)
    ///     .build();
    /// # drop(purgatory);
    /// # }
    /// ```
    pub fn builder(purgatory_name: &str) -> DelayedOperationPurgatoryBuilder<K, Op> {
        DelayedOperationPurgatoryBuilder {
            settings: Settings {
                purgatory_name: purgatory_name.to_owned(),
                broker_id: 0,
                // Kafka's defaults: purge interval 1000, `advanceClock(200L)`.
                purge_interval: 1_000,
                reaper_enabled: true,
                timer_enabled: true,
                reaper_poll_ms: 200,
            },
            timer: None,
            shared_reaper: None,
            pool: None,
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
    /// An operation is never left unanswered. Once the purgatory is
    /// [shut down](Self::shutdown), it is not watched: unless `try_complete` completes it
    /// (this returns true), it is completed at once as expired — `on_complete`, then
    /// `on_expiration`, on this thread — and this returns false. The same happens to an
    /// operation whose timeout the timer refuses: closed meanwhile (by a concurrent
    /// `shutdown`, or by another owner of a shared timer), or full
    /// ([`SystemTimerBuilder::max_pending`](crate::SystemTimerBuilder::max_pending)). Each
    /// of the two causes is logged once per purgatory with `log::warn!`.
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
    /// After shutdown:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    ///
    /// #[derive(Default)]
    /// struct Op(AtomicUsize);
    /// impl DelayedOperation for Op {
    ///     fn delay_ms(&self) -> i64 { 500 }
    ///     fn try_complete(&self) -> bool { false }
    ///     fn on_complete(&self) {}
    ///     fn on_expiration(&self) { self.0.fetch_add(1, Ordering::SeqCst); }
    /// }
    ///
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(MockTimer::new())
    ///     .reaper_enabled(false)
    ///     .build();
    /// purgatory.shutdown();
    /// let late = Delayed::new(Op::default());
    /// assert!(!purgatory.try_complete_else_watch(&late, &[1]));
    /// assert!(late.is_completed(), "answered at once, as expired");
    /// assert_eq!(late.operation().0.load(Ordering::SeqCst), 1);
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `watch_keys` is empty. A panic in the operation's `try_complete` or
    /// `on_complete` propagates to the caller; the purgatory stays usable. (After shutdown, so
    /// does a panic in `on_expiration`.)
    #[track_caller]
    pub fn try_complete_else_watch(&self, operation: &Delayed<Op>, watch_keys: &[K]) -> bool {
        assert!(
            !watch_keys.is_empty(),
            "DelayedOperationPurgatory::try_complete_else_watch: watch_keys must not be empty \
             (an operation watched under no key could only expire)"
        );
        let inner = &*self.inner;
        if inner.shut_down.load(Ordering::Acquire) {
            // Nothing would ever answer it: answer it now.
            if operation.try_complete() {
                return true;
            }
            inner.expire_at_once(operation, false);
            return false;
        }
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
                inner.watch_lists.watch(key, operation, i == 0);
            }
            // Watched under every key now: whatever makes it completable from here on is
            // followed by a `check_and_complete` that finds it.
            if operation.try_complete_locked() {
                return true;
            }
        }
        inner.purge_now_and_then();
        if inner.settings.timer_enabled && !operation.is_completed() {
            let expired = Arc::clone(inner.expired.stripe_of(operation));
            let expiry = Box::new(Expiry {
                operation: operation.clone(),
                expired,
            });
            // Closed meanwhile (or by its other owner), or full: without a timeout the
            // operation might never be answered.
            match inner.timer.try_add(expiry) {
                Ok(entry) => operation.set_timeout(entry),
                Err(error) => inner.expire_at_once(operation, matches!(error, AddError::Full(_))),
            }
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
        let shard = self.inner.watch_lists.shard(key);
        let watched = shard.watched_under(key);
        // A completed operation is only to be dropped: its lock is not waited for.
        let completable = |op: &&Delayed<Op>| !op.is_completed() && op.try_complete();
        let completed = watched.iter().filter(completable).count();
        // Completed here, through another key, by force or by expiry: only to be dropped.
        if watched.iter().any(Delayed::is_completed) {
            shard.remove_completed(key);
        }
        self.inner.purge_now_and_then();
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
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
    /// # }
    /// ```
    pub fn watched(&self) -> usize {
        self.inner.watch_lists.watched()
    }

    /// Returns the number of operations whose timeout is pending: the timer's size.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
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
    /// # }
    /// ```
    pub fn num_delayed(&self) -> usize {
        self.inner.timer.size()
    }

    /// Returns the number of operations completed by expiring since the purgatory was built
    /// (Kafka's operations count these in their `ExpiresPerSec` meters): those whose
    /// timeout ran before anything else completed them, and those answered as expired at
    /// once because the purgatory was shut down or its timer refused the timeout (see
    /// [`try_complete_else_watch`](Self::try_complete_else_watch)).
    ///
    /// Counted just before the operation's `on_expiration` runs. With a
    /// [`SystemTimer`](crate::SystemTimer), expiries run on the timer's executor thread, so
    /// the count can trail `advance_clock` by the expiries still on their way there.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(MockTimer::new())
    ///     .reaper_enabled(false)
    ///     .build();
    /// let (acked, late) = (Delayed::new(Op), Delayed::new(Op));
    /// purgatory.try_complete_else_watch(&acked, &[1]);
    /// purgatory.try_complete_else_watch(&late, &[2]);
    /// acked.force_complete(); // completed, not expired
    /// purgatory.advance_clock(500); // `late` expires
    /// assert_eq!(purgatory.expired_count(), 1);
    /// # }
    /// ```
    pub fn expired_count(&self) -> u64 {
        self.inner.expired.total()
    }

    /// Returns the purgatory's own timer, the one [`new`](Self::new) (or a builder not
    /// given a [`timer`](DelayedOperationPurgatoryBuilder::timer)) made, to read its
    /// [`stats`](SystemTimer::stats) and [`lateness`](SystemTimer::lateness). `None` for a
    /// timer the builder was given: whoever gave it can read it.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::new("Produce", 0);
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[7]);
    /// let timer = purgatory.system_timer().expect("new makes its own timer");
    /// assert_eq!(timer.stats().added, 1);
    /// let _late_p99_us = timer.lateness().p99_us;
    /// # }
    /// ```
    pub fn system_timer(&self) -> Option<&SystemTimer> {
        self.inner.system_timer.as_deref()
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
        let mut cancelled = self.inner.watch_lists.remove_key(key);
        cancelled.retain(|operation| !operation.is_completed());
        for operation in &cancelled {
            operation.release_timeout(true);
        }
        cancelled
    }

    /// The reaper's step: advances the timer (waiting up to `timeout_ms` for a timeout to
    /// expire, and running or handing over the expired ones), then purges completed
    /// operations from the watch lists once more than the purge interval of them may be
    /// there. Returns what the timer's `advance_clock` returned. With the `metrics` feature, it
    /// then reports the purgatory's gauges and counter.
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
}

impl<K, Op> DelayedOperationPurgatory<K, Op> {
    /// Stops the reaper and closes the timer. Idempotent; also runs on drop.
    ///
    /// Closing the timer wakes a reaper blocked in its poll, so this returns as soon as the
    /// reaper has finished the step it is in; it does not wait out the poll. Pending
    /// operations are neither completed nor expired (as in Kafka); timeouts that the
    /// timer's executor already runs finish first. Concurrent calls all return once the
    /// reaper has ended; a call on the reaper thread itself (from an operation's callback)
    /// does not wait for it.
    ///
    /// Operations handed to [`try_complete_else_watch`](Self::try_complete_else_watch)
    /// afterwards are answered at once (see there). With the `metrics` feature, the
    /// purgatory's gauges and counter report their last values here.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::new("Produce", 0);
    /// purgatory.shutdown(); // returns at once, not after the reaper's 200 ms poll
    /// purgatory.shutdown(); // nothing left to do
    /// # }
    /// ```
    pub fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::Release);
        if let Some(reaper) = &self.reaper {
            reaper.request_stop();
        }
        // Wakes a reaper blocked in the timer's poll.
        self.inner.timer.close();
        if let Some(reaper) = &self.reaper {
            reaper.join();
        }
        self.inner.record_metrics();
    }
}

impl<K: Eq + Hash + Clone, Op: DelayedOperation> Inner<K, Op> {
    /// See [`DelayedOperationPurgatory::advance_clock`].
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let flushed = self.timer.advance_clock(timeout_ms);
        self.purge_if_due();
        self.record_metrics();
        flushed
    }

    /// Purges the completed operations from the watch lists once more than the purge
    /// interval of them may be there: Kafka's `estimatedTotalOperations` minus the timer's
    /// size. The one place that decides a purge.
    fn purge_if_due(&self) {
        let delayed = self.timer.size();
        // Kafka's `estimatedTotalOperations`: 512 relaxed loads.
        let watched_ever = self.watch_lists.operations_ever();
        let estimated = watched_ever.saturating_sub(self.purged_operations.load(Ordering::Relaxed));
        if estimated.saturating_sub(delayed) <= self.settings.purge_interval {
            return;
        }
        // Only what was counted is taken off: operations watched meanwhile stay counted. A
        // concurrent caller's older store only makes the next purge come sooner.
        self.purged_operations
            .store(watched_ever - delayed, Ordering::Relaxed);
        let purged = self.watch_lists.purge_completed();
        log::debug!(
            "purgatory {}: purged {purged} completed entries from the watch lists",
            self.settings.purgatory_name
        );
    }

    /// On a shared reaper, where no thread of the purgatory's calls `advance_clock`: looks
    /// for a purge at most once per reaper poll, from whichever thread watches or completes
    /// first after it (a clock read and a load otherwise).
    fn purge_now_and_then(&self) {
        let next_ms = self.next_purge_ms.load(Ordering::Relaxed);
        let now_ms = hi_res_clock_ms();
        let later = now_ms.saturating_add(self.settings.reaper_poll_ms);
        let won = |next| {
            self.next_purge_ms
                .compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed)
        };
        if now_ms >= next_ms && won(next_ms).is_ok() {
            self.purge_if_due();
            self.record_metrics();
        }
    }

    /// Answers `operation` now, as expired, because the timer refused its timeout (`full`,
    /// or closed); warns once per purgatory and reason.
    fn expire_at_once(&self, operation: &Delayed<Op>, full: bool) {
        let why = match full {
            true => "has a full timer",
            false => "is shut down (or its timer closed)",
        };
        if !self.warned[usize::from(full)].swap(true, Ordering::Relaxed) {
            log::warn!(
                "purgatory {} {why}: operations handed to it are completed at once as \
                 expired (warned once)",
                self.settings.purgatory_name
            );
        }
        operation.expire(true, || self.expired.stripe_of(operation).count(None));
        // Rare, and after shutdown there is no later step to report it.
        self.record_metrics();
    }
}

impl<K, Op> Inner<K, Op> {
    /// Reports the gauges and the counter (nothing without the `metrics` feature).
    fn record_metrics(&self) {
        self.metrics.record(|| {
            let (watched, delayed) = (self.watch_lists.watched(), self.timer.size());
            (watched, delayed, self.expired.total())
        });
    }
}

impl<K, Op> Drop for DelayedOperationPurgatory<K, Op> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl<K, Op> fmt::Debug for DelayedOperationPurgatory<K, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedOperationPurgatory")
            .field("settings", &self.inner.settings)
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
/// # include!("../doc_op.rs");
/// # fn main() {
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
/// # }
/// ```
pub struct DelayedOperationPurgatoryBuilder<K, Op> {
    settings: Settings,
    timer: Option<Arc<dyn Timer>>,
    shared_reaper: Option<SharedSystemTimerReaper>,
    pool: Option<threadpool::ThreadPool>,
    _types: PhantomData<fn() -> (K, Op)>,
}

impl<K: Eq + Hash + Clone + Send + Sync + 'static, Op: DelayedOperation>
    DelayedOperationPurgatoryBuilder<K, Op>
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// assert_eq!(timer.size(), 1, "the timeout went to this timer");
    /// # }
    /// ```
    pub fn timer(mut self, timer: impl Timer + 'static) -> Self {
        self.timer = Some(Arc::new(timer));
        self
    }

    /// Puts the purgatory's own `SystemTimer` on `reaper`, one driver thread shared with
    /// other timers and purgatories, instead of an expiration reaper thread of its own: a
    /// service with many purgatories runs one driver thread. The purgatory then purges its
    /// watch lists as it watches and completes (at most once per reaper poll), since no
    /// thread of its own calls `advance_clock`; `shutdown` closes its timer, which leaves
    /// the reaper's rotation. Default: a reaper thread of its own (Kafka's).
    ///
    /// # Panics
    ///
    /// `build` panics, naming both, if [`timer`](Self::timer) was given too.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, SharedSystemTimerReaper};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let reaper = SharedSystemTimerReaper::new("ExpirationReaper-0");
    /// let produce = DelayedOperationPurgatory::<u32, Op>::builder("Produce")
    ///     .shared_reaper(&reaper)
    ///     .build();
    /// let fetch = DelayedOperationPurgatory::<u32, Op>::builder("Fetch")
    ///     .shared_reaper(&reaper)
    ///     .build();
    /// assert_eq!(reaper.timers(), 2, "one thread drives both purgatories' timers");
    /// fetch.shutdown();
    /// assert_eq!(reaper.timers(), 1);
    /// # drop(produce);
    /// # }
    /// ```
    pub fn shared_reaper(mut self, reaper: &SharedSystemTimerReaper) -> Self {
        self.shared_reaper = Some(reaper.clone());
        self
    }

    /// Runs the expiries of the purgatory's own `SystemTimer` on `pool`, a
    /// `threadpool::ThreadPool` the service owns, instead of an executor thread of the
    /// timer's own ([`SystemTimerBuilder::threadpool`](crate::SystemTimerBuilder::threadpool)):
    /// purgatories on one [`shared_reaper`](Self::shared_reaper) and one pool add no thread
    /// each. Default: the timer's own executor thread (Kafka's).
    ///
    /// # Panics
    ///
    /// `build` panics, naming both, if [`timer`](Self::timer) was given too.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::threadpool::ThreadPool;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, SharedSystemTimerReaper};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let (reaper, pool) = (SharedSystemTimerReaper::new("reaper"), ThreadPool::new(2));
    /// let produce = DelayedOperationPurgatory::<u32, Op>::builder("Produce")
    ///     .shared_reaper(&reaper)
    ///     .threadpool(pool.clone())
    ///     .build();
    /// let fetch = DelayedOperationPurgatory::<u32, Op>::builder("Fetch")
    ///     .shared_reaper(&reaper)
    ///     .threadpool(pool.clone())
    ///     .build();
    /// // Two purgatories' timers: one driver thread, expiries on the service's two threads.
    /// assert_eq!(reaper.timers(), 2);
    /// produce.shutdown();
    /// fetch.shutdown();
    /// # }
    /// ```
    pub fn threadpool(mut self, pool: threadpool::ThreadPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Sets the broker id, which names the reaper thread. Default 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("Fetch")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(7) // its reaper thread: ExpirationReaper-7-Fetch
    ///     .build();
    /// assert!(format!("{purgatory:?}").contains("broker_id: 7"));
    /// purgatory.shutdown();
    /// # }
    /// ```
    pub fn broker_id(mut self, broker_id: i32) -> Self {
        self.settings.broker_id = broker_id;
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
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
    /// # }
    /// ```
    pub fn purge_interval(mut self, purge_interval: usize) -> Self {
        self.settings.purge_interval = purge_interval;
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false) // this test moves time itself
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// timer.time().sleep(500);
    /// assert!(purgatory.advance_clock(0), "the timeout expired on this thread");
    /// # }
    /// ```
    pub fn reaper_enabled(mut self, reaper_enabled: bool) -> Self {
        self.settings.reaper_enabled = reaper_enabled;
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
        self.settings.timer_enabled = timer_enabled;
        self
    }

    /// Sets how long one poll of the reaper waits for a timeout to expire. Default 200 ms,
    /// as in Kafka. Shutdown does not wait for a poll to end, whatever its length.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u8, Op>::builder("p")
    ///     .reaper_poll_ms(60_000)
    ///     .build();
    /// purgatory.shutdown(); // still prompt
    /// # }
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
        self.settings.reaper_poll_ms = reaper_poll_ms;
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
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if the reaper thread cannot be spawned.
    #[track_caller]
    pub fn build(self) -> DelayedOperationPurgatory<K, Op> {
        let name = &self.settings.purgatory_name;
        let for_own_timer = match (&self.shared_reaper, &self.pool) {
            (Some(_), _) => Some("`.shared_reaper(..)`"),
            (None, Some(_)) => Some("`.threadpool(..)`"),
            (None, None) => None,
        };
        if let (Some(_), Some(setting)) = (&self.timer, for_own_timer) {
            panic!(
                "DelayedOperationPurgatoryBuilder::build: `.timer(..)` and {setting} both given \
                 for purgatory {name:?}: {setting} is for the purgatory's own timer, and a given \
                 timer is driven and executed by its caller"
            );
        }
        let own_timer = || match self.pool {
            Some(pool) => SystemTimer::builder(name).threadpool(pool).build(),
            None => SystemTimer::new(name),
        };
        let (timer, system_timer) = match (self.timer, &self.shared_reaper) {
            (Some(timer), _) => (timer, None),
            (None, Some(reaper)) => {
                let driven = reaper.drive(own_timer());
                let own = driven.shared();
                (Arc::new(driven) as Arc<dyn Timer>, Some(own))
            }
            (None, None) => {
                let own = Arc::new(own_timer());
                (Arc::clone(&own) as Arc<dyn Timer>, Some(own))
            }
        };
        let shared = self.shared_reaper.is_some();
        let metrics = PurgatoryMetrics::new(&self.settings.purgatory_name);
        let inner = Arc::new(Inner {
            watch_lists: WatchLists::new(),
            purged_operations: AtomicUsize::new(0),
            expired: ExpiredCount::new(metrics.expiration_lateness()),
            shut_down: AtomicBool::new(false),
            warned: [AtomicBool::new(false), AtomicBool::new(false)],
            metrics,
            next_purge_ms: AtomicI64::new(if shared { i64::MIN } else { i64::MAX }),
            settings: self.settings,
            timer,
            system_timer,
        });
        // Kafka's `ExpiredOperationReaper`.
        let reaper = (inner.settings.reaper_enabled && !shared).then(|| {
            let (settings, reaping) = (&inner.settings, Arc::clone(&inner));
            let (broker_id, poll_ms) = (settings.broker_id, settings.reaper_poll_ms);
            let name = format!("ExpirationReaper-{broker_id}-{}", settings.purgatory_name);
            let period = Duration::from_millis(poll_ms.unsigned_abs());
            let poll = move || reaping.advance_clock(poll_ms);
            ReaperThread::spawn(&name, period, poll)
        });
        DelayedOperationPurgatory { inner, reaper }
    }
}

impl<K, Op> fmt::Debug for DelayedOperationPurgatoryBuilder<K, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedOperationPurgatoryBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
