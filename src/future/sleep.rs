//! [`Sleep`]: a future that completes when a timer task expires (see the parent module's
//! ground rules).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::schedule::token::{TokenOwner, TokenTask};
use crate::task::IntoDelayMs;
use crate::timer::Timer;
use crate::timer_task_entry::TimerTaskEntry;

/// A future that completes `delay_ms` after it was created, on `timer`'s clock.
///
/// Runtime agnostic: it works under tokio (current-thread and multi-thread), smol,
/// async-std and `futures::executor`, with nothing but std's [`Waker`]. The timer's executor
/// thread wakes the task that polled it last.
///
/// Its timer task is added when the `Sleep` is created, so the delay counts from then, not
/// from the first poll (as `tokio::time::sleep`). Dropping a pending `Sleep` cancels its task:
/// O(1), and the task is freed inside the drop. [`reset`](Sleep::reset) moves the deadline
/// without allocating while the task is still waiting.
///
/// `Sleep` is `Unpin`, `Send` and `Sync`; it needs no pinning to be polled or reset.
///
/// # A timer that cannot keep the deadline
///
/// On a closed timer, or one that holds its maximum of pending tasks
/// ([`max_pending`](crate::SystemTimerBuilder::max_pending)), a `Sleep` completes at once
/// rather than never; so does a pending one when its timer is closed (or stopped and the
/// task dropped). A future that never completes would hang whoever awaits it.
///
/// # Examples
///
/// ```
/// use std::future::Future;
/// use std::pin::Pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Waker};
/// use timingwheel::{MockTimer, Sleep, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let mut sleep = Sleep::new(timer.clone(), 100);
/// let mut cx = Context::from_waker(Waker::noop());
///
/// assert_eq!(Pin::new(&mut sleep).poll(&mut cx), Poll::Pending);
/// timer.advance_clock(99);
/// assert_eq!(Pin::new(&mut sleep).poll(&mut cx), Poll::Pending);
/// timer.advance_clock(1);
/// assert!(sleep.is_elapsed());
/// assert_eq!(Pin::new(&mut sleep).poll(&mut cx), Poll::Ready(()));
/// ```
pub struct Sleep {
    pub(super) timer: Arc<dyn Timer>,
    /// The task of the current deadline.
    pub(super) entry: TimerTaskEntry,
    shared: Arc<Shared>,
}

/// What a [`Sleep`] shares with its timer task.
struct Shared {
    /// The number of the current deadline. Changed under `state`'s lock by `reset`, and
    /// without it by `Sleep::drop` (nobody polls a dropped sleep; see the ground rules).
    deadline: AtomicU64,
    state: Mutex<State>,
    /// For the ticks of a periodic schedule, the name of its closure, which names the task;
    /// such a task is added past `max_pending`, and is refused only by a closed timer (or a
    /// full store), which ends the schedule (see `Interval::refused`).
    schedule: Option<&'static str>,
}

/// Guarded by [`Shared::state`]'s lock, a leaf.
#[derive(Default)]
struct State {
    /// The current deadline has passed (or its timer dropped its task).
    elapsed: bool,
    /// The waker of the last poll that returned `Pending`.
    waker: Option<Waker>,
}

/// The timer task of one deadline: a token task whose token is the deadline's number. It
/// fires whether it runs or is dropped unrun by a closed timer: it marks the deadline
/// elapsed and wakes the last poller, unless the sleep has moved on to another deadline
/// since (a cancelled task fires an old deadline, which changes nothing).
impl TokenOwner for Shared {
    type Payload = ();

    fn report(self: Arc<Self>, deadline: u64, (): (), _expired: bool) {
        // Without the lock first: a sleep's own drop and cancel land here on every drop. (A
        // wake for a new deadline reached the timer after the number was stored: it sees it.)
        if self.deadline.load(Ordering::Acquire) != deadline {
            return;
        }
        let mut state = self.state.lock();
        if self.deadline.load(Ordering::Relaxed) != deadline || state.elapsed {
            return;
        }
        state.elapsed = true;
        let waker = state.waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn task_name(&self, (): &()) -> &'static str {
        self.schedule.unwrap_or("timingwheel::Sleep")
    }
}

impl Sleep {
    /// Creates a future that completes `delay_ms` from now on `timer`'s clock, and adds its
    /// task to `timer` at once.
    ///
    /// The delay is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
    /// [`IntoDelayMs`]). Zero or negative: the task is handed to the timer's executor inside
    /// this call (a `MockTimer` runs it inside the call), and the sleep completes as soon as
    /// the executor gets to it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use timingwheel::{MockTimer, Sleep, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let now = timer.time().hi_res_clock_ms();
    /// assert_eq!(Sleep::new(timer.clone(), 250).expiration_ms(), now + 250);
    /// assert_eq!(Sleep::new(timer.clone(), Duration::from_secs(2)).expiration_ms(), now + 2_000);
    /// assert!(Sleep::new(timer.clone(), 0).is_elapsed(), "a MockTimer runs it inside `new`");
    /// ```
    pub fn new(timer: Arc<dyn Timer>, delay_ms: impl IntoDelayMs) -> Sleep {
        Sleep::build(timer, delay_ms.into_delay_ms(), None)
    }

