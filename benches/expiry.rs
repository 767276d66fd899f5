//! Expiry lateness and idle cost (a bench binary, not a criterion micro-benchmark).
//!
//! **Expiry.** N timers (10^5 and 10^6) with delays uniform in 1–1000 ms (fixed seed), each
//! bumping a counter when it runs, are added from one thread while another drives the timer
//! with `while advance_clock(200)`. For each task, lateness = the instant it ran minus (the
//! instant just before its `add` + its delay), on `Instant`. A negative lateness is an early
//! fire. Printed: time until all ran, lateness p50 / p99 / max, the earliest fire (the
//! smallest lateness), and how long after the last deadline the last task ran.
//!
//! **Idle.** 1,000 timers 60 s out; a driver loops `advance_clock(200)` for ~3 s; printed is
//! the CPU time the whole process used meanwhile (all threads, from
//! `/proc/self/task/*/schedstat`).
//!
//! The baselines (`Mutex<BinaryHeap>`, `Mutex<BTreeMap>`) are driven by the same kind of
//! loop and run expired tasks on the driving thread. tokio-util's `DelayQueue` is left out
//! here: it is single-threaded, so adding 10^6 timers would stall its own expiry.
//!
//! `cargo bench --bench expiry`; `TIMINGWHEEL_BENCH_QUICK=1` for 10^4 timers only and a
//! shorter idle window; `TIMINGWHEEL_EXPIRY_ONLY=wheel` (or `heap`, `btree`) and
//! `TIMINGWHEEL_EXPIRY_N=1000000` to repeat one row.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::{BTreeTimer, BenchTimer, HeapTimer, delays, process_cpu_ns, quick, task};
use timingwheel::{SystemTimer, TimerTask};

/// The origin of every instant recorded here.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn since_origin_ns() -> i64 {
    origin().elapsed().as_nanos() as i64
}

/// Per-run records: each task's deadline (ns since origin), then its lateness.
struct Records {
    deadline_ns: Vec<AtomicI64>,
    lateness_ns: Vec<AtomicI64>,
    ran: AtomicUsize,
    /// When the last task ran (ns since origin).
    last_run_ns: AtomicI64,
}

static RECORDS: OnceLock<Records> = OnceLock::new();

fn records() -> &'static Records {
    RECORDS.get().expect("records set up")
}

/// The expiry workload's task: its delay and its slot in [`RECORDS`].
struct ExpiryTask {
    delay_ms: u32,
    slot: u32,
}

impl TimerTask for ExpiryTask {
    fn delay_ms(&self) -> i64 {
        i64::from(self.delay_ms)
    }

    fn run(self: Box<Self>) {
        let now = since_origin_ns();
        let records = records();
        let slot = self.slot as usize;
        records.lateness_ns[slot].store(
            now - records.deadline_ns[slot].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        records.last_run_ns.fetch_max(now, Ordering::Relaxed);
        records.ran.fetch_add(1, Ordering::Release);
    }
}

struct ExpiryResult {
    all_ran: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    earliest_ns: i64,
    after_last_deadline: Duration,
    early: usize,
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// Runs the expiry workload with `n` timers on `timer`, driven by its own thread.
fn expiry<T: BenchTimer>(timer: &T, n: usize) -> ExpiryResult {
    let records = RECORDS.get_or_init(|| Records {
        deadline_ns: (0..1_000_000).map(|_| AtomicI64::new(0)).collect(),
        lateness_ns: (0..1_000_000).map(|_| AtomicI64::new(0)).collect(),
        ran: AtomicUsize::new(0),
        last_run_ns: AtomicI64::new(0),
    });
    assert!(n <= records.deadline_ns.len());
    records.ran.store(0, Ordering::SeqCst);
    records.last_run_ns.store(0, Ordering::SeqCst);
    for late in &records.lateness_ns[..n] {
        late.store(i64::MIN, Ordering::Relaxed);
    }
    let delays = delays(n, 1, 1000);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let mut last_deadline_ns = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                timer.advance_clock(200);
            }
        });
        for (slot, &delay_ms) in delays.iter().enumerate() {
            let deadline = since_origin_ns() + delay_ms * 1_000_000;
            last_deadline_ns = last_deadline_ns.max(deadline);
            records.deadline_ns[slot].store(deadline, Ordering::Relaxed);
            timer.add(Box::new(ExpiryTask {
                delay_ms: delay_ms as u32,
                slot: slot as u32,
            }));
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        while records.ran.load(Ordering::Acquire) < n && Instant::now() < give_up {
            std::thread::sleep(Duration::from_micros(200));
        }
        stop.store(true, Ordering::Release);
        // Wake a driver blocked in advance_clock(200) on an empty timer.
        timer.add(task(0));
    });
    let ran = records.ran.load(Ordering::Acquire);
    assert!(ran >= n, "only {ran} of {n} tasks ran within 30 s");
    let last_run_ns = records.last_run_ns.load(Ordering::Acquire);
    if std::env::var("TIMINGWHEEL_EXPIRY_DETAIL").is_ok() {
        // Worst lateness per 100 ms window of deadlines, to see where it builds up.
        let start_ns = (start - origin()).as_nanos() as i64;
        let mut worst = vec![0i64; 32];
        for (deadline, late) in records.deadline_ns[..n]
            .iter()
            .zip(&records.lateness_ns[..n])
        {
            let window = ((deadline.load(Ordering::Relaxed) - start_ns) / 100_000_000) as usize;
            let slot = &mut worst[window.min(31)];
            *slot = (*slot).max(late.load(Ordering::Relaxed));
        }
        let shown: Vec<String> = worst
            .iter()
            .map(|w| format!("{:.1}", *w as f64 / 1e6))
            .collect();
        println!(
            "worst lateness (ms) per 100 ms of deadlines: {}",
            shown.join(" ")
        );
        let mut late: Vec<(i64, i64)> = records.deadline_ns[..n]
            .iter()
            .zip(&records.lateness_ns[..n])
            .map(|(d, l)| {
                (
                    l.load(Ordering::Relaxed),
                    d.load(Ordering::Relaxed) - start_ns,
                )
            })
            .collect();
        late.sort_unstable();
        for (l, d) in late.iter().rev().take(8) {
            println!(
                "late {:.2} ms, deadline at +{:.2} ms",
                *l as f64 / 1e6,
                *d as f64 / 1e6
            );
        }
        println!(
            "tasks late > 50 ms: {}",
            late.iter().filter(|(l, _)| *l > 50_000_000).count()
        );
    }
    let mut lateness: Vec<i64> = records.lateness_ns[..n]
        .iter()
        .map(|l| l.load(Ordering::Relaxed))
        .collect();
    lateness.sort_unstable();
    let pct = |p: f64| lateness[((n as f64 * p) as usize).min(n - 1)];
    let positive = |ns: i64| Duration::from_nanos(ns.max(0) as u64);
    ExpiryResult {
        all_ran: Duration::from_nanos((last_run_ns - (start - origin()).as_nanos() as i64) as u64),
        p50: positive(pct(0.50)),
        p99: positive(pct(0.99)),
        max: positive(lateness[n - 1]),
        earliest_ns: lateness[0],
        after_last_deadline: positive(last_run_ns - last_deadline_ns),
        early: lateness.iter().filter(|&&l| l < 0).count(),
    }
}

