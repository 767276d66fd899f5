//! Tests of `MockTime` and `MockTimer`, the crate's ports of Kafka's test fixtures.
//!
//! Kafka has no test suite for these fixtures; the behaviour checked here is the one
//! documented on [`MockTimer`] and [`MockTime`]. Fixture sources: apache/kafka
//! `server-common/src/test/java/org/apache/kafka/server/util/timer/MockTimer.java` and
//! `clients/src/test/java/org/apache/kafka/common/utils/MockTime.java`, licensed to the
//! Apache Software Foundation (ASF) under the Apache License, Version 2.0; see
//! <http://www.apache.org/licenses/LICENSE-2.0>.
//!
//! Where the port differs from Kafka's fixtures (and these tests hold it to the port):
//!
//! - A task fires once the clock reaches its expiration (Kafka's `MockTimer`: strictly
//!   after it), as `SystemTimer` does; see `task_fires_at_its_expiration_not_before`.
//! - `add` of a task with delay <= 0 runs it inside `add`, on the caller's thread.
//! - `cancel` returns whether it prevented the run; a closed timer refuses tasks.
//! - A panicking task is not caught: the panic reaches the caller of `advance_clock`.
//! - `MockTime::sleep` of a negative duration panics (Kafka's moves the clock back).
//!
//! Kafka's `MockTimer` has dropped cancelled entries since KAFKA-19216 (its `size` counted
//! them before), without a test of its own; here
//! `cancelled_task_never_runs_and_leaves_the_timer` holds the port to it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use timingwheel::{MockTime, MockTimer, Timer, TimerTask, TimerTaskEntry, timer_task};

/// A log of task names, in the order the tasks ran.
#[derive(Clone, Default)]
struct RunLog(Arc<Mutex<Vec<String>>>);

impl RunLog {
    /// Returns a task that appends `name` to the log.
    fn task(&self, delay_ms: i64, name: impl Into<String>) -> Box<dyn TimerTask> {
        let log = self.clone();
        let name = name.into();
        timer_task(delay_ms, move || log.0.lock().unwrap().push(name))
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A task that records whether it ran and whether it was dropped.
struct Probe {
    delay_ms: i64,
    ran: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

impl Probe {
    fn task(delay_ms: i64) -> (Box<dyn TimerTask>, Arc<AtomicBool>, Arc<AtomicBool>) {
        let ran = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicBool::new(false));
        let probe = Probe {
            delay_ms,
            ran: Arc::clone(&ran),
            dropped: Arc::clone(&dropped),
        };
        (Box::new(probe), ran, dropped)
    }
}

impl TimerTask for Probe {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }

    fn run(self: Box<Self>) {
        self.ran.store(true, Ordering::SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn tasks_run_in_expiration_order() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    for delay_ms in [50, 10, 40, 20, 30] {
        timer.add(log.task(delay_ms, delay_ms.to_string()));
    }
    assert_eq!(timer.size(), 5);
    assert!(timer.advance_clock(50));
    assert_eq!(log.take(), ["10", "20", "30", "40", "50"]);
    assert_eq!(timer.size(), 0);
}

#[test]
fn ties_run_in_insertion_order() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    for name in ["a", "b", "c", "d"] {
        timer.add(log.task(10, name));
    }
    // The same expiration reached by a different delay, added later.
    timer.advance_clock(5);
    timer.add(log.task(5, "e"));
    assert!(timer.advance_clock(5));
    assert_eq!(log.take(), ["a", "b", "c", "d", "e"]);
}

#[test]
fn task_fires_at_its_expiration_not_before() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    let entry = timer.add(log.task(10, "due"));
    assert_eq!(entry.expiration_ms(), timer.time().hi_res_clock_ms() + 10);
    assert!(!timer.advance_clock(9), "nothing was due yet");
    assert!(log.take().is_empty());
    assert_eq!(timer.size(), 1);
    assert!(timer.advance_clock(1));
    assert_eq!(log.take(), ["due"]);
    assert!(!timer.advance_clock(100), "nothing left to run");
}

#[test]
fn advance_clock_moves_the_time_by_its_timeout() {
    let timer = MockTimer::new();
    let start = timer.time().hi_res_clock_ms();
    let wall = timer.time().milliseconds();
    timer.advance_clock(250);
    assert_eq!(timer.time().hi_res_clock_ms(), start + 250);
    assert_eq!(timer.time().milliseconds(), wall + 250);
    timer.advance_clock(-5);
    assert_eq!(
        timer.time().hi_res_clock_ms(),
        start + 250,
        "a negative timeout"
    );
    timer.advance_clock(0);
    assert_eq!(timer.time().hi_res_clock_ms(), start + 250);
}

#[test]
fn only_due_tasks_run() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    timer.add(log.task(10, "soon"));
    timer.add(log.task(1_000, "later"));
    assert!(timer.advance_clock(500));
    assert_eq!(log.take(), ["soon"]);
    assert_eq!(timer.size(), 1);
    assert!(timer.advance_clock(500));
    assert_eq!(log.take(), ["later"]);
}

