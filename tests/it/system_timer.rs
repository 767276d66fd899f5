//! `SystemTimer`'s own rules, where this port is stricter than Kafka's or says more than
//! Kafka's `TimerTest` checks, one test each: cancel frees at once, expirations saturate,
//! odd configurations are refused naming the argument, a panicking task is caught and
//! logged, no task runs early on the real clock, `size()` is exact, and the end of the
//! clock's range; also `timer_task`, the closure task every timer takes.
//!
//! See `docs/guarantees.md` for the map from each guarantee to its tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{
    MockTime, MockTimer, SystemTimer, SystemTimerReaper, Timer, hi_res_clock_ms, timer_task,
};

use crate::common;
use common::sync::{SetOnDrop, within};
use common::{PATIENCE, counted, logger};

/// Drives `timer` until `done` holds or [`PATIENCE`] passes.
fn drive_until(timer: &dyn Timer, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < PATIENCE,
            "gave up waiting after {PATIENCE:?}"
        );
        timer.advance_clock(5);
    }
}

#[test]
fn timer_task_reports_its_delay() {
    assert_eq!(timer_task(1_234, || {}).delay_ms(), 1_234);
    assert_eq!(timer_task(-7, || {}).delay_ms(), -7);
}

/// The task is dropped inside `cancel()`, not when its bucket later expires, on every level
/// of the hierarchy; `size()` follows at once, and only the first cancel wins.
#[test]
fn cancel_drops_the_task_inside_the_call_at_every_level() {
    let timer = SystemTimer::builder("frees")
        .time(MockTime::new())
        .wheel_size(4)
        .build();
    let (runs, drops) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
    let delays = [1, 3, 4, 15, 16, 1_000, 1 << 20, 1 << 40, i64::MAX];
    let entries: Vec<_> = delays
        .iter()
        .map(|&delay_ms| timer.add(counted(delay_ms, &runs, &drops)))
        .collect();
    assert_eq!(timer.size(), delays.len());
    for (n, entry) in entries.iter().enumerate() {
        assert_eq!(drops.load(Ordering::SeqCst), n);
        assert!(!entry.cancelled());
        assert!(entry.cancel());
        assert_eq!(
            drops.load(Ordering::SeqCst),
            n + 1,
            "dropped inside cancel()"
        );
        assert_eq!(timer.size(), delays.len() - n - 1);
        assert!(entry.cancelled());
        assert!(!entry.cancel(), "a second cancel prevents nothing");
    }
    timer.close();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a cancelled task ran");
    assert_eq!(drops.load(Ordering::SeqCst), delays.len());
}

