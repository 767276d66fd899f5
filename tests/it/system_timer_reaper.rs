//! Kafka's `SystemTimerReaperTest`, ported, plus the reaper's own guarantees.
//!
//! Source: apache/kafka,
//! `server-common/src/test/java/org/apache/kafka/server/util/timer/SystemTimerReaperTest.java`
//! (checked against commit 2e5fb87, after KAFKA-19937: nothing added since the port).
//! Licensed to the Apache Software Foundation (ASF) under the Apache License, Version 2.0;
//! see <http://www.apache.org/licenses/LICENSE-2.0>.
//!
//! Deviations from the Java suite:
//!
//! - `testReaper` and `testSharedTimerBetweenConsumers`: a task reports on a channel
//!   instead of failing a `CompletableFuture` with a `TimeoutException`. Besides "it
//!   fires", each test asserts that no task fired before its delay (a strict lower bound)
//!   and that each fired within 5 s (a loose upper bound).
//! - `testReaperClose` verifies `close()` with a hand-written recording [`Timer`] instead of
//!   a Mockito mock, and asserts `is_shutdown()` as soon as `close` returns instead of
//!   polling for it with `waitForCondition`: this port's `close` joins the thread.
//! - `testRejectsNullName` and `testRejectsNullTimer` are not ported: Rust's types rule
//!   out a null name or timer.
//! - Added: a closed reaper refuses tasks; an idle reaper's `close`, `stop` and drop take
//!   milliseconds, not its 200 ms poll, and a second `close` is as quick; concurrent
//!   `close` calls all wait for the thread;
//!   a reaper whose shared timer was closed elsewhere does not spin; dropping the reaper
//!   closes it; a panic in the wrapped timer's `advance_clock` does not end the reaper; the
//!   thread carries `reaper_name`; `add`, `size` and `advance_clock` delegate; `get_ref`
//!   lends the wrapped timer out with its own type.
//!
//! (`stop`, `close` waiting for a task on the executor, and concurrent `close` and `stop`
//! calls, are tested on every timer type in `shutdown.rs`; a panicking task on a
//! reaper-driven timer in `system_timer.rs`.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{
    AddError, MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerTask, TimerTaskEntry,
    timer_task,
};

/// Loose upper bound for anything that should happen "soon" on a busy 2-core machine.
const SOON: Duration = Duration::from_secs(5);

/// Adds a task that sends the instant it ran on `fired` (Kafka's `FutureTimerTask`).
fn add_reporting(timer: &dyn Timer, delay_ms: i64, fired: &mpsc::Sender<(i64, Instant)>) {
    let fired = fired.clone();
    timer.add(timer_task(delay_ms, move || {
        let _ = fired.send((delay_ms, Instant::now()));
    }));
}

/// Waits for `count` tasks on `fired` and checks that none ran before its delay had passed
/// since `added`, nor later than [`SOON`]. Returns the delays in firing order.
fn expect_fired(fired: &mpsc::Receiver<(i64, Instant)>, added: Instant, count: usize) -> Vec<i64> {
    let mut delays = Vec::new();
    for _ in 0..count {
        let (delay_ms, at) = fired
            .recv_timeout(SOON)
            .expect("a task did not fire through the reaper");
        let after = at.duration_since(added);
        assert!(
            after >= Duration::from_millis(delay_ms as u64),
            "the {delay_ms} ms task fired early, after {after:?}"
        );
        assert!(after < SOON, "the {delay_ms} ms task fired after {after:?}");
        delays.push(delay_ms);
    }
    delays
}

#[test]
fn reaper_fires_tasks_without_a_driver_loop() {
    let timer = SystemTimerReaper::new("reaper", SystemTimer::new("timer"));
    let (tx, rx) = mpsc::channel();
    let added = Instant::now();
    for delay_ms in [100, 200, 300] {
        add_reporting(&timer, delay_ms, &tx);
    }
    assert_eq!(expect_fired(&rx, added, 3), [100, 200, 300]);
    assert_eq!(timer.size(), 0);
    timer.close();
}

#[test]
fn shared_timer_serves_a_consumer_after_another_stopped() {
    let timer = SystemTimerReaper::new("shared-reaper", SystemTimer::new("shared-timer"));
    let (tx, rx) = mpsc::channel();
    let added = Instant::now();
    add_reporting(&timer, 100, &tx);
    add_reporting(&timer, 200, &tx);
    assert_eq!(expect_fired(&rx, added, 2), [100, 200]);

    // The first consumer is gone; the second one still schedules and expires tasks.
    let added = Instant::now();
    add_reporting(&timer, 100, &tx);
    assert_eq!(expect_fired(&rx, added, 1), [100]);
    timer.close();
}

