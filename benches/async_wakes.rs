//! How late async sleeps wake on a busy tokio runtime: this crate's `Sleep` against
//! `tokio::time::sleep`, in the same run (a bench binary that prints a table).
//!
//! 1,000 tasks sleep 10 ms in a loop on a 2-worker multi-thread runtime; each wake's
//! lateness is its resumption minus the sleep's creation plus 10 ms. With the burst, another
//! task spawns 100,000 short tasks every 50 ms (a request fan-out; each does about 0.1 µs of
//! work, `TIMINGWHEEL_WAKES_WORK=steps` to change it), which overflows the spawning worker's
//! local queue into the runtime's global queue, where a wake from outside the runtime waits
//! behind them. (With no work the 2-core machine drains them too fast for that to show;
//! with 300 steps the runtime is overloaded and every kind falls behind.) Each case runs in a child
//! process of its own, the kinds alternating, for a few seconds after a warm-up; the table
//! gives every run's median and p99, and the ratios to tokio's run beside it.
//!
//! The kinds: `tokio` (its own timer, which wakes from a worker thread), `timingwheel` (a
//! `SystemTimerReaper`: the wake comes from the timer's executor thread, foreign to the
//! runtime), and `timingwheel+worker` (the same timer behind a `WorkerTimer`, feature
//! `tokio`: the expired tasks, and so the wakes, run on a worker thread).
//!
//! `cargo bench -p timingwheel-benches --bench async_wakes`; `TIMINGWHEEL_BENCH_QUICK=1` for
//! shorter runs, `TIMINGWHEEL_WAKES_RUNS=n` for n runs of each case (default 3).

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{median, quick};
use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer, WorkerTimer};

/// The environment variable that makes this binary run one case and print its figures.
const CASE_VAR: &str = "TIMINGWHEEL_WAKES_CASE";

const SLEEPERS: usize = 1_000;
const SLEEP: Duration = Duration::from_millis(10);
const BURST_TASKS: usize = 100_000;
const BURST_EVERY: Duration = Duration::from_millis(50);
const WORKERS: usize = 2;
/// Steps of [`short_work`] per burst task.
const BURST_WORK: u64 = 120;

/// The kinds of sleep, as the table names them.
const KINDS: [&str; 3] = ["tokio", "timingwheel", "timingwheel+worker"];

/// Warm-up, then measured time, per case.
fn durations() -> (Duration, Duration) {
    if quick() {
        (Duration::from_millis(300), Duration::from_secs(1))
    } else {
        (Duration::from_millis(500), Duration::from_secs(4))
    }
}

