//! Instructions per operation, counted under callgrind: where an `add`, a `cancel`, a
//! `reschedule` and an `add` of a task already due spend their instructions, stable on a
//! noisy machine (`perf stat` cycles are not available on every machine).
//!
//! Run by `benches/instructions.sh`, which builds this bench and runs it under
//! `valgrind --tool=callgrind`, collecting only inside the `#[inline(never)]` functions
//! below, one at a time; it prints instructions per operation for each, and the harness's
//! own share (the task's box, the `Arc` it captures, the delay) measured by `harness`.
//!
//! `tokio_add_cancel` and `nexus_add_cancel` count the same pairs on tokio-util's
//! `DelayQueue` and nexus-timer's `Wheel` (their tasks boxed the same way; nexus-timer is
//! given `Instant::now() + delay`, which counts the clock read `add` makes).
//!
//! With `N` = 10^5 timers pending (delays 60-90 s, seeded, handles kept), `OPS` = 10^5
//! operations of each kind; tasks are boxed closures that capture an `Arc`, as in
//! `benches/peers`.

#![allow(missing_docs)]

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// `k` adds of tasks already due (a delay of 0): each goes to the executor inside `add`.
#[inline(never)]
fn add_due(timer: &SystemTimer, shared: &Arc<u64>, k: usize) {
    for _ in 0..k {
        black_box(timer.add(timer_task(0, closure(shared))));
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

type Task = Box<dyn FnOnce() + Send>;

/// `k` insert + remove pairs on tokio-util's `DelayQueue`.
#[inline(never)]
fn tokio_add_cancel(
    queue: &mut tokio_util::time::DelayQueue<Task>,
    shared: &Arc<u64>,
    rng: &mut Rng,
    k: usize,
) {
    for _ in 0..k {
        let task: Task = Box::new(closure(shared));
        let key = queue.insert(task, Duration::from_millis(delay(rng) as u64));
        black_box(queue.try_remove(&key));
    }
}

/// `k` schedule + cancel pairs on nexus-timer's `Wheel`.
#[inline(never)]
fn nexus_add_cancel(
    wheel: &mut nexus_timer::Wheel<Task>,
    shared: &Arc<u64>,
    rng: &mut Rng,
    k: usize,
) {
    for _ in 0..k {
        let task: Task = Box::new(closure(shared));
        let deadline = Instant::now() + Duration::from_millis(delay(rng) as u64);
        let handle = wheel.schedule(deadline, task);
        black_box(wheel.cancel(handle));
    }
}

/// The peers' pairs at `N` pending, as the wheel's.
fn peers(shared: &Arc<u64>, rng: &mut Rng) {
    let runtime = common::tokio_runtime();
    let _context = runtime.enter();
    let mut queue = tokio_util::time::DelayQueue::new();
    let mut wheel = nexus_timer::Wheel::unbounded(4096, Instant::now());
    let mut keys = Vec::with_capacity(N);
    let mut handles = Vec::with_capacity(N);
    for _ in 0..N {
        let task: Task = Box::new(closure(shared));
        keys.push(queue.insert(task, Duration::from_millis(delay(rng) as u64)));
        let task: Task = Box::new(closure(shared));
        let deadline = Instant::now() + Duration::from_millis(delay(rng) as u64);
        handles.push(wheel.schedule(deadline, task));
    }
    tokio_add_cancel(&mut queue, shared, rng, OPS);
    nexus_add_cancel(&mut wheel, shared, rng, OPS);
    black_box((&keys, &handles));
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
    add_due(&timer, &shared, OPS);
    peers(&shared, &mut rng);
    black_box(&pending);
    // Skips the drops: they are not measured.
    std::process::exit(0);
}
