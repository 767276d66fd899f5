//! What the run measured, the table at the end, and the progress line while it runs.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Config;
use super::books::{EXPIRED, PAID, Shop};
use super::common::{Percentiles, ProgressLine, group, mib, peak_rss_kib};

/// What the creating thread measured.
pub(crate) struct CreateStats {
    /// Wall time of the whole loop (add, reserve, hand to the payer).
    pub(crate) create_time: Duration,
    /// Time spent inside `add` (allocating the task included), summed over the calls.
    pub(crate) add_time: Duration,
}

/// What the paying thread measured.
#[derive(Default)]
pub(crate) struct PayStats {
    pub(crate) cancels: u64,
    pub(crate) cancel_time: Duration,
    /// Payments whose `cancel()` returned false: the check had fired first.
    pub(crate) paid_too_late: u64,
}

/// Percentiles of how late the expiry checks ran, in microseconds: the instant a check ran
/// minus (the instant of its `add` + its delay). Negative would mean early.
pub(crate) type Lateness = Percentiles;

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub(crate) orders: u64,
    /// Orders whose payment cancelled the check.
    pub(crate) paid: u64,
    /// Orders whose check ran.
    pub(crate) expired: u64,
    /// Payments whose `cancel()` returned false: the check had fired first.
    pub(crate) paid_too_late: u64,
    /// Second outcomes for an order (should be 0).
    pub(crate) double_outcomes: u64,
    /// Orders with no outcome at the end (should be 0).
    pub(crate) no_outcome: u64,
    /// Final per-order states, counted: they must agree with `paid` and `expired`.
    pub(crate) states_paid: u64,
    pub(crate) states_expired: u64,
    /// Stock units reserved over the run, sold to payers, returned by expiries.
    pub(crate) stock_reserved_total: u64,
    pub(crate) stock_sold: u64,
    pub(crate) stock_returned: u64,
    /// Units still reserved at the end (must be 0).
    pub(crate) stock_reserved_left: i64,
    /// `size()` of the timer before it was closed (must be 0).
    pub(crate) timer_size_at_end: usize,
    /// Wall time of the creating loop (add, reserve, hand to the payer).
    pub(crate) create_time: Duration,
    /// Sum of the time spent inside `add` (with allocating the task), per call.
    pub(crate) add_time: Duration,
    /// `cancel()` calls made by the payer, and the time spent inside them.
    pub(crate) cancels: u64,
    pub(crate) cancel_time: Duration,
    pub(crate) lateness: Lateness,
    /// Lateness of the check that ran last, in µs (0 if none ran).
    pub(crate) last_expiry_lateness_us: i64,
    /// Peak resident set size (`VmHWM`), if `/proc/self/status` has it.
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// Reads the books once the run is over.
    pub(crate) fn collect(
        shop: &Shop,
        create: CreateStats,
        pay: PayStats,
        timer_size_at_end: usize,
        elapsed: Duration,
    ) -> Report {
        let (mut states_paid, mut states_expired, mut no_outcome) = (0, 0, 0);
        for state in &shop.state {
            match state.load(Ordering::Acquire) {
                PAID => states_paid += 1,
                EXPIRED => states_expired += 1,
                _ => no_outcome += 1,
            }
        }
        // In the order the checks ran: the timer has one executor thread.
        let lateness_us = std::mem::take(&mut *shop.lateness_us.lock().unwrap());
        let last_expiry_lateness_us = lateness_us.last().copied().unwrap_or(0);
        Report {
            orders: shop.state.len() as u64,
            paid: shop.paid.load(Ordering::Acquire),
            expired: shop.expired.load(Ordering::Acquire),
            paid_too_late: pay.paid_too_late,
            double_outcomes: shop.double_outcomes.load(Ordering::Acquire),
            no_outcome,
            states_paid,
            states_expired,
            stock_reserved_total: shop.stock_reserved_total.load(Ordering::Acquire),
            stock_sold: shop.stock_sold.load(Ordering::Acquire),
            stock_returned: shop.stock_returned.load(Ordering::Acquire),
            stock_reserved_left: shop.stock_reserved.load(Ordering::Acquire),
            timer_size_at_end,
            create_time: create.create_time,
            add_time: create.add_time,
            cancels: pay.cancels,
            cancel_time: pay.cancel_time,
            lateness: Lateness::of(lateness_us),
            last_expiry_lateness_us,
            peak_rss_kib: peak_rss_kib(),
            elapsed,
        }
    }

    /// The invariant: every order paid or expired exactly once, no stock left reserved.
    pub(crate) fn invariant_holds(&self) -> bool {
        self.stock_reserved_left == 0
            && self.double_outcomes == 0
            && self.no_outcome == 0
            && self.paid + self.expired == self.orders
            && self.states_paid == self.paid
            && self.states_expired == self.expired
            && self.stock_sold + self.stock_returned == self.stock_reserved_total
            && self.timer_size_at_end == 0
    }

    /// The summary table.
    pub(crate) fn summary(&self, config: &Config) -> String {
        let per_sec = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        let ns_per = |d: Duration, n: u64| d.as_nanos() as f64 / n.max(1) as f64;
        let ms = |us: i64| us as f64 / 1000.0;
        let ok = |good: bool| if good { "ok" } else { "FAILED" };
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(
            w,
            "reconcile: {} orders, deadlines {}-{} ms, pay ratio {}, tick {} ms, wheel size {}, seed {}",
            group(self.orders),
            config.deadline_min_ms,
            config.deadline_max_ms,
            config.pay_ratio,
            config.tick_ms,
            config.wheel_size,
            config.seed
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "{}count  rate", " ".repeat(28 + 1 + 14 - 5));
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {:.2} M/s ({:.0} ns per add, incl. allocating the task)",
            "add (schedule a check)",
            group(self.orders),
            per_sec(self.orders, self.add_time) / 1e6,
            ns_per(self.add_time, self.orders)
        );
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {:.2} M/s (whole loop: add, reserve, hand to payer, {:.2} s)",
            "orders created",
            group(self.orders),
            per_sec(self.orders, self.create_time) / 1e6,
            self.create_time.as_secs_f64()
        );
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {:.2} M/s ({:.0} ns per cancel)",
            "cancel (payment)",
            group(self.cancels),
            per_sec(self.cancels, self.cancel_time) / 1e6,
            ns_per(self.cancel_time, self.cancels)
        );
        let _ = writeln!(w, "{:<28} {:>14}", "paid", group(self.paid));
        let _ = writeln!(w, "{:<28} {:>14}", "expired", group(self.expired));
        let _ = writeln!(
            w,
            "{:<28} {:>14}  (counted as expired)",
            "  of which paid too late",
            group(self.paid_too_late)
        );
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {}",
            "lateness of expiries",
            "",
            self.lateness.describe()
        );
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {:.2} ms",
            "  of the last check to run",
            "",
            ms(self.last_expiry_lateness_us)
        );
        let rss = mib(self.peak_rss_kib);
        let _ = writeln!(w, "{:<28} {:>14}", "peak memory of the process", rss);
        let _ = writeln!(
            w,
            "{:<28} {:>14}",
            "wall time",
            format!("{:.2} s", self.elapsed.as_secs_f64())
        );
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "lateness: when a check ran, minus (when its order was created + its deadline);"
        );
        let _ = writeln!(
            w,
            "  never below 0. The last check to run shows the timer kept up to the very end."
        );
        let _ = writeln!(
            w,
            "peak memory: the most the whole process held in RAM at once (VmHWM in"
        );
        let _ = writeln!(
            w,
            "  /proc/self/status): the orders' books, their checks and every thread included."
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "invariant");
        let _ = writeln!(
            w,
            "  stock reserved at end: {} units (reserved {}, sold {}, returned {})  {}",
            self.stock_reserved_left,
            group(self.stock_reserved_total),
            group(self.stock_sold),
            group(self.stock_returned),
            ok(self.stock_reserved_left == 0
                && self.stock_sold + self.stock_returned == self.stock_reserved_total)
        );
        let _ = writeln!(
            w,
            "  one outcome per order: paid {} + expired {} = {} of {}; {} double, {} none  {}",
            group(self.states_paid),
            group(self.states_expired),
            group(self.states_paid + self.states_expired),
            group(self.orders),
            self.double_outcomes,
            self.no_outcome,
            ok(self.double_outcomes == 0
                && self.no_outcome == 0
                && self.paid + self.expired == self.orders
                && self.states_paid == self.paid
                && self.states_expired == self.expired)
        );
        let _ = writeln!(
            w,
            "  timer empty at end: size {}  {}",
            self.timer_size_at_end,
            ok(self.timer_size_at_end == 0)
        );
        let _ = writeln!(
            w,
            "  result: {}",
            if self.invariant_holds() {
                "OK"
            } else {
                "FAILED"
            }
        );
        out
    }
}

