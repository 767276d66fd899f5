//! The example's bookkeeping and output: a ledger of every request's answer, the progress
//! line, the final table and the invariant.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::cli::Config;
use super::common::{Percentiles, ProgressLine, group, mib, peak_rss_kib};

/// Every request's answer: how many times it was answered, whether it expired, how long it
/// waited.
pub(crate) struct Ledger {
    answers: Vec<AtomicU8>,
    expired: Vec<AtomicBool>,
    waited_us: Vec<AtomicU64>,
    answered: AtomicUsize,
    expirations: AtomicUsize,
    /// Set, with a notify, when the last request is answered.
    all_answered: (Mutex<bool>, Condvar),
}

impl Ledger {
    pub(crate) fn new(requests: usize) -> Ledger {
        Ledger {
            answers: (0..requests).map(|_| AtomicU8::new(0)).collect(),
            expired: (0..requests).map(|_| AtomicBool::new(false)).collect(),
            waited_us: (0..requests).map(|_| AtomicU64::new(0)).collect(),
            answered: AtomicUsize::new(0),
            expirations: AtomicUsize::new(0),
            all_answered: (Mutex::new(requests == 0), Condvar::new()),
        }
    }

    /// Records the response to request `id`, sent `waited` after the request arrived. A
    /// second response is counted, not hidden.
    pub(crate) fn answer(&self, id: usize, waited: Duration) {
        if self.answers[id].fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        self.waited_us[id].store(waited.as_micros() as u64, Ordering::SeqCst);
        if self.answered.fetch_add(1, Ordering::SeqCst) + 1 == self.answers.len() {
            let (done, wake) = &self.all_answered;
            *done.lock().unwrap() = true;
            wake.notify_all();
        }
    }

    /// Records that request `id` timed out.
    pub(crate) fn expire(&self, id: usize) {
        self.expired[id].store(true, Ordering::SeqCst);
        self.expirations.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until every request is answered, or `timeout`; true if they all were.
    pub(crate) fn wait_all_answered(&self, timeout: Duration) -> bool {
        let (done, wake) = &self.all_answered;
        let done = done.lock().unwrap();
        let (done, _) = wake
            .wait_timeout_while(done, timeout, |done| !*done)
            .unwrap();
        *done
    }

    pub(crate) fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    pub(crate) fn expirations(&self) -> usize {
        self.expirations.load(Ordering::SeqCst)
    }
}

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
    pub(crate) peak_rss_kib: Option<u64>,
}

impl Report {
    /// Reads the ledger once every request has settled.
    pub(crate) fn from_ledger(ledger: &Ledger) -> Report {
        let mut report = Report {
            requests: ledger.answers.len(),
            completed_by_acks: 0,
            expired: 0,
            answered_twice: 0,
            never_answered: 0,
            acked: Percentiles::default(),
            timed_out: Percentiles::default(),
            producing: Duration::ZERO,
            answering: Duration::ZERO,
            check_and_complete_calls: 0,
            watched_at_end: 0,
            delayed_at_end: 0,
            peak_rss_kib: peak_rss_kib(),
        };
        let (mut acked, mut timed_out) = (Vec::new(), Vec::new());
        for id in 0..report.requests {
            let waited_us = ledger.waited_us[id].load(Ordering::SeqCst) as i64;
            match ledger.answers[id].load(Ordering::SeqCst) {
                0 => report.never_answered += 1,
                1 => {}
                _ => report.answered_twice += 1,
            }
            if ledger.answers[id].load(Ordering::SeqCst) == 0 {
                continue;
            }
            if ledger.expired[id].load(Ordering::SeqCst) {
                report.expired += 1;
                timed_out.push(waited_us);
            } else {
                report.completed_by_acks += 1;
                acked.push(waited_us);
            }
        }
        report.acked = Percentiles::of(acked);
        report.timed_out = Percentiles::of(timed_out);
        report
    }

    /// Every request answered exactly once, none expired before its timeout, and nothing
    /// left in the purgatory.
    pub(crate) fn invariant_holds(&self, config: &Config) -> bool {
        self.exactly_once() && self.never_early(config) && self.purgatory_empty()
    }

    fn exactly_once(&self) -> bool {
        self.answered_twice == 0
            && self.never_answered == 0
            && self.completed_by_acks + self.expired == self.requests
    }

    fn never_early(&self, config: &Config) -> bool {
        self.timed_out.count == 0 || self.timed_out.min_us >= config.timeout_ms * 1_000
    }

