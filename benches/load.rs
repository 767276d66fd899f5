//! Expiry under load (issue 8, goals 1-3), and the cost of an idle timer.
//!
//! **Load.** One thread adds N timers as fast as it can, delays uniform in 1..=spread ms
//! (fixed seed), with spread = N / 1,000 ms: 10^5 over 0.1 s, 10^6 over 1 s, 10^7 over 10 s.
//! Every 100th task is a probe that records its lateness: the instant it ran minus (the
//! instant just before its `add` + its delay), on `Instant`. A negative lateness is an
//! early fire. Another thread drives the timer with `while !stop { advance_clock(200) }`.
//! Each `add` is timed on its own (its `Box` included), for the longest one; the add loop's
//! wall time is compared with the same loop on a timer that nobody drives, run in a
//! process of its own. Every case runs in a child process of its own, so that no timer sees
//! another's heap or threads.
//!
//! Timers: the wheel (`SystemTimer::new`, tasks run on its executor thread), a
//! `Mutex<BTreeMap>` timer and tokio-util's `DelayQueue` behind a `Mutex` (both in
//! `common`; their tasks run on the driving thread).
//!
//! **Idle.** 1,000 timers 60 s out; a driver loops `advance_clock(200)` for 3 s; printed is
//! the CPU time the whole process used meanwhile.
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench load
//! TIMINGWHEEL_LOAD_N=1000000 TIMINGWHEEL_LOAD_ONLY=wheel TIMINGWHEEL_LOAD_RUNS=5 cargo bench ...
//! TIMINGWHEEL_LOAD_CSV=/tmp/load.csv cargo bench ...   # rows for scripts/plot.py
//! TIMINGWHEEL_BENCH_QUICK=1 cargo bench ...             # N = 10^4, one run: seconds
//! ```

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{BTreeTimer, BenchTimer, Rng, SEED, TokioTimer, median, process_cpu_ns, quick, task};
use timingwheel::{SystemTimer, TimerTask};

const CASE_VAR: &str = "TIMINGWHEEL_LOAD_CASE";
/// Every this many-th task is a probe.
const PROBE_EVERY: usize = 100;
/// Timers per second of spread.
const RATE_PER_MS: usize = 1_000;
const NOT_A_PROBE: u32 = u32::MAX;

/// The origin of every instant recorded here.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn since_origin_ns(at: Instant) -> i64 {
    at.duration_since(origin()).as_nanos() as i64
}

/// What the tasks of one run record (one run per process).
struct Records {
    /// Per probe: its deadline (ns since `origin`), then its lateness.
    deadline_ns: Vec<AtomicI64>,
    lateness_ns: Vec<AtomicI64>,
    ran: AtomicUsize,
    /// When the last task ran (ns since `origin`).
    last_run_ns: AtomicI64,
}

static RECORDS: OnceLock<Records> = OnceLock::new();

fn records() -> &'static Records {
    RECORDS.get().expect("records set up")
}

/// The load's task: its delay, and its probe number (or `NOT_A_PROBE`). Eight bytes, like
/// the `u64` task of the other benches.
struct LoadTask {
    delay_ms: u32,
    probe: u32,
}

impl TimerTask for LoadTask {
    fn delay_ms(&self) -> i64 {
        i64::from(self.delay_ms)
    }

    fn run(self: Box<Self>) {
        let now = since_origin_ns(Instant::now());
        let records = records();
        if self.probe != NOT_A_PROBE {
            let probe = self.probe as usize;
            let deadline = records.deadline_ns[probe].load(Ordering::Relaxed);
            records.lateness_ns[probe].store(now - deadline, Ordering::Relaxed);
        }
        records.last_run_ns.fetch_max(now, Ordering::Relaxed);
        records.ran.fetch_add(1, Ordering::Release);
    }
}

/// One run's figures, as a child prints them and the parent reads them.
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    /// Wall time of the add loop, s.
    add_loop_s: f64,
    /// The longest single `add`, µs.
    longest_add_us: f64,
    /// Probes' lateness, ms (driven runs only).
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Probes that ran before their deadline.
    early: usize,
    /// How long after the last deadline the last task ran, ms.
    after_last_ms: f64,
    /// Times the scheduler took the CPU away from the adding thread during its loop.
    preempted: u64,
}

impl Outcome {
    fn to_line(self) -> String {
        format!(
            "{} {} {} {} {} {} {} {}",
            self.add_loop_s,
            self.longest_add_us,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.early,
            self.after_last_ms,
            self.preempted
        )
    }

    fn from_line(line: &str) -> Outcome {
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|v| v.parse().expect("a number"))
            .collect();
        assert_eq!(f.len(), 8, "unexpected case output {line:?}");
        Outcome {
            add_loop_s: f[0],
            longest_add_us: f[1],
            p50_ms: f[2],
            p99_ms: f[3],
            max_ms: f[4],
            early: f[5] as usize,
            after_last_ms: f[6],
            preempted: f[7] as u64,
        }
    }
}

