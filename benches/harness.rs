//! What every workload runs in: its parameters, its child processes, its tables, the seeded
//! delays, the readings of `/proc` (RSS, CPU time, time waited for a CPU) and the processor's
//! event counters ([`Counters`]).
//!
//! A workload is a function, listed by name in `wheel.rs` or `memory.rs`. It takes its
//! parameters from [`param`] and prints markdown tables: every run's figures, the
//! baseline's from the same run, and the ratio within each run ([`table`]). A workload whose
//! runs must not share a heap runs each in a process of its own ([`in_child`], [`case`]).

// Each binary uses part of it.
#![allow(dead_code)]

use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::AtomicI64;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// A workload: its name on the command line, and its function.
pub(crate) type Workload = (&'static str, fn());

/// The workload running, for its child processes.
static CURRENT: Mutex<&str> = Mutex::new("");

/// Runs the workloads named on the command line (`all`: every one), or lists them.
pub(crate) fn main(workloads: &[Workload]) {
    // Cargo adds `--bench`; parameters are `key=value`.
    let args = std::env::args().skip(1);
    let names: Vec<String> = args
        .filter(|arg| !arg.starts_with('-') && !arg.contains('='))
        .collect();
    if names.is_empty() {
        println!("cargo bench -p timingwheel-benches --bench BINARY -- WORKLOAD [key=value ...]:");
        workloads.iter().for_each(|(name, _)| println!("  {name}"));
    }
    for name in names {
        let chosen = workloads.iter().filter(|w| name == "all" || w.0 == name);
        let chosen: Vec<&Workload> = chosen.collect();
        if chosen.is_empty() {
            eprintln!("no workload {name:?} in this binary");
        }
        for (name, run) in chosen {
            *CURRENT.lock().unwrap() = name;
            if case().is_none() {
                println!("\n## {name}\n");
            }
            run();
        }
    }
}

/// True when `TIMINGWHEEL_BENCH_QUICK` is set to anything but `0` or empty: every workload
/// at a reduced size, in seconds (the smoke test).
pub(crate) fn quick() -> bool {
    std::env::var("TIMINGWHEEL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The parameter `key`: `key=value` on the command line, else the environment's
/// `TIMINGWHEEL_<KEY>`, else `full` (`quick` in a quick run).
pub(crate) fn param<T: FromStr>(key: &str, full: T, quick: T) -> T {
    let prefix = format!("{key}=");
    let given = std::env::args().find_map(|arg| arg.strip_prefix(&prefix).map(str::to_owned));
    let given = given.or_else(|| std::env::var(format!("TIMINGWHEEL_{}", key.to_uppercase())).ok());
    match given {
        Some(v) => parse(key, &v),
        None if self::quick() => quick,
        None => full,
    }
}

/// A comma-separated list parameter (see [`param`]).
pub(crate) fn list<T: FromStr>(key: &str, full: &str, quick: &str) -> Vec<T> {
    let value: String = param(key, full.to_owned(), quick.to_owned());
    value.split(',').map(|v| parse(key, v)).collect()
}

/// `v`, given for `key`, parsed.
fn parse<T: FromStr>(key: &str, v: &str) -> T {
    v.parse().unwrap_or_else(|_| panic!("bad {key}: {v}"))
}

/// The case this process was started to run as a child (`case=...`), if it was.
pub(crate) fn case() -> Option<String> {
    std::env::args().find_map(|arg| arg.strip_prefix("case=").map(str::to_owned))
}

/// Runs `case` of the current workload in a process of its own (this binary, with the same
/// parameters), passes its stderr on, and returns the numbers its stdout holds.
pub(crate) fn in_child(case: &str) -> Vec<f64> {
    let params = std::env::args().skip(1).filter(|arg| arg.contains('='));
    let out = Command::new(std::env::current_exe().expect("own path"))
        .arg(*CURRENT.lock().unwrap())
        .args(params.filter(|arg| !arg.starts_with("case=")))
        .arg(format!("case={case}"))
        .output()
        .expect("run a case");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "case {case} failed: {stderr}");
    eprint!("{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.split_whitespace().map(|v| parse(case, v)).collect()
}

/// Prints a child's figures for [`in_child`].
pub(crate) fn report(figures: &[f64]) {
    let words: Vec<String> = figures.iter().map(f64::to_string).collect();
    println!("{}", words.join(" "));
}

/// Prints one row of a markdown table.
pub(crate) fn row<S: AsRef<str>>(cells: &[S]) {
    let cells: Vec<&str> = cells.iter().map(AsRef::as_ref).collect();
    println!("| {} |", cells.join(" | "));
}

/// Prints a markdown table's header: the first column left-aligned, the others right.
pub(crate) fn header<S: AsRef<str>>(columns: &[S]) {
    row(columns);
    row(&[&["---"][..], &vec!["--:"; columns.len() - 1]].concat());
}

/// The names in `list`, split at `|`.
pub(crate) fn names(list: &str) -> Vec<&str> {
    list.split('|').map(str::trim).collect()
}

/// `v` with two decimals (none for a whole number); `-` for NaN (a figure a side lacks).
pub(crate) fn fmt(v: f64) -> String {
    match v {
        _ if v.is_nan() => "-".to_owned(),
        _ if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        _ => format!("{v:.2}"),
    }
}

/// Prints `title` and a table of `runs` (one figure per side, in `sides`' order, per run):
/// a row per run, then the medians; with `ratios`, the ratio of the first side to each
/// other one within each run (and the median of those ratios).
pub(crate) fn table(title: &str, sides: &[&str], runs: &[Vec<f64>], ratios: bool) {
    println!("\n{title}\n");
    let others = if ratios { sides.len() } else { 1 };
    let mut columns: Vec<String> = ["run"].iter().chain(sides).map(|c| c.to_string()).collect();
    for other in &sides[1..others] {
        columns.push(format!("{} / {other}", sides[0]));
    }
    header(&columns);
    let with_ratios = |run: &Vec<f64>| -> Vec<f64> {
        let ratios = run[1..others].iter().map(|other| run[0] / other);
        run.iter().copied().chain(ratios).collect()
    };
    let all: Vec<Vec<f64>> = runs.iter().map(with_ratios).collect();
    let print = |label: String, figures: &[f64]| {
        let cells = figures.iter().enumerate().map(|(i, &v)| {
            if i < sides.len() || v.is_nan() {
                fmt(v)
            } else {
                format!("{v:.2}×")
            }
        });
        row(&[vec![label], cells.collect()].concat());
    };
    for (at, figures) in all.iter().enumerate() {
        print((at + 1).to_string(), figures);
    }
    if runs.len() > 1 {
        let medians = (0..all[0].len()).map(|i| median(all.iter().map(|f| f[i]).collect()));
        print("median".to_owned(), &medians.collect::<Vec<_>>());
    }
}

/// Prints every run's figures of every side, a row each (`runs[run][side][column]`, the
/// columns' names in `columns`, split at `|`), then, for each column in `compare`, a
/// [`table`] of that figure across the sides, with the ratios.
pub(crate) fn runs_table(columns: &str, sides: &[&str], runs: &[Vec<Vec<f64>>], compare: &[usize]) {
    let columns = names(columns);
    header(&[&["run", "side"], &columns[..]].concat());
    for (at, run) in runs.iter().enumerate() {
        for (side, figures) in sides.iter().zip(run) {
            let label = [(at + 1).to_string(), side.to_string()];
            let cells: Vec<String> = figures.iter().map(|&v| fmt(v)).collect();
            row(&[&label[..], &cells].concat());
        }
    }
    for &c in compare {
        let figures: Vec<Vec<f64>> = runs
            .iter()
            .map(|run| run.iter().map(|side| side[c]).collect())
            .collect();
        table(columns[c], sides, &figures, true);
    }
}

/// Runs `work(t)` on `threads` threads started together; the wall time from the first start
/// to the last end (read by the threads themselves, so a late main thread does not count).
pub(crate) fn on_threads(threads: usize, work: impl Fn(usize) + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let spawn = |t| {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                work(t);
                (start, Instant::now())
            })
        };
        let threads: Vec<_> = (0..threads).map(spawn).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let start = spans.iter().map(|span| span.0).min().unwrap();
    spans.iter().map(|span| span.1).max().unwrap() - start
}

/// `of(side)` of each of `n` sides, from side `round % n` on, so that the sides take turns
/// going first across rounds; the figures in side order.
pub(crate) fn alternating<T>(round: usize, n: usize, mut of: impl FnMut(usize) -> T) -> Vec<T> {
    let order = (0..n).map(|k| (round + k) % n);
    let mut figures: Vec<_> = order.map(|side| (side, of(side))).collect();
    figures.sort_by_key(|figure| figure.0);
    figures.into_iter().map(|figure| figure.1).collect()
}

/// Times `k` calls of `op` (given its call number); ns per call.
pub(crate) fn ns_per(k: usize, mut op: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    (0..k).for_each(&mut op);
    start.elapsed().as_nanos() as f64 / k as f64
}

/// The median of `values` (the upper one for an even count; NaN sorts last).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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

/// `len` delays uniform in `lo..=hi` ms, from [`SEED`].
pub(crate) fn delays(len: usize, lo: i64, hi: i64) -> Vec<i64> {
    let mut rng = Rng::new(SEED);
    (0..len).map(|_| rng.range(lo, hi)).collect()
}

/// A fixed pseudo-random permutation of `0..n` (Fisher-Yates).
pub(crate) fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    order
}

