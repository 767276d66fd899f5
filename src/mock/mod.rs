//! Kafka's test doubles: [`MockTime`], a clock that moves only when told, and
//! [`MockTimer`], a timer that runs its tasks on the caller's thread when that clock moves.

mod mock_time;
mod mock_timer;

pub use mock_time::MockTime;
pub use mock_timer::MockTimer;
