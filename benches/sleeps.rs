//! 10^6 concurrent sleeps on a multi-thread tokio runtime: this crate's `Sleep` against
//! `tokio::time::sleep` and `futures_timer::Delay`, in the same run (a bench binary that
//! prints a table, not a criterion micro-benchmark).
//!
//! Each sleep is awaited by a task of its own, as a service awaits a request deadline; the
//! delays are uniform over 10 s (1-11 s from their creation, so that every sleep is still
//! pending when the memory is read). Per kind of sleep, each in fresh child processes:
//!
//! - memory per pending sleep: its size inline (in its task's future), plus what it holds
//!   outside the task: the growth of the allocator's bytes in use (glibc's `mallinfo2`:
//!   chunks as allocated, rounding and headers included) and of the RSS while 10^6 tasks
//!   wait on a sleep, minus the same growth for 10^6 tasks of the very same future type
//!   whose sleep slot is empty (a second process). So tokio's task layout, which rounds a
//!   task up to a multiple of 128 bytes, counts against no kind of sleep;
//! - the cost to create one, poll it once (which registers it: tokio inserts at the first
//!   poll) and drop it, on a worker thread, with delays uniform over 10 s;
//! - lateness: when the task resumed after the sleep, minus its creation instant plus its
//!   delay, over all 10^6; p50, p99 and max, and the minimum (negative would be early).
//!
//! `cargo bench -p timingwheel-benches --bench sleeps`; `TIMINGWHEEL_BENCH_QUICK=1` for
//! 10^5 sleeps over 1 s.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{Rng, SEED, median, quick, rss_bytes};
use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer};

/// The environment variable that makes this binary run one case and print its figures.
const CASE_VAR: &str = "TIMINGWHEEL_SLEEPS_CASE";

/// The kinds of sleep, as the table names them.
const KINDS: [&str; 3] = ["timingwheel", "tokio", "futures-timer"];

/// The workload's sizes.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    sleeps: usize,
    min_delay_ms: u64,
    spread_ms: u64,
    create_drop_rounds: usize,
}

fn sizes() -> Sizes {
    if quick() {
        Sizes {
            sleeps: 100_000,
            min_delay_ms: 500,
            spread_ms: 1_000,
            create_drop_rounds: 20_000,
        }
    } else {
        Sizes {
            sleeps: 1_000_000,
            min_delay_ms: 1_000,
            spread_ms: 10_000,
            create_drop_rounds: 200_000,
        }
    }
}

/// The delays, uniform in `min_delay_ms..min_delay_ms + spread_ms`.
fn delays(sizes: Sizes, len: usize) -> Vec<Duration> {
    let mut rng = Rng::new(SEED);
    let lo = sizes.min_delay_ms as i64;
    (0..len)
        .map(|_| Duration::from_millis(rng.range(lo, lo + sizes.spread_ms as i64 - 1) as u64))
        .collect()
}

