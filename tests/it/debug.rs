//! Every public type of the crate implements `Debug`, `Box<dyn TimerTask>` included (it
//! prints the task's name and delay), so that a user's struct holding any of them can
//! derive it.

use std::fmt::Debug;
use std::sync::Arc;

use timingwheel::{
    AddError, Delayed, DelayedOperation, DelayedOperationPurgatory,
    DelayedOperationPurgatoryBuilder, Elapsed, FnTask, Interval, KeyedTimer, Lateness, MissedTicks,
    MockTime, MockTimer, PeriodicHandle, Sleep, SystemClock, SystemTimer, SystemTimerBuilder,
    SystemTimerReaper, Timeout, Timer, TimerStats, TimerTask, TimerTaskEntry, timer_task,
};

struct Op;

impl DelayedOperation for Op {
    fn delay_ms(&self) -> i64 {
        0
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
    fn on_expiration(&self) {}
}

#[test]
fn every_public_type_implements_debug() {
    fn debug<T: Debug + ?Sized>() {}
    debug::<dyn TimerTask>();
    debug::<Box<dyn TimerTask>>();
    debug::<AddError>();
    debug::<Delayed<Op>>();
    debug::<DelayedOperationPurgatory<u32, Op>>();
    debug::<DelayedOperationPurgatoryBuilder<u32, Op>>();
    debug::<Elapsed>();
    debug::<FnTask<fn()>>();
    debug::<Interval>();
    debug::<KeyedTimer<u32>>();
    debug::<Lateness>();
    debug::<MissedTicks>();
    debug::<MockTime>();
    debug::<MockTimer>();
    debug::<PeriodicHandle>();
    debug::<Sleep>();
    debug::<SystemClock>();
    debug::<SystemTimer>();
    debug::<SystemTimerBuilder>();
    debug::<SystemTimerReaper>();
    debug::<Timeout<std::future::Pending<()>>>();
    debug::<TimerStats>();
    debug::<TimerTaskEntry>();
    #[cfg(feature = "tokio")]
    debug::<timingwheel::WorkerTimer>();
}

#[test]
fn a_boxed_task_prints_its_name_and_delay() {
    #[derive(Debug)]
    struct Holder {
        task: Box<dyn TimerTask>,
    }
    let holder = Holder {
        task: timer_task(250, || {}),
    };
    assert_eq!(holder.task.delay_ms(), 250);
    let printed = format!("{holder:?}");
    assert!(
        printed.starts_with("Holder { task: TimerTask { name: \"timingwheel::task::FnTask<"),
        "{printed}"
    );
    assert!(printed.ends_with(", delay_ms: 250 } }"), "{printed}");
    // A keyed timer's and a sleep's tasks are named for what they do.
    let timer = Arc::new(MockTimer::new());
    let stopped = {
        let keyed = KeyedTimer::new(timer.clone());
        keyed.schedule(1, timer_task(10, || {}));
        let _sleep = Sleep::new(timer.clone(), 10);
        let mut tasks = timer.stop();
        tasks.sort_by_key(|task| task.name());
        tasks
            .iter()
            .map(|task| format!("{task:?}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(stopped.len(), 2, "{stopped:?}");
    assert!(stopped[0].contains("timingwheel::Sleep"), "{stopped:?}");
    assert!(stopped[1].contains("FnTask<"), "{stopped:?}");
}
