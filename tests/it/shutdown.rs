//! Shutdown: `close` and `stop` of `SystemTimer` with a million pending timers, dropping a
//! timer from inside its own task, re-entrant tasks and task `Drop`s, idempotence, what a
//! closed timer does, `stop` racing adds, cancels and drivers, and what every timer type
//! (`SystemTimer`, `SystemTimerReaper`, `MockTimer`) does with its tasks when it is closed,
//! stopped or dropped.
//!
//! Every wait that could hang on a deadlock goes through a channel with a timeout, so a
//! deadlock fails the test instead of hanging the suite.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{
    MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerTask, TimerTaskEntry, timer_task,
};

use crate::common;
use common::ledger::Ledger;
use common::sync::{barrier, within};
use common::{Counted, PATIENCE, counted, mocked};

/// Pending timers for the big `close`.
const PENDING: usize = 1_000_000;
/// "At once": far below the timeouts asked for (60 s), far above any scheduling hiccup.
const AT_ONCE: Duration = Duration::from_secs(2);

#[test]
fn close_with_a_million_pending_timers_frees_them_without_waiting() {
    let (timer, _time) = mocked("million", None);
    let drops = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    for i in 0..PENDING {
        timer.add(Box::new(Counted {
            // Spread over many buckets and levels: 1 ms to ~16 min.
            delay_ms: 1 + (i as i64 * 7_919) % 1_000_000,
            drops: Arc::clone(&drops),
            runs: Arc::clone(&runs),
        }));
    }
    assert_eq!(timer.size(), PENDING);
    let start = Instant::now();
    timer.close();
    let took = start.elapsed();
    eprintln!("close of {PENDING} pending timers took {took:?}");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        PENDING,
        "close frees every task"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "and runs none");
    assert_eq!(timer.size(), 0);
    // Only a bound against waiting (for a timeout, a poll, a task): how fast a close is
    // belongs to the benchmarks, not to a test that a busy machine could fail.
    assert!(took < AT_ONCE, "close took {took:?} (bound {AT_ONCE:?})");
}

#[test]
fn dropping_the_last_arc_inside_its_own_task_neither_deadlocks_nor_panics() {
    let (timer, _time) = mocked("self-drop", None);
    let timer = Arc::new(timer);
    let weak = Arc::downgrade(&timer);
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    // A pending task the drop must free without running.
    let pending_drops = Arc::new(AtomicUsize::new(0));
    let pending_runs = Arc::new(AtomicUsize::new(0));
    timer.add(Box::new(Counted {
        delay_ms: 60_000,
        drops: Arc::clone(&pending_drops),
        runs: Arc::clone(&pending_runs),
    }));
    let owned = Arc::clone(&timer);
    timer.add(timer_task(i64::MIN, move || {
        go_rx.recv().unwrap();
        // The test has dropped its handle: this is the last one.
        assert_eq!(Arc::strong_count(&owned), 1);
        drop(owned);
        // Reached only if the drop returned without panicking.
        done_tx.send(()).unwrap();
    }));
    // Handed to the executor behind the dropping task: they still run.
    const FOLLOWERS: usize = 10;
    let (follow_tx, follow_rx) = mpsc::channel();
    for n in 0..FOLLOWERS {
        let follow_tx = follow_tx.clone();
        timer.add(timer_task(i64::MIN, move || follow_tx.send(n).unwrap()));
    }
    drop(follow_tx);
    drop(timer);
    go_tx.send(()).unwrap();
    done_rx
        .recv_timeout(PATIENCE)
        .expect("dropping the timer inside its own task deadlocked or panicked");
    let followed: Vec<usize> = (0..FOLLOWERS)
        .map(|_| {
            follow_rx
                .recv_timeout(PATIENCE)
                .expect("a follower was lost")
        })
        .collect();
    assert_eq!(followed, (0..FOLLOWERS).collect::<Vec<_>>());
    assert!(weak.upgrade().is_none(), "the timer is gone");
    assert_eq!(pending_drops.load(Ordering::SeqCst), 1);
    assert_eq!(pending_runs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_running_task_can_add_cancel_advance_and_close_its_own_timer() {
    let (timer, time) = mocked("reentrant", None);
    let timer = Arc::new(timer);
    let (tx, rx) = mpsc::channel::<&'static str>();
    let victim_drops = Arc::new(AtomicUsize::new(0));
    let victim_runs = Arc::new(AtomicUsize::new(0));
    let victim = timer.add(Box::new(Counted {
        delay_ms: 50,
        drops: Arc::clone(&victim_drops),
        runs: Arc::clone(&victim_runs),
    }));
    let later: Arc<OnceLock<TimerTaskEntry>> = Arc::new(OnceLock::new());
    {
        let timer2 = Arc::clone(&timer);
        let later = Arc::clone(&later);
        let tx = tx.clone();
        timer.add(timer_task(i64::MIN, move || {
            assert!(victim.cancel(), "cancel from inside a task");
            let tx1 = tx.clone();
            let entry = timer2.add(timer_task(10, move || tx1.send("later").unwrap()));
            later.set(entry).unwrap();
            let tx2 = tx.clone();
            timer2.add(timer_task(i64::MIN, move || tx2.send("now").unwrap()));
            timer2.advance_clock(0);
            tx.send("first").unwrap();
        }));
    }
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("first"));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("now"), "FIFO executor");
    assert_eq!(victim_drops.load(Ordering::SeqCst), 1);
    assert_eq!(timer.size(), 1);
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("later"));
    assert!(!later.get().unwrap().cancel(), "already ran");
    assert_eq!(victim_runs.load(Ordering::SeqCst), 0);

    // A task that closes its own timer.
    let timer2 = Arc::clone(&timer);
    let tx3 = tx.clone();
    timer.add(timer_task(i64::MIN, move || {
        timer2.close();
        tx3.send("closed").unwrap();
    }));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("closed"));
    assert!(timer.is_closed());
}

