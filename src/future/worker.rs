//! [`WorkerTimer`] (cargo feature `tokio`): a timer whose expired tasks run on a tokio
//! runtime's worker threads, so that the wakes of [`Sleep`](crate::Sleep), [`timeout`]
//! and [`Interval`](crate::Interval) come from a worker, as tokio's own timer's do.
//!
//! Why: a task woken from a thread foreign to the runtime (the timer's executor) is pushed
//! onto the runtime's global queue, behind whatever is there; a burst of spawned tasks
//! that overflowed a worker's local queue can hold it there for milliseconds. A task woken
//! on a worker goes to that worker's local queue, ahead of the global one.
//!
//! # Ground rules
//!
//! - The wrapped timer keeps its own driver and executor and decides when tasks are due.
//!   Its executor runs a small [`OnWorker`] task per expired task, which hands the task to
//!   the *relay*: a `crossbeam-channel` queue, and a task spawned on the runtime that runs
//!   what the queue holds. The relay task waits on a Unix socket registered with the
//!   runtime's I/O driver, which the workers poll between tasks (and the parked worker
//!   waits on): so the relay task is woken, and runs, on a worker.
//! - `signaled` says that a byte is on its way to the relay task. A sender sets it after
//!   its push and writes a byte only if it was clear; the relay task clears it before it
//!   drains the queue. So no push goes unseen, and a burst of expiries costs one write.
//! - The relay task runs the tasks as the executor would, panics caught and logged, and
//!   yields to the runtime every [`BATCH`] tasks. It ends when the last [`WorkerTimer`] and
//!   relayed task are gone (the socket's write end closes), after running what is queued.
//!   If the runtime shut down first, a relayed task runs on the executor thread instead
//!   (one relayed in the instant the runtime drops the relay task is dropped unrun, as a
//!   runtime drops its queued tasks).
//! - No lock of this module is held while a task runs (see `crate::lock_order`: the queue
//!   is a leaf).
//!
//! [`timeout`]: crate::timeout()

use std::fmt;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};

use crate::executor::run_task;
use crate::task::TimerTask;
use crate::timer::{Timer, forward_timer};

/// Tasks the relay task runs before it yields to the runtime's other tasks. Each task it
/// wakes goes to the worker's local queue, which overflows into the global queue, behind a
/// burst, if a run wakes too many at once; tokio's timer wakes 32 at a time too (see
/// docs/performance.md, "Where expiries run, and async wakes").
const BATCH: usize = 32;

/// A timer whose expired tasks run on the worker threads of a tokio runtime (cargo
/// feature `tokio`, Unix).
///
/// Wraps any [`Timer`], which still decides when tasks are due (a [`SystemTimerReaper`]
/// keeps its reaper thread and executor). When a task expires, its timer's executor hands
/// it to a task of the runtime, which runs it on a worker. For the wakes of this crate's
/// futures that matters on a busy runtime: a wake from a worker puts the woken task in
/// that worker's local queue, where tokio's own timer puts it too, while a wake from the
/// executor thread queues it behind everything in the runtime's global queue. Give the
/// futures a `WorkerTimer` where the runtime may be loaded with bursts of spawned tasks.
///
/// Tasks run on the worker must be short (a wake, a send): a long one holds up the
/// worker's other tasks. `close` and `stop` act on the wrapped timer; a task already
/// handed to the runtime may run after `close` returned. A task that `try_add` refuses or
/// `stop` hands back comes back wrapped: its `run` still hands it to the runtime. If the
/// runtime shuts down first, expired tasks run on the wrapped timer's executor, as without
/// a `WorkerTimer`.
///
/// [`SystemTimerReaper`]: crate::SystemTimerReaper
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer, WorkerTimer};
///
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// let reaper = Arc::new(SystemTimerReaper::new("reaper", SystemTimer::new("timeouts")));
/// runtime.block_on(async {
///     let timer: Arc<dyn Timer> = Arc::new(WorkerTimer::new(reaper.clone()));
///     let start = Instant::now();
///     Sleep::new(timer, 5).await; // woken from a worker of `runtime`
///     assert!(start.elapsed() >= Duration::from_millis(5));
/// });
/// reaper.close();
/// ```
pub struct WorkerTimer {
    timer: Arc<dyn Timer>,
    /// `None` where the runtime refused the relay's socket: tasks then run on the wrapped
    /// timer's executor.
    relay: Option<Arc<Relay>>,
}

/// The sending side of the relay (see the module's ground rules).
struct Relay {
    queue: Sender<Box<dyn TimerTask>>,
    signaled: Arc<AtomicBool>,
    /// The write end of the socket the relay task waits on; non-blocking.
    wake: UnixStream,
    /// A second handle to the relay task's end, so that a write never meets a closed peer
    /// (no `EPIPE`, no `SIGPIPE` where a program did not ignore it) once the runtime
    /// dropped the relay task. The relay task still sees the end of the stream when `wake`
    /// closes.
    _peer: UnixStream,
}

