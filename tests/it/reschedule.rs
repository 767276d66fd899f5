//! `Timer::reschedule`: moving a pending task, on every timer type.
//!
//! Logic tests step a mock clock on `MockTimer`, `SystemTimer`, `Arc<SystemTimer>` and
//! `Box<MockTimer>` (the "rigs"); `SystemTimerReaper` runs on the real clock. The true and
//! false cases are those `Timer::reschedule` lists. Real-clock tests assert a strict lower
//! bound (never before the instant of the call plus the new delay) and a loose upper one.
//! Counting stress tests race reschedules with expiry, cancels and `close` on a
//! `SystemTimer`: every task runs once or is cancelled once, never both, never early.
//!
//! Kafka's `TimerTaskListTest.testAll` (tasks moved between buckets keep the counts
//! exact) is ported in `tests/it/timer_task_list.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{
    MockTime, MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, timer_task,
};

use crate::common;
use common::PATIENCE;
use common::bounds::Bounds;
use common::ledger::Ledger;
use common::rng::Rng;
use common::sync::{ExecutorGate, barrier, driven, eventually};

/// A timer on a mock clock, and how to move that clock and run what is due.
struct Rig {
    name: &'static str,
    timer: Box<dyn Timer>,
    time: MockTime,
    /// True for `SystemTimer`s: due tasks go to an executor thread.
    executor: bool,
}

impl Rig {
    /// Moves the clock `ms` forward and waits until everything due has run.
    fn step(&self, ms: i64) {
        if self.executor {
            self.time.sleep(ms);
            while self.timer.advance_clock(0) {}
            barrier(&*self.timer);
        } else {
            // A `MockTimer` moves its own clock and runs what is due on this thread.
            self.timer.advance_clock(ms);
        }
    }

    fn now(&self) -> i64 {
        self.time.hi_res_clock_ms()
    }
}

/// Every timer type on a mock clock, fresh.
fn rigs() -> Vec<Rig> {
    let system = |name| {
        let time = MockTime::new();
        let timer = SystemTimer::builder(name).time(time.clone()).build();
        (time, timer)
    };
    let mock = || {
        let time = MockTime::new();
        (time.clone(), MockTimer::with_time(time))
    };
    let (t1, mock_timer) = mock();
    let (t2, system_timer) = system("resched");
    let (t3, arc_system) = system("resched-arc");
    let (t4, boxed_mock) = mock();
    vec![
        Rig {
            name: "MockTimer",
            timer: Box::new(mock_timer),
            time: t1,
            executor: false,
        },
        Rig {
            name: "SystemTimer",
            timer: Box::new(system_timer),
            time: t2,
            executor: true,
        },
        Rig {
            name: "Arc<SystemTimer>",
            timer: Box::new(Arc::new(arc_system)),
            time: t3,
            executor: true,
        },
        Rig {
            name: "Box<MockTimer>",
            timer: Box::new(Box::new(boxed_mock)),
            time: t4,
            executor: false,
        },
    ]
}

#[test]
fn a_rescheduled_task_runs_at_its_new_expiration_and_not_at_its_old_one() {
    for rig in rigs() {
        let name = rig.name;
        let ledger = Ledger::new(2);
        let later = ledger.add(&*rig.timer, 0, 100);
        let sooner = ledger.add(&*rig.timer, 1, 100);
        rig.step(40);
        let now = rig.now();
        assert!(rig.timer.reschedule(&later, 200), "{name}");
        assert!(rig.timer.reschedule(&sooner, 10), "{name}");
        assert_eq!(later.expiration_ms(), now + 200, "{name}");
        assert_eq!(sooner.expiration_ms(), now + 10, "{name}");
        assert_eq!(rig.timer.size(), 2, "{name}: moving changes no count");

        rig.step(9);
        assert_eq!(ledger.runs(1), 0, "{name}: the sooner one ran early");
        rig.step(1);
        assert_eq!(ledger.runs(1), 1, "{name}: the sooner one is due");
        rig.step(50); // the old expiration, 100 ms after the add
        assert_eq!(
            ledger.runs(0),
            0,
            "{name}: the later one ran at its old time"
        );
        rig.step(139);
        assert_eq!(ledger.runs(0), 0, "{name}: the later one ran early");
        rig.step(1);
        assert_eq!(ledger.runs(0), 1, "{name}");
        assert_eq!(rig.timer.size(), 0, "{name}");
        assert_eq!(ledger.all_drops(), [1, 1], "{name}");
    }
}

