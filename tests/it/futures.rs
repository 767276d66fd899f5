//! `Sleep`, `timeout` and `Interval` without any async runtime: polled by hand with
//! counting wakers on a `MockTimer` (or a `SystemTimer` on a `MockTime`), so every step is
//! deterministic; one real-clock test parks a thread. Under real runtimes (tokio, smol,
//! `futures::executor`) they are tested by `examples/async_timeouts/tests/runtimes.rs`.

use crate::common;

use std::future::{Future, pending, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use common::PATIENCE;
use common::sync::barrier;
use common::waker::{WakeCount, block_on, poll_with};
use timingwheel::{
    Elapsed, Interval, MissedTicks, MockTime, MockTimer, Sleep, SystemTimer, SystemTimerReaper,
    Timer, timeout, timer_task,
};

fn mock() -> Arc<MockTimer> {
    Arc::new(MockTimer::new())
}

/// A `SystemTimer` on a `MockTime`: a real wheel and executor, a clock the test moves.
fn wheel_on(time: &MockTime) -> Arc<SystemTimer> {
    Arc::new(SystemTimer::builder("futures").time(time.clone()).build())
}

/// Moves `time` forward by `ms` and flushes what came due, then waits for the executor.
fn step(timer: &SystemTimer, time: &MockTime, ms: i64) {
    time.sleep(ms);
    while timer.advance_clock(0) {}
    barrier(timer);
}

fn poll_sleep(sleep: &mut Sleep, waker: &std::task::Waker) -> Poll<()> {
    poll_with(Pin::new(sleep), waker)
}

// ---- Sleep

#[test]
fn sleep_completes_at_its_deadline_and_not_a_millisecond_before() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 100);
    assert_eq!(sleep.expiration_ms(), timer.time().hi_res_clock_ms() + 100);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    timer.advance_clock(99);
    assert!(!sleep.is_elapsed());
    assert_eq!(count.wakes(), 0);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    timer.advance_clock(1);
    assert_eq!(count.wakes(), 1, "woken once, at its deadline");
    assert!(sleep.is_elapsed());
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
    assert_eq!(
        poll_sleep(&mut sleep, &waker),
        Poll::Ready(()),
        "and stays complete"
    );
    assert_eq!(count.wakes(), 1);
}

#[test]
fn a_sleep_of_zero_or_negative_delay_completes_without_waiting() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    for delay_ms in [0, -1, i64::MIN] {
        let mut sleep = Sleep::new(timer.clone(), delay_ms);
        assert_eq!(
            poll_sleep(&mut sleep, &waker),
            Poll::Ready(()),
            "{delay_ms}"
        );
    }
    let far = Sleep::new(timer.clone(), i64::MAX);
    assert_eq!(far.expiration_ms(), i64::MAX);
    timer.advance_clock(1 << 40);
    assert!(!far.is_elapsed());
}

#[test]
fn dropping_a_pending_sleep_cancels_and_frees_its_task_inside_the_drop() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 1_000);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    assert_eq!(timer.size(), 1);
    assert_eq!(
        Arc::strong_count(&count),
        3,
        "ours, the test's waker, the stored clone"
    );
    drop(sleep);
    assert_eq!(timer.size(), 0, "cancelled inside the drop");
    assert_eq!(
        Arc::strong_count(&count),
        2,
        "the task and the sleep's state were freed, stored waker included"
    );
    assert!(!timer.advance_clock(5_000));
    assert_eq!(count.wakes(), 0, "a dropped sleep wakes nobody");
}

