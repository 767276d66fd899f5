//! The executor pool of `SystemTimerBuilder::executor_threads`: thread names, a slow task
//! holding up only its own thread, exactly-once for any pool size, `close` waiting for the
//! tasks of every thread (and, called from a task, for the others only), panics caught on
//! any thread, the refused size 0, and no thread left once `close` returned.
//!
//! That the pool's threads are joined, not merely told to stop, is shown with a
//! thread-local whose destructor (which runs as the thread exits, before a join returns)
//! takes 100 ms: it has finished by the time `close` returns. On Linux the test also checks
//! that no thread named `executor-{name}*` is left in `/proc/self/task`.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::crossbeam_channel;
use timingwheel::{SystemTimer, Timer, TimerTaskEntry, timer_task};

use crate::common;
use common::ledger::Ledger;
use common::logger;
use common::rng::Rng;
use common::sync::{
    ExecutorGate, assert_close_from_the_only_executor_thread_skips_the_queue, driven, eventually,
    within,
};
use common::{PATIENCE, panic_location};

/// How long a task that stands for slow work takes.
const SLOW: Duration = Duration::from_millis(300);

/// Runs one task per pool thread at once (each waits until all have started, so each is
/// on a thread of its own), hands each the name of its thread to `each`, then lets them
/// finish.
fn on_every_pool_thread(
    timer: &SystemTimer,
    threads: usize,
    each: impl Fn(String) + Send + Sync + 'static,
) {
    let each = Arc::new(each);
    let (open, wait) = crossbeam_channel::unbounded::<()>();
    let started = Arc::new(AtomicUsize::new(0));
    for _ in 0..threads {
        let (each, wait, started) = (each.clone(), wait.clone(), started.clone());
        timer.add(timer_task(0, move || {
            each(thread::current().name().unwrap_or_default().to_owned());
            started.fetch_add(1, Ordering::SeqCst);
            let _ = wait.recv();
        }));
    }
    eventually(PATIENCE, "a task on every pool thread", || {
        started.load(Ordering::SeqCst) == threads
    });
    drop(open);
}

/// Names of this process's threads whose name starts with `prefix`, from
/// `/proc/self/task/*/comm` (Linux keeps the first 15 bytes of a name there).
#[cfg(target_os = "linux")]
fn threads_named(prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) {
            let comm = comm.trim_end().to_owned();
            if comm.starts_with(prefix) {
                names.push(comm);
            }
        }
    }
    names.sort();
    names
}

#[test]
fn one_thread_is_named_executor_name_and_several_are_numbered_from_zero() {
    for (name, threads, expected) in [
        ("pn1", 1, vec!["executor-pn1"]),
        (
            "pn3",
            3,
            vec!["executor-pn3-0", "executor-pn3-1", "executor-pn3-2"],
        ),
    ] {
        let timer = SystemTimer::builder(name).executor_threads(threads).build();
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let record = seen.clone();
        on_every_pool_thread(&timer, threads, move |thread| {
            record.lock().unwrap().insert(thread);
        });
        let seen: Vec<String> = seen.lock().unwrap().iter().cloned().collect();
        assert_eq!(seen, expected);
        #[cfg(target_os = "linux")]
        assert_eq!(threads_named(&format!("executor-{name}")), expected);
        timer.close();
    }
}

/// The quick tasks that ran, with when they ran, in the order they ran.
type RunLog = Arc<Mutex<Vec<(usize, Instant)>>>;

/// Adds a slow task (it waits for `release`), then `QUICK` tasks due with it, from one
/// thread, so that the flush hands all of them over in one batch, the slow one first.
/// Returns the instant of the adds and the instants the quick ones ran, in run order.
fn slow_then_quick(
    timer: &SystemTimer,
    release: crossbeam_channel::Receiver<()>,
) -> (Instant, RunLog) {
    const QUICK: usize = 100;
    let ran = Arc::new(Mutex::new(Vec::with_capacity(QUICK)));
    let added = Instant::now();
    timer.add(timer_task(DUE_MS, move || {
        let _ = release.recv_timeout(PATIENCE);
    }));
    for id in 0..QUICK {
        let ran = ran.clone();
        timer.add(timer_task(DUE_MS, move || {
            ran.lock().unwrap().push((id, Instant::now()));
        }));
    }
    (added, ran)
}

