//! One deduper's bits in memory: one contiguous block of one-byte expiry
//! stamps ([`super::region`]), `bits_per_shard` per shard, cut into pages of
//! [`PAGE_BITS`] that each carry a base tick, a seqlock and a dirty flag in a
//! small separate index (12 bytes per page, so it stays in cache).
//!
//! Time is counted in ticks of the filter's resolution, `tick_ms`
//! ([`tick_ms_for`]: `expiry_seconds / 127` rounded up to whole seconds,
//! at least 1 s), so the longest TTL a deduper accepts spans at most 127
//! ticks. Each page holds a base tick; stamp `t` (1 to 255) stands for an
//! expiry at `(base + t) * tick_ms` ms since the Unix epoch, and 0 means
//! unset. Expiries are rounded up to whole ticks: a bit may outlive its TTL
//! by less than one tick (under 0.8% of `expiry_seconds`, or under 1 s),
//! never the reverse, so the rounding adds no false negative.
//!
//! When a write needs a stamp above 255, the page rolls its base forward to
//! the tick before now: every stamp drops by the shift, and those that reach
//! 0 had expired. A roll rewrites one page under its seqlock (`version`, odd
//! while it runs): readers retry around it, and a write that raced it
//! retries too - at worst it leaves a stamp later than asked, never earlier.
//!
//! Every write raises stamps with an atomic max, so an expiry never moves
//! backwards and writes may be applied in any order.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering, fence};

use super::region::Region;
use crate::contract::sizing::Geometry;

/// Bytes of one page as stored on disk: a [`HEADER_BYTES`] header, then
/// one stamp per bit. 4 KiB, so a page is one filesystem block.
pub const PAGE_BYTES: usize = 4096;
/// Stored page header: crc32 (of the rest), base tick, tick length in
/// seconds, stamp count; four little-endian `u32`s.
pub const HEADER_BYTES: usize = 16;
/// Bits per page: the unit of allocation, dirtiness and persistence.
pub const PAGE_BITS: u32 = (PAGE_BYTES - HEADER_BYTES) as u32;
/// Ticks the longest TTL of a deduper spans at most.
pub const SPAN_TICKS: u64 = 127;
const MAX_STAMP: u32 = u8::MAX as u32;

/// Latest expiry time the store can hold, in ms since the Unix epoch
/// (2106-02-07T06:28:15Z: ticks are `u32`s of at least one second); the
/// engine refuses later ones.
pub const MAX_EXPIRE_MS: i64 = u32::MAX as i64 * 1000;

/// Tick length, in ms, for a deduper whose longest TTL is `expiry_seconds`
/// (s): `ceil(expiry_seconds / 127)` whole seconds, at least 1 s.
pub fn tick_ms_for(expiry_seconds: u64) -> u64 {
    expiry_seconds.div_ceil(SPAN_TICKS).max(1) * 1000
}

/// Flags of [`PageMeta::flags`].
const DIRTY: u32 = 1;
/// Set by the first write (or load) of a page: pages never touched are
/// skipped by [`Filter::pages`].
const USED: u32 = 2;

/// A page's base tick, seqlock and flags.
struct PageMeta {
    base: AtomicU32,
    /// Seqlock: odd while a roll rewrites `base` and the stamps.
    version: AtomicU32,
    flags: AtomicU32,
}

/// A page of stamps: its index entry and its stamps.
#[derive(Clone, Copy)]
pub struct Page<'a> {
    meta: &'a PageMeta,
    /// The page's stamps: `page_len`, or fewer for the last of a shard.
    stamps: &'a [AtomicU8],
    /// The filter's page length (stored pages are always this long).
    page_len: u32,
}

