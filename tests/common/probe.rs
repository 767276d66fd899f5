//! `Probe`: a purgatory operation that records everything that happens to it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use timingwheel::{Delayed, DelayedOperation};

/// One of an operation's callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Callback {
    TryComplete = 1,
    OnComplete = 2,
    OnExpiration = 3,
}

/// A callback that ran, and the name of the thread it ran on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) callback: Callback,
    pub(crate) thread: Option<String>,
}

/// An operation that counts its callbacks, logs completions and expirations, can be made
/// to panic in one callback, and counts its own drop.
pub(crate) struct Probe {
    pub(crate) delay_ms: i64,
    /// What `try_complete` answers.
    pub(crate) completable: AtomicBool,
    pub(crate) tries: AtomicUsize,
    pub(crate) completions: AtomicUsize,
    pub(crate) expirations: AtomicUsize,
    /// The callback that panics (a `Callback` as `u8`; 0: none).
    panic_in: AtomicU8,
    /// `OnComplete` and `OnExpiration`, in the order they ran.
    pub(crate) events: Mutex<Vec<Event>>,
    /// Gets each completion and expiration event too, if set.
    pub(crate) notify: Mutex<Option<mpsc::Sender<Event>>>,
    pub(crate) drops: Arc<AtomicUsize>,
}

/// The message of every deliberate panic of a [`Probe`].
pub(crate) const PROBE_PANIC: &str = "deliberate probe panic 5e1f";

impl Probe {
    pub(crate) fn new(delay_ms: i64) -> Probe {
        Probe {
            delay_ms,
            completable: AtomicBool::new(false),
            tries: AtomicUsize::new(0),
            completions: AtomicUsize::new(0),
            expirations: AtomicUsize::new(0),
            panic_in: AtomicU8::new(0),
            events: Mutex::new(Vec::new()),
            notify: Mutex::new(None),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A pending operation due `delay_ms` after it is watched.
    pub(crate) fn delayed(delay_ms: i64) -> Delayed<Probe> {
        Delayed::new(Probe::new(delay_ms))
    }

    /// Makes `callback` panic from now on (`None`: no callback panics).
    pub(crate) fn panic_in(&self, callback: Option<Callback>) {
        self.panic_in
            .store(callback.map_or(0, |c| c as u8), Ordering::SeqCst);
    }

    /// Sends every later completion and expiration event on the returned receiver.
    pub(crate) fn subscribe(&self) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel();
        *self.notify.lock().unwrap() = Some(tx);
        rx
    }

    pub(crate) fn set_completable(&self, completable: bool) {
        self.completable.store(completable, Ordering::SeqCst);
    }

    pub(crate) fn completions(&self) -> usize {
        self.completions.load(Ordering::SeqCst)
    }

    pub(crate) fn expirations(&self) -> usize {
        self.expirations.load(Ordering::SeqCst)
    }

    pub(crate) fn callbacks(&self) -> Vec<Callback> {
        let events = self.events.lock().unwrap();
        events.iter().map(|event| event.callback).collect()
    }

    fn record(&self, callback: Callback) {
        let event = Event {
            callback,
            thread: std::thread::current().name().map(str::to_owned),
        };
        self.events.lock().unwrap().push(event.clone());
        if let Some(tx) = &*self.notify.lock().unwrap() {
            let _ = tx.send(event);
        }
    }

    fn maybe_panic(&self, callback: Callback) {
        if self.panic_in.load(Ordering::SeqCst) == callback as u8 {
            panic!("{PROBE_PANIC} in {callback:?}");
        }
    }
}

impl DelayedOperation for Probe {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn try_complete(&self) -> bool {
        self.tries.fetch_add(1, Ordering::SeqCst);
        self.maybe_panic(Callback::TryComplete);
        self.completable.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.record(Callback::OnComplete);
        self.maybe_panic(Callback::OnComplete);
    }
    fn on_expiration(&self) {
        self.expirations.fetch_add(1, Ordering::SeqCst);
        self.record(Callback::OnExpiration);
        self.maybe_panic(Callback::OnExpiration);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}
