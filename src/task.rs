//! The unit of delayed work (Kafka's `TimerTask`), and delays as a Rust user writes them:
//! `i64` milliseconds (Kafka's) or a [`Duration`].

use std::fmt;
use std::time::Duration;

/// A unit of delayed work, like Kafka's `TimerTask`.
///
/// A task is handed to [`Timer::add`](crate::Timer::add) as a `Box<dyn TimerTask>`. The timer
/// asks for [`delay_ms`](TimerTask::delay_ms) once, inside `add`, and later either calls
/// [`run`](TimerTask::run) exactly once on its executor thread, or drops the task without
/// running it (when it is cancelled, or when the timer is closed first).
///
/// For a closure, [`timer_task`] saves writing a struct.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use timingwheel::{MockTimer, Timer, TimerTask};
///
/// struct Expire {
///     order_id: u64,
///     expired: Arc<AtomicBool>,
/// }
///
/// impl TimerTask for Expire {
///     fn delay_ms(&self) -> i64 {
///         30_000
///     }
///     fn run(self: Box<Self>) {
///         assert_eq!(self.order_id, 7);
///         self.expired.store(true, Ordering::SeqCst);
///     }
/// }
///
/// let timer = MockTimer::new();
/// let expired = Arc::new(AtomicBool::new(false));
/// timer.add(Box::new(Expire { order_id: 7, expired: expired.clone() }));
/// timer.advance_clock(30_000);
/// assert!(expired.load(Ordering::SeqCst));
/// ```
pub trait TimerTask: Send + 'static {
    /// Returns the delay, in milliseconds, from the moment of [`Timer::add`](crate::Timer::add).
    ///
    /// Zero or negative means the task is already expired: it runs as soon as possible.
    fn delay_ms(&self) -> i64;

    /// Does the work. Called at most once, on the timer's executor thread, when the task
    /// expires. A panic here is caught and logged; the executor goes on with other tasks.
    fn run(self: Box<Self>);

    /// Returns a name for the task in logs: by default its type's name
    /// ([`std::any::type_name`]; for [`timer_task`], `FnTask<` and the closure's path `>`).
    ///
    /// A [`SystemTimer`](crate::SystemTimer) whose [`close`](crate::Timer::close) gave up
    /// waiting for the tasks on its executor names the ones still running with it. The
    /// built-in pool's threads ask for it once per task, just before `run` (a caller's
    /// executor's are not asked): it should be cheap and must not block.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, TimerTask};
    ///
    /// struct Flush;
    /// impl TimerTask for Flush {
    ///     fn delay_ms(&self) -> i64 {
    ///         1_000
    ///     }
    ///     fn run(self: Box<Self>) {}
    /// }
    ///
    /// assert!(Flush.name().ends_with("::Flush"));
    /// assert!(timer_task(10, || {}).name().starts_with("timingwheel::task::FnTask<"));
    /// ```
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// Prints the task's [`name`](TimerTask::name) and [`delay_ms`](TimerTask::delay_ms), so
/// that a struct holding a `Box<dyn TimerTask>` can derive `Debug`.
///
/// # Examples
///
/// ```
/// use timingwheel::{timer_task, TimerTask};
///
/// #[derive(Debug)]
/// struct Retry {
///     attempt: u32,
///     task: Box<dyn TimerTask>,
/// }
///
/// let retry = Retry { attempt: 2, task: timer_task(250, || {}) };
/// let printed = format!("{retry:?}");
/// assert!(printed.starts_with("Retry { attempt: 2, task: TimerTask { name: \"timingwheel::task::FnTask<"));
/// assert!(printed.ends_with("delay_ms: 250 } }"));
/// ```
impl fmt::Debug for dyn TimerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerTask")
            .field("name", &self.name())
            .field("delay_ms", &self.delay_ms())
            .finish()
    }
}

/// Creates a task that calls `f` once, `delay` after it is added to a timer.
///
/// The delay is milliseconds (`i64`, `i32`, `u32`, `u64`) or a
/// [`Duration`](std::time::Duration) (see [`IntoDelayMs`]: a `Duration` is rounded up and
/// saturates, never turns negative).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use timingwheel::{timer_task, MockTimer, Timer};
///
/// let timer = MockTimer::new();
/// let fired = Arc::new(AtomicUsize::new(0));
/// let counter = fired.clone();
/// let entry = timer.add(timer_task(30_000, move || {
///     counter.fetch_add(1, Ordering::SeqCst);
/// }));
/// assert_eq!(entry.expiration_ms(), timer.time().hi_res_clock_ms() + 30_000);
/// timer.advance_clock(29_999);
/// assert_eq!(fired.load(Ordering::SeqCst), 0);
/// timer.advance_clock(1);
/// assert_eq!(fired.load(Ordering::SeqCst), 1);
///
/// let later = timer.add(timer_task(std::time::Duration::from_secs(60), || {}));
/// assert_eq!(later.expiration_ms(), timer.time().hi_res_clock_ms() + 60_000);
/// ```
pub fn timer_task<F>(delay: impl IntoDelayMs, f: F) -> Box<dyn TimerTask>
where
    F: FnOnce() + Send + 'static,
{
    Box::new(FnTask::new(delay, f))
}

/// A [`TimerTask`] made of a delay and a closure; see [`timer_task`].
pub struct FnTask<F> {
    delay_ms: i64,
    f: F,
}

