//! The rules in which this port is stricter than Kafka's `SystemTimer`, one test each.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{SystemTimer, Timer, hi_res_clock_ms, timer_task};

mod common;
use common::counted;

/// How long a test waits for tasks that should already have run.
const PATIENCE: Duration = Duration::from_secs(10);

/// Drives `timer` until `done` holds or `PATIENCE` passes.
fn drive_until(timer: &SystemTimer, done: impl Fn() -> bool) {
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
fn cancel_drops_the_task_inside_the_call() {
    let timer = SystemTimer::new("cancel-drops");
    let (runs, drops) = (Arc::default(), Arc::default());
    let entry = timer.add(counted(30 * 60 * 1000, &runs, &drops));
    assert_eq!(timer.size(), 1);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert!(entry.cancel());
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "dropped by cancel, not later"
    );
    assert_eq!(timer.size(), 0);
    assert!(entry.cancelled());
    assert!(!entry.cancel(), "a second cancel prevents nothing");
    timer.close();
    assert_eq!(runs.load(Ordering::SeqCst), 0);
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

/// Cancels race the flush, the cascade from overflow wheels and the executor: each task
/// ends in exactly one of "ran" and "a cancel returned true".
#[test]
fn cancel_racing_expiry_decides_exactly_once() {
    const TASKS: usize = 20_000;
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
        while timer.size() > 0 && start.elapsed() < PATIENCE {
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
    assert!(
        ran > 0 && ran < TASKS,
        "the race was not exercised: {ran} of {TASKS} ran"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        TASKS,
        "every task was dropped once"
    );
}

#[test]
fn extreme_delays_saturate_without_panicking() {
    for (tick_ms, wheel_size) in [(1, 20), (1, 2), (7, 3), (1000, 2), (1, 1)] {
        let timer = SystemTimer::with_config("extremes", tick_ms, wheel_size, hi_res_clock_ms());
        let (runs, drops) = (Arc::default(), Arc::default());
        let now = hi_res_clock_ms();
        let past = timer.add(counted(i64::MIN, &runs, &drops));
        assert!(
            past.expiration_ms() <= now - (i64::MAX / 2),
            "saturated down"
        );
        let mut far = Vec::new();
        for delay in [i64::MAX, i64::MAX - 1, i64::MAX / 2, 1 << 40, 1 << 62] {
            let entry = timer.add(counted(delay, &runs, &drops));
            assert!(entry.expiration_ms() >= now.saturating_add(delay));
            far.push(entry);
        }
        assert_eq!(far[0].expiration_ms(), i64::MAX);
        assert_eq!(timer.size(), far.len(), "tick {tick_ms}, size {wheel_size}");
        drive_until(&timer, || runs.load(Ordering::SeqCst) == 1);
        for entry in &far {
            assert!(entry.cancel(), "tick {tick_ms}, size {wheel_size}");
        }
        assert_eq!(timer.size(), 0);
        timer.close();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "only the i64::MIN task ran");
        assert_eq!(drops.load(Ordering::SeqCst), 1 + far.len());
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

/// A logger that keeps every error record, to see the executor's report of a panic.
struct ErrorLog(Mutex<Vec<String>>);

impl log::Log for ErrorLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Error
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static ERRORS: ErrorLog = ErrorLog(Mutex::new(Vec::new()));

#[test]
fn a_panicking_task_is_logged_and_the_executor_goes_on() {
    log::set_logger(&ERRORS).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Error);
    let timer = SystemTimer::new("panics");
    let (tx, rx) = channel();
    timer.add(timer_task(0, || panic!("boom from a task")));
    timer.add(timer_task(0, move || tx.send("after").unwrap()));
    assert_eq!(rx.recv_timeout(PATIENCE), Ok("after"));
    let errors = ERRORS.0.lock().unwrap().clone();
    assert!(
        errors.iter().any(|e| e.contains("boom from a task")),
        "logged: {errors:?}"
    );
    timer.close();
}

#[test]
fn tasks_run_on_the_named_executor_thread() {
    let timer = SystemTimer::new("naming");
    let (tx, rx) = channel();
    timer.add(timer_task(0, move || {
        tx.send(thread::current().name().map(str::to_owned))
            .unwrap()
    }));
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap().as_deref(),
        Some("executor-naming")
    );
}

#[test]
fn no_task_runs_before_the_add_instant_plus_its_delay() {
    const TASKS: u64 = 300;
    let timer = SystemTimer::new("never-early");
    let (tx, rx) = channel();
    for i in 0..TASKS {
        let delay_ms = (i % 30) as i64;
        let added = Instant::now();
        let tx = tx.clone();
        timer.add(timer_task(delay_ms, move || {
            tx.send((added.elapsed(), delay_ms)).unwrap()
        }));
    }
    drop(tx);
    thread::scope(|s| {
        let driver = s.spawn(|| {
            while timer.size() > 0 {
                timer.advance_clock(5);
            }
        });
        for _ in 0..TASKS {
            let (waited, delay_ms) = rx.recv_timeout(PATIENCE).expect("every task runs");
            assert!(
                waited >= Duration::from_millis(delay_ms as u64),
                "ran after {waited:?} for a delay of {delay_ms} ms"
            );
        }
        driver.join().unwrap();
    });
}

#[test]
fn close_refuses_new_tasks_and_stops_advancing() {
    let timer = SystemTimer::new("closing");
    let (runs, drops) = (Arc::default(), Arc::default());
    let waiting = timer.add(counted(60_000, &runs, &drops));
    timer.close();
    timer.close();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "waiting tasks are dropped at close"
    );
    assert!(!waiting.cancel(), "nothing left to prevent");

    let refused = timer.add(counted(0, &runs, &drops));
    assert!(refused.cancelled());
    assert!(!refused.cancel());
    assert_eq!(drops.load(Ordering::SeqCst), 2);

    let start = Instant::now();
    assert!(!timer.advance_clock(60_000));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "a closed timer never blocks"
    );
    assert_eq!(timer.size(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn close_waits_for_tasks_already_handed_to_the_executor() {
    let timer = SystemTimer::new("finishing");
    let finished = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&finished);
    timer.add(timer_task(0, move || {
        thread::sleep(Duration::from_millis(100));
        flag.store(true, Ordering::SeqCst);
    }));
    timer.close();
    assert!(finished.load(Ordering::SeqCst));
}

#[test]
fn close_wakes_a_blocked_advance_clock() {
    let timer = SystemTimer::new("wake");
    thread::scope(|s| {
        let blocked = s.spawn(|| {
            let start = Instant::now();
            (timer.advance_clock(60_000), start.elapsed())
        });
        thread::sleep(Duration::from_millis(50));
        timer.close();
        let (flushed, waited) = blocked.join().unwrap();
        assert!(!flushed);
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    });
}

#[test]
#[should_panic(expected = "tick_ms must be positive, got 0")]
fn zero_tick_is_refused() {
    SystemTimer::with_config("bad", 0, 20, 0);
}

#[test]
#[should_panic(expected = "tick_ms must be positive, got -5")]
fn negative_tick_is_refused() {
    SystemTimer::with_config("bad", -5, 20, 0);
}

#[test]
#[should_panic(expected = "wheel_size must be positive, got 0")]
fn empty_wheel_is_refused() {
    SystemTimer::with_config("bad", 1, 0, 0);
}

/// Regression: a flush hands expired tasks to the executor while it still holds the shard's
/// lock, and `size()` was published only when that lock was released, so a task could run
/// while `size()` still counted it.
#[test]
fn size_no_longer_counts_a_task_once_it_runs() {
    const ROUNDS: usize = 50;
    const TASKS: i64 = 4_000;
    let time = timingwheel::MockTime::new();
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

/// Runs `f` on a thread of its own and returns its result, or panics if it takes more than
/// `limit` (instead of hanging the test run).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("did not return within its time limit")
}

/// Regression (issue 10, defect 4, first half): once the wheel's time was within a tick of
/// `i64::MAX`, an entry due at `i64::MAX` was never expired (the check saturated), and
/// `advance_clock` re-added it to a due list forever.
#[test]
fn tasks_due_at_the_end_of_the_clock_run_when_it_gets_there() {
    for (tick_ms, wheel_size) in [(1, 20), (49, 4), (1, 1)] {
        let ran = within(Duration::from_secs(30), move || {
            let time = timingwheel::MockTime::new();
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
        });
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

/// Regression (issue 10, defect 4): near the end of the clock's range the delay queue's
/// wait saturated to zero while its head was not due, so `advance_clock(500)` spun for the
/// whole timeout (490 ms of CPU) instead of sleeping.
#[test]
fn advance_clock_sleeps_near_the_end_of_the_clocks_range() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let time = timingwheel::MockTime::new();
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
