//! A global allocator that counts the bytes currently allocated through it: what a bench
//! reads as "the allocator's count" (requested sizes: allocator rounding and fragmentation
//! are not in it). A bench binary installs it with `#[global_allocator]`.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The global allocator `A`, counting the bytes currently allocated through it.
pub(crate) struct Counting<A>(pub(crate) A);

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `A` with the caller's arguments unchanged, so it upholds
// `GlobalAlloc`'s contract exactly as `A` does; the counter is only a side effect.
// (Bench-only code.)
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; `ptr` came from `A` with this `layout`.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// The bytes currently allocated through [`Counting`] (0 if it is not the global
/// allocator).
pub(crate) fn allocated_bytes() -> isize {
    ALLOCATED.load(Ordering::SeqCst)
}
