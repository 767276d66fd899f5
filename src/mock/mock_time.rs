//! Kafka's `MockTime`: a manual clock for tests.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::task::IntoDelayMs;
use crate::time::{NANOS_PER_MS, Time};

/// Kafka's `MockTime`: a manual clock, starting at an arbitrary fixed value.
///
/// Clones share one clock. [`sleep`](MockTime::sleep) moves it forward and returns at once.
/// It covers the whole `i64` millisecond range: moved far enough, it stops at `i64::MAX`
/// ms (it saturates, never wraps). Its [`nanoseconds`](MockTime::nanoseconds) reach
/// `i64::MAX` 292 years after its start and stay there;
/// [`nanoseconds_wide`](Time::nanoseconds_wide) goes on.
///
/// # Examples
///
/// ```
/// use timingwheel::MockTime;
///
/// let time = MockTime::new();
/// let shared = time.clone();
/// let start = time.hi_res_clock_ms();
/// shared.sleep(1_500);
/// assert_eq!(time.hi_res_clock_ms(), start + 1_500);
/// assert_eq!(MockTime::new().hi_res_clock_ms(), start, "every new clock starts at the same value");
/// ```
#[derive(Clone)]
pub struct MockTime {
    clock: Arc<MockClock>,
}

/// Whole milliseconds: `sleep` moves the clock by whole milliseconds only, and an `i64` of
/// them covers the whole range, where an `i64` of nanoseconds stops after 292 years.
struct MockClock {
    wall_ms: AtomicI64,
    hi_res_ms: AtomicI64,
}

impl MockTime {
    /// The wall clock of a new `MockTime`: 2020-09-13T12:26:40Z, in ms since the epoch.
    const START_WALL_MS: i64 = 1_600_000_000_000;
    /// The monotonic clock of a new `MockTime`, in ms.
    const START_HI_RES_MS: i64 = 1_000_000;

    /// Creates a clock at a fixed start: the same for every new `MockTime`.
    pub fn new() -> MockTime {
        MockTime {
            clock: Arc::new(MockClock {
                wall_ms: AtomicI64::new(Self::START_WALL_MS),
                hi_res_ms: AtomicI64::new(Self::START_HI_RES_MS),
            }),
        }
    }

    /// Returns the wall clock, in milliseconds since the Unix epoch.
    pub fn milliseconds(&self) -> i64 {
        self.clock.wall_ms.load(Ordering::SeqCst)
    }

    /// Returns the monotonic clock, in milliseconds.
    pub fn hi_res_clock_ms(&self) -> i64 {
        self.clock.hi_res_ms.load(Ordering::SeqCst)
    }

    /// Returns the monotonic clock, in nanoseconds, saturating at `i64::MAX` (292 years
    /// after the start; see [`nanoseconds_wide`](Time::nanoseconds_wide) for the rest).
    pub fn nanoseconds(&self) -> i64 {
        self.hi_res_clock_ms().saturating_mul(NANOS_PER_MS)
    }

    /// Returns the monotonic clock, in nanoseconds, over the whole `i64` millisecond range.
    pub fn nanoseconds_wide(&self) -> i128 {
        i128::from(self.hi_res_clock_ms()) * i128::from(NANOS_PER_MS)
    }

    /// Moves both clocks forward by `ms` (saturating); never blocks. `ms` is a delay as
    /// [`IntoDelayMs`] takes it: milliseconds of any of its integer types, or a `Duration`
    /// (rounded up).
    ///
    /// # Panics
    ///
    /// Panics if `ms` is negative: a clock never goes back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use timingwheel::MockTime;
    ///
    /// let time = MockTime::new();
    /// let start = time.hi_res_clock_ms();
    /// time.sleep(10);
    /// time.sleep(Duration::from_secs(1));
    /// time.sleep(5_u64);
    /// assert_eq!(time.hi_res_clock_ms(), start + 1_015);
    /// ```
    #[track_caller]
    pub fn sleep(&self, ms: impl IntoDelayMs) {
        let ms = ms.into_delay_ms();
        assert!(
            ms >= 0,
            "MockTime::sleep: ms must not be negative, got {ms}"
        );
        let add = |clock: &AtomicI64| {
            let _ = clock.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(ms))
            });
        };
        add(&self.clock.wall_ms);
        add(&self.clock.hi_res_ms);
    }
}

impl Default for MockTime {
    fn default() -> Self {
        MockTime::new()
    }
}

impl Time for MockTime {
    fn milliseconds(&self) -> i64 {
        MockTime::milliseconds(self)
    }

    fn nanoseconds(&self) -> i64 {
        MockTime::nanoseconds(self)
    }

    fn nanoseconds_wide(&self) -> i128 {
        MockTime::nanoseconds_wide(self)
    }

    fn hi_res_clock_ms(&self) -> i64 {
        MockTime::hi_res_clock_ms(self)
    }

    fn sleep(&self, ms: i64) {
        MockTime::sleep(self, ms)
    }
}

impl fmt::Debug for MockTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockTime")
            .field("milliseconds", &self.milliseconds())
            .field("hi_res_clock_ms", &self.hi_res_clock_ms())
            .finish()
    }
}
