//! The example's bookkeeping and output: a ledger of every request's answer, the progress
//! line, the final table and the invariant.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::cli::Config;
use super::common::{Percentiles, ProgressLine, group, mib, peak_rss_kib};
use super::{is_slow, route};

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// By its backend's reply.
    Backend = 1,
    /// By its timeout.
    TimedOut = 2,
}

/// Every request's answers: how many, the last one's kind, and how long it waited.
pub(crate) struct Ledger {
    answers: Vec<AtomicU8>,
    kind: Vec<AtomicU8>,
    waited_us: Vec<AtomicU32>,
    answered: AtomicUsize,
}

impl Ledger {
    pub(crate) fn new(requests: usize) -> Ledger {
        Ledger {
            answers: (0..requests).map(|_| AtomicU8::new(0)).collect(),
            kind: (0..requests).map(|_| AtomicU8::new(0)).collect(),
            waited_us: (0..requests).map(|_| AtomicU32::new(0)).collect(),
            answered: AtomicUsize::new(0),
        }
    }

    /// Records `answer` to request `id`, `waited` after it was asked. A second answer is
    /// counted, not hidden.
    pub(crate) fn record(&self, id: usize, answer: Answer, waited: Duration) {
        self.answers[id].fetch_add(1, Ordering::SeqCst);
        self.kind[id].store(answer as u8, Ordering::SeqCst);
        let waited_us = u32::try_from(waited.as_micros()).unwrap_or(u32::MAX);
        self.waited_us[id].store(waited_us, Ordering::SeqCst);
        self.answered.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Report {
    pub(crate) requests: usize,
    pub(crate) by_backend: usize,
    pub(crate) by_backend_slow: usize,
    pub(crate) timed_out: usize,
    pub(crate) timed_out_fast: usize,
    pub(crate) unanswered: usize,
    pub(crate) answered_twice: usize,
    /// Timed-out requests that waited less than the timeout.
    pub(crate) early: usize,
    /// The shortest wait of a timed-out request, in µs.
    pub(crate) shortest_timeout_us: Option<i64>,
    /// Waits of the requests their backend answered.
    pub(crate) latency: Percentiles,
    /// Waits of the timed-out requests beyond the timeout.
    pub(crate) lateness: Percentiles,
    pub(crate) late_replies: usize,
    pub(crate) backlog_drained: bool,
    pub(crate) pending_at_end: usize,
    pub(crate) wall: Duration,
}

impl Report {
    /// Counts the ledger's answers.
    pub(crate) fn from_ledger(config: &Config, ledger: &Ledger) -> Report {
        let timeout_us = config.timeout_ms * 1_000;
        let mut report = Report {
            requests: config.requests,
            ..Report::default()
        };
        let (mut latency, mut lateness) = (Vec::new(), Vec::new());
        for id in 0..config.requests {
            let waited_us = i64::from(ledger.waited_us[id].load(Ordering::SeqCst));
            let slow = is_slow(config, route(config, id).0);
            match ledger.answers[id].load(Ordering::SeqCst) {
                0 => {
                    report.unanswered += 1;
                    continue;
                }
                1 => {}
                _ => report.answered_twice += 1,
            }
            if ledger.kind[id].load(Ordering::SeqCst) == Answer::Backend as u8 {
                report.by_backend += 1;
                report.by_backend_slow += usize::from(slow);
                latency.push(waited_us);
            } else {
                report.timed_out += 1;
                report.timed_out_fast += usize::from(!slow);
                report.early += usize::from(waited_us < timeout_us);
                lateness.push(waited_us - timeout_us);
                report.shortest_timeout_us = Some(
                    report
                        .shortest_timeout_us
                        .map_or(waited_us, |s| s.min(waited_us)),
                );
            }
        }
        report.latency = Percentiles::of(latency);
        report.lateness = Percentiles::of(lateness);
        report
    }

    /// True iff every request was answered exactly once and none timed out early, and the
    /// timer is empty at the end.
    pub(crate) fn holds(&self) -> bool {
        self.one_answer_each()
            && self.early == 0
            && self.pending_at_end == 0
            && self.backlog_drained
    }

    fn one_answer_each(&self) -> bool {
        self.unanswered == 0
            && self.answered_twice == 0
            && self.by_backend + self.timed_out == self.requests
    }

    /// The table and the invariant.
    pub(crate) fn render(&self, config: &Config) -> String {
        let mut out = String::new();
        let slow_backends = config.backends * config.slow_percent / 100;
        let _ = writeln!(
            out,
            "async_timeouts: {} requests, {} in flight, {} backends ({} slow: {}-{} ms; the others 1-{} ms), timeout {} ms, seed {}\n",
            group(config.requests),
            group(config.in_flight),
            config.backends,
            slow_backends,
            config.slow_min_ms,
            2 * config.slow_min_ms,
            config.fast_max_ms,
            config.timeout_ms,
            config.seed,
        );
        let row = |out: &mut String, what: &str, count: usize, note: &str| {
            let line = format!("{what:<34}{:>11}  {note}", group(count));
            let _ = writeln!(out, "{}", line.trim_end());
        };
        let _ = writeln!(out, "{:<34}{:>11}", "", "count");
        row(
            &mut out,
            "answered by the backend",
            self.by_backend,
            &format!("waited {}", self.latency.describe()),
        );
        row(
            &mut out,
            "  of which from a slow backend",
            self.by_backend_slow,
            "",
        );
        row(
            &mut out,
            "answered \"timed out\"",
            self.timed_out,
            &format!("late by {}", self.lateness.describe()),
        );
        row(
            &mut out,
            "  of which at a fast backend",
            self.timed_out_fast,
            "",
        );
        row(
            &mut out,
            "backend replies after the timeout",
            self.late_replies,
            "(dropped: nobody waits for them)",
        );
        let secs = self.wall.as_secs_f64();
        let _ = writeln!(
            out,
            "{:<34}{:>11}  ({:.0} k requests/s)",
            "wall time",
            format!("{secs:.2} s"),
            self.requests as f64 / secs.max(1e-9) / 1e3
        );
        let _ = writeln!(
            out,
            "{:<34}{:>11}",
            "peak memory of the process",
            mib(peak_rss_kib())
        );
        let _ = writeln!(
            out,
            "\nlate by: how long a timed-out request waited beyond its timeout, from the\n  \
             call of its `timeout` to its answer (never below 0).\n\ninvariant"
        );
        let verdict = |ok: bool| if ok { "ok" } else { "FAILED" };
        let _ = writeln!(
            out,
            "  one answer per request: backend {} + timeout {} = {} of {}; {} double, {} none  {}",
            group(self.by_backend),
            group(self.timed_out),
            group(self.by_backend + self.timed_out),
            group(self.requests),
            self.answered_twice,
            self.unanswered,
            verdict(self.one_answer_each())
        );
        let shortest = self.shortest_timeout_us.map_or_else(
            || "no request timed out".to_owned(),
            |us| {
                format!(
                    "the shortest timed-out wait {:.2} ms >= {} ms",
                    us as f64 / 1e3,
                    config.timeout_ms
                )
            },
        );
        let _ = writeln!(
            out,
            "  none timed out early: {} early; {shortest}  {}",
            self.early,
            verdict(self.early == 0)
        );
        let _ = writeln!(
            out,
            "  timer empty at end: size {}, backends idle: {}  {}",
            self.pending_at_end,
            self.backlog_drained,
            verdict(self.pending_at_end == 0 && self.backlog_drained)
        );
        let _ = writeln!(
            out,
            "  result: {}",
            if self.holds() { "OK" } else { "FAILED" }
        );
        out
    }
}

/// Shows a progress line five times a second until `done`.
pub(crate) fn show_progress(done: &AtomicBool, start: Instant, requests: usize, ledger: &Ledger) {
    let line = ProgressLine::new();
    while !done.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(200));
        line.show(&format!(
            "{:>6.1} s  answered {} of {}",
            start.elapsed().as_secs_f64(),
            group(ledger.answered()),
            group(requests)
        ));
    }
    line.finish();
}
