//! The everyday path: add, cancel and reschedule against the timers a Rust user would pick
//! instead (`everyday`), where an add's time (`add_parts`) and instructions
//! (`instructions`) go, add + cancel from several threads (`threads`), the lock an add takes
//! (`locks`), and heartbeats by key (`heartbeats`).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use timingwheel::{KeyedTimer, SystemTimer, Timer, TimerTaskEntry, timer_task};
use tokio_util::time::{DelayQueue, delay_queue::Key};

use crate::baselines::{self, BTreeTimer, HeapTimer, TokioTimer, task, tokio_runtime};
use crate::harness::{
    Counters, fmt, header, ns_per, on_threads, param, report, row, shuffled, table,
};
use crate::harness::{Rng, SEED, alternating, case, delays, in_child, list, median, names};

/// The task a user adds: a closure that captures an `Arc`.
type Task = Box<dyn FnOnce() + Send>;

fn closure(shared: &Arc<u64>) -> impl FnOnce() + Send + 'static {
    let shared = Arc::clone(shared);
    move || {
        black_box(&shared);
    }
}

/// The everyday path's delays: uniform in 60-90 s.
fn delay(rng: &mut Rng) -> u64 {
    rng.range(60_000, 90_000) as u64
}

/// A timer driven from one thread, as the `everyday` workload drives it.
trait Peer {
    type Handle;
    /// Whether the peer can move a pending timer ([`Peer::reschedule`]).
    const MOVES: bool = true;
    /// Adds a task that captures `shared`, boxed inside the call, due `delay_ms` from now.
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Self::Handle;
    fn cancel(&mut self, handle: Self::Handle) -> bool;
    fn reschedule(&mut self, _: &mut Self::Handle, _delay_ms: u64) {}
    /// Untimed upkeep between timed chunks (the binary heap purges cancelled items).
    fn upkeep(&mut self) {}
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
    fn reschedule(&mut self, handle: &mut TimerTaskEntry, delay_ms: u64) {
        let moved = self.0.reschedule(handle, delay_ms as i64);
        assert!(moved, "a pending timer moves");
    }
}

/// tokio-util's `DelayQueue`: `&mut`, one thread, inside a runtime (its clock).
struct TokioUtil(DelayQueue<Task>);

impl Peer for TokioUtil {
    type Handle = Key;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Key {
        let task: Task = Box::new(closure(shared));
        self.0.insert(task, Duration::from_millis(delay_ms))
    }
    fn cancel(&mut self, handle: Key) -> bool {
        self.0.try_remove(&handle).is_some()
    }
    fn reschedule(&mut self, handle: &mut Key, delay_ms: u64) {
        self.0.reset(handle, Duration::from_millis(delay_ms));
    }
}

/// nexus-timer's `Wheel`, given `Instant::now() + delay` as its users write it. Its
/// `reschedule` consumes the handle and returns a new one, hence the `Option`.
struct Nexus(nexus_timer::Wheel<Task>);

impl Peer for Nexus {
    type Handle = Option<nexus_timer::TimerHandle<Task>>;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> Self::Handle {
        let task: Task = Box::new(closure(shared));
        let deadline = Instant::now() + Duration::from_millis(delay_ms);
        Some(self.0.schedule(deadline, task))
    }
    fn cancel(&mut self, handle: Self::Handle) -> bool {
        self.0.cancel(handle.expect("a handle")).is_some()
    }
    fn reschedule(&mut self, handle: &mut Self::Handle, delay_ms: u64) {
        let deadline = Instant::now() + Duration::from_millis(delay_ms);
        let old = handle.take().expect("a handle");
        *handle = Some(self.0.reschedule(old, deadline));
    }
}

/// A thread-safe baseline (`baselines.rs`) driven from one thread; it cannot move a timer.
struct Shared<T>(T);

impl<T: baselines::BenchTimer> Peer for Shared<T> {
    type Handle = T::Handle;
    const MOVES: bool = false;
    fn add(&mut self, delay_ms: u64, shared: &Arc<u64>) -> T::Handle {
        self.0.add(timer_task(delay_ms as i64, closure(shared)))
    }
    fn cancel(&mut self, handle: T::Handle) -> bool {
        self.0.cancel(&handle)
    }
    fn upkeep(&mut self) {
        self.0.maintain();
    }
}