#[test]
fn cancel_after_expiry_returns_false_and_the_task_ran_once() {
    let timer = SystemTimer::new("cancel-late");
    let (runs, drops) = (Arc::default(), Arc::default());
    let entry = timer.add(counted(2, &runs, &drops));
    drive_until(&timer, || runs.load(Ordering::SeqCst) == 1);
    assert!(!entry.cancel());
    assert!(!entry.cancelled());
    timer.close();
    assert_eq!(
        (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
        (1, 1)
    );
}

/// `expiration_ms` is the instant of `add` plus the delay, saturating at both ends, on
/// every timer (the real and the mock clock) and wheel shape (one of them a single bucket):
/// the far tasks wait, count in `size()` and cancel; the `i64::MIN` one runs at once.
#[test]
fn expirations_saturate_at_the_extremes_on_every_timer() {
    let mut timers: Vec<(String, Box<dyn Timer>)> = [(1, 20), (1, 2), (7, 3), (1000, 2), (1, 1)]
        .into_iter()
        .map(|(tick_ms, wheel_size)| {
            let timer =
                SystemTimer::with_config("saturate", tick_ms, wheel_size, hi_res_clock_ms());
            let kind = format!("SystemTimer, tick {tick_ms}, wheel size {wheel_size}");
            (kind, Box::new(timer) as Box<dyn Timer>)
        })
        .collect();
    let on_mock_time = SystemTimer::builder("saturate-mock")
        .time(MockTime::new())
        .build();
    timers.push(("SystemTimer on MockTime".into(), Box::new(on_mock_time)));
    timers.push(("MockTimer".into(), Box::new(MockTimer::new())));
    for (kind, timer) in timers {
        let (runs, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let past = timer.add(counted(i64::MIN, &runs, &drops));
        // The clock's reading at that `add` (it cannot have saturated: the clock is >= 0).
        let now = past.expiration_ms() - i64::MIN;
        assert!(
            past.expiration_ms() < i64::MIN / 2,
            "{kind}: saturated down"
        );
        let mut far = Vec::new();
        for delay in [i64::MAX, i64::MAX - 1, i64::MAX / 2, 1 << 40, 1 << 62] {
            let entry = timer.add(counted(delay, &runs, &drops));
            assert!(entry.expiration_ms() >= now.saturating_add(delay), "{kind}");
            far.push(entry);
        }
        assert_eq!(far[0].expiration_ms(), i64::MAX, "{kind}");
        assert_eq!(far[1].expiration_ms(), i64::MAX, "{kind}");
        assert_eq!(timer.size(), far.len(), "{kind}");
        drive_until(&*timer, || runs.load(Ordering::SeqCst) == 1);
        assert!(!past.cancel(), "{kind}: already expired");
        for entry in &far {
            assert!(entry.cancel(), "{kind}");
        }
        assert_eq!(timer.size(), 0, "{kind}");
        timer.close();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "{kind}: only the i64::MIN task ran"
        );
        assert_eq!(drops.load(Ordering::SeqCst), 1 + far.len(), "{kind}");
    }
}

#[test]
fn start_times_at_the_extremes_do_not_overflow() {
    for start_ms in [i64::MIN, -1, 0, i64::MAX - 1, i64::MAX] {
        let timer = SystemTimer::with_config("start", 3, 5, start_ms);
        let (runs, drops) = (Arc::default(), Arc::default());
        let entry = timer.add(counted(10, &runs, &drops));
        let far = timer.add(counted(i64::MAX, &runs, &drops));
        drive_until(&timer, || runs.load(Ordering::SeqCst) >= 1);
        assert!(!entry.cancel());
        assert!(far.cancel(), "start {start_ms}");
        timer.close();
    }
}

/// A clock whose monotonic readings are negative, as Java's `System.nanoTime()` may be.
#[derive(Debug)]
struct NegativeClock;

impl timingwheel::Time for NegativeClock {
    fn milliseconds(&self) -> i64 {
        0
    }
    fn nanoseconds(&self) -> i64 {
        -5_000_000_000
    }
    fn sleep(&self, _ms: i64) {}
}

/// The realistic trigger of the negative-start bug (see `model.rs`): no `start_ms`
/// at all, just a clock that reads below zero. Aborted the process with a stack overflow
/// until the level whose interval saturates became the top.
#[test]
fn a_clock_with_negative_readings_accepts_extreme_delays() {
    let timer = SystemTimer::builder("negative-clock")
        .time(NegativeClock)
        .build();
    let entry = timer.add(timer_task(i64::MAX, || {}));
    assert_eq!(entry.expiration_ms(), (-5_000i64).saturating_add(i64::MAX));
    assert_eq!(timer.size(), 1);
    assert!(entry.cancel());
}

#[test]
fn wheel_size_one_is_allowed_and_fires_in_order_of_due_time() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("one")
        .wheel_size(1)
        .tick_ms(3)
        .time(time.clone())
        .build();
    let (tx, rx) = mpsc::channel();
    for delay_ms in [30, 3, 9_000, 7, i64::MAX] {
        let tx = tx.clone();
        timer.add(timer_task(delay_ms, move || tx.send(delay_ms).unwrap()));
    }
    let mut fired = Vec::new();
    for _ in 0..3_100 {
        time.sleep(3);
        while timer.advance_clock(0) {}
        let (btx, brx) = mpsc::channel();
        timer.add(timer_task(i64::MIN, move || btx.send(()).unwrap()));
        brx.recv_timeout(PATIENCE).unwrap();
        fired.extend(rx.try_iter());
    }
    assert_eq!(fired, [3, 7, 30, 9_000]);
    assert_eq!(timer.size(), 1, "the i64::MAX one waits");
}

#[test]
#[should_panic(expected = "tick_ms must be positive, got 0")]
fn zero_tick_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 0, 20, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "tick_ms must be positive, got -5")]
fn negative_tick_panics_naming_the_argument() {
    SystemTimer::with_config("bad", -5, 20, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "wheel_size must be positive, got 0")]
