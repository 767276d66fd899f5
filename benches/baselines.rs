//! The baseline timers written here, and one trait that puts them and `SystemTimer` behind
//! the same calls: a `Mutex<BinaryHeap>` with lazy cancellation, a `Mutex<BTreeMap>` with
//! real removal, and tokio-util's `DelayQueue` behind a `Mutex`, each driven by one thread.
//! (tokio-util's and nexus-timer's queues on one thread, `&mut`, are in `everyday.rs`.)

// Each binary uses part of it.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use timingwheel::{SystemClock, SystemTimer, Time, Timer, TimerTask, TimerTaskEntry};
use tokio_util::time::{DelayQueue, delay_queue::Key};

/// The task of the add and cancel workloads: its delay (8 bytes); it does nothing.
pub(crate) struct U64Task(u64);

impl TimerTask for U64Task {
    fn delay_ms(&self) -> i64 {
        self.0 as i64
    }
    fn run(self: Box<Self>) {
        std::hint::black_box(self.0);
    }
}

/// Boxes a [`U64Task`] due `delay_ms` from its add.
pub(crate) fn task(delay_ms: i64) -> Box<dyn TimerTask> {
    Box::new(U64Task(delay_ms as u64))
}

/// Anything a thread holds on to (see [`BenchTimer::enter`]).
pub(crate) trait Held {}
impl<T> Held for T {}

/// What every thread-safe timer under test offers.
pub(crate) trait BenchTimer: Send + Sync {
    type Handle: Send;
    /// Schedules `task` `task.delay_ms()` from now.
    fn add(&self, task: Box<dyn TimerTask>) -> Self::Handle;
    /// True iff this call prevented the task from running.
    fn cancel(&self, handle: &Self::Handle) -> bool;
    /// Untimed upkeep between timed chunks (the heap purges lazily cancelled items here).
    fn maintain(&self) {}
    /// What a thread must hold while it adds (tokio's runtime context).
    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(())
    }
    /// Tasks pending (the heap: cancelled ones not yet purged included).
    fn size(&self) -> usize;
    /// Bytes the timer maps itself, outside the global allocator (the wheel's storage).
    fn storage_bytes(&self) -> usize {
        0
    }
    /// Waits up to `timeout_ms` for something to expire and runs (or hands over) whatever
    /// did. True if anything expired.
    fn advance_clock(&self, timeout_ms: i64) -> bool;
}

impl BenchTimer for SystemTimer {
    type Handle = TimerTaskEntry;
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        Timer::add(self, task)
    }
    fn cancel(&self, handle: &TimerTaskEntry) -> bool {
        handle.cancel()
    }
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        Timer::advance_clock(self, timeout_ms)
    }
    fn size(&self) -> usize {
        Timer::size(self)
    }
    fn storage_bytes(&self) -> usize {
        SystemTimer::storage_bytes(self)
    }
}

/// What differs between the two `Mutex<queue>` baselines: the queue, keyed by (due ns, add
/// sequence), and how a cancel reaches it.
pub(crate) trait Queue: Default + Send + Sized + 'static {
    type Handle: Send;
    fn push(&mut self, key: (i64, u64), task: Box<dyn TimerTask>) -> Self::Handle;
    fn first(&self) -> Option<(i64, u64)>;
    /// Takes out the first item: its task, unless it was cancelled.
    fn pop(&mut self, cancelled: &AtomicUsize) -> Option<Box<dyn TimerTask>>;
    fn len(&self) -> usize;
    fn cancel(timer: &Locked<Self>, handle: &Self::Handle) -> bool;
    fn maintain(_: &Locked<Self>) {}
}

/// A `Mutex<Q>` timer: adds push under the mutex (waking the driver if the new item is
/// first); the driver waits on a condition variable for the first item's due time and runs
/// expired tasks itself.
#[derive(Default)]
pub(crate) struct Locked<Q> {
    /// The queue, and the next add's sequence number.
    queue: Mutex<(Q, u64)>,
    available: Condvar,
    /// Cancelled items still in the queue (the heap's lazy cancellation).
    cancelled: AtomicUsize,
}

/// Baseline 1, the textbook design: a `Mutex<BinaryHeap>` whose `cancel` flips the item's
/// flag (one compare-and-swap); the item, and its task, stay until they reach the top or
/// until `maintain` purges them once they are half the heap.
pub(crate) type HeapTimer = Locked<BinaryHeap<Reverse<HeapItem>>>;

/// Baseline 2: a `Mutex<BTreeMap>` whose `cancel` takes the task out and drops it at once.
pub(crate) type BTreeTimer = Locked<BTreeMap<(i64, u64), Box<dyn TimerTask>>>;

impl<Q: Queue> Locked<Q> {
    pub(crate) fn new() -> Locked<Q> {
        Locked::default()
    }
}

impl<Q: Queue> BenchTimer for Locked<Q> {
    type Handle = Q::Handle;

    fn add(&self, task: Box<dyn TimerTask>) -> Q::Handle {
        // Never due before the instant of the add plus the delay.
        let due_ns = SystemClock.nanoseconds() + task.delay_ms() * 1_000_000;
        let mut queue = self.queue.lock().unwrap();
        let key = (due_ns, queue.1);
        queue.1 += 1;
        let handle = queue.0.push(key, task);
        let first = queue.0.first() == Some(key);
        drop(queue);
        if first {
            self.available.notify_one();
        }
        handle
    }

    fn cancel(&self, handle: &Q::Handle) -> bool {
        Q::cancel(self, handle)
    }

    fn maintain(&self) {
        Q::maintain(self);
    }

