//! A reader-writer lock whose read side scales: one `parking_lot::RwLock` per stripe.
//!
//! Kafka guards its timing wheel with one `ReentrantReadWriteLock`: `add` reads, the flush
//! writes. With a single lock word every adding thread writes the same cache line to
//! take and release the read lock, so two adding threads run slower than one. Here a reader
//! takes only the read lock of its own stripe (chosen by the thread, like the entry store's
//! shard), and a writer takes the write locks of every stripe, in stripe order. Readers on
//! different threads then share no lock word, and a writer still excludes them all.
//!
//! # Ground rules
//!
//! - The guarded value is reachable only through a guard: [`ShardedRwLock::read`] or
//!   [`ShardedRwLock::write`]. Both hand out `&T`, never `&mut T`: without `unsafe`, one
//!   `&mut` cannot be made out of many stripe guards. A value that changes under the write
//!   lock keeps that state in atomics, and its writing methods take a [`WriteProof`], so
//!   the types still say "the caller holds the write lock".
//! - Lock order: stripes in index order, only by `write`. A reader holds one stripe.

use std::fmt;
use std::ops::Deref;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One stripe's lock, on cache lines of its own.
#[repr(align(128))]
struct Stripe(RwLock<()>);

/// A reader-writer lock around a `T`, with one read lock per stripe.
pub(crate) struct ShardedRwLock<T> {
    stripes: Box<[Stripe]>,
    value: T,
}

/// Shared access: the read lock of the calling thread's stripe.
pub(crate) struct ReadGuard<'a, T> {
    _stripe: RwLockReadGuard<'a, ()>,
    value: &'a T,
}

/// Exclusive access: the write locks of every stripe.
pub(crate) struct WriteGuard<'a, T> {
    _stripes: Vec<RwLockWriteGuard<'a, ()>>,
    value: &'a T,
}

/// Evidence, for a method of the guarded value, that its caller holds the write lock.
#[derive(Debug)]
pub(crate) struct WriteProof<'a>(std::marker::PhantomData<&'a ()>);

impl<T> ShardedRwLock<T> {
    /// Creates the lock with `stripes` stripes (a power of two).
    pub(crate) fn new(value: T, stripes: usize) -> Self {
        assert!(stripes.is_power_of_two());
        ShardedRwLock {
            stripes: (0..stripes).map(|_| Stripe(RwLock::new(()))).collect(),
            value,
        }
    }

    /// Takes the read lock of the calling thread's stripe.
    #[cfg(test)]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        self.read_stripe(crate::entry_store::thread_hint())
    }

    /// Takes the read lock of stripe `hint` (modulo the stripe count): a caller that
    /// already has its [`thread_hint`](crate::entry_store::thread_hint) saves looking it
    /// up again.
    pub(crate) fn read_stripe(&self, hint: usize) -> ReadGuard<'_, T> {
        let stripe = &self.stripes[hint & (self.stripes.len() - 1)];
        ReadGuard {
            _stripe: stripe.0.read(),
            value: &self.value,
        }
    }

    /// Takes the write lock of every stripe, in stripe order.
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        WriteGuard {
            _stripes: self.stripes.iter().map(|stripe| stripe.0.write()).collect(),
            value: &self.value,
        }
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl WriteProof<'static> {
    /// A proof for unit tests that own the guarded value outright.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        WriteProof(std::marker::PhantomData)
    }
}

impl<T> WriteGuard<'_, T> {
    /// Returns the evidence that this guard holds the write lock.
    pub(crate) fn proof(&self) -> WriteProof<'_> {
        WriteProof(std::marker::PhantomData)
    }
}

impl<T: fmt::Debug> fmt::Debug for ShardedRwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedRwLock")
            .field("stripes", &self.stripes.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::thread;
    use std::time::Duration;

    #[test]
    fn a_writer_excludes_readers_on_every_stripe() {
        let lock = ShardedRwLock::new((AtomicUsize::new(0), AtomicBool::new(false)), 4);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2_000 {
                        let guard = lock.read();
                        assert!(!guard.1.load(Ordering::SeqCst), "a reader saw a writer");
                        guard.0.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..200 {
                    let guard = lock.write();
                    guard.1.store(true, Ordering::SeqCst);
                    thread::sleep(Duration::from_micros(20));
                    guard.1.store(false, Ordering::SeqCst);
                }
            });
        });
        assert_eq!(lock.read().0.load(Ordering::SeqCst), 8_000);
    }

    #[test]
    fn readers_on_different_threads_do_not_wait_for_each_other() {
        let lock = ShardedRwLock::new((), 8);
        let held = lock.read();
        thread::scope(|s| {
            s.spawn(|| drop(lock.read()));
        });
        drop(held);
        drop(lock.write());
    }
}
