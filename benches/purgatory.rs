//! Criterion benchmark of the purgatory: throughput of `try_complete_else_watch` +
//! `check_and_complete` at 1, 2, 4, ... threads up to the machine's hardware threads,
//! against a plain `Mutex<HashMap<K, Vec<_>>>` purgatory written here,
//! in the same run.
//!
//! One element is one produce-like operation: watched under two keys (not completable
//! yet), acknowledged, then completed by `check_and_complete` of its first key. Its
//! second key is the next operation's first, so the completed entry left there is dropped
//! by the next check and the lists stay short. Both purgatories give every operation a
//! 30 s timeout on a `SystemTimer` driven by a reaper thread, and cancel it on completion:
//! the same timer work on both sides. Each thread uses its own 512 keys. Both hash keys
//! with std's SipHash in their maps; the crate's purgatory also picks a shard by a cheaper
//! hash, takes each operation's lock around its check, and runs no user code under a
//! shard lock, where the baseline checks operations under its one mutex.
//!
//! After criterion's own report, one table: each side's median over criterion's samples
//! (operations per second, all threads together) and the ratio of the two, per thread
//! count.
//!
//! `cargo bench -p timingwheel-benches --bench purgatory`; `TIMINGWHEEL_BENCH_QUICK=1` for a run in seconds.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

use common::{criterion_config, median, samples, thread_counts};
use timingwheel::{
    Delayed, DelayedOperation, DelayedOperationPurgatory, SystemTimer, SystemTimerReaper, Timer,
    TimerTaskEntry, timer_task,
};

/// Keys each thread cycles through.
const KEYS_PER_THREAD: u64 = 512;
/// Every operation's timeout: far beyond the run, so that completion always cancels it.
const TIMEOUT_MS: i64 = 30_000;

/// What the benchmark does with a purgatory.
trait BenchPurgatory: Sync {
    type Op;
    /// A new operation, not completable yet.
    fn operation(&self) -> Self::Op;
    /// Watches `op` under `keys` (with its timeout); true if it completed at once.
    fn try_complete_else_watch(&self, op: &Self::Op, keys: &[u64]) -> bool;
    /// Makes `op` completable.
    fn acknowledge(op: &Self::Op);
    /// Completes what it can under `key`; returns how many.
    fn check_and_complete(&self, key: u64) -> usize;
}

/// The crate's purgatory.
struct Produce {
    acked: AtomicBool,
}

impl DelayedOperation for Produce {
    fn delay_ms(&self) -> i64 {
        TIMEOUT_MS
    }
    fn try_complete(&self) -> bool {
        self.acked.load(Ordering::Acquire)
    }
    fn on_complete(&self) {
        black_box(self);
    }
    fn on_expiration(&self) {}
}

impl BenchPurgatory for DelayedOperationPurgatory<u64, Produce> {
    type Op = Delayed<Produce>;
    fn operation(&self) -> Delayed<Produce> {
        Delayed::new(Produce {
            acked: AtomicBool::new(false),
        })
    }
    fn try_complete_else_watch(&self, op: &Delayed<Produce>, keys: &[u64]) -> bool {
        DelayedOperationPurgatory::try_complete_else_watch(self, op, keys)
    }
    fn acknowledge(op: &Delayed<Produce>) {
        op.operation().acked.store(true, Ordering::Release);
    }
    fn check_and_complete(&self, key: u64) -> usize {
        DelayedOperationPurgatory::check_and_complete(self, &key)
    }
}

/// The baseline: one mutex around one map of watch lists; each operation completes once by
/// a compare-and-swap and cancels its timeout, as in the crate.
struct MutexPurgatory {
    watchers: Mutex<HashMap<u64, Vec<Arc<PlainOp>>>>,
    timer: SystemTimerReaper,
}

struct PlainOp {
    acked: AtomicBool,
    completed: AtomicBool,
    timeout: Mutex<Option<TimerTaskEntry>>,
}

impl PlainOp {
    fn try_complete(&self) -> bool {
        self.acked.load(Ordering::Acquire) && self.complete()
    }
    fn complete(&self) -> bool {
        if self.completed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(entry) = self.timeout.lock().unwrap().take() {
            entry.cancel();
        }
        black_box(self);
        true
    }
}

impl MutexPurgatory {
    fn new() -> MutexPurgatory {
        MutexPurgatory {
            watchers: Mutex::new(HashMap::new()),
            timer: SystemTimerReaper::new("baseline-reaper", SystemTimer::new("baseline")),
        }
    }
}

