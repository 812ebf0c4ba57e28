//! Engine behaviour against a counting in-memory store: one storage call
//! per request, grouping of bits, entity order.

use std::sync::Mutex;

use super::*;
use crate::contract::sizing::Geometry;

/// A store that counts calls and remembers the max expiry per bit.
#[derive(Default)]
struct CountingStore {
    bits: Mutex<HashMap<BitAddr, i64>>,
    calls: Mutex<Vec<&'static str>>,
    dedupers: Mutex<HashMap<(String, String), Deduper>>,
}

impl CountingStore {
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
    fn write(&self, bits: &[BitAddr], expire_ms: i64) {
        assert!(bits.windows(2).all(|w| w[0] < w[1]), "addresses sorted and unique");
        let mut map = self.bits.lock().unwrap();
        for b in bits {
            let e = map.entry(*b).or_insert(expire_ms);
            *e = (*e).max(expire_ms);
        }
    }
}

impl Store for CountingStore {
    fn kind(&self) -> &'static str {
        "counting"
    }
    fn read_bits(&self, _: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        self.calls.lock().unwrap().push("read");
        Ok(self.read(bits))
    }
    fn write_bits(&self, _: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        self.calls.lock().unwrap().push("write");
        self.write(bits, expire_ms);
        Ok(())
    }
    fn read_and_write_bits(&self, _: &Deduper, bits: &[BitAddr], e: i64) -> Result<Vec<Cell>, StorageError> {
        self.calls.lock().unwrap().push("read_and_write");
        let cells = self.read(bits);
        self.write(bits, e);
        Ok(cells)
    }
    fn create_deduper(&self, d: &Deduper) -> Result<(), StorageError> {
        self.dedupers
            .lock()
            .unwrap()
            .insert((d.client_id.clone(), d.name.clone()), d.clone());
        Ok(())
    }
    fn update_deduper(&self, d: &Deduper) -> Result<(), StorageError> {
        self.create_deduper(d)
    }
    fn get_deduper(&self, c: &str, n: &str) -> Result<Option<Deduper>, StorageError> {
        self.calls.lock().unwrap().push("get_deduper");
        Ok(self
            .dedupers
            .lock()
            .unwrap()
            .get(&(c.to_string(), n.to_string()))
            .cloned())
    }
    fn list_dedupers(&self, _: &str, _: bool) -> Result<Vec<Deduper>, StorageError> {
        Ok(Vec::new())
    }
    fn ping(&self) -> Result<(), StorageError> {
        Ok(())
    }
    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

#[tokio::test]
async fn one_storage_call_per_request_whatever_the_batch() {
    let store = Arc::new(CountingStore::default());
    let engine = Engine::new(store.clone(), Limits::default());
    let spec = CreateSpec {
        client_id: "c".into(),
        name: "d".into(),
        hash_functions: 7,
        shards: 256,
        bits_per_shard: 4096,
        expiry_seconds: 60,
        ..Default::default()
    };
    engine.create_deduper(spec).await.unwrap();
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
    assert_eq!(plan.entity_bits(0), plan.entity_bits(2), "same entity, same bits");
    for i in 0..3 {
        let mut expected = [0u32; 3];
        hashing::bit_positions([b"a".as_slice(), b"b", b"a"][i], 2, &mut expected);
        let got: Vec<u32> = plan
            .entity_bits(i)
            .iter()
            .map(|&a| plan.addrs[a as usize].bit)
            .collect();
        assert_eq!(got, expected);
    }
}
