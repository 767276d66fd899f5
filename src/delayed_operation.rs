//! Kafka's `DelayedOperation`: the user's side ([`DelayedOperation`]) and the operation as
//! the purgatory tracks it ([`Delayed`]).
//!
//! # Ground rules
//!
//! The locking is the one KAFKA-19312 introduced (apache/kafka#19759): `forceComplete`
//! checks `completed`, takes the operation's lock, checks again and completes, and the expiry
//! is `if (forceComplete()) onExpiration()`. (A later trunk runs `onExpiration` under the
//! lock; `docs/design.md` says which sources were read.)
//!
//! - **State machine.** An operation is *pending* or *completed*; `completed` (an
//!   `AtomicBool`) goes from `false` to `true` once, by one `compare_exchange` made under
//!   the operation's `lock`, and never back. Whoever wins that exchange — a `try_complete`
//!   whose user check said yes, a `force_complete`, or the expiry (which is a
//!   `force_complete`) — and only that caller cancels the timeout and runs `on_complete`,
//!   still under the lock; the expiry then releases the lock and runs `on_expiration`.
//!   Every other caller finds `completed` set, before or after taking the lock, and does
//!   nothing. So `on_complete` runs exactly once, and `on_expiration` at most once and only
//!   after an expiry, whatever races.
//!
//!   ```text
//!            try_complete / force_complete / expiry: check, lock, check again
//!   pending ───────────── compare_exchange(false, true), under the lock ──────────▶ completed
//!       the winner, under the lock: cancel timeout; on_complete.  Expiry, after it: on_expiration
//!   ```
//!
//! - **`lock`** (a re-entrant mutex, Kafka's `ReentrantLock`) is held around the user's
//!   `try_complete` and the completion it triggers, around `force_complete`'s completion
//!   (so the expiry's too), and by the purgatory's `try_complete_else_watch` from its first
//!   `try_complete` to its second, across the watching. So `on_complete` never overlaps a
//!   `try_complete` in progress on another thread. Re-entrant, so a callback may call back
//!   into its own operation: a `force_complete` from inside `try_complete` completes it.
//!   `on_expiration` runs with the lock released.
//! - **`timeout`** (a `Mutex<Option<TimerTaskEntry>>`) holds the handle of the pending
//!   timeout. It is a leaf: no other lock is taken and no user code runs while it is held.
//!   The purgatory stores the handle after `Timer::add`, then reads `completed`; a completer
//!   sets `completed`, then takes the handle. Both sides take the slot's lock, so at least
//!   one of them sees the other's write and the timeout is cancelled (an operation never
//!   keeps a timer entry after it completed).
//! - **Lock order:** `lock` may be held while taking a watch-list shard of the purgatory
//!   (watching) or `timeout` (completing); never the other way round. `timeout` is released
//!   before the timer's own locks are taken (by [`TimerTaskEntry::cancel`]), and no
//!   purgatory lock is held while the timer runs an expiry, which takes `lock` from the
//!   outside like any other caller.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, ReentrantMutex, ReentrantMutexGuard};

use crate::lateness::{LatenessHistogram, RUNNING_LATE_US};
use crate::task::TimerTask;
use crate::timer_task_entry::TimerTaskEntry;

