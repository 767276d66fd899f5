//! The workloads that count the allocator's bytes, in a binary of their own: its global
//! allocator counts every allocation (`tests/common/counting_alloc.rs`), at the cost of an
//! atomic add per call that the timed workloads of `wheel.rs` must not pay.
//!
//! `cargo bench -p timingwheel-benches --bench memory -- WORKLOAD [key=value ...]`; with no
//! workload, the list. `TIMINGWHEEL_BENCH_QUICK=1`: reduced sizes, in seconds.

#![allow(clippy::print_stdout)]

mod baselines;
mod harness;

// Formatted with the tests, its home.
#[path = "../tests/common/counting_alloc.rs"]
mod counting;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};
use std::thread;
use std::time::{Duration, Instant};

use baselines::{BTreeTimer, HeapTimer, TokioTimer, task, tokio_runtime};
use counting::{Counting, allocated_bytes, allocations as calls};
use harness::{case, delays, in_child, names, param, report, rss_bytes, runs_table, table};
use threadpool::ThreadPool;
use timingwheel::{SystemTimer, Timer, TimerTask, TimerTaskEntry, timer_task};

#[global_allocator]
static ALLOCATOR: Counting<std::alloc::System> = Counting(std::alloc::System);

fn main() {
    harness::main(&[
        ("memory", memory),           // bytes and RSS per timer; a burst cancelled to 10
        ("in_flight", in_flight),     // 10^6 timers on a slow executor, with max_in_flight
        ("allocations", allocations), // heap allocations per reschedule, cancel + add, reset
    ]);
}

/// A timer's bytes as `memory` counts them: the allocator's count plus what it maps itself.
fn bytes<T: baselines::BenchTimer>(timer: &T) -> f64 {
    (allocated_bytes() + timer.storage_bytes() as isize) as f64
}

/// The users' task: a closure that captures an `Arc` and bumps the counter in it.
fn arc_task(shared: &Arc<AtomicU64>, delay_ms: i64) -> Box<dyn TimerTask> {
    let shared = Arc::clone(shared);
    timer_task(delay_ms, move || _ = shared.fetch_add(1, Relaxed))
}