#[test]
fn cancelled_task_never_runs_and_leaves_the_timer() {
    let timer = MockTimer::new();
    let (task, ran, dropped) = Probe::task(10);
    let entry = timer.add(task);
    let log = RunLog::default();
    timer.add(log.task(10, "other"));
    assert_eq!(timer.size(), 2);
    assert!(!entry.cancelled());

    assert!(entry.cancel(), "the first cancel prevents the run");
    assert!(
        dropped.load(Ordering::SeqCst),
        "cancel drops the task at once"
    );
    assert!(entry.cancelled());
    assert_eq!(timer.size(), 1);
    assert!(!entry.cancel(), "a second cancel prevents nothing");
    assert!(entry.cancelled());

    assert!(timer.advance_clock(10));
    assert!(!ran.load(Ordering::SeqCst), "a cancelled task ran");
    assert_eq!(log.take(), ["other"]);
}

#[test]
fn cancel_through_a_clone_is_seen_by_the_original() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    let entry = timer.add(log.task(10, "cancelled"));
    let clone = entry.clone();
    let clone_of_clone = clone.clone();
    assert!(clone.cancel());
    assert!(
        entry.cancelled(),
        "the original does not see the clone's cancel"
    );
    assert!(clone_of_clone.cancelled());
    assert!(!entry.cancel());
    assert!(!clone_of_clone.cancel());

    // And the other way round: cancel through the original, after cloning.
    let entry = timer.add(log.task(10, "also cancelled"));
    let clone = entry.clone();
    assert!(entry.cancel());
    assert!(clone.cancelled());
    assert!(!clone.cancel());

    // A clone made after the cancel sees it too.
    let entry = timer.add(log.task(10, "cancelled before cloning"));
    assert!(entry.cancel());
    assert!(entry.clone().cancelled());

    assert!(!timer.advance_clock(10));
    assert!(log.take().is_empty());
    assert_eq!(timer.size(), 0);
}

#[test]
fn cancel_after_the_run_returns_false() {
    let timer = MockTimer::new();
    let (task, ran, _dropped) = Probe::task(10);
    let entry = timer.add(task);
    assert!(timer.advance_clock(10));
    assert!(ran.load(Ordering::SeqCst));
    assert!(!entry.cancel());
    assert!(!entry.cancelled(), "a task that ran is not cancelled");
}

