//! One timeout per key on a shared timer: Kafka's `CoordinatorTimer`, Akka's
//! `TimerScheduler`.
//!
//! # Ground rules
//!
//! - The scheduled keys live in [`SHARDS`] maps, each behind its own mutex, a key's shard
//!   chosen by its hash. A map holds, per key, the *slot* of the one task that counts for
//!   that key: an id unique to that scheduling (from `next_id`) and the handle of its timer
//!   entry, `None` while the `add` that makes it has not returned yet.
//! - The timer holds a token task per scheduling (`schedule::token`), whose token is the
//!   scheduling's id and whose payload is the key and the user's task. When the timer
//!   runs it, it first *claims* its slot: under the shard's lock, it removes the slot if
//!   the slot still has its id (Kafka's `tasks.remove(key, this)`), and only then runs the
//!   user's task. A wrapper whose slot was replaced or removed drops the user's task unrun. So the map decides, under one
//!   lock, between a `schedule`/`cancel` and an expiry: if `schedule` or `cancel` removed
//!   the slot first, the task never runs, even if the timer had already handed the wrapper
//!   to its executor; if the expiry claimed it first, `schedule` found no slot to replace
//!   and `cancel` returns false.
//! - A replaced or cancelled task is dropped promptly: its entry is cancelled (the timer
//!   drops the wrapper inside that call). If its entry was not recorded yet, the thread
//!   that is adding it finds, once `add` returns, that its slot is gone, and cancels the
//!   entry itself. If the timer had already handed the wrapper to its executor, the
//!   wrapper is dropped there, unrun, when the executor reaches it.
//! - A wrapper dropped unrun by its timer (closed or stopped, or refused because it was
//!   closed) removes its slot if the slot is still its own, so that `len` and
//!   `is_scheduled` forget tasks that will never run.
//! - `len` counts slots; it changes only under the lock of the shard it counts for.
//! - Lock order (see `crate::lock_order`): a shard's mutex is a leaf. No timer call, no task's code (`run`,
//!   `delay_ms`, `Drop`) and no drop of a handle happens while one is held; of the
//!   caller's code only the key's `Hash`, `Eq`, `Clone` and `Drop` run under it.

use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::token::{TokenOwner, TokenTask};
use crate::store::TimerTaskEntry;
use crate::task::TimerTask;
use crate::timer::Timer;

/// Maps per keyed timer: threads that schedule different keys seldom wait for each other.
const SHARDS: usize = 64;

/// One timeout per key on a shared timer, like Kafka's `CoordinatorTimer` and Akka's
/// `TimerScheduler`: a group coordinator's member sessions, a connection's idle timeout, a
/// request's retry.
///
/// [`schedule`](KeyedTimer::schedule) replaces the task scheduled under the key, and once
/// it returns the replaced task never runs — also if it had already expired and was
/// waiting for (not yet running on) the timer's executor: an expiry first checks, under
/// the key's lock, that its task is still the one scheduled under the key, as Kafka's
/// `tasks.remove(key, this)` does. [`cancel`](KeyedTimer::cancel) gives the same promise.
/// A replaced or cancelled task is dropped at once (its timer entry is cancelled), or, if
/// the timer had already handed it to its executor, when the executor reaches it.
///
/// `Send + Sync`: share it between threads behind an `Arc`. The timer is shared too: a
/// keyed timer adds its tasks to it beside everything else it runs, and does not drive,
/// close or own it.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use timingwheel::crossbeam_channel::unbounded;
/// use timingwheel::{send_task, KeyedTimer, MockTimer, Timer};
///
/// let timer = Arc::new(MockTimer::new());
/// let sessions = KeyedTimer::new(timer.clone());
/// let (expired_tx, expired) = unbounded();
///
/// // Members join: each gets a 10 s session timeout.
/// for member in ["alice", "bob"] {
///     sessions.schedule(member, send_task(10_000, expired_tx.clone(), member));
/// }
/// timer.advance_clock(6_000);
/// // alice heartbeats: her timeout starts again (the old one will never fire).
/// sessions.schedule("alice", send_task(10_000, expired_tx.clone(), "alice"));
/// timer.advance_clock(4_000);
/// assert_eq!(expired.try_recv(), Ok("bob"));
/// assert!(expired.try_recv().is_err());
/// assert!(sessions.is_scheduled(&"alice") && !sessions.is_scheduled(&"bob"));
/// // alice leaves.
/// assert!(sessions.cancel(&"alice"));
/// assert!(sessions.is_empty());
/// timer.advance_clock(60_000);
/// assert!(expired.try_recv().is_err());
/// ```
///
/// # Shutting down
///
/// Dropping a keyed timer cancels every task it scheduled that has not run yet (as Akka's
/// timers end with their actor). Closing the timer drops them unrun, and the keyed timer
/// forgets their keys. On a closed timer, `schedule` schedules nothing: the task is
/// dropped and the key is not scheduled.
///
/// # Differences from Kafka
///
/// Kafka's `CoordinatorTimer` turns each expiry into an event on the coordinator's queue
/// and checks there that the timeout is still current; here the check runs on the timer's
/// executor, just before the task, and a task that lost is dropped instead of skipped. The
/// tasks are any [`TimerTask`]: use [`send_task`](crate::send_task) to turn expiries into
/// messages for a queue or worker threads of your own.
pub struct KeyedTimer<K> {
    timer: Arc<dyn Timer>,
    shared: Arc<Shared<K>>,
}

