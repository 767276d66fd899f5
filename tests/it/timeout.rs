//! `timeout` as tokio's: the deadline counts from the call; it returns the named future
//! `Timeout<F>`, `Unpin` when `F` is and `Send` when `F` is; the inner future is polled
//! first, so a ready output wins even past the deadline; the timer task is cancelled as
//! soon as the future completes or is dropped. Polled by hand on a `MockTimer`; under real
//! runtimes in `examples/async_timeouts/tests/runtimes.rs`.

use crate::common;

use std::future::{Future, Pending, Ready, pending, ready};
use std::marker::{PhantomData, PhantomPinned};
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use common::waker::{WakeCount, poll_with};
use timingwheel::{Elapsed, MockTimer, Timeout, Timer, timeout};

fn mock() -> Arc<MockTimer> {
    Arc::new(MockTimer::new())
}

/// Tells at run time whether `T` is `Unpin` or `Send` (auto-ref specialisation: the
/// method of the impl with the bound is found first when it applies), so that a test can
/// check both directions of "when `F` is".
struct Probe<T>(PhantomData<T>);

trait ViaUnpin {
    fn unpin(&self) -> bool {
        true
    }
}
impl<T: Unpin> ViaUnpin for &Probe<T> {}
trait ViaAnyPin {
    fn unpin(&self) -> bool {
        false
    }
}
impl<T> ViaAnyPin for Probe<T> {}

trait ViaSend {
    fn send(&self) -> bool {
        true
    }
}
impl<T: Send> ViaSend for &Probe<T> {}
trait ViaAnySend {
    fn send(&self) -> bool {
        false
    }
}
impl<T> ViaAnySend for Probe<T> {}

macro_rules! is_unpin {
    ($t:ty) => {
        (&&Probe::<$t>(PhantomData)).unpin()
    };
}
macro_rules! is_send {
    ($t:ty) => {
        (&&Probe::<$t>(PhantomData)).send()
    };
}

/// A future that is neither `Unpin` nor `Send`, and never ready.
struct Stuck(PhantomPinned, PhantomData<Rc<()>>);

impl Future for Stuck {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

#[test]
fn timeout_is_unpin_and_send_exactly_when_its_future_is() {
    assert!(is_unpin!(Timeout<Pending<u8>>) && is_send!(Timeout<Pending<u8>>));
    assert!(!is_unpin!(Timeout<Stuck>) && !is_send!(Timeout<Stuck>));
    assert!(
        is_unpin!(Pending<u8>) && !is_unpin!(Stuck),
        "the probe itself tells"
    );
    fn unpin_send_sync<T: Unpin + Send + Sync>(_: &T) {}
    unpin_send_sync(&timeout(mock(), 10, ready(1)));
}

#[test]
fn a_struct_can_hold_a_timeout_and_poll_it_without_pinning() {
    struct Call {
        answer: Timeout<Ready<&'static str>>,
    }
    let timer = mock();
    let mut call = Call {
        answer: timeout(timer.clone(), 100, ready("pong")),
    };
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(
        Pin::new(&mut call.answer).poll(&mut cx),
        Poll::Ready(Ok("pong"))
    );
    assert_eq!(timer.size(), 0);
}

#[test]
fn the_deadline_counts_from_the_call_so_a_late_first_poll_can_find_it_elapsed() {
    let timer = mock();
    let (count, waker) = WakeCount::new();
    let guarded = timeout(timer.clone(), 100, pending::<()>());
    assert_eq!(
        guarded.expiration_ms(),
        Some(timer.time().hi_res_clock_ms() + 100)
    );
    timer.advance_clock(100);
    let mut guarded = pin!(guarded);
    assert_eq!(
        poll_with(guarded.as_mut(), &waker),
        Poll::Ready(Err(Elapsed)),
        "elapsed at its first poll"
    );
    assert_eq!(count.wakes(), 0, "nobody was waiting to be woken");
}

#[test]
fn a_ready_output_wins_even_long_past_the_deadline() {
    let timer = mock();
    let guarded = timeout(timer.clone(), 100, ready(7));
    timer.advance_clock(10_000);
    let mut guarded = pin!(guarded);
    assert_eq!(
        poll_with(guarded.as_mut(), Waker::noop()),
        Poll::Ready(Ok(7))
    );
}

#[test]
fn dropping_a_timeout_never_polled_cancels_its_task() {
    let timer = mock();
    let guarded = timeout(timer.clone(), 100, pending::<()>());
    assert_eq!(timer.size(), 1);
    drop(guarded);
    assert_eq!(timer.size(), 0, "cancelled inside the drop");
}

#[test]
fn a_completed_timeout_reports_no_deadline_and_panics_if_polled_again() {
    let timer = mock();
    let mut guarded = timeout(timer.clone(), 100, ready(1));
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(Pin::new(&mut guarded).poll(&mut cx), Poll::Ready(Ok(1)));
    assert_eq!(guarded.expiration_ms(), None);
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = Pin::new(&mut guarded).poll(&mut cx);
    }));
    let message = again.expect_err("a second poll panics");
    assert_eq!(
        message.downcast_ref::<&str>(),
        Some(&"`Timeout` polled after it completed")
    );
}

#[test]
fn a_timeout_prints_its_deadline() {
    let timer = mock();
    let guarded = timeout(timer.clone(), 100, pending::<()>());
    let printed = format!("{guarded:?}");
    assert!(
        printed.starts_with("Timeout { deadline: Some(Sleep"),
        "{printed}"
    );
}
