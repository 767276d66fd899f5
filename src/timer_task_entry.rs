//! The handle `add` returns (Kafka's `TimerTaskEntry`, seen from the outside).
//!
//! # Ground rules
//!
//! - The task itself never lives in the handle. It lives in the timer's storage (for
//!   [`SystemTimer`](crate::SystemTimer), a slot of the entry store; for
//!   [`MockTimer`](crate::MockTimer), its map), and is moved out of there exactly once,
//!   under that storage's lock: either to the executor, or to [`TimerTaskEntry::cancel`],
//!   which drops it. Whoever moves it out decides the outcome, so cancel and run can never
//!   both happen.
//! - The handle names its slot by index and a generation number that is never reused, so a
//!   stale handle can never reach a later task that took over the same slot.
//! - The "was cancelled" flag is per handle until the handle is first cloned; from then on
//!   the handle and all its clones share one flag (see [`CancelFlag`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock};

use crate::TimerTask;

/// Where a pending task lives, and how to take it back out.
pub(crate) trait EntryOwner: Send + Sync {
    /// Removes the pending task named by `key`, if it is still pending, and returns it.
    /// Returns `None` if it already ran, was cancelled, or was dropped by `close`.
    fn take_pending(&self, key: EntryKey) -> Option<Box<dyn TimerTask>>;
}

/// Names one pending task inside its owner: a slot and the generation it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryKey {
    pub(crate) index: u32,
    pub(crate) generation: u64,
}

/// Handle to one scheduled task, returned by [`Timer::add`](crate::Timer::add).
///
/// Cheap to clone, `Send + Sync`. Dropping it does not cancel the task.
///
/// # Examples
///
/// ```
/// use timingwheel::{timer_task, MockTimer, Timer};
///
/// let timer = MockTimer::new();
/// let entry = timer.add(timer_task(1_000, || unreachable!("cancelled in time")));
/// let other = entry.clone();
/// assert!(entry.cancel());
/// assert!(!other.cancel(), "only one cancel can win");
/// assert!(other.cancelled());
/// assert!(!timer.advance_clock(5_000));
/// ```
pub struct TimerTaskEntry {
    /// `None` when the task never entered the timer's storage: it was already expired and
    /// went straight to the executor, or a closed timer refused it.
    owner: Option<Arc<dyn EntryOwner>>,
    key: EntryKey,
    expiration_ms: i64,
    cancelled: CancelFlag,
}

impl TimerTaskEntry {
    /// A handle to a task that waits in `owner` under `key`.
    pub(crate) fn pending(owner: Arc<dyn EntryOwner>, key: EntryKey, expiration_ms: i64) -> Self {
        TimerTaskEntry {
            owner: Some(owner),
            key,
            expiration_ms,
            cancelled: CancelFlag::new(false),
        }
    }

    /// A handle to a task that was handed to the executor (or run) inside `add`.
    pub(crate) fn expired(expiration_ms: i64) -> Self {
        TimerTaskEntry::detached(expiration_ms, false)
    }

    /// A handle to a task that a closed timer refused (and dropped without running).
    pub(crate) fn refused(expiration_ms: i64) -> Self {
        TimerTaskEntry::detached(expiration_ms, true)
    }

    /// A handle to a task that never entered the timer's storage.
    fn detached(expiration_ms: i64, cancelled: bool) -> Self {
        TimerTaskEntry {
            owner: None,
            key: EntryKey {
                index: 0,
                generation: 0,
            },
            expiration_ms,
            cancelled: CancelFlag::new(cancelled),
        }
    }

    /// Returns the absolute expiration on the timer's clock: the time of `add` plus the
    /// task's delay, saturating at `i64::MIN` and `i64::MAX`.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let now = timer.time().hi_res_clock_ms();
    /// assert_eq!(timer.add(timer_task(250, || {})).expiration_ms(), now + 250);
    /// assert_eq!(timer.add(timer_task(i64::MAX, || {})).expiration_ms(), i64::MAX);
    /// ```
    pub fn expiration_ms(&self) -> i64 {
        self.expiration_ms
    }

    /// Stops the timer for this task. Returns true iff this call prevented the task from
    /// ever running.
    ///
    /// O(1): the task is unlinked from its bucket and dropped inside this call, so a
    /// cancelled timeout holds no memory. Returns false if the task already ran or was
    /// handed to the executor, if it was cancelled before (through this handle or a clone),
    /// or if its timer was closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(100, || {}));
    /// assert!(entry.cancel());
    /// assert!(!entry.cancel());
    /// assert_eq!(timer.size(), 0);
    /// ```
    ///
    /// # Differences from Kafka
    ///
    /// Kafka's cancel cannot stop a task that a concurrent flush is moving, and reports
    /// nothing. Here the entry's slot decides: exactly one of `cancel` and the executor gets
    /// the task, and `cancel` says which.
    pub fn cancel(&self) -> bool {
        let Some(owner) = &self.owner else {
            return false;
        };
        match owner.take_pending(self.key) {
            Some(task) => {
                self.cancelled.set();
                // Dropped here, after the owner's lock was released: a task's `Drop` may
                // call back into the timer.
                drop(task);
                true
            }
            None => false,
        }
    }

    /// Returns true once the task was cancelled through this handle or one of its clones,
    /// or refused by a closed timer.
    ///
    /// Stays false for a task that ran, or that a closed timer dropped while it waited.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(100, || {}));
    /// assert!(!entry.cancelled());
    /// entry.cancel();
    /// assert!(entry.cancelled());
    /// ```
    pub fn cancelled(&self) -> bool {
        self.cancelled.get()
    }
}

impl Clone for TimerTaskEntry {
    fn clone(&self) -> Self {
        TimerTaskEntry {
            owner: self.owner.clone(),
            key: self.key,
            expiration_ms: self.expiration_ms,
            cancelled: self.cancelled.share(),
        }
    }
}

impl fmt::Debug for TimerTaskEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerTaskEntry")
            .field("expiration_ms", &self.expiration_ms)
            .field("cancelled", &self.cancelled())
            .finish_non_exhaustive()
    }
}

/// The "was cancelled" flag of a handle and its clones, without an allocation per `add`.
///
/// A handle that was never cloned keeps the flag in `own`. The first clone creates `shared`;
/// from then on every clone reads and writes `shared`, and the original reads both.
/// Setting and sharing are ordered by a `SeqCst` fence on each side (a store-buffering
/// pattern): either `set` sees `shared` and writes it, or `share` sees `own` and copies it,
/// so a cancel through any handle is seen by all of them.
struct CancelFlag {
    own: AtomicBool,
    shared: OnceLock<Arc<AtomicBool>>,
}

impl CancelFlag {
    fn new(value: bool) -> Self {
        CancelFlag {
            own: AtomicBool::new(value),
            shared: OnceLock::new(),
        }
    }

    fn set(&self) {
        self.own.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(shared) = self.shared.get() {
            shared.store(true, Ordering::SeqCst);
        }
    }

    fn get(&self) -> bool {
        self.own.load(Ordering::SeqCst)
            || self
                .shared
                .get()
                .is_some_and(|shared| shared.load(Ordering::SeqCst))
    }

    /// Returns a flag for a clone, tied to this one.
    fn share(&self) -> Self {
        let shared = self.shared.get_or_init(|| Arc::new(AtomicBool::new(false)));
        fence(Ordering::SeqCst);
        if self.own.load(Ordering::SeqCst) {
            shared.store(true, Ordering::SeqCst);
        }
        CancelFlag {
            own: AtomicBool::new(false),
            shared: OnceLock::from(Arc::clone(shared)),
        }
    }
}