/// Returns how often the scheduler has taken the CPU away from the calling thread
/// (`nonvoluntary_ctxt_switches` in Linux's `/proc/thread-self/status`; 0 elsewhere).
fn preemptions() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Adds `delays.len()` load tasks to `timer` as fast as one thread can, timing each `add`;
/// records each probe's deadline. Returns (loop wall time, longest add, latest deadline,
/// preemptions of the adding thread during the loop).
fn add_all<T: BenchTimer>(timer: &T, delays: &[u32]) -> (Duration, Duration, i64, u64) {
    let records = records();
    let _context = timer.enter();
    let mut longest = Duration::ZERO;
    let mut last_deadline_ns = 0;
    let preempted = preemptions();
    let start = Instant::now();
    for (i, &delay_ms) in delays.iter().enumerate() {
        let probe = if i % PROBE_EVERY == 0 {
            (i / PROBE_EVERY) as u32
        } else {
            NOT_A_PROBE
        };
        let before = Instant::now();
        let deadline_ns = since_origin_ns(before) + i64::from(delay_ms) * 1_000_000;
        if probe != NOT_A_PROBE {
            records.deadline_ns[probe as usize].store(deadline_ns, Ordering::Relaxed);
        }
        timer.add(Box::new(LoadTask { delay_ms, probe }));
        longest = longest.max(before.elapsed());
        last_deadline_ns = last_deadline_ns.max(deadline_ns);
    }
    (
        start.elapsed(),
        longest,
        last_deadline_ns,
        preemptions() - preempted,
    )
}

/// Runs one case in this process: `n` timers on a fresh `T`, driven or not.
fn run_case<T: BenchTimer>(make: impl FnOnce() -> T, n: usize, driven: bool) -> Outcome {
    let _ = origin();
    let probes = n.div_ceil(PROBE_EVERY);
    let records = RECORDS.get_or_init(|| Records {
        deadline_ns: (0..probes).map(|_| AtomicI64::new(0)).collect(),
        lateness_ns: (0..probes).map(|_| AtomicI64::new(i64::MIN)).collect(),
        ran: AtomicUsize::new(0),
        last_run_ns: AtomicI64::new(0),
    });
    let spread_ms = (n / RATE_PER_MS).max(1) as u64;
    let mut rng = Rng::new(SEED);
    let delays: Vec<u32> = (0..n)
        .map(|_| rng.range(1, spread_ms as i64) as u32)
        .collect();
    let timer = make();
    if !driven {
        let (add_loop, longest, _, preempted) = add_all(&timer, &delays);
        return Outcome {
            add_loop_s: add_loop.as_secs_f64(),
            longest_add_us: longest.as_secs_f64() * 1e6,
            preempted,
            ..Outcome::default()
        };
    }
    let stop = AtomicBool::new(false);
    let (add_loop, longest, last_deadline_ns, preempted) = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                timer.advance_clock(200);
            }
        });
        let added = add_all(&timer, &delays);
        let give_up = Instant::now() + Duration::from_millis(spread_ms + 60_000);
        while records.ran.load(Ordering::Acquire) < n && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        added
    });
    let ran = records.ran.load(Ordering::Acquire);
    assert_eq!(
        ran, n,
        "only {ran} of {n} tasks ran within a minute of the spread"
    );
    if std::env::var("TIMINGWHEEL_LOAD_DETAIL").is_ok() {
        print_detail(records, spread_ms);
    }
    let mut lateness: Vec<i64> = records
        .lateness_ns
        .iter()
        .map(|l| l.load(Ordering::Relaxed))
        .collect();
    assert!(lateness.iter().all(|&l| l != i64::MIN), "a probe never ran");
    lateness.sort_unstable();
    let pct = |p: f64| lateness[((lateness.len() as f64 * p) as usize).min(lateness.len() - 1)];
    let ms = |ns: i64| ns as f64 / 1e6;
    Outcome {
        add_loop_s: add_loop.as_secs_f64(),
        longest_add_us: longest.as_secs_f64() * 1e6,
        p50_ms: ms(pct(0.50)),
        p99_ms: ms(pct(0.99)),
        max_ms: ms(*lateness.last().expect("probes")),
        early: lateness.iter().filter(|&&l| l < 0).count(),
        after_last_ms: ms(records.last_run_ns.load(Ordering::Acquire) - last_deadline_ns),
        preempted,
    }
}

/// Prints, on stderr, the worst lateness of the probes due in each twentieth of the run:
/// where lateness builds up.
fn print_detail(records: &Records, spread_ms: u64) {
    let first = records
        .deadline_ns
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let window_ns = (spread_ms as i64 * 1_000_000 / 20).max(1);
    let mut worst = [0i64; 21];
    for (deadline, late) in records.deadline_ns.iter().zip(&records.lateness_ns) {
        let at = ((deadline.load(Ordering::Relaxed) - first) / window_ns).clamp(0, 20) as usize;
        worst[at] = worst[at].max(late.load(Ordering::Relaxed));
    }
    let shown: Vec<String> = worst
        .iter()
        .map(|w| format!("{:.1}", *w as f64 / 1e6))
        .collect();
    eprintln!(
        "worst lateness (ms) per {} ms of deadlines: {}",
        window_ns / 1_000_000,
        shown.join(" ")
    );
}

