//! What the run measured, and the table at the end.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use timingwheel::{Lateness, TimerStats};

use super::common::{Percentiles, group, mib, peak_rss_kib};
use super::{Config, RESPONDED, Request, TIMED_OUT, Work};

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub(crate) requests: u64,
    pub(crate) responded: u64,
    pub(crate) timed_out: u64,
    /// Requests never answered (must be 0).
    pub(crate) unanswered: u64,
    /// Requests whose timeout both ran and was cancelled, or neither, or ran twice (must
    /// be 0).
    pub(crate) timeout_not_once: u64,
    /// Timeouts that ran before their deadline (must be 0).
    pub(crate) early: u64,
    pub(crate) finished_late: u64,
    pub(crate) skipped: u64,
    /// From acceptance to the response, of the requests answered by their response.
    pub(crate) response_time: Percentiles,
    /// The timer's counts, and its size, at the end.
    pub(crate) stats: TimerStats,
    pub(crate) size_at_end: usize,
    /// How late the timeouts started on the pool, as the timer measured it.
    pub(crate) lateness: Lateness,
    /// Panics the pool saw (must be 0: the timer catches its tasks' own).
    pub(crate) pool_panics: usize,
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// Reads the books once the run is over.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn collect(
        config: &Config,
        requests: &[Request],
        work: &Work,
        stats: TimerStats,
        lateness: Lateness,
        size_at_end: usize,
        pool_panics: usize,
        elapsed: Duration,
    ) -> Report {
        let (mut responded, mut timed_out, mut unanswered, mut timeout_not_once, mut early) =
            (0, 0, 0, 0, 0);
        let deadline_us = config.deadline_ms as u64 * 1_000;
        let mut response_us = Vec::new();
        for request in requests {
            let accepted_us = request.accepted_us.load(Ordering::Acquire);
            match request.answer.load(Ordering::Acquire) {
                RESPONDED => {
                    responded += 1;
                    let answered_us = request.answered_us.load(Ordering::Acquire);
                    response_us.push(answered_us as i64 - accepted_us as i64);
                }
                TIMED_OUT => timed_out += 1,
                _ => unanswered += 1,
            }
            let runs = request.timeout_runs.load(Ordering::Acquire);
            let cancels = request.cancels.load(Ordering::Acquire);
            if runs + cancels != 1 {
                timeout_not_once += 1;
            }
            if runs > 0 && request.timed_out_us.load(Ordering::Acquire) < accepted_us + deadline_us
            {
                early += 1;
            }
        }
        Report {
            requests: requests.len() as u64,
            responded,
            timed_out,
            unanswered,
            timeout_not_once,
            early,
            finished_late: work.finished_late.load(Ordering::Relaxed),
            skipped: work.skipped.load(Ordering::Relaxed),
            response_time: Percentiles::of(response_us),
            stats,
            size_at_end,
            lateness,
            pool_panics,
            peak_rss_kib: peak_rss_kib(),
            elapsed,
        }
    }

    /// The timer took every timeout, and each one ran (`expired`) or was cancelled, with
    /// nothing left.
    fn timer_counts_agree(&self) -> bool {
        let stats = &self.stats;
        stats.added == self.requests
            && stats.expired + stats.cancelled == self.requests
            && stats.pending == 0
            && self.size_at_end == 0
    }

    /// The invariant: every request answered exactly once, every timeout ran or was
    /// cancelled exactly once, none early, the timer's counts agree, the pool saw no panic.
    pub(crate) fn invariant_holds(&self) -> bool {
        self.unanswered == 0
            && self.responded + self.timed_out == self.requests
            && self.timeout_not_once == 0
            && self.early == 0
            && self.timer_counts_agree()
            && self.pool_panics == 0
    }

    /// The summary table.
    pub(crate) fn summary(&self, config: &Config) -> String {
        let ok = |good: bool| if good { "ok" } else { "FAILED" };
        let ms = |us: u64| us as f64 / 1e3;
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(
            w,
            "shared_pool: {} requests at {}/s, {} pool threads, deadline {} ms, work 0-{} ms, \
             max_in_flight {}, seed {}",
            group(self.requests),
            group(config.rate_per_s),
            config.threads,
            config.deadline_ms,
            config.work_max_ms,
            match config.max_in_flight {
                0 => "none".to_owned(),
                max => max.to_string(),
            },
            config.seed
        );
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "{:<36} {:>10}  {}",
            "answered by their response",
            group(self.responded),
            self.response_time.describe()
        );
        let rows = [
            ("answered by their timeout", self.timed_out),
            ("  work finished after it", self.finished_late),
            ("  work skipped (timed out first)", self.skipped),
            ("never answered", self.unanswered),
        ];
        for (what, count) in rows {
            let _ = writeln!(w, "{what:<36} {:>10}", group(count));
        }
        let stats = &self.stats;
        let _ = writeln!(
            w,
            "{:<36} {:>10}  expired {}, cancelled {}, left {}",
            "timeouts added to the timer",
            group(stats.added),
            group(stats.expired),
            group(stats.cancelled),
            self.size_at_end
        );
        let lateness = &self.lateness;
        let _ = writeln!(
            w,
            "{:<36} {:>10}  p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            "timeouts' lateness on the pool",
            group(lateness.count),
            ms(lateness.p50_us),
            ms(lateness.p99_us),
            ms(lateness.p999_us),
            ms(lateness.max_us)
        );
        let _ = writeln!(
            w,
            "{:<36} {:>10}  peak RSS {}",
            "elapsed",
            format!("{:.2} s", self.elapsed.as_secs_f64()),
            mib(self.peak_rss_kib)
        );
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "each request answered once: {}; each timeout ran or was cancelled once: {}; \
             none early: {}; the timer's counts agree: {}; no panic reached the pool: {}",
            ok(self.unanswered == 0 && self.responded + self.timed_out == self.requests),
            ok(self.timeout_not_once == 0),
            ok(self.early == 0),
            ok(self.timer_counts_agree()),
            ok(self.pool_panics == 0)
        );
        let _ = writeln!(
            w,
            "result: {}",
            if self.invariant_holds() {
                "OK"
            } else {
                "FAILED"
            }
        );
        out
    }
}