impl WorkerTimer {
    /// Wraps `timer`, spawning the relay task on the current tokio runtime, which needs its
    /// I/O driver (`enable_io` or `enable_all`). Should the runtime refuse the relay's
    /// socket (out of file descriptors), the tasks run on `timer`'s executor as without a
    /// `WorkerTimer`, and a warning is logged.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (see [`with_handle`](Self::with_handle)),
    /// or if the runtime has no I/O driver (tokio's own panic).
    #[track_caller]
    pub fn new(timer: impl Timer + 'static) -> WorkerTimer {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            panic!("WorkerTimer::new: called outside a tokio runtime; use with_handle");
        };
        WorkerTimer::with_handle(timer, &runtime)
    }

    /// Wraps `timer`, spawning the relay task on `runtime` (see [`new`](Self::new)), from
    /// any thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Sleep, SystemTimer, SystemTimerReaper, Timer, WorkerTimer};
    ///
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    /// let reaper = Arc::new(SystemTimerReaper::new("reaper", SystemTimer::new("sleeps")));
    /// let timer: Arc<dyn Timer> = Arc::new(WorkerTimer::with_handle(reaper.clone(), runtime.handle()));
    /// runtime.block_on(Sleep::new(timer, 1));
    /// reaper.close();
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `runtime` has no I/O driver (tokio's own panic).
    #[track_caller]
    pub fn with_handle(timer: impl Timer + 'static, runtime: &tokio::runtime::Handle) -> Self {
        let relay = Relay::spawn(runtime).inspect_err(|error| {
            log::warn!(
                "WorkerTimer: cannot wait on the runtime's I/O driver ({error}); \
                 expired tasks run on the timer's executor"
            );
        });
        WorkerTimer {
            timer: Arc::new(timer),
            relay: relay.ok().map(Arc::new),
        }
    }

    /// The task the wrapped timer gets for `task`.
    fn on_worker(&self, task: Box<dyn TimerTask>) -> Box<dyn TimerTask> {
        match &self.relay {
            Some(relay) => Box::new(OnWorker {
                task,
                relay: Arc::clone(relay),
            }),
            None => task,
        }
    }
}

impl Relay {
    /// Creates the relay and spawns its task on `runtime`.
    fn spawn(runtime: &tokio::runtime::Handle) -> io::Result<Relay> {
        let (wake, wait) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wait.set_nonblocking(true)?;
        let peer = wait.try_clone()?;
        let wait = {
            let _inside = runtime.enter();
            tokio::net::UnixStream::from_std(wait)?
        };
        let (queue, tasks) = crossbeam_channel::unbounded();
        let signaled = Arc::new(AtomicBool::new(false));
        runtime.spawn(relay(wait, tasks, Arc::clone(&signaled)));
        Ok(Relay {
            queue,
            signaled,
            wake,
            _peer: peer,
        })
    }

    /// Hands `task` to the relay task; runs it here if the runtime is gone.
    fn send(&self, task: Box<dyn TimerTask>) {
        match self.queue.send(task) {
            Err(gone) => run_task(gone.into_inner()),
            // A full socket already holds a byte for the relay task: nothing is lost.
            Ok(()) if !self.signaled.swap(true, Ordering::SeqCst) => _ = (&self.wake).write(&[1]),
            Ok(()) => {}
        }
    }
}

/// The relay task: runs the relayed tasks on the worker that polls it.
async fn relay(
    wait: tokio::net::UnixStream,
    tasks: Receiver<Box<dyn TimerTask>>,
    signaled: Arc<AtomicBool>,
) {
    let mut bytes = [0u8; 64];
    loop {
        // Reads what the socket holds, until it would block or its write end is closed.
        let mut closed = wait.readable().await.is_err();
        while !closed {
            match wait.try_read(&mut bytes) {
                Ok(0) => closed = true,
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => closed = error.kind() != io::ErrorKind::Interrupted,
            }
        }
        signaled.store(false, Ordering::SeqCst);
        for (ran, task) in tasks.try_iter().enumerate() {
            run_task(task);
            if (ran + 1) % BATCH == 0 {
                tokio::task::yield_now().await;
            }
        }
        if closed {
            return;
        }
    }
}

/// What the wrapped timer holds for a task: when it runs (on the timer's executor), it
/// hands the task to the relay.
struct OnWorker {
    task: Box<dyn TimerTask>,
    relay: Arc<Relay>,
}

impl TimerTask for OnWorker {
    fn delay_ms(&self) -> i64 {
        self.task.delay_ms()
    }

    fn run(self: Box<Self>) {
        let OnWorker { task, relay } = *self;
        relay.send(task);
    }

    fn name(&self) -> &'static str {
        self.task.name()
    }
}

forward_timer! {
    impl[] for WorkerTimer,
    inner: |self| self.timer,
    wrap: |task| self.on_worker(task),
    close: { self.timer.close() },
    stop: { self.timer.stop() },
}

impl fmt::Debug for WorkerTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerTimer")
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}
