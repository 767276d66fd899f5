//! The purgatory's constructors: [`DelayedOperationPurgatory::new`], its builder (Kafka's
//! six-argument constructor), and the start of the expiration reaper thread.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use super::watch::WatchLists;
use super::{DelayedOperationPurgatory, Inner};
use crate::delayed_operation::{DelayedOperation, ExpiredCount};
use crate::metrics::PurgatoryMetrics;
use crate::system_timer::SystemTimer;
use crate::system_timer_reaper::ReaperThread;
use crate::timer::Timer;

/// How long one poll of the expiration reaper waits (Kafka's `advanceClock(200L)`).
const REAPER_POLL_MS: i64 = 200;
/// Kafka's default purge interval.
const PURGE_INTERVAL: usize = 1_000;

impl<K, Op> DelayedOperationPurgatory<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// Creates a purgatory with Kafka's defaults: its own [`SystemTimer`] named
    /// `purgatory_name`, an expiration reaper thread named
    /// `ExpirationReaper-{broker_id}-{purgatory_name}`, purge interval 1000.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory};
    /// # struct Fetch;
    /// # impl DelayedOperation for Fetch {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) {}
    /// # }
    ///
    /// let purgatory = DelayedOperationPurgatory::<(String, u32), Fetch>::new("Fetch", 1);
    /// assert_eq!(purgatory.watched(), 0);
    /// purgatory.shutdown();
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if the reaper thread cannot be spawned.
    pub fn new(purgatory_name: &str, broker_id: i32) -> Self {
        Self::builder(purgatory_name).broker_id(broker_id).build()
    }

    /// Returns a builder for Kafka's six-argument constructor (name, timer, broker id, purge
    /// interval, reaper enabled, timer enabled), with [`new`](Self::new)'s defaults.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    ///
    /// let purgatory = DelayedOperationPurgatory::<u64, Op>::builder("Heartbeat")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(3)
    ///     .purge_interval(100)
    ///     .reaper_enabled(false)
    ///     .build();
    /// # drop(purgatory);
    /// # }
    /// ```
    pub fn builder(purgatory_name: &str) -> DelayedOperationPurgatoryBuilder<K, Op> {
        DelayedOperationPurgatoryBuilder {
            purgatory_name: purgatory_name.to_owned(),
            timer: None,
            broker_id: 0,
            purge_interval: PURGE_INTERVAL,
            reaper_enabled: true,
            timer_enabled: true,
            reaper_poll_ms: REAPER_POLL_MS,
            _types: PhantomData,
        }
    }
}

/// Builds a [`DelayedOperationPurgatory`]: Kafka's six-argument constructor, with the
/// defaults of [`DelayedOperationPurgatory::new`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
/// # include!("../doc_op.rs");
/// # fn main() {
///
/// let timer = Arc::new(MockTimer::new());
/// let purgatory = DelayedOperationPurgatory::<String, Op>::builder("DeleteRecords")
///     .timer(Arc::clone(&timer))
///     .broker_id(2)
///     .purge_interval(10)
///     .reaper_enabled(false)
///     .timer_enabled(true)
///     .build();
/// assert_eq!(purgatory.num_delayed(), 0);
/// # }
/// ```
pub struct DelayedOperationPurgatoryBuilder<K, Op> {
    purgatory_name: String,
    timer: Option<Arc<dyn Timer>>,
    broker_id: i32,
    purge_interval: usize,
    reaper_enabled: bool,
    timer_enabled: bool,
    reaper_poll_ms: i64,
    _types: PhantomData<fn() -> (K, Op)>,
}

