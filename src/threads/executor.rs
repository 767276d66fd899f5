//! The fixed pool of threads that run expired tasks (Kafka's
//! `Executors.newFixedThreadPool(1)`, with any number of threads).
//!
//! # Ground rules
//!
//! - Tasks go to the pool's threads through one `crossbeam-channel` queue; any idle thread
//!   takes the next message. With one thread (Kafka's), a flush hands over its expired
//!   tasks a batch per message, and they run in the order they were handed over. With more,
//!   each task is a message of its own, so that no task ever waits behind a slow one while
//!   a thread is free; tasks that expired together then run concurrently, in no order.
//! - `in_flight` counts tasks handed over and not yet finished (atomics). A `close` that
//!   waits for it registers in `waiters`, and while any does, every task that finishes
//!   wakes it (`idle`, with its mutex); otherwise finishing a task takes no lock. A job
//!   counts its tasks finished from a drop guard, so the count comes down even if it
//!   unwinds.
//! - A task's panic is caught, logged at `error!`, and the pool goes on. So is a panic in
//!   the `Drop` of the panic's payload: nothing a task does unwinds out of [`run_task`].
//! - Each pool thread records the name of the task it runs (`running`), for the warning
//!   of a `close` that gave up waiting, which `gave_up` lets the timer log once.
//! - Every `close` of the timer waits for the tasks in flight, up to one deadline set by the
//!   first wait (`shutdown_deadline`), then stops the threads and joins them. A task cannot
//!   wait for itself: a `close` on a pool thread waits only for the other threads' tasks
//!   (and, with one thread, for nothing: the tasks queued behind it run after it returns).
//!   The threads it cannot join (its own among them) are joined by the next `close` or the
//!   drop from outside the pool.
//! - Lock order (see `crate::lock_order`): the executor's mutexes (`idle`'s, `threads`,
//!   `buffers`) are leaves; none is held while a task runs or while another lock is taken, and none is
//!   taken under a lock of the timer.

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

use super::running::{Recorder, RunningTasks};
use crate::prefetch::prefetch;
use crate::task::TimerTask;

/// Tasks per batch buffer: a flush hands over at most one chunk's expired tasks per job
/// (`system_timer::flush`'s chunk, 64 entries).
const BATCH: usize = 64;

/// Emptied batch buffers kept for reuse (1 KiB each, 32 KiB in all): the executor can
/// fall this many jobs behind the driver before a flush allocates one.
const KEPT_BUFFERS: usize = 32;

/// What the pool's threads receive.
enum Job {
    /// Tasks to run in order (a pool of one thread).
    Batch(Vec<Box<dyn TimerTask>>),
    /// One task (a pool of several threads).
    One(Box<dyn TimerTask>),
    /// Ends the thread that receives it (one per thread, sent at shutdown).
    Stop,
}

/// The executor pool of one timer.
pub(crate) struct Executor {
    jobs: Sender<Job>,
    tracker: Arc<Tracker>,
    /// The pool's threads not joined yet.
    threads: Mutex<Vec<JoinHandle<()>>>,
    thread_count: usize,
    /// Set when the stop messages are sent (once).
    stopped: AtomicBool,
    /// When every wait for the tasks in flight gives up; set by the first wait.
    shutdown_deadline: OnceLock<Instant>,
    /// Set by the first wait that gave up (see [`Executor::first_give_up`]).
    gave_up: AtomicBool,
}

struct Tracker {
    in_flight: AtomicUsize,
    /// Threads waiting in `wait_idle`: while there are any, each finished task wakes them.
    waiters: AtomicUsize,
    /// Of those, the pool's own threads, each with its running task still in flight.
    pool_waiters: AtomicUsize,
    lock: Mutex<()>,
    idle: Condvar,
    /// Emptied batch buffers, handed back by the pool's threads for the next batches.
    buffers: Mutex<Vec<Vec<Box<dyn TimerTask>>>>,
    /// The names of the tasks the pool's threads run.
    running: RunningTasks,
}

