//! Criterion benchmark of moving a pending timer to a new delay, at N = 10^3 .. 10^6
//! pending timers: `Timer::reschedule` on `SystemTimer`, against cancel + add of a new task
//! on the same timer, and tokio-util's `DelayQueue::reset`, in the same run.
//!
//! Every case first adds N timers (delays uniform in 1–30,000 ms, fixed seed) and keeps
//! their handles; one iteration moves the next handle (round robin) to the next delay of
//! the table. cancel + add replaces the handle by the new one and allocates the new task,
//! as a caller who cancels and adds again must. Nothing is driven, so nothing expires.
//!
//! After criterion's report, two tables: each side's median over criterion's samples (ns
//! per move) with the ratios, and heap allocations per move, counted by this binary's
//! global allocator on the measuring thread over 100,000 moves after a warm-up.
//!
//! `cargo bench -p timingwheel-benches --bench reschedule`; `TIMINGWHEEL_BENCH_QUICK=1` for
//! N = 10^3 and 10^4 only, in seconds.

// `criterion_group!` generates an undocumented `pub fn`; the tables are printed.
#![allow(missing_docs, clippy::print_stdout)]

mod common;

use std::cell::RefCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

use common::{criterion_config, delays, median, quick, samples, task, tokio_runtime};
use timingwheel::{SystemTimer, Timer, TimerTaskEntry};

use common::counting::{Counting, allocations};

#[global_allocator]
static ALLOCATOR: Counting<std::alloc::System> = Counting(std::alloc::System);

/// Delays cycle through a table of this many entries.
const DELAY_TABLE: usize = 1 << 16;

/// Moves counted for the allocation table.
const COUNTED_MOVES: usize = 100_000;

fn sizes() -> Vec<usize> {
    if quick() {
        vec![1_000, 10_000]
    } else {
        vec![1_000, 10_000, 100_000, 1_000_000]
    }
}

/// A way to move a pending timer, with its N timers.
trait Mover {
    /// Moves timer `i` (of N) to `delay_ms` from now.
    fn move_one(&mut self, i: usize, delay_ms: i64);
}

/// `Timer::reschedule` on a `SystemTimer`.
struct Reschedule {
    timer: SystemTimer,
    handles: Vec<TimerTaskEntry>,
}

impl Mover for Reschedule {
    #[inline]
    fn move_one(&mut self, i: usize, delay_ms: i64) {
        black_box(self.timer.reschedule(&self.handles[i], delay_ms));
    }
}

/// Cancel, then add a new task, on a `SystemTimer`.
struct CancelAdd {
    timer: SystemTimer,
    handles: Vec<TimerTaskEntry>,
}

impl Mover for CancelAdd {
    #[inline]
    fn move_one(&mut self, i: usize, delay_ms: i64) {
        black_box(self.handles[i].cancel());
        self.handles[i] = self.timer.add(task(delay_ms));
    }
}

/// tokio-util's `DelayQueue::reset` (single-threaded, `&mut self`; inside a runtime).
struct TokioReset {
    queue: DelayQueue<u64>,
    keys: Vec<Key>,
}

impl Mover for TokioReset {
    #[inline]
    fn move_one(&mut self, i: usize, delay_ms: i64) {
        self.queue
            .reset(&self.keys[i], Duration::from_millis(delay_ms as u64));
    }
}

fn system_timer(n: usize, delays: &[i64]) -> (SystemTimer, Vec<TimerTaskEntry>) {
    let timer = SystemTimer::new("bench-reschedule");
    let handles = (0..n)
        .map(|i| timer.add(task(delays[i % DELAY_TABLE])))
        .collect();
    (timer, handles)
}

fn tokio_queue(n: usize, delays: &[i64]) -> TokioReset {
    let mut queue = DelayQueue::with_capacity(n);
    let keys = (0..n)
        .map(|i| {
            let delay = delays[i % DELAY_TABLE];
            queue.insert(delay as u64, Duration::from_millis(delay as u64))
        })
        .collect();
    TokioReset { queue, keys }
}

/// Where a mover is in its round robin and in the delay table.
struct Cursor {
    next: usize,
    n: usize,
}

impl Cursor {
    /// Moves `count` timers, the next ones in turn, to the next delays.
    #[inline]
    fn run(&mut self, mover: &mut impl Mover, count: usize, delays: &[i64]) {
        for _ in 0..count {
            let at = self.next;
            mover.move_one(at % self.n, delays[at % DELAY_TABLE]);
            self.next = at + 1;
        }
    }
}

