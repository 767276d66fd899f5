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
    fn close(&self);

    /// Stops the timer like [`close`](Timer::close), and hands back every task still
    /// waiting (neither run, nor handed to the executor, nor cancelled), in no particular
    /// order, so that the caller can fail them (like Netty's `HashedWheelTimer.stop()`).
    /// A second call returns an empty `Vec`.
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
