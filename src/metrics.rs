//! What a timer did since it was built ([`TimerStats`]), and reporting it and a purgatory's
//! figures through the [`metrics`](https://docs.rs/metrics) facade, with the cargo feature
//! `metrics`; without it, the reporting types are empty and every call does nothing.
//!
//! The names follow Kafka's registry, in the facade's style:
//!
//! | metric | kind | label | value (Kafka's name) |
//! |---|---|---|---|
//! | `timer_pending` | gauge | `timer` = executor name | [`TimerStats::pending`] (the timer's size) |
//! | `timer_added_total` | counter | `timer` | [`TimerStats::added`] |
//! | `timer_expired_total` | counter | `timer` | [`TimerStats::expired`] |
//! | `timer_cancelled_total` | counter | `timer` | [`TimerStats::cancelled`] |
//! | `timer_lateness_seconds` | histogram | `timer` | [`SystemTimer::lateness`](crate::SystemTimer::lateness), in seconds |
//! | `purgatory_size` | gauge | `delayed_operation` = purgatory name | `watched()` (`PurgatorySize`) |
//! | `purgatory_num_delayed_operations` | gauge | `delayed_operation` | `num_delayed()` (`NumDelayedOperations`) |
//! | `purgatory_expires_total` | counter | `delayed_operation` | `expired_count()` (`ExpiresPerSec`, as a count) |
//! | `purgatory_expiration_lateness_seconds` | histogram | `delayed_operation` | how late each operation completed by expiring expired, in seconds |
//!
//! Handles are registered once, when the timer or purgatory is built, with the recorder
//! installed then; nothing is looked up or allocated per task. The values are read from
//! counts the timer and the purgatory keep anyway, and set (`Gauge::set`,
//! `Counter::absolute`) after each `advance_clock` step and at shutdown, so `add` and
//! `try_complete_else_watch` pay nothing for them. The histograms too: lateness is counted
//! in the crate's own histogram (`crate::lateness`), and what it counted since the last
//! step goes to the recorder then (`Histogram::record_many`, one call per bucket that
//! changed, at the bucket's midpoint: within 1.6 % of each value).

use std::sync::Arc;

use crate::lateness::LatenessHistogram;
#[cfg(feature = "metrics")]
use crate::lateness::{BUCKETS, midpoint};

/// What a [`SystemTimer`](crate::SystemTimer) did since it was built: see
/// [`SystemTimer::stats`](crate::SystemTimer::stats).
///
/// Counted per shard under the locks `add` and `cancel` take anyway, so keeping them costs
/// an `add` nothing measurable; read without a lock, so a reading taken while other threads
/// add or flush may be a moment behind. Exact once the timer is quiet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Tasks the timer took (refused ones not counted).
    pub added: u64,
    /// Tasks handed to the executor, those whose delay was <= 0 included.
    pub expired: u64,
    /// Successful [`TimerTaskEntry::cancel`](crate::TimerTaskEntry::cancel) calls.
    pub cancelled: u64,
    /// `add` and `try_add` calls that did not take their task.
    pub refused: u64,
    /// Tasks waiting: the same as [`size`](crate::Timer::size).
    pub pending: u64,
}

/// A histogram of the recorder fed from one of the crate's lateness histograms: what that
/// counted since the last export, at each bucket's midpoint.
#[cfg(feature = "metrics")]
struct LatenessExport {
    source: Arc<LatenessHistogram>,
    histogram: metrics::Histogram,
    /// Each bucket's count as of the last export. A leaf mutex: exports are called with no
    /// lock held (see `crate::lock_order`).
    exported: parking_lot::Mutex<Box<[u64]>>,
}

#[cfg(feature = "metrics")]
impl LatenessExport {
    fn new(source: Arc<LatenessHistogram>, histogram: metrics::Histogram) -> LatenessExport {
        LatenessExport {
            source,
            histogram,
            exported: parking_lot::Mutex::new(vec![0; BUCKETS].into_boxed_slice()),
        }
    }

    /// Records in seconds what the source counted since the last call.
    fn export(&self) {
        let mut exported = self.exported.lock();
        for (bucket, done) in exported.iter_mut().enumerate() {
            let count = self.source.bucket(bucket);
            if count > *done {
                let seconds = midpoint(bucket) as f64 / 1e6;
                let new = usize::try_from(count - *done).unwrap_or(usize::MAX);
                self.histogram.record_many(seconds, new);
                *done = count;
            }
        }
    }
}

/// The timer's gauge, counters and histogram, labelled `timer = <executor name>`.
pub(crate) struct TimerMetrics {
    #[cfg(feature = "metrics")]
    pending: metrics::Gauge,
    #[cfg(feature = "metrics")]
    added: metrics::Counter,
    #[cfg(feature = "metrics")]
    expired: metrics::Counter,
    #[cfg(feature = "metrics")]
    cancelled: metrics::Counter,
    #[cfg(feature = "metrics")]
    lateness: LatenessExport,
}