/// Lateness percentile `p` (0..=1) of sorted `values`, by rank.
pub(crate) fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Field `at` (from 0) of the `/proc` file `path`, a number; 0 where it cannot be read.
pub(crate) fn proc_field(path: impl AsRef<std::path::Path>, at: usize) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let field = text.split_whitespace().nth(at);
    field.map_or(0, |v| v.parse().unwrap_or(0))
}

/// `late` sorted, in `unit`s: p50, p99, max; then how many are early (negative).
pub(crate) fn lateness(late: &mut [i64], unit: f64) -> Vec<f64> {
    late.sort_unstable();
    let at = |p| percentile(late, p) as f64 / unit;
    let early = late.iter().filter(|&&l| l < 0).count() as f64;
    vec![at(0.5), at(0.99), at(1.0), early]
}

/// `len` atomics, each `v`.
pub(crate) fn atomics(len: usize, v: i64) -> Vec<AtomicI64> {
    (0..len).map(|_| AtomicI64::new(v)).collect()
}

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub(crate) fn rss_bytes() -> u64 {
    proc_field("/proc/self/statm", 1) * 4096
}

/// Nanoseconds the calling thread has waited for a CPU while runnable (`run_delay`, the
/// second field of `/proc/thread-self/schedstat`; 0 elsewhere).
pub(crate) fn run_delay_ns() -> u64 {
    proc_field("/proc/thread-self/schedstat", 1)
}

