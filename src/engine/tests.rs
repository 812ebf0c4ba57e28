//! Engine behaviour against a counting in-memory store: one storage call
//! per request, grouping of bits, entity order.

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use super::*;
use crate::contract::sizing::Geometry;

/// A store that counts calls and remembers the max expiry per bit.
#[derive(Default)]
struct CountingStore {
    bits: Mutex<HashMap<BitAddr, i64>>,
    calls: Mutex<Vec<&'static str>>,
    dedupers: Mutex<HashMap<(String, String), Deduper>>,
    requests: Mutex<HashMap<RequestKey, Vec<u8>>>,
    records: Mutex<HashMap<(Vec<u8>, u64), i64>>,
    /// Refuse remembering records as over budget from now on.
    records_full: AtomicBool,
    /// Writes to fail from now on (a fault between the read and the write).
    fail_writes: AtomicBool,
    /// How long `get_deduper` takes, in ms, and how many times it ran.
    get_delay_ms: AtomicUsize,
    /// Reads of the filter of this name answer that it was deleted (a
    /// generation the retirement pass freed).
    deleted: Mutex<Option<String>>,
    /// How long the next `read_and_write_bits` takes before it writes, in ms
    /// (a slow HBase round: a guard claim waited for).
    slow_write_ms: AtomicUsize,
    gets: AtomicUsize,
    /// Reads of the deduper of this name block until [`CountingStore::release`]
    /// (a deduper whose storage hangs).
    stall: Mutex<Option<String>>,
    released: std::sync::Condvar,
}

impl CountingStore {
    fn release(&self) {
        *self.stall.lock().unwrap() = None;
        self.released.notify_all();
    }
    fn take_calls(&self) -> Vec<&'static str> {
        std::mem::take(&mut self.calls.lock().unwrap())
    }
    fn read(&self, bits: &[BitAddr]) -> Vec<Cell> {
        let map = self.bits.lock().unwrap();
        bits.iter()
            .map(|b| Cell {
                expire_ms: map.get(b).copied(),
                legacy: None,
            })
            .collect()
    }
    fn write(&self, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(StorageError::Unavailable("injected write failure".into()));
        }
        assert!(bits.windows(2).all(|w| w[0] < w[1]), "addresses sorted and unique");
        let mut map = self.bits.lock().unwrap();
        for b in bits {
            let e = map.entry(*b).or_insert(expire_ms);
            *e = (*e).max(expire_ms);
        }
        Ok(())
    }
}

