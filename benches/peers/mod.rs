//! The everyday path against the single-threaded wheels a Rust user would pick instead:
//! tokio-util's `DelayQueue` and nexus-timer's `Wheel`, both driven through `&mut`, on one
//! thread, beside `SystemTimer`.
//!
//! One process runs one peer (`TIMINGWHEEL_PEER=wheel|tokio-util|nexus`), so that no peer
//! inherits another's heap; `benches/peers.sh` runs them in turn (A B C A B C ...) and
//! prints every run. Each task is what users add: a boxed closure that captures an `Arc`,
//! boxed inside the timed operation, with a delay uniform in 60-90 s (seeded). Each peer
//! reads the clock inside the timed operation (`add` does; the others are given
//! `Instant::now() + delay`, as their users write it).
//!
//! With `N` = 10^6 timers pending (and their handles kept):
//! - `add`: `N` more adds, every handle kept (the population grows to `2 N`): ns per add;
//! - `add_cancel`: add + cancel pairs, in chunks of 10^4: the median chunk, ns per pair;
//! - `reschedule`: the next pending timer (round robin over the handles, in the order they
//!   were added) moved to a new delay (`SystemTimer::reschedule`, `DelayQueue::reset`;
//!   nexus-timer has none), in chunks of 10^4: the median chunk.
//!
//! `TIMINGWHEEL_PEER_N` sets `N` (a smaller one for valgrind).

// The figures are the output.
#![allow(clippy::print_stdout)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timingwheel::{SystemTimer, Timer, TimerTaskEntry, timer_task};

use crate::common::{Rng, SEED, median};

/// Operations per timed chunk of the pair and reschedule cases.
const CHUNK: usize = 10_000;
/// Chunks of each of those cases.
const CHUNKS: usize = 50;

/// The task a user adds: a closure that captures an `Arc`.
type Task = Box<dyn FnOnce() + Send>;

/// A timer driven from one thread.
trait Peer {
    type Handle;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Self::Handle;
    fn cancel(&mut self, handle: Self::Handle) -> bool;
    /// `None` if the peer cannot move a pending timer.
    fn reschedule(&mut self, handle: &Self::Handle, delay_ms: u64) -> Option<bool>;
}

fn closure(shared: &Arc<u64>) -> impl FnOnce() + Send + 'static {
    let shared = Arc::clone(shared);
    move || {
        black_box(&shared);
    }
}

struct Wheel(SystemTimer);

impl Peer for Wheel {
    type Handle = TimerTaskEntry;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> TimerTaskEntry {
        self.0.add(timer_task(delay_ms as i64, closure(shared)))
    }
    fn cancel(&mut self, handle: TimerTaskEntry) -> bool {
        handle.cancel()
    }
    fn reschedule(&mut self, handle: &TimerTaskEntry, delay_ms: u64) -> Option<bool> {
        Some(self.0.reschedule(handle, delay_ms as i64))
    }
}

struct TokioUtil(tokio_util::time::DelayQueue<Task>);

impl Peer for TokioUtil {
    type Handle = tokio_util::time::delay_queue::Key;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Self::Handle {
        let task: Task = Box::new(closure(shared));
        self.0.insert(task, Duration::from_millis(delay_ms))
    }
    fn cancel(&mut self, handle: Self::Handle) -> bool {
        self.0.try_remove(&handle).is_some()
    }
    fn reschedule(&mut self, handle: &Self::Handle, delay_ms: u64) -> Option<bool> {
        self.0.reset(handle, Duration::from_millis(delay_ms));
        Some(true)
    }
}

struct Nexus(nexus_timer::Wheel<Task>);

impl Peer for Nexus {
    type Handle = nexus_timer::TimerHandle<Task>;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Self::Handle {
        let task: Task = Box::new(closure(shared));
        self.0
            .schedule(Instant::now() + Duration::from_millis(delay_ms), task)
    }
    fn cancel(&mut self, handle: Self::Handle) -> bool {
        self.0.cancel(handle).is_some()
    }
    fn reschedule(&mut self, _: &Self::Handle, _: u64) -> Option<bool> {
        None
    }
}

/// The figures of one run, ns per operation.
struct Figures {
    add: f64,
    add_cancel: f64,
    reschedule: Option<f64>,
}

fn delay(rng: &mut Rng) -> u64 {
    rng.range(60_000, 90_000) as u64
}

fn run<P: Peer>(peer: &mut P, n: usize) -> Figures {
    let shared = Arc::new(7);
    let mut rng = Rng::new(SEED);
    let mut pending: Vec<P::Handle> = (0..n).map(|_| peer.add(delay(&mut rng), &shared)).collect();

    let mut added = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        added.push(peer.add(delay(&mut rng), &shared));
    }
    let add = start.elapsed().as_nanos() as f64 / n as f64;
    for handle in added {
        black_box(peer.cancel(handle));
    }

    let mut chunks = Vec::with_capacity(CHUNKS);
    for _ in 0..CHUNKS {
        let start = Instant::now();
        for _ in 0..CHUNK {
            let handle = peer.add(delay(&mut rng), &shared);
            black_box(peer.cancel(handle));
        }
        chunks.push(start.elapsed().as_nanos() as f64 / CHUNK as f64);
    }
    let add_cancel = median(chunks);

    let mut chunks = Vec::with_capacity(CHUNKS);
    let mut supported = true;
    let mut next = 0;
    for _ in 0..CHUNKS {
        let start = Instant::now();
        for _ in 0..CHUNK {
            match peer.reschedule(&pending[next], delay(&mut rng)) {
                Some(moved) => assert!(moved, "a pending timer moves"),
                None => supported = false,
            }
            next = (next + 1) % pending.len();
        }
        chunks.push(start.elapsed().as_nanos() as f64 / CHUNK as f64);
        if !supported {
            break;
        }
    }
    let reschedule = supported.then(|| median(chunks));
    for handle in pending.drain(..) {
        black_box(peer.cancel(handle));
    }
    Figures {
        add,
        add_cancel,
        reschedule,
    }
}

/// Runs the peer named by `TIMINGWHEEL_PEER` and prints its figures; false if it is unset.
pub(crate) fn run_requested() -> bool {
    let Ok(name) = std::env::var("TIMINGWHEEL_PEER") else {
        return false;
    };
    let n = std::env::var("TIMINGWHEEL_PEER_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let figures = match name.as_str() {
        "wheel" => run(&mut Wheel(SystemTimer::new("peers")), n),
        "tokio-util" => {
            // The queue reads its clock through the runtime it was made in.
            let runtime = crate::common::tokio_runtime();
            let _context = runtime.enter();
            run(&mut TokioUtil(tokio_util::time::DelayQueue::new()), n)
        }
        "nexus" => run(
            &mut Nexus(nexus_timer::Wheel::unbounded(4096, Instant::now())),
            n,
        ),
        other => panic!("TIMINGWHEEL_PEER: unknown peer {other:?} (wheel, tokio-util, nexus)"),
    };
    let reschedule = figures
        .reschedule
        .map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1}"));
    println!(
        "peer {name} n {n} add {:.1} add_cancel {:.1} reschedule {reschedule}",
        figures.add, figures.add_cancel
    );
    true
}
