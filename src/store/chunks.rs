//! Items in 64 KiB chunks of memory the timer maps itself: the storage of a shard's slots
//! (here) and of its list blocks (`timer_task_list`).
//!
//! A [`Chunks<T>`] hands out items by `u32` index. A chunk is mapped when the first of its
//! items is taken and unmapped once its last one is given back, so the memory follows the
//! items in use. Each chunk threads its vacant items through the items themselves
//! ([`Item::link`]) and the chunks with room are listed, so taking and giving back an
//! item are O(1).
//!
//! A [`Slot`] is an entry (Kafka gives every `TimerTaskEntry` an object of its own): its
//! task, its expiration, the generation of its occupant and where it is listed ([`Loc`]). A
//! slot's index never changes while it is occupied, so a handle names it by index
//! ([`EntryKey`]); the generation tells the handle's own occupant from a later one.
//!
//! Why not the heap: with glibc's malloc, the executor frees every task box into the arena
//! of the thread that added it, whose fastbins are coalesced, under the arena's lock, by
//! the next large `free` or `malloc` there: the driver then stalled in an ordinary `free`
//! (the ledger in `docs/design.md`). Mapped memory meets no arena, and unmapping
//! gives the pages back at once, so RSS follows the live set too.
//!
//! # Ground rules
//!
//! - Part of one shard's state, guarded by its lock (see `crate::lock_order`). Nothing here
//!   locks or runs user code, and taking and giving back items allocates nothing (the chunk
//!   directory grows when a chunk is mapped).
//! - Chunks emptied under the lock wait in `released`; the caller unmaps them after it
//!   lets go of the lock. One emptied chunk stays mapped as is (`empty`), so that an item
//!   taken and given back over and over at a chunk's edge maps and unmaps nothing.
//! - A slot's generation counts its occupants. A slot whose generation would wrap is
//!   retired; a chunk number keeps its chunk's highest generation when the chunk is
//!   unmapped, and is retired once they ran out. So a key never names a later occupant.
//! - The store's only `unsafe` code is here: [`Region`]'s mapping, which hands its `T`s out
//!   only through `&self` / `&mut self` as a `Vec` does, and [`prefetch`]. Every block says
//!   why it is sound.

use crate::task::TimerTask;

/// "None" for item and chunk numbers.
pub(crate) const NIL: u32 = u32::MAX;

/// An item that can sit in a chunk's vacant list.
pub(crate) trait Item: Sized {
    /// Items per chunk: `2^CHUNK_SHIFT`.
    const CHUNK_SHIFT: u32;
    /// Chunks at most.
    const MAX_CHUNKS: usize;

    /// Returns a vacant item whose successor in the vacant list is `next`, starting over from
    /// `generation` (ignored by items that count none).
    fn vacant(next: u32, generation: u32) -> Self;
    /// The link of a vacant item: its successor in its chunk's vacant list.
    fn link(&mut self) -> &mut u32;
    /// Returns the generation of the item (0 for items that count none). An item whose
    /// generations ran out (`u32::MAX`) is retired: it never joins the vacant list again.
    fn generation(&self) -> u32 {
        0
    }
}

/// The bookkeeping of one chunk number (its chunk, if mapped, is in `Chunks::regions`).
#[derive(Default)]
struct Chunk {
    /// Offset of the first vacant item, or `NIL`.
    vacant: u32,
    live: u32,
    /// Its index in `Chunks::partial`, or `NIL` while it has no room (or no region).
    partial_at: u32,
    /// Where the generations of this number's next chunk start.
    generation: u32,
}

/// Items of type `T`, in chunks of `2^T::CHUNK_SHIFT`, at most `T::MAX_CHUNKS` chunks.
pub(crate) struct Chunks<T> {
    /// Each chunk number's chunk, if mapped; apart from `chunks`, so that an item can be
    /// held while the bookkeeping changes.
    regions: Vec<Option<Region<T>>>,
    chunks: Vec<Chunk>,
    /// Chunk numbers whose chunk has room.
    partial: Vec<u32>,
    /// Chunk numbers without a chunk, free to be given one.
    unused: Vec<u32>,
    /// A mapped chunk without live items, kept for the next ones (or `NIL`).
    empty: u32,
    /// Chunks emptied under the lock, for the caller to unmap after it.
    pub(crate) released: Vec<Region<T>>,
    live: usize,
}

