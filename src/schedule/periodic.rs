//! [`schedule_periodic`]: a closure run every period on a timer's executor, for threads.
//!
//! # Ground rules
//!
//! - A schedule is one [`Schedule`], shared by its handles and by its one timer task at a
//!   time, a token task (`schedule::token`) whose token is the *generation* it was made
//!   for. Everything but `runs` is guarded by `state`'s mutex.
//! - Lock order (see `crate::lock_order`): `state` is a leaf, never held while the timer is
//!   called: a timer may run a task inside `add` or `reschedule` (an inline executor, with
//!   a tick coarser than the period), and the tick takes `state`. The next tick's task is
//!   added with a new generation made current first, so a tick that fires before the state
//!   records it finds it current: the run loop (or its own, for the first tick) runs it.
//!   `state` is never held while the closure runs, while a task is cancelled or dropped (a
//!   tick's drop takes it), or while the closure, an entry or the timer is dropped.
//! - `running` names the thread in the run loop, set under the lock from `None`: one loop
//!   at a time, so runs never overlap, whatever the number of executor threads. A tick that
//!   fires while the loop runs only sets `due`; the loop runs it next.
//! - `generation` is bumped for every tick's task, and whenever the pending task is
//!   abandoned: on cancel, at the end of the schedule, and when the task only told the time
//!   because the next tick is due at once (a burst). A tick of an older generation does
//!   nothing, run or dropped.
//! - A tick of the current generation dropped unrun means its timer closed, or stopped
//!   and dropped it: the schedule ends.
//! - Between runs the closure lives in `state`; the loop takes it out for a run and puts it
//!   back. Whoever ends the schedule drops it, with the pending task and the timer.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, ThreadId};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::missed_ticks::{MissedTicks, clock_ms};
use super::token::{TokenOwner, TokenTask};
use crate::task::{IntoDelayMs, TimerTask};
use crate::timer::Timer;
use crate::timer_task_entry::TimerTaskEntry;

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
    assert!(
        period_ms > 0,
        "schedule_periodic: period_ms must be positive, got {period_ms}"
    );
    let schedule = Arc::new(Schedule {
        period_ms,
        missed,
        run_name: std::any::type_name_of_val(&run),
        runs: AtomicU64::new(0),
        idle: Condvar::new(),
        state: Mutex::new(State {
            active: true,
            generation: 0,
            timer: Some(timer),
            entry: None,
            next_tick_ms: None,
            running: None,
            due: false,
            run: Some(Box::new(run)),
        }),
    });
    {
        let state = schedule.state.lock();
        let (mut state, added) = schedule.add_tick(state, None);
        match added {
            Ok(next) if state.active && state.generation == next.generation => {
                state.next_tick_ms = Some(next.next_ms);
                state.entry = Some(next.entry);
            }
            // Its tick fired during the call and the run loop took over (it leaves no task
            // pending: this one is spent), or the timer closed and dropped it.
            Ok(next) => {
                drop(state);
                drop(next.entry);
            }
            Err(refused) => {
                log::debug!("schedule_periodic: the timer refused the first tick");
                let ended = state.end();
                drop(state);
                drop(refused);
                drop(ended);
            }
        }
    }
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
        let me = thread::current().id();
        let schedule = &*self.0;
        let mut state = schedule.state.lock();
        let was_active = state.active;
        let mut ended = state.end();
        while state.running.is_some_and(|thread| thread != me) {
            schedule.idle.wait(&mut state);
        }
        // Put back by a run that finished meanwhile.
        if ended.run.is_none() {
            ended.run = state.run.take();
        }
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
    /// The type name of the closure: the name of every tick's task in logs.
    run_name: &'static str,
    /// Runs completed.
    runs: AtomicU64,
    /// Signalled when `running` goes back to `None`.
    idle: Condvar,
    state: Mutex<State>,
}

/// Guarded by [`Schedule::state`].
struct State {
    /// Not cancelled, timer not closed, no run panicked.
    active: bool,
    /// The generation of the current tick's task; older ones do nothing.
    generation: u64,
    /// `None` once the schedule ended.
    timer: Option<Arc<dyn Timer>>,
    /// The pending task of the next tick, if it has not fired.
    entry: Option<TimerTaskEntry>,
    /// The time the next tick is scheduled for, on the timer's clock; `None` until the
    /// first tick's task is added.
    next_tick_ms: Option<i64>,
    /// The thread in the run loop.
    running: Option<ThreadId>,
    /// The next tick is due already: the run loop runs it next.
    due: bool,
    /// The closure, between runs; `None` during a run and once the schedule ended.
    run: Option<Box<dyn FnMut() + Send>>,
}

/// The task of the next tick, as added by [`Schedule::add_tick`].
struct NextTick {
    entry: TimerTaskEntry,
    /// The generation of its task.
    generation: u64,
    /// The timer's clock when it was added.
    now_ms: i64,
    /// The time of the tick, on the timer's clock: a period after the first call, or what
    /// the missed-tick policy says after `tick_ms`.
    next_ms: i64,
}

/// What an ended schedule lets go of, dropped after `state`'s lock is released: the
/// pending task is cancelled (its drop takes the lock), the closure and the timer dropped
/// (their drops may do anything).
struct Ended {
    entry: Option<TimerTaskEntry>,
    run: Option<Box<dyn FnMut() + Send>>,
    _timer: Option<Arc<dyn Timer>>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            entry.cancel();
        }
    }
}

impl State {
    /// Ends the schedule; returns what to let go of once the lock is released.
    fn end(&mut self) -> Ended {
        self.active = false;
        self.generation += 1;
        Ended {
            entry: self.entry.take(),
            run: self.run.take(),
            _timer: self.timer.take(),
        }
    }
}

