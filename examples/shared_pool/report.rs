//! What the run measured, and the table at the end.

use std::time::Duration;

use timingwheel::{Lateness, TimerStats};

use super::common::{Table, Tally, group, secs};
use super::{Config, RAN, RESPONDED};

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Requests answered by their response and by their timeout, with the time from their
    /// acceptance.
    pub(crate) answers: Tally,
    /// Timeouts that ran, with how late after their deadline (negative: early), and that
    /// were cancelled.
    pub(crate) timeouts: Tally,
    /// Work that finished after its request timed out (its response was dropped), and work
    /// skipped because its request timed out before it started.
    pub(crate) finished_late: u64,
    pub(crate) skipped: u64,
    /// The timer's counts, and its size, at the end.
    pub(crate) stats: TimerStats,
    pub(crate) size_at_end: usize,
    /// How late the timeouts started on the pool, as the timer measured it.
    pub(crate) lateness: Lateness,
    /// Panics the pool saw (must be 0: the timer catches its tasks' own).
    pub(crate) pool_panics: usize,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// The table, and the invariant: every request answered exactly once, every timeout
    /// ran or was cancelled exactly once, none early, the timer's counts agree, the pool
    /// saw no panic.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let ms = |us: u64| us as f64 / 1e3;
        let max_in_flight = match config.max_in_flight {
            0 => "none".to_owned(),
            max => max.to_string(),
        };
        let mut t = Table::new(format!(
            "shared_pool: {} requests at {}/s, {} pool threads, deadline {} ms, work 0-{} ms, \
             max_in_flight {max_in_flight}, seed {}",
            group(config.requests),
            group(config.rate),
            config.threads,
            config.deadline_ms,
            config.work_max_ms,
            config.seed
        ));
        let [responded, timed_out] = self.answers.settled;
        let response_time = self.answers.figures[RESPONDED].describe();
        t.row(
            "answered by their response",
            group(responded),
            response_time,
        );
        t.row("answered by their timeout", group(timed_out), "");
        t.row("  work finished after it", group(self.finished_late), "");
        t.row("  work skipped (timed out first)", group(self.skipped), "");
        t.row("never answered", group(self.answers.never), "");
        let stats = &self.stats;
        let (expired, cancelled) = (group(stats.expired), group(stats.cancelled));
        let ends = format!(
            "expired {expired}, cancelled {cancelled}, left {}",
            self.size_at_end
        );
        t.row("timeouts added to the timer", group(stats.added), ends);
        let lateness = &self.lateness;
        let on_pool = format!(
            "p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            ms(lateness.p50_us),
            ms(lateness.p99_us),
            ms(lateness.p999_us),
            ms(lateness.max_us)
        );
        t.row(
            "timeouts' lateness on the pool",
            group(lateness.count),
            on_pool,
        );
        t.row("elapsed", secs(self.elapsed), "");

        let ways = ["by response", "by timeout"];
        self.answers
            .check_once(&mut t, "each request answered once", ways);
        let what = "each timeout ran or was cancelled once";
        self.timeouts.check_once(&mut t, what, ["ran", "cancelled"]);
        let ran = self.timeouts.figures[RAN];
        let early = ran.min_us as f64 / 1e3;
        let early =
            format!("no timeout ran before its deadline: the earliest {early:.2} ms after it");
        t.check(early, ran.count == 0 || ran.min_us >= 0);
        let counts = format!(
            "the timer took every timeout and has none left: added {}, expired {expired} + \
             cancelled {cancelled}, pending {}, size {}",
            group(stats.added),
            stats.pending,
            self.size_at_end
        );
        let requests = self.answers.items;
        let all_out = stats.expired + stats.cancelled == requests && stats.pending == 0;
        t.check(
            counts,
            stats.added == requests && all_out && self.size_at_end == 0,
        );
        let panics = self.pool_panics;
        t.check(format!("no panic reached the pool: {panics}"), panics == 0);
        t
    }
}