#[test]
fn non_positive_delay_runs_inside_add_on_the_callers_thread() {
    let timer = MockTimer::new();
    let caller = thread::current().id();
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    for delay_ms in [0, -1, i64::MIN] {
        let record = Arc::clone(&ran_on);
        let entry = timer.add(timer_task(delay_ms, move || {
            record.lock().unwrap().push(thread::current().id());
        }));
        assert_eq!(
            ran_on.lock().unwrap().len(),
            1,
            "add({delay_ms}) did not run the task before returning"
        );
        assert_eq!(ran_on.lock().unwrap().pop(), Some(caller));
        assert!(!entry.cancel(), "the task already ran");
        assert!(!entry.cancelled());
        assert_eq!(timer.size(), 0);
    }
    let now = timer.time().hi_res_clock_ms();
    let entry = timer.add(timer_task(i64::MIN, || {}));
    assert_eq!(entry.expiration_ms(), now.saturating_add(i64::MIN));
    assert!(
        !timer.advance_clock(0),
        "nothing was left for advance_clock"
    );
}

#[test]
fn huge_delay_saturates_and_never_fires() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    let entry = timer.add(log.task(i64::MAX, "never"));
    assert_eq!(entry.expiration_ms(), i64::MAX);
    assert!(!timer.advance_clock(1_000_000_000));
    assert_eq!(timer.size(), 1);
    assert!(entry.cancel());
}

#[test]
fn task_adding_to_its_own_timer_does_not_deadlock() {
    let timer = Arc::new(MockTimer::new());
    let log = RunLog::default();
    let (inner_timer, inner_log) = (Arc::clone(&timer), log.clone());
    timer.add(timer_task(10, move || {
        inner_log.0.lock().unwrap().push("outer".into());
        inner_timer.add(inner_log.task(0, "added, due now"));
        inner_timer.add(inner_log.task(1, "added, due later"));
        // "sibling" and "added, due later" wait.
        assert_eq!(inner_timer.size(), 2);
    }));
    timer.add(log.task(10, "sibling"));
    assert!(timer.advance_clock(10));
    assert_eq!(log.take(), ["outer", "added, due now", "sibling"]);
    assert_eq!(timer.size(), 1);
    assert!(timer.advance_clock(1));
    assert_eq!(log.take(), ["added, due later"]);
}

#[test]
fn task_may_advance_its_own_timer() {
    let timer = Arc::new(MockTimer::new());
    let log = RunLog::default();
    let (inner_timer, inner_log) = (Arc::clone(&timer), log.clone());
    timer.add(timer_task(10, move || {
        inner_log.0.lock().unwrap().push("outer".into());
        // Re-entrant: runs the tasks due at the moved clock from inside a task.
        assert!(inner_timer.advance_clock(5));
    }));
    timer.add(log.task(15, "reached by the nested call"));
    assert!(timer.advance_clock(10));
    assert_eq!(log.take(), ["outer", "reached by the nested call"]);
    assert_eq!(timer.size(), 0);
}

#[test]
fn running_task_cancels_another_pending_task() {
    let timer = MockTimer::new();
    let log = RunLog::default();
    let victim: Arc<Mutex<Option<TimerTaskEntry>>> = Arc::default();
    let cancelled_it = Arc::new(AtomicBool::new(false));
    let (slot, flag, inner_log) = (Arc::clone(&victim), Arc::clone(&cancelled_it), log.clone());
    timer.add(timer_task(10, move || {
        inner_log.0.lock().unwrap().push("canceller".into());
        let entry = slot.lock().unwrap().take().expect("victim entry set");
        flag.store(entry.cancel(), Ordering::SeqCst);
    }));
    // Due at the same moment, after the canceller; and one due later.
    let (task, victim_ran, victim_dropped) = Probe::task(10);
    *victim.lock().unwrap() = Some(timer.add(task));
    timer.add(log.task(20, "bystander"));
    assert_eq!(timer.size(), 3);

    assert!(timer.advance_clock(20));
    assert!(
        cancelled_it.load(Ordering::SeqCst),
        "cancel from a task returned false"
    );
    assert!(
        !victim_ran.load(Ordering::SeqCst),
        "a task cancelled while pending ran"
    );
    assert!(victim_dropped.load(Ordering::SeqCst));
    assert_eq!(log.take(), ["canceller", "bystander"]);
    assert_eq!(timer.size(), 0);
}

