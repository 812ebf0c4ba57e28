use super::*;
use crate::contract::sizing::Geometry;
use crate::deduper::Level;

/// `entities_absent_now` (the async worker's read) answers while nothing
/// is being changed, and gives way - `None`, not a wait - while the map of
/// dedupers or the deduper's filter is locked for a change: a worker that
/// waited there would stop serving every other connection.
#[test]
fn reads_now_give_way_to_a_locked_map_or_filter() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedConfig {
        path: dir.path().to_path_buf(),
        ..EmbeddedConfig::default()
    })
    .unwrap();
    let g = Geometry {
        hash_functions: 2,
        shards: 2,
        bits_per_shard: 100,
    };
    let d = Deduper::new("c", "d", g, 3_600, Level::Global, 0);
    store.create_deduper(&d).unwrap();
    let now = now_ms();
    let set = [BitAddr { shard: 1, bit: 7 }, BitAddr { shard: 1, bit: 9 }];
    store.write_bits(&d, &set, now + 60_000).unwrap();
    // One entity of the written bits (present), one with an unset bit.
    let bits = [set[0], set[1], set[0], BitAddr { shard: 0, bit: 3 }];
    let read = || store.entities_absent_now(&d, &bits, 2, now).map(Result::unwrap);
    assert_eq!(read(), Some(vec![false, true]));
    {
        let _changing = store.inner.entries.write().unwrap();
        assert_eq!(read(), None, "answered while the map of dedupers was locked");
    }
    let entry = store.inner.entry(&d).unwrap();
    {
        let _changing = entry.filter.write().unwrap();
        assert_eq!(read(), None, "answered while the filter was locked");
    }
    assert_eq!(read(), Some(vec![false, true]));
    let gone = Deduper::new("c", "never-made", g, 3_600, Level::Global, 0);
    let e = store.entities_absent_now(&gone, &bits, 2, now).unwrap().unwrap_err();
    assert!(matches!(e, StorageError::Precondition(_)), "{e:?}");
}

/// The checkpoint's trigger: due once the journal holds half the bytes of
/// the changed pages (page writes <= 2 bytes per journal byte) and the
/// interval passed; early only once it holds half the filters' full size
/// (at least 8 MiB); always at `checkpoint_journal_bytes`.
#[test]
fn a_checkpoint_is_due_at_two_page_bytes_per_journal_byte() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedConfig {
        path: dir.path().to_path_buf(),
        checkpoint_interval_ms: 3_600_000,
        ..EmbeddedConfig::default()
    })
    .unwrap();
    let page = filter::PAGE_BITS;
    let g = Geometry {
        hash_functions: 1,
        shards: 1,
        bits_per_shard: 10 * page,
    };
    let d = Deduper::new("c", "d", g, 3_600, Level::Global, 0);
    store.create_deduper(&d).unwrap();
    // One bit in each of the 10 pages: 10 dirty pages of 4 KiB.
    let bits: Vec<BitAddr> = (0..10)
        .map(|p| BitAddr {
            shard: 0,
            bit: p * page,
        })
        .collect();
    store.write_bits(&d, &bits, now_ms() + 60_000).unwrap();
    let dirty = 10 * filter::PAGE_BYTES as u64;
    let inner = &store.inner;
    let due_at = |journal: u64, interval_passed: bool| {
        inner.journal_bytes.store(journal, Ordering::SeqCst);
        inner.checkpoint_due(interval_passed)
    };
    assert!(!due_at(dirty / 2 - 1, true), "due below half the dirty bytes");
    assert!(due_at(dirty / 2, true), "not due at half the dirty bytes");
    assert!(!due_at(dirty / 2, false), "due early below 8 MiB of journal");
    assert!(due_at(8 << 20, false), "not due early at 8 MiB of journal");
    inner.journal_bytes.store(0, Ordering::SeqCst);
}
