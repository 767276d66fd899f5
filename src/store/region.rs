//! Fixed-size arrays that live outside the process's heap: the memory of slots and chain
//! blocks.
//!
//! # Why not the heap
//!
//! With glibc's malloc, the executor frees every task box into the arena of the thread
//! that added it, through the arena's fastbins, which are not coalesced until something
//! asks. A later `free` of a large block of that arena (a page of slots given back), or a
//! large `malloc` in it, first coalesces every one of them, holding the arena's lock: the
//! timer's driver then waits for that lock in an ordinary `free` (1.4 s for a burst of ten
//! million, measured in `docs/performance.md`, "What caused the 1.4 s stalls"). Memory the
//! timer maps itself never meets an arena: mapping and unmapping it takes no allocator lock and coalesces nothing, and
//! unmapping gives the pages back to the operating system at once, so the timer's own
//! memory follows its live set in RSS too, without trimming the heap.
//!
//! # Ground rules
//!
//! - A [`Region<T>`] owns `len` initialized `T`s in one anonymous private mapping (on Unix;
//!   elsewhere in a boxed slice), and hands them out only as `&[T]` / `&mut [T]` through
//!   `&self` / `&mut self`, so the borrow checker guards them as it guards a `Vec`'s.
//! - With `crate::prefetch` (a cache hint), this is the crate's only `unsafe` code. Every
//!   block says why it is sound.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// `len` values of `T` in memory of their own.
pub(crate) struct Region<T> {
    #[cfg(unix)]
    map: mapped::Mapping<T>,
    #[cfg(not(unix))]
    map: Box<[T]>,
}

impl<T> Region<T> {
    /// Maps room for `len` values and fills it with `init(0)`, `init(1)`, ...
    ///
    /// If the operating system refuses the memory, this ends the process as a failed heap
    /// allocation does ([`std::alloc::handle_alloc_error`]).
    ///
    /// # Panics
    ///
    /// Panics if `len` is 0, or if `T` is zero-sized or aligned to more than a page.
    pub(crate) fn new(len: usize, init: impl FnMut(usize) -> T) -> Region<T> {
        assert!(len > 0 && std::mem::size_of::<T>() > 0);
        assert!(std::mem::align_of::<T>() <= 4096);
        #[cfg(unix)]
        let map = mapped::Mapping::new(len, init).unwrap_or_else(|| {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<T>(len).expect("a region's size fits usize"),
            )
        });
        #[cfg(not(unix))]
        let map = (0..len).map(init).collect();
        Region { map }
    }

    /// The bytes this region takes from the operating system.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val::<[T]>(self)
    }
}

impl<T> Deref for Region<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        #[cfg(unix)]
        return self.map.as_slice();
        #[cfg(not(unix))]
        return &self.map;
    }
}

impl<T> DerefMut for Region<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        #[cfg(unix)]
        return self.map.as_mut_slice();
        #[cfg(not(unix))]
        return &mut self.map;
    }
}

impl<T> fmt::Debug for Region<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region").field("len", &self.len()).finish()
    }
}

#[cfg(unix)]
#[allow(unsafe_code)]
mod mapped {
    use std::marker::PhantomData;
    use std::ptr::NonNull;

    /// An anonymous private mapping holding `len` initialized `T`s.
    pub(super) struct Mapping<T> {
        ptr: NonNull<T>,
        /// Initialized values: all of them once `new` returned.
        len: usize,
        /// The size of the mapping.
        bytes: usize,
        /// This owns `T`s (for drop check and auto traits).
        _owns: PhantomData<T>,
    }

    // SAFETY: a `Mapping<T>` owns its `T`s as a `Box<[T]>` would: it hands out `&T` only
    // through `&self` and `&mut T` only through `&mut self`, so sending it to another thread
    // sends the `T`s (hence `T: Send`), and sharing it shares `&T`s (hence `T: Sync`).
    unsafe impl<T: Send> Send for Mapping<T> {}
    // SAFETY: as above.
    unsafe impl<T: Sync> Sync for Mapping<T> {}

