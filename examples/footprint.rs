//! What a `SystemTimer` costs in memory before it holds much: the process's resident memory
//! (`VmRSS` of `/proc/self/status`, Linux) and the timers' `storage_bytes()`, per timer, for
//! empty timers, after one add each, and after one add each from 32 threads.
//!
//! ```text
//! cargo run --release --example footprint
//! ```

// This example reports by printing.
#![allow(clippy::print_stdout)]

use std::thread;

use timingwheel::{SystemTimer, Timer, timer_task};

/// Timers measured together, so that one timer's share is not lost in the noise.
const TIMERS: usize = 100;
/// Threads that add to every timer in the last step: each adds through a shard of its own.
const THREADS: usize = 32;

/// The process's resident memory in KiB, where there is a `/proc` (Linux).
fn rss_kib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn report(step: &str, before_kib: Option<i64>, timers: &[SystemTimer]) {
    let storage: usize = timers.iter().map(SystemTimer::storage_bytes).sum();
    let rss = rss_kib()
        .zip(before_kib)
        .map_or("n/a".to_owned(), |(now, before)| {
            format!("{:.1} KiB", (now - before) as f64 / TIMERS as f64)
        });
    println!(
        "{step:<38} RSS {rss:>10} per timer, storage_bytes {:>6.1} KiB per timer",
        storage as f64 / 1024.0 / TIMERS as f64
    );
}

fn main() {
    let cores = thread::available_parallelism().map_or(1, usize::from);
    println!("{TIMERS} timers, {cores} hardware threads; growth since the start:");
    let start_kib = rss_kib();
    let timers: Vec<SystemTimer> = (0..TIMERS)
        .map(|i| SystemTimer::new(&format!("footprint-{i}")))
        .collect();
    report("empty", start_kib, &timers);
    for timer in &timers {
        timer.add(timer_task(60_000, || {}));
    }
    report("after one add each", start_kib, &timers);
    thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for timer in &timers {
                    timer.add(timer_task(60_000, || {}));
                }
            });
        }
    });
    report("after one add each from 32 threads", start_kib, &timers);
}
