//! Clocks (Kafka's `Time` interface and `Time.SYSTEM`).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock;

/// A source of time, like Kafka's `org.apache.kafka.common.utils.Time`.
///
/// [`SystemTimer`](crate::SystemTimer) runs on [`SystemClock`] unless its builder is given
/// another one, such as a [`MockTime`](crate::MockTime) for deterministic tests.
///
/// # Examples
///
/// ```
/// use timingwheel::{MockTime, SystemClock, Time};
///
/// fn elapsed_ms(time: &dyn Time, since_ms: i64) -> i64 {
///     time.hi_res_clock_ms() - since_ms
/// }
///
/// let mock = MockTime::new();
/// let start = mock.hi_res_clock_ms();
/// mock.sleep(40);
/// assert_eq!(elapsed_ms(&mock, start), 40);
/// assert!(elapsed_ms(&SystemClock, SystemClock.hi_res_clock_ms()) >= 0);
/// ```
pub trait Time: Send + Sync + fmt::Debug {
    /// Returns wall-clock milliseconds since the Unix epoch.
    fn milliseconds(&self) -> i64;

    /// Returns a monotonic nanosecond reading from an arbitrary origin (Kafka's
    /// `nanoseconds()`, Java's `System.nanoTime()`).
    ///
    /// An `i64` of nanoseconds spans only ±292 years, a thousandth of the `i64`
    /// millisecond range: a clock that can go further (a [`MockTime`](crate::MockTime)
    /// moved by `i64::MAX` ms) saturates here at `i64::MIN` or `i64::MAX`, and reports its
    /// full reading through [`nanoseconds_wide`](Time::nanoseconds_wide).
    fn nanoseconds(&self) -> i64;

    /// Returns the same reading as [`nanoseconds`](Time::nanoseconds), wide enough for the
    /// whole `i64` millisecond range (`i64::MIN` ms to `i64::MAX` ms, in nanoseconds).
    ///
    /// The default widens `nanoseconds()`, which is exact for a clock that stays within
    /// ±292 years of its origin, as a real one does. A clock that can go further overrides
    /// it; [`nanoseconds`](Time::nanoseconds) is then this reading, saturated to `i64`.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{MockTime, Time};
    ///
    /// let time = MockTime::new();
    /// time.sleep(10_000_000_000_000_i64); // 10^13 ms: past the i64 nanosecond range
    /// assert_eq!(time.nanoseconds(), i64::MAX, "saturated");
    /// assert_eq!(
    ///     time.nanoseconds_wide(),
    ///     i128::from(time.hi_res_clock_ms()) * 1_000_000,
    ///     "exact"
    /// );
    /// ```
    fn nanoseconds_wide(&self) -> i128 {
        i128::from(self.nanoseconds())
    }

    /// Returns a monotonic millisecond reading: [`nanoseconds_wide`](Time::nanoseconds_wide)
    /// divided by 10^6, rounded down, saturating at the ends of `i64` (Kafka's
    /// `hiResClockMs()`).
    fn hi_res_clock_ms(&self) -> i64 {
        let nanos = self.nanoseconds_wide();
        // In i64 whenever it fits (always, for a real clock): an i128 division by a constant
        // is a library call, an i64 one a multiplication.
        match i64::try_from(nanos) {
            Ok(nanos) => nanos.div_euclid(NANOS_PER_MS),
            Err(_) => saturate(nanos.div_euclid(NANOS_PER_MS_WIDE)),
        }
    }

    /// Waits `ms` milliseconds (a mock clock just moves forward).
    fn sleep(&self, ms: i64);
}

pub(crate) const NANOS_PER_MS: i64 = 1_000_000;
const NANOS_PER_MS_WIDE: i128 = NANOS_PER_MS as i128;

/// Clamps a wide reading to `i64`.
fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// Returns the monotonic millisecond reading `time` gives now, rounded *up*, over the whole
/// `i64` range (saturating at `i64::MAX`).
///
/// `SystemTimer` computes expirations from this, so that a task never runs before the
/// instant of its `add` plus its delay (Kafka rounds down and so fires up to 1 ms early).
pub(crate) fn hi_res_clock_ms_ceil(time: &dyn Time) -> i64 {
    let nanos = time.nanoseconds_wide();
    match i64::try_from(nanos) {
        // In i64 whenever it fits, as in `hi_res_clock_ms`.
        Ok(nanos) => ceil_ms(nanos),
        Err(_) => saturate(
            nanos.div_euclid(NANOS_PER_MS_WIDE)
                + i128::from(nanos.rem_euclid(NANOS_PER_MS_WIDE) != 0),
        ),
    }
}

