//! Issue 21, class 2: per-deduper health follows the deduper's state, and a
//! `Watch` of a service not known (yet) streams `SERVICE_UNKNOWN` and stays
//! open, as the gRPC health protocol says.

use std::time::Duration;

use solus::api::pb;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::common::*;

async fn next_status(watch: &mut tonic::Streaming<HealthCheckResponse>, within: Duration) -> ServingStatus {
    let message = tokio::time::timeout(within, watch.message())
        .await
        .unwrap_or_else(|_| panic!("no health change within {within:?}"))
        .expect("watch stream failed")
        .expect("watch stream ended");
    ServingStatus::try_from(message.status).expect("a known status")
}

/// As found: a replica whose `storage.table` differs refuses a deduper and
/// reports `solus.v1.DeduperService/c/d` as `NOT_SERVING`; the deduper is
/// deleted (by the replica that owns it) and re-created where this replica
/// keeps its bits. The old code kept `NOT_SERVING` until a restart, and
/// answered the watch opened before the refusal with `NOT_FOUND`.
pub async fn misplaced_deduper_health_follows_the_deduper(first: &TestBackend) {
    let b = first.fresh();
    let owner = TestServer::start(&b).await;
    owner
        .admin()
        .create_deduper(create_geom("c", "d", 2, 1, 100, 1))
        .await
        .unwrap();
    add(&owner, "c", "d", &["x"], 0).await;
    let mut settings = b.settings.clone();
    settings.storage.table = "other_table".into();
    let replica = TestServer::start_with(settings).await;

    let service = solus::server::misplaced_health_service("c", "d");
    let mut health = HealthClient::new(replica.channel.clone());
    let mut watch = health
        .watch(HealthCheckRequest {
            service: service.clone(),
        })
        .await
        .expect("Watch of a service not known yet is answered, not refused")
        .into_inner();
    let within = Duration::from_secs(10);
    assert_eq!(next_status(&mut watch, within).await, ServingStatus::ServiceUnknown);
    let refused = replica
        .data()
        .check_absence(pb::CheckAbsenceRequest {
            client_id: "c".into(),
            deduper: "d".into(),
            entities: ents(&["x"]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{}", refused.message());
    assert_eq!(next_status(&mut watch, within).await, ServingStatus::NotServing);

    owner
        .admin()
        .delete_deduper(pb::DeleteDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
            force: true,
        })
        .await
        .unwrap();
    assert_eq!(
        next_status(&mut watch, within).await,
        ServingStatus::ServiceUnknown,
        "deleted: the per-deduper status goes away"
    );
    let check = health
        .check(HealthCheckRequest {
            service: service.clone(),
        })
        .await;
    assert_eq!(check.unwrap_err().code(), Code::NotFound);

    // Re-created where the replica keeps its bits, once HBase's delete
    // markers for the name have expired (expiry 1 s + 60 s slack).
    tokio::time::sleep(Duration::from_millis(62_000)).await;
    replica
        .admin()
        .create_deduper(create_geom("c", "d", 2, 1, 100, 60))
        .await
        .unwrap();
    assert_eq!(add_if_absent(&replica, "c", "d", &["x"], 0).await, [true]);
    let check = health.check(HealthCheckRequest { service }).await;
    assert_eq!(
        check.unwrap_err().code(),
        Code::NotFound,
        "served: no per-deduper status"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(1), watch.message())
            .await
            .is_err(),
        "the watch stays open with nothing new to say"
    );
}