/// One `memory` case of `timer` at `n` pending: per timer (`dropped`, `kept`: bytes and RSS
/// per timer, the handle's size) or `burst` (bytes per timer at the peak, the share of the
/// burst's bytes given back 1 s after the first cancel, the ms until 95 % was, the share of
/// its RSS given back after 1 s and after 3 s).
fn memory_case<T: baselines::BenchTimer>(timer: T, case: &str, n: usize) -> Vec<f64> {
    let shared = Arc::new(AtomicU64::new(0));
    let _context = timer.enter();
    // One timer first, so one-off structures are not charged to N.
    let first = timer.add(arc_task(&shared, 30_000));
    let (bytes0, rss0) = (bytes(&timer), rss_bytes() as f64);
    let mut handles = Vec::with_capacity(if case == "dropped" { 0 } else { n });
    for d in delays(n, 1, 30_000) {
        let handle = timer.add(arc_task(&shared, d));
        if case != "dropped" {
            handles.push(handle);
        }
    }
    let (bytes1, rss1) = (bytes(&timer), rss_bytes() as f64);
    let per_timer = (bytes1 - bytes0) / n as f64;
    if case != "burst" {
        let handle = std::mem::size_of::<T::Handle>() as f64;
        return vec![per_timer, (rss1 - rss0) / n as f64, handle];
    }
    let share = |peak: f64, before: f64, now: f64| 100.0 * (peak - now) / (peak - before);
    let started = Instant::now();
    for handle in handles.drain(10..) {
        assert!(timer.cancel(&handle));
    }
    handles.shrink_to_fit();
    // The binary heap's purge of cancelled items; nothing else is called on the timer.
    timer.maintain();
    if param("trim", 0, 0) == 1 {
        // SAFETY: `malloc_trim` only returns free memory of glibc's heap to the system; it
        // takes no pointers and is safe to call at any time.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
    }
    let (mut reached_ms, mut at_1s) = (f64::NAN, None);
    while started.elapsed() < Duration::from_secs(3) {
        let (elapsed, now) = (started.elapsed(), bytes(&timer));
        if reached_ms.is_nan() && share(bytes1, bytes0, now) >= 95.0 {
            reached_ms = elapsed.as_secs_f64() * 1e3;
        }
        if at_1s.is_none() && elapsed >= Duration::from_secs(1) {
            let rss = share(rss1, rss0, rss_bytes() as f64);
            at_1s = Some((share(bytes1, bytes0, now), rss));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let (bytes_1s, rss_1s) = at_1s.expect("sampled at 1 s");
    assert_eq!(timer.size(), 11, "the burst left 10 timers and the first");
    drop((handles, first));
    let rss_3s = share(rss1, rss0, rss_bytes() as f64);
    vec![per_timer, bytes_1s, reached_ms, rss_1s, rss_3s]
}

/// Memory: N (10^6) pending timers, delays 1-30,000 ms, each task a closure that captures an
/// `Arc`. *Bytes*: the allocator's count (requested sizes) plus the storage the wheel maps
/// itself (`storage_bytes`); *RSS*: the process's resident growth. Per timer with `add`'s
/// handle dropped at once, and with every handle kept in a `Vec` of exactly N (counted).
/// The burst: N added (handles kept), all but 10 cancelled and their handles dropped, nothing
/// else called (`trim=1`: one `malloc_trim(0)` after the cancels, as a user may); shares of
/// what the burst took, given back. Every case a process of its own.
fn memory() {
    let n = param("n", 1_000_000, 100_000);
    if let Some(case) = case() {
        let (kind, case) = case.split_once(':').expect("kind:case");
        return report(&match kind {
            "wheel" => memory_case(SystemTimer::new("memory"), case, n),
            "heap" => memory_case(HeapTimer::new(), case, n),
            "btree" => memory_case(BTreeTimer::new(), case, n),
            _ => memory_case(TokioTimer::new(), case, n),
        });
    }
    let sides = ["wheel", "heap", "btree", "tokio-util"];
    println!("N = {n}\n");
    let child = |kind: &str, case: &str| in_child(&format!("{kind}:{case}"));
    let per_timer = sides.map(|kind| {
        let (dropped, kept) = (child(kind, "dropped"), child(kind, "kept"));
        vec![dropped[0], kept[0], dropped[1], kept[1], kept[2]]
    });
    let columns = "bytes/timer, handles dropped | bytes/timer, handles kept \
        | RSS/timer, dropped | RSS/timer, kept | size_of handle";
    runs_table(columns, &sides, &[per_timer.to_vec()], &[1, 3]);
    println!("\nthe burst, every run\n");
    let burst = || sides.map(|kind| child(kind, "burst")).to_vec();
    let bursts: Vec<_> = (0..param("runs", 3, 1)).map(|_| burst()).collect();
    let columns = "bytes/timer at peak | % of bytes back, 1 s \
        | 95 % of bytes back after, ms | % of RSS back, 1 s | % of RSS back, 3 s";
    runs_table(columns, &sides, &bursts, &[1, 3]);
}

/// What each `in_flight` task did: started, ran (count), cancelled (count); tasks finished.
struct Books(Vec<AtomicBool>, Vec<AtomicU8>, Vec<AtomicU8>, AtomicU64);

/// One `in_flight` run (`executor` is `threads` or `threadpool`; `bound` 0 for none): the
/// peaks, the cancels, the drain time, whether each task ran or was cancelled once, and the
/// timer's lateness.
fn in_flight_run(executor: &str, bound: usize, n: usize) -> Vec<f64> {
    let counts = || (0..n).map(|_| AtomicU8::new(0)).collect();
    let started = (0..n).map(|_| AtomicBool::new(false)).collect();
    let books = Arc::new(Books(started, counts(), counts(), AtomicU64::new(0)));
    let (pool, mut builder) = (ThreadPool::new(2), SystemTimer::builder("in-flight"));
    builder = match executor {
        "threads" => builder.executor_threads(2),
        _ => builder.threadpool(pool.clone()),
    };
    if bound > 0 {
        builder = builder.max_in_flight(bound);
    }
    let timer = builder.build();
    let mut sample: Vec<(usize, TimerTaskEntry)> = Vec::with_capacity(n / 100 + 1);
    let (rss0, bytes0) = (rss_bytes(), bytes(&timer));
    let (peaks, stop): ([AtomicU64; 4], _) = (Default::default(), AtomicBool::new(false));
    let (delays, start) = (delays(n, 1, 1_000), Instant::now());
    let (cancelled, attempted, drained) = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Relaxed) {
                timer.advance_clock(200);
            }
        });
        s.spawn(|| {
            while !stop.load(Relaxed) {
                // Handed over first, finished second: never above the truth.
                let in_flight = timer.stats().expired.saturating_sub(books.3.load(Relaxed));
                let memory = (bytes(&timer) - bytes0).max(0.0) as u64;
                let rss = rss_bytes().saturating_sub(rss0);
                let now = [rss, memory, timer.size() as u64, in_flight];
                for (peak, now) in peaks.iter().zip(now) {
                    peak.fetch_max(now, Relaxed);
                }
                thread::sleep(Duration::from_millis(10));
            }
        });
        for (id, delay) in delays.into_iter().enumerate() {
            let books = Arc::clone(&books);
            let entry = timer.add(timer_task(delay, move || {
                books.0[id].store(true, Relaxed);
                // Keeps its executor thread busy for 10 µs.
                let until = Instant::now() + Duration::from_micros(10);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                books.1[id].fetch_add(1, Relaxed);
                books.3.fetch_add(1, Relaxed);
            }));
            if id % 100 == 0 {
                sample.push((id, entry));
            }
        }
        // Every task is due a second after the last add.
        thread::sleep(Duration::from_millis(1_050));
        let (mut cancelled, mut attempted) = (0, 0);
        for (id, entry) in sample.iter().filter(|(id, _)| !books.0[*id].load(Relaxed)) {
            attempted += 1;
            if entry.cancel() {
                cancelled += 1;
                books.2[*id].fetch_add(1, Relaxed);
            }
        }
        while books.3.load(Relaxed) as usize + cancelled < n {
            thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Relaxed);
        (cancelled, attempted, start.elapsed())
    });
    let lateness = timer.lateness();
    timer.close();
    pool.join();
    let once = (0..n).all(|id| books.1[id].load(Relaxed) + books.2[id].load(Relaxed) == 1);
    let [rss, bytes, size, in_flight] = peaks.map(|peak| peak.load(Relaxed) as f64);
    let (mib, ms) = (|b: f64| b / (1 << 20) as f64, |us: u64| us as f64 / 1e3);
    let once = f64::from(u8::from(once));
    let mut figures = vec![mib(rss), mib(bytes), size, in_flight, cancelled as f64];
    figures.extend([attempted as f64, drained.as_secs_f64(), once]);
    figures.extend([lateness.p50_us, lateness.p99_us, lateness.max_us].map(ms));
    figures
}

