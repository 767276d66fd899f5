//! One timeout per key on a shared timer: Kafka's `CoordinatorTimer`, Akka's
//! `TimerScheduler`.
//!
//! # Ground rules
//!
//! - The scheduled keys live in [`SHARDS`] maps, each behind its own mutex. A key is hashed
//!   once per operation: the hash picks its shard and its place in the shard's table, and
//!   its token task carries it, so that the task finds the key again without hashing. A map
//!   holds, per key, the *slot* of the one task that counts for that key: an id unique to
//!   that scheduling (from `next_id`) and where its timer entry lives, or its delay while
//!   the `add` that makes it has not returned yet (or if the task never entered the timer's
//!   store: handed to the executor inside `add`, or refused).
//! - The timer holds a token task per scheduling (`schedule::token`), whose token is the
//!   scheduling's id and whose payload is the key's hash and the user's task. When the
//!   timer runs it, it first *claims* its slot: under the shard's lock, it removes the slot
//!   if the slot still has its id (Kafka's `tasks.remove(key, this)`), and only then runs
//!   the user's task. A wrapper whose slot was replaced or removed drops the user's task
//!   unrun. So the map decides, under one lock, between a `schedule`/`cancel` and an
//!   expiry: if `schedule` or `cancel` removed the slot first, the task never runs, even if
//!   the timer had already handed the wrapper to its executor; if the expiry claimed it
//!   first, `schedule` found no slot to replace and `cancel` returns false.
//! - `reschedule` reads the slot's entry under the lock and moves it with
//!   [`Timer::reschedule`] once the lock is released, through a handle made from the
//!   entry's place (the timer's entry decides, under the timer's lock, between the move and
//!   an expiry or cancel: exactly one wins). A slot whose `add` has not returned has no
//!   entry to move: the reschedule returns false.
//! - A replaced or cancelled task is dropped promptly: its entry is cancelled (the timer
//!   drops the wrapper inside that call). If its entry was not recorded yet, the thread
//!   that is adding it finds, once `add` returns, that its slot is gone, and cancels the
//!   entry itself. If the timer had already handed the wrapper to its executor, the
//!   wrapper is dropped there, unrun, when the executor reaches it.
//! - A wrapper dropped unrun by its timer (closed or stopped, or refused because it was
//!   closed) removes its slot if the slot is still its own, so that `len` and
//!   `is_scheduled` forget tasks that will never run.
//! - `len` counts slots; it changes only under the lock of the shard it counts for.
//! - `pending` copies one map's slots at a time under its lock, then reads each entry's
//!   expiration under its timer shard's lock alone; an entry gone by then is looked up
//!   again under its key, which finds the task that replaced it, if any.
//! - Lock order (see `crate::lock_order`): a shard's mutex is a leaf. No timer call, no
//!   task's code (`run`, `delay_ms`, `Drop`) and no drop of a handle happens while one is
//!   held; of the caller's code only the key's `Hash`, `Eq` and (`pending`) `Clone` run
//!   under it (its `Drop` runs after).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use parking_lot::Mutex;

use super::token::{TokenOwner, TokenTask};
use crate::store::chunks::EntryKey;
use crate::store::shard::Shard;
use crate::task::{IntoDelayMs, TimerTask};
use crate::timer::Timer;
use crate::timer_task_entry::TimerTaskEntry;

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
    shards: Box<[Padded<Mutex<Map<K>>>]>,
    /// Hashes the keys, once per operation (see the ground rules).
    hasher: RandomState,
    /// Slots in all shards; changed under the lock of the shard that changed.
    len: AtomicUsize,
    /// The id of the next scheduling.
    next_id: AtomicU64,
}

/// A map on cache lines of its own: locking one does not take its neighbours' lines.
#[repr(align(128))]
struct Padded<T>(T);

/// One shard's slots, by key.
type Map<K> = HashTable<(K, Slot)>;

