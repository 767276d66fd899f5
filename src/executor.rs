//! Where expired tasks run: the built-in fixed pool (Kafka's
//! `Executors.newFixedThreadPool(1)`, with any number of threads), or any executor the
//! caller gives as a function (a `threadpool::ThreadPool` the caller owns is one); how late
//! each task starts; and the bound on the tasks in flight (`max_in_flight`).
//!
//! # Ground rules
//!
//! - A task reaches the executor with its expiration ([`Expired`]). Just before it runs,
//!   the thread that runs it reads the timer's clock and counts how late it started in the
//!   timer's histogram (`crate::lateness`).
//! - The built-in pool: tasks go to its threads through one `crossbeam-channel` queue; any
//!   idle thread takes the next message. With one thread (Kafka's), a flush hands over its
//!   expired tasks a batch per message, and they run in the order they were handed over.
//!   With more, each task is a message of its own, so that no task ever waits behind a
//!   slow one while a thread is free; tasks that expired together then run concurrently,
//!   in no order. The timer names its threads and joins them at `close`.
//! - A caller's executor: each task is a job of its own, a `Box<dyn FnOnce() + Send>`,
//!   handed to the caller's function with no lock held. The timer never names or joins
//!   those threads. A job dropped without being run (the executor broke its contract) is
//!   logged at `error!` and counted finished: its task is lost, and `close` does not wait
//!   for it forever. A panic out of the function itself is caught and logged the same way.
//! - `in_flight` counts tasks handed over and not yet finished (atomics). A `close` that
//!   waits for it registers in `waiters`, and while any does, every task that finishes
//!   wakes it (`idle`, with its mutex `lock`); otherwise finishing a task takes no lock.
//! - A task's panic is caught, logged at `error!`, and the executor goes on. So is a panic
//!   in the `Drop` of the panic's payload: nothing a task does unwinds out of [`run_task`],
//!   and so nothing unwinds out of a pool thread's job.
//! - Every `close` of the timer waits for the tasks in flight, up to one deadline set by the
//!   first wait (`shutdown_deadline`), then stops the built-in pool's threads and joins
//!   them. A task cannot wait for itself: a `close` called from a task waits only for the
//!   other threads' tasks. On the built-in pool that is every task in flight but those of
//!   the threads waiting (with one thread: none, the tasks queued behind it run after it
//!   returns); on a caller's executor, whose threads the timer cannot see, the tasks that
//!   already started (`started`), not those the executor has yet to start, which may be
//!   queued behind the caller, nor those its own thread runs around it (an inline
//!   executor nests the task that an `add` of a task already due runs at once). The
//!   threads it cannot join (its own among them) are joined by the next `close` or the
//!   drop from outside the pool.
//!
//! # The bound on tasks in flight
//!
//! With `max_in_flight`, a task is handed over only with a permit: `in_flight` below the
//! bound, raised by a compare-and-swap ([`Shared::reserve`]). Every task that comes due on
//! such a timer is first *held* in the timer's store ([`HeldTasks`], the shards' backlog,
//! see `system_timer::backlog`), where it is pending and can be cancelled; then whoever
//! held it asks for a [`refill`](Executor::refill), which takes permits and hands held
//! tasks over, oldest first, while both last. Every thread that finishes tasks asks for a
//! refill too: while the executor has tasks queued, once an eighth of the bound is free, so
//! that it takes several at a time; with none queued, at once, so that no thread idles.
//! No hand-off is lost: a holder raises the held count, then reads `in_flight` (in
//! `reserve`); a finisher lowers `in_flight`, then reads the held count; both with
//! `SeqCst`, so at least one of them sees the other and refills (a finisher that finds
//! less than an eighth free, with tasks queued, leaves it to the thread that runs those:
//! it finishes them and looks again). A refill that took fewer tasks than permits gives
//! the rest back and looks again, blocking on the shards' locks rather than spinning. A
//! thread already refilling (a caller's executor that runs jobs inline) does not start a
//! second refill inside the first: the outer one goes on until permits or held tasks run
//! out.
//!
//! The executor's mutexes are leaves (see `crate::lock_order`); a refill takes one shard's
//! lock at a time (through [`HeldTasks::take`]), with no other lock held.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::lateness::{Lateness, LatenessHistogram, RunningLate, late_us};
use crate::store::chunks::prefetch;
use crate::task::{Expired, TimerTask};
use crate::time::TimerClock;

