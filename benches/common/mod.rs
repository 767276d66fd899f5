//! What the benchmarks share: the workload (tasks, seeded delays), the two baseline timers
//! written here (`Mutex<BinaryHeap>` with lazy cancellation, `Mutex<BTreeMap>` with real
//! removal), and one trait that puts them and `SystemTimer` behind the same calls.
//!
//! tokio-util's `DelayQueue` is single-threaded (`&mut self`) and has its own API, so the
//! benches drive it directly instead of through [`BenchTimer`].

// Each bench binary uses a different part of this module.
#![allow(dead_code)]

// The tests' counting allocator: one home for it (the benches are not published, so they
// may reach into tests/).
#[path = "../../tests/common/counting_alloc.rs"]
pub(crate) mod counting;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use timingwheel::{SystemClock, SystemTimer, Time, Timer, TimerTask, TimerTaskEntry};

/// True when `TIMINGWHEEL_BENCH_QUICK` is set to anything but `0` or empty: run a reduced
/// set in seconds (CI, smoke tests).
pub(crate) fn quick() -> bool {
    std::env::var("TIMINGWHEEL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The fixed seed of every delay sequence.
pub(crate) const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// xorshift64*: a tiny seeded generator, so the benches need no `rand`.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi` (the tiny modulo bias is irrelevant here).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }
}

/// The median of `values` (the upper one for an even count).
pub(crate) fn median<V: Copy + PartialOrd>(mut values: Vec<V>) -> V {
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    values[values.len() / 2]
}

/// `len` delays uniform in `lo..=hi` ms, from [`SEED`].
pub(crate) fn delays(len: usize, lo: i64, hi: i64) -> Vec<i64> {
    let mut rng = Rng::new(SEED);
    (0..len).map(|_| rng.range(lo, hi)).collect()
}

/// The task of the add, cancel and memory workloads: it holds one `u64` (its delay) and does
/// nothing when run.
#[derive(Debug)]
pub(crate) struct U64Task(pub(crate) u64);

impl TimerTask for U64Task {
    fn delay_ms(&self) -> i64 {
        self.0 as i64
    }
    fn run(self: Box<Self>) {
        std::hint::black_box(self.0);
    }
}

/// Boxes a [`U64Task`] due `delay_ms` from its add.
#[inline]
pub(crate) fn task(delay_ms: i64) -> Box<dyn TimerTask> {
    Box::new(U64Task(delay_ms as u64))
}

/// Anything a thread holds on to (see [`BenchTimer::enter`]).
pub(crate) trait Held {}
impl<T> Held for T {}

/// What every thread-safe timer under test offers.
pub(crate) trait BenchTimer: Send + Sync {
    /// What `add` returns, to cancel with.
    type Handle: Send;
    /// Schedules `task` `task.delay_ms()` from now.
    fn add(&self, task: Box<dyn TimerTask>) -> Self::Handle;
    /// True iff this call prevented the task from running.
    fn cancel(&self, handle: &Self::Handle) -> bool;
    /// Untimed upkeep between timed chunks (the heap purges lazily cancelled items here).
    fn maintain(&self) {}
    /// Whatever a thread must hold while it adds (tokio's runtime context); kept for the
    /// duration of its add loop.
    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(())
    }
    /// Tasks pending.
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
    #[inline]
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        Timer::add(self, task)
    }
    #[inline]
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

/// Monotonic nanoseconds on the same clock as `SystemTimer`.
#[inline]
fn now_ns() -> i64 {
    SystemClock.nanoseconds()
}

/// Due time in ns of a task added at `now_ns`: never before that instant plus the delay.
#[inline]
fn due_ns(now_ns: i64, delay_ms: i64) -> i64 {
    now_ns.saturating_add(delay_ms.saturating_mul(1_000_000))
}

/// How long to wait for an item due at `due_ns`, capped by what is left of a timeout.
fn wait_for(due_ns: i64, left: Duration) -> Duration {
    let until_due = Duration::from_nanos(due_ns.saturating_sub(now_ns()).max(0) as u64);
    until_due.min(left)
}

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const CANCELLED: u8 = 2;

/// One heap item: ordered by due time, then by add order.
struct HeapItem {
    due_ns: i64,
    seq: u64,
    state: Arc<AtomicU8>,
    task: Box<dyn TimerTask>,
}

impl PartialEq for HeapItem {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ns, self.seq) == (other.due_ns, other.seq)
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
        (self.due_ns, self.seq).cmp(&(other.due_ns, other.seq))
    }
}

struct HeapState {
    heap: BinaryHeap<Reverse<HeapItem>>,
    next_seq: u64,
}

