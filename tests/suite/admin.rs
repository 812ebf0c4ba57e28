//! DeduperAdminService: create, get, list, update and their errors.

use solus::api::pb::{self, Level};
use tonic::Code;

use crate::common::*;

fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    let s = r.expect_err("expected an error status");
    (s.code(), s.message().to_string())
}

pub async fn admin_create_get_list_update(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut admin = s.admin();
    let d = admin
        .create_deduper(create_np("client-a", "orders", 1_000_000, 0.01, 3600))
        .await
        .unwrap()
        .into_inner();
    // n = 1e6, p = 0.01: the contract's classic sizing (10 shards of 958,506
    // bits, k = 7) has an expected rate of 1.004% (k rounded up from 6.64);
    // the corrected sizing adds 0.1%: k 7, 10 shards of 959,442 bits.
    assert_eq!((d.hash_functions, d.shards, d.bits_per_shard), (7, 10, 959_442));
    assert_eq!(
        (d.expiry_seconds, d.active, d.level),
        (3600, true, Level::Global as i32)
    );
    assert_eq!(
        (d.expected_insertions, d.false_positive_rate),
        (Some(1_000_000), Some(0.01))
    );
    assert!(d.create_time_ms > 1_700_000_000_000 && d.create_time_ms == d.update_time_ms);

    let mut dc = create_geom("client-a", "clicks", 3, 4, 1000, 60);
    dc.level = Level::Dc as i32;
    let c = admin.create_deduper(dc).await.unwrap().into_inner();
    assert_eq!(
        (c.hash_functions, c.shards, c.bits_per_shard, c.level),
        (3, 4, 1000, Level::Dc as i32)
    );
    assert_eq!((c.expected_insertions, c.false_positive_rate), (None, None));
    admin
        .create_deduper(create_geom("client-b", "orders", 1, 1, 10, 60))
        .await
        .unwrap();

    let got = admin
        .get_deduper(pb::GetDeduperRequest {
            client_id: "client-a".into(),
            name: "orders".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, d);

    let list = |active_only| pb::ListDedupersRequest {
        client_id: "client-a".into(),
        active_only,
    };
    let names: Vec<String> = admin
        .list_dedupers(list(false))
        .await
        .unwrap()
        .into_inner()
        .dedupers
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["clicks", "orders"], "sorted by name, only client-a's");

    let updated = admin
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "client-a".into(),
            name: "clicks".into(),
            active: Some(false),
            expiry_seconds: Some(120),
            expected_insertions: None,
            false_positive_rate: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((updated.active, updated.expiry_seconds), (false, 120));
    assert_eq!(
        (updated.hash_functions, updated.shards, updated.bits_per_shard),
        (3, 4, 1000),
        "geometry is fixed"
    );
    assert!(updated.update_time_ms >= updated.create_time_ms);
    let active: Vec<String> = admin
        .list_dedupers(list(true))
        .await
        .unwrap()
        .into_inner()
        .dedupers
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(active, ["orders"]);

    // Only expiry changes; active stays as it was.
    let only_expiry = admin
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "client-a".into(),
            name: "clicks".into(),
            active: None,
            expiry_seconds: Some(30),
            expected_insertions: None,
            false_positive_rate: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((only_expiry.active, only_expiry.expiry_seconds), (false, 30));
}

pub async fn admin_errors(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut admin = s.admin();
    admin.create_deduper(create_np("c", "d", 1000, 0.01, 60)).await.unwrap();

    let (c, m) = code(admin.create_deduper(create_np("c", "d", 1000, 0.01, 60)).await);
    assert_eq!(c, Code::AlreadyExists, "{m}");

    let (c, m) = code(
        admin
            .get_deduper(pb::GetDeduperRequest {
                client_id: "c".into(),
                name: "nope".into(),
            })
            .await,
    );
    assert_eq!(c, Code::NotFound, "{m}");
    assert!(m.contains("nope"), "{m}");
    let upd = pb::UpdateDeduperRequest {
        client_id: "c".into(),
        name: "nope".into(),
        active: Some(true),
        ..Default::default()
    };
    assert_eq!(code(admin.update_deduper(upd).await).0, Code::NotFound);

    let invalid = [
        ("empty client", create_np("", "x", 10, 0.1, 60), "client_id"),
        ("empty name", create_np("c", "", 10, 0.1, 60), "name"),
        ("separator in name", create_np("c", "a|b", 10, 0.1, 60), "name"),
        ("p = 0", create_np("c", "x", 10, 0.0, 60), "false_positive_rate"),
        ("p = 1", create_np("c", "x", 10, 1.0, 60), "false_positive_rate"),
        ("n = 0", create_np("c", "x", 0, 0.1, 60), "expected_insertions"),
        ("zero expiry", create_np("c", "x", 10, 0.1, 0), "expiry_seconds"),
        ("no sizing", create_geom("c", "x", 0, 0, 0, 60), "either"),
        ("k = 0", create_geom("c", "x", 0, 1, 10, 60), "hash_functions"),
        ("k = 65", create_geom("c", "x", 65, 1, 10, 60), "hash_functions"),
        ("zero shards", create_geom("c", "x", 3, 0, 10, 60), "shards"),
        ("too many shards", create_geom("c", "x", 3, 65_537, 10, 60), "shards"),
        ("zero bits", create_geom("c", "x", 3, 1, 0, 60), "bits_per_shard"),
        (
            "bits above 2^31-1",
            create_geom("c", "x", 3, 1, 1 << 31, 60),
            "bits_per_shard",
        ),
        (
            "bits above 2^30 (biased positions)",
            create_geom("c", "x", 3, 1, (1 << 30) + 1, 60),
            "limits.allow_biased_bits_per_shard",
        ),
        ("absurd n", create_np("c", "x", u64::MAX, 0.001, 60), "shards"),
    ];
    for (what, req, mentions) in invalid {
        let (c, m) = code(admin.create_deduper(req).await);
        assert_eq!(c, Code::InvalidArgument, "{what}: {m}");
        assert!(m.contains(mentions), "{what}: message {m:?} should mention {mentions}");
    }
    let mut both = create_np("c", "x", 10, 0.1, 60);
    both.hash_functions = 3;
    assert_eq!(code(admin.create_deduper(both).await).0, Code::InvalidArgument);
    let mut level = create_np("c", "x", 10, 0.1, 60);
    level.level = 7;
    let (c, m) = code(admin.create_deduper(level).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("LEVEL_GLOBAL"), "{m}");
    // Nothing invalid was stored.
    let list = admin
        .list_dedupers(pb::ListDedupersRequest {
            client_id: "c".into(),
            active_only: false,
        })
        .await
        .unwrap();
    assert_eq!(list.into_inner().dedupers.len(), 1);

    let bad_update = pb::UpdateDeduperRequest {
        client_id: "c".into(),
        name: "d".into(),
        active: None,
        expiry_seconds: Some(0),
        expected_insertions: None,
        false_positive_rate: None,
    };
    assert_eq!(code(admin.update_deduper(bad_update).await).0, Code::InvalidArgument);
    let bad_list = pb::ListDedupersRequest {
        client_id: "".into(),
        active_only: false,
    };
    assert_eq!(code(admin.list_dedupers(bad_list).await).0, Code::InvalidArgument);
}
