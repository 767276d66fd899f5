//! The interface every timer offers (Kafka's `Timer`).

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

    /// Stops the timer; idempotent.
    fn close(&self);
}
