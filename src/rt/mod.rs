//! The threads and the queue that both the timer and the purgatory use: the delay queue of
//! lists, the executor pool that runs expired tasks, and the reapers' loop.

pub(crate) mod delay_queue;
pub(crate) mod executor;
pub(crate) mod reaper;
