//! Kafka's `SystemTimerReaper`, a timer with a driver thread of its own, and the
//! `SharedSystemTimerReaper`, one driver thread for several timers (KAFKA-19937).
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - A reaper's thread calls `advance_clock(200)` on its timer, in a loop; a shared
//!   reaper's thread gives each timer it drives a `SystemTimer::turn` in a loop, then sleeps
//!   until the earliest due list among them (at most 200 ms, Kafka's poll), unless a wake-up
//!   comes first: an offer that makes a new head of a timer's delay queue, a `drive`, a stop.
//! - The thread's loop (`ReaperThread`) catches and logs a panic out of a poll and goes on;
//!   after a poll with no work it waits, so it never spins. A stop sets `stopping` and wakes
//!   the wait at once. `thread` (the join handle) is taken by the first `join` from another
//!   thread, which joins it while holding the mutex, so a concurrent `join` returns only
//!   once the thread has ended; on the reaper thread itself `join` returns at once.
//! - `close` and `stop` ask the loop to stop, then close the timers (which wakes a thread
//!   blocked in `SystemTimer::advance_clock`), then join the thread: an idle reaper closes
//!   in the time it takes to wake and join a thread.
//! - A shared reaper's `timers` mutex is a leaf: taken by `drive`, by a driven timer's
//!   `close` and by the thread to copy the list, with no other lock held; no timer is
//!   called under it. `closed` is set under it, so no timer joins a closed reaper.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

use crate::executor::panic_message;
use crate::system_timer::SystemTimer;
use crate::timer::{Timer, forward_timer};

/// How long one poll of a reaper waits for a bucket (Kafka's `WORK_TIMEOUT_MS`), and the
/// longest a shared reaper sleeps.
const WORK_TIMEOUT_MS: i64 = 200;
const WORK_TIMEOUT: Duration = Duration::from_millis(WORK_TIMEOUT_MS as u64);

/// Kafka's `SystemTimerReaper`: wraps a timer and drives it from a thread of its own, which
/// calls `advance_clock(200)` until the reaper is closed.
///
/// [`add`](Timer::add) and [`size`](Timer::size) go to the wrapped timer, which
/// [`get_ref`](Self::get_ref) lends out (for a [`SystemTimer`]'s `stats` and `lateness`);
/// [`close`](Timer::close) and [`stop`](Timer::stop) close the wrapped timer and stop the
/// thread. Dropping the reaper closes it.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use timingwheel::{timer_task, SystemTimer, SystemTimerReaper, Timer};
///
/// let timer = SystemTimerReaper::new("reaper", SystemTimer::new("orders"));
/// let (tx, rx) = mpsc::channel();
/// timer.add(timer_task(10, move || tx.send(()).unwrap()));
/// rx.recv_timeout(Duration::from_secs(5)).expect("fired without a driver loop");
/// assert_eq!(timer.get_ref::<SystemTimer>().unwrap().stats().expired, 1);
/// timer.close();
/// assert!(timer.is_shutdown());
/// ```
///
/// A timer the caller shares is a timer too, so the reaper can drive it while the caller
/// keeps it:
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{timer_task, SystemTimer, SystemTimerReaper, Timer};
///
/// let shared = Arc::new(SystemTimer::new("shared"));
/// let reaper = SystemTimerReaper::new("reaper", Arc::clone(&shared));
/// shared.add(timer_task(60_000, || {}));
/// assert_eq!(reaper.size(), 1);
/// assert_eq!(reaper.stop().len(), 1, "closing the reaper closes the shared timer");
/// assert!(shared.is_closed());
/// ```
///
/// # Shutting down
///
/// `close`, `stop` and drop return once the wrapped timer is closed and the reaper thread
/// has ended, in every thread that calls them (except on the reaper thread itself, which
/// cannot wait for itself). An idle reaper takes a few milliseconds: closing the wrapped
/// timer wakes the thread out of its poll. How long they wait for tasks already on the
/// executor is the wrapped timer's `close` (see [`Timer::close`]); a wrapped timer whose
/// `advance_clock` does not return when it is closed holds them up until it does.
///
/// If the wrapped timer is closed by someone else (it is shared), the thread keeps polling
/// it, once per 200 ms, until the reaper itself is closed.
///
/// # Differences from Kafka
///
/// - A panic inside the wrapped timer's `advance_clock` is caught and logged, and the
///   thread goes on reaping.
/// - `close` closes the wrapped timer first, then joins the thread; Kafka joins first,
///   after adding a no-op task to wake the thread's poll. That task would not wake it here
///   (a task due at once bypasses the delay queue), while closing the timer does.
/// - A poll that returns false before its 200 ms are up is followed by a wait for the rest
///   of them: the thread never spins on a closed timer or on one whose `advance_clock`
///   does not block (Kafka's reaper spins on a `MockTimer`).
pub struct SystemTimerReaper {
    timer: Arc<dyn Timer>,
    /// `timer` again, as what `get_ref` downcasts.
    wrapped: Arc<dyn Any + Send + Sync>,
    thread: ReaperThread,
}

