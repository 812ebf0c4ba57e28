//! Cell TTL on the emulator with a manual clock: exact to the millisecond.

use std::sync::Arc;

use hbase_emulator::{Clock, Emulator, ManualClock};
use solus::contract::layout;

use super::raw_client;
use crate::common::*;
use crate::hbase_shared::{add_req, row};

/// The cell TTL is `expiry_seconds` in ms, counted from the cell timestamp
/// (= the expiry time): HBase drops the cell exactly then, never earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_ttl_is_the_deduper_expiry_after_the_expiry_time() {
    let clock = Arc::new(ManualClock::starting_now());
    let emulator = Emulator::builder()
        .clock(clock.clone() as Arc<dyn Clock>)
        .start("127.0.0.1:0")
        .unwrap();
    let b = TestBackend::hbase_on(emulator);
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_geom("c", "d", 1, 1, 10, 60))
        .await
        .unwrap();
    s.data().add(add_req("c", "d", b"x".to_vec(), 1_000)).await.unwrap();

    let mut raw = raw_client(b.emulator().addr());
    let key = layout::data_row_key(0, "c", "d");
    let cells = row(&mut raw, "solus_deduper", &key);
    assert_eq!(cells.len(), 1);
    let expire = cells.values().next().unwrap().timestamp.unwrap();
    clock.set_ms(expire + 60_000);
    assert_eq!(
        row(&mut raw, "solus_deduper", &key).len(),
        1,
        "kept until expiry + expiry_seconds"
    );
    clock.set_ms(expire + 60_001);
    assert!(
        row(&mut raw, "solus_deduper", &key).is_empty(),
        "gone after expiry + expiry_seconds"
    );
}
