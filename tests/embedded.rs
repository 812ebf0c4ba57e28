//! The integration suite against the embedded store.

mod common;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::embedded());

/// An embedded store with default settings in `dir`.
fn open_in(dir: &std::path::Path) -> solus::storage::embedded::EmbeddedStore {
    use solus::storage::embedded::{EmbeddedConfig, EmbeddedStore};
    EmbeddedStore::open(EmbeddedConfig {
        path: dir.to_path_buf(),
        ..EmbeddedConfig::default()
    })
    .unwrap()
}

/// The embedded store keeps every deduper's bits in memory, so it refuses
/// dedupers that would not fit its budget instead of running out of memory
/// when they fill up (a client could otherwise ask for 65,536 shards of
/// 2^30 bits and exhaust the machine with a few adds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_budget_refuses_dedupers_that_would_not_fit() {
    use common::{TestServer, create_geom, create_np};
    let mut backend = TestBackend::embedded();
    backend.settings.storage.embedded.max_memory_mib = 16;
    let s = TestServer::start(&backend).await;
    let mut admin = s.admin();
    // n = 1e6 at p = 1%: 9.6 million bits, one byte each: about 9.3 MiB.
    admin
        .create_deduper(create_np("c", "fits", 1_000_000, 0.01, 60))
        .await
        .unwrap();
    let e = admin
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{}", e.message());
    // A retry cannot free the budget (only a delete does): no RetryInfo, so
    // clients do not retry it.
    assert!(!solus::api::is_transient(&e), "budget refusal marked retryable");
    assert!(
        e.message().contains("storage.embedded.max_memory_mib"),
        "{}",
        e.message()
    );
    // MiB with two decimals, so that what is needed visibly exceeds what is
    // left (whole MiB once read "needs up to 1 MiB ... only 1 of 1 MiB left").
    let (need, left) = need_and_left(e.message());
    assert!(need > left, "{}", e.message());
    assert!(
        (9.0..9.5).contains(&need) && (6.5..7.0).contains(&left),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("of the embedded store's 16 MiB"),
        "{}",
        e.message()
    );
    let huge = admin
        .create_deduper(create_geom("c", "huge", 7, 65_536, 1 << 30, 60))
        .await
        .unwrap_err();
    assert_eq!(huge.code(), tonic::Code::ResourceExhausted, "{}", huge.message());
    // Small ones still fit, and the budget survives a restart.
    admin
        .create_deduper(create_np("c", "small", 100_000, 0.01, 60))
        .await
        .unwrap();
    s.stop().await;
    let s = TestServer::start(&backend).await;
    let again = s
        .admin()
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        tonic::Code::ResourceExhausted,
        "reserved bytes are recomputed at start-up"
    );
}

/// The MiB needed and left in a RESOURCE_EXHAUSTED message of the memory
/// budget ("needs 9.18 MiB ... only 6.82 of ..."), each with two decimals.
fn need_and_left(message: &str) -> (f64, f64) {
    let after = |prefix: &str| -> f64 {
        let rest = &message[message
            .find(prefix)
            .unwrap_or_else(|| panic!("{prefix:?} in {message}"))
            + prefix.len()..];
        let number = rest.split(' ').next().unwrap();
        assert_eq!(
            number.split_once('.').map(|(_, d)| d.len()),
            Some(2),
            "{number:?} in {message}"
        );
        number.parse().unwrap()
    };
    (after("needs "), after("only "))
}