/// The figures of `everyday`, in the order [`run`] returns them.
const OPS: [&str; 5] = [
    "`add`: N more adds, every handle kept (the population grows to 2 N)",
    "`add_cancel`: add + cancel pairs",
    "`reschedule`: the next pending timer in key order (their adds') pushed back to 120 s",
    "`reschedule_random`: pushed back to 150 s, in one fixed random order, every peer's",
    "`cancel_add`: a pending timer cancelled and a new one added in its place, in key order",
];

/// The median over `chunks=` (50) chunks of 10^4 calls of `op`, given its call number; ns.
fn chunked<P: Peer>(peer: &mut P, mut op: impl FnMut(&mut P, usize)) -> f64 {
    let chunks = (0..param("chunks", 50, 10)).map(|chunk| {
        let ns = ns_per(10_000, |i| op(peer, chunk * 10_000 + i));
        peer.upkeep();
        ns
    });
    median(chunks.collect())
}

/// One peer's figures at `n` pending: ns per operation, as [`OPS`] lists them.
fn run<P: Peer>(peer: &mut P, n: usize) -> Vec<f64> {
    let (shared, mut rng) = (Arc::new(7), Rng::new(SEED));
    let mut pending: Vec<P::Handle> = (0..n).map(|_| peer.add(delay(&mut rng), &shared)).collect();
    let mut added = Vec::with_capacity(n);
    let add = ns_per(n, |_| added.push(peer.add(delay(&mut rng), &shared)));
    added.into_iter().for_each(|handle| _ = peer.cancel(handle));
    peer.upkeep();
    let add_cancel = chunked(peer, |peer, _| {
        let handle = peer.add(delay(&mut rng), &shared);
        black_box(peer.cancel(handle));
    });
    let shuffle = shuffled(n, SEED);
    // A heartbeat: each move pushes its deadline back (120 s, then 150 s, past every delay).
    let mut moves = |order: &dyn Fn(usize) -> usize, delay_ms: u64| match P::MOVES {
        false => f64::NAN,
        true => chunked(&mut *peer, |peer, k| {
            peer.reschedule(&mut pending[order(k % n)], delay_ms);
        }),
    };
    let (in_order, random) = (moves(&|i| i, 120_000), moves(&|i| shuffle[i], 150_000));
    let cancel_add = chunked(peer, |peer, k| {
        let new = peer.add(delay(&mut rng), &shared);
        black_box(peer.cancel(std::mem::replace(&mut pending[k % n], new)));
    });
    pending.into_iter().for_each(|h| _ = peer.cancel(h));
    vec![add, add_cancel, in_order, random, cancel_add]
}

/// add, add + cancel, reschedule (key order and random order) and cancel + add at N (10^6)
/// pending, the wheel against tokio-util's `DelayQueue` and nexus-timer's `Wheel` (`peers=`
/// may add `btree` and `heap`). Each task is a boxed closure that captures an `Arc`, boxed
/// inside the timed call; every peer reads the clock inside it; delays 60-90 s. Each peer
/// runs in a process of its own per round (none inherits another's heap), in turn.
pub(crate) fn everyday() {
    let n = param("n", 1_000_000, 10_000);
    if let Some(peer) = case() {
        // tokio-util's queue reads its clock through the runtime it was made in.
        let runtime = tokio_runtime();
        let _context = runtime.enter();
        return report(&match peer.as_str() {
            "wheel" => run(&mut Wheel(SystemTimer::new("everyday")), n),
            "tokio-util" => run(&mut TokioUtil(DelayQueue::new()), n),
            "nexus" => run(
                &mut Nexus(nexus_timer::Wheel::unbounded(4096, Instant::now())),
                n,
            ),
            "btree" => run(&mut Shared(BTreeTimer::new()), n),
            "heap" => run(&mut Shared(HeapTimer::new()), n),
            other => panic!("unknown peer {other:?} (wheel, tokio-util, nexus, btree, heap)"),
        });
    }
    let peers: Vec<String> = list("peers", "wheel,tokio-util,nexus", "wheel,tokio-util,nexus");
    let rounds = param("rounds", 3, 1);
    println!("N = {n} pending, handles kept; ns per operation (the median chunk of 10^4 but add)");
    let round = |_| peers.iter().map(|peer| in_child(peer)).collect();
    let figures: Vec<Vec<Vec<f64>>> = (0..rounds).map(round).collect();
    let sides: Vec<&str> = peers.iter().map(String::as_str).collect();
    for (op, title) in OPS.iter().enumerate() {
        let runs: Vec<Vec<f64>> = figures
            .iter()
            .map(|r| r.iter().map(|f| f[op]).collect())
            .collect();
        table(title, &sides, &runs, true);
    }
}