impl Store for CountingStore {
    fn kind(&self) -> &'static str {
        "counting"
    }
    fn read_bits(&self, d: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        let mut stall = self.stall.lock().unwrap();
        while stall.as_deref() == Some(d.name.as_str()) {
            stall = self.released.wait(stall).unwrap();
        }
        drop(stall);
        if self.deleted.lock().unwrap().as_deref() == Some(d.name.as_str()) {
            return Err(StorageError::Precondition(format!("deduper {:?} was deleted", d.name)));
        }
        self.calls.lock().unwrap().push("read");
        Ok(self.read(bits))
    }
    fn write_bits(&self, _: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        self.calls.lock().unwrap().push("write");
        self.write(bits, expire_ms)
    }
    fn read_and_write_bits(
        &self,
        _: &Deduper,
        bits: &[BitAddr],
        e: i64,
        before_write: &mut crate::storage::BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError> {
        self.calls.lock().unwrap().push("read_and_write");
        let cells = self.read(bits);
        before_write(&cells)?;
        let slow = self.slow_write_ms.swap(0, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(slow as u64));
        self.write(bits, e)?;
        Ok(cells)
    }
    fn create_deduper(&self, d: &Deduper) -> Result<(), StorageError> {
        self.dedupers
            .lock()
            .unwrap()
            .insert((d.client_id.clone(), d.name.clone()), d.clone());
        Ok(())
    }
    fn update_deduper(
        &self,
        c: &str,
        n: &str,
        change: &crate::storage::Change<'_>,
    ) -> Result<Option<Deduper>, StorageError> {
        let mut map = self.dedupers.lock().unwrap();
        Ok(map.get_mut(&(c.to_string(), n.to_string())).map(|d| {
            change(d);
            d.clone()
        }))
    }
    fn remember_request(&self, key: &RequestKey, record: &[u8], _: i64) -> Result<Option<Vec<u8>>, StorageError> {
        let mut map = self.requests.lock().unwrap();
        if let Some(earlier) = map.get(key) {
            return Ok(Some(earlier.clone()));
        }
        map.insert(key.clone(), record.to_vec());
        Ok(None)
    }
    fn recall_request(&self, key: &RequestKey) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.requests.lock().unwrap().get(key).cloned())
    }
    fn remember_records(&self, _: &Deduper, records: &[(&[u8], u64)], expire_ms: i64) -> Result<(), StorageError> {
        self.calls.lock().unwrap().push("remember_records");
        if self.records_full.load(Ordering::SeqCst) {
            return Err(StorageError::Capacity("record budget full".into()));
        }
        let mut map = self.records.lock().unwrap();
        for (id, fp) in records {
            let e = map.entry((id.to_vec(), *fp)).or_insert(expire_ms);
            *e = (*e).max(expire_ms);
        }
        Ok(())
    }
    fn recall_records(&self, _: &Deduper, records: &[(&[u8], u64)], now_ms: i64) -> Result<Vec<bool>, StorageError> {
        self.calls.lock().unwrap().push("recall_records");
        let map = self.records.lock().unwrap();
        Ok(records
            .iter()
            .map(|(id, fp)| map.get(&(id.to_vec(), *fp)).is_some_and(|e| *e >= now_ms))
            .collect())
    }
    fn get_deduper(&self, c: &str, n: &str) -> Result<Option<Deduper>, StorageError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        // Read first, answer late: a change meanwhile is not in the answer.
        let d = self
            .dedupers
            .lock()
            .unwrap()
            .get(&(c.to_string(), n.to_string()))
            .cloned();
        std::thread::sleep(Duration::from_millis(self.get_delay_ms.load(Ordering::SeqCst) as u64));
        self.calls.lock().unwrap().push("get_deduper");
        Ok(d)
    }
    fn list_dedupers(&self, _: &str, _: bool) -> Result<(Vec<Deduper>, Vec<crate::storage::Unreadable>), StorageError> {
        Ok((Vec::new(), Vec::new()))
    }
    fn delete_deduper(&self, d: &Deduper) -> Result<bool, StorageError> {
        let key = (d.client_id.clone(), d.name.clone());
        Ok(self.dedupers.lock().unwrap().remove(&key).is_some())
    }
    fn bit_stats(&self, _: &Deduper, now: i64, _: u64, _: u64) -> Result<crate::storage::BitStats, StorageError> {
        let set = self.bits.lock().unwrap().values().filter(|&&e| e >= now).count() as u64;
        Ok(crate::storage::BitStats {
            set_bits: set,
            sampled_bits: set,
        })
    }
    fn ping(&self) -> Result<(), StorageError> {
        Ok(())
    }
    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

/// An engine on a fresh counting store with deduper `c`/`d` created:
/// `k` bits per entity, `shards` shards of 4,096 bits, 60 s expiry.
async fn engine_on_geometry(k: u32, shards: u32) -> (Arc<CountingStore>, Engine) {
    let store = Arc::new(CountingStore::default());
    let engine = Engine::new(store.clone(), Limits::default());
    let spec = CreateSpec {
        client_id: "c".into(),
        name: "d".into(),
        hash_functions: k,
        shards,
        bits_per_shard: 4096,
        expiry_seconds: 60,
        ..Default::default()
    };
    engine.create_deduper(spec).await.unwrap();
    (store, engine)
}

