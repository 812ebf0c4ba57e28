//! DeduperService: Add, CheckAbsence, AddIfAbsent and their errors.

use solus::api::pb;
use tonic::Code;

use crate::common::*;

pub async fn data_add_check_add_if_absent(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 10_000, 0.001, 3600))
        .await
        .unwrap();

    assert_eq!(absent(&s, "c", "d", &["a", "b", "c"]).await, [true, true, true]);
    assert_eq!(add(&s, "c", "d", &["a", "b"], 0).await, 2);
    assert_eq!(
        absent(&s, "c", "d", &["c", "a", "zz", "b"]).await,
        [true, false, true, false],
        "request order kept"
    );

    // AddIfAbsent: the answer from before the call, with earlier entities of
    // the same request visible to later ones.
    assert_eq!(
        add_if_absent(&s, "c", "d", &["x", "a", "x", "y", "y"], 0).await,
        [true, false, false, true, false]
    );
    assert_eq!(absent(&s, "c", "d", &["x", "y"]).await, [false, false]);
    assert_eq!(
        add_if_absent(&s, "c", "d", &["x", "y", "w"], 60_000).await,
        [false, false, true]
    );

    // Empty requests are no-ops.
    assert_eq!(add(&s, "c", "d", &[], 0).await, 0);
    assert!(absent(&s, "c", "d", &[]).await.is_empty());

    // Dedupers are isolated: same entity, other deduper or other client.
    s.admin()
        .create_deduper(create_np("c", "other", 10_000, 0.001, 3600))
        .await
        .unwrap();
    s.admin()
        .create_deduper(create_np("c2", "d", 10_000, 0.001, 3600))
        .await
        .unwrap();
    assert_eq!(absent(&s, "c", "other", &["a"]).await, [true]);
    assert_eq!(absent(&s, "c2", "d", &["a"]).await, [true]);

    // Binary entities are opaque bytes.
    let bin = pb::AddRequest {
        request_id: None,
        client_id: "c".into(),
        deduper: "d".into(),
        entities: ents(&[[0u8, 255, 0]]),
        ttl_ms: 0,
    };
    s.data().add(bin).await.unwrap();
    let check = |e: &[u8]| pb::CheckAbsenceRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "d".into(),
        entities: ents(&[e]),
    };
    assert_eq!(
        s.data()
            .check_absence(check(&[0, 255, 0]))
            .await
            .unwrap()
            .into_inner()
            .absent,
        [false]
    );
    assert_eq!(
        s.data()
            .check_absence(check(&[0, 255]))
            .await
            .unwrap()
            .into_inner()
            .absent,
        [true]
    );
}

pub async fn data_errors(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 1000, 0.01, 60))
        .await
        .unwrap();
    let mut data = s.data();
    let req = |client: &str, deduper: &str, entities: Vec<prost::bytes::Bytes>, ttl_ms| pb::AddRequest {
        request_id: None,
        client_id: client.into(),
        deduper: deduper.into(),
        entities,
        ttl_ms,
    };
    let status = |r: Result<tonic::Response<pb::AddResponse>, tonic::Status>| {
        let s = r.expect_err("expected an error");
        (s.code(), s.message().to_string())
    };

    let (c, m) = status(data.add(req("c", "missing", ents(&["a"]), 0)).await);
    assert_eq!(c, Code::NotFound, "{m}");
    let (c, m) = status(data.add(req("c", "d", ents(&["a", ""]), 0)).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("entity #1 is empty"), "{m}");
    let (c, m) = status(data.add(req("c", "d", ents(&["x".repeat(4097)]), 0)).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("4096"), "{m}");
    let many: Vec<String> = (0..10_001).map(|i| i.to_string()).collect();
    let (c, m) = status(data.add(req("c", "d", ents(&many), 0)).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("10000"), "{m}");
    let (c, m) = status(data.add(req("c", "d", ents(&["a"]), 60_001)).await);
    assert_eq!(c, Code::InvalidArgument);
    assert!(m.contains("60000"), "{m}");
    let (c, _) = status(data.add(req("", "d", ents(&["a"]), 0)).await);
    assert_eq!(c, Code::InvalidArgument);
    let (c, _) = status(data.add(req("c", "d e", ents(&["a"]), 0)).await);
    assert_eq!(c, Code::InvalidArgument);

    // Exactly at the limits is fine.
    let at_limit: Vec<String> = (0..10_000).map(|i| format!("{i:04}")).collect();
    assert_eq!(
        data.add(req("c", "d", ents(&at_limit), 60_000))
            .await
            .unwrap()
            .into_inner()
            .added,
        10_000
    );
    assert_eq!(
        data.add(req("c", "d", ents(&["x".repeat(4096)]), 0))
            .await
            .unwrap()
            .into_inner()
            .added,
        1
    );

    // Inactive dedupers refuse data calls, and come back when reactivated.
    let mut admin = s.admin();
    let set_active = |active| pb::UpdateDeduperRequest {
        client_id: "c".into(),
        name: "d".into(),
        active: Some(active),
        expiry_seconds: None,
        expected_insertions: None,
        false_positive_rate: None,
    };
    admin.update_deduper(set_active(false)).await.unwrap();
    let (c, m) = status(data.add(req("c", "d", ents(&["a"]), 0)).await);
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    let check = pb::CheckAbsenceRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "d".into(),
        entities: ents(&["0001"]),
    };
    assert_eq!(
        data.check_absence(check.clone()).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    let aia = pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        request_id: None,
        client_id: "c".into(),
        deduper: "d".into(),
        entities: ents(&["a"]),
        ttl_ms: 0,
    };
    assert_eq!(
        data.add_if_absent(aia).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    admin.update_deduper(set_active(true)).await.unwrap();
    assert_eq!(
        data.check_absence(check).await.unwrap().into_inner().absent,
        [false],
        "data kept while inactive"
    );
}

/// Concurrent AddIfAbsent calls for the same entity: exactly one sees it absent.
pub async fn concurrent_add_if_absent_is_atomic(b: &TestBackend) {
    if !b.atomic_add_if_absent {
        return;
    }
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 100_000, 0.001, 3600))
        .await
        .unwrap();
    for round in 0..20 {
        let entity = format!("event-{round}");
        let mut tasks = Vec::new();
        for i in 0..16 {
            let mut data = s.data();
            // Every request carries other entities too, so requests overlap on many shards.
            let mut items = vec![entity.clone()];
            items.extend((0..50).map(|j| format!("noise-{round}-{i}-{j}")));
            tasks.push(tokio::spawn(async move {
                let req = pb::AddIfAbsentRequest {
                    record_ids: Vec::new(),
                    request_id: None,
                    client_id: "c".into(),
                    deduper: "d".into(),
                    entities: ents(&items),
                    ttl_ms: 0,
                };
                data.add_if_absent(req).await.unwrap().into_inner().absent[0]
            }));
        }
        let mut winners = 0;
        for t in tasks {
            winners += usize::from(t.await.unwrap());
        }
        assert_eq!(winners, 1, "round {round}: {winners} callers saw {entity} as absent");
    }
}
