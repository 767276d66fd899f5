//! Where expiries run: a `threadpool::ThreadPool` the caller owns
//! (`SystemTimerBuilder::threadpool`) and any executor given as a function
//! (`SystemTimerBuilder::executor`). For each: the tasks run there, exactly once under
//! concurrent adds, cancels and expiries; a panic is caught and logged; `close` waits for
//! the tasks handed over (and, called from one of them, not for itself); the timer starts,
//! names and joins no thread of its own; the last of `executor_threads`, `threadpool` and
//! `executor` wins; and an executor that breaks its contract (drops a job, panics) is
//! logged, not hung on.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::ledger::{Ledger, churn};
use common::logger;
use common::sync::{
    assert_close_from_the_only_executor_thread_skips_the_queue, driven, eventually, within,
};
use common::{PATIENCE, counted};
use threadpool::ThreadPool;
use timingwheel::{MockTime, SystemTimer, Timer, crossbeam_channel, timer_task};

/// How long a task that stands for slow work takes.
const SLOW: Duration = Duration::from_millis(300);

/// The name of the thread a task due at once runs on.
fn thread_of_a_task(timer: &SystemTimer) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(0, move || {
        tx.send(thread::current().name().map(str::to_owned))
            .unwrap();
    }));
    rx.recv_timeout(PATIENCE).expect("the task ran")
}

/// A job, as an executor is given it.
type Job = Box<dyn FnOnce() + Send>;

/// An executor that runs each job on a thread of its own, as `rayon::spawn` or tokio's
/// `spawn_blocking` would on a pool: returns it and the count of jobs it was given.
fn spawning_executor() -> (impl Fn(Job) + Send + Sync + 'static, Arc<AtomicUsize>) {
    let jobs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&jobs);
    let execute = move |job: Job| {
        counted.fetch_add(1, Ordering::SeqCst);
        thread::Builder::new()
            .name("spawned".into())
            .spawn(job)
            .expect("spawn");
    };
    (execute, jobs)
}

