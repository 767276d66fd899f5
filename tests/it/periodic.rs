//! `schedule_periodic` and `PeriodicHandle`: the schedule and its missed-tick policies on a
//! `MockTimer` (every run's time checked exactly), then cancel, close, panics and overlap
//! on `SystemTimer`s with executor pools, counting every run.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::logger;
use common::sync::eventually;
use common::{PATIENCE, drive_mock_until, panic_message_and_location};
use timingwheel::{
    AddError, MissedTicks, MockTime, MockTimer, PeriodicHandle, SystemTimer, SystemTimerReaper,
    Timer, TimerTask, TimerTaskEntry, schedule_periodic, timer_task,
};

/// A mock timer, and a schedule on it that records the clock (relative to its start) at
/// every run; each of the first `overruns` runs moves the clock by `overrun_ms` itself (a
/// slow run).
fn recorded(
    period_ms: i64,
    missed: MissedTicks,
    overrun_ms: i64,
    overruns: usize,
) -> (Arc<MockTimer>, PeriodicHandle, Arc<Mutex<Vec<i64>>>) {
    let timer = Arc::new(MockTimer::new());
    let start = timer.time().hi_res_clock_ms();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (time, runs) = (timer.time().clone(), log.clone());
    let handle = schedule_periodic(timer.clone(), period_ms, missed, move || {
        let mut runs = runs.lock().unwrap();
        runs.push(time.hi_res_clock_ms() - start);
        if runs.len() <= overruns {
            time.sleep(overrun_ms);
        }
    });
    (timer, handle, log)
}

fn taken(log: &Mutex<Vec<i64>>) -> Vec<i64> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// A pool of `threads` executor threads driven by a reaper.
fn pool(name: &str, threads: usize) -> Arc<SystemTimerReaper> {
    let timer = SystemTimer::builder(name).executor_threads(threads).build();
    Arc::new(SystemTimerReaper::new(&format!("{name}-reaper"), timer))
}

#[test]
fn runs_every_period_from_one_period_after_the_call() {
    let (timer, handle, log) = recorded(100, MissedTicks::Burst, 0, 0);
    for _ in 0..5 {
        timer.advance_clock(99);
        timer.advance_clock(1);
    }
    assert_eq!(taken(&log), [100, 200, 300, 400, 500]);
    assert_eq!(handle.runs(), 5);
    assert_eq!(timer.size(), 1, "one pending task at a time");
}

#[test]
fn after_a_stall_burst_catches_up_and_delay_and_skip_do_not() {
    // Ticks due at 100, 200, ...; nothing drives the timer until 350.
    let expected: [(MissedTicks, &[i64]); 3] = [
        (MissedTicks::Burst, &[350, 350, 350, 400, 500]),
        (MissedTicks::Delay, &[350, 450, 550]),
        (MissedTicks::Skip, &[350, 400, 500]),
    ];
    for (policy, runs) in expected {
        let (timer, _handle, log) = recorded(100, policy, 0, 0);
        let start = timer.time().hi_res_clock_ms();
        timer.advance_clock(350);
        drive_mock_until(&timer, start, 550);
        assert_eq!(taken(&log), runs, "{policy:?}");
    }
}

#[test]
fn runs_longer_than_the_period_miss_ticks_and_the_policy_decides_what_follows() {
    // The first three runs take 250 ms each, of a 100 ms period; the rest take no time.
    let expected: [(MissedTicks, &[i64]); 3] = [
        // Back to back, then the ticks it fell behind on (400-800) at once, then on time.
        (
            MissedTicks::Burst,
            &[100, 350, 600, 850, 850, 850, 850, 850, 900, 1000],
        ),
        // Each late tick runs once, and the next is a period after it started.
        (MissedTicks::Delay, &[100, 350, 600, 850, 950]),
        // Each late tick runs once, and the next is the next one of the original schedule.
        (MissedTicks::Skip, &[100, 350, 600, 850, 900, 1000]),
    ];
    for (policy, runs) in expected {
        let (timer, handle, log) = recorded(100, policy, 250, 3);
        let start = timer.time().hi_res_clock_ms();
        drive_mock_until(&timer, start, 1_000);
        assert_eq!(taken(&log), runs, "{policy:?}");
        assert!(handle.cancel());
    }
}

