//! [`schedule_periodic`]: a closure run every period on a timer's executor, for threads.
//!
//! # Ground rules
//!
//! - A schedule is an [`Interval`] that it polls itself, as its own waker: when the
//!   interval's task fires (or is dropped unrun), it wakes the schedule on that thread,
//!   which polls the interval and runs the closure for each tick that is ready, until one
//!   is pending. The interval makes each tick's task (which holds the waker, so the
//!   schedule lives on without its handles), reads the timer's clock and follows the
//!   [`MissedTicks`] policy; a tick due already (Burst's catch-up) is ready at once.
//! - `state`'s mutex guards all but `runs`; it is a leaf (see `crate::lock_order`): released
//!   while the interval calls the timer (which may fire the task inside the call: an inline
//!   executor, a tick coarser than the period) and while the closure runs.
//! - `running` names the polling thread, set from `None` under the lock: one at a time, so
//!   runs never overlap, whatever the number of executor threads. A wake while it polls
//!   sets `woken`, and it polls again.
//! - The schedule ends when cancelled, when a run panics, or when the timer refuses a
//!   tick's task (closed, or its store full; the tick that was due is not run). Whoever ends
//!   it lets go of the interval (which cancels its task) and the closure, with no lock
//!   held: the polling thread, or `cancel` where none polls.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Wake, Waker};
use std::thread::{self, ThreadId};

use parking_lot::{Condvar, Mutex};

use super::missed_ticks::MissedTicks;
use crate::future::interval::Interval;
use crate::task::IntoDelayMs;
use crate::timer::Timer;

/// Runs `run` every `period_ms` on `timer`'s executor, the first time `period_ms` from now,
/// until the returned handle is [cancelled](PeriodicHandle::cancel) or the timer closes.
///
/// The period is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
/// [`IntoDelayMs`]). Ticks are due at the instant of this call plus whole periods, on the
/// timer's clock; a run that starts more than 5 ms late (the first one too) has missed its
/// tick, and `missed` says when the next one is due (see [`MissedTicks`]: tokio's rule;
/// `Burst` catches up, `Delay` and `Skip` do not). A run never overlaps the previous one,
/// also on an executor of several threads
/// ([`executor_threads`](crate::SystemTimerBuilder::executor_threads)): a run that takes
/// longer than the period delays the next tick, which is then a missed one.
///
/// The schedule reads its timer's clock from the expiration of the task it schedules for
/// the next tick (see [`Interval`](crate::Interval)), and keeps the timer alive (it holds the
/// `Arc`) until it ends. Dropping the handles does not end it.
///
/// A full timer neither ends a schedule nor drops its tick: the schedule adds each tick with
/// [`try_add_unbounded`](Timer::try_add_unbounded), so a timer that holds its
/// [`max_pending`](crate::SystemTimerBuilder::max_pending) tasks takes it all the same, and
/// goes over its bound by one task per live schedule. Only a closed timer, or one whose
/// storage is full, refuses it: the schedule then ends.
///
/// # Panics
///
/// Panics if `period_ms` is zero or negative. A panic inside `run` ends the schedule (as in
/// Java's `scheduleAtFixedRate`): a `SystemTimer`'s executor catches and logs it, a
/// `MockTimer` lets it reach the caller of `advance_clock`.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let flushes = Arc::new(AtomicU32::new(0));
/// let counter = flushes.clone();
/// let flusher = schedule_periodic(timer.clone(), 1_000, MissedTicks::Delay, move || {
///     counter.fetch_add(1, Ordering::SeqCst);
/// });
/// timer.advance_clock(999);
/// assert_eq!(flushes.load(Ordering::SeqCst), 0, "the first run is a period away");
/// timer.advance_clock(1);
/// timer.advance_clock(1_000);
/// assert_eq!(flusher.runs(), 2);
/// assert!(flusher.cancel());
/// timer.advance_clock(5_000);
/// assert_eq!(flusher.runs(), 2, "no run after cancel");
/// assert_eq!(timer.size(), 0, "its pending task went with it");
/// ```
#[track_caller]
pub fn schedule_periodic(
    timer: Arc<dyn Timer>,
    period_ms: impl IntoDelayMs,
    missed: MissedTicks,
    run: impl FnMut() + Send + 'static,
) -> PeriodicHandle {
    let period_ms = period_ms.into_delay_ms();
    let name = std::any::type_name_of_val(&run);
    let interval = Interval::build(timer, period_ms, missed, Some(name));
    let schedule = Arc::new(Schedule {
        period_ms,
        missed,
        runs: AtomicU64::new(0),
        idle: Condvar::new(),
        state: Mutex::new(State {
            // Not if a closed timer (or a full store) refused the first tick.
            active: !interval.refused(),
            running: None,
            woken: false,
            ticking: Some((interval, Box::new(run))),
        }),
    });
    // The first poll registers the waker (or lets go of a schedule that never began).
    Arc::clone(&schedule).wake();
    PeriodicHandle(schedule)
}

/// The handle of a schedule made by [`schedule_periodic`]: cancels it, counts its runs.
///
/// `Clone + Send + Sync`; clones handle the same schedule. Dropping it does not cancel the
/// schedule.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, || {});
/// let other = handle.clone();
/// timer.advance_clock(30);
/// assert_eq!(other.runs(), 3);
/// assert!(handle.cancel());
/// assert!(!other.cancel(), "cancelled already");
/// ```
#[derive(Clone)]
pub struct PeriodicHandle(Arc<Schedule>);