/// Kafka's `DelayedOperation`, the user's side: implement it for your operation.
///
/// An operation waits for a condition (enough replica acknowledgements, enough bytes to
/// fetch) or its timeout, whichever comes first. Wrap it in a [`Delayed`] and hand that to
/// [`DelayedOperationPurgatory::try_complete_else_watch`](crate::DelayedOperationPurgatory::try_complete_else_watch).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use timingwheel::{Delayed, DelayedOperation};
///
/// /// A produce request waiting for `needed` acknowledgements.
/// struct Produce {
///     acks: AtomicU32,
///     needed: u32,
/// }
///
/// impl DelayedOperation for Produce {
///     fn delay_ms(&self) -> i64 {
///         30_000
///     }
///     fn try_complete(&self) -> bool {
///         self.acks.load(Ordering::SeqCst) >= self.needed
///     }
///     fn on_complete(&self) {
///         // Send the response.
///     }
///     fn on_expiration(&self) {
///         // Count the timeout.
///     }
/// }
///
/// let produce = Delayed::new(Produce { acks: AtomicU32::new(0), needed: 2 });
/// assert!(!produce.try_complete());
/// produce.operation().acks.store(2, Ordering::SeqCst);
/// assert!(produce.try_complete());
/// assert!(produce.is_completed());
/// ```
pub trait DelayedOperation: Send + Sync + 'static {
    /// Returns how long the operation may wait, in milliseconds, from the moment it is
    /// watched. Read once, when the purgatory adds the timeout to its timer.
    fn delay_ms(&self) -> i64;

    /// Returns whether the operation can complete now. Called under the operation's lock,
    /// never once it has completed. Returning true completes it: its timeout is cancelled
    /// and [`on_complete`](DelayedOperation::on_complete) runs, still under the lock.
    ///
    /// To complete the operation, return true: that is what Kafka's operations do by
    /// calling `forceComplete()` from here. Do not store the operation's own [`Delayed`]
    /// inside it (in a `OnceLock`, say) to call `force_complete` on: the `Delayed` holds
    /// the operation, so that is a reference cycle, and every such operation leaks.
    fn try_complete(&self) -> bool;

    /// The completion logic (send the response). Runs exactly once per operation, on the
    /// thread that completed it: a caller of `try_complete`/`check_and_complete`, a caller
    /// of `force_complete`, or the thread that runs expired timeouts. Runs under the
    /// operation's lock, so never while another thread is inside
    /// [`try_complete`](DelayedOperation::try_complete) (as KAFKA-19312 made it).
    fn on_complete(&self);

    /// Runs right after [`on_complete`](DelayedOperation::on_complete), on the same thread,
    /// when the operation completed because it expired, once the operation's lock is
    /// released (as KAFKA-19312 left it, where the expiry is `if (forceComplete())
    /// onExpiration()`). Never runs for an operation completed any other way.
    fn on_expiration(&self);
}

/// An operation as the purgatory tracks it (Kafka's `DelayedOperation` object): the user's
/// operation, its completed flag, its lock and its timeout.
///
/// Clones share all of it (an `Arc` inside); cloning needs no `Op: Clone`. `Send + Sync`.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use timingwheel::{Delayed, DelayedOperation};
///
/// #[derive(Default)]
/// struct Op {
///     completions: AtomicUsize,
/// }
///
/// impl DelayedOperation for Op {
///     fn delay_ms(&self) -> i64 {
///         1_000
///     }
///     fn try_complete(&self) -> bool {
///         false
///     }
///     fn on_complete(&self) {
///         self.completions.fetch_add(1, Ordering::SeqCst);
///     }
///     fn on_expiration(&self) {}
/// }
///
/// let op = Delayed::new(Op::default());
/// let clone = op.clone();
/// assert!(clone.force_complete());
/// assert!(!op.force_complete(), "completes once, whichever clone asks");
/// assert!(op.is_completed());
/// assert_eq!(op.operation().completions.load(Ordering::SeqCst), 1);
/// ```
///
/// # Differences from Kafka
///
/// None in how it completes: that follows KAFKA-19312,
/// where `forceComplete` checks `completed`, takes the operation's lock, checks again and
/// completes, so `onComplete` never overlaps a `tryComplete` in progress, and the expiry
/// runs `onExpiration` after the lock is released. (Kafka up to 4.0 set `completed` with
/// `compareAndSet` and took no lock in `forceComplete`; in no version can `onComplete` run
/// twice.) Completion cancels the timeout by its handle, which unlinks the timer's entry at
/// once, as Kafka's `cancel()` does; here the timer's task, and with it the timer's
/// reference to the operation, is also dropped inside the call, where Kafka leaves it to
/// the garbage collector.
pub struct Delayed<Op> {
    shared: Arc<Shared<Op>>,
}