/// CPU ms the process uses over `window` while a driver loops `advance_clock(200)` on
/// `timer` holding 1,000 timers 60 s out.
fn idle<T: BenchTimer>(timer: &T, window: Duration) -> f64 {
    let handles: Vec<_> = (0..1_000).map(|_| timer.add(task(60_000))).collect();
    let stop = AtomicBool::new(false);
    let cpu = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                timer.advance_clock(200);
            }
        });
        // Let the driver reach its steady state, then measure.
        std::thread::sleep(Duration::from_millis(100));
        let before = process_cpu_ns();
        std::thread::sleep(window);
        let after = process_cpu_ns();
        stop.store(true, Ordering::Release);
        after - before
    });
    for handle in &handles {
        timer.cancel(handle);
    }
    cpu as f64 / 1e6
}

/// Runs per row (`TIMINGWHEEL_EXPIRY_RUNS`, default 3; 1 in quick mode).
fn runs() -> usize {
    std::env::var("TIMINGWHEEL_EXPIRY_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick() { 1 } else { 3 })
}

/// The median of `values` (upper median for an even count).
fn median<V: Copy + PartialOrd>(mut values: Vec<V>) -> V {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

/// One table row: each column is the median over [`runs`] fresh timers, except `early`
/// (the total over all runs); the last column lists every run's p99.
fn row<T: BenchTimer>(name: &str, make: impl Fn() -> T, n: usize) {
    if std::env::var("TIMINGWHEEL_EXPIRY_ONLY").is_ok_and(|only| only != name) {
        return;
    }
    let results: Vec<ExpiryResult> = (0..runs())
        .map(|_| {
            let timer = make();
            let r = expiry(&timer, n);
            drop(timer);
            r
        })
        .collect();
    let col = |f: fn(&ExpiryResult) -> Duration| median(results.iter().map(f).collect());
    let each_p99: Vec<String> = results.iter().map(|r| ms(r.p99)).collect();
    println!(
        "| {name:<6} | {n:>9} | {:>9} | {:>8} | {:>8} | {:>8} | {:>12.3} | {:>5} | {:>10} | {} |",
        ms(col(|r| r.all_ran)),
        ms(col(|r| r.p50)),
        ms(col(|r| r.p99)),
        ms(col(|r| r.max)),
        median(results.iter().map(|r| r.earliest_ns).collect()) as f64 / 1e6,
        results.iter().map(|r| r.early).sum::<usize>(),
        ms(col(|r| r.after_last_deadline)),
        each_p99.join(", "),
    );
}

fn main() {
    let _ = origin();
    let sizes: Vec<usize> = match std::env::var("TIMINGWHEEL_EXPIRY_N") {
        Ok(n) => vec![n.parse().expect("TIMINGWHEEL_EXPIRY_N: a number")],
        Err(_) if quick() => vec![10_000],
        Err(_) => vec![100_000, 1_000_000],
    };
    println!(
        "expiry: delays uniform in 1-1000 ms, driver `while advance_clock(200)`; times in ms; \
         median of {} runs (early: total over the runs)",
        runs()
    );
    println!();
    println!(
        "| timer  |         N | all ran   | p50 late | p99 late | max late | earliest fire | early | after last deadline | p99 of each run |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for &n in &sizes {
        row("wheel", || SystemTimer::new("expiry"), n);
        row("heap", HeapTimer::new, n);
        row("btree", BTreeTimer::new, n);
    }
    let window = if quick() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };
    println!();
    println!(
        "idle: 1,000 timers 60 s out, driver loops advance_clock(200) for {window:?}; process CPU time"
    );
    println!();
    println!("| timer  | CPU ms |");
    println!("|---|---:|");
    let wheel = Arc::new(SystemTimer::new("idle"));
    println!("| wheel  | {:>6.2} |", idle(&*wheel, window));
    println!("| heap   | {:>6.2} |", idle(&HeapTimer::new(), window));
    println!("| btree  | {:>6.2} |", idle(&BTreeTimer::new(), window));
}