#[test]
fn close_is_idempotent_also_from_several_threads() {
    let (timer, _time) = mocked("idempotent", None);
    let drops = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    for i in 0..1_000 {
        timer.add(Box::new(Counted {
            delay_ms: 1 + i,
            drops: Arc::clone(&drops),
            runs: Arc::clone(&runs),
        }));
    }
    let timer = Arc::new(timer);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| timer.close());
        }
    });
    timer.close();
    timer.close();
    assert!(timer.is_closed());
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1_000,
        "each freed exactly once"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn after_close_add_returns_a_cancelled_entry_and_runs_nothing() {
    let (timer, time) = mocked("closed-add", None);
    let (waiting_runs, waiting_drops) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let waiting = timer.add(counted(60_000, &waiting_runs, &waiting_drops));
    timer.close();
    timer.close();
    assert_eq!(
        waiting_drops.load(Ordering::SeqCst),
        1,
        "waiting tasks are dropped at close"
    );
    assert!(!waiting.cancel(), "nothing left to prevent");
    assert!(!waiting.cancelled());
    let drops = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let delays = [i64::MIN, -1, 0, 1, 10, 60_000, i64::MAX];
    for (n, delay_ms) in delays.into_iter().enumerate() {
        let entry = timer.add(Box::new(Counted {
            delay_ms,
            drops: Arc::clone(&drops),
            runs: Arc::clone(&runs),
        }));
        assert!(entry.cancelled(), "delay {delay_ms}");
        assert!(!entry.cancel(), "nothing left to cancel");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            n + 1,
            "refused task dropped in add"
        );
    }
    assert_eq!(timer.size(), 0);
    time.sleep(i64::MAX);
    assert!(!timer.advance_clock(0));
    // The executor is still there; nothing reached it.
    thread::sleep(Duration::from_millis(50));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(waiting_runs.load(Ordering::SeqCst), 0);
}

