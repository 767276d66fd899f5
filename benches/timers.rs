//! Criterion micro-benchmarks: `add`, `add` + `cancel`, and add + cancel pairs from 1, 2,
//! 4, ... threads up to the machine's hardware threads (in pairs per second), on
//! `SystemTimer` and, in the same run, on a `Mutex<BinaryHeap>` timer, a `Mutex<BTreeMap>`
//! timer and tokio-util's `DelayQueue`.
//!
//! Every case first builds N pending timers (delays uniform in 1–30,000 ms, fixed seed) and
//! keeps them there: the timed operations run in chunks, and between chunks (untimed) the
//! timers a chunk added are cancelled again, so the population stays within a few percent
//! of N. Nothing is driven during the timed part, so nothing expires.
//!
//! `add_parts` splits the wheel's add at 10^6 pending into what can be
//! timed on its own: the clock read `add` makes (an `Instant` against a fixed origin), the
//! task's `Box` (allocated and freed on this thread), one uncontended `parking_lot` mutex
//! lock and unlock (an add takes one: its stripe of the store), `add` of a task boxed
//! beforehand, untimed, and `cancel` alone. What `add` costs beyond the clock and the lock
//! is the store's slot, the wheel's bucket and ring.
//!
//! `cargo bench -p timingwheel-benches --bench timers` for everything; `TIMINGWHEEL_BENCH_QUICK=1` for a reduced
//! set that runs in seconds.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

mod common;
mod peers;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use tokio_util::time::DelayQueue;

use common::{
    BTreeTimer, BenchTimer, HeapTimer, TokioTimer, criterion_config, delays, quick, task,
    thread_counts, tokio_runtime,
};
use timingwheel::SystemTimer;

/// Delays cycle through a table of this many entries.
const DELAY_TABLE: usize = 1 << 16;

fn sizes() -> Vec<usize> {
    if quick() {
        vec![1_000, 10_000]
    } else {
        vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    }
}

/// Operations timed between two untimed upkeep steps.
fn chunk(n: usize) -> usize {
    (n / 10).clamp(100, 10_000)
}

/// A timer of kind `T` with `n` pending timers, and the delay table.
fn populated<T: BenchTimer>(make: impl Fn() -> T, n: usize, delays: &[i64]) -> (T, Vec<T::Handle>) {
    let timer = make();
    let handles = {
        let _context = timer.enter();
        (0..n)
            .map(|i| timer.add(task(delays[i % DELAY_TABLE])))
            .collect()
    };
    (timer, handles)
}

/// `iters` adds in chunks; returns the time spent in the adds only.
fn time_adds<T: BenchTimer>(
    timer: &T,
    iters: u64,
    n: usize,
    delays: &[i64],
    at: &mut usize,
) -> Duration {
    let chunk = chunk(n);
    let mut handles = Vec::with_capacity(chunk);
    let mut left = iters as usize;
    let mut spent = Duration::ZERO;
    while left > 0 {
        let k = left.min(chunk);
        let start = Instant::now();
        for _ in 0..k {
            handles.push(timer.add(task(delays[*at % DELAY_TABLE])));
            *at += 1;
        }
        spent += start.elapsed();
        for handle in handles.drain(..) {
            black_box(timer.cancel(&handle));
        }
        timer.maintain();
        left -= k;
    }
    spent
}

/// `iters` add-then-cancel pairs in chunks.
fn time_add_cancels<T: BenchTimer>(
    timer: &T,
    iters: u64,
    n: usize,
    delays: &[i64],
    at: &mut usize,
) -> Duration {
    let chunk = chunk(n);
    let mut left = iters as usize;
    let mut spent = Duration::ZERO;
    while left > 0 {
        let k = left.min(chunk);
        let start = Instant::now();
        for _ in 0..k {
            let handle = timer.add(task(delays[*at % DELAY_TABLE]));
            black_box(timer.cancel(&handle));
            *at += 1;
        }
        spent += start.elapsed();
        timer.maintain();
        left -= k;
    }
    spent
}