/// The timer task of one tick: a token task whose token is the generation it was made for
/// (see the module's ground rules).
impl TokenOwner for Schedule {
    type Payload = ();

    fn expired(self: Arc<Self>, generation: u64, (): ()) {
        self.on_tick(generation);
    }

    fn dropped(self: Arc<Self>, generation: u64, (): ()) {
        self.on_dropped(generation);
    }

    fn task_name(&self, (): &()) -> &'static str {
        self.run_name
    }
}

/// Ends the schedule if its run unwinds.
struct EndOnUnwind<'a>(&'a Schedule);

impl Drop for EndOnUnwind<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        let ended = self.0.leave(&mut state);
        drop(state);
        drop(ended);
    }
}

impl Schedule {
    /// Adds the task of the tick after `tick_ms` (`None`: the first tick, a period from
    /// now), with `state`'s lock released during the calls to the timer, which may run the
    /// task inside them (an inline executor, a tick coarser than the period); returns the
    /// lock taken again, and what was added or the task the timer refused. The task is of a
    /// new generation, made current here.
    fn add_tick<'a>(
        self: &'a Arc<Self>,
        mut state: MutexGuard<'a, State>,
        tick_ms: Option<i64>,
    ) -> (MutexGuard<'a, State>, Result<NextTick, Box<dyn TimerTask>>) {
        state.generation += 1;
        let generation = state.generation;
        let Some(timer) = state.timer.clone() else {
            unreachable!("an active schedule has its timer");
        };
        drop(state);
        let tick = TokenTask::boxed(Arc::clone(self), generation, self.period_ms, ());
        // Past `max_pending`: a refused tick would end the schedule, which nothing could
        // wake again once room is made.
        let added = match timer.try_add_unbounded(tick) {
            Ok(entry) => {
                let now_ms = clock_ms(&*timer, entry.expiration_ms(), self.period_ms);
                let next_ms = tick_ms.map_or(entry.expiration_ms(), |tick_ms| {
                    self.missed.next_tick_ms(tick_ms, now_ms, self.period_ms)
                });
                if next_ms > now_ms && next_ms != entry.expiration_ms() {
                    timer.reschedule(&entry, next_ms - now_ms);
                }
                Ok(NextTick {
                    entry,
                    generation,
                    now_ms,
                    next_ms,
                })
            }
            Err(refused) => Err(refused.into_task()),
        };
        // Dropped unlocked: the schedule may have ended meanwhile, leaving this the last
        // handle of the timer.
        drop(timer);
        (self.state.lock(), added)
    }

    /// The task of generation `generation` expired.
    fn on_tick(self: &Arc<Self>, generation: u64) {
        let mut state = self.state.lock();
        if !state.active || state.generation != generation {
            return;
        }
        state.entry = None;
        if state.running.is_some() {
            state.due = true;
            return;
        }
        state.running = Some(thread::current().id());
        self.run_loop(state);
    }

    /// The task of generation `generation` was dropped unrun.
    fn on_dropped(&self, generation: u64) {
        let mut state = self.state.lock();
        if !state.active || state.generation != generation {
            return;
        }
        log::debug!("schedule_periodic: the timer dropped the next tick; the schedule ends");
        let ended = state.end();
        drop(state);
        drop(ended);
    }

    /// Runs the tick due now, and the ones that come due meanwhile, each after scheduling
    /// the tick after it. `state` is locked, active and marked running by this thread.
    fn run_loop<'a>(self: &'a Arc<Self>, mut state: MutexGuard<'a, State>) {
        loop {
            let tick_ms = state.next_tick_ms;
            let mut told_the_time = None;
            let (locked, added) = self.add_tick(state, tick_ms);
            state = locked;
            match added {
                Err(refused) => {
                    log::debug!(
                        "schedule_periodic: the timer refused the next tick; the schedule ends"
                    );
                    let ended = self.leave(&mut state);
                    drop(state);
                    drop(refused);
                    drop(ended);
                    return;
                }
                // Cancelled, or the timer closed, while the lock was released.
                Ok(next) if !state.active => {
                    let ended = self.leave(&mut state);
                    drop(state);
                    drop(next.entry);
                    drop(ended);
                    return;
                }
                Ok(next) => {
                    state.next_tick_ms = Some(next.next_ms);
                    if state.due || next.next_ms <= next.now_ms {
                        // Due already (or it fired during the calls): this loop runs it
                        // after the current one; its task, if still pending, only told
                        // the time.
                        state.due = true;
                        state.generation += 1;
                        told_the_time = Some(next.entry);
                    } else {
                        state.entry = Some(next.entry);
                    }
                }
            }
            let mut run = state
                .run
                .take()
                .expect("between runs the closure is in the state");
            drop(state);
            if let Some(entry) = told_the_time {
                entry.cancel();
            }

            let unwinding = EndOnUnwind(self);
            run();
            std::mem::forget(unwinding);
            self.runs.fetch_add(1, Ordering::Release);

            state = self.state.lock();
            state.run = Some(run);
            if !state.active {
                let ended = self.leave(&mut state);
                drop(state);
                drop(ended);
                return;
            }
            if !std::mem::take(&mut state.due) {
                state.running = None;
                self.idle.notify_all();
                return;
            }
        }
    }

    /// Leaves the run loop of a schedule that has ended or ends now.
    fn leave(&self, state: &mut State) -> Ended {
        let ended = state.end();
        state.running = None;
        self.idle.notify_all();
        ended
    }
}