impl Page<'_> {
    /// Waits out a roll; returns the (even) version to validate against.
    fn begin_read(&self) -> u32 {
        loop {
            let v = self.meta.version.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            spin_loop();
        }
    }

    fn validate(&self, v: u32) -> bool {
        fence(Ordering::Acquire);
        self.meta.version.load(Ordering::Relaxed) == v
    }

    /// Expiry tick of stamp `i`, 0 when unset.
    fn get(&self, i: usize) -> u32 {
        loop {
            let v = self.begin_read();
            let base = self.meta.base.load(Ordering::Relaxed);
            let s = u32::from(self.stamps[i].load(Ordering::Relaxed));
            if self.validate(v) {
                return if s == 0 { 0 } else { base + s };
            }
        }
    }

    /// Raises stamp `i` to cover `tick`, rolling the page when needed.
    /// Returns whether this call dirtied a clean page. Errors when `tick`
    /// is more than 255 ticks past `now_tick - 1` (the filter's tick is
    /// too short for it).
    fn raise(&self, i: usize, tick: u32, now_tick: u32) -> Result<bool, TooFar> {
        loop {
            let v = self.begin_read();
            let base = self.meta.base.load(Ordering::Relaxed);
            // A tick at or before the base expired already (the clock went
            // back): keep it as the earliest stamp, later than asked.
            let t = tick.saturating_sub(base).max(1);
            if t > MAX_STAMP {
                // A roll that finds the base moved on lost a race: look again.
                if !self.roll(now_tick.saturating_sub(1)) && self.meta.base.load(Ordering::Acquire) == base {
                    return Err(TooFar);
                }
                continue;
            }
            let t = t as u8;
            // Most raises find the stamp high enough: a plain load skips the RMW.
            if self.stamps[i].load(Ordering::Acquire) < t {
                self.stamps[i].fetch_max(t, Ordering::AcqRel);
            }
            if self.meta.version.load(Ordering::Acquire) != v {
                continue; // raced a roll: raise again against the new base
            }
            // Dirty even when nothing changed: the writer's journal record
            // may be checkpointed away, so the page must be saved after it.
            return Ok(self.meta.flags.load(Ordering::Acquire) & DIRTY == 0
                && self.meta.flags.fetch_or(DIRTY | USED, Ordering::AcqRel) & DIRTY == 0);
        }
    }

    /// Moves the base forward to `new_base` (a tick already past), shifting
    /// every stamp down; those reaching 0 had expired. Returns false when
    /// the base is at or past `new_base` already.
    fn roll(&self, new_base: u32) -> bool {
        let v = loop {
            let v = self.meta.version.load(Ordering::Relaxed);
            if v & 1 == 0
                && self
                    .meta
                    .version
                    .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break v;
            }
            spin_loop();
        };
        fence(Ordering::Release);
        let base = self.meta.base.load(Ordering::Relaxed);
        let advanced = new_base > base;
        if advanced {
            let shift = (new_base - base).min(MAX_STAMP) as u8;
            for s in self.stamps.iter() {
                // An RMW, not a store: a racing raise is then either shifted
                // or left later than asked, never lost.
                let _ = s.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| {
                    (x != 0).then(|| x.saturating_sub(shift))
                });
            }
            self.meta.base.store(new_base, Ordering::Relaxed);
        }
        self.meta.version.store(v + 2, Ordering::Release);
        advanced
    }

    /// Sets the dirty flag, returning whether it was set already.
    fn set_dirty(&self) -> bool {
        self.meta.flags.fetch_or(DIRTY | USED, Ordering::AcqRel) & DIRTY != 0
    }

    /// Clears the dirty flag, returning whether it was set.
    fn take_dirty(&self) -> bool {
        self.meta.flags.fetch_and(!DIRTY, Ordering::AcqRel) & DIRTY != 0
    }

    fn used(&self) -> bool {
        self.meta.flags.load(Ordering::Acquire) & USED != 0
    }

    /// Writes the page as stored ([`HEADER_BYTES`] header, then `page_len`
    /// stamps, zero-padded past the shard's end)
    /// into `out`; returns false when no stamp is set.
    pub fn encode(&self, tick_ms: u64, out: &mut Vec<u8>) -> bool {
        loop {
            out.clear();
            let v = self.begin_read();
            let base = self.meta.base.load(Ordering::Relaxed);
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(&base.to_le_bytes());
            out.extend_from_slice(&((tick_ms / 1000) as u32).to_le_bytes());
            out.extend_from_slice(&self.page_len.to_le_bytes());
            out.extend(self.stamps.iter().map(|s| s.load(Ordering::Relaxed)));
            // The last page of a shard is stored as long as the others,
            // zero-padded, so every slot has the same form.
            out.resize(HEADER_BYTES + self.page_len as usize, 0);
            if self.validate(v) {
                let crc = crc32fast::hash(&out[4..]);
                out[..4].copy_from_slice(&crc.to_le_bytes());
                return out[HEADER_BYTES..].iter().any(|&s| s != 0);
            }
        }
    }

    /// Live stamps (expiry tick at or after `first_live`).
    fn count_live(&self, first_live: u32) -> u64 {
        loop {
            let v = self.begin_read();
            let base = self.meta.base.load(Ordering::Relaxed);
            let n = if first_live <= base + 1 {
                self.stamps.iter().filter(|s| s.load(Ordering::Relaxed) != 0).count()
            } else if first_live - base > MAX_STAMP {
                0
            } else {
                let min = (first_live - base) as u8;
                self.stamps.iter().filter(|s| s.load(Ordering::Relaxed) >= min).count()
            };
            if self.validate(v) {
                return n as u64;
            }
        }
    }
}

