//! Expiry under load: the harness that `load.rs` (the default
//! allocator) and `load_mimalloc.rs` (mimalloc as the global allocator) both run.
//!
//! One thread adds N timers as fast as it can, delays uniform in 1..=spread ms (fixed seed),
//! with spread = N / 1,000 ms: 10^6 over 1 s, 10^7 over 10 s. Another thread drives the
//! timer with `while !stop { advance_clock(200) }`. Lateness is the instant a task ran minus
//! (the instant just before its `add` + its delay), on `Instant`; a negative one is an early
//! fire. The tasks, as `TIMINGWHEEL_LOAD_TASK` says:
//!
//! - `arc` (default): what users write: a closure that captures an `Arc` of shared state
//!   and bumps a counter in it; every 100th also records its lateness (a probe).
//! - `light`: an 8-byte task struct; every 100th is a probe.
//! - `probe`: every task records its lateness (heavier tasks, and every lateness counted).
//!
//! Each `add` is timed on its own, from the call to its return (the task's `Box` is made
//! just before, and its allocation timed apart: that is the allocator's cost, on the
//! caller's thread, not the timer's). An add longer than 1 ms is checked
//! against the adding thread's scheduler statistics (`run_delay` in
//! `/proc/thread-self/schedstat`, read every 1,024 adds and right after a long one): if the
//! thread waited for a CPU for most of it, the add was preempted, not blocked. The same add
//! loop also runs on a timer nobody drives, for the ratio.
//!
//! Every run is a child process of its own, so no run sees another's heap or threads, and
//! every run's figures are printed; a headline is the worst run, never the best.
//!
//! Timers: the wheel (`SystemTimer::new`; tasks run on its executor thread), a
//! `Mutex<BTreeMap>` timer and tokio-util's `DelayQueue` behind a `Mutex` (both in
//! `common`; their tasks run on the driving thread).
//!
//! ```text
//! cargo bench -p timingwheel-benches --bench load            # the goals' cases, 5 runs each
//! TIMINGWHEEL_LOAD_N=10000000 TIMINGWHEEL_LOAD_TASK=arc TIMINGWHEEL_LOAD_ONLY=wheel \
//!   TIMINGWHEEL_LOAD_RUNS=5 cargo bench -p timingwheel-benches --bench load
//! cargo bench -p timingwheel-benches --bench load_mimalloc   # the same, on mimalloc
//! TIMINGWHEEL_LOAD_DETAIL=1 ...                               # worst lateness per 1/20 of the run
//! TIMINGWHEEL_LOAD_WHEEL_SIZE=512 ...                         # the wheel with another size
//! TIMINGWHEEL_BENCH_QUICK=1 ...                               # N = 10^4, one run: seconds
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::common::{BTreeTimer, BenchTimer, Rng, SEED, TokioTimer, median, quick};
use timingwheel::{SystemTimer, TimerTask, timer_task};

const CASE_VAR: &str = "TIMINGWHEEL_LOAD_CASE";
/// Every this many-th task of the `arc` and `light` kinds is a probe.
const PROBE_EVERY: usize = 100;
/// Timers per second of spread.
const RATE_PER_MS: usize = 1_000;
const NOT_A_PROBE: u32 = u32::MAX;
/// Adds longer than this are looked into.
const LONG_ADD: Duration = Duration::from_millis(1);
/// Adds between two readings of the adding thread's scheduler statistics.
const SCHEDSTAT_EVERY: usize = 1_024;

/// What the tasks are (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskKind {
    Arc,
    Light,
    Probe,
}

impl TaskKind {
    fn parse(name: &str) -> TaskKind {
        match name {
            "arc" => TaskKind::Arc,
            "light" => TaskKind::Light,
            "probe" => TaskKind::Probe,
            other => panic!("unknown task kind {other:?} (arc, light, probe)"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            TaskKind::Arc => "arc",
            TaskKind::Light => "light",
            TaskKind::Probe => "probe",
        }
    }

    fn probe_every(self) -> usize {
        if self == TaskKind::Probe {
            1
        } else {
            PROBE_EVERY
        }
    }
}

/// The origin of every instant recorded here.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn since_origin_ns(at: Instant) -> i64 {
    at.duration_since(origin()).as_nanos() as i64
}