/// The bounded hand-off (`max_in_flight`): one thread adds N (10^6) timers as fast as it can,
/// delays uniform in 1-1,000 ms; another loops `advance_clock(200)`; an executor of 2
/// threads (the built-in pool, or a `threadpool::ThreadPool`) spins 10 µs per task, so most
/// wait for it: unbounded on its queue, bounded (`bound=`, 64) in the timer. Sampled every
/// 10 ms: peak growths of RSS and of bytes (the allocator's count + the timer's storage),
/// the timer's size, the tasks in flight. 1 s after the last add, every 100th task not yet
/// started is cancelled. Every run a process of its own.
fn in_flight() {
    let (n, bound) = (param("n", 1_000_000, 100_000), param("bound", 64, 64));
    if let Some(case) = case() {
        let (executor, bounded) = case.split_once(':').expect("executor:bounded");
        let bound = if bounded == "bounded" { bound } else { 0 };
        return report(&in_flight_run(executor, bound, n));
    }
    let cases =
        names("threads:bounded | threads:unbounded | threadpool:bounded | threadpool:unbounded");
    let run = |_| cases.iter().map(|case| in_child(case)).collect();
    let figures: Vec<Vec<Vec<f64>>> = (0..param("runs", 3, 1)).map(run).collect();
    println!("N = {n}; bounded: max_in_flight({bound}); each task once: 1 for yes\n");
    let columns = "peak RSS growth MiB | peak bytes MiB | peak size | peak in flight \
        | cancels that succeeded | cancels tried | drained after s | each task once \
        | lateness p50 ms | p99 ms | max ms";
    runs_table(columns, &cases, &figures, &[0, 1]);
}

/// Heap allocations per call, on the calling thread, at N (10^5) pending (delays 1-30,000
/// ms), each timer moved once, after a pass of warm-up: `Timer::reschedule`, cancel + add of
/// a new task, tokio-util's `reset`.
fn allocations() {
    let n = param("n", 100_000, 10_000);
    let delays = delays(n, 1, 30_000);
    let per_call = |f: &mut dyn FnMut(usize)| {
        (0..n).for_each(&mut *f);
        let before = calls();
        (0..n).for_each(f);
        (calls() - before) as f64 / n as f64
    };
    let wheel = SystemTimer::new("allocations");
    let mut handles: Vec<_> = delays.iter().map(|&delay| wheel.add(task(delay))).collect();
    let reschedule = per_call(&mut |i| _ = wheel.reschedule(&handles[i], delays[n - 1 - i]));
    let cancel_add = per_call(&mut |i| {
        handles[i].cancel();
        handles[i] = wheel.add(task(delays[i]));
    });
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    let mut queue = tokio_util::time::DelayQueue::with_capacity(n);
    let ms = |delay: i64| Duration::from_millis(delay as u64);
    let keys: Vec<_> = delays.iter().map(|&d| queue.insert(d, ms(d))).collect();
    let reset = per_call(&mut |i| queue.reset(&keys[i], ms(delays[n - 1 - i])));
    let sides = ["reschedule", "cancel + add", "tokio-util reset"];
    let figures = [vec![reschedule, cancel_add, reset]];
    let title = format!("N = {n}: allocations per call");
    table(&title, &sides, &figures, false);
}
