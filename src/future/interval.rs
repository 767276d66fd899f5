//! [`Interval`]: ticks every period on the wheel, following a [`MissedTicks`] policy.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::sleep::Sleep;
use crate::schedule::missed_ticks::{MissedTicks, clock_ms};
use crate::task::IntoDelayMs;
use crate::timer::Timer;

/// Ticks every `period_ms` on a timer's clock; the first tick completes at once. The
/// futures counterpart of [`schedule_periodic`](crate::schedule_periodic).
///
/// Each [`tick`](Interval::tick) returns the time the tick was scheduled for, on the
/// timer's clock: the instant of creation, then one period after another. When a tick is
/// taken more than 5 ms late (the first one too), [`MissedTicks`] decides when the next one
/// is due (see there; the rule and the arithmetic are tokio's). One [`Sleep`] serves every
/// tick, reset to the next one (a new task once the last one fired), and dropping the
/// `Interval` cancels it.
///
/// On a timer that cannot keep the deadline (closed, or full), every tick completes at
/// once, as a [`Sleep`] does; a loop that ticks should also watch for its own shutdown.
///
/// [`Timer`] has no clock accessor: an `Interval` reads "now" from the expiration the timer
/// gives its task (the instant of the `add` or `reschedule` plus the delay), so on a
/// `MockTimer` its tick times are exact.
///
/// # Examples
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Waker};
/// use timingwheel::{Interval, MissedTicks, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let start = timer.time().hi_res_clock_ms();
/// let mut interval = Interval::new(timer.clone(), 100, MissedTicks::Burst);
/// let mut cx = Context::from_waker(Waker::noop());
///
/// assert_eq!(pin!(interval.tick()).poll(&mut cx), Poll::Ready(start), "at once");
/// let mut second = Box::pin(interval.tick());
/// assert_eq!(second.as_mut().poll(&mut cx), Poll::Pending);
/// timer.advance_clock(100);
/// assert_eq!(second.as_mut().poll(&mut cx), Poll::Ready(start + 100));
/// ```
#[derive(Debug)]
pub struct Interval {
    /// Due at `next_tick_ms` (or a little later: see `poll_tick`), unless `due`.
    sleep: Sleep,
    /// The time the next tick is scheduled for.
    next_tick_ms: i64,
    /// The next tick is due already (the first one, Burst's catch-up ticks): `poll_tick`
    /// returns it without waiting for the sleep.
    due: bool,
    period_ms: i64,
    missed: MissedTicks,
}

impl Interval {
    /// Creates an interval that ticks every `period_ms` on `timer`'s clock, the first time
    /// at once, following `missed` when it falls behind.
    ///
    /// The period is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
    /// [`IntoDelayMs`]).
    ///
    /// # Panics
    ///
    /// Panics if `period_ms` is zero or negative.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use timingwheel::{Interval, MissedTicks, MockTimer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let heartbeat = Interval::new(timer.clone(), Duration::from_secs(3), MissedTicks::Delay);
    /// assert_eq!(heartbeat.period_ms(), 3_000);
    /// assert_eq!(heartbeat.missed_ticks(), MissedTicks::Delay);
    /// ```
    #[track_caller]
    pub fn new(
        timer: Arc<dyn Timer>,
        period_ms: impl IntoDelayMs,
        missed: MissedTicks,
    ) -> Interval {
        Interval::build(timer, period_ms.into_delay_ms(), missed, None)
    }

    /// An interval, or with `schedule` (the name of its closure), the one a periodic
    /// schedule polls: its first tick is a period away, and its ticks are added past
    /// `max_pending` (see `Sleep::build`).
    #[track_caller]
    pub(crate) fn build(
        timer: Arc<dyn Timer>,
        period_ms: i64,
        missed: MissedTicks,
        schedule: Option<&'static str>,
    ) -> Interval {
        let first = schedule.is_none();
        let who = schedule.map_or("Interval::new", |_| "schedule_periodic");
        assert!(
            period_ms > 0,
            "{who}: period_ms must be positive, got {period_ms}"
        );
        let sleep = Sleep::build(Arc::clone(&timer), period_ms, schedule);
        let start_ms = clock_ms(&*timer, sleep.expiration_ms(), period_ms);
        Interval {
            sleep,
            next_tick_ms: start_ms.saturating_add(if first { 0 } else { period_ms }),
            due: first,
            period_ms,
            missed,
        }
    }