#[tokio::test]
async fn one_storage_call_per_request_whatever_the_batch() {
    let (store, engine) = engine_on_geometry(7, 256).await;
    let batch: Vec<Vec<u8>> = (0..5000).map(|i| format!("e{i}").into_bytes()).collect();
    engine.check_absence("c", "d", batch.clone()).await.unwrap();
    assert_eq!(
        store.take_calls(),
        ["get_deduper", "read"],
        "config loaded once, then one read"
    );
    engine.add("c", "d", batch.clone(), 0).await.unwrap();
    assert_eq!(
        store.take_calls(),
        ["write"],
        "config cached; one write for 5000 entities over 256 shards"
    );
    let absent = engine.add_if_absent("c", "d", batch.clone(), 0).await.unwrap();
    assert_eq!(store.take_calls(), ["read_and_write"]);
    assert!(absent.iter().all(|a| !a));
    // 5000 entities x 7 bits over 256 x 4096 bits: every address is sent once.
    let distinct = store.bits.lock().unwrap().len();
    assert!(distinct > 30_000 && distinct <= 35_000, "{distinct}");
}

#[tokio::test]
async fn plan_groups_duplicate_bits_and_keeps_entity_order() {
    let d = Deduper::new(
        "c",
        "d",
        Geometry {
            hash_functions: 3,
            shards: 1,
            bits_per_shard: 2,
        },
        60,
        Level::Global,
        0,
    );
    let plan = Plan::build(&d, &[b"a".as_slice(), b"b", b"a"]);
    assert!(plan.addrs.len() <= 2, "two bits in the only shard: {:?}", plan.addrs);
    assert_eq!(
        plan.entity_bits(0).collect::<Vec<_>>(),
        plan.entity_bits(2).collect::<Vec<_>>(),
        "same entity, same bits"
    );
    for i in 0..3 {
        let mut expected = [0u32; 3];
        hashing::bit_positions([b"a".as_slice(), b"b", b"a"][i], 2, &mut expected);
        let got: Vec<u32> = plan.entity_bits(i).map(|a| plan.addrs[a].bit).collect();
        assert_eq!(got, expected);
    }
}

/// The addresses of entity `i` in a plan, in bit order.
fn addrs_of(plan: &Plan, i: usize) -> Vec<BitAddr> {
    plan.entity_bits(i).map(|a| plan.addrs[a]).collect()
}

#[test]
fn unsorted_plans_give_every_entity_the_sorted_plans_bits() {
    for (shards, bits_per_shard, k) in [(1, 2, 3), (7, 1_000, 7), (458, 1 << 20, 7)] {
        let d = Deduper::new(
            "c",
            "d",
            Geometry {
                hash_functions: k,
                shards,
                bits_per_shard,
            },
            60,
            Level::Global,
            0,
        );
        let entities: Vec<Vec<u8>> = (0..1_500u32).map(|i| format!("e{}", i % 1_000).into_bytes()).collect();
        let sorted = Plan::for_store(BitOrder::SortedUnique, false, &d, &entities);
        let read = Plan::for_store(BitOrder::Any, false, &d, &entities);
        let write = Plan::for_store(BitOrder::Any, true, &d, &entities);
        let n = entities.len() * k as usize;
        assert_eq!((read.addrs.len(), write.addrs.len()), (n, n), "repeats kept");
        assert!(read.index.is_none(), "reads in entity order need no index");
        for i in 0..entities.len() {
            let want = addrs_of(&sorted, i);
            assert_eq!(addrs_of(&read, i), want, "entity {i}, {shards} x {bits_per_shard}");
            assert_eq!(addrs_of(&write, i), want, "entity {i}, {shards} x {bits_per_shard}");
            assert_eq!(&read.addrs[i * k as usize..(i + 1) * k as usize], want.as_slice());
        }
        // Writes: one run per shard, ascending, its entities in request order.
        let runs: Vec<u32> = write
            .addrs
            .chunk_by(|a, b| a.shard == b.shard)
            .map(|r| r[0].shard)
            .collect();
        assert!(runs.windows(2).all(|w| w[0] < w[1]), "one run per shard: {runs:?}");
        let firsts: Vec<usize> = (0..entities.len())
            .map(|i| write.entity_bits(i).next().unwrap())
            .collect();
        for i in 0..entities.len() {
            for j in i + 1..entities.len() {
                if write.addrs[firsts[i]].shard == write.addrs[firsts[j]].shard {
                    assert!(
                        firsts[i] < firsts[j],
                        "request order within shard {}",
                        write.addrs[firsts[i]].shard
                    );
                }
            }
        }
    }
}