fn bench_kind<T: BenchTimer>(c: &mut Criterion, name: &str, make: impl Fn() -> T, delays: &[i64]) {
    for n in sizes() {
        let (timer, pending) = populated(&make, n, delays);
        let mut at = n;
        let mut group = c.benchmark_group("add");
        if n >= 1_000_000 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
            b.iter_custom(|iters| time_adds(&timer, iters, n, delays, &mut at))
        });
        group.finish();
        let mut group = c.benchmark_group("add_cancel");
        if n >= 1_000_000 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
            b.iter_custom(|iters| time_add_cancels(&timer, iters, n, delays, &mut at))
        });
        group.finish();
        drop(pending);
        drop(timer);
    }
}

fn bench_tokio(c: &mut Criterion, delays: &[i64]) {
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    for n in sizes() {
        let mut queue = DelayQueue::new();
        let pending: Vec<_> = (0..n)
            .map(|i| {
                let delay = delays[i % DELAY_TABLE];
                queue.insert(delay as u64, Duration::from_millis(delay as u64))
            })
            .collect();
        let mut at = n;
        let chunk = chunk(n);
        let mut group = c.benchmark_group("add");
        if n >= 1_000_000 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::new("tokio-util", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let mut keys = Vec::with_capacity(chunk);
                let mut left = iters as usize;
                let mut spent = Duration::ZERO;
                while left > 0 {
                    let k = left.min(chunk);
                    let start = Instant::now();
                    for _ in 0..k {
                        let delay = delays[at % DELAY_TABLE];
                        keys.push(queue.insert(delay as u64, Duration::from_millis(delay as u64)));
                        at += 1;
                    }
                    spent += start.elapsed();
                    for key in keys.drain(..) {
                        black_box(queue.remove(&key));
                    }
                    left -= k;
                }
                spent
            })
        });
        group.finish();
        let mut group = c.benchmark_group("add_cancel");
        if n >= 1_000_000 {
            group.sample_size(10);
        }
        group.bench_with_input(BenchmarkId::new("tokio-util", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let delay = delays[at % DELAY_TABLE];
                    let key = queue.insert(delay as u64, Duration::from_millis(delay as u64));
                    black_box(queue.remove(&key));
                    at += 1;
                }
                start.elapsed()
            })
        });
        group.finish();
        drop(pending);
    }
}

/// Pending population for the threaded case.
const THREADED_N: usize = 100_000;

/// `threads` threads each doing `iters` add + cancel pairs at once, in rounds that start
/// together (a barrier between rounds): each thread adds a chunk of timers, then cancels
/// them. Returns the sum over rounds of the slowest thread's time: the wall time of
/// `threads * iters` pairs.
fn time_threaded_pairs<T: BenchTimer>(
    timer: &T,
    threads: usize,
    iters: u64,
    delays: &[i64],
) -> Duration {
    let chunk = chunk(THREADED_N);
    let rounds = (iters as usize).div_ceil(chunk);
    let barrier = Barrier::new(threads);
    let per_thread: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let _context = timer.enter();
                    let mut at = t * 7919;
                    let mut times = Vec::with_capacity(rounds);
                    let mut handles = Vec::with_capacity(chunk);
                    let mut left = iters as usize;
                    while left > 0 {
                        let k = left.min(chunk);
                        barrier.wait();
                        let start = Instant::now();
                        for _ in 0..k {
                            handles.push(timer.add(task(delays[at % DELAY_TABLE])));
                            at += 1;
                        }
                        for handle in handles.drain(..) {
                            black_box(timer.cancel(&handle));
                        }
                        times.push(start.elapsed());
                        left -= k;
                    }
                    times
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    timer.maintain();
    (0..rounds)
        .map(|r| per_thread.iter().map(|times| times[r]).max().unwrap())
        .sum()
}

