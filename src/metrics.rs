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

// Without the feature, the functions below take their arguments and do nothing with them.
#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use std::sync::Arc;

use crate::lateness::LatenessHistogram;
#[cfg(feature = "metrics")]
use crate::lateness::midpoint;

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

/// The handles of a timer or a purgatory, registered with the recorder installed when it
/// was built: its gauges, its counters, and a histogram fed from one of the crate's
/// lateness histograms (`source`): what that counted since the last report, at each
/// bucket's midpoint.
#[cfg(feature = "metrics")]
struct Handles {
    gauges: Vec<metrics::Gauge>,
    counters: Vec<metrics::Counter>,
    histogram: metrics::Histogram,
    source: Arc<LatenessHistogram>,
    /// Each bucket's count as of the last report. A leaf mutex: reports are made with no
    /// lock held (see `crate::lock_order`).
    reported: parking_lot::Mutex<Vec<u64>>,
}

#[cfg(feature = "metrics")]
impl Handles {
    /// Registers the `gauges`, the `counters` and the `histogram` of `source`, each
    /// labelled `label = name`.
    fn new(
        (label, name): (&'static str, &str),
        gauges: &[&'static str],
        counters: &[&'static str],
        histogram: &'static str,
        source: Arc<LatenessHistogram>,
    ) -> Handles {
        let name = name.to_owned();
        Handles {
            gauges: gauges
                .iter()
                .map(|&gauge| metrics::gauge!(gauge, label => name.clone()))
                .collect(),
            counters: counters
                .iter()
                .map(|&counter| metrics::counter!(counter, label => name.clone()))
                .collect(),
            histogram: metrics::histogram!(histogram, label => name.clone()),
            reported: parking_lot::Mutex::new(source.counts().map(|_| 0).collect()),
            source,
        }
    }

    /// Sets the gauges to `gauges` and the counters to `counters`, and records in seconds
    /// what the source counted since the last call.
    fn record(&self, gauges: &[f64], counters: &[u64]) {
        for (gauge, &value) in self.gauges.iter().zip(gauges) {
            gauge.set(value);
        }
        for (counter, &value) in self.counters.iter().zip(counters) {
            counter.absolute(value);
        }
        let mut reported = self.reported.lock();
        for (bucket, (count, done)) in self.source.counts().zip(reported.iter_mut()).enumerate() {
            if count > *done {
                let new = usize::try_from(count - *done).unwrap_or(usize::MAX);
                self.histogram
                    .record_many(midpoint(bucket) as f64 / 1e6, new);
                *done = count;
            }
        }
    }
}

/// The timer's gauge, counters and histogram, labelled `timer = <executor name>`.
pub(crate) struct TimerMetrics {
    #[cfg(feature = "metrics")]
    handles: Handles,
}

impl TimerMetrics {
    /// Registers the handles of the timer named `executor_name`, whose executor counts its
    /// tasks' lateness in `lateness`, with the recorder installed now (none: handles that
    /// record nothing).
    pub(crate) fn new(executor_name: &str, lateness: &Arc<LatenessHistogram>) -> TimerMetrics {
        TimerMetrics {
            #[cfg(feature = "metrics")]
            handles: Handles::new(
                ("timer", executor_name),
                &["timer_pending"],
                &[
                    "timer_added_total",
                    "timer_expired_total",
                    "timer_cancelled_total",
                ],
                "timer_lateness_seconds",
                Arc::clone(lateness),
            ),
        }
    }

    /// Reports `stats`, and the lateness counted since the last report.
    #[inline]
    pub(crate) fn record(&self, stats: &TimerStats) {
        #[cfg(feature = "metrics")]
        self.handles.record(
            &[stats.pending as f64],
            &[stats.added, stats.expired, stats.cancelled],
        );
    }

    /// Reports what `stats` returns when the returned guard is dropped: at every return of
    /// the caller. Without the feature, `stats` is never called.
    #[inline]
    pub(crate) fn record_on_return(
        &self,
        stats: impl FnOnce() -> TimerStats,
    ) -> OnReturn<impl FnOnce()> {
        OnReturn(cfg!(feature = "metrics").then_some(move || self.record(&stats())))
    }
}

/// Calls its function when dropped (made by [`TimerMetrics::record_on_return`]).
pub(crate) struct OnReturn<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnReturn<F> {
    #[inline]
    fn drop(&mut self) {
        if let Some(on_return) = self.0.take() {
            on_return();
        }
    }
}

/// A purgatory's gauges, counter and histogram, labelled `delayed_operation = <purgatory
/// name>`.
pub(crate) struct PurgatoryMetrics {
    #[cfg(feature = "metrics")]
    handles: Handles,
}

impl PurgatoryMetrics {
    /// Registers the handles of the purgatory named `purgatory_name` with the recorder
    /// installed now (none: handles that record nothing).
    pub(crate) fn new(purgatory_name: &str) -> PurgatoryMetrics {
        PurgatoryMetrics {
            #[cfg(feature = "metrics")]
            handles: Handles::new(
                ("delayed_operation", purgatory_name),
                &["purgatory_size", "purgatory_num_delayed_operations"],
                &["purgatory_expires_total"],
                "purgatory_expiration_lateness_seconds",
                Arc::new(LatenessHistogram::new()),
            ),
        }
    }

    /// Returns the histogram the purgatory's expiries count their lateness in: with the
    /// feature only (without it, nothing is counted).
    pub(crate) fn expiration_lateness(&self) -> Option<Arc<LatenessHistogram>> {
        #[cfg(feature = "metrics")]
        return Some(Arc::clone(&self.handles.source));
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// Reports what `reading` returns: the purgatory's `watched()`, `num_delayed()` and
    /// `expired_count()`. Without the feature, `reading` is never called.
    #[inline]
    pub(crate) fn record(&self, reading: impl FnOnce() -> (usize, usize, u64)) {
        #[cfg(feature = "metrics")]
        {
            let (watched, num_delayed, expired) = reading();
            self.handles
                .record(&[watched as f64, num_delayed as f64], &[expired]);
        }
    }
}