#[test]
fn close_refuses_new_tasks_and_stops_advancing() {
    let timer = MockTimer::new();
    let (waiting, waiting_ran, waiting_dropped) = Probe::task(10);
    let waiting = timer.add(waiting);
    timer.close();
    assert!(
        waiting_dropped.load(Ordering::SeqCst),
        "close keeps waiting tasks"
    );
    assert_eq!(timer.size(), 0);
    assert!(!waiting.cancel(), "close already dropped it");
    assert!(!waiting.cancelled());

    for delay_ms in [-1, 0, 10] {
        let (task, ran, dropped) = Probe::task(delay_ms);
        let entry = timer.add(task);
        assert!(
            entry.cancelled(),
            "add({delay_ms}) after close was accepted"
        );
        assert!(!entry.cancel());
        assert!(
            !ran.load(Ordering::SeqCst),
            "add({delay_ms}) after close ran the task"
        );
        assert!(dropped.load(Ordering::SeqCst));
    }
    let before = timer.time().hi_res_clock_ms();
    assert!(!timer.advance_clock(100));
    assert_eq!(
        timer.time().hi_res_clock_ms(),
        before,
        "a closed timer's clock moved"
    );
    assert!(!waiting_ran.load(Ordering::SeqCst));
    assert_eq!(timer.size(), 0);

    timer.close();
}

#[test]
#[should_panic(expected = "task panicked on purpose")]
fn panic_in_a_task_reaches_the_caller() {
    let timer = MockTimer::new();
    timer.add(timer_task(1, || panic!("task panicked on purpose")));
    timer.advance_clock(1);
}

#[test]
fn mock_time_sleep_moves_every_clone() {
    let time = MockTime::new();
    let clone = time.clone();
    let (start_ms, start_wall, start_ns) = (
        time.hi_res_clock_ms(),
        time.milliseconds(),
        time.nanoseconds(),
    );
    assert_eq!(MockTime::new().hi_res_clock_ms(), start_ms, "fixed start");

    clone.sleep(1_500);
    assert_eq!(time.hi_res_clock_ms(), start_ms + 1_500);
    assert_eq!(time.milliseconds(), start_wall + 1_500);
    assert_eq!(time.nanoseconds(), start_ns + 1_500_000_000);
    time.sleep(0);
    assert_eq!(clone.hi_res_clock_ms(), start_ms + 1_500);

    // A new clock is independent of this one.
    assert_eq!(MockTime::new().hi_res_clock_ms(), start_ms);
}

#[test]
fn mock_time_sleep_never_blocks_and_saturates() {
    let time = MockTime::new();
    let start = std::time::Instant::now();
    time.sleep(3_600_000);
    time.sleep(i64::MAX);
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(time.nanoseconds(), i64::MAX);
    assert_eq!(time.milliseconds(), i64::MAX);
}

/// Regression: `MockTime` kept nanoseconds in an `i64`, so its clock stopped 292 years
/// after its start and a task due later never ran, whatever `advance_clock` was asked. The
/// clock now covers the whole `i64` millisecond range and saturates at its end.
#[test]
fn mock_clock_covers_the_whole_millisecond_range_and_saturates() {
    /// 10^13 ms, about 317 years: beyond what an `i64` of nanoseconds holds.
    const FAR_MS: i64 = 10_000_000_000_000;
    let timer = MockTimer::new();
    let start = timer.time().hi_res_clock_ms();
    let log = RunLog::default();
    let far = timer.add(log.task(FAR_MS, "far"));
    let end = timer.add(log.task(i64::MAX, "end"));
    assert_eq!(far.expiration_ms(), start + FAR_MS);
    assert_eq!(end.expiration_ms(), i64::MAX);

    assert!(!timer.advance_clock(FAR_MS - 1));
    assert_eq!(timer.time().hi_res_clock_ms(), start + FAR_MS - 1);
    assert!(
        timer.advance_clock(1),
        "the clock stopped short of 10^13 ms"
    );
    assert_eq!(log.take(), ["far"]);
    assert_eq!(timer.time().nanoseconds(), i64::MAX, "nanoseconds saturate");

    // To the end of the range, where it stays.
    assert!(timer.advance_clock(i64::MAX));
    assert_eq!(log.take(), ["end"]);
    assert_eq!(timer.time().hi_res_clock_ms(), i64::MAX);
    assert!(!timer.advance_clock(i64::MAX));
    assert_eq!(
        timer.time().hi_res_clock_ms(),
        i64::MAX,
        "saturates, never wraps"
    );
    assert_eq!(timer.time().milliseconds(), i64::MAX);
    assert_eq!(timer.size(), 0);
}

