//! The bounded hand-off (`SystemTimerBuilder::max_in_flight`): 10^6 timers expiring over
//! 1 s on an executor that spends 10 µs per task, with and without the bound.
//!
//! One thread adds N timers as fast as it can, delays uniform in 1..=1,000 ms (fixed
//! seed); another loops `advance_clock(200)`. The executor has 2 threads (the built-in
//! pool, or a `threadpool::ThreadPool` the bench owns), each task spins 10 µs: 200,000
//! tasks a second at best, so most of the 10^6 wait for the executor. Without the bound they
//! wait on the executor's queue, handed over; with it, in the timer, held.
//!
//! Sampled every 10 ms: the process's RSS, the bytes allocated through the global allocator
//! (a counting wrapper, `common::counting`) plus the timer's own mapped storage
//! (`storage_bytes`), the timer's size, and the tasks in flight (handed over, not finished:
//! the timer's `expired` count read before the tasks' own count of those that finished, so
//! a reading is never above the truth).
//! The figures are each one's peak growth over the moment before the first add. One second
//! after the last add (every task is due), the bench tries to cancel every task of a sample
//! (each 100th) that has not started, and counts how many cancels succeeded. At the end,
//! every task must have run once or been cancelled once (per-task counters), and the
//! timer's `lateness()` is read.
//!
//! Each run is a child process of its own (RSS figures do not see each other's freed
//! memory), and every run's figures are printed; a headline is the worst run.
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench in_flight            # 3 runs of each case
//! TIMINGWHEEL_IN_FLIGHT_RUNS=5 TIMINGWHEEL_IN_FLIGHT_MAX=64 ...    # runs; the bound
//! TIMINGWHEEL_BENCH_QUICK=1 ...                                    # N = 10^5, one run
//! ```

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::counting::{Counting, allocated_bytes};
use common::{Rng, SEED, quick, rss_bytes};
use threadpool::ThreadPool;
use timingwheel::{SystemTimer, Timer, TimerTaskEntry, timer_task};

#[global_allocator]
static ALLOCATOR: Counting<std::alloc::System> = Counting(std::alloc::System);

const CASE_VAR: &str = "TIMINGWHEEL_IN_FLIGHT_CASE";
/// How long each task keeps its executor thread.
const WORK: Duration = Duration::from_micros(10);
/// Threads of the executor.
const EXECUTOR_THREADS: usize = 2;
/// The latest delay: the timers expire over this.
const SPREAD_MS: i64 = 1_000;
/// Every this many-th task is in the sample the bench tries to cancel.
const SAMPLE_EVERY: usize = 100;
/// How often the sampler reads the figures.
const SAMPLE_PERIOD: Duration = Duration::from_millis(10);

/// The cases: executor, bounded or not.
const CASES: [(&str, bool); 4] = [
    ("threads", false),
    ("threads", true),
    ("threadpool", false),
    ("threadpool", true),
];

/// What each task did.
struct Books {
    started: Vec<AtomicBool>,
    runs: Vec<AtomicU8>,
    cancels: Vec<AtomicU8>,
    finished: AtomicU64,
}

/// The peaks the sampler saw.
#[derive(Default)]
struct Peaks {
    rss: AtomicU64,
    bytes: AtomicU64,
    size: AtomicU64,
    in_flight: AtomicU64,
}