/// Where an add's nanoseconds go, at N (10^6) pending on the wheel: the clock read an `add`
/// makes (an `Instant` against an origin), the task's box (an 8-byte task, allocated and
/// freed), an uncontended parking_lot mutex (an add takes one, its stripe's), an `add` of a
/// task boxed beforehand, a `cancel` alone. The rest of an add is its slot, list and handle.
pub(crate) fn add_parts() {
    const K: usize = 10_000;
    let (n, runs) = (param("n", 1_000_000, 10_000), param("runs", 9, 3));
    let (timer, table_ms) = (SystemTimer::new("add-parts"), delays(1 << 16, 1, 30_000));
    let delay = |i: usize| table_ms[i % table_ms.len()];
    let _pending: Vec<_> = (0..n).map(|i| timer.add(task(delay(i)))).collect();
    let (origin, lock) = (Instant::now(), Mutex::new(0u64));
    let run = |_| {
        let mut tasks: Vec<_> = (0..K).map(|i| Some(task(delay(i)))).collect();
        let mut handles = Vec::with_capacity(K);
        vec![
            ns_per(K, |_| _ = black_box(origin.elapsed())),
            ns_per(K, |i| drop(black_box(task(black_box(delay(i)))))),
            ns_per(K, |_| *black_box(&lock).lock() += 1),
            ns_per(K, |i| handles.push(timer.add(tasks[i].take().unwrap()))),
            ns_per(K, |i| _ = black_box(handles[i].cancel())),
        ]
    };
    let figures: Vec<Vec<f64>> = (0..runs).map(run).collect();
    let parts = names("the clock read | the task's box | a mutex | add, boxed before | cancel");
    let title = format!("N = {n} pending: ns per call (10^4 calls a run)");
    table(&title, &parts, &figures, false);
}

