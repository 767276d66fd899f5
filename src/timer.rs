//! The interface every timer offers (Kafka's `Timer`), and why a timer refuses a task.

use std::fmt;
use std::sync::Arc;

use crate::task::TimerTask;
use crate::time::{SystemClock, Time};
use crate::timer_task_entry::TimerTaskEntry;

/// What every timer offers, like Kafka's `Timer` interface. Object safe.
///
/// Implemented by [`SystemTimer`](crate::SystemTimer) (the hierarchical timing wheel),
/// [`SystemTimerReaper`](crate::SystemTimerReaper) (a `SystemTimer` with its own driver
/// thread) and [`MockTimer`](crate::MockTimer) (deterministic, for tests).
///
/// # Examples
///
/// ```
/// use timingwheel::{timer_task, MockTimer, Timer};
///
/// fn schedule_timeout(timer: &dyn Timer) -> timingwheel::TimerTaskEntry {
///     timer.add(timer_task(100, || {}))
/// }
///
/// let timer = MockTimer::new();
/// let entry = schedule_timeout(&timer);
/// assert_eq!(timer.size(), 1);
/// assert!(entry.cancel());
/// assert_eq!(timer.size(), 0);
/// ```
pub trait Timer: Send + Sync {
    /// Schedules `task` to run `task.delay_ms()` from now. Returns the handle that cancels it.
    ///
    /// A timer that cannot take the task — it is closed, or it holds its maximum of pending
    /// tasks — drops it without running it and returns an entry whose
    /// [`cancelled`](TimerTaskEntry::cancelled) is true. It never panics for that;
    /// [`try_add`](Timer::try_add) hands the task back instead.
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry;

    /// Like [`add`](Timer::add), but hands the task back, unrun, when the timer cannot take
    /// it, so that the caller can fail it (answer its request, count it).
    ///
    /// # Errors
    ///
    /// [`AddError::Closed`] once the timer is closed; [`AddError::Full`] when it holds its
    /// maximum of pending tasks ([`SystemTimerBuilder::max_pending`]) or its storage is
    /// full. A task whose delay is zero or negative never waits, so it is never refused
    /// for being full (but on a timer with
    /// [`max_in_flight`](crate::SystemTimerBuilder::max_in_flight), where it may wait).
    ///
    /// [`SystemTimerBuilder::max_pending`]: crate::SystemTimerBuilder::max_pending
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, AddError, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// assert!(timer.try_add(timer_task(100, || {})).is_ok());
    /// timer.close();
    /// match timer.try_add(timer_task(100, || {})) {
    ///     Err(AddError::Closed(task)) => assert_eq!(task.delay_ms(), 100),
    ///     other => panic!("a closed timer took a task: {other:?}"),
    /// }
    /// ```
    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError>;

    /// Like [`try_add`](Timer::try_add), but past any bound on pending tasks: a timer that
    /// holds its maximum ([`SystemTimerBuilder::max_pending`]) takes the task all the same,
    /// and goes over its bound by one. For a task that must not be lost, such as the one
    /// tick a periodic schedule keeps pending
    /// ([`schedule_periodic`](crate::schedule_periodic)): each user of it goes over the
    /// bound by at most one task of its own at a time.
    ///
    /// Provided as `try_add`, for a timer with no such bound; a wrapper forwards it.
    ///
    /// [`SystemTimerBuilder::max_pending`]: crate::SystemTimerBuilder::max_pending
    ///
    /// # Errors
    ///
    /// [`AddError::Closed`] once the timer is closed; [`AddError::Full`] only when its
    /// storage is full.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, SystemTimer, Timer};
    ///
    /// let timer = SystemTimer::builder("bounded").max_pending(1).build();
    /// timer.try_add(timer_task(60_000, || {})).unwrap();
    /// assert!(timer.try_add(timer_task(60_000, || {})).is_err(), "full");
    /// assert!(timer.try_add_unbounded(timer_task(60_000, || {})).is_ok());
    /// assert_eq!(timer.size(), 2, "one over the bound");
    /// ```
    fn try_add_unbounded(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        self.try_add(task)
    }