fn zero_wheel_size_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 1, 0, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "wheel_size")]
fn absurd_wheel_size_panics_naming_the_argument_instead_of_allocating() {
    SystemTimer::with_config("bad", 1, usize::MAX, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "wheel_size")]
fn wheel_size_past_the_bucket_id_space_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 1, 1 << 40, hi_res_clock_ms());
}

#[test]
fn a_panicking_task_is_logged_and_the_executor_runs_the_next_ones() {
    const MESSAGE: &str = "deliberate panic 7c1e";
    logger::install();
    let time = MockTime::new();
    let timer = SystemTimer::builder("panics").time(time.clone()).build();
    let (tx, rx) = mpsc::channel();

    // Straight to the executor from `add`.
    timer.add(timer_task(i64::MIN, || panic!("{MESSAGE} (from add)")));
    let tx1 = tx.clone();
    timer.add(timer_task(i64::MIN, move || tx1.send("after add").unwrap()));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("after add"));

    // Inside one flushed batch: ok, panic, ok.
    let tx2 = tx.clone();
    timer.add(timer_task(5, move || tx2.send("before").unwrap()));
    timer.add(timer_task(5, || panic!("{MESSAGE} (in a batch)")));
    timer.add(timer_task(5, move || tx.send("after").unwrap()));
    time.sleep(5);
    assert!(timer.advance_clock(0));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("before"));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("after"));
    assert_eq!(
        logger::errors_containing(MESSAGE).len(),
        2,
        "each panic logged once"
    );
    timer.close();
}

#[test]
fn a_panicking_task_does_not_stop_a_reaper_driven_timer() {
    const MESSAGE: &str = "deliberate panic 91ab";
    logger::install();
    let timer = SystemTimerReaper::new("reaper-panics", SystemTimer::new("reaper-panics"));
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(1, || panic!("{MESSAGE}")));
    timer.add(timer_task(20, move || tx.send(()).unwrap()));
    rx.recv_timeout(PATIENCE)
        .expect("the task after the panic ran");
    assert_eq!(logger::errors_containing(MESSAGE).len(), 1);
    timer.close();
}

/// A panic payload whose own `Drop` panics as well.
struct PanickyPayload;

impl Drop for PanickyPayload {
    fn drop(&mut self) {
        panic!("deliberate panic 5d20: the payload's Drop");
    }
}

/// Regression: a task panicking with a payload whose `Drop` panics killed the executor's
/// job when the payload was dropped after the catch: the rest of its batch was neither run
/// nor cancelled, the in-flight count never came down, and `close` waited out its whole 10
/// s bound.
#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_the_rest_of_the_batch() {
    /// Tasks on each side of the panicking one, all in one flushed batch.
    const NEIGHBOURS: usize = 10;
    /// Far below `close`'s 10 s bound for tasks that never end.
    const PROMPT: Duration = Duration::from_secs(5);
    logger::install();
    let time = MockTime::new();
    let timer = SystemTimer::builder("payload").time(time.clone()).build();
    let (tx, rx) = mpsc::channel();
    let add_reporting = |n: usize| {
        let tx = tx.clone();
        timer.add(timer_task(5, move || tx.send(n).unwrap()));
    };
    (0..NEIGHBOURS).for_each(add_reporting);
    timer.add(timer_task(5, || std::panic::panic_any(PanickyPayload)));
    (NEIGHBOURS..2 * NEIGHBOURS).for_each(add_reporting);
    time.sleep(5);
    assert!(timer.advance_clock(0));
    let mut ran: Vec<usize> = (0..2 * NEIGHBOURS)
        .map(|_| {
            rx.recv_timeout(PATIENCE)
                .expect("a task of the panicking one's batch never ran")
        })
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, (0..2 * NEIGHBOURS).collect::<Vec<_>>());
    assert!(
        !logger::errors_containing("payload").is_empty(),
        "the panic was logged"
    );

    let start = Instant::now();
    timer.close();
    let took = start.elapsed();
    assert!(
        took < PROMPT,
        "close waited {took:?} for a task that had already ended"
    );
}

#[test]
fn tasks_run_on_the_named_executor_thread() {
    let timer = SystemTimer::new("naming");
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(0, move || {
        tx.send(thread::current().name().map(str::to_owned))
            .unwrap()
    }));
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap().as_deref(),
        Some("executor-naming")
    );
}