/// Runs the case `kind:n:driven|undriven` (a child process's job) and prints its outcome.
fn child(case: &str) {
    let parts: Vec<&str> = case.split(':').collect();
    let (kind, n, driven) = (parts[0], parts[1].parse().expect("n"), parts[2] == "driven");
    let outcome = match kind {
        "wheel" => run_case(|| SystemTimer::new("load"), n, driven),
        "btree" => run_case(BTreeTimer::new, n, driven),
        "tokio-util" => run_case(TokioTimer::new, n, driven),
        other => panic!("unknown timer {other}"),
    };
    println!("{}", outcome.to_line());
}

/// Runs a case in a child process and returns its outcome.
fn in_child(kind: &str, n: usize, driven: bool) -> Outcome {
    let mode = if driven { "driven" } else { "undriven" };
    let out = Command::new(std::env::current_exe().expect("own path"))
        .env(CASE_VAR, format!("{kind}:{n}:{mode}"))
        .output()
        .expect("run a case");
    assert!(
        out.status.success(),
        "case {kind}:{n}:{mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Outcome::from_line(String::from_utf8_lossy(&out.stdout).trim())
}

fn env_list(var: &str) -> Option<Vec<String>> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect())
}

/// One table row: the medians over `runs` driven runs and `runs` undriven ones.
fn row(kind: &str, n: usize, runs: usize, csv: &mut Option<std::fs::File>) {
    let driven: Vec<Outcome> = (0..runs).map(|_| in_child(kind, n, true)).collect();
    let undriven: Vec<Outcome> = (0..runs).map(|_| in_child(kind, n, false)).collect();
    let med = |rs: &[Outcome], f: fn(&Outcome) -> f64| median(rs.iter().map(f).collect());
    let (p50, p99, max) = (
        med(&driven, |r| r.p50_ms),
        med(&driven, |r| r.p99_ms),
        med(&driven, |r| r.max_ms),
    );
    let add_driven = med(&driven, |r| r.add_loop_s);
    let add_undriven = med(&undriven, |r| r.add_loop_s);
    let longest = driven.iter().map(|r| r.longest_add_us).fold(0.0, f64::max);
    let longest_undriven = undriven
        .iter()
        .map(|r| r.longest_add_us)
        .fold(0.0, f64::max);
    let preempted = med(&driven, |r| r.preempted as f64);
    let early: usize = driven.iter().map(|r| r.early).sum();
    let each: Vec<String> = driven
        .iter()
        .map(|r| format!("{:.2}/{:.2}", r.p99_ms, r.max_ms))
        .collect();
    println!(
        "| {kind:<10} | {n:>10} | {p50:>7.2} | {p99:>7.2} | {max:>8.2} | {early:>5} | {:>9.2} | {add_driven:>7.3} | {add_undriven:>7.3} | {:>5.2} | {longest:>9.0} | {longest_undriven:>9.0} | {preempted:>5.0} | {} |",
        med(&driven, |r| r.after_last_ms),
        add_driven / add_undriven,
        each.join(", ")
    );
    if let Some(file) = csv {
        use std::io::Write as _;
        let _ = writeln!(
            file,
            "{kind},{n},{p50},{p99},{max},{early},{add_driven},{add_undriven},{longest}"
        );
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

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        child(&case);
        return;
    }
    let sizes: Vec<usize> = env_list("TIMINGWHEEL_LOAD_N")
        .map(|ns| ns.iter().map(|n| n.parse().expect("N")).collect())
        .unwrap_or_else(|| {
            if quick() {
                vec![10_000]
            } else {
                vec![100_000, 1_000_000, 10_000_000]
            }
        });
    let kinds = env_list("TIMINGWHEEL_LOAD_ONLY")
        .unwrap_or_else(|| ["wheel", "btree", "tokio-util"].map(str::to_owned).to_vec());
    let runs: usize = std::env::var("TIMINGWHEEL_LOAD_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick() { 1 } else { 3 });
    let mut csv = std::env::var("TIMINGWHEEL_LOAD_CSV").ok().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open the CSV")
    });
    println!(
        "load: N timers added as fast as one thread can, delays uniform in 1..=N/1000 ms, \
         driver `while advance_clock(200)`; every {PROBE_EVERY}th a probe; median of {runs} \
         runs (early: total; longest add: max over the runs); times in ms unless said"
    );
    println!();
    println!(
        "| timer      |          N |     p50 |     p99 |      max | early | last task | add all s | undriven s | ratio | longest add µs | undriven | adder preempted | p99/max of each run |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for &n in &sizes {
        for kind in &kinds {
            row(kind, n, runs, &mut csv);
        }
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
    println!(
        "| wheel  | {:>6.2} |",
        idle(&SystemTimer::new("idle"), window)
    );
    println!("| btree  | {:>6.2} |", idle(&BTreeTimer::new(), window));
}