/// Hardware events of the calling thread (`perf_event_open`, user space only), where the
/// machine and the kernel let this process count them: a VM without a virtual PMU counts
/// none, and an event the processor lacks is left out.
pub(crate) struct Counters(Vec<(&'static str, perf_event::Counter)>);

impl Counters {
    /// Opens a counter, stopped, for each of its events that this machine counts.
    pub(crate) fn open() -> Counters {
        use perf_event::Builder;
        use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware};
        let miss = |which| Cache {
            which,
            operation: CacheOp::READ,
            result: CacheResult::MISS,
        };
        let events = [
            ("instructions", Builder::new(Hardware::INSTRUCTIONS)),
            ("cycles", Builder::new(Hardware::CPU_CYCLES)),
            ("L1D read misses", Builder::new(miss(CacheId::L1D))),
            ("LLC read misses", Builder::new(miss(CacheId::LL))),
            ("dTLB read misses", Builder::new(miss(CacheId::DTLB))),
        ];
        let open = events
            .into_iter()
            .filter_map(|(name, b)| Some((name, b.build().ok()?)));
        Counters(open.collect())
    }

    /// The events counted, in the order [`count`](Counters::count) returns them.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|(name, _)| *name).collect()
    }

    /// Runs `work`, and returns each event's count over it.
    pub(crate) fn count(&mut self, work: impl FnOnce()) -> Vec<u64> {
        for (_, counter) in &mut self.0 {
            counter
                .reset()
                .and_then(|()| counter.enable())
                .expect("a counter starts");
        }
        work();
        let stop =
            |counter: &mut perf_event::Counter| counter.disable().and_then(|()| counter.read());
        let counts = self
            .0
            .iter_mut()
            .map(|(_, counter)| stop(counter).expect("a counter reads"));
        counts.collect()
    }
}
