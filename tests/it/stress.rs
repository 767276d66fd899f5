//! Concurrency stress of `SystemTimer`: every task is counted, and must end in exactly one
//! of "ran once" or "one cancel returned true".
//!
//! Each task owns a slot in a `Ledger` (`tests/common/ledger.rs`): at the end every slot
//! must read `runs + cancels == 1` and `drops == 1`: a task that ran twice, ran and was
//! cancelled, or was lost (neither, or never freed) is reported by id.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{
    MockTime, SystemClock, SystemTimer, Time, Timer, TimerTask, TimerTaskEntry, hi_res_clock_ms,
    timer_task,
};

use crate::common;
use common::counted;
use common::ledger::Ledger;
use common::rng::Rng;
use common::sync::{SetOnDrop, barrier};

/// Threads that add and cancel.
const ADDERS: usize = 4;
/// Tasks added in all by the adders.
const TASKS: usize = 100_000;
/// Delays are drawn from 0..=MAX_DELAY_MS.
const MAX_DELAY_MS: u64 = 40;
/// Entries an adder keeps to cancel later; with the pauses below, a held entry is
/// cancelled some 0-80 ms after its add, across the whole range of delays.
const HELD: usize = 2_000;
/// Each adder pauses 1 ms every this many adds, so its adds span about half a second.
const ADDS_PER_PAUSE: usize = 50;
/// How long the timer may take to settle every task once the adders are done.
const SETTLE: Duration = Duration::from_secs(30);

/// Waits until every task settled (ran or was cancelled), then checks the ledger.
fn settle_and_check(timer: &SystemTimer, ledger: &Ledger) -> (usize, usize) {
    let deadline = Instant::now() + SETTLE;
    while ledger.settled() < ledger.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} tasks settled; size {}",
            ledger.settled(),
            ledger.len(),
            timer.size()
        );
        thread::sleep(Duration::from_millis(5));
    }
    // Give a doubled run or a late drop the chance to show up.
    barrier(timer);
    assert_eq!(timer.size(), 0);
    ledger.assert_exactly_once()
}

/// Four threads add and cancel (at once, a little later, or after the deadline) while
/// `drivers` threads drive the clock.
fn add_and_cancel_while_driving(drivers: usize) {
    let timer = SystemTimer::new("stress");
    let ledger = Ledger::new(TASKS);
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = SetOnDrop(&done);
        for _ in 0..drivers {
            s.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    timer.advance_clock(10);
                }
            });
        }
        let adders: Vec<_> = (0..ADDERS)
            .map(|t| {
                let (timer, ledger) = (&timer, &ledger);
                s.spawn(move || {
                    let mut rng = Rng::new(t as u64 + 1);
                    let mut held: Vec<(usize, TimerTaskEntry)> = Vec::new();
                    for id in (t..TASKS).step_by(ADDERS) {
                        let delay = rng.below(MAX_DELAY_MS + 1) as i64;
                        let entry = ledger.add(timer, id, delay);
                        match rng.below(4) {
                            0 => {
                                ledger.cancel(&entry, id);
                            }
                            1 | 2 => held.push((id, entry)),
                            _ => {}
                        }
                        // Cancel a random held one: pending, due, in transit or run.
                        if held.len() > HELD || (!held.is_empty() && rng.below(2) == 0) {
                            let at = rng.below(held.len() as u64) as usize;
                            let (id, entry) = held.swap_remove(at);
                            ledger.cancel(&entry, id);
                            // A second cancel of the same task never wins.
                            assert!(!entry.cancel(), "task {id} cancelled twice");
                        }
                        if id % ADDS_PER_PAUSE == 0 {
                            thread::sleep(Duration::from_millis(1));
                        }
                    }
                    for (id, entry) in held {
                        ledger.cancel(&entry, id);
                    }
                })
            })
            .collect();
        for adder in adders {
            adder.join().unwrap();
        }
        let (ran, cancelled) = settle_and_check(&timer, &ledger);
        eprintln!("ran {ran}, cancelled {cancelled}");
        assert!(ran > 0 && cancelled > 0, "ran {ran}, cancelled {cancelled}");
        done.store(true, Ordering::SeqCst);
    });
    timer.close();
}