    /// Moves the pending task of `entry` to `delay_ms` from now on this timer's clock, in
    /// O(1), without allocating (Kafka: add the same task again; tokio-util:
    /// `DelayQueue::reset`; Linux: `mod_timer`).
    ///
    /// Returns true iff the task was still waiting and now waits for the new time — or, for
    /// `delay_ms <= 0`, was handed to the executor inside this call (a
    /// [`MockTimer`](crate::MockTimer) runs it inside the call, on the caller's thread).
    /// Returns false, changing nothing, if the task already ran or was handed to the
    /// executor, was cancelled, its timer is closed, or the entry belongs to another timer.
    ///
    /// Exactly-once holds whatever it races with: a concurrent expiry, `cancel` or `close`
    /// either happens before the move (and it returns false) or after it. Once it returned
    /// true, [`expiration_ms`](TimerTaskEntry::expiration_ms) reports the new expiration, on
    /// this handle and its clones, and the task never runs before it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let fired = Arc::new(AtomicBool::new(false));
    /// let f = fired.clone();
    /// let entry = timer.add(timer_task(100, move || f.store(true, Ordering::SeqCst)));
    /// timer.advance_clock(90);
    /// assert!(timer.reschedule(&entry, 100), "a heartbeat pushes the timeout back");
    /// assert_eq!(entry.expiration_ms(), timer.time().hi_res_clock_ms() + 100);
    /// timer.advance_clock(90);
    /// assert!(!fired.load(Ordering::SeqCst));
    /// timer.advance_clock(10);
    /// assert!(fired.load(Ordering::SeqCst));
    /// assert!(!timer.reschedule(&entry, 100), "it ran: nothing left to move");
    /// ```
    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool;

    /// Waits up to `timeout_ms` for a bucket to expire, then advances the wheel and hands
    /// every expired task to the executor. Returns true if a bucket was flushed.
    ///
    /// # What the return value says
    ///
    /// As in Kafka, true means a bucket (here, a list) was flushed, not that a task ran:
    ///
    /// - it can be true with nothing newly due: a [`SystemTimer`](crate::SystemTimer) moves
    ///   the entries of coarser buckets down ahead of time, and goes on with a flush that an
    ///   earlier call left unfinished before it waits for anything (see its "Flushing in
    ///   chunks");
    /// - it is false once `timeout_ms` passed with nothing due, and earlier only if the
    ///   timer is or gets closed (a thread blocked here wakes and returns false), or if the
    ///   timer does not wait at all, as a [`MockTimer`](crate::MockTimer), whose
    ///   `advance_clock` moves its clock instead.
    ///
    /// So a loop that drives a service runs until the timer is closed, as Kafka's reaper
    /// does (`while !timer.is_closed() { timer.advance_clock(200); }`); one that drains, as
    /// Kafka's tests do (`while timer.advance_clock(2000) {}`), ends at the first
    /// `timeout_ms` with nothing due, and a task added later waits for the next loop. The
    /// crate docs, "Driving the timer", show both.
    fn advance_clock(&self, timeout_ms: i64) -> bool;

    /// Returns the number of tasks added and neither expired nor cancelled.
    ///
    /// Read without waiting for the threads that add, cancel or flush: while they work, the
    /// count may lag them by a moment (never above a `max_pending` bound, but by the tasks
    /// of [`try_add_unbounded`](Timer::try_add_unbounded)). It is exact once the timer is
    /// quiet, and 0 once it is closed, since a closed timer holds no task.
    ///
    /// # Differences from Kafka
    ///
    /// Kafka's count is kept in an atomic that every add and removal updates, and a closed
    /// timer keeps its count (its tasks stay in the wheel).
    fn size(&self) -> usize;