#[test]
fn timer_shares_the_time_it_was_given() {
    let time = MockTime::new();
    let timer = MockTimer::with_time(time.clone());
    let log = RunLog::default();
    timer.add(log.task(30, "due"));
    time.sleep(30);
    assert_eq!(timer.time().hi_res_clock_ms(), time.hi_res_clock_ms());
    assert!(
        timer.advance_clock(0),
        "the shared clock's sleep made the task due"
    );
    assert_eq!(log.take(), ["due"]);
}

#[test]
#[should_panic(expected = "must not be negative")]
fn mock_time_negative_sleep_panics() {
    MockTime::new().sleep(-1);
}

#[test]
fn cancel_from_other_threads_is_exactly_once() {
    const TASKS: usize = 1_000;
    const THREADS: usize = 4;
    let timer = MockTimer::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let entries: Vec<_> = (0..TASKS)
        .map(|i| {
            let ran = Arc::clone(&ran);
            timer.add(timer_task(1 + (i % 7) as i64, move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }))
        })
        .collect();
    let won = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for entry in &entries {
                    if entry.cancel() {
                        won.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        s.spawn(|| {
            for _ in 0..8 {
                timer.advance_clock(1);
            }
        });
    });
    let (won, ran) = (won.load(Ordering::SeqCst), ran.load(Ordering::SeqCst));
    assert_eq!(won + ran, TASKS, "{won} cancelled + {ran} ran");
    assert_eq!(timer.size(), 0);
    let cancelled = entries.iter().filter(|e| e.cancelled()).count();
    assert_eq!(cancelled, won);
}

#[test]
fn close_racing_with_adds_leaves_no_task_behind() {
    const ROUNDS: usize = 200;
    const ADDERS: usize = 2;
    const ADDS: usize = 500;
    for round in 0..ROUNDS {
        let timer = MockTimer::new();
        let live = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        thread::scope(|s| {
            for _ in 0..ADDERS {
                s.spawn(|| {
                    for _ in 0..ADDS {
                        let guard = LiveGuard::new(&live);
                        let ran = Arc::clone(&ran);
                        timer.add(timer_task(10, move || {
                            let _guard = guard;
                            ran.fetch_add(1, Ordering::SeqCst);
                        }));
                    }
                });
            }
            s.spawn(|| {
                thread::yield_now();
                timer.close();
            });
        });
        // Every add either went in before close (then close dropped it) or was refused.
        assert!(!timer.advance_clock(10));
        assert_eq!(ran.load(Ordering::SeqCst), 0, "round {round}: a task ran");
        assert_eq!(
            timer.size(),
            0,
            "round {round}: tasks were left pending in a closed timer"
        );
        assert_eq!(
            live.load(Ordering::SeqCst),
            0,
            "round {round}: a task outlived close"
        );
    }
}

/// Counts live tasks: +1 when made, -1 when the task is dropped (run or not).
struct LiveGuard(Arc<AtomicUsize>);

impl LiveGuard {
    fn new(live: &Arc<AtomicUsize>) -> LiveGuard {
        live.fetch_add(1, Ordering::SeqCst);
        LiveGuard(Arc::clone(live))
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