#[test]
fn reschedule_returns_false_and_changes_nothing_unless_the_task_is_waiting() {
    for rig in rigs() {
        let name = rig.name;
        let timer = &*rig.timer;
        let ledger = Ledger::new(6);

        let ran = ledger.add(timer, 0, 10);
        rig.step(10);
        let expiration = ran.expiration_ms();
        assert!(!timer.reschedule(&ran, 50), "{name}: it already ran");
        assert_eq!(ran.expiration_ms(), expiration, "{name}");

        let cancelled = ledger.add(timer, 1, 10);
        assert!(ledger.cancel(&cancelled, 1));
        assert!(
            !timer.reschedule(&cancelled, 50),
            "{name}: it was cancelled"
        );
        assert!(cancelled.cancelled(), "{name}");

        let due_at_once = ledger.add(timer, 2, 0);
        assert!(
            !timer.reschedule(&due_at_once, 50),
            "{name}: handed over in add"
        );

        // Another timer's entry: of the same type and of the other one.
        let others: [Box<dyn Timer>; 2] = [
            Box::new(MockTimer::new()),
            Box::new(SystemTimer::new("other")),
        ];
        let mine = ledger.add(timer, 3, 20);
        let expiration = mine.expiration_ms();
        for other in &others {
            assert!(
                !other.reschedule(&mine, 50),
                "{name}: another timer's entry"
            );
            assert_eq!(mine.expiration_ms(), expiration, "{name}");
        }
        rig.step(20);
        assert_eq!(ledger.runs(3), 1, "{name}: it still runs at its own time");

        let pending = ledger.add(timer, 4, 1_000);
        timer.close();
        assert!(
            !timer.reschedule(&pending, 50),
            "{name}: the timer is closed"
        );
        let refused = ledger.add(timer, 5, 1_000);
        assert!(refused.cancelled(), "{name}");
        assert!(
            !timer.reschedule(&refused, 50),
            "{name}: refused by a closed timer"
        );
        assert_eq!(
            [
                ledger.runs(0),
                ledger.runs(1),
                ledger.runs(2),
                ledger.runs(4),
                ledger.runs(5)
            ],
            [1, 0, 1, 0, 0],
            "{name}"
        );
    }
}

#[test]
fn reschedule_of_a_task_handed_to_the_executor_returns_false_and_it_runs_once() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("resched-handed")
        .time(time.clone())
        .build();
    let ledger = Ledger::new(1);
    let gate = ExecutorGate::shut(&timer, 1);
    let entry = ledger.add(&timer, 0, 10);
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(timer.size(), 0, "handed to the busy executor");
    assert!(!timer.reschedule(&entry, 1_000));
    assert!(!timer.reschedule(&entry, 0));
    gate.open();
    barrier(&timer);
    assert_eq!((ledger.runs(0), ledger.drops(0)), (1, 1));
    timer.close();
}

