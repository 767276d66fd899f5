//! What each place to run expiries costs per task, against the built-in pool: the built-in
//! pool of 1 and 2 threads (`executor_threads`), a `threadpool::ThreadPool` of 1 and 2
//! threads (`threadpool`), an inline executor (`executor(|job| job())`), and the built-in
//! pool of one thread with a bound (`max_in_flight(64)`).
//!
//! One thread adds N tasks that do nothing but count themselves, all due 20 ms out (so one
//! list, flushed a chunk of 64 at a time), then drives the timer until every task ran. The
//! figure is the time from the first flush to the last task's end, per task: the flush,
//! the hand-over and the run, with the lateness each task's start is counted at. Cases
//! alternate, each run is printed, and the median and the ratio to the built-in pool of
//! one thread in the same run are given.
//!
//! For counting instructions instead (stable on a noisy machine), run one case under
//! callgrind; the figure to compare is the total instructions over N, less the same for
//! the built-in pool:
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench executors                      # 7 runs
//! TIMINGWHEEL_EXECUTORS_CASE=threadpool-1 TIMINGWHEEL_EXECUTORS_N=100000 \
//!   valgrind --tool=callgrind target/release/deps/executors-*              # one case
//! ```

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{median, quick};
use threadpool::ThreadPool;
use timingwheel::{SystemTimer, Timer, timer_task};

const CASE_VAR: &str = "TIMINGWHEEL_EXECUTORS_CASE";
/// When the tasks are due, from their adds.
const DELAY_MS: i64 = 20;

/// The cases, the built-in pool of one thread (Kafka's) first: the others' ratios are to it.
const CASES: [&str; 6] = [
    "threads-1",
    "threads-2",
    "threadpool-1",
    "threadpool-2",
    "inline",
    "threads-1-bounded",
];

fn env_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A timer that runs its tasks where `case` says, and the pool it uses, if any.
fn timer(case: &str) -> (SystemTimer, Option<ThreadPool>) {
    let builder = SystemTimer::builder("executors");
    let pool = |threads| ThreadPool::new(threads);
    match case {
        "threads-1" => (builder.build(), None),
        "threads-2" => (builder.executor_threads(2).build(), None),
        "threadpool-1" | "threadpool-2" => {
            let pool = pool(if case == "threadpool-1" { 1 } else { 2 });
            (builder.threadpool(pool.clone()).build(), Some(pool))
        }
        "inline" => (builder.executor(|job| job()).build(), None),
        "threads-1-bounded" => (builder.max_in_flight(64).build(), None),
        other => panic!("unknown case {other:?}"),
    }
}

/// Runs `n` tasks through `case`'s executor; returns nanoseconds per task from the first
/// flush to the last task's end.
fn run_case(case: &str, n: usize) -> f64 {
    let (timer, pool) = timer(case);
    let ran = Arc::new(AtomicU64::new(0));
    let added = Instant::now();
    for _ in 0..n {
        let ran = Arc::clone(&ran);
        timer.add(timer_task(DELAY_MS, move || {
            ran.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // From the moment the tasks are due (the adds take less than their delay at these N).
    let due = added + Duration::from_millis(DELAY_MS as u64 + 1);
    if let Some(wait) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    let start = Instant::now();
    while ran.load(Ordering::Acquire) < n as u64 {
        timer.advance_clock(1);
    }
    let took = start.elapsed();
    timer.close();
    if let Some(pool) = pool {
        pool.join();
    }
    took.as_nanos() as f64 / n as f64
}

fn main() {
    let n = env_or(
        "TIMINGWHEEL_EXECUTORS_N",
        if quick() { 10_000 } else { 200_000 },
    );
    if let Ok(case) = std::env::var(CASE_VAR) {
        println!("{case}: {:.1} ns per task", run_case(&case, n));
        return;
    }
    let runs = env_or("TIMINGWHEEL_EXECUTORS_RUNS", if quick() { 1 } else { 7 });
    println!(
        "executors: N = {n} tasks due together, flushed and run; ns per task, from the first \
         flush to the last task's end; {runs} runs, cases alternating"
    );
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
    for _ in 0..runs {
        for (at, case) in CASES.iter().enumerate() {
            figures[at].push(run_case(case, n));
        }
    }
    println!();
    println!("| executor | every run, ns/task | median | median ratio to threads-1 (same runs) |");
    println!("|---|---|---:|---:|");
    let ratios = |at: usize| -> Vec<f64> {
        figures[at]
            .iter()
            .zip(&figures[0])
            .map(|(figure, base)| figure / base)
            .collect()
    };
    for (at, case) in CASES.iter().enumerate() {
        let all: Vec<String> = figures[at].iter().map(|f| format!("{f:.0}")).collect();
        println!(
            "| {case} | {} | {:.0} | {:.2} |",
            all.join(", "),
            median(figures[at].clone()),
            median(ratios(at))
        );
    }
}
