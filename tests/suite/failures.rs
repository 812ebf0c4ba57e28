//! Failure semantics on every backend: concurrent admin updates never lose
//! one, and a retry with the same `request_id` answers what the first
//! attempt answered.

use solus::api::pb;
use tonic::Code;

use crate::common::*;

fn update(name: &str, active: Option<bool>, expiry_seconds: Option<u64>) -> pb::UpdateDeduperRequest {
    pb::UpdateDeduperRequest {
        client_id: "c".into(),
        name: name.into(),
        active,
        expiry_seconds,
        expected_insertions: None,
        false_positive_rate: None,
    }
}

/// Issue 9, reproduction 2: two concurrent updates (one switches the deduper
/// off, the other changes its expiry) both answer OK; the stored config must
/// then hold both changes, every time.
pub async fn concurrent_updates_lose_no_change(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "u1", 1000, 0.01, 100))
        .await
        .unwrap();
    for round in 0..30u64 {
        s.admin()
            .update_deduper(update("u1", Some(true), Some(100)))
            .await
            .unwrap();
        let (mut a, mut e) = (s.admin(), s.admin());
        let expiry = 200 + round;
        let (off, exp) = tokio::join!(
            a.update_deduper(update("u1", Some(false), None)),
            e.update_deduper(update("u1", None, Some(expiry)))
        );
        assert!(!off.unwrap().into_inner().active, "the caller sees its own change");
        assert_eq!(exp.unwrap().into_inner().expiry_seconds, expiry);
        let got = s
            .admin()
            .get_deduper(pb::GetDeduperRequest {
                client_id: "c".into(),
                name: "u1".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !got.active && got.expiry_seconds == expiry,
            "round {round}: both acknowledged changes are stored, got active={} expiry={}",
            got.active,
            got.expiry_seconds
        );
    }
}

fn aia(items: &[String], id: Option<&[u8]>) -> pb::AddIfAbsentRequest {
    pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "r".into(),
        entities: ents(items),
        ttl_ms: 0,
        request_id: id.map(prost::bytes::Bytes::copy_from_slice),
    }
}

/// A repeat of `(client_id, deduper, request_id)` answers exactly what the
/// first attempt answered; a repeat with other entities is INVALID_ARGUMENT;
/// requests without a request_id behave as before.
pub async fn request_id_repeats_get_the_first_answer(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "r", 100_000, 0.001, 600))
        .await
        .unwrap();
    let mut data = s.data();
    let items: Vec<String> = (0..200).map(|i| format!("rid-{i}")).collect();
    let first = data
        .add_if_absent(aia(&items, Some(b"batch-1")))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert!(first.iter().all(|&a| a));
    let repeat = data
        .add_if_absent(aia(&items, Some(b"batch-1")))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert_eq!(repeat, first, "a repeat answers as the first attempt did");
    let plain = data.add_if_absent(aia(&items, None)).await.unwrap().into_inner().absent;
    assert!(plain.iter().all(|&a| !a), "without a request_id: present now");
    let other = data
        .add_if_absent(aia(&items[..3], Some(b"batch-1")))
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::InvalidArgument, "{}", other.message());
    assert!(other.message().contains("request_id"), "{}", other.message());
    // The same id on another deduper or client is another request.
    s.admin()
        .create_deduper(create_np("c", "r2", 1000, 0.01, 600))
        .await
        .unwrap();
    let mut elsewhere = aia(&items[..2], Some(b"batch-1"));
    elsewhere.deduper = "r2".into();
    assert_eq!(
        data.add_if_absent(elsewhere).await.unwrap().into_inner().absent,
        [true, true]
    );
    // Add: the repeat answers the first count and needs the same entities.
    let add = |items: &[String]| pb::AddRequest {
        client_id: "c".into(),
        deduper: "r".into(),
        entities: ents(items),
        ttl_ms: 0,
        request_id: Some(prost::bytes::Bytes::from_static(b"add-1")),
    };
    let more: Vec<String> = (0..5).map(|i| format!("more-{i}")).collect();
    assert_eq!(data.add(add(&more)).await.unwrap().into_inner().added, 5);
    assert_eq!(data.add(add(&more)).await.unwrap().into_inner().added, 5);
    assert_eq!(
        data.add(add(&more[..1])).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let long = pb::AddRequest {
        request_id: Some(vec![1u8; 129].into()),
        ..add(&more)
    };
    assert_eq!(data.add(long).await.unwrap_err().code(), Code::InvalidArgument);
}