impl<T> Default for Chunks<T> {
    /// No chunk is mapped until an item is taken.
    fn default() -> Chunks<T> {
        Chunks {
            regions: Vec::new(),
            chunks: Vec::new(),
            partial: Vec::new(),
            unused: Vec::new(),
            empty: NIL,
            released: Vec::new(),
            live: 0,
        }
    }
}

impl<T: Item> Chunks<T> {
    /// Items per chunk.
    const PER_CHUNK: u32 = 1 << T::CHUNK_SHIFT;
    const MASK: u32 = Self::PER_CHUNK - 1;

    /// Returns the number of items taken and not given back.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Returns the item at `index`.
    ///
    /// # Panics
    ///
    /// Panics if its chunk is not mapped.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> &T {
        self.try_get(index).expect("an item of an unmapped chunk")
    }

    /// Returns the item at `index`, mutably (see [`get`](Self::get)).
    #[inline]
    pub(crate) fn get_mut(&mut self, index: u32) -> &mut T {
        self.try_get_mut(index)
            .expect("an item of an unmapped chunk")
    }

    /// Returns the item at `index` if its chunk is mapped.
    #[inline]
    pub(crate) fn try_get(&self, index: u32) -> Option<&T> {
        let chunk = self.regions.get((index >> T::CHUNK_SHIFT) as usize)?;
        Some(&chunk.as_ref()?[(index & Self::MASK) as usize])
    }

    /// Returns the item at `index` mutably, if its chunk is mapped.
    #[inline]
    pub(crate) fn try_get_mut(&mut self, index: u32) -> Option<&mut T> {
        let chunk = self.regions.get_mut((index >> T::CHUNK_SHIFT) as usize)?;
        Some(&mut chunk.as_mut()?[(index & Self::MASK) as usize])
    }

    /// True if no item can be taken: every chunk number is used and full, or retired.
    pub(crate) fn is_full(&self) -> bool {
        self.partial.is_empty() && self.unused.is_empty() && self.chunks.len() == T::MAX_CHUNKS
    }

    /// Takes a vacant item and returns its index and the item, for the caller to fill.
    /// `None` if the storage is full.
    #[inline]
    pub(crate) fn take_vacant(&mut self) -> Option<(u32, &mut T)> {
        let number = match self.partial.last() {
            Some(&number) => number,
            None => self.map_chunk()?,
        };
        let items = self.regions[number as usize]
            .as_mut()
            .expect("a partial chunk is mapped");
        let chunk = &mut self.chunks[number as usize];
        let offset = chunk.vacant;
        let item = &mut items[offset as usize];
        chunk.vacant = *item.link();
        chunk.live += 1;
        self.live += 1;
        if number == self.empty {
            self.empty = NIL;
        }
        if chunk.vacant == NIL {
            let at = std::mem::replace(&mut chunk.partial_at, NIL);
            unlist_partial(&mut self.partial, &mut self.chunks, at);
        }
        Some(((number << T::CHUNK_SHIFT) | offset, item))
    }

    /// Gives the item at `index` back; the caller has taken out what it owned.
    // Always: see `ShardState::left`.
    #[inline(always)]
    pub(crate) fn give_back(&mut self, index: u32) {
        let number = index >> T::CHUNK_SHIFT;
        let offset = index & Self::MASK;
        let items = self.regions[number as usize]
            .as_mut()
            .expect("an item of an unmapped chunk");
        let chunk = &mut self.chunks[number as usize];
        let had_room = chunk.vacant != NIL;
        let item = &mut items[offset as usize];
        *item.link() = chunk.vacant;
        if item.generation() != u32::MAX {
            chunk.vacant = offset;
        }
        chunk.live -= 1;
        self.live -= 1;
        if !had_room && chunk.vacant != NIL {
            chunk.partial_at = self.partial.len() as u32;
            self.partial.push(number);
        }
        if chunk.live == 0 {
            if self.empty == NIL {
                self.empty = number;
            } else {
                self.unmap_chunk(number);
            }
        }
    }

    /// Maps a chunk for a chunk number that has none; `None` if every number is taken or
    /// retired.
    fn map_chunk(&mut self) -> Option<u32> {
        let number = match self.unused.pop() {
            Some(number) => number,
            None if self.chunks.len() < T::MAX_CHUNKS => {
                // `vacant` and `partial_at` are set below, with the chunk.
                self.regions.push(None);
                self.chunks.push(Chunk::default());
                // Grown here, where chunks are added, so that giving chunks back never
                // allocates.
                let chunks = self.chunks.len();
                self.unused.reserve(chunks - self.unused.len());
                self.partial.reserve(chunks - self.partial.len());
                (chunks - 1) as u32
            }
            None => return None,
        };
        let generation = self.chunks[number as usize].generation;
        let items = region(Self::PER_CHUNK as usize, |offset| {
            let next = offset as u32 + 1;
            T::vacant(if next < Self::PER_CHUNK { next } else { NIL }, generation)
        });
        self.regions[number as usize] = Some(items);
        let chunk = &mut self.chunks[number as usize];
        chunk.vacant = 0;
        chunk.partial_at = self.partial.len() as u32;
        self.partial.push(number);
        Some(number)
    }

    /// Moves the chunk of `number` to `released`, remembering its highest generation.
    #[cold]
    fn unmap_chunk(&mut self, number: u32) {
        let chunk = &mut self.chunks[number as usize];
        let items = self.regions[number as usize]
            .take()
            .expect("unmapping an unmapped chunk");
        chunk.generation = items.iter().map(T::generation).max().unwrap_or(0);
        chunk.vacant = NIL;
        chunk.live = 0;
        if chunk.generation != u32::MAX {
            self.unused.push(number);
        }
        let at = std::mem::replace(&mut chunk.partial_at, NIL);
        if at != NIL {
            unlist_partial(&mut self.partial, &mut self.chunks, at);
        }
        self.released.push(items);
    }

    /// Empties the storage: every chunk moves into `out`, items included, for the caller to
    /// drop with no lock held. Generations are kept.
    pub(crate) fn clear(&mut self, out: &mut Vec<Region<T>>) {
        for number in 0..self.regions.len() {
            if self.regions[number].is_some() {
                self.unmap_chunk(number as u32);
            }
        }
        self.empty = NIL;
        self.live = 0;
        out.append(&mut self.released);
    }

    /// The bytes of every mapped chunk.
    pub(crate) fn mapped_bytes(&self) -> usize {
        let bytes = |region: &Region<T>| std::mem::size_of_val::<[T]>(region);
        self.regions.iter().flatten().map(bytes).sum()
    }
}