/// An expiry more than 255 ticks ahead of now: the filter's tick is too
/// short for it (see [`Filter::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooFar;

/// A stored page as read back by [`Filter::load_page`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Never written (all zero).
    Empty,
    /// Checksum good; merged.
    Good,
    /// Checksum bad (a write torn by a power loss): every set stamp was
    /// kept as if it expired a full `expiry` after now.
    Torn,
}

/// All pages of one deduper.
pub struct Filter {
    tick_ms: u64,
    shards: u32,
    bits_per_shard: u32,
    page_len: u32,
    pages_per_shard: u32,
    /// Stamp of bit `b` of shard `s` at `s * bits_per_shard + b`.
    stamps: Region,
    /// Page `p` of shard `s` at `s * pages_per_shard + p`.
    meta: Box<[PageMeta]>,
    /// Pages whose dirty flag is set (approximate while writes run).
    dirty_pages: AtomicU64,
}

impl Filter {
    /// An empty filter of `geometry` whose ticks last `tick_ms` ms (a whole
    /// number of seconds, see [`tick_ms_for`]). Its stamps take their memory when
    /// it is made (see [`super::region`]).
    pub fn new(geometry: &Geometry, tick_ms: u64) -> Filter {
        let page_len = geometry.bits_per_shard.clamp(1, PAGE_BITS);
        let pages_per_shard = geometry.bits_per_shard.div_ceil(page_len);
        let pages = geometry.shards as usize * pages_per_shard as usize;
        Filter {
            tick_ms: tick_ms.max(1000) / 1000 * 1000,
            shards: geometry.shards,
            bits_per_shard: geometry.bits_per_shard,
            page_len,
            pages_per_shard,
            stamps: Region::zeroed(geometry.shards as usize * geometry.bits_per_shard as usize),
            meta: (0..pages)
                .map(|_| PageMeta {
                    base: AtomicU32::new(0),
                    version: AtomicU32::new(0),
                    flags: AtomicU32::new(0),
                })
                .collect(),
            dirty_pages: AtomicU64::new(0),
        }
    }

    /// Memory a filter of this geometry takes once every page is written, in
    /// bytes: one byte per bit plus the page index (12 bytes per page).
    pub fn full_memory_bytes(geometry: &Geometry) -> u64 {
        let bits = u64::from(geometry.shards) * u64::from(geometry.bits_per_shard);
        let page_len = u64::from(geometry.bits_per_shard.clamp(1, PAGE_BITS));
        let pages = u64::from(geometry.shards) * u64::from(geometry.bits_per_shard).div_ceil(page_len);
        bits + pages * std::mem::size_of::<PageMeta>() as u64
    }

    /// Tick length, in ms.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }

