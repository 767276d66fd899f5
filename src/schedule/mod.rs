//! What is built on any [`Timer`](crate::Timer) for threads: one timeout per key
//! ([`keyed`]), a closure run every period ([`periodic`]) with its policy for missed ticks
//! ([`missed_ticks`]), expiries sent as messages ([`send_task`]), and the token task that
//! the keyed timer and the futures share ([`token`]).

pub(crate) mod keyed;
pub(crate) mod missed_ticks;
pub(crate) mod periodic;
pub(crate) mod send_task;
pub(crate) mod token;