/// Removes `partial[at]`, keeping the moved chunk's `partial_at` right.
fn unlist_partial(partial: &mut Vec<u32>, chunks: &mut [Chunk], at: u32) {
    partial.swap_remove(at as usize);
    if let Some(&moved) = partial.get(at as usize) {
        chunks[moved as usize].partial_at = at;
    }
}

/// Slots per chunk: 2^11, 64 KiB of 32-byte slots.
const CHUNK_SHIFT: u32 = 11;

/// Slots one shard can hold. Indices fit 24 bits (the handle keeps flags above them).
pub(crate) const SHARD_SLOTS: usize = 1 << 24;

/// Names one entry within its shard: its slot, and the generation of the occupant meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// Where an entry is listed: its block and its offset there, packed as `block << 8 |
/// offset`; [`Loc::UNLISTED`] for an entry in no list; [`Loc::held`] for one in its
/// shard's backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc(u32);

/// The offset no block has that marks a held entry: its block bits are its place in the
/// backlog (below 2^24: a shard's slots).
const HELD: u32 = 0xFE;

impl Loc {
    /// In no list: just taken out of one by a flush, or in a timer without lists.
    pub(crate) const UNLISTED: Loc = Loc(u32::MAX);

    /// Held, at place `at` of the shard's backlog (see `held`).
    #[inline]
    pub(crate) fn held(at: usize) -> Loc {
        debug_assert!(at < 1 << 24);
        Loc((at as u32) << 8 | HELD)
    }

