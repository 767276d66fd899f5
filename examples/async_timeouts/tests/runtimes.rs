//! timingwheel's `Sleep`, `timeout` and `Interval` under real async runtimes: tokio's
//! current-thread and multi-thread schedulers, smol, and `futures::executor`. Each runs the
//! same scenario on a real `SystemTimer` driven by a reaper; the deterministic rules are
//! proved on a `MockTimer` in the library's `tests/it/futures.rs`.
//!
//! Real-clock checks assert a strict lower bound (never early) and a loose upper one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use timingwheel::{
    Elapsed, Interval, MissedTicks, Sleep, SystemTimer, SystemTimerReaper, Timer, timeout,
};

/// How long anything that should happen soon may take on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// Sleeps started at once, with delays 1..=`SPREAD_MS` ms.
const SLEEPS: usize = 300;
const SPREAD_MS: i64 = 40;
const PERIOD_MS: i64 = 10;
const TICKS: usize = 5;

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs a future as a task of its own on the runtime under test; the returned future
/// completes when that task did.
type Spawn = fn(BoxFuture) -> BoxFuture;

fn timer() -> Arc<dyn Timer> {
    Arc::new(SystemTimerReaper::new(
        "runtimes-reaper",
        SystemTimer::new("runtimes"),
    ))
}

/// Waits for every future, polling them together in the calling task.
async fn join_all(futures: Vec<BoxFuture>) {
    let mut futures: Vec<Option<BoxFuture>> = futures.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in &mut futures {
            if let Some(future) = slot {
                if future.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

/// The scenario every runtime runs.
async fn exercise(timer: Arc<dyn Timer>, spawn: Spawn) {
    // Many sleeps at once, each in a task of its own: none early, all woken.
    let woken = Arc::new(AtomicUsize::new(0));
    let tasks = (0..SLEEPS)
        .map(|i| {
            let (timer, woken) = (Arc::clone(&timer), Arc::clone(&woken));
            let delay_ms = 1 + (i as i64 * 7) % SPREAD_MS;
            spawn(Box::pin(async move {
                let start = Instant::now();
                Sleep::new(timer, delay_ms).await;
                let took = start.elapsed();
                assert!(
                    took >= Duration::from_millis(delay_ms as u64),
                    "{delay_ms} ms: {took:?}"
                );
                assert!(took < PATIENCE, "{delay_ms} ms: {took:?}");
                woken.fetch_add(1, Ordering::SeqCst);
            }))
        })
        .collect();
    join_all(tasks).await;
    assert_eq!(woken.load(Ordering::SeqCst), SLEEPS);

    // A sleep first polled elsewhere (another waker), then awaited by a new task.
    let mut moved = Sleep::new(Arc::clone(&timer), 15);
    assert!(
        Pin::new(&mut moved)
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    );
    spawn(Box::pin(moved)).await;

    // timeout: an answer in time, then a future that never answers.
    let answer = timeout(Arc::clone(&timer), 1_000, async {
        Sleep::new(Arc::clone(&timer), 5).await;
        42
    });
    assert_eq!(answer.await, Ok(42));
    let start = Instant::now();
    let never = timeout(Arc::clone(&timer), 20, std::future::pending::<()>());
    assert_eq!(never.await, Err(Elapsed));
    assert!(start.elapsed() >= Duration::from_millis(20));

    // Interval: scheduled times one period apart, never ahead of the real clock.
    let start = Instant::now(); // before the interval's start: a strict lower bound
    let mut interval = Interval::new(Arc::clone(&timer), PERIOD_MS, MissedTicks::Burst);
    let mut ticks = Vec::new();
    for _ in 0..TICKS {
        ticks.push(interval.tick().await);
    }
    // A tick taken 9-10 ms late (a loaded machine) makes the next one due within the
    // millisecond "now" rounds up to: it comes at once, up to 1 ms early (see `MissedTicks`).
    let took = start.elapsed();
    let least = Duration::from_millis(PERIOD_MS as u64 * (TICKS as u64 - 1) - 1);
    assert!(took > least, "{took:?}");
    let steps: Vec<i64> = ticks.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(steps, [PERIOD_MS; TICKS - 1]);
    drop(interval);

    assert_eq!(timer.size(), 0, "every task ran or was cancelled");
}

/// Runs `exercise` on `runtime`, each future spawned as a tokio task.
fn exercise_on_tokio(runtime: tokio::runtime::Runtime) {
    let timer = timer();
    runtime.block_on(exercise(Arc::clone(&timer), |future| {
        Box::pin(async move { tokio::spawn(future).await.unwrap() })
    }));
    timer.close();
}

#[test]
fn tokio_current_thread_runs_sleep_timeout_and_interval() {
    exercise_on_tokio(
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap(),
    );
}

#[test]
fn tokio_multi_thread_runs_sleep_timeout_and_interval() {
    exercise_on_tokio(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap(),
    );
}

#[test]
fn smol_runs_sleep_timeout_and_interval() {
    let timer = timer();
    smol::block_on(exercise(Arc::clone(&timer), |future| {
        Box::pin(smol::spawn(future))
    }));
    timer.close();
}

#[test]
fn futures_executor_runs_sleep_timeout_and_interval() {
    let timer = timer();
    // No spawning: the "tasks" are polled together inside the one `block_on` task.
    futures::executor::block_on(exercise(Arc::clone(&timer), |future| future));
    timer.close();
}

#[test]
fn an_interval_ticking_in_a_tokio_select_loses_no_tick() {
    const ROUNDS: usize = 20;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let timer = timer();
    let ticks = runtime.block_on(async {
        let mut interval = Interval::new(Arc::clone(&timer), 4, MissedTicks::Burst);
        let mut other = Sleep::new(Arc::clone(&timer), 3);
        let mut ticks = Vec::new();
        let mut interrupted = 0;
        while ticks.len() < ROUNDS {
            tokio::select! {
                at = interval.tick() => ticks.push(at),
                () = &mut other => {
                    // The pending tick() was dropped here.
                    interrupted += 1;
                    other.reset(3);
                }
            }
        }
        assert!(interrupted > 0, "the other branch never won");
        ticks
    });
    let steps: Vec<i64> = ticks.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(steps, [4; ROUNDS - 1], "a tick went missing");
    timer.close();
}

#[test]
fn a_sleep_moved_across_tokio_worker_threads_still_wakes_its_task() {
    const ROUNDS: usize = 200;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let timer = timer();
    runtime.block_on(async {
        for round in 0..ROUNDS {
            let mut sleep = Sleep::new(Arc::clone(&timer), 1 + (round % 3) as i64);
            // Polled (and left pending) by this task, then handed to another.
            let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut sleep).poll(cx))).await;
            if first.is_ready() {
                continue; // already due; nothing left to move
            }
            let guard = Arc::clone(&timer);
            let waited = tokio::spawn(async move {
                // A lost wake-up would show as the guard's deadline, not as a hang.
                timeout(guard, PATIENCE.as_millis() as i64, sleep)
                    .await
                    .is_ok()
            });
            assert!(
                waited.await.unwrap(),
                "round {round}: the new task was never woken"
            );
        }
    });
    timer.close();
}
