//! The 30-minute scenario, simulated without waiting.
//!
//! N timers (10^7) are added at once with delays uniform in 30 min ± 5 min, on a timer
//! whose clock is a `MockTime`. Then a driver thread moves the clock 1 ms at a time through
//! all of it, calling `advance_clock(0)` after each step, until every task has run. Each
//! call is timed twice: wall time (`Instant`, what the caller waits, preemption by other
//! processes included) and the driver thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`,
//! the work the call did). Reported: the longest call,
//! p99.9 and p99 of both, the total time in `advance_clock` and the driver's CPU per timer,
//! the time to add N, and the RSS per pending timer once all are added.
//!
//! Timers: the wheel (`SystemTimer` built on the `MockTime`; tasks run on its executor
//! thread) and the `Mutex<BTreeMap>` timer on the same kind of clock (tasks run in its
//! `advance_clock`). Each runs in a child process of its own.
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench mock30
//! TIMINGWHEEL_MOCK30_N=1000000 cargo bench -p timingwheel-benches --bench mock30
//! TIMINGWHEEL_BENCH_QUICK=1 cargo bench ...   # N = 10^5: seconds
//! ```

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::{BTreeTimer, BenchTimer, Rng, SEED, quick, rss_bytes};
use timingwheel::{MockTime, SystemTimer, TimerTask};

const CASE_VAR: &str = "TIMINGWHEEL_MOCK30_CASE";
const MINUTE_MS: i64 = 60_000;

/// A task that counts itself when it runs.
struct Count {
    delay_ms: i64,
    ran: Arc<AtomicUsize>,
}

impl TimerTask for Count {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        self.ran.fetch_add(1, Ordering::Relaxed);
    }
}

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: exact, where
/// `/proc`'s scheduler statistics move only at scheduler ticks).
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec` for the duration of the call, and
    // `CLOCK_THREAD_CPUTIME_ID` is a clock every Linux kernel has. (Bench-only code.)
    #[allow(unsafe_code)]
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime failed");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// What one case measured.
struct Outcome {
    add_s: f64,
    rss_per_timer: f64,
    steps: u64,
    /// Per call, wall and CPU nanoseconds, each sorted.
    wall_ns: Vec<u64>,
    cpu_ns: Vec<u64>,
    driver_cpu_ns: u64,
}

fn run_case<T: BenchTimer>(timer: &T, time: &MockTime, n: usize) -> Outcome {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut rng = Rng::new(SEED);
    let rss0 = rss_bytes();
    let start = Instant::now();
    for _ in 0..n {
        let delay_ms = rng.range(25 * MINUTE_MS, 35 * MINUTE_MS);
        drop(timer.add(Box::new(Count {
            delay_ms,
            ran: Arc::clone(&ran),
        })));
    }
    let add_s = start.elapsed().as_secs_f64();
    let rss_per_timer = (rss_bytes() as f64 - rss0 as f64) / n as f64;
    let limit = (35 * MINUTE_MS + 60_000) as u64;
    let (steps, mut wall_ns, mut cpu_ns, driver_cpu_ns) = std::thread::scope(|s| {
        s.spawn(|| {
            let (mut wall_ns, mut cpu_ns) = (Vec::new(), Vec::new());
            let first_cpu = thread_cpu_ns();
            let mut steps = 0;
            while ran.load(Ordering::Relaxed) < n {
                assert!(steps < limit, "tasks still pending at 36 minutes");
                time.sleep(1);
                steps += 1;
                let before_cpu = thread_cpu_ns();
                let before = Instant::now();
                timer.advance_clock(0);
                wall_ns.push(before.elapsed().as_nanos() as u64);
                cpu_ns.push(thread_cpu_ns() - before_cpu);
            }
            (steps, wall_ns, cpu_ns, thread_cpu_ns() - first_cpu)
        })
        .join()
        .expect("driver")
    });
    wall_ns.sort_unstable();
    cpu_ns.sort_unstable();
    Outcome {
        add_s,
        rss_per_timer,
        steps,
        wall_ns,
        cpu_ns,
        driver_cpu_ns,
    }
}

fn child(kind: &str, n: usize) {
    let time = MockTime::new();
    let outcome = match kind {
        "wheel" => run_case(
            &SystemTimer::builder("mock30").time(time.clone()).build(),
            &time,
            n,
        ),
        "btree" => run_case(&BTreeTimer::on(Arc::new(time.clone())), &time, n),
        other => panic!("unknown kind {other}"),
    };
    let pct = |sorted: &[u64], p: f64| {
        sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64 / 1e6
    };
    let (wall, cpu) = (&outcome.wall_ns, &outcome.cpu_ns);
    let total_wall: u64 = wall.iter().sum();
    println!(
        "{:.3} {:.1} {} {:.3} {:.3} {:.3} {:.3} {:.3} {:.3} {:.0} {:.0}",
        outcome.add_s,
        outcome.rss_per_timer,
        outcome.steps,
        pct(wall, 1.0),
        pct(wall, 0.999),
        pct(wall, 0.99),
        pct(cpu, 1.0),
        pct(cpu, 0.999),
        pct(cpu, 0.99),
        total_wall as f64 / n as f64,
        outcome.driver_cpu_ns as f64 / n as f64,
    );
}

fn main() {
    let n: usize = std::env::var("TIMINGWHEEL_MOCK30_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick() { 100_000 } else { 10_000_000 });
    if let Ok(kind) = std::env::var(CASE_VAR) {
        child(&kind, n);
        return;
    }
    println!(
        "mock30: {n} timers added at once, delays uniform in 30 min ± 5 min, on a MockTime \
         moved 1 ms at a time with advance_clock(0) after each step; per call: wall time \
         (preemption included) and the driver thread's CPU time, in ms"
    );
    println!();
    println!(
        "| timer | add all s | RSS B/timer | steps | max wall | p99.9 wall | p99 wall | max CPU | p99.9 CPU | p99 CPU | advance_clock ns/timer | driver CPU ns/timer |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let exe = std::env::current_exe().expect("own path");
    for kind in ["wheel", "btree"] {
        let out = Command::new(&exe)
            .env(CASE_VAR, kind)
            .output()
            .expect("run a case");
        assert!(out.status.success(), "case {kind} failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let cells: Vec<&str> = text.split_whitespace().collect();
        println!("| {kind} | {} |", cells.join(" | "));
    }
}