fn runs() -> usize {
    std::env::var("TIMINGWHEEL_WAKES_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Steps of work of each burst task (`TIMINGWHEEL_WAKES_WORK`, default [`BURST_WORK`]).
fn burst_work() -> u64 {
    std::env::var("TIMINGWHEEL_WAKES_WORK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BURST_WORK)
}

/// A burst task's work: `steps` rounds of a multiply-xorshift (about 1 ns each).
fn short_work(seed: usize, steps: u64) {
    let mut x = seed as u64 | 1;
    for _ in 0..steps {
        x = black_box(x.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (x >> 29));
    }
    black_box(x);
}

/// Runs one case in this process: prints `p50_us p99_us samples`.
fn run_case(kind: &str, burst: bool) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (warm_up, measured) = durations();
    let samples = Arc::new(Mutex::new(Vec::with_capacity(SLEEPERS * 500)));
    let stop = Arc::new(AtomicBool::new(false));
    let reaper: Option<Arc<dyn Timer>> = (kind != "tokio").then(|| {
        Arc::new(SystemTimerReaper::new(
            "wakes-reaper",
            SystemTimer::new("wakes"),
        )) as _
    });
    runtime.block_on(async {
        let timer: Option<Arc<dyn Timer>> = match (kind, &reaper) {
            ("timingwheel", Some(reaper)) => Some(Arc::clone(reaper)),
            ("timingwheel+worker", Some(reaper)) => {
                Some(Arc::new(WorkerTimer::new(Arc::clone(reaper))))
            }
            _ => None,
        };
        let started = Instant::now();
        let record_from = started + warm_up;
        let mut tasks = Vec::new();
        for _ in 0..SLEEPERS {
            let (timer, samples, stop) = (timer.clone(), Arc::clone(&samples), Arc::clone(&stop));
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let due = Instant::now() + SLEEP;
                    match &timer {
                        Some(timer) => Sleep::new(Arc::clone(timer), SLEEP).await,
                        None => tokio::time::sleep(SLEEP).await,
                    }
                    let now = Instant::now();
                    if now >= record_from {
                        mine.push(now.saturating_duration_since(due).as_micros() as u64);
                    }
                }
                samples.lock().unwrap().extend(mine);
            }));
        }
        if burst {
            let stop = Arc::clone(&stop);
            let work = burst_work();
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..BURST_TASKS {
                        tokio::spawn(async move {
                            short_work(i, work);
                        });
                    }
                    tokio::time::sleep(BURST_EVERY).await;
                }
            }));
        }
        tokio::time::sleep(warm_up + measured).await;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.expect("a sleeper panicked");
        }
    });
    drop(runtime);
    if let Some(reaper) = reaper {
        reaper.close();
    }
    let mut late = std::mem::take(&mut *samples.lock().unwrap());
    late.sort_unstable();
    let rank = |p: f64| late[((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1];
    println!("{} {} {}", rank(0.50), rank(0.99), late.len());
}

/// Runs a case in a child process; returns (p50 µs, p99 µs).
fn case(exe: &std::path::Path, kind: &str, burst: bool) -> (f64, f64) {
    let out = Command::new(exe)
        .env(
            CASE_VAR,
            format!("{kind}:{}", if burst { "burst" } else { "quiet" }),
        )
        .output()
        .expect("run a case");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "case {kind} failed: {stderr}");
    let figures: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|f| f.parse().expect("a figure"))
        .collect();
    (figures[0], figures[1])
}

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        let (kind, load) = case.split_once(':').expect("kind:load");
        run_case(kind, load == "burst");
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let (warm_up, measured) = durations();
    println!(
        "async wakes: {SLEEPERS} tasks sleeping {SLEEP:?} in a loop on a {WORKERS}-worker tokio runtime, \
         {warm_up:?} warm-up then {measured:?} measured per run; burst: {BURST_TASKS} short tasks spawned every {BURST_EVERY:?}"
    );
    let ms = |us: f64| format!("{:.2} ms", us / 1e3);
    for burst in [true, false] {
        println!(
            "\n{}: lateness of each wake, median and p99, each run with tokio's run beside it",
            if burst {
                "with the burst"
            } else {
                "without the burst"
            }
        );
        println!("| run | kind | median | p99 | median / tokio's | p99 / tokio's |");
        println!("|--:|---|--:|--:|--:|--:|");
        let mut worst = vec![(0.0f64, 0.0f64); KINDS.len()];
        let mut medians = vec![Vec::new(); KINDS.len()];
        for run in 0..runs() {
            // The kinds alternate; each run starts with another one.
            let mut figures = vec![(0.0, 0.0); KINDS.len()];
            for k in 0..KINDS.len() {
                let at = (run + k) % KINDS.len();
                figures[at] = case(&exe, KINDS[at], burst);
            }
            let (tokio_p50, tokio_p99) = figures[0];
            for (k, &(p50, p99)) in figures.iter().enumerate() {
                let (r50, r99) = (p50 / tokio_p50.max(1.0), p99 / tokio_p99.max(1.0));
                println!(
                    "| {run} | {} | {} | {} | {r50:.2}x | {r99:.2}x |",
                    KINDS[k],
                    ms(p50),
                    ms(p99)
                );
                worst[k] = (worst[k].0.max(r50), worst[k].1.max(r99));
                medians[k].push(p50);
            }
        }
        for (k, kind) in KINDS.iter().enumerate().skip(1) {
            println!(
                "{kind}: worst run {:.2}x tokio's median lateness, {:.2}x its p99; median of its medians {}",
                worst[k].0,
                worst[k].1,
                ms(median(medians[k].clone()))
            );
        }
        if burst {
            let (w50, w99) = worst[2];
            println!(
                "goal, with the burst: timingwheel+worker at most 1.5x tokio's median and 1.2x its p99 in every run: {}",
                if w50 <= 1.5 && w99 <= 1.2 {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
}
