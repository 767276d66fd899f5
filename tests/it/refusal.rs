//! Refusal instead of panic: `Timer::try_add` and `AddError`, `SystemTimerBuilder::max_pending`
//! (Netty's `maxPendingTimeouts`), `add` on a timer that cannot take a task, and
//! `SystemTimer::stats`; then delays given as `Duration` (`IntoDelayMs`).
//!
//! Logic tests step a `MockTime`; the concurrent ones count every task (`std::thread::scope`,
//! sizes in consts). See `docs/guarantees.md` ("Refusal, bounds and stats").

use crate::common;

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::rng::Rng;
use common::sync::{ExecutorGate, SetOnDrop, barrier, eventually};
use common::{Counted, NEVER_MS, PATIENCE, counted, mocked};
use timingwheel::{
    AddError, FnTask, IntoDelayMs, MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerStats,
    TimerTask, TimerTaskEntry, timer_task,
};

/// Run and drop counters for the tasks of one test.
#[derive(Default)]
struct Tally {
    runs: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Tally {
    fn task(&self, delay_ms: i64) -> Box<Counted> {
        counted(delay_ms, &self.runs, &self.drops)
    }
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
    fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

/// Every kind of timer, closed.
fn closed_timers() -> Vec<(&'static str, Box<dyn Timer>)> {
    let timers: Vec<(&'static str, Box<dyn Timer>)> = vec![
        ("SystemTimer", Box::new(SystemTimer::new("closed"))),
        (
            "SystemTimerReaper",
            Box::new(SystemTimerReaper::new(
                "closed-reaper",
                SystemTimer::new("closed"),
            )),
        ),
        ("MockTimer", Box::new(MockTimer::new())),
        ("Arc<MockTimer>", Box::new(Arc::new(MockTimer::new()))),
    ];
    for (_, timer) in &timers {
        timer.close();
    }
    timers
}

#[test]
fn try_add_on_a_closed_timer_hands_the_task_back_unrun() {
    for (kind, timer) in closed_timers() {
        for delay_ms in [-1, 0, 10, NEVER_MS] {
            let tally = Tally::default();
            let refused = timer.try_add(tally.task(delay_ms)).unwrap_err();
            assert!(
                matches!(refused, AddError::Closed(_)),
                "{kind}, {delay_ms}: {refused:?}"
            );
            let task = refused.into_task();
            assert_eq!(task.delay_ms(), delay_ms, "{kind}: the same task");
            assert_eq!(
                (tally.runs(), tally.drops()),
                (0, 0),
                "{kind}: not run, not dropped"
            );
            drop(task); // the caller's to drop (or run, or fail)
            assert_eq!((tally.runs(), tally.drops()), (0, 1), "{kind}");
        }
    }
}

#[test]
fn a_task_handed_back_can_be_run_by_the_caller() {
    let timer = MockTimer::new();
    timer.close();
    let ran = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&ran);
    let refused = timer.try_add(timer_task(5, move || r.store(true, Ordering::SeqCst)));
    refused.unwrap_err().into_task().run();
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn add_on_a_closed_or_full_timer_returns_a_refused_entry_and_drops_the_task_unrun() {
    let (full, _time) = mocked("full", Some(1));
    full.add(timer_task(NEVER_MS, || {}));
    let mut cases: Vec<(&str, Box<dyn Timer>)> = closed_timers();
    cases.push(("full SystemTimer", Box::new(full)));
    for (kind, timer) in cases {
        let tally = Tally::default();
        let entry = timer.add(tally.task(NEVER_MS));
        assert!(entry.cancelled(), "{kind}: refused");
        assert!(!entry.cancel(), "{kind}: nothing to cancel");
        assert_eq!(
            (tally.runs(), tally.drops()),
            (0, 1),
            "{kind}: dropped, not run"
        );
    }
}

#[test]
fn max_pending_refuses_beyond_the_bound_until_room_is_made() {
    const BOUND: usize = 3;
    let (timer, time) = mocked("bounded", Some(BOUND));
    let tally = Tally::default();
    let entries: Vec<TimerTaskEntry> = (1..=BOUND as i64)
        .map(|i| timer.try_add(tally.task(i * 10)).expect("room"))
        .collect();
    assert_eq!(timer.size(), BOUND);
    let refused = timer.try_add(tally.task(5)).unwrap_err();
    assert!(matches!(refused, AddError::Full(_)), "{refused:?}");
    assert_eq!(refused.into_task().delay_ms(), 5);
    assert_eq!((tally.runs(), tally.drops()), (0, 1));

    // A cancel makes room, and so does an expiry.
    assert!(entries[2].cancel());
    timer
        .try_add(tally.task(NEVER_MS))
        .expect("room after a cancel");
    assert!(timer.try_add(tally.task(NEVER_MS)).is_err());
    time.sleep(10);
    while timer.advance_clock(0) {}
    barrier(&timer);
    assert_eq!(tally.runs(), 1);
    timer
        .try_add(tally.task(NEVER_MS))
        .expect("room after an expiry");
    assert!(timer.try_add(tally.task(NEVER_MS)).is_err());
    assert_eq!(timer.size(), BOUND);
    let stats = timer.stats();
    // The barrier's task counts too: added and expired at once.
    assert_eq!((stats.added, stats.refused), (5 + 1, 3));
}

#[test]
fn a_task_due_now_is_never_refused_for_being_full() {
    let (timer, _time) = mocked("full-but-due", Some(1));
    timer.try_add(timer_task(NEVER_MS, || {})).unwrap();
    assert!(timer.try_add(timer_task(NEVER_MS, || {})).is_err(), "full");
    let tally = Tally::default();
    for delay_ms in [0, -1, i64::MIN] {
        let entry = timer
            .try_add(tally.task(delay_ms))
            .expect("due now: never refused");
        assert!(!entry.cancelled());
        assert!(!timer.add(tally.task(delay_ms)).cancelled(), "add neither");
    }
    barrier(&timer);
    assert_eq!(tally.runs(), 6);
    assert_eq!(timer.stats().refused, 1);
}

/// With `max_in_flight` a due task is held in the timer, pending, but still never refused
/// for being full: it counts in `size()` above `max_pending` until it runs.
#[test]
fn a_task_due_now_is_never_refused_for_being_full_with_max_in_flight() {
    let timer = SystemTimer::builder("full-but-held")
        .max_pending(2)
        .max_in_flight(1)
        .build();
    let tally = Tally::default();
    let gate = ExecutorGate::shut(&timer, 1);
    let waiting: Vec<TimerTaskEntry> = (0..2)
        .map(|_| timer.try_add(tally.task(NEVER_MS)).unwrap())
        .collect();
    assert!(timer.try_add(tally.task(NEVER_MS)).is_err(), "full");
    let due = timer
        .try_add(tally.task(0))
        .expect("due now: never refused");
    assert!(timer.reschedule(&waiting[0], 0), "nor rescheduled to now");
    assert_eq!(timer.size(), 3, "both held, both pending");
    gate.open();
    eventually(PATIENCE, "both ran", || tally.runs() == 2);
    assert!(!due.cancel() && !waiting[0].cancel());
    timer
        .try_add(tally.task(-1))
        .expect("nor with the executor idle");
    eventually(PATIENCE, "it ran", || tally.runs() == 3);
    assert_eq!(timer.size(), 1);
    assert_eq!(timer.stats().refused, 1);
}

#[test]
fn a_zero_max_pending_refuses_every_task_that_would_wait() {
    let (timer, _time) = mocked("zero", Some(0));
    let tally = Tally::default();
    assert!(matches!(
        timer.try_add(tally.task(10)),
        Err(AddError::Full(_))
    ));
    assert!(timer.add(tally.task(10)).cancelled());
    assert!(!timer.add(tally.task(0)).cancelled(), "due now: taken");
    barrier(&timer);
    assert_eq!((tally.runs(), tally.drops()), (1, 3));
}

/// Threads adding at once to a bounded timer, and how often.
const ADDERS: usize = 4;
const ATTEMPTS_PER_ADDER: usize = 20_000;
const BOUND: usize = 64;

/// What [`churn`] saw.
struct Churn {
    taken: u64,
    refused: u64,
    cancelled: u64,
    /// The most tasks taken at once: taken (`try_add` returned) minus cancels begun, a
    /// lower bound of the tasks pending at that moment.
    most_live: i64,
    /// The highest `size()` a monitoring thread read meanwhile.
    most_size: usize,
    /// The entries still pending.
    kept: Vec<TimerTaskEntry>,
}

/// [`ADDERS`] threads each try to add [`ATTEMPTS_PER_ADDER`] tasks to `timer` (bounded at
/// [`BOUND`]), cancelling one of their own half the time so that others find room, while
/// another thread reads `size()`.
fn churn(timer: &SystemTimer, tally: &Tally) -> Churn {
    let live = AtomicI64::new(0);
    let most_live = AtomicI64::new(0);
    let (taken, refused, cancelled) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let most_size = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let kept: Mutex<Vec<TimerTaskEntry>> = Mutex::new(Vec::new());
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                most_size.fetch_max(timer.size(), Ordering::SeqCst);
                thread::sleep(Duration::from_micros(50));
            }
        });
        let _stop = SetOnDrop(&done);
        let adders: Vec<_> = (0..ADDERS)
            .map(|t| {
                let (live, most_live) = (&live, &most_live);
                let (taken, refused, cancelled, kept) = (&taken, &refused, &cancelled, &kept);
                s.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 1);
                    let mut mine: Vec<TimerTaskEntry> = Vec::new();
                    for _ in 0..ATTEMPTS_PER_ADDER {
                        match timer.try_add(tally.task(NEVER_MS)) {
                            Ok(entry) => {
                                taken.fetch_add(1, Ordering::SeqCst);
                                let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                                most_live.fetch_max(now, Ordering::SeqCst);
                                mine.push(entry);
                            }
                            Err(AddError::Full(task)) => {
                                refused.fetch_add(1, Ordering::SeqCst);
                                drop(task);
                            }
                            Err(other) => panic!("an open timer refused with {other:?}"),
                        }
                        if !mine.is_empty() && rng.below(2) == 0 {
                            let entry = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            live.fetch_sub(1, Ordering::SeqCst);
                            assert!(entry.cancel(), "nothing else cancels or runs it");
                            cancelled.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    kept.lock().unwrap().extend(mine);
                })
            })
            .collect();
        for adder in adders {
            adder.join().unwrap();
        }
    });
    Churn {
        taken: taken.into_inner(),
        refused: refused.into_inner(),
        cancelled: cancelled.into_inner(),
        most_live: most_live.into_inner(),
        most_size: most_size.into_inner(),
        kept: kept.into_inner().unwrap(),
    }
}

