//! Order reconciliation, the job this crate exists for.
//!
//! A shop reserves stock for every new order and schedules a reconciliation check at the
//! order's payment deadline. An order paid before its deadline cancels its check (O(1),
//! the check is freed at once); an unpaid one expires, and its check returns the reserved
//! stock.
//!
//! By default one thread creates 1,000,000 orders as fast as it can, with deadlines spread
//! over 1-3 s; a second thread pays 90 % of them at random moments before their deadline.
//! A [`SystemTimerReaper`] wrapping a [`SystemTimer`] drives the checks. While it runs, a
//! progress line goes to stderr five times a second; at the end a summary goes to stdout:
//! add and cancel throughput, how late the expiries ran, peak memory, and the invariant,
//! checked per order: every order was paid or expired exactly once, and no stock is left
//! reserved. The exit code is 1 if the invariant fails.
//!
//! ```text
//! cargo run --release --example reconcile
//! cargo run --release --example reconcile -- --orders 200000 --pay-ratio 0.5 --seed 7
//! cargo run --release --example reconcile -- --help
//! ```
//!
//! A payment races with its check: if the check fires first, `cancel()` returns false and
//! the order counts as expired, not paid ("paid too late" in the summary).

#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, timer_task};

/// What to simulate.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Config {
    /// Orders to create.
    pub(crate) orders: u32,
    /// Shortest payment deadline, from the order's creation.
    pub(crate) deadline_min_ms: u32,
    /// Longest payment deadline (deadlines are uniform in min..=max).
    pub(crate) deadline_max_ms: u32,
    /// Share of orders that are paid (at a uniform moment before their deadline).
    pub(crate) pay_ratio: f64,
    /// The timer's tick.
    pub(crate) tick_ms: i64,
    /// The timer's wheel size.
    pub(crate) wheel_size: usize,
    /// Seed of the random deadlines, quantities and payment moments.
    pub(crate) seed: u64,
    /// Print a progress line on stderr while running.
    pub(crate) progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            orders: 1_000_000,
            deadline_min_ms: 1_000,
            deadline_max_ms: 3_000,
            pay_ratio: 0.9,
            tick_ms: 1,
            wheel_size: 20,
            seed: 42,
            progress: true,
        }
    }
}

/// What the command line asked for.
#[derive(Debug, PartialEq)]
pub(crate) enum Command {
    Run(Config),
    Help,
}

pub(crate) const USAGE: &str = "\
Simulates a shop: reserve stock per order, schedule a reconciliation check at its payment
deadline, cancel the check when the order is paid, return the stock when it expires.

Usage: reconcile [OPTIONS]

Options:
  --orders N            orders to create, as fast as one thread can   [1000000]
  --deadline-min-ms MS  shortest payment deadline                     [1000]
  --deadline-max-ms MS  longest payment deadline                      [3000]
  --pay-ratio R         share of orders paid before their deadline    [0.9]
  --tick-ms MS          timer tick                                    [1]
  --wheel-size N        buckets per timing wheel                      [20]
  --seed N              random seed                                   [42]
  --no-progress         no progress line on stderr
  -h, --help            print this help

Exit code: 0 if every order was paid or expired exactly once and no stock is left
reserved, 1 if not, 2 on a bad command line.";

/// Parses the command line (without the program name). Accepts `--flag value` and
/// `--flag=value`.
pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    fn value<T: std::str::FromStr>(flag: &str, raw: Option<String>) -> Result<T, String> {
        let raw = raw.ok_or_else(|| format!("{flag} needs a value"))?;
        raw.parse()
            .map_err(|_| format!("{flag}: cannot parse {raw:?}"))
    }

    let mut config = Config::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, v)) if flag.starts_with("--") => (flag.to_owned(), Some(v.to_owned())),
            _ => (arg, None),
        };
        let mut raw = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--orders" => config.orders = value(&flag, raw())?,
            "--deadline-min-ms" => config.deadline_min_ms = value(&flag, raw())?,
            "--deadline-max-ms" => config.deadline_max_ms = value(&flag, raw())?,
            "--pay-ratio" => config.pay_ratio = value(&flag, raw())?,
            "--tick-ms" => config.tick_ms = value(&flag, raw())?,
            "--wheel-size" => config.wheel_size = value(&flag, raw())?,
            "--seed" => config.seed = value(&flag, raw())?,
            "--no-progress" => config.progress = false,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if config.deadline_min_ms == 0 {
        return Err("--deadline-min-ms must be at least 1".into());
    }
    if config.deadline_min_ms > config.deadline_max_ms {
        return Err(format!(
            "--deadline-min-ms ({}) is above --deadline-max-ms ({})",
            config.deadline_min_ms, config.deadline_max_ms
        ));
    }
    if !(0.0..=1.0).contains(&config.pay_ratio) {
        return Err(format!(
            "--pay-ratio must be within 0..=1, got {}",
            config.pay_ratio
        ));
    }
    if config.tick_ms <= 0 {
        return Err(format!(
            "--tick-ms must be positive, got {}",
            config.tick_ms
        ));
    }
    if config.wheel_size == 0 {
        return Err("--wheel-size must be positive".into());
    }
    Ok(Command::Run(config))
}