impl PeriodicHandle {
    /// Stops the schedule and drops its pending task: no run starts after this returns (a
    /// run in progress finishes first). Returns true iff the schedule was still active: not
    /// cancelled before, its timer not closed, no run of it panicked.
    ///
    /// # Blocking
    ///
    /// Waits for a run in progress on another thread to finish, so that none is running
    /// once it returns. Called from inside the run (the closure cancels its own schedule),
    /// it returns at once and the schedule ends when the run returns. A run that waits for
    /// a lock the caller of `cancel` holds deadlocks, as with joining a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, PeriodicHandle, Timer};
    ///
    /// // A schedule that stops itself after its third run.
    /// let timer = Arc::new(MockTimer::new());
    /// let slot: Arc<Mutex<Option<PeriodicHandle>>> = Arc::default();
    /// let own = slot.clone();
    /// let mut left = 3;
    /// let handle = schedule_periodic(timer.clone(), 10, MissedTicks::Burst, move || {
    ///     left -= 1;
    ///     if left == 0 {
    ///         assert!(own.lock().unwrap().as_ref().unwrap().cancel());
    ///     }
    /// });
    /// *slot.lock().unwrap() = Some(handle.clone());
    /// timer.advance_clock(100);
    /// assert_eq!(handle.runs(), 3);
    /// assert!(!handle.cancel());
    /// ```
    pub fn cancel(&self) -> bool {
        let me = Some(thread::current().id());
        let mut state = self.0.state.lock();
        let was_active = std::mem::replace(&mut state.active, false);
        while state.running.is_some() && state.running != me {
            self.0.idle.wait(&mut state);
        }
        // `None` if the caller is the run's own thread, which lets go of it when it returns.
        let ended = state.ticking.take();
        drop(state);
        drop(ended);
        was_active
    }

    /// Returns how many runs have completed so far (a run that panicked is not counted).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let handle = schedule_periodic(timer.clone(), 250, MissedTicks::Burst, || {});
    /// timer.advance_clock(1_000);
    /// assert_eq!(handle.runs(), 4);
    /// ```
    pub fn runs(&self) -> u64 {
        self.0.runs.load(Ordering::Acquire)
    }

    /// Returns true while the schedule goes on: not cancelled, its timer not closed, no run
    /// of it panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{schedule_periodic, MissedTicks, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let handle = schedule_periodic(timer.clone(), 250, MissedTicks::Burst, || {});
    /// assert!(handle.is_active());
    /// timer.close();
    /// assert!(!handle.is_active(), "a closed timer ends it");
    /// assert!(!handle.cancel());
    /// ```
    pub fn is_active(&self) -> bool {
        self.0.state.lock().active
    }
}

impl fmt::Debug for PeriodicHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock.
        f.debug_struct("PeriodicHandle")
            .field("period_ms", &self.0.period_ms)
            .field("missed", &self.0.missed)
            .field("runs", &self.runs())
            .finish_non_exhaustive()
    }
}

/// One schedule (see the module's ground rules).
struct Schedule {
    period_ms: i64,
    missed: MissedTicks,
    /// Runs completed.
    runs: AtomicU64,
    /// Signalled when `running` goes back to `None`.
    idle: Condvar,
    state: Mutex<State>,
}

/// Guarded by [`Schedule::state`].
struct State {
    /// Not cancelled, no tick refused, no run panicked.
    active: bool,
    /// The polling thread.
    running: Option<ThreadId>,
    /// Woken since the polling thread last polled: it polls again.
    woken: bool,
    /// The interval and the closure, while active and not taken out to be polled and run.
    ticking: Option<(Interval, Box<dyn FnMut() + Send>)>,
}

impl Wake for Schedule {
    fn wake(self: Arc<Self>) {
        let mut state = self.state.lock();
        state.woken = true;
        if state.running.is_some() {
            return;
        }
        state.running = Some(thread::current().id());
        let waker = Waker::from(Arc::clone(&self));
        while state.active && std::mem::take(&mut state.woken) {
            let Some((mut interval, mut run)) = state.ticking.take() else {
                unreachable!("an active schedule holds its interval between polls");
            };
            drop(state);
            let tick = interval.poll_tick(&mut Context::from_waker(&waker));
            let refused = tick.is_ready() && interval.refused();
            if tick.is_ready() && !refused {
                let unwinding = EndOnUnwind(&self);
                run();
                std::mem::forget(unwinding);
                self.runs.fetch_add(1, Ordering::Release);
            }
            state = self.state.lock();
            state.ticking = Some((interval, run));
            if refused {
                log::debug!("schedule_periodic: the timer refused a tick; the schedule ends");
                state.active = false;
            }
            // After a run, the next tick may be due already.
            state.woken |= tick.is_ready();
        }
        state.running = None;
        self.idle.notify_all();
        let ended = (!state.active).then(|| state.ticking.take());
        drop(state);
        drop(ended);
    }
}

/// Ends the schedule if its run unwinds; the interval and the closure are dropped after
/// it, by the unwinding.
struct EndOnUnwind<'a>(&'a Schedule);

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.active = false;
        state.running = None;
        self.0.idle.notify_all();
    }
}
