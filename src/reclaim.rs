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
//! Freed memory goes back to the allocator, not always to the operating system: glibc
//! returns only the free space at the top of its heap, and the tasks' boxes, freed all
//! over the heap, keep the rest of it resident. A burst of 10^6 timers cancelled down to 10
//! left about three quarters of its RSS behind (measured by `benches/memory.rs`). So once
//! this thread has freed at least [`TRIM_AFTER_BYTES`] and then had nothing to free for
//! [`TRIM_WHEN_IDLE_FOR`], it asks glibc to return every free page (`malloc_trim`), which is
//! what makes memory follow the live set by itself. Elsewhere than on glibc it does not.
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
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Bytes freed here since the last trim after which the next quiet moment trims.
const TRIM_AFTER_BYTES: usize = 1 << 20;

/// How long nothing must come to free before this thread trims.
const TRIM_WHEN_IDLE_FOR: Duration = Duration::from_millis(100);

/// Memory to free, and the thread's wake-up.
struct Reclaimer {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// What waits to be freed, and how many bytes that is.
#[derive(Default)]
struct Queue {
    memory: Vec<Box<dyn Send>>,
    bytes: usize,
}

/// The reclaimer, once started; `None` if its thread could not be started.
fn reclaimer() -> Option<&'static Reclaimer> {
    static RECLAIMER: OnceLock<Option<&'static Reclaimer>> = OnceLock::new();
    *RECLAIMER.get_or_init(|| {
        let reclaimer: &'static Reclaimer = Box::leak(Box::new(Reclaimer {
            queue: Mutex::new(Queue::default()),
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
        let mut untrimmed = 0;
        loop {
            let batch = {
                let mut queue = self.queue.lock();
                while queue.memory.is_empty() {
                    if untrimmed < TRIM_AFTER_BYTES {
                        self.wake.wait(&mut queue);
                    } else if self
                        .wake
                        .wait_for(&mut queue, TRIM_WHEN_IDLE_FOR)
                        .timed_out()
                        && queue.memory.is_empty()
                    {
                        untrimmed = 0;
                        parking_lot::MutexGuard::unlocked(&mut queue, trim);
                    }
                }
                untrimmed = untrimmed.saturating_add(std::mem::take(&mut queue.bytes));
                std::mem::take(&mut queue.memory)
            };
            drop(batch);
        }
    }
}

/// Frees `memory`, which takes `bytes`, on the reclaim thread (or at once, if it could not
/// be started).
pub(crate) fn free_later<T: Send + 'static>(memory: T, bytes: usize) {
    match reclaimer() {
        Some(reclaimer) => {
            let mut queue = reclaimer.queue.lock();
            queue.memory.push(Box::new(memory));
            queue.bytes = queue.bytes.saturating_add(bytes);
            drop(queue);
            reclaimer.wake.notify_one();
        }
        None => drop(memory),
    }
}

/// Returns the allocator's free pages to the operating system, where it is glibc's.
fn trim() {
    let start = Instant::now();
    let trimmed = malloc_trim();
    log::debug!(
        "trimmed the heap in {:?} (released: {trimmed})",
        start.elapsed()
    );
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_trim() -> bool {
    // SAFETY: this declares glibc's `int malloc_trim(size_t pad)` (malloc.h) with its true
    // signature: `usize` is `size_t` and `i32` is `int` on every Linux target Rust supports.
    // The function takes no pointers, accepts any `pad`, and is thread-safe (it takes each
    // arena's lock), so calling it can break no invariant of this or any other code.
    #[allow(unsafe_code)]
    unsafe extern "C" {
        safe fn malloc_trim(pad: usize) -> i32;
    }
    malloc_trim(0) != 0
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_trim() -> bool {
    false
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
        free_later(Flag(Arc::clone(&freed_on)), 0);
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

    /// Resident bytes of this process.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trim_returns_free_pages_inside_the_heap_to_the_os() {
        // 32 MiB of 32-byte boxes, every 1024th of which stays: the rest is freed memory
        // in the middle of the heap, which glibc keeps resident until trimmed.
        let boxes: Vec<Box<[u64; 3]>> = (0..1u64 << 20).map(|i| Box::new([i; 3])).collect();
        let kept: Vec<Box<[u64; 3]>> = boxes.into_iter().step_by(1024).collect();
        let before = rss_bytes();
        assert!(malloc_trim(), "malloc_trim released nothing");
        let after = rss_bytes();
        assert!(
            before.saturating_sub(after) >= 8 << 20,
            "RSS went from {before} to {after} bytes"
        );
        assert_eq!(
            kept.iter().map(|b| b[0]).sum::<u64>(),
            (0..1u64 << 20).step_by(1024).sum()
        );
    }
}