fn bench_threaded_kind<T: BenchTimer>(
    c: &mut Criterion,
    name: &str,
    make: impl Fn() -> T,
    delays: &[i64],
) {
    let (timer, pending) = populated(&make, THREADED_N, delays);
    let mut group = c.benchmark_group("add_cancel_threads");
    for threads in thread_counts() {
        // One iteration = one add + cancel pair on each thread: criterion's throughput is
        // in pairs per second.
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
            b.iter_custom(|iters| time_threaded_pairs(&timer, threads, iters, delays))
        });
    }
    group.finish();
    drop(pending);
}

/// Times `iters` of `op` in chunks of `chunk`, with `prepare` (untimed) before each chunk and
/// `finish` (untimed) after it.
fn time_chunked<S>(
    iters: u64,
    chunk: usize,
    mut prepare: impl FnMut(usize) -> S,
    mut op: impl FnMut(&mut S),
    mut finish: impl FnMut(S),
) -> Duration {
    let mut left = iters as usize;
    let mut spent = Duration::ZERO;
    while left > 0 {
        let k = left.min(chunk);
        let mut state = prepare(k);
        let start = Instant::now();
        for _ in 0..k {
            op(&mut state);
        }
        spent += start.elapsed();
        finish(state);
        left -= k;
    }
    spent
}

/// The parts of the wheel's `add` (see the module docs).
fn bench_add_parts(c: &mut Criterion, delays: &[i64]) {
    let n = if quick() { 10_000 } else { 1_000_000 };
    let (timer, pending) = populated(|| SystemTimer::new("bench"), n, delays);
    let chunk = chunk(n);
    let mut at = n;
    let mut group = c.benchmark_group("add_parts");
    let origin = Instant::now();
    group.bench_function("clock", |b| b.iter(|| black_box(origin.elapsed())));
    group.bench_function("box", |b| {
        b.iter(|| drop(black_box(task(black_box(30_000)))));
    });
    let lock = parking_lot::Mutex::new(0u64);
    group.bench_function("mutex", |b| b.iter(|| *black_box(&lock).lock() += 1));
    group.bench_function("add_boxed_before", |b| {
        b.iter_custom(|iters| {
            time_chunked(
                iters,
                chunk,
                |k| {
                    let tasks: Vec<_> = (0..k)
                        .map(|i| task(delays[(at + i) % DELAY_TABLE]))
                        .collect();
                    at += k;
                    (tasks.into_iter(), Vec::with_capacity(k))
                },
                |(tasks, handles)| handles.push(timer.add(tasks.next().expect("one per add"))),
                |(_, handles)| {
                    for handle in handles {
                        black_box(handle.cancel());
                    }
                },
            )
        })
    });
    group.bench_function("cancel", |b| {
        b.iter_custom(|iters| {
            time_chunked(
                iters,
                chunk,
                |k| {
                    let handles: Vec<_> = (0..k)
                        .map(|i| timer.add(task(delays[(at + i) % DELAY_TABLE])))
                        .collect();
                    at += k;
                    (handles, 0)
                },
                |(handles, next)| {
                    black_box(handles[*next].cancel());
                    *next += 1;
                },
                drop,
            )
        })
    });
    group.finish();
    drop(pending);
}

fn benches(c: &mut Criterion) {
    let delays = delays(DELAY_TABLE, 1, 30_000);
    bench_add_parts(c, &delays);
    bench_kind(c, "wheel", || SystemTimer::new("bench"), &delays);
    bench_kind(c, "heap", HeapTimer::new, &delays);
    bench_kind(c, "btree", BTreeTimer::new, &delays);
    bench_tokio(c, &delays);
    bench_threaded_kind(c, "wheel", || SystemTimer::new("bench"), &delays);
    bench_threaded_kind(c, "heap", HeapTimer::new, &delays);
    bench_threaded_kind(c, "btree", BTreeTimer::new, &delays);
    bench_threaded_kind(c, "tokio-util", TokioTimer::new, &delays);
}

criterion_group! {
    name = group;
    config = criterion_config(20);
    targets = benches
}

fn main() {
    if peers::run_requested() {
        return;
    }
    group();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