/// What a [`RecordingTimer`] saw.
#[derive(Default)]
struct Record {
    advance_calls: AtomicUsize,
    close_calls: AtomicUsize,
    dropped: AtomicBool,
    /// Names of the threads that called `advance_clock`.
    advance_threads: Mutex<Vec<String>>,
    /// `advance_clock` panics on its first this many calls.
    panics_left: AtomicUsize,
}

/// A timer that records how the reaper drives it (Kafka's test uses a Mockito mock).
/// Holds no tasks; `advance_clock` sleeps a little, then returns false.
struct RecordingTimer(Arc<Record>);

impl RecordingTimer {
    fn new() -> (RecordingTimer, Arc<Record>) {
        let record = Arc::new(Record::default());
        (RecordingTimer(Arc::clone(&record)), record)
    }

    fn panicking_first(calls: usize) -> (RecordingTimer, Arc<Record>) {
        let (timer, record) = RecordingTimer::new();
        record.panics_left.store(calls, Ordering::SeqCst);
        (timer, record)
    }
}

impl Timer for RecordingTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        panic!(
            "RecordingTimer::add must not be called (task delay {})",
            task.delay_ms()
        )
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        Ok(self.add(task))
    }

    fn reschedule(&self, _entry: &TimerTaskEntry, _delay_ms: i64) -> bool {
        panic!("RecordingTimer::reschedule must not be called")
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.0.advance_calls.fetch_add(1, Ordering::SeqCst);
        let name = thread::current().name().unwrap_or("<unnamed>").to_owned();
        self.0.advance_threads.lock().unwrap().push(name);
        let panic_now = self
            .0
            .panics_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if panic_now {
            panic!("RecordingTimer: advance_clock told to panic");
        }
        thread::sleep(Duration::from_millis(timeout_ms.clamp(0, 5) as u64));
        false
    }

    fn size(&self) -> usize {
        42
    }

    fn close(&self) {
        self.0.close_calls.fetch_add(1, Ordering::SeqCst);
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.close();
        Vec::new()
    }
}

