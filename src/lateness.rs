//! How late tasks start: a fixed-size log-linear histogram of atomic counters
//! ([`LatenessHistogram`], HdrHistogram's bucket layout), its summary ([`Lateness`]), and the
//! lateness of the task this thread is running, for what the task itself reports (a
//! purgatory's expiries).
//!
//! # Buckets
//!
//! Values are microseconds, `u64`. Below 32 each value has a bucket of its own. From 32
//! up, each power of two `[2^e, 2^(e+1))` is cut into 32 buckets of width `2^(e-5)`, so a
//! bucket is at most 1/32 of its lower bound wide, and its midpoint, which a percentile
//! reports, is within 1/64 (1.6 %) of every value in it. 60 powers of two cover all of
//! `u64`: 1,920 counters, 15 KiB per timer, no allocation after the first.
//!
//! # Ground rules
//!
//! Counters are atomics, written with `Relaxed` increments by whichever thread runs a
//! task, and read without a lock: a summary taken while tasks start may miss the latest
//! few, and is exact once the timer is quiet. No lock is taken here (see
//! `crate::lock_order`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two, as a power of two: 2^5 = 32, for a relative error of at
/// most 1/64 at a bucket's midpoint.
const SUB_BITS: u32 = 5;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Buckets: 32 exact ones below 32, then 32 for each power of two from 2^5 to 2^63.
const BUCKETS: usize = SUB_BUCKETS * (64 - SUB_BITS as usize + 1);

/// How late tasks started, from [`SystemTimer::lateness`](crate::SystemTimer::lateness): a
/// task's start on the executor minus its `expiration_ms`, in microseconds.
///
/// Percentiles come from a histogram whose buckets are at most 1/32 of their value wide,
/// and report a bucket's midpoint: within 1/64 (1.6 %) of the exact value, and never above
/// `max_us`. `count` and `max_us` are exact.
///
/// # Examples
///
/// ```
/// use timingwheel::Lateness;
///
/// let quiet = Lateness::default();
/// assert_eq!(quiet.count, 0);
/// assert_eq!(quiet.p99_us, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lateness {
    /// Tasks that started.
    pub count: u64,
    /// The median lateness.
    pub p50_us: u64,
    /// 99 % of the tasks started at most this late.
    pub p99_us: u64,
    /// 99.9 % of the tasks started at most this late.
    pub p999_us: u64,
    /// The latest start.
    pub max_us: u64,
}

/// A histogram of lateness in microseconds: see the module docs.
pub(crate) struct LatenessHistogram {
    buckets: Box<[AtomicU64]>,
    max_us: AtomicU64,
}

impl LatenessHistogram {
    pub(crate) fn new() -> LatenessHistogram {
        LatenessHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
        }
    }

    /// Counts one task that started `late_us` late.
    #[inline]
    pub(crate) fn record(&self, late_us: u64) {
        self.buckets[bucket_of(late_us)].fetch_add(1, Ordering::Relaxed);
        // Read first: the maximum rarely moves, and a load keeps the line shared.
        if late_us > self.max_us.load(Ordering::Relaxed) {
            self.max_us.fetch_max(late_us, Ordering::Relaxed);
        }
    }

    /// Returns each bucket's count, in bucket order.
    pub(crate) fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
    }

    /// Returns the summary: count, percentiles and maximum.
    pub(crate) fn summary(&self) -> Lateness {
        let counts: Vec<u64> = self.counts().collect();
        let count: u64 = counts.iter().sum();
        let max_us = self.max_us.load(Ordering::Relaxed);
        // The value of rank ceil(p * count), counted from 1: in the first bucket where the
        // values seen reach p of the count, and at least one (none, so 0, if count is 0).
        let percentile = |per_mille: u64| {
            let mut seen = 0u128;
            let bucket = counts.iter().position(|&in_bucket| {
                seen += u128::from(in_bucket);
                seen > 0 && seen * 1000 >= u128::from(count) * u128::from(per_mille)
            });
            bucket.map_or(0, |bucket| midpoint(bucket).min(max_us))
        };
        Lateness {
            count,
            p50_us: percentile(500),
            p99_us: percentile(990),
            p999_us: percentile(999),
            max_us,
        }
    }
}