/// Thread scaling: add + cancel pairs from 1, 2, 4, ... `threads` threads (default: the
/// machine's hardware threads) started together, 10^5 pending; each thread adds a chunk of
/// 10^4 (to its own shard, on the wheel), then cancels it, `rounds=` times. M pairs/s of wall
/// time, all threads together; the wheel against the baselines behind one mutex; then the
/// wheel's rate at t threads over its rate at 1 thread, within each run.
pub(crate) fn threads() {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let most = param("threads", cpus, cpus);
    let mut counts: Vec<usize> = (0..).map(|s| 1 << s).take_while(|&t| t < most).collect();
    counts.push(most);
    let runs = param("runs", 3, 1);
    let wheel = SystemTimer::new("threads");
    let (heap, btree, tokio) = (HeapTimer::new(), BTreeTimer::new(), TokioTimer::new());
    let _kept = (populate(&wheel), populate(&heap));
    let _also = (populate(&btree), populate(&tokio));
    let mut rates = vec![Vec::new(); counts.len()];
    for _ in 0..runs {
        for (at, &t) in counts.iter().enumerate() {
            let first = [pairs(&wheel, t), pairs(&heap, t)];
            rates[at].push([first, [pairs(&btree, t), pairs(&tokio, t)]].concat());
        }
    }
    let sides = ["wheel", "heap", "btree", "tokio-util (Mutex)"];
    for (at, t) in counts.iter().enumerate() {
        let title = format!("{t} threads: M add + cancel pairs/s");
        table(&title, &sides, &rates[at], true);
    }
    let names: Vec<String> = counts.iter().map(|t| format!("{t} threads / 1")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let scaling = (0..runs).map(|r| rates.iter().map(|at| at[r][0] / rates[0][r][0]).collect());
    let scaling: Vec<Vec<f64>> = scaling.collect();
    table("the wheel's scaling", &names, &scaling, false);
}

/// 10^5 pending timers on `timer`.
fn populate<T: baselines::BenchTimer>(timer: &T) -> Vec<T::Handle> {
    let _context = timer.enter();
    let delays = delays(100_000, 1, 30_000);
    delays.into_iter().map(|d| timer.add(task(d))).collect()
}

/// `threads` threads each adding then cancelling `rounds=` chunks of 10^4; M pairs/s.
fn pairs<T: baselines::BenchTimer>(timer: &T, threads: usize) -> f64 {
    let (rounds, table) = (param("rounds", 20, 3), delays(1 << 16, 1, 30_000));
    let wall = on_threads(threads, |t| {
        let _context = timer.enter();
        let mut handles = Vec::with_capacity(10_000);
        for at in (0..rounds).map(|round| t * 7919 + round * 10_000) {
            handles.extend((at..at + 10_000).map(|i| timer.add(task(table[i % table.len()]))));
            for handle in handles.drain(..) {
                black_box(timer.cancel(&handle));
            }
        }
    });
    timer.maintain();
    (threads * rounds * 10_000) as f64 / wall.as_secs_f64() / 1e6
}

/// A shard's stand-in: a mutex around its slots.
#[repr(align(128))]
struct Shard(Mutex<Vec<[u64; 4]>>);

/// The locking one `add` does, at 1 and 2 threads (`threads=`), each thread on its own
/// stripe, followed by a 32-byte write into its shard: the crate's lock, whose read side's
/// stripes are the shards' mutexes (one lock), against a `parking_lot::RwLock` read guarding
/// the wheel plus the shard's own mutex (two locks). ns per add's locking, per thread.
pub(crate) fn locks() {
    let (runs, iters) = (param("runs", 7, 3), param("iters", 2_000_000, 200_000));
    let shards: [Shard; 16] = std::array::from_fn(|_| Shard(Mutex::new(vec![[0; 4]; 1024])));
    let wheel = RwLock::new(1u64);
    let own = |t: usize, i: usize| shards[t % 16].0.lock()[i % 1024] = [i as u64, 1, 0, 0];
    let rwlock = |t: usize, i: usize| {
        let tick_ms = wheel.read();
        shards[t % 16].0.lock()[i % 1024] = [i as u64, *tick_ms, 0, 0];
    };
    let ns = |threads, op: &(dyn Fn(usize, usize) + Sync)| {
        let wall = on_threads(threads, |t| (0..iters).for_each(|i| op(t, black_box(i))));
        wall.as_nanos() as f64 / iters as f64
    };
    let sides = ["own striped lock", "RwLock read + mutex"];
    for t in list::<usize>("threads", "1,2", "1,2") {
        let run = |_| vec![ns(t, &own), ns(t, &rwlock)];
        let title = format!("{t} threads: ns per add's locking, per thread");
        table(
            &title,
            &sides,
            &(0..runs).map(run).collect::<Vec<_>>(),
            true,
        );
    }
}

/// The functions `instructions` counts, each `#[inline(never)]`. `counted_harness` is the
/// harness alone (a delay, an `Arc` clone, the task's box made and freed): each other
/// function's operation includes it.
const COUNTED: &str = "counted_harness counted_add counted_cancel counted_add_cancel \
    counted_reschedule counted_add_due counted_tokio_add_cancel counted_nexus_add_cancel";

#[inline(never)]
fn counted_harness(shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    for _ in 0..k {
        drop(black_box(timer_task(delay(rng) as i64, closure(shared))));
    }
}

/// `add`, the handles kept in `out`.
#[inline(never)]
fn counted_add(wheel: &mut Wheel, shared: &Arc<u64>, rng: &mut Rng, out: &mut Vec<TimerTaskEntry>) {
    out.extend((0..10_000).map(|_| wheel.add(delay(rng), shared)));
}

/// `cancel`, the task's free included.
#[inline(never)]
fn counted_cancel(handles: &mut Vec<TimerTaskEntry>) {
    for handle in handles.drain(..) {
        black_box(handle.cancel());
    }
}

#[inline(always)]
fn add_cancel<P: Peer>(peer: &mut P, shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    for _ in 0..k {
        let handle = peer.add(delay(rng), shared);
        black_box(peer.cancel(handle));
    }
}

#[inline(never)]
fn counted_add_cancel(wheel: &mut Wheel, shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    add_cancel(wheel, shared, rng, k);
}

#[inline(never)]
fn counted_tokio_add_cancel(queue: &mut TokioUtil, shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    add_cancel(queue, shared, rng, k);
}

#[inline(never)]
fn counted_nexus_add_cancel(wheel: &mut Nexus, shared: &Arc<u64>, rng: &mut Rng, k: usize) {
    add_cancel(wheel, shared, rng, k);
}

/// `reschedule` of each handle, in key order, pushed back (a heartbeat).
#[inline(never)]
fn counted_reschedule(wheel: &mut Wheel, handles: &mut [TimerTaskEntry]) {
    handles
        .iter_mut()
        .for_each(|h| wheel.reschedule(h, 120_000));
}

/// `add` of a task already due: to the executor inside `add`.
#[inline(never)]
fn counted_add_due(wheel: &mut Wheel, shared: &Arc<u64>, k: usize) {
    (0..k).for_each(|_| _ = black_box(wheel.add(0, shared)));
}

/// The run `instructions` counts in: N pending (handles kept) on each timer, then N
/// operations of each kind.
fn counted_run(n: usize) {
    let (arc, mut rng) = (Arc::new(7), Rng::new(SEED));
    let mut wheel = Wheel(SystemTimer::new("instructions"));
    let mut pending: Vec<_> = (0..n).map(|_| wheel.add(delay(&mut rng), &arc)).collect();
    counted_harness(&arc, &mut rng, n);
    let mut handles = Vec::with_capacity(10_000);
    for _ in 0..n / 10_000 {
        counted_add(&mut wheel, &arc, &mut rng, &mut handles);
        counted_cancel(&mut handles);
    }
    counted_add_cancel(&mut wheel, &arc, &mut rng, n);
    counted_reschedule(&mut wheel, &mut pending);
    counted_add_due(&mut wheel, &arc, n);
    let runtime = tokio_runtime();
    let _context = runtime.enter();
    let mut queue = TokioUtil(DelayQueue::new());
    let mut nexus = Nexus(nexus_timer::Wheel::unbounded(4096, Instant::now()));
    let keys: Vec<_> = (0..n).map(|_| queue.add(delay(&mut rng), &arc)).collect();
    let kept: Vec<_> = (0..n).map(|_| nexus.add(delay(&mut rng), &arc)).collect();
    counted_tokio_add_cancel(&mut queue, &arc, &mut rng, n);
    counted_nexus_add_cancel(&mut nexus, &arc, &mut rng, n);
    black_box((&pending, &keys, &kept));
    // Skips the drops: they are not counted.
    std::process::exit(0);
}

/// Instructions per operation under callgrind (stable on a noisy machine): this binary runs
/// under `valgrind --tool=callgrind` once per function of [`COUNTED`], collecting inside it
/// only; N (10^5) pending, N operations, tasks as in `everyday`. Needs `valgrind`.
pub(crate) fn instructions() {
    let n = param("n", 100_000, 10_000);
    if case().is_some() {
        return counted_run(n);
    }
    let params: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg.contains('='))
        .collect();
    let count = |function: &str| {
        let out = std::env::temp_dir().join(format!("callgrind.{function}.{}", std::process::id()));
        let run = std::process::Command::new("valgrind")
            .args(["--tool=callgrind", "--collect-atstart=no"])
            .arg(format!("--toggle-collect=*everyday::{function}"))
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(std::env::current_exe().expect("own path"))
            .args(["instructions", "case=run"])
            .args(&params)
            .output()
            .expect("valgrind on the PATH");
        let _ = std::fs::remove_file(out);
        let stderr = String::from_utf8_lossy(&run.stderr);
        let collected = stderr.lines().find_map(|l| l.split("Collected : ").nth(1));
        let count: f64 = collected.expect(&stderr).trim().parse().expect("a count");
        count / n as f64
    };
    let functions: Vec<&str> = COUNTED.split(' ').collect();
    let counts: Vec<f64> = functions.iter().map(|function| count(function)).collect();
    let title = format!("N = {n}: instructions per operation");
    table(&title, &functions, std::slice::from_ref(&counts), false);
    let pairs = [counts[3], counts[6], counts[7]].to_vec();
    let sides = ["wheel", "tokio-util", "nexus"];
    let title = "add + cancel: instructions per pair";
    table(title, &sides, &[pairs], true);
}

