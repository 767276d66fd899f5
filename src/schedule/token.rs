//! The one timer task that keyed timeouts and `Sleep` (so `Interval` and periodic schedules)
//! share: a task that carries a *token* and calls back into its owner, which decides from
//! the token whether the task still counts.
//!
//! An owner hands out a new token whenever what it scheduled changes (a key scheduled
//! again, a sleep's next deadline), and keeps the current one
//! under its own lock. A task whose token is no longer current is stale: whatever it says
//! changes nothing. So the owner never has to find and stop a task that a timer may
//! already have handed to its executor; the token settles the race under the owner's lock.
//!
//! # Ground rules
//!
//! - A [`TokenTask`] reports exactly once ([`TokenOwner::report`]): expired when the timer
//!   runs it, or not when it is dropped unrun (cancelled, refused, or left in a closed or
//!   stopped timer). Timers run and drop tasks with none of their locks held, so an owner
//!   may take its own lock in either (see `crate::lock_order`).

use std::sync::Arc;

use crate::task::TimerTask;

/// What a [`TokenTask`] reports to.
pub(crate) trait TokenOwner: Send + Sync + 'static {
    /// What each task carries besides its token: a key and the user's task, or nothing.
    type Payload: Send + 'static;

    /// The task of `token` expired and runs now, on the timer's executor (or the thread of
    /// a `MockTimer`'s caller), or, if not `expired`, was dropped unrun.
    fn report(self: Arc<Self>, token: u64, payload: Self::Payload, expired: bool);

    /// The name of a task carrying `payload`, for logs ([`TimerTask::name`]): what it does
    /// for its owner rather than the token task's own type.
    fn task_name(&self, payload: &Self::Payload) -> &'static str;
}

/// A timer task that reports to its owner, with its token, once.
pub(crate) struct TokenTask<O: TokenOwner> {
    /// Taken when the task reports, so that it reports once.
    owner: Option<(Arc<O>, O::Payload)>,
    token: u64,
    delay_ms: i64,
}

impl<O: TokenOwner> TokenTask<O> {
    /// A task due `delay_ms` after it is added, that reports to `owner` with `token`.
    pub(crate) fn boxed(
        owner: Arc<O>,
        token: u64,
        delay_ms: i64,
        payload: O::Payload,
    ) -> Box<dyn TimerTask> {
        Box::new(TokenTask {
            owner: Some((owner, payload)),
            token,
            delay_ms,
        })
    }

    fn report(&mut self, expired: bool) {
        if let Some((owner, payload)) = self.owner.take() {
            owner.report(self.token, payload, expired);
        }
    }
}

impl<O: TokenOwner> TimerTask for TokenTask<O> {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }

    fn run(mut self: Box<Self>) {
        self.report(true);
    }

    fn name(&self) -> &'static str {
        let (owner, payload) = self.owner.as_ref().expect("asked before it reports");
        owner.task_name(payload)
    }
}

impl<O: TokenOwner> Drop for TokenTask<O> {
    fn drop(&mut self) {
        self.report(false);
    }
}
