use super::*;

const HOUR_S: u64 = 3600;
/// 2026-11-30T00:00:00Z, ms.
const NOW: i64 = 1_764_460_800_000;

fn filter(shards: u32, bps: u32, expiry_s: u64) -> Filter {
    Filter::new(
        &Geometry {
            hash_functions: 3,
            shards,
            bits_per_shard: bps,
        },
        tick_ms_for(expiry_s),
    )
}

fn raise_ms(f: &Filter, shard: u32, bit: u32, expire_ms: i64, now_ms: i64) {
    assert!(f.fits(expire_ms, now_ms));
    f.raise(shard, bit, f.tick_of(expire_ms), f.now_tick(now_ms)).unwrap();
}

#[test]
fn ticks_span_the_longest_ttl_in_at_most_127_whole_seconds() {
    assert_eq!(tick_ms_for(1), 1000);
    assert_eq!(tick_ms_for(127), 1000);
    assert_eq!(tick_ms_for(128), 2000);
    assert_eq!(tick_ms_for(HOUR_S), 29_000);
    assert_eq!(tick_ms_for(86_400), 681_000);
    for e in [1, 60, 127, 128, 3600, 86_400, 50 * 365 * 86_400] {
        assert!(tick_ms_for(e) / 1000 * SPAN_TICKS >= e, "{e}");
    }
}

#[test]
fn expiries_round_up_to_whole_ticks_never_down() {
    let f = filter(1, 100, HOUR_S);
    let r = f.tick_ms() as i64;
    for expire in [NOW, NOW + 1, NOW + r - 1, NOW + r, NOW + 3_600_000] {
        let back = f.expire_ms_of(f.tick_of(expire));
        assert!(back >= expire && back < expire + r, "{expire} -> {back}");
    }
}

#[test]
fn an_added_bit_is_live_until_its_ttl_and_at_most_one_tick_longer() {
    let f = filter(2, 5000, HOUR_S);
    let r = f.tick_ms() as i64;
    raise_ms(&f, 1, 4999, NOW + 3_600_000, NOW);
    let e = f.get_expire_ms(1, 4999).unwrap();
    assert!(e >= NOW + 3_600_000 && e < NOW + 3_600_000 + r);
    assert_eq!(f.get(0, 4999), 0);
    assert_eq!(f.count_live(NOW), 1);
    assert_eq!(f.count_live(e), 1);
    assert_eq!(f.count_live(e + 1), 0);
}

#[test]
fn raise_never_moves_backwards() {
    let f = filter(2, 5000, HOUR_S);
    raise_ms(&f, 1, 7, NOW + 3_000_000, NOW);
    let high = f.get(1, 7);
    raise_ms(&f, 1, 7, NOW + 60_000, NOW);
    assert_eq!(f.get(1, 7), high);
    // Out of range is ignored, not a panic.
    f.raise(2, 0, 5, 1).unwrap();
    assert_eq!(f.get(1, 5000), 0);
}

#[test]
fn pages_roll_forward_over_weeks_and_keep_every_live_bit() {
    // An hour's expiry written every 10 minutes for two weeks: the page base
    // rolls hundreds of times; each write must stay live until its expiry,
    // and a bit written once must be gone after it.
    let f = filter(1, 64, HOUR_S);
    raise_ms(&f, 0, 63, NOW + 1_800_000, NOW);
    let mut now = NOW;
    for step in 0..2016 {
        now += 600_000;
        let bit = step % 60;
        raise_ms(&f, 0, bit, now + 3_600_000, now);
        // Every bit written in the last hour is live.
        for back in 0..6u32 {
            if step >= back {
                let b = (step - back) % 60;
                let e = f.get_expire_ms(0, b).expect("written bit unset");
                assert!(e >= now + 3_600_000 - i64::from(back) * 600_000, "step {step} bit {b}");
            }
        }
    }
    assert!(f.get_expire_ms(0, 63).is_none_or(|e| e < now), "old bit resurrected");
    // Six writes of the last hour, and the one of exactly an hour ago
    // (expiry == now still counts as set).
    assert_eq!(f.count_live(now), 7);
}

#[test]
fn a_write_too_far_ahead_does_not_fit_and_is_refused() {
    let f = filter(1, 64, 60);
    assert!(f.fits(NOW + 60_000, NOW));
    assert!(f.fits(NOW + 254_000, NOW));
    assert!(!f.fits(NOW + 300_000, NOW));
    assert_eq!(f.raise(0, 1, f.tick_of(NOW + 300_000), f.now_tick(NOW)), Err(TooFar));
}