impl<F> FnTask<F>
where
    F: FnOnce() + Send + 'static,
{
    /// Creates a task that calls `f` once, `delay` (milliseconds or a `Duration`) after it
    /// is added to a timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use timingwheel::{FnTask, TimerTask};
    ///
    /// assert_eq!(FnTask::new(250, || {}).delay_ms(), 250);
    /// assert_eq!(FnTask::new(Duration::from_micros(1_500), || {}).delay_ms(), 2);
    /// ```
    pub fn new(delay: impl IntoDelayMs, f: F) -> FnTask<F> {
        FnTask {
            delay_ms: delay.into_delay_ms(),
            f,
        }
    }
}

impl<F> TimerTask for FnTask<F>
where
    F: FnOnce() + Send + 'static,
{
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }

    fn run(self: Box<Self>) {
        (self.f)()
    }
}

impl<F> fmt::Debug for FnTask<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTask")
            .field("delay_ms", &self.delay_ms)
            .finish_non_exhaustive()
    }
}

/// A delay: milliseconds as `i64` (Kafka's), `i32`, `u32` or `u64` (as a config file gives
/// them), or a [`std::time::Duration`].
///
/// A `Duration` is rounded *up* to the next whole millisecond, so a task never waits less
/// than asked, and saturates at `i64::MAX` ms, so a huge `Duration` never turns into a
/// negative delay (which would mean "already expired"). The natural
/// `duration.as_millis() as i64` gets both wrong: it rounds down, and it wraps
/// `Duration::MAX` to -1. A `u64` beyond `i64::MAX` saturates the same way.
///
/// Integer literals keep working wherever a delay is taken: `timer_task(30_000, f)`. With
/// several integer types to choose from, Rust makes an unsuffixed literal an `i32`, so one
/// beyond `i32::MAX` (24.8 days in ms) does not compile ("literal out of range for `i32`"):
/// write it `3_000_000_000_u32`, `_i64`, or as a `Duration`.
///
/// ```compile_fail
/// timingwheel::timer_task(3_000_000_000, || {}); // an i32 literal, out of range
/// ```
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use timingwheel::IntoDelayMs;
///
/// assert_eq!(250.into_delay_ms(), 250);
/// assert_eq!(3_000_000_000_u32.into_delay_ms(), 3_000_000_000);
/// assert_eq!(u64::MAX.into_delay_ms(), i64::MAX, "saturated, never negative");
/// assert_eq!(Duration::from_millis(250).into_delay_ms(), 250);
/// assert_eq!(Duration::from_micros(1).into_delay_ms(), 1, "rounded up");
/// assert_eq!(Duration::MAX.into_delay_ms(), i64::MAX, "saturated, never negative");
/// ```
pub trait IntoDelayMs {
    /// Returns the delay in whole milliseconds.
    fn into_delay_ms(self) -> i64;
}

/// Milliseconds as Kafka writes them (`i64`), as a config gives them (`u32`, `u64`: beyond
/// `i64::MAX` they saturate), and `i32`, an unsuffixed literal's type once the other integer
/// impls make it ambiguous.
macro_rules! integer_delays {
    ($($integer:ty),*) => {$(
        impl IntoDelayMs for $integer {
            fn into_delay_ms(self) -> i64 {
                i64::try_from(self).unwrap_or(i64::MAX)
            }
        }
    )*};
}
integer_delays!(i64, i32, u32, u64);

impl IntoDelayMs for Duration {
    fn into_delay_ms(self) -> i64 {
        let whole_ms = self.as_millis();
        let rounded_up = whole_ms + u128::from(self.subsec_nanos() % 1_000_000 != 0);
        i64::try_from(rounded_up).unwrap_or(i64::MAX)
    }
}

/// True if a task of `delay_ms` is due the moment it is added or moved, whatever a wheel's
/// clock says: a delay of zero or less (see `SystemTimer`'s "Differences from Kafka"), the
/// same for every timer of the crate.
#[inline]
pub(crate) fn due_at_once(delay_ms: i64) -> bool {
    delay_ms <= 0
}

/// A task that came due, on its way to the executor with its expiration, so that the
/// executor can tell how late it starts.
pub(crate) struct Expired {
    pub(crate) task: Box<dyn TimerTask>,
    pub(crate) expiration_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_and_saturate() {
        assert_eq!(Duration::ZERO.into_delay_ms(), 0);
        assert_eq!(Duration::from_nanos(1).into_delay_ms(), 1);
        assert_eq!(Duration::from_nanos(999_999).into_delay_ms(), 1);
        assert_eq!(Duration::from_nanos(1_000_000).into_delay_ms(), 1);
        assert_eq!(Duration::from_nanos(1_000_001).into_delay_ms(), 2);
        assert_eq!(Duration::from_secs(30).into_delay_ms(), 30_000);
        let max_ms = Duration::from_millis(i64::MAX as u64);
        assert_eq!(max_ms.into_delay_ms(), i64::MAX);
        assert_eq!((max_ms + Duration::from_nanos(1)).into_delay_ms(), i64::MAX);
        assert_eq!(Duration::MAX.into_delay_ms(), i64::MAX);
        assert_eq!((-7i64).into_delay_ms(), -7);
    }
}