/// Returns how long, from `time`'s reading now, until its millisecond reading reaches
/// `due_ms`: the first nanosecond whose reading is `due_ms`. Zero exactly when it already
/// has (`hi_res_clock_ms() >= due_ms`). Exact over the whole `i64` millisecond range, so a
/// wait near its end neither saturates to zero (a busy loop) nor overflows; at most
/// `u64::MAX` ns (584 years).
///
/// This is the one reading a delay queue needs per wake-up: whether its head is due, and
/// if not, how long to sleep.
pub(crate) fn time_until_ms(time: &dyn Time, due_ms: i64) -> Duration {
    let due_ns = i128::from(due_ms) * NANOS_PER_MS_WIDE;
    let left_ns = (due_ns - time.nanoseconds_wide()).max(0);
    Duration::from_nanos(u64::try_from(left_ns).unwrap_or(u64::MAX))
}

/// The machine's clocks: [`std::time::Instant`] for the monotonic readings and
/// [`std::time::SystemTime`] for the wall clock (Kafka's `Time.SYSTEM`).
///
/// # Examples
///
/// ```
/// use timingwheel::{SystemClock, Time};
///
/// let a = SystemClock.nanoseconds();
/// let b = SystemClock.nanoseconds();
/// assert!(b >= a);
/// assert!(SystemClock.milliseconds() > 1_600_000_000_000);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// Returns the monotonic nanosecond reading ([`Time::nanoseconds`]), without a call
    /// through `dyn Time`.
    #[inline]
    pub(crate) fn now_ns() -> i64 {
        i64::try_from(clock::now_ns()).unwrap_or(i64::MAX)
    }

    /// Returns [`hi_res_clock_ms_ceil`] of the system clock, the fast way `add` needs (see
    /// `clock`).
    #[inline]
    pub(crate) fn ms_ceil() -> i64 {
        i64::try_from(clock::ms_ceil()).unwrap_or(i64::MAX)
    }
}

/// A timer's clock, as its hot paths read it: the system clock without a call through
/// `dyn Time` (and `add`'s millisecond through `clock`'s fast ceiling), or the clock its
/// builder was given.
#[derive(Clone, Debug)]
pub(crate) enum TimerClock {
    System,
    Other(Arc<dyn Time>),
}

impl TimerClock {
    /// The clock as a `Time`.
    pub(crate) fn time(&self) -> Arc<dyn Time> {
        match self {
            TimerClock::System => Arc::new(SystemClock),
            TimerClock::Other(time) => Arc::clone(time),
        }
    }

    /// [`hi_res_clock_ms_ceil`]: the millisecond of an `add`, never early.
    #[inline]
    pub(crate) fn ms_ceil(&self) -> i64 {
        match self {
            TimerClock::System => SystemClock::ms_ceil(),
            TimerClock::Other(time) => hi_res_clock_ms_ceil(&**time),
        }
    }

    /// [`Time::nanoseconds_wide`].
    #[inline]
    pub(crate) fn now_ns(&self) -> i128 {
        match self {
            TimerClock::System => i128::from(SystemClock::now_ns()),
            TimerClock::Other(time) => time.nanoseconds_wide(),
        }
    }
}

/// Rounds a nanosecond reading up to a millisecond one.
#[inline]
fn ceil_ms(nanos: i64) -> i64 {
    nanos.div_euclid(NANOS_PER_MS) + i64::from(nanos.rem_euclid(NANOS_PER_MS) != 0)
}