#[test]
fn reschedule_to_a_delay_of_zero_or_less_hands_the_task_over_inside_the_call() {
    for delay in [0, -1, i64::MIN] {
        for rig in rigs() {
            let name = rig.name;
            let ran_on = Arc::new(Mutex::new(None));
            let record = ran_on.clone();
            let entry = rig.timer.add(timer_task(1_000, move || {
                *record.lock().unwrap() = Some(thread::current().id());
            }));
            assert!(rig.timer.reschedule(&entry, delay), "{name}, delay {delay}");
            assert_eq!(rig.timer.size(), 0, "{name}: no longer waiting");
            if rig.executor {
                // Handed to the executor without the clock moving or anyone driving it.
                eventually(PATIENCE, "the executor runs it", || {
                    ran_on.lock().unwrap().is_some()
                });
            } else {
                assert_eq!(
                    *ran_on.lock().unwrap(),
                    Some(thread::current().id()),
                    "{name}: run inside the call, on the caller's thread"
                );
            }
            assert!(!entry.cancel(), "{name}: too late to cancel");
            assert!(
                !rig.timer.reschedule(&entry, 10),
                "{name}: nothing left to move"
            );
        }
    }
}

#[test]
fn handles_and_their_clones_see_the_new_expiration() {
    for rig in rigs() {
        let name = rig.name;
        let ledger = Ledger::new(1);
        let entry = ledger.add(&*rig.timer, 0, 100);
        let before = entry.clone();
        assert!(rig.timer.reschedule(&entry, 300), "{name}");
        let after = entry.clone();
        let expected = rig.now() + 300;
        for handle in [&entry, &before, &after] {
            assert_eq!(handle.expiration_ms(), expected, "{name}");
        }
        rig.step(50);
        assert!(
            rig.timer.reschedule(&before, 500),
            "{name}: through a clone"
        );
        let expected = rig.now() + 500;
        for handle in [&entry, &before, &after] {
            assert_eq!(handle.expiration_ms(), expected, "{name}");
        }
        assert!(after.cancel(), "{name}");
        assert!(entry.cancelled() && before.cancelled(), "{name}");
        assert!(!rig.timer.reschedule(&entry, 10), "{name}");
        rig.step(1_000);
        assert_eq!(ledger.runs(0), 0, "{name}");
    }
}

#[test]
fn expirations_far_from_the_clocks_zero_stay_exact_through_clones_and_moves() {
    // A handle holds expirations within 2^43 ms of the clock's zero itself, and keeps any
    // other in its shard; both must read back exactly, and the task still run once.
    for rig in rigs() {
        let name = rig.name;
        rig.time.sleep((1 << 43) - rig.now() - 3);
        let ledger = Ledger::new(2);
        let near = ledger.add(&*rig.timer, 0, 2);
        let far = ledger.add(&*rig.timer, 1, 5);
        assert_eq!(near.expiration_ms(), (1 << 43) - 1, "{name}");
        assert_eq!(far.expiration_ms(), (1 << 43) + 2, "{name}");
        let clone = near.clone();
        assert!(rig.timer.reschedule(&near, 6), "{name}");
        assert_eq!(
            clone.expiration_ms(),
            (1 << 43) + 3,
            "{name}: moved past the word"
        );
        assert!(rig.timer.reschedule(&far, 1), "{name}");
        assert_eq!(
            far.expiration_ms(),
            (1 << 43) - 2,
            "{name}: moved back into it"
        );
        rig.step(1);
        assert_eq!((ledger.runs(0), ledger.runs(1)), (0, 1), "{name}");
        rig.step(5);
        assert_eq!((ledger.runs(0), ledger.runs(1)), (1, 1), "{name}");
        assert!(!clone.cancel() && !clone.cancelled(), "{name}: it ran");
    }
}

#[test]
fn a_reaper_reschedules_like_the_timer_it_wraps() {
    let timer = SystemTimerReaper::new("resched-reaper", SystemTimer::new("resched-reaped"));
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let moved = timer.add(timer_task(60_000, move || tx.send("moved").unwrap()));
    let cancelled = timer.add(timer_task(60_000, move || tx2.send("cancelled").unwrap()));
    assert!(timer.reschedule(&moved, 5));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("moved"));
    assert!(!timer.reschedule(&moved, 5), "it ran");
    assert!(cancelled.cancel());
    assert!(!timer.reschedule(&cancelled, 5));
    let pending = timer.add(timer_task(60_000, || {}));
    timer.close();
    assert!(!timer.reschedule(&pending, 5), "closed");
    assert!(rx.try_recv().is_err());
}

