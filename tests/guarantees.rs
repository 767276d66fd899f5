//! Guarantees of `/work/shared/API.md` that no other suite proves on its own: a panicking
//! task is caught and logged while the executor goes on, cancel frees at once, expirations
//! saturate, and no task fires before `add` + delay on the real clock.
//!
//! See `docs/guarantees.md` for the map from each guarantee to its tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use log::{Level, LevelFilter, Log, Metadata, Record};
use timingwheel::{
    MockTime, MockTimer, SystemTimer, SystemTimerReaper, Timer, TimerTask, hi_res_clock_ms,
    timer_task,
};

/// How long a wait may take before the test counts it as lost.
const PATIENCE: Duration = Duration::from_secs(20);

/// Collects the `error!` records of the whole test binary.
struct Capture {
    errors: Mutex<Vec<String>>,
}

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Error
    }
    fn log(&self, record: &Record<'_>) {
        if record.level() == Level::Error {
            self.errors.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture {
    errors: Mutex::new(Vec::new()),
};

fn install_logger() {
    // Only the first call installs it; later ones find it there.
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(LevelFilter::Error);
}

fn logged_errors_containing(needle: &str) -> usize {
    CAPTURE
        .errors
        .lock()
        .unwrap()
        .iter()
        .filter(|message| message.contains(needle))
        .count()
}

#[test]
fn a_panicking_task_is_logged_and_the_executor_runs_the_next_ones() {
    const MESSAGE: &str = "deliberate panic 7c1e";
    install_logger();
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
        logged_errors_containing(MESSAGE),
        2,
        "each panic logged once"
    );
    timer.close();
}

#[test]
fn a_panicking_task_does_not_stop_a_reaper_driven_timer() {
    const MESSAGE: &str = "deliberate panic 91ab";
    install_logger();
    let timer = SystemTimerReaper::new("reaper-panics", SystemTimer::new("reaper-panics"));
    let (tx, rx) = mpsc::channel();
    timer.add(timer_task(1, || panic!("{MESSAGE}")));
    timer.add(timer_task(20, move || tx.send(()).unwrap()));
    rx.recv_timeout(PATIENCE)
        .expect("the task after the panic ran");
    assert_eq!(logged_errors_containing(MESSAGE), 1);
    timer.close();
}

/// A panic payload whose own `Drop` panics as well.
struct PanickyPayload;

impl Drop for PanickyPayload {
    fn drop(&mut self) {
        panic!("deliberate panic 5d20: the payload's Drop");
    }
}

/// Regression (issue 10, defect 2): a task panicking with a payload whose `Drop` panics
/// killed the executor's job when the payload was dropped after the catch: the rest of its
/// batch was neither run nor cancelled, the in-flight count never came down, and `close`
/// waited out its whole 10 s bound.
#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_the_rest_of_the_batch() {
    /// Tasks on each side of the panicking one, all in one flushed batch.
    const NEIGHBOURS: usize = 10;
    /// Far below `close`'s 10 s bound for tasks that never end.
    const PROMPT: Duration = Duration::from_secs(5);
    install_logger();
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
        logged_errors_containing("payload") >= 1,
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

struct DropCounted {
    delay_ms: i64,
    drops: Arc<AtomicUsize>,
}

impl TimerTask for DropCounted {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(self: Box<Self>) {
        unreachable!("cancelled before due")
    }
}

impl Drop for DropCounted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn cancel_drops_the_task_inside_the_call_at_every_level() {
    let timer = SystemTimer::builder("frees")
        .time(MockTime::new())
        .wheel_size(4)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    let delays = [1, 3, 4, 15, 16, 1_000, 1 << 20, 1 << 40, i64::MAX];
    let entries: Vec<_> = delays
        .iter()
        .map(|&delay_ms| {
            timer.add(Box::new(DropCounted {
                delay_ms,
                drops: Arc::clone(&drops),
            }))
        })
        .collect();
    for (n, entry) in entries.iter().enumerate() {
        assert_eq!(drops.load(Ordering::SeqCst), n);
        assert!(entry.cancel());
        assert_eq!(
            drops.load(Ordering::SeqCst),
            n + 1,
            "dropped inside cancel()"
        );
        assert_eq!(timer.size(), delays.len() - n - 1);
        assert!(entry.cancelled());
        assert!(!entry.cancel(), "only one cancel wins");
    }
}

#[test]
fn expirations_saturate_at_the_extremes_on_every_timer() {
    let system = SystemTimer::new("saturate");
    let mock_system = SystemTimer::builder("saturate-mock")
        .time(MockTime::new())
        .build();
    let mock = MockTimer::new();
    let timers: [&dyn Timer; 3] = [&system, &mock_system, &mock];
    for timer in timers {
        let max = timer.add(timer_task(i64::MAX, || {}));
        assert_eq!(max.expiration_ms(), i64::MAX);
        let near_max = timer.add(timer_task(i64::MAX - 1, || {}));
        assert_eq!(near_max.expiration_ms(), i64::MAX);
        let min = timer.add(timer_task(i64::MIN, || {}));
        assert!(
            min.expiration_ms() < 0,
            "now + i64::MIN: {}",
            min.expiration_ms()
        );
        assert!(max.cancel() && near_max.cancel());
        assert!(!min.cancel(), "already expired");
    }
    system.close();
    mock_system.close();
}

#[test]
fn no_task_runs_before_its_add_instant_plus_delay_on_the_real_clock() {
    const DELAYS_MS: [i64; 8] = [0, 1, 2, 3, 5, 8, 13, 21];
    const ROUNDS: usize = 10;
    let timer = SystemTimerReaper::new("no-early", SystemTimer::new("no-early"));
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
        let (waited, waited_ms, delay_ms) = rx.recv_timeout(PATIENCE).expect("a task was lost");
        // Strict lower bound, loose upper bound.
        assert!(
            waited >= Duration::from_millis(delay_ms as u64),
            "delay {delay_ms} ms ran after {waited:?}"
        );
        assert!(waited_ms >= delay_ms);
        assert!(waited < Duration::from_millis(delay_ms as u64) + PATIENCE);
    }
    timer.close();
}

#[test]
#[should_panic(expected = "tick_ms")]
fn zero_tick_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 0, 20, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "tick_ms")]
fn negative_tick_panics_naming_the_argument() {
    SystemTimer::with_config("bad", -1, 20, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "wheel_size")]
fn zero_wheel_size_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 1, 0, hi_res_clock_ms());
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

/// The realistic trigger of the negative-start bug (see `tests/model.rs`): no `start_ms`
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
#[should_panic(expected = "wheel_size")]
fn absurd_wheel_size_panics_naming_the_argument_instead_of_allocating() {
    SystemTimer::with_config("bad", 1, usize::MAX, hi_res_clock_ms());
}

#[test]
#[should_panic(expected = "wheel_size")]
fn wheel_size_past_the_bucket_id_space_panics_naming_the_argument() {
    SystemTimer::with_config("bad", 1, 1 << 40, hi_res_clock_ms());
}
