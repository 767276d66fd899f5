//! The loop of Kafka's reapers: a named thread that polls until asked to stop, shared by
//! `SystemTimerReaper` and the purgatory's expiration reaper.
//!
//! # Ground rules
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

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;

use super::executor::panic_message;

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
