//! `MissedTicks` as tokio's `MissedTickBehavior`: a tick taken more than 5 ms after its
//! scheduled time is missed, even by less than a period, and the first tick too; the policy
//! then says when the next one is due. The same rule for `Interval` and
//! `schedule_periodic`, on a `MockTimer` (every tick's time checked exactly), with the
//! figures of tokio's `Interval::poll_tick` and `MissedTickBehavior::next_timeout`.

use crate::common;

use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use common::drive_mock_until;
use common::waker::poll_with;
use timingwheel::{Interval, MissedTicks, MockTimer, Timer, schedule_periodic};

const POLICIES: [MissedTicks; 3] = [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip];

/// An interval of `period_ms` on a new mock timer, and the timer's start.
fn interval(period_ms: i64, missed: MissedTicks) -> (Arc<MockTimer>, Interval, i64) {
    let timer = Arc::new(MockTimer::new());
    let start = timer.time().hi_res_clock_ms();
    let interval = Interval::new(timer.clone(), period_ms, missed);
    (timer, interval, start)
}

/// The ticks due now, relative to `start`, until one is pending.
fn due_ticks(interval: &mut Interval, start: i64) -> Vec<i64> {
    let mut ticks = Vec::new();
    while let Poll::Ready(at) = poll_with(pin!(interval.tick()), Waker::noop()) {
        ticks.push(at - start);
        assert!(ticks.len() < 1_000, "an interval that never waits");
    }
    ticks
}

/// Moves the clock to `at_ms` after `start`, then returns the ticks due.
fn ticks_at(timer: &MockTimer, interval: &mut Interval, start: i64, at_ms: i64) -> Vec<i64> {
    let now = timer.time().hi_res_clock_ms() - start;
    assert!(at_ms >= now, "the clock is at {now} already");
    timer.advance_clock(at_ms - now);
    due_ticks(interval, start)
}

#[test]
fn a_first_interval_tick_taken_35_ms_late_follows_the_policy() {
    // Period 10; the first tick (due at 0) is taken at 35. tokio: Delay ticks at 35, 45,
    // 55; Skip at 35, 40, 50; Burst returns 0, 10, 20 and 30 at 35, then 40 and 50.
    // (policy, the ticks returned at 35, then (clock, ticks returned) steps)
    type Steps = &'static [(i64, &'static [i64])];
    let expected: [(MissedTicks, &[i64], Steps); 3] = [
        (
            MissedTicks::Delay,
            &[0],
            &[(44, &[]), (45, &[45]), (54, &[]), (55, &[55])],
        ),
        (
            MissedTicks::Skip,
            &[0],
            &[(39, &[]), (40, &[40]), (49, &[]), (50, &[50])],
        ),
        (
            MissedTicks::Burst,
            &[0, 10, 20, 30],
            &[(39, &[]), (40, &[40]), (50, &[50])],
        ),
    ];
    for (policy, at_35, steps) in expected {
        let (timer, mut interval, start) = interval(10, policy);
        timer.advance_clock(35);
        assert_eq!(due_ticks(&mut interval, start), at_35, "{policy:?} at 35");
        for &(at, ticks) in steps {
            assert_eq!(
                ticks_at(&timer, &mut interval, start, at),
                ticks,
                "{policy:?} at {at}"
            );
        }
    }
}

#[test]
fn a_first_interval_tick_taken_at_most_5_ms_late_keeps_the_schedule() {
    for policy in POLICIES {
        let (timer, mut interval, start) = interval(10, policy);
        timer.advance_clock(5);
        assert_eq!(due_ticks(&mut interval, start), [0], "{policy:?}");
        assert_eq!(
            ticks_at(&timer, &mut interval, start, 9),
            [] as [i64; 0],
            "{policy:?}"
        );
        assert_eq!(
            ticks_at(&timer, &mut interval, start, 10),
            [10],
            "{policy:?}"
        );
    }
}

#[test]
fn an_interval_tick_taken_50_ms_late_of_a_period_of_100_is_missed() {
    // tokio: a tick due at 100 taken at 150: Delay's next at 250; Burst's and Skip's at 200.
    for (policy, next) in [
        (MissedTicks::Delay, 250),
        (MissedTicks::Burst, 200),
        (MissedTicks::Skip, 200),
    ] {
        let (timer, mut interval, start) = interval(100, policy);
        assert_eq!(due_ticks(&mut interval, start), [0]);
        assert_eq!(
            ticks_at(&timer, &mut interval, start, 150),
            [100],
            "{policy:?}"
        );
        assert_eq!(
            ticks_at(&timer, &mut interval, start, next - 1),
            [] as [i64; 0]
        );
        assert_eq!(
            ticks_at(&timer, &mut interval, start, next),
            [next],
            "{policy:?}"
        );
    }
}

#[test]
fn an_interval_tick_taken_5_ms_late_keeps_the_schedule_and_6_ms_late_does_not_for_delay() {
    for (late, delay_next) in [(5, 200), (6, 206)] {
        let (timer, mut interval, start) = interval(100, MissedTicks::Delay);
        assert_eq!(due_ticks(&mut interval, start), [0]);
        assert_eq!(ticks_at(&timer, &mut interval, start, 100 + late), [100]);
        assert_eq!(
            ticks_at(&timer, &mut interval, start, delay_next - 1),
            [] as [i64; 0]
        );
        assert_eq!(
            ticks_at(&timer, &mut interval, start, delay_next),
            [delay_next],
            "{late}"
        );
    }
}

/// The times, relative to the start, at which a schedule of `period_ms` runs when nothing
/// drives its mock timer until `first_ms`, and then every millisecond until `until_ms`.
fn periodic_runs(period_ms: i64, missed: MissedTicks, first_ms: i64, until_ms: i64) -> Vec<i64> {
    let timer = Arc::new(MockTimer::new());
    let start = timer.time().hi_res_clock_ms();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (time, runs) = (timer.time().clone(), log.clone());
    let _handle = schedule_periodic(timer.clone(), period_ms, missed, move || {
        runs.lock().unwrap().push(time.hi_res_clock_ms() - start);
    });
    timer.advance_clock(first_ms);
    drive_mock_until(&timer, start, until_ms);
    let mut runs = log.lock().unwrap();
    std::mem::take(&mut *runs)
}

#[test]
fn periodic_runs_follow_the_same_rule_the_first_one_included() {
    // (period, the first run taken at, the policy, the runs until 65 or 350)
    let expected: [(i64, i64, MissedTicks, &[i64]); 9] = [
        // The first tick, due at 10, taken 35 ms late.
        (10, 45, MissedTicks::Delay, &[45, 55, 65]),
        (10, 45, MissedTicks::Skip, &[45, 50, 60]),
        (10, 45, MissedTicks::Burst, &[45, 45, 45, 45, 50, 60]),
        // Tick 100 taken at 150: 50 ms late, half a period.
        (100, 150, MissedTicks::Delay, &[150, 250, 350]),
        (100, 150, MissedTicks::Skip, &[150, 200, 300]),
        (100, 150, MissedTicks::Burst, &[150, 200, 300]),
        // Tick 100 taken at 105: on time.
        (100, 105, MissedTicks::Delay, &[105, 200, 300]),
        (100, 105, MissedTicks::Skip, &[105, 200, 300]),
        (100, 105, MissedTicks::Burst, &[105, 200, 300]),
    ];
    for (period, first, policy, runs) in expected {
        let until = if period == 10 { 65 } else { 350 };
        assert_eq!(
            periodic_runs(period, policy, first, until),
            runs,
            "period {period}, first run at {first}, {policy:?}"
        );
    }
}