    /// Bits per stored page (the last page of a shard may use fewer).
    pub fn page_len(&self) -> u32 {
        self.page_len
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u64 {
        u64::from(self.shards)
    }

    /// Pages per shard.
    pub fn pages_per_shard(&self) -> u32 {
        self.pages_per_shard
    }

    /// The tick holding an expiry of `expire_ms` (ms since the Unix epoch),
    /// rounded up; at least 1.
    pub fn tick_of(&self, expire_ms: i64) -> u32 {
        let t = (expire_ms.max(1) as u64).div_ceil(self.tick_ms);
        t.clamp(1, u64::from(u32::MAX)) as u32
    }

    /// Expiry time, in ms since the Unix epoch, that `tick` stands for.
    pub fn expire_ms_of(&self, tick: u32) -> i64 {
        i64::from(tick) * self.tick_ms as i64
    }

    /// Whether an expiry of `expire_ms` can be stored at `now_ms` (both ms
    /// since the Unix epoch): at most 255 ticks past the tick before now.
    pub fn fits(&self, expire_ms: i64, now_ms: i64) -> bool {
        let floor_now = (now_ms.max(0) as u64 / self.tick_ms) as u32;
        u64::from(self.tick_of(expire_ms)) <= u64::from(floor_now.saturating_sub(1)) + u64::from(MAX_STAMP)
    }

    /// The tick raises at `now_ms` roll pages against (floor of now).
    pub fn now_tick(&self, now_ms: i64) -> u32 {
        (now_ms.max(0) as u64 / self.tick_ms).min(u64::from(u32::MAX)) as u32
    }

    /// The page holding a bit and the bit's index in it; `None` out of range.
    #[inline]
    fn locate(&self, shard: u32, bit: u32) -> Option<(Page<'_>, usize)> {
        if shard >= self.shards || bit >= self.bits_per_shard {
            return None;
        }
        let p = bit / self.page_len;
        Some((self.page(shard, p), (bit - p * self.page_len) as usize))
    }

    /// Page `p` of `shard` (both in range).
    fn page(&self, shard: u32, p: u32) -> Page<'_> {
        let first = shard as usize * self.bits_per_shard as usize + (p * self.page_len) as usize;
        let end = (shard as usize + 1) * self.bits_per_shard as usize;
        Page {
            meta: &self.meta[shard as usize * self.pages_per_shard as usize + p as usize],
            stamps: &self.stamps.stamps()[first..end.min(first + self.page_len as usize)],
            page_len: self.page_len,
        }
    }

    /// The expiry tick of a bit (0 when unset or out of range).
    pub fn get(&self, shard: u32, bit: u32) -> u32 {
        self.locate(shard, bit).map_or(0, |(page, i)| page.get(i))
    }

    /// The expiry of a bit in ms since the Unix epoch, `None` when unset.
    pub fn get_expire_ms(&self, shard: u32, bit: u32) -> Option<i64> {
        match self.get(shard, bit) {
            0 => None,
            t => Some(self.expire_ms_of(t)),
        }
    }

