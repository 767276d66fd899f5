//! The fixed pool of threads that run expired tasks (Kafka's
//! `Executors.newFixedThreadPool(1)`, with any number of threads).
//!
//! # Ground rules
//!
//! - Batches of tasks go to the pool's threads through one `crossbeam-channel` queue; any
//!   idle thread takes the next batch. A flush hands over its expired tasks a batch at a
//!   time rather than one send per task.
//! - With more than one thread, a thread that starts a task while another thread is idle
//!   first sends the rest of its batch back to the queue, so that no task waits behind a
//!   slow one while a thread is free. With one thread nothing is split: tasks run in the
//!   order they were handed over.
//! - `in_flight` counts tasks handed over and not yet finished (atomics); `idle` (with its
//!   mutex) only wakes a `close` that waits for it to fall. Each job counts its tasks
//!   finished from a drop guard, so the count comes down even if the job unwinds.
//! - A task's panic is caught, logged at `error!`, and the batch goes on. So is a panic in
//!   the `Drop` of the panic's payload: nothing a task does unwinds out of [`run_task`].
//! - Every `close` of the timer waits for the tasks in flight, up to one deadline set by the
//!   first wait (`shutdown_deadline`), then stops the threads and joins them. On a pool
//!   thread itself it waits for the other threads' tasks, not for its own (a task cannot
//!   wait for itself, nor for the rest of its own batch, which runs after it).
//! - Lock order: the executor's mutexes (`idle`'s, `threads`, `buffers`) are leaves; none
//!   is held while a task runs or while another lock is taken.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::TimerTask;

/// Tasks per batch buffer: a flush hands over at most one chunk's expired tasks per job.
const BATCH: usize = 512;

/// Emptied batch buffers kept for reuse (8 KiB each): the executor can fall this many jobs
/// behind the driver before a flush allocates one.
const KEPT_BUFFERS: usize = 8;

/// What the pool's threads receive.
enum Job {
    Run(Vec<Box<dyn TimerTask>>),
    /// Ends the thread that receives it (one per thread, sent at shutdown).
    Stop,
}

/// The executor pool of one timer.
pub(crate) struct Executor {
    jobs: Sender<Job>,
    tracker: Arc<Tracker>,
    /// The pool's threads, taken and joined by the first shutdown from outside the pool.
    threads: Mutex<Vec<JoinHandle<()>>>,
    thread_count: usize,
    /// When every wait for the tasks in flight gives up; set by the first wait.
    shutdown_deadline: OnceLock<Instant>,
}

struct Tracker {
    in_flight: AtomicUsize,
    /// Threads waiting for a job: a thread that starts a task while this is not zero hands
    /// the rest of its batch to them.
    idle_threads: AtomicUsize,
    /// Set once the threads are told to stop: from then on no batch is split, so that no
    /// part of one is queued behind the stop messages.
    stopping: AtomicBool,
    lock: Mutex<()>,
    idle: Condvar,
    /// Emptied batch buffers, handed back by the pool's threads for the next batches.
    buffers: Mutex<Vec<Vec<Box<dyn TimerTask>>>>,
}