#[test]
fn max_pending_holds_with_many_threads_adding_and_cancelling_at_once() {
    let (timer, _time) = mocked("bounded-threads", Some(BOUND));
    let tally = Tally::default();
    let churn = churn(&timer, &tally);
    let Churn {
        taken,
        refused,
        cancelled,
        ..
    } = churn;
    assert_eq!(
        taken + refused,
        (ADDERS * ATTEMPTS_PER_ADDER) as u64,
        "every attempt counted"
    );
    assert!(refused > 0, "the bound was reached");
    assert!(
        churn.most_live <= BOUND as i64,
        "{} taken at once",
        churn.most_live
    );
    let pending = churn.kept.len();
    assert!(pending <= BOUND);
    assert_eq!(taken - cancelled, pending as u64);
    // Quiet now: size and stats are exact.
    assert_eq!(timer.size(), pending);
    assert_eq!(
        timer.stats(),
        TimerStats {
            added: taken,
            expired: 0,
            cancelled,
            refused,
            pending: pending as u64
        }
    );
    // Every task: refused and cancelled ones dropped, the pending ones once the timer closes.
    assert_eq!(tally.drops() as u64, refused + cancelled);
    timer.close();
    assert_eq!(tally.drops() as u64, taken + refused);
    assert_eq!(tally.runs(), 0);
}

