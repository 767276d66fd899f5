//! Clocks (Kafka's `Time` interface and `Time.SYSTEM`).
//!
//! # The system clock's millisecond, through the time-stamp counter
//!
//! The system clock's readings: nanoseconds from `Instant` ([`now_ns`]), and the
//! millisecond ceiling `add` needs ([`ms_ceil`]), without reading the clock on most calls:
//! the processor's time-stamp counter tells whether the millisecond last read is still the
//! current one.
//!
//! `add` needs `ceil(now)` in milliseconds. Reading `Instant::now` costs more than a fifth
//! of an `add` (`docs/performance.md`, "The ledger's figures"); the counter, a few
//! instructions.
//! Each thread keeps the millisecond it last read, `C = ceil(N)` for a reading `N` in
//! nanoseconds, and the counter value up to which `C` is still the ceiling: `ceil(T) = C`
//! for every later instant `T` before `C` ms. A call that finds the counter below that
//! value returns `C`, the very value a clock read would give; any other call reads the clock
//! and starts over. So the result is always the clock's own ceiling (never early, never
//! late, monotonic as the clock is), and the counter only decides when to read it.
//!
//! # Ground rules
//!
//! - The counter is used only where the kernel keeps its own clock on it (Linux's
//!   clocksource `tsc`): then it is invariant and synchronised across processors, as
//!   `Instant` itself relies on. Elsewhere every call reads the clock.
//! - A counter value `t` taken before a clock reading `N` comes no later than `N`; from it,
//!   `T <= N + (t' - t) * ns_per_tick` for a later counter value `t'`. The budget in ticks
//!   is computed with a tick rate known to be too low (so `ns_per_tick` too high), and ends
//!   [`SAFETY_NS`] before the millisecond does, which covers a counter read a little out
//!   of order and processors whose counters differ by a little.
//! - The tick rate is measured once per process, against the clock, over at least
//!   [`CALIBRATION_NS`]; until then every call reads the clock.
//! - Each thread's cache is its own (`thread_local!`): no atomic, no shared cache line.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    let rounded_up = nanos.rem_euclid(NANOS_PER_MS_WIDE) != 0;
    saturate(nanos.div_euclid(NANOS_PER_MS_WIDE) + i128::from(rounded_up))
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

/// The clock a timer's `add` reads and its executor counts lateness on: the system clock
/// (the time-stamp counter's fast millisecond, see [`clock`]) or a caller's `Time`.
#[derive(Clone, Debug)]
pub(crate) struct TimerClock {
    pub(crate) time: Arc<dyn Time>,
    system: bool,
}

impl TimerClock {
    /// The system clock.
    pub(crate) fn system() -> TimerClock {
        TimerClock {
            time: Arc::new(SystemClock),
            system: true,
        }
    }

    /// A caller's clock.
    pub(crate) fn of(time: Arc<dyn Time>) -> TimerClock {
        TimerClock {
            time,
            system: false,
        }
    }

    /// [`hi_res_clock_ms_ceil`]: the millisecond of an `add`, never early.
    #[inline]
    pub(crate) fn ms_ceil(&self) -> i64 {
        match self.system {
            true => clock::ms_ceil() as i64,
            false => hi_res_clock_ms_ceil(&*self.time),
        }
    }

    /// [`Time::nanoseconds_wide`].
    #[inline]
    pub(crate) fn now_ns(&self) -> i128 {
        match self.system {
            true => i128::from(clock::now_ns()),
            false => self.time.nanoseconds_wide(),
        }
    }
}

