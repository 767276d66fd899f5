//! Criterion benchmark of expiries per second through a `SystemTimer`'s one executor
//! thread, two ways, in the same run:
//!
//! - closures: each expired task does its work on the executor thread (`timer_task`);
//! - messages: each expired task sends its id into a `crossbeam-channel` (`send_task`), and
//!   4 worker threads on the one receiver do the same work.
//!
//! The work per expiry is a loop of xorshift rounds: none, a little, or more (its cost on
//! one thread is measured and printed). One iteration is one expiry: the tasks of a sample
//! are added (untimed) due in 1 ms on a `MockTime`, the clock is moved, and the time runs
//! from the first `advance_clock` until the last work item is done. With no work, the
//! messages pay for the channel; with more, the workers share it (on as many cores as the
//! machine has).
//!
//! After criterion's report, one table: each side's median over criterion's samples
//! (expiries per second) and their ratio.
//!
//! `cargo bench -p timingwheel-benches --bench expiry_channel`; `TIMINGWHEEL_BENCH_QUICK=1`
//! for a run in seconds.

// `criterion_group!` generates an undocumented `pub fn`; the table is printed.
#![allow(missing_docs, clippy::print_stdout)]

mod common;

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use common::{criterion_config, median, samples};
use timingwheel::crossbeam_channel::{self, Receiver, Sender};
use timingwheel::{MockTime, SystemTimer, Timer, TimerTask, send_task, timer_task};

/// Worker threads on the one receiver.
const WORKERS: usize = 4;

/// Rounds of work per expiry: none, a little, more.
const WORK_ROUNDS: [u32; 3] = [0, 200, 2_000];

/// The work of one expiry.
#[inline]
fn work(id: u64, rounds: u32) -> u64 {
    let mut x = id | 1;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// Nanoseconds one expiry's work takes on one thread.
fn work_ns(rounds: u32) -> f64 {
    const CALLS: u64 = 20_000;
    let start = Instant::now();
    for id in 0..CALLS {
        black_box(work(black_box(id), rounds));
    }
    start.elapsed().as_nanos() as f64 / CALLS as f64
}

/// Counts the work items done in a sample, and says when the last one is.
struct Finish {
    done: AtomicU64,
    target: AtomicU64,
    last: Sender<()>,
}

impl Finish {
    fn one(&self) {
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.target.load(Ordering::Acquire) {
            let _ = self.last.send(());
        }
    }
}

/// A timer on a mock clock with one executor thread, and the counter of work done.
struct Rig {
    time: MockTime,
    timer: SystemTimer,
    finish: Arc<Finish>,
    last: Receiver<()>,
}

impl Rig {
    fn new() -> Rig {
        let time = MockTime::new();
        let timer = SystemTimer::builder("bench-expiry")
            .time(time.clone())
            .build();
        let (last_tx, last) = crossbeam_channel::unbounded();
        Rig {
            time,
            timer,
            finish: Arc::new(Finish {
                done: AtomicU64::new(0),
                target: AtomicU64::new(0),
                last: last_tx,
            }),
            last,
        }
    }

    /// Adds `iters` tasks made by `task` (untimed), then times their expiry until the last
    /// work item is done.
    fn sample(&self, iters: u64, task: impl Fn(u64) -> Box<dyn TimerTask>) -> Duration {
        if iters == 0 {
            return Duration::ZERO;
        }
        self.finish.done.store(0, Ordering::Release);
        self.finish.target.store(iters, Ordering::Release);
        for id in 0..iters {
            self.timer.add(task(id));
        }
        self.time.sleep(1);
        let start = Instant::now();
        while self.timer.advance_clock(0) {}
        self.last
            .recv_timeout(Duration::from_secs(600))
            .expect("every expiry's work is done");
        start.elapsed()
    }
}

/// Runs the benchmark `name` at `rounds`; returns its samples in expiries per second.
fn bench_side(
    c: &mut Criterion,
    name: &str,
    rounds: u32,
    mut sample: impl FnMut(u64) -> Duration,
) -> Vec<f64> {
    let runs = RefCell::new(Vec::new());
    let mut group = c.benchmark_group("expiry_throughput");
    group.throughput(Throughput::Elements(1));
    group.bench_with_input(BenchmarkId::new(name, rounds), &rounds, |b, _| {
        b.iter_custom(|iters| {
            let elapsed = sample(iters);
            runs.borrow_mut()
                .push(iters as f64 / elapsed.as_secs_f64().max(1e-9));
            elapsed
        })
    });
    group.finish();
    // The last samples are criterion's; the runs before them, its warm-up.
    let runs = runs.into_inner();
    runs[runs.len().saturating_sub(samples(20))..].to_vec()
}

fn benches(c: &mut Criterion) {
    let mut rows = Vec::new();
    for rounds in WORK_ROUNDS {
        let rig = Rig::new();
        let finish = rig.finish.clone();
        let closures = bench_side(c, "closure_on_executor", rounds, |iters| {
            rig.sample(iters, |id| {
                let finish = finish.clone();
                timer_task(1, move || {
                    black_box(work(id, rounds));
                    finish.one();
                })
            })
        });
        rig.timer.close();

        let rig = Rig::new();
        let (tx, rx) = crossbeam_channel::unbounded::<u64>();
        let messages = thread::scope(|s| {
            for _ in 0..WORKERS {
                let (rx, finish) = (rx.clone(), rig.finish.clone());
                s.spawn(move || {
                    for id in rx.iter() {
                        black_box(work(id, rounds));
                        finish.one();
                    }
                });
            }
            let messages = bench_side(c, "send_task_4_workers", rounds, |iters| {
                rig.sample(iters, |id| send_task(1, tx.clone(), id))
            });
            // Ends the workers: the timer's tasks held the only other senders.
            rig.timer.close();
            drop(tx);
            messages
        });
        let med = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
        rows.push((rounds, work_ns(rounds), med(closures), med(messages)));
    }
    println!("\nexpiries per second through one executor thread, median of criterion's samples");
    println!(
        "| work per expiry | closures on the executor | send_task + {WORKERS} workers | ratio |"
    );
    println!("|--:|--:|--:|--:|");
    let millions = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.2} M/s", v / 1e6));
    for (rounds, ns, closures, messages) in rows {
        let ratio = messages
            .zip(closures)
            .map_or("-".to_owned(), |(m, c)| format!("{:.2}x", m / c));
        println!(
            "| {rounds} rounds ({ns:.0} ns) | {} | {} | {ratio} |",
            millions(closures),
            millions(messages)
        );
    }
}

criterion_group! {
    name = group;
    config = criterion_config(20);
    targets = benches
}
criterion_main!(group);