#[test]
fn size_never_reads_above_max_pending_while_threads_add_and_cancel() {
    let (timer, _time) = mocked("bounded-size", Some(BOUND));
    let churn = churn(&timer, &Tally::default());
    assert!(
        churn.most_size <= BOUND,
        "size() read {} above {BOUND}",
        churn.most_size
    );
}

#[test]
fn stats_count_every_add_expiry_cancel_and_refusal_once_quiet() {
    let (timer, time) = mocked("stats", Some(4));
    let tally = Tally::default();
    let a = timer.add(tally.task(10));
    let b = timer.add(tally.task(20));
    timer.add(tally.task(30));
    timer.add(tally.task(0)); // due now: added and expired at once
    timer.add(tally.task(40));
    timer.add(tally.task(50)); // refused: four wait
    assert!(timer.try_add(tally.task(60)).is_err()); // refused
    assert!(a.cancel());
    assert!(!a.cancel(), "a second cancel is not counted");
    time.sleep(20);
    while timer.advance_clock(0) {}
    barrier(&timer);
    assert!(!b.cancel(), "it ran: not counted as cancelled");
    let stats = timer.stats();
    // Counted with the barrier's task: added and expired at once.
    assert_eq!(
        stats,
        TimerStats {
            added: 5 + 1,
            expired: 2 + 1,
            cancelled: 1,
            refused: 2,
            pending: 2
        }
    );
    assert_eq!(stats.added, stats.expired + stats.cancelled + stats.pending);
    assert_eq!(stats.pending as usize, timer.size());
    assert_eq!(tally.runs() as u64 + 1, stats.expired);
    // Closing drops the waiting tasks: neither expired nor cancelled, and counted nowhere.
    timer.close();
    timer.add(tally.task(10));
    let closed = timer.stats();
    assert_eq!(
        closed,
        TimerStats {
            added: 6,
            expired: 3,
            cancelled: 1,
            refused: 3,
            pending: 0
        }
    );
}