/// When the slow task and the quick ones are due.
const DUE_MS: i64 = 20;

#[test]
fn with_several_threads_the_tasks_that_expired_with_a_slow_one_do_not_wait_for_it() {
    for threads in [2, 4] {
        let timer = SystemTimer::builder("pool-slow")
            .executor_threads(threads)
            .build();
        let (release, wait) = crossbeam_channel::unbounded();
        driven(&timer, 2, || {
            let (added, ran) = slow_then_quick(&timer, wait);
            eventually(
                PATIENCE,
                "the quick tasks run while the slow one waits",
                || ran.lock().unwrap().len() == 100,
            );
            for &(id, at) in ran.lock().unwrap().iter() {
                let waited = at - added;
                assert!(
                    waited >= Duration::from_millis(DUE_MS as u64),
                    "{threads} threads: task {id} ran early, after {waited:?}"
                );
                assert!(
                    waited < Duration::from_secs(5),
                    "{threads} threads: task {id} after {waited:?}"
                );
            }
            drop(release);
        });
        timer.close();
    }
}

/// The same when no thread was idle as the slow task started: the others of its batch
/// should move to a thread once one is free, not wait for the slow task to end.
#[test]
fn tasks_behind_a_slow_one_move_to_a_thread_that_becomes_free() {
    let timer = SystemTimer::builder("pool-busy")
        .executor_threads(2)
        .build();
    let (release, wait) = crossbeam_channel::unbounded();
    let (busy_release, busy_wait) = crossbeam_channel::unbounded::<()>();
    driven(&timer, 2, || {
        // The other thread is busy when the batch of the slow one expires.
        let (busy_tx, busy) = mpsc::channel();
        timer.add(timer_task(0, move || {
            busy_tx.send(()).unwrap();
            let _ = busy_wait.recv_timeout(PATIENCE);
        }));
        busy.recv_timeout(PATIENCE).expect("the busy task started");
        let (_, ran) = slow_then_quick(&timer, wait);
        thread::sleep(Duration::from_millis(100));
        drop(busy_release); // a thread is free from now on
        eventually(
            Duration::from_secs(5),
            "the quick tasks run while the slow one waits",
            || ran.lock().unwrap().len() == 100,
        );
        drop(release);
    });
    timer.close();
}

/// The control of the test above: with one thread, the tasks that expired with the slow
/// one wait behind it, and run in the order they expired.
#[test]
fn with_one_thread_the_tasks_that_expired_with_a_slow_one_run_after_it_in_order() {
    let timer = SystemTimer::new("pool-one");
    let (release, wait) = crossbeam_channel::unbounded();
    driven(&timer, 2, || {
        let (_, ran) = slow_then_quick(&timer, wait);
        thread::sleep(SLOW);
        assert!(
            ran.lock().unwrap().is_empty(),
            "a quick task ran past the slow one"
        );
        let released = Instant::now();
        drop(release);
        eventually(PATIENCE, "the quick tasks run", || {
            ran.lock().unwrap().len() == 100
        });
        let ran = ran.lock().unwrap();
        assert!(ran.iter().all(|&(_, at)| at >= released));
        let order: Vec<usize> = ran.iter().map(|&(id, _)| id).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>(), "expiry order kept");
    });
    timer.close();
}

#[test]
fn every_task_runs_or_is_cancelled_exactly_once_whatever_the_pool_size() {
    const TASKS: usize = 20_000;
    const ADDERS: usize = 2;
    for threads in [1, 2, 3, 8] {
        let timer = SystemTimer::builder("pool-once")
            .executor_threads(threads)
            .build();
        let ledger = Ledger::new(TASKS);
        driven(&timer, 2, || {
            thread::scope(|s| {
                for a in 0..ADDERS {
                    let (timer, ledger) = (&timer, &ledger);
                    s.spawn(move || {
                        let mut rng = Rng::new(a as u64 + 1);
                        let mut held: Vec<(usize, TimerTaskEntry)> = Vec::new();
                        for id in (a..TASKS).step_by(ADDERS) {
                            let entry = ledger.add(timer, id, rng.below(12) as i64);
                            if rng.below(3) == 0 {
                                held.push((id, entry));
                            }
                            if held.len() > 32 {
                                let (id, entry) = held.swap_remove(rng.below(32) as usize);
                                ledger.cancel(&entry, id);
                            }
                            if id % 128 < ADDERS {
                                thread::sleep(Duration::from_millis(1));
                            }
                        }
                    });
                }
            });
            eventually(PATIENCE, "every task settled", || ledger.settled() == TASKS);
        });
        timer.close();
        let (ran, cancelled) = ledger.assert_exactly_once();
        assert!(
            ran > 0 && cancelled > 0,
            "{threads} threads: ran {ran}, cancelled {cancelled}"
        );
    }
}

