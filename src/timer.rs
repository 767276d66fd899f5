//! The interface every timer offers (Kafka's `Timer`).

use std::sync::Arc;

use crate::{TimerTask, TimerTaskEntry};

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
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry;

    /// Waits up to `timeout_ms` for a bucket to expire, then advances the wheel and hands
    /// every expired task to the executor. Returns true if a bucket was flushed.
    fn advance_clock(&self, timeout_ms: i64) -> bool;

    /// Returns the number of tasks added and neither expired nor cancelled.
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
    ///   executor is running and the ones queued behind it. It waits at most 10 s after the
    ///   first `close` or `stop` of the timer, a deadline all callers share; past it, it
    ///   logs a warning and returns, and the late tasks still finish on the executor thread.
    ///   Called on the executor thread itself (from a task), it does not wait: a task cannot
    ///   wait for itself, or for the tasks queued behind it.
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
}

/// Implements [`Timer`] for a pointer type by delegating every call to the pointee.
macro_rules! delegate_timer {
    ($(#[$doc:meta])* $pointer:ident) => {
        $(#[$doc])*
        impl<T: Timer + ?Sized> Timer for $pointer<T> {
            fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
                (**self).add(task)
            }
            fn advance_clock(&self, timeout_ms: i64) -> bool {
                (**self).advance_clock(timeout_ms)
            }
            fn size(&self) -> usize {
                (**self).size()
            }
            fn close(&self) {
                (**self).close()
            }
            fn stop(&self) -> Vec<Box<dyn TimerTask>> {
                (**self).stop()
            }
        }
    };
}

delegate_timer! {
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
    Arc
}

delegate_timer! {
    /// A boxed timer is a timer, so a `Box<dyn Timer>` can go wherever `impl Timer` is
    /// asked for.
    Box
}
