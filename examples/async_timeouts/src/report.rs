//! What a run did: the final table and the invariant.

use std::time::Duration;

use super::cli::Config;
use super::common::{Table, Tally, group, secs};
use super::{BACKEND, TIMED_OUT};

/// What a run did.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Requests answered by their backend, with how long they waited, and by their
    /// timeout, with how late it came (negative: early).
    pub(crate) answers: Tally,
    /// Requests a slow backend answered in time, and fast ones that timed out.
    pub(crate) slow_answered: u64,
    pub(crate) fast_timed_out: u64,
    /// Backend replies that came after their request's timeout.
    pub(crate) late_replies: usize,
    pub(crate) backlog_drained: bool,
    pub(crate) pending_at_end: usize,
    pub(crate) wall: Duration,
}

impl Report {
    /// The table, and the invariant: every request answered exactly once, none timed out
    /// early, and the timer empty and the backends idle at the end.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let mut t = Table::new(format!(
            "async_timeouts: {} requests, {} in flight, {} backends ({} slow: {}-{} ms; the others \
             1-{} ms), timeout {} ms, seed {}",
            group(config.requests),
            group(config.in_flight),
            config.backends,
            config.backends * config.slow_percent / 100,
            config.slow_min_ms,
            2 * config.slow_min_ms,
            config.fast_max_ms,
            config.timeout_ms,
            config.seed,
        ));
        let ([by_backend, timed_out], figures) = (self.answers.settled, self.answers.figures);
        t.row("", "count", "");
        let waited = format!("waited {}", figures[BACKEND].describe());
        t.row("answered by the backend", group(by_backend), waited);
        t.row(
            "  of which from a slow backend",
            group(self.slow_answered),
            "",
        );
        let late_by = format!("late by {}", figures[TIMED_OUT].describe());
        t.row("answered \"timed out\"", group(timed_out), late_by);
        t.row(
            "  of which at a fast backend",
            group(self.fast_timed_out),
            "",
        );
        let dropped = "(dropped: nobody waits for them)";
        t.row(
            "backend replies after the timeout",
            group(self.late_replies),
            dropped,
        );
        let per_s = self.answers.items as f64 / self.wall.as_secs_f64().max(1e-9) / 1e3;
        t.row(
            "wall time",
            secs(self.wall),
            format!("({per_s:.0} k requests/s)"),
        );
        t.note(
            "late by: how long a timed-out request waited beyond its timeout, from the\n  \
             call of its `timeout` to its answer (never below 0).",
        );

        let ways = ["by the backend", "by timeout"];
        self.answers
            .check_once(&mut t, "one answer per request", ways);
        let lateness = figures[TIMED_OUT];
        let shortest = if lateness.count == 0 {
            "no request timed out".to_owned()
        } else {
            let ms = lateness.min_us as f64 / 1e3 + config.timeout_ms as f64;
            format!(
                "the shortest timed-out wait {ms:.2} ms >= {} ms",
                config.timeout_ms
            )
        };
        t.check(
            format!("none timed out early: {shortest}"),
            lateness.min_us >= 0,
        );
        let (left, idle) = (self.pending_at_end, self.backlog_drained);
        let ends = format!("timer empty at end: size {left}, backends idle: {idle}");
        t.check(ends, left == 0 && idle);
        t
    }
}