#[test]
fn close_waits_for_the_tasks_running_on_every_pool_thread_and_those_queued() {
    const THREADS: usize = 4;
    let timer = SystemTimer::builder("pool-close")
        .executor_threads(THREADS)
        .build();
    let finished = Arc::new(AtomicUsize::new(0));
    let (open, wait) = crossbeam_channel::unbounded::<()>();
    let started = Arc::new(AtomicUsize::new(0));
    for _ in 0..THREADS {
        let (finished, started, wait) = (finished.clone(), started.clone(), wait.clone());
        timer.add(timer_task(0, move || {
            started.fetch_add(1, Ordering::SeqCst);
            let _ = wait.recv_timeout(PATIENCE);
            thread::sleep(SLOW);
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    eventually(PATIENCE, "one task on each thread", || {
        started.load(Ordering::SeqCst) == THREADS
    });
    let queued = Arc::new(AtomicUsize::new(0));
    for _ in 0..20 {
        let queued = queued.clone();
        timer.add(timer_task(0, move || {
            queued.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let closing = Instant::now();
    drop(open);
    timer.close();
    assert!(
        closing.elapsed() >= SLOW,
        "close returned before the slow tasks could end"
    );
    assert_eq!(
        finished.load(Ordering::SeqCst),
        THREADS,
        "close returned while a task ran"
    );
    assert_eq!(
        queued.load(Ordering::SeqCst),
        20,
        "close returned while tasks were queued"
    );
}

#[test]
fn close_from_a_task_on_a_pool_thread_waits_for_the_other_threads_but_not_for_itself() {
    let timer = Arc::new(
        SystemTimer::builder("pool-inner")
            .executor_threads(3)
            .build(),
    );
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (finished, started) = (finished.clone(), started.clone());
        timer.add(timer_task(0, move || {
            started.fetch_add(1, Ordering::SeqCst);
            thread::sleep(SLOW);
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    eventually(PATIENCE, "the two slow tasks started", || {
        started.load(Ordering::SeqCst) == 2
    });
    let (tx, rx) = mpsc::channel();
    let inner = timer.clone();
    let finished_seen = finished.clone();
    timer.add(timer_task(0, move || {
        inner.close();
        tx.send(finished_seen.load(Ordering::SeqCst)).unwrap();
    }));
    let finished_at_close = rx
        .recv_timeout(PATIENCE)
        .expect("close on a pool thread deadlocked (or waited for itself)");
    assert_eq!(
        finished_at_close, 2,
        "it returned while the other threads' tasks ran"
    );
    let outer = timer.clone();
    within(PATIENCE, "close from outside afterwards", move || {
        outer.close()
    });
}

/// A close on a pool thread should return as soon as the other threads' tasks are done,
/// not at `close`'s 10 s bound.
#[test]
fn close_from_a_task_returns_once_the_other_threads_tasks_finished() {
    let timer = Arc::new(
        SystemTimer::builder("pool-prompt")
            .executor_threads(3)
            .build(),
    );
    let started = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let started = started.clone();
        timer.add(timer_task(0, move || {
            started.fetch_add(1, Ordering::SeqCst);
            thread::sleep(SLOW);
        }));
    }
    eventually(PATIENCE, "the two slow tasks started", || {
        started.load(Ordering::SeqCst) == 2
    });
    let (tx, rx) = mpsc::channel();
    let inner = timer.clone();
    timer.add(timer_task(0, move || {
        let closing = Instant::now();
        inner.close();
        tx.send(closing.elapsed()).unwrap();
    }));
    let took = rx.recv_timeout(PATIENCE).expect("the inner close returned");
    assert!(
        took < SLOW + Duration::from_secs(2),
        "the inner close took {took:?}"
    );
}

/// With one executor thread (Kafka's), the tasks queued behind the task that closes the
/// timer cannot run until it returns: the close must not wait for them.
#[test]
fn close_from_the_only_executor_thread_does_not_wait_for_the_tasks_queued_behind_it() {
    assert_close_from_the_only_executor_thread_skips_the_queue(Arc::new(SystemTimer::new(
        "pool-alone",
    )));
}

#[test]
fn a_panicking_task_is_caught_and_logged_and_the_pool_runs_the_others_whatever_its_size() {
    logger::install();
    for threads in [1, 2, 4] {
        let message = format!("pool panic 3f9e, {threads} threads");
        let timer = SystemTimer::builder("pool-panic")
            .executor_threads(threads)
            .build();
        let ran = Arc::new(AtomicUsize::new(0));
        driven(&timer, 2, || {
            for i in 0..30 {
                let (ran, message) = (ran.clone(), message.clone());
                // Due at once and, in one batch, 5 ms out.
                let delay = if i < 15 { 0 } else { 5 };
                timer.add(timer_task(delay, move || {
                    if i % 3 == 0 {
                        panic!("{message}");
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                }));
            }
            eventually(PATIENCE, "the tasks that do not panic run", || {
                ran.load(Ordering::SeqCst) == 20
            });
        });
        eventually(PATIENCE, "each panic is logged", || {
            logger::errors_containing(&message).len() == 10
        });
        // Every thread survived: all of them can hold a task at once.
        let gate = ExecutorGate::shut(&timer, threads);
        gate.open();
        timer.close();
    }
}

#[test]
#[should_panic(expected = "SystemTimerBuilder::executor_threads: threads must be positive, got 0")]
fn zero_executor_threads_panics_naming_the_argument() {
    let _ = SystemTimer::builder("pool-zero").executor_threads(0);
}

#[test]
fn the_zero_executor_threads_panic_points_at_the_caller() {
    let location = panic_location("executor_threads", || {
        SystemTimer::builder("pool-zero").executor_threads(0)
    });
    assert_eq!(location.as_deref(), Some(file!()));
}

/// Counts, after a 100 ms pause, the exit of each thread it was installed on.
struct OnExit(Arc<AtomicUsize>);

impl Drop for OnExit {
    fn drop(&mut self) {
        thread::sleep(Duration::from_millis(100));
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

thread_local! {
    static ON_EXIT: RefCell<Option<OnExit>> = const { RefCell::new(None) };
}

/// Installs an [`OnExit`] on every thread of `timer`'s pool, counting into the result.
fn count_pool_thread_exits(timer: &SystemTimer, threads: usize) -> Arc<AtomicUsize> {
    let exited = Arc::new(AtomicUsize::new(0));
    let counter = exited.clone();
    on_every_pool_thread(timer, threads, move |_| {
        ON_EXIT.with(|on_exit| *on_exit.borrow_mut() = Some(OnExit(counter.clone())));
    });
    exited
}

#[test]
fn close_joins_every_pool_thread_and_leaves_none_behind() {
    for (name, threads) in [("pj1", 1), ("pj4", 4)] {
        let timer = SystemTimer::builder(name).executor_threads(threads).build();
        let exited = count_pool_thread_exits(&timer, threads);
        timer.close();
        assert_eq!(
            exited.load(Ordering::SeqCst),
            threads,
            "close returned before every pool thread had exited"
        );
        #[cfg(target_os = "linux")]
        eventually(Duration::from_secs(2), "no pool thread left", || {
            threads_named(&format!("executor-{name}")).is_empty()
        });
    }
}

#[test]
fn after_a_close_from_a_pool_thread_a_close_from_outside_joins_the_pool() {
    const THREADS: usize = 3;
    let timer = Arc::new(
        SystemTimer::builder("pjx")
            .executor_threads(THREADS)
            .build(),
    );
    let exited = count_pool_thread_exits(&timer, THREADS);
    let (tx, rx) = mpsc::channel();
    let inner = timer.clone();
    timer.add(timer_task(0, move || {
        inner.close();
        tx.send(()).unwrap();
    }));
    rx.recv_timeout(PATIENCE).expect("the inner close returned");
    timer.close();
    assert_eq!(
        exited.load(Ordering::SeqCst),
        THREADS,
        "the second close returned before every pool thread had exited"
    );
}
