use super::*;
use crate::contract::sizing::Geometry;
use crate::deduper::Level;

/// A store in `dir` with one deduper of 2 shards of 100 bits, k = 2.
fn small_store(dir: &std::path::Path) -> (EmbeddedStore, Deduper) {
    let store = EmbeddedStore::open(EmbeddedConfig {
        path: dir.to_path_buf(),
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
    (store, d)
}

/// `entities_absent_now` (the async worker's read) answers while nothing
/// is being changed, and gives way - `None`, not a wait - while the map of
/// dedupers or the deduper's filter is locked for a change: a worker that
/// waited there would stop serving every other connection.
#[test]
fn reads_now_give_way_to_a_locked_map_or_filter() {
    let dir = tempfile::tempdir().unwrap();
    let (store, d) = small_store(dir.path());
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
    let gone = Deduper::new("c", "never-made", d.geometry, 3_600, Level::Global, 0);
    let e = store.entities_absent_now(&gone, &bits, 2, now).unwrap().unwrap_err();
    assert!(matches!(e, StorageError::Precondition(_)), "{e:?}");
}

/// The async worker's writes (`write_bits_now`, `read_then_write_bits_now`)
/// write while nothing is held, and give way - `None`, with nothing
/// journaled or raised - while anything they need is held for more than
/// a moment: the map of dedupers, the filter, a read-all-then-write, the
/// checkpoint's switch, the journal's file (another write appending), a
/// broken store awaiting its reopen; for a second after an append whose
/// write took 20 ms or more (the OS throttling writers); and always with `fsync`,
/// or when the expiry needs longer ticks. The waiting write then does the
/// work.
#[test]
fn writes_now_give_way_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (store, d) = small_store(dir.path());
    let now = now_ms();
    let expire = now + 60_000;
    let mut next = 0;
    let mut fresh = || {
        next += 2;
        [
            BitAddr { shard: 1, bit: next },
            BitAddr {
                shard: 1,
                bit: next + 1,
            },
        ]
    };
    let unset = |bits: &[BitAddr]| store.read_bits(&d, bits).unwrap().iter().all(|c| c.expire_ms.is_none());
    // What is in the journal file, not the counter a finished write bumps.
    let journal = || store.inner.journal().unwrap().end();
    assert!(store.writes_to_memory());

    let bits = fresh();
    let cells = store.read_then_write_bits_now(&d, &bits, expire).unwrap().unwrap();
    assert!(cells.iter().all(|c| c.expire_ms.is_none()), "{cells:?}");
    let cells = store.read_then_write_bits_now(&d, &bits, expire).unwrap().unwrap();
    assert!(cells.iter().all(|c| c.is_set(now)), "{cells:?}");
    let bits = fresh();
    assert!(store.write_bits_now(&d, &bits, expire).unwrap().is_ok());
    assert!(!unset(&bits));

    let entry = store.inner.entry(&d).unwrap();
    // Called with the lock held: the journal is weighed before and after.
    let gives_way = |why: &str, bits: [BitAddr; 2], expire: i64| {
        assert!(
            store.read_then_write_bits_now(&d, &bits, expire).is_none(),
            "wrote with {why}"
        );
        assert!(store.write_bits_now(&d, &bits, expire).is_none(), "added with {why}");
    };
    let left_nothing = |why: &str, bits: &[BitAddr], journaled: u64| {
        assert!(unset(bits), "raised with {why}");
        assert_eq!(journal(), journaled, "journaled with {why}");
    };
    let (bits, journaled) = (fresh(), journal());
    {
        let _held = store.inner.entries.write().unwrap();
        gives_way("the map of dedupers locked", bits, expire);
    }
    left_nothing("the map of dedupers locked", &bits, journaled);
    {
        let _held = entry.filter.write().unwrap();
        gives_way("the filter locked", bits, expire);
    }
    left_nothing("the filter locked", &bits, journaled);
    {
        // Only the fused read-and-raise shares this lock; a plain add needs it not.
        let _held = entry.rmw.write().unwrap();
        assert!(store.read_then_write_bits_now(&d, &bits, expire).is_none());
    }
    left_nothing("a read-all-then-write", &bits, journaled);
    {
        let _held = store.inner.commit.write().unwrap();
        gives_way("the checkpoint switching journals", bits, expire);
    }
    left_nothing("the checkpoint switching journals", &bits, journaled);
    {
        let _held = store.inner.journal().unwrap().hold();
        gives_way("another write appending", bits, expire);
    }
    left_nothing("another write appending", &bits, journaled);
    store.inner.broken.store(true, Ordering::SeqCst);
    gives_way("the store awaiting its reopen", bits, expire);
    left_nothing("the store awaiting its reopen", &bits, journaled);
    // The waiting write reopens and writes.
    store.write_bits(&d, &bits, expire).unwrap();
    assert!(!unset(&bits));
    // Waiting for another append's turn is not a slow disk...
    let bits = fresh();
    std::thread::scope(|s| {
        let held = store.inner.journal().unwrap().hold();
        let writer = s.spawn(|| store.write_bits(&d, &bits, expire).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(held);
        writer.join().unwrap();
    });
    assert!(!unset(&bits));
    assert!(store.write_bits_now(&d, &fresh(), expire).is_some());
    // ...but a write that itself took 25 ms keeps writes off the worker
    // for a second, then they come back.
    store.inner.journal().unwrap().stall_ms.store(25, Ordering::Relaxed);
    let bits = fresh();
    store.write_bits(&d, &bits, expire).unwrap();
    store.inner.journal().unwrap().stall_ms.store(0, Ordering::Relaxed);
    assert!(!unset(&bits));
    let (bits, journaled) = (fresh(), journal());
    gives_way("a slow append just before", bits, expire);
    left_nothing("a slow append just before", &bits, journaled);
    store.inner.slow_disk_until_ms.store(0, Ordering::Relaxed);
    assert!(store.write_bits_now(&d, &fresh(), expire).is_some());
    // 300 ticks of 29 s ahead: longer than 255 ticks, so the ticks must grow.
    let bits = fresh();
    gives_way("an expiry past the filter's ticks", bits, now + 300 * 29_000);
    assert!(unset(&bits));
    assert!(store.read_then_write_bits_now(&d, &fresh(), expire).is_some());
    drop(store);

    let synced = EmbeddedStore::open(EmbeddedConfig {
        path: dir.path().to_path_buf(),
        fsync: true,
        ..EmbeddedConfig::default()
    })
    .unwrap();
    assert!(!synced.writes_to_memory(), "the engine would hash every write twice");
    assert!(
        synced
            .read_then_write_bits_now(&d, &[BitAddr { shard: 0, bit: 1 }], expire)
            .is_none()
    );
    assert!(
        synced
            .write_bits_now(&d, &[BitAddr { shard: 0, bit: 1 }], expire)
            .is_none()
    );
}

/// A journal left by a crash of an earlier version (fixed-form records)
/// replays, beside records in the compact form this version writes: every
/// bit of both comes back after the restart.
#[test]
fn fixed_and_compact_journal_records_both_replay() {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        path: dir.path().to_path_buf(),
        ..EmbeddedConfig::default()
    };
    let g = Geometry {
        hash_functions: 2,
        shards: 4,
        bits_per_shard: 5_000,
    };
    let d = Deduper::new("c", "d", g, 3_600, Level::Global, 0);
    drop({
        let store = EmbeddedStore::open(config.clone()).unwrap();
        store.create_deduper(&d).unwrap();
        store
    });
    let expire = now_ms() + 600_000;
    let key = codec::deduper_key("c", "d");
    let old = [BitAddr { shard: 1, bit: 7 }, BitAddr { shard: 3, bit: 4_999 }];
    let new = [BitAddr { shard: 0, bit: 0 }, BitAddr { shard: 2, bit: 2_500 }];
    let mut file = journal::frame(&codec::encode_write_fixed(&key, codec::expire_seconds(expire), &old));
    file.extend(journal::frame(&codec::encode_write(
        &key,
        codec::expire_seconds(expire),
        &new,
    )));
    std::fs::write(dir.path().join("journal").join(format!("{:016}.log", 1u64 << 40)), file).unwrap();
    let store = EmbeddedStore::open(config).unwrap();
    let untouched = [BitAddr { shard: 1, bit: 8 }];
    let set = |bits: &[BitAddr]| {
        store
            .read_bits(&d, bits)
            .unwrap()
            .iter()
            .map(|c| c.is_set(now_ms()))
            .collect::<Vec<_>>()
    };
    assert_eq!(set(&old), [true, true], "fixed-form record lost");
    assert_eq!(set(&new), [true, true], "compact record lost");
    assert_eq!(set(&untouched), [false]);
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
