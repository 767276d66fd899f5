//! Frees the memory timers give back, on a thread of its own.
//!
//! Pages of slots and blocks of lists are given back as timers empty. Freeing them is cheap
//! by itself, but with glibc's allocator a free that leaves a large free block first
//! coalesces every small block freed since the last time this happened — here, the boxes
//! of every task the executor ran, which glibc keeps aside uncoalesced. After ten million
//! timers expire that takes seconds (measured 2.5-3.2 s for 10^7), and whoever frees the
//! first page pays it: the driver in the middle of `advance_clock`, or a thread in the
//! middle of `cancel`. So the timer frees nothing large on those paths; it hands the memory
//! to this thread, which frees it a moment later, off every caller's path.
//!
//! # Ground rules
//!
//! - One thread per process, named `timingwheel-reclaim`, started on first use and parked
//!   on a condvar while there is nothing to free. It runs no user code: what comes here is
//!   empty buffers (tasks are dropped, run or handed back by the timer's callers).
//! - `queue` is guarded by its mutex, which is taken alone (no other lock is held by the
//!   thread that takes it, except a shard's when a guard is dropped — and this mutex is
//!   never held while taking any other).
//! - If the thread cannot be started, memory is freed at once by the caller instead.

use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};

/// Memory to free, and the thread's wake-up.
struct Reclaimer {
    queue: Mutex<Vec<Box<dyn Send>>>,
    wake: Condvar,
}

/// The reclaimer, once started; `None` if its thread could not be started.
fn reclaimer() -> Option<&'static Reclaimer> {
    static RECLAIMER: OnceLock<Option<&'static Reclaimer>> = OnceLock::new();
    *RECLAIMER.get_or_init(|| {
        let reclaimer: &'static Reclaimer = Box::leak(Box::new(Reclaimer {
            queue: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        let started = std::thread::Builder::new()
            .name("timingwheel-reclaim".to_owned())
            .spawn(move || reclaimer.run());
        match started {
            Ok(_) => Some(reclaimer),
            Err(error) => {
                log::warn!("cannot start the reclaim thread ({error}); freeing memory in place");
                None
            }
        }
    })
}

impl Reclaimer {
    fn run(&self) {
        loop {
            let batch = {
                let mut queue = self.queue.lock();
                while queue.is_empty() {
                    self.wake.wait(&mut queue);
                }
                std::mem::take(&mut *queue)
            };
            drop(batch);
        }
    }
}

/// Frees `memory` on the reclaim thread (or at once, if it could not be started).
pub(crate) fn free_later<T: Send + 'static>(memory: T) {
    match reclaimer() {
        Some(reclaimer) => {
            reclaimer.queue.lock().push(Box::new(memory));
            reclaimer.wake.notify_one();
        }
        None => drop(memory),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Records the thread that drops it.
    struct Flag(Arc<Mutex<Option<std::thread::ThreadId>>>);
    impl Drop for Flag {
        fn drop(&mut self) {
            *self.0.lock() = Some(std::thread::current().id());
        }
    }

    #[test]
    fn memory_is_freed_soon_on_another_thread() {
        let freed_on = Arc::new(Mutex::new(None));
        free_later(Flag(Arc::clone(&freed_on)));
        let deadline = Instant::now() + Duration::from_secs(10);
        let thread = loop {
            if let Some(thread) = *freed_on.lock() {
                break thread;
            }
            assert!(Instant::now() < deadline, "not freed within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_ne!(thread, std::thread::current().id(), "freed on the caller");
    }
}