/// The engine over the embedded store (bits unsorted, repeats kept, each
/// read just before its raise) answers exactly as the definition: an
/// entity is absent when one of its bits is neither set before the request
/// nor set by an earlier entity of it. Tiny filters make bits repeat within
/// entities and across them.
#[tokio::test]
async fn embedded_answers_match_the_definition_with_repeated_bits() {
    use crate::storage::embedded::{EmbeddedConfig, EmbeddedStore};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    for (shards, bits_per_shard, k) in [(1, 5, 4), (3, 40, 3), (16, 4096, 7)] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            EmbeddedStore::open(EmbeddedConfig {
                path: dir.path().to_path_buf(),
                ..EmbeddedConfig::default()
            })
            .unwrap(),
        );
        assert_eq!(store.bit_order(), BitOrder::Any);
        let engine = Engine::new(store.clone(), Limits::default());
        engine
            .create_deduper(CreateSpec {
                client_id: "c".into(),
                name: "d".into(),
                hash_functions: k,
                shards,
                bits_per_shard,
                expiry_seconds: 600,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut set: HashSet<BitAddr> = HashSet::new();
        let bits = |e: &[u8]| -> Vec<BitAddr> {
            let mut b = vec![0u32; k as usize];
            hashing::bit_positions(e, bits_per_shard, &mut b);
            let shard = hashing::shard_of(e, shards);
            b.into_iter().map(|bit| BitAddr { shard, bit }).collect()
        };
        let mut rng = StdRng::seed_from_u64(u64::from(shards));
        let mut absents = 0;
        for round in 0..20 {
            let batch: Vec<Vec<u8>> = (0..200)
                .map(|_| format!("e{}", rng.random_range(0..2_000)).into_bytes())
                .collect();
            let checked = engine.check_absence("c", "d", batch.clone()).await.unwrap();
            let want: Vec<bool> = batch.iter().map(|e| bits(e).iter().any(|b| !set.contains(b))).collect();
            assert_eq!(checked, want, "check, round {round}, {shards} x {bits_per_shard}");
            let added = engine.add_if_absent("c", "d", batch.clone(), 0).await.unwrap();
            let want: Vec<bool> = batch
                .iter()
                .map(|e| {
                    let b = bits(e);
                    let absent = b.iter().any(|b| !set.contains(b));
                    set.extend(b);
                    absent
                })
                .collect();
            assert_eq!(added, want, "add_if_absent, round {round}, {shards} x {bits_per_shard}");
            absents += want.iter().filter(|&&a| a).count();
        }
        assert!(absents > 0, "some entity was new");
        let last: Vec<Vec<u8>> = (0..2_000).map(|i| format!("e{i}").into_bytes()).collect();
        let checked = engine.check_absence("c", "d", last.clone()).await.unwrap();
        let want: Vec<bool> = last.iter().map(|e| bits(e).iter().any(|b| !set.contains(b))).collect();
        assert_eq!(checked, want);
    }
}

