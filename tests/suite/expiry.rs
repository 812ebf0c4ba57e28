//! Time-windowed semantics: TTL expiry and the never-backwards rule.

use std::time::Duration;

use crate::common::*;

/// Stores may round an expiry up to the next second (the embedded store
/// does), so waits allow one extra second.
const ROUNDING: Duration = Duration::from_millis(1100);

pub async fn ttl_expiry(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 10_000, 0.001, 60))
        .await
        .unwrap();
    add(&s, "c", "d", &["short"], 300).await;
    add(&s, "c", "d", &["default"], 0).await;
    assert_eq!(absent(&s, "c", "d", &["short", "default"]).await, [false, false]);
    tokio::time::sleep(Duration::from_millis(300) + ROUNDING).await;
    assert_eq!(
        absent(&s, "c", "d", &["short", "default"]).await,
        [true, false],
        "short TTL expired, default kept"
    );
    // An expired entity can be added again.
    assert_eq!(add_if_absent(&s, "c", "d", &["short"], 0).await, [true]);
    assert_eq!(absent(&s, "c", "d", &["short"]).await, [false]);
}

pub async fn expiry_never_moves_backwards(b: &TestBackend) {
    let s = TestServer::start(b).await;
    // k = 1, one shard of one bit: every entity shares bit 0.
    s.admin()
        .create_deduper(create_geom("c", "tiny", 1, 1, 1, 60))
        .await
        .unwrap();
    add(&s, "c", "tiny", &["long-lived"], 30_000).await;
    add(&s, "c", "tiny", &["short-lived"], 200).await;
    assert_eq!(
        add_if_absent(&s, "c", "tiny", &["another"], 100).await,
        [false],
        "bit 0 is set"
    );
    // Same entity, shorter TTL second.
    s.admin()
        .create_deduper(create_np("c", "d", 10_000, 0.001, 60))
        .await
        .unwrap();
    add(&s, "c", "d", &["e"], 30_000).await;
    add(&s, "c", "d", &["e"], 200).await;
    add_if_absent(&s, "c", "d", &["e"], 100).await;
    tokio::time::sleep(Duration::from_millis(200) + ROUNDING).await;
    assert_eq!(
        absent(&s, "c", "tiny", &["long-lived"]).await,
        [false],
        "a short add must not shorten a longer one"
    );
    assert_eq!(absent(&s, "c", "d", &["e"]).await, [false]);
}