/// Real clock: a task rescheduled to `delay` never runs before the instant of the
/// `reschedule` call plus `delay` (strict lower bound), and runs within a loose upper one,
/// whether it was moved later or earlier; on a `SystemTimer` driven by hand and through a
/// reaper.
#[test]
fn a_rescheduled_task_never_runs_before_the_call_plus_its_new_delay_on_the_real_clock() {
    const NEW_DELAYS_MS: [i64; 8] = [1, 2, 3, 5, 8, 13, 21, 40];
    // Moved later (from 1 ms) and earlier (from a minute).
    const OLD_DELAYS_MS: [i64; 2] = [1, 60_000];
    let by_hand = SystemTimer::new("resched-real");
    let by_reaper = SystemTimerReaper::new("resched-real-reaper", SystemTimer::new("resched-real"));
    driven(&by_hand, 5, || {
        let timers: [(&str, &dyn Timer); 2] = [("by hand", &by_hand), ("by a reaper", &by_reaper)];
        for (how, timer) in timers {
            let (tx, rx) = mpsc::channel();
            let mut expected = 0;
            for old in OLD_DELAYS_MS {
                for new in NEW_DELAYS_MS {
                    // The instant of the `reschedule` call, or `None` if the task ran first.
                    // Locked from before the `add` until the call returned, so that a task
                    // that runs early reads it only then.
                    let called = Arc::new(Mutex::new(None::<Instant>));
                    let (tx, seen) = (tx.clone(), called.clone());
                    let mut at = seen.lock().unwrap();
                    let entry = timer.add(timer_task(old, move || {
                        let moved_at = *called.lock().unwrap();
                        tx.send((moved_at.map(|at| at.elapsed()), old, new))
                            .unwrap();
                    }));
                    *at = Some(Instant::now());
                    if !timer.reschedule(&entry, new) {
                        assert_eq!(old, 1, "driven {how}: a minute-long task was not waiting");
                        *at = None;
                    }
                    drop(at);
                    expected += 1;
                }
            }
            let mut moved = 0;
            for _ in 0..expected {
                let (waited, old, new) = rx
                    .recv_timeout(PATIENCE)
                    .unwrap_or_else(|_| panic!("driven {how}: a task was lost"));
                let Some(waited) = waited else {
                    continue; // ran before it could be moved (1 ms tasks only, see above)
                };
                moved += 1;
                assert!(
                    waited >= Duration::from_millis(new as u64),
                    "driven {how}: moved from {old} to {new} ms, ran {waited:?} after the call"
                );
                assert!(waited < Duration::from_millis(new as u64) + PATIENCE);
            }
            assert!(
                moved >= NEW_DELAYS_MS.len(),
                "driven {how}: every minute-long task moved"
            );
            assert_eq!(timer.size(), 0, "driven {how}");
        }
    });
    by_hand.close();
    by_reaper.close();
}