    /// Returns true if the timer refused the task of the next tick (it is closed, or its
    /// store is full): a periodic schedule then ends.
    pub(crate) fn refused(&self) -> bool {
        self.sleep.entry.cancelled()
    }

    /// Completes at the next tick, and returns the time that tick was scheduled for, on the
    /// timer's clock.
    ///
    /// Cancel-safe: a pending `tick()` that is dropped (a `select!` that took another
    /// branch) loses no tick; the next call returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Waker};
    /// use timingwheel::{Interval, MissedTicks, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let start = timer.time().hi_res_clock_ms();
    /// let mut interval = Interval::new(timer.clone(), 10, MissedTicks::Skip);
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut tick = |interval: &mut Interval| pin!(interval.tick()).poll(&mut cx);
    ///
    /// assert_eq!(tick(&mut interval), Poll::Ready(start));
    /// assert_eq!(tick(&mut interval), Poll::Pending); // dropped while pending: no loss
    /// timer.advance_clock(35); // ticks 10, 20 and 30 are due: one is returned
    /// assert_eq!(tick(&mut interval), Poll::Ready(start + 10));
    /// assert_eq!(tick(&mut interval), Poll::Pending, "Skip: the next one is at 40");
    /// timer.advance_clock(5);
    /// assert_eq!(tick(&mut interval), Poll::Ready(start + 40));
    /// ```
    pub async fn tick(&mut self) -> i64 {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick: `Ready` with the time the tick was scheduled for, or
    /// `Pending`, having registered `cx`'s waker. What [`tick`](Interval::tick) awaits, for
    /// hand-written futures and streams.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Waker};
    /// use timingwheel::{Interval, MissedTicks, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let start = timer.time().hi_res_clock_ms();
    /// let mut interval = Interval::new(timer.clone(), 10, MissedTicks::Burst);
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert_eq!(interval.poll_tick(&mut cx), Poll::Ready(start));
    /// timer.advance_clock(30); // three ticks behind: Burst returns them all at once
    /// let ticks: Vec<_> = (0..4).map(|_| interval.poll_tick(&mut cx)).collect();
    /// assert_eq!(
    ///     ticks,
    ///     [Poll::Ready(start + 10), Poll::Ready(start + 20), Poll::Ready(start + 30), Poll::Pending]
    /// );
    /// ```
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<i64> {
        if !std::mem::take(&mut self.due) && Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Everything changes within this call, before it returns `Ready`: a `tick()`
        // dropped while pending has changed nothing. The sleep is moved to the next tick,
        // due a period from now first: the reset tells the time of "now".
        let tick_ms = self.next_tick_ms;
        self.sleep.reset(self.period_ms);
        let now_ms = clock_ms(
            &*self.sleep.timer,
            self.sleep.expiration_ms(),
            self.period_ms,
        );
        self.next_tick_ms = self.missed.next_tick_ms(tick_ms, now_ms, self.period_ms);
        self.due = self.next_tick_ms <= now_ms;
        // A refused task (closed, full) has fired: there is nothing to move.
        if !self.due && !self.refused() && self.next_tick_ms != self.sleep.expiration_ms() {
            self.sleep.reset(self.next_tick_ms.saturating_sub(now_ms));
        }
        Poll::Ready(tick_ms)
    }

    /// Returns the period, in milliseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Interval, MissedTicks, MockTimer};
    ///
    /// let interval = Interval::new(Arc::new(MockTimer::new()), 250, MissedTicks::Burst);
    /// assert_eq!(interval.period_ms(), 250);
    /// ```
    pub fn period_ms(&self) -> i64 {
        self.period_ms
    }

    /// Returns the policy for missed ticks.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Interval, MissedTicks, MockTimer};
    ///
    /// let interval = Interval::new(Arc::new(MockTimer::new()), 250, MissedTicks::Skip);
    /// assert_eq!(interval.missed_ticks(), MissedTicks::Skip);
    /// ```
    pub fn missed_ticks(&self) -> MissedTicks {
        self.missed
    }
}