    fn size(&self) -> usize {
        self.queue.lock().unwrap().0.len()
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        let mut queue = self.queue.lock().unwrap();
        loop {
            let now = SystemClock.nanoseconds();
            let mut due = Vec::new();
            while queue.0.first().is_some_and(|(due_ns, _)| due_ns <= now) {
                due.extend(queue.0.pop(&self.cancelled));
            }
            if !due.is_empty() {
                drop(queue);
                due.into_iter().for_each(|task| task.run());
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let until_first = queue.0.first().map_or(left, |(due_ns, _)| {
                Duration::from_nanos((due_ns - SystemClock.nanoseconds()).max(0) as u64)
            });
            let wait = until_first.min(left);
            queue = self.available.wait_timeout(queue, wait).unwrap().0;
        }
    }
}

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLED: u8 = 2;

/// One heap item: its key (due ns, sequence), its flag, its task; ordered by its key.
pub(crate) struct HeapItem((i64, u64), Arc<AtomicU8>, Box<dyn TimerTask>);

impl PartialEq for HeapItem {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for HeapItem {}
impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl Queue for BinaryHeap<Reverse<HeapItem>> {
    type Handle = Arc<AtomicU8>;
    fn push(&mut self, key: (i64, u64), task: Box<dyn TimerTask>) -> Arc<AtomicU8> {
        let state = Arc::new(AtomicU8::new(PENDING));
        BinaryHeap::push(self, Reverse(HeapItem(key, Arc::clone(&state), task)));
        state
    }
    fn first(&self) -> Option<(i64, u64)> {
        self.peek().map(|item| item.0.0)
    }
    fn pop(&mut self, cancelled: &AtomicUsize) -> Option<Box<dyn TimerTask>> {
        let Reverse(HeapItem(_, state, task)) = BinaryHeap::pop(self)?;
        let fires = state.compare_exchange(PENDING, FIRED, AcqRel, Acquire);
        if fires.is_err() {
            cancelled.fetch_sub(1, Relaxed);
        }
        fires.is_ok().then_some(task)
    }
    fn len(&self) -> usize {
        BinaryHeap::len(self)
    }
    fn cancel(timer: &HeapTimer, state: &Arc<AtomicU8>) -> bool {
        let won = state.compare_exchange(PENDING, CANCELLED, AcqRel, Acquire);
        if won.is_ok() {
            timer.cancelled.fetch_add(1, Relaxed);
        }
        won.is_ok()
    }
    fn maintain(timer: &HeapTimer) {
        let mut queue = timer.queue.lock().unwrap();
        if timer.cancelled.load(Relaxed) * 2 > queue.0.len() {
            queue.0.retain(|item| item.0.1.load(Acquire) == PENDING);
            timer.cancelled.store(0, Relaxed);
        }
    }
}

impl Queue for BTreeMap<(i64, u64), Box<dyn TimerTask>> {
    type Handle = (i64, u64);
    fn push(&mut self, key: (i64, u64), task: Box<dyn TimerTask>) -> (i64, u64) {
        self.insert(key, task);
        key
    }
    fn first(&self) -> Option<(i64, u64)> {
        self.first_key_value().map(|(key, _)| *key)
    }
    fn pop(&mut self, _: &AtomicUsize) -> Option<Box<dyn TimerTask>> {
        self.pop_first().map(|(_, task)| task)
    }
    fn len(&self) -> usize {
        BTreeMap::len(self)
    }
    fn cancel(timer: &BTreeTimer, key: &(i64, u64)) -> bool {
        let task = timer.queue.lock().unwrap().0.remove(key);
        task.is_some()
    }
}

/// Baseline 3: tokio-util's `DelayQueue` behind a `Mutex`, driven by one thread in a
/// current-thread runtime: how a threaded service would share it. Adding threads enter the
/// runtime ([`BenchTimer::enter`]); expired tasks run on the driving thread.
pub(crate) struct TokioTimer {
    runtime: tokio::runtime::Runtime,
    queue: Mutex<DelayQueue<Box<dyn TimerTask>>>,
}

impl TokioTimer {
    pub(crate) fn new() -> TokioTimer {
        let runtime = tokio_runtime();
        let queue = Mutex::new(runtime.block_on(async { DelayQueue::new() }));
        TokioTimer { runtime, queue }
    }
}

impl BenchTimer for TokioTimer {
    type Handle = Key;

    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(self.runtime.enter())
    }

    fn add(&self, task: Box<dyn TimerTask>) -> Key {
        let delay = Duration::from_millis(task.delay_ms().max(0) as u64);
        self.queue.lock().unwrap().insert(task, delay)
    }

    fn cancel(&self, key: &Key) -> bool {
        self.queue.lock().unwrap().try_remove(key).is_some()
    }

    fn size(&self) -> usize {
        self.queue.lock().unwrap().len()
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
        let poll = |cx: &mut Context<'_>| self.queue.lock().unwrap().poll_expired(cx);
        self.runtime.block_on(async {
            let first = tokio::time::timeout(timeout, std::future::poll_fn(poll)).await;
            let Ok(Some(first)) = first else {
                return false;
            };
            first.into_inner().run();
            // Whatever else is due now, without waiting.
            let mut cx = Context::from_waker(Waker::noop());
            while let Poll::Ready(Some(expired)) = poll(&mut cx) {
                expired.into_inner().run();
            }
            true
        })
    }
}

/// A current-thread tokio runtime with the timer enabled, for tokio-util's `DelayQueue`
/// (its `insert` arms a `Sleep`, which needs a runtime context).
pub(crate) fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}
