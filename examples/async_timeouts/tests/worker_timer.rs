//! `WorkerTimer` (the library's `tokio` feature): expired tasks, and so the wakes of the
//! futures, run on a worker thread of the tokio runtime rather than on the timer's
//! executor thread; never early; a task's panic is caught; a runtime that shut down leaves
//! the tasks to the timer's executor, and one without an I/O driver cannot take the relay;
//! the relay task ends with the last `WorkerTimer` and the last task pending there, which
//! still runs on a worker. The figures under load: the `async_wakes` workload of `benches/wheel.rs`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use timingwheel::{
    Interval, MissedTicks, Sleep, SystemTimer, SystemTimerReaper, Timer, WorkerTimer, timeout,
    timer_task,
};

const PATIENCE: Duration = Duration::from_secs(20);

fn reaper(name: &str) -> Arc<SystemTimerReaper> {
    Arc::new(SystemTimerReaper::new(
        &format!("{name}-reaper"),
        SystemTimer::new(name),
    ))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("worker-under-test")
        .enable_io()
        .build()
        .unwrap()
}

/// The name of the thread a task added to `timer` with `delay_ms` runs on.
fn runs_on(timer: &dyn Timer, delay_ms: i64) -> String {
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(delay_ms, move || {
        let _ = tx.send(std::thread::current().name().unwrap_or("").to_owned());
    }));
    rx.recv_timeout(PATIENCE).expect("the task ran")
}

#[test]
fn expired_tasks_run_on_a_worker_of_the_runtime_not_on_the_executor() {
    let runtime = runtime();
    let reaper = reaper("on-worker");
    let timer = runtime.block_on(async { WorkerTimer::new(reaper.clone()) });
    assert_eq!(runs_on(&timer, 5), "worker-under-test");
    assert_eq!(runs_on(&timer, 0), "worker-under-test", "due at once too");
    assert_eq!(
        runs_on(&*reaper, 5),
        "executor-on-worker",
        "the timer itself, unwrapped"
    );
    drop(timer);
    reaper.close();
}

#[test]
fn the_futures_on_a_worker_timer_complete_never_before_their_deadlines() {
    let runtime = runtime();
    let reaper = reaper("futures-on-worker");
    runtime.block_on(async {
        let timer: Arc<dyn Timer> = Arc::new(WorkerTimer::new(reaper.clone()));
        let start = Instant::now();
        Sleep::new(timer.clone(), 20).await;
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(start.elapsed() < PATIENCE);
        let start = Instant::now();
        let never = timeout(timer.clone(), 15, std::future::pending::<()>()).await;
        assert!(never.is_err() && start.elapsed() >= Duration::from_millis(15));
        let start = Instant::now();
        let mut interval = Interval::new(timer.clone(), 10, MissedTicks::Burst);
        let first = interval.tick().await;
        for k in 1..=3 {
            assert_eq!(interval.tick().await, first + 10 * k);
        }
        // A tick taken 9-10 ms late (a loaded machine) makes the next one due within the
        // millisecond "now" rounds up to: it comes at once, up to 1 ms early (see
        // `MissedTicks`).
        assert!(start.elapsed() > Duration::from_millis(29));
    });
    reaper.close();
}

#[test]
fn a_task_that_panics_on_the_worker_is_caught_and_the_next_ones_still_run() {
    let runtime = runtime();
    let reaper = reaper("panics-on-worker");
    let timer = runtime.block_on(async { WorkerTimer::new(reaper.clone()) });
    timer.add(timer_task(1, || panic!("a relayed task panics")));
    assert_eq!(runs_on(&timer, 2), "worker-under-test");
    drop(timer);
    reaper.close();
}

#[test]
fn once_the_runtime_shut_down_the_tasks_run_on_the_executor() {
    let reaper = reaper("shut-down");
    let runtime = runtime();
    let timer = WorkerTimer::with_handle(reaper.clone(), runtime.handle());
    assert_eq!(runs_on(&timer, 2), "worker-under-test");
    drop(runtime);
    assert_eq!(runs_on(&timer, 2), "executor-shut-down", "not lost");
    reaper.close();
}

#[test]
#[should_panic(expected = "IO is disabled")]
fn a_runtime_without_an_io_driver_cannot_take_the_relay() {
    let no_io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    WorkerTimer::with_handle(reaper("no-io"), no_io.handle());
}

#[test]
fn the_relay_task_ends_with_the_last_worker_timer() {
    let runtime = runtime();
    let reaper = reaper("relay-ends");
    let metrics = runtime.handle().metrics();
    let timer = runtime.block_on(async { WorkerTimer::new(reaper.clone()) });
    assert_eq!(metrics.num_alive_tasks(), 1, "the relay task");
    runs_on(&timer, 1);
    drop(timer);
    let give_up = Instant::now() + PATIENCE;
    while metrics.num_alive_tasks() > 0 {
        assert!(Instant::now() < give_up, "the relay task is still alive");
        std::thread::sleep(Duration::from_millis(2));
    }
    reaper.close();
}

#[test]
fn a_task_pending_when_its_worker_timer_is_dropped_still_runs_on_a_worker() {
    let runtime = runtime();
    let reaper = reaper("dropped-pending");
    let metrics = runtime.handle().metrics();
    let timer = runtime.block_on(async { WorkerTimer::new(reaper.clone()) });
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(30, move || {
        let _ = tx.send(std::thread::current().name().unwrap_or("").to_owned());
    }));
    drop(timer);
    assert_eq!(metrics.num_alive_tasks(), 1, "the relay task waits for it");
    let ran_on = rx
        .recv_timeout(PATIENCE)
        .expect("the task ran, not dropped");
    assert_eq!(ran_on, "worker-under-test");
    let give_up = Instant::now() + PATIENCE;
    while metrics.num_alive_tasks() > 0 {
        assert!(
            Instant::now() < give_up,
            "the relay task outlived its last task"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    reaper.close();
}

#[test]
#[should_panic(expected = "WorkerTimer::new: called outside a tokio runtime")]
fn a_worker_timer_made_outside_a_runtime_panics_naming_the_way_out() {
    WorkerTimer::new(reaper("outside"));
}