/// DeleteDeduper frees the memory budget: a deduper that did not fit fits
/// once another is deleted, and the freed budget and the delete survive a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_frees_the_memory_budget() {
    use common::{TestServer, create_np};
    use solus::api::pb;
    let mut backend = TestBackend::embedded();
    backend.settings.storage.embedded.max_memory_mib = 16;
    let s = TestServer::start(&backend).await;
    let mut admin = s.admin();
    // n = 1e6 at p = 1%: about 9.3 MiB each; two do not fit in 16 MiB.
    admin
        .create_deduper(create_np("c", "first", 1_000_000, 0.01, 60))
        .await
        .unwrap();
    common::add(&s, "c", "first", &["x"], 0).await;
    let refused = admin
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{}", refused.message());
    admin
        .delete_deduper(pb::DeleteDeduperRequest {
            client_id: "c".into(),
            name: "first".into(),
            force: true,
        })
        .await
        .unwrap();
    admin
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .expect("fits once the first is deleted");
    s.stop().await;
    let s = TestServer::start(&backend).await;
    let mut admin = s.admin();
    let get = |name: &str| pb::GetDeduperRequest {
        client_id: "c".into(),
        name: name.into(),
    };
    assert_eq!(
        admin.get_deduper(get("first")).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    admin.get_deduper(get("second")).await.unwrap();
    let third = admin
        .create_deduper(create_np("c", "first", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(
        third.code(),
        tonic::Code::ResourceExhausted,
        "the budget at start-up counts only the remaining deduper"
    );
}

/// A delete interrupted between its steps (after the checkpoints, before
/// the config row and page file go) leaves the deduper inactive, listed
/// and with its bits, across a restart; deleting it again finishes, and a
/// namesake created afterwards starts empty (no journal record replays
/// into it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_delete_can_be_run_again() {
    use solus::engine::{CreateSpec, Engine, EngineError, Limits};
    use solus::storage::StorageError;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let open = || Arc::new(open_in(dir.path()));
    let spec = || CreateSpec {
        client_id: "c".into(),
        name: "d".into(),
        expected_insertions: 10_000,
        false_positive_rate: 0.01,
        expiry_seconds: 600,
        ..CreateSpec::default()
    };
    let store = open();
    let engine = Engine::new(store.clone(), Limits::default());
    engine.create_deduper(spec()).await.unwrap();
    engine.add("c", "d", vec!["kept", "also"], 0).await.unwrap();
    store.fail_next_delete_midway();
    let e = engine.delete_deduper("c", "d", true).await.unwrap_err();
    assert!(matches!(e, EngineError::Storage(StorageError::Unavailable(_))), "{e}");
    let d = engine.get_deduper("c", "d").await.unwrap();
    assert!(!d.active, "left deactivated, not half-usable");
    assert!(matches!(
        engine.check_absence("c", "d", vec!["kept"]).await,
        Err(EngineError::Inactive { .. })
    ));
    drop(engine);
    drop(store);

    // A crash there: on restart the config and its saved bits are back.
    let store = open();
    let engine = Engine::new(store.clone(), Limits::default());
    let d = engine.get_deduper("c", "d").await.unwrap();
    assert!(!d.active);
    engine.update_deduper("c", "d", Some(true), None).await.unwrap();
    assert_eq!(
        engine.check_absence("c", "d", vec!["kept", "new"]).await.unwrap(),
        [false, true]
    );
    engine.update_deduper("c", "d", Some(false), None).await.unwrap();
    // Inactive: no force needed; the second time NOT_FOUND.
    let deleted = engine.delete_deduper("c", "d", false).await.unwrap();
    assert_eq!(deleted.name, "d");
    assert!(matches!(
        engine.delete_deduper("c", "d", false).await,
        Err(EngineError::NotFound { .. })
    ));
    drop(engine);
    drop(store);

    let store = open();
    let engine = Engine::new(store.clone(), Limits::default());
    assert!(matches!(
        engine.get_deduper("c", "d").await,
        Err(EngineError::NotFound { .. })
    ));
    engine.create_deduper(spec()).await.unwrap();
    assert_eq!(
        engine.check_absence("c", "d", vec!["kept", "also"]).await.unwrap(),
        [true, true],
        "nothing of the deleted deduper comes back"
    );
}

/// `Store::entities_absent` of the embedded store (reads bit `j` only of
/// entities whose earlier bits were set) answers exactly what reading every
/// cell answers: random entities over a half-full filter whose stamps have
/// mixed expiries, judged at instants before, between and after them,
/// with repeated addresses inside an entity.
#[test]
fn entities_absent_in_rounds_answers_as_reading_every_cell() {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use solus::contract::sizing::Geometry;
    use solus::deduper::{Deduper, Level};
    use solus::storage::{BitAddr, Store};

    let dir = tempfile::tempdir().unwrap();
    let store = open_in(dir.path());
    let (k, shards, bps) = (7usize, 3u32, 2_000u32);
    let g = Geometry {
        hash_functions: k as u32,
        shards,
        bits_per_shard: bps,
    };
    let d = Deduper::new("c", "rounds", g, 3_600, Level::Global, 0);
    store.create_deduper(&d).unwrap();
    let mut rng = StdRng::seed_from_u64(20);
    let now = solus::clock::now_ms();
    let random = |rng: &mut StdRng| BitAddr {
        shard: rng.random_range(0..shards),
        bit: rng.random_range(0..bps),
    };
    // About half the bits set, a third of them expiring in 100 s, the rest in an hour.
    let mut written = Vec::new();
    for expire in [now + 100_000, now + 3_600_000] {
        let mut bits: Vec<BitAddr> = (0..(shards * bps / 4)).map(|_| random(&mut rng)).collect();
        bits.sort_unstable_by_key(|a| (a.shard, a.bit));
        store.write_bits(&d, &bits, expire).unwrap();
        written.extend(bits);
    }
    // Entities: a quarter made of written bits only (present until their
    // earliest expiry), the rest random; a fifth with a repeated address.
    let mut bits = Vec::new();
    for e in 0..5_000 {
        let mut own: Vec<BitAddr> = (0..k)
            .map(|_| match e % 4 {
                0 => written[rng.random_range(0..written.len())],
                _ => random(&mut rng),
            })
            .collect();
        if e % 5 == 0 {
            own[k - 1] = own[0];
        }
        bits.extend(own);
    }
    let mut decided_present = 0;
    for at in [now, now + 200_000, now + 4_000_000] {
        let cells = store.read_bits(&d, &bits).unwrap();
        let expected: Vec<bool> = cells.chunks(k).map(|c| c.iter().any(|c| !c.is_set(at))).collect();
        let got = store.entities_absent(&d, &bits, k, at).unwrap();
        // The async worker's read (nothing is being changed: it answers).
        let now_read = store.entities_absent_now(&d, &bits, k, at).map(Result::unwrap);
        assert!(
            now_read.as_ref() == Some(&got),
            "entities_absent_now differs at now + {} ms",
            at - now
        );
        let wrong: Vec<usize> = (0..expected.len())
            .filter(|&i| got.get(i) != Some(&expected[i]))
            .collect();
        assert!(
            got.len() == expected.len() && wrong.is_empty(),
            "at now + {} ms: {} answers for {}, {} wrong (first: {:?})",
            at - now,
            got.len(),
            expected.len(),
            wrong.len(),
            wrong.first()
        );
        decided_present += got.iter().filter(|a| !**a).count();
    }
    // Not a vacuous comparison: many present answers (a quarter of the
    // entities now, fewer once the 100 s stamps expired, none at the end).
    assert!(decided_present > 1_000, "{decided_present} present answers");
}

/// Fused read-and-raise (`read_then_write_bits`, what AddIfAbsent uses) is
/// atomic per entity under concurrency: four threads add the same 6,000
/// entities (disjoint bits, spread over 300 shards, so requests lock many
/// shard stripes in turn) in their own random batches; every entity reads
/// absent in exactly one of them. Two of the threads write as an async
/// worker does (`read_then_write_bits_now`, waiting only when it gives
/// way), the other two as the blocking pool does: both paths are atomic
/// against each other.
#[test]
fn concurrent_fused_read_and_raise_has_one_winner_per_entity() {
    use rand::seq::SliceRandom;
    use rand::{SeedableRng, rngs::StdRng};
    use solus::contract::sizing::Geometry;
    use solus::deduper::{Deduper, Level};
    use solus::storage::{BitAddr, Store};
    use std::sync::{Arc, Barrier};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_in(dir.path()));
    let (k, shards, entities, threads) = (7u32, 300u32, 6_000u32, 4usize);
    let g = Geometry {
        hash_functions: k,
        shards,
        bits_per_shard: entities / shards * k,
    };
    let d = Arc::new(Deduper::new("c", "fused", g, 3_600, Level::Global, 0));
    store.create_deduper(&d).unwrap();
    // Entity e: shard e % shards, bits (e / shards) * k .. + k.
    let bits_of = move |e: u32| {
        (0..k).map(move |j| BitAddr {
            shard: e % shards,
            bit: e / shards * k + j,
        })
    };
    let barrier = Arc::new(Barrier::new(threads));
    let expire = solus::clock::now_ms() + 3_600_000;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, d, barrier) = (store.clone(), d.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut order: Vec<u32> = (0..entities).collect();
                order.shuffle(&mut StdRng::seed_from_u64(t as u64));
                let (mut won, mut now) = (Vec::new(), 0);
                barrier.wait();
                for batch in order.chunks(500) {
                    // As the engine lays out writes: grouped by shard.
                    let mut batch = batch.to_vec();
                    batch.sort_by_key(|e| e % shards);
                    let bits: Vec<BitAddr> = batch.iter().flat_map(|&e| bits_of(e)).collect();
                    let answered = (t % 2 == 0)
                        .then(|| store.read_then_write_bits_now(&d, &bits, expire))
                        .flatten();
                    now += usize::from(answered.is_some());
                    let cells = answered
                        .unwrap_or_else(|| store.read_then_write_bits(&d, &bits, expire))
                        .unwrap();
                    for (e, c) in batch.iter().zip(cells.chunks(k as usize)) {
                        if c.iter().any(|c| c.expire_ms.is_none()) {
                            won.push(*e);
                        }
                    }
                }
                (won, now)
            })
        })
        .collect();
    let mut winners = vec![0u32; entities as usize];
    let mut answered_now = 0;
    for h in handles {
        let (won, now) = h.join().unwrap();
        answered_now += now;
        for e in won {
            winners[e as usize] += 1;
        }
    }
    // Of 24 batches written the worker's way, most find the locks free
    // (a quarter, so a loaded machine's preemptions do not fail it).
    assert!(answered_now >= 6, "only {answered_now} batches written without a wait");
    let wrong: Vec<(usize, u32)> = winners.iter().copied().enumerate().filter(|&(_, w)| w != 1).collect();
    assert!(
        wrong.is_empty(),
        "{} entities without exactly one winner, first {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Creating a large deduper does not hold up reads of the others: its
/// filter (faulted in when made, up to seconds for hundreds of MB) is
/// allocated before the map of dedupers is locked. Found by reading the
/// code: the allocation ran under the map's write lock, and every read and
/// write of every deduper waited for it - on an async worker too, once
/// small reads ran there.
#[test]
fn creating_a_large_deduper_leaves_reads_of_the_others_unblocked() {
    use solus::contract::sizing::Geometry;
    use solus::deduper::{Deduper, Level};
    use solus::storage::{BitAddr, Store};
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(open_in(dir.path()));
    let small = Geometry {
        hash_functions: 3,
        shards: 1,
        bits_per_shard: 1_000,
    };
    let d = Deduper::new("c", "small", small, 3_600, Level::Global, 0);
    store.create_deduper(&d).unwrap();
    let bits: Vec<BitAddr> = (0..3).map(|bit| BitAddr { shard: 0, bit }).collect();
    // 768 MiB of stamps: a few hundred ms to fault in.
    let large = Geometry {
        hash_functions: 7,
        shards: 768,
        bits_per_shard: 1 << 20,
    };
    let big = Deduper::new("c", "large", large, 3_600, Level::Global, 0);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            store.create_deduper(&big).unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            start.elapsed()
        })
    };
    let (mut reads, mut longest) = (0u32, Duration::ZERO);
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        let start = Instant::now();
        assert_eq!(store.entities_absent(&d, &bits, 3, 0).unwrap(), [true]);
        longest = longest.max(start.elapsed());
        reads += 1;
    }
    let took = creator.join().unwrap();
    assert!(
        took > Duration::from_millis(40),
        "the create took only {took:?}: nothing to measure"
    );
    assert!(
        longest < took / 4,
        "a read of another deduper waited {longest:?} while a create took {took:?} ({reads} reads)"
    );
}
