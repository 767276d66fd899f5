//! What a run did: the final table and the invariant.

use std::time::Duration;

use super::cli::Config;
use super::common::{Percentiles, Table, Tally, group, secs};

/// What a run did.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub(crate) requests: usize,
    pub(crate) completed_by_acks: usize,
    pub(crate) expired: usize,
    /// Requests answered more than once (must be 0).
    pub(crate) answered_twice: usize,
    /// Requests never answered (must be 0).
    pub(crate) never_answered: usize,
    /// Time to complete of the requests completed by acknowledgements.
    pub(crate) acked: Percentiles,
    /// Time to complete of the expired ones (never below the timeout).
    pub(crate) timed_out: Percentiles,
    /// From the first request to the last one sent.
    pub(crate) producing: Duration,
    /// From the first request to the last answer.
    pub(crate) answering: Duration,
    pub(crate) check_and_complete_calls: usize,
    /// The purgatory after a last `check_and_complete` of every partition.
    pub(crate) watched_at_end: usize,
    pub(crate) delayed_at_end: usize,
}

impl Report {
    /// The table, and the invariant.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let share = |n: usize| format!("{:.1} %", 100.0 * n as f64 / self.requests.max(1) as f64);
        let per_s = |n: usize, d: Duration| group((n as f64 / d.as_secs_f64().max(1e-9)) as u64);
        let mut t = Table::new(format!(
            "purgatory: {} produce requests, acks=all (3 replicas), {} partitions, timeout {} ms, \
             replica 3 slow on 1 partition in {} (fetches every {} ms), seed {}",
            group(self.requests),
            config.partitions,
            config.timeout_ms,
            config.slow_every,
            config.slow_fetch_ms,
            config.seed
        ));
        let (producing, answering) = (secs(self.producing), secs(self.answering));
        let offered = format!(
            "offered at {} /s for {producing}",
            per_s(self.requests, self.producing)
        );
        t.row("", "count", "");
        t.row("requests", group(self.requests), offered);
        t.row(
            "completed by acks",
            group(self.completed_by_acks),
            share(self.completed_by_acks),
        );
        t.row("expired", group(self.expired), share(self.expired));
        t.row("time to complete, by acks", "", self.acked.describe());
        t.row("time to complete, expired", "", self.timed_out.describe());
        let answers = per_s(self.requests, self.answering);
        let last = "from the first request to the last answer";
        t.row(
            "throughput",
            "",
            format!("{answers} answers/s ({answering} {last})"),
        );
        let calls = group(self.check_and_complete_calls);
        t.row(
            "check_and_complete calls",
            calls,
            "one per high-watermark move of a partition",
        );

        let answers = Tally {
            items: self.requests as u64,
            settled: [self.completed_by_acks as u64, self.expired as u64],
            twice: self.answered_twice as u64,
            never: self.never_answered as u64,
            figures: [self.acked, self.timed_out],
        };
        let ways = ["by acks", "expired"];
        answers.check_once(&mut t, "every request answered exactly once", ways);
        let early = format!(
            "no request expired before its {} ms timeout: earliest expiry after {:.2} ms",
            config.timeout_ms,
            self.timed_out.min_us as f64 / 1e3,
        );
        let never_early = self.timed_out.min_us >= config.timeout_ms * 1_000;
        t.check(early, self.timed_out.count == 0 || never_early);
        let (watched, delayed) = (self.watched_at_end, self.delayed_at_end);
        let empty = format!("purgatory empty at end: watched {watched}, delayed {delayed}");
        t.check(empty, watched == 0 && delayed == 0);
        t
    }
}