#[test]
fn reset_moves_a_waiting_task_instead_of_adding_one() {
    let time = MockTime::new();
    let timer = wheel_on(&time);
    let (count, waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 100);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    step(&timer, &time, 90);
    let added = timer.stats().added; // the sleep's task, and `step`'s barrier
    sleep.reset(100);
    sleep.reset(300);
    sleep.reset(50); // earlier again
    assert_eq!(sleep.expiration_ms(), time.hi_res_clock_ms() + 50);
    let stats = timer.stats();
    assert_eq!(
        (stats.added, stats.pending),
        (added, 1),
        "one task, moved three times"
    );
    step(&timer, &time, 49);
    assert!(!sleep.is_elapsed());
    step(&timer, &time, 1);
    assert_eq!(count.wakes(), 1);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn a_sleep_reset_after_its_task_fired_ignores_the_old_wake() {
    let time = MockTime::new();
    let timer = wheel_on(&time);
    let (count, waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 10);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    // Block the executor, so that the expired task waits there, handed over but not run.
    let (release, blocked) = mpsc::channel::<()>();
    timer.add(timer_task(0, move || blocked.recv().unwrap()));
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(timer.stats().expired, 2, "the blocker and the sleep's task");
    sleep.reset(100); // cannot move a handed-over task: a new one
    assert_eq!(timer.stats().added, 3);
    release.send(()).unwrap();
    barrier(&*timer); // the old task has run now
    assert!(!sleep.is_elapsed(), "the old deadline's wake was ignored");
    assert_eq!(count.wakes(), 0);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    step(&timer, &time, 99);
    assert!(!sleep.is_elapsed());
    step(&timer, &time, 1);
    assert_eq!(count.wakes(), 1);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn a_completed_sleep_reset_is_pending_until_its_new_deadline() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 10);
    timer.advance_clock(10);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
    sleep.reset(20);
    assert!(!sleep.is_elapsed());
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    timer.advance_clock(19);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    timer.advance_clock(1);
    assert_eq!(count.wakes(), 1);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
    sleep.reset(0);
    assert_eq!(
        poll_sleep(&mut sleep, &waker),
        Poll::Ready(()),
        "a delay <= 0 is due now"
    );
}

#[test]
fn a_sleep_polled_from_a_new_task_wakes_that_task_only() {
    let timer = mock();
    let (first, first_waker) = WakeCount::new();
    let (second, second_waker) = WakeCount::new();
    let mut sleep = Sleep::new(timer.clone(), 10);
    assert_eq!(poll_sleep(&mut sleep, &first_waker), Poll::Pending);
    assert_eq!(poll_sleep(&mut sleep, &second_waker), Poll::Pending);
    assert_eq!(
        Arc::strong_count(&first),
        2,
        "the first task's waker was let go"
    );
    // Polled again by the same task, through another handle to the same waker.
    assert_eq!(poll_sleep(&mut sleep, &second_waker.clone()), Poll::Pending);
    timer.advance_clock(10);
    assert_eq!((first.wakes(), second.wakes()), (0, 1));
}

#[test]
fn a_sleep_completes_at_once_when_its_timer_cannot_keep_the_deadline() {
    let (count, waker) = WakeCount::new();
    // Closed before: complete at creation.
    let timer = mock();
    timer.close();
    let mut sleep = Sleep::new(timer.clone(), 1_000);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
    sleep.reset(1_000);
    assert_eq!(
        poll_sleep(&mut sleep, &waker),
        Poll::Ready(()),
        "and after a reset"
    );

    // Closed while pending: woken by the close.
    let timer = mock();
    let mut sleep = Sleep::new(timer.clone(), 1_000);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    timer.close();
    assert_eq!(count.wakes(), 1);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));

    // Stopped: its task handed back, and dropped by the caller.
    let timer = mock();
    let mut sleep = Sleep::new(timer.clone(), 1_000);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Pending);
    let handed_back = timer.stop();
    assert_eq!(handed_back.len(), 1);
    assert!(!sleep.is_elapsed(), "the caller owns the task now");
    drop(handed_back);
    assert_eq!(count.wakes(), 2);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));

    // Full: the timer holds its maximum of pending tasks.
    let full = Arc::new(SystemTimer::builder("full").max_pending(1).build());
    let _holder = Sleep::new(full.clone(), 60_000);
    let mut sleep = Sleep::new(full.clone(), 60_000);
    assert_eq!(poll_sleep(&mut sleep, &waker), Poll::Ready(()));
}

#[test]
fn sleep_interval_and_handles_are_unpin_send_and_sync() {
    fn check<T: Unpin + Send + Sync>() {}
    check::<Sleep>();
    check::<Interval>();
    check::<timingwheel::PeriodicHandle>();
    fn send<T: Send>(_: &T) {}
    let timer: Arc<dyn Timer> = mock();
    send(&timeout(timer.clone(), 10, async { 1 }));
    let mut interval = Interval::new(timer, 10, MissedTicks::Burst);
    send(&interval.tick());
}

#[test]
fn delays_take_plain_i64_values_literals_and_durations() {
    let timer = mock();
    let now = timer.time().hi_res_clock_ms();
    let delay_ms: i64 = 250;
    let mut sleep = Sleep::new(timer.clone(), delay_ms);
    assert_eq!(sleep.expiration_ms(), now + 250);
    sleep.reset(if delay_ms > 0 { 300 } else { 400 });
    assert_eq!(sleep.expiration_ms(), now + 300);
    sleep.reset(Duration::from_micros(1_500));
    assert_eq!(sleep.expiration_ms(), now + 2, "a Duration rounds up");
    assert_eq!(
        Interval::new(timer.clone(), delay_ms, MissedTicks::Skip).period_ms(),
        250
    );
}

