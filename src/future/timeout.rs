//! [`timeout`]: a future's output, or [`Elapsed`] if a deadline on the wheel passes first.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::sleep::Sleep;
use crate::task::IntoDelayMs;
use crate::timer::Timer;

/// Returns a future that completes with `future`'s output, or with `Err(Elapsed)` if
/// `delay_ms` passes first on `timer`'s clock (Kafka's `failAfter`; tokio's `timeout`, on
/// any runtime).
///
/// As tokio's, the delay counts from this call: its timer task is added here, so a
/// [`Timeout`] that is polled late can be elapsed at its first poll. Each poll polls
/// `future` first, so an output that is ready wins even past the deadline. The timer task
/// is cancelled (O(1), freed at once) inside the poll in which `future` completes, and
/// when the `Timeout` is dropped.
///
/// The delay is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
/// [`IntoDelayMs`]). On a timer that cannot keep the deadline (closed, or full) the result
/// is `Err(Elapsed)` unless `future` is ready at its first poll (see [`Sleep`]).
///
/// # Errors
///
/// The `Timeout` completes with [`Elapsed`] if the deadline passed before `future`
/// completed; `future` is dropped then.
///
/// # Examples
///
/// ```
/// use std::future::{pending, Future};
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Waker};
/// use timingwheel::{timeout, Elapsed, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let mut cx = Context::from_waker(Waker::noop());
///
/// let mut fast = pin!(timeout(timer.clone(), 100, async { 7 }));
/// assert_eq!(fast.as_mut().poll(&mut cx), Poll::Ready(Ok(7)));
/// assert_eq!(timer.size(), 0, "its timer task went with it");
///
/// let mut slow = pin!(timeout(timer.clone(), 100, pending::<u32>()));
/// timer.advance_clock(99); // the deadline counts from the call, polled or not
/// assert_eq!(slow.as_mut().poll(&mut cx), Poll::Pending);
/// timer.advance_clock(1);
/// assert_eq!(slow.as_mut().poll(&mut cx), Poll::Ready(Err(Elapsed)));
/// ```
///
/// A [`Timeout`] is a named type, so a struct can hold one:
///
/// ```
/// use std::future::Ready;
/// use timingwheel::Timeout;
///
/// struct Request {
///     answer: Timeout<Ready<u32>>,
/// }
/// ```
pub fn timeout<F: Future>(
    timer: Arc<dyn Timer>,
    delay_ms: impl IntoDelayMs,
    future: F,
) -> Timeout<F> {
    Timeout {
        future: Some(future),
        deadline: Some(Sleep::new(timer, delay_ms)),
    }
}

pin_project_lite::pin_project! {
    /// The future [`timeout`] returns: `future`'s output, or [`Elapsed`] once its deadline
    /// passed first.
    ///
    /// `Unpin` when `F` is, `Send` when `F` is, `Sync` when `F` is.
    ///
    /// # Panics
    ///
    /// Polling it again after it completed panics, as an `async fn`'s future does.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::Pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Waker};
    /// use timingwheel::{timeout, MockTimer, Timeout, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let mut guarded: Timeout<std::future::Pending<()>> =
    ///     timeout(timer.clone(), 50, std::future::pending());
    /// assert_eq!(guarded.expiration_ms(), Some(timer.time().hi_res_clock_ms() + 50));
    /// // `Unpin` because `Pending` is: no pinning needed.
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(Pin::new(&mut guarded).poll(&mut cx).is_pending());
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<F> {
        // Both `None` once the `Timeout` completed: dropped, and cancelled, then.
        #[pin]
        future: Option<F>,
        deadline: Option<Sleep>,
    }
}

impl<F> Timeout<F> {
    /// Returns the deadline on the timer's clock (the instant of the call to [`timeout`]
    /// plus the delay, saturating); `None` once the `Timeout` has completed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timeout, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let guarded = timeout(timer.clone(), 250, async {});
    /// assert_eq!(guarded.expiration_ms(), Some(timer.time().hi_res_clock_ms() + 250));
    /// ```
    pub fn expiration_ms(&self) -> Option<i64> {
        self.deadline.as_ref().map(Sleep::expiration_ms)
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let (Some(future), Some(deadline)) =
            (this.future.as_mut().as_pin_mut(), this.deadline.as_mut())
        else {
            panic!("`Timeout` polled after it completed");
        };
        // The inner future first: an output that is ready wins even past the deadline.
        let output = match future.poll(cx) {
            Poll::Ready(output) => Ok(output),
            Poll::Pending => match Pin::new(deadline).poll(cx) {
                Poll::Ready(()) => Err(Elapsed),
                Poll::Pending => return Poll::Pending,
            },
        };
        // Let go of both in the poll that completes, not whenever the caller drops this.
        *this.deadline = None;
        this.future.set(None);
        Poll::Ready(output)
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock.
        f.debug_struct("Timeout")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// The error of [`timeout`]: the deadline passed before the future completed.
///
/// # Examples
///
/// ```
/// use timingwheel::Elapsed;
///
/// let error: Box<dyn std::error::Error> = Box::new(Elapsed);
/// assert_eq!(error.to_string(), "deadline has elapsed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}