/// What the keyed timer and its wrappers in the timer share.
struct Shared<K> {
    /// The slots by key, in [`SHARDS`] maps each behind its own lock.
    shards: Box<[Mutex<HashMap<K, Slot>>]>,
    /// Picks a key's shard.
    hasher: RandomState,
    /// Slots in all shards; changed under the lock of the shard that changed.
    len: AtomicUsize,
    /// The id of the next scheduling.
    next_id: AtomicU64,
}

/// The task that counts for a key.
struct Slot {
    /// Which scheduling it is: the wrapper in the timer with this id may run.
    id: u64,
    /// Its timer entry, once `add` returned.
    entry: Option<TimerTaskEntry>,
}

impl<K: Eq + Hash + Clone + Send + Sync + 'static> KeyedTimer<K> {
    /// Creates a keyed timer that schedules its tasks on `timer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{KeyedTimer, MockTimer};
    ///
    /// let timeouts: KeyedTimer<u64> = KeyedTimer::new(Arc::new(MockTimer::new()));
    /// assert!(timeouts.is_empty());
    /// ```
    pub fn new(timer: Arc<dyn Timer>) -> KeyedTimer<K> {
        KeyedTimer {
            timer,
            shared: Arc::new(Shared {
                shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                hasher: RandomState::new(),
                len: AtomicUsize::new(0),
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// Schedules `task` under `key`, replacing the task scheduled under it. Once this
    /// returns, the replaced task never runs, even if it had already expired and was
    /// waiting for (not yet running on) the executor; it is dropped unrun.
    ///
    /// A task already running (or that has claimed its key to run) is not replaced: it
    /// finishes, and `task` is scheduled beside it. On a closed timer the task is dropped
    /// and nothing is scheduled under `key` (a task that was is replaced all the same).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let retries = KeyedTimer::new(timer.clone());
    /// let fired = Arc::new(AtomicU32::new(0));
    /// for delay_ms in [100, 200, 300] {
    ///     let fired = fired.clone();
    ///     retries.schedule("request-7", timer_task(delay_ms, move || {
    ///         fired.fetch_add(delay_ms as u32, Ordering::SeqCst);
    ///     }));
    /// }
    /// timer.advance_clock(1_000);
    /// assert_eq!(fired.load(Ordering::SeqCst), 300, "only the last one ran");
    /// ```
    pub fn schedule(&self, key: K, task: Box<dyn TimerTask>) {
        self.schedule_replacing(key, task);
    }

    /// Schedules `task` under `key` like [`schedule`](KeyedTimer::schedule), and returns
    /// true iff it replaced a task that was scheduled under `key` (which will now never
    /// run).
    ///
    /// False means that no task was scheduled under `key`: none ever was, or the last one
    /// ran (or claimed its key to run: it will run), was cancelled, or was dropped by a
    /// closed timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let timeouts = KeyedTimer::new(timer.clone());
    /// assert!(!timeouts.schedule_replacing(1, timer_task(100, || {})));
    /// assert!(timeouts.schedule_replacing(1, timer_task(100, || {})));
    /// timer.advance_clock(100);
    /// assert!(!timeouts.schedule_replacing(1, timer_task(100, || {})), "the last one ran");
    /// ```
    pub fn schedule_replacing(&self, key: K, task: Box<dyn TimerTask>) -> bool {
        let id = self.shared.next_id();
        let replaced = {
            let mut map = self.shared.shard(&key).lock();
            match map.entry(key.clone()) {
                Entry::Occupied(mut occupied) => Some(std::mem::replace(
                    occupied.get_mut(),
                    Slot { id, entry: None },
                )),
                Entry::Vacant(vacant) => {
                    vacant.insert(Slot { id, entry: None });
                    self.shared.len.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }
        };
        let replaced_one = replaced.is_some();
        if let Some(entry) = replaced.and_then(|slot| slot.entry) {
            entry.cancel();
        }
        self.add(key, id, task);
        replaced_one
    }

    /// Schedules `task` under `key` unless a task is scheduled under it; returns true iff
    /// it scheduled it. If not, `task` is dropped unrun.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer};
    ///
    /// let timeouts = KeyedTimer::new(Arc::new(MockTimer::new()));
    /// assert!(timeouts.schedule_if_absent("join", timer_task(5_000, || {})));
    /// assert!(!timeouts.schedule_if_absent("join", timer_task(1, || unreachable!())));
    /// assert_eq!(timeouts.len(), 1);
    /// ```
    pub fn schedule_if_absent(&self, key: K, task: Box<dyn TimerTask>) -> bool {
        let id = self.shared.next_id();
        {
            let mut map = self.shared.shard(&key).lock();
            match map.entry(key.clone()) {
                Entry::Occupied(_) => {
                    drop(map);
                    // Dropped with no lock held: its `Drop` is the caller's code.
                    drop(task);
                    return false;
                }
                Entry::Vacant(vacant) => {
                    vacant.insert(Slot { id, entry: None });
                    self.shared.len.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.add(key, id, task);
        true
    }

    /// Cancels the task scheduled under `key`. Returns true iff a task was scheduled under
    /// `key` and will now never run.
    ///
    /// The task is dropped inside this call, unless the timer had already handed it to
    /// its executor: it is then dropped, unrun, when the executor reaches it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let timeouts = KeyedTimer::new(timer.clone());
    /// timeouts.schedule(7, timer_task(100, || unreachable!("cancelled")));
    /// assert!(timeouts.cancel(&7));
    /// assert!(!timeouts.cancel(&7));
    /// assert_eq!(timer.size(), 0, "its timer entry is gone too");
    /// ```
    pub fn cancel(&self, key: &K) -> bool {
        let removed = {
            let mut map = self.shared.shard(key).lock();
            let removed = map.remove(key);
            if removed.is_some() {
                self.shared.len.fetch_sub(1, Ordering::Relaxed);
            }
            removed
        };
        match removed {
            Some(slot) => {
                if let Some(entry) = slot.entry {
                    entry.cancel();
                }
                true
            }
            None => false,
        }
    }

    /// Returns true iff a task scheduled under `key` has neither run (nor claimed its key
    /// to run) nor been cancelled or replaced, nor dropped by a closed timer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let timeouts = KeyedTimer::new(timer.clone());
    /// timeouts.schedule("a", timer_task(100, || {}));
    /// assert!(timeouts.is_scheduled(&"a"));
    /// timer.advance_clock(100);
    /// assert!(!timeouts.is_scheduled(&"a"), "it ran");
    /// ```
    pub fn is_scheduled(&self, key: &K) -> bool {
        self.shared.shard(key).lock().contains_key(key)
    }

    /// Returns the number of keys with a scheduled task (see
    /// [`is_scheduled`](KeyedTimer::is_scheduled)).
    ///
    /// Read without a lock: while other threads schedule, cancel or expire tasks, the count
    /// may be a moment behind them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer};
    ///
    /// let timeouts = KeyedTimer::new(Arc::new(MockTimer::new()));
    /// timeouts.schedule(1, timer_task(100, || {}));
    /// timeouts.schedule(2, timer_task(100, || {}));
    /// timeouts.schedule(1, timer_task(200, || {}));
    /// assert_eq!(timeouts.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Relaxed)
    }

    /// Returns true iff no key has a scheduled task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use timingwheel::{KeyedTimer, MockTimer};
    ///
    /// let timeouts: KeyedTimer<&str> = KeyedTimer::new(Arc::new(MockTimer::new()));
    /// assert!(timeouts.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the wrapper of scheduling `id` of `key` to the timer, and records its entry in
    /// the slot, unless the slot was replaced or removed meanwhile: then cancels the entry.
    fn add(&self, key: K, id: u64, task: Box<dyn TimerTask>) {
        let delay_ms = task.delay_ms();
        let wrapper = TokenTask::boxed(Arc::clone(&self.shared), id, delay_ms, (key.clone(), task));
        let entry = self.timer.add(wrapper);
        let mut map = self.shared.shard(&key).lock();
        match map.get_mut(&key) {
            Some(slot) if slot.id == id => slot.entry = Some(entry),
            _ => {
                drop(map);
                // Replaced or cancelled while `add` ran (or it already ran, or a closed
                // timer refused it, and then this does nothing): drop it now.
                entry.cancel();
            }
        }
    }
}

impl<K: Eq + Hash + Send + Sync + 'static> Shared<K> {
    fn shard(&self, key: &K) -> &Mutex<HashMap<K, Slot>> {
        // The high bits: the maps' own hashers pick buckets by the low ones (of other
        // hashes, but there is no harm in keeping them apart).
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash >> 32) as usize % SHARDS]
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Removes the slot of `key` if it is scheduling `id`'s; returns whether it was.
    fn remove_if_current(&self, key: &K, id: u64) -> bool {
        let removed = {
            let mut map = self.shard(key).lock();
            match map.get(key) {
                Some(slot) if slot.id == id => {
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    map.remove(key)
                }
                _ => None,
            }
        };
        // Its handle is dropped here, with no lock held.
        removed.is_some()
    }
}

/// A keyed timer's token task: runs the user's task only if it is still the one scheduled
/// under its key (see the module's ground rules).
impl<K: Eq + Hash + Send + Sync + 'static> TokenOwner for Shared<K> {
    type Payload = (K, Box<dyn TimerTask>);

    fn expired(self: Arc<Self>, id: u64, (key, task): (K, Box<dyn TimerTask>)) {
        if self.remove_if_current(&key, id) {
            task.run();
        }
        // Otherwise replaced or cancelled: `task` is dropped here, unrun.
    }

    fn dropped(self: Arc<Self>, id: u64, (key, _task): (K, Box<dyn TimerTask>)) {
        // Dropped unrun by the timer (closed, stopped, refused) or by a cancel: forget the
        // key if it is still this task's.
        self.remove_if_current(&key, id);
    }

    fn task_name(&self, (_key, task): &(K, Box<dyn TimerTask>)) -> &'static str {
        task.name()
    }
}

impl<K> Drop for KeyedTimer<K> {
    fn drop(&mut self) {
        let mut entries = Vec::new();
        for shard in self.shared.shards.iter() {
            let mut map = shard.lock();
            self.shared.len.fetch_sub(map.len(), Ordering::Relaxed);
            entries.extend(map.drain().filter_map(|(_, slot)| slot.entry));
        }
        // Cancelled with no lock held: each cancel drops a task (the caller's code). The
        // wrappers' own drops then find their slots gone.
        for entry in entries {
            entry.cancel();
        }
    }
}

impl<K> fmt::Debug for KeyedTimer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock.
        f.debug_struct("KeyedTimer")
            .field("len", &self.shared.len.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