impl TimerMetrics {
    /// Registers the handles of the timer named `executor_name`, whose executor counts its
    /// tasks' lateness in `lateness`, with the recorder installed now (none: handles that
    /// record nothing).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(executor_name: &str, lateness: &Arc<LatenessHistogram>) -> TimerMetrics {
        #[cfg(feature = "metrics")]
        {
            let timer = executor_name.to_owned();
            let histogram = metrics::histogram!("timer_lateness_seconds", "timer" => timer.clone());
            TimerMetrics {
                pending: metrics::gauge!("timer_pending", "timer" => timer.clone()),
                added: metrics::counter!("timer_added_total", "timer" => timer.clone()),
                expired: metrics::counter!("timer_expired_total", "timer" => timer.clone()),
                cancelled: metrics::counter!("timer_cancelled_total", "timer" => timer),
                lateness: LatenessExport::new(Arc::clone(lateness), histogram),
            }
        }
        #[cfg(not(feature = "metrics"))]
        TimerMetrics {}
    }

    /// Reports `stats`, and the lateness counted since the last report.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(crate) fn record(&self, stats: &TimerStats) {
        #[cfg(feature = "metrics")]
        {
            self.pending.set(stats.pending as f64);
            self.added.absolute(stats.added);
            self.expired.absolute(stats.expired);
            self.cancelled.absolute(stats.cancelled);
            self.lateness.export();
        }
    }

    /// Reports what `stats` returns when the returned guard is dropped: at every return of
    /// the caller. Without the feature, `stats` is never called.
    #[inline]
    pub(crate) fn record_on_return<F: FnOnce() -> TimerStats>(
        &self,
        stats: F,
    ) -> RecordOnReturn<'_, F> {
        RecordOnReturn {
            metrics: self,
            stats: Some(stats),
        }
    }
}

/// Made by [`TimerMetrics::record_on_return`].
pub(crate) struct RecordOnReturn<'a, F: FnOnce() -> TimerStats> {
    metrics: &'a TimerMetrics,
    stats: Option<F>,
}

impl<F: FnOnce() -> TimerStats> Drop for RecordOnReturn<'_, F> {
    #[inline]
    fn drop(&mut self) {
        if !cfg!(feature = "metrics") {
            return;
        }
        if let Some(stats) = self.stats.take() {
            self.metrics.record(&stats());
        }
    }
}

/// What a purgatory reports: the values of its gauges and counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PurgatoryReading {
    /// `watched()`.
    pub(crate) watched: usize,
    /// `num_delayed()`.
    pub(crate) num_delayed: usize,
    /// `expired_count()`.
    pub(crate) expired: u64,
}

/// A purgatory's gauges, counter and histogram, labelled `delayed_operation = <purgatory
/// name>`.
pub(crate) struct PurgatoryMetrics {
    #[cfg(feature = "metrics")]
    size: metrics::Gauge,
    #[cfg(feature = "metrics")]
    num_delayed_operations: metrics::Gauge,
    #[cfg(feature = "metrics")]
    expires: metrics::Counter,
    #[cfg(feature = "metrics")]
    expiration_lateness: LatenessExport,
}

impl PurgatoryMetrics {
    /// Registers the handles of the purgatory named `purgatory_name` with the recorder
    /// installed now (none: handles that record nothing).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(purgatory_name: &str) -> PurgatoryMetrics {
        #[cfg(feature = "metrics")]
        {
            let name = purgatory_name.to_owned();
            let histogram = metrics::histogram!(
                "purgatory_expiration_lateness_seconds",
                "delayed_operation" => name.clone()
            );
            PurgatoryMetrics {
                size: metrics::gauge!("purgatory_size", "delayed_operation" => name.clone()),
                num_delayed_operations: metrics::gauge!(
                    "purgatory_num_delayed_operations",
                    "delayed_operation" => name.clone()
                ),
                expires: metrics::counter!("purgatory_expires_total", "delayed_operation" => name),
                expiration_lateness: LatenessExport::new(
                    Arc::new(LatenessHistogram::new()),
                    histogram,
                ),
            }
        }
        #[cfg(not(feature = "metrics"))]
        PurgatoryMetrics {}
    }

    /// Returns the histogram the purgatory's expiries count their lateness in: with the
    /// feature only (without it, nothing is counted).
    pub(crate) fn expiration_lateness(&self) -> Option<Arc<LatenessHistogram>> {
        #[cfg(feature = "metrics")]
        return Some(Arc::clone(&self.expiration_lateness.source));
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// Reports what `reading` returns. Without the feature, `reading` is never called.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(crate) fn record(&self, reading: impl FnOnce() -> PurgatoryReading) {
        #[cfg(feature = "metrics")]
        {
            let reading = reading();
            self.size.set(reading.watched as f64);
            self.num_delayed_operations.set(reading.num_delayed as f64);
            self.expires.absolute(reading.expired);
            self.expiration_lateness.export();
        }
    }
}