/// Issue 21, class 5, as found: `request_id` is `optional bytes`, and a JSON
/// gateway or a client may set it to "": the old code took "" as one id
/// shared by every caller, so unrelated writes got INVALID_ARGUMENT (and an
/// AddIfAbsent a stale answer) for the whole window. "" is no request_id.
pub async fn an_empty_request_id_is_no_request_id(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "r", 100_000, 0.001, 600))
        .await
        .unwrap();
    let mut data = s.data();
    let empty: Option<&[u8]> = Some(b"");
    let add = |items: &[&str]| pb::AddRequest {
        client_id: "c".into(),
        deduper: "r".into(),
        entities: ents(items),
        ttl_ms: 0,
        request_id: empty.map(prost::bytes::Bytes::copy_from_slice),
    };
    assert_eq!(data.add(add(&["a"])).await.unwrap().into_inner().added, 1);
    let unrelated = data.add(add(&["b", "c"])).await;
    assert_eq!(
        unrelated
            .map(|r| r.into_inner().added)
            .map_err(|e| e.message().to_string()),
        Ok(2),
        "an unrelated Add with request_id \"\""
    );
    let first = data
        .add_if_absent(aia(&["x".into()], empty))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert_eq!(first, [true]);
    let again = data
        .add_if_absent(aia(&["x".into()], empty))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert_eq!(again, [false], "not a repeat of the first: x is present now");
    let other = data.add_if_absent(aia(&["y".into(), "a".into()], empty)).await;
    assert_eq!(
        other
            .map(|r| r.into_inner().absent)
            .map_err(|e| e.message().to_string()),
        Ok(vec![true, false])
    );
}

/// A retry with the same request_id that comes after the first attempt's
/// expiry passed (TTL 1.2 s, retried once the entity reads absent) is
/// acknowledged with its own TTL ahead of it: the entity reads present.
/// Found in review: the retry wrote the first attempt's expiry again, already
/// in the past, so an acknowledged Add was absent at once.
pub async fn a_retry_after_the_first_attempts_expiry_is_remembered_for_its_ttl(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_np("c", "r", 1000, 0.01, 600))
        .await
        .unwrap();
    let add = |kind: &str| {
        let id = format!("late-{kind}");
        (
            pb::AddRequest {
                client_id: "c".into(),
                deduper: "r".into(),
                entities: ents(&[format!("e-{kind}")]),
                ttl_ms: 1200,
                request_id: Some(prost::bytes::Bytes::from(id.clone().into_bytes())),
            },
            pb::AddIfAbsentRequest {
                record_ids: Vec::new(),
                client_id: "c".into(),
                deduper: "r".into(),
                entities: ents(&[format!("e-{kind}")]),
                ttl_ms: 1200,
                request_id: Some(prost::bytes::Bytes::from(id.into_bytes())),
            },
        )
    };
    let mut data = s.data();
    let (plain, _) = add("add");
    let (_, guarded) = add("aia");
    data.add(plain.clone()).await.unwrap();
    assert_eq!(
        data.add_if_absent(guarded.clone()).await.unwrap().into_inner().absent,
        [true]
    );
    let started = std::time::Instant::now();
    while absent(&s, "c", "r", &["e-add", "e-aia"]).await != [true, true] {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "never expired");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    data.add(plain).await.unwrap();
    let again = data.add_if_absent(guarded).await.unwrap().into_inner().absent;
    assert_eq!(again, [true], "the retry answers as the first attempt did");
    assert_eq!(
        absent(&s, "c", "r", &["e-add", "e-aia"]).await,
        [false, false],
        "acknowledged again, remembered for the retry's TTL"
    );
}