#[test]
fn advance_clock_returns_false_at_once_after_close_even_with_a_long_timeout() {
    let timer = SystemTimer::new("closed-advance");
    timer.add(timer_task(1, || {}));
    timer.close();
    for timeout_ms in [0, 60_000, i64::MAX] {
        let start = Instant::now();
        assert!(!timer.advance_clock(timeout_ms));
        assert!(
            start.elapsed() < AT_ONCE,
            "timeout {timeout_ms}: {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn close_wakes_a_thread_blocked_in_advance_clock() {
    for (timeout_ms, pending) in [(60_000, false), (60_000, true), (i64::MAX, true)] {
        let timer = Arc::new(SystemTimer::new("wake"));
        if pending {
            // A pending timer far away: the driver sleeps on it, not on an empty queue.
            timer.add(timer_task(3_600_000, || {}));
        }
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let driver = {
            let timer = Arc::clone(&timer);
            thread::spawn(move || {
                let flushed = timer.advance_clock(timeout_ms);
                tx.send((flushed, start.elapsed())).unwrap();
            })
        };
        const BLOCKED: Duration = Duration::from_millis(100);
        thread::sleep(BLOCKED);
        assert!(
            rx.try_recv().is_err(),
            "timeout {timeout_ms}: the driver is blocked"
        );
        timer.close();
        let (flushed, waited) = rx
            .recv_timeout(PATIENCE)
            .expect("close did not wake advance_clock");
        driver.join().unwrap();
        assert!(!flushed);
        assert!(waited >= BLOCKED, "{waited:?}");
        assert!(waited < BLOCKED + AT_ONCE, "{waited:?}");
    }
}

#[test]
fn close_lets_tasks_already_handed_to_the_executor_finish() {
    const FOLLOWERS: usize = 100;
    const SLOW: Duration = Duration::from_millis(300);
    let (timer, time) = mocked("finish", None);
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let waiting_drops = Arc::new(AtomicUsize::new(0));
    let waiting_runs = Arc::new(AtomicUsize::new(0));
    {
        let started = Arc::clone(&started);
        let finished = Arc::clone(&finished);
        timer.add(timer_task(i64::MIN, move || {
            started.store(true, Ordering::SeqCst);
            thread::sleep(SLOW);
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Handed over by a flush, behind the slow one.
    for _ in 0..FOLLOWERS {
        let finished = Arc::clone(&finished);
        timer.add(timer_task(5, move || {
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Still waiting in the wheel at close: dropped unrun.
    timer.add(Box::new(Counted {
        delay_ms: 60_000,
        drops: Arc::clone(&waiting_drops),
        runs: Arc::clone(&waiting_runs),
    }));
    time.sleep(5);
    assert!(timer.advance_clock(0));
    while !started.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    let start = Instant::now();
    timer.close();
    let took = start.elapsed();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1 + FOLLOWERS,
        "close returned before the handed-over tasks finished"
    );
    assert!(took < SLOW + Duration::from_secs(5), "{took:?}");
    assert_eq!(waiting_drops.load(Ordering::SeqCst), 1);
    assert_eq!(waiting_runs.load(Ordering::SeqCst), 0);
}

/// A task whose `Drop` calls back into its timer in every way it can.
struct CallsBackOnDrop {
    timer: Arc<SystemTimer>,
    other: Arc<Mutex<Option<TimerTaskEntry>>>,
    own: Arc<OnceLock<TimerTaskEntry>>,
    dropped: mpsc::Sender<usize>,
}

impl TimerTask for CallsBackOnDrop {
    fn delay_ms(&self) -> i64 {
        60_000
    }
    fn run(self: Box<Self>) {
        panic!("never due in these tests");
    }
}

impl Drop for CallsBackOnDrop {
    fn drop(&mut self) {
        let size = self.timer.size();
        self.timer.add(timer_task(60_000, || {}));
        if let Some(entry) = self.own.get() {
            assert!(!entry.cancel(), "being dropped: no longer pending");
        }
        if let Some(other) = self.other.lock().unwrap().take() {
            other.cancel();
        }
        self.timer.advance_clock(0);
        if self.timer.is_closed() {
            self.timer.close();
        }
        self.dropped.send(size).unwrap();
    }
}

/// A close timeout of `Duration::MAX` ("wait for them however long") does not overflow the
/// clock's deadline.
#[test]
fn a_close_timeout_of_duration_max_waits_without_overflowing() {
    let timer = SystemTimer::builder("close-forever")
        .close_timeout(Duration::MAX)
        .build();
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(0, move || tx.send(()).unwrap()));
    rx.recv_timeout(PATIENCE).unwrap();
    within(PATIENCE, "a close with nothing left running", move || {
        timer.close()
    });
}

/// `close_timeout` is the bound: a task that never ends holds `close` up for that long,
/// not for the default 10 s.
#[test]
fn close_waits_for_a_stuck_task_as_long_as_its_close_timeout() {
    const BOUND: Duration = Duration::from_millis(300);
    let timer = SystemTimer::builder("close-timeout")
        .close_timeout(BOUND)
        .build();
    let (open, gate) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel();
    timer.add(timer_task(0, move || {
        started_tx.send(()).unwrap();
        let _ = gate.recv();
    }));
    started.recv_timeout(PATIENCE).unwrap();
    let start = Instant::now();
    timer.close();
    let took = start.elapsed();
    assert!(
        took >= BOUND,
        "close gave up after {took:?}, before {BOUND:?}"
    );
    assert!(
        took < BOUND + AT_ONCE,
        "close waited {took:?} (bound {BOUND:?})"
    );
    drop(open);
}

fn add_calls_back(
    timer: &Arc<SystemTimer>,
    other: &Arc<Mutex<Option<TimerTaskEntry>>>,
    dropped: &mpsc::Sender<usize>,
) -> TimerTaskEntry {
    let own = Arc::new(OnceLock::new());
    let entry = timer.add(Box::new(CallsBackOnDrop {
        timer: Arc::clone(timer),
        other: Arc::clone(other),
        own: Arc::clone(&own),
        dropped: dropped.clone(),
    }));
    own.set(entry.clone()).unwrap();
    entry
}

#[test]
fn a_task_drop_that_calls_back_into_the_timer_does_not_deadlock_on_cancel() {
    let (timer, _time) = mocked("drop-on-cancel", None);
    let timer = Arc::new(timer);
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let other_drops = Arc::new(AtomicUsize::new(0));
    let other = timer.add(Box::new(Counted {
        delay_ms: 60_000,
        drops: Arc::clone(&other_drops),
        runs: Arc::new(AtomicUsize::new(0)),
    }));
    let other = Arc::new(Mutex::new(Some(other)));
    let entry = add_calls_back(&timer, &other, &dropped_tx);
    assert_eq!(timer.size(), 2);
    within(PATIENCE, "cancel", move || assert!(entry.cancel()));
    let size_seen_in_drop = dropped_rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        size_seen_in_drop, 1,
        "the cancelled task was out of the store"
    );
    assert_eq!(
        other_drops.load(Ordering::SeqCst),
        1,
        "its Drop cancelled the other"
    );
    assert_eq!(timer.size(), 1, "the task its Drop added");
    timer.close();
}

#[test]
fn a_task_drop_that_calls_back_into_the_timer_does_not_deadlock_on_close() {
    const TASKS: usize = 100;
    let (timer, _time) = mocked("drop-on-close", None);
    let timer = Arc::new(timer);
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let other = Arc::new(Mutex::new(None));
    for _ in 0..TASKS {
        let entry = add_calls_back(&timer, &other, &dropped_tx);
        *other.lock().unwrap() = Some(entry);
    }
    let closer = Arc::clone(&timer);
    within(PATIENCE, "close", move || closer.close());
    for _ in 0..TASKS {
        dropped_rx
            .recv_timeout(PATIENCE)
            .expect("every waiting task is dropped by close");
    }
    assert_eq!(timer.size(), 0, "adds from Drop during close were refused");
}

/// `close` in the middle of adds, cancels and flushes on other threads: every task is run
/// at most once, cancelled at most once, never both, and freed exactly once; nothing runs
/// after `close` returns; later cancels all return false.
///
/// The adders' last quarter waits until `close` has returned: however the threads are
/// scheduled (a `close` slower than the adders' whole second half, say), some adds race the
/// `close` and some come after it and are refused.
#[test]
fn close_racing_adds_cancels_and_flushes_frees_everything_once() {
    const THREADS: usize = 3;
    const PER_THREAD: usize = 20_000;
    const TASKS: usize = THREADS * PER_THREAD;
    let slots = Ledger::new(TASKS);
    let timer = SystemTimer::new("close-race");
    let stop = AtomicBool::new(false);
    let closed = AtomicBool::new(false);
    let progress = AtomicUsize::new(0);
    let entries: Vec<Mutex<Vec<(usize, TimerTaskEntry)>>> =
        (0..THREADS).map(|_| Mutex::new(Vec::new())).collect();
    thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) && !timer.is_closed() {
                timer.advance_clock(2);
            }
        });
        for t in 0..THREADS {
            let (timer, slots, entries, progress, closed) =
                (&timer, &slots, &entries, &progress, &closed);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    if i == PER_THREAD * 3 / 4 {
                        while !closed.load(Ordering::SeqCst) {
                            thread::yield_now();
                        }
                    }
                    let id = t * PER_THREAD + i;
                    let entry = timer.add(slots.task(id, (i % 7) as i64 - 1));
                    if i % 3 == 0 && entry.cancel() {
                        slots.cancels[id].fetch_add(1, Ordering::SeqCst);
                    }
                    entries[t].lock().unwrap().push((id, entry));
                    progress.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Close half-way through the adds.
        while progress.load(Ordering::SeqCst) < TASKS / 2 {
            thread::yield_now();
        }
        timer.close();
        closed.store(true, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
    });
    let runs_after_close = slots.total_runs();
    thread::sleep(Duration::from_millis(50));
    let runs_later = slots.total_runs();
    assert_eq!(
        runs_later, runs_after_close,
        "tasks ran after close returned"
    );
    let mut refused = 0;
    for list in &entries {
        for (id, entry) in list.lock().unwrap().iter() {
            assert!(!entry.cancel(), "nothing is pending after close");
            if entry.cancelled() && slots.cancels[*id].load(Ordering::SeqCst) == 0 {
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "close came after every add: the race was not exercised"
    );
    assert!(runs_later > 0);
    for id in 0..TASKS {
        let (runs, cancels, drops) = (slots.runs(id), slots.cancels(id), slots.drops(id));
        assert!(
            runs + cancels <= 1,
            "task {id}: ran {runs}, cancelled {cancels}"
        );
        assert_eq!(drops, 1, "task {id} freed {drops} times");
    }
    assert_eq!(timer.size(), 0);
}

/// One timer of each type, named after `name`, boxed so one test can go through all three.
fn every_timer_type(name: &str) -> [(&'static str, Box<dyn Timer>); 3] {
    [
        ("SystemTimer", Box::new(SystemTimer::new(name))),
        (
            "SystemTimerReaper",
            Box::new(SystemTimerReaper::new(name, SystemTimer::new(name))),
        ),
        ("MockTimer", Box::new(MockTimer::new())),
    ]
}

/// Regression: a dropped `MockTimer` kept its waiting tasks alive for as long as any handle
/// lived, and `cancel()` through such a handle still returned true. Dropping any timer
/// drops its waiting tasks, unrun, and their handles find nothing left.
#[test]
fn dropping_any_timer_drops_its_waiting_tasks_and_their_handles_cancel_to_false() {
    const WAITING: usize = 1_000;
    for (kind, timer) in every_timer_type("dropped") {
        let drops = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let entries: Vec<TimerTaskEntry> = (0..WAITING)
            .map(|i| timer.add(counted(60_000 + i as i64, &runs, &drops)))
            .collect();
        let clones: Vec<TimerTaskEntry> = entries.iter().step_by(3).cloned().collect();
        assert_eq!(timer.size(), WAITING, "{kind}");
        // The executor has started and is idle when the timer goes.
        barrier(&*timer);
        drop(timer);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            WAITING,
            "{kind}: dropping the timer kept its waiting tasks"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{kind}");
        for entry in entries.iter().chain(&clones) {
            // Without panicking, and with nothing left to prevent.
            assert!(!entry.cancel(), "{kind}: cancel of a dropped timer's task");
            assert!(!entry.cancelled(), "{kind}");
        }
    }
}

/// Regression: of two concurrent `close()` calls only the first waited for the task already
/// on the executor; the second returned at once while it still ran. Now every caller of
/// `close` or `stop` waits, on `SystemTimer` and `SystemTimerReaper`.
#[test]
fn every_concurrent_close_and_stop_waits_for_the_task_already_running() {
    const CLOSERS: usize = 4;
    const SLOW: Duration = Duration::from_millis(300);
    let timers: [(&str, Box<dyn Timer>); 2] = [
        ("SystemTimer", Box::new(SystemTimer::new("closers"))),
        (
            "SystemTimerReaper",
            Box::new(SystemTimerReaper::new(
                "closers",
                SystemTimer::new("closers"),
            )),
        ),
    ];
    for (kind, timer) in timers {
        let (started_tx, started_rx) = mpsc::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finished);
        timer.add(timer_task(0, move || {
            started_tx.send(()).unwrap();
            thread::sleep(SLOW);
            done.store(true, Ordering::SeqCst);
        }));
        started_rx
            .recv_timeout(PATIENCE)
            .expect("the slow task never started");
        let all_closing = Barrier::new(CLOSERS);
        // Whether the task had finished when each caller's close or stop returned.
        let seen: Vec<bool> = thread::scope(|s| {
            let callers: Vec<_> = (0..CLOSERS)
                .map(|n| {
                    let (timer, all_closing, finished) = (&timer, &all_closing, &finished);
                    s.spawn(move || {
                        all_closing.wait();
                        if n % 2 == 0 {
                            timer.close();
                        } else {
                            assert!(timer.stop().is_empty(), "nothing was waiting");
                        }
                        finished.load(Ordering::SeqCst)
                    })
                })
                .collect();
            callers.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert!(
            seen.iter().all(|&finished| finished),
            "{kind}: a close or stop returned while the task ran (finished as each returned: {seen:?})"
        );
    }
}

/// `stop` hands back exactly the tasks still waiting, on every timer type: not those that
/// ran (they have finished when `stop` returns) nor those cancelled. A second `stop` hands
/// back nothing, the handles of handed-back tasks can no longer cancel them, and the
/// stopped timer refuses new tasks.
#[test]
fn stop_hands_back_exactly_the_waiting_tasks_on_every_timer() {
    const EXPIRED: usize = 10;
    const WAITING: usize = 20;
    for (kind, timer) in every_timer_type("stopped") {
        let (ran_tx, ran_rx) = mpsc::channel();
        let add = |id: usize, delay_ms: i64| {
            let ran_tx = ran_tx.clone();
            timer.add(timer_task(delay_ms, move || ran_tx.send(id).unwrap()))
        };
        // Run at once: on the executor, or inside `add` for `MockTimer`.
        for id in 0..EXPIRED {
            add(id, 0);
        }
        let waiting: Vec<(usize, TimerTaskEntry)> = (EXPIRED..EXPIRED + WAITING)
            .map(|id| (id, add(id, 60_000 + id as i64)))
            .collect();
        let mut still_waiting = Vec::new();
        for (id, entry) in &waiting {
            if id % 2 == 0 {
                assert!(entry.cancel(), "{kind}: task {id}");
            } else {
                still_waiting.push(*id);
            }
        }

        let handed_back = timer.stop();
        let mut ran: Vec<usize> = ran_rx.try_iter().collect();
        ran.sort_unstable();
        assert_eq!(
            ran,
            (0..EXPIRED).collect::<Vec<_>>(),
            "{kind}: the expired tasks had all run when stop returned"
        );
        assert_eq!(timer.size(), 0, "{kind}");
        assert!(timer.stop().is_empty(), "{kind}: a second stop");
        for (id, entry) in &waiting {
            assert!(!entry.cancel(), "{kind}: task {id} was still cancellable");
            assert_eq!(entry.cancelled(), id % 2 == 0, "{kind}: task {id}");
        }
        // Run by the caller (a service would fail them): which tasks came back.
        let mut back: Vec<usize> = handed_back
            .into_iter()
            .map(|task| {
                task.run();
                ran_rx
                    .try_recv()
                    .expect("a handed-back task reports its id")
            })
            .collect();
        back.sort_unstable();
        assert_eq!(back, still_waiting, "{kind}");

        for delay_ms in [0, 10] {
            assert!(
                add(usize::MAX, delay_ms).cancelled(),
                "{kind}: add after stop"
            );
        }
        assert!(!timer.advance_clock(0), "{kind}");
        thread::sleep(Duration::from_millis(20));
        assert!(ran_rx.try_recv().is_err(), "{kind}: a task ran after stop");
    }
}

/// `stop` half-way through three threads' adds (a third of them cancelled at once) while
/// two more drive the timer, on every timer type: each task ends exactly one way — run
/// once, cancelled by one `cancel()` that returned true, handed back by `stop`, or refused
/// by the stopped timer — and is dropped exactly once.
///
/// Each adder waits half-way until the stop begins, so that its third quarter races the
/// stop however the threads are scheduled, and at three quarters until the stop has
/// returned, so that its last quarter is refused even when the stop takes longer than the
/// third quarter's adds.
#[test]
fn stop_racing_adds_cancels_and_drivers_ends_every_task_exactly_one_way() {
    const ADDERS: usize = 3;
    const PER_ADDER: usize = 10_000;
    const TASKS: usize = ADDERS * PER_ADDER;
    const DRIVERS: usize = 2;
    for (kind, timer) in every_timer_type("stop-race") {
        let slots = Ledger::new(TASKS);
        let refused: Vec<AtomicBool> = (0..TASKS).map(|_| AtomicBool::new(false)).collect();
        let entries: Vec<Mutex<Vec<TimerTaskEntry>>> =
            (0..ADDERS).map(|_| Mutex::new(Vec::new())).collect();
        let done = AtomicBool::new(false);
        let progress = AtomicUsize::new(0);
        let stopping = AtomicBool::new(false);
        let stopped = AtomicBool::new(false);
        let (handed_back, runs_at_stop) = thread::scope(|s| {
            for _ in 0..DRIVERS {
                s.spawn(|| {
                    while !done.load(Ordering::SeqCst) {
                        timer.advance_clock(1);
                        thread::yield_now();
                    }
                });
            }
            for t in 0..ADDERS {
                let (timer, slots, refused, entries, progress, stopping, stopped) = (
                    &timer, &slots, &refused, &entries, &progress, &stopping, &stopped,
                );
                s.spawn(move || {
                    for i in 0..PER_ADDER {
                        let wait_for = if i == PER_ADDER / 2 {
                            Some(stopping)
                        } else if i == PER_ADDER * 3 / 4 {
                            Some(stopped)
                        } else {
                            None
                        };
                        while wait_for.is_some_and(|flag| !flag.load(Ordering::SeqCst)) {
                            thread::yield_now();
                        }
                        let id = t * PER_ADDER + i;
                        // Already expired, due within a few ms, or a minute out.
                        let delay_ms = if i % 5 == 0 {
                            60_000
                        } else {
                            (i % 7) as i64 - 1
                        };
                        let entry = timer.add(slots.task(id, delay_ms));
                        if entry.cancelled() {
                            refused[id].store(true, Ordering::SeqCst);
                        } else if i % 3 == 0 && entry.cancel() {
                            slots.cancels[id].fetch_add(1, Ordering::SeqCst);
                        }
                        entries[t].lock().unwrap().push(entry);
                        progress.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            while progress.load(Ordering::SeqCst) < TASKS / 2 {
                thread::yield_now();
            }
            stopping.store(true, Ordering::SeqCst);
            let handed_back = timer.stop();
            let runs_at_stop = slots.total_runs();
            stopped.store(true, Ordering::SeqCst);
            done.store(true, Ordering::SeqCst);
            (handed_back, runs_at_stop)
        });
        if kind != "MockTimer" {
            // (A `MockTimer` runs tasks on its drivers: one may finish a task it took
            // before `stop`.)
            thread::sleep(Duration::from_millis(20));
            assert_eq!(
                slots.total_runs(),
                runs_at_stop,
                "{kind}: tasks ran after stop returned"
            );
        }
        for entry in entries.iter().flat_map(|e| e.lock().unwrap().clone()) {
            assert!(
                !entry.cancel(),
                "{kind}: a task was left pending after stop"
            );
        }
        let drops_before = slots.all_drops();
        let returned = handed_back.len();
        drop(handed_back);
        let drops_after = slots.all_drops();

        let mut endings = [0usize; 4];
        for id in 0..TASKS {
            let ways = [
                slots.runs(id),
                slots.cancels(id),
                drops_after[id] - drops_before[id],
                usize::from(refused[id].load(Ordering::SeqCst)),
            ];
            assert_eq!(
                ways.iter().sum::<usize>(),
                1,
                "{kind}: task {id} ended {ways:?} ways (ran, cancelled, handed back, refused)"
            );
            assert_eq!(
                drops_after[id], 1,
                "{kind}: task {id} dropped {} times",
                drops_after[id]
            );
            for (count, way) in endings.iter_mut().zip(ways) {
                *count += way;
            }
        }
        eprintln!("{kind}: {endings:?} tasks ran, were cancelled, handed back, refused");
        assert_eq!(endings[2], returned, "{kind}");
        assert!(
            endings.iter().all(|&count| count > 0),
            "{kind}: the race was not exercised: {endings:?}"
        );
        assert_eq!(timer.size(), 0, "{kind}");
    }
}
