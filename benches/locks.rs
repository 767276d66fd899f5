//! The crate's own striped reader-writer lock against crossbeam's `ShardedLock`:
//! the locking one `add` does, at 1, 2, 4, ... threads up to the machine's hardware
//! threads, in the same run.
//!
//! `add` must lock the wheel for reading and the part of the entry store it writes. The
//! crate fuses the two: the read side's stripes are the entry store's shard mutexes, so an
//! add takes one parking_lot mutex (`own`). With `ShardedLock` the wheel would sit behind
//! crossbeam's lock (a read lock of one of its shards, picked by thread), and the entry
//! store's shard would still need a mutex of its own (`sharded_lock`). Each thread here
//! takes its stripe's lock(s) and writes 32 bytes into its shard, as an insert does.
//!
//! `cargo bench -p timingwheel-benches --bench locks`

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_utils::sync::ShardedLock;
use parking_lot::Mutex;

use common::{criterion_config, thread_counts};

/// What a shard holds: a stand-in for its slots.
#[repr(align(128))]
struct Shard(Mutex<Vec<[u64; 4]>>);

/// The wheel's stand-in: what the read lock protects.
struct Wheel {
    tick_ms: u64,
}

const STRIPES: usize = 8;
const SLOTS: usize = 1024;

fn shards() -> Vec<Shard> {
    (0..STRIPES)
        .map(|_| Shard(Mutex::new(vec![[0; 4]; SLOTS])))
        .collect()
}

/// One add's locking on stripe `stripe`, the crate's way: the shard's mutex is the read
/// lock.
fn own(shards: &[Shard], wheel: &Wheel, stripe: usize, i: usize) {
    let mut slots = shards[stripe].0.lock();
    slots[i % SLOTS] = [i as u64, wheel.tick_ms, 0, 0];
}

/// One add's locking with `ShardedLock` guarding the wheel.
fn sharded_lock(shards: &[Shard], wheel: &ShardedLock<Wheel>, stripe: usize, i: usize) {
    let wheel = wheel.read().expect("not poisoned");
    let mut slots = shards[stripe].0.lock();
    slots[i % SLOTS] = [i as u64, wheel.tick_ms, 0, 0];
}

/// `threads` threads each doing `iters` operations at once; the wall time.
fn time_threads(threads: usize, iters: u64, op: &(dyn Fn(usize, usize) + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..iters as usize {
                    op(t, black_box(i));
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

fn benches(c: &mut Criterion) {
    let shards = shards();
    let plain = Wheel { tick_ms: 1 };
    let locked = ShardedLock::new(Wheel { tick_ms: 1 });
    let mut group = c.benchmark_group("add_locking");
    for threads in thread_counts() {
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_with_input(BenchmarkId::new("own", threads), &threads, |b, &threads| {
            b.iter_custom(|iters| time_threads(threads, iters, &|t, i| own(&shards, &plain, t, i)))
        });
        group.bench_with_input(
            BenchmarkId::new("sharded_lock", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    time_threads(threads, iters, &|t, i| sharded_lock(&shards, &locked, t, i))
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = group;
    config = criterion_config(30);
    targets = benches
}
criterion_main!(group);