/// Baseline 1: a `Mutex<BinaryHeap>` timer with lazy cancellation, the textbook design.
///
/// `cancel` flips a shared flag (one compare-and-swap); the item, and its task, stay in the
/// heap until they reach its top or until [`maintain`](BenchTimer::maintain) purges them
/// once they are half the heap. Expired tasks run on the driving thread.
pub(crate) struct HeapTimer {
    state: Mutex<HeapState>,
    available: Condvar,
    cancelled: AtomicUsize,
}

impl HeapTimer {
    pub(crate) fn new() -> HeapTimer {
        HeapTimer {
            state: Mutex::new(HeapState {
                heap: BinaryHeap::new(),
                next_seq: 0,
            }),
            available: Condvar::new(),
            cancelled: AtomicUsize::new(0),
        }
    }

    /// Items in the heap, cancelled ones included.
    pub(crate) fn heap_len(&self) -> usize {
        self.state.lock().unwrap().heap.len()
    }
}

impl BenchTimer for HeapTimer {
    type Handle = Arc<AtomicU8>;

    fn add(&self, task: Box<dyn TimerTask>) -> Arc<AtomicU8> {
        let due_ns = due_ns(now_ns(), task.delay_ms());
        let state = Arc::new(AtomicU8::new(PENDING));
        let mut guard = self.state.lock().unwrap();
        let seq = guard.next_seq;
        guard.next_seq += 1;
        guard.heap.push(Reverse(HeapItem {
            due_ns,
            seq,
            state: Arc::clone(&state),
            task,
        }));
        let is_head = guard.heap.peek().is_some_and(|head| head.0.seq == seq);
        drop(guard);
        if is_head {
            self.available.notify_one();
        }
        state
    }

