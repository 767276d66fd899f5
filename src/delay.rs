//! Delays as a Rust user writes them: `i64` milliseconds (Kafka's) or a [`Duration`].

use std::time::Duration;

/// A delay: `i64` milliseconds, as Kafka takes it, or a [`std::time::Duration`].
///
/// A `Duration` is rounded *up* to the next whole millisecond, so a task never waits less
/// than asked, and saturates at `i64::MAX` ms, so a huge `Duration` never turns into a
/// negative delay (which would mean "already expired"). The natural
/// `duration.as_millis() as i64` gets both wrong: it rounds down, and it wraps
/// `Duration::MAX` to -1.
///
/// Integer literals keep working wherever a delay is taken: `timer_task(30_000, f)`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use timingwheel::IntoDelayMs;
///
/// assert_eq!(250.into_delay_ms(), 250);
/// assert_eq!(Duration::from_millis(250).into_delay_ms(), 250);
/// assert_eq!(Duration::from_micros(1).into_delay_ms(), 1, "rounded up");
/// assert_eq!(Duration::MAX.into_delay_ms(), i64::MAX, "saturated, never negative");
/// ```
pub trait IntoDelayMs {
    /// Returns the delay in whole milliseconds.
    fn into_delay_ms(self) -> i64;
}

impl IntoDelayMs for i64 {
    fn into_delay_ms(self) -> i64 {
        self
    }
}

impl IntoDelayMs for Duration {
    fn into_delay_ms(self) -> i64 {
        let whole_ms = self.as_millis();
        let rounded_up = whole_ms + u128::from(!self.subsec_nanos().is_multiple_of(1_000_000));
        i64::try_from(rounded_up).unwrap_or(i64::MAX)
    }
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
