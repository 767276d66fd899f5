//! The thread that runs expired tasks (Kafka's `Executors.newFixedThreadPool(1)`).
//!
//! # Ground rules
//!
//! - Jobs go to a [`threadpool::ThreadPool`] of one thread named `executor-{name}`.
//!   A flush hands over its expired tasks in batches, one job per batch, rather than one
//!   channel send per task.
//! - `in_flight` counts tasks handed over and not yet finished. It is changed with atomics;
//!   `idle` (with its mutex) only wakes a `close` that waits for it to reach zero. A job
//!   counts its batch finished from a drop guard, so the count comes down even if the job
//!   unwinds.
//! - A task's panic is caught, logged at `error!`, and the batch goes on. So is a panic in
//!   the `Drop` of the panic's payload (a payload is user data too): nothing a task does
//!   unwinds out of [`run_task`].
//! - Every `close` of the timer waits for the tasks in flight, up to one deadline, set by
//!   the first wait (`shutdown_deadline`): a task that never ends holds up a shutdown once,
//!   not once per caller.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use threadpool::ThreadPool;

use crate::TimerTask;

/// The executor of one timer.
pub(crate) struct Executor {
    pool: ThreadPool,
    tracker: Arc<Tracker>,
    /// When every wait for the tasks in flight gives up; set by the first wait.
    shutdown_deadline: OnceLock<Instant>,
}

struct Tracker {
    in_flight: AtomicUsize,
    lock: Mutex<()>,
    idle: Condvar,
    /// Emptied batch buffers, handed back by the executor thread for the next batches.
    buffers: Mutex<Vec<Vec<Box<dyn TimerTask>>>>,
}

/// Tasks per batch buffer: a flush hands over at most one chunk's expired tasks per job.
const BATCH: usize = 512;

/// Emptied batch buffers kept for reuse (8 KiB each): the executor can fall this many jobs
/// behind the driver before a flush allocates one.
const KEPT_BUFFERS: usize = 8;

thread_local! {
    /// The tracker of the executor whose job this thread is running (0: none).
    static RUNNING_FOR: Cell<usize> = const { Cell::new(0) };
}

impl Executor {
    /// Starts the executor thread, named `thread_name`.
    pub(crate) fn new(thread_name: String) -> Executor {
        Executor {
            pool: threadpool::Builder::new()
                .num_threads(1)
                .thread_name(thread_name)
                .build(),
            tracker: Arc::new(Tracker {
                in_flight: AtomicUsize::new(0),
                lock: Mutex::new(()),
                idle: Condvar::new(),
                buffers: Mutex::new(Vec::new()),
            }),
            shutdown_deadline: OnceLock::new(),
        }
    }

    /// Returns an empty buffer for a batch of up to 512 tasks: one the executor thread
    /// handed back, or a new one.
    ///
    /// The timer's driver fills these while it flushes. Reusing them keeps large
    /// allocations off its path: with glibc, each one first coalesces every small block
    /// freed since the last one (the executor frees every task it runs), which would make
    /// the driver pay for the tasks' frees in the middle of a flush.
    pub(crate) fn batch(&self) -> Vec<Box<dyn TimerTask>> {
        self.tracker
            .buffers
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Hands `tasks` to the executor thread, to run in order. A buffer from
    /// [`batch`](Executor::batch) goes back to be reused once its tasks have run.
    pub(crate) fn submit_batch(&self, mut tasks: Vec<Box<dyn TimerTask>>) {
        if tasks.is_empty() {
            self.tracker.recycle(tasks);
            return;
        }
        let count = tasks.len();
        self.tracker.in_flight.fetch_add(count, Ordering::AcqRel);
        let id = Arc::as_ptr(&self.tracker) as usize;
        // Counts the batch finished when the job ends, however it ends: also if it unwinds
        // (then the tasks not run yet are dropped first) or is dropped unrun.
        let finished = Finished {
            tracker: Arc::clone(&self.tracker),
            count,
        };
        self.pool.execute(move || {
            let finished = finished;
            RUNNING_FOR.with(|running| running.set(id));
            for task in tasks.drain(..) {
                run_task(task);
            }
            RUNNING_FOR.with(|running| running.set(0));
            finished.tracker.recycle(tasks);
        });
    }

    /// True if the calling thread is this executor's, inside one of its jobs.
    pub(crate) fn is_current_thread(&self) -> bool {
        let id = Arc::as_ptr(&self.tracker) as usize;
        RUNNING_FOR.with(|running| running.get() == id)
    }

    /// Waits until every task handed over so far has finished, but not past `timeout` after
    /// the first call: concurrent and later callers share that deadline. Returns the number
    /// still unfinished.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> usize {
        let deadline = *self
            .shutdown_deadline
            .get_or_init(|| Instant::now() + timeout);
        let mut guard = self.tracker.lock.lock();
        loop {
            let left = self.tracker.in_flight.load(Ordering::Acquire);
            if left == 0
                || self
                    .tracker
                    .idle
                    .wait_until(&mut guard, deadline)
                    .timed_out()
            {
                return self.tracker.in_flight.load(Ordering::Acquire);
            }
        }
    }
}

impl Tracker {
    /// Keeps an emptied batch buffer for reuse, if it is one and there is room.
    fn recycle(&self, buffer: Vec<Box<dyn TimerTask>>) {
        debug_assert!(buffer.is_empty());
        if buffer.capacity() == BATCH {
            let mut buffers = self.buffers.lock();
            if buffers.len() < KEPT_BUFFERS {
                buffers.push(buffer);
            }
        }
    }

    fn finished(&self, count: usize) {
        if self.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            let _guard = self.lock.lock();
            self.idle.notify_all();
        }
    }
}

/// Counts a batch of `count` tasks finished when dropped.
struct Finished {
    tracker: Arc<Tracker>,
    count: usize,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.tracker.finished(self.count);
    }
}

/// Runs one task, catching and logging a panic; never unwinds.
fn run_task(task: Box<dyn TimerTask>) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.run())) {
        log::error!("timer task panicked: {}", panic_message(&*payload));
        drop_payload(payload);
    }
}

/// Drops a panic's payload, whose `Drop` is user code and may panic in turn. The payload of
/// that second panic is user data as well, so it is leaked rather than dropped: a few
/// bytes, once, instead of a chain of panics out of the executor's job.
fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(|| drop(payload))) {
        log::error!(
            "dropping a timer task's panic payload panicked: {}; leaking that panic's payload",
            panic_message(&*again)
        );
        std::mem::forget(again);
    }
}

/// The message of a caught panic, or `(no message)`.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("in_flight", &self.tracker.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
