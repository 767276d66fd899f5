//! What periodic schedules share: the missed-tick policy ([`MissedTicks`]), the arithmetic
//! of the next tick, and how a schedule reads its timer's clock.
//!
//! # Reading the timer's clock
//!
//! [`Timer`] has no clock accessor, and a schedule must not assume the system clock: a
//! [`MockTimer`](crate::MockTimer) runs on its own `MockTime`, a `SystemTimer` may run on
//! any `Time`. But every timer reports, for each task it takes, the expiration it gave it,
//! and that expiration is the instant of the `add` (or `reschedule`) plus the delay, on the
//! timer's clock (`TimerTaskEntry::expiration_ms`). So a schedule reads "now" from the
//! task it schedules anyway: `now = expiration - delay`. That is exact unless the sum
//! saturated at `i64::MIN` or `i64::MAX`; only then does a schedule ask the timer once
//! more, with a no-op task of delay 0, whose expiration is "now" itself (it costs one
//! hand-over to the executor, and shows in `TimerStats` as a task added and expired).
//!
//! A `SystemTimer` rounds the instant of an `add` up to the next whole millisecond, so the
//! "now" read this way is at most 1 ms ahead of its clock, never behind: a tick a schedule
//! waits for is never early. But a tick due at that "now" counts as due at once (as it must
//! on a `MockTimer`, whose clock is exact): on a real clock, such a tick (Burst's catch-up,
//! a period of 5 ms or less) may come up to 1 ms before its time.

use crate::task::timer_task;
use crate::timer::Timer;

/// What a periodic schedule does about ticks it missed (tokio's `MissedTickBehavior`).
///
/// As in tokio, a tick is *missed* when it is taken more than 5 ms after the time it was
/// scheduled for, even by less than a period, and the first tick too: a run of
/// [`schedule_periodic`](crate::schedule_periodic) that starts late, or an
/// [`Interval`](crate::Interval) tick observed late (the caller polled late, a run took
/// longer than the period, the process stalled). The policy then says when the next tick
/// is due. A tick taken at most 5 ms late keeps the schedule under every policy, so that
/// the wheel's own lateness (a millisecond or so) never makes a schedule drift.
///
/// Take a period of 100 ms, ticks due at 100, 200, 300, ... and a stall that makes the tick
/// due at 100 run at 350, or at 150:
///
/// | policy | taken at 350: ticks run at | the ticks they report | taken at 150: the next tick |
/// |---|---|---|---|
/// | `Burst` | 350, 350, 350, 400, 500 | 100, 200, 300, 400, 500 | 200 |
/// | `Delay` | 350, 450, 550 | 100, 450, 550 | 250 |
/// | `Skip` | 350, 400, 500 | 100, 400, 500 | 200 |
///
/// An [`Interval`](crate::Interval)'s first tick is due at once; taken 35 ms late with a
/// period of 10 ms, `Delay` ticks next at 45 (and then 55), `Skip` at 40, and `Burst` at
/// 10, 20 and 30 at once, then 40.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let burst = schedule_periodic(timer.clone(), 100, MissedTicks::Burst, || {});
/// let skip = schedule_periodic(timer.clone(), 100, MissedTicks::Skip, || {});
/// timer.advance_clock(350); // a stall: ticks 100, 200 and 300 are due at once
/// assert_eq!(burst.runs(), 3, "Burst catches up");
/// assert_eq!(skip.runs(), 1, "Skip runs once, then waits for tick 400");
/// timer.advance_clock(50);
/// assert_eq!((burst.runs(), skip.runs()), (4, 2));
/// assert_eq!(MissedTicks::default(), MissedTicks::Burst);
/// ```
///
/// A tick 50 ms late, by half a period:
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let delay = schedule_periodic(timer.clone(), 100, MissedTicks::Delay, || {});
/// timer.advance_clock(150); // tick 100 runs at 150: Delay's next is at 250
/// timer.advance_clock(99);
/// assert_eq!(delay.runs(), 1);
/// timer.advance_clock(1);
/// assert_eq!(delay.runs(), 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissedTicks {
    /// Runs the missed ticks at once, one after another, then keeps the original schedule.
    #[default]
    Burst,
    /// Runs once now, then every period from now.
    Delay,
    /// Runs once now, then at the next tick of the original schedule.
    Skip,
}

/// How late a tick may be taken and still count as on time, in milliseconds (tokio's 5 ms).
pub(crate) const MISSED_AFTER_MS: i64 = 5;

impl MissedTicks {
    /// Returns the time of the tick that follows the one due at `tick_ms`, which is taken
    /// at `now_ms` (`>= tick_ms`), on a schedule of `period_ms` (`> 0`). Saturates.
    ///
    /// tokio's `Interval::poll_tick` and `MissedTickBehavior::next_timeout`, in
    /// milliseconds: on schedule unless taken more than [`MISSED_AFTER_MS`] late, else the
    /// policy's.
    pub(crate) fn next_tick_ms(self, tick_ms: i64, now_ms: i64, period_ms: i64) -> i64 {
        debug_assert!(period_ms > 0);
        let on_schedule = tick_ms.saturating_add(period_ms);
        if now_ms <= tick_ms.saturating_add(MISSED_AFTER_MS) {
            return on_schedule;
        }
        match self {
            MissedTicks::Burst => on_schedule,
            MissedTicks::Delay => now_ms.saturating_add(period_ms),
            MissedTicks::Skip => {
                // The first tick of the original schedule after `now_ms`: tokio's
                // `now + (period - (now - tick) % period)`, in i128 so that no step can
                // overflow.
                let (now, tick, period) = (
                    i128::from(now_ms),
                    i128::from(tick_ms),
                    i128::from(period_ms),
                );
                let next = now + (period - (now - tick) % period);
                i64::try_from(next).unwrap_or(i64::MAX)
            }
        }
    }
}

