//! Memory: the harness that `memory.rs` (the default allocator)
//! and `memory_mimalloc.rs` (mimalloc as the global allocator) both run.
//!
//! The global allocator is wrapped in `common::counting::Counting`, which keeps the bytes currently
//! allocated (requested sizes: allocator rounding and fragmentation are not in it). A
//! timer's **bytes** are that count's growth plus the storage the wheel maps itself
//! ([`SystemTimer::storage_bytes`]: its slot and ring chunks are `mmap`ed, not allocated);
//! **RSS** is the process's resident growth, what a user sees, allocator rounding and what
//! it keeps included. The task is what users write: a closure that captures an `Arc` of
//! shared state (a 16-byte box). Two tables:
//!
//! - **per timer** at N pending (delays uniform in 1..=30,000 ms, fixed seed): with `add`'s
//!   handle dropped at once, and with every handle kept in a `Vec` of exactly N (counted).
//! - **the burst**: N timers added (handles kept), then all but 10 cancelled and their
//!   handles dropped, nothing else called by the caller (but the binary heap's purge of
//!   cancelled items, which its owner would call). Reported: the share of the
//!   burst's bytes given back within 1 s of the first cancel (goal: >= 95 %), when 95 % was
//!   first reached, and the share of its RSS given back after 1 s and after 3 s (what the
//!   allocator does with the freed memory). Three runs per timer, each printed.
//!
//! Every case runs in a child process of its own, so RSS figures do not see each other's
//! freed memory.
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench memory            # glibc's malloc, N = 10^6
//! cargo bench -p timingwheel-benches --bench memory_mimalloc   # the same on mimalloc
//! TIMINGWHEEL_MEMORY_TRIM=1 ...   # the burst calls glibc's malloc_trim(0) once after the
//!                                 # cancels, as a user who opts in would
//! TIMINGWHEEL_BENCH_QUICK=1 ...                                # N = 10^5, one burst run
//! ```

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::counting::allocated_bytes;
use crate::common::{BTreeTimer, BenchTimer, HeapTimer, TokioTimer, delays, quick, rss_bytes};
use timingwheel::{SystemTimer, TimerTask, timer_task};

/// The timer's bytes as this bench counts them: the allocator's count plus what `timer`
/// maps itself.
fn bytes<T: BenchTimer>(timer: &T) -> f64 {
    (allocated_bytes() + timer.storage_bytes() as isize) as f64
}

/// The users' task: a closure that captures an `Arc` and bumps the counter in it.
fn arc_task(shared: &Arc<AtomicU64>, delay_ms: i64) -> Box<dyn TimerTask> {
    let shared = Arc::clone(shared);
    timer_task(delay_ms, move || {
        shared.fetch_add(1, Ordering::Relaxed);
    })
}

/// Bytes and RSS per timer while `n` timers are pending, handles kept or not, and the size
/// of one handle.
fn per_timer<T: BenchTimer>(timer: T, n: usize, keep: bool) -> [f64; 3] {
    let delays = delays(n, 1, 30_000);
    let shared = Arc::new(AtomicU64::new(0));
    let _context = timer.enter();
    // One timer first, so one-off structures are not charged to N.
    let first = timer.add(arc_task(&shared, 30_000));
    let (bytes0, rss0) = (bytes(&timer), rss_bytes() as f64);
    let mut handles = Vec::with_capacity(if keep { n } else { 0 });
    for &d in &delays {
        let handle = timer.add(arc_task(&shared, d));
        if keep {
            handles.push(handle);
        }
    }
    let (bytes1, rss1) = (bytes(&timer), rss_bytes() as f64);
    drop(handles);
    drop(first);
    [
        (bytes1 - bytes0) / n as f64,
        (rss1 - rss0) / n as f64,
        std::mem::size_of::<T::Handle>() as f64,
    ]
}

