//! Expiry: timers expiring while more are added (`load`), where expired tasks run
//! (`executors`), the purgatory (`purgatory`), one driver for many timers
//! (`shared_driver`), heartbeating sessions (`sessions`), and how late async sleeps wake on
//! a busy runtime (`async_wakes`).

use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use threadpool::ThreadPool;
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, TimerTaskEntry};
use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer, TimerTask, WorkerTimer};
use timingwheel::{crossbeam_channel, send_task, timer_task};

use crate::baselines::{self, BTreeTimer, HeapTimer, TokioTimer, task};
use crate::harness::{
    Rng, SEED, alternating, atomics, case, fmt, header, in_child, lateness, list, names,
};
use crate::harness::{
    ns_per, on_threads, param, proc_field, report, row, run_delay_ns, runs_table, table,
};

/// ns since the first call: the clock of the instants `load` records.
fn since_origin_ns(at: Instant) -> i64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    at.duration_since(*ORIGIN.get_or_init(Instant::now))
        .as_nanos() as i64
}

/// What the probes of a `load` run record (one run per process): each one's deadline and
/// lateness (ns), the tasks that ran, and when the last one did.
struct Records(Vec<AtomicI64>, Vec<AtomicI64>, AtomicUsize, AtomicI64);

static RECORDS: OnceLock<Records> = OnceLock::new();

/// Not a probe.
const NO_PROBE: u32 = u32::MAX;

/// A `load` task's work: records a probe's lateness, counts the task.
fn ran(probe: u32) {
    let records = RECORDS.get().expect("records set up");
    let now = since_origin_ns(Instant::now());
    if probe != NO_PROBE {
        let deadline = records.0[probe as usize].load(Relaxed);
        records.1[probe as usize].store(now - deadline, Relaxed);
    }
    records.3.fetch_max(now, Relaxed);
    records.2.fetch_add(1, Release);
}

/// The `light` task: its delay and its probe number, eight bytes.
struct LightTask(u32, u32);

impl TimerTask for LightTask {
    fn delay_ms(&self) -> i64 {
        i64::from(self.0)
    }
    fn run(self: Box<Self>) {
        ran(self.1);
    }
}

/// Adds a task of `kind` per delay to `timer` as fast as one thread can, timing each `add`
/// (the task's box is made just before it, and timed apart); records each probe's deadline.
/// Returns the loop's wall time, the longest add, the longest one not preempted (the thread
/// did not wait for a CPU for most of it) and the longest box (ms), the adds over 1 ms; and
/// the last deadline (ns).
fn add_all<T: baselines::BenchTimer>(timer: &T, kind: &str, delays: &[u32]) -> (Vec<f64>, i64) {
    let (records, shared) = (RECORDS.get().expect("set up"), Arc::new(AtomicU64::new(0)));
    let every = if kind == "probe" { 1 } else { 100 };
    let _context = timer.enter();
    let mut longest = [Duration::ZERO; 3];
    let (mut long_adds, mut last_deadline_ns, mut waited_ns) = (0, 0, run_delay_ns());
    let start = Instant::now();
    for (i, &delay_ms) in delays.iter().enumerate() {
        let probe = if i % every == 0 {
            (i / every) as u32
        } else {
            NO_PROBE
        };
        let boxing = Instant::now();
        let task: Box<dyn TimerTask> = match kind {
            "arc" => {
                let shared = Arc::clone(&shared);
                timer_task(i64::from(delay_ms), move || {
                    shared.fetch_add(1, Relaxed);
                    ran(probe);
                })
            }
            _ => Box::new(LightTask(delay_ms, probe)),
        };
        let before = Instant::now();
        longest[2] = longest[2].max(before - boxing);
        let deadline_ns = since_origin_ns(before) + i64::from(delay_ms) * 1_000_000;
        if probe != NO_PROBE {
            records.0[probe as usize].store(deadline_ns, Relaxed);
        }
        timer.add(task);
        let took = before.elapsed();
        longest[0] = longest[0].max(took);
        if took >= Duration::from_millis(1) {
            long_adds += 1;
            // Waited for a CPU since the last reading (at most 1,024 adds old) for most of
            // the add: preempted; otherwise blocked or working.
            let now_waited = run_delay_ns();
            if (now_waited.saturating_sub(waited_ns) as u128) * 2 <= took.as_nanos() {
                longest[1] = longest[1].max(took);
            }
            waited_ns = now_waited;
        } else if i % 1024 == 0 {
            waited_ns = run_delay_ns();
        }
        last_deadline_ns = last_deadline_ns.max(deadline_ns);
    }
    let mut figures = vec![start.elapsed().as_secs_f64() * 1e3];
    figures.extend(longest.map(|d| d.as_secs_f64() * 1e3));
    figures.push(long_adds as f64);
    (figures, last_deadline_ns)
}

