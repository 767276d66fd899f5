//! The names of the tasks an executor pool's threads are running, for the warning of a
//! `close` that gave up waiting for them.
//!
//! # Ground rules
//!
//! - One slot per pool thread, written only by that thread (through its [`Recorder`]):
//!   the number of the [`name`] of each task just before it runs, and 0 once it returned.
//! - A slot is an atomic, so recording a task is two plain stores: a thread keeps the
//!   number of the last name it recorded, and a task of the same type (the common case)
//!   needs no lookup; it keeps the numbers of every name it recorded, so another type it
//!   ran before costs a look through its own list. A name new to the thread is numbered
//!   in `names` (a leaf mutex; see `crate::lock_order`), which a `close` that gave up reads
//!   back. The names are the tasks' types, so both stay as small as the program's set of
//!   task types.
//! - Slots are a cache line apart, so that threads storing never share a line.
//!
//! [`name`]: crate::TimerTask::name

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

/// What the threads of one executor pool are running.
pub(crate) struct RunningTasks {
    slots: Box<[Slot]>,
    /// Name number `n` is `names[n - 1]`; 0 is "none".
    names: Mutex<Vec<&'static str>>,
}

/// One thread's slot, alone on its cache line: the number of the name of the task it runs.
#[repr(align(64))]
struct Slot(AtomicU32);

impl RunningTasks {
    /// Slots for a pool of `threads` threads, numbered from 0.
    pub(crate) fn new(threads: usize) -> RunningTasks {
        RunningTasks {
            slots: (0..threads).map(|_| Slot(AtomicU32::new(0))).collect(),
            names: Mutex::new(Vec::new()),
        }
    }

    /// The recorder of pool thread `thread`, for that thread alone.
    pub(crate) fn recorder(&self, thread: usize) -> Recorder<'_> {
        Recorder {
            slot: &self.slots[thread].0,
            tasks: self,
            last: Cell::new(None),
            seen: RefCell::new(Vec::new()),
        }
    }

    /// Returns the names of the tasks running now, one per busy thread.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        let numbers: Vec<u32> = self
            .slots
            .iter()
            .map(|slot| slot.0.load(Ordering::Acquire))
            .filter(|&number| number != 0)
            .collect();
        let names = self.names.lock();
        numbers
            .into_iter()
            .map(|number| names.get(number as usize - 1).copied().unwrap_or("?"))
            .collect()
    }

    /// Returns the number of `name`, numbering it if it is new.
    fn number(&self, name: &'static str) -> u32 {
        let mut names = self.names.lock();
        let at = match names.iter().position(|known| *known == name) {
            Some(at) => at,
            None => {
                names.push(name);
                names.len() - 1
            }
        };
        u32::try_from(at + 1).unwrap_or(u32::MAX)
    }
}

/// Records what one pool thread runs.
pub(crate) struct Recorder<'a> {
    slot: &'a AtomicU32,
    tasks: &'a RunningTasks,
    /// The last name recorded, and its number.
    last: Cell<Option<(&'static str, u32)>>,
    /// Every name this thread recorded, and its number.
    seen: RefCell<Vec<(&'static str, u32)>>,
}

impl Recorder<'_> {
    /// Records that the thread runs the task named `name` now.
    #[inline]
    pub(crate) fn running(&self, name: &'static str) {
        let number = match self.last.get() {
            Some((last, number)) if std::ptr::eq(last, name) => number,
            _ => {
                let number = self.number(name);
                self.last.set(Some((name, number)));
                number
            }
        };
        self.slot.store(number, Ordering::Release);
    }

    /// Returns the number of `name`, from this thread's list, or numbered in the pool's
    /// table if the thread never recorded it.
    #[cold]
    fn number(&self, name: &'static str) -> u32 {
        let mut seen = self.seen.borrow_mut();
        if let Some(&(_, number)) = seen.iter().find(|(known, _)| std::ptr::eq(*known, name)) {
            return number;
        }
        let number = self.tasks.number(name);
        seen.push((name, number));
        number
    }

    /// Records that the thread runs nothing.
    #[inline]
    pub(crate) fn idle(&self) {
        self.slot.store(0, Ordering::Release);
    }
}

impl fmt::Debug for RunningTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Takes no lock.
        f.debug_struct("RunningTasks")
            .field("threads", &self.slots.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads running tasks of alternating types each report the one they run now, and
    /// every name is numbered once.
    #[test]
    fn alternating_task_types_are_reported_and_numbered_once() {
        let tasks = RunningTasks::new(2);
        let (first, second) = (tasks.recorder(0), tasks.recorder(1));
        for round in 0..3 {
            first.running("a");
            second.running("b");
            assert_eq!(tasks.names(), ["a", "b"], "round {round}");
            first.running("b");
            second.running("a");
            assert_eq!(tasks.names(), ["b", "a"], "round {round}");
            first.idle();
            assert_eq!(tasks.names(), ["a"], "round {round}");
        }
        assert_eq!(*tasks.names.lock(), ["a", "b"]);
    }
}
