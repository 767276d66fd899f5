//! Items in mapped chunks: the storage that slots and chain blocks share.
//!
//! A [`Chunks<T>`] hands out items by `u32` index. Items live in chunks of
//! `2^T::CHUNK_SHIFT` items,
//! each a [`Region`] of its own; a chunk is mapped when the first of its items is taken and
//! unmapped once its last one is given back, so the memory follows the items in use. Each
//! chunk keeps its vacant items in a list threaded through the items themselves
//! ([`Item::next_vacant`]), and the chunks with room are listed too, so taking and giving
//! back an item are O(1).
//!
//! # Ground rules
//!
//! - A `Chunks` is part of one shard's state, guarded by the shard's lock. Nothing here
//!   locks, runs user code, or allocates from the heap on the paths that take and give back
//!   items, except to grow the chunk directory when a new chunk is mapped.
//! - Chunks emptied while the lock is held are not unmapped under it: they wait in
//!   `released` until [`take_released`](Chunks::take_released), and the caller unmaps them
//!   once it has let go of the lock. One emptied chunk stays mapped, with its vacant list as
//!   it is (`empty`), so that an item taken and given back over and over at a chunk's edge
//!   neither maps nor unmaps nor rebuilds anything; a second emptied chunk is unmapped.
//! - Chunk numbers are reused. An item type that counts generations (slots) reads the
//!   highest generation of a chunk before it is given back
//!   ([`Item::generation`]), and the next chunk of that number starts from there, so a
//!   number never repeats a generation; a chunk number whose generations ran out is retired.

use super::region::Region;

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
    /// Returns the successor of this vacant item in its chunk's vacant list.
    fn next_vacant(&self) -> u32;
    /// Makes this item vacant with successor `next`; returns false if the item must never be
    /// used again (its generations ran out): it then stays out of the vacant list.
    fn vacate(&mut self, next: u32) -> bool;
    /// Returns the generation of the item (0 for items that count none).
    fn generation(&self) -> u32 {
        0
    }
}

/// The bookkeeping of one chunk number (its chunk, if mapped, is in `Chunks::regions`).
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
    /// Chunks emptied under the lock, to be unmapped after it.
    released: Vec<Region<T>>,
    live: usize,
}

impl<T: Item> Chunks<T> {
    /// Creates empty storage: no chunk is mapped until an item is taken.
    pub(crate) const fn new() -> Chunks<T> {
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
        let chunk = self.regions[(index >> T::CHUNK_SHIFT) as usize]
            .as_ref()
            .expect("an item of an unmapped chunk");
        &chunk[(index & Self::MASK) as usize]
    }

    /// Returns the item at `index`, mutably.
    ///
    /// # Panics
    ///
    /// Panics if its chunk is not mapped.
    #[inline]
    pub(crate) fn get_mut(&mut self, index: u32) -> &mut T {
        let chunk = self.regions[(index >> T::CHUNK_SHIFT) as usize]
            .as_mut()
            .expect("an item of an unmapped chunk");
        &mut chunk[(index & Self::MASK) as usize]
    }

    /// Returns the item at `index` if its chunk is mapped.
    #[inline]
    pub(crate) fn try_get(&self, index: u32) -> Option<&T> {
        let chunk = self.regions.get((index >> T::CHUNK_SHIFT) as usize)?;
        chunk
            .as_ref()
            .map(|items| &items[(index & Self::MASK) as usize])
    }

    /// Returns the item at `index` mutably, if its chunk is mapped.
    #[inline]
    pub(crate) fn try_get_mut(&mut self, index: u32) -> Option<&mut T> {
        let chunk = self.regions.get_mut((index >> T::CHUNK_SHIFT) as usize)?;
        chunk
            .as_mut()
            .map(|items| &mut items[(index & Self::MASK) as usize])
    }

    /// True if no item can be taken: every chunk number is used and full, or retired.
    pub(crate) fn is_full(&self) -> bool {
        self.partial.is_empty() && self.unused.is_empty() && self.chunks.len() == T::MAX_CHUNKS
    }