impl<K, Op> DelayedOperationPurgatoryBuilder<K, Op>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    /// Sets the timer of the operations' timeouts. Default: `SystemTimer::new(purgatory_name)`.
    ///
    /// Pass an `Arc<MockTimer>` (and turn the reaper off) to drive time from a test. The
    /// purgatory closes the timer when it shuts down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, Timer, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// assert_eq!(timer.size(), 1, "the timeout went to this timer");
    /// # }
    /// ```
    pub fn timer(mut self, timer: impl Timer + 'static) -> Self {
        self.timer = Some(Arc::new(timer));
        self
    }

    /// Sets the broker id, which names the reaper thread. Default 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("Fetch")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .broker_id(7) // its reaper thread: ExpirationReaper-7-Fetch
    ///     .build();
    /// assert!(format!("{purgatory:?}").contains("broker_id: 7"));
    /// purgatory.shutdown();
    /// # }
    /// ```
    pub fn broker_id(mut self, broker_id: i32) -> Self {
        self.broker_id = broker_id;
        self
    }

    /// Sets how many completed operations may sit in the watch lists before the reaper
    /// purges them. Default 1000.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .purge_interval(0)
    ///     .reaper_enabled(false)
    ///     .build();
    /// let op = Delayed::new(Op);
    /// purgatory.try_complete_else_watch(&op, &[1, 2]);
    /// op.force_complete();
    /// purgatory.advance_clock(0);
    /// assert_eq!(purgatory.watched(), 0, "1 completed > purge interval 0: purged");
    /// # }
    /// ```
    pub fn purge_interval(mut self, purge_interval: usize) -> Self {
        self.purge_interval = purge_interval;
        self
    }

    /// Sets whether a reaper thread drives the timer and purges. Default true. Turn it off
    /// on a [`MockTimer`](crate::MockTimer), or to call
    /// [`advance_clock`](DelayedOperationPurgatory::advance_clock) yourself.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let timer = Arc::new(MockTimer::new());
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::clone(&timer))
    ///     .reaper_enabled(false) // this test moves time itself
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// timer.time().sleep(500);
    /// assert!(purgatory.advance_clock(0), "the timeout expired on this thread");
    /// # }
    /// ```
    pub fn reaper_enabled(mut self, reaper_enabled: bool) -> Self {
        self.reaper_enabled = reaper_enabled;
        self
    }

    /// Sets whether operations get a timeout in the timer. Default true. Without one, an
    /// operation waits until it completes or its key is cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # struct Op;
    /// # impl DelayedOperation for Op {
    /// #     fn delay_ms(&self) -> i64 { 500 }
    /// #     fn try_complete(&self) -> bool { false }
    /// #     fn on_complete(&self) {}
    /// #     fn on_expiration(&self) { unreachable!("no timeouts") }
    /// # }
    /// let purgatory = DelayedOperationPurgatory::<u8, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .timer_enabled(false)
    ///     .build();
    /// purgatory.try_complete_else_watch(&Delayed::new(Op), &[1]);
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (1, 0));
    /// purgatory.advance_clock(10_000);
    /// ```
    pub fn timer_enabled(mut self, timer_enabled: bool) -> Self {
        self.timer_enabled = timer_enabled;
        self
    }

    /// Sets how long one poll of the reaper waits for a timeout to expire. Default 200 ms,
    /// as in Kafka. Shutdown does not wait for a poll to end, whatever its length.
    ///
    /// # Examples
    ///
    /// ```
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u8, Op>::builder("p")
    ///     .reaper_poll_ms(60_000)
    ///     .build();
    /// purgatory.shutdown(); // still prompt
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if `reaper_poll_ms` is not positive.
    #[track_caller]
    pub fn reaper_poll_ms(mut self, reaper_poll_ms: i64) -> Self {
        assert!(
            reaper_poll_ms > 0,
            "DelayedOperationPurgatoryBuilder::reaper_poll_ms: reaper_poll_ms must be positive, \
             got {reaper_poll_ms}"
        );
        self.reaper_poll_ms = reaper_poll_ms;
        self
    }

    /// Builds the purgatory, and starts its reaper thread
    /// `ExpirationReaper-{broker_id}-{purgatory_name}` if enabled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{DelayedOperation, DelayedOperationPurgatory, MockTimer};
    /// # include!("../doc_op.rs");
    /// # fn main() {
    /// let purgatory = DelayedOperationPurgatory::<u32, Op>::builder("p")
    ///     .timer(Arc::new(MockTimer::new()))
    ///     .reaper_enabled(false)
    ///     .build();
    /// assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Panics if the reaper thread cannot be spawned.
    pub fn build(self) -> DelayedOperationPurgatory<K, Op> {
        let (timer, system_timer) = match self.timer {
            Some(timer) => (timer, None),
            None => {
                let own = Arc::new(SystemTimer::new(&self.purgatory_name));
                (Arc::clone(&own) as Arc<dyn Timer>, Some(own))
            }
        };
        let metrics = PurgatoryMetrics::new(&self.purgatory_name);
        let inner = Arc::new(Inner {
            watch_lists: WatchLists::new(),
            purged_operations: AtomicUsize::new(0),
            expired: ExpiredCount::new(metrics.expiration_lateness()),
            shut_down: AtomicBool::new(false),
            warned_closed: AtomicBool::new(false),
            warned_full: AtomicBool::new(false),
            metrics,
            purgatory_name: self.purgatory_name,
            broker_id: self.broker_id,
            timer,
            system_timer,
            purge_interval: self.purge_interval,
            timer_enabled: self.timer_enabled,
        });
        let reaper = self
            .reaper_enabled
            .then(|| start_reaper(Arc::clone(&inner), self.reaper_poll_ms));
        DelayedOperationPurgatory { inner, reaper }
    }
}

impl<K, Op> fmt::Debug for DelayedOperationPurgatoryBuilder<K, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedOperationPurgatoryBuilder")
            .field("purgatory_name", &self.purgatory_name)
            .field("broker_id", &self.broker_id)
            .field("purge_interval", &self.purge_interval)
            .field("reaper_enabled", &self.reaper_enabled)
            .field("timer_enabled", &self.timer_enabled)
            .field("reaper_poll_ms", &self.reaper_poll_ms)
            .finish_non_exhaustive()
    }
}

/// Starts the expiration reaper thread (Kafka's `ExpiredOperationReaper`), named
/// `ExpirationReaper-{broker_id}-{purgatory_name}`.
fn start_reaper<K, Op>(inner: Arc<Inner<K, Op>>, poll_ms: i64) -> ReaperThread
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Op: DelayedOperation,
{
    let name = format!(
        "ExpirationReaper-{}-{}",
        inner.broker_id, inner.purgatory_name
    );
    let period = Duration::from_millis(poll_ms.unsigned_abs());
    ReaperThread::spawn(&name, period, move || inner.advance_clock(poll_ms))
}