/// One `load` run in this process: `n` tasks of `kind` on `timer`, driven by a thread
/// looping `advance_clock(200)` or not driven; the add loop's figures, then (driven) lateness
/// p50, p99, max (ms), the early probes, and the last run after the last deadline (ms).
fn load_run<T: baselines::BenchTimer>(timer: T, n: usize, kind: &str, driven: bool) -> Vec<f64> {
    let probes = n.div_ceil(if kind == "probe" { 1 } else { 100 });
    let (deadlines, late) = (atomics(probes, 0), atomics(probes, i64::MIN));
    let (done, last) = (AtomicUsize::new(0), AtomicI64::new(0));
    let records = RECORDS.get_or_init(|| Records(deadlines, late, done, last));
    since_origin_ns(Instant::now());
    let spread_ms = (n / 1_000).max(1) as i64;
    let mut rng = Rng::new(SEED);
    let delays: Vec<u32> = (0..n).map(|_| rng.range(1, spread_ms) as u32).collect();
    if !driven {
        return add_all(&timer, kind, &delays).0;
    }
    let stop = AtomicBool::new(false);
    let (mut figures, last_deadline_ns) = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Acquire) {
                timer.advance_clock(200);
            }
        });
        let added = add_all(&timer, kind, &delays);
        let give_up = Instant::now() + Duration::from_millis(spread_ms as u64 + 60_000);
        while records.2.load(Acquire) < n && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Release);
        added
    });
    let ran = records.2.load(Acquire);
    assert_eq!(ran, n, "{ran} of {n} ran within a minute of the spread");
    let mut late: Vec<i64> = records.1.iter().map(|l| l.load(Relaxed)).collect();
    assert!(late.iter().all(|&l| l != i64::MIN), "a probe never ran");
    figures.extend(lateness(&mut late, 1e6));
    figures.push((records.3.load(Acquire) - last_deadline_ns) as f64 / 1e6);
    figures
}

/// Expiry under load: one thread adds N timers as fast as it can, delays uniform in
/// 1..=N/1,000 ms (10^6 over 1 s, 10^7 over 10 s), while another loops `advance_clock(200)`.
/// Lateness is the instant a task ran minus (the instant before its `add` + its delay),
/// over the probes; negative is early. Tasks (`cases=N:kind,...`): `arc`, a closure that
/// captures an `Arc` (every 100th a probe); `light`, an 8-byte struct (every 100th a probe);
/// `probe`, every task a probe. The add loop runs again on a timer nobody drives, for the
/// add ratio. Timers: `timers=` of wheel, btree, heap, tokio-util. Every run of every timer
/// is a process of its own.
pub(crate) fn load() {
    if let Some(case) = case() {
        let parts: Vec<&str> = case.split(':').collect();
        let (n, kind, driven) = (parts[1].parse().expect("N"), parts[2], parts[3] == "driven");
        return report(&match parts[0] {
            "wheel" => load_run(SystemTimer::new("load"), n, kind, driven),
            "btree" => load_run(BTreeTimer::new(), n, kind, driven),
            "heap" => load_run(HeapTimer::new(), n, kind, driven),
            _ => load_run(TokioTimer::new(), n, kind, driven),
        });
    }
    let default = "1000000:light,1000000:probe,10000000:arc";
    let cases: Vec<String> = list("cases", default, "10000:arc");
    let timers: Vec<String> = list("timers", "wheel,btree,heap", "wheel,btree,heap");
    let runs = param("runs", 5, 1);
    if let Ok(tunables) = std::env::var("GLIBC_TUNABLES") {
        println!("GLIBC_TUNABLES={tunables}");
    }
    let sides: Vec<&str> = timers.iter().map(String::as_str).collect();
    let columns = "add loop ms | longest add ms | not preempted ms | longest Box ms \
        | adds > 1 ms | p50 ms | p99 ms | max ms | early | last run after last deadline ms \
        | add ratio";
    for case in cases {
        println!("\n{case}, {runs} runs\n");
        let run = |timer: &String| {
            let mut driven = in_child(&format!("{timer}:{case}:driven"));
            let undriven = in_child(&format!("{timer}:{case}:undriven"));
            driven.push(driven[0] / undriven[0]);
            driven
        };
        let all = |_| timers.iter().map(run).collect();
        let figures: Vec<_> = (0..runs).map(all).collect();
        runs_table(columns, &sides, &figures, &[6, 7, 1]);
    }
}

