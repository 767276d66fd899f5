//! What a call of `SystemTimer::next_expiration_ms` costs: it locks each shard once and
//! reads the entries of the earliest lists (see its docs), so the figure depends on how
//! many entries those lists hold.
//!
//! Cases, each on a `MockTime` (so nothing expires while the bench calls), from one adding
//! thread (one shard holds the entries; the others are locked and found empty):
//!
//! - `uniform N`: N timers, delays uniform in 1..=30,000 ms: the earliest list is a 1 ms
//!   bucket of the lowest level, N / 30,000 entries;
//! - `far N`: N timers, delays uniform in 3,600,000..=3,600,999 ms: the earliest list is one
//!   coarse bucket holding all N;
//! - `held N`: N tasks held back by `max_in_flight(1)` (due, waiting for a busy executor),
//!   all of which are read, and 10^5 pending ones besides.
//!
//! ns per call: the median of 7 runs of as many calls as fit in about 50 ms, every run
//! printed. Adds and cancels pay nothing for it: nothing on their path changed.
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench next_expiration
//! ```

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Rng, SEED, median, quick};
use timingwheel::{MockTime, SystemTimer, Timer, timer_task};

/// Runs per case.
const RUNS: usize = 7;
/// About how long each run calls for.
const RUN: Duration = Duration::from_millis(50);

/// A timer on a fresh `MockTime` holding `n` timers with delays in `lo..=hi` ms.
fn with_delays(n: usize, lo: i64, hi: i64) -> SystemTimer {
    let timer = SystemTimer::builder("next").time(MockTime::new()).build();
    let mut rng = Rng::new(SEED);
    for _ in 0..n {
        timer.add(timer_task(rng.range(lo, hi), || {}));
    }
    timer
}

/// Nanoseconds per call of `next_expiration_ms` on `timer`, every run.
fn time_calls(timer: &SystemTimer) -> Vec<f64> {
    let expected = timer.next_expiration_ms();
    assert!(expected.is_some());
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < RUN {
                for _ in 0..16 {
                    assert_eq!(std::hint::black_box(timer.next_expiration_ms()), expected);
                }
                calls += 16;
            }
            start.elapsed().as_nanos() as f64 / calls as f64
        })
        .collect()
}

/// `n` tasks held by a timer whose executor is busy with a task that waits for the
/// returned sender to go, and 10^5 pending ones.
fn held(n: usize) -> (SystemTimer, mpsc::Sender<()>) {
    let time = MockTime::new();
    let timer = SystemTimer::builder("next-held")
        .time(time.clone())
        .max_in_flight(1)
        .build();
    let (release, wait) = mpsc::channel::<()>();
    timer.add(timer_task(0, move || {
        let _ = wait.recv();
    }));
    for _ in 0..n {
        timer.add(timer_task(1, || {}));
    }
    let mut rng = Rng::new(SEED);
    for _ in 0..100_000 {
        timer.add(timer_task(rng.range(10, 30_000), || {}));
    }
    time.sleep(1);
    while timer.advance_clock(0) {}
    (timer, release)
}

fn main() {
    let sizes: &[usize] = if quick() {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    println!("next_expiration_ms: ns per call, {RUNS} runs each (median first)");
    println!();
    println!("| case | entries read per call | median ns | every run |");
    println!("|---|---:|---:|---|");
    let row = |case: String, read: usize, figures: Vec<f64>| {
        let all: Vec<String> = figures.iter().map(|f| format!("{f:.0}")).collect();
        println!(
            "| {case} | {read} | {:.0} | {} |",
            median(figures.clone()),
            all.join(", ")
        );
    };
    for &n in sizes {
        let timer = with_delays(n, 1, 30_000);
        row(
            format!("uniform {n}"),
            n.div_ceil(30_000),
            time_calls(&timer),
        );
    }
    for &n in sizes {
        let timer = with_delays(n, 3_600_000, 3_600_999);
        row(format!("far {n}"), n, time_calls(&timer));
    }
    for &n in &[1_000, 10_000] {
        let (timer, release) = held(n);
        row(format!("held {n}"), n, time_calls(&timer));
        drop(release);
        timer.close();
    }
}