fn env_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Spins for [`WORK`]: an executor thread that is busy, not asleep.
fn work() {
    let until = Instant::now() + WORK;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// One run of `executor` with or without the bound; returns its figures as printed words.
fn run_case(executor: &str, bounded: bool, n: usize, max: usize) -> Vec<String> {
    let books = Arc::new(Books {
        started: (0..n).map(|_| AtomicBool::new(false)).collect(),
        runs: (0..n).map(|_| AtomicU8::new(0)).collect(),
        cancels: (0..n).map(|_| AtomicU8::new(0)).collect(),
        finished: AtomicU64::new(0),
    });
    let pool = ThreadPool::new(EXECUTOR_THREADS);
    let mut builder = SystemTimer::builder("in-flight");
    builder = match executor {
        "threads" => builder.executor_threads(EXECUTOR_THREADS),
        _ => builder.threadpool(pool.clone()),
    };
    if bounded {
        builder = builder.max_in_flight(max);
    }
    let timer = builder.build();
    let mut rng = Rng::new(SEED);
    let delays: Vec<i64> = (0..n).map(|_| rng.range(1, SPREAD_MS)).collect();
    let mut sample: Vec<(usize, TimerTaskEntry)> = Vec::with_capacity(n / SAMPLE_EVERY + 1);
    let (rss0, bytes0) = (rss_bytes(), memory_bytes(&timer));
    let peaks = Peaks::default();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let (cancelled, attempted, drained) = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                timer.advance_clock(200);
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // Handed over first, finished second: never above the truth.
                let expired = timer.stats().expired;
                let in_flight = expired.saturating_sub(books.finished.load(Ordering::Relaxed));
                peaks
                    .rss
                    .fetch_max(rss_bytes().saturating_sub(rss0), Ordering::Relaxed);
                let bytes = memory_bytes(&timer).saturating_sub(bytes0);
                peaks.bytes.fetch_max(bytes, Ordering::Relaxed);
                peaks.size.fetch_max(timer.size() as u64, Ordering::Relaxed);
                peaks.in_flight.fetch_max(in_flight, Ordering::Relaxed);
                thread::sleep(SAMPLE_PERIOD);
            }
        });
        for (id, &delay) in delays.iter().enumerate() {
            let books = Arc::clone(&books);
            let entry = timer.add(timer_task(delay, move || {
                books.started[id].store(true, Ordering::Relaxed);
                work();
                books.runs[id].fetch_add(1, Ordering::Relaxed);
                books.finished.fetch_add(1, Ordering::Relaxed);
            }));
            if id % SAMPLE_EVERY == 0 {
                sample.push((id, entry));
            }
        }
        // Every task is due a second after the last add.
        thread::sleep(Duration::from_millis(SPREAD_MS as u64 + 50));
        let (mut cancelled, mut attempted) = (0, 0);
        for (id, entry) in &sample {
            if !books.started[*id].load(Ordering::Relaxed) {
                attempted += 1;
                if entry.cancel() {
                    cancelled += 1;
                    books.cancels[*id].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let settled =
            |books: &Books| books.finished.load(Ordering::Relaxed) as usize + cancelled == n;
        while !settled(&books) {
            thread::sleep(Duration::from_millis(5));
        }
        let drained = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        (cancelled, attempted, drained)
    });
    let lateness = timer.lateness();
    timer.close();
    pool.join();
    let once = (0..n).all(|id| {
        books.runs[id].load(Ordering::Relaxed) + books.cancels[id].load(Ordering::Relaxed) == 1
    });
    let mib = |bytes: u64| format!("{:.1}", bytes as f64 / (1 << 20) as f64);
    let ms = |us: u64| format!("{:.1}", us as f64 / 1e3);
    vec![
        mib(peaks.rss.load(Ordering::Relaxed)),
        mib(peaks.bytes.load(Ordering::Relaxed)),
        peaks.size.load(Ordering::Relaxed).to_string(),
        peaks.in_flight.load(Ordering::Relaxed).to_string(),
        format!("{cancelled}/{attempted}"),
        format!("{:.2}", drained.as_secs_f64()),
        if once { "yes" } else { "NO" }.to_owned(),
        ms(lateness.p50_us),
        ms(lateness.p99_us),
        ms(lateness.max_us),
    ]
}

/// The allocator's count plus the timer's own mapped storage.
fn memory_bytes(timer: &SystemTimer) -> u64 {
    (allocated_bytes().max(0) as u64) + timer.storage_bytes() as u64
}

fn main() {
    let n = if quick() { 100_000 } else { 1_000_000 };
    let max = env_or("TIMINGWHEEL_IN_FLIGHT_MAX", 64);
    if let Ok(case) = std::env::var(CASE_VAR) {
        let (executor, bounded) = case.split_once(':').expect("executor:bounded");
        println!(
            "{}",
            run_case(executor, bounded == "true", n, max).join(" ")
        );
        return;
    }
    let runs = env_or("TIMINGWHEEL_IN_FLIGHT_RUNS", if quick() { 1 } else { 3 });
    let exe = std::env::current_exe().expect("own path");
    println!(
        "in_flight: N = {n} timers, delays uniform in 1-{SPREAD_MS} ms, added as fast as one \
         thread can; an executor of {EXECUTOR_THREADS} threads spinning {WORK:?} per task; \
         the bound: max_in_flight({max})"
    );
    println!();
    println!(
        "| executor | max_in_flight | run | peak RSS growth, MiB | peak bytes (allocator + storage), MiB | peak size | peak in flight | cancels of unstarted tasks that succeeded | drained after, s | each task once | lateness p50 / p99 / max, ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for (executor, bounded) in CASES {
        for run in 1..=runs {
            let out = Command::new(&exe)
                .env(CASE_VAR, format!("{executor}:{bounded}"))
                .output()
                .expect("run a case");
            assert!(out.status.success(), "case failed: {out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let f: Vec<&str> = stdout.split_whitespace().collect();
            println!(
                "| {executor} | {} | {run} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
                if bounded {
                    max.to_string()
                } else {
                    "none".into()
                },
                f[0],
                f[1],
                f[2],
                f[3],
                f[4],
                f[5],
                f[6],
                f[7],
                f[8],
                f[9]
            );
        }
    }
}