/// One way to move session `i`'s timeout.
trait Heartbeat: Sync {
    fn beat(&self, i: usize, delay_ms: i64);
}

/// `Timer::reschedule` of the handles the caller keeps: the floor, no key lookup.
struct Plain(SystemTimer, Vec<TimerTaskEntry>);

impl Heartbeat for Plain {
    fn beat(&self, i: usize, delay_ms: i64) {
        assert!(self.0.reschedule(&self.1[i], delay_ms));
    }
}

/// A keyed timer whose keys are the sessions' ids; with `true`, by `schedule` of a new task
/// (the heartbeat before `reschedule` existed) rather than `reschedule`.
struct Keyed(KeyedTimer<u64>, Arc<Vec<u64>>, bool);

impl Heartbeat for Keyed {
    fn beat(&self, i: usize, delay_ms: i64) {
        match self.2 {
            true => self.0.schedule(self.1[i], task(delay_ms)),
            false => assert!(self.0.reschedule(&self.1[i], delay_ms)),
        }
    }
}

/// tokio-util's `DelayQueue` with a `HashMap` from session id to its key, behind a mutex.
struct TokioKeyed(Mutex<(DelayQueue<u64>, HashMap<u64, Key>)>, Arc<Vec<u64>>);

impl Heartbeat for TokioKeyed {
    fn beat(&self, i: usize, delay_ms: i64) {
        let (queue, keys) = &mut *self.0.lock();
        queue.reset(&keys[&self.1[i]], Duration::from_millis(delay_ms as u64));
    }
}