/// Hands two tasks that take [`SLOW`] to `timer`'s executor and returns once both run;
/// the count they bump when they finish.
fn two_slow_tasks_running(timer: &SystemTimer) -> Arc<AtomicUsize> {
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (finished, started) = (Arc::clone(&finished), Arc::clone(&started));
        timer.add(timer_task(0, move || {
            started.fetch_add(1, Ordering::SeqCst);
            thread::sleep(SLOW);
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    eventually(PATIENCE, "both slow tasks started", || {
        started.load(Ordering::SeqCst) == 2
    });
    finished
}

#[test]
fn tasks_run_on_the_callers_threadpool_and_the_pool_outlives_the_timer() {
    let pool = ThreadPool::with_name("service".into(), 2);
    let timer = SystemTimer::builder("on-pool")
        .threadpool(pool.clone())
        .build();
    assert_eq!(thread_of_a_task(&timer).as_deref(), Some("service"));
    drop(timer);
    // The timer neither stopped nor joined the pool's threads.
    let (tx, rx) = mpsc::channel();
    pool.execute(move || {
        tx.send(thread::current().name().map(str::to_owned))
            .unwrap()
    });
    let name = rx.recv_timeout(PATIENCE).expect("the pool still runs work");
    assert_eq!(name.as_deref(), Some("service"));
    assert_eq!(pool.max_count(), 2);
    pool.join();
}

#[test]
fn a_function_executor_is_handed_each_task_as_a_job() {
    let (execute, jobs) = spawning_executor();
    let timer = SystemTimer::builder("on-function")
        .executor(execute)
        .build();
    for _ in 0..3 {
        assert_eq!(thread_of_a_task(&timer).as_deref(), Some("spawned"));
    }
    assert_eq!(jobs.load(Ordering::SeqCst), 3, "one job per task");
    timer.close();
}

#[test]
fn an_inline_executor_runs_expired_tasks_on_the_thread_that_drives_the_timer() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("inline")
        .time(time.clone())
        .executor(|job| job())
        .build();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for delay in [5, 10, 0] {
        let seen = Arc::clone(&seen);
        timer.add(timer_task(delay, move || {
            seen.lock().unwrap().push((delay, thread::current().id()));
        }));
    }
    // The task due at once ran inside `add`, on this thread.
    assert_eq!(*seen.lock().unwrap(), [(0, thread::current().id())]);
    time.sleep(10);
    let driver = thread::scope(|s| {
        s.spawn(|| {
            while timer.advance_clock(0) {}
            thread::current().id()
        })
        .join()
        .unwrap()
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen[1..], [(5, driver), (10, driver)]);
    assert_eq!(timer.stats().expired, 3);
}

/// Adds, cancels and expiries on several threads: every task runs once or is cancelled
/// once, and is freed once, on each kind of executor.
#[test]
fn every_task_runs_or_is_cancelled_exactly_once_on_every_executor() {
    const TASKS: usize = 20_000;
    const ADDERS: usize = 2;
    let pool = ThreadPool::new(3);
    let (spawning, _) = spawning_executor();
    let timers = [
        SystemTimer::builder("once-pool")
            .threadpool(pool.clone())
            .build(),
        SystemTimer::builder("once-spawn")
            .executor(spawning)
            .build(),
        SystemTimer::builder("once-inline")
            .executor(|job| job())
            .build(),
    ];
    for timer in &timers {
        let ledger = Ledger::new(TASKS);
        driven(timer, 2, || {
            churn(timer, &ledger, ADDERS, |id, delay_ms| {
                ledger.task(id, delay_ms)
            });
            eventually(PATIENCE, "every task settled", || ledger.settled() == TASKS);
        });
        timer.close();
        let (ran, cancelled) = ledger.assert_exactly_once();
        assert!(ran > 0 && cancelled > 0, "ran {ran}, cancelled {cancelled}");
    }
    pool.join();
}

#[test]
fn a_panicking_task_is_caught_and_logged_on_every_executor() {
    logger::install();
    let pool = ThreadPool::new(2);
    let (spawning, _) = spawning_executor();
    let timers = [
        (
            "pool",
            SystemTimer::builder("panic-pool")
                .threadpool(pool.clone())
                .build(),
        ),
        (
            "spawn",
            SystemTimer::builder("panic-spawn")
                .executor(spawning)
                .build(),
        ),
        (
            "inline",
            SystemTimer::builder("panic-inline")
                .executor(|job| job())
                .build(),
        ),
    ];
    for (kind, timer) in &timers {
        let message = format!("executor panic 71c2 on {kind}");
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..10 {
            let (ran, message) = (Arc::clone(&ran), message.clone());
            timer.add(timer_task(0, move || {
                if i % 2 == 0 {
                    panic!("{message}");
                }
                ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
        eventually(PATIENCE, "the others ran", || {
            ran.load(Ordering::SeqCst) == 5
        });
        eventually(PATIENCE, "each panic logged", || {
            logger::errors_containing(&message).len() == 5
        });
        timer.close();
    }
    pool.join();
    assert_eq!(pool.panic_count(), 0, "the pool never saw a panic");
}

/// `close` returns only once the tasks handed to a caller's executor have finished, not
/// the executor's other work.
#[test]
fn close_waits_for_the_tasks_it_handed_to_a_callers_executor() {
    let pool = ThreadPool::new(3);
    let (spawning, _) = spawning_executor();
    for timer in [
        SystemTimer::builder("close-pool")
            .threadpool(pool.clone())
            .build(),
        SystemTimer::builder("close-spawn")
            .executor(spawning)
            .build(),
    ] {
        let finished = two_slow_tasks_running(&timer);
        let closing = Instant::now();
        timer.close();
        let took = closing.elapsed();
        assert_eq!(
            finished.load(Ordering::SeqCst),
            2,
            "close returned while they ran"
        );
        assert!(took < PATIENCE, "{took:?}");
    }
    // The pool's own work is not the timer's to wait for.
    let (release, wait) = crossbeam_channel::unbounded::<()>();
    pool.execute(move || {
        let _ = wait.recv_timeout(PATIENCE);
    });
    let timer = SystemTimer::builder("close-not-pool-work")
        .threadpool(pool.clone())
        .build();
    within(
        Duration::from_secs(5),
        "close beside the pool's own work",
        move || {
            timer.close();
        },
    );
    drop(release);
    pool.join();
}

/// On an inline executor, a task that adds a task already due runs it inside its own
/// `add`, nested on the same thread; a `close` from the inner one must not wait for the
/// outer, which cannot finish before the close returns.
#[test]
fn close_from_a_task_nested_inline_in_another_does_not_wait_for_either() {
    within(Duration::from_secs(5), "a nested inline close", || {
        let timer = Arc::new(
            SystemTimer::builder("close-nested")
                .executor(|job| job())
                .build(),
        );
        let (tx, rx) = mpsc::channel();
        let outer_timer = Arc::clone(&timer);
        timer.add(timer_task(0, move || {
            let inner_timer = Arc::clone(&outer_timer);
            outer_timer.add(timer_task(0, move || {
                let started = Instant::now();
                inner_timer.close();
                tx.send(started.elapsed()).unwrap();
            }));
        }));
        let waited = rx.try_recv().expect("both ran inside the first add");
        assert!(timer.is_closed());
        waited
    });
}

/// Called from one of its tasks on a pool of one thread, `close` waits for no task queued
/// behind it (they cannot start before it returns), and those still run afterwards.
#[test]
fn close_from_a_task_on_a_one_thread_pool_does_not_wait_for_itself_or_the_queue() {
    let pool = ThreadPool::new(1);
    let timer = SystemTimer::builder("close-inside")
        .threadpool(pool.clone())
        .build();
    assert_close_from_the_only_executor_thread_skips_the_queue(Arc::new(timer));
    pool.join();
}

/// Called from a task on a pool of several threads, `close` waits for the tasks already
/// running on the others.
#[test]
fn close_from_a_task_waits_for_the_tasks_running_on_other_threads() {
    let pool = ThreadPool::new(3);
    let timer = Arc::new(
        SystemTimer::builder("close-others")
            .threadpool(pool.clone())
            .build(),
    );
    let finished = two_slow_tasks_running(&timer);
    let (tx, rx) = mpsc::channel();
    let (inner, seen) = (Arc::clone(&timer), Arc::clone(&finished));
    timer.add(timer_task(0, move || {
        inner.close();
        tx.send(seen.load(Ordering::SeqCst)).unwrap();
    }));
    let finished_at_close = rx.recv_timeout(PATIENCE).expect("the inner close returned");
    assert_eq!(finished_at_close, 2, "it returned while the others ran");
    pool.join();
}

#[test]
fn the_last_of_executor_threads_threadpool_and_executor_wins() {
    let pool = ThreadPool::with_name("last-pool".into(), 1);
    let timer = SystemTimer::builder("last")
        .executor_threads(4)
        .threadpool(pool.clone())
        .build();
    assert_eq!(thread_of_a_task(&timer).as_deref(), Some("last-pool"));
    let (spawning, _) = spawning_executor();
    let timer = SystemTimer::builder("last")
        .threadpool(pool.clone())
        .executor(spawning)
        .build();
    assert_eq!(thread_of_a_task(&timer).as_deref(), Some("spawned"));
    let timer = SystemTimer::builder("last")
        .executor(|job| job())
        .executor_threads(2)
        .build();
    let name = thread_of_a_task(&timer).unwrap_or_default();
    assert!(name.starts_with("executor-last-"), "{name}");
    pool.join();
}

#[test]
fn a_job_the_executor_drops_unrun_is_logged_as_lost_and_close_does_not_wait_for_it() {
    logger::install();
    let timer = SystemTimer::builder("drops-jobs").executor(drop).build();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    timer.add(counted(0, &runs, &drops));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the task was dropped with its job"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(
        !logger::errors_containing("timer drops-jobs: the executor dropped a job").is_empty(),
        "the loss is logged"
    );
    within(Duration::from_secs(5), "close", move || timer.close());
}

#[test]
fn an_executor_that_panics_is_logged_and_close_does_not_wait_for_its_task() {
    logger::install();
    let timer = SystemTimer::builder("panics-on-execute")
        .executor(|_job| panic!("no runtime 0b7d"))
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    timer.add(counted(0, &runs, &drops));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(
        logger::errors_containing("no runtime 0b7d").len(),
        1,
        "the executor's panic is logged, once"
    );
    within(Duration::from_secs(5), "close", move || timer.close());
}

/// Every thread that runs a task is the caller's: the timer starts none of its own.
#[cfg(target_os = "linux")]
#[test]
fn a_timer_on_a_callers_executor_starts_no_thread() {
    let pool = ThreadPool::with_name("no-own-threads".into(), 2);
    let timer = SystemTimer::builder("no-threads-7e")
        .threadpool(pool.clone())
        .build();
    assert_eq!(thread_of_a_task(&timer).as_deref(), Some("no-own-threads"));
    let named = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("executor-no-thr"))
        .count();
    assert_eq!(named, 0, "an executor thread of the timer's own");
    timer.close();
    pool.join();
}