    /// Every page of a mapping is written at once (`init`), so the kernel may as well map
    /// them all in the `mmap` call: one system call instead of a page fault per page.
    #[cfg(target_os = "linux")]
    const POPULATE: libc::c_int = libc::MAP_POPULATE;
    #[cfg(not(target_os = "linux"))]
    const POPULATE: libc::c_int = 0;

    impl<T> Mapping<T> {
        /// Returns `None` if the size overflows or the operating system refuses.
        pub(super) fn new(len: usize, mut init: impl FnMut(usize) -> T) -> Option<Mapping<T>> {
            let bytes = len.checked_mul(std::mem::size_of::<T>())?;
            // SAFETY: an anonymous private mapping at an address of the kernel's choosing
            // touches no existing memory; the arguments are valid for `mmap(2)` (no file,
            // offset 0). The result is checked before use.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANON | POPULATE,
                    -1,
                    0,
                )
            };
            if addr == libc::MAP_FAILED {
                return None;
            }
            // Page-aligned (checked against `T`'s alignment by `Region::new`) and not null.
            let ptr = NonNull::new(addr.cast::<T>())?;
            let mut mapping = Mapping {
                ptr,
                len: 0,
                bytes,
                _owns: PhantomData,
            };
            for i in 0..len {
                let value = init(i);
                // SAFETY: `i < len`, so the slot is inside the mapping, which is aligned for
                // `T` and writable; it is uninitialized, so nothing is overwritten without
                // being dropped. `len` counts the initialized prefix, so if `init` panics,
                // `drop` drops exactly the values written so far and unmaps.
                unsafe { mapping.ptr.as_ptr().add(i).write(value) };
                mapping.len = i + 1;
            }
            Some(mapping)
        }

        pub(super) fn as_slice(&self) -> &[T] {
            // SAFETY: the first `len` values are initialized, aligned and owned by `self`;
            // the shared borrow of `self` keeps them from being changed or freed meanwhile.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }

        pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
            // SAFETY: as in `as_slice`, and the exclusive borrow of `self` makes this the
            // only reference to them.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> Drop for Mapping<T> {
        fn drop(&mut self) {
            // SAFETY: the first `len` values are initialized and owned by `self`, and nothing
            // refers to them any more (`&mut self`); each is dropped once.
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ));
            }
            // SAFETY: `ptr` and `bytes` are exactly the mapping this value made, which nothing
            // uses after this.
            let unmapped = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
            debug_assert_eq!(unmapped, 0, "munmap failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>, u64);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_region_holds_initialized_values_and_drops_each_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut region = Region::new(10_000, |i| Counted(Arc::clone(&drops), i as u64));
        assert_eq!(region.len(), 10_000);
        assert!(region.iter().enumerate().all(|(i, c)| c.1 == i as u64));
        region[7].1 = 70;
        assert_eq!(region[7].1, 70);
        assert_eq!(region.bytes(), 10_000 * std::mem::size_of::<Counted>());
        // Sent to another thread and dropped there.
        std::thread::spawn(move || drop(region)).join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 10_000);
    }

    #[test]
    fn a_panicking_initializer_drops_what_it_made() {
        let drops = Arc::new(AtomicUsize::new(0));
        let result = std::panic::catch_unwind(|| {
            Region::new(100, |i| {
                assert!(i < 40, "init fails at 40");
                Counted(Arc::clone(&drops), i as u64)
            })
        });
        assert!(result.is_err());
        assert_eq!(drops.load(Ordering::SeqCst), 40);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_a_region_gives_its_pages_back() {
        fn rss_bytes() -> usize {
            let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
            let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
            pages * 4096
        }
        let before = rss_bytes();
        let region = Region::new(16 << 20, |i| i as u8);
        let held = rss_bytes();
        drop(region);
        let after = rss_bytes();
        // Other tests run in parallel, so only loose bounds: 16 MiB came and went.
        assert!(held >= before + (12 << 20), "{before} -> {held}");
        assert!(after + (12 << 20) <= held, "{held} -> {after}");
    }
}