    /// Hints the CPU to load a bit's stamp and its page's index entry into
    /// cache. A batch touches thousands of stamps scattered over the filter,
    /// one cache miss each; prefetching a few addresses ahead overlaps those
    /// misses. No effect out of range or on other architectures.
    #[inline]
    pub fn prefetch(&self, shard: u32, bit: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some((page, i)) = self.locate(shard, bit) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let stamp = std::ptr::from_ref(&page.stamps[i]).cast::<i8>();
            let meta = std::ptr::from_ref(page.meta).cast::<i8>();
            // SAFETY: a prefetch is only a hint: it reads nothing and never
            // faults; both pointers point into live memory besides.
            unsafe {
                _mm_prefetch::<{ _MM_HINT_T0 }>(stamp);
                _mm_prefetch::<{ _MM_HINT_T0 }>(meta);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (shard, bit);
    }

    /// Raises a bit to cover `tick`; `now_tick` is [`Filter::now_tick`] of
    /// the write. Out-of-range addresses (impossible for validated input)
    /// are ignored. Errors with [`TooFar`] unless [`Filter::fits`] held.
    pub fn raise(&self, shard: u32, bit: u32, tick: u32, now_tick: u32) -> Result<(), TooFar> {
        match self.locate(shard, bit) {
            Some((page, i)) => self.raise_in(page, i, tick, now_tick),
            None => Ok(()),
        }
    }

    /// [`Filter::get`], then [`Filter::raise`], with one lookup of the bit:
    /// the expiry tick the bit had before (0 when unset or out of range).
    pub fn get_and_raise(&self, shard: u32, bit: u32, tick: u32, now_tick: u32) -> Result<u32, TooFar> {
        match self.locate(shard, bit) {
            Some((page, i)) => {
                let before = page.get(i);
                self.raise_in(page, i, tick, now_tick)?;
                Ok(before)
            }
            None => Ok(0),
        }
    }

    fn raise_in(&self, page: Page<'_>, i: usize, tick: u32, now_tick: u32) -> Result<(), TooFar> {
        if page.raise(i, tick, now_tick)? {
            self.dirty_pages.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Bytes of pages waiting to be saved (as stored: [`PAGE_BYTES`] each,
    /// header included; approximate while writes run).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_pages.load(Ordering::Relaxed) * (u64::from(self.page_len) + HEADER_BYTES as u64)
    }

    /// Clears a page's dirty flag, returning whether it was set.
    pub fn take_dirty(&self, page: Page<'_>) -> bool {
        let was = page.take_dirty();
        if was {
            let _ = self
                .dirty_pages
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        }
        was
    }

    /// Marks a page dirty again (a save failed).
    pub fn mark_dirty(&self, page: Page<'_>) {
        if !page.set_dirty() {
            self.dirty_pages.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Merges a stored page (as written by [`Page::encode`]) into memory,
    /// max with what is there; expired stamps are skipped. A good page
    /// stays clean (it is on disk); a torn one is dirty. A page with a
    /// bad checksum (torn by a power loss) keeps every set stamp until
    /// `now_ms + expiry_ms`, the latest any write can have asked for, so no
    /// bit is lost. Errors: `TooFar` when a stored expiry does not fit this
    /// filter's ticks (a stored tick longer than this filter's).
    pub fn load_page(
        &self,
        shard: u32,
        page_no: u32,
        bytes: &[u8],
        now_ms: i64,
        expiry_ms: i64,
    ) -> Result<Loaded, TooFar> {
        if bytes.iter().all(|&b| b == 0) {
            return Ok(Loaded::Empty);
        }
        let word = |i: usize| {
            bytes
                .get(i..i + 4)
                .map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        let stamps = bytes.get(HEADER_BYTES..).unwrap_or_default();
        let good = bytes.len() >= HEADER_BYTES
            && word(0) == crc32fast::hash(&bytes[4..])
            && word(8) > 0
            && word(12) as usize == stamps.len();
        let now_tick = self.now_tick(now_ms);
        if shard >= self.shards || page_no >= self.pages_per_shard {
            return Ok(Loaded::Empty);
        }
        let page = self.page(shard, page_no);
        let (base, stored_tick_ms) = (u64::from(word(4)), u64::from(word(8)) * 1000);
        let torn_tick = self.tick_of(now_ms.saturating_add(expiry_ms));
        for (i, &s) in stamps.iter().enumerate().take(page.stamps.len()) {
            if s == 0 {
                continue;
            }
            let tick = if good {
                let expire = (base + u64::from(s)) * stored_tick_ms;
                if (expire as i64) < now_ms {
                    continue;
                }
                self.tick_of(expire as i64)
            } else {
                torn_tick
            };
            self.raise_in(page, i, tick, now_tick)?;
        }
        if good {
            // On disk already: only later writes make it dirty again.
            self.take_dirty(page);
            Ok(Loaded::Good)
        } else {
            self.mark_dirty(page);
            Ok(Loaded::Torn)
        }
    }

    /// The tick, in ms, a stored page was written with (0 if unreadable).
    pub fn stored_tick_ms(bytes: &[u8]) -> u64 {
        bytes
            .get(8..12)
            .map_or(0, |w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            * 1000
    }

    /// A copy of this filter with ticks of `tick_ms` (longer than this
    /// one's), each expiry rounded up to the new ticks; expired bits are
    /// dropped and every copied page is dirty. Used when a deduper's
    /// `expiry_seconds` grows past what the ticks can span.
    pub fn retick(&self, geometry: &Geometry, tick_ms: u64, now_ms: i64) -> Filter {
        let out = Filter::new(geometry, tick_ms.max(self.tick_ms));
        let now_tick = out.now_tick(now_ms);
        for (s, p, page) in self.pages() {
            let dst = out.page(s, p);
            for i in 0..page.stamps.len() {
                let tick = page.get(i);
                if tick == 0 || self.expire_ms_of(tick) < now_ms {
                    continue;
                }
                // Longer ticks: the expiry is at most 129 old ticks ahead,
                // so at most 130 new ones - it fits.
                let _ = out.raise_in(dst, i, out.tick_of(self.expire_ms_of(tick)), now_tick);
            }
            out.mark_dirty(dst);
        }
        out
    }

    /// Bits whose expiry is at or after `now_ms` (ms since the Unix epoch).
    /// Reads every allocated page once: O(m) bytes, about 1 ms per 10^7 bits.
    pub fn count_live(&self, now_ms: i64) -> u64 {
        let first_live = self.tick_of(now_ms);
        self.pages().map(|(_, _, p)| p.count_live(first_live)).sum()
    }

    /// Every page ever written (or loaded), with its shard and page index.
    pub fn pages(&self) -> impl Iterator<Item = (u32, u32, Page<'_>)> {
        (0..self.shards)
            .flat_map(move |s| (0..self.pages_per_shard).map(move |p| (s, p, self.page(s, p))))
            .filter(|(_, _, page)| page.used())
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