/// `rounds` xorshift rounds: the work of one task in `executors`.
fn work(id: u64, rounds: u32) -> u64 {
    let mut x = id | 1;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// N tasks due 20 ms out, each doing `rounds` of work and counting itself, run through
/// `case`'s executor; ns per task from the moment they are due to the last one's end.
fn executors_run(case: &str, n: u64, rounds: u32) -> f64 {
    let builder = SystemTimer::builder("executors");
    let pool = case
        .strip_prefix("threadpool-")
        .map(|t| ThreadPool::new(t.parse().unwrap()));
    let timer = match case {
        "threads-1" | "send_task-4" => builder.build(),
        "threads-2" => builder.executor_threads(2).build(),
        "inline" => builder.executor(|job| job()).build(),
        "threads-1-bounded" => builder.max_in_flight(64).build(),
        _ => builder.threadpool(pool.clone().expect("a case")).build(),
    };
    let (ran, (tx, rx)) = (Arc::new(AtomicU64::new(0)), crossbeam_channel::unbounded());
    let took = thread::scope(|s| {
        for _ in 0..if case == "send_task-4" { 4 } else { 0 } {
            let (rx, ran) = (rx.clone(), &ran);
            s.spawn(move || {
                rx.iter()
                    .for_each(|id| _ = (work(id, rounds), ran.fetch_add(1, Relaxed)))
            });
        }
        let due = Instant::now() + Duration::from_millis(21);
        for id in 0..n {
            let ran = Arc::clone(&ran);
            timer.add(match case {
                "send_task-4" => send_task(20, tx.clone(), id),
                _ => timer_task(20, move || {
                    _ = (work(id, rounds), ran.fetch_add(1, Relaxed))
                }),
            });
        }
        drop(tx);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let start = Instant::now();
        while ran.load(Acquire) < n {
            timer.advance_clock(1);
        }
        start.elapsed()
    });
    timer.close();
    pool.inspect(ThreadPool::join);
    took.as_nanos() as f64 / n as f64
}

/// Where expiries run, the cost per task: the built-in pool of 1 and 2 threads, a
/// `threadpool::ThreadPool` of 1 and 2, an inline executor, the built-in pool with
/// `max_in_flight(64)`, and `send_task` of each expiry into a `crossbeam-channel` that 4
/// worker threads drain (the task's work on them, not on the executor). N tasks (2 × 10^5)
/// due together, each doing `work=` rounds of xorshift (0; e.g. `work=0,200,2000`, a table
/// each); ns per task from the moment they are due to the last one's end; the cases
/// alternate. `case=NAME` runs one case alone (to count its instructions under callgrind).
pub(crate) fn executors() {
    let n = param("n", 200_000, 10_000);
    let works: Vec<u32> = list("work", "0", "0");
    if let Some(case) = case() {
        let ns = executors_run(&case, n, works[0]);
        return println!("{case}: {ns:.1} ns per task");
    }
    let cases = names(
        "threads-1 | threads-2 | threadpool-1 | threadpool-2 | inline | threads-1-bounded | send_task-4",
    );
    for rounds in works {
        let work_ns = ns_per(20_000, |id| _ = work(id as u64, rounds));
        let run = |_| cases.iter().map(|c| executors_run(c, n, rounds)).collect();
        let figures: Vec<Vec<f64>> = (0..param("runs", 7, 1)).map(run).collect();
        let title = format!(
            "N = {n} due together, {rounds} rounds of work ({work_ns:.0} ns) each: ns per task"
        );
        table(&title, &cases, &figures, true);
    }
}

/// Every purgatory operation's timeout: beyond the run, so completion always cancels it.
const TIMEOUT_MS: i64 = 30_000;

/// What `purgatory` does with a purgatory.
trait BenchPurgatory: Sync {
    type Op;
    /// A new operation, not completable yet.
    fn operation(&self) -> Self::Op;
    /// Watches `op` under `keys`, with its timeout.
    fn watch(&self, op: &Self::Op, keys: &[u64]);
    /// Makes `op` completable.
    fn acknowledge(op: &Self::Op);
    /// Completes what it can under `key`; returns how many.
    fn check_and_complete(&self, key: u64) -> usize;
}

/// The crate's operation: completable once acknowledged.
struct Produce(AtomicBool);

impl DelayedOperation for Produce {
    fn delay_ms(&self) -> i64 {
        TIMEOUT_MS
    }
    fn try_complete(&self) -> bool {
        self.0.load(Acquire)
    }
    fn on_complete(&self) {
        black_box(self);
    }
    fn on_expiration(&self) {}
}

impl BenchPurgatory for DelayedOperationPurgatory<u64, Produce> {
    type Op = Delayed<Produce>;
    fn operation(&self) -> Delayed<Produce> {
        Delayed::new(Produce(AtomicBool::new(false)))
    }
    fn watch(&self, op: &Delayed<Produce>, keys: &[u64]) {
        self.try_complete_else_watch(op, keys);
    }
    fn acknowledge(op: &Delayed<Produce>) {
        op.operation().0.store(true, Release);
    }
    fn check_and_complete(&self, key: u64) -> usize {
        DelayedOperationPurgatory::check_and_complete(self, &key)
    }
}

/// The baseline's operation: acknowledged, completed (once, by a swap), and its timeout,
/// cancelled on completion.
#[derive(Default)]
struct PlainOp(AtomicBool, AtomicBool, Mutex<Option<TimerTaskEntry>>);

impl PlainOp {
    fn try_complete(&self) -> bool {
        self.0.load(Acquire) && self.complete()
    }
    fn complete(&self) -> bool {
        let first = !self.1.swap(true, AcqRel);
        if first {
            self.cancel_timeout();
        }
        first
    }
    fn cancel_timeout(&self) {
        if let Some(entry) = self.2.lock().unwrap().take() {
            entry.cancel();
        }
    }
}

/// The baseline: one mutex around one map of watch lists, operations checked under it.
struct MutexPurgatory(Mutex<HashMap<u64, Vec<Arc<PlainOp>>>>, SystemTimerReaper);

impl BenchPurgatory for MutexPurgatory {
    type Op = Arc<PlainOp>;
    fn operation(&self) -> Arc<PlainOp> {
        Arc::default()
    }
    fn watch(&self, op: &Arc<PlainOp>, keys: &[u64]) {
        if op.try_complete() {
            return;
        }
        let mut watchers = self.0.lock().unwrap();
        for key in keys {
            watchers.entry(*key).or_default().push(Arc::clone(op));
        }
        drop(watchers);
        if op.try_complete() {
            return;
        }
        let expiring = Arc::clone(op);
        let task = timer_task(TIMEOUT_MS, move || _ = expiring.complete());
        *op.2.lock().unwrap() = Some(self.1.add(task));
        // Completed meanwhile: its timeout was not there to cancel.
        if op.1.load(Acquire) {
            op.cancel_timeout();
        }
    }
    fn acknowledge(op: &Arc<PlainOp>) {
        op.0.store(true, Release);
    }
    fn check_and_complete(&self, key: u64) -> usize {
        let mut watchers = self.0.lock().unwrap();
        let Some(list) = watchers.get_mut(&key) else {
            return 0;
        };
        let mut completed = 0;
        list.retain(|op| {
            // Dropped once completed: by this check, or before it.
            let was_completed = op.1.load(Acquire);
            let completes = !was_completed && op.try_complete();
            completed += usize::from(completes);
            !was_completed && !completes
        });
        if list.is_empty() {
            watchers.remove(&key);
        }
        completed
    }
}

/// `iters` operations on each of `threads` threads (each on its own 512 keys); M ops/s.
fn purgatory_rate<P: BenchPurgatory>(purgatory: &P, threads: usize, iters: u64) -> f64 {
    let completed = AtomicUsize::new(0);
    let wall = on_threads(threads, |t| {
        let (t, mut done) = (t as u64, 0);
        for i in 0..iters {
            let (key, next) = (t * 512 + i % 512, t * 512 + (i + 1) % 512);
            let op = purgatory.operation();
            purgatory.watch(&op, &[key, next]);
            P::acknowledge(&op);
            done += purgatory.check_and_complete(key);
        }
        completed.fetch_add(done, Relaxed);
    });
    let (ops, completed) = (threads as u64 * iters, completed.into_inner() as u64);
    assert_eq!(completed, ops, "each operation completed by its check");
    ops as f64 / wall.as_secs_f64() / 1e6
}

/// The purgatory: one operation is watched under two keys (a 30 s timeout on a
/// `SystemTimer`), made completable, then completed by `check_and_complete` of its first
/// key, which cancels the timeout; its second key is the next one's first. At 1 and 2
/// threads (`threads=`), against a `Mutex<HashMap<u64, Vec<_>>>` purgatory with the same
/// timer work. M operations/s, all threads together.
pub(crate) fn purgatory() {
    let (runs, iters) = (param("runs", 7, 3), param("iters", 500_000, 20_000));
    let ours = DelayedOperationPurgatory::<u64, Produce>::new("bench", 0);
    let reaper = SystemTimerReaper::new("baseline-reaper", SystemTimer::new("baseline"));
    let baseline = MutexPurgatory(Mutex::default(), reaper);
    let sides = ["timingwheel", "Mutex<HashMap>"];
    for t in list::<usize>("threads", "1,2", "1,2") {
        let run = |_| {
            vec![
                purgatory_rate(&ours, t, iters),
                purgatory_rate(&baseline, t, iters),
            ]
        };
        let figures: Vec<Vec<f64>> = (0..runs).map(run).collect();
        table(
            &format!("{t} threads: M operations/s"),
            &sides,
            &figures,
            true,
        );
    }
    assert_eq!(ours.num_delayed(), 0, "every timeout was cancelled");
    assert_eq!(baseline.1.size(), 0, "every baseline timeout was cancelled");
    ours.shutdown();
    baseline.1.close();
}

/// CPU ns of this process's threads whose name starts with `prefix` (`/proc/self/task`).
fn threads_cpu_ns(prefix: &str) -> u64 {
    let dir = std::fs::read_dir("/proc/self/task");
    let tasks = dir.into_iter().flatten().flatten().map(|task| task.path());
    let comm = |task: &PathBuf| std::fs::read_to_string(task.join("comm")).unwrap_or_default();
    let named = tasks.filter(|task| comm(task).starts_with(prefix));
    named.map(|t| proc_field(t.join("schedstat"), 0)).sum()
}

/// One `shared_driver` run: `timers` timers on one `SharedSystemTimerReaper` (`shared`) or
/// each on a `SystemTimerReaper` of its own (`owning`); `n` tasks added round-robin by one
/// thread as fast as it can, delays uniform in 1..=1,000 ms, every 10th a probe of its
/// lateness. Returns the process's threads, the probes' lateness (ms) p50, p99 and max of
/// the worst timer, the early probes, then the drivers' CPU ms over `idle` with every
/// timer idle (1,000 tasks 60 s out each).
fn shared_driver_run(shared: bool, timers: usize, n: usize, idle: Duration) -> Vec<f64> {
    let per_timer = n / timers / 10 + 1;
    let probes: Vec<_> = (0..timers).map(|_| atomics(per_timer, i64::MIN)).collect();
    let probes = Arc::new(probes);
    let reaper = shared.then(|| timingwheel::SharedSystemTimerReaper::new("driver-shared"));
    let all: Vec<Box<dyn Timer>> = (0..timers)
        .map(|i| -> Box<dyn Timer> {
            let timer = SystemTimer::new(&format!("t{i}"));
            match &reaper {
                Some(reaper) => Box::new(reaper.drive(timer)),
                None => Box::new(SystemTimerReaper::new(&format!("driver-{i}"), timer)),
            }
        })
        .collect();
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count()) as f64;
    let mut rng = Rng::new(SEED);
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..n {
        let (t, delay_ms) = (i % timers, rng.range(1, 1_000));
        let due_ns = since_origin_ns(Instant::now()) + delay_ms * 1_000_000;
        let (probes, ran, probe) = (Arc::clone(&probes), Arc::clone(&ran), i / timers);
        let is_probe = probe % 10 == 0;
        all[t].add(timer_task(delay_ms, move || {
            if is_probe {
                let late = since_origin_ns(Instant::now()) - due_ns;
                probes[t][probe / 10].store(late, Relaxed);
            }
            ran.fetch_add(1, Relaxed);
        }));
    }
    let give_up = Instant::now() + Duration::from_secs(60);
    while ran.load(Relaxed) < n && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ran.load(Relaxed), n, "every task ran");
    let mut figures = vec![threads, f64::NAN, f64::NAN, f64::NAN, 0.0];
    for timer in probes.iter() {
        let mut late: Vec<i64> = timer.iter().map(|l| l.load(Relaxed)).collect();
        late.retain(|&l| l != i64::MIN);
        let late = lateness(&mut late, 1e6);
        (1..4).for_each(|at| figures[at] = figures[at].max(late[at - 1]));
        figures[4] += late[3];
    }
    let _idle: Vec<_> = all
        .iter()
        .flat_map(|timer| (0..1_000).map(|_| timer.add(task(60_000))))
        .collect();
    thread::sleep(Duration::from_millis(300));
    let before = threads_cpu_ns("driver-");
    thread::sleep(idle);
    figures.push((threads_cpu_ns("driver-") - before) as f64 / 1e6);
    all.iter().for_each(|timer| timer.close());
    reaper.iter().for_each(|reaper| reaper.close());
    figures
}

