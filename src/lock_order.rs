//! The crate's lock order, complete: every lock the crate takes, in the one order in which
//! a thread may hold several. Each module's `# Ground rules` says which lock guards which
//! field and links here for the order; this module holds no code.
//!
//! From outermost to innermost: a thread takes a lock only while it holds no lock of a
//! later item.
//!
//! 1. Locks of what is built on a timer, held while it calls the timer at most as said:
//!    - a purgatory's (`delayed_operation`, `delayed_operation_purgatory`): an operation's
//!      re-entrant lock, then either one watch-list shard's mutex or the operation's
//!      timeout slot, never both and never two shards. Completing cancels the timeout under
//!      the operation's lock, once the slot is released; `Timer::add` is called with no
//!      purgatory lock held.
//!    - a `KeyedTimer`'s maps (`schedule::keyed`), one at a time, never held while it calls
//!      the timer; `pending` copies a map under its lock, then reads each entry under its
//!      shard's lock (item 3) with no map lock held. Its token task takes one in `run` and
//!      `Drop`, which timers call with no lock of theirs held.
//!    - a periodic schedule's state (`schedule::periodic`), taken by its waker, its first
//!      poll and `cancel` (which waits on `idle` with it); released while it polls its
//!      `Interval` and while the closure runs.
//!    - a `Sleep`'s state (`future::sleep`), not held while it calls the timer; wakers are
//!      woken after it is released.
//! 2. `MockTimer`'s order map (`mock::mock_timer`): taken before its one shard's mutex by
//!    `add`, `reschedule`, `advance_clock` (released before a task runs),
//!    `next_expiration_ms`, `close` and `stop`.
//! 3. A shard's mutex (`store::shard`), one stripe of a `SystemTimer`'s reader-writer lock.
//!    A reader holds one: `add`, `reschedule`, a flush chunk, a handle's `cancel`, `clone`,
//!    `drop`, `cancelled` and `expiration_ms`, a refill taking held tasks out of the
//!    backlog (`system_timer::backlog`), `next_expiration_ms` and `KeyedTimer::pending`
//!    reading each shard in turn. A writer holds all of them, taken in index order:
//!    `advance_clock` to move the wheel's clocks and detach due lists, `close`, `stop`. No
//!    one waits for a second shard's mutex while holding one: an `add` whose shard is full
//!    only *tries* the others. A writer and a flush chunk lock with `Shard::lock_urgent`.
//! 4. Leaves under a shard's mutex (nothing is taken under them):
//!    - the delay queue's mutex (`delay_queue`), with its condvar: offered to by an add or a
//!      flush under a shard's mutex, closed under the write lock, polled under no lock. The
//!      timer's `Time`, which may be the caller's, is read under it. An offer that makes a
//!      new head calls the shared reaper's waker after releasing it, still under the shard's
//!      mutex: a `try_send` into a channel of one place.
//!    - the flush scheduler's `unfinished` list (`system_timer::flush`): taken under no lock
//!      at the start and end of an `advance_clock` or a turn, and under the write lock by
//!      `close` and `stop`.
//!    - the overflow wheel's `OnceLock` (`timing_wheel`): created under a read lock.
//! 5. Leaves taken with no lock of items 2-4 held (one of item 1 may be):
//!    - the executor's job queue, a `crossbeam-channel` (`executor`), or the caller's
//!      executor (user code, called with no lock of the timer held): expired tasks are
//!      counted in flight under the shard's mutex that took them out, and handed over once
//!      it is released. A refill takes one shard's mutex at a time (item 3). The executor's
//!      `idle` mutex and condvar (a `close` waiting for the tasks in flight, a thread that
//!      finished tasks), its threads' list (held while `close` joins them) and its batch
//!      buffers. Lateness is counted in atomics (`lateness`).
//!    - the reapers (`system_timer_reaper`): a reaper thread's join handle, held while it is
//!      joined; a shared reaper's list of timers, taken by `drive`, by a driven timer's
//!      `close` and by the thread to copy it, with no timer called under it. The threads'
//!      polls and turns take the timers' locks, but never these.
//!    - the shard pool (`store::shard`): taken when a timer's shards are taken or given back.
//!    - the channel of a `send_task` task (`schedule::send_task`); a `WorkerTimer`'s relay
//!      queue (`future::worker`, feature `tokio`).
//!    - metrics (`metrics`): each lateness histogram's exported counts, taken after each
//!      `advance_clock` step and at shutdown, under no other lock.
//!
//! No user code runs and no task is dropped under the locks of items 2-4, but for the
//! timer's `Time` (above): `delay_ms` is called before locking, tasks run on the executor
//! (or on the caller of `MockTimer::advance_clock`), and tasks that are cancelled or closed
//! away are dropped after the locks are released.