/// One pass over `order`, each heartbeat setting the session timeout (10 s) anew: a later
/// deadline than the last one; ns each.
fn pass(side: &dyn Heartbeat, order: &[usize]) -> f64 {
    ns_per(order.len(), |k| side.beat(order[k], 10_000))
}

/// `len` words linked into one cycle in random order: following it, from any word, is a
/// chain of dependent reads at random, each a cache miss (and a TLB miss) once the chain is
/// far larger than the caches.
fn random_chain(len: usize) -> Vec<usize> {
    let order = shuffled(len, SEED);
    let mut next = vec![0; len];
    for (k, &i) in order.iter().enumerate() {
        next[i] = order[(k + 1) % len];
    }
    next
}

/// Where a heartbeat's nanoseconds go: each side's hardware events over one pass in `order`,
/// per heartbeat (the pass's own reads, of `order` in sequence and of the session's id or
/// handle at random, included), where the machine counts them.
fn events_per_heartbeat(sides: &[&dyn Heartbeat], labels: &[&str], order: &[usize]) {
    let mut counters = Counters::open();
    let events = counters.names();
    if events.is_empty() {
        return println!("\nNo hardware events to count here (`perf_event_open`).");
    }
    let counts: Vec<Vec<u64>> = sides
        .iter()
        .map(|side| counters.count(|| _ = pass(*side, order)))
        .collect();
    println!("\nHardware events per heartbeat, random order, one pass each\n");
    header(&[&["event"][..], labels].concat());
    for (e, event) in events.iter().enumerate() {
        let per = counts.iter().map(|c| fmt(c[e] as f64 / order.len() as f64));
        row(&std::iter::once(event.to_string())
            .chain(per)
            .collect::<Vec<_>>());
    }
}