    /// The place in the backlog of a held entry; `None` for any other.
    #[inline]
    pub(crate) fn held_at(self) -> Option<usize> {
        (self.0 & 0xFF == HELD).then_some((self.0 >> 8) as usize)
    }

    /// In list block `block`, at `offset` (below 2^24 and [`HELD`]).
    #[inline]
    pub(crate) fn new(block: u32, offset: usize) -> Loc {
        debug_assert!(block < 1 << 24 && offset < HELD as usize);
        Loc((block << 8) | offset as u32)
    }

    #[inline]
    pub(crate) fn block(self) -> u32 {
        self.0 >> 8
    }

    #[inline]
    pub(crate) fn offset(self) -> usize {
        (self.0 & 0xFF) as usize
    }
}

/// One entry, or a vacant slot.
pub(crate) struct Slot {
    /// `Some` while occupied.
    task: Option<Box<dyn TimerTask>>,
    pub(crate) expiration_ms: i64,
    /// The generation of the current (or, vacant, the last) occupant.
    generation: u32,
    /// Occupied: where the entry is listed. Vacant: the next vacant slot of its chunk.
    pub(crate) loc: Loc,
}

impl Item for Slot {
    const CHUNK_SHIFT: u32 = CHUNK_SHIFT;
    const MAX_CHUNKS: usize = SHARD_SLOTS >> CHUNK_SHIFT;
    fn vacant(next: u32, generation: u32) -> Slot {
        Slot {
            task: None,
            expiration_ms: 0,
            generation,
            loc: Loc(next),
        }
    }

    fn link(&mut self) -> &mut u32 {
        debug_assert!(self.task.is_none(), "a vacant slot holds no task");
        &mut self.loc.0
    }

    fn generation(&self) -> u32 {
        self.generation
    }
}

/// The slots of one shard.
pub(crate) type Slots = Chunks<Slot>;

impl Slots {
    /// Stores an occupant, listed where `list` puts it (given the slot's index), and returns
    /// its key; gives the task back if no slot can be had (the shard is full).
    #[inline]
    pub(crate) fn insert(
        &mut self,
        task: Box<dyn TimerTask>,
        expiration_ms: i64,
        list: impl FnOnce(u32) -> Loc,
    ) -> Result<EntryKey, Box<dyn TimerTask>> {
        let Some((index, slot)) = self.take_vacant() else {
            return Err(task);
        };
        // Never wraps: a slot at u32::MAX is retired (see `Item::generation`).
        slot.generation += 1;
        slot.task = Some(task);
        slot.expiration_ms = expiration_ms;
        slot.loc = list(index);
        Ok(EntryKey {
            index,
            generation: slot.generation,
        })
    }

    /// True if `key` names the current occupant of its slot.
    #[inline]
    pub(crate) fn is_live(&self, key: EntryKey) -> bool {
        self.try_get(key.index)
            .is_some_and(|slot| slot.task.is_some() && slot.generation == key.generation)
    }

    /// Empties the slot of `key`'s occupant, if it is still there, and returns its task and
    /// where it was listed (for the caller to take it out of the list).
    #[inline]
    pub(crate) fn take(&mut self, key: EntryKey) -> Option<(Box<dyn TimerTask>, Loc)> {
        let slot = self.try_get_mut(key.index)?;
        if slot.generation != key.generation {
            return None;
        }
        let task = slot.task.take()?;
        let loc = slot.loc;
        self.give_back(key.index);
        Some((task, loc))
    }