    /// Stops the timer; idempotent. Tasks still waiting are dropped without running.
    ///
    /// Afterwards [`add`](Timer::add) runs nothing and returns an entry whose
    /// [`cancelled`](TimerTaskEntry::cancelled) is true, and
    /// [`advance_clock`](Timer::advance_clock) returns false at once (a thread blocked in it
    /// wakes). The handles of the dropped tasks stay valid: their `cancel()` returns false
    /// (there is nothing left to prevent) and `cancelled()` stays false. Each dropped
    /// task's `Drop` runs on the calling thread, with no lock held, before `close` returns.
    /// Dropping a timer closes it.
    ///
    /// # Blocking
    ///
    /// `close` returns only once the tasks already handed to the executor have finished —
    /// in every thread that calls it, concurrent callers included — so that nothing the
    /// timer started outlives it:
    ///
    /// - [`SystemTimer`](crate::SystemTimer) first waits for a flush in progress on another
    ///   thread (it holds the wheel's lock; it runs no user code), then for the task its
    ///   executor is running and the ones queued behind it. It waits at most 10 s (its
    ///   [`close_timeout`](crate::SystemTimerBuilder::close_timeout)) after the first
    ///   `close` or `stop` of the timer, a deadline all callers share; past it, it
    ///   logs a warning and returns, and the late tasks still finish on the executor thread.
    ///   Called on the executor thread itself (from a task), it does not wait: a task cannot
    ///   wait for itself, or for the tasks queued behind it. On an executor of the caller's
    ///   ([`threadpool`](crate::SystemTimerBuilder::threadpool),
    ///   [`executor`](crate::SystemTimerBuilder::executor)) it waits the same way for the
    ///   tasks it handed over, not for the executor's other work; called from one of its
    ///   tasks, for those already running on other threads.
    /// - [`SystemTimerReaper`](crate::SystemTimerReaper) closes its timer as above, then
    ///   waits for its reaper thread to end: an idle one ends in a few milliseconds.
    /// - [`MockTimer`](crate::MockTimer) never blocks: it has no executor, and runs tasks on
    ///   the threads that call it.
    fn close(&self);

    /// Stops the timer like [`close`](Timer::close), and hands back every task still
    /// waiting (neither run, nor handed to the executor, nor cancelled), in no particular
    /// order, so that the caller can fail them (like Netty's `HashedWheelTimer.stop()`).
    /// A second call returns an empty `Vec`.
    ///
    /// Blocks as `close` does, for the same tasks. The handles of the tasks handed back
    /// can no longer cancel them (`cancel()` returns false, `cancelled()` stays false): the
    /// caller owns them now, to run, fail or drop. Tasks already on the executor are not
    /// handed back; they finish before `stop` returns.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(1_000, || unreachable!("stopped first")));
    /// let waiting = timer.stop();
    /// assert_eq!(waiting.len(), 1);
    /// assert_eq!(waiting[0].delay_ms(), 1_000);
    /// assert!(!entry.cancel(), "a handed-back task can no longer be cancelled");
    /// assert!(timer.stop().is_empty());
    /// ```
    fn stop(&self) -> Vec<Box<dyn TimerTask>>;

    /// Returns the clock the timer's expirations are on (`expiration_ms` is on its
    /// [`hi_res_clock_ms`](Time::hi_res_clock_ms)), for code built on the trait that turns
    /// a deadline into a delay or back ([`KeyedTimer::pending`](crate::KeyedTimer)).
    /// Provided as the system clock; `SystemTimer` and `MockTimer` return their own, and a
    /// wrapper forwards it.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = MockTimer::new();
    /// let entry = timer.add(timer_task(250, || {}));
    /// assert_eq!(entry.expiration_ms() - timer.clock().hi_res_clock_ms(), 250);
    /// ```
    fn clock(&self) -> Arc<dyn Time> {
        Arc::new(SystemClock)
    }
}