/// What the tasks of one run record (one run per process).
struct Records {
    /// Per probe: its deadline (ns since `origin`), then its lateness.
    deadline_ns: Vec<AtomicI64>,
    lateness_ns: Vec<AtomicI64>,
    ran: AtomicUsize,
    /// When the last task ran (ns since `origin`).
    last_run_ns: AtomicI64,
}

static RECORDS: OnceLock<Records> = OnceLock::new();

fn records() -> &'static Records {
    RECORDS.get().expect("records set up")
}

/// A task's work: records a probe's lateness, counts the task.
fn ran(probe: u32) {
    let records = records();
    let now = since_origin_ns(Instant::now());
    if probe != NOT_A_PROBE {
        let probe = probe as usize;
        let deadline = records.deadline_ns[probe].load(Ordering::Relaxed);
        records.lateness_ns[probe].store(now - deadline, Ordering::Relaxed);
    }
    records.last_run_ns.fetch_max(now, Ordering::Relaxed);
    records.ran.fetch_add(1, Ordering::Release);
}

/// The `light` task: its delay and its probe number, eight bytes.
struct LightTask {
    delay_ms: u32,
    probe: u32,
}

impl TimerTask for LightTask {
    fn delay_ms(&self) -> i64 {
        i64::from(self.delay_ms)
    }

    fn run(self: Box<Self>) {
        ran(self.probe);
    }
}

/// The state an `arc` task's closure shares with every other.
#[derive(Default)]
struct Shared {
    expired: AtomicU64,
}

/// Boxes the task of kind `kind`.
fn make_task(
    kind: TaskKind,
    delay_ms: u32,
    probe: u32,
    shared: &Arc<Shared>,
) -> Box<dyn TimerTask> {
    match kind {
        TaskKind::Arc => {
            let shared = Arc::clone(shared);
            timer_task(i64::from(delay_ms), move || {
                shared.expired.fetch_add(1, Ordering::Relaxed);
                ran(probe);
            })
        }
        TaskKind::Light | TaskKind::Probe => Box::new(LightTask { delay_ms, probe }),
    }
}

/// One run's figures, as a child prints them and the parent reads them.
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    /// Wall time of the add loop, s.
    add_loop_s: f64,
    /// The longest single `add`, µs.
    longest_add_us: f64,
    /// The longest `add` during which the adding thread was not preempted for most of it, µs.
    longest_unpreempted_us: f64,
    /// The longest allocation of a task's `Box` (before its `add`), µs.
    longest_box_us: f64,
    /// Adds over 1 ms.
    long_adds: u64,
    /// Probes' lateness, ms (driven runs only).
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Probes that ran before their deadline.
    early: usize,
    /// How long after the last deadline the last task ran, ms.
    after_last_ms: f64,
}

impl Outcome {
    const FIELDS: usize = 10;

    fn to_line(self) -> String {
        format!(
            "{} {} {} {} {} {} {} {} {} {}",
            self.add_loop_s,
            self.longest_add_us,
            self.longest_unpreempted_us,
            self.longest_box_us,
            self.long_adds,
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.early,
            self.after_last_ms,
        )
    }

    fn from_line(line: &str) -> Outcome {
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|v| v.parse().expect("a number"))
            .collect();
        assert_eq!(f.len(), Outcome::FIELDS, "unexpected case output {line:?}");
        Outcome {
            add_loop_s: f[0],
            longest_add_us: f[1],
            longest_unpreempted_us: f[2],
            longest_box_us: f[3],
            long_adds: f[4] as u64,
            p50_ms: f[5],
            p99_ms: f[6],
            max_ms: f[7],
            early: f[8] as usize,
            after_last_ms: f[9],
        }
    }
}

/// Nanoseconds the calling thread has spent waiting for a CPU while runnable (`run_delay`,
/// the second field of Linux's `/proc/thread-self/schedstat`; 0 elsewhere).
fn run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// What the add loop measured.
struct AddLoop {
    wall: Duration,
    longest: Duration,
    longest_unpreempted: Duration,
    longest_box: Duration,
    long_adds: u64,
    last_deadline_ns: i64,
}