/// The allocator's bytes in use: glibc's count over all arenas, small and mmapped chunks.
fn heap_in_use() -> u64 {
    // SAFETY: `mallinfo2` takes no arguments and only reads the allocator's statistics
    // under its own locks; it is safe to call from any thread at any time. (Bench-only code:
    // the library itself stays free of `unsafe`.)
    #[allow(unsafe_code)]
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

/// Creates, polls once (registering it) and drops a sleep per delay; returns ns per sleep
/// (median of 5 rounds).
async fn create_poll_drop<S: Future<Output = ()>>(
    make: &impl Fn(Duration) -> S,
    delays: &[Duration],
) -> f64 {
    let round = || {
        let mut cx = Context::from_waker(Waker::noop());
        let start = Instant::now();
        for &delay in delays {
            let mut sleep = pin!(make(delay));
            let _ = black_box(sleep.as_mut().poll(&mut cx));
        }
        start.elapsed().as_nanos() as f64 / delays.len() as f64
    };
    let mut samples = Vec::new();
    for _ in 0..5 {
        samples.push(round());
        tokio::task::yield_now().await;
    }
    median(samples)
}

/// What the tasks of a case report to.
struct Board {
    /// Each sleep's lateness, µs.
    lateness: Vec<AtomicI64>,
    /// Tasks past their first poll.
    polled: AtomicUsize,
    /// Tasks whose sleep completed.
    done: AtomicUsize,
}

/// The task of one sleep. With `None` it waits forever instead: the same future type, so
/// the same task size, without a sleep (the `alone` phase).
async fn sleeper<S: Future<Output = ()>>(
    sleep: Option<S>,
    due: Instant,
    board: Arc<Board>,
    i: usize,
) {
    let Some(sleep) = sleep else {
        board.polled.fetch_add(1, Ordering::Relaxed);
        return std::future::pending().await;
    };
    let mut sleep = pin!(sleep);
    // Counted once polled: tokio's sleep enters its wheel at the first poll.
    let first = std::future::poll_fn(|cx| {
        let first = sleep.as_mut().poll(cx);
        board.polled.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(first)
    })
    .await;
    if first.is_pending() {
        sleep.await;
    }
    let now = Instant::now();
    let late_us = if now >= due {
        (now - due).as_micros() as i64
    } else {
        -((due - now).as_micros() as i64)
    };
    board.lateness[i].store(late_us, Ordering::Relaxed);
    board.done.fetch_add(1, Ordering::Relaxed);
}

/// Runs a phase of the case whose sleeps `make` makes, and prints its figures:
/// `heap_B rss_B inline_B create_ns p50_us p99_us max_us min_us` for `sleeps`, `heap_B
/// rss_B` for `alone`.
fn run_case<S, M>(kind: &str, alone: bool, runtime: tokio::runtime::Runtime, make: M)
where
    S: Future<Output = ()> + Send + 'static,
    M: Fn(Duration) -> S + Clone + Send + Sync + 'static,
{
    let sizes = sizes();
    let delays = delays(sizes, sizes.sleeps);

    // Warms up (the timers' threads, tables and pools), and times create + poll + drop on
    // a worker thread.
    let create_ns = {
        let (make, rounds) = (make.clone(), delays[..sizes.create_drop_rounds].to_vec());
        runtime.block_on(async move {
            tokio::spawn(async move { create_poll_drop(&make, &rounds).await })
                .await
                .expect("the create-drop task")
        })
    };

    // Each sleep is made here and awaited by a task of its own, which holds it inline.
    let _context = runtime.enter();
    let board = Arc::new(Board {
        lateness: (0..sizes.sleeps).map(|_| AtomicI64::new(0)).collect(),
        polled: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let (heap0, rss0) = (heap_in_use(), rss_bytes());
    let origin = Instant::now();
    for (i, &delay) in delays.iter().enumerate() {
        let due = Instant::now() + delay;
        let sleep = (!alone).then(|| make(delay));
        runtime.spawn(sleeper(sleep, due, Arc::clone(&board), i));
    }
    while board.polled.load(Ordering::Relaxed) < sizes.sleeps {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pending = sizes.sleeps - board.done.load(Ordering::Relaxed);
    let (heap1, rss1) = (heap_in_use(), rss_bytes());
    let created_in = origin.elapsed();
    let per = |before: u64, after: u64| (after as f64 - before as f64) / pending.max(1) as f64;
    let (heap, rss) = (per(heap0, heap1), per(rss0, rss1));
    if alone {
        // Its tasks never end; the process does.
        println!("{heap:.1} {rss:.1}");
        std::process::exit(0);
    }
    let patience =
        Duration::from_millis(sizes.min_delay_ms + sizes.spread_ms) + Duration::from_secs(60);
    while board.done.load(Ordering::Relaxed) < sizes.sleeps {
        assert!(
            origin.elapsed() < patience,
            "{kind}: sleeps still pending after {patience:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut late: Vec<i64> = board
        .lateness
        .iter()
        .map(|l| l.load(Ordering::Relaxed))
        .collect();
    eprintln!(
        "{kind}: lateness p99 by delay, per second: {}",
        by_second(&delays, &late)
    );
    late.sort_unstable();
    let rank = |p: f64| late[((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1];
    eprintln!(
        "{kind}: {} sleeps made and first polled in {created_in:?}, {pending} pending when measured",
        sizes.sleeps
    );
    println!(
        "{heap:.1} {rss:.1} {} {create_ns:.1} {} {} {} {}",
        std::mem::size_of::<S>(),
        rank(0.50),
        rank(0.99),
        late[late.len() - 1],
        late[0]
    );
}

/// The p99 lateness of the sleeps of each whole second of delay: where in the run the
/// late ones are.
fn by_second(delays: &[Duration], late: &[i64]) -> String {
    let mut seconds: Vec<Vec<i64>> = Vec::new();
    for (delay, &late_us) in delays.iter().zip(late) {
        let second = delay.as_secs() as usize;
        if seconds.len() <= second {
            seconds.resize_with(second + 1, Vec::new);
        }
        seconds[second].push(late_us);
    }
    let p99 = |mut v: Vec<i64>| {
        v.sort_unstable();
        v.get((v.len() * 99).div_ceil(100).max(1) - 1)
            .copied()
            .unwrap_or(0)
    };
    let shown: Vec<String> = seconds
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(second, v)| format!("{second} s: {:.1} ms", p99(v) as f64 / 1e3))
        .collect();
    shown.join(", ")
}

/// Runs `kind` in a child process (`alone` or `sleeps`); returns its figures.
fn case(exe: &std::path::Path, kind: &str, phase: &str) -> Vec<f64> {
    let name = if phase.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}:{phase}")
    };
    let out = Command::new(exe)
        .env(CASE_VAR, name)
        .output()
        .expect("run a case");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "case {kind}:{phase} failed: {stderr}");
    eprint!("{stderr}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|f| f.parse().expect("a figure"))
        .collect()
}

/// Runs one phase of one kind, in this process.
fn run_child(case: &str) {
    if case == "wheel-alone" {
        return run_wheel_alone();
    }
    let (kind, phase) = case.split_once(':').expect("kind:phase");
    let alone = phase == "alone";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match kind {
        "timingwheel" => {
            let wheel: Arc<dyn Timer> = Arc::new(SystemTimerReaper::new(
                "sleeps-reaper",
                SystemTimer::new("sleeps"),
            ));
            let timer = Arc::clone(&wheel);
            run_case(kind, alone, runtime, move |delay| {
                Sleep::new(Arc::clone(&timer), delay)
            });
            wheel.close();
        }
        "tokio" => run_case(kind, alone, runtime, tokio::time::sleep),
        "futures-timer" => run_case(kind, alone, runtime, futures_timer::Delay::new),
        other => panic!("unknown kind {other}"),
    }
}

/// The wheel's own lateness, without a runtime: the same delays as `timer_task`s that
/// record when they ran; prints `p50_us p99_us max_us`, and the p99 per second on stderr.
fn run_wheel_alone() {
    let sizes = sizes();
    let delays = delays(sizes, sizes.sleeps);
    let timer = SystemTimerReaper::new("alone-reaper", SystemTimer::new("alone"));
    let lateness: Arc<Vec<AtomicI64>> =
        Arc::new((0..sizes.sleeps).map(|_| AtomicI64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    for (i, &delay) in delays.iter().enumerate() {
        let due = Instant::now() + delay;
        let (lateness, done) = (Arc::clone(&lateness), Arc::clone(&done));
        timer.add(timingwheel::timer_task(delay, move || {
            let late = Instant::now().saturating_duration_since(due);
            lateness[i].store(late.as_micros() as i64, Ordering::Relaxed);
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    while done.load(Ordering::Relaxed) < sizes.sleeps {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut late: Vec<i64> = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    eprintln!(
        "wheel alone: lateness p99 by delay, per second: {}",
        by_second(&delays, &late)
    );
    late.sort_unstable();
    let rank = |p: f64| late[((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1];
    println!("{} {} {}", rank(0.50), rank(0.99), late[late.len() - 1]);
    timer.close();
}

/// What limits each figure, printed under the table.
const LIMITS: &str = "\
what limits each figure:
- bytes per sleep: timingwheel's Sleep is 48 B inline (its timer, its entry, its shared
  state), and on the heap: the state it shares with its timer task (an Arc: a 64 B chunk),
  the task's Box (a 32 B chunk: Timer::add takes a Box<dyn TimerTask>), and the wheel's
  32 B slot and list index. tokio's entry is intrusive: all of it lives inline in the
  future, nothing on the heap. futures-timer keeps an Arc'd node and a heap item per Delay.
- create + poll + drop: timingwheel allocates and frees two blocks and takes a stripe lock
  to add and one to cancel; tokio computes a deadline, links the entry into its per-worker
  wheel at the first poll and unlinks it at the drop, allocating nothing; futures-timer
  allocates its node and wakes its timer thread at every creation.
- lateness: timingwheel's p50 and p99 are its resolution: an expiration is rounded up to
  the next millisecond and fires at that millisecond's tick, so up to 1 ms of lateness is
  by design (Kafka's), plus the hand-off from the timer's executor thread to tokio's
  scheduler; the wheel alone (no runtime) shows the same p99. futures-timer's binary heap
  fires at the exact instant, so its p99 is lower; tokio's p99 and max are set by its own
  wheel's cascades (the p99 per second of delay, on stderr). Max: scheduling on 2 cores.";

/// One kind's figures, net of its tasks.
struct Figures {
    kind: &'static str,
    inline: f64,
    /// Heap outside the task, and RSS growth, per sleep.
    heap: f64,
    rss: f64,
    create_ns: f64,
    /// Lateness p50, p99, max, min in µs.
    late: [f64; 4],
}

impl Figures {
    /// The sleep's own bytes: inline plus outside the task.
    fn bytes(&self) -> f64 {
        self.inline + self.heap
    }
    fn rss_bytes(&self) -> f64 {
        self.inline + self.rss
    }
}

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        run_child(&case);
        return;
    }
    let sizes = sizes();
    let exe = std::env::current_exe().expect("own path");
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let figures: Vec<Figures> = KINDS
        .iter()
        .map(|&kind| {
            let alone = case(&exe, kind, "alone");
            let f = case(&exe, kind, "sleeps");
            Figures {
                kind,
                inline: f[2],
                heap: f[0] - alone[0],
                rss: f[1] - alone[1],
                create_ns: f[3],
                late: [f[4], f[5], f[6], f[7]],
            }
        })
        .collect();
    println!(
        "sleeps: {} concurrent sleeps, one task each, delays uniform in {}-{} ms, tokio multi-thread runtime ({workers} workers)",
        sizes.sleeps,
        sizes.min_delay_ms,
        sizes.min_delay_ms + sizes.spread_ms - 1
    );
    println!();
    println!(
        "| sleep | inline B | heap B outside the task | bytes per sleep | RSS B per sleep | create + poll + drop | lateness p50 | p99 | max | min |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let ms = |us: f64| format!("{:.2} ms", us / 1e3);
    for f in &figures {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} ns | {} | {} | {} | {} |",
            f.kind,
            f.inline,
            f.heap,
            f.bytes(),
            f.rss_bytes(),
            f.create_ns,
            ms(f.late[0]),
            ms(f.late[1]),
            ms(f.late[2]),
            ms(f.late[3])
        );
    }
    println!();
    let [wheel, tokio, ft] = [&figures[0], &figures[1], &figures[2]];
    for other in [tokio, ft] {
        println!(
            "timingwheel / {}: bytes per sleep {:.2}x, RSS per sleep {:.2}x, create+poll+drop {:.2}x, lateness p99 {:.2}x, max {:.2}x",
            other.kind,
            wheel.bytes() / other.bytes(),
            wheel.rss_bytes() / other.rss_bytes(),
            wheel.create_ns / other.create_ns,
            wheel.late[1] / other.late[1].max(1.0),
            wheel.late[2] / other.late[2].max(1.0)
        );
    }
    let alone = case(&exe, "wheel-alone", "");
    println!(
        "the wheel alone (the same delays as timer_tasks, no runtime): lateness p50 {}, p99 {}, max {}",
        ms(alone[0]),
        ms(alone[1]),
        ms(alone[2])
    );
    println!();
    println!("{LIMITS}");
    let goal = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "goals: lateness p99 <= 2 ms: {}; memory within 1.5x tokio's: {}; ahead of futures-timer on every figure: {}",
        goal(wheel.late[1] <= 2_000.0),
        goal(wheel.bytes() <= 1.5 * tokio.bytes()),
        goal(
            wheel.bytes() < ft.bytes()
                && wheel.create_ns < ft.create_ns
                && wheel.late[1] < ft.late[1]
                && wheel.late[2] < ft.late[2]
        )
    );
}
