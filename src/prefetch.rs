//! A hint that memory is about to be read: the one place the crate asks the processor to
//! fetch a cache line ahead of time.
//!
//! The first read of a task's box on the executor, and of a slot in a flush, is likely a
//! cache and TLB miss: both were written long before. Asking for the next boxes and a
//! chunk's slots ahead lets the misses overlap; the figures that pay for it, with and
//! without the hint, are in `docs/performance.md` ("The prefetch"). A plain read cannot do
//! it here: a task is a `dyn TimerTask` whose memory safe code can only reach by calling
//! into it.

/// Asks the processor to bring the memory `value` starts at into its caches, if the target
/// can be asked (x86-64); nothing otherwise. Never reads `value` itself.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let address = (value as *const T).cast::<i8>();
        // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 processor has. It is a hint:
        // it reads nothing the program can observe, never faults (even on an invalid
        // address, and this one is a live reference's), and changes no memory.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetching_leaves_every_value_as_it_was() {
        // Sized and unsized values, on the heap and on the stack, a zero-sized one whose
        // address is dangling: none is changed or read wrongly afterwards.
        let boxed: Box<dyn Fn() -> u64> = Box::new(|| 7);
        let slice: &[u32] = &[1, 2, 3];
        let zero_sized: Box<()> = Box::new(());
        let on_stack = 42u8;
        prefetch(&*boxed);
        prefetch(slice);
        prefetch(&*zero_sized);
        prefetch(&on_stack);
        assert_eq!(
            (boxed(), slice, *zero_sized, on_stack),
            (7, &[1, 2, 3][..], (), 42)
        );
    }
}