thread_local! {
    /// The tracker of the pool this thread belongs to (0: none), and how many tasks of its
    /// current job are not finished yet (the running one included).
    static RUNNING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

impl Executor {
    /// Starts `threads` threads, named `{name}` if there is one, else `{name}-{i}`.
    ///
    /// # Panics
    ///
    /// Panics if a thread cannot be spawned.
    pub(crate) fn new(name: &str, threads: usize) -> Executor {
        assert!(threads > 0, "an executor needs at least one thread");
        let (jobs, queue) = crossbeam_channel::unbounded();
        let tracker = Arc::new(Tracker {
            in_flight: AtomicUsize::new(0),
            idle_threads: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            lock: Mutex::new(()),
            idle: Condvar::new(),
            buffers: Mutex::new(Vec::new()),
        });
        let handles = (0..threads)
            .map(|i| {
                let thread_name = if threads == 1 {
                    name.to_owned()
                } else {
                    format!("{name}-{i}")
                };
                let queue = queue.clone();
                let jobs = jobs.clone();
                let tracker = Arc::clone(&tracker);
                std::thread::Builder::new()
                    .name(thread_name.clone())
                    .spawn(move || work(&queue, &jobs, &tracker))
                    .unwrap_or_else(|e| panic!("cannot spawn executor thread {thread_name:?}: {e}"))
            })
            .collect();
        Executor {
            jobs,
            tracker,
            threads: Mutex::new(handles),
            thread_count: threads,
            shutdown_deadline: OnceLock::new(),
        }
    }

    /// Returns an empty buffer for a batch of up to 512 tasks: one the pool handed back, or
    /// a new one.
    ///
    /// The timer's driver fills these while it flushes. Reusing them keeps allocations off
    /// its path (see `docs/design.md`, "Memory").
    pub(crate) fn batch(&self) -> Vec<Box<dyn TimerTask>> {
        self.tracker
            .buffers
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Hands `tasks` to the pool, to run in order (on one thread, unless another is idle).
    /// A buffer from [`batch`](Executor::batch) goes back to be reused once its tasks ran.
    pub(crate) fn submit_batch(&self, tasks: Vec<Box<dyn TimerTask>>) {
        if tasks.is_empty() {
            self.tracker.recycle(tasks);
            return;
        }
        self.tracker
            .in_flight
            .fetch_add(tasks.len(), Ordering::AcqRel);
        if let Err(refused) = self.jobs.send(Job::Run(tasks)) {
            // Unreachable while `self` lives: the pool's threads hold the receiver until
            // they are stopped, and no task is handed over after that.
            if let Job::Run(tasks) = refused.into_inner() {
                self.tracker.finished(tasks.len());
            }
        }
    }

    /// True if the calling thread is one of this pool's, inside one of its jobs.
    pub(crate) fn is_current_thread(&self) -> bool {
        RUNNING.with(|running| running.get().0 == self.tracker.id())
    }

    /// Waits until every task handed over so far has finished — on a pool thread, every
    /// task but those of its own job — but not past `timeout` after the first call:
    /// concurrent and later callers share that deadline. Returns the number still
    /// unfinished (its own job's excluded).
    pub(crate) fn wait_idle(&self, timeout: Duration) -> usize {
        let deadline = *self
            .shutdown_deadline
            .get_or_init(|| Instant::now() + timeout);
        let own = RUNNING.with(|running| {
            let (id, outstanding) = running.get();
            if id == self.tracker.id() {
                outstanding
            } else {
                0
            }
        });
        let left = || {
            self.tracker
                .in_flight
                .load(Ordering::Acquire)
                .saturating_sub(own)
        };
        let mut guard = self.tracker.lock.lock();
        loop {
            if left() == 0
                || self
                    .tracker
                    .idle
                    .wait_until(&mut guard, deadline)
                    .timed_out()
            {
                return left();
            }
        }
    }

    /// Stops the pool's threads once the queue before them is done, and joins them, unless
    /// `join` is false (tasks still running past the deadline) or this is a pool thread: it
    /// cannot join itself, and it ends once its job is done. Concurrent callers return once
    /// the first one has joined them.
    pub(crate) fn shut_down(&self, join: bool) {
        let mut threads = self.threads.lock();
        if threads.is_empty() {
            return;
        }
        self.tracker.stopping.store(true, Ordering::Release);
        for _ in 0..self.thread_count {
            // Fails only if every thread already ended, which needs these very messages.
            let _ = self.jobs.send(Job::Stop);
        }
        let handles = std::mem::take(&mut *threads);
        if join && !self.is_current_thread() {
            for handle in handles {
                if handle.join().is_err() {
                    log::error!("an executor thread panicked");
                }
            }
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // The threads hold senders of their own queue (to hand work to each other), so
        // they end only on a stop message.
        self.shut_down(true);
    }
}

impl Tracker {
    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

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
        if count > 0 && self.in_flight.fetch_sub(count, Ordering::AcqRel) == count {
            let _guard = self.lock.lock();
            self.idle.notify_all();
        }
    }
}

/// A pool thread's loop: runs the jobs it receives until told to stop.
fn work(queue: &Receiver<Job>, jobs: &Sender<Job>, tracker: &Arc<Tracker>) {
    loop {
        tracker.idle_threads.fetch_add(1, Ordering::AcqRel);
        let job = queue.recv();
        tracker.idle_threads.fetch_sub(1, Ordering::AcqRel);
        match job {
            Ok(Job::Run(tasks)) => run_batch(tasks, jobs, tracker),
            Ok(Job::Stop) | Err(_) => return,
        }
    }
}

/// Runs a batch of tasks in order. Before each task, if another thread is idle, hands it
/// the rest of the batch (see the module's ground rules).
fn run_batch(mut tasks: Vec<Box<dyn TimerTask>>, jobs: &Sender<Job>, tracker: &Arc<Tracker>) {
    // Counts the job's tasks finished when it ends, however it ends: also if it unwinds
    // (the tasks not run yet are then dropped first).
    let mut finished = Finished {
        tracker,
        count: tasks.len(),
    };
    let mut at = 0;
    while at < tasks.len() {
        let rest = tasks.len() - at - 1;
        if rest > 0
            && tracker.idle_threads.load(Ordering::Acquire) > 0
            && !tracker.stopping.load(Ordering::Acquire)
        {
            let handed = tasks.split_off(at + 1);
            finished.count -= handed.len();
            if let Err(refused) = jobs.send(Job::Run(handed)) {
                // The queue outlives every thread that reads it: cannot happen.
                if let Job::Run(back) = refused.into_inner() {
                    finished.count += back.len();
                    tasks.extend(back);
                }
            }
        }
        RUNNING.with(|running| running.set((tracker.id(), finished.count - at)));
        // `take` would need a default; swapping in a finished placeholder keeps `tasks`
        // whole for the drop guard.
        let task = std::mem::replace(&mut tasks[at], Box::new(Done));
        run_task(task);
        at += 1;
    }
    RUNNING.with(|running| running.set((0, 0)));
    tasks.clear();
    tracker.recycle(tasks);
}

/// Stands in the batch for a task that already ran.
struct Done;

impl TimerTask for Done {
    fn delay_ms(&self) -> i64 {
        0
    }
    fn run(self: Box<Self>) {}
}

/// Counts a job's tasks finished when dropped.
struct Finished<'a> {
    tracker: &'a Tracker,
    count: usize,
}

impl Drop for Finished<'_> {
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
            .field("threads", &self.thread_count)
            .field("in_flight", &self.tracker.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