/// Adds `delays.len()` tasks of `kind` to `timer` as fast as one thread can, timing each
/// `add`; records each probe's deadline.
fn add_all<T: BenchTimer>(timer: &T, kind: TaskKind, delays: &[u32]) -> AddLoop {
    let records = records();
    let shared = Arc::new(Shared::default());
    let every = kind.probe_every();
    let _context = timer.enter();
    let mut out = AddLoop {
        wall: Duration::ZERO,
        longest: Duration::ZERO,
        longest_unpreempted: Duration::ZERO,
        longest_box: Duration::ZERO,
        long_adds: 0,
        last_deadline_ns: 0,
    };
    let mut waited_ns = run_delay_ns();
    let start = Instant::now();
    for (i, &delay_ms) in delays.iter().enumerate() {
        let probe = if i % every == 0 {
            (i / every) as u32
        } else {
            NOT_A_PROBE
        };
        let boxing = Instant::now();
        let task = make_task(kind, delay_ms, probe, &shared);
        let before = Instant::now();
        out.longest_box = out.longest_box.max(before - boxing);
        let deadline_ns = since_origin_ns(before) + i64::from(delay_ms) * 1_000_000;
        if probe != NOT_A_PROBE {
            records.deadline_ns[probe as usize].store(deadline_ns, Ordering::Relaxed);
        }
        timer.add(task);
        let took = before.elapsed();
        out.longest = out.longest.max(took);
        if took >= LONG_ADD {
            if std::env::var_os("TIMINGWHEEL_LOAD_TRACE").is_some() {
                eprintln!(
                    "long add {:?} at {:.4} s",
                    took,
                    since_origin_ns(before) as f64 / 1e9
                );
            }
            out.long_adds += 1;
            // Waited for a CPU (since the last reading, which is at most 1,024 adds old)
            // for most of this add: preempted. Otherwise it was blocked or working.
            let now_waited = run_delay_ns();
            let preempted = now_waited.saturating_sub(waited_ns) as u128 * 2 > took.as_nanos();
            if !preempted {
                out.longest_unpreempted = out.longest_unpreempted.max(took);
            }
            waited_ns = now_waited;
        } else if i % SCHEDSTAT_EVERY == 0 {
            waited_ns = run_delay_ns();
        }
        out.last_deadline_ns = out.last_deadline_ns.max(deadline_ns);
    }
    out.wall = start.elapsed();
    out
}

/// Runs one case in this process: `n` tasks of `kind` on a fresh `T`, driven or not.
fn run_case<T: BenchTimer>(
    make: impl FnOnce() -> T,
    n: usize,
    kind: TaskKind,
    driven: bool,
) -> Outcome {
    let _ = origin();
    let probes = n.div_ceil(kind.probe_every());
    let records = RECORDS.get_or_init(|| Records {
        deadline_ns: (0..probes).map(|_| AtomicI64::new(0)).collect(),
        lateness_ns: (0..probes).map(|_| AtomicI64::new(i64::MIN)).collect(),
        ran: AtomicUsize::new(0),
        last_run_ns: AtomicI64::new(0),
    });
    let spread_ms = (n / RATE_PER_MS).max(1) as u64;
    let mut rng = Rng::new(SEED);
    let delays: Vec<u32> = (0..n)
        .map(|_| rng.range(1, spread_ms as i64) as u32)
        .collect();
    let timer = make();
    let added = if driven {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    timer.advance_clock(200);
                }
            });
            let added = add_all(&timer, kind, &delays);
            let give_up = Instant::now() + Duration::from_millis(spread_ms + 60_000);
            while records.ran.load(Ordering::Acquire) < n && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Release);
            added
        })
    } else {
        add_all(&timer, kind, &delays)
    };
    let mut outcome = Outcome {
        add_loop_s: added.wall.as_secs_f64(),
        longest_add_us: added.longest.as_secs_f64() * 1e6,
        longest_unpreempted_us: added.longest_unpreempted.as_secs_f64() * 1e6,
        longest_box_us: added.longest_box.as_secs_f64() * 1e6,
        long_adds: added.long_adds,
        ..Outcome::default()
    };
    if !driven {
        return outcome;
    }
    let ran = records.ran.load(Ordering::Acquire);
    assert_eq!(
        ran, n,
        "only {ran} of {n} tasks ran within a minute of the spread"
    );
    if std::env::var("TIMINGWHEEL_LOAD_DETAIL").is_ok() {
        print_detail(records, spread_ms);
    }
    let mut lateness: Vec<i64> = records
        .lateness_ns
        .iter()
        .map(|l| l.load(Ordering::Relaxed))
        .collect();
    assert!(lateness.iter().all(|&l| l != i64::MIN), "a probe never ran");
    lateness.sort_unstable();
    let pct = |p: f64| lateness[((lateness.len() as f64 * p) as usize).min(lateness.len() - 1)];
    let ms = |ns: i64| ns as f64 / 1e6;
    outcome.p50_ms = ms(pct(0.50));
    outcome.p99_ms = ms(pct(0.99));
    outcome.max_ms = ms(*lateness.last().expect("probes"));
    outcome.early = lateness.iter().filter(|&&l| l < 0).count();
    outcome.after_last_ms =
        ms(records.last_run_ns.load(Ordering::Acquire) - added.last_deadline_ns);
    outcome
}