/// Percentiles of how late the expiry checks ran, in microseconds: the instant a check ran
/// minus (the instant of its `add` + its delay). Negative would mean early.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Lateness {
    pub(crate) min_us: i64,
    pub(crate) p50_us: i64,
    pub(crate) p99_us: i64,
    pub(crate) max_us: i64,
}

impl Lateness {
    /// Summarises `samples` (µs, any order).
    pub(crate) fn of(mut samples: Vec<i64>) -> Lateness {
        if samples.is_empty() {
            return Lateness::default();
        }
        samples.sort_unstable();
        // Nearest rank.
        let rank = |p: usize| samples[(samples.len() * p).div_ceil(100).max(1) - 1];
        Lateness {
            min_us: samples[0],
            p50_us: rank(50),
            p99_us: rank(99),
            max_us: samples[samples.len() - 1],
        }
    }
}

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
            "{:<28} {:>14}  p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (min {:.2} ms)",
            "lateness of expiries",
            "",
            ms(self.lateness.p50_us),
            ms(self.lateness.p99_us),
            ms(self.lateness.max_us),
            ms(self.lateness.min_us)
        );
        let _ = writeln!(
            w,
            "{:<28} {:>14}  {:.2} ms",
            "  of the check that ran last",
            "",
            ms(self.last_expiry_lateness_us)
        );
        let rss = match self.peak_rss_kib {
            Some(kib) => format!("{:.1} MiB", kib as f64 / 1024.0),
            None => "n/a".to_owned(),
        };
        let _ = writeln!(w, "{:<28} {:>14}", "peak memory (VmHWM)", rss);
        let _ = writeln!(
            w,
            "{:<28} {:>14}",
            "wall time",
            format!("{:.2} s", self.elapsed.as_secs_f64())
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

/// Formats `n` with thousands separators.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// SplitMix64: small, fast, and good enough to spread deadlines.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const PENDING: u8 = 0;
const PAID: u8 = 1;
const EXPIRED: u8 = 2;

/// The shop's books, shared by the creator, the payer and the expiry checks.
struct Shop {
    /// One state per order: `PENDING`, then `PAID` or `EXPIRED`, set once by
    /// compare-exchange, so a second outcome is caught.
    state: Vec<AtomicU8>,
    created: AtomicU64,
    paid: AtomicU64,
    expired: AtomicU64,
    double_outcomes: AtomicU64,
    stock_reserved: AtomicI64,
    stock_reserved_total: AtomicU64,
    stock_sold: AtomicU64,
    stock_returned: AtomicU64,
    /// Lateness of each expiry, in µs, in the order they ran (the timer has one executor
    /// thread).
    lateness_us: Mutex<Vec<i64>>,
}

impl Shop {
    fn new(orders: u32) -> Shop {
        Shop {
            state: (0..orders).map(|_| AtomicU8::new(PENDING)).collect(),
            created: AtomicU64::new(0),
            paid: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            double_outcomes: AtomicU64::new(0),
            stock_reserved: AtomicI64::new(0),
            stock_reserved_total: AtomicU64::new(0),
            stock_sold: AtomicU64::new(0),
            stock_returned: AtomicU64::new(0),
            lateness_us: Mutex::new(Vec::new()),
        }
    }

    fn reserve(&self, qty: u8) {
        self.stock_reserved
            .fetch_add(i64::from(qty), Ordering::Relaxed);
        self.stock_reserved_total
            .fetch_add(u64::from(qty), Ordering::Relaxed);
    }

    /// Records `outcome` for `order`; false (and a double outcome) if it already had one.
    fn settle(&self, order: u32, outcome: u8) -> bool {
        let settled = self.state[order as usize]
            .compare_exchange(PENDING, outcome, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !settled {
            self.double_outcomes.fetch_add(1, Ordering::Relaxed);
        }
        settled
    }

    /// The order was paid: its reserved stock is sold.
    fn pay(&self, order: u32, qty: u8) {
        if self.settle(order, PAID) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_sold.fetch_add(u64::from(qty), Ordering::Relaxed);
            self.paid.fetch_add(1, Ordering::Release);
        }
    }

    /// The order's check ran: it was not paid in time, its reserved stock goes back.
    fn expire(&self, order: u32, qty: u8, due: Instant) {
        let now = Instant::now();
        let late_us = match now.checked_duration_since(due) {
            Some(late) => late.as_micros() as i64,
            None => -(due.duration_since(now).as_micros() as i64),
        };
        if self.settle(order, EXPIRED) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_returned
                .fetch_add(u64::from(qty), Ordering::Relaxed);
            self.lateness_us.lock().unwrap().push(late_us);
            self.expired.fetch_add(1, Ordering::Release);
        }
    }

    fn settled(&self) -> u64 {
        self.paid.load(Ordering::Acquire) + self.expired.load(Ordering::Acquire)
    }
}