#[test]
fn four_adders_one_driver_every_task_runs_or_is_cancelled_exactly_once() {
    add_and_cancel_while_driving(1);
}

/// Kafka drives from one thread, but nothing stops two: flushes then interleave.
#[test]
fn four_adders_two_drivers_every_task_runs_or_is_cancelled_exactly_once() {
    add_and_cancel_while_driving(2);
}

/// The cancel/flush race at its tightest, on a mock clock: all tasks sit in a handful of
/// buckets; one thread moves the clock and flushes them (in chunks, through the transit
/// list) while two threads cancel every one of them, from both ends.
#[test]
fn cancel_racing_a_flush_of_the_same_buckets_is_exactly_once() {
    const RACED: usize = 100_000;
    const ROUNDS: usize = 3;
    let (mut total_ran, mut total_cancelled) = (0, 0);
    for round in 0..ROUNDS {
        let time = MockTime::new();
        let timer = SystemTimer::builder("flush-race")
            .time(time.clone())
            .wheel_size(8)
            .build();
        let ledger = Ledger::new(RACED);
        let entries: Vec<TimerTaskEntry> = (0..RACED)
            .map(|id| ledger.add(&timer, id, 1 + (id % 3) as i64 * 7))
            .collect();
        let start = Barrier::new(3);
        let progress = AtomicU64::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                // Let the cancellers get going, so that all three overlap.
                while progress.load(Ordering::Relaxed) < (RACED / 10) as u64 {
                    std::hint::spin_loop();
                }
                for _ in 0..3 {
                    time.sleep(7);
                    while timer.advance_clock(0) {}
                }
            });
            let (entries, ledger, start, progress) = (&entries, &ledger, &start, &progress);
            s.spawn(move || {
                start.wait();
                for (id, entry) in entries.iter().enumerate().skip(round % 2).step_by(2) {
                    ledger.cancel(entry, id);
                    progress.fetch_add(1, Ordering::Relaxed);
                }
            });
            s.spawn(move || {
                start.wait();
                for (id, entry) in entries.iter().enumerate().rev() {
                    ledger.cancel(entry, id);
                    progress.fetch_add(1, Ordering::Relaxed);
                }
            });
        });
        time.sleep(100);
        while timer.advance_clock(0) {}
        let (ran, cancelled) = settle_and_check(&timer, &ledger);
        eprintln!("round {round}: {ran} ran, {cancelled} cancelled");
        total_ran += ran;
        total_cancelled += cancelled;
        timer.close();
    }
    assert!(
        total_ran > 0 && total_cancelled > 0,
        "the flush and the cancels did not overlap: ran {total_ran}, cancelled {total_cancelled}"
    );
}

/// On the real clock, with overflow wheels (wheel size 4, delays 0-39 ms): two threads cancel
/// every task while a driver flushes and cascades them; each task ends in exactly one of
/// "ran" and "a cancel returned true", and its handle's `cancelled()` says which.
#[test]
fn cancel_racing_expiry_decides_exactly_once() {
    // A loaded machine can start the cancelling threads after every task ran (or the
    // driver after every cancel): rounds go on until one of them saw both outcomes.
    const ROUNDS: usize = 20;
    let mixed = (0..ROUNDS).find(|_| {
        let ran = cancel_racing_expiry_round();
        ran > 0 && ran < RACE_TASKS
    });
    assert!(
        mixed.is_some(),
        "the race was not exercised in {ROUNDS} rounds"
    );
}

const RACE_TASKS: usize = 20_000;