impl Drop for RecordingTimer {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

/// Waits (up to [`SOON`]) until `record` saw at least `calls` calls of `advance_clock`.
fn wait_for_advance_calls(record: &Record, calls: usize) {
    let start = Instant::now();
    while record.advance_calls.load(Ordering::SeqCst) < calls {
        assert!(
            start.elapsed() < SOON,
            "the reaper made only {} advance_clock calls, expected {calls}",
            record.advance_calls.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn close_closes_the_wrapped_timer_and_ends_the_thread() {
    let (timer, record) = RecordingTimer::new();
    let reaper = SystemTimerReaper::new("reaper", timer);
    wait_for_advance_calls(&record, 1);
    assert!(!reaper.is_shutdown());
    assert_eq!(record.close_calls.load(Ordering::SeqCst), 0);

    reaper.close();
    assert_eq!(record.close_calls.load(Ordering::SeqCst), 1);
    assert!(
        reaper.is_shutdown(),
        "close returned before the thread ended"
    );

    // The thread is gone: it makes no more calls.
    let calls = record.advance_calls.load(Ordering::SeqCst);
    thread::sleep(Duration::from_millis(50));
    assert_eq!(record.advance_calls.load(Ordering::SeqCst), calls);
}

#[test]
fn closed_reaper_refuses_tasks_and_runs_nothing() {
    let timer = SystemTimerReaper::new("reaper", SystemTimer::new("refusing"));
    let waiting_ran = Arc::new(AtomicBool::new(false));
    let ran = Arc::clone(&waiting_ran);
    let waiting = timer.add(timer_task(60_000, move || {
        ran.store(true, Ordering::SeqCst)
    }));
    timer.close();
    assert!(timer.is_shutdown());

    let late_ran = Arc::new(AtomicBool::new(false));
    for delay_ms in [-1, 0, 10] {
        let ran = Arc::clone(&late_ran);
        let entry = timer.add(timer_task(delay_ms, move || {
            ran.store(true, Ordering::SeqCst)
        }));
        assert!(
            entry.cancelled(),
            "add({delay_ms}) after close was accepted"
        );
        assert!(!entry.cancel());
    }
    assert_eq!(timer.size(), 0, "close dropped the waiting task");
    assert!(!waiting.cancel(), "the waiting task was dropped by close");
    assert!(!timer.advance_clock(0));
    thread::sleep(Duration::from_millis(50));
    assert!(
        !late_ran.load(Ordering::SeqCst),
        "a task added after close ran"
    );
    assert!(
        !waiting_ran.load(Ordering::SeqCst),
        "a waiting task ran after close"
    );
}

#[test]
fn drop_closes_the_reaper() {
    let (timer, record) = RecordingTimer::new();
    let reaper = SystemTimerReaper::new("dropped-reaper", timer);
    wait_for_advance_calls(&record, 1);
    drop(reaper);
    assert_eq!(record.close_calls.load(Ordering::SeqCst), 1);
    // The thread held the other reference to the wrapped timer: it has ended.
    assert!(
        record.dropped.load(Ordering::SeqCst),
        "the wrapped timer outlived the reaper, so its thread still runs"
    );
}

#[test]
fn dropping_a_reaper_stops_its_system_timer() {
    let ran = Arc::new(AtomicBool::new(false));
    {
        let timer = SystemTimerReaper::new("reaper", SystemTimer::new("dropped"));
        let flag = Arc::clone(&ran);
        timer.add(timer_task(100, move || flag.store(true, Ordering::SeqCst)));
    }
    thread::sleep(Duration::from_millis(200));
    assert!(
        !ran.load(Ordering::SeqCst),
        "a task ran after its reaper was dropped"
    );
}

#[test]
fn panic_in_advance_clock_does_not_kill_the_reaper() {
    let (timer, record) = RecordingTimer::panicking_first(3);
    let reaper = SystemTimerReaper::new("survivor", timer);
    // Calls 1-3 panic; the thread must go on to make more.
    wait_for_advance_calls(&record, 6);
    assert_eq!(record.panics_left.load(Ordering::SeqCst), 0);
    assert!(!reaper.is_shutdown());
    reaper.close();
    assert!(reaper.is_shutdown());
    assert_eq!(record.close_calls.load(Ordering::SeqCst), 1);
}

/// A timer that passes every call on to `inner`, counting the calls of `advance_clock` and
/// panicking in the first `panics_left` of them.
struct WrappedTimer<T> {
    inner: T,
    advance_calls: Arc<AtomicUsize>,
    panics_left: AtomicUsize,
}

impl<T> WrappedTimer<T> {
    fn new(inner: T, panics_left: usize) -> WrappedTimer<T> {
        WrappedTimer {
            inner,
            advance_calls: Arc::default(),
            panics_left: AtomicUsize::new(panics_left),
        }
    }
}

impl<T: Timer> Timer for WrappedTimer<T> {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        self.inner.add(task)
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        self.inner.try_add(task)
    }

    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        self.inner.reschedule(entry, delay_ms)
    }

    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.advance_calls.fetch_add(1, Ordering::SeqCst);
        let panic_now = self
            .panics_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if panic_now {
            panic!("WrappedTimer: advance_clock told to panic");
        }
        self.inner.advance_clock(timeout_ms)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn close(&self) {
        self.inner.close()
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.inner.stop()
    }
}

#[test]
fn tasks_still_fire_after_advance_clock_panicked() {
    let timer = WrappedTimer::new(SystemTimer::new("flaky"), 2);
    let (tx, rx) = mpsc::channel();
    let added = Instant::now();
    add_reporting(&timer.inner, 50, &tx);
    add_reporting(&timer.inner, 150, &tx);
    let reaper = SystemTimerReaper::new("flaky-reaper", timer);
    assert_eq!(expect_fired(&rx, added, 2), [50, 150]);
    reaper.close();
}

#[test]
fn thread_is_named_after_reaper_name() {
    let (timer, record) = RecordingTimer::new();
    let reaper = SystemTimerReaper::new("purgatory-reaper", timer);
    wait_for_advance_calls(&record, 2);
    reaper.close();
    let names = record.advance_threads.lock().unwrap();
    assert!(!names.is_empty());
    assert!(
        names.iter().all(|name| name == "purgatory-reaper"),
        "advance_clock called from {names:?}"
    );
}

#[test]
fn tasks_run_on_the_executor_thread_not_the_reaper() {
    let timer = SystemTimerReaper::new("named-reaper", SystemTimer::new("named"));
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(5, move || {
        let _ = tx.send(thread::current().name().map(str::to_owned));
    }));
    let name = rx.recv_timeout(SOON).expect("the task never ran");
    assert_eq!(name.as_deref(), Some("executor-named"));
    timer.close();
}

#[test]
fn add_size_and_advance_clock_go_to_the_wrapped_timer() {
    let (timer, record) = RecordingTimer::new();
    let reaper = SystemTimerReaper::new("delegating", timer);
    assert_eq!(reaper.size(), 42);
    let before = record.advance_calls.load(Ordering::SeqCst);
    let called_from = thread::current().name().map(str::to_owned);
    assert!(!reaper.advance_clock(0));
    assert!(record.advance_calls.load(Ordering::SeqCst) > before);
    assert!(
        record
            .advance_threads
            .lock()
            .unwrap()
            .iter()
            .any(|name| Some(name) == called_from.as_ref()),
        "advance_clock on the reaper did not reach the wrapped timer from this thread"
    );
    reaper.close();

    let timer = SystemTimerReaper::new("delegating", SystemTimer::new("sized"));
    let entries: Vec<_> = (0..3)
        .map(|_| timer.add(timer_task(60_000, || {})))
        .collect();
    assert_eq!(timer.size(), 3);
    assert!(entries[0].cancel());
    assert_eq!(timer.size(), 2);
    timer.close();
    assert_eq!(timer.size(), 0);
}

#[test]
fn get_ref_lends_the_wrapped_timer_as_the_type_given() {
    let reaper = SystemTimerReaper::new("lending", SystemTimer::new("lent"));
    let (fired, ran) = mpsc::channel();
    reaper.add(timer_task(0, move || fired.send(()).unwrap()));
    ran.recv_timeout(SOON).expect("the task did not run");
    let timer: &SystemTimer = reaper.get_ref().expect("a SystemTimer was given");
    assert!(
        reaper.get_ref::<MockTimer>().is_none(),
        "not the type given"
    );
    assert_eq!(timer.stats().expired, 1);
    assert_eq!(timer.lateness().count, 1);
    reaper.close();
    assert!(timer.is_closed());
}

#[test]
fn a_task_may_close_its_own_reaper() {
    let timer = Arc::new(SystemTimerReaper::new(
        "self-closing",
        SystemTimer::new("self"),
    ));
    let (tx, rx) = mpsc::channel();
    let handle = Arc::clone(&timer);
    timer.add(timer_task(10, move || {
        handle.close();
        let _ = tx.send(handle.is_shutdown());
    }));
    let shut = rx
        .recv_timeout(SOON)
        .expect("close from a task deadlocked or the task never ran");
    assert!(shut);
    assert!(timer.is_shutdown());
    assert!(timer.add(timer_task(1, || {})).cancelled());
}

/// A timer whose `advance_clock` blocks for 300 ms, like a reaper's long poll, and which
/// `close` does not wake.
struct SlowPollTimer {
    polling: mpsc::SyncSender<()>,
    closed: Arc<AtomicBool>,
}

impl Timer for SlowPollTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        panic!(
            "SlowPollTimer::add must not be called (task delay {})",
            task.delay_ms()
        )
    }

    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        Ok(self.add(task))
    }

    fn reschedule(&self, _entry: &TimerTaskEntry, _delay_ms: i64) -> bool {
        panic!("SlowPollTimer::reschedule must not be called")
    }

    fn advance_clock(&self, _timeout_ms: i64) -> bool {
        let _ = self.polling.try_send(());
        thread::sleep(Duration::from_millis(300));
        false
    }

    fn size(&self) -> usize {
        0
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.close();
        Vec::new()
    }
}