#[test]
fn packed_and_pair_sorts_plan_alike() {
    // The packed path (one u64 per bit) must give the plan the pair path
    // gives, for geometries whose shard and bit fields are narrow or wide.
    for (shards, bits_per_shard, k) in [(1, 2, 3), (7, 1_000, 7), (1_000, 958_506, 7), (3, 1 << 30, 14)] {
        let d = Deduper::new(
            "c",
            "d",
            Geometry {
                hash_functions: k,
                shards,
                bits_per_shard,
            },
            60,
            Level::Global,
            0,
        );
        let entities: Vec<Vec<u8>> = (0..3_000u32).map(|i| format!("e{}", i % 2_000).into_bytes()).collect();
        let g = &d.geometry;
        let bits_of = |n: u64| u64::BITS - n.saturating_sub(1).leading_zeros();
        let packed = Plan::build_packed(
            &d,
            &entities,
            bits_of(u64::from(g.bits_per_shard)),
            bits_of((entities.len() * k as usize) as u64),
        );
        let pairs = Plan::build_pairs(&d, &entities);
        assert_eq!(packed.addrs, pairs.addrs, "{shards} x {bits_per_shard}");
        assert_eq!(packed.index, pairs.index, "{shards} x {bits_per_shard}");
        assert!(
            packed
                .addrs
                .windows(2)
                .all(|w| (w[0].shard, w[0].bit) < (w[1].shard, w[1].bit))
        );
        assert!(
            packed.addrs.len() < entities.len() * k as usize,
            "repeated entities share bits"
        );
    }
}

async fn engine_with_deduper() -> (Arc<CountingStore>, Engine) {
    let store = Arc::new(CountingStore::default());
    let engine = Engine::new(store.clone(), Limits::default());
    let spec = CreateSpec {
        client_id: "c".into(),
        name: "d".into(),
        expected_insertions: 10_000,
        false_positive_rate: 0.001,
        expiry_seconds: 60,
        ..Default::default()
    };
    engine.create_deduper(spec).await.unwrap();
    (store, engine)
}

fn items(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{prefix}-{i}").into_bytes()).collect()
}

/// A fault between the read and the write of AddIfAbsent: the retry with
/// the same request_id answers "absent" for every first occurrence (the
/// recorded answer), and its writes complete.
#[tokio::test]
async fn add_if_absent_retry_after_a_failed_write_reports_the_first_answer() {
    let (store, engine) = engine_with_deduper().await;
    let batch = items("new", 100);
    let id = Some(b"req-1".to_vec());
    store.fail_writes.store(true, Ordering::SeqCst);
    let failed = engine
        .add_if_absent_with_id("c", "d", batch.clone(), 0, id.clone())
        .await;
    assert!(
        matches!(failed, Err(EngineError::Storage(StorageError::Unavailable(_)))),
        "{failed:?}"
    );
    store.fail_writes.store(false, Ordering::SeqCst);
    let retry = engine
        .add_if_absent_with_id("c", "d", batch.clone(), 0, id.clone())
        .await
        .unwrap();
    assert!(
        retry.iter().all(|&a| a),
        "a retry reports every first occurrence as absent"
    );
    let again = engine
        .add_if_absent_with_id("c", "d", batch.clone(), 0, id.clone())
        .await
        .unwrap();
    assert_eq!(again, retry, "every repeat gets the first answer");
    assert!(
        engine
            .check_absence("c", "d", batch.clone())
            .await
            .unwrap()
            .iter()
            .all(|&a| !a),
        "writes completed"
    );
    // Without a request_id the same retry would say "present": the bits are there now.
    assert!(
        engine
            .add_if_absent("c", "d", batch.clone(), 0)
            .await
            .unwrap()
            .iter()
            .all(|&a| !a)
    );
    // Same id, other entities: refused.
    let other = engine
        .add_if_absent_with_id("c", "d", items("other", 3), 0, id.clone())
        .await;
    assert!(
        matches!(other, Err(EngineError::Invalid(ref m)) if m.contains("request_id")),
        "{other:?}"
    );
    let wrong_rpc = engine.add_with_id("c", "d", batch, 0, id).await;
    assert!(matches!(wrong_rpc, Err(EngineError::Invalid(_))), "{wrong_rpc:?}");
}

