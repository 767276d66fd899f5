//! Hand-made wakers and a tiny executor for the tests of the futures: no async runtime.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// A waker's target that counts its wakes.
#[derive(Debug, Default)]
pub(crate) struct WakeCount {
    wakes: AtomicUsize,
}

impl WakeCount {
    /// A new count, and a waker that adds to it.
    pub(crate) fn new() -> (Arc<WakeCount>, Waker) {
        let count = Arc::new(WakeCount::default());
        let waker = Waker::from(Arc::clone(&count));
        (count, waker)
    }

    /// The wakes so far.
    pub(crate) fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` once with `waker`.
pub(crate) fn poll_with<F: Future + ?Sized>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Wakes a parked thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parked between polls until woken (a
/// spurious unpark only costs a poll); panics naming `what` after `limit`.
pub(crate) fn block_on<F: Future>(future: F, limit: Duration, what: &str) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let give_up = Instant::now() + limit;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        let left = give_up.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}: not complete after {limit:?}");
        thread::park_timeout(left);
    }
}
