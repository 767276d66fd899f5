//! The crate's lock order, complete: every lock the crate takes, in the one order in which
//! a thread may hold several. Each module's `# Ground rules` says which lock guards which
//! field and links here for the order; this module holds no code.
//!
//! From outermost to innermost: a thread takes a lock only while it holds no lock of a
//! later item.
//!
//! 1. Locks of what is built on a timer, some of them held while it calls the timer:
//!    - the purgatory's (`purgatory`): an operation's re-entrant lock, then either one
//!      watch-list shard's mutex or the operation's `timeout` slot, never both and never
//!      two shards. Completing cancels the operation's timeout under the operation's lock,
//!      once the slot is released; no watch-list shard or slot is held while the timer is
//!      called, and `Timer::add` is called with no purgatory lock held.
//! 2. `MockTimer`'s order map (`mock`): taken before its one shard's mutex by `add`,
//!    `reschedule`, `advance_clock` (released before a task runs), `next_expiration_ms`,
//!    `close` and `stop`.
//! 3. A shard's mutex (`store::shard`), which is one stripe of a `SystemTimer`'s
//!    reader-writer lock (`store::lock`). A reader holds one: `add`, `Timer::reschedule`, a
//!    flush chunk, a handle's `cancel`, a cloned handle's `clone`, `drop`, `cancelled`
//!    and `expiration_ms`, a refill taking held tasks out of the backlog
//!    (`system_timer::backlog`, for a timer with `max_in_flight`), and
//!    `next_expiration_ms` reading the lists' bounds, then each shard in turn. A writer
//!    holds all of them, taken in index order:
//!    `advance_clock` to move the wheel's clocks and detach due lists, `close`, `stop`. No
//!    one else waits for a second shard's mutex while holding one: an `add` whose shard is
//!    full only *tries* the others (`try_read`), and `mapped_bytes` and a store's creation
//!    and drop lock them one at a time. A writer and a flush chunk lock with
//!    `Shard::lock_urgent`.
//! 4. Leaves under a shard's mutex (nothing is taken under them):
//!    - the delay queue's mutex (`threads::delay_queue`), with its condvar: offered to by an
//!      add or a flush under a shard's mutex, closed under the write lock, polled under no
//!      lock. The timer's `Time`, which may be the caller's, is read under it.
//!    - the flush scheduler's `unfinished` list (`system_timer::flush`): taken under no
//!      lock at the start and end of an `advance_clock` call and by `next_expiration_ms`,
//!      and under the write lock by `close` and `stop`.
//!    - the overflow wheel's `OnceLock` (`wheel`): created by an add or a flush's re-add,
//!      under a read lock.
//! 5. Leaves taken with no lock of items 2-4 held (one of item 1 may be):
//!    - the executor's job queue, a `crossbeam-channel` (`threads::executor`), or the
//!      caller's executor (a `threadpool::ThreadPool`, or a function: user code, called as
//!      a task is run, with no lock of the timer held): expired tasks are counted in
//!      flight under the shard's mutex that took them out of the store, so that `close`
//!      waits for them, and handed over once it is released (`Executor::hand_over`). On a
//!      timer with `max_in_flight`, they are held in the shard instead, and a refill, with
//!      no lock held, takes one shard's mutex at a time (item 3) to take them out, then
//!      hands them over with none held: run by whoever held a task, once its shard is
//!      unlocked, and by every thread that finished tasks. The executor's `lock` and
//!      `idle` condvar: a `close` waiting for the tasks in flight, a thread that finished
//!      tasks. Its `threads`: held by `close` and the executor's drop while they send the
//!      stop messages into the queue and join the built-in pool's threads. Its `buffers`:
//!      a flush chunk takes an empty batch buffer before it locks its shard (a new one is
//!      an allocation), and the pool gives buffers back under no lock. Lateness is counted
//!      in atomics (`lateness`), under no lock.
//!    - the reapers' `stop` and `thread` mutexes (`threads::reaper`), never held together:
//!      `stop` while the stop channel's sender is dropped, `thread` while the reaper thread
//!      is joined. That thread's polls take the timer's locks, but never these two.
//!    - the shard pool (`store::pool`): taken when a timer's shards are taken or given
//!      back; a new shard's number is written under it and read under no lock.
//!    - a `KeyedTimer`'s maps (`schedule::keyed`), one at a time: the timer is called, and
//!      handles and tasks dropped, after it is released. Its token task takes one in `run`
//!      and `Drop`, which timers call with no lock of theirs held.
//!    - a periodic schedule's `state` (`schedule::periodic`): taken by `schedule_periodic`
//!      and its run loop (released while they call the timer), by the tick's `run` and
//!      `Drop`, and by the handle's `cancel`, which waits on the schedule's `idle` condvar
//!      with it.
//!    - a `Sleep`'s state (`future::sleep`): taken by `poll`, `is_elapsed`, `reset` (not
//!      while it calls the timer) and its task's drop; wakers are woken and dropped after
//!      it is released.
//!    - the channel of a `send_task` task (`schedule::send_task`): its `run` sends on an
//!      executor thread (or in `MockTimer::advance_clock`), and its drop drops the sender.
//!    - a `WorkerTimer`'s relay queue, a `crossbeam-channel` (`future::worker`, feature
//!      `tokio`): a relayed task's `run` sends on the executor thread, and the relay task
//!      receives on a runtime's worker and runs what it received with no lock held.
//!    - metrics (`metrics`): the recorder's handles are set after each `advance_clock`
//!      step and at shutdown; the only lock of the crate's own there is each lateness
//!      histogram's `exported` counts, taken then, under no other lock.
//!
//! No user code runs and no task is dropped under the locks of items 2-4, but for the
//! timer's `Time` (above): `delay_ms` is called before locking, tasks run on the executor
//! (or on the caller of `MockTimer::advance_clock`), and tasks that are cancelled or closed
//! away are dropped after the locks are released.
