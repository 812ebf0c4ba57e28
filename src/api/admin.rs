//! `solus.v1.DeduperAdminService`: create, get, list, update and delete
//! dedupers; get and list carry each deduper's live figures.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::pb;
use super::{authorize, status_of, within_deadline};
use crate::deduper::{Deduper, Level};
use crate::engine::{CreateSpec, DeduperStats, Engine, EngineError};

pub struct AdminService {
    engine: Arc<Engine>,
    timeout: Duration,
}

impl AdminService {
    /// `timeout`: the longest any request may take (`server.request_timeout_ms`).
    pub fn new(engine: Arc<Engine>, timeout: Duration) -> Self {
        AdminService { engine, timeout }
    }
}

fn level_from_pb(value: i32) -> Result<Level, EngineError> {
    match pb::Level::try_from(value) {
        Ok(pb::Level::Unspecified | pb::Level::Global) => Ok(Level::Global),
        Ok(pb::Level::Dc) => Ok(Level::Dc),
        Err(_) => Err(EngineError::Invalid(format!(
            "level {value} is unknown; use LEVEL_GLOBAL (1) or LEVEL_DC (2)"
        ))),
    }
}

/// The wire form of a deduper's live figures.
pub fn stats_to_pb(s: DeduperStats) -> pb::DeduperStats {
    pb::DeduperStats {
        set_bits: s.set_bits,
        sampled_bits: s.sampled_bits,
        fill_ratio: s.fill_ratio,
        estimated_entities: s.estimated_entities,
        estimated_false_positive_rate: s.estimated_fpr,
        load: s.load,
        computed_at_ms: s.computed_at_ms,
        estimated_entities_relative_error: s.relative_error,
    }
}

/// The wire form of a deduper, with its live figures when known.
pub fn deduper_to_pb(d: Deduper, stats: Option<DeduperStats>) -> pb::Deduper {
    deduper_with_generations_to_pb(d, stats, &[])
}

/// [`deduper_to_pb`] with the figures of its generations, by id, when known.
pub fn deduper_with_generations_to_pb(
    d: Deduper,
    stats: Option<DeduperStats>,
    generation_stats: &[(u32, DeduperStats)],
) -> pb::Deduper {
    let generations = d
        .generations
        .iter()
        .map(|g| pb::Generation {
            id: g.id,
            hash_functions: g.geometry.hash_functions,
            shards: g.geometry.shards,
            bits_per_shard: g.geometry.bits_per_shard,
            expected_insertions: g.expected_insertions,
            false_positive_rate: g.false_positive_rate,
            created_ms: g.created_ms,
            writes_from_ms: g.writes_from_ms,
            retire_at_ms: g.retire_at_ms,
            stats: generation_stats
                .iter()
                .find(|(id, _)| *id == g.id)
                .map(|(_, s)| stats_to_pb(*s)),
            filter_name: crate::generations::physical_name(&d.name, g.id),
        })
        .collect();
    pb::Deduper {
        generations,
        stats: stats.map(stats_to_pb),
        client_id: d.client_id,
        name: d.name,
        hash_functions: d.geometry.hash_functions,
        shards: d.geometry.shards,
        bits_per_shard: d.geometry.bits_per_shard,
        expiry_seconds: d.expiry_seconds,
        active: d.active,
        level: match d.level {
            Level::Global => pb::Level::Global,
            Level::Dc => pb::Level::Dc,
        } as i32,
        create_time_ms: d.create_time_ms,
        update_time_ms: d.update_time_ms,
        expected_insertions: d.expected_insertions,
        false_positive_rate: d.false_positive_rate,
    }
}

