//! Kafka's `SystemTimerReaper`: a timer with its own driver thread.
//!
//! # Ground rules
//!
//! - The wrapped timer is shared (`Arc<T>`) by the handle and the reaper thread; the thread
//!   only calls `advance_clock(200)` on it, in the reapers' loop (`threads::reaper`). The
//!   handle keeps its type, so that `get_ref` can lend it out.
//! - `close` and `stop` ask the loop to stop, then close the wrapped timer (which wakes a
//!   thread blocked in `SystemTimer::advance_clock`), then join the thread. So an idle
//!   reaper closes in the time it takes to wake and join a thread, not in one poll; called
//!   on the reaper thread itself, they do not wait for it.
//!
//! # The reaper thread
//!
//!
//! - Each `poll` may block for up to `period` and returns whether it did work. After one
//!   that did none (a closed timer, a timer that does not block, such as `MockTimer`, or a
//!   panic), the thread waits out the rest of `period` on the stop channel, so it never
//!   spins, and [`ReaperThread::request_stop`] ends that wait at once: it drops the channel's
//!   only sender, and a disconnected channel answers every wait straight away.
//! - A panic in `poll` is caught and logged with the thread's name, and the loop goes on.
//! - `thread` (the join handle) is taken by the first `join` from another thread, which
//!   joins it *while holding the mutex*, so a concurrent `join` returns only once the
//!   thread has ended. A `join` on the reaper thread itself (from a task of a timer that
//!   runs tasks on its caller, such as `MockTimer`) never touches that mutex: the thread
//!   ends after the current poll.
//! - The two mutexes are leaves, never held together, and no user code runs under either.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;

use crate::executor::panic_message;
#[cfg(doc)]
use crate::system_timer::SystemTimer;
use crate::timer::{Timer, forward_timer};

/// How long one poll of the reaper waits for a bucket (Kafka's `WORK_TIMEOUT_MS`).
const WORK_TIMEOUT_MS: i64 = 200;

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
        let thread = ReaperThread::spawn(
            format!("reaper {reaper_name}"),
            reaper_name.to_owned(),
            Duration::from_millis(WORK_TIMEOUT_MS as u64),
            move || polled.advance_clock(WORK_TIMEOUT_MS),
        );
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
    // Stops the loop, closes the wrapped timer (which wakes a thread blocked in its
    // `advance_clock`), then joins the thread; see "Shutting down".
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
        f.debug_struct("SystemTimerReaper")
            .field("is_shutdown", &self.is_shutdown())
            .finish_non_exhaustive()
    }
}

/// A named thread that polls until asked to stop (see the module's ground rules).
pub(crate) struct ReaperThread {
    /// The stop channel's only sender; dropped to stop the thread.
    stop: Mutex<Option<Sender<()>>>,
    /// Taken and joined, under the lock, by the first `join` from another thread.
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    finished: Arc<AtomicBool>,
}

impl ReaperThread {
    /// Starts the thread `thread_name`, which logs as `log_name` and calls `poll` until
    /// [`request_stop`](Self::request_stop).
    ///
    /// # Panics
    ///
    /// Panics if the thread cannot be spawned.
    pub(crate) fn spawn(
        log_name: String,
        thread_name: String,
        period: Duration,
        mut poll: impl FnMut() -> bool + Send + 'static,
    ) -> ReaperThread {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let finished = Arc::new(AtomicBool::new(false));
        let thread = {
            let finished = Arc::clone(&finished);
            std::thread::Builder::new()
                .name(thread_name.clone())
                .spawn(move || {
                    log::debug!("{log_name}: started");
                    reap(&log_name, period, &stopped, &mut poll);
                    log::debug!("{log_name}: stopped");
                    finished.store(true, Ordering::Release);
                })
                .unwrap_or_else(|e| panic!("cannot spawn reaper thread {thread_name:?}: {e}"))
        };
        ReaperThread {
            stop: Mutex::new(Some(stop)),
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            finished,
        }
    }

    /// Asks the thread to stop after its current poll, and wakes it where it waits.
    pub(crate) fn request_stop(&self) {
        drop(self.stop.lock().take());
    }

    /// Unless called on the reaper thread, waits until it has ended.
    pub(crate) fn join(&self) {
        // On the reaper thread itself, there is nothing to wait for: it ends after this poll.
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

/// The thread's loop: polls until the stop channel is disconnected.
fn reap(log_name: &str, period: Duration, stopped: &Receiver<()>, poll: &mut dyn FnMut() -> bool) {
    // Nothing is ever sent: the channel only ever reports its disconnection.
    let stop_requested = || matches!(stopped.try_recv(), Err(TryRecvError::Disconnected));
    while !stop_requested() {
        let started = Instant::now();
        match catch_unwind(AssertUnwindSafe(&mut *poll)) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(panic) => log::error!(
                "{log_name}: a poll panicked: {}; reaping on",
                panic_message(&*panic)
            ),
        }
        if let Err(RecvTimeoutError::Disconnected) = stopped.recv_deadline(started + period) {
            return;
        }
    }
}

impl std::fmt::Debug for ReaperThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaperThread")
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}