/// Tasks per batch buffer: a flush hands over at most one chunk's expired tasks per job
/// (`system_timer::flush`'s chunk, 64 entries), and a refill at most this many at once.
const BATCH: usize = 64;

/// Emptied batch buffers kept for reuse (1.5 KiB each, 48 KiB in all): the executor can
/// fall this many jobs behind the driver before a flush allocates one.
const KEPT_BUFFERS: usize = 32;

/// Tasks whose boxes are asked for ahead of the one that runs: enough misses in flight to
/// overlap, few enough to stay cached until their turn.
const PREFETCH_AHEAD: usize = 8;

/// A job for a caller's executor: run it once, on any thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// A caller's executor, as a function that takes jobs.
pub(crate) type ExecuteFn = Arc<dyn Fn(Job) + Send + Sync>;

/// Where a timer's expired tasks run, as its builder was told.
pub(crate) enum ExecutorKind {
    /// The built-in pool of this many threads (at least one), which the timer names and
    /// joins.
    Threads(usize),
    /// A caller's executor, as a function that takes jobs.
    Function(ExecuteFn),
}

impl fmt::Debug for ExecutorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecutorKind::Threads(threads) => write!(f, "Threads({threads})"),
            ExecutorKind::Function(_) => f.write_str("Function(..)"),
        }
    }
}

/// Tasks a timer holds back while its executor is at `max_in_flight`: the shards' backlog.
pub(crate) trait HeldTasks: Send + Sync {
    /// Returns the number of tasks held, as of now.
    fn len(&self) -> usize;
    /// Takes up to `max` held tasks out of the timer, oldest expiration first, appends them
    /// to `out` and counts them expired; returns how many. Takes nothing once the timer is
    /// closed.
    fn take(&self, max: usize, out: &mut Vec<Expired>) -> usize;
}

/// What the pool's threads receive.
enum PoolJob {
    /// Tasks to run in order (a pool of one thread).
    Batch(Vec<Expired>),
    /// One task: on a pool of several threads, or handed over alone (see
    /// [`Executor::hand_over_one`]).
    One(Expired),
    /// Ends the thread that receives it (sent at shutdown).
    Stop,
}

/// The executor of one timer.
pub(crate) struct Executor {
    shared: Arc<Shared>,
    /// `shared.limit.is_some()`, kept here: every `add` asks, and this is on the timer's
    /// own cache lines.
    bounded: bool,
    /// The built-in pool's threads not joined yet (none on a caller's executor).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// When every wait for the tasks in flight gives up; set by the first wait.
    shutdown_deadline: OnceLock<Instant>,
    /// Set by the first wait that gave up (see [`Executor::first_give_up`]).
    gave_up: AtomicBool,
}

/// What the executor shares with the threads and jobs that run its tasks.
struct Shared {
    kind: ExecutorKind,
    /// The built-in pool's queue (unused on a caller's executor). It never closes: this
    /// holds its receiver.
    jobs: Sender<PoolJob>,
    queue: Receiver<PoolJob>,
    /// The timer's name, for the log.
    name: String,
    in_flight: AtomicUsize,
    /// On a caller's executor: tasks whose job started and has not finished (for `close`
    /// from a task, and to tell the tasks queued in it).
    started: AtomicUsize,
    /// Threads waiting in `wait_idle`: while there are any, each finished task wakes them.
    waiters: AtomicUsize,
    /// `idle`'s mutex, over the tasks that the waiting threads run (one each if they wait
    /// from this executor's tasks, or several nested on an inline executor).
    lock: Mutex<usize>,
    idle: Condvar,
    /// Emptied batch buffers, handed back by the pool's threads for the next batches.
    buffers: Mutex<Vec<Vec<Expired>>>,
    /// The timer's clock, that lateness is read on.
    clock: TimerClock,
    lateness: Arc<LatenessHistogram>,
    /// `max_in_flight`, and where the tasks it holds back wait.
    limit: Option<(usize, Arc<dyn HeldTasks>)>,
}