impl SystemTimerReaper {
    /// Wraps `timer` and starts the thread `reaper_name` that drives it.
    ///
    /// # Panics
    ///
    /// Panics if the thread cannot be spawned.
    pub fn new<T: Timer + 'static>(reaper_name: &str, timer: T) -> SystemTimerReaper {
        let timer = Arc::new(timer);
        let wrapped = Arc::clone(&timer);
        let polled = Arc::clone(&timer);
        let thread = ReaperThread::spawn(reaper_name, WORK_TIMEOUT, move || {
            polled.advance_clock(WORK_TIMEOUT_MS)
        });
        SystemTimerReaper {
            timer,
            wrapped,
            thread,
        }
    }

    /// Returns the timer it drives if that is a `T`, the type given to
    /// [`new`](Self::new): as std's wrappers lend theirs (`BufReader::get_ref`), with the
    /// type named, since the reaper's own type does not name it.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{timer_task, SystemTimer, SystemTimerReaper, Timer};
    ///
    /// let reaper = SystemTimerReaper::new("reaper", SystemTimer::new("orders"));
    /// reaper.add(timer_task(60_000, || {}));
    /// let timer = reaper.get_ref::<SystemTimer>().expect("a SystemTimer was given");
    /// assert_eq!(timer.stats().pending, 1);
    /// assert_eq!(timer.lateness().count, 0, "nothing ran yet");
    /// assert!(reaper.get_ref::<timingwheel::MockTimer>().is_none());
    /// reaper.close();
    /// ```
    pub fn get_ref<T: Timer + 'static>(&self) -> Option<&T> {
        self.wrapped.downcast_ref()
    }

    /// True once the reaper thread has ended (after [`close`](Timer::close)).
    pub fn is_shutdown(&self) -> bool {
        self.thread.is_finished()
    }
}

forward_timer! {
    impl[] for SystemTimerReaper,
    inner: |self| self.timer,
    wrap: |task| task,
    close: {
        self.thread.request_stop();
        self.timer.close();
        self.thread.join();
    },
    stop: {
        self.thread.request_stop();
        let waiting = self.timer.stop();
        self.thread.join();
        waiting
    },
}

impl Drop for SystemTimerReaper {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for SystemTimerReaper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shutdown = self.is_shutdown();
        write!(f, "SystemTimerReaper {{ is_shutdown: {shutdown}, .. }}")
    }
}

/// One thread that drives several [`SystemTimer`]s, as Kafka's shared reaper (KAFKA-19937)
/// lets several components share one: a service with eight purgatories runs one driver
/// thread instead of eight. Cloning it shares the one thread.
///
/// [`drive`](Self::drive) hands it a timer, which then keeps its own wheel, delay queue,
/// executor, size, stats and close. The thread sleeps until the earliest due task of any
/// timer it drives, and is woken by whatever makes an earlier one: an `add`, a
/// `reschedule` to an earlier time (also through a [`KeyedTimer`](crate::KeyedTimer)), or
/// `drive` of a timer with tasks already due. With nothing due it wakes at most 5 times a
/// second, whatever the number of timers (Kafka's reaper: 5 a second per timer).
///
/// # Sharing its time
///
/// It takes the timers' due work in turns: each turn of a timer flushes at most one flush
/// budget of entries (8,192) and leaves the rest for its next turn, after every other
/// timer's. So a flood of due tasks on one timer holds another timer's due task back by at
/// most about one budget, never until the flood is done. A panic out of a timer's turn is
/// logged and the thread goes on; a closed timer leaves the rotation.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use timingwheel::{timer_task, SharedSystemTimerReaper, SystemTimer, Timer};
///
/// let reaper = SharedSystemTimerReaper::new("reaper");
/// let produce = reaper.drive(SystemTimer::new("produce"));
/// let fetch = reaper.drive(SystemTimer::new("fetch"));
/// let (fired, fired_rx) = mpsc::channel();
/// for timer in [&produce, &fetch] {
///     let fired = fired.clone();
///     timer.add(timer_task(10, move || fired.send(()).unwrap()));
/// }
/// for _ in 0..2 {
///     fired_rx.recv_timeout(Duration::from_secs(5)).expect("one thread drove both");
/// }
/// assert_eq!(reaper.timers(), 2);
/// fetch.close();
/// assert_eq!(reaper.timers(), 1, "the other timer is still driven");
/// reaper.close();
/// assert!(produce.get_ref().is_closed(), "closing the reaper closed what it drove");
/// ```
#[derive(Clone)]
pub struct SharedSystemTimerReaper {
    handle: Arc<SharedHandle>,
}

