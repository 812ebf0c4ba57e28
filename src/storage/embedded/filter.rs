//! One deduper's bits in memory: per shard, lazily allocated pages of expiry
//! stamps. A stamp is the expiry time in whole seconds since the Unix epoch,
//! rounded up (so a bit may outlive its TTL by under a second, never the
//! reverse); 0 means never set. Writes are lock-free `fetch_max`, which is
//! what keeps an expiry from moving backwards.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::contract::sizing::Geometry;

/// Bits per page: the unit of allocation, dirtiness and persistence (4 KiB).
pub const PAGE_BITS: u32 = 1024;

/// Stamp for an expiry time in ms: whole seconds, rounded up, at least 1.
pub fn stamp_of(expire_ms: i64) -> u32 {
    let secs = expire_ms.max(1).div_euclid(1000) + i64::from(expire_ms.rem_euclid(1000) != 0);
    secs.clamp(1, i64::from(u32::MAX)) as u32
}

/// Latest expiry time a stamp holds, in ms since the Unix epoch
/// (2106-02-07T06:28:15Z); later ones would be cut short, so the engine
/// refuses them.
pub const MAX_EXPIRE_MS: i64 = u32::MAX as i64 * 1000;

/// Expiry time in ms of a non-zero stamp.
pub fn expire_ms_of(stamp: u32) -> i64 {
    i64::from(stamp) * 1000
}

/// A page of stamps plus a flag saying it changed since it was last persisted.
pub struct Page {
    stamps: Box<[AtomicU32]>,
    dirty: AtomicBool,
}

impl Page {
    fn new(len: u32) -> Page {
        Page {
            stamps: (0..len).map(|_| AtomicU32::new(0)).collect(),
            dirty: AtomicBool::new(false),
        }
    }

    /// Raises stamp `i` to at least `stamp`; returns the previous stamp.
    /// Marks the page dirty even when nothing changed: the writer's journal
    /// record may be checkpointed away, so the page must be saved after it.
    fn raise(&self, i: usize, stamp: u32) -> u32 {
        // Most raises within one second find the same stamp already there:
        // a plain load then skips the locked read-modify-write.
        let current = self.stamps[i].load(Ordering::Acquire);
        let prev = if current >= stamp {
            current
        } else {
            self.stamps[i].fetch_max(stamp, Ordering::AcqRel)
        };
        if !self.dirty.load(Ordering::Acquire) {
            self.dirty.store(true, Ordering::Release);
        }
        prev
    }

    /// Marks the page as needing to be saved.
    pub fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Clears the dirty flag, returning whether it was set.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    /// Zeroes every stamp that expired before `now_stamp`; returns whether
    /// any did (and then marks the page dirty so the sweep is persisted).
    pub fn sweep(&self, now_stamp: u32) -> bool {
        let mut swept = false;
        for s in self.stamps.iter() {
            let v = s.load(Ordering::Relaxed);
            // A concurrent raise wins the race: the CAS then fails and we leave it.
            if v != 0 && v < now_stamp && s.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                swept = true;
            }
        }
        if swept {
            self.dirty.store(true, Ordering::Release);
        }
        swept
    }

    /// The stamps as little-endian `u32`s, or `None` when all are zero.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.stamps.len() * 4);
        let mut any = false;
        for s in self.stamps.iter() {
            let v = s.load(Ordering::Acquire);
            any |= v != 0;
            out.extend_from_slice(&v.to_le_bytes());
        }
        any.then_some(out)
    }

    /// Merges stored stamps into the page (max, so order does not matter).
    fn merge_encoded(&self, bytes: &[u8]) {
        for (s, chunk) in self.stamps.iter().zip(bytes.chunks_exact(4)) {
            let v = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            if v != 0 {
                s.fetch_max(v, Ordering::AcqRel);
            }
        }
    }
}

type Shard = Box<[OnceLock<Page>]>;

/// All pages of one deduper.
pub struct Filter {
    page_len: u32,
    pages_per_shard: u32,
    shards: Box<[OnceLock<Shard>]>,
}