/// Returns the instant at which a task given `expiration_ms` for a delay of `delay_ms` was
/// added or rescheduled, on its timer's clock; `None` if the sum saturated, which hides it.
pub(crate) fn added_at_ms(expiration_ms: i64, delay_ms: i64) -> Option<i64> {
    let saturated =
        (delay_ms > 0 && expiration_ms == i64::MAX) || (delay_ms < 0 && expiration_ms == i64::MIN);
    if saturated {
        return None;
    }
    // Cannot overflow for an expiration a timer gave, but a checked step costs nothing.
    expiration_ms.checked_sub(delay_ms)
}

/// Returns `timer`'s clock at the moment a task was given `expiration_ms` for a delay of
/// `delay_ms`; where that expiration saturated, reads the clock again: the expiration of a
/// no-op task of delay 0 (handed to the executor, or refused by a closed timer, either way
/// at once) is the instant of its add (see the module docs).
pub(crate) fn clock_ms(timer: &dyn Timer, expiration_ms: i64, delay_ms: i64) -> i64 {
    added_at_ms(expiration_ms, delay_ms)
        .unwrap_or_else(|| timer.add(timer_task(0, || {})).expiration_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: i64 = 100;

    #[test]
    fn a_tick_taken_at_most_5_ms_late_keeps_the_schedule_under_every_policy() {
        for policy in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            assert_eq!(policy.next_tick_ms(100, 100, P), 200, "{policy:?}");
            assert_eq!(policy.next_tick_ms(100, 105, P), 200, "{policy:?}");
            // A period shorter than 5 ms: on schedule, due at once.
            assert_eq!(policy.next_tick_ms(100, 104, 2), 102, "{policy:?}");
        }
    }

    #[test]
    fn a_tick_taken_more_than_5_ms_late_is_missed_even_by_less_than_a_period() {
        // tokio: a tick due at 100 taken at 150, period 100: Delay's next at 250.
        assert_eq!(MissedTicks::Burst.next_tick_ms(100, 150, P), 200);
        assert_eq!(MissedTicks::Delay.next_tick_ms(100, 150, P), 250);
        assert_eq!(MissedTicks::Skip.next_tick_ms(100, 150, P), 200);
        assert_eq!(MissedTicks::Delay.next_tick_ms(100, 106, P), 206);
        // A first tick (due at 0) taken 35 ms late, period 10.
        assert_eq!(MissedTicks::Burst.next_tick_ms(0, 35, 10), 10);
        assert_eq!(MissedTicks::Delay.next_tick_ms(0, 35, 10), 45);
        assert_eq!(MissedTicks::Skip.next_tick_ms(0, 35, 10), 40);
    }

    #[test]
    fn a_missed_tick_follows_the_policy() {
        assert_eq!(MissedTicks::Burst.next_tick_ms(100, 350, P), 200);
        assert_eq!(MissedTicks::Delay.next_tick_ms(100, 350, P), 450);
        assert_eq!(MissedTicks::Skip.next_tick_ms(100, 350, P), 400);
        // Exactly a whole number of periods behind: the next one is a period away.
        assert_eq!(MissedTicks::Skip.next_tick_ms(100, 300, P), 400);
        assert_eq!(MissedTicks::Delay.next_tick_ms(100, 200, P), 300);
    }

    #[test]
    fn next_ticks_saturate_at_the_end_of_the_clock() {
        let end = i64::MAX;
        for policy in [MissedTicks::Burst, MissedTicks::Delay, MissedTicks::Skip] {
            assert_eq!(policy.next_tick_ms(end - 10, end - 5, P), end, "{policy:?}");
            assert_eq!(policy.next_tick_ms(0, end, i64::MAX), end, "{policy:?}");
        }
        // The whole range behind: Burst goes on one period at a time, the others jump.
        assert_eq!(
            MissedTicks::Burst.next_tick_ms(i64::MIN, end, 1),
            i64::MIN + 1
        );
        assert_eq!(MissedTicks::Delay.next_tick_ms(i64::MIN, end, 1), end);
        assert_eq!(MissedTicks::Skip.next_tick_ms(i64::MIN, end, 1), end);
        // Ticks at MIN, -1, MAX - 1; the one after that saturates.
        let skip = |now| MissedTicks::Skip.next_tick_ms(i64::MIN, now, i64::MAX);
        assert_eq!(skip(0), i64::MAX - 1);
        assert_eq!(skip(i64::MAX - 1), i64::MAX);
    }

    #[test]
    fn the_instant_of_an_add_is_its_expiration_minus_its_delay_unless_saturated() {
        assert_eq!(added_at_ms(1_100, 100), Some(1_000));
        assert_eq!(added_at_ms(900, -100), Some(1_000));
        assert_eq!(added_at_ms(i64::MAX, 0), Some(i64::MAX));
        assert_eq!(added_at_ms(i64::MAX - 1, 1), Some(i64::MAX - 2));
        assert_eq!(added_at_ms(i64::MAX, 1), None);
        assert_eq!(added_at_ms(i64::MIN, -1), None);
        assert_eq!(
            added_at_ms(i64::MIN, 5),
            None,
            "no timer gives this; no overflow either"
        );
    }
}
