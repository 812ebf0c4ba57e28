//! Issue 21, class 1: a delete removes every bit the deduper ever wrote,
//! under any expiry it ever had, and only where its config says its bits are.

use std::time::Duration;

use solus::api::pb;
use solus::clock::now_ms;
use solus::contract::layout;
use tonic::Code;

use super::row;
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

fn delete(name: &str, force: bool) -> pb::DeleteDeduperRequest {
    pb::DeleteDeduperRequest {
        client_id: "c".into(),
        name: name.into(),
        force,
    }
}

/// As found: expiry 3,600 s, add `x`, lower the expiry to 1 s, deactivate,
/// delete, wait out the tombstone the old code wrote (1 s + 60 s slack),
/// create the same name: the old code let it and answered `present x`. Now
/// the bits are gone to an independent client at once, the tombstone runs
/// to the longest expiry the deduper had, and the create is refused until then.
pub async fn a_delete_covers_bits_written_under_a_longer_expiry(first: &TestBackend) {
    let b = first.fresh();
    let s = TestServer::start(&b).await;
    let mut admin = s.admin();
    admin
        .create_deduper(create_geom("c", "d", 3, 1, 1000, 3600))
        .await
        .unwrap();
    assert_eq!(add(&s, "c", "d", &["x"], 0).await, 1);
    admin.update_deduper(update("d", None, Some(1))).await.unwrap();
    admin.update_deduper(update("d", Some(false), None)).await.unwrap();
    let deleted_at = now_ms();
    admin.delete_deduper(delete("d", false)).await.unwrap();

    let mut raw = b.raw_thrift();
    let table = b.settings.storage.table.clone();
    let bits = row(&mut raw, &table, &layout::data_row_key(0, "c", "d"));
    assert!(bits.is_empty(), "bit cells left visible after the delete: {bits:?}");
    let meta = row(&mut raw, "c_dedupers", &layout::meta_row_key("c", "d"));
    let until = meta
        .get(b"C:gone".as_slice())
        .and_then(|c| layout::decode_expire_ms(c.value.as_deref()?))
        .expect("tombstone cell C:gone");
    assert!(
        until >= deleted_at + 3_600_000 + 60_000,
        "tombstone until {until} is below the 3,600 s expiry the bits were written under (delete at {deleted_at})"
    );

    tokio::time::sleep(Duration::from_millis(62_000)).await;
    match admin.create_deduper(create_geom("c", "d", 3, 1, 1000, 3600)).await {
        Ok(_) => {
            let answer = absent(&s, "c", "d", &["x"]).await;
            panic!("re-created 62 s after the delete; absent(x) = {answer:?} (the deleted deduper's bit answers)");
        }
        Err(e) => {
            assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
            assert!(
                e.message().contains("longest expiry_seconds") && e.message().contains("another name"),
                "{}",
                e.message()
            );
        }
    }
}

/// A replica whose `storage.table` differs from the deduper's recorded data
/// table refuses its data calls, and now its delete too, with the same
/// message; the config and the bits stay for the replica that owns them.
pub async fn a_replica_with_another_table_refuses_to_delete_the_deduper(first: &TestBackend) {
    let mut b = first.fresh();
    let owner_table = b.settings.storage.table.clone();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 1000, 0.01, 600))
        .await
        .unwrap();
    add(&s, "c", "d", &["seen"], 0).await;
    s.stop().await;

    b.settings.storage.table = "other_table".into();
    let s = TestServer::start(&b).await;
    let data = s
        .data()
        .check_absence(pb::CheckAbsenceRequest {
            client_id: "c".into(),
            deduper: "d".into(),
            entities: ents(&["seen"]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    let refused = s.admin().delete_deduper(delete("d", true)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{}", refused.message());
    assert_eq!(refused.message(), data.message(), "the same refusal as the data calls");
    assert!(refused.message().contains("storage.table"), "{}", refused.message());
    s.stop().await;

    b.settings.storage.table = owner_table;
    let s = TestServer::start(&b).await;
    let kept = s
        .admin()
        .get_deduper(pb::GetDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(kept.active, "left as it was, not even deactivated");
    assert_eq!(
        absent(&s, "c", "d", &["seen"]).await,
        [false],
        "its bits are still there"
    );
}