/// Session heartbeats: one timeout per session key, pushed back at every heartbeat to the
/// session timeout (10 s) from now; N (10^6) sessions, first scheduled 1-10,000 ms out,
/// nothing driven. `KeyedTimer::reschedule` against tokio-util's
/// `reset` (a `HashMap` from key to its `Key`, behind a mutex), `Timer::reschedule` of
/// handles the caller keeps, and `KeyedTimer::schedule` of a new task; every side scheduled
/// by two threads (session i by thread i % 2). Per heartbeat: a pass over the sessions in one
/// fixed random order per round (then one in key order), beside one dependent read at random
/// (a pointer chase over `chain_mib=` 256 MiB: what one miss costs here), and hardware events
/// per heartbeat where the machine counts them; throughput: two threads on disjoint halves,
/// heartbeats per second. The sides alternate within each round.
pub(crate) fn heartbeats() {
    let n = param("n", 1_000_000, 10_000);
    let (rounds, passes) = (param("rounds", 9, 3), param("passes", 4, 20));
    let mut rng = Rng::new(SEED ^ 0x5E55);
    let ids: Arc<Vec<u64>> = Arc::new((0..n).map(|_| rng.next_u64()).collect());
    let (delays, runtime) = (delays(1 << 16, 1, 10_000), tokio_runtime());
    let _context = runtime.enter();
    let keyed = || KeyedTimer::new(Arc::new(SystemTimer::new("keyed")));
    let by_key = Keyed(keyed(), ids.clone(), false);
    let by_schedule = Keyed(keyed(), ids.clone(), true);
    let queue = (DelayQueue::with_capacity(n), HashMap::with_capacity(n));
    let tokio = TokioKeyed(Mutex::new(queue), ids.clone());
    let (timer, plain) = (SystemTimer::new("plain"), Mutex::new(Vec::with_capacity(n)));
    on_threads(2, |t| {
        let _context = runtime.enter();
        for (i, id) in ids.iter().enumerate().skip(t).step_by(2) {
            let delay = delays[i % delays.len()];
            by_key.0.schedule(*id, task(delay));
            by_schedule.0.schedule(*id, task(delay));
            let (queue, keys) = &mut *tokio.0.lock();
            keys.insert(*id, queue.insert(*id, Duration::from_millis(delay as u64)));
            plain.lock().push((i, timer.add(task(delay))));
        }
    });
    let mut handles = plain.into_inner();
    handles.sort_by_key(|(i, _)| *i);
    let plain = Plain(timer, handles.into_iter().map(|(_, h)| h).collect());
    let sides: [&dyn Heartbeat; 4] = [&by_key, &tokio, &plain, &by_schedule];
    let labels = names(
        "KeyedTimer::reschedule | tokio-util reset | Timer::reschedule | KeyedTimer::schedule",
    );
    let order = shuffled(n, SEED);
    for side in sides {
        pass(side, &order);
    }
    // The unit a heartbeat at random is made of, read in every round beside the sides.
    let (chain, mut at) = (random_chain(param("chain_mib", 256, 16) << 17), 0);
    let ns = (0..rounds).map(|r| {
        let mut figures = alternating(r, 4, |s| pass(sides[s], &order));
        figures.push(ns_per(1_000_000, |_| at = black_box(chain[at])));
        figures
    });
    let title = format!("{n} sessions in random order: ns per heartbeat");
    let chase = [&labels[..], &["one dependent read"]].concat();
    table(&title, &chase, &ns.collect::<Vec<_>>(), true);
    events_per_heartbeat(&sides, &labels, &order);
    let all: Vec<usize> = (0..n).collect();
    let in_key_order = [sides.map(|side| pass(side, &all)).to_vec()];
    let title = "in key order, one round: ns per heartbeat";
    table(title, &labels, &in_key_order, true);
    let half = |t: usize| {
        shuffled(n / 2, SEED + t as u64)
            .into_iter()
            .map(|k| 2 * k + t)
            .collect()
    };
    let halves: [Vec<usize>; 2] = [half(0), half(1)];
    let two_threads = |side: &dyn Heartbeat| {
        let wall = on_threads(2, |t| {
            let _context = runtime.enter();
            for _ in 0..passes {
                pass(side, &halves[t]);
            }
        });
        (passes * n) as f64 / wall.as_secs_f64() / 1e6
    };
    let rates = (0..rounds).map(|r| alternating(r, 4, |s| two_threads(sides[s])));
    let title = format!("two threads on disjoint halves, {passes} passes each: M heartbeats/s");
    table(&title, &labels, &rates.collect::<Vec<_>>(), true);
}
