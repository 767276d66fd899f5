//! What a run did: the table at the end, and the invariant.

use std::time::Duration;

use super::common::{Percentiles, Table, Tally, group, secs};
use super::{COMPLETED, Config, KINDS};

/// One purgatory at the end.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ending {
    /// Its requests, completed (with how long they waited) or expired.
    pub(crate) tally: Tally,
    /// How late each expiry came after its timeout, in µs.
    pub(crate) late_us: Vec<i64>,
    /// `on_expiration` calls, and the purgatory's `expired_count`.
    pub(crate) expirations: u64,
    pub(crate) expired_count: u64,
    /// Watched and delayed after a last check of every key.
    pub(crate) left: (usize, usize),
}

/// What a run did.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Per purgatory, in the order of `KINDS`.
    pub(crate) endings: Vec<Ending>,
    /// The process's threads, and those of the timers, while it ran (Linux).
    pub(crate) threads: Option<(usize, usize)>,
    /// Timers the shared reaper drove.
    pub(crate) driven: usize,
    pub(crate) elapsed: Duration,
}

/// Threads of Kafka's layout: a reaper and an executor per purgatory.
pub(crate) const KAFKA_TIMER_THREADS: usize = 2 * KINDS.len();

impl Report {
    /// Every purgatory's requests, counted together.
    pub(crate) fn requests(&self) -> Tally {
        let mut all = Tally::default();
        for Ending { tally, .. } in &self.endings {
            all.items += tally.items;
            all.settled = [0, 1].map(|way| all.settled[way] + tally.settled[way]);
            all.twice += tally.twice;
            all.never += tally.never;
        }
        all
    }

    /// The table, and the invariant.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let executors = match config.pool_threads {
            0 => "each purgatory's executor thread".to_owned(),
            n => format!("a pool of {n} threads"),
        };
        let (requests, rate, seed) = (group(config.requests), group(config.rate), config.seed);
        let mut t = Table::new(format!(
            "broker: {requests} requests at {rate}/s to 8 purgatories on one shared reaper, \
             expiries on {executors}, seed {seed}"
        ));
        let ms = |us: i64| format!("{:.2} ms", us as f64 / 1e3);
        let head = "completed (p50 wait), expired (late p99, max)";
        t.row("purgatory (timeout, waits for)", "requests", head);
        for (kind, end) in KINDS.iter().zip(&self.endings) {
            let [completed, expired] = end.tally.settled.map(group);
            let late = Percentiles::of(end.late_us.clone());
            let waited = ms(end.tally.figures[COMPLETED].p50_us);
            let (p99, max) = (ms(late.p99_us), ms(late.max_us));
            let note = format!("{completed} ({waited}), {expired} ({p99}, {max})");
            let (name, timeout, waits_for) = (kind.name, kind.timeout_ms, kind.waits_for);
            let label = format!("{name} ({timeout} ms, {waits_for})");
            t.row(label, group(end.tally.items), note);
        }
        let late: Vec<i64> = self
            .endings
            .iter()
            .flat_map(|e| e.late_us.clone())
            .collect();
        let late = Percentiles::of(late);
        t.row("expiries, late", group(late.count), late.describe());
        let (total, timers) = self.threads.unwrap_or_default();
        let threads = self.threads.map_or("n/a".to_owned(), |_| total.to_string());
        let kafka = total - timers + KAFKA_TIMER_THREADS;
        let note = format!("{timers} of them the timers'; one reaper per purgatory: {kafka}");
        t.row("threads of the process", threads, note);
        t.row("elapsed", secs(self.elapsed), "");

        let requests = self.requests();
        let ways = ["completed", "expired"];
        requests.check_once(&mut t, "every request ended exactly one way", ways);
        let sum = |of: fn(&Ending) -> u64| self.endings.iter().map(of).sum::<u64>();
        let (calls, counted) = (sum(|e| e.expirations), sum(|e| e.expired_count));
        let (n, counted_n) = (group(calls), group(counted));
        let line = format!("on_expiration once per expiry: {n}, expired_count {counted_n}");
        t.check(line, calls == requests.settled[1] && counted == calls);
        let line = format!(
            "none expired before its timeout: earliest {} after",
            ms(late.min_us)
        );
        t.check(line, late.count == 0 || late.min_us >= 0);
        let left = self.endings.iter().filter(|e| e.left != (0, 0)).count();
        let line = format!("every purgatory empty at the end: {left} not");
        t.check(line, left == 0);
        let driven = self.driven;
        let line = format!(
            "one reaper drove {driven} timers; they ran on {timers} threads, fewer than \
             {KAFKA_TIMER_THREADS} (a reaper and an executor each)"
        );
        let fewer = self.threads.is_none_or(|_| timers < KAFKA_TIMER_THREADS);
        t.check(line, driven == KINDS.len() && fewer);
        t
    }
}