/// Returns the bucket of `value`.
#[inline]
fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let sub = (value >> (exponent - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
    (exponent - SUB_BITS + 1) as usize * SUB_BUCKETS + sub
}

/// Returns the smallest value of bucket `bucket`, and the bucket's width.
fn bounds(bucket: usize) -> (u64, u64) {
    if bucket < SUB_BUCKETS {
        return (bucket as u64, 1);
    }
    let shift = (bucket / SUB_BUCKETS) as u32 - 1;
    let sub = (bucket % SUB_BUCKETS) as u64;
    ((SUB_BUCKETS as u64 + sub) << shift, 1 << shift)
}

/// Returns the value that stands for bucket `bucket`: its midpoint.
pub(crate) fn midpoint(bucket: usize) -> u64 {
    let (low, width) = bounds(bucket);
    low + (width - 1) / 2
}

/// Returns how late a task due at `expiration_ms` is when started at `now_ns` (both on
/// the timer's clock), in whole microseconds; 0 if it started early (a tick coarser than
/// 1 ms lets a task run up to a tick before its expiration).
#[inline]
pub(crate) fn late_us(now_ns: i128, expiration_ms: i64) -> u64 {
    let late_ns = (now_ns - i128::from(expiration_ms) * 1_000_000).max(0);
    // In u64 whenever it fits, as for every real clock: an i128 division is a library call.
    u64::try_from(late_ns).map_or_else(
        |_| u64::try_from(late_ns / 1_000).unwrap_or(u64::MAX),
        |late_ns| late_ns / 1_000,
    )
}

thread_local! {
    /// How late the timer task this thread is running started, in microseconds; `None`
    /// outside a timer task (or under a timer that does not measure it). Kept with the
    /// `metrics` feature only (a purgatory's expiries count it), so that without it each
    /// task is spared setting it.
    pub(crate) static RUNNING_LATE_US: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Marks this thread as running a task that started `late_us` late, until dropped, which
/// restores what was there (a task may run another inline). Without the `metrics` feature,
/// nothing.
pub(crate) struct RunningLate(Option<u64>);

impl RunningLate {
    #[inline]
    pub(crate) fn enter(late_us: u64) -> RunningLate {
        if !cfg!(feature = "metrics") {
            return RunningLate(None);
        }
        RunningLate(RUNNING_LATE_US.replace(Some(late_us)))
    }
}

impl Drop for RunningLate {
    #[inline]
    fn drop(&mut self) {
        if cfg!(feature = "metrics") {
            RUNNING_LATE_US.set(self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_every_u64() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(31), 31);
        assert_eq!(bucket_of(32), 32);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let mut next_low = 0u64;
        for bucket in 0..BUCKETS {
            let (low, width) = bounds(bucket);
            assert_eq!(
                low,
                next_low,
                "bucket {bucket} starts where {} ends",
                bucket.max(1) - 1
            );
            assert_eq!(bucket_of(low), bucket);
            assert_eq!(bucket_of(low + (width - 1)), bucket);
            next_low = low.wrapping_add(width);
        }
        assert_eq!(next_low, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn a_midpoint_is_within_a_64th_of_every_value_in_its_bucket() {
        for bucket in 0..BUCKETS {
            let (low, width) = bounds(bucket);
            let middle = midpoint(bucket);
            for value in [low, low + (width - 1) / 2, low + (width - 1)] {
                let error = middle.abs_diff(value) as f64 / value.max(1) as f64;
                assert!(error <= 1.0 / 64.0, "bucket {bucket}: {middle} for {value}");
            }
        }
    }

    #[test]
    fn percentiles_are_within_five_percent_of_the_exact_ones() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for scale in [10u64, 1_000, 1_000_000, 1 << 40] {
            let histogram = LatenessHistogram::new();
            let mut values: Vec<u64> = (0..10_000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skewed: most small, a long tail.
                    (x % scale) * (x % 7 + 1) / 7
                })
                .collect();
            values.iter().for_each(|&v| histogram.record(v));
            values.sort_unstable();
            let exact = |per_mille: usize| values[(values.len() * per_mille).div_ceil(1000) - 1];
            let summary = histogram.summary();
            assert_eq!(summary.count, values.len() as u64);
            assert_eq!(summary.max_us, *values.last().unwrap());
            for (got, per_mille) in [
                (summary.p50_us, 500),
                (summary.p99_us, 990),
                (summary.p999_us, 999),
            ] {
                let want = exact(per_mille);
                let error = got.abs_diff(want) as f64 / want.max(1) as f64;
                assert!(
                    error <= 0.05,
                    "scale {scale} p{per_mille}: {got} for {want}"
                );
            }
        }
    }

    #[test]
    fn lateness_is_whole_microseconds_and_never_negative() {
        assert_eq!(late_us(5_000_000 + 1_999, 5), 1);
        assert_eq!(late_us(4_999_999, 5), 0, "early");
        assert_eq!(
            late_us(i128::from(i64::MAX), i64::MIN),
            u64::MAX,
            "saturates"
        );
        assert_eq!(late_us(i128::from(i64::MIN), i64::MAX), 0);
    }
}