#[test]
fn concurrent_close_returns_only_after_the_thread_ended_and_the_timer_closed() {
    let (polling_tx, polling_rx) = mpsc::sync_channel(1);
    let closed = Arc::new(AtomicBool::new(false));
    let reaper = SystemTimerReaper::new(
        "closed-twice",
        SlowPollTimer {
            polling: polling_tx,
            closed: Arc::clone(&closed),
        },
    );
    polling_rx
        .recv_timeout(SOON)
        .expect("the reaper never polled");
    let close_and_check = || {
        reaper.close();
        assert!(
            reaper.is_shutdown(),
            "a close returned while the reaper thread was still running"
        );
        assert!(
            closed.load(Ordering::SeqCst),
            "a close returned before the wrapped timer was closed"
        );
    };
    thread::scope(|s| {
        // The first close waits for the 300 ms poll to end.
        s.spawn(close_and_check);
        thread::sleep(Duration::from_millis(50));
        // The second, meanwhile, must wait as well, not return at once.
        close_and_check();
    });
}

#[test]
fn a_task_on_the_reaper_thread_may_close_the_reaper() {
    // MockTimer runs tasks on the caller of advance_clock: here, the reaper thread.
    let timer = MockTimer::new();
    let slot: Arc<Mutex<Option<Weak<SystemTimerReaper>>>> = Arc::default();
    let (tx, rx) = mpsc::channel();
    let task_slot = Arc::clone(&slot);
    // Due at the reaper's first poll, which moves the mock clock 200 ms.
    timer.add(timer_task(200, move || {
        let start = Instant::now();
        let reaper = loop {
            if let Some(reaper) = task_slot.lock().unwrap().as_ref().and_then(Weak::upgrade) {
                break reaper;
            }
            assert!(
                start.elapsed() < SOON,
                "the test never handed over the reaper"
            );
            thread::sleep(Duration::from_millis(1));
        };
        reaper.close();
        let _ = tx.send(thread::current().name().map(str::to_owned));
    }));
    let reaper = Arc::new(SystemTimerReaper::new("self-closing-mock", timer));
    *slot.lock().unwrap() = Some(Arc::downgrade(&reaper));
    let ran_on = rx
        .recv_timeout(SOON)
        .expect("close from the reaper thread deadlocked or the task never ran");
    assert_eq!(ran_on.as_deref(), Some("self-closing-mock"));
    reaper.close();
    assert!(reaper.is_shutdown());
}

