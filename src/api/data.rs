//! `solus.v1.DeduperService`: Add, CheckAbsence, AddIfAbsent.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::pb;
use super::status_of;
use crate::engine::Engine;

pub struct DataService {
    engine: Arc<Engine>,
}

impl DataService {
    pub fn new(engine: Arc<Engine>) -> Self {
        DataService { engine }
    }
}

#[tonic::async_trait]
impl pb::deduper_service_server::DeduperService for DataService {
    async fn add(&self, request: Request<pb::AddRequest>) -> Result<Response<pb::AddResponse>, Status> {
        let r = request.into_inner();
        let added = self
            .engine
            .add(&r.client_id, &r.deduper, r.entities, r.ttl_ms)
            .await
            .map_err(|e| status_of("Add", e))?;
        Ok(Response::new(pb::AddResponse { added }))
    }

    async fn check_absence(
        &self,
        request: Request<pb::CheckAbsenceRequest>,
    ) -> Result<Response<pb::CheckAbsenceResponse>, Status> {
        let r = request.into_inner();
        let absent = self
            .engine
            .check_absence(&r.client_id, &r.deduper, r.entities)
            .await
            .map_err(|e| status_of("CheckAbsence", e))?;
        Ok(Response::new(pb::CheckAbsenceResponse { absent }))
    }

    async fn add_if_absent(
        &self,
        request: Request<pb::AddIfAbsentRequest>,
    ) -> Result<Response<pb::AddIfAbsentResponse>, Status> {
        let r = request.into_inner();
        let absent = self
            .engine
            .add_if_absent(&r.client_id, &r.deduper, r.entities, r.ttl_ms)
            .await
            .map_err(|e| status_of("AddIfAbsent", e))?;
        Ok(Response::new(pb::AddIfAbsentResponse { absent }))
    }
}
