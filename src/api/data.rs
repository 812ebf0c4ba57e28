//! `solus.v1.DeduperService`: Add, CheckAbsence, AddIfAbsent.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::pb;
use super::{authorize, status_of, within_deadline};
use crate::engine::Engine;
use crate::metrics;

pub struct DataService {
    engine: Arc<Engine>,
    timeout: Duration,
}

impl DataService {
    /// `timeout`: the longest any request may take (`server.request_timeout_ms`).
    pub fn new(engine: Arc<Engine>, timeout: Duration) -> Self {
        DataService { engine, timeout }
    }
}

#[tonic::async_trait]
impl pb::deduper_service_server::DeduperService for DataService {
    async fn add(&self, request: Request<pb::AddRequest>) -> Result<Response<pb::AddResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        metrics::request_entities("Add", r.entities.len());
        let n = r.entities.len();
        within_deadline("Add", &metadata, self.timeout, async {
            let added = self
                .engine
                .add_with_id(
                    &r.client_id,
                    &r.deduper,
                    r.entities,
                    r.ttl_ms,
                    r.request_id.map(Vec::from),
                )
                .await;
            let added = added.map_err(status_of)?;
            metrics::deduper_request(&r.client_id, &r.deduper, "Add", n);
            Ok(Response::new(pb::AddResponse { added }))
        })
        .await
    }

    async fn check_absence(
        &self,
        request: Request<pb::CheckAbsenceRequest>,
    ) -> Result<Response<pb::CheckAbsenceResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        metrics::request_entities("CheckAbsence", r.entities.len());
        let n = r.entities.len();
        within_deadline("CheckAbsence", &metadata, self.timeout, async {
            let absent = self
                .engine
                .check_absence_with_records(&r.client_id, &r.deduper, r.entities, r.record_ids)
                .await;
            let absent = absent.map_err(status_of)?;
            metrics::deduper_request(&r.client_id, &r.deduper, "CheckAbsence", n);
            Ok(Response::new(pb::CheckAbsenceResponse { absent }))
        })
        .await
    }

    async fn add_if_absent(
        &self,
        request: Request<pb::AddIfAbsentRequest>,
    ) -> Result<Response<pb::AddIfAbsentResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        metrics::request_entities("AddIfAbsent", r.entities.len());
        let n = r.entities.len();
        within_deadline("AddIfAbsent", &metadata, self.timeout, async {
            let absent = self
                .engine
                .add_if_absent_with_records(
                    &r.client_id,
                    &r.deduper,
                    r.entities,
                    r.ttl_ms,
                    r.request_id.map(Vec::from),
                    r.record_ids,
                )
                .await;
            let absent = absent.map_err(status_of)?;
            metrics::deduper_request(&r.client_id, &r.deduper, "AddIfAbsent", n);
            Ok(Response::new(pb::AddIfAbsentResponse { absent }))
        })
        .await
    }
}
