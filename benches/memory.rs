//! Bytes per pending timer at N = 10^6 (a bench binary, not a criterion micro-benchmark).
//!
//! A counting global allocator gives the exact heap bytes the timer holds (requested sizes,
//! so allocator rounding and fragmentation are not in it); RSS growth is printed beside it
//! for comparison (it includes what the allocator rounds up and keeps). The task holds one
//! `u64`. Two figures per timer:
//!
//! - handles dropped: `add`'s return value is dropped at once; bytes = heap growth / N.
//! - handles kept: every handle is kept in a `Vec` of exactly N; bytes = heap growth
//!   (handles' own allocations and the `Vec`'s N × `size_of::<Handle>()` included) / N.
//!
//! A second table is the burst: N timers added (handles kept), then all but 10 cancelled
//! and their handles dropped, nothing else called. It reports how much of the heap and of
//! the RSS that the burst took the timer gives back by itself, after waiting up to 2 s for
//! the figures to settle (this crate frees given-back memory on a background thread).
//!
//! Each case runs in a child process of its own, so RSS figures do not see each other's
//! freed memory. `cargo bench -p timingwheel-benches --bench memory`;
//! `TIMINGWHEEL_BENCH_QUICK=1` for N = 10^5.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use common::{BTreeTimer, BenchTimer, HeapTimer, delays, quick, rss_bytes, task, tokio_runtime};
use timingwheel::SystemTimer;
use tokio_util::time::DelayQueue;

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so it
// upholds `GlobalAlloc`'s contract exactly as `System` does; the counter is only a side
// effect. (Bench-only code: the library itself stays free of `unsafe`.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from `System` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> isize {
    ALLOCATED.load(Ordering::SeqCst)
}

/// Heap and RSS growth per timer while `fill` adds `n` timers, measured while `fill`'s
/// result is still alive.
fn measure<R>(n: usize, fill: impl FnOnce() -> R) -> (f64, f64) {
    let (heap0, rss0) = (allocated(), rss_bytes());
    let kept = fill();
    let (heap1, rss1) = (allocated(), rss_bytes());
    drop(kept);
    (
        (heap1 - heap0) as f64 / n as f64,
        (rss1 as f64 - rss0 as f64) / n as f64,
    )
}

fn run_kind<T: BenchTimer>(make: impl Fn() -> T, n: usize, keep: bool) -> (f64, f64, usize) {
    let delays = delays(n, 1, 30_000);
    let timer = make();
    // Warm the timer up with one timer, so one-off structures are not charged to N.
    let first = timer.add(task(30_000));
    let (heap, rss) = measure(n, || {
        if keep {
            let mut handles = Vec::with_capacity(n);
            handles.extend(delays.iter().map(|&d| timer.add(task(d))));
            Some(handles)
        } else {
            for &d in &delays {
                drop(timer.add(task(d)));
            }
            None
        }
    });
    drop(first);
    (heap, rss, std::mem::size_of::<T::Handle>())
}

/// The burst: heap and RSS taken by `n` timers (handles kept), and the share of each given
/// back once all but 10 are cancelled and their handles dropped.
fn run_burst<T: BenchTimer>(make: impl Fn() -> T, n: usize) -> [f64; 4] {
    let delays = delays(n, 1, 30_000);
    let timer = make();
    let _context = timer.enter();
    let first = timer.add(task(30_000));
    let (heap0, rss0) = (allocated(), rss_bytes());
    let mut handles: Vec<_> = delays.iter().map(|&d| timer.add(task(d))).collect();
    let (heap1, rss1) = (allocated(), rss_bytes());
    for handle in handles.drain(10..) {
        assert!(timer.cancel(&handle));
    }
    handles.shrink_to_fit();
    timer.maintain();
    let (heap2, rss2) = settled();
    let given_back = |peak: f64, before: f64, after: f64| 100.0 * (peak - after) / (peak - before);
    let heap = [heap0 as f64, heap1 as f64, heap2 as f64];
    let rss = [rss0 as f64, rss1 as f64, rss2 as f64];
    drop(handles);
    drop(first);
    [
        (heap[1] - heap[0]) / n as f64,
        given_back(heap[1], heap[0], heap[2]),
        (rss[1] - rss[0]) / n as f64,
        given_back(rss[1], rss[0], rss[2]),
    ]
}

/// Heap and RSS once they settle: after 2 s, or once 5 readings 100 ms apart agree.
fn settled() -> (isize, u64) {
    let mut last = (allocated(), rss_bytes());
    let mut same = 0;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let now = (allocated(), rss_bytes());
        same = if now == last { same + 1 } else { 0 };
        if same == 5 {
            break;
        }
        last = now;
    }
    last
}