/// What the clones of a shared reaper share: the last one dropped closes it.
struct SharedHandle {
    driver: Arc<Driver>,
    thread: ReaperThread,
}

/// What the thread and the timers it drives share.
struct Driver {
    /// The open timers it drives; `closed` is set under it (see the ground rules).
    timers: Mutex<Vec<Arc<SystemTimer>>>,
    closed: AtomicBool,
}

impl SharedSystemTimerReaper {
    /// Starts the driver thread, named `reaper_name`.
    ///
    /// # Panics
    ///
    /// Panics if the thread cannot be spawned.
    pub fn new(reaper_name: &str) -> SharedSystemTimerReaper {
        let driver = Arc::new(Driver {
            timers: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        });
        let driven = Arc::clone(&driver);
        let thread = ReaperThread::spawn_waiting(reaper_name, move || driven.turns());
        let handle = Arc::new(SharedHandle { driver, thread });
        SharedSystemTimerReaper { handle }
    }

    /// Drives `timer` from now on. The returned timer delegates to it; closing or dropping
    /// it closes `timer` and stops driving it, and leaves every other timer driven. On a
    /// reaper already closed, the returned timer is closed at once.
    pub fn drive(&self, timer: SystemTimer) -> SharedReaperTimer {
        let timer = Arc::new(timer);
        let driver = Arc::clone(&self.handle.driver);
        let mut timers = driver.timers.lock();
        if driver.closed.load(Ordering::Acquire) {
            drop(timers);
            timer.close();
        } else {
            let wake = self.handle.thread.waker();
            timer.set_waker(move || {
                let _ = wake.try_send(());
            });
            timers.push(Arc::clone(&timer));
            drop(timers);
            // A timer with tasks due already needs a turn before the thread's next wake.
            let _ = self.handle.thread.waker().try_send(());
        }
        SharedReaperTimer { timer, driver }
    }

    /// Returns how many open timers it drives.
    pub fn timers(&self) -> usize {
        self.handle.driver.timers.lock().len()
    }

    /// Closes every timer it still drives (none is left open and undriven), then stops and
    /// joins the thread. Idempotent; dropping the last clone does the same. From a task of a
    /// timer it drives, it does not wait for the thread (which ends after its turn).
    pub fn close(&self) {
        self.handle.close();
    }
}

impl SharedHandle {
    fn close(&self) {
        let timers = {
            let mut timers = self.driver.timers.lock();
            self.driver.closed.store(true, Ordering::Release);
            std::mem::take(&mut *timers)
        };
        timers.iter().for_each(|timer| timer.close());
        self.thread.request_stop();
        self.thread.join();
    }
}

impl Drop for SharedHandle {
    fn drop(&mut self) {
        self.close();
    }
}

impl Driver {
    /// One turn of every timer; returns how long the thread may sleep.
    fn turns(&self) -> Duration {
        let timers = self.timers.lock().clone();
        let mut sleep = WORK_TIMEOUT;
        for timer in timers {
            match catch_unwind(AssertUnwindSafe(|| timer.turn())) {
                Ok(next) => sleep = next.map_or(sleep, |next| next.min(sleep)),
                Err(panic) => {
                    let name = timer.executor_name();
                    log::error!("timer {name}: a turn panicked: {}", panic_message(&*panic));
                }
            }
        }
        sleep
    }
}

impl fmt::Debug for SharedSystemTimerReaper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let closed = self.handle.driver.closed.load(Ordering::Relaxed);
        write!(f, "SharedSystemTimerReaper {{ closed: {closed}, .. }}")
    }
}

/// A [`SystemTimer`] driven by a [`SharedSystemTimerReaper`]: made by its
/// [`drive`](SharedSystemTimerReaper::drive). Closing or dropping it closes the timer and
/// takes it out of the reaper's rotation.
pub struct SharedReaperTimer {
    timer: Arc<SystemTimer>,
    driver: Arc<Driver>,
}

