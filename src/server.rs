//! Wiring: opens the store, builds the engine, serves the Solus services plus
//! the standard gRPC health and reflection services, and shuts down cleanly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::api::pb::deduper_admin_service_server::DeduperAdminServiceServer;
use crate::api::pb::deduper_service_server::DeduperServiceServer;
use crate::api::{AdminService, DataService, pb};
use crate::config::{Backend, Settings};
use crate::engine::Engine;
use crate::storage::Store;
use crate::storage::embedded::EmbeddedStore;
use crate::storage::hbase::HbaseStore;

/// Health service name of the data path: SERVING while storage is reachable.
pub const DATA_SERVICE_NAME: &str = "solus.v1.DeduperService";

/// Opens the configured storage backend (blocking: may replay a journal).
pub fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match settings.storage.backend {
        Backend::Embedded => {
            let path = &settings.storage.embedded.path;
            let store = EmbeddedStore::open(settings.storage.embedded.clone())
                .with_context(|| format!("opening the embedded store at {}", path.display()))?;
            Ok(Arc::new(store))
        }
        Backend::Hbase => {
            let store = HbaseStore::open(settings.storage.hbase.clone(), &settings.storage.table, &settings.farm)
                .context("opening the HBase store")?;
            Ok(Arc::new(store))
        }
    }
}

/// A one-line description of the store for the start-up log.
pub fn describe_store(settings: &Settings) -> String {
    match settings.storage.backend {
        Backend::Embedded => format!(
            "embedded store at {} (fsync per write: {})",
            settings.storage.embedded.path.display(),
            settings.storage.embedded.fsync
        ),
        Backend::Hbase => {
            let h = &settings.storage.hbase;
            format!(
                "HBase Thrift at {} ({:?}/{:?}), tables {} and {}_{}",
                h.addresses.join(","),
                h.transport,
                h.protocol,
                settings.storage.table,
                settings.storage.table,
                settings.farm
            )
        }
    }
}

async fn watch_storage(store: Arc<dyn Store>, reporter: HealthReporter, every: Duration) {
    let mut last = None;
    loop {
        let s = store.clone();
        let ok = tokio::task::spawn_blocking(move || s.ping())
            .await
            .map(|r| r.map_err(|e| e.to_string()));
        let status = match ok {
            Ok(Ok(())) => ServingStatus::Serving,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "storage unreachable");
                ServingStatus::NotServing
            }
            Err(e) => {
                tracing::warn!(error = %e, "storage probe failed");
                ServingStatus::NotServing
            }
        };
        if last != Some(status) {
            tracing::info!(service = DATA_SERVICE_NAME, ?status, "health changed");
            reporter.set_service_status(DATA_SERVICE_NAME, status).await;
            last = Some(status);
        }
        tokio::time::sleep(every).await;
    }
}

/// Serves on `listener` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish, flushes storage and returns.
pub async fn serve(
    settings: Settings,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let opened = settings.clone();
    let store = tokio::task::spawn_blocking(move || open_store(&opened)).await??;
    let engine = Arc::new(Engine::new(store.clone(), settings.limits.engine_limits()));

    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::Serving).await;
    let watcher = tokio::spawn(watch_storage(
        store.clone(),
        reporter.clone(),
        Duration::from_millis(settings.server.health_check_interval_ms.max(100)),
    ));

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let max = settings.limits.max_message_bytes;
    let timeout = Duration::from_millis(settings.server.request_timeout_ms.max(1));
    let data = DeduperServiceServer::new(DataService::new(engine.clone(), timeout)).max_decoding_message_size(max);
    let admin =
        DeduperAdminServiceServer::new(AdminService::new(engine.clone(), timeout)).max_decoding_message_size(max);

    let addr = listener.local_addr()?;
    tracing::info!(%addr, store = %describe_store(&settings), "solus listening");
    let drain_reporter = reporter.clone();
    let result = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(data)
        .add_service(admin)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
            shutdown.await;
            tracing::info!("shutting down: refusing new requests, finishing in-flight ones");
            drain_reporter
                .set_service_status(DATA_SERVICE_NAME, ServingStatus::NotServing)
                .await;
            drain_reporter.set_service_status("", ServingStatus::NotServing).await;
        })
        .await;

    watcher.abort();
    let _ = watcher.await;
    drop(engine);
    let flushed = tokio::task::spawn_blocking(move || {
        let r = store.flush();
        drop(store);
        r
    })
    .await?;
    result.context("gRPC server failed")?;
    flushed.context("flushing storage on shutdown")?;
    tracing::info!("solus stopped");
    Ok(())
}
