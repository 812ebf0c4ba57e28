//! One contiguous block of zeroed one-byte stamps per filter.
//!
//! Why a mapping of our own rather than a `Box<[AtomicU8]>`: a request
//! touches k random stamps per entity, scattered over the whole filter. With
//! 4 KiB pages a filter of hundreds of MB misses the TLB on nearly every
//! one; with 2 MiB transparent huge pages (`madvise(MADV_HUGEPAGE)`, see the
//! kernel's `Documentation/admin-guide/mm/transhuge.rst`) the page table of
//! a 480 MB filter fits the TLB. An anonymous mapping is also zero-filled by
//! the kernel, and `munmap` on drop returns it all at once.
//!
//! The region is faulted in when it is made (`MADV_POPULATE_WRITE`), not by
//! the first writes: random bits touch every 2 MiB page of a filter within
//! its first few thousand writes anyway, and faulting them in from there
//! cost those requests the zeroing of the whole filter - seconds, under the
//! deduper's lock, when a busy machine had to compact memory for huge pages.
//! The memory budget counts every filter in full already.

use std::sync::atomic::AtomicU8;

/// Huge-page size the mapping is aligned to (x86-64 and aarch64 with 4 KiB
/// base pages).
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeroed stamps, readable and writable from any thread.
pub struct Region {
    map: *mut u8,
    map_len: usize,
    start: *const AtomicU8,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value; it is only
// reached through `&[AtomicU8]`, whose accesses are atomic.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// A region of `len` zeroed bytes. Aborts the process when the memory
    /// cannot be mapped, as a failed `Vec` allocation does.
    pub fn zeroed(len: usize) -> Region {
        if len == 0 {
            return Region {
                map: std::ptr::null_mut(),
                map_len: 0,
                start: std::ptr::NonNull::<AtomicU8>::dangling().as_ptr(),
                len: 0,
            };
        }
        // Room to align the start to a huge page when the filter spans one.
        let map_len = if len >= HUGE_PAGE { len + HUGE_PAGE } else { len };
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let layout = std::alloc::Layout::from_size_align(len, 1).expect("len fits isize");
            std::alloc::handle_alloc_error(layout);
        }
        let map = map.cast::<u8>();
        let offset = if len >= HUGE_PAGE {
            map.align_offset(HUGE_PAGE)
        } else {
            0
        };
        // SAFETY: `offset < HUGE_PAGE`, so `offset + len <= map_len`.
        let start = unsafe { map.add(offset) };
        advise_huge(start, len);
        populate(start, len);
        Region {
            map,
            map_len,
            start: start.cast::<AtomicU8>(),
            len,
        }
    }

    /// The stamps.
    pub fn stamps(&self) -> &[AtomicU8] {
        // SAFETY: `start..start + len` lies inside the live mapping (or is
        // empty), zero-initialised by the kernel; `AtomicU8` has the size and
        // alignment of `u8`, and the slice borrows `self`, which unmaps on drop.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// Asks for huge pages over the whole 2 MiB chunks of `start..start + len`
/// (a partial tail stays in base pages, so it takes no more than it uses).
/// Advice only: a kernel without transparent huge pages ignores it.
fn advise_huge(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let whole = len / HUGE_PAGE * HUGE_PAGE;
        if whole > 0 {
            // SAFETY: `start` is huge-page aligned inside our own mapping and
            // `whole <= len`; madvise only changes how it is backed.
            unsafe { libc::madvise(start.cast(), whole, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

/// Faults `start..start + len` in, writable (huge pages where granted):
/// `MADV_POPULATE_WRITE` (Linux 5.14), else one write of zero per 4 KiB page.
fn populate(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `start` is page aligned (the mapping's start, or a huge
        // page boundary inside it) and `start..start + len` lies inside our
        // own mapping; populating only faults in its zeroed pages.
        if unsafe { libc::madvise(start.cast(), len, libc::MADV_POPULATE_WRITE) } == 0 {
            return;
        }
    }
    for offset in (0..len).step_by(4096) {
        // SAFETY: inside the mapping, which nothing else references yet;
        // the byte is zero already, so the write changes no value.
        unsafe { start.add(offset).write_volatile(0) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.map_len > 0 {
            // SAFETY: unmaps exactly the mapping `zeroed` made; no borrow of
            // the stamps outlives `self`.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn regions_are_zeroed_writable_and_sized() {
        for len in [0, 1, 4080, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 17] {
            let r = Region::zeroed(len);
            let s = r.stamps();
            assert_eq!(s.len(), len);
            assert!(s.iter().step_by(4093).all(|b| b.load(Ordering::Relaxed) == 0));
            if len > 0 {
                s[len - 1].store(7, Ordering::Relaxed);
                s[0].fetch_max(9, Ordering::Relaxed);
                assert_eq!(s[len - 1].load(Ordering::Relaxed).max(s[0].load(Ordering::Relaxed)), 9);
                assert_eq!(s[len / 2].load(Ordering::Relaxed), if len == 1 { 9 } else { 0 });
            }
            if len >= HUGE_PAGE {
                assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0, "huge-page aligned");
            }
        }
    }
}