/// With the default 1 ms tick, no task runs before the instant of its `add` plus its delay
/// (a strict lower bound; the upper bound is loose), whether a thread drives the timer by
/// hand or a reaper does.
#[test]
fn no_task_runs_before_its_add_instant_plus_delay_on_the_real_clock() {
    const DELAYS_MS: [i64; 8] = [0, 1, 2, 3, 5, 8, 13, 21];
    const ROUNDS: usize = 20;
    let by_hand = SystemTimer::new("no-early");
    let by_reaper = SystemTimerReaper::new("no-early-reaper", SystemTimer::new("no-early"));
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let _stop = SetOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                by_hand.advance_clock(5);
            }
        });
        let timers: [(&str, &dyn Timer); 2] = [("by hand", &by_hand), ("by a reaper", &by_reaper)];
        for (driven, timer) in timers {
            let (tx, rx) = mpsc::channel();
            let mut expected = 0;
            for round in 0..ROUNDS {
                for delay_ms in DELAYS_MS {
                    let added = Instant::now();
                    let added_ms = hi_res_clock_ms();
                    let tx = tx.clone();
                    let entry = timer.add(timer_task(delay_ms, move || {
                        tx.send((added.elapsed(), hi_res_clock_ms() - added_ms, delay_ms))
                            .unwrap();
                    }));
                    assert!(entry.expiration_ms() >= added_ms + delay_ms);
                    expected += 1;
                }
                if round % 3 == 0 {
                    thread::sleep(Duration::from_micros(700));
                }
            }
            for _ in 0..expected {
                let (waited, waited_ms, delay_ms) = rx
                    .recv_timeout(PATIENCE)
                    .unwrap_or_else(|_| panic!("driven {driven}: a task was lost"));
                assert!(
                    waited >= Duration::from_millis(delay_ms as u64),
                    "driven {driven}: delay {delay_ms} ms ran after {waited:?}"
                );
                assert!(waited_ms >= delay_ms, "driven {driven}");
                assert!(waited < Duration::from_millis(delay_ms as u64) + PATIENCE);
            }
            assert_eq!(timer.size(), 0, "driven {driven}");
        }
    });
    by_hand.close();
    by_reaper.close();
}