/// An order to pay, handed from the creator to the payer.
struct Payment {
    /// When to pay, in ms since the start of the run.
    pay_ms: u32,
    order: u32,
    qty: u8,
    check: TimerTaskEntry,
}

/// What the creating thread measured.
struct CreateStats {
    create_time: Duration,
    add_time: Duration,
}

/// Creates `config.orders` orders as fast as it can: reserve, schedule the check, and hand
/// the orders that will be paid to the payer.
fn create_orders(
    config: &Config,
    shop: &Arc<Shop>,
    timer: &dyn Timer,
    start: Instant,
    payments: mpsc::Sender<Payment>,
) -> CreateStats {
    let mut rng = Rng(config.seed);
    let spread = u64::from(config.deadline_max_ms - config.deadline_min_ms) + 1;
    let begin = Instant::now();
    let mut add_time = Duration::ZERO;
    for order in 0..config.orders {
        let deadline_ms = config.deadline_min_ms as u64 + rng.below(spread);
        let qty = 1 + rng.below(3) as u8;
        let pays = rng.unit() < config.pay_ratio;
        let pay_after_ms = rng.below(deadline_ms);
        shop.reserve(qty);

        let added_at = Instant::now();
        let due = added_at + Duration::from_millis(deadline_ms);
        let books = Arc::clone(shop);
        let check = timer.add(timer_task(deadline_ms as i64, move || {
            books.expire(order, qty, due)
        }));
        add_time += added_at.elapsed();
        shop.created.fetch_add(1, Ordering::Relaxed);

        if pays {
            let pay_ms = (added_at - start).as_millis() as u64 + pay_after_ms;
            let payment = Payment {
                pay_ms: u32::try_from(pay_ms).unwrap_or(u32::MAX),
                order,
                qty,
                check,
            };
            if payments.send(payment).is_err() {
                break;
            }
        }
    }
    CreateStats {
        create_time: begin.elapsed(),
        add_time,
    }
}

/// What the paying thread measured.
#[derive(Default)]
struct PayStats {
    cancels: u64,
    cancel_time: Duration,
    paid_too_late: u64,
}