#[test]
fn a_sleep_on_a_real_timer_wakes_a_parked_thread_not_before_its_deadline() {
    const DELAYS_MS: [i64; 4] = [1, 5, 20, 50];
    let timer = Arc::new(SystemTimerReaper::new(
        "futures-reaper",
        SystemTimer::new("futures"),
    ));
    for delay_ms in DELAYS_MS {
        let start = Instant::now();
        block_on(Sleep::new(timer.clone(), delay_ms), PATIENCE, "a sleep");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(delay_ms as u64),
            "{delay_ms} ms took {took:?}"
        );
    }
    assert_eq!(timer.size(), 0);
    timer.close();
}

/// Threads that reset sleeps around the moment their tasks fire.
const RESET_THREADS: usize = 4;
const RESETS_PER_THREAD: usize = 300;

#[test]
fn resets_racing_expiry_never_complete_early_and_never_lose_the_wake() {
    let timer = Arc::new(SystemTimerReaper::new(
        "reset-race-reaper",
        SystemTimer::builder("reset-race")
            .executor_threads(2)
            .build(),
    ));
    let completed = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..RESET_THREADS {
            let (timer, completed) = (timer.clone(), &completed);
            s.spawn(move || {
                for i in 0..RESETS_PER_THREAD {
                    let mut sleep = Sleep::new(timer.clone(), 1);
                    // Lands before, at or after the first deadline: the reset moves a
                    // waiting task, or follows one that fired (or is on the executor).
                    thread::sleep(Duration::from_micros(((t * 7 + i) % 4 * 500) as u64));
                    let delay_ms = 1 + (i % 3) as i64;
                    let before = Instant::now();
                    sleep.reset(delay_ms);
                    block_on(&mut sleep, PATIENCE, "a reset sleep");
                    let took = before.elapsed();
                    assert!(
                        took >= Duration::from_millis(delay_ms as u64),
                        "{delay_ms} ms: {took:?}"
                    );
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(
        completed.load(Ordering::SeqCst),
        RESET_THREADS * RESETS_PER_THREAD
    );
    assert_eq!(timer.size(), 0);
    timer.close();
}

// ---- timeout

/// A future that is ready once `flag` is set, counting its polls and its drop.
struct Flagged {
    flag: Arc<AtomicBool>,
    polls: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

impl Future for Flagged {
    type Output = &'static str;
    fn poll(self: Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> Poll<&'static str> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        if self.flag.load(Ordering::SeqCst) {
            Poll::Ready("answer")
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Flagged {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

fn flagged() -> (Flagged, Arc<AtomicBool>, Arc<AtomicBool>) {
    let flag = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let future = Flagged {
        flag: flag.clone(),
        polls: Arc::new(AtomicUsize::new(0)),
        dropped: dropped.clone(),
    };
    (future, flag, dropped)
}

#[test]
fn timeout_returns_the_output_and_cancels_its_task_in_the_same_poll() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let (future, ready, dropped) = flagged();
    let mut guarded = pin!(timeout(timer.clone(), 100, future));
    assert_eq!(poll_with(guarded.as_mut(), &waker), Poll::Pending);
    assert_eq!(timer.size(), 1);
    timer.advance_clock(50);
    ready.store(true, Ordering::SeqCst);
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Ok("answer"))
    );
    assert_eq!(timer.size(), 0, "cancelled inside the poll that completed");
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn timeout_counts_from_the_call() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let mut guarded = pin!(timeout(timer.clone(), 100, pending::<()>()));
    assert_eq!(timer.size(), 1, "scheduled by the call, before any poll");
    timer.advance_clock(99);
    assert_eq!(poll_with(guarded.as_mut(), &waker), Poll::Pending);
    timer.advance_clock(1);
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Err(Elapsed))
    );
}

#[test]
fn timeout_elapses_at_its_deadline_wakes_its_task_and_drops_the_future() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let (future, _ready, dropped) = flagged();
    let mut guarded = pin!(timeout(timer.clone(), 100, future));
    assert_eq!(poll_with(guarded.as_mut(), &waker), Poll::Pending);
    timer.advance_clock(100);
    assert_eq!(count.wakes(), 1);
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Err(Elapsed))
    );
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(Elapsed.to_string(), "deadline has elapsed");
}

