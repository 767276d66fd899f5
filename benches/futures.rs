//! Futures: 10^6 concurrent sleeps against tokio's and futures-timer's (`sleeps`), and how
//! late sleeps wake on a busy tokio runtime, with and without `WorkerTimer` (`async_wakes`).

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer, WorkerTimer, timer_task};

use crate::harness::{
    Rng, SEED, case, in_child, median, param, percentile, report, rss_bytes, runs_table,
};

/// The sleeps' delays: uniform in `min_ms..min_ms + spread_ms` (1-11 s; quick 0.5-1.5 s).
fn sleep_delays() -> Vec<Duration> {
    let n = param("n", 1_000_000, 100_000);
    let (min_ms, spread_ms) = (param("min_ms", 1_000, 500), param("spread_ms", 10_000, 1_000));
    let mut rng = Rng::new(SEED);
    let mut delay = || Duration::from_millis(rng.range(min_ms, min_ms + spread_ms - 1) as u64);
    (0..n).map(|_| delay()).collect()
}

/// The allocator's bytes in use: glibc's count over all arenas, small and mmapped chunks.
fn heap_in_use() -> u64 {
    // SAFETY: `mallinfo2` takes no arguments and only reads the allocator's statistics under
    // its own locks; it is safe to call from any thread at any time. (Bench-only code.)
    #[allow(unsafe_code)]
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

/// Lateness in µs of the task resumed `now`, due at `due` (negative: early).
fn late_us(now: Instant, due: Instant) -> i64 {
    match now.checked_duration_since(due) {
        Some(late) => late.as_micros() as i64,
        None => -((due - now).as_micros() as i64),
    }
}

/// The lateness figures of `late` (µs), in ms: p50, p99, max, min.
fn lateness_ms(late: &mut [i64]) -> Vec<f64> {
    late.sort_unstable();
    let figures = [0.5, 0.99, 1.0].map(|p| percentile(late, p)).into_iter().chain([late[0]]);
    figures.map(|us| us as f64 / 1e3).collect()
}

/// The task of one sleep, recording its lateness. With `None` it waits forever instead:
/// the same future type, so the same task size, without a sleep (the `alone` phase).
async fn sleeper<S: Future<Output = ()>>(
    sleep: Option<S>,
    due: Instant,
    board: Arc<(Vec<AtomicI64>, AtomicUsize, AtomicUsize)>,
    i: usize,
) {
    let Some(sleep) = sleep else {
        board.1.fetch_add(1, Ordering::Relaxed);
        return std::future::pending().await;
    };
    let mut sleep = pin!(sleep);
    // Counted once polled: tokio's sleep enters its wheel at the first poll.
    let first = std::future::poll_fn(|cx| {
        let first = sleep.as_mut().poll(cx);
        board.1.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(first)
    })
    .await;
    if first.is_pending() {
        sleep.await;
    }
    board.0[i].store(late_us(Instant::now(), due), Ordering::Relaxed);
    board.2.fetch_add(1, Ordering::Relaxed);
}

/// One `sleeps` phase in this process: the heap and RSS growth per pending sleep, and (not
/// `alone`) the sleep's inline size, create + poll + drop ns, and lateness p50, p99, max, min
/// (ms).
fn sleeps_case<S, M>(kind: &str, alone: bool, make: M) -> Vec<f64>
where
    S: Future<Output = ()> + Send + 'static,
    M: Fn(Duration) -> S + Clone + Send + Sync + 'static,
{
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let delays = sleep_delays();
    let n = delays.len();
    // Warms up, and times create + poll once (which registers it) + drop on a worker thread.
    let (maker, some) = (make.clone(), delays[..n / 5].to_vec());
    let create_ns = runtime.block_on(async move {
        tokio::spawn(async move {
            let round = || {
                let (mut cx, start) = (Context::from_waker(Waker::noop()), Instant::now());
                for &delay in &some {
                    let _ = black_box(pin!(maker(delay)).as_mut().poll(&mut cx));
                }
                start.elapsed().as_nanos() as f64 / some.len() as f64
            };
            let mut rounds = Vec::new();
            for _ in 0..5 {
                rounds.push(round());
                tokio::task::yield_now().await;
            }
            median(rounds)
        })
        .await
        .expect("the create-drop task")
    });
    let _context = runtime.enter();
    let board = Arc::new((
        (0..n).map(|_| AtomicI64::new(0)).collect(),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ));
    let (heap0, rss0, origin) = (heap_in_use(), rss_bytes(), Instant::now());
    for (i, &delay) in delays.iter().enumerate() {
        let due = Instant::now() + delay;
        runtime.spawn(sleeper((!alone).then(|| make(delay)), due, Arc::clone(&board), i));
    }
    while board.1.load(Ordering::Relaxed) < n {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pending = (n - board.2.load(Ordering::Relaxed)).max(1) as f64;
    let (heap, rss) = (
        (heap_in_use() as f64 - heap0 as f64) / pending,
        (rss_bytes() as f64 - rss0 as f64) / pending,
    );
    if alone {
        // Its tasks never end; the process does.
        report(&[heap, rss]);
        std::process::exit(0);
    }
    let patience = delays.iter().max().copied().unwrap_or_default() + Duration::from_secs(60);
    while board.2.load(Ordering::Relaxed) < n {
        assert!(origin.elapsed() < patience, "{kind}: sleeps still pending after {patience:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut late: Vec<i64> = board.0.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    let mut figures = vec![heap, rss, std::mem::size_of::<S>() as f64, create_ns];
    figures.extend(lateness_ms(&mut late));
    figures
}

/// The wheel's own lateness, no runtime: the same delays as `timer_task`s recording when
/// they ran; p50, p99, max, min (ms).
fn wheel_alone() -> Vec<f64> {
    let delays = sleep_delays();
    let timer = SystemTimerReaper::new("alone-reaper", SystemTimer::new("alone"));
    let lateness: Arc<Vec<AtomicI64>> =
        Arc::new((0..delays.len()).map(|_| AtomicI64::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    for (i, &delay) in delays.iter().enumerate() {
        let (due, lateness, done) =
            (Instant::now() + delay, Arc::clone(&lateness), Arc::clone(&done));
        timer.add(timer_task(delay, move || {
            lateness[i].store(late_us(Instant::now(), due), Ordering::Relaxed);
            done.fetch_add(1, Ordering::Relaxed);
        }));
    }
    while done.load(Ordering::Relaxed) < delays.len() {
        std::thread::sleep(Duration::from_millis(20));
    }
    timer.close();
    let mut late: Vec<i64> = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    lateness_ms(&mut late)
}

/// 10^6 concurrent sleeps on a multi-thread tokio runtime, each awaited by a task of its
/// own, delays uniform in 1-11 s: the crate's `Sleep` (on a `SystemTimerReaper`) against
/// `tokio::time::sleep` and `futures_timer::Delay`. Per sleep: its inline size, plus the
/// growth of glibc's bytes in use and of RSS while they wait, minus the same for tasks of the
/// same future type without a sleep (a second process); create + poll once + drop on a
/// worker; lateness (resumption minus creation plus delay) over all of them. Then the wheel
/// alone, no runtime, on the same delays. Each phase a process of its own.
pub(crate) fn sleeps() {
    if let Some(case) = case() {
        if case == "wheel-alone" {
            return report(&wheel_alone());
        }
        let (kind, phase) = case.split_once(':').expect("kind:phase");
        let alone = phase == "alone";
        return report(&match kind {
            "timingwheel" => {
                let wheel: Arc<dyn Timer> =
                    Arc::new(SystemTimerReaper::new("sleeps-reaper", SystemTimer::new("sleeps")));
                let timer = Arc::clone(&wheel);
                let figures =
                    sleeps_case(kind, alone, move |delay| Sleep::new(Arc::clone(&timer), delay));
                wheel.close();
                figures
            }
            "tokio" => sleeps_case(kind, alone, tokio::time::sleep),
            _ => sleeps_case(kind, alone, futures_timer::Delay::new),
        });
    }
    let kinds = ["timingwheel", "tokio", "futures-timer"];
    let figures: Vec<Vec<Vec<f64>>> = (0..param("runs", 1, 1))
        .map(|_| {
            let kind = |kind: &&str| {
                let alone = in_child(&format!("{kind}:alone"));
                let f = in_child(&format!("{kind}:sleeps"));
                let (heap, rss) = (f[0] - alone[0], f[1] - alone[1]);
                vec![f[2], heap, f[2] + heap, f[2] + rss, f[3], f[4], f[5], f[6], f[7]]
            };
            kinds.iter().map(kind).collect()
        })
        .collect();
    let columns = "inline B | heap B outside the task | bytes per sleep | RSS B per sleep \
        | create + poll + drop ns | lateness p50 ms | p99 ms | max ms | min ms";
    runs_table(columns, &kinds, &figures, &[2, 3, 4, 6, 7]);
    let alone = in_child("wheel-alone");
    let [p50, p99, max] = [alone[0], alone[1], alone[2]];
    println!(
        "\nthe wheel alone (timer_tasks, no runtime): p50 {p50:.2}, p99 {p99:.2}, max {max:.2} ms"
    );
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
    let (samples, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
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
                    while !stop.load(Ordering::Relaxed) {
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
                while !stop.load(Ordering::Relaxed) {
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
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.expect("a sleeper panicked");
        }
    });
    drop(runtime);
    reaper.inspect(|reaper| reaper.close());
    let mut late = std::mem::take(&mut *samples.lock().unwrap());
    lateness_ms(&mut late)[..2].to_vec()
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
        let runs: Vec<Vec<Vec<f64>>> = (0..param("runs", 3, 1))
            .map(|run| {
                let mut figures = vec![Vec::new(); kinds.len()];
                for k in 0..kinds.len() {
                    let at = (run + k) % kinds.len();
                    figures[at] = in_child(&format!("{}:{load}", kinds[at]));
                }
                figures
            })
            .collect();
        println!("\n{load}: lateness of each wake, ms\n");
        runs_table("median ms | p99 ms", &kinds, &runs, &[0, 1]);
    }
}
