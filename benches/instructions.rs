//! Instructions per operation, counted under callgrind: where an `add`, a `cancel` and a
//! `reschedule` spend their instructions, stable on a noisy machine (`perf stat` cycles are
//! not available on every machine).
//!
//! Run by `benches/instructions.sh`, which builds this bench and runs it under
//! `valgrind --tool=callgrind`, collecting only inside the `#[inline(never)]` functions
//! below, one at a time; it prints instructions per operation for each, and the harness's
//! own share (the task's box, the `Arc` it captures, the delay) measured by `harness`.
//!
//! With `N` = 10^5 timers pending (delays 60-90 s, seeded, handles kept), `OPS` = 10^5
//! operations of each kind; tasks are boxed closures that capture an `Arc`, as in
//! `benches/peers`.

#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::sync::Arc;

use common::{Rng, SEED};
use timingwheel::{SystemTimer, Timer, TimerTaskEntry, timer_task};

const N: usize = 100_000;
const OPS: usize = 100_000;
const CHUNK: usize = 10_000;

fn delay(rng: &mut Rng) -> i64 {
    rng.range(60_000, 90_000)
}

fn closure(shared: &Arc<u64>) -> impl FnOnce() + Send + 'static {
    let shared = Arc::clone(shared);
    move || {
        black_box(&shared);
    }
}

/// What every operation below pays besides the timer: a delay, an `Arc` clone and the
/// task's box, allocated and freed.
#[inline(never)]
fn harness(shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    for _ in 0..k {
        drop(black_box(timer_task(delay(rng), closure(shared))));
    }
}

/// `k` adds, handles kept in `out`.
#[inline(never)]
fn add(
    timer: &SystemTimer,
    shared: &Arc<u64>,
    rng: &mut Rng,
    out: &mut Vec<TimerTaskEntry>,
    k: usize,
) {
    for _ in 0..k {
        out.push(timer.add(timer_task(delay(rng), closure(shared))));
    }
}

/// Cancels every handle in `handles`.
#[inline(never)]
fn cancel(handles: &mut Vec<TimerTaskEntry>) {
    for handle in handles.drain(..) {
        black_box(handle.cancel());
    }
}

/// `k` add + cancel pairs.
#[inline(never)]
fn add_cancel(timer: &SystemTimer, shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    for _ in 0..k {
        let handle = timer.add(timer_task(delay(rng), closure(shared)));
        black_box(handle.cancel());
    }
}

/// Moves each of `handles` to a new delay.
#[inline(never)]
fn reschedule(timer: &SystemTimer, rng: &mut Rng, handles: &[TimerTaskEntry]) {
    for handle in handles {
        black_box(timer.reschedule(handle, delay(rng)));
    }
}

fn main() {
    let timer = SystemTimer::new("instructions");
    let shared = Arc::new(7);
    let mut rng = Rng::new(SEED);
    let pending: Vec<_> = (0..N)
        .map(|_| timer.add(timer_task(delay(&mut rng), closure(&shared))))
        .collect();
    harness(&shared, &mut rng, OPS);
    let mut handles = Vec::with_capacity(CHUNK);
    for _ in 0..OPS / CHUNK {
        add(&timer, &shared, &mut rng, &mut handles, CHUNK);
        cancel(&mut handles);
    }
    add_cancel(&timer, &shared, &mut rng, OPS);
    reschedule(&timer, &mut rng, &pending[..OPS.min(N)]);
    black_box(&pending);
    // Skips the drops: they are not measured.
    std::process::exit(0);
}