/// Threads adding, cancelling and refused at once while a driver expires their tasks.
const STATS_THREADS: usize = 4;
const STATS_TASKS_PER_THREAD: usize = 10_000;
const STATS_BOUND: usize = 2_000;

#[test]
fn stats_are_exact_once_quiet_after_concurrent_adds_cancels_refusals_and_expiry() {
    let timer = SystemTimer::builder("stats-stress")
        .max_pending(STATS_BOUND)
        .build();
    let tally = Tally::default();
    let (taken, refused, cancelled) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                timer.advance_clock(1);
            }
        });
        let _stop = SetOnDrop(&done);
        let adders: Vec<_> = (0..STATS_THREADS)
            .map(|t| {
                let (timer, tally) = (&timer, &tally);
                let (taken, refused, cancelled) = (&taken, &refused, &cancelled);
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t as u64);
                    for _ in 0..STATS_TASKS_PER_THREAD {
                        // 0..=20 ms, so some are due at once and many expire meanwhile.
                        let delay_ms = rng.below(21) as i64;
                        match timer.try_add(tally.task(delay_ms)) {
                            Ok(entry) => {
                                taken.fetch_add(1, Ordering::SeqCst);
                                if rng.below(3) == 0 && entry.cancel() {
                                    cancelled.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            Err(_) => {
                                refused.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        for adder in adders {
            adder.join().unwrap();
        }
        common::sync::eventually(common::PATIENCE, "every task expired", || timer.size() == 0);
    });
    barrier(&timer);
    let (taken, refused, cancelled) = (
        taken.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst),
        cancelled.load(Ordering::SeqCst),
    );
    assert_eq!(
        taken + refused,
        (STATS_THREADS * STATS_TASKS_PER_THREAD) as u64
    );
    let runs = tally.runs() as u64;
    assert_eq!(
        runs + cancelled,
        taken,
        "every task taken ran or was cancelled"
    );
    // The barrier task counts as one more added and expired.
    assert_eq!(
        timer.stats(),
        TimerStats {
            added: taken + 1,
            expired: runs + 1,
            cancelled,
            refused,
            pending: 0
        }
    );
    assert!(cancelled > 0 && runs > 0);
}

#[test]
fn add_error_reads_well_and_hands_back_its_task() {
    let closed = AddError::Closed(timer_task(1, || {}));
    let full = AddError::Full(timer_task(2, || {}));
    assert_eq!(closed.to_string(), "the timer is closed");
    assert_eq!(
        full.to_string(),
        "the timer holds its maximum of pending tasks"
    );
    assert_eq!(format!("{closed:?}"), "Closed(..)");
    assert_eq!(format!("{full:?}"), "Full(..)");
    let as_error: Box<dyn Error + Send> = Box::new(full);
    assert!(as_error.source().is_none());
    assert_eq!(
        as_error.to_string(),
        "the timer holds its maximum of pending tasks"
    );
    assert_eq!(closed.into_task().delay_ms(), 1);
    assert_eq!(
        AddError::Full(timer_task(2, || {})).into_task().delay_ms(),
        2
    );
}

/// `AddError` goes through `?` into a `Box<dyn Error>`. (Not into a `Box<dyn Error + Send +
/// Sync>`: the task it holds is `Send` but not `Sync`.)
#[test]
fn add_error_goes_through_the_question_mark_operator() {
    fn schedule(timer: &dyn Timer) -> Result<TimerTaskEntry, Box<dyn Error>> {
        Ok(timer.try_add(timer_task(10, || {}))?)
    }
    let timer = MockTimer::new();
    assert!(schedule(&timer).is_ok());
    timer.close();
    assert_eq!(
        schedule(&timer).unwrap_err().to_string(),
        "the timer is closed"
    );
}

#[test]
fn a_duration_max_delay_saturates_and_never_fires() {
    let task = timer_task(Duration::MAX, || unreachable!("Duration::MAX never fires"));
    assert_eq!(task.delay_ms(), i64::MAX, "saturated, not -1");
    let timer = MockTimer::new();
    let entry = timer.add(task);
    assert_eq!(entry.expiration_ms(), i64::MAX);
    assert!(!timer.advance_clock(1_000_000));
    assert!(!entry.cancelled() && timer.size() == 1);

    let (system, time) = mocked("duration-max", None);
    let entry = system.add(timer_task(Duration::MAX, || unreachable!("never fires")));
    assert!(entry.expiration_ms() > 0, "never negative");
    time.sleep(1_000_000);
    while system.advance_clock(0) {}
    barrier(&system);
    assert_eq!(system.size(), 1);
    assert!(entry.cancel());
}

/// A delay read from a config file as `u64` or `u32` is milliseconds; one beyond
/// `i64::MAX` saturates. Unsuffixed literals are `i32` then (Rust's fallback when several
/// integer types fit) and still mean milliseconds, up to `i32::MAX`.
#[test]
fn config_integers_and_literals_are_milliseconds_and_unsigned_ones_saturate() {
    let timer = MockTimer::new();
    let at = |delay_ms: i64| timer.time().hi_res_clock_ms().saturating_add(delay_ms);
    let (from_u64, from_u32): (u64, u32) = (30_000, 45_000);
    assert_eq!(
        timer.add(timer_task(from_u64, || {})).expiration_ms(),
        at(30_000)
    );
    assert_eq!(
        timer.add(timer_task(from_u32, || {})).expiration_ms(),
        at(45_000)
    );
    assert_eq!(
        timer.add(timer_task(30_000, || {})).expiration_ms(),
        at(30_000)
    );
    let largest = timer.add(timer_task(2_147_483_647, || {}));
    assert_eq!(largest.expiration_ms(), at(i64::from(i32::MAX)));
    let beyond = timer.add(timer_task(3_000_000_000_u32, || {}));
    assert_eq!(beyond.expiration_ms(), at(3_000_000_000));
    assert_eq!(timer.add(timer_task(-5, || {})).expiration_ms(), at(-5));
    assert_eq!(
        u64::MAX.into_delay_ms(),
        i64::MAX,
        "saturated, never negative"
    );
    assert_eq!(
        timer.add(timer_task(u64::MAX, || {})).expiration_ms(),
        i64::MAX
    );
    assert_eq!(timer.size(), 6);
}

#[test]
fn a_sub_millisecond_duration_rounds_up_and_never_fires_early() {
    let timer = MockTimer::new();
    let fired = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fired);
    let task = timer_task(Duration::from_micros(1_500), move || {
        f.store(true, Ordering::SeqCst)
    });
    assert_eq!(task.delay_ms(), 2);
    timer.add(task);
    timer.advance_clock(1);
    assert!(
        !fired.load(Ordering::SeqCst),
        "not after 1 ms of the 1.5 asked"
    );
    timer.advance_clock(1);
    assert!(fired.load(Ordering::SeqCst));
    for (duration, ms) in [
        (Duration::from_nanos(1), 1),
        (Duration::from_millis(7), 7),
        (Duration::from_millis(7) + Duration::from_nanos(1), 8),
        (Duration::ZERO, 0),
    ] {
        assert_eq!(FnTask::new(duration, || {}).delay_ms(), ms, "{duration:?}");
        assert_eq!(duration.into_delay_ms(), ms, "{duration:?}");
    }
}

#[test]
fn integer_delays_keep_working_wherever_a_duration_is_accepted() {
    let timer = MockTimer::new();
    let ms: i64 = 25;
    let tasks: [Box<dyn TimerTask>; 4] = [
        timer_task(30_000, || {}),
        timer_task(ms, || {}),
        timer_task(-5, || {}),
        Box::new(FnTask::new(1_000, || {})),
    ];
    let delays: Vec<i64> = tasks.iter().map(|task| task.delay_ms()).collect();
    assert_eq!(delays, [30_000, 25, -5, 1_000]);
    for task in tasks {
        timer.add(task);
    }
    assert_eq!(timer.size(), 3, "the -5 ms one ran inside add");
}