#[test]
fn an_output_ready_together_with_the_deadline_wins() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let (future, ready, _dropped) = flagged();
    let mut guarded = pin!(timeout(timer.clone(), 100, future));
    assert_eq!(poll_with(guarded.as_mut(), &waker), Poll::Pending);
    timer.advance_clock(100);
    ready.store(true, Ordering::SeqCst);
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Ok("answer"))
    );
}

#[test]
fn dropping_a_pending_timeout_cancels_its_task() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let mut guarded = Box::pin(timeout(timer.clone(), 100, pending::<()>()));
    assert_eq!(poll_with(guarded.as_mut(), &waker), Poll::Pending);
    assert_eq!(timer.size(), 1);
    drop(guarded);
    assert_eq!(timer.size(), 0);
    timer.advance_clock(1_000);
    assert_eq!(count.wakes(), 0);
}

#[test]
fn timeout_on_a_closed_timer_gives_up_at_once_unless_the_future_is_ready() {
    let timer = mock();
    timer.close();
    let (_count, waker) = WakeCount::new();
    let mut guarded = pin!(timeout(timer.clone(), 100, pending::<()>()));
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Err(Elapsed))
    );
    let mut ready = pin!(timeout(timer.clone(), 100, async { 5 }));
    assert_eq!(poll_with(ready.as_mut(), &waker), Poll::Ready(Ok(5)));
}

// ---- Interval

/// Polls `interval.tick()` once, dropping it if pending.
fn tick(interval: &mut Interval, waker: &std::task::Waker) -> Poll<i64> {
    poll_with(pin!(interval.tick()), waker)
}

/// Ticks due at once, until one is pending.
fn due_ticks(interval: &mut Interval, waker: &std::task::Waker, start: i64) -> Vec<i64> {
    let mut ticks = Vec::new();
    while let Poll::Ready(at) = tick(interval, waker) {
        ticks.push(at - start);
        assert!(ticks.len() < 1_000, "an interval that never waits");
    }
    ticks
}

#[test]
fn interval_ticks_at_once_then_at_start_plus_whole_periods() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let start = timer.time().hi_res_clock_ms();
    let mut interval = Interval::new(timer.clone(), 25, MissedTicks::Burst);
    assert_eq!(tick(&mut interval, &waker), Poll::Ready(start));
    for k in 1..=4 {
        assert_eq!(tick(&mut interval, &waker), Poll::Pending);
        timer.advance_clock(24);
        assert_eq!(tick(&mut interval, &waker), Poll::Pending);
        timer.advance_clock(1);
        assert_eq!(tick(&mut interval, &waker), Poll::Ready(start + 25 * k));
    }
    assert_eq!(count.wakes(), 4);
}

#[test]
fn a_tick_dropped_while_pending_loses_no_tick() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let start = timer.time().hi_res_clock_ms();
    let mut interval = Interval::new(timer.clone(), 10, MissedTicks::Delay);
    assert_eq!(tick(&mut interval, &waker), Poll::Ready(start));
    {
        // A select! that took another branch: polled once, then dropped.
        let mut lost = Box::pin(interval.tick());
        assert_eq!(poll_with(lost.as_mut(), &waker), Poll::Pending);
    }
    timer.advance_clock(10);
    {
        // Dropped unpolled, with the tick due.
        let _unpolled = interval.tick();
    }
    assert_eq!(tick(&mut interval, &waker), Poll::Ready(start + 10));
    assert_eq!(tick(&mut interval, &waker), Poll::Pending);
    timer.advance_clock(10);
    assert_eq!(tick(&mut interval, &waker), Poll::Ready(start + 20));
}

#[test]
fn after_a_stall_burst_catches_up_and_delay_and_skip_do_not() {
    // Period 100; the caller stalls from 0 to 350: ticks 100, 200 and 300 are missed.
    let expected: [(MissedTicks, &[i64], &[i64]); 3] = [
        // (policy, ticks returned at 350, then the next two ticks)
        (MissedTicks::Burst, &[100, 200, 300], &[400, 500]),
        (MissedTicks::Delay, &[100], &[450, 550]),
        (MissedTicks::Skip, &[100], &[400, 500]),
    ];
    for (policy, at_once, after) in expected {
        let timer = mock();
        let (_count, waker) = WakeCount::new();
        let start = timer.time().hi_res_clock_ms();
        let mut interval = Interval::new(timer.clone(), 100, policy);
        assert_eq!(due_ticks(&mut interval, &waker, start), [0]);
        timer.advance_clock(350);
        assert_eq!(
            due_ticks(&mut interval, &waker, start),
            at_once,
            "{policy:?}"
        );
        for &next in after {
            let now = timer.time().hi_res_clock_ms() - start;
            timer.advance_clock(next - now - 1);
            assert_eq!(
                tick(&mut interval, &waker),
                Poll::Pending,
                "{policy:?} before {next}"
            );
            timer.advance_clock(1);
            assert_eq!(
                due_ticks(&mut interval, &waker, start),
                [next],
                "{policy:?}"
            );
        }
    }
}