#[tokio::test]
async fn add_retry_after_a_failed_write_completes_it() {
    let (store, engine) = engine_with_deduper().await;
    let batch = items("a", 50);
    let id = Some(vec![0, 1, 2, 255]);
    store.fail_writes.store(true, Ordering::SeqCst);
    assert!(
        engine
            .add_with_id("c", "d", batch.clone(), 0, id.clone())
            .await
            .is_err()
    );
    store.fail_writes.store(false, Ordering::SeqCst);
    assert!(
        engine
            .check_absence("c", "d", batch.clone())
            .await
            .unwrap()
            .iter()
            .all(|&a| a)
    );
    assert_eq!(engine.add_with_id("c", "d", batch.clone(), 0, id).await.unwrap(), 50);
    assert!(engine.check_absence("c", "d", batch).await.unwrap().iter().all(|&a| !a));
    let long = engine.add_with_id("c", "d", items("b", 1), 0, Some(vec![7; 129])).await;
    assert!(
        matches!(long, Err(EngineError::Invalid(ref m)) if m.contains("128")),
        "{long:?}"
    );
}

/// Concurrent lookups of one deduper's config share one storage read, and
/// the read fills the cache even though every caller left before it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_lookups_are_single_flight_and_outlive_their_callers() {
    let (store, engine) = engine_with_deduper().await;
    let engine = Arc::new(engine);
    store.get_delay_ms.store(300, Ordering::SeqCst);
    let before = store.gets.load(Ordering::SeqCst);
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move {
                tokio::time::timeout(
                    Duration::from_millis(50),
                    engine.check_absence("c", "d", vec![b"x".to_vec()]),
                )
                .await
            })
        })
        .collect();
    for c in callers {
        assert!(c.await.unwrap().is_err(), "every caller gave up after 50 ms");
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        store.gets.load(Ordering::SeqCst) - before,
        1,
        "one storage read for 20 callers"
    );
    store.get_delay_ms.store(10_000, Ordering::SeqCst);
    let start = Instant::now();
    engine.check_absence("c", "d", vec![b"x".to_vec()]).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "served from the cache the abandoned read filled"
    );
}

/// A config change is served to every request that starts after it, even
/// while a lookup that read the config before the change is still under
/// way: that lookup neither fills the cache nor takes new callers. (Found
/// while shortening the resize grace of the embedded store: before, a
/// request right after the change joined the old lookup, and the old
/// lookup cached the old config for the cache TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_read_before_a_change_does_not_serve_after_it() {
    let (store, engine) = engine_with_deduper().await;
    let engine = Arc::new(engine);
    engine.forget("c", "d");
    store.get_delay_ms.store(300, Ordering::SeqCst);
    let early = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.check_absence("c", "d", vec![b"x".to_vec()]).await })
    };
    // The early lookup has read the active config and is still answering.
    tokio::time::sleep(Duration::from_millis(100)).await;
    engine.update_deduper("c", "d", Some(false), None).await.unwrap();
    store.get_delay_ms.store(0, Ordering::SeqCst);
    let now = engine.check_absence("c", "d", vec![b"x".to_vec()]).await;
    assert!(matches!(now, Err(EngineError::Inactive { .. })), "{now:?}");
    // The early caller gets what it read; its lookup fills no cache.
    assert!(early.await.unwrap().is_ok());
    let after = engine.check_absence("c", "d", vec![b"x".to_vec()]).await;
    assert!(matches!(after, Err(EngineError::Inactive { .. })), "{after:?}");
}

/// Storage work queued for a caller that has gone never reaches storage.
#[test]
fn abandoned_work_is_dropped_before_storage() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        // The only blocking thread is busy: the call below waits in the queue.
        let busy = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(200)));
        let flag = ran.clone();
        let call = Engine::blocking(move || {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        assert!(tokio::time::timeout(Duration::from_millis(20), call).await.is_err());
        busy.await.unwrap();
        tokio::task::spawn_blocking(|| ()).await.unwrap();
    });
    assert!(!ran.load(Ordering::SeqCst), "work of a caller that left was skipped");
}