    /// Empties the occupied slot `index` and returns its task and where it was listed.
    #[inline]
    pub(crate) fn vacate(&mut self, index: u32) -> (Box<dyn TimerTask>, Loc) {
        let slot = self.get_mut(index);
        let task = slot.task.take().expect("vacating a vacant slot");
        let loc = slot.loc;
        self.give_back(index);
        (task, loc)
    }
}

/// Takes the tasks out of `chunks` (taken out of a shard by a clear).
pub(crate) fn take_tasks(chunks: &mut [Region<Slot>]) -> Vec<Box<dyn TimerTask>> {
    chunks
        .iter_mut()
        .flat_map(|chunk| chunk.iter_mut())
        .filter_map(|slot| slot.task.take())
        .collect()
}

/// Fills a new [`Region`] of `len` values with `init(0)`, `init(1)`, ...
fn region<T>(len: usize, init: impl FnMut(usize) -> T) -> Region<T> {
    #[cfg(unix)]
    return Region::new(len, init);
    #[cfg(not(unix))]
    return (0..len).map(init).collect();
}

/// Values of `T` in memory of their own: an anonymous private mapping on Unix, a boxed slice
/// elsewhere.
#[cfg(unix)]
pub(crate) use mapped::Region;
#[cfg(not(unix))]
pub(crate) type Region<T> = Box<[T]>;

#[cfg(unix)]
#[allow(unsafe_code)]
mod mapped {
    use std::alloc::{Layout, handle_alloc_error};
    use std::marker::PhantomData;
    use std::ptr::NonNull;

    /// An anonymous private mapping holding `len` initialized `T`s.
    pub(crate) struct Region<T> {
        ptr: NonNull<T>,
        /// Initialized values: all of them once `new` returned.
        len: usize,
        /// The size of the mapping.
        bytes: usize,
        /// This owns `T`s (for drop check and auto traits).
        _owns: PhantomData<T>,
    }

    // SAFETY: a `Region<T>` owns its `T`s as a `Box<[T]>` would: it hands out `&T` only
    // through `&self` and `&mut T` only through `&mut self`, so sending it to another thread
    // sends the `T`s (hence `T: Send`), and sharing it shares `&T`s (hence `T: Sync`).
    unsafe impl<T: Send> Send for Region<T> {}
    // SAFETY: as above.
    unsafe impl<T: Sync> Sync for Region<T> {}

    /// Every page of a mapping is written at once (`init`), so the kernel may as well map
    /// them all in the `mmap` call: one system call instead of a page fault per page.
    #[cfg(target_os = "linux")]
    const POPULATE: libc::c_int = libc::MAP_POPULATE;
    #[cfg(not(target_os = "linux"))]
    const POPULATE: libc::c_int = 0;

