//! `SystemTimer::lateness`: how late tasks started against their `expiration_ms`, in
//! microseconds, since the timer was built: measured on the executor when the task starts
//! (so the wait for a busy executor counts), percentiles within 5 % of the exact ones,
//! count and maximum exact, on every kind of executor.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use common::PATIENCE;
use common::sync::{ExecutorGate, driven, eventually};
use threadpool::ThreadPool;
use timingwheel::{Lateness, MockTime, SystemTimer, Timer, timer_task};

/// The exact value of rank ceil(p * n) of `sorted`, `per_mille` being p * 1000.
fn exact(sorted: &[u64], per_mille: usize) -> u64 {
    sorted[(sorted.len() * per_mille).div_ceil(1000) - 1]
}

fn assert_within_5_percent(got: u64, want: u64, what: &str) {
    let error = got.abs_diff(want) as f64 / want.max(1) as f64;
    assert!(error <= 0.05, "{what}: {got} us for {want} us");
}

#[test]
fn lateness_is_each_tasks_start_minus_its_expiration_within_5_percent() {
    const TASKS: i64 = 1_000;
    const LATE_MS: i64 = 2_000;
    let time = MockTime::new();
    let timer = SystemTimer::builder("late-mock")
        .time(time.clone())
        .executor(|job| job())
        .build();
    assert_eq!(timer.lateness(), Lateness::default());
    for delay in 1..=TASKS {
        timer.add(timer_task(delay, || {}));
    }
    // The driver comes once, at +2,000 ms: a task due at +d starts 2,000 - d ms late.
    time.sleep(LATE_MS);
    while timer.advance_clock(0) {}
    let mut exact_us: Vec<u64> = (1..=TASKS)
        .map(|d| ((LATE_MS - d) * 1_000) as u64)
        .collect();
    exact_us.sort_unstable();
    let lateness = timer.lateness();
    assert_eq!(lateness.count, TASKS as u64);
    assert_eq!(lateness.max_us, *exact_us.last().unwrap());
    assert_within_5_percent(lateness.p50_us, exact(&exact_us, 500), "p50");
    assert_within_5_percent(lateness.p99_us, exact(&exact_us, 990), "p99");
    assert_within_5_percent(lateness.p999_us, exact(&exact_us, 999), "p999");
}

#[test]
fn a_task_run_early_by_a_coarse_tick_counts_as_not_late() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("early")
        .time(time.clone())
        .tick_ms(10)
        .executor(|job| job())
        .build();
    let start = time.hi_res_clock_ms();
    // Due 15 ms from a tick's start: its bucket comes due 5 ms before it.
    time.sleep(10 - start.rem_euclid(10));
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    timer.add(timer_task(15, move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(ran.load(Ordering::SeqCst), 1, "it ran at its bucket's time");
    let lateness = timer.lateness();
    assert_eq!((lateness.count, lateness.max_us), (1, 0));
}

/// On the real clock: a task that waits behind a busy executor started at least that much
/// late, and the wait is counted where the task starts, not where it was handed over.
#[test]
fn the_wait_for_a_busy_executor_counts() {
    const BUSY: Duration = Duration::from_millis(100);
    let timer = SystemTimer::new("late-real");
    let gate = ExecutorGate::shut(&timer, 1);
    let (ran, ran_rx) = mpsc::channel();
    driven(&timer, 5, || {
        timer.add(timer_task(5, move || ran.send(()).unwrap()));
        thread::sleep(BUSY);
        gate.open();
        ran_rx.recv_timeout(PATIENCE).expect("the task ran");
    });
    let lateness = timer.lateness();
    assert_eq!(lateness.count, 2, "the gate's task and the late one");
    // Its expiration: the add's instant rounded up to the millisecond, plus 5 ms.
    let at_least = (BUSY - Duration::from_millis(6)).as_micros() as u64;
    assert!(lateness.max_us >= at_least, "{lateness:?}");
    assert!(
        lateness.max_us < PATIENCE.as_micros() as u64,
        "{lateness:?}"
    );
    timer.close();
}

#[test]
fn every_executor_counts_every_task_it_starts() {
    const TASKS: usize = 500;
    let pool = ThreadPool::new(2);
    for timer in [
        SystemTimer::builder("count-threads")
            .executor_threads(3)
            .build(),
        SystemTimer::builder("count-pool")
            .threadpool(pool.clone())
            .build(),
        SystemTimer::builder("count-inline")
            .executor(|job| job())
            .build(),
        SystemTimer::builder("count-bounded")
            .max_in_flight(2)
            .build(),
    ] {
        let ran = Arc::new(AtomicUsize::new(0));
        driven(&timer, 2, || {
            for i in 0..TASKS {
                let ran = Arc::clone(&ran);
                timer.add(timer_task((i % 20) as i64, move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }));
            }
            eventually(PATIENCE, "every task ran", || {
                ran.load(Ordering::SeqCst) == TASKS
            });
        });
        timer.close();
        assert_eq!(timer.lateness().count, TASKS as u64, "{timer:?}");
    }
    pool.join();
}