    fn purgatory_empty(&self) -> bool {
        self.watched_at_end == 0 && self.delayed_at_end == 0
    }

    /// The final table and the invariant, as printed to stdout.
    pub(crate) fn summary(&self, config: &Config) -> String {
        let mut w = String::new();
        let share = |n: usize| 100.0 * n as f64 / self.requests.max(1) as f64;
        let per_s = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        let _ = writeln!(
            w,
            "purgatory: {} produce requests, acks=all (3 replicas), {} partitions, timeout {} ms, \
             replica 3 slow on 1 partition in {} (fetches every {} ms), seed {}\n",
            group(self.requests),
            config.partitions,
            config.timeout_ms,
            config.slow_every,
            config.slow_fetch_ms,
            config.seed
        );
        let row = |w: &mut String, label: &str, count: String, note: String| {
            let _ = writeln!(w, "{label:<28} {count:>10}  {note}");
        };
        row(&mut w, "", "count".into(), String::new());
        row(
            &mut w,
            "requests",
            group(self.requests),
            format!(
                "offered at {} /s for {:.2} s",
                group(per_s(self.requests, self.producing) as usize),
                self.producing.as_secs_f64()
            ),
        );
        row(
            &mut w,
            "completed by acks",
            group(self.completed_by_acks),
            format!("{:.1} %", share(self.completed_by_acks)),
        );
        row(
            &mut w,
            "expired",
            group(self.expired),
            format!("{:.1} %", share(self.expired)),
        );
        row(
            &mut w,
            "time to complete, by acks",
            String::new(),
            self.acked.describe(),
        );
        row(
            &mut w,
            "time to complete, expired",
            String::new(),
            self.timed_out.describe(),
        );
        row(
            &mut w,
            "throughput",
            String::new(),
            format!(
                "{} answers/s ({:.2} s from the first request to the last answer)",
                group(per_s(self.requests, self.answering) as usize),
                self.answering.as_secs_f64()
            ),
        );
        row(
            &mut w,
            "check_and_complete calls",
            group(self.check_and_complete_calls),
            "one per high-watermark move of a partition".into(),
        );
        let peak = mib(self.peak_rss_kib);
        row(
            &mut w,
            "peak memory (VmHWM)",
            peak,
            "the most RAM the process held at once (from /proc/self/status)".into(),
        );

        let verdict = |ok: bool| if ok { "ok" } else { "BROKEN" };
        let _ = writeln!(w, "\ninvariant");
        let _ = writeln!(
            w,
            "  every request answered exactly once: {} by acks + {} expired = {} of {}; \
             {} twice, {} never  {}",
            group(self.completed_by_acks),
            group(self.expired),
            group(self.completed_by_acks + self.expired),
            group(self.requests),
            self.answered_twice,
            self.never_answered,
            verdict(self.exactly_once())
        );
        let _ = writeln!(
            w,
            "  no request expired before its {} ms timeout: earliest expiry after {:.2} ms  {}",
            config.timeout_ms,
            self.timed_out.min_us as f64 / 1e3,
            verdict(self.never_early(config))
        );
        let _ = writeln!(
            w,
            "  purgatory empty at end: watched {}, delayed {}  {}",
            self.watched_at_end,
            self.delayed_at_end,
            verdict(self.purgatory_empty())
        );
        let _ = writeln!(
            w,
            "  result: {}",
            if self.invariant_holds(config) {
                "OK"
            } else {
                "BROKEN"
            }
        );
        w
    }
}

/// What the progress line shows.
pub(crate) struct Snapshot {
    pub(crate) sent: usize,
    pub(crate) answered: usize,
    pub(crate) expired: usize,
    pub(crate) delayed: usize,
    pub(crate) watched: usize,
}

/// Prints a progress line to stderr five times a second until `stop` is set.
pub(crate) fn show_progress(stop: &AtomicBool, start: Instant, snapshot: impl Fn() -> Snapshot) {
    let progress = ProgressLine::new();
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(200));
        let s = snapshot();
        let line = format!(
            "{:>5.1} s  sent {:>9}  answered {:>9} (expired {:>7})  waiting {:>7}  watched {:>7}",
            start.elapsed().as_secs_f64(),
            group(s.sent),
            group(s.answered),
            group(s.expired),
            group(s.delayed),
            group(s.watched)
        );
        progress.show(&line);
    }
    progress.finish();
}