    impl<T> Region<T> {
        /// Maps room for `len` values and fills it with `init(0)`, `init(1)`, ... If the
        /// operating system refuses the memory, this ends the process as a failed heap
        /// allocation does ([`handle_alloc_error`]).
        ///
        /// # Panics
        ///
        /// Panics if `len` is 0, or if `T` is zero-sized or aligned to more than a page.
        pub(crate) fn new(len: usize, mut init: impl FnMut(usize) -> T) -> Region<T> {
            let layout = Layout::array::<T>(len).expect("a region's size fits usize");
            assert!(layout.size() > 0 && layout.align() <= 4096);
            // SAFETY: an anonymous private mapping at an address of the kernel's choosing
            // touches no existing memory; the arguments are valid for `mmap(2)` (no file,
            // offset 0). The result is checked before use.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANON | POPULATE,
                    -1,
                    0,
                )
            };
            // Page-aligned (checked against `T`'s alignment above) and not null.
            let ptr = NonNull::new(addr.cast::<T>()).filter(|_| addr != libc::MAP_FAILED);
            let mut region = Region {
                ptr: ptr.unwrap_or_else(|| handle_alloc_error(layout)),
                len: 0,
                bytes: layout.size(),
                _owns: PhantomData,
            };
            for i in 0..len {
                let value = init(i);
                // SAFETY: `i < len`, so the slot is inside the mapping, which is aligned for
                // `T` and writable; it is uninitialized, so nothing is overwritten without
                // being dropped. `len` counts the initialized prefix, so if `init` panics,
                // `drop` drops exactly the values written so far and unmaps.
                unsafe { region.ptr.as_ptr().add(i).write(value) };
                region.len = i + 1;
            }
            region
        }
    }

    impl<T> std::ops::Deref for Region<T> {
        type Target = [T];
        fn deref(&self) -> &[T] {
            // SAFETY: the first `len` values are initialized, aligned and owned by `self`;
            // the shared borrow of `self` keeps them from being changed or freed meanwhile.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> std::ops::DerefMut for Region<T> {
        fn deref_mut(&mut self) -> &mut [T] {
            // SAFETY: as in `deref`, and the exclusive borrow of `self` makes this the only
            // reference to them.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> Drop for Region<T> {
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

/// Asks the processor to bring the memory `value` starts at into its caches, if the target
/// can be asked (x86-64); nothing otherwise. Never reads `value` itself.
///
/// The first read of a task's box on the executor, and of a slot in a flush, is likely a
/// cache miss; asking ahead lets the misses overlap (the ledger in
/// `docs/design.md`). Safe code could reach a `dyn TimerTask`'s memory only by calling
/// into it.
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
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A test item: its vacant link and a generation, retired at `u32::MAX`, in chunks of
    /// `2^SHIFT`, at most `MAX` of them.
    #[derive(Debug)]
    struct Cell<const SHIFT: u32, const MAX: usize> {
        next: u32,
        generation: u32,
    }

    impl<const SHIFT: u32, const MAX: usize> Item for Cell<SHIFT, MAX> {
        const CHUNK_SHIFT: u32 = SHIFT;
        const MAX_CHUNKS: usize = MAX;
        fn vacant(next: u32, generation: u32) -> Self {
            Cell { next, generation }
        }
        fn link(&mut self) -> &mut u32 {
            &mut self.next
        }
        fn generation(&self) -> u32 {
            self.generation
        }
    }

    #[test]
    fn chunks_are_mapped_on_demand_and_unmapped_when_empty() {
        let mut chunks: Chunks<Cell<4, 1_000>> = Chunks::default();
        assert_eq!(chunks.mapped_bytes(), 0);
        let taken: Vec<u32> = (0..40).map(|_| chunks.take_vacant().unwrap().0).collect();
        assert_eq!(chunks.live(), 40);
        let mapped = |c: &Chunks<Cell<4, 1_000>>| c.regions.iter().flatten().count();
        assert_eq!(mapped(&chunks), 3, "16 items per chunk");
        for &index in &taken[..32] {
            chunks.give_back(index);
        }
        assert_eq!(mapped(&chunks), 2, "one emptied chunk stays mapped");
        assert_eq!(std::mem::take(&mut chunks.released).len(), 1);
        // Taking and giving back at the edge maps and unmaps nothing.
        for _ in 0..100 {
            let index = chunks.take_vacant().unwrap().0;
            chunks.give_back(index);
            assert!(chunks.released.is_empty());
            assert_eq!(mapped(&chunks), 2);
        }
        // Indices stay unique among live items.
        let again: Vec<u32> = (0..32).map(|_| chunks.take_vacant().unwrap().0).collect();
        let mut all: Vec<u32> = again.iter().chain(&taken[32..]).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 40);
        assert_eq!(mapped(&chunks), 3);
    }

    #[test]
    fn a_retired_item_is_not_reused_and_a_retired_number_is_not_remapped() {
        let mut chunks: Chunks<Cell<1, 10>> = Chunks::default();
        let a = chunks.take_vacant().unwrap().0;
        let b = chunks.take_vacant().unwrap().0;
        chunks.get_mut(a).generation = u32::MAX;
        chunks.give_back(a);
        let c = chunks.take_vacant().unwrap().0;
        assert_ne!(
            c >> 1,
            a >> 1,
            "the chunk of a retired item has no room left"
        );
        chunks.give_back(b);
        // The chunk of `a` is empty now; its number is retired with it.
        assert!(!chunks.unused.contains(&(a >> 1)));
        chunks.give_back(c);
    }

    #[test]
    fn full_when_every_chunk_number_is_used() {
        let mut chunks: Chunks<Cell<1, 2>> = Chunks::default();
        for _ in 0..4 {
            assert!(!chunks.is_full());
            chunks.take_vacant().unwrap();
        }
        assert!(chunks.is_full());
        assert!(chunks.take_vacant().is_none());
    }

    #[test]
    fn clear_hands_back_every_chunk_and_keeps_generations() {
        let mut chunks: Chunks<Cell<2, 10>> = Chunks::default();
        let taken: Vec<u32> = (0..6).map(|_| chunks.take_vacant().unwrap().0).collect();
        chunks.get_mut(taken[5]).generation = 9;
        let mut out = Vec::new();
        chunks.clear(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(chunks.live(), 0);
        let index = chunks.take_vacant().unwrap().0;
        let chunk = (index >> 2) as usize;
        let base = chunks.chunks[chunk].generation;
        assert!(chunks.get(index).generation >= base);
        assert_eq!(
            chunks.chunks[(taken[5] >> 2) as usize].generation,
            9,
            "the highest generation of a cleared chunk is kept"
        );
    }

    fn insert(slots: &mut Slots, expiration_ms: i64) -> EntryKey {
        slots
            .insert(crate::task::timer_task(0, || {}), expiration_ms, |_| {
                Loc::UNLISTED
            })
            .ok()
            .unwrap()
    }

    #[test]
    fn slots_are_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    #[test]
    fn stale_keys_never_reach_a_new_occupant() {
        let mut slots = Slots::default();
        let keep = insert(&mut slots, 1);
        let old = insert(&mut slots, 1);
        drop(slots.take(old));
        let new = insert(&mut slots, 1);
        assert_eq!(new.index, old.index, "the slot is reused");
        assert_ne!(new.generation, old.generation);
        assert!(!slots.is_live(old) && slots.is_live(new) && slots.is_live(keep));
        assert_eq!(slots.live(), 2);
    }

    #[test]
    fn a_remapped_chunk_number_never_repeats_a_generation() {
        let mut slots = Slots::default();
        let per_chunk = 1usize << CHUNK_SHIFT;
        let first: Vec<EntryKey> = (0..2 * per_chunk)
            .map(|i| insert(&mut slots, i as i64))
            .collect();
        for key in &first {
            drop(slots.take(*key));
        }
        assert_eq!(
            std::mem::take(&mut slots.released).len(),
            1,
            "one chunk unmapped, one kept as the spare"
        );
        let again: Vec<EntryKey> = (0..2 * per_chunk)
            .map(|i| insert(&mut slots, i as i64))
            .collect();
        assert!(first.iter().all(|key| !slots.is_live(*key)));
        assert!(again.iter().all(|key| slots.is_live(*key)));
    }

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
        let mut region = region(10_000, |i| Counted(Arc::clone(&drops), i as u64));
        assert_eq!(region.len(), 10_000);
        assert!(region.iter().enumerate().all(|(i, c)| c.1 == i as u64));
        region[7].1 = 70;
        assert_eq!(region[7].1, 70);
        assert_eq!(size_of_val(&*region), 10_000 * size_of::<Counted>());
        // Sent to another thread and dropped there.
        std::thread::spawn(move || drop(region)).join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 10_000);
    }

    #[test]
    fn a_panicking_initializer_drops_what_it_made() {
        let drops = Arc::new(AtomicUsize::new(0));
        let result = std::panic::catch_unwind(|| {
            region(100, |i| {
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
        let region = region(16 << 20, |i| i as u8);
        let held = rss_bytes();
        drop(region);
        let after = rss_bytes();
        // Other tests run in parallel, so only loose bounds: 16 MiB came and went.
        assert!(held >= before + (12 << 20), "{before} -> {held}");
        assert!(after + (12 << 20) <= held, "{held} -> {after}");
    }

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