/// An idle reaper's `close`, `stop` and drop, timed over many reapers: each wakes the
/// thread out of its 200 ms poll instead of waiting it out (a reaper that waited it out
/// would take 150-200 ms). Half of the timers have a task pending an hour out, so the poll
/// sleeps on the delay queue's head rather than on an empty queue.
#[test]
fn an_idle_reaper_closes_stops_and_drops_in_milliseconds() {
    const RUNS: usize = 60;
    /// Time for the reaper thread to enter its poll.
    const SETTLE: Duration = Duration::from_millis(10);
    /// Loose: a scheduling hiccup on a busy machine, far below the 200 ms poll.
    const BOUND: Duration = Duration::from_millis(100);
    let mut took: Vec<Duration> = (0..RUNS)
        .map(|run| {
            let reaper = SystemTimerReaper::new("idle", SystemTimer::new("idle"));
            if run % 2 == 0 {
                reaper.add(timer_task(3_600_000, || {}));
            }
            thread::sleep(SETTLE);
            let start = Instant::now();
            match run % 3 {
                0 => {
                    reaper.close();
                    assert!(reaper.is_shutdown());
                    // Closing again is a no-op, and as quick.
                    reaper.close();
                }
                1 => assert_eq!(reaper.stop().len(), usize::from(run % 2 == 0)),
                _ => drop(reaper),
            }
            start.elapsed()
        })
        .collect();
    took.sort_unstable();
    let (median, max) = (took[RUNS / 2], took[RUNS - 1]);
    eprintln!("idle reaper close/stop/drop over {RUNS} runs: median {median:?}, max {max:?}");
    assert!(max < BOUND, "median {median:?}, max {max:?}");
}

/// A reaper whose wrapped timer is shared (`Arc`) and closed by its other owner: the
/// timer's `advance_clock` now returns false at once, and the reaper must not turn that
/// into a busy loop. It polls at most once per 200 ms until it is closed itself.
#[test]
fn a_reaper_whose_shared_timer_was_closed_elsewhere_does_not_spin() {
    const WINDOW: Duration = Duration::from_millis(600);
    /// Three polls fit in the window; a spinning thread makes hundreds of thousands.
    const MAX_POLLS: usize = 10;
    let shared = Arc::new(SystemTimer::new("shared"));
    let counted = WrappedTimer::new(Arc::clone(&shared), 0);
    let advance_calls = Arc::clone(&counted.advance_calls);
    let reaper = SystemTimerReaper::new("shared-reaper", counted);
    let (tx, rx) = mpsc::channel();
    reaper.add(timer_task(5, move || tx.send(()).unwrap()));
    rx.recv_timeout(SOON)
        .expect("the reaper drove the shared timer");

    shared.close();
    let before = advance_calls.load(Ordering::SeqCst);
    thread::sleep(WINDOW);
    let polls = advance_calls.load(Ordering::SeqCst) - before;
    assert!(
        polls <= MAX_POLLS,
        "{polls} polls of a closed timer in {WINDOW:?}"
    );
    assert!(!reaper.is_shutdown(), "only the reaper's own close ends it");
    reaper.close();
    assert!(reaper.is_shutdown());
}
