//! The gRPC service `authz.v1.PolicyAdmin`: apply, delete, get, list and watch policy objects,
//! and the server's status. Conversion and validation only; the store does the work.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::{BroadcastStream, WatchStream as ValueStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::api::authn::{self, Authenticator};
use crate::api::error::{ApiError, Invalid, Result};
use crate::policy::load::{parse_manifest, LoadOptions};
use crate::proto;
use crate::proto::policy_admin_server::{PolicyAdmin, PolicyAdminServer};
use crate::serving::subscribers::Acknowledged;
use crate::serving::{store_figures, ReplicationCell};
use crate::serving::{Caller, Privilege, Served, ServingState, WriteOp};
use crate::store::etcd::AckMode;
use crate::store::{ChangeEvent, ObjectKind, ObjectRef, Store};
use crate::telemetry::metrics::StoreFigures;

/// Every kind of policy object, for privileges over all of them (list all, watch).
const ALL_KINDS: [ObjectKind; 6] = ObjectKind::ALL;

/// Open watch streams allowed unless [`AdminApi::with_max_watches`] says otherwise.
pub const DEFAULT_MAX_WATCHES: usize = 1024;

/// The manifest name used in errors about an applied manifest.
const MANIFEST: &str = "manifest";

/// The store, set once the first policy load succeeds (the service is registered before, so
/// that health can report `NOT_SERVING` while the policy compiles).
pub type StoreCell = Arc<std::sync::OnceLock<Arc<Store>>>;

#[derive(Clone)]
pub struct AdminApi {
    store: StoreCell,
    state: Arc<ServingState>,
    authenticator: Arc<dyn Authenticator>,
    load_options: LoadOptions,
    /// Becomes `true` when the server starts draining: open watch streams end then, so that
    /// graceful shutdown does not wait for them forever.
    draining: tokio::sync::watch::Receiver<bool>,
    /// One permit per open watch stream (`--max-watches`), held for the stream's life: the
    /// request limit counts a stream only while it is set up, this bounds how many stay open.
    watch_slots: Arc<tokio::sync::Semaphore>,
    /// etcd mode: the replicas a write's acknowledgement waits for.
    replication: ReplicationCell,
}