/// Prints, on stderr, the worst lateness of the probes due in each twentieth of the run:
/// where lateness builds up.
fn print_detail(records: &Records, spread_ms: u64) {
    let first = records
        .deadline_ns
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    let window_ns = (spread_ms as i64 * 1_000_000 / 20).max(1);
    let mut worst = [0i64; 21];
    for (deadline, late) in records.deadline_ns.iter().zip(&records.lateness_ns) {
        let at = ((deadline.load(Ordering::Relaxed) - first) / window_ns).clamp(0, 20) as usize;
        worst[at] = worst[at].max(late.load(Ordering::Relaxed));
    }
    let shown: Vec<String> = worst
        .iter()
        .map(|w| format!("{:.1}", *w as f64 / 1e6))
        .collect();
    eprintln!(
        "worst lateness (ms) per {} ms of deadlines: {}",
        window_ns / 1_000_000,
        shown.join(" ")
    );
}

/// Runs the case `timer:n:task:driven|undriven` (a child process's job), printing its outcome.
fn child(case: &str) {
    let parts: Vec<&str> = case.split(':').collect();
    let (timer, n, kind, driven) = (
        parts[0],
        parts[1].parse().expect("n"),
        TaskKind::parse(parts[2]),
        parts[3] == "driven",
    );
    let outcome = match timer {
        "wheel" => run_case(
            || match std::env::var("TIMINGWHEEL_LOAD_WHEEL_SIZE") {
                Ok(size) => SystemTimer::builder("load")
                    .wheel_size(size.parse().expect("a wheel size"))
                    .build(),
                Err(_) => SystemTimer::new("load"),
            },
            n,
            kind,
            driven,
        ),
        "btree" => run_case(BTreeTimer::new, n, kind, driven),
        "tokio-util" => run_case(TokioTimer::new, n, kind, driven),
        other => panic!("unknown timer {other}"),
    };
    println!("{}", outcome.to_line());
}

/// Runs a case in a child process and returns its outcome.
fn in_child(timer: &str, n: usize, kind: TaskKind, driven: bool) -> Outcome {
    let mode = if driven { "driven" } else { "undriven" };
    let case = format!("{timer}:{n}:{}:{mode}", kind.name());
    let out = Command::new(std::env::current_exe().expect("own path"))
        .env(CASE_VAR, &case)
        .output()
        .expect("run a case");
    assert!(
        out.status.success(),
        "case {case} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    Outcome::from_line(String::from_utf8_lossy(&out.stdout).trim())
}

fn env_list(var: &str) -> Option<Vec<String>> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect())
}

/// One case's table row: every run's figures, and the worst of them.
fn row(timer: &str, n: usize, kind: TaskKind, runs: usize) -> Vec<Outcome> {
    let driven: Vec<Outcome> = (0..runs).map(|_| in_child(timer, n, kind, true)).collect();
    let undriven: Vec<Outcome> = (0..runs).map(|_| in_child(timer, n, kind, false)).collect();
    let worst = |f: fn(&Outcome) -> f64| driven.iter().map(f).fold(f64::MIN, f64::max);
    let med = |rs: &[Outcome], f: fn(&Outcome) -> f64| median(rs.iter().map(f).collect());
    let each: Vec<String> = driven
        .iter()
        .map(|r| {
            format!(
                "{:.2}/{:.2}/{:.2}",
                r.p99_ms,
                r.max_ms,
                r.longest_add_us / 1e3
            )
        })
        .collect();
    let early: usize = driven.iter().map(|r| r.early).sum();
    println!(
        "| {timer:<10} | {:<5} | {n:>10} | {:>7.2} | {:>8.2} | {:>5} | {:>8.2} | {:>8.2} | {:>8.2} | {:>5.2} | {:>4} | {} |",
        kind.name(),
        worst(|r| r.p99_ms),
        worst(|r| r.max_ms),
        early,
        worst(|r| r.longest_add_us) / 1e3,
        worst(|r| r.longest_unpreempted_us) / 1e3,
        worst(|r| r.longest_box_us) / 1e3,
        med(&driven, |r| r.add_loop_s) / med(&undriven, |r| r.add_loop_s),
        driven.iter().map(|r| r.long_adds).sum::<u64>(),
        each.join(", ")
    );
    driven
}