    fn cancel(&self, handle: &Arc<AtomicU8>) -> bool {
        let won = handle
            .compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if won {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        won
    }

    fn maintain(&self) {
        let mut guard = self.state.lock().unwrap();
        if self.cancelled.load(Ordering::Relaxed) * 2 > guard.heap.len() {
            guard
                .heap
                .retain(|item| item.0.state.load(Ordering::Acquire) == PENDING);
            self.cancelled.store(0, Ordering::Relaxed);
        }
    }

    fn size(&self) -> usize {
        self.heap_len()
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        let mut guard = self.state.lock().unwrap();
        loop {
            let now = now_ns();
            if guard.heap.peek().is_some_and(|head| head.0.due_ns <= now) {
                let mut due = Vec::new();
                while guard.heap.peek().is_some_and(|head| head.0.due_ns <= now) {
                    due.push(guard.heap.pop().unwrap().0);
                }
                drop(guard);
                for item in due {
                    if item
                        .state
                        .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        item.task.run();
                    } else {
                        self.cancelled.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = match guard.heap.peek() {
                Some(head) => wait_for(head.0.due_ns, left),
                None => left,
            };
            guard = self.available.wait_timeout(guard, wait).unwrap().0;
        }
    }
}

type TaskMap = BTreeMap<(i64, u64), Box<dyn TimerTask>>;

/// Baseline 2: a `Mutex<BTreeMap>` timer keyed by (due, sequence), with real removal:
/// `cancel` takes the task out of the map and drops it at once. Expired tasks run on the
/// driving thread. It runs on [`SystemClock`], or on any [`Time`] (a `MockTime`), where
/// `advance_clock` then waits for nothing: the clock only moves when the caller moves it.
pub(crate) struct BTreeTimer {
    /// The map, and the next sequence number.
    state: Mutex<(TaskMap, u64)>,
    available: Condvar,
    time: Option<Arc<dyn Time>>,
}

impl BTreeTimer {
    pub(crate) fn new() -> BTreeTimer {
        BTreeTimer {
            state: Mutex::new((BTreeMap::new(), 0)),
            available: Condvar::new(),
            time: None,
        }
    }

    /// A timer on `time` instead of the system clock.
    pub(crate) fn on(time: Arc<dyn Time>) -> BTreeTimer {
        BTreeTimer {
            time: Some(time),
            ..BTreeTimer::new()
        }
    }

    fn now_ns(&self) -> i64 {
        self.time
            .as_ref()
            .map_or_else(now_ns, |time| time.nanoseconds())
    }
}

impl BenchTimer for BTreeTimer {
    type Handle = (i64, u64);

    fn add(&self, task: Box<dyn TimerTask>) -> (i64, u64) {
        let due_ns = due_ns(self.now_ns(), task.delay_ms());
        let mut guard = self.state.lock().unwrap();
        let seq = guard.1;
        guard.1 += 1;
        let key = (due_ns, seq);
        guard.0.insert(key, task);
        let is_head = guard.0.first_key_value().is_some_and(|(k, _)| *k == key);
        drop(guard);
        if is_head {
            self.available.notify_one();
        }
        key
    }

    fn cancel(&self, handle: &(i64, u64)) -> bool {
        let task = self.state.lock().unwrap().0.remove(handle);
        task.is_some()
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
        let mut guard = self.state.lock().unwrap();
        loop {
            let now = self.now_ns();
            if guard.0.first_key_value().is_some_and(|(k, _)| k.0 <= now) {
                let mut due = Vec::new();
                while let Some(entry) = guard.0.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    due.push(entry.remove());
                }
                drop(guard);
                for task in due {
                    task.run();
                }
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || self.time.is_some() {
                return false;
            }
            let wait = match guard.0.first_key_value() {
                Some((k, _)) => wait_for(k.0, left),
                None => left,
            };
            guard = self.available.wait_timeout(guard, wait).unwrap().0;
        }
    }

    fn size(&self) -> usize {
        self.state.lock().unwrap().0.len()
    }
}

/// Baseline 3: tokio-util's `DelayQueue` behind a `Mutex`, driven by one thread in a
/// current-thread runtime: how a threaded service would share it. Adding threads enter the
/// runtime once ([`BenchTimer::enter`]); expired tasks run on the driving thread.
pub(crate) struct TokioTimer {
    runtime: tokio::runtime::Runtime,
    queue: Mutex<tokio_util::time::DelayQueue<Box<dyn TimerTask>>>,
}

impl TokioTimer {
    pub(crate) fn new() -> TokioTimer {
        let runtime = tokio_runtime();
        let queue = {
            let _context = runtime.enter();
            Mutex::new(tokio_util::time::DelayQueue::new())
        };
        TokioTimer { runtime, queue }
    }
}

impl BenchTimer for TokioTimer {
    type Handle = tokio_util::time::delay_queue::Key;

    fn enter(&self) -> Box<dyn Held + '_> {
        Box::new(self.runtime.enter())
    }

    fn add(&self, task: Box<dyn TimerTask>) -> Self::Handle {
        let delay = Duration::from_millis(task.delay_ms().max(0) as u64);
        self.queue.lock().unwrap().insert(task, delay)
    }

    fn cancel(&self, handle: &Self::Handle) -> bool {
        self.queue.lock().unwrap().try_remove(handle).is_some()
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        let timeout = Duration::from_millis(timeout_ms.max(0) as u64);
        self.runtime.block_on(async {
            let first = tokio::time::timeout(
                timeout,
                std::future::poll_fn(|cx| self.queue.lock().unwrap().poll_expired(cx)),
            )
            .await;
            let Ok(Some(first)) = first else {
                return false;
            };
            first.into_inner().run();
            // Whatever else is due now, without waiting.
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            loop {
                let next = self.queue.lock().unwrap().poll_expired(&mut cx);
                match next {
                    std::task::Poll::Ready(Some(expired)) => expired.into_inner().run(),
                    _ => return true,
                }
            }
        })
    }

    fn size(&self) -> usize {
        self.queue.lock().unwrap().len()
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

/// Process CPU time (user + system, all threads) in nanoseconds, from the per-thread
/// scheduler statistics in `/proc/self/task/*/schedstat`. Threads that already exited are
/// not counted, so take both readings while the threads of interest are alive.
pub(crate) fn process_cpu_ns() -> u64 {
    let mut total = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
                total += stat
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// Criterion samples per case: `full`, or 10 for a quick run.
pub(crate) fn samples(full: usize) -> usize {
    if quick() { 10 } else { full }
}

/// The criterion settings of every bench: `full` samples of 2 s after 0.5 s of warm-up,
/// or 10 samples of 0.3 s for a quick run.
pub(crate) fn criterion_config(full: usize) -> criterion::Criterion {
    let (warm_up, measure) = if quick() {
        (Duration::from_millis(100), Duration::from_millis(300))
    } else {
        (Duration::from_millis(500), Duration::from_secs(2))
    };
    criterion::Criterion::default()
        .sample_size(samples(full))
        .warm_up_time(warm_up)
        .measurement_time(measure)
}

/// 1, 2, 4, ... threads up to the machine's hardware threads, and that number itself.
pub(crate) fn thread_counts() -> Vec<usize> {
    let most = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut counts: Vec<usize> = (0..)
        .map(|shift| 1 << shift)
        .take_while(|&n| n < most)
        .collect();
    counts.push(most);
    counts
}

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