/// Regression: a flush hands expired tasks to the executor while it still holds the shard's
/// lock, and `size()` was published only when that lock was released, so a task could run
/// while `size()` still counted it.
#[test]
fn size_no_longer_counts_a_task_once_it_runs() {
    const ROUNDS: usize = 50;
    const TASKS: i64 = 4_000;
    let time = MockTime::new();
    let timer = Arc::new(SystemTimer::builder("size").time(time.clone()).build());
    for _ in 0..ROUNDS {
        let ran = Arc::new(AtomicUsize::new(0));
        let overcounted = Arc::new(AtomicUsize::new(0));
        for _ in 0..TASKS {
            let (timer, ran, overcounted) =
                (Arc::downgrade(&timer), ran.clone(), overcounted.clone());
            timer.upgrade().unwrap().add(timer_task(1, move || {
                let ran_before = ran.fetch_add(1, Ordering::SeqCst);
                let timer = timer.upgrade().expect("the test holds the timer");
                // Every task that ran is no longer counted; this one neither.
                if timer.size() > TASKS as usize - ran_before - 1 {
                    overcounted.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        time.sleep(1);
        timer.advance_clock(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        while ran.load(Ordering::SeqCst) < TASKS as usize && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ran.load(Ordering::SeqCst), TASKS as usize);
        assert_eq!(
            overcounted.load(Ordering::SeqCst),
            0,
            "size() counted a running task"
        );
    }
}

/// Regression: once the wheel's time was within a tick of `i64::MAX`, an entry due at
/// `i64::MAX` was never expired (the check saturated), and `advance_clock` re-added it to a
/// due list forever.
#[test]
fn tasks_due_at_the_end_of_the_clock_run_when_it_gets_there() {
    for (tick_ms, wheel_size) in [(1, 20), (49, 4), (1, 1)] {
        let ran = within(
            Duration::from_secs(30),
            "advance_clock at the end of the clock",
            move || {
                let time = MockTime::new();
                let timer = SystemTimer::builder("end")
                    .time(time.clone())
                    .tick_ms(tick_ms)
                    .wheel_size(wheel_size)
                    .build();
                let ran = Arc::new(AtomicUsize::new(0));
                for delay_ms in [i64::MAX, 1_000] {
                    let ran = Arc::clone(&ran);
                    timer.add(timer_task(delay_ms, move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }));
                }
                time.sleep(i64::MAX);
                assert_eq!(time.hi_res_clock_ms(), i64::MAX);
                while timer.advance_clock(0) {}
                timer.close();
                ran.load(Ordering::SeqCst)
            },
        );
        assert_eq!(ran, 2, "tick {tick_ms}, wheel size {wheel_size}");
    }
}

/// Returns the CPU time the calling thread has used, from Linux's scheduler statistics
/// (`None` elsewhere).
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Regression: near the end of the clock's range the delay queue's wait saturated to zero
/// while its head was not due, so `advance_clock(500)` spun for the whole timeout (490 ms
/// of CPU) instead of sleeping.
#[test]
fn advance_clock_sleeps_near_the_end_of_the_clocks_range() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let time = MockTime::new();
    let timer = SystemTimer::builder("near-end").time(time.clone()).build();
    time.sleep(i64::MAX - time.hi_res_clock_ms() - 60_000);
    timer.add(timer_task(30_000, || {}));
    // The wheel's clock is far behind the jump: the first calls move the task down.
    while timer.advance_clock(0) {}
    let (cpu_before, started) = (thread_cpu(), Instant::now());
    assert!(!timer.advance_clock(TIMEOUT.as_millis() as i64));
    let (cpu_after, waited) = (thread_cpu(), started.elapsed());
    assert!(waited >= TIMEOUT, "returned after {waited:?}");
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        // Spinning would use about the whole timeout; sleeping, a tick of accounting at most.
        assert!(
            after - before < TIMEOUT / 3,
            "used {:?} of CPU in a {waited:?} wait",
            after - before
        );
    }
    time.sleep(30_000);
    assert!(timer.advance_clock(0), "the task's list is due now");
    timer.close();
}

/// `advance_clock` returns true when a list was flushed, not when a task ran: the first
/// half of a coarser bucket moves down ahead of time, a flush that runs nothing.
#[test]
fn advance_clock_can_return_true_with_no_task_newly_due() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("flush-ahead")
        .time(time.clone())
        .build();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    // 300 ms: a bucket of the second wheel (20 ms buckets), whose early list moves down
    // 10 ms before the bucket's range begins.
    timer.add(timer_task(300, move || r.store(true, Ordering::SeqCst)));
    let mut flushed_before_it_ran = 0;
    for _ in 0..300 {
        time.sleep(1);
        let flushed = timer.advance_clock(0);
        common::sync::barrier(&timer);
        if flushed && !ran.load(Ordering::SeqCst) {
            flushed_before_it_ran += 1;
        }
    }
    assert!(ran.load(Ordering::SeqCst), "due at 300 ms");
    assert!(
        flushed_before_it_ran >= 1,
        "no call returned true before the task was due"
    );
}

/// With nothing due, `advance_clock` returns false no earlier than its timeout (real
/// clock: a strict lower bound, a loose upper one).
#[test]
fn advance_clock_with_nothing_due_returns_false_no_earlier_than_its_timeout() {
    let timer = SystemTimer::new("idle-poll");
    timer.add(timer_task(60_000, || {}));
    let start = Instant::now();
    assert!(!timer.advance_clock(50));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(50),
        "returned after {waited:?}"
    );
    assert!(waited < PATIENCE, "returned after {waited:?}");
}

/// Entries that enter a bucket together in one shard (one adding thread), none cancelled,
/// come out in the order they entered; on one executor thread they run in that order.
#[test]
fn tasks_one_thread_adds_together_run_in_the_order_it_added_them() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("order").time(time.clone()).build();
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..1_000 {
        let ran = ran.clone();
        timer.add(timer_task(500, move || ran.lock().unwrap().push(i)));
    }
    time.sleep(500);
    while timer.advance_clock(0) {}
    common::sync::barrier(&timer);
    let ran = ran.lock().unwrap();
    assert_eq!(*ran, (0..1_000).collect::<Vec<_>>());
}