#[test]
fn cancel_returns_true_only_while_the_schedule_is_active() {
    let timer = Arc::new(MockTimer::new());
    let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || {});
    let clone = handle.clone();
    assert!(handle.is_active());
    assert!(clone.cancel());
    assert!(!handle.cancel());
    assert!(!handle.is_active());

    let closed = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || {});
    timer.close();
    assert!(!closed.is_active(), "its timer closed");
    assert!(!closed.cancel());
    let never = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || unreachable!());
    assert!(!never.is_active(), "a closed timer refuses the first tick");
    assert_eq!(never.runs(), 0);
}

#[test]
fn cancel_drops_the_pending_task_and_the_closure_at_once() {
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let timer = Arc::new(MockTimer::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, move || {
        let _keep = &flag;
    });
    timer.advance_clock(10);
    assert_eq!(timer.size(), 1);
    assert!(handle.cancel());
    assert_eq!(timer.size(), 0);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the closure was dropped inside cancel"
    );
    timer.advance_clock(100);
    assert_eq!(handle.runs(), 1);
}

#[test]
fn dropping_every_handle_does_not_end_the_schedule() {
    let timer = Arc::new(MockTimer::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    drop(schedule_periodic(
        timer.clone(),
        10,
        MissedTicks::Burst,
        move || {
            counter.fetch_add(1, Ordering::SeqCst);
        },
    ));
    timer.advance_clock(30);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    timer.close();
    timer.advance_clock(30);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[test]
fn a_panicking_run_ends_the_schedule() {
    // MockTimer: the panic reaches the caller of advance_clock.
    let timer = Arc::new(MockTimer::new());
    let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || panic!("boom"));
    let caught = catch_unwind(AssertUnwindSafe(|| timer.advance_clock(10)));
    assert!(caught.is_err());
    assert!(!handle.is_active());
    assert_eq!((handle.runs(), timer.size()), (0, 0));
    assert!(!handle.cancel());

    // SystemTimer: its executor logs the panic; the schedule ends, the executor goes on.
    logger::install();
    let timer = pool("periodic-panic", 1);
    let handle = schedule_periodic(timer.clone(), 1, MissedTicks::Burst, || {
        panic!("periodic run panicked on purpose")
    });
    eventually(PATIENCE, "the schedule to end", || !handle.is_active());
    assert_eq!(
        logger::errors_containing("periodic run panicked on purpose").len(),
        1
    );
    assert_eq!(timer.size(), 0);
    timer.close();
}

#[test]
#[should_panic(expected = "schedule_periodic: period_ms must be positive, got 0")]
fn a_zero_period_panics_naming_the_argument() {
    schedule_periodic(Arc::new(MockTimer::new()), 0, MissedTicks::Burst, || {});
}

#[test]
fn a_negative_period_panic_points_at_the_caller() {
    let (message, location) = panic_message_and_location("period_ms", || {
        schedule_periodic(Arc::new(MockTimer::new()), -7, MissedTicks::Skip, || {});
    });
    assert_eq!(
        message,
        "schedule_periodic: period_ms must be positive, got -7"
    );
    assert_eq!(location.as_deref(), Some(file!()));
}

/// Schedules that each record whether two of their runs ever overlapped.
const SCHEDULES: usize = 4;
const EXECUTOR_THREADS: usize = 4;
const STRESS_FOR: Duration = Duration::from_millis(600);

#[test]
fn runs_never_overlap_on_a_pool_of_executor_threads() {
    let timer = pool("periodic-overlap", EXECUTOR_THREADS);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..SCHEDULES)
        .map(|i| {
            let running = AtomicBool::new(false);
            let overlaps = overlaps.clone();
            // Runs of 0-3 ms on a 1 ms period: the next tick is often due during a run.
            let missed = [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip][i % 3];
            let mut n = 0u64;
            schedule_periodic(timer.clone(), 1, missed, move || {
                if running.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                n += 1;
                thread::sleep(Duration::from_micros(n % 4 * 1_000));
                running.store(false, Ordering::SeqCst);
            })
        })
        .collect();
    thread::sleep(STRESS_FOR);
    // Ten runs each may take longer on a loaded machine.
    eventually(PATIENCE, "ten runs of every schedule", || {
        handles.iter().all(|handle| handle.runs() >= 10)
    });
    for handle in &handles {
        assert!(handle.cancel());
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    timer.close();
}

#[test]
fn no_run_starts_after_cancel_returns() {
    const ROUNDS: u64 = 40;
    let timer = pool("periodic-cancel", EXECUTOR_THREADS);
    for round in 0..ROUNDS {
        let started = Arc::new(AtomicU64::new(0));
        let finished = Arc::new(AtomicU64::new(0));
        let (s, f) = (started.clone(), finished.clone());
        let handle = schedule_periodic(timer.clone(), 1, MissedTicks::Burst, move || {
            s.fetch_add(1, Ordering::SeqCst);
            thread::sleep(Duration::from_micros(300));
            f.fetch_add(1, Ordering::SeqCst);
        });
        thread::sleep(Duration::from_micros(500 * (round % 8)));
        assert!(handle.cancel());
        let at_cancel = started.load(Ordering::SeqCst);
        assert_eq!(
            finished.load(Ordering::SeqCst),
            at_cancel,
            "a run still in progress"
        );
        assert_eq!(handle.runs(), at_cancel);
        thread::sleep(Duration::from_millis(5));
        assert_eq!(
            started.load(Ordering::SeqCst),
            at_cancel,
            "a run started after cancel"
        );
    }
    assert_eq!(timer.size(), 0);
    timer.close();
}

#[test]
fn a_run_may_cancel_its_own_schedule_on_a_pool() {
    let timer = pool("periodic-self", EXECUTOR_THREADS);
    let slot: Arc<Mutex<Option<PeriodicHandle>>> = Arc::default();
    let own = slot.clone();
    let handle = schedule_periodic(timer.clone(), 1, MissedTicks::Burst, move || {
        if let Some(handle) = own.lock().unwrap().take() {
            assert!(handle.cancel(), "cancelled from inside its own run");
        }
    });
    *slot.lock().unwrap() = Some(handle.clone());
    eventually(PATIENCE, "the schedule to cancel itself", || {
        !handle.is_active()
    });
    // Waits for the run that cancelled it, which may not have returned yet.
    assert!(!handle.cancel());
    let runs = handle.runs();
    assert!(runs >= 1);
    thread::sleep(Duration::from_millis(20));
    assert_eq!(
        handle.runs(),
        runs,
        "a run after the schedule cancelled itself"
    );
    timer.close();
}

#[test]
fn closing_the_timer_during_a_run_ends_the_schedule_after_that_run() {
    let timer = pool("periodic-close", 2);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let handle = schedule_periodic(timer.clone(), 1, MissedTicks::Burst, move || {
        let _ = entered_tx.send(());
        thread::sleep(Duration::from_millis(50));
    });
    entered.recv_timeout(PATIENCE).unwrap();
    let start = Instant::now();
    timer.close(); // waits for the run in progress
    assert!(start.elapsed() < PATIENCE);
    assert!(!handle.is_active());
    let runs = handle.runs();
    assert!(runs >= 1);
    thread::sleep(Duration::from_millis(20));
    assert_eq!(handle.runs(), runs);
    assert!(!handle.cancel());
}

/// On a timer whose executor runs jobs inline and whose tick is coarser than the period,
/// every tick is due as soon as it is added, so the timer runs it inside `try_add`, on the
/// thread that schedules it. The schedule must not hold its own lock across that call.
#[test]
fn an_inline_executor_runs_ticks_due_at_once_without_deadlock() {
    let (handle, timer) = common::sync::within(PATIENCE, "schedule_periodic", || {
        let timer: Arc<dyn Timer> = Arc::new(
            SystemTimer::builder("periodic-inline")
                .tick_ms(50)
                .executor(|job| job())
                .build(),
        );
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let handle = schedule_periodic(timer.clone(), 5, MissedTicks::Delay, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        (handle, timer)
    });
    // Each run schedules the next tick, which is due at once too while the wheel's 50 ms
    // tick has not passed: the runs go on, on whichever thread adds the next tick, until
    // cancelled. A tick added later than that (a slow start, a loaded machine) waits in
    // the wheel for a driver, which runs it inline too.
    common::sync::driven(&*timer, 1, || {
        eventually(PATIENCE, "a run", || handle.runs() >= 1);
    });
    assert!(common::sync::within(PATIENCE, "cancel", move || handle.cancel()));
    timer.close();
}

/// A SystemTimer on a MockTime, bounded to `max_pending` waiting tasks, with a step that
/// moves the clock, flushes and waits for the executor.
fn bounded(max_pending: usize) -> (Arc<SystemTimer>, MockTime, impl Fn(i64)) {
    let time = MockTime::new();
    let timer = Arc::new(
        SystemTimer::builder("periodic-full")
            .time(time.clone())
            .max_pending(max_pending)
            .build(),
    );
    let (driven, clock) = (timer.clone(), time.clone());
    let step = move |ms| {
        clock.sleep(ms);
        while driven.advance_clock(0) {}
        common::sync::barrier(&*driven);
    };
    (timer, time, step)
}

/// A task run between a tick's expiry and its run takes the place the tick left: the next
/// tick is added over the bound, not refused.
#[test]
fn a_full_timer_neither_ends_a_schedule_nor_drops_its_due_tick() {
    let (timer, _time, step) = bounded(3);
    let fillers = Arc::new(Mutex::new(Vec::new()));
    let (filler, kept) = (timer.clone(), fillers.clone());
    // Flushed with the tick, and run before it: it takes the places both leave.
    timer.add(timer_task(10, move || {
        let mut kept = kept.lock().unwrap();
        kept.extend((0..2).map(|_| filler.add(timer_task(600_000, || {}))));
    }));
    let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || {});
    let _third = timer.add(timer_task(600_000, || {}));
    step(10);
    assert!(
        fillers.lock().unwrap().iter().all(|e| !e.cancelled()),
        "the timer is full"
    );
    assert_eq!(handle.runs(), 1, "the due tick ran");
    assert!(handle.is_active());
    assert_eq!(timer.size(), 4, "its next tick went over the bound");
    step(10);
    assert_eq!(handle.runs(), 2);
    assert!(handle.cancel());
    assert_eq!(timer.size(), 3);
}

/// Also through the wrappers, which forward `try_add_unbounded`.
#[test]
fn a_schedule_made_on_a_full_timer_runs_all_the_same() {
    let (timer, time, step) = bounded(1);
    let _holder = timer.add(timer_task(600_000, || {}));
    let boxed: Arc<dyn Timer> = Arc::new(Box::new(timer.clone()) as Box<dyn Timer>);
    let handle = schedule_periodic(boxed, 10, MissedTicks::Burst, || {});
    assert!(handle.is_active());
    assert_eq!(timer.size(), 2, "its first tick went over the bound");
    step(20);
    assert_eq!(handle.runs(), 2);
    assert!(handle.cancel());

    let full = SystemTimer::builder("periodic-full")
        .time(time)
        .max_pending(0);
    let reaper = Arc::new(SystemTimerReaper::new("periodic-full", full.build()));
    let handle = schedule_periodic(reaper.clone(), 10, MissedTicks::Burst, || {});
    assert!(handle.is_active());
    assert_eq!(reaper.size(), 1);
    reaper.close();
    assert!(!handle.is_active(), "a closed timer still ends it");
}

/// A `MockTimer` whose storage is full for the next `refusals` tasks added past its bound:
/// `try_add_unbounded` refuses them (`AddError::Full`), then takes tasks again.
#[derive(Default)]
struct FullStore {
    inner: MockTimer,
    refusals: AtomicUsize,
}

impl Timer for FullStore {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        self.inner.add(task)
    }
    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        self.inner.try_add(task)
    }
    fn try_add_unbounded(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        let refusal = |n: usize| n.checked_sub(1);
        let full = self
            .refusals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, refusal);
        match full {
            Ok(_) => Err(AddError::Full(task)),
            Err(_) => self.inner.try_add_unbounded(task),
        }
    }
    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        self.inner.reschedule(entry, delay_ms)
    }
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.inner.advance_clock(timeout_ms)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn close(&self) {
        self.inner.close();
    }
    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.inner.stop()
    }
}

/// A refused tick ends the schedule even when the store has room again at once: no tick
/// runs early, none later.
#[test]
fn a_tick_refused_by_a_full_store_ends_the_schedule() {
    let timer = Arc::new(FullStore::default());
    timer.refusals.store(1, Ordering::SeqCst);
    let never = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || unreachable!());
    assert!(!never.is_active(), "its first tick was refused");
    timer.advance_clock(100);
    assert_eq!((never.runs(), timer.size()), (0, 0));

    let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || {});
    timer.advance_clock(10);
    assert_eq!(handle.runs(), 1);
    timer.refusals.store(1, Ordering::SeqCst);
    timer.advance_clock(10);
    assert!(!handle.is_active(), "its next tick was refused");
    assert_eq!(
        (handle.runs(), timer.size()),
        (1, 0),
        "the due tick did not run"
    );
    timer.advance_clock(100);
    assert_eq!(handle.runs(), 1);
}