thread_local! {
    /// The executor whose tasks this thread is running (0: none), and how many, one inside
    /// another: more than one only on a caller's executor that runs jobs inline, where a
    /// task's `add` of a task already due runs it at once.
    static RUNNING: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// The executor this thread is refilling (0: none).
    static REFILLING: Cell<usize> = const { Cell::new(0) };
}

impl Executor {
    /// Starts the executor `kind` names for the timer `name` (the built-in pool's threads
    /// are `executor-{name}`, or `executor-{name}-{i}`), counting lateness in `lateness`
    /// on the timer's `clock`, and bounded by `limit`: `max_in_flight`, and where the tasks
    /// it holds back wait.
    ///
    /// # Panics
    ///
    /// Panics if a thread cannot be spawned.
    pub(crate) fn new(
        name: &str,
        kind: ExecutorKind,
        clock: TimerClock,
        lateness: Arc<LatenessHistogram>,
        limit: Option<(usize, Arc<dyn HeldTasks>)>,
    ) -> Executor {
        let (jobs, queue) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            kind,
            jobs,
            queue,
            name: name.to_owned(),
            in_flight: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(0),
            idle: Condvar::new(),
            buffers: Mutex::new(Vec::new()),
            clock,
            lateness,
            limit,
        });
        let mut handles = Vec::new();
        if let ExecutorKind::Threads(threads) = shared.kind {
            for i in 0..threads {
                let thread_name = match threads {
                    1 => format!("executor-{name}"),
                    _ => format!("executor-{name}-{i}"),
                };
                let (queue, shared) = (shared.queue.clone(), Arc::clone(&shared));
                let spawned = std::thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || work(&queue, &shared));
                handles.push(spawned.expect("cannot spawn an executor thread"));
            }
        }
        Executor {
            bounded: shared.limit.is_some(),
            shared,
            threads: Mutex::new(handles),
            shutdown_deadline: OnceLock::new(),
            gave_up: AtomicBool::new(false),
        }
    }

    /// True if tasks that come due must be held and handed over by
    /// [`refill`](Executor::refill): the executor has a `max_in_flight` bound.
    pub(crate) fn is_bounded(&self) -> bool {
        self.bounded
    }

    /// Returns an empty buffer for a batch of up to 64 tasks: one the pool handed back, or
    /// a new one.
    ///
    /// The timer's driver fills these while it flushes. Reusing them keeps allocations off
    /// its path (see `crate::lock_order`: no allocation under a shard's lock).
    pub(crate) fn batch(&self) -> Vec<Expired> {
        self.shared.batch()
    }

    /// Hands `tasks` to the executor in two steps: this call counts them in flight, which
    /// the caller does under the lock that took them out of the store (so that a `close`
    /// waits for them); [`Handover::send`] passes them on, which the caller does once it has
    /// let go of that lock, so that a pool thread woken onto the caller's processor does not
    /// preempt it while other threads wait for the lock, and no user code (a caller's
    /// executor, or a task run inline) runs under it. Not for a bounded executor, whose
    /// tasks go through [`refill`](Executor::refill).
    pub(crate) fn hand_over(&self, tasks: Vec<Expired>) -> Handover<'_> {
        self.count_in_flight(tasks, None)
    }

    /// [`hand_over`](Executor::hand_over) for a single task: an add already expired. It
    /// travels as a job of its own, so that no buffer is allocated for it under the lock.
    pub(crate) fn hand_over_one(&self, task: Expired) -> Handover<'_> {
        self.count_in_flight(Vec::new(), Some(task))
    }

    /// Counts `tasks` and `one` in flight, for the returned [`Handover`] to send.
    fn count_in_flight(&self, tasks: Vec<Expired>, one: Option<Expired>) -> Handover<'_> {
        let count = tasks.len() + usize::from(one.is_some());
        debug_assert!(count == 0 || !self.bounded);
        if count > 0 {
            self.shared.in_flight.fetch_add(count, Ordering::AcqRel);
        }
        let shared = &self.shared;
        Handover { shared, tasks, one }
    }

    /// Hands held tasks over, oldest first, while the bound leaves room for them: called,
    /// with no lock held, by whoever held a task (see "The bound on tasks in flight").
    pub(crate) fn refill(&self) {
        self.shared.refill(1);
    }

    /// Returns how late the tasks started so far started.
    pub(crate) fn lateness(&self) -> Lateness {
        self.shared.lateness.summary()
    }

    /// Returns how many of this executor's tasks the calling thread is running, one inside
    /// another (0: none).
    fn running_here(&self) -> usize {
        match RUNNING.get() {
            (running_for, depth) if running_for == self.shared.id() => depth,
            _ => 0,
        }
    }

    /// Waits until every task handed over so far has finished, but not past `timeout` after
    /// the first call: concurrent and later callers share that deadline. Called from one of
    /// this executor's tasks, it waits for the other threads' tasks only (see the ground
    /// rules). Returns the number still unfinished that it waited for.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> usize {
        let deadline = *self
            .shutdown_deadline
            .get_or_init(|| Instant::now() + timeout);
        let shared = &self.shared;
        // The tasks this thread runs cannot finish before this returns: not waited for.
        let mine = self.running_here();
        let load = |count: &AtomicUsize| count.load(Ordering::SeqCst);
        // What is left to wait for, while the waiting threads run `waiting` tasks.
        let left = |waiting: usize| match shared.kind {
            // Once every pool thread waits here, nothing more can finish.
            ExecutorKind::Threads(threads) if waiting == threads => 0,
            _ if mine == 0 => load(&shared.in_flight),
            ExecutorKind::Threads(_) => load(&shared.in_flight).saturating_sub(waiting),
            ExecutorKind::Function(_) => load(&shared.started).saturating_sub(waiting),
        };
        let mut waiting = shared.lock.lock();
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        *waiting += mine;
        while left(*waiting) > 0 && !shared.idle.wait_until(&mut waiting, deadline).timed_out() {}
        let unfinished = left(*waiting);
        *waiting -= mine;
        shared.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(waiting);
        // A task's thread leaving changes what the others wait for.
        shared.idle.notify_all();
        unfinished
    }

    /// Returns true the first time it is called after a [`wait_idle`](Executor::wait_idle)
    /// gave up with tasks unfinished, and false ever after: a timer warns about them once,
    /// not at every later `close` and at its drop.
    pub(crate) fn first_give_up(&self) -> bool {
        !self.gave_up.swap(true, Ordering::AcqRel)
    }

    /// Stops the built-in pool's threads once the queue before them is done, and joins
    /// them unless `join` is false (tasks still running past the deadline) or this is a
    /// pool thread, which cannot join itself: those threads are left for a later call from
    /// outside the pool. Concurrent callers return once the first one has joined them. A
    /// caller's executor has nothing to stop.
    pub(crate) fn shut_down(&self, join: bool) {
        let ExecutorKind::Threads(threads) = self.shared.kind else {
            return;
        };
        let mut handles = self.threads.lock();
        // Every call sends them: a thread ends at the first one it takes, and those no
        // thread takes go with the queue.
        for _ in 0..threads {
            let _ = self.shared.jobs.send(PoolJob::Stop);
        }
        if join && self.running_here() == 0 {
            // A pool thread's panic, which no task causes, was reported by the panic hook.
            handles.drain(..).for_each(|handle| drop(handle.join()));
        }
    }
}