#[tonic::async_trait]
impl pb::deduper_admin_service_server::DeduperAdminService for AdminService {
    async fn create_deduper(
        &self,
        request: Request<pb::CreateDeduperRequest>,
    ) -> Result<Response<pb::Deduper>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        within_deadline("CreateDeduper", &metadata, self.timeout, async {
            let spec = CreateSpec {
                level: level_from_pb(r.level).map_err(status_of)?,
                client_id: r.client_id,
                name: r.name,
                expected_insertions: r.expected_insertions,
                false_positive_rate: r.false_positive_rate,
                hash_functions: r.hash_functions,
                shards: r.shards,
                bits_per_shard: r.bits_per_shard,
                expiry_seconds: r.expiry_seconds,
            };
            let d = self.engine.create_deduper(spec).await.map_err(status_of)?;
            tracing::info!(client_id = %d.client_id, name = %d.name, k = d.geometry.hash_functions,
                shards = d.geometry.shards, bits_per_shard = d.geometry.bits_per_shard, "deduper created");
            Ok(Response::new(deduper_to_pb(d, None)))
        })
        .await
    }

    async fn get_deduper(&self, request: Request<pb::GetDeduperRequest>) -> Result<Response<pb::Deduper>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        within_deadline("GetDeduper", &metadata, self.timeout, async {
            let d = self
                .engine
                .get_deduper(&r.client_id, &r.name)
                .await
                .map_err(status_of)?;
            let stats = self.engine.stats_of(&d.client_id, &d.name);
            let per = self.engine.generation_stats_of(&d.client_id, &d.name);
            Ok(Response::new(deduper_with_generations_to_pb(d, stats, &per)))
        })
        .await
    }

    async fn list_dedupers(
        &self,
        request: Request<pb::ListDedupersRequest>,
    ) -> Result<Response<pb::ListDedupersResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        within_deadline("ListDedupers", &metadata, self.timeout, async {
            let list = self.engine.list_dedupers(&r.client_id, r.active_only).await;
            let (list, unreadable) = list.map_err(status_of)?;
            Ok(Response::new(pb::ListDedupersResponse {
                dedupers: list
                    .into_iter()
                    .map(|d| {
                        let stats = self.engine.stats_of(&d.client_id, &d.name);
                        let per = self.engine.generation_stats_of(&d.client_id, &d.name);
                        deduper_with_generations_to_pb(d, stats, &per)
                    })
                    .collect(),
                unreadable: unreadable
                    .into_iter()
                    .map(|u| pb::UnreadableDeduper {
                        name: u.name,
                        error: u.error,
                    })
                    .collect(),
            }))
        })
        .await
    }

    async fn update_deduper(
        &self,
        request: Request<pb::UpdateDeduperRequest>,
    ) -> Result<Response<pb::Deduper>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        within_deadline("UpdateDeduper", &metadata, self.timeout, async {
            let mut d = None;
            if r.active.is_some() || r.expiry_seconds.is_some() {
                let updated = self
                    .engine
                    .update_deduper(&r.client_id, &r.name, r.active, r.expiry_seconds)
                    .await;
                d = Some(updated.map_err(status_of)?);
            }
            if r.expected_insertions.is_some() || r.false_positive_rate.is_some() {
                let resized = self
                    .engine
                    .resize_deduper(&r.client_id, &r.name, r.expected_insertions, r.false_positive_rate)
                    .await;
                d = Some(resized.map_err(status_of)?);
            }
            let d = match d {
                Some(d) => d,
                // Nothing to change: the config as it is (as before).
                None => self
                    .engine
                    .update_deduper(&r.client_id, &r.name, None, None)
                    .await
                    .map_err(status_of)?,
            };
            Ok(Response::new(deduper_with_generations_to_pb(d, None, &[])))
        })
        .await
    }

    async fn delete_deduper(
        &self,
        request: Request<pb::DeleteDeduperRequest>,
    ) -> Result<Response<pb::DeleteDeduperResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        authorize(&extensions, &r.client_id)?;
        within_deadline("DeleteDeduper", &metadata, self.timeout, async {
            let d = self
                .engine
                .delete_deduper(&r.client_id, &r.name, r.force)
                .await
                .map_err(status_of)?;
            tracing::info!(client_id = %d.client_id, name = %d.name, force = r.force, "deduper deleted");
            Ok(Response::new(pb::DeleteDeduperResponse {
                deleted: Some(deduper_to_pb(d, None)),
            }))
        })
        .await
    }
}