impl Time for SystemClock {
    fn milliseconds(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn nanoseconds(&self) -> i64 {
        i64::try_from(clock::now_ns()).unwrap_or(i64::MAX)
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

/// The system clock's readings (see the module docs).
mod clock {
    use std::cell::Cell;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    /// How long before the end of a millisecond a thread reads the clock again anyway.
    const SAFETY_NS: u64 = 10_000;

    /// The shortest interval over which the tick rate is measured.
    const CALIBRATION_NS: u64 = 20_000_000;

    /// The counter ticks a clock reading may take for the pair (ticks, reading) to be kept:
    /// a longer read was interrupted, and its reading may come long after the counter value.
    const READ_TICKS: u64 = 20_000;

    /// An offset so that readings are large and positive from the start, as Java's are; code
    /// that subtracts a delay from "now" then stays far from `i64::MIN`.
    const ORIGIN_OFFSET_NANOS: u128 = 1_000_000_000_000_000;

    /// Returns the system clock's monotonic reading, in nanoseconds: the time since the first
    /// reading of the process, plus [`ORIGIN_OFFSET_NANOS`]. Good for 584 years.
    pub(super) fn now_ns() -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let since = ORIGIN.get_or_init(Instant::now).elapsed().as_nanos();
        u64::try_from(since + ORIGIN_OFFSET_NANOS).unwrap_or(u64::MAX)
    }

    /// Returns [`now_ns`] rounded up to a millisecond, reading the clock only when the thread's
    /// last millisecond may have ended.
    #[inline]
    pub(super) fn ms_ceil() -> u64 {
        let Some(ticks) = counter() else {
            return now_ns().div_ceil(NANOS_PER_MS);
        };
        let (until, ms) = LAST.get();
        if ticks < until {
            return ms;
        }
        read(ticks)
    }

    const NANOS_PER_MS: u64 = 1_000_000;

    thread_local! {
        /// The counter value before which the millisecond is still the one beside it.
        static LAST: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }

    /// Reads the clock (the counter was at `before` just before) and keeps its millisecond for
    /// as long as the tick rate allows.
    #[cold]
    fn read(before: u64) -> u64 {
        let ns = now_ns();
        let after = counter().unwrap_or(before);
        let ms = ns.div_ceil(NANOS_PER_MS);
        if after.wrapping_sub(before) > READ_TICKS {
            // Interrupted between the two: `before` may be long before `ns`; keep nothing.
            return ms;
        }
        if let Some(rate) = ticks_per_ns(before, ns) {
            let left_ns = (ms * NANOS_PER_MS).saturating_sub(ns + SAFETY_NS);
            let budget = ((u128::from(left_ns) * u128::from(rate)) >> RATE_SHIFT) as u64;
            LAST.set((before.saturating_add(budget), ms));
        }
        ms
    }

    /// Fixed-point shift of the tick rate.
    const RATE_SHIFT: u32 = 32;

    /// The first (counter, reading) pair of the process, and the tick rate, once measured.
    static BASE: OnceLock<(u64, u64)> = OnceLock::new();
    /// Ticks per nanosecond, times 2^32, a thousandth below the measured rate; 0 until
    /// measured.
    static RATE: AtomicU64 = AtomicU64::new(0);

    /// Returns the tick rate, measuring it from the first pair and `(ticks, ns)` once they are
    /// far enough apart.
    fn ticks_per_ns(ticks: u64, ns: u64) -> Option<u64> {
        let rate = RATE.load(Ordering::Relaxed);
        if rate != 0 {
            return Some(rate);
        }
        let &(base_ticks, base_ns) = BASE.get_or_init(|| (ticks, ns));
        let span_ns = ns.checked_sub(base_ns)?;
        if span_ns < CALIBRATION_NS || ticks <= base_ticks {
            return None;
        }
        let measured = (u128::from(ticks - base_ticks) << RATE_SHIFT) / u128::from(span_ns);
        let rate = u64::try_from(measured - measured / 1_000).ok()?;
        RATE.store(rate, Ordering::Relaxed);
        Some(rate)
    }

    /// Returns the counter, if the kernel keeps the clock on it.
    #[inline]
    fn counter() -> Option<u64> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if usable() {
            // SAFETY: `rdtsc` reads the time-stamp counter: it takes no operand, touches no
            // memory, and every x86-64 processor has it. The kernel keeps its own clock on
            // this counter (`usable`), so it does not fault (`PR_TSC_SIGSEGV` is a process's own
            // choice, and such a process cannot read its clock through the vDSO either).
            #[allow(unsafe_code)]
            return Some(unsafe { std::arch::x86_64::_rdtsc() });
        }
        None
    }

    /// True if the kernel keeps its clock on the time-stamp counter (read once).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn usable() -> bool {
        static USABLE: OnceLock<bool> = OnceLock::new();
        *USABLE.get_or_init(|| {
            std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|source| source.trim() == "tsc")
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::time::Duration;

        /// Every result lies between the ceilings of clock readings taken just before and just
        /// after it, on each of several threads, for long enough that the rate is measured and
        /// most calls take the counter's path.
        #[test]
        fn the_ceiling_is_the_clocks_own() {
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        let start = Instant::now();
                        while start.elapsed() < Duration::from_millis(200) {
                            let before = now_ns().div_ceil(NANOS_PER_MS);
                            let ms = ms_ceil();
                            let after = now_ns().div_ceil(NANOS_PER_MS);
                            assert!(before <= ms && ms <= after, "{before} <= {ms} <= {after}");
                        }
                    });
                }
            });
        }

        /// A reading published by one thread is never above a reading another thread takes
        /// after it saw the publication.
        #[test]
        fn the_ceiling_never_runs_backwards_across_threads() {
            let published = AtomicU64::new(0);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        let start = Instant::now();
                        while start.elapsed() < Duration::from_millis(200) {
                            let seen = published.load(Ordering::Acquire);
                            let ms = ms_ceil();
                            assert!(ms >= seen, "{ms} after {seen} was published");
                            published.fetch_max(ms, Ordering::Release);
                        }
                    });
                }
            });
        }
    }
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
