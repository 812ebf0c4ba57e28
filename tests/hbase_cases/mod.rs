//! HBase-only integration tests (see `tests/hbase.rs`), and what they share:
//! an independent Thrift client on the emulator and health polling.

mod calls;
mod faults;
mod ttl;

use std::time::{Duration, Instant};

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::common::TestServer;
pub use crate::common::connect_raw as raw_client;

/// Health of `solus.v1.DeduperService` right now (`Unknown` if unanswered).
pub async fn data_health(s: &TestServer) -> ServingStatus {
    let mut health = HealthClient::new(s.channel.clone());
    let req = HealthCheckRequest {
        service: "solus.v1.DeduperService".into(),
    };
    match health.check(req).await {
        Ok(r) => ServingStatus::try_from(r.get_ref().status).unwrap_or(ServingStatus::Unknown),
        Err(_) => ServingStatus::Unknown,
    }
}

/// Waits until the data service reports `want`; panics after `within`.
pub async fn wait_health(s: &TestServer, want: ServingStatus, within: Duration) {
    let start = Instant::now();
    loop {
        let got = data_health(s).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < within,
            "health still {got:?} after {within:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
