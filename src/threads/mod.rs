//! The threads a timer or a purgatory runs, and the queue its driver waits on: the delay
//! queue of lists ([`delay_queue`]), the executor pool that runs expired tasks
//! ([`executor`]) with the names of the tasks it runs ([`running`]), and the reaper loop
//! that drives a timer ([`reaper`]).

pub(crate) mod delay_queue;
pub(crate) mod executor;
pub(crate) mod reaper;