impl Shared {
    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    fn batch(&self) -> Vec<Expired> {
        self.buffers
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH))
    }

    /// Keeps an emptied batch buffer for reuse, if it is one and there is room.
    fn recycle(&self, buffer: Vec<Expired>) {
        debug_assert!(buffer.is_empty());
        if buffer.capacity() == BATCH {
            let mut buffers = self.buffers.lock();
            if buffers.len() < KEPT_BUFFERS {
                buffers.push(buffer);
            }
        }
    }

    /// Passes tasks already counted in flight on to the threads that run them. A buffer
    /// from [`batch`](Shared::batch) goes back to be reused once its tasks ran (or at once,
    /// when they go one per job).
    fn send_counted(self: &Arc<Self>, mut tasks: Vec<Expired>) {
        match self.kind {
            ExecutorKind::Threads(1) if !tasks.is_empty() => {
                let _ = self.jobs.send(PoolJob::Batch(tasks));
            }
            _ => {
                for task in tasks.drain(..) {
                    self.send_one(task);
                }
                self.recycle(tasks);
            }
        }
    }

    /// [`send_counted`](Shared::send_counted) for one task, as a job of its own.
    fn send_one(self: &Arc<Self>, task: Expired) {
        match &self.kind {
            ExecutorKind::Threads(_) => _ = self.jobs.send(PoolJob::One(task)),
            ExecutorKind::Function(execute) => {
                let job = CallerJob {
                    task: Some(task),
                    shared: Arc::clone(self),
                };
                // On a panic, the job was dropped, and counted finished, on the way out (or
                // it is still with the executor, which will run it).
                caught(
                    || execute(Box::new(move || job.run())),
                    format_args!(
                        "timer {}: the executor panicked when handed a task",
                        self.name
                    ),
                );
            }
        }
    }

    /// Runs one expired task here and now, counting how late it started.
    #[inline]
    fn run(&self, expired: Expired) {
        let late_us = late_us(self.clock.now_ns(), expired.expiration_ms);
        self.lateness.record(late_us);
        let _running = RunningLate::enter(late_us);
        run_task(expired.task);
    }

    /// Counts `count` tasks in flight finished, waking the `close` calls that wait.
    fn finished(&self, count: usize) {
        self.in_flight.fetch_sub(count, Ordering::SeqCst);
        // `SeqCst`: a waiter registers, then reads `in_flight`; either it sees this
        // decrement, or this sees it and wakes it.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock();
            self.idle.notify_all();
        }
    }

    /// Counts `count` tasks that ran finished, then hands held tasks over in their place:
    /// while the executor has tasks queued, once an eighth of the bound is free, so that a
    /// refill takes several, one shard lock for several; with none queued, at once, so
    /// that no thread idles while tasks are held.
    fn done(self: &Arc<Self>, count: usize) {
        self.finished(count);
        if let Some((max, _)) = &self.limit {
            let queued = match self.kind {
                ExecutorKind::Threads(_) => !self.jobs.is_empty(),
                ExecutorKind::Function(_) => {
                    self.in_flight.load(Ordering::SeqCst) > self.started.load(Ordering::SeqCst)
                }
            };
            self.refill(if queued { (max / 8).max(1) } else { 1 });
        }
    }

    /// Raises `in_flight` by as many permits as the bound `max` leaves, at most a batch, if
    /// that is `at_least` (at least 1); returns how many.
    fn reserve(&self, max: usize, at_least: usize) -> usize {
        let free = |in_flight: usize| max.saturating_sub(in_flight).min(BATCH);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |in_flight| {
                (free(in_flight) >= at_least).then(|| in_flight + free(in_flight))
            })
            .map_or(0, free)
    }

    /// See [`Executor::refill`]; hands over nothing unless the bound leaves room for
    /// `at_least` tasks.
    fn refill(self: &Arc<Self>, at_least: usize) {
        let Some((max, held)) = &self.limit else {
            return;
        };
        let id = self.id();
        let outer = REFILLING.replace(id);
        if outer == id {
            // The refill this thread is in (further up its stack) goes on.
            return;
        }
        while held.len() > 0 {
            let permits = self.reserve(*max, at_least);
            if permits == 0 {
                break;
            }
            let mut batch = self.batch();
            let taken = held.take(permits, &mut batch);
            // Fewer held than permits: give the rest back, and look again while the held
            // count says there are more (each look blocks on the shards' locks, never spins).
            self.finished(permits - taken);
            self.send_counted(batch);
        }
        // Nothing above unwinds: the caller's executor's panics are caught.
        REFILLING.set(outer);
    }
}