    /// Takes a vacant item and returns its index and the item, for the caller to fill.
    /// `None` if the storage is full.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<(u32, &mut T)> {
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
        chunk.vacant = item.next_vacant();
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
        if items[offset as usize].vacate(chunk.vacant) {
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
                self.regions.push(None);
                self.chunks.push(Chunk {
                    vacant: NIL,
                    live: 0,
                    partial_at: NIL,
                    generation: 0,
                });
                // Grown here, where chunks are added, so that giving chunks back never
                // allocates.
                let chunks = self.chunks.len();
                self.unused.reserve(chunks - self.unused.len());
                self.partial.reserve(chunks - self.partial.len());
                (chunks - 1) as u32
            }
            None => return None,
        };
        let per_chunk = Self::PER_CHUNK;
        let generation = self.chunks[number as usize].generation;
        let next = |offset: u32| {
            if offset + 1 < per_chunk {
                offset + 1
            } else {
                NIL
            }
        };
        let items = Region::new(per_chunk as usize, |offset| {
            T::vacant(next(offset as u32), generation)
        });
        self.regions[number as usize] = Some(items);
        let chunk = &mut self.chunks[number as usize];
        chunk.vacant = 0;
        chunk.partial_at = self.partial.len() as u32;
        self.partial.push(number);
        Some(number)
    }

    /// Takes the empty chunk of `number` away, remembering its highest generation.
    #[cold]
    fn unmap_chunk(&mut self, number: u32) {
        let chunk = &mut self.chunks[number as usize];
        let items = self.regions[number as usize]
            .take()
            .expect("unmapping an unmapped chunk");
        let generation = items.iter().map(T::generation).max().unwrap_or(0);
        chunk.generation = generation;
        chunk.vacant = NIL;
        if generation != u32::MAX {
            self.unused.push(number);
        }
        let at = std::mem::replace(&mut chunk.partial_at, NIL);
        if at != NIL {
            unlist_partial(&mut self.partial, &mut self.chunks, at);
        }
        self.released.push(items);
    }

    /// True if chunks wait to be unmapped.
    pub(crate) fn has_released(&self) -> bool {
        !self.released.is_empty()
    }

    /// Moves the chunks emptied since the last call into `out`, for the caller to drop
    /// (unmap) once it holds no lock.
    pub(crate) fn take_released(&mut self, out: &mut Vec<Region<T>>) {
        out.append(&mut self.released);
    }

    /// Empties the storage: every chunk moves into `out`, items
    /// included (the caller drops them with no lock held). Generations are kept.
    pub(crate) fn clear(&mut self, out: &mut Vec<Region<T>>) {
        out.append(&mut self.released);
        self.empty = NIL;
        self.partial.clear();
        self.unused.clear();
        for (number, chunk) in self.chunks.iter_mut().enumerate() {
            if let Some(items) = self.regions[number].take() {
                chunk.generation = items.iter().map(T::generation).max().unwrap_or(0);
                out.push(items);
            }
            chunk.vacant = NIL;
            chunk.live = 0;
            chunk.partial_at = NIL;
            if chunk.generation != u32::MAX {
                self.unused.push(number as u32);
            }
        }
        self.live = 0;
    }

    /// The bytes of every mapped chunk.
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.regions.iter().flatten().map(Region::bytes).sum()
    }
}

/// Removes `partial[at]`, keeping the moved chunk's `partial_at` right.
fn unlist_partial(partial: &mut Vec<u32>, chunks: &mut [Chunk], at: u32) {
    partial.swap_remove(at as usize);
    if let Some(&moved) = partial.get(at as usize) {
        chunks[moved as usize].partial_at = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        fn next_vacant(&self) -> u32 {
            self.next
        }
        fn vacate(&mut self, next: u32) -> bool {
            self.next = next;
            self.generation != u32::MAX
        }
        fn generation(&self) -> u32 {
            self.generation
        }
    }

    #[test]
    fn chunks_are_mapped_on_demand_and_unmapped_when_empty() {
        let mut chunks: Chunks<Cell<4, 1_000>> = Chunks::new();
        assert_eq!(chunks.mapped_bytes(), 0);
        let taken: Vec<u32> = (0..40).map(|_| chunks.take().unwrap().0).collect();
        assert_eq!(chunks.live(), 40);
        let mapped = |c: &Chunks<Cell<4, 1_000>>| c.regions.iter().flatten().count();
        assert_eq!(mapped(&chunks), 3, "16 items per chunk");
        for &index in &taken[..32] {
            chunks.give_back(index);
        }
        assert_eq!(mapped(&chunks), 2, "one emptied chunk stays mapped");
        assert!(chunks.has_released());
        let mut released = Vec::new();
        chunks.take_released(&mut released);
        assert_eq!(released.len(), 1);
        assert!(!chunks.has_released());
        // Taking and giving back at the edge maps and unmaps nothing.
        for _ in 0..100 {
            let index = chunks.take().unwrap().0;
            chunks.give_back(index);
            assert!(!chunks.has_released());
            assert_eq!(mapped(&chunks), 2);
        }
        // Indices stay unique among live items.
        let again: Vec<u32> = (0..32).map(|_| chunks.take().unwrap().0).collect();
        let mut all: Vec<u32> = again.iter().chain(&taken[32..]).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 40);
        assert_eq!(mapped(&chunks), 3);
    }

    #[test]
    fn a_retired_item_is_not_reused_and_a_retired_number_is_not_remapped() {
        let mut chunks: Chunks<Cell<1, 10>> = Chunks::new();
        let a = chunks.take().unwrap().0;
        let b = chunks.take().unwrap().0;
        chunks.get_mut(a).generation = u32::MAX;
        chunks.give_back(a);
        let c = chunks.take().unwrap().0;
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
        let mut chunks: Chunks<Cell<1, 2>> = Chunks::new();
        for _ in 0..4 {
            assert!(!chunks.is_full());
            chunks.take().unwrap();
        }
        assert!(chunks.is_full());
        assert!(chunks.take().is_none());
    }

    #[test]
    fn clear_hands_back_every_chunk_and_keeps_generations() {
        let mut chunks: Chunks<Cell<2, 10>> = Chunks::new();
        let taken: Vec<u32> = (0..6).map(|_| chunks.take().unwrap().0).collect();
        chunks.get_mut(taken[5]).generation = 9;
        let mut out = Vec::new();
        chunks.clear(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(chunks.live(), 0);
        let index = chunks.take().unwrap().0;
        let chunk = (index >> 2) as usize;
        let base = chunks.chunks[chunk].generation;
        assert!(chunks.get(index).generation >= base);
        assert_eq!(
            chunks.chunks[(taken[5] >> 2) as usize].generation,
            9,
            "the highest generation of a cleared chunk is kept"
        );
    }
}