/// Pays each order handed over at its `pay_ms`: cancels its check, and if that won the
/// race, books the order as paid. Ends once the creator is done and all are paid.
fn pay_orders(shop: &Shop, start: Instant, payments: mpsc::Receiver<Payment>) -> PayStats {
    /// Payments drained from the channel before paying what is due again.
    const DRAIN_BATCH: usize = 8_192;
    let mut stats = PayStats::default();
    let mut pay = |payment: Payment| {
        let begin = Instant::now();
        let won = payment.check.cancel();
        stats.cancel_time += begin.elapsed();
        stats.cancels += 1;
        if won {
            shop.pay(payment.order, payment.qty);
        } else {
            // The check fired first: the order expired, the payment is refused.
            stats.paid_too_late += 1;
        }
    };
    // Payments by the millisecond they are due; all before `next_ms` are done.
    let mut buckets: Vec<Vec<Payment>> = Vec::new();
    let mut next_ms = 0usize;
    let mut waiting = 0usize;
    let mut creator_done = false;
    loop {
        let now_ms = start.elapsed().as_millis() as usize;
        while next_ms <= now_ms && next_ms < buckets.len() {
            for payment in std::mem::take(&mut buckets[next_ms]) {
                waiting -= 1;
                pay(payment);
            }
            next_ms += 1;
        }
        if creator_done && waiting == 0 {
            break;
        }
        let first = match payments.recv_timeout(Duration::from_millis(1)) {
            Ok(payment) => Some(payment),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                creator_done = true;
                None
            }
        };
        for payment in first
            .into_iter()
            .chain(payments.try_iter().take(DRAIN_BATCH))
        {
            let at = payment.pay_ms as usize;
            if at < next_ms {
                pay(payment);
                continue;
            }
            if at >= buckets.len() {
                buckets.resize_with(at + 1, Vec::new);
            }
            buckets[at].push(payment);
            waiting += 1;
        }
    }
    stats
}

/// Returns the process's peak resident set size, from `VmHWM` in `/proc/self/status`.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let start = Instant::now();
    let timer = SystemTimerReaper::new(
        "reconcile-reaper",
        SystemTimer::with_config(
            "reconcile",
            config.tick_ms,
            config.wheel_size,
            timingwheel::hi_res_clock_ms(),
        ),
    );
    let shop = Arc::new(Shop::new(config.orders));
    let orders = u64::from(config.orders);
    // How long to wait for the last outcomes once every order exists.
    let patience = Duration::from_millis(u64::from(config.deadline_max_ms) + 10_000);

    let (create, pay) = thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let creating = Arc::new(AtomicBool::new(true));
        let creator = {
            let (shop, timer, creating) = (&shop, &timer, Arc::clone(&creating));
            thread::Builder::new()
                .name("creator".into())
                .spawn_scoped(s, move || {
                    let stats = create_orders(config, shop, timer, start, tx);
                    creating.store(false, Ordering::Release);
                    stats
                })
                .expect("spawn the creator")
        };
        let payer = thread::Builder::new()
            .name("payer".into())
            .spawn_scoped(s, || pay_orders(&shop, start, rx))
            .expect("spawn the payer");

        let mut progress = Progress::new(config.progress);
        let mut created_at: Option<Instant> = None;
        loop {
            thread::sleep(Duration::from_millis(10));
            progress.tick(&shop, start, false);
            if created_at.is_none() && !creating.load(Ordering::Acquire) {
                created_at = Some(Instant::now());
            }
            if let Some(created_at) = created_at
                && ((payer.is_finished() && shop.settled() >= orders)
                    || created_at.elapsed() > patience)
            {
                break;
            }
        }
        progress.tick(&shop, start, true);
        let create = creator.join().expect("the creator panicked");
        let pay = payer.join().expect("the payer panicked");
        (create, pay)
    });

    let timer_size_at_end = timer.size();
    timer.close();
    let elapsed = start.elapsed();

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
    let lateness = Lateness::of(lateness_us);
    Report {
        orders,
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
        lateness,
        last_expiry_lateness_us,
        peak_rss_kib: peak_rss_kib(),
        elapsed,
    }
}

/// The progress line on stderr: rewritten in place on a terminal, one line per update
/// otherwise.
struct Progress {
    enabled: bool,
    terminal: bool,
    last: Option<Instant>,
    last_line: String,
}

impl Progress {
    /// Time between two updates: five a second.
    const EVERY: Duration = Duration::from_millis(200);

    fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            terminal: std::io::stderr().is_terminal(),
            last: None,
            last_line: String::new(),
        }
    }

    fn tick(&mut self, shop: &Shop, start: Instant, last: bool) {
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
        if last && !self.terminal && line == self.last_line {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}{}", if last { "\n" } else { "" })
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.last_line = line;
    }
}

fn main() {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return;
        }
        Err(message) => {
            eprintln!("reconcile: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let report = run(&config);
    print!("{}", report.summary(&config));
    if !report.invariant_holds() {
        std::process::exit(1);
    }
}