thread_local! {
    /// The tracker of the pool whose task this thread is running (0: none).
    static RUNNING_FOR: Cell<usize> = const { Cell::new(0) };
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
            waiters: AtomicUsize::new(0),
            pool_waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            idle: Condvar::new(),
            buffers: Mutex::new(Vec::new()),
            running: RunningTasks::new(threads),
        });
        let handles = (0..threads)
            .map(|i| {
                let thread_name = if threads == 1 {
                    name.to_owned()
                } else {
                    format!("{name}-{i}")
                };
                let queue = queue.clone();
                let tracker = Arc::clone(&tracker);
                std::thread::Builder::new()
                    .name(thread_name.clone())
                    .spawn(move || work(&queue, &tracker, i))
                    .unwrap_or_else(|e| panic!("cannot spawn executor thread {thread_name:?}: {e}"))
            })
            .collect();
        Executor {
            jobs,
            tracker,
            threads: Mutex::new(handles),
            thread_count: threads,
            stopped: AtomicBool::new(false),
            shutdown_deadline: OnceLock::new(),
            gave_up: AtomicBool::new(false),
        }
    }

    /// Returns an empty buffer for a batch of up to 64 tasks: one the pool handed back, or
    /// a new one.
    ///
    /// The timer's driver fills these while it flushes. Reusing them keeps allocations off
    /// its path (see `crate::lock_order`: no allocation under a shard's lock).
    pub(crate) fn batch(&self) -> Vec<Box<dyn TimerTask>> {
        self.tracker
            .buffers
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Hands `tasks` to the pool in two steps: this call counts them in flight, which the
    /// caller does under the lock that took them out of the store (so that a `close` waits
    /// for them); [`Handover::send`] wakes the pool, which the caller does once it has let
    /// go of that lock, so that a pool thread woken onto the caller's processor does not
    /// preempt it while other threads wait for the lock.
    pub(crate) fn hand_over(&self, tasks: Vec<Box<dyn TimerTask>>) -> Handover<'_> {
        if !tasks.is_empty() {
            self.tracker
                .in_flight
                .fetch_add(tasks.len(), Ordering::AcqRel);
        }
        Handover {
            executor: self,
            tasks,
        }
    }

    /// Sends counted tasks to the pool. A buffer from [`batch`](Executor::batch) goes back
    /// to be reused once its tasks ran (or at once, for a pool of several threads).
    fn send_counted(&self, mut tasks: Vec<Box<dyn TimerTask>>) {
        if tasks.is_empty() {
            self.tracker.recycle(tasks);
        } else if self.thread_count == 1 {
            self.send(Job::Batch(tasks));
        } else {
            for task in tasks.drain(..) {
                self.send(Job::One(task));
            }
            self.tracker.recycle(tasks);
        }
    }

    fn send(&self, job: Job) {
        if let Err(refused) = self.jobs.send(job) {
            // Unreachable while `self` lives: the pool's threads hold the receiver until
            // they are stopped, and no task is handed over after that.
            self.tracker.finished(refused.into_inner().len());
        }
    }

    /// True if the calling thread is one of this pool's, running one of its tasks.
    pub(crate) fn is_current_thread(&self) -> bool {
        RUNNING_FOR.with(|running| running.get() == self.tracker.id())
    }

    /// Waits until every task handed over so far has finished, but not past `timeout` after
    /// the first call: concurrent and later callers share that deadline. On a pool thread
    /// it waits for the other threads' tasks, not for its own, nor (with one thread) for
    /// the tasks queued behind it. Returns the number still unfinished that it waited for.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> usize {
        let deadline = *self
            .shutdown_deadline
            .get_or_init(|| Instant::now() + timeout);
        let tracker = &self.tracker;
        let on_pool = self.is_current_thread();
        if on_pool && self.thread_count == 1 {
            return 0;
        }
        let mut guard = tracker.lock.lock();
        tracker.waiters.fetch_add(1, Ordering::SeqCst);
        if on_pool {
            tracker.pool_waiters.fetch_add(1, Ordering::SeqCst);
        }
        // The tasks of the pool threads that wait here cannot finish before they return,
        // and once every thread waits here, nothing more can finish at all.
        let left = || {
            let pool_waiters = tracker.pool_waiters.load(Ordering::SeqCst);
            let in_flight = tracker.in_flight.load(Ordering::SeqCst);
            if pool_waiters == self.thread_count {
                0
            } else {
                in_flight.saturating_sub(if on_pool { pool_waiters } else { 0 })
            }
        };
        let mut unfinished = left();
        while unfinished > 0 && !tracker.idle.wait_until(&mut guard, deadline).timed_out() {
            unfinished = left();
        }
        unfinished = left();
        if on_pool {
            tracker.pool_waiters.fetch_sub(1, Ordering::SeqCst);
        }
        tracker.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        // A pool thread leaving changes what the others wait for.
        tracker.idle.notify_all();
        unfinished
    }

    /// Returns true the first time it is called after a [`wait_idle`](Executor::wait_idle)
    /// gave up with tasks unfinished, and false ever after: a timer warns about them once,
    /// not at every later `close` and at its drop.
    pub(crate) fn first_give_up(&self) -> bool {
        !self.gave_up.swap(true, Ordering::AcqRel)
    }

    /// Returns the names of the tasks the pool's threads are running now (see
    /// [`TimerTask::name`]).
    pub(crate) fn running_task_names(&self) -> Vec<&'static str> {
        self.tracker.running.names()
    }

    /// Stops the pool's threads once the queue before them is done (the first call sends
    /// the stop messages), and joins them unless `join` is false (tasks still running past
    /// the deadline) or this is a pool thread, which cannot join itself: those threads are
    /// left for a later call from outside the pool. Concurrent callers return once the
    /// first one has joined them.
    pub(crate) fn shut_down(&self, join: bool) {
        let mut threads = self.threads.lock();
        if !self.stopped.swap(true, Ordering::AcqRel) {
            for _ in 0..self.thread_count {
                // Fails only if every thread already ended, which needs these very messages.
                let _ = self.jobs.send(Job::Stop);
            }
        }
        if join && !self.is_current_thread() {
            for handle in threads.drain(..) {
                if handle.join().is_err() {
                    log::error!("an executor thread panicked");
                }
            }
        }
    }
}

