//! Kafka's `SystemTimerReaper`: a timer with its own driver thread.
//!
//! # Ground rules
//!
//! - The wrapped timer is shared (`Arc`) by the handle and the reaper thread; the thread
//!   only calls `advance_clock(200)` on it.
//! - `shutdown` is set once, by `close`; the thread checks it between polls, so `close`
//!   waits for at most one poll (200 ms) plus the flush in progress.
//! - `thread` (the join handle) is taken by the first `close` from another thread, which
//!   joins it *while holding the mutex*, so a concurrent `close` returns only once the
//!   thread has ended. A `close` on the reaper thread itself (from a task of a timer that
//!   runs tasks on its caller, such as `MockTimer`) never touches the mutex: it only sets
//!   `shutdown` and closes the timer, and the thread ends after the current poll.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, ThreadId};

use parking_lot::Mutex;

use crate::{Timer, TimerTask, TimerTaskEntry};

/// How long one poll of the reaper waits for a bucket (Kafka's `WORK_TIMEOUT_MS`).
const WORK_TIMEOUT_MS: i64 = 200;

/// Kafka's `SystemTimerReaper`: wraps a timer and drives it from a thread of its own, which
/// calls `advance_clock(200)` until the reaper is closed.
///
/// [`add`](Timer::add) and [`size`](Timer::size) go to the wrapped timer;
/// [`close`](Timer::close) stops the thread, then closes the wrapped timer. Dropping the
/// reaper closes it.
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
/// timer.close();
/// assert!(timer.is_shutdown());
/// ```
///
/// # Differences from Kafka
///
/// A panic inside the wrapped timer's `advance_clock` is caught and logged, and the thread
/// goes on reaping. `close` does not add a no-op task to wake the thread: that task would
/// not wake it (an expired task bypasses the delay queue), so the wait is one poll either
/// way.
pub struct SystemTimerReaper {
    timer: Arc<dyn Timer>,
    shutdown: Arc<AtomicBool>,
    /// Taken and joined, under the lock, by the first `close` from another thread.
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
    finished: Arc<AtomicBool>,
}

impl SystemTimerReaper {
    /// Wraps `timer` and starts the thread `reaper_name` that drives it.
    ///
    /// # Panics
    ///
    /// Panics if the thread cannot be spawned.
    pub fn new<T: Timer + 'static>(reaper_name: &str, timer: T) -> SystemTimerReaper {
        let timer: Arc<dyn Timer> = Arc::new(timer);
        let shutdown = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let thread = {
            let timer = Arc::clone(&timer);
            let shutdown = Arc::clone(&shutdown);
            let finished = Arc::clone(&finished);
            let name = reaper_name.to_owned();
            std::thread::Builder::new()
                .name(reaper_name.to_owned())
                .spawn(move || {
                    log::debug!("reaper {name}: started");
                    while !shutdown.load(Ordering::Acquire) {
                        let poll = catch_unwind(AssertUnwindSafe(|| {
                            timer.advance_clock(WORK_TIMEOUT_MS);
                        }));
                        if poll.is_err() {
                            log::error!("reaper {name}: advance_clock panicked; reaping on");
                        }
                    }
                    log::debug!("reaper {name}: stopped");
                    finished.store(true, Ordering::Release);
                })
                .unwrap_or_else(|e| panic!("cannot spawn reaper thread {reaper_name:?}: {e}"))
        };
        SystemTimerReaper {
            timer,
            shutdown,
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
            finished,
        }
    }

    /// True once the reaper thread has ended (after [`close`](Timer::close)).
    pub fn is_shutdown(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
}

impl Timer for SystemTimerReaper {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        self.timer.add(task)
    }

    /// Calls the wrapped timer's `advance_clock`, alongside the reaper thread.
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.timer.advance_clock(timeout_ms)
    }

    fn size(&self) -> usize {
        self.timer.size()
    }

    fn close(&self) {
        self.stop_thread();
        self.timer.close();
    }

    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.stop_thread();
        self.timer.stop()
    }
}

impl SystemTimerReaper {
    /// Tells the reaper thread to end and, unless called on that thread, waits until it has.
    fn stop_thread(&self) {
        self.shutdown.store(true, Ordering::Release);
        // On the reaper thread itself, there is nothing to wait for: it ends after this poll.
        if std::thread::current().id() != self.thread_id {
            // Joined under the lock: a concurrent `close` waits here until the thread ended.
            let mut thread = self.thread.lock();
            let joined = thread.take().map(JoinHandle::join);
            if let Some(Err(_)) = joined {
                log::error!("reaper thread panicked");
            }
        }
    }
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