/// A deduper whose storage hangs (or one flooded with requests) takes at
/// most its lane of the blocking pool: another deduper is served meanwhile.
/// Before the lanes, the stalled deduper's 20 checks filled the pool's 8
/// threads and the other deduper's check waited for them (here: forever).
#[test]
fn a_stalled_deduper_leaves_the_blocking_pool_to_the_others() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Arc::new(CountingStore::default());
        let limits = Limits {
            max_storage_tasks_per_deduper: 4,
            ..Limits::default()
        };
        let engine = Arc::new(Engine::new(store.clone(), limits));
        for name in ["slow", "fast"] {
            let spec = CreateSpec {
                client_id: "c".into(),
                name: name.into(),
                expected_insertions: 10_000,
                false_positive_rate: 0.001,
                expiry_seconds: 60,
                ..Default::default()
            };
            engine.create_deduper(spec).await.unwrap();
        }
        *store.stall.lock().unwrap() = Some("slow".into());
        let stalled: Vec<_> = (0..20)
            .map(|i| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.check_absence("c", "slow", items(&format!("s{i}"), 10)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let fast = tokio::time::timeout(
            Duration::from_secs(5),
            engine.check_absence("c", "fast", items("f", 10)),
        )
        .await;
        // Released before asserting: the runtime's drop waits for its threads.
        store.release();
        assert!(matches!(fast, Ok(Ok(ref a)) if *a == vec![true; 10]), "{fast:?}");
        for s in stalled {
            assert_eq!(
                s.await.unwrap().unwrap(),
                vec![true; 10],
                "a stalled check answered once released"
            );
        }
    });
}

/// A record replayed after its first attempt wrote its bits (a Kafka task
/// closed before committing, a Flink restore): without record ids it reads
/// present and is dropped; with them it gets its first answer, in any batch.
#[tokio::test]
async fn a_replayed_record_gets_its_first_answer_in_any_batch() {
    let (store, engine) = engine_with_deduper().await;
    let ids = |tag: &str, n: usize| -> Vec<Vec<u8>> { (0..n).map(|i| format!("{tag}/{i}").into_bytes()).collect() };
    // First attempt: 10 new records, answered absent, bits written.
    let first = engine
        .add_if_absent_with_records("c", "d", items("e", 10), 0, None, ids("p0", 10))
        .await
        .unwrap();
    assert_eq!(first, vec![true; 10]);
    // Record ids are remembered before the bits are written.
    let calls = store.take_calls();
    assert_eq!(
        calls[calls.len() - 2..],
        ["read_and_write", "remember_records"],
        "nothing read present: no record lookup"
    );
    // Without ids, the replay reads its own bits: dropped as a duplicate.
    assert_eq!(
        engine.add_if_absent("c", "d", items("e", 10), 0).await.unwrap(),
        vec![false; 10]
    );
    // The replay, in another batch shape (the last 4 records and two new ones).
    let mut entities = items("e", 10)[6..].to_vec();
    entities.extend(items("new", 2));
    let mut replay_ids = ids("p0", 10)[6..].to_vec();
    replay_ids.extend(ids("p1", 2));
    let replay = engine
        .add_if_absent_with_records("c", "d", entities.clone(), 0, None, replay_ids.clone())
        .await
        .unwrap();
    assert_eq!(replay, vec![true; 6]);
    // CheckAbsence with the ids answers the same, without them "present".
    let check = engine
        .check_absence_with_records("c", "d", entities.clone(), replay_ids)
        .await
        .unwrap();
    assert_eq!(check, vec![true; 6]);
    assert_eq!(engine.check_absence("c", "d", entities).await.unwrap(), vec![false; 6]);
    // A true duplicate - the same entity under a new record id - stays present.
    let dup = engine
        .add_if_absent_with_records("c", "d", items("e", 1), 0, None, ids("p9", 1))
        .await
        .unwrap();
    assert_eq!(dup, vec![false]);
    // An id reused for another entity is a new record, not a replay.
    let reused = engine
        .add_if_absent_with_records("c", "d", items("e", 2)[1..].to_vec(), 0, None, ids("p0", 1))
        .await
        .unwrap();
    assert_eq!(reused, vec![false]);
}