/// Implements [`Timer`] for a wrapper: every call goes to `inner`, each task through
/// `wrap` first; `close` and `stop` are the wrapper's own. The one home of the forwarding,
/// so that a method added to `Timer` is forwarded by every wrapper.
macro_rules! forward_timer {
    (
        $(#[$attr:meta])*
        impl[$($generics:tt)*] for $wrapper:ty,
        inner: |$this:ident| $inner:expr,
        wrap: |$task:ident| $wrap:expr,
        close: $close:block,
        stop: $stop:block $(,)?
    ) => {
        $(#[$attr])*
        impl<$($generics)*> $crate::timer::Timer for $wrapper {
            fn add(&$this, $task: Box<dyn $crate::task::TimerTask>) -> $crate::TimerTaskEntry {
                $inner.add($wrap)
            }
            fn try_add(
                &$this,
                $task: Box<dyn $crate::task::TimerTask>,
            ) -> Result<$crate::TimerTaskEntry, $crate::timer::AddError> {
                $inner.try_add($wrap)
            }
            fn try_add_unbounded(
                &$this,
                $task: Box<dyn $crate::task::TimerTask>,
            ) -> Result<$crate::TimerTaskEntry, $crate::timer::AddError> {
                $inner.try_add_unbounded($wrap)
            }
            fn reschedule(&$this, entry: &$crate::TimerTaskEntry, delay_ms: i64) -> bool {
                $inner.reschedule(entry, delay_ms)
            }
            fn advance_clock(&$this, timeout_ms: i64) -> bool {
                $inner.advance_clock(timeout_ms)
            }
            fn size(&$this) -> usize {
                $inner.size()
            }
            fn close(&$this) $close
            fn stop(&$this) -> Vec<Box<dyn $crate::task::TimerTask>> $stop
            fn clock(&$this) -> std::sync::Arc<dyn $crate::time::Time> {
                $inner.clock()
            }
        }
    };
}
pub(crate) use forward_timer;

forward_timer! {
    /// A shared timer is a timer: a reaper can drive a timer the caller keeps an `Arc` of,
    /// and a purgatory can run on an `Arc<MockTimer>` that a test keeps driving.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let shared: Box<dyn Timer> = Box::new(Arc::clone(&timer));
    /// shared.add(timer_task(10, || {}));
    /// assert_eq!(timer.size(), 1);
    /// ```
    impl[T: Timer + ?Sized] for Arc<T>,
    inner: |self| (**self),
    wrap: |task| task,
    close: { (**self).close() },
    stop: { (**self).stop() },
}

forward_timer! {
    /// A boxed timer is a timer, so a `Box<dyn Timer>` can go wherever `impl Timer` is
    /// asked for.
    impl[T: Timer + ?Sized] for Box<T>,
    inner: |self| (**self),
    wrap: |task| task,
    close: { (**self).close() },
    stop: { (**self).stop() },
}

/// Why a timer did not take a task. The task comes back, unrun, so that the caller can fail
/// it; see [`Timer::try_add`].
///
/// # Examples
///
/// ```
/// use timingwheel::{timer_task, AddError, SystemTimer, Timer};
///
/// let timer = SystemTimer::builder("bounded").max_pending(1).build();
/// timer.try_add(timer_task(60_000, || {})).unwrap();
/// let refused = timer.try_add(timer_task(60_000, || {})).unwrap_err();
/// assert!(matches!(refused, AddError::Full(_)));
/// assert_eq!(refused.to_string(), "the timer holds its maximum of pending tasks");
/// let task = refused.into_task(); // fail it, run it elsewhere, or drop it
/// assert_eq!(task.delay_ms(), 60_000);
/// ```
pub enum AddError {
    /// The timer is closed.
    Closed(Box<dyn TimerTask>),
    /// The timer holds its maximum of pending tasks (`max_pending`), or its storage is full.
    Full(Box<dyn TimerTask>),
}

impl AddError {
    /// Returns the task the timer did not take.
    pub fn into_task(self) -> Box<dyn TimerTask> {
        match self {
            AddError::Closed(task) | AddError::Full(task) => task,
        }
    }
}

impl fmt::Debug for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Closed(_) => f.write_str("Closed(..)"),
            AddError::Full(_) => f.write_str("Full(..)"),
        }
    }
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Closed(_) => f.write_str("the timer is closed"),
            AddError::Full(_) => f.write_str("the timer holds its maximum of pending tasks"),
        }
    }
}

impl std::error::Error for AddError {}