/// The burst (see the module docs): bytes per timer at the peak, the share of the burst's
/// bytes given back 1 s after the first cancel, the milliseconds until 95 % was, and the
/// share of its RSS given back after 1 s and after 3 s.
fn burst<T: BenchTimer>(timer: T, n: usize) -> [f64; 5] {
    let delays = delays(n, 1, 30_000);
    let shared = Arc::new(AtomicU64::new(0));
    let _context = timer.enter();
    let first = timer.add(arc_task(&shared, 30_000));
    let (bytes0, rss0) = (bytes(&timer), rss_bytes() as f64);
    let mut handles: Vec<_> = delays
        .iter()
        .map(|&d| timer.add(arc_task(&shared, d)))
        .collect();
    let (bytes1, rss1) = (bytes(&timer), rss_bytes() as f64);
    let share = |peak: f64, before: f64, now: f64| 100.0 * (peak - now) / (peak - before);

    let started = Instant::now();
    for handle in handles.drain(10..) {
        assert!(timer.cancel(&handle));
    }
    handles.shrink_to_fit();
    // The binary heap's purge of cancelled items (the others' `maintain` does nothing).
    // Nothing else is called on the timer: what comes back, comes back by itself.
    timer.maintain();
    if trim() {
        // SAFETY: `malloc_trim` only returns free memory of glibc's heap to the system; it
        // takes no pointers and is safe to call at any time.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
    }
    let mut reached_ms = f64::NAN;
    let mut at_1s = None;
    loop {
        let elapsed = started.elapsed();
        let now = bytes(&timer);
        if reached_ms.is_nan() && share(bytes1, bytes0, now) >= 95.0 {
            reached_ms = elapsed.as_secs_f64() * 1e3;
        }
        if at_1s.is_none() && elapsed >= Duration::from_secs(1) {
            at_1s = Some((
                share(bytes1, bytes0, now),
                share(rss1, rss0, rss_bytes() as f64),
            ));
        }
        if elapsed >= Duration::from_secs(3) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let rss_3s = share(rss1, rss0, rss_bytes() as f64);
    let (bytes_1s, rss_1s) = at_1s.expect("sampled at 1 s");
    assert_eq!(timer.size(), 11, "the burst left 10 timers and the first");
    drop(handles);
    drop(first);
    [
        (bytes1 - bytes0) / n as f64,
        bytes_1s,
        reached_ms,
        rss_1s,
        rss_3s,
    ]
}

/// True when `TIMINGWHEEL_MEMORY_TRIM` asks the burst to call `malloc_trim(0)`.
fn trim() -> bool {
    std::env::var("TIMINGWHEEL_MEMORY_TRIM").is_ok_and(|v| !v.is_empty() && v != "0")
}

const KINDS: [&str; 4] = ["wheel", "heap", "btree", "tokio-util"];
const CASE_VAR: &str = "TIMINGWHEEL_MEMORY_CASE";

/// Runs `case` with the timer `kind`, in this process; returns its figures.
fn run_case(kind: &str, case: &str, n: usize) -> Vec<f64> {
    fn with<T: BenchTimer>(timer: T, case: &str, n: usize) -> Vec<f64> {
        match case {
            "dropped" => per_timer(timer, n, false).to_vec(),
            "kept" => per_timer(timer, n, true).to_vec(),
            "burst" => burst(timer, n).to_vec(),
            other => panic!("unknown case {other}"),
        }
    }
    match kind {
        "wheel" => with(SystemTimer::new("memory"), case, n),
        "heap" => with(HeapTimer::new(), case, n),
        "btree" => with(BTreeTimer::new(), case, n),
        "tokio-util" => with(TokioTimer::new(), case, n),
        other => panic!("unknown timer {other}"),
    }
}

/// Runs `kind:case` in a child process and returns the figures it printed.
fn child(exe: &std::path::Path, kind: &str, case: &str) -> Vec<f64> {
    let out = Command::new(exe)
        .env(CASE_VAR, format!("{kind}:{case}"))
        .output()
        .expect("run a case");
    assert!(out.status.success(), "case {kind}:{case} failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|word| word.parse().expect("a figure"))
        .collect()
}

/// The bench's `main`; `allocator` names the global allocator in the report.
pub(crate) fn main(allocator: &str) {
    let n = if quick() { 100_000 } else { 1_000_000 };
    if let Ok(case) = std::env::var(CASE_VAR) {
        let (kind, case) = case.split_once(':').expect("kind:case");
        let shown: Vec<String> = run_case(kind, case, n)
            .iter()
            .map(|f| format!("{f:.1}"))
            .collect();
        println!("{}", shown.join(" "));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!(
        "memory on {allocator}: N = {n} pending timers, delays uniform in 1-30,000 ms, \
         each task a closure that captures an Arc"
    );
    println!();
    println!(
        "| timer | bytes/timer, handles dropped | bytes/timer, handles kept | RSS/timer, dropped | RSS/timer, kept | size_of handle |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for kind in KINDS {
        let dropped = child(&exe, kind, "dropped");
        let kept = child(&exe, kind, "kept");
        println!(
            "| {kind} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            dropped[0], kept[0], dropped[1], kept[1], kept[2]
        );
    }
    println!();
    println!(
        "burst: {n} timers added (handles kept), all but 10 cancelled and their handles \
         dropped, nothing else called{}; shares of what the burst took, from the first cancel",
        if trim() {
            " but malloc_trim(0) once after the cancels"
        } else {
            ""
        }
    );
    println!();
    println!(
        "| timer | run | bytes/timer at peak | bytes given back, 1 s | 95 % of bytes back after | RSS given back, 1 s | RSS given back, 3 s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let runs = if quick() { 1 } else { 3 };
    for kind in KINDS {
        for run in 1..=runs {
            let f = child(&exe, kind, "burst");
            let reached = if f[2].is_nan() {
                "not within 3 s".to_owned()
            } else {
                format!("{:.0} ms", f[2])
            };
            println!(
                "| {kind} | {run} | {:.1} | {:.1} % | {reached} | {:.1} % | {:.1} % |",
                f[0], f[1], f[3], f[4]
            );
        }
    }
}
