//! Standard gRPC health and reflection, as Kubernetes probes and grpcurl use them.

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::common::*;

pub async fn health_and_reflection(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut health = HealthClient::new(s.channel.clone());
    for service in ["", "solus.v1.DeduperService"] {
        let mut status = ServingStatus::Unknown as i32;
        for _ in 0..50 {
            match health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
            {
                Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => {
                    status = r.get_ref().status;
                    break;
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        assert_eq!(status, ServingStatus::Serving as i32, "health of {service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);

    let mut reflection = ServerReflectionClient::new(s.channel.clone());
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let response = stream.message().await.unwrap().expect("one response");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer {response:?}")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "solus.v1.DeduperService",
        "solus.v1.DeduperAdminService",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
    // The data service's schema resolves too (grpcurl describe).
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol("solus.v1.DeduperService".into())),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let response = stream.message().await.unwrap().expect("one response");
    assert!(
        matches!(
            response.message_response,
            Some(MessageResponse::FileDescriptorResponse(_))
        ),
        "{response:?}"
    );
}