impl Filter {
    pub fn new(geometry: &Geometry) -> Filter {
        let page_len = geometry.bits_per_shard.min(PAGE_BITS);
        Filter {
            page_len,
            pages_per_shard: geometry.bits_per_shard.div_ceil(page_len),
            shards: (0..geometry.shards).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Memory a filter of this geometry takes once every page is written, in
    /// bytes: 4 bytes per bit plus the page index.
    pub fn full_memory_bytes(geometry: &Geometry) -> u64 {
        let page_len = u64::from(geometry.bits_per_shard.min(PAGE_BITS));
        let pages = u64::from(geometry.shards) * u64::from(geometry.bits_per_shard).div_ceil(page_len);
        let index = (std::mem::size_of::<OnceLock<Page>>() + std::mem::size_of::<Page>()) as u64;
        pages * (page_len * 4 + index) + u64::from(geometry.shards) * std::mem::size_of::<OnceLock<Shard>>() as u64
    }

    fn locate(&self, shard: u32, bit: u32) -> (usize, usize, usize) {
        (
            shard as usize,
            (bit / self.page_len) as usize,
            (bit % self.page_len) as usize,
        )
    }

    fn page(&self, shard: usize, page: usize) -> Option<&Page> {
        self.shards.get(shard)?.get()?.get(page)?.get()
    }

    fn page_or_alloc(&self, shard: usize, page: usize) -> Option<&Page> {
        let pages = self
            .shards
            .get(shard)?
            .get_or_init(|| (0..self.pages_per_shard).map(|_| OnceLock::new()).collect());
        Some(pages.get(page)?.get_or_init(|| Page::new(self.page_len)))
    }

    /// The stamp of a bit (0 when never set or out of range).
    pub fn get(&self, shard: u32, bit: u32) -> u32 {
        let (s, p, i) = self.locate(shard, bit);
        self.page(s, p).map_or(0, |page| page.stamps[i].load(Ordering::Acquire))
    }

    /// Hints the CPU to load a bit's stamp into cache. A batch touches
    /// thousands of stamps scattered over the filter, one cache miss each;
    /// prefetching a few addresses ahead overlaps those misses. No effect
    /// for pages not yet allocated or on other architectures.
    #[inline]
    pub fn prefetch(&self, shard: u32, bit: u32) {
        #[cfg(target_arch = "x86_64")]
        {
            let (s, p, i) = self.locate(shard, bit);
            if let Some(stamp) = self.page(s, p).and_then(|page| page.stamps.get(i)) {
                let ptr = stamp as *const AtomicU32 as *const i8;
                // SAFETY: a prefetch is only a hint: it reads nothing and
                // never faults; `ptr` points into a live page besides.
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (shard, bit);
    }

    /// Raises a bit's stamp to at least `stamp`; returns the previous one.
    /// Out-of-range addresses (impossible for validated input) are ignored.
    pub fn raise(&self, shard: u32, bit: u32, stamp: u32) -> u32 {
        let (s, p, i) = self.locate(shard, bit);
        self.page_or_alloc(s, p).map_or(0, |page| page.raise(i, stamp))
    }

    /// Merges a persisted page into memory.
    pub fn load_page(&self, shard: u32, page: u32, bytes: &[u8]) {
        if let Some(p) = self.page_or_alloc(shard as usize, page as usize) {
            p.merge_encoded(bytes);
        }
    }

    /// Number of bits set at `now_ms` (ms since the Unix epoch): those whose
    /// expiry is at or after it, exactly as [`Cell::is_set`] reads them.
    /// One pass over the allocated pages with relaxed loads (concurrent
    /// raises may or may not be counted): O(m), about 1 ns per bit
    /// (under 10 ms for the 9.6 million bits of n = 1e6, p = 1%).
    ///
    /// [`Cell::is_set`]: crate::storage::Cell::is_set
    pub fn count_live(&self, now_ms: i64) -> u64 {
        let now = stamp_of(now_ms);
        self.pages()
            .map(|(_, _, page)| page.stamps.iter().filter(|s| s.load(Ordering::Relaxed) >= now).count() as u64)
            .sum()
    }

    /// Every allocated page with its shard and page index.
    pub fn pages(&self) -> impl Iterator<Item = (u32, u32, &Page)> {
        self.shards
            .iter()
            .enumerate()
            .filter_map(|(s, shard)| shard.get().map(|pages| (s, pages)))
            .flat_map(|(s, pages)| {
                pages
                    .iter()
                    .enumerate()
                    .filter_map(move |(p, page)| page.get().map(|page| (s as u32, p as u32, page)))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(shards: u32, bps: u32) -> Filter {
        Filter::new(&Geometry {
            hash_functions: 3,
            shards,
            bits_per_shard: bps,
        })
    }

    #[test]
    fn stamps_round_expiry_up_to_whole_seconds() {
        assert_eq!(stamp_of(1_764_460_800_000), 1_764_460_800);
        assert_eq!(stamp_of(1_764_460_800_001), 1_764_460_801);
        assert_eq!(stamp_of(999), 1);
        assert_eq!(stamp_of(0), 1);
        assert!(expire_ms_of(stamp_of(1_234_567)) >= 1_234_567);
    }

    #[test]
    fn raise_never_moves_backwards() {
        let f = filter(2, 5000);
        assert_eq!(f.get(1, 4999), 0);
        assert_eq!(f.raise(1, 4999, 100), 0);
        assert_eq!(f.raise(1, 4999, 50), 100);
        assert_eq!(f.get(1, 4999), 100);
        assert_eq!(f.raise(1, 4999, 200), 100);
        assert_eq!(f.get(1, 4999), 200);
        assert_eq!(f.get(0, 4999), 0);
        // Out of range is ignored, not a panic.
        assert_eq!(f.raise(2, 0, 1), 0);
        assert_eq!(f.get(1, 5000), 0);
    }

    #[test]
    fn pages_round_trip_and_sweep() {
        let f = filter(3, 3000);
        f.raise(2, 2047, 10);
        f.raise(2, 2048, 30);
        let pages: Vec<_> = f.pages().map(|(s, p, _)| (s, p)).collect();
        assert_eq!(pages, vec![(2, 1), (2, 2)]);
        let g = filter(3, 3000);
        for (s, p, page) in f.pages() {
            assert!(page.take_dirty());
            assert!(!page.take_dirty());
            g.load_page(s, p, &page.encode().unwrap());
        }
        assert_eq!((g.get(2, 2047), g.get(2, 2048)), (10, 30));
        let (_, _, page) = f.pages().next().unwrap();
        assert!(page.sweep(20));
        assert!(page.take_dirty());
        assert_eq!(page.encode(), None);
        assert_eq!(f.get(2, 2048), 30);
    }

    #[test]
    fn full_memory_is_four_bytes_per_bit_plus_a_small_index() {
        let g = Geometry {
            hash_functions: 7,
            shards: 10,
            bits_per_shard: 958_506,
        };
        let bytes = Filter::full_memory_bytes(&g);
        let stamps = 10 * 958_506u64.div_ceil(1024) * 1024 * 4;
        assert!(bytes > stamps && bytes < stamps + stamps / 50, "{bytes} vs {stamps}");
    }

    #[test]
    fn count_live_counts_bits_expiring_at_or_after_now() {
        let f = filter(2, 3000);
        assert_eq!(f.count_live(0), 0);
        f.raise(0, 1, stamp_of(10_000));
        f.raise(0, 2000, stamp_of(20_000));
        f.raise(1, 2999, stamp_of(30_000));
        assert_eq!(f.count_live(1), 3);
        assert_eq!(f.count_live(10_000), 3, "expiry at now is still set");
        assert_eq!(f.count_live(10_001), 2);
        assert_eq!(f.count_live(30_000), 1);
        assert_eq!(f.count_live(30_001), 0);
    }

    #[test]
    fn tiny_shards_get_tiny_pages() {
        let f = filter(1, 48);
        f.raise(0, 47, 1);
        let (_, _, page) = f.pages().next().unwrap();
        assert_eq!(page.encode().unwrap().len(), 48 * 4);
    }
}
