//! Expiries as messages: a task that sends a value into a `crossbeam-channel` when it runs.
//!
//! A timer runs its tasks on its executor; a service often wants them elsewhere: on a pool
//! of worker threads that share one receiver, or in a `select!` loop beside the other
//! channels it waits on. [`send_task`] is that bridge. It holds no lock and shares nothing
//! with the timer: the task owns its sender and its message, and whoever takes the task out
//! of the timer (the executor to run it, or `cancel` to drop it) decides whether the
//! message is ever sent.

use crossbeam_channel::Sender;

use crate::task::{IntoDelayMs, TimerTask};

/// Creates a task that sends `message` into `sender` when it runs, `delay` after it is added
/// to a timer: the channel's receivers — any number of worker threads, or a
/// [`select!`](crossbeam_channel::select) — then see the expiry as a message.
///
/// The message is sent if and only if the task runs:
///
/// - once [`cancel`](crate::TimerTaskEntry::cancel) returned true, nothing is ever sent (the
///   task, and the message with it, was dropped inside that call);
/// - a task dropped unrun by [`close`](crate::Timer::close) sends nothing either;
/// - if the channel is bounded and full, the executor thread waits for room, as it would
///   for any slow task (with several executor threads, only the one running this task
///   waits; see
///   [`SystemTimerBuilder::executor_threads`](crate::SystemTimerBuilder::executor_threads));
///   keep the receivers draining, or a `close` waits for them (up to its bound);
/// - if every receiver is gone, the message is dropped on the executor thread and nothing
///   else happens: no panic, no log.
///
/// The delay is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
/// [`IntoDelayMs`]).
///
/// # Examples
///
/// Several workers take expiries from one receiver:
///
/// ```
/// use std::thread;
/// use timingwheel::crossbeam_channel::unbounded;
/// use timingwheel::{send_task, MockTimer, Timer};
///
/// let timer = MockTimer::new();
/// let (expired_tx, expired_rx) = unbounded();
/// for session in 0..100u32 {
///     timer.add(send_task(10_000, expired_tx.clone(), session));
/// }
/// let paid = timer.add(send_task(10_000, expired_tx.clone(), 100));
/// assert!(paid.cancel(), "cancelled in time: 100 is never sent");
/// drop(expired_tx);
///
/// let workers: Vec<_> = (0..4)
///     .map(|_| {
///         let expired_rx = expired_rx.clone();
///         thread::spawn(move || expired_rx.iter().count())
///     })
///     .collect();
/// timer.advance_clock(10_000); // sends 100 messages
/// drop(timer); // drops its senders: the workers' loops end
/// let handled: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
/// assert_eq!(handled, 100);
/// ```
///
/// Or a `select!` waits for an expiry beside other channels:
///
/// ```
/// use timingwheel::crossbeam_channel::{select, unbounded};
/// use timingwheel::{send_task, MockTimer, Timer};
///
/// #[derive(Debug, PartialEq)]
/// enum Timeout {
///     Session(u32),
/// }
///
/// let timer = MockTimer::new();
/// let (timeouts_tx, timeouts) = unbounded();
/// let (requests_tx, requests) = unbounded::<&str>();
/// timer.add(send_task(3_000, timeouts_tx, Timeout::Session(7)));
/// timer.advance_clock(3_000);
///
/// select! {
///     recv(requests) -> request => panic!("no request was sent: {request:?}"),
///     recv(timeouts) -> timeout => assert_eq!(timeout, Ok(Timeout::Session(7))),
/// }
/// # drop(requests_tx);
/// ```
pub fn send_task<T: Send + 'static>(
    delay: impl IntoDelayMs,
    sender: Sender<T>,
    message: T,
) -> Box<dyn TimerTask> {
    Box::new(SendTask {
        delay_ms: delay.into_delay_ms(),
        sender,
        message,
    })
}

/// The task of [`send_task`].
struct SendTask<T> {
    delay_ms: i64,
    sender: Sender<T>,
    message: T,
}

impl<T: Send + 'static> TimerTask for SendTask<T> {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }

    fn run(self: Box<Self>) {
        // `Err` only if every receiver is gone: the message comes back in it and is
        // dropped here, as documented.
        let _ = self.sender.send(self.message);
    }
}