/// Eight timers on one shared driver against eight owning reapers, each side a process of
/// its own per run: 10^6 tasks (`n=`) spread over the timers (`timers=`), added over about a
/// second while they expire over 1 s; threads, the worst timer's lateness p50, p99, max (ms)
/// against the instant of `add` plus the delay, early probes, and the drivers' CPU over 10 s
/// (`idle_ms=`) with every timer idle.
pub(crate) fn shared_driver() {
    let (timers, n) = (param("timers", 8, 8), param("n", 1_000_000, 50_000));
    let idle = Duration::from_millis(param("idle_ms", 10_000, 500));
    if let Some(case) = case() {
        return report(&shared_driver_run(case == "shared", timers, n, idle));
    }
    let sides = ["shared", "owning"];
    let run = |_| sides.map(in_child).to_vec();
    let runs: Vec<_> = (0..param("runs", 3, 1)).map(run).collect();
    let columns =
        "threads | worst p50 ms | worst p99 ms | worst max ms | early | driver CPU ms idle";
    runs_table(columns, &sides, &runs, &[0, 2, 3, 5]);
}

/// A load that looks like sessions: `n=` (10^6) sessions on a `KeyedTimer` over a
/// `SystemTimer` its `SystemTimerReaper` drives, each heartbeating every 3 s (pushing its
/// 10 s timeout back) for `secs=` (60), 2 % of them going silent at a moment spread over
/// the first 30 s. Heartbeats are paced by one thread, a millisecond's share at a time.
/// Prints the heartbeats per second sustained, the driver thread's CPU ms per second, the
/// entries flushes moved on per second and per session per 10 s (a bucket an entry passes:
/// at most once each, however many heartbeats), and the silent sessions' lateness against
/// their last heartbeat plus 10 s (p50, p99, max, ms; negative: early).
pub(crate) fn sessions() {
    let (n, secs) = (param("n", 1_000_000, 20_000), param("secs", 60_u64, 12));
    let (beat_ms, timeout_ms, silent_until_ms) = (3_000_i64, 10_000_i64, secs as i64 * 500);
    let timer = SystemTimer::new("sessions");
    let reaper = Arc::new(SystemTimerReaper::new("sessions-driver", timer));
    let timer = reaper.get_ref::<SystemTimer>().expect("a SystemTimer");
    let sessions = timingwheel::KeyedTimer::<u64>::new(reaper.clone());
    let (origin, mut rng) = (Instant::now(), Rng::new(SEED));
    let now_ns = move || origin.elapsed().as_nanos() as i64;
    // A silent session's last heartbeat, and when each session's timeout ran (ns).
    let (last_beat, fired) = (atomics(n, 0), Arc::new(atomics(n, i64::MIN)));
    let silent_at: Vec<i64> = (0..n)
        .map(|_| match rng.range(0, 49) {
            0 => rng.range(0, silent_until_ms),
            _ => i64::MAX,
        })
        .collect();
    for i in 0..n {
        let fired = Arc::clone(&fired);
        let task = timer_task(timeout_ms, move || fired[i].store(now_ns(), Relaxed));
        sessions.schedule(i as u64, task);
        last_beat[i].store(now_ns(), Relaxed);
    }
    let (cascades_before, cpu_before) = (timer.cascades(), threads_cpu_ns("sessions-driv"));
    let (start, mut beats) = (Instant::now(), 0_u64);
    for ms in 0..secs as i64 * 1_000 {
        let at = start + Duration::from_millis(ms as u64);
        thread::sleep(at.saturating_duration_since(Instant::now()));
        for i in (ms.rem_euclid(beat_ms) as usize..n).step_by(beat_ms as usize) {
            if ms < silent_at[i] && sessions.reschedule(&(i as u64), timeout_ms) {
                last_beat[i].store(now_ns(), Relaxed);
                beats += 1;
            }
        }
    }
    let (wall, end_ns) = (start.elapsed().as_secs_f64(), now_ns());
    let cpu_ms = (threads_cpu_ns("sessions-driv") - cpu_before) as f64 / 1e6;
    let cascades = (timer.cascades() - cascades_before) as f64;
    thread::sleep(Duration::from_millis(timeout_ms as u64 + 500));
    let silent: Vec<usize> = (0..n).filter(|&i| silent_at[i] != i64::MAX).collect();
    let never = silent
        .iter()
        .filter(|&&i| fired[i].load(Relaxed) == i64::MIN)
        .count();
    let mut late: Vec<i64> = silent
        .iter()
        .map(|&i| fired[i].load(Relaxed) - last_beat[i].load(Relaxed))
        .map(|ns| ns - timeout_ms * 1_000_000)
        .collect();
    // A live session expires only once its heartbeats stop with the run.
    let fired_during = |i: usize| (0..end_ns).contains(&fired[i].load(Relaxed));
    let unexpected = (0..n).filter(|&i| silent_at[i] == i64::MAX && fired_during(i));
    println!("\n{n} sessions, {secs} s, {} silent\n", late.len());
    let (late, per_session) = (lateness(&mut late, 1e6), cascades / n as f64 / wall * 10.0);
    header(&["figure", "value"]);
    for (name, value) in [
        ("heartbeats/s", beats as f64 / wall),
        ("driver CPU ms per s", cpu_ms / wall),
        ("entries moved on by flushes per s", cascades / wall),
        ("moves per session per 10 s", per_session),
        ("silent lateness p50 ms", late[0]),
        ("silent lateness p99 ms", late[1]),
        ("silent lateness max ms", late[2]),
        ("silent sessions never expired", never as f64),
        ("early (negative lateness)", late[3]),
        (
            "live sessions that expired during the run",
            unexpected.count() as f64,
        ),
    ] {
        row(&[name.to_owned(), fmt(value)]);
    }
    reaper.close();
}