impl Time for SystemClock {
    fn milliseconds(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn nanoseconds(&self) -> i64 {
        SystemClock::now_ns()
    }

    fn sleep(&self, ms: i64) {
        if let Ok(ms) = u64::try_from(ms) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

/// Returns the monotonic millisecond clock [`SystemTimer`](crate::SystemTimer) runs on, like
/// Kafka's `Time.SYSTEM.hiResClockMs()`.
///
/// Its origin is arbitrary (but the same for the whole process); only differences between
/// readings mean anything.
///
/// # Examples
///
/// ```
/// let start = timingwheel::hi_res_clock_ms();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// assert!(timingwheel::hi_res_clock_ms() - start >= 2);
/// ```
pub fn hi_res_clock_ms() -> i64 {
    SystemClock.hi_res_clock_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(i64);

    impl Time for Fixed {
        fn milliseconds(&self) -> i64 {
            0
        }
        fn nanoseconds(&self) -> i64 {
            self.0
        }
        fn sleep(&self, _ms: i64) {}
    }

    #[test]
    fn ceil_rounds_up_partial_milliseconds_only() {
        assert_eq!(hi_res_clock_ms_ceil(&Fixed(5_000_000)), 5);
        assert_eq!(hi_res_clock_ms_ceil(&Fixed(5_000_001)), 6);
        assert_eq!(hi_res_clock_ms_ceil(&Fixed(5_999_999)), 6);
        assert_eq!(hi_res_clock_ms_ceil(&Fixed(-1)), 0);
        assert_eq!(Fixed(5_999_999).hi_res_clock_ms(), 5);
        assert_eq!(Fixed(-1).hi_res_clock_ms(), -1);
    }

    /// A clock whose wide reading is fixed, anywhere in the `i64` millisecond range.
    #[derive(Debug)]
    struct Wide(i128);

    impl Wide {
        fn at_ms(ms: i64, plus_ns: i128) -> Wide {
            Wide(i128::from(ms) * NANOS_PER_MS_WIDE + plus_ns)
        }
    }

    impl Time for Wide {
        fn milliseconds(&self) -> i64 {
            0
        }
        fn nanoseconds(&self) -> i64 {
            saturate(self.0)
        }
        fn nanoseconds_wide(&self) -> i128 {
            self.0
        }
        fn sleep(&self, _ms: i64) {}
    }

    #[test]
    fn readings_cover_the_whole_millisecond_range() {
        let far = 10_000_000_000_000; // 10^13 ms, past the i64 nanosecond range
        assert_eq!(Wide::at_ms(far, 0).hi_res_clock_ms(), far);
        assert_eq!(Wide::at_ms(far, 0).nanoseconds(), i64::MAX);
        assert_eq!(hi_res_clock_ms_ceil(&Wide::at_ms(far, 1)), far + 1);
        assert_eq!(Wide::at_ms(i64::MAX, 0).hi_res_clock_ms(), i64::MAX);
        assert_eq!(hi_res_clock_ms_ceil(&Wide::at_ms(i64::MAX, 0)), i64::MAX);
        assert_eq!(hi_res_clock_ms_ceil(&Wide::at_ms(i64::MAX, -1)), i64::MAX);
        assert_eq!(
            hi_res_clock_ms_ceil(&Wide::at_ms(i64::MAX, 1)),
            i64::MAX,
            "saturates"
        );
        assert_eq!(Wide::at_ms(i64::MIN, 0).hi_res_clock_ms(), i64::MIN);
        assert_eq!(Wide::at_ms(i64::MIN, -1).hi_res_clock_ms(), i64::MIN);
        assert_eq!(hi_res_clock_ms_ceil(&Wide::at_ms(i64::MIN, 0)), i64::MIN);
    }

    #[test]
    fn time_until_ms_is_zero_exactly_when_due_and_exact_near_the_ends() {
        let ms = Duration::from_millis(1);
        assert_eq!(time_until_ms(&Fixed(5_000_000), 5), Duration::ZERO);
        assert_eq!(time_until_ms(&Fixed(5_000_000), 4), Duration::ZERO);
        assert_eq!(time_until_ms(&Fixed(4_999_999), 5), Duration::from_nanos(1));
        assert_eq!(
            time_until_ms(&Fixed(5_000_001), 6),
            Duration::from_nanos(999_999)
        );
        // Near the end of the range the wait is still exact: never zero while not due.
        let end = i64::MAX;
        assert_eq!(time_until_ms(&Wide::at_ms(end - 1, 0), end), ms);
        assert_eq!(
            time_until_ms(&Wide::at_ms(end - 1, 999_999), end),
            Duration::from_nanos(1)
        );
        assert_eq!(time_until_ms(&Wide::at_ms(end, 0), end), Duration::ZERO);
        assert_eq!(time_until_ms(&Wide::at_ms(i64::MIN, 0), i64::MIN + 1), ms);
        // Waits beyond what a Duration of nanoseconds holds saturate at u64::MAX ns.
        assert_eq!(
            time_until_ms(&Wide::at_ms(i64::MIN, 0), end),
            Duration::from_nanos(u64::MAX)
        );
    }
}