impl AdminApi {
    pub fn new(
        store: StoreCell,
        state: Arc<ServingState>,
        authenticator: Arc<dyn Authenticator>,
        load_options: LoadOptions,
        draining: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            store,
            state,
            authenticator,
            load_options,
            draining,
            watch_slots: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_WATCHES)),
            replication: ReplicationCell::default(),
        }
    }

    /// etcd mode: writes are acknowledged across the replicas `replication` knows.
    #[must_use]
    pub fn with_replication(mut self, replication: ReplicationCell) -> Self {
        self.replication = replication;
        self
    }

    /// How far a committed write at `revision` reached, as `ack` asks.
    async fn acknowledge(&self, revision: u64, ack: i32) -> Acknowledged {
        let mode = match proto::Ack::try_from(ack).unwrap_or(proto::Ack::Cluster) {
            proto::Ack::Cluster => AckMode::Cluster,
            proto::Ack::Local => AckMode::Local,
            proto::Ack::Committed => AckMode::Committed,
        };
        self.state
            .acknowledge(&self.replication, revision, mode)
            .await
    }

    /// At most `max` watch streams open at once; one more is refused with
    /// `RESOURCE_EXHAUSTED`.
    #[must_use]
    pub fn with_max_watches(mut self, max: usize) -> Self {
        self.watch_slots = Arc::new(tokio::sync::Semaphore::new(
            max.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        ));
        self
    }

    /// A policy write (applied or refused) recorded in the audit log, when there is one,
    /// with the caller as authenticated and, when it impersonates someone, the user the
    /// write was made as (`None` when the impersonation itself was refused).
    fn audit_write(
        &self,
        rpc: &str,
        caller: &Caller,
        served: Option<&Served>,
        request: impl FnOnce() -> serde_json::Value,
        outcome: std::result::Result<(u64, serde_json::Value), &Status>,
    ) {
        let outcome =
            outcome.map_err(|status| format!("{:?}: {}", status.code(), status.message()));
        let impersonated = match (served, &caller.impersonation) {
            (Some(served), _) => served.impersonated(),
            (None, Some(impersonation)) => Some(&impersonation.user),
            (None, None) => None,
        };
        self.state
            .record_write(rpc, &caller.user, impersonated, request, outcome);
    }

    pub fn service(self, max_request_bytes: usize) -> PolicyAdminServer<Self> {
        PolicyAdminServer::new(self).max_decoding_message_size(max_request_bytes)
    }

    /// Every caller is identified as every other call's is (authenticated, and served as the
    /// user it impersonates, if it may); reads then need the matching RBAC verb
    /// ([`Self::admit`]), writes the checks of the serving core's write guard, made as the
    /// served user.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller> {
        authn::identify(&*self.authenticator, request)
    }

    /// Admits a read needing `privileges`, all of them checked against one snapshot.
    async fn admit(&self, caller: Caller, privileges: &[Privilege<'_>]) -> Result<()> {
        self.state.admit_all(caller, privileges, 0).await?;
        Ok(())
    }

    /// The store's part of `Status`: where the policy lives and, in etcd mode, this replica's
    /// freshness and the replica table (the figures `/metrics` shows, see [`store_figures`]).
    fn store_status(&self) -> proto::StatusResponse {
        match store_figures(&self.replication) {
            StoreFigures::Directory => proto::StatusResponse {
                store: "directory".into(),
                ..Default::default()
            },
            StoreFigures::Etcd(etcd) => proto::StatusResponse {
                store: "etcd".into(),
                freshness_age_seconds: etcd.freshness_age_seconds(),
                head_revision: etcd.head_revision,
                replica_id: etcd.replica_id,
                etcd_endpoint: etcd.endpoint,
                fenced: etcd.fenced,
                replicas: etcd
                    .replicas
                    .into_iter()
                    .map(|(id, applied_revision)| proto::ReplicaStatus {
                        id,
                        applied_revision,
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    fn store(&self) -> Result<&Arc<Store>> {
        self.store.get().ok_or(ApiError::NotReady)
    }
}

fn object_ref(wire: Option<proto::ObjectRef>, field: &str) -> Result<ObjectRef> {
    let wire = wire.ok_or_else(|| ApiError::invalid(field, Invalid::Empty))?;
    let kind: ObjectKind = wire.kind.parse().map_err(|problem: String| {
        ApiError::invalid(format!("{field}.kind"), Invalid::Other(problem))
    })?;
    if wire.name.is_empty() {
        return Err(ApiError::invalid(format!("{field}.name"), Invalid::Empty));
    }
    if kind.is_namespaced() && wire.namespace.is_empty() {
        return Err(ApiError::invalid(
            format!("{field}.namespace"),
            Invalid::Other(format!("a {} is namespaced", kind.as_str())),
        ));
    }
    if !kind.is_namespaced() && !wire.namespace.is_empty() {
        return Err(ApiError::invalid(
            format!("{field}.namespace"),
            Invalid::Other(format!("a {} is cluster-scoped", kind.as_str())),
        ));
    }
    Ok(ObjectRef {
        kind,
        namespace: wire.namespace,
        name: wire.name,
    })
}

fn wire_ref(object: &ObjectRef) -> proto::ObjectRef {
    proto::ObjectRef {
        kind: object.kind.as_str().to_string(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
    }
}

fn wire_event(event: ChangeEvent) -> proto::WatchEvent {
    proto::WatchEvent {
        r#type: event.kind.as_str().to_string(),
        object: Some(wire_ref(&event.object)),
        manifest: event.manifest,
        revision: event.revision,
    }
}

/// The manifest as recorded in the audit log: whole up to 64 KiB, then cut (at a character
/// boundary) with a note of its full size, so one huge apply cannot balloon the log.
fn audited_manifest(manifest: &str) -> String {
    const MAX: usize = 64 * 1024;
    if manifest.len() <= MAX {
        return manifest.to_string();
    }
    let mut cut = MAX;
    while !manifest.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}… [cut: {} bytes in all]",
        &manifest[..cut],
        manifest.len()
    )
}

/// What an `Apply` did, or (dry run) would do.
struct Applied {
    revision: u64,
    objects: Vec<ObjectRef>,
    /// Dry run only: the access delta and the traffic impact, or why they are not given.
    delta: Option<std::result::Result<(proto::AccessDelta, proto::TrafficImpact), String>>,
}

impl AdminApi {
    /// Parses and applies one manifest (the write itself, without the auditing around it); a
    /// dry run previews it and answers with its access delta.
    async fn apply_manifest(
        &self,
        caller: &Served,
        wire: &proto::ApplyRequest,
    ) -> std::result::Result<Applied, Status> {
        if wire.manifest.trim().is_empty() {
            return Err(ApiError::invalid("manifest", Invalid::Empty).into());
        }
        let objects = parse_manifest(MANIFEST, &wire.manifest, &self.load_options)
            .map_err(|e| ApiError::Store(crate::store::StoreError::Invalid(e)))?;
        let guard = Some(
            self.state
                .write_guard(Arc::clone(&caller.user), WriteOp::Apply),
        );
        let store = self.store()?;
        if !wire.dry_run {
            let (revision, objects) = store.apply(objects, guard).await.map_err(ApiError::from)?;
            return Ok(Applied {
                revision,
                objects,
                delta: None,
            });
        }
        let preview = store
            .preview(objects, guard)
            .await
            .map_err(ApiError::from)?;
        let (revision, objects) = (preview.revision, preview.applied.clone());
        // The delta names who gains and loses access: a who-can answer, given to those who
        // may ask for one.
        let delta = match self
            .admit(
                Caller::new(Arc::clone(&caller.user)),
                &[Privilege::RESOURCE_ACCESS_REVIEW],
            )
            .await
        {
            Err(refused) => Err(format!(
                "the access delta names subjects as who-can answers do: {refused}"
            )),
            Ok(()) => {
                let state = Arc::clone(&self.state);
                tokio::task::spawn_blocking(move || {
                    let delta = state.access_delta(&preview);
                    (delta, state.traffic_impact(&preview, usize::MAX))
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|(delta, traffic)| {
                    delta
                        .map(|delta| {
                            (
                                crate::api::delta_wire::to_wire(&delta),
                                crate::api::delta_wire::traffic_to_wire(&traffic),
                            )
                        })
                        .map_err(|e| format!("the access delta could not be computed: {e}"))
                })
            }
        };
        Ok(Applied {
            revision,
            objects,
            delta: Some(delta),
        })
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<proto::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl PolicyAdmin for AdminApi {
    async fn apply(
        &self,
        request: Request<proto::ApplyRequest>,
    ) -> Result<Response<proto::ApplyResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let served = self
            .state
            .identify(caller.clone())
            .map_err(|refused| Status::from(ApiError::from(refused)));
        let outcome = match &served {
            Ok(served) => self.apply_manifest(served, &wire).await,
            Err(refused) => Err(refused.clone()),
        };
        self.audit_write(
            "Apply",
            &caller,
            served.as_ref().ok(),
            || {
                serde_json::json!({
                    "manifest": audited_manifest(&wire.manifest),
                    "dry_run": wire.dry_run,
                })
            },
            match &outcome {
                Ok(applied) => Ok((
                    applied.revision,
                    serde_json::json!({
                        "applied": applied.objects.iter().map(ToString::to_string).collect::<Vec<_>>()
                    }),
                )),
                Err(status) => Err(status),
            },
        );
        let Applied {
            revision,
            objects,
            delta,
        } = outcome?;
        let Acknowledged {
            replicas: report,
            subscribers,
        } = if wire.dry_run {
            Acknowledged::default()
        } else {
            self.acknowledge(revision, wire.ack).await
        };
        tracing::info!(
            revision,
            objects = objects.len(),
            dry_run = wire.dry_run,
            confirmed = report.confirmed.len(),
            fenced = report.fenced.len(),
            subscribers_confirmed = subscribers.confirmed,
            subscribers_fenced = subscribers.fenced,
            "policy applied"
        );
        let (delta, traffic, delta_withheld) = match delta {
            None => (None, None, String::new()),
            Some(Ok((delta, traffic))) => (Some(delta), Some(traffic), String::new()),
            Some(Err(why)) => (None, None, why),
        };
        Ok(Response::new(proto::ApplyResponse {
            revision,
            applied: objects.iter().map(wire_ref).collect(),
            replicas_confirmed: report.confirmed,
            replicas_fenced: report.fenced,
            delta,
            delta_withheld,
            subscribers_confirmed: subscribers.confirmed,
            subscribers_fenced: subscribers.fenced,
            traffic,
        }))
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        let caller = self.caller(&request)?;
        let request = request.into_inner();
        let (wire, ack) = (request.object, request.ack);
        let served = self
            .state
            .identify(caller.clone())
            .map_err(|refused| Status::from(ApiError::from(refused)));
        let outcome = match (&served, object_ref(wire.clone(), "object"), self.store()) {
            (Err(refused), _, _) => Err(refused.clone()),
            (_, Err(e), _) | (_, _, Err(e)) => Err(e.into()),
            (Ok(served), Ok(object), Ok(store)) => store
                .delete(
                    &object,
                    Some(
                        self.state
                            .write_guard(Arc::clone(&served.user), WriteOp::Delete),
                    ),
                )
                .await
                .map(|revision| (revision, object))
                .map_err(|e| Status::from(ApiError::from(e))),
        };
        self.audit_write(
            "Delete",
            &caller,
            served.as_ref().ok(),
            || match &wire {
                Some(o) => serde_json::json!({
                    "kind": o.kind, "namespace": o.namespace, "name": o.name,
                }),
                None => serde_json::Value::Null,
            },
            match &outcome {
                Ok((revision, object)) => Ok((
                    *revision,
                    serde_json::json!({ "deleted": object.to_string() }),
                )),
                Err(status) => Err(status),
            },
        );
        let (revision, object) = outcome?;
        let Acknowledged {
            replicas: report,
            subscribers,
        } = self.acknowledge(revision, ack).await;
        tracing::info!(
            revision,
            %object,
            confirmed = report.confirmed.len(),
            fenced = report.fenced.len(),
            subscribers_confirmed = subscribers.confirmed,
            subscribers_fenced = subscribers.fenced,
            "policy object deleted"
        );
        Ok(Response::new(proto::DeleteResponse {
            revision,
            replicas_confirmed: report.confirmed,
            replicas_fenced: report.fenced,
            subscribers_confirmed: subscribers.confirmed,
            subscribers_fenced: subscribers.fenced,
        }))
    }

    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let caller = self.caller(&request)?;
        let object = object_ref(request.into_inner().object, "object")?;
        self.admit(
            caller,
            &[Privilege::object(
                "get",
                object.kind,
                &object.namespace,
                &object.name,
            )],
        )
        .await?;
        let revision = self.store()?.revision();
        let manifest = self
            .store()?
            .get(&object)
            .ok_or_else(|| ApiError::from(crate::store::StoreError::NotFound(object)))?;
        Ok(Response::new(proto::GetResponse { manifest, revision }))
    }

    async fn list(
        &self,
        request: Request<proto::ListRequest>,
    ) -> Result<Response<proto::ListResponse>, Status> {
        let caller = self.caller(&request)?;
        let wire = request.into_inner();
        let kind = if wire.kind.is_empty() {
            None
        } else {
            Some(
                wire.kind
                    .parse::<ObjectKind>()
                    .map_err(|problem| ApiError::invalid("kind", Invalid::Other(problem)))?,
            )
        };
        // Listing every kind needs `list` on each of them.
        let kinds = kind.map_or_else(|| ALL_KINDS.to_vec(), |kind| vec![kind]);
        let privileges: Vec<Privilege<'_>> = kinds
            .iter()
            .map(|kind| Privilege::object("list", *kind, &wire.namespace, ""))
            .collect();
        self.admit(caller, &privileges).await?;
        let revision = self.store()?.revision();
        Ok(Response::new(proto::ListResponse {
            manifests: self.store()?.list(kind, &wire.namespace),
            revision,
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = self.caller(&request)?;
        // A watch streams every object of every kind: `watch` on all six, cluster-wide.
        let privileges: Vec<Privilege<'_>> = ALL_KINDS
            .iter()
            .map(|kind| Privilege::object("watch", *kind, "", ""))
            .collect();
        self.admit(caller, &privileges).await?;
        let slot = Arc::clone(&self.watch_slots)
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyWatches)?;
        let from = request.into_inner().from_revision;
        let (backlog, live) = self.store()?.watch(from).await.map_err(ApiError::from)?;
        let backlog = tokio_stream::iter(backlog.into_iter().map(|e| Ok(wire_event(e))));
        let live = BroadcastStream::new(live).map(|item| match item {
            Ok(event) => Ok(wire_event(event)),
            // A watcher too slow to keep up must not silently miss changes: end its stream
            // with an error saying so; it lists again and re-watches.
            Err(BroadcastStreamRecvError::Lagged(missed)) => {
                Err(Status::from(ApiError::WatchLagged { missed }))
            }
        });
        // Ends the stream (cleanly, after the events already sent) when the server drains.
        let drained = ValueStream::new(self.draining.clone())
            .filter(|draining| *draining)
            .map(|_| None);
        let events = backlog.chain(live).map(Some).merge(drained);
        // The slot goes with the stream: released when the stream ends or the client leaves.
        Ok(Response::new(Box::pin(events.map_while(move |event| {
            let _held = &slot;
            event
        }))))
    }

    async fn status(
        &self,
        request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let caller = self.caller(&request)?;
        self.admit(caller, &[Privilege::STATUS]).await?;
        let cache = self.state.cache_figures();
        let audit = self.state.audit_figures();
        Ok(Response::new(proto::StatusResponse {
            revision: self.store()?.revision(),
            last_error: self.store()?.last_error().unwrap_or_default(),
            cache_entries: cache.entries,
            cache_hits: cache.hits,
            cache_misses: cache.misses,
            cache_invalidations: cache.invalidations,
            cache_evictions: cache.evictions,
            cache_inserts: cache.inserts,
            cache_stale_inserts_refused: cache.stale_inserts_refused,
            audit_dropped: audit.dropped(),
            audit_write_failed: audit.write_failed,
            subscribers: self
                .state
                .subscriber_figures()
                .into_iter()
                .map(|subscriber| proto::SubscriberStatus {
                    id: subscriber.id,
                    applied_revision: subscriber.applied_revision,
                    connected: subscriber.connected,
                    proof_age_seconds: subscriber.proof_age.map_or(-1.0, |age| age.as_secs_f64()),
                })
                .collect(),
            ..self.store_status()
        }))
    }
}