#[test]
fn retick_keeps_every_live_expiry_or_later() {
    let g = Geometry {
        hash_functions: 3,
        shards: 1,
        bits_per_shard: 64,
    };
    let f = Filter::new(&g, tick_ms_for(60));
    raise_ms(&f, 0, 1, NOW + 60_000, NOW);
    raise_ms(&f, 0, 2, NOW + 1_000, NOW);
    let later = NOW + 30_000;
    let coarse = f.retick(&g, tick_ms_for(86_400), later);
    assert_eq!(coarse.tick_ms(), 681_000);
    let e = coarse.get_expire_ms(0, 1).unwrap();
    assert!((NOW + 60_000..NOW + 60_000 + 681_000).contains(&e));
    assert_eq!(coarse.get(0, 2), 0, "expired bit copied");
    // The day-long expiry now fits.
    assert!(coarse.fits(later + 86_400_000, later));
}

#[test]
fn pages_round_trip_through_their_stored_form() {
    let f = filter(3, 5000, HOUR_S);
    raise_ms(&f, 2, 4079, NOW + 10_000, NOW);
    raise_ms(&f, 2, 4080, NOW + 3_000_000, NOW);
    assert_eq!(f.dirty_bytes(), 2 * PAGE_BYTES as u64);
    let pages: Vec<_> = f.pages().map(|(s, p, _)| (s, p)).collect();
    assert_eq!(pages, vec![(2, 0), (2, 1)]);
    let g = filter(3, 5000, HOUR_S);
    let mut buf = Vec::new();
    for (s, p, page) in f.pages() {
        assert!(f.take_dirty(page));
        assert!(!f.take_dirty(page));
        assert!(page.encode(f.tick_ms(), &mut buf));
        assert_eq!(buf.len(), PAGE_BYTES);
        assert_eq!(g.load_page(s, p, &buf, NOW, 3_600_000), Ok(Loaded::Good));
    }
    assert_eq!(f.dirty_bytes(), 0);
    assert_eq!(g.dirty_bytes(), 0, "loaded pages are on disk already");
    assert_eq!((g.get(2, 4079), g.get(2, 4080)), (f.get(2, 4079), f.get(2, 4080)));
    // Expired stamps are not loaded back.
    let h = filter(3, 5000, HOUR_S);
    for (s, p, page) in f.pages() {
        page.encode(f.tick_ms(), &mut buf);
        h.load_page(s, p, &buf, NOW + 100_000, 3_600_000).unwrap();
    }
    assert_eq!((h.get(2, 4079), h.get(2, 4080)), (0, f.get(2, 4080)));
}

#[test]
fn a_torn_page_keeps_its_set_bits_for_a_full_expiry() {
    let f = filter(1, 100, HOUR_S);
    raise_ms(&f, 0, 5, NOW + 3_600_000, NOW);
    let (_, _, page) = f.pages().next().unwrap();
    let mut buf = Vec::new();
    page.encode(f.tick_ms(), &mut buf);
    buf[HEADER_BYTES + 99] ^= 0x5a; // a torn write: bytes of another version
    let g = filter(1, 100, HOUR_S);
    let later = NOW + 1_000_000;
    assert_eq!(g.load_page(0, 0, &buf, later, 3_600_000), Ok(Loaded::Torn));
    assert!(g.get_expire_ms(0, 5).unwrap() >= later + 3_600_000);
    assert!(g.get_expire_ms(0, 99).is_some());
    assert_eq!(g.get(0, 6), 0);
    assert!(g.dirty_bytes() > 0, "a torn page must be saved again");
    assert_eq!(g.load_page(0, 0, &[0; PAGE_BYTES], later, 1), Ok(Loaded::Empty));
}

#[test]
fn full_memory_is_one_byte_per_bit_plus_a_small_index() {
    let g = Geometry {
        hash_functions: 7,
        shards: 10,
        bits_per_shard: 958_506,
    };
    let bytes = Filter::full_memory_bytes(&g);
    let stamps = 10 * 958_506u64.div_ceil(u64::from(PAGE_BITS)) * u64::from(PAGE_BITS);
    assert!(bytes > stamps && bytes < stamps + stamps / 50, "{bytes} vs {stamps}");
}

#[test]
fn concurrent_raises_and_rolls_lose_no_live_bit() {
    // Writers raise fresh expiries while the clock they pass jumps far
    // enough to roll the page on every few writes; every bit a writer
    // raised must read live at its own now afterwards.
    use std::sync::Arc;
    use std::sync::atomic::AtomicI64;
    let f = Arc::new(filter(1, 256, 127));
    let clock = Arc::new(AtomicI64::new(NOW));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (f, clock) = (f.clone(), clock.clone());
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let now = clock.fetch_add(1_000, Ordering::SeqCst);
                    let bit = t * 64 + i % 64;
                    let expire = now + 127_000;
                    f.raise(0, bit, f.tick_of(expire), f.now_tick(now)).unwrap();
                    let e = f.get_expire_ms(0, bit).unwrap_or(0);
                    // Lower only if another thread's clock passed the expiry
                    // meanwhile (then the bit had expired for it).
                    assert!(
                        e >= expire || clock.load(Ordering::SeqCst) > expire,
                        "thread {t} step {i}: {e} < {expire}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
