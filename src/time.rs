//! Clocks (Kafka's `Time` interface and `Time.SYSTEM`).

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    fn nanoseconds(&self) -> i64;

    /// Returns a monotonic millisecond reading: [`nanoseconds`](Time::nanoseconds) divided
    /// by 10^6, rounded down (Kafka's `hiResClockMs()`).
    fn hi_res_clock_ms(&self) -> i64 {
        self.nanoseconds().div_euclid(NANOS_PER_MS)
    }

    /// Waits `ms` milliseconds (a mock clock just moves forward).
    fn sleep(&self, ms: i64);
}

pub(crate) const NANOS_PER_MS: i64 = 1_000_000;

/// Returns the monotonic millisecond reading `time` gives now, rounded *up*.
///
/// `SystemTimer` computes expirations from this, so that a task never runs before the
/// instant of its `add` plus its delay (Kafka rounds down and so fires up to 1 ms early).
pub(crate) fn hi_res_clock_ms_ceil(time: &dyn Time) -> i64 {
    let nanos = time.nanoseconds();
    nanos.div_euclid(NANOS_PER_MS) + i64::from(nanos.rem_euclid(NANOS_PER_MS) != 0)
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

/// The origin of [`SystemClock`]'s monotonic readings: the first reading in this process.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// An offset so that readings are large and positive from the start, as Java's are; code
/// that subtracts a delay from "now" then stays far from `i64::MIN`.
const ORIGIN_OFFSET_NANOS: i64 = 1_000_000_000_000_000;

impl Time for SystemClock {
    fn milliseconds(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn nanoseconds(&self) -> i64 {
        let since = origin().elapsed().as_nanos();
        i64::try_from(since)
            .unwrap_or(i64::MAX)
            .saturating_add(ORIGIN_OFFSET_NANOS)
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
}
