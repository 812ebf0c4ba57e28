//! Issue 9, reproduction 4: every expiry the API accepts holds. The
//! embedded store keeps expiry stamps as u32 seconds (until
//! 2106-02-07T06:28:15Z): an expiry past that is refused with
//! INVALID_ARGUMENT naming the limit, at CreateDeduper, UpdateDeduper and
//! Add time; HBase keeps i64 ms and stores it. Both checked with a shifted
//! clock, in one test (the shift is process-wide).

mod common;

use common::*;
use solus::api::pb;
use tonic::Code;

const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
/// 2100-01-01T00:00:00Z and 2107-01-01T00:00:00Z, ms.
const Y2100_MS: i64 = 4_102_444_800_000;
const Y2107_MS: i64 = 4_323_283_200_000;

fn real_now() -> i64 {
    solus::clock::shift_ms(0);
    solus::clock::now_ms()
}

async fn check(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut admin = s.admin();
    // Created today with a 50-year expiry: fine on every backend.
    admin
        .create_deduper(create_np("c", "long", 1000, 0.01, 50 * 365 * 24 * 3600))
        .await
        .unwrap();
    solus::clock::shift_ms(Y2100_MS - real_now());
    // In 2100, the default TTL of 50 years ends in 2150.
    let add = pb::AddRequest {
        client_id: "c".into(),
        deduper: "long".into(),
        entities: ents(&["century"]),
        ttl_ms: 0,
        request_id: None,
    };
    let added = s.data().add(add).await;
    let created = admin
        .create_deduper(create_np("c", "late", 1000, 0.01, 10 * 365 * 24 * 3600))
        .await;
    let updated = admin
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "c".into(),
            name: "long".into(),
            active: None,
            expiry_seconds: Some(20 * 365 * 24 * 3600),
            expected_insertions: None,
            false_positive_rate: None,
        })
        .await;
    if b.name == "embedded" {
        for (what, r) in [
            ("Add", added.map(drop)),
            ("Create", created.map(drop)),
            ("Update", updated.map(drop)),
        ] {
            let e = r.expect_err(what);
            assert_eq!(e.code(), Code::InvalidArgument, "{what}: {}", e.message());
            assert!(e.message().contains("2106-02-07T06:28:15Z"), "{what}: {}", e.message());
        }
        // Within the limit, accepted and kept.
        let short = pb::AddRequest {
            client_id: "c".into(),
            deduper: "long".into(),
            entities: ents(&["century"]),
            ttl_ms: 5 * YEAR_MS as u64,
            request_id: None,
        };
        s.data().add(short).await.unwrap();
        solus::clock::shift_ms(Y2100_MS + 4 * YEAR_MS - real_now());
        assert_eq!(absent(&s, "c", "long", &["century"]).await, [false]);
    } else {
        added.unwrap();
        created.unwrap();
        updated.unwrap();
        solus::clock::shift_ms(Y2107_MS - real_now());
        assert_eq!(
            absent(&s, "c", "long", &["century"]).await,
            [false],
            "a 50-year TTL written in 2100 holds in 2107"
        );
    }
    solus::clock::shift_ms(0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_expiries_hold_past_2106() {
    check(&TestBackend::embedded()).await;
    check(&TestBackend::hbase()).await;
}