/// Lateness in µs of the task resumed `now`, due at `due` (negative: early).
fn late_us(now: Instant, due: Instant) -> i64 {
    match now.checked_duration_since(due) {
        Some(late) => late.as_micros() as i64,
        None => -((due - now).as_micros() as i64),
    }
}

/// One `async_wakes` case in this process: wake lateness p50 and p99 (ms) of 1,000 tasks
/// sleeping 10 ms in a loop on a 2-worker runtime, with the burst or not.
fn wakes_case(kind: &str, burst: bool) -> Vec<f64> {
    const SLEEP: Duration = Duration::from_millis(10);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let warm_up = Duration::from_millis(500);
    let measured = Duration::from_millis(param("ms", 4_000, 1_000));
    let work: u64 = param("work", 120, 120);
    let (samples, stop) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(AtomicBool::new(false)),
    );
    let wheel = || Arc::new(SystemTimerReaper::new("reaper", SystemTimer::new("wakes")));
    let reaper = (kind != "tokio").then(wheel);
    runtime.block_on(async {
        let timer: Option<Arc<dyn Timer>> = match (kind, &reaper) {
            ("timingwheel+worker", Some(reaper)) => {
                Some(Arc::new(WorkerTimer::new(Arc::clone(reaper))))
            }
            (_, Some(reaper)) => Some(Arc::clone(reaper) as _),
            _ => None,
        };
        let record_from = Instant::now() + warm_up;
        let mut tasks: Vec<_> = (0..1_000)
            .map(|_| {
                let (timer, samples, stop) =
                    (timer.clone(), Arc::clone(&samples), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    while !stop.load(Relaxed) {
                        let due = Instant::now() + SLEEP;
                        match &timer {
                            Some(timer) => Sleep::new(Arc::clone(timer), SLEEP).await,
                            None => tokio::time::sleep(SLEEP).await,
                        }
                        if Instant::now() >= record_from {
                            mine.push(late_us(Instant::now(), due));
                        }
                    }
                    samples.lock().unwrap().extend(mine);
                })
            })
            .collect();
        if burst {
            let stop = Arc::clone(&stop);
            tasks.push(tokio::spawn(async move {
                while !stop.load(Relaxed) {
                    for i in 0..100_000u64 {
                        // About `work` ns of work per task.
                        tokio::spawn(async move {
                            let mut x = i | 1;
                            for _ in 0..work {
                                x = black_box(x.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (x >> 29));
                            }
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
        tokio::time::sleep(warm_up + measured).await;
        stop.store(true, Relaxed);
        for task in tasks {
            task.await.expect("a sleeper panicked");
        }
    });
    drop(runtime);
    reaper.inspect(|reaper| reaper.close());
    let mut late = std::mem::take(&mut *samples.lock().unwrap());
    lateness(&mut late, 1e3)[..2].to_vec()
}

/// How late async sleeps wake on a busy tokio runtime: 1,000 tasks sleep 10 ms in a loop on a
/// 2-worker runtime; with the burst, a task spawns 100,000 short tasks (`work=` steps, about
/// 0.1 µs) every 50 ms, which overflow a worker's local queue into the global one, where a
/// wake from outside the runtime waits behind them. Kinds: the crate's `Sleep` behind
/// `WorkerTimer` (wakes from a worker), the plain `Sleep` (wakes from the timer's executor
/// thread), tokio's own. 0.5 s warm-up, then 4 s measured (`ms=`); every case a process of
/// its own, the kinds alternating.
pub(crate) fn async_wakes() {
    if let Some(case) = case() {
        let (kind, load) = case.split_once(':').expect("kind:load");
        return report(&wakes_case(kind, load == "burst"));
    }
    let kinds = ["timingwheel+worker", "timingwheel", "tokio"];
    for load in ["burst", "quiet"] {
        let run = |r| {
            alternating(r, kinds.len(), |k| {
                in_child(&format!("{}:{load}", kinds[k]))
            })
        };
        let runs: Vec<_> = (0..param("runs", 3, 1)).map(run).collect();
        println!("\n{load}: lateness of each wake, ms\n");
        runs_table("median ms | p99 ms", &kinds, &runs, &[0, 1]);
    }
}