/// One round of `cancel_racing_expiry_decides_exactly_once`: checks every task ran or was
/// cancelled exactly once, and returns how many ran.
fn cancel_racing_expiry_round() -> usize {
    const TASKS: usize = RACE_TASKS;
    let timer = SystemTimer::with_config("race", 1, 4, hi_res_clock_ms());
    let runs: Vec<Arc<AtomicUsize>> = (0..TASKS).map(|_| Arc::default()).collect();
    let drops = Arc::new(AtomicUsize::new(0));
    let entries: Vec<_> = (0..TASKS)
        .map(|i| timer.add(counted((i % 40) as i64, &runs[i], &drops)))
        .collect();
    let stop = AtomicBool::new(false);
    let cancelled = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                timer.advance_clock(1);
            }
        });
        let cancelled: Vec<bool> = thread::scope(|inner| {
            let halves: Vec<_> = entries
                .chunks(TASKS / 2)
                .map(|chunk| {
                    inner.spawn(move || chunk.iter().map(|e| e.cancel()).collect::<Vec<_>>())
                })
                .collect();
            halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        // Let everything not cancelled run out.
        let start = Instant::now();
        while timer.size() > 0 && start.elapsed() < SETTLE {
            thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        cancelled
    });
    timer.close();
    let mut ran = 0;
    for (i, (won, runs)) in cancelled.iter().zip(&runs).enumerate() {
        let runs = runs.load(Ordering::SeqCst);
        assert_eq!(
            runs + usize::from(*won),
            1,
            "task {i}: ran {runs} times, cancel won: {won}"
        );
        assert_eq!(entries[i].cancelled(), *won);
        ran += runs;
    }
    assert_eq!(
        drops.load(Ordering::SeqCst),
        TASKS,
        "every task was dropped once"
    );
    ran
}

/// On the real clock, each thread cancels its tasks right around their deadline (from a
/// little before to a little after), while a driver flushes them.
#[test]
fn cancel_exactly_around_the_deadline_is_exactly_once() {
    const PER_THREAD: usize = 600;
    const THREADS: usize = 2;
    let timer = SystemTimer::new("deadline-race");
    let ledger = Ledger::new(PER_THREAD * THREADS);
    let done = AtomicBool::new(false);
    let (ran_or_cancelled_at_deadline, early_cancels) = (AtomicU64::new(0), AtomicU64::new(0));
    thread::scope(|s| {
        let _stop = SetOnDrop(&done);
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                timer.advance_clock(10);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (timer, ledger) = (&timer, &ledger);
                let (at_deadline, early) = (&ran_or_cancelled_at_deadline, &early_cancels);
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t as u64);
                    for i in 0..PER_THREAD {
                        let id = t * PER_THREAD + i;
                        let entry = ledger.add(timer, id, 2);
                        // Spin to between 1 ms before and 1 ms after the expiration.
                        let target_ns =
                            (entry.expiration_ms() - 1) * 1_000_000 + rng.below(2_000_000) as i64;
                        while SystemClock.nanoseconds() < target_ns {
                            std::hint::spin_loop();
                        }
                        let before_deadline = hi_res_clock_ms() < entry.expiration_ms();
                        if entry.cancel() {
                            ledger.cancels[id].fetch_add(1, Ordering::SeqCst);
                            if before_deadline {
                                early.fetch_add(1, Ordering::Relaxed);
                            } else {
                                at_deadline.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        settle_and_check(&timer, &ledger);
        done.store(true, Ordering::SeqCst);
    });
    let before = early_cancels.load(Ordering::Relaxed);
    assert!(
        before > 0,
        "no cancel landed before its deadline: the race was not exercised"
    );
    timer.close();
}

/// A task that blocks the executor for seconds delays only the executor: `add` and
/// `cancel` on other threads stay fast meanwhile, and the expired tasks run once it is free.
#[test]
fn a_blocked_executor_never_delays_add_or_cancel() {
    /// How long the executor is held at least, while adds and cancels are timed.
    const HOLD: Duration = Duration::from_secs(1);
    /// The blocking task gives up after this even if never released.
    const CAP: Duration = Duration::from_secs(10);
    const OPS: usize = 20_000;
    /// Loose: preemption on a loaded 2-core machine (over 250 ms once), half of `HOLD`, which
    /// an add that waited for the executor would take.
    const MAX_OP_LATENCY: Duration = Duration::from_millis(500);
    let timer = SystemTimer::new("blocked");
    let ledger = Ledger::new(OPS);
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    timer.add(timer_task(i64::MIN, move || {
        blocked_tx.send(Instant::now()).unwrap();
        let _ = release_rx.recv_timeout(CAP);
    }));
    let blocked_since = blocked_rx.recv_timeout(SETTLE).unwrap();
    let done = AtomicBool::new(false);
    let (worst, ops) = thread::scope(|s| {
        let _stop = SetOnDrop(&done);
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                timer.advance_clock(5);
            }
        });
        let worker = s.spawn(|| {
            let mut worst = Duration::ZERO;
            let mut rng = Rng::new(7);
            let mut ops = 0;
            let mut time_op = |op: &mut dyn FnMut()| {
                let start = Instant::now();
                op();
                worst = worst.max(start.elapsed());
                ops += 1;
            };
            for id in 0..OPS {
                let delay = rng.below(3) as i64;
                time_op(&mut || {
                    let entry = ledger.add(&timer, id, delay);
                    if id % 2 == 0 {
                        ledger.cancel(&entry, id);
                    }
                });
            }
            // Keep going (untracked: added and cancelled at once) until the executor has
            // been blocked for HOLD.
            while blocked_since.elapsed() < HOLD {
                time_op(&mut || {
                    timer.add(timer_task(60_000, || {})).cancel();
                });
            }
            (worst, ops)
        });
        let (worst, ops) = worker.join().unwrap();
        let ran_while_blocked = ledger.total_runs();
        let blocked_for = blocked_since.elapsed();
        assert!(
            blocked_for < CAP,
            "the executor was released by its cap: proves nothing"
        );
        assert_eq!(
            ran_while_blocked, 0,
            "nothing ran while the executor was blocked"
        );
        assert!(timer.size() < OPS / 2 + 1);
        drop(release_tx);
        settle_and_check(&timer, &ledger);
        done.store(true, Ordering::SeqCst);
        (worst, ops)
    });
    assert!(ops >= OPS);
    assert!(
        worst < MAX_OP_LATENCY,
        "an add (+cancel) took {worst:?} while the executor was blocked"
    );
    timer.close();
}