/// Benchmarks `mover` under `name` at N = `n`; returns its samples in ns per move.
fn bench_mover(
    c: &mut Criterion,
    name: &str,
    n: usize,
    mover: &mut impl Mover,
    delays: &[i64],
) -> Vec<f64> {
    let runs = RefCell::new(Vec::new());
    let mut cursor = Cursor { next: n, n };
    let sample_size = if n >= 1_000_000 { 10 } else { samples(20) };
    let mut group = c.benchmark_group("reschedule");
    group.sample_size(sample_size);
    group.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            cursor.run(mover, iters as usize, delays);
            let elapsed = start.elapsed();
            runs.borrow_mut()
                .push(elapsed.as_nanos() as f64 / iters.max(1) as f64);
            elapsed
        })
    });
    group.finish();
    // The last `sample_size` runs are criterion's samples; the ones before, its warm-up.
    let runs = runs.into_inner();
    runs[runs.len().saturating_sub(sample_size)..].to_vec()
}

/// Allocations per move over [`COUNTED_MOVES`] moves, after as many for warm-up.
fn allocations_per_move(mover: &mut impl Mover, n: usize, delays: &[i64]) -> f64 {
    let mut cursor = Cursor { next: 0, n };
    cursor.run(mover, COUNTED_MOVES, delays);
    let before = allocations();
    cursor.run(mover, COUNTED_MOVES, delays);
    (allocations() - before) as f64 / COUNTED_MOVES as f64
}

/// One row of the tables: N, then each side's median ns per move and allocations per move.
struct Row {
    n: usize,
    ns: [Option<f64>; 3],
    allocs: [f64; 3],
}

const SIDES: [&str; 3] = ["reschedule", "cancel + add", "tokio-util reset"];

fn print_tables(rows: &[Row]) {
    let cell = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let ratio = |a: Option<f64>, b: Option<f64>| {
        a.zip(b)
            .map_or("-".to_owned(), |(a, b)| format!("{:.2}x", a / b))
    };
    println!("\nmoving a pending timer, median of criterion's samples, ns per move");
    println!(
        "| pending | {} | {} | {} | reschedule / cancel+add | reschedule / tokio-util |",
        SIDES[0], SIDES[1], SIDES[2]
    );
    println!("|--:|--:|--:|--:|--:|--:|");
    for row in rows {
        let [ours, cancel_add, tokio] = row.ns;
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            row.n,
            cell(ours),
            cell(cancel_add),
            cell(tokio),
            ratio(ours, cancel_add),
            ratio(ours, tokio)
        );
    }
    println!("\nheap allocations per move ({COUNTED_MOVES} moves on the measuring thread)");
    println!("| pending | {} | {} | {} |", SIDES[0], SIDES[1], SIDES[2]);
    println!("|--:|--:|--:|--:|");
    for row in rows {
        let [ours, cancel_add, tokio] = row.allocs;
        println!("| {} | {ours:.2} | {cancel_add:.2} | {tokio:.2} |", row.n);
    }
}

fn benches(c: &mut Criterion) {
    let delays = delays(DELAY_TABLE, 1, 30_000);
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    let mut rows = Vec::new();
    for n in sizes() {
        let (timer, handles) = system_timer(n, &delays);
        let mut ours = Reschedule { timer, handles };
        let ours_ns = bench_mover(c, "wheel_reschedule", n, &mut ours, &delays);
        let ours_allocs = allocations_per_move(&mut ours, n, &delays);
        assert_eq!(ours.timer.size(), n, "every move kept its timer pending");
        drop(ours);

        let (timer, handles) = system_timer(n, &delays);
        let mut cancel_add = CancelAdd { timer, handles };
        let cancel_add_ns = bench_mover(c, "wheel_cancel_add", n, &mut cancel_add, &delays);
        let cancel_add_allocs = allocations_per_move(&mut cancel_add, n, &delays);
        assert_eq!(cancel_add.timer.size(), n);
        drop(cancel_add);

        let mut tokio = tokio_queue(n, &delays);
        let tokio_ns = bench_mover(c, "tokio-util_reset", n, &mut tokio, &delays);
        let tokio_allocs = allocations_per_move(&mut tokio, n, &delays);
        assert_eq!(tokio.queue.len(), n);
        drop(tokio);

        let med = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
        rows.push(Row {
            n,
            ns: [med(ours_ns), med(cancel_add_ns), med(tokio_ns)],
            allocs: [ours_allocs, cancel_add_allocs, tokio_allocs],
        });
    }
    print_tables(&rows);
}

criterion_group! {
    name = group;
    config = criterion_config(20);
    targets = benches
}
criterion_main!(group);