/// Tasks counted in flight and not sent yet (see [`Executor::hand_over`]). Sent by
/// [`send`](Handover::send), or, should the caller unwind first, when dropped.
#[must_use = "send it once the lock is released"]
pub(crate) struct Handover<'a> {
    executor: &'a Executor,
    tasks: Vec<Box<dyn TimerTask>>,
}

impl Handover<'_> {
    /// Wakes the pool for the tasks.
    pub(crate) fn send(self) {
        drop(self);
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        self.executor.send_counted(std::mem::take(&mut self.tasks));
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Joins the threads unless a task never ended (a close gave up waiting for it).
        let idle = self.tracker.in_flight.load(Ordering::Acquire) == 0;
        self.shut_down(idle);
    }
}

impl Job {
    /// The tasks in this job.
    fn len(&self) -> usize {
        match self {
            Job::Batch(tasks) => tasks.len(),
            Job::One(_) => 1,
            Job::Stop => 0,
        }
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
        if count == 0 {
            return;
        }
        let left = self.in_flight.fetch_sub(count, Ordering::SeqCst) - count;
        if left == 0 || self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.idle.notify_all();
        }
    }
}

/// A pool thread's loop (thread number `thread`): runs the jobs it receives until told to
/// stop.
fn work(queue: &Receiver<Job>, tracker: &Arc<Tracker>, thread: usize) {
    RUNNING_FOR.with(|running| running.set(tracker.id()));
    let runner = Runner {
        recorder: tracker.running.recorder(thread),
    };
    loop {
        match queue.recv() {
            Ok(Job::Batch(mut tasks)) => {
                let _finished = Finished {
                    tracker,
                    count: tasks.len(),
                };
                runner.run_in_order(&mut tasks);
                tracker.recycle(tasks);
            }
            Ok(Job::One(task)) => {
                let _finished = Finished { tracker, count: 1 };
                runner.run(task);
            }
            Ok(Job::Stop) | Err(_) => break,
        }
    }
    RUNNING_FOR.with(|running| running.set(0));
}

/// Runs tasks on a pool thread, recording each one's name.
struct Runner<'a> {
    recorder: Recorder<'a>,
}

/// Tasks whose boxes are asked for ahead of the one that runs: enough misses in flight to
/// overlap, few enough to stay cached until their turn.
const PREFETCH_AHEAD: usize = 8;

impl Runner<'_> {
    /// Runs `tasks` in order and leaves the buffer empty. The first read of a task's box
    /// is likely a cache and TLB miss (it was allocated long before), so the boxes of the
    /// next tasks are asked for ahead of time (see `prefetch`).
    fn run_in_order(&self, tasks: &mut Vec<Box<dyn TimerTask>>) {
        tasks
            .iter()
            .take(PREFETCH_AHEAD)
            .for_each(|task| prefetch(&**task));
        for at in 0..tasks.len() {
            if let Some(ahead) = tasks.get(at + PREFETCH_AHEAD) {
                prefetch(&**ahead);
            }
            // Moved out by swapping in a task that does nothing (a zero-sized box: no
            // allocation), so that the rest stay where the prefetches point.
            self.run(std::mem::replace(&mut tasks[at], Box::new(Ran)));
        }
        tasks.clear();
    }

    /// Runs the task (see [`run_task`]), its name recorded while it runs.
    fn run(&self, task: Box<dyn TimerTask>) {
        run_task(task, |task| self.recorder.running(task.name()));
        self.recorder.idle();
    }
}

/// Takes the place of a task of a batch that ran.
struct Ran;

impl TimerTask for Ran {
    fn delay_ms(&self) -> i64 {
        0
    }
    fn run(self: Box<Self>) {}
}

/// Counts a job's tasks finished when dropped: also if the job unwinds, after the tasks not
/// run yet are dropped.
struct Finished<'a> {
    tracker: &'a Tracker,
    count: usize,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.tracker.finished(self.count);
    }
}

/// Runs one task after `starting` (which may call the task's code, as `name`), catching and
/// logging a panic of either; never unwinds.
pub(crate) fn run_task(task: Box<dyn TimerTask>, starting: impl FnOnce(&dyn TimerTask)) {
    let run = || {
        starting(&*task);
        task.run();
    };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
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
