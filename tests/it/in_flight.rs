//! `SystemTimerBuilder::max_in_flight`: at most `max` tasks handed to the executor and not
//! yet finished. At the bound, due tasks stay in the timer, pending (counted by `size()`,
//! not expired in `stats()`), and `cancel()` on them returns true; they go to the executor
//! oldest expiration first as running ones finish; nothing is lost, run twice or
//! busy-waited for; `advance_clock` keeps its contract; `close` drops them, `stop` hands
//! them back; `reschedule` moves them; on every kind of executor, inline included.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::ledger::{Ledger, churn};
use common::rng::Rng;
use common::sync::{ExecutorGate, driven, eventually};
use common::{PATIENCE, counted, panic_location};
use threadpool::ThreadPool;
use timingwheel::{
    MockTime, SystemTimer, Timer, TimerStats, TimerTask, TimerTaskEntry, timer_task,
};

/// A timer on `time` whose executor is two built-in threads, at most `max` tasks in flight.
fn bounded(name: &str, time: &MockTime, max: usize) -> SystemTimer {
    SystemTimer::builder(name)
        .time(time.clone())
        .executor_threads(2)
        .max_in_flight(max)
        .build()
}

/// Tasks that count their runs and drops.
struct Counts {
    runs: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            runs: Arc::new(AtomicUsize::new(0)),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn add(&self, timer: &dyn Timer, delay_ms: i64) -> TimerTaskEntry {
        timer.add(counted(delay_ms, &self.runs, &self.drops))
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

#[test]
fn at_the_bound_due_tasks_stay_pending_and_cancellable() {
    let time = MockTime::new();
    let timer = bounded("held", &time, 2);
    let gate = ExecutorGate::shut(&timer, 2);
    let counts = Counts::new();
    let entries: Vec<TimerTaskEntry> = (0..10).map(|_| counts.add(&timer, 10)).collect();
    time.sleep(10);
    assert!(
        timer.advance_clock(0),
        "the due list is flushed whatever the backlog"
    );
    assert_eq!(timer.size(), 10, "held tasks are pending");
    let stats = timer.stats();
    assert_eq!(
        (stats.pending, stats.expired),
        (10, 2),
        "only the gate's were handed over"
    );
    for entry in &entries[..3] {
        assert!(entry.cancel(), "a held task can be cancelled");
    }
    assert_eq!(counts.drops(), 3, "and is dropped inside cancel");
    assert_eq!(timer.size(), 7);
    gate.open();
    eventually(PATIENCE, "the held tasks run", || counts.runs() == 7);
    assert!(entries.iter().all(|entry| !entry.cancel()));
    assert_eq!(
        timer.stats(),
        TimerStats {
            added: 12,
            expired: 9,
            cancelled: 3,
            refused: 0,
            pending: 0
        }
    );
    timer.close();
    assert_eq!(counts.drops(), 10);
}

/// Tasks due at different times, added from four threads (four shards), held while the
/// executor is busy: they run in the order of their expirations.
#[test]
fn held_tasks_go_to_the_executor_oldest_expiration_first_across_threads() {
    const TASKS: i64 = 40;
    let time = MockTime::new();
    let timer = SystemTimer::builder("oldest-first")
        .time(time.clone())
        .max_in_flight(1)
        .build();
    let gate = ExecutorGate::shut(&timer, 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut rng = Rng::new(11);
    let mut delays: Vec<i64> = (1..=TASKS).collect();
    for i in (1..delays.len()).rev() {
        delays.swap(i, rng.below(i as u64 + 1) as usize);
    }
    // From four threads: four shards, whose backlogs the refill merges.
    thread::scope(|s| {
        for part in delays.chunks(TASKS as usize / 4) {
            let (timer, order) = (&timer, &order);
            s.spawn(move || {
                for &delay in part {
                    let order = Arc::clone(order);
                    timer.add(timer_task(delay, move || order.lock().unwrap().push(delay)));
                }
            });
        }
    });
    // The driver keeps up, a millisecond at a time; the executor does not.
    for _ in 0..=TASKS {
        time.sleep(1);
        while timer.advance_clock(0) {}
    }
    assert_eq!(timer.size(), TASKS as usize);
    gate.open();
    eventually(PATIENCE, "every held task ran", || {
        order.lock().unwrap().len() == TASKS as usize
    });
    assert_eq!(*order.lock().unwrap(), (1..=TASKS).collect::<Vec<_>>());
    timer.close();
}

/// Tasks found due together (the driver fell behind: one coarse bucket), and one added
/// overdue after them, go over by expiration, not in the order they were found or added;
/// `next_expiration_ms` names the one that goes first.
#[test]
fn held_tasks_found_due_together_or_added_overdue_go_over_oldest_expiration_first() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("oldest-first-late")
        .time(time.clone())
        .max_in_flight(1)
        .build();
    let gate = ExecutorGate::shut(&timer, 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let add = |delay: i64| {
        let order = Arc::clone(&order);
        timer.add(timer_task(delay, move || order.lock().unwrap().push(delay)))
    };
    for delay in [48, 41, 45, 43] {
        add(delay);
    }
    time.sleep(2_000);
    while timer.advance_clock(0) {}
    let overdue = add(-3_000);
    assert_eq!(timer.next_expiration_ms(), Some(overdue.expiration_ms()));
    gate.open();
    eventually(PATIENCE, "every held task ran", || {
        order.lock().unwrap().len() == 5
    });
    assert_eq!(*order.lock().unwrap(), [-3_000, 41, 43, 45, 48]);
    timer.close();
}

/// A thread that finishes a task and finds the executor's queue empty hands a held task
/// over at once, even with less than an eighth of the bound free: the eighth only batches
/// refills while the executor has work queued.
#[test]
fn a_finisher_with_nothing_queued_refills_with_one_permit_free() {
    let timer = SystemTimer::builder("refill-one")
        .executor_threads(16)
        .max_in_flight(16)
        .build();
    // 15 tasks in flight for the whole test, and a 16th until `last` opens: the bound.
    let busy = ExecutorGate::shut(&timer, 15);
    let last = ExecutorGate::shut(&timer, 1);
    let (ran_tx, ran) = std::sync::mpsc::channel();
    let held = timer.add(timer_task(0, move || ran_tx.send(()).unwrap()));
    assert!(
        ran.recv_timeout(Duration::from_millis(50)).is_err(),
        "held at the bound"
    );
    drop(held);
    last.open();
    ran.recv_timeout(PATIENCE)
        .expect("the thread that finished ran the held task, the other 15 still busy");
    busy.open();
    timer.close();
}

#[test]
fn a_task_due_at_once_is_held_at_the_bound_and_can_be_cancelled() {
    let time = MockTime::new();
    let timer = bounded("due-now", &time, 1);
    let gate = ExecutorGate::shut(&timer, 1);
    let counts = Counts::new();
    let now = counts.add(&timer, 0);
    let past = counts.add(&timer, -5);
    assert_eq!(timer.size(), 2);
    assert!(now.cancel(), "held, not handed over");
    gate.open();
    eventually(PATIENCE, "the other one runs", || counts.runs() == 1);
    assert!(!past.cancel());
    timer.close();
}

/// A held task is pending, so with `max_pending` it takes a place under that bound too,
/// until it is cancelled.
#[test]
fn a_held_task_counts_against_max_pending() {
    let timer = SystemTimer::builder("held-pending")
        .executor_threads(1)
        .max_in_flight(1)
        .max_pending(1)
        .build();
    let gate = ExecutorGate::shut(&timer, 1);
    let held = timer.add(timer_task(0, || {}));
    assert_eq!(timer.size(), 1, "held, so pending");
    assert!(
        matches!(
            timer.try_add(timer_task(60_000, || {})),
            Err(timingwheel::AddError::Full(_))
        ),
        "the held task fills the one place"
    );
    assert!(held.cancel());
    assert!(
        timer.try_add(timer_task(60_000, || {})).is_ok(),
        "room again"
    );
    gate.open();
    timer.close();
}

#[test]
fn reschedule_moves_a_held_task_back_into_the_wheel_or_to_the_end_of_the_backlog() {
    let time = MockTime::new();
    let timer = bounded("reschedule-held", &time, 1);
    let gate = ExecutorGate::shut(&timer, 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let add = |name: &'static str| {
        let order = Arc::clone(&order);
        timer.add(timer_task(10, move || order.lock().unwrap().push(name)))
    };
    let (later, last, first) = (add("later"), add("last"), add("first"));
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(timer.size(), 3);
    assert!(
        timer.reschedule(&later, 50),
        "a held task moves back into the wheel"
    );
    assert!(timer.reschedule(&last, 0), "to the end of the backlog");
    assert_eq!(timer.size(), 3);
    gate.open();
    eventually(PATIENCE, "the held ones run", || {
        order.lock().unwrap().len() == 2
    });
    assert_eq!(*order.lock().unwrap(), ["first", "last"]);
    assert!(!timer.advance_clock(0));
    time.sleep(50);
    while timer.advance_clock(0) {}
    eventually(PATIENCE, "the rescheduled one runs at its new time", || {
        order.lock().unwrap().len() == 3
    });
    assert!(!first.cancel() && !later.cancel() && !last.cancel());
    timer.close();
}

#[test]
fn close_drops_the_held_tasks_and_stop_hands_them_back() {
    for stop in [false, true] {
        let time = MockTime::new();
        let timer = bounded("close-held", &time, 1);
        let gate = ExecutorGate::shut(&timer, 1);
        let counts = Counts::new();
        let entries: Vec<TimerTaskEntry> = (0..5).map(|_| counts.add(&timer, 5)).collect();
        time.sleep(5);
        while timer.advance_clock(0) {}
        assert_eq!(timer.size(), 5);
        let closer = thread::spawn(move || {
            let handed_back = if stop {
                timer.stop().len()
            } else {
                timer.close();
                0
            };
            (timer, handed_back)
        });
        thread::sleep(Duration::from_millis(20));
        gate.open();
        let (timer, handed_back) = closer.join().unwrap();
        assert_eq!(handed_back, if stop { 5 } else { 0 });
        assert_eq!(counts.runs(), 0, "held tasks are still waiting: none runs");
        assert_eq!(counts.drops(), 5);
        assert_eq!(timer.size(), 0);
        assert!(
            entries
                .iter()
                .all(|entry| !entry.cancel() && !entry.cancelled())
        );
    }
}

/// An inline executor at a bound of 1: each finished task hands the next over from inside
/// the refill that ran it, which must loop, not recurse (a recursion would overflow the
/// stack long before 50,000 tasks).
#[test]
fn an_inline_executor_at_a_bound_of_one_runs_a_long_backlog_without_recursing() {
    const TASKS: usize = 50_000;
    let time = MockTime::new();
    let timer = SystemTimer::builder("inline-bounded")
        .time(time.clone())
        .executor(|job| job())
        .max_in_flight(1)
        .build();
    let counts = Counts::new();
    for _ in 0..TASKS {
        counts.add(&timer, 3);
    }
    time.sleep(3);
    while timer.advance_clock(0) {}
    assert_eq!(counts.runs(), TASKS);
    assert_eq!(timer.size(), 0);
}

/// Adds with delays from 0 to 11 ms, cancels and a driver, on several executors: every
/// task runs once or is cancelled once and is freed once, and no more than the bound ever
/// run at once.
#[test]
fn never_more_than_the_bound_run_and_every_task_runs_or_is_cancelled_once() {
    const TASKS: usize = 20_000;
    const ADDERS: usize = 2;
    const MAX: usize = 3;
    let pool = ThreadPool::new(4);
    let timers = [
        SystemTimer::builder("bound-pool")
            .threadpool(pool.clone())
            .max_in_flight(MAX)
            .build(),
        SystemTimer::builder("bound-threads")
            .executor_threads(4)
            .max_in_flight(MAX)
            .build(),
        SystemTimer::builder("bound-one").max_in_flight(MAX).build(),
    ];
    for timer in &timers {
        let ledger = Ledger::new(TASKS);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        driven(timer, 2, || {
            churn(timer, &ledger, ADDERS, |id, delay_ms| {
                let (task, running, most) =
                    (ledger.task(id, 0), Arc::clone(&running), Arc::clone(&most));
                timer_task(delay_ms, move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                    task.run();
                })
            });
            eventually(PATIENCE, "every task settled", || ledger.settled() == TASKS);
        });
        timer.close();
        let (ran, cancelled) = ledger.assert_exactly_once();
        assert!(ran > 0 && cancelled > 0, "ran {ran}, cancelled {cancelled}");
        let most = most.load(Ordering::SeqCst);
        assert!(most <= MAX, "{most} tasks ran at once, bound {MAX}");
    }
    pool.join();
}

/// Held tasks wait without anyone polling for room: the timer's threads (its driver and its
/// executor) use next to no CPU while the executor is busy and thousands of tasks are
/// held. (Their own CPU time: other tests of this binary run meanwhile.)
#[cfg(target_os = "linux")]
#[test]
fn nothing_busy_waits_while_tasks_are_held() {
    const HELD: usize = 10_000;
    const IDLE: Duration = Duration::from_millis(500);
    // Thread names are cut to 15 bytes in /proc: both start with "idle-held-".
    let timer = SystemTimer::builder("idle-held-timer")
        .max_in_flight(1)
        .build();
    let gate = ExecutorGate::shut(&timer, 1);
    let counts = Counts::new();
    for _ in 0..HELD {
        counts.add(&timer, 1);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = common::sync::SetOnDrop(&stop);
        thread::Builder::new()
            .name("idle-held-drive".into())
            .spawn_scoped(s, || {
                while !stop.load(Ordering::SeqCst) {
                    timer.advance_clock(200);
                }
            })
            .unwrap();
        eventually(PATIENCE, "every task due and held", || {
            timer.size() == HELD && timer.stats().expired == 1
        });
        thread::sleep(Duration::from_millis(20));
        let before = threads_cpu("executor-idle-h") + threads_cpu("idle-held-drive");
        thread::sleep(IDLE);
        let used = threads_cpu("executor-idle-h") + threads_cpu("idle-held-drive") - before;
        assert!(
            used < IDLE / 10,
            "{used:?} of CPU in {IDLE:?} with tasks held"
        );
        gate.open();
        eventually(PATIENCE, "the held tasks ran", || counts.runs() == HELD);
    });
}

/// The CPU time so far (user + system) of this process's threads whose name (as `/proc`
/// keeps it, 15 bytes) starts with `prefix`.
#[cfg(target_os = "linux")]
fn threads_cpu(prefix: &str) -> Duration {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        // After the name: state is field 3; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    // The kernel's clock ticks, 100 per second on Linux.
    Duration::from_millis(ticks * 10)
}

/// With the executor at its bound, `advance_clock` still flushes lists as they come due
/// (and returns true for them), and returns false no earlier than its timeout when nothing
/// is due.
#[test]
fn advance_clock_keeps_its_contract_at_the_bound() {
    let time = MockTime::new();
    let timer = bounded("contract", &time, 1);
    let gate = ExecutorGate::shut(&timer, 1);
    let counts = Counts::new();
    counts.add(&timer, 5);
    counts.add(&timer, 10);
    time.sleep(5);
    assert!(timer.advance_clock(0));
    time.sleep(5);
    assert!(
        timer.advance_clock(0),
        "the next list is flushed though nothing can run"
    );
    assert_eq!(timer.size(), 2);
    let start = Instant::now();
    assert!(!timer.advance_clock(100));
    assert!(start.elapsed() >= Duration::from_millis(100));
    gate.open();
    eventually(PATIENCE, "both run", || counts.runs() == 2);
    timer.close();
}

#[test]
#[should_panic(expected = "SystemTimerBuilder::max_in_flight: max must be positive, got 0")]
fn a_bound_of_zero_panics_naming_the_argument() {
    let _ = SystemTimer::builder("zero").max_in_flight(0);
}

#[test]
fn the_bound_of_zero_panic_points_at_the_caller() {
    let location = panic_location("max_in_flight", || {
        SystemTimer::builder("zero").max_in_flight(0)
    });
    assert_eq!(location.as_deref(), Some(file!()));
}