#[test]
fn a_tick_taken_at_most_5_ms_late_keeps_the_schedule_under_every_policy() {
    for policy in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
        let timer = mock();
        let (_count, waker) = WakeCount::new();
        let start = timer.time().hi_res_clock_ms();
        let mut interval = Interval::new(timer.clone(), 100, policy);
        assert_eq!(due_ticks(&mut interval, &waker, start), [0]);
        timer.advance_clock(105); // tick 100 observed 5 ms late (see missed_ticks.rs)
        assert_eq!(due_ticks(&mut interval, &waker, start), [100], "{policy:?}");
        timer.advance_clock(94);
        assert_eq!(
            due_ticks(&mut interval, &waker, start),
            [] as [i64; 0],
            "{policy:?}"
        );
        timer.advance_clock(1);
        assert_eq!(due_ticks(&mut interval, &waker, start), [200], "{policy:?}");
    }
}

#[test]
fn dropping_an_interval_cancels_its_task() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let mut interval = Interval::new(timer.clone(), 10, MissedTicks::Burst);
    assert!(tick(&mut interval, &waker).is_ready());
    assert_eq!(timer.size(), 1);
    drop(interval);
    assert_eq!(timer.size(), 0);
}

#[test]
fn an_interval_of_the_longest_period_ticks_once_and_then_waits() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    timer.advance_clock(1_000);
    let start = timer.time().hi_res_clock_ms();
    // now + i64::MAX saturates: the start is read from the clock another way.
    let mut interval = Interval::new(timer.clone(), i64::MAX, MissedTicks::Skip);
    assert_eq!(tick(&mut interval, &waker), Poll::Ready(start));
    timer.advance_clock(1 << 50);
    assert_eq!(tick(&mut interval, &waker), Poll::Pending);
}

#[test]
fn interval_ticks_complete_at_once_on_a_closed_timer() {
    let timer = mock();
    let (_count, waker) = WakeCount::new();
    let mut interval = Interval::new(timer.clone(), 100, MissedTicks::Burst);
    assert!(tick(&mut interval, &waker).is_ready());
    timer.close();
    for _ in 0..3 {
        assert!(tick(&mut interval, &waker).is_ready());
    }
}

#[test]
#[should_panic(expected = "Interval::new: period_ms must be positive, got 0")]
fn a_zero_interval_period_panics_naming_the_argument() {
    Interval::new(mock(), 0, MissedTicks::Burst);
}

#[test]
#[should_panic(expected = "Interval::new: period_ms must be positive, got -3")]
fn a_negative_interval_period_panics_naming_the_argument() {
    Interval::new(mock(), -3, MissedTicks::Burst);
}

#[test]
fn an_interval_on_a_real_timer_ticks_no_sooner_than_its_periods() {
    const PERIOD_MS: i64 = 10;
    const TICKS: i64 = 5;
    let timer = Arc::new(SystemTimerReaper::new(
        "interval-reaper",
        SystemTimer::new("interval"),
    ));
    let start = Instant::now(); // before the interval's start: a strict lower bound
    let mut interval = Interval::new(timer.clone(), PERIOD_MS, MissedTicks::Burst);
    let ticks = block_on(
        async {
            let mut ticks = Vec::new();
            for _ in 0..TICKS {
                ticks.push(interval.tick().await);
            }
            ticks
        },
        PATIENCE,
        "five ticks",
    );
    // A tick taken 9-10 ms late (a loaded machine) makes the next one due within the
    // millisecond "now" rounds up to: it comes at once, up to 1 ms early (see `MissedTicks`).
    let took = start.elapsed();
    let least = Duration::from_millis(((TICKS - 1) * PERIOD_MS - 1) as u64);
    assert!(took > least, "{took:?}");
    let steps: Vec<i64> = ticks.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(steps, [PERIOD_MS; TICKS as usize - 1]);
    // `poll_fn` with a hand-written loop sees the same ticks.
    let next = block_on(
        poll_fn(|cx| interval.poll_tick(cx)),
        PATIENCE,
        "a sixth tick",
    );
    assert_eq!(next, ticks[0] + TICKS * PERIOD_MS);
    timer.close();
}