fn run_tokio_burst(n: usize) -> [f64; 4] {
    let delays = delays(n, 1, 30_000);
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    let mut queue = DelayQueue::new();
    let (heap0, rss0) = (allocated() as f64, rss_bytes() as f64);
    let mut keys: Vec<_> = delays
        .iter()
        .map(|&d| queue.insert(d as u64, Duration::from_millis(d as u64)))
        .collect();
    let (heap1, rss1) = (allocated() as f64, rss_bytes() as f64);
    for key in keys.drain(10..) {
        queue.remove(&key);
    }
    keys.shrink_to_fit();
    let (heap2, rss2) = settled();
    let (heap2, rss2) = (heap2 as f64, rss2 as f64);
    [
        (heap1 - heap0) / n as f64,
        100.0 * (heap1 - heap2) / (heap1 - heap0),
        (rss1 - rss0) / n as f64,
        100.0 * (rss1 - rss2) / (rss1 - rss0),
    ]
}

fn run_tokio(n: usize, keep: bool) -> (f64, f64, usize) {
    let delays = delays(n, 1, 30_000);
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    let mut queue = DelayQueue::new();
    let first = queue.insert(0u64, Duration::from_secs(30));
    let (heap, rss) = measure(n, || {
        if keep {
            let mut keys = Vec::with_capacity(n);
            keys.extend(
                delays
                    .iter()
                    .map(|&d| queue.insert(d as u64, Duration::from_millis(d as u64))),
            );
            Some(keys)
        } else {
            for &d in &delays {
                queue.insert(d as u64, Duration::from_millis(d as u64));
            }
            None
        }
    });
    queue.remove(&first);
    (heap, rss, std::mem::size_of_val(&first))
}

const KINDS: [&str; 4] = ["wheel", "heap", "btree", "tokio-util"];
const CASE_VAR: &str = "TIMINGWHEEL_MEMORY_CASE";

/// Runs `kind:mode` in a child process and returns the words it printed.
fn case(exe: &std::path::Path, kind: &str, mode: &str) -> Vec<String> {
    let out = Command::new(exe)
        .env(CASE_VAR, format!("{kind}:{mode}"))
        .output()
        .expect("run a case");
    assert!(out.status.success(), "case {kind}:{mode} failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().map(str::to_owned).collect()
}

fn main() {
    let n = if quick() { 100_000 } else { 1_000_000 };
    if let Ok(case) = std::env::var(CASE_VAR) {
        let (kind, keep) = case.split_once(':').expect("kind:keep");
        if keep == "burst" {
            let figures = match kind {
                "wheel" => run_burst(|| SystemTimer::new("memory"), n),
                "heap" => run_burst(HeapTimer::new, n),
                "btree" => run_burst(BTreeTimer::new, n),
                "tokio-util" => run_tokio_burst(n),
                other => panic!("unknown kind {other}"),
            };
            let shown: Vec<String> = figures.iter().map(|f| format!("{f:.1}")).collect();
            println!("{}", shown.join(" "));
            return;
        }
        let keep = keep == "kept";
        let (heap, rss, handle) = match kind {
            "wheel" => run_kind(|| SystemTimer::new("memory"), n, keep),
            "heap" => run_kind(HeapTimer::new, n, keep),
            "btree" => run_kind(BTreeTimer::new, n, keep),
            "tokio-util" => run_tokio(n, keep),
            other => panic!("unknown kind {other}"),
        };
        println!("{heap:.1} {rss:.1} {handle}");
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!("memory: N = {n} pending timers, delays uniform in 1-30,000 ms, task holds one u64");
    println!();
    println!(
        "| timer | heap B/timer, handles dropped | heap B/timer, handles kept | RSS B/timer, dropped | RSS B/timer, kept | size_of handle |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for kind in KINDS {
        let mut cells = Vec::new();
        let mut handle = String::new();
        for keep in ["dropped", "kept"] {
            let fields = case(&exe, kind, keep);
            cells.push((fields[0].clone(), fields[1].clone()));
            handle = fields[2].clone();
        }
        println!(
            "| {kind} | {} | {} | {} | {} | {handle} |",
            cells[0].0, cells[1].0, cells[0].1, cells[1].1
        );
    }
    println!();
    println!(
        "burst: {n} timers added (handles kept), all but 10 cancelled and their handles dropped; \
         share given back by itself within 2 s"
    );
    println!();
    println!(
        "| timer | heap B/timer at peak | heap given back | RSS B/timer at peak | RSS given back |"
    );
    println!("|---|---:|---:|---:|---:|");
    for kind in KINDS {
        let f = case(&exe, kind, "burst");
        println!("| {kind} | {} | {} % | {} | {} % |", f[0], f[1], f[2], f[3]);
    }
}
