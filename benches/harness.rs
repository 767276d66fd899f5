//! What every workload runs in: its parameters, its child processes, its tables, the seeded
//! delays and the readings of the process (RSS, CPU time).
//!
//! A workload is a function, listed by name in `wheel.rs` or `memory.rs`. It takes its
//! parameters from [`param`] and prints markdown tables: every run's figures, the
//! baseline's from the same run, and the ratio within each run ([`table`]). A workload whose
//! runs must not share a heap runs each in a process of its own ([`in_child`], [`case`]).

// Each binary uses part of it.
#![allow(dead_code)]

use std::process::Command;
use std::str::FromStr;
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
    let names: Vec<String> =
        args.filter(|arg| !arg.starts_with('-') && !arg.contains('=')).collect();
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
        Some(v) => v.parse().unwrap_or_else(|_| panic!("{key}={v}: not a valid value")),
        None if self::quick() => quick,
        None => full,
    }
}

/// A comma-separated list parameter (see [`param`]).
pub(crate) fn list<T: FromStr>(key: &str, full: &str, quick: &str) -> Vec<T> {
    let value: String = param(key, full.to_owned(), quick.to_owned());
    let parse = |v: &str| v.parse().unwrap_or_else(|_| panic!("{key}: {v:?} is not valid"));
    value.split(',').map(parse).collect()
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
    stdout.split_whitespace().map(|v| v.parse().expect("a number")).collect()
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
    row(&(0..columns.len()).map(|i| if i == 0 { "---" } else { "--:" }).collect::<Vec<_>>());
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
    columns.extend(sides[1..others].iter().map(|other| format!("{} / {other}", sides[0])));
    header(&columns);
    let with_ratios = |run: &Vec<f64>| -> Vec<f64> {
        let ratios = run[1..others].iter().map(|other| run[0] / other);
        run.iter().copied().chain(ratios).collect()
    };
    let all: Vec<Vec<f64>> = runs.iter().map(with_ratios).collect();
    let print = |label: String, figures: &[f64]| {
        let cells = figures.iter().enumerate().map(|(i, &v)| match i < sides.len() {
            _ if v.is_nan() => "-".to_owned(),
            true => fmt(v),
            false => format!("{v:.2}×"),
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
    let columns: Vec<&str> = columns.split('|').map(str::trim).collect();
    header(&[&["run", "side"], &columns[..]].concat());
    for (at, run) in runs.iter().enumerate() {
        for (side, figures) in sides.iter().zip(run) {
            let cells = figures.iter().map(|&v| fmt(v));
            row(&[vec![(at + 1).to_string(), side.to_string()], cells.collect()].concat());
        }
    }
    for &c in compare {
        let figures = runs.iter().map(|run| run.iter().map(|side| side[c]).collect());
        table(columns[c], sides, &figures.collect::<Vec<_>>(), true);
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
        threads.into_iter().map(|thread| thread.join().unwrap()).collect()
    });
    let start = spans.iter().map(|span| span.0).min().unwrap();
    spans.iter().map(|span| span.1).max().unwrap() - start
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

/// Resident set size of this process in bytes, from `/proc/self/statm`.
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Process CPU time (all live threads) in ns, from `/proc/self/task/*/schedstat`: take both
/// readings while the threads of interest are alive.
pub(crate) fn process_cpu_ns() -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").into_iter().flatten();
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Nanoseconds the calling thread has waited for a CPU while runnable (`run_delay`, the
/// second field of `/proc/thread-self/schedstat`; 0 elsewhere).
pub(crate) fn run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The calling thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`: exact, where `/proc`'s
/// scheduler statistics move only at scheduler ticks).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid, writable `timespec` for the duration of the call, and
    // `CLOCK_THREAD_CPUTIME_ID` is a clock every Linux kernel has. (Bench-only code.)
    #[allow(unsafe_code)]
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime failed");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}