struct Shared<Op> {
    /// Pending (`false`) or completed (`true`). Changed once, by `compare_exchange`; needs no
    /// lock.
    completed: AtomicBool,
    /// Held around the user's `try_complete` and around every completion (see the module's
    /// ground rules). Guards no data of its own.
    lock: ReentrantMutex<()>,
    /// The handle of the pending timeout, if the purgatory added one and nobody has taken it
    /// since. Guarded by its own mutex, a leaf lock.
    timeout: Mutex<Option<TimerTaskEntry>>,
    /// The user's operation; immutable here (it synchronises its own state).
    operation: Op,
}

impl<Op> Clone for Delayed<Op> {
    fn clone(&self) -> Self {
        Delayed {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Op: DelayedOperation> Delayed<Op> {
    /// Wraps `operation`, pending, with no timeout yet.
    ///
    /// # Examples
    ///
    /// ```
    /// # use timingwheel::Delayed;
    /// # include!("doc_op.rs");
    /// # fn main() {
    /// let op = Delayed::new(Op);
    /// assert!(!op.is_completed());
    /// # }
    /// ```
    pub fn new(operation: Op) -> Delayed<Op> {
        Delayed {
            shared: Arc::new(Shared {
                completed: AtomicBool::new(false),
                lock: ReentrantMutex::new(()),
                timeout: Mutex::new(None),
                operation,
            }),
        }
    }

    /// Returns the user's operation.
    ///
    /// # Examples
    ///
    /// ```
    /// # use timingwheel::{Delayed, DelayedOperation};
    /// struct Fetch { min_bytes: usize }
    /// # impl DelayedOperation for Fetch {
    /// #     fn delay_ms(&self) -> i64 { 10 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    /// let fetch = Delayed::new(Fetch { min_bytes: 1_024 });
    /// assert_eq!(fetch.operation().min_bytes, 1_024);
    /// ```
    pub fn operation(&self) -> &Op {
        &self.shared.operation
    }

    /// Returns true once the operation has completed, whichever way.
    ///
    /// # Examples
    ///
    /// ```
    /// # use timingwheel::Delayed;
    /// # include!("doc_op.rs");
    /// # fn main() {
    /// let op = Delayed::new(Op);
    /// assert!(!op.is_completed());
    /// op.force_complete();
    /// assert!(op.is_completed());
    /// # }
    /// ```
    pub fn is_completed(&self) -> bool {
        self.shared.completed.load(Ordering::Acquire)
    }

    /// Completes the operation now unless it already completed: cancels its timeout and runs
    /// `on_complete`. Returns true iff this call completed it (Kafka's `forceComplete`).
    ///
    /// As KAFKA-19312 made it: returns false at once if the operation has completed;
    /// else takes the operation's lock, waiting while another thread is inside its
    /// `try_complete`, checks again, and completes it. So `on_complete` never overlaps a
    /// `try_complete` in progress on another thread, and the operation completes once
    /// whatever races. The lock is re-entrant, so a call from inside a `try_complete`
    /// completes the operation there; but an operation completes itself by returning true
    /// from its `try_complete`, not by keeping its own `Delayed` (a reference cycle: see
    /// [`DelayedOperation::try_complete`]). `on_complete` runs on this thread, under the lock; a panic in it propagates to the
    /// caller, and the operation stays completed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 30_000 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) { unreachable!("completed before it expired") }
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<&str, Op>::builder("produce")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// let op = Delayed::new(Op);
    /// assert!(!purgatory.try_complete_else_watch(&op, &["topic-0"]));
    /// assert_eq!(purgatory.num_delayed(), 1);
    /// assert!(op.force_complete());
    /// assert_eq!(purgatory.num_delayed(), 0, "its timeout was cancelled inside the call");
    /// assert!(!op.force_complete());
    /// ```
    pub fn force_complete(&self) -> bool {
        self.complete(true)
    }

    /// Under the operation's lock: unless it has completed, asks the user's
    /// [`try_complete`](DelayedOperation::try_complete) and completes the operation if that
    /// says so. Returns true iff this call completed it (Kafka's `safeTryComplete`): the
    /// user's check said yes, and the operation completed, by that answer or by a
    /// `force_complete` the check made itself.
    ///
    /// Waits for the lock if another thread holds it, so a check made after the operation
    /// became completable is never skipped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    /// use timingwheel::{Delayed, DelayedOperation};
    ///
    /// struct Op(AtomicBool);
    /// impl DelayedOperation for Op {
    ///     fn delay_ms(&self) -> i64 { 1_000 }
    ///     fn try_complete(&self) -> bool { self.0.load(Ordering::SeqCst) }
    ///     fn on_complete(&self) {}
    ///     fn on_expiration(&self) {}
    /// }
    ///
    /// let op = Delayed::new(Op(AtomicBool::new(false)));
    /// assert!(!op.try_complete());
    /// op.operation().0.store(true, Ordering::SeqCst);
    /// assert!(op.try_complete());
    /// assert!(!op.try_complete(), "already completed: the user's check is not asked again");
    /// ```
    pub fn try_complete(&self) -> bool {
        let _locked = self.lock();
        self.try_complete_locked()
    }

    /// Returns true if the calling thread holds the operation's lock (Java's
    /// `ReentrantLock.isHeldByCurrentThread`). Meant for assertions in an operation's
    /// callbacks.
    ///
    /// # Examples
    ///
    /// ```
    /// # use timingwheel::Delayed;
    /// # include!("doc_op.rs");
    /// # fn main() {
    /// let op = Delayed::new(Op);
    /// assert!(!op.is_locked_by_current_thread());
    /// # }
    /// ```
    pub fn is_locked_by_current_thread(&self) -> bool {
        self.shared.lock.is_owned_by_current_thread()
    }

    /// Takes the operation's lock (reentrant).
    pub(crate) fn lock(&self) -> ReentrantMutexGuard<'_, ()> {
        self.shared.lock.lock()
    }

    /// `try_complete` for a caller that holds the lock. True iff the user's check said yes:
    /// then the operation completed, by the completion that answer triggers or by a
    /// `force_complete` the check made itself (under this lock, nobody else can).
    pub(crate) fn try_complete_locked(&self) -> bool {
        debug_assert!(self.is_locked_by_current_thread());
        let completable = !self.is_completed() && self.shared.operation.try_complete();
        if completable {
            self.complete_locked(true);
        }
        completable
    }

    /// Kafka's `forceComplete`: check, lock, check again, complete. True iff this call
    /// completed the operation.
    fn complete(&self, cancel_timeout: bool) -> bool {
        if self.is_completed() {
            return false;
        }
        let _locked = self.lock();
        self.complete_locked(cancel_timeout)
    }

    /// Wins the operation's one decision (true for exactly one caller ever), or returns
    /// false; for a caller that holds the lock. The winner releases the timeout (see
    /// [`release_timeout`](Self::release_timeout)), then runs `on_complete`.
    fn complete_locked(&self, cancel_timeout: bool) -> bool {
        debug_assert!(self.is_locked_by_current_thread());
        let completed = &self.shared.completed;
        let won = completed.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire);
        if won.is_err() {
            return false;
        }
        self.release_timeout(cancel_timeout);
        self.shared.operation.on_complete();
        true
    }

    /// The expiry (Kafka's `if (forceComplete()) onExpiration()`): completes the operation
    /// unless it already completed, and then calls `counted` and, with the lock released,
    /// runs `on_expiration`. `cancel_timeout` is false for the operation's own timeout task,
    /// true for an expiry the timer did not run (a timeout left from an earlier watch is
    /// cancelled).
    pub(crate) fn expire(&self, cancel_timeout: bool, counted: impl FnOnce()) {
        if self.complete(cancel_timeout) {
            counted();
            self.shared.operation.on_expiration();
        }
    }

    /// Stores the handle of the timeout just added for this operation. If the operation
    /// completed meanwhile, cancels it again at once (its completer may have looked at the
    /// slot before the handle was there).
    pub(crate) fn set_timeout(&self, entry: TimerTaskEntry) {
        let replaced = self.shared.timeout.lock().replace(entry);
        // Watched again: the newer timeout replaces the older one.
        if let Some(replaced) = replaced {
            replaced.cancel();
        }
        if self.is_completed() {
            self.release_timeout(true);
        }
    }

    /// Takes the pending timeout's handle, if there is one, and cancels it (its task is
    /// dropped inside the call) if `cancel`; else only lets go of it: for the expiry, whose
    /// task is the one running.
    pub(crate) fn release_timeout(&self, cancel: bool) {
        // Taken out under the slot's lock, cancelled after it is released.
        let timeout = self.shared.timeout.lock().take();
        if let Some(entry) = timeout.filter(|_| cancel) {
            entry.cancel();
        }
    }
}

impl<Op> Delayed<Op> {
    /// Returns true if `self` and `other` are clones of one operation.
    ///
    /// # Examples
    ///
    /// ```
    /// # use timingwheel::Delayed;
    /// # include!("doc_op.rs");
    /// # fn main() {
    /// let a = Delayed::new(Op);
    /// assert!(a.ptr_eq(&a.clone()));
    /// assert!(!a.ptr_eq(&Delayed::new(Op)));
    /// # }
    /// ```
    pub fn ptr_eq(&self, other: &Delayed<Op>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl<Op> fmt::Debug for Delayed<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delayed")
            .field("completed", &self.shared.completed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The timer task of an operation's timeout: when it runs, the operation expires.
pub(crate) struct Expiry<Op> {
    pub(crate) operation: Delayed<Op>,
    /// The stripe of the purgatory's [`ExpiredCount`] this operation counts in.
    pub(crate) expired: Arc<ExpiredStripe>,
}

impl<Op: DelayedOperation> TimerTask for Expiry<Op> {
    fn delay_ms(&self) -> i64 {
        self.operation.operation().delay_ms()
    }

    fn run(self: Box<Self>) {
        // The timeout's handle is this very task's: it cancels nothing, it is only let go.
        self.operation
            .expire(false, || self.expired.count(RUNNING_LATE_US.get()));
    }
}

/// Stripes of an [`ExpiredCount`]: enough that operations watched by different threads
/// rarely share one.
const EXPIRED_STRIPES: usize = 32;

/// Operations completed by expiring, for a purgatory's `expired_count`. Each expiry task
/// keeps a reference to the stripe its operation counts in (picked by the operation's
/// address), so that threads watching different operations do not all bump one
/// reference count on one cache line, as a single shared counter would make them.
pub(crate) struct ExpiredCount(Box<[Arc<ExpiredStripe>]>);

/// One stripe of an [`ExpiredCount`], with its reference count on cache lines of its own.
#[repr(align(128))]
pub(crate) struct ExpiredStripe {
    count: AtomicU64,
    /// Where expiries count how late they ran, if anywhere (the `metrics` feature).
    lateness: Option<Arc<LatenessHistogram>>,
}

impl ExpiredCount {
    /// A count of zero, whose expiries count how late they ran in `lateness`, if given.
    pub(crate) fn new(lateness: Option<Arc<LatenessHistogram>>) -> ExpiredCount {
        let stripe = |_| {
            let lateness = lateness.clone();
            Arc::new(ExpiredStripe {
                count: AtomicU64::new(0),
                lateness,
            })
        };
        ExpiredCount((0..EXPIRED_STRIPES).map(stripe).collect())
    }

    /// Operations counted so far.
    pub(crate) fn total(&self) -> u64 {
        let count = |stripe: &Arc<ExpiredStripe>| stripe.count.load(Ordering::Relaxed);
        self.0.iter().map(count).sum()
    }

    /// The stripe `operation` counts in.
    pub(crate) fn stripe_of<Op>(&self, operation: &Delayed<Op>) -> &Arc<ExpiredStripe> {
        // Bits of the address above a cache line: operations allocated apart differ there.
        let address = Arc::as_ptr(&operation.shared).cast::<()>() as usize;
        &self.0[(address >> 6) % EXPIRED_STRIPES]
    }
}

impl ExpiredStripe {
    /// Counts one expiry, and how late it started (`late_us`, as its timer measured it:
    /// `crate::lateness`) if lateness is counted at all.
    pub(crate) fn count(&self, late_us: Option<u64>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let (Some(lateness), Some(late_us)) = (&self.lateness, late_us) {
            lateness.record(late_us);
        }
    }
}