    /// A sleep, or with `schedule`, a periodic schedule's (see [`Shared::schedule`]).
    pub(super) fn build(
        timer: Arc<dyn Timer>,
        delay_ms: i64,
        schedule: Option<&'static str>,
    ) -> Sleep {
        let shared = Arc::new(Shared {
            deadline: AtomicU64::new(0),
            state: Mutex::default(),
            schedule,
        });
        let entry = shared.add(&*timer, 0, delay_ms);
        Sleep {
            timer,
            entry,
            shared,
        }
    }

    /// Returns the deadline: the instant of creation (or of the last
    /// [`reset`](Sleep::reset)) plus the delay, on the timer's clock, saturating.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{MockTimer, Sleep, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let sleep = Sleep::new(timer.clone(), i64::MAX);
    /// assert_eq!(sleep.expiration_ms(), i64::MAX, "saturated, never negative");
    /// ```
    pub fn expiration_ms(&self) -> i64 {
        self.entry.expiration_ms()
    }

    /// Returns true once the current deadline has passed (its task fired), or once the
    /// timer could no longer keep it (closed, full): when the next poll returns `Ready`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{MockTimer, Sleep, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let sleep = Sleep::new(timer.clone(), 10);
    /// assert!(!sleep.is_elapsed());
    /// timer.close();
    /// assert!(sleep.is_elapsed(), "a closed timer cannot wake it later: it completes now");
    /// ```
    pub fn is_elapsed(&self) -> bool {
        self.shared.state.lock().elapsed
    }

    /// Moves the deadline to `delay_ms` from now, on the timer's clock, also after the
    /// sleep has completed: it is then pending again until the new deadline.
    ///
    /// While the task waits it is moved with [`Timer::reschedule`]: O(1), no allocation.
    /// If it already fired, a new task is added, and a wake from the old one that is still
    /// on its way is ignored: the sleep never completes before its new deadline. The waker
    /// of the last poll stays registered.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{MockTimer, Sleep, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let mut idle = Sleep::new(timer.clone(), 100);
    /// timer.advance_clock(90);
    /// idle.reset(100); // activity: the idle timeout starts over
    /// timer.advance_clock(90);
    /// assert!(!idle.is_elapsed());
    /// timer.advance_clock(10);
    /// assert!(idle.is_elapsed());
    /// idle.reset(50); // and once more after it fired
    /// assert!(!idle.is_elapsed());
    /// assert_eq!(idle.expiration_ms(), timer.time().hi_res_clock_ms() + 50);
    /// ```
    pub fn reset(&mut self, delay_ms: impl IntoDelayMs) {
        let delay_ms = delay_ms.into_delay_ms();
        if self.timer.reschedule(&self.entry, delay_ms) {
            return;
        }
        let deadline = {
            let mut state = self.shared.state.lock();
            let deadline = self.shared.deadline.load(Ordering::Relaxed).wrapping_add(1);
            self.shared.deadline.store(deadline, Ordering::Release);
            state.elapsed = false;
            deadline
        };
        // Nothing to cancel unless the timer refused the move for another reason; the
        // cancelled task's drop fires an old deadline, which changes nothing.
        self.entry.cancel();
        self.entry = self.shared.add(&*self.timer, deadline, delay_ms);
    }
}

impl Shared {
    /// Adds the task of deadline number `deadline`, due `delay_ms` from now, to `timer`.
    fn add(self: &Arc<Self>, timer: &dyn Timer, deadline: u64, delay_ms: i64) -> TimerTaskEntry {
        let task = TokenTask::boxed(Arc::clone(self), deadline, delay_ms, ());
        match self.schedule {
            None => timer.add(task),
            // The refused task's drop fires the deadline, as `add` would.
            Some(_) => timer
                .try_add_unbounded(task)
                .unwrap_or_else(|_| TimerTaskEntry::refused(delay_ms)),
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.shared.state.lock();
        if state.elapsed {
            return Poll::Ready(());
        }
        let replaced = match &state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => None,
            _ => state.waker.replace(cx.waker().clone()),
        };
        drop(state);
        // A waker's drop may run its runtime's code: not under the lock.
        drop(replaced);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        // The task's drop inside `cancel` now fires an old deadline: it wakes nobody.
        self.shared.deadline.fetch_add(1, Ordering::Release);
        self.entry.cancel();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock (`is_elapsed` does).
        f.debug_struct("Sleep")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}