#[tokio::test]
async fn record_ids_in_one_batch_see_earlier_entities_and_a_full_budget_writes_nothing() {
    let (store, engine) = engine_with_deduper().await;
    // The same entity twice under two ids: the first is new, the second a duplicate,
    // and a replay of the whole batch answers the same.
    let entities = vec![b"x".to_vec(), b"x".to_vec(), b"y".to_vec()];
    let ids = vec![b"1".to_vec(), b"2".to_vec(), Vec::new()];
    let first = engine
        .add_if_absent_with_records("c", "d", entities.clone(), 0, None, ids.clone())
        .await
        .unwrap();
    assert_eq!(first, vec![true, false, true]);
    let replay = engine
        .add_if_absent_with_records("c", "d", entities, 0, None, ids)
        .await
        .unwrap();
    assert_eq!(
        replay,
        vec![true, false, false],
        "y had no id: a replay without one reads present"
    );
    store.records_full.store(true, Ordering::SeqCst);
    store.take_calls();
    let refused = engine
        .add_if_absent_with_records(
            "c",
            "d",
            items("z", 3),
            0,
            None,
            vec![b"z1".to_vec(), b"z2".to_vec(), b"z3".to_vec()],
        )
        .await;
    assert!(
        matches!(refused, Err(EngineError::Storage(StorageError::Capacity(_)))),
        "{refused:?}"
    );
    assert_eq!(
        engine.check_absence("c", "d", items("z", 3)).await.unwrap(),
        vec![true; 3],
        "nothing written"
    );
    let bad = engine
        .add_if_absent_with_records("c", "d", items("z", 3), 0, None, vec![b"z1".to_vec()])
        .await;
    assert!(
        matches!(bad, Err(EngineError::Invalid(ref m)) if m.contains("1 record_ids for 3 entities")),
        "{bad:?}"
    );
}

/// Found by the history checker on real HBase: an AddIfAbsent whose storage
/// call took seconds (a guard claim waited for) stamped its bits from its
/// clock read at the start, so its entities read absent before the end of
/// the TTL counted from the answer. A write slower than `RESTAMP_AFTER_MS`
/// writes its bits again with the TTL counted from its end.
#[tokio::test]
async fn a_slow_write_counts_its_ttl_from_its_end() {
    let (store, engine) = engine_on_geometry(3, 4).await;
    store.slow_write_ms.store(1300, Ordering::SeqCst);
    let ttl = 10_000;
    let absent = engine
        .add_if_absent_with_id("c", "d", vec!["e1", "e2"], ttl, Some(b"r".to_vec()))
        .await
        .unwrap();
    let answered = now_ms();
    assert_eq!(absent, [true, true]);
    let bits = store.bits.lock().unwrap();
    assert_eq!(bits.len(), 6);
    for (b, expire) in bits.iter() {
        assert!(
            // Stamped again at the end, not from the start of the 1,300 ms call.
            *expire >= answered + ttl as i64 - 300,
            "{b:?} expires {} ms after the answer, TTL {ttl} ms",
            expire - answered
        );
    }
}

/// Seen once in a 30-minute history run: a read that computed its view
/// just before the retirement pass freed an older generation found that
/// filter deleted and failed FAILED_PRECONDITION for a live deduper. A
/// retired generation holds nothing live: it reads as absent.
#[tokio::test]
async fn an_older_generation_freed_under_a_read_reads_absent() {
    let (store, engine) = engine_on_geometry(3, 4).await;
    let store_deduper = |n: &str| store.dedupers.lock().unwrap()[&("c".to_string(), n.to_string())].clone();
    // Sized by geometry: give n and p to resize.
    let d = store_deduper("d");
    assert!(d.generations.is_empty());
    engine.resize_deduper("c", "d", Some(10_000), Some(0.01)).await.unwrap();
    // Generation 0's filter is the deduper's own name.
    *store.deleted.lock().unwrap() = Some("d".to_string());
    let absent = engine.check_absence("c", "d", vec!["new"]).await.unwrap();
    assert_eq!(absent, [true]);
    // The newest generation deleted is the deduper deleted: still an error.
    *store.deleted.lock().unwrap() = Some("d~g1".to_string());
    assert!(matches!(
        engine.check_absence("c", "d", vec!["new"]).await,
        Err(EngineError::Storage(StorageError::Precondition(_)))
    ));
}