/// Tasks counted in flight and not sent yet (see [`Executor::hand_over`]). Sent by
/// [`send`](Handover::send), or, should the caller unwind first, when dropped.
#[must_use = "send it once the lock is released"]
pub(crate) struct Handover<'a> {
    shared: &'a Arc<Shared>,
    tasks: Vec<Expired>,
    /// A task handed over alone (`Executor::hand_over_one`).
    one: Option<Expired>,
}

impl Handover<'_> {
    /// Passes the tasks on to the threads that run them.
    pub(crate) fn send(self) {
        drop(self);
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        if let Some(task) = self.one.take() {
            self.shared.send_one(task);
        }
        self.shared.send_counted(std::mem::take(&mut self.tasks));
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Joins the threads unless a task never ended (a close gave up waiting for it).
        let idle = self.shared.in_flight.load(Ordering::Acquire) == 0;
        self.shut_down(idle);
    }
}

/// A built-in pool thread's loop: runs the jobs it receives until told to stop. A job
/// never unwinds (see the ground rules), so its tasks are counted finished after it.
fn work(queue: &Receiver<PoolJob>, shared: &Arc<Shared>) {
    RUNNING.set((shared.id(), 1));
    for job in queue {
        match job {
            PoolJob::Batch(tasks) => shared.done(run_in_order(shared, tasks)),
            PoolJob::One(task) => {
                shared.run(task);
                shared.done(1);
            }
            PoolJob::Stop => break,
        }
    }
}