/// Entries in one bucket on a mock clock: one thread flushes the bucket (its chunks re-add
/// or expire them) while two reschedule all of them a minute out: one from the back, which
/// starts first, and one from the front, which starts with the flush. A task runs at the
/// bucket's time iff no reschedule of it returned true; the rest wait, and run once the
/// clock reaches their new time.
#[test]
fn reschedule_racing_a_flush_of_the_same_bucket_is_exactly_once() {
    const TASKS: usize = 60_000;
    let time = MockTime::new();
    let timer = SystemTimer::builder("resched-flush")
        .time(time.clone())
        .build();
    let ledger = Ledger::new(TASKS);
    let entries: Vec<TimerTaskEntry> = (0..TASKS).map(|id| ledger.add(&timer, id, 30)).collect();
    let moved: Vec<AtomicBool> = (0..TASKS).map(|_| AtomicBool::new(false)).collect();
    let moves = AtomicUsize::new(0);
    let flush_starts = Barrier::new(2);
    time.sleep(30);
    thread::scope(|s| {
        let (timer, entries, moved, moves) = (&timer, &entries, &moved, &moves);
        let reschedule = move |ids: Vec<usize>| {
            for id in ids {
                // Both threads may move a task: the second move of a waiting task wins too.
                if timer.reschedule(&entries[id], 60_000) {
                    moved[id].store(true, Ordering::SeqCst);
                    moves.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        s.spawn(move || reschedule((0..TASKS).rev().collect()));
        let flush_starts = &flush_starts;
        s.spawn(move || {
            flush_starts.wait();
            reschedule((0..TASKS).collect())
        });
        eventually(PATIENCE, "the first moves", || {
            moves.load(Ordering::SeqCst) >= TASKS / 20
        });
        flush_starts.wait();
        while timer.advance_clock(0) {}
    });
    barrier(&timer);
    let moved_count = moved.iter().filter(|m| m.load(Ordering::SeqCst)).count();
    for (id, moved) in moved.iter().enumerate() {
        let was_moved = moved.load(Ordering::SeqCst);
        assert_eq!(
            ledger.runs(id),
            usize::from(!was_moved),
            "task {id}, moved {was_moved}"
        );
    }
    assert_eq!(timer.size(), moved_count);
    eprintln!("moved {moved_count} of {TASKS}");
    assert!(
        moved_count >= TASKS / 20,
        "the first moves came before the flush"
    );
    time.sleep(60_000);
    while timer.advance_clock(0) {}
    barrier(&timer);
    for id in 0..TASKS {
        assert_eq!((ledger.runs(id), ledger.drops(id)), (1, 1), "task {id}");
    }
    timer.close();
}

/// Threads that add and reschedule their own tasks.
const MOVERS: usize = 3;
/// Tasks per mover.
const PER_MOVER: usize = 20_000;
/// Handles a mover keeps to move again; the canceller takes clones from a shared pool.
const HELD: usize = 256;

/// One mover: adds its tasks (delays 0-10 ms), moves held ones again and again (delays -1
/// to 15 ms), and puts clones of some in `pool` for the canceller. Records each task's
/// bound: the instant of the `add`, or of the last `reschedule` that returned true, plus
/// the delay. After `closed` is set, every reschedule must return false.
fn move_tasks(
    timer: &dyn Timer,
    ledger: &Arc<Ledger>,
    bounds: &Arc<Bounds>,
    m: usize,
    pool: &Mutex<Vec<(usize, TimerTaskEntry)>>,
    closed: &AtomicBool,
) {
    let mut rng = Rng::new(m as u64 + 5);
    let mut held: Vec<(usize, TimerTaskEntry)> = Vec::with_capacity(HELD);
    for id in (m..MOVERS * PER_MOVER).step_by(MOVERS) {
        let delay = rng.below(11) as i64;
        bounds.not_before_ns[id].store(bounds.now_ns() + delay * 1_000_000, Ordering::SeqCst);
        let entry = timer.add(bounds.task(ledger, id, delay));
        if rng.below(4) == 0 {
            pool.lock().unwrap().push((id, entry.clone()));
        }
        held.push((id, entry));
        if held.len() == HELD {
            for (id, entry) in &held {
                if rng.below(3) == 0 {
                    continue;
                }
                let delay = rng.below(17) as i64 - 1;
                let was_closed = closed.load(Ordering::SeqCst);
                let called_ns = bounds.now_ns();
                if timer.reschedule(entry, delay) {
                    assert!(!was_closed, "task {id} moved on a closed timer");
                    bounds.not_before_ns[*id]
                        .store(called_ns + delay * 1_000_000, Ordering::SeqCst);
                }
            }
            held.drain(..HELD / 2);
        }
        if id % 64 < MOVERS {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Takes clones from `pool` and cancels them, racing the movers and the driver.
fn cancel_from_pool(
    ledger: &Ledger,
    pool: &Mutex<Vec<(usize, TimerTaskEntry)>>,
    done: &AtomicBool,
) {
    let mut rng = Rng::new(99);
    loop {
        let taken = {
            let mut pool = pool.lock().unwrap();
            let len = pool.len();
            (len > 0).then(|| pool.swap_remove(rng.below(len as u64) as usize))
        };
        match taken {
            Some((id, entry)) => {
                ledger.cancel(&entry, id);
            }
            None if done.load(Ordering::SeqCst) => return,
            None => thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// Runs the movers, a canceller and a driver on a real-clock `SystemTimer` (with
/// `max_in_flight` if given); if `close_at`, closes the timer once that many tasks ran.
/// Returns the ledger, the bounds and the runs counted right after `close` returned.
fn race(
    close_at: Option<usize>,
    max_in_flight: Option<usize>,
) -> (Arc<Ledger>, Arc<Bounds>, Option<usize>) {
    let mut builder = SystemTimer::builder("resched-stress").executor_threads(2);
    if let Some(max) = max_in_flight {
        builder = builder.max_in_flight(max);
    }
    let timer = builder.build();
    let tasks = MOVERS * PER_MOVER;
    let ledger = Ledger::new(tasks);
    let bounds = Bounds::new(tasks);
    let pool = Mutex::new(Vec::new());
    let (movers_done, closed) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut runs_at_close = None;
    driven(&timer, 2, || {
        thread::scope(|s| {
            let canceller = s.spawn(|| cancel_from_pool(&ledger, &pool, &movers_done));
            let movers: Vec<_> = (0..MOVERS)
                .map(|m| {
                    let (timer, ledger, bounds, pool, closed) =
                        (&timer, &ledger, &bounds, &pool, &closed);
                    s.spawn(move || move_tasks(timer, ledger, bounds, m, pool, closed))
                })
                .collect();
            if let Some(close_at) = close_at {
                eventually(PATIENCE, "enough tasks ran", || {
                    ledger.total_runs() >= close_at
                });
                timer.close();
                // Set once `close` returned: a reschedule that starts after this must fail.
                closed.store(true, Ordering::SeqCst);
                runs_at_close = Some(ledger.total_runs());
            }
            for mover in movers {
                mover.join().unwrap();
            }
            movers_done.store(true, Ordering::SeqCst);
            canceller.join().unwrap();
            eventually(PATIENCE, "every task ran, was cancelled or dropped", || {
                ledger.all_drops().iter().all(|&d| d > 0)
            });
        })
    });
    assert_eq!(timer.size(), 0);
    timer.close();
    (ledger, bounds, runs_at_close)
}

#[test]
fn reschedules_racing_expiry_cancels_and_a_driver_are_exactly_once_and_never_early() {
    for max_in_flight in [None, Some(2)] {
        let (ledger, bounds, _) = race(None, max_in_flight);
        let (ran, cancelled) = ledger.assert_exactly_once();
        assert!(
            ran > 1_000 && cancelled > 100,
            "both outcomes ({max_in_flight:?} in flight): ran {ran}, cancelled {cancelled}"
        );
        bounds.assert_never_early(&ledger);
    }
}

#[test]
fn close_racing_reschedules_and_cancels_ends_every_task_one_way_and_runs_nothing_after() {
    let (ledger, bounds, runs_at_close) = race(Some(5_000), None);
    for id in 0..ledger.len() {
        let (runs, cancels, drops) = (ledger.runs(id), ledger.cancels(id), ledger.drops(id));
        assert!(
            runs + cancels <= 1,
            "task {id}: ran {runs} times, cancelled {cancels} times"
        );
        assert_eq!(drops, 1, "task {id} dropped {drops} times");
    }
    assert_eq!(
        Some(ledger.total_runs()),
        runs_at_close,
        "nothing ran after close returned"
    );
    bounds.assert_never_early(&ledger);
}