/// The task that counts for a key: 24 bytes, so that a map of a million sessions stays
/// small.
#[derive(Clone, Copy)]
struct Slot {
    /// Which scheduling it is: the wrapper in the timer with this id may run.
    id: u64,
    /// Where its timer entry lives, once `add` returned it in a store; until then (or for
    /// good if it entered none), the delay it was added with.
    entry: Result<Place, i64>,
}

/// Where a timer entry lives: the handle's location (`TimerTaskEntry::location`) without
/// its expiration, which the keyed timer never reads (see [`handle`]).
type Place = (&'static Shard, EntryKey);

/// A handle to the entry at `place`, to cancel or move it with once the map's lock is
/// released.
///
/// A second handle made from the entry's place, not a clone of the one `add` returned (a
/// clone registers with the shard under its lock): sound because a keyed timer never clones
/// its entries, so no clone record needs to hear of a move (one that a move beyond what a
/// handle holds opens is the handle's own, and goes with it). Its `expiration_ms` is not
/// known here; `cancel` and the timers' `reschedule` do not read it, and the handle is
/// dropped when the call returns.
fn handle((shard, key): Place) -> TimerTaskEntry {
    TimerTaskEntry::at(shard, key)
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
                shards: (0..SHARDS).map(|_| Padded(Mutex::default())).collect(),
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
        self.insert(key, task, None, true);
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
        self.insert(key, task, None, true)
    }

    /// Moves the task scheduled under `key` to `delay` from now, keeping the task: a
    /// session's heartbeat (ZooKeeper's `touchSession`, Kafka's group and share-group
    /// session timeouts). O(1) and allocation-free, through [`Timer::reschedule`].
    ///
    /// Returns true iff a task was scheduled under `key` and now waits for the new time
    /// (or, for a delay <= 0, was handed to the timer's executor inside this call, as
    /// [`Timer::reschedule`] does; a `MockTimer` runs it inside the call). Returns false,
    /// changing nothing, if none was: it ran, was handed to the executor, was cancelled,
    /// replaced by a task that is not scheduled yet (see below), or never was.
    ///
    /// The delay is `i64` milliseconds or a [`Duration`](std::time::Duration) (see
    /// [`IntoDelayMs`]).
    ///
    /// # Concurrency
    ///
    /// Exactly-once holds whatever this races with, and a task it moved never runs before
    /// the instant of this call plus `delay`. Against a concurrent `cancel` or `schedule`
    /// of the same key it takes effect either before them (it moves the task they then
    /// cancel or replace) or after them (false). A `schedule` of `key` that has not
    /// returned yet, on another thread, is still adding its task to the timer: a
    /// reschedule then returns false and its task keeps the delay it was scheduled with.
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
    /// sessions.schedule("alice", send_task(10_000, expired_tx.clone(), "alice"));
    /// timer.advance_clock(9_000);
    /// assert!(sessions.reschedule(&"alice", 10_000), "a heartbeat: the same task, later");
    /// timer.advance_clock(9_999);
    /// assert!(expired.try_recv().is_err());
    /// timer.advance_clock(1);
    /// assert_eq!(expired.try_recv(), Ok("alice"));
    /// assert!(!sessions.reschedule(&"alice", 10_000), "expired: nothing to move");
    /// ```
    pub fn reschedule(&self, key: &K, delay: impl IntoDelayMs) -> bool {
        let delay_ms = delay.into_delay_ms();
        // No task, or its `add` has not returned yet (see "Concurrency").
        let Some(Ok(place)) = self.shared.find(key).map(|slot| slot.entry) else {
            return false;
        };
        // The timer is called with no lock of ours held (a `MockTimer` runs a task due
        // now inside the call, and its token claims the slot). A true result takes effect
        // as of the read above: a cancel or replacement that removed the slot since then
        // cancels the moved task once this returns (see "Concurrency").
        self.timer.reschedule(&handle(place), delay_ms)
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
        !self.insert(key, task, None, false)
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
        let hash = self.shared.hasher.hash_one(key);
        // The key is dropped with no lock held.
        let Some((_key, slot)) = self.shared.remove(hash, |(k, _)| k == key) else {
            return false;
        };
        if let Ok(place) = slot.entry {
            handle(place).cancel();
        }
        true
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
        self.shared.find(key).is_some()
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

    /// Returns every key whose task is pending, with its deadline as wall-clock time: the
    /// timer's expiration (within a millisecond), converted with the timer's wall clock at
    /// this call. Written out and given to [`restore`](KeyedTimer::restore) after a restart,
    /// the deadlines mean the same there.
    ///
    /// A listing taken while adds, cancels and expiries go on holds every key pending
    /// throughout it, and no key whose task ended (its `cancel` returned true, or its run
    /// finished) before it began; a task handed to the executor and not yet finished may be
    /// listed or not. It takes each of the keyed timer's map locks in turn, only to copy its
    /// keys, and each entry's timer lock only to read its expiration.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let checks = KeyedTimer::new(timer.clone());
    /// checks.schedule("order-1", timer_task(30_000, || {}));
    /// timer.advance_clock(10_000);
    /// let now = UNIX_EPOCH + Duration::from_millis(timer.time().milliseconds() as u64);
    /// assert_eq!(checks.pending(), [("order-1", now + Duration::from_secs(20))]);
    /// ```
    pub fn pending(&self) -> Vec<(K, SystemTime)> {
        let clock = self.timer.clock();
        let (wall_ms, now_ms) = (clock.milliseconds(), clock.hi_res_clock_ms());
        let (mut listed, mut slots) = (Vec::with_capacity(self.len()), Vec::new());
        for map in self.shared.shards.iter() {
            // One buffer for every map: under a lock, no allocation but to grow it.
            slots.extend(map.0.lock().iter().map(|(k, s)| (k.clone(), *s)));
            for (key, slot) in slots.drain(..) {
                if let Some(expiration_ms) = self.shared.expiration(&key, slot, now_ms) {
                    let ms = wall_ms.saturating_add(expiration_ms.saturating_sub(now_ms));
                    listed.push((key, wall_time(ms)));
                }
            }
        }
        listed
    }

    /// Schedules `task` under `key` like [`schedule`](KeyedTimer::schedule), at an absolute
    /// wall-clock deadline instead of the task's own `delay_ms`: converted to the timer's
    /// clock at this call (rounded up to the millisecond), so that a later jump of the wall
    /// clock does not move it. A deadline in the past runs the task at once (1 ms from now:
    /// on a `MockTimer`, at its next `advance_clock`).
    ///
    /// The task never runs before `deadline` by the timer's wall clock at this call. Across
    /// a restart, a deadline listed by [`pending`](KeyedTimer::pending) in one process is
    /// honoured by the wall clock of the next: if that clock jumped in between (an NTP step,
    /// another machine), the deadline moves with it, a jump forward making it lapse that
    /// much sooner in real time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use timingwheel::{timer_task, KeyedTimer, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let checks = KeyedTimer::new(timer.clone());
    /// let now = UNIX_EPOCH + Duration::from_millis(timer.time().milliseconds() as u64);
    /// checks.schedule_at(7, now + Duration::from_secs(5), timer_task(0, || {}));
    /// timer.advance_clock(4_999);
    /// assert!(checks.is_scheduled(&7));
    /// timer.advance_clock(1);
    /// assert!(!checks.is_scheduled(&7), "it ran at its deadline");
    /// ```
    pub fn schedule_at(&self, key: K, deadline: SystemTime, task: Box<dyn TimerTask>) {
        let delay_ms = delay_until(self.wall_now(), deadline);
        self.insert(key, task, Some(delay_ms.max(1)), true);
    }

    /// Schedules `make_task(&key)` under each key at its deadline, as
    /// [`schedule_at`](KeyedTimer::schedule_at) does: a task already under a key is
    /// replaced, and of a key given twice the later entry wins. The keys go in, and
    /// `make_task` is called, in the order of the keyed timer's own maps, not the order
    /// given, so that 10^6 of them fill each map in one pass rather than at random. Deadlines
    /// already past (at or before the wall clock's reading at this call) follow `lapsed`;
    /// under [`Lapsed::Skip`] their entries change nothing, and their keys are returned.
    ///
    /// Each task runs once, never before its deadline nor, spread, before its place in the
    /// window. The tasks' own `delay_ms` is not read. See
    /// [`schedule_at`](KeyedTimer::schedule_at) for a wall clock that jumped since the
    /// deadlines were listed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use timingwheel::{timer_task, KeyedTimer, Lapsed, MockTimer, Timer};
    ///
    /// let timer = Arc::new(MockTimer::new());
    /// let checks = KeyedTimer::new(timer.clone());
    /// let now = UNIX_EPOCH + Duration::from_millis(timer.time().milliseconds() as u64);
    /// // Read back after a restart: two checks lapsed while the service was down.
    /// let saved = [(1, now - Duration::from_secs(60)), (2, now - Duration::from_secs(1)),
    ///     (3, now + Duration::from_secs(30))];
    /// let ran = Arc::new(AtomicU32::new(0));
    /// let skipped = checks.restore(saved, Lapsed::Spread(Duration::from_secs(10)), |_| {
    ///     let ran = ran.clone();
    ///     timer_task(0, move || _ = ran.fetch_add(1, Ordering::SeqCst))
    /// });
    /// assert!(skipped.is_empty());
    /// timer.advance_clock(1);
    /// assert_eq!(ran.load(Ordering::SeqCst), 1, "the first lapsed one, at once");
    /// timer.advance_clock(5_000);
    /// assert_eq!(ran.load(Ordering::SeqCst), 2, "the second, 5 s into the window");
    /// timer.advance_clock(25_000);
    /// assert_eq!(ran.load(Ordering::SeqCst), 3, "the third at its deadline");
    /// ```
    pub fn restore(
        &self,
        entries: impl IntoIterator<Item = (K, SystemTime)>,
        lapsed: Lapsed,
        mut make_task: impl FnMut(&K) -> Box<dyn TimerTask>,
    ) -> Vec<K> {
        let now = self.wall_now();
        let entries: Vec<(K, i64)> = entries
            .into_iter()
            .map(|(key, deadline)| (key, delay_until(now, deadline)))
            .collect();
        let lapsed_count = entries.iter().filter(|&&(_, ms)| ms == 0).count();
        let window_ms = match lapsed {
            Lapsed::Spread(window) => window.into_delay_ms(),
            _ => 0,
        };
        let (mut skipped, mut nth) = (Vec::new(), 0);
        let mut kept = Vec::with_capacity(entries.len());
        for (key, mut delay_ms) in entries {
            if delay_ms == 0 {
                if lapsed == Lapsed::Skip {
                    skipped.push(key);
                    continue;
                }
                // The nth lapsed deadline: its even share of the window (none for `RunNow`).
                delay_ms = (i128::from(window_ms) * nth / lapsed_count as i128) as i64;
                nth += 1;
            }
            kept.push((self.shared.hasher.hash_one(&key), key, delay_ms.max(1)));
        }
        // In the order of the maps' own buckets: each map is then filled in one pass, in
        // sequence, not at random. Stable, so that of a key given twice the later one wins.
        let masks = self.shared.reserve(kept.len());
        kept.sort_by_key(|&(hash, ..)| {
            let shard = Shared::<K>::shard_of(hash);
            (shard, hash & masks[shard])
        });
        for (hash, key, delay_ms) in kept {
            let task = make_task(&key);
            self.insert_hashed(hash, key, task, Some(delay_ms), true);
        }
        skipped
    }

    /// The wall clock of the timer, now.
    fn wall_now(&self) -> SystemTime {
        wall_time(self.timer.clock().milliseconds())
    }

    /// Puts a new slot for `task` under `key`, replacing the slot there, or unless `replace`,
    /// dropping `task` if there is one; then adds the task's wrapper to the timer, due in
    /// `delay_ms` (the task's own if `None`), and records where its entry lives. Returns
    /// true iff a slot was there.
    fn insert(
        &self,
        key: K,
        task: Box<dyn TimerTask>,
        delay_ms: Option<i64>,
        replace: bool,
    ) -> bool {
        let hash = self.shared.hasher.hash_one(&key);
        self.insert_hashed(hash, key, task, delay_ms, replace)
    }

    /// [`insert`](KeyedTimer::insert) of a key hashed to `hash`.
    fn insert_hashed(
        &self,
        hash: u64,
        key: K,
        task: Box<dyn TimerTask>,
        delay_ms: Option<i64>,
        replace: bool,
    ) -> bool {
        let shared = &self.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let delay_ms = delay_ms.unwrap_or_else(|| task.delay_ms());
        let slot = Slot {
            id,
            entry: Err(delay_ms),
        };
        let mut map = shared.shard(hash).lock();
        let replaced = match map.entry(hash, |(k, _)| *k == key, |(k, _)| shared.hasher.hash_one(k))
        {
            Entry::Occupied(mut found) if replace => {
                Some(std::mem::replace(&mut found.get_mut().1, slot))
            }
            Entry::Occupied(_) => {
                drop(map);
                // Dropped with no lock held: its `Drop` is the caller's code.
                drop(task);
                return true;
            }
            Entry::Vacant(vacant) => {
                vacant.insert((key, slot));
                shared.len.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        drop(map);
        if let Some(Ok(place)) = replaced.as_ref().map(|slot| slot.entry) {
            handle(place).cancel();
        }
        let task = TokenTask::boxed(Arc::clone(shared), id, delay_ms, (hash, task));
        let entry = self.timer.add(task);
        // The map's lock is released before `else` (edition 2024).
        if let Some((_, slot)) = shared
            .shard(hash)
            .lock()
            .find_mut(hash, |(_, slot)| slot.id == id)
        {
            slot.entry = entry.location().ok_or(delay_ms);
        } else {
            // Replaced or cancelled while `add` ran (or it already ran, or a closed timer
            // refused it, and then this does nothing): drop it now.
            entry.cancel();
        }
        replaced.is_some()
    }
}

impl<K: Eq + Hash + Send + Sync + 'static> Shared<K> {
    /// The shard of a key hashed to `hash`: bits the tables do not use for themselves (they
    /// take a bucket from the low bits and a tag from the top seven).
    fn shard(&self, hash: u64) -> &Mutex<Map<K>> {
        &self.shards[Self::shard_of(hash)].0
    }

    /// The index of that shard.
    fn shard_of(hash: u64) -> usize {
        (hash >> 32) as usize % SHARDS
    }

    /// The expiration of the task pending under `key`, which was `slot`'s: that of its
    /// entry, or of the task that replaced it if it left the timer; `None` if none is (it
    /// was cancelled, or it expired: it runs or ran). A delay is from `now_ms`.
    fn expiration(&self, key: &K, mut slot: Slot, now_ms: i64) -> Option<i64> {
        loop {
            let (shard, entry_key) = match slot.entry {
                Ok(place) => place,
                Err(delay_ms) => return Some(now_ms.saturating_add(delay_ms)),
            };
            if let Some(expiration_ms) = shard.lock().expiration(entry_key) {
                return Some(expiration_ms);
            }
            let now = self.find(key)?;
            (now.id != slot.id).then_some(())?;
            slot = now;
        }
    }

    /// Returns the slot of `key`, if it has one.
    fn find(&self, key: &K) -> Option<Slot> {
        let hash = self.hasher.hash_one(key);
        let map = self.shard(hash).lock();
        map.find(hash, |(k, _)| k == key).map(|(_, slot)| *slot)
    }

    /// Makes room in each map for its share of `additional` more keys (and a margin), and
    /// returns each map's bucket mask: the bits of a hash that pick its first bucket.
    fn reserve(&self, additional: usize) -> [u64; SHARDS] {
        let per_map = additional.div_ceil(SHARDS);
        std::array::from_fn(|shard| {
            let mut map = self.shards[shard].0.lock();
            map.reserve(per_map + per_map / 16, |(k, _)| self.hasher.hash_one(k));
            // A table of 8 or more buckets holds 7/8 of them; a smaller one, all but one.
            // (A wrong guess would cost speed only: the order is just an order.)
            let buckets = (map.capacity() * 8 / 7).next_power_of_two() as u64;
            buckets - 1
        })
    }

    /// Removes the slot of a key hashed to `hash` that `is` picks, and returns it: the
    /// caller drops it with no lock held.
    fn remove(&self, hash: u64, is: impl FnMut(&(K, Slot)) -> bool) -> Option<(K, Slot)> {
        let mut map = self.shard(hash).lock();
        let (removed, _) = map.find_entry(hash, is).ok()?.remove();
        self.len.fetch_sub(1, Ordering::Relaxed);
        Some(removed)
    }
}

/// A keyed timer's token task: runs the user's task only if it is still the one scheduled
/// under its key (see the module's ground rules).
impl<K: Eq + Hash + Send + Sync + 'static> TokenOwner for Shared<K> {
    /// Besides its id (its slot's while the slot is its own), the key's hash and the
    /// user's task: no key, so that scheduling clones none, and the task finds its slot by
    /// hash and id, without hashing the key again or calling its `Eq`.
    type Payload = (u64, Box<dyn TimerTask>);

    fn report(self: Arc<Self>, id: u64, (hash, task): Self::Payload, expired: bool) {
        // Claims the slot if it is still this task's (ids are never reused): an expired
        // task then runs. Otherwise it was replaced or cancelled, and is dropped here,
        // unrun; a task the timer dropped (closed, stopped, refused) forgets its key.
        if self.remove(hash, |(_, slot)| slot.id == id).is_some() && expired {
            task.run();
        }
    }

    fn task_name(&self, (_, task): &Self::Payload) -> &'static str {
        task.name()
    }
}