/// A coarse tick on the real clock: every task exactly once, and none before its bucket's
/// time `floor(expiration / tick) * tick` (so never before `expiration - tick`).
#[test]
fn coarse_tick_on_the_real_clock_is_exactly_once_and_never_early() {
    const TICK_MS: i64 = 7;
    const WHEEL_SIZE: usize = 3;
    const PER_THREAD: usize = 5_000;
    const THREADS: usize = 2;
    const TASKS: usize = PER_THREAD * THREADS;
    let timer = SystemTimer::with_config("coarse", TICK_MS, WHEEL_SIZE, hi_res_clock_ms());
    let ledger = Ledger::new(TASKS);
    // Untracked-by-cancel probes, one per task with the same delay: when they ran, when due.
    let ran_at: Arc<Vec<AtomicI64>> = Arc::new((0..TASKS).map(|_| AtomicI64::new(0)).collect());
    let due: Vec<AtomicI64> = (0..TASKS).map(|_| AtomicI64::new(0)).collect();
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = SetOnDrop(&done);
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                timer.advance_clock(20);
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (timer, ledger, ran_at, due) = (&timer, &ledger, &ran_at, &due);
                s.spawn(move || {
                    let mut rng = Rng::new(500 + t as u64);
                    for i in 0..PER_THREAD {
                        let id = t * PER_THREAD + i;
                        let delay_ms = rng.below(100) as i64;
                        let entry = ledger.add(timer, id, delay_ms);
                        let ran_at = Arc::clone(ran_at);
                        let probe = timer.add(timer_task(delay_ms, move || {
                            ran_at[id].store(hi_res_clock_ms(), Ordering::SeqCst);
                        }));
                        // A delay of zero is already expired: it runs inside `add`'s
                        // hand-over, whatever its (rounded-up) expiration says.
                        let due_ms = if delay_ms <= 0 {
                            i64::MIN
                        } else {
                            probe.expiration_ms().div_euclid(TICK_MS) * TICK_MS
                        };
                        due[id].store(due_ms, Ordering::SeqCst);
                        if rng.below(3) == 0 {
                            ledger.cancel(&entry, id);
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        let deadline = Instant::now() + SETTLE;
        while ran_at.iter().any(|at| at.load(Ordering::SeqCst) == 0) {
            assert!(Instant::now() < deadline, "a probe never ran");
            thread::sleep(Duration::from_millis(5));
        }
        settle_and_check(&timer, &ledger);
        done.store(true, Ordering::SeqCst);
    });
    for id in 0..TASKS {
        let (at, due) = (
            ran_at[id].load(Ordering::SeqCst),
            due[id].load(Ordering::SeqCst),
        );
        assert!(
            at >= due,
            "probe {id} ran at {at}, before its bucket's time {due}"
        );
    }
    timer.close();
}

/// The exact firing rule of `model.rs` (a task runs only once the clock reaches
/// `floor(expiration / tick) * tick`, and by then, once `advance_clock(0)` returns false, it
/// has run), now with three threads adding and cancelling on a mock clock while a fourth
/// steps it and drives the timer: adds land between a driver's poll and its write lock.
#[test]
fn concurrent_adds_on_a_mock_clock_fire_neither_early_nor_late() {
    const TICK_MS: i64 = 3;
    const WHEEL_SIZE: usize = 5;
    const ADDING_THREADS: usize = 3;
    const PER_THREAD: usize = 4_000;
    const TASKS: usize = ADDING_THREADS * PER_THREAD;
    /// Each adding thread waits for one more driver step every this many adds.
    const ADDS_PER_STEP: usize = 20;
    /// Written for a task not yet added, or not yet run.
    const NOT_YET: i64 = i64::MIN;
    let time = MockTime::new();
    let timer = SystemTimer::builder("mock-concurrent")
        .tick_ms(TICK_MS)
        .wheel_size(WHEEL_SIZE)
        .time(time.clone())
        .build();
    let ledger = Ledger::new(TASKS);
    let slots = |v: i64| -> Arc<Vec<AtomicI64>> {
        Arc::new((0..TASKS).map(|_| AtomicI64::new(v)).collect())
    };
    // Mock clock at run; bucket time (floor(expiration / tick) * tick); sequence number
    // after `add` returned; whether a cancel was (about to be) tried.
    let (ran_at, due, added_seq) = (slots(NOT_YET), slots(NOT_YET), slots(i64::MAX));
    let cancel_tried: Vec<AtomicBool> = (0..TASKS).map(|_| AtomicBool::new(false)).collect();
    let seq = AtomicI64::new(0);
    let adders_done = AtomicU64::new(0);
    let steps_done = AtomicU64::new(0);

    struct Timed {
        id: usize,
        delay_ms: i64,
        time: MockTime,
        ran_at: Arc<Vec<AtomicI64>>,
        ledger: Arc<Ledger>,
    }
    impl TimerTask for Timed {
        fn delay_ms(&self) -> i64 {
            self.delay_ms
        }
        fn run(self: Box<Self>) {
            self.ran_at[self.id].store(self.time.hi_res_clock_ms(), Ordering::SeqCst);
            self.ledger.runs[self.id].fetch_add(1, Ordering::SeqCst);
        }
    }
    impl Drop for Timed {
        fn drop(&mut self) {
            self.ledger.drops[self.id].fetch_add(1, Ordering::SeqCst);
        }
    }

    thread::scope(|s| {
        for t in 0..ADDING_THREADS {
            let (timer, time, ledger) = (&timer, &time, &ledger);
            let (ran_at, due, added_seq) = (&ran_at, &due, &added_seq);
            let (cancel_tried, seq, adders_done) = (&cancel_tried, &seq, &adders_done);
            let steps_done = &steps_done;
            s.spawn(move || {
                // Counts this adder done even if it panics, so the driver stops.
                struct DoneOnDrop<'a>(&'a AtomicU64);
                impl Drop for DoneOnDrop<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _done = DoneOnDrop(adders_done);
                let mut rng = Rng::new(900 + t as u64);
                let mut held = Vec::new();
                for i in 0..PER_THREAD {
                    let id = t * PER_THREAD + i;
                    let delay_ms = match rng.below(20) {
                        0 => -(rng.below(10) as i64),
                        1 => i64::MIN,
                        _ => rng.below(200) as i64,
                    };
                    let entry = timer.add(Box::new(Timed {
                        id,
                        delay_ms,
                        time: time.clone(),
                        ran_at: Arc::clone(ran_at),
                        ledger: Arc::clone(ledger),
                    }));
                    due[id].store(
                        entry.expiration_ms().div_euclid(TICK_MS) * TICK_MS,
                        Ordering::SeqCst,
                    );
                    added_seq[id].store(seq.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                    if rng.below(4) == 0 {
                        held.push((id, entry));
                    }
                    if !held.is_empty() && rng.below(3) == 0 {
                        let (id, entry) = held.swap_remove(rng.below(held.len() as u64) as usize);
                        cancel_tried[id].store(true, Ordering::SeqCst);
                        ledger.cancel(&entry, id);
                    }
                    // Pace the adds to the driver's steps, so that they interleave.
                    while steps_done.load(Ordering::SeqCst) < (i / ADDS_PER_STEP) as u64 {
                        thread::yield_now();
                    }
                }
                for (id, entry) in held {
                    cancel_tried[id].store(true, Ordering::SeqCst);
                    ledger.cancel(&entry, id);
                }
            });
        }
        // The driver: step, drain, barrier, then check everything added before the step.
        // If it panics, the guard releases the adders waiting for its steps.
        struct ReleaseOnDrop<'a>(&'a AtomicU64);
        impl Drop for ReleaseOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(u64::MAX, Ordering::SeqCst);
            }
        }
        let _release = ReleaseOnDrop(&steps_done);
        let mut rng = Rng::new(4242);
        let mut last = false;
        loop {
            let finished = adders_done.load(Ordering::SeqCst) == ADDING_THREADS as u64;
            let step_seq = seq.fetch_add(1, Ordering::SeqCst);
            time.sleep(if finished { 1_000 } else { rng.below(4) as i64 });
            while timer.advance_clock(0) {}
            barrier(&timer);
            let now = time.hi_res_clock_ms();
            for id in 0..TASKS {
                let at = ran_at[id].load(Ordering::SeqCst);
                let due_ms = due[id].load(Ordering::SeqCst);
                if at != NOT_YET {
                    assert!(
                        at >= due_ms,
                        "task {id} ran at {at}, before its due {due_ms}"
                    );
                } else if added_seq[id].load(Ordering::SeqCst) < step_seq
                    && due_ms <= now
                    && !cancel_tried[id].load(Ordering::SeqCst)
                {
                    panic!("task {id} (due {due_ms}) had not run after the step to {now}");
                }
            }
            steps_done.fetch_add(1, Ordering::SeqCst);
            if last {
                break;
            }
            last = finished;
        }
        let steps = steps_done.load(Ordering::SeqCst);
        assert!(
            steps >= (PER_THREAD / ADDS_PER_STEP) as u64,
            "{steps} steps"
        );
    });
    let (ran, cancelled) = ledger.assert_exactly_once();
    assert!(ran > 0 && cancelled > 0);
    assert_eq!(timer.size(), 0);
    timer.close();
}