/// The progress line on stderr, at most five times a second.
pub(crate) struct Progress {
    enabled: bool,
    line: ProgressLine,
    last: Option<Instant>,
    last_line: String,
}

impl Progress {
    /// Time between two updates: five a second.
    const EVERY: Duration = Duration::from_millis(200);

    pub(crate) fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            line: ProgressLine::new(),
            last: None,
            last_line: String::new(),
        }
    }

    pub(crate) fn tick(&mut self, shop: &Shop, start: Instant, last: bool) {
        if !self.enabled || (!last && self.last.is_some_and(|at| at.elapsed() < Self::EVERY)) {
            return;
        }
        self.last = Some(Instant::now());
        let created = shop.created.load(Ordering::Relaxed);
        let paid = shop.paid.load(Ordering::Relaxed);
        let expired = shop.expired.load(Ordering::Relaxed);
        let line = format!(
            "created {:>9}  paid {:>9}  expired {:>9}  pending {:>9}  elapsed {:>6.2} s",
            created,
            paid,
            expired,
            created.saturating_sub(paid + expired),
            start.elapsed().as_secs_f64()
        );
        // The last update repeats nothing the line already shows.
        if !(last && line == self.last_line) {
            self.line.show(&line);
        }
        if last {
            self.line.finish();
        }
        self.last_line = line;
    }
}