/// What [`KeyedTimer::restore`] does with a deadline already past.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use timingwheel::Lapsed;
///
/// // 10^6 checks that lapsed during an outage reach the executor over a minute.
/// let lapsed = Lapsed::Spread(Duration::from_secs(60));
/// assert_ne!(lapsed, Lapsed::RunNow);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lapsed {
    /// Each runs once, now.
    RunNow,
    /// None is scheduled (a task already under that key stays as it is); `restore` returns
    /// their keys.
    Skip,
    /// They run once each, spread evenly over this window from now, on the timer's clock,
    /// in the order given: of n, the i-th (from 0) no earlier than i/n of the window.
    Spread(Duration),
}

/// `ms` milliseconds after the Unix epoch (before it if negative), where the platform's
/// `SystemTime` reaches; beyond, its far ends.
fn wall_time(ms: i64) -> SystemTime {
    let since = Duration::from_millis(ms.unsigned_abs());
    match ms < 0 {
        true => UNIX_EPOCH.checked_sub(since).unwrap_or(UNIX_EPOCH),
        // Some platforms' `SystemTime` ends some 30,000 years on.
        false => UNIX_EPOCH
            .checked_add(since)
            .unwrap_or(UNIX_EPOCH + FAR_FUTURE),
    }
}

/// Past every deadline a timer keeps in a platform's `SystemTime`: 17,000 years.
const FAR_FUTURE: Duration = Duration::from_secs(1 << 39);

/// Milliseconds from `now` to `deadline`, rounded up; 0 for a deadline at or before `now`.
fn delay_until(now: SystemTime, deadline: SystemTime) -> i64 {
    deadline
        .duration_since(now)
        .map_or(0, IntoDelayMs::into_delay_ms)
}

impl<K> Drop for KeyedTimer<K> {
    fn drop(&mut self) {
        let mut slots = Vec::new();
        for shard in self.shared.shards.iter() {
            let mut map = shard.0.lock();
            self.shared.len.fetch_sub(map.len(), Ordering::Relaxed);
            slots.extend(map.drain());
        }
        // Cancelled with no lock held: each cancel drops a task (the caller's code), and
        // so does each key's drop. The wrappers' own drops then find their slots gone.
        for (_key, slot) in slots {
            if let Ok(place) = slot.entry {
                handle(place).cancel();
            }
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
