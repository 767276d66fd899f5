//! [`timeout`]: a future's output, or [`Elapsed`] if a deadline on the wheel passes first.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;

use super::sleep::Sleep;
use crate::task::IntoDelayMs;
use crate::timer::Timer;

/// Returns `future`'s output, or `Err(Elapsed)` if `delay_ms` passes first on `timer`'s
/// clock (Kafka's `failAfter`; tokio's `timeout`, on any runtime).
///
/// The delay counts from the first poll, as the body of an `async fn` runs: that poll adds
/// the timer task. Each poll polls `future` first, so an output that is ready together
/// with the deadline wins. The timer task is cancelled (O(1), freed at once) inside the
/// poll in which `future` completes, and when the returned future is dropped.
///
/// The delay is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
/// [`IntoDelayMs`]). On a timer that cannot keep the deadline (closed, or full) the result
/// is `Err(Elapsed)` unless `future` is ready at its first poll (see [`Sleep`]).
///
/// # Errors
///
/// [`Elapsed`] if the deadline passed before `future` completed; `future` is dropped.
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
/// timer.advance_clock(500); // not polled yet: the clock has not started
/// assert_eq!(slow.as_mut().poll(&mut cx), Poll::Pending);
/// timer.advance_clock(99);
/// assert_eq!(slow.as_mut().poll(&mut cx), Poll::Pending);
/// timer.advance_clock(1);
/// assert_eq!(slow.as_mut().poll(&mut cx), Poll::Ready(Err(Elapsed)));
/// ```
pub async fn timeout<F: Future>(
    timer: Arc<dyn Timer>,
    delay_ms: impl IntoDelayMs,
    future: F,
) -> Result<F::Output, Elapsed> {
    let mut deadline = Sleep::new(timer, delay_ms);
    let mut future = pin!(future);
    let result = poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        Pin::new(&mut deadline).poll(cx).map(|()| Err(Elapsed))
    })
    .await;
    // Cancelled in the poll that completes, not whenever the caller drops this future.
    drop(deadline);
    result
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