impl SharedReaperTimer {
    /// Returns the timer it is, for its `stats`, `lateness` and `next_expiration_ms`.
    pub fn get_ref(&self) -> &SystemTimer {
        &self.timer
    }

    /// Returns the timer it is, shared.
    pub(crate) fn shared(&self) -> Arc<SystemTimer> {
        Arc::clone(&self.timer)
    }

    /// Takes the timer out of the reaper's rotation.
    fn leave(&self) {
        self.driver
            .timers
            .lock()
            .retain(|timer| !Arc::ptr_eq(timer, &self.timer));
    }
}

forward_timer! {
    impl[] for SharedReaperTimer,
    inner: |self| self.timer,
    wrap: |task| task,
    close: {
        self.timer.close();
        self.leave();
    },
    stop: {
        let waiting = self.timer.stop();
        self.leave();
        waiting
    },
}

impl Drop for SharedReaperTimer {
    fn drop(&mut self) {
        self.close();
    }
}

impl fmt::Debug for SharedReaperTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedReaperTimer {{ timer: {:?} }}", self.timer)
    }
}

/// A named thread that polls until asked to stop (see the module's ground rules).
pub(crate) struct ReaperThread {
    /// Holds at most one wake-up: the thread's next wait ends at once.
    wake: Sender<()>,
    stopping: Arc<AtomicBool>,
    /// Taken and joined, under the lock, by the first `join` from another thread.
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    finished: Arc<AtomicBool>,
}

impl ReaperThread {
    /// Starts the thread `name`, which calls `poll` until stopped; after a poll that did no
    /// work it waits out the rest of `period` (Kafka's reapers: `advanceClock(200)`).
    pub(crate) fn spawn(
        name: &str,
        period: Duration,
        mut poll: impl FnMut() -> bool + Send + 'static,
    ) -> ReaperThread {
        ReaperThread::spawn_waiting(name, move || {
            let deadline = Instant::now() + period;
            match poll() {
                true => Duration::ZERO,
                false => deadline.saturating_duration_since(Instant::now()),
            }
        })
    }

    /// Starts the thread `name`, which calls `poll` until stopped, and after each call
    /// waits as long as it returned, or until woken.
    pub(crate) fn spawn_waiting(
        name: &str,
        mut poll: impl FnMut() -> Duration + Send + 'static,
    ) -> ReaperThread {
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        let (stopping, finished) = (Arc::default(), Arc::<AtomicBool>::default());
        let (stop, done, log_name) = (
            Arc::clone(&stopping),
            Arc::clone(&finished),
            name.to_owned(),
        );
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                log::debug!("reaper {log_name}: started");
                reap(&log_name, &stop, &woken, &mut poll);
                log::debug!("reaper {log_name}: stopped");
                done.store(true, Ordering::Release);
            })
            .unwrap_or_else(|e| panic!("cannot spawn reaper thread {name:?}: {e}"));
        ReaperThread {
            wake,
            stopping,
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            finished,
        }
    }

    /// Returns what wakes the thread out of its wait (`try_send`).
    pub(crate) fn waker(&self) -> Sender<()> {
        self.wake.clone()
    }

    /// Asks the thread to stop, ending its wait at once.
    pub(crate) fn request_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.wake.try_send(());
    }

    /// Waits for the thread to end, unless called on it (it ends after its current poll).
    pub(crate) fn join(&self) {
        if std::thread::current().id() != self.thread_id {
            // Joined under the lock: a concurrent `join` waits here until the thread ended.
            let mut thread = self.thread.lock();
            if let Some(Err(_)) = thread.take().map(JoinHandle::join) {
                log::error!("reaper thread panicked");
            }
        }
    }

    /// True once the thread has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
}

/// The thread's loop: polls, then waits as long as the poll said, until stopped.
fn reap(
    name: &str,
    stopping: &AtomicBool,
    woken: &Receiver<()>,
    poll: &mut dyn FnMut() -> Duration,
) {
    while !stopping.load(Ordering::Acquire) {
        let wait = catch_unwind(AssertUnwindSafe(&mut *poll)).unwrap_or_else(|panic| {
            log::error!(
                "reaper {name}: a poll panicked: {}; reaping on",
                panic_message(&*panic)
            );
            WORK_TIMEOUT
        });
        if !wait.is_zero() && woken.recv_timeout(wait) == Err(RecvTimeoutError::Disconnected) {
            return;
        }
    }
}

impl fmt::Debug for ReaperThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let finished = self.is_finished();
        write!(f, "ReaperThread {{ finished: {finished}, .. }}")
    }
}
