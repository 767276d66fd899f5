//! A global allocator that counts, for the binaries that install it: the bytes currently
//! allocated through it (requested sizes: the allocator's rounding and fragmentation are not
//! in it), and the allocation calls each thread made. The first is "the allocator's count"
//! of the memory benches and the live heap of `tests/leaks.rs`; the second shows a path
//! allocates nothing (`tests/keyed_reschedule_alloc.rs`, `benches/memory.rs`'s
//! `allocations`).
//!
//! Not part of `common`: a binary that counts declares it (`#[path]`) and installs it, as
//! `#[global_allocator] static A: Counting<System> = Counting(System);`; it then counts
//! every allocation of its process. `benches/memory.rs` includes it the same way.

// Each binary reads one of the two counts.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The global allocator `A`, counting through it.
pub(crate) struct Counting<A>(pub(crate) A);

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Allocation calls (alloc, alloc_zeroed, realloc) made by this thread.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// The bytes currently allocated through [`Counting`] (0 if it is not the global
/// allocator).
pub(crate) fn allocated_bytes() -> isize {
    ALLOCATED.load(Ordering::SeqCst)
}

/// The allocation calls this thread made through [`Counting`] so far.
pub(crate) fn allocations() -> u64 {
    CALLS.with(Cell::get)
}

/// Counts one allocation call of this thread, and `bytes` more allocated if it succeeded.
fn counted(ptr: *mut u8, bytes: isize) -> *mut u8 {
    // `try_with`: the allocator may be called while this thread's locals are torn down.
    let _ = CALLS.try_with(|calls| calls.set(calls.get() + 1));
    if !ptr.is_null() {
        ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
    }
    ptr
}

// SAFETY: every method forwards to `A` with the caller's arguments unchanged, so it upholds
// `GlobalAlloc`'s contract exactly as `A` does; the counting touches no heap memory (an
// atomic, and a `const`-initialised `Cell` without destructor). Test and bench code only:
// the library itself has no allocator.
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        counted(unsafe { self.0.alloc(layout) }, layout.size() as isize)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        counted(
            unsafe { self.0.alloc_zeroed(layout) },
            layout.size() as isize,
        )
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from `A` with this `layout`, and the
        // caller upholds `realloc`'s contract for `new_size`.
        let new = unsafe { self.0.realloc(ptr, layout, new_size) };
        counted(new, new_size as isize - layout.size() as isize)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `A` with this `layout`.
        unsafe { self.0.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}