impl BenchPurgatory for MutexPurgatory {
    type Op = Arc<PlainOp>;
    fn operation(&self) -> Arc<PlainOp> {
        Arc::new(PlainOp {
            acked: AtomicBool::new(false),
            completed: AtomicBool::new(false),
            timeout: Mutex::new(None),
        })
    }
    fn try_complete_else_watch(&self, op: &Arc<PlainOp>, keys: &[u64]) -> bool {
        if op.try_complete() {
            return true;
        }
        {
            let mut watchers = self.watchers.lock().unwrap();
            for key in keys {
                watchers.entry(*key).or_default().push(Arc::clone(op));
            }
        }
        if op.try_complete() {
            return true;
        }
        let expiring = Arc::clone(op);
        let entry = self.timer.add(timer_task(TIMEOUT_MS, move || {
            expiring.complete();
        }));
        *op.timeout.lock().unwrap() = Some(entry);
        if op.completed.load(Ordering::Acquire)
            && let Some(entry) = op.timeout.lock().unwrap().take()
        {
            entry.cancel();
        }
        false
    }
    fn acknowledge(op: &Arc<PlainOp>) {
        op.acked.store(true, Ordering::Release);
    }
    fn check_and_complete(&self, key: u64) -> usize {
        let mut watchers = self.watchers.lock().unwrap();
        let Some(list) = watchers.get_mut(&key) else {
            return 0;
        };
        let mut completed = 0;
        list.retain(|op| {
            if op.completed.load(Ordering::Acquire) {
                false
            } else if op.try_complete() {
                completed += 1;
                false
            } else {
                true
            }
        });
        if list.is_empty() {
            watchers.remove(&key);
        }
        completed
    }
}

/// Runs `iters` operations on each of `threads` threads; returns the wall time.
fn run<P: BenchPurgatory>(purgatory: &P, threads: usize, iters: u64) -> Duration {
    let completed = AtomicUsize::new(0);
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..threads as u64 {
            let completed = &completed;
            s.spawn(move || {
                let first_key = t * KEYS_PER_THREAD;
                let mut done = 0;
                for i in 0..iters {
                    let key = first_key + i % KEYS_PER_THREAD;
                    let next = first_key + (i + 1) % KEYS_PER_THREAD;
                    let op = purgatory.operation();
                    purgatory.try_complete_else_watch(&op, &[key, next]);
                    P::acknowledge(&op);
                    done += purgatory.check_and_complete(key);
                }
                completed.fetch_add(done, Ordering::Relaxed);
            });
        }
    });
    let elapsed = start.elapsed();
    assert_eq!(
        completed.load(Ordering::Relaxed) as u64,
        threads as u64 * iters,
        "every operation completed by its check"
    );
    elapsed
}

/// [`run`], noting its throughput in `runs`.
fn timed<P: BenchPurgatory>(
    runs: &RefCell<Vec<f64>>,
    threads: usize,
    iters: u64,
    purgatory: &P,
) -> Duration {
    let elapsed = run(purgatory, threads, iters);
    let ops = (threads as u64 * iters) as f64;
    runs.borrow_mut().push(ops / elapsed.as_secs_f64());
    elapsed
}

/// The median throughput of criterion's samples: the last `samples(20)` timed runs of a
/// benchmark (the runs before them are its warm-up).
/// `None` for a benchmark that did not run (filtered out on the command line).
fn sampled_median(runs: Vec<f64>) -> Option<f64> {
    let samples = runs.len().saturating_sub(samples(20));
    (!runs.is_empty()).then(|| median(runs[samples..].to_vec()))
}

#[allow(clippy::print_stdout)]
fn print_ratios(medians: &[(usize, Option<f64>, Option<f64>)]) {
    println!("\npurgatory_watch_and_complete, median of criterion's samples, ops/s (all threads)");
    println!("| threads | timingwheel | Mutex<HashMap> | ratio |");
    println!("|--------:|------------:|---------------:|------:|");
    let millions =
        |ops: Option<f64>| ops.map_or("-".to_owned(), |ops| format!("{:.2} M", ops / 1e6));
    for &(threads, ours, baseline) in medians {
        let ratio = ours
            .zip(baseline)
            .map_or("-".to_owned(), |(ours, baseline)| {
                format!("{:.2}x", ours / baseline)
            });
        println!(
            "| {threads} | {} | {} | {ratio} |",
            millions(ours),
            millions(baseline)
        );
    }
}

fn watch_and_complete(c: &mut Criterion) {
    let ours = DelayedOperationPurgatory::<u64, Produce>::new("bench", 0);
    let baseline = MutexPurgatory::new();
    let mut group = c.benchmark_group("purgatory_watch_and_complete");
    // Per thread count: the timed runs of ours and of the baseline, as ops/s.
    let mut medians = Vec::new();
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64));
        let ours_runs = RefCell::new(Vec::new());
        let baseline_runs = RefCell::new(Vec::new());
        group.bench_with_input(
            BenchmarkId::new("timingwheel", threads),
            &threads,
            |b, &threads| b.iter_custom(|iters| timed(&ours_runs, threads, iters, &ours)),
        );
        group.bench_with_input(
            BenchmarkId::new("mutex_hashmap", threads),
            &threads,
            |b, &threads| b.iter_custom(|iters| timed(&baseline_runs, threads, iters, &baseline)),
        );
        medians.push((
            threads,
            sampled_median(ours_runs.into_inner()),
            sampled_median(baseline_runs.into_inner()),
        ));
    }
    group.finish();
    print_ratios(&medians);
    assert_eq!(ours.num_delayed(), 0, "every timeout was cancelled");
    assert_eq!(
        baseline.timer.size(),
        0,
        "every baseline timeout was cancelled"
    );
    ours.shutdown();
    baseline.timer.close();
}

criterion_group! {
    name = benches;
    config = criterion_config(20);
    targets = watch_and_complete
}
criterion_main!(benches);