/// Runs `tasks` in order, keeps the buffer for reuse, and returns how many ran. The first
/// read of a task's box is likely a cache and TLB miss (it was allocated long before), so
/// the boxes of the next tasks are asked for ahead of time (see `prefetch`); draining
/// leaves them where those point.
fn run_in_order(shared: &Shared, mut tasks: Vec<Expired>) -> usize {
    let count = tasks.len();
    for expired in tasks.iter().take(PREFETCH_AHEAD) {
        prefetch(&*expired.task);
    }
    let mut draining = tasks.drain(..);
    while let Some(expired) = draining.next() {
        if let Some(ahead) = draining.as_slice().get(PREFETCH_AHEAD - 1) {
            prefetch(&*ahead.task);
        }
        shared.run(expired);
    }
    drop(draining);
    shared.recycle(tasks);
    count
}

/// One task as a job for a caller's executor. Counted finished when dropped, run or not.
struct CallerJob {
    /// `Some` until it runs.
    task: Option<Expired>,
    shared: Arc<Shared>,
}

impl CallerJob {
    fn run(mut self) {
        let task = self.task.take().expect("a job runs once");
        let id = self.shared.id();
        let outer = RUNNING.get();
        RUNNING.set((id, if outer.0 == id { outer.1 + 1 } else { 1 }));
        self.shared.started.fetch_add(1, Ordering::SeqCst);
        self.shared.run(task);
        self.shared.started.fetch_sub(1, Ordering::SeqCst);
        RUNNING.set(outer);
    }
}

impl Drop for CallerJob {
    fn drop(&mut self) {
        if self.task.take().is_some() {
            log::error!(
                "timer {}: the executor dropped a job without running it; its task is lost",
                self.shared.name
            );
        }
        self.shared.done(1);
    }
}

/// Runs one task, catching and logging its panic; never unwinds.
pub(crate) fn run_task(task: Box<dyn TimerTask>) {
    caught(|| task.run(), format_args!("timer task panicked"));
}

/// Runs `run`, catching its panic and logging it at `error!` after `what`; never unwinds.
/// The panic's payload is dropped, and its `Drop` is user code that may panic in turn: that
/// second panic's payload is user data as well, so it is leaked rather than dropped (a few
/// bytes, once, instead of a chain of panics).
fn caught(run: impl FnOnce(), what: fmt::Arguments<'_>) {
    let Err(payload) = catch_unwind(AssertUnwindSafe(run)) else {
        return;
    };
    log::error!("{what}: {}", panic_message(&*payload));
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