/// `cancelled()` is shared by a handle and all its clones, also by the first clones of a
/// handle made while another thread cancels through it (the handle's flag goes from
/// private to shared during the cancel): afterwards every handle reports the cancel.
#[test]
fn clones_made_while_cancelling_all_report_cancelled() {
    const ROUNDS: usize = 5_000;
    let timer = SystemTimer::builder("clone-race")
        .time(MockTime::new())
        .build();
    let start = Barrier::new(2);
    let end = Barrier::new(2);
    // The original handle, never cloned before the race.
    let slot: std::sync::RwLock<Option<TimerTaskEntry>> = std::sync::RwLock::new(None);
    let clones: std::sync::Mutex<Vec<TimerTaskEntry>> = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..ROUNDS {
                start.wait();
                let made: Vec<TimerTaskEntry> = {
                    let guard = slot.read().unwrap();
                    let original = guard.as_ref().unwrap();
                    let first = original.clone();
                    vec![first.clone(), original.clone(), first]
                };
                clones.lock().unwrap().extend(made);
                end.wait();
            }
        });
        for round in 0..ROUNDS {
            *slot.write().unwrap() = Some(timer.add(timer_task(60_000, || {})));
            start.wait();
            assert!(slot.read().unwrap().as_ref().unwrap().cancel());
            end.wait();
            let guard = slot.read().unwrap();
            let original = guard.as_ref().unwrap();
            assert!(original.cancelled(), "round {round}");
            for clone in clones.lock().unwrap().drain(..) {
                assert!(
                    clone.cancelled(),
                    "round {round}: a clone missed the cancel"
                );
                assert!(!clone.cancel());
            }
            assert!(original.clone().cancelled(), "round {round}: a later clone");
        }
    });
    assert_eq!(timer.size(), 0);
    timer.close();
}