/// The cases: (timer, N, task kind). Default: the goals' cases.
fn cases() -> Vec<(String, usize, TaskKind)> {
    let sizes: Option<Vec<usize>> =
        env_list("TIMINGWHEEL_LOAD_N").map(|ns| ns.iter().map(|n| n.parse().expect("N")).collect());
    let kinds: Option<Vec<TaskKind>> =
        env_list("TIMINGWHEEL_LOAD_TASK").map(|ks| ks.iter().map(|k| TaskKind::parse(k)).collect());
    let timers = env_list("TIMINGWHEEL_LOAD_ONLY")
        .unwrap_or_else(|| ["wheel", "btree"].map(str::to_owned).to_vec());
    let pairs: Vec<(usize, TaskKind)> = match (sizes, kinds) {
        (None, None) if quick() => vec![(10_000, TaskKind::Arc)],
        (None, None) => vec![
            (1_000_000, TaskKind::Light),
            (1_000_000, TaskKind::Probe),
            (10_000_000, TaskKind::Arc),
        ],
        (sizes, kinds) => {
            let sizes = sizes.unwrap_or_else(|| vec![if quick() { 10_000 } else { 1_000_000 }]);
            let kinds = kinds.unwrap_or_else(|| vec![TaskKind::Arc]);
            sizes
                .iter()
                .flat_map(|&n| kinds.iter().map(move |&k| (n, k)))
                .collect()
        }
    };
    pairs
        .into_iter()
        .flat_map(|(n, k)| timers.iter().map(move |t| (t.clone(), n, k)))
        .collect()
}

/// The bench's entry point: runs a child's case, or every case as a parent.
pub(crate) fn main(allocator: &str) {
    if let Ok(case) = std::env::var(CASE_VAR) {
        child(&case);
        return;
    }
    let runs: usize = std::env::var("TIMINGWHEEL_LOAD_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick() { 1 } else { 5 });
    println!(
        "load ({allocator}): N timers added as fast as one thread can, delays uniform in \
         1..=N/1000 ms, driver `while advance_clock(200)`; {runs} runs each, each in a process \
         of its own. Columns are the worst run's (early: the sum); `per run` is \
         p99 / max lateness / longest add, ms."
    );
    if let Ok(tunables) = std::env::var("GLIBC_TUNABLES") {
        println!("GLIBC_TUNABLES={tunables}");
    }
    println!();
    println!(
        "| timer      | task  |          N | p99 ms  |  max ms  | early | longest add ms | not preempted ms | longest Box ms | add ratio | adds > 1 ms | per run |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (timer, n, kind) in cases() {
        row(&timer, n, kind, runs);
    }
    if std::env::var("TIMINGWHEEL_LOAD_N").is_err() {
        idle_table();
    }
}

/// CPU ms the process uses over `window` while a driver loops `advance_clock(200)` on
/// `timer` holding 1,000 timers 60 s out: what an idle timer costs.
fn idle<T: BenchTimer>(timer: &T, window: Duration) -> f64 {
    let handles: Vec<_> = (0..1_000)
        .map(|_| timer.add(crate::common::task(60_000)))
        .collect();
    let stop = AtomicBool::new(false);
    let cpu = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                timer.advance_clock(200);
            }
        });
        // Let the driver reach its steady state, then measure.
        std::thread::sleep(Duration::from_millis(100));
        let before = crate::common::process_cpu_ns();
        std::thread::sleep(window);
        let after = crate::common::process_cpu_ns();
        stop.store(true, Ordering::Release);
        after - before
    });
    for handle in &handles {
        timer.cancel(handle);
    }
    cpu as f64 / 1e6
}

fn idle_table() {
    let window = if quick() {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(3)
    };
    println!();
    println!(
        "idle: 1,000 timers 60 s out, driver loops advance_clock(200) for {window:?}; process CPU time"
    );
    println!();
    println!("| timer  | CPU ms |");
    println!("|---|---:|");
    println!(
        "| wheel  | {:>6.2} |",
        idle(&SystemTimer::new("idle"), window)
    );
    println!("| btree  | {:>6.2} |", idle(&BTreeTimer::new(), window));
}
