//! The etcd policy store (docs/etcd.md §1): any number of stateless replicas share one policy in
//! etcd, and a change acknowledged by one of them holds on all of them.
//!
//! **Layout** under `--etcd-prefix` (default `/authzd/`):
//!
//! | key | value |
//! | --- | --- |
//! | `v1/objects/{roles,clusterroles,rolebindings,clusterrolebindings,fieldpolicies}/[NS/]NAME` | the object's manifest, JSON |
//! | `v1/head` | rewritten by every authzd write: the revision writes compare against |
//! | `v1/replicas/ID` | one per live replica (on its lease): the revision it has applied |
//!
//! **A reflector** (docs/etcd.md §4; kube-rs `kube-runtime/src/watcher.rs`): a replica lists
//! the prefix at a revision, then applies every later change from one watch, grouped by
//! revision, through [`crate::store::Store::apply_changes`] (incremental index update, precise invalidation,
//! publish). Nobody publishes what it writes: the writer's own change comes back through its
//! watch, like everyone else's. A compacted watch, or a revision that goes backwards (etcd
//! restored from a snapshot), relists and publishes the difference ([`crate::store::Store::replace`]).
//!
//! **Revisions are etcd's**: every answer carries the etcd revision of the last policy change
//! applied, the same on every replica, so a `min_revision` from one replica holds on all of
//! them. They increase, but not by one.
//!
//! **Writes** compare `v1/head`'s modification revision with the revision the write was
//! validated against ([`EtcdSink`]); a concurrent writer makes the write catch up, validate
//! again and retry. Writes made to the keys by other tools (etcdctl) are applied like any
//! other change, but only authzd's own writes are ordered by this compare.
//!
//! **Freshness and acknowledgement** live in [`replication`].

pub mod client;
pub mod replication;

use std::sync::Arc;

use tokio_stream::StreamExt;

use crate::policy::load::{parse_manifest, LoadOptions};
use crate::policy::model::{PolicyObject, PolicySet};
use crate::store::{Backend, Commit, CommitError, ObjectKind, ObjectRef, ObjectView, Store};

use client::rpc;
pub use client::{EtcdClient, EtcdConfig, EtcdError};
pub use replication::{AckMode, AckReport, OnStale, Replication, ReplicationConfig};

/// The version of the key layout, part of every key.
const LAYOUT: &str = "v1/";

/// Keys of one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        let mut prefix = prefix.to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self { prefix }
    }

    /// Everything authzd keeps: objects, head and replicas.
    pub fn all(&self) -> String {
        format!("{}{LAYOUT}", self.prefix)
    }

    pub fn objects(&self) -> String {
        format!("{}{LAYOUT}objects/", self.prefix)
    }

    pub fn head(&self) -> String {
        format!("{}{LAYOUT}head", self.prefix)
    }

    pub fn replicas(&self) -> String {
        format!("{}{LAYOUT}replicas/", self.prefix)
    }

    pub fn object(&self, object: &ObjectRef) -> String {
        let plural = object.kind.plural();
        if object.kind.is_namespaced() {
            format!(
                "{}{plural}/{}/{}",
                self.objects(),
                object.namespace,
                object.name
            )
        } else {
            format!("{}{plural}/{}", self.objects(), object.name)
        }
    }

    /// The object a key names, when it is an object key.
    pub fn object_of(&self, key: &str) -> Option<ObjectRef> {
        let rest = key.strip_prefix(&self.objects())?;
        let (plural, rest) = rest.split_once('/')?;
        let kind = ObjectKind::ALL.into_iter().find(|k| k.plural() == plural)?;
        let (namespace, name) = if kind.is_namespaced() {
            let (namespace, name) = rest.split_once('/')?;
            (namespace.to_string(), name.to_string())
        } else {
            (String::new(), rest.to_string())
        };
        (!name.is_empty() && !name.contains('/')).then_some(ObjectRef {
            kind,
            namespace,
            name,
        })
    }
}

/// An object as stored: its manifest, JSON.
pub fn encode(object: &PolicyObject) -> Vec<u8> {
    ObjectView::from(object).to_value().to_string().into_bytes()
}

/// An object read back from `key`; `Err` says why the value is not the object the key names
/// (written by another tool, say).
pub fn decode(key: &str, value: &[u8], options: &LoadOptions) -> Result<PolicyObject, String> {
    let text = std::str::from_utf8(value).map_err(|_| format!("{key}: not UTF-8"))?;
    let source = format!("etcd:{key}");
    let mut objects = parse_manifest(&source, text, options).map_err(|e| e.to_string())?;
    match (objects.pop(), objects.is_empty()) {
        (Some(object), true) => Ok(object),
        _ => Err(format!("{key}: must hold exactly one object")),
    }
}

/// The whole policy under the prefix at one revision, with the objects that did not read
/// (kept out, their errors returned).
pub struct Listing {
    pub policy: PolicySet,
    /// The revision of the last policy change (object or head) in the listing.
    pub revision: u64,
    /// etcd's revision when it was read (the watch continues after it).
    pub read_at: u64,
    pub errors: Vec<String>,
}

/// Lists every object and the head, in pages (an etcd response is bounded).
pub async fn list(
    client: &EtcdClient,
    keys: &Keys,
    options: &LoadOptions,
) -> Result<Listing, EtcdError> {
    // etcd before 3.4.24 and 3.5 walks the rest of the range's index for every page, whatever
    // the limit (etcd issue #11057; Debian's 3.4.23 does), so many small pages cost quadratic
    // time: 110k objects in pages of 1,000 took 2 s to fetch here. A page too large to take
    // (large objects beyond the response limit) is asked again at half the size.
    const PAGE: i64 = 10_000;
    const SMALLEST_PAGE: i64 = 1;
    let started = std::time::Instant::now();
    let start = keys.objects();
    let end = client::prefix_end(start.as_bytes());
    let mut from = start.clone().into_bytes();
    let mut read_at = 0i64;
    let mut revision = 0i64;
    let mut page = PAGE;
    let mut kvs = Vec::new();
    loop {
        let response = client
            .range(rpc::RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: page,
                // Every page at the first page's revision: one consistent state.
                revision: read_at,
                ..Default::default()
            })
            .await;
        let response = match response {
            Ok(response) => response,
            Err(EtcdError::Refused(why)) if page > SMALLEST_PAGE => {
                tracing::debug!(%why, page, "etcd: listing page refused; asking for a smaller one");
                page = (page / 2).max(SMALLEST_PAGE);
                continue;
            }
            Err(error) => return Err(error),
        };
        if read_at == 0 {
            read_at = response.header.as_ref().map_or(0, |h| h.revision);
        }
        let more = response.more;
        if let (true, Some(last)) = (more, response.kvs.last()) {
            from = last.key.clone();
            from.push(0);
        }
        for kv in &response.kvs {
            revision = revision.max(kv.mod_revision);
        }
        kvs.extend(response.kvs);
        if !more {
            break;
        }
    }
    let fetched = started.elapsed();
    let objects = kvs.len();
    let options = options.clone();
    let decoded = tokio::task::spawn_blocking(move || decode_all(&kvs, &options))
        .await
        .map_err(|e| EtcdError::Unavailable(format!("decoding the listing failed: {e}")))?;
    let (mut policy, errors) = decoded;
    let head = client
        .range(rpc::RangeRequest {
            key: keys.head().into_bytes(),
            revision: read_at,
            ..Default::default()
        })
        .await?;
    if let Some(kv) = head.kvs.first() {
        revision = revision.max(kv.mod_revision);
    }
    policy.canonicalize();
    tracing::info!(
        objects,
        revision,
        fetch_ms = fetched.as_millis(),
        decode_ms = (started.elapsed() - fetched).as_millis(),
        "etcd: policy listed"
    );
    Ok(Listing {
        policy,
        revision: u64::try_from(revision).unwrap_or(0),
        read_at: u64::try_from(read_at).unwrap_or(0),
        errors,
    })
}

/// Every object of a listing, decoded on all cores; the errors of those that do not load.
fn decode_all(kvs: &[rpc::KeyValue], options: &LoadOptions) -> (PolicySet, Vec<String>) {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let per_thread = kvs.len().div_ceil(threads).max(1);
    let parts: Vec<Vec<Result<PolicyObject, String>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = kvs
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|kv| decode(&String::from_utf8_lossy(&kv.key), &kv.value, options))
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut policy = PolicySet::default();
    let mut errors = Vec::new();
    for result in parts.into_iter().flatten() {
        match result {
            Ok(PolicyObject::Role(role)) => policy.roles.push(role.into()),
            Ok(PolicyObject::Binding(binding)) => policy.bindings.push(binding.into()),
            Ok(PolicyObject::FieldPolicy(field_policy)) => policy.field_policies.push(field_policy),
            Ok(PolicyObject::ChangeGate(gate)) => policy.gates.push(gate),
            Err(error) => errors.push(error),
        }
    }
    (policy, errors)
}

/// Creates the head key if the prefix has none, so that the first policy revision is etcd's
/// (the same on every replica) even for an empty policy.
pub async fn initialize(client: &EtcdClient, keys: &Keys) -> Result<(), EtcdError> {
    let head = keys.head().into_bytes();
    client
        .txn(rpc::TxnRequest {
            compare: vec![rpc::Compare {
                result: rpc::compare::CompareResult::Equal as i32,
                target: rpc::compare::CompareTarget::Create as i32,
                key: head.clone(),
                target_union: Some(rpc::compare::TargetUnion::CreateRevision(0)),
            }],
            success: vec![put(head, br#"{"initialized":true}"#.to_vec())],
            failure: Vec::new(),
        })
        .await
        .map(|_| ())
}

fn put(key: Vec<u8>, value: Vec<u8>) -> rpc::RequestOp {
    rpc::RequestOp {
        request: Some(rpc::request_op::Request::RequestPut(rpc::PutRequest {
            key,
            value,
            lease: 0,
        })),
    }
}

/// Commits writes to etcd, comparing the head's revision with the one the write was
/// validated against.
pub struct EtcdSink {
    pub client: Arc<EtcdClient>,
    pub keys: Keys,
    /// Who wrote, recorded in the head (for operators reading etcd).
    pub writer: String,
}

/// The most operations one transaction carries (etcd's default `--max-txn-ops` is 128).
pub const MAX_TXN_OPS: usize = 128;

/// The most manifest bytes one transaction carries: etcd refuses requests over
/// `--max-request-bytes` (1.5 MiB by default), and the rest of the request needs room too.
pub const MAX_TXN_BYTES: usize = 1024 * 1024;

/// The bytes of a put's key and value.
fn op_bytes(op: &rpc::RequestOp) -> usize {
    match &op.request {
        Some(rpc::request_op::Request::RequestPut(put)) => put.key.len() + put.value.len(),
        _ => 0,
    }
}

#[tonic::async_trait]
impl Backend for EtcdSink {
    fn max_objects(&self) -> usize {
        MAX_TXN_OPS - 1
    }

    /// Nothing to read again: the watch delivers every change, and a relist follows a
    /// compaction or a restored etcd by itself.
    async fn reload(&self, _store: &Store) -> Result<Option<u64>, crate::policy::load::LoadErrors> {
        Err(crate::policy::load::LoadErrors(vec![
            crate::policy::load::LoadError {
                file: "etcd".to_string(),
                line: 0,
                message: "in etcd mode the policy is read from etcd, not reloaded from files"
                    .into(),
            },
        ]))
    }

    /// One transaction: the objects and the head, if the head is still at or below the
    /// revision the writes were validated against. The change comes back through this
    /// replica's watch ([`run_applier`]), as every replica's does.
    async fn commit(&self, _store: &Store, commit: Commit<'_>) -> Result<u64, CommitError> {
        let Commit {
            expected: validated,
            upserts,
            deletes,
            ..
        } = commit;
        if upserts.len() + deletes.len() + 1 > MAX_TXN_OPS {
            return Err(CommitError::TooLarge(format!(
                "one write may change at most {} objects in etcd mode (etcd's transaction limit); split it",
                MAX_TXN_OPS - 1
            )));
        }
        let head = self.keys.head().into_bytes();
        let mut success: Vec<rpc::RequestOp> = upserts
            .iter()
            .map(|object| {
                put(
                    self.keys.object(&ObjectRef::of(object)).into_bytes(),
                    encode(object),
                )
            })
            .collect();
        let bytes: usize = success.iter().map(op_bytes).sum();
        if bytes > MAX_TXN_BYTES {
            return Err(CommitError::TooLarge(format!(
                "one write may carry at most {} KiB of objects in etcd mode (etcd's transaction limit; this one is {} KiB); split it",
                MAX_TXN_BYTES / 1024,
                bytes.div_ceil(1024)
            )));
        }
        success.extend(deletes.iter().map(|object| rpc::RequestOp {
            request: Some(rpc::request_op::Request::RequestDeleteRange(
                rpc::DeleteRangeRequest {
                    key: self.keys.object(object).into_bytes(),
                    range_end: Vec::new(),
                },
            )),
        }));
        success.push(put(
            head.clone(),
            serde_json::json!({"writer": self.writer})
                .to_string()
                .into_bytes(),
        ));
        let response = self
            .client
            .txn(rpc::TxnRequest {
                // The head has not moved since `validated`: nothing authzd wrote came between.
                compare: vec![rpc::Compare {
                    result: rpc::compare::CompareResult::Less as i32,
                    target: rpc::compare::CompareTarget::Mod as i32,
                    key: head.clone(),
                    target_union: Some(rpc::compare::TargetUnion::ModRevision(
                        i64::try_from(validated).unwrap_or(i64::MAX).saturating_add(1),
                    )),
                }],
                success,
                failure: vec![rpc::RequestOp {
                    request: Some(rpc::request_op::Request::RequestRange(rpc::RangeRequest {
                        key: head,
                        ..Default::default()
                    })),
                }],
            })
            .await
            .map_err(|e| match e {
                EtcdError::Unavailable(message) => CommitError::Unavailable(format!(
                    "etcd did not confirm the write ({message}); it may or may not have been applied: retrying it is safe"
                )),
                // A server run with a smaller `--max-request-bytes` or `--max-txn-ops` than
                // etcd's defaults.
                EtcdError::Refused(message)
                    if message.contains("too large") || message.contains("too many operations") =>
                {
                    CommitError::TooLarge(format!(
                        "etcd refused the write as too large ({message}; etcd's transaction limit); split it"
                    ))
                }
                other => CommitError::Refused(other.to_string()),
            })?;
        let revision = response.header.as_ref().map_or(0, |h| h.revision);
        if response.succeeded {
            return Ok(u64::try_from(revision).unwrap_or(0));
        }
        let head_revision = response
            .responses
            .iter()
            .find_map(|r| match &r.response {
                Some(rpc::response_op::Response::ResponseRange(range)) => {
                    range.kvs.first().map(|kv| kv.mod_revision)
                }
                _ => None,
            })
            .unwrap_or(revision);
        Err(CommitError::Conflict(
            u64::try_from(head_revision).unwrap_or(0),
        ))
    }
}

/// One revision's worth of watch events, split by what they are about.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) revision: u64,
    pub(crate) policy: Vec<(ObjectRef, Option<PolicyObject>)>,
    /// The head moved (an authzd write), or an object changed.
    pub(crate) policy_moved: bool,
    pub(crate) replicas: Vec<(String, Option<Vec<u8>>)>,
}

/// What the applier did with a watch stream when it ended.
enum WatchEnd {
    /// The stream failed or ended: watch again from where it stopped.
    Broken(String),
    /// The start revision is compacted, or etcd's revision went backwards: list again.
    Relist(String),
}

/// The one task per process that applies etcd's changes: list, then watch from the list's
/// revision; relist when the watch cannot continue.
pub(crate) async fn run_applier(replication: Arc<Replication>, mut read_at: u64) {
    let mut backoff = std::time::Duration::from_millis(50);
    loop {
        let end = watch_once(&replication, &mut read_at).await;
        match end {
            WatchEnd::Broken(why) => {
                tracing::warn!(%why, read_at, "etcd watch broke; watching again");
                // From the endpoint the watch streamed from (a no-op when the failed call
                // already moved the client on).
                let watched = replication
                    .watching
                    .load(std::sync::atomic::Ordering::Acquire);
                replication.client.fail_over_from(watched);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
            }
            WatchEnd::Relist(why) => {
                tracing::warn!(%why, "etcd: listing the policy again");
                match list(&replication.client, &replication.keys, &replication.load).await {
                    Ok(listing) => {
                        for error in &listing.errors {
                            tracing::error!(%error, "etcd: an object does not load; left out");
                        }
                        replication
                            .store
                            .replace(listing.policy, listing.revision)
                            .await;
                        read_at = listing.read_at;
                        backoff = std::time::Duration::from_millis(50);
                    }
                    Err(error) => {
                        // Reads fail over by themselves.
                        tracing::warn!(%error, "etcd: relist failed; trying again");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                    }
                }
            }
        }
    }
}

/// Watches from `read_at + 1` until the stream ends; `read_at` follows what was applied.
async fn watch_once(replication: &Arc<Replication>, read_at: &mut u64) -> WatchEnd {
    let keys = &replication.keys;
    let all = keys.all();
    let create = rpc::WatchCreateRequest {
        key: all.clone().into_bytes(),
        range_end: client::prefix_end(all.as_bytes()),
        start_revision: i64::try_from(*read_at + 1).unwrap_or(i64::MAX),
        progress_notify: true,
        // Large revisions come in fragments (a batch is applied only once its revision is
        // whole: see below).
        fragment: true,
        ..Default::default()
    };
    let (_requests, mut stream) = match replication.client.watch(create).await {
        Ok((requests, stream, endpoint)) => {
            replication
                .watching
                .store(endpoint, std::sync::atomic::Ordering::Release);
            (requests, stream)
        }
        Err(error) => return WatchEnd::Broken(error.to_string()),
    };
    let restart = replication.restart_watch.notified();
    tokio::pin!(restart);
    // One revision's events, carried across the fragments of a response: a revision is
    // applied whole or not at all.
    let mut batch = Batch::default();
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            () = &mut restart => return WatchEnd::Broken("the watch went silent while the head moved".into()),
        };
        let response = match message {
            Some(Ok(response)) => response,
            Some(Err(status)) => return WatchEnd::Broken(status.message().to_string()),
            None => return WatchEnd::Broken("the watch stream ended".into()),
        };
        if response.compact_revision > 0 {
            return WatchEnd::Relist(format!(
                "the watch from revision {} is compacted (oldest kept {})",
                *read_at + 1,
                response.compact_revision
            ));
        }
        if response.canceled {
            return WatchEnd::Broken(format!("watch canceled: {}", response.cancel_reason));
        }
        let header = response.header.as_ref().map_or(0, |h| h.revision);
        if header > 0 && (header as u64) < *read_at {
            return WatchEnd::Relist(format!(
                "etcd's revision went backwards ({header} < {read_at})"
            ));
        }
        for event in response.events {
            let Some(kv) = event.kv else { continue };
            let revision = u64::try_from(kv.mod_revision).unwrap_or(0);
            if revision != batch.revision && batch.revision != 0 {
                let done = batch.revision;
                replication.apply(std::mem::take(&mut batch)).await;
                *read_at = (*read_at).max(done);
            }
            batch.revision = revision;
            let key = String::from_utf8_lossy(&kv.key).to_string();
            let deleted = event.r#type == rpc::event::EventType::Delete as i32;
            if let Some(id) = key.strip_prefix(&keys.replicas()) {
                batch
                    .replicas
                    .push((id.to_string(), (!deleted).then_some(kv.value)));
            } else if key == keys.head() {
                batch.policy_moved = true;
            } else if let Some(object) = keys.object_of(&key) {
                batch.policy_moved = true;
                if deleted {
                    batch.policy.push((object, None));
                } else {
                    match decode(&key, &kv.value, &replication.load) {
                        Ok(state) if ObjectRef::of(&state) == object => {
                            batch.policy.push((object, Some(state)));
                        }
                        Ok(_) => {
                            tracing::error!(%key, "etcd: the object does not match its key; left as it was");
                        }
                        Err(error) => {
                            tracing::error!(%error, "etcd: an object does not load; left as it was");
                        }
                    }
                }
            }
        }
        // A response ends a revision unless more fragments of it follow.
        if !response.fragment && batch.revision != 0 {
            let revision = batch.revision;
            replication.apply(std::mem::take(&mut batch)).await;
            *read_at = (*read_at).max(revision);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_round_trip() {
        let keys = Keys::new("/authzd");
        for object in [
            ObjectRef {
                kind: ObjectKind::RoleBinding,
                namespace: "dev".into(),
                name: "read".into(),
            },
            ObjectRef {
                kind: ObjectKind::ClusterRole,
                namespace: String::new(),
                name: "view".into(),
            },
        ] {
            let key = keys.object(&object);
            assert!(key.starts_with("/authzd/v1/objects/"), "{key}");
            assert_eq!(keys.object_of(&key), Some(object));
        }
        assert_eq!(keys.object_of("/authzd/v1/objects/roles/dev"), None);
        assert_eq!(keys.object_of("/authzd/v1/head"), None);
        assert_eq!(keys.object_of("/authzd/v1/objects/widgets/x"), None);
    }

    /// Every object of a synthetic policy (negations and deny rules included) reads back from
    /// its stored form as it was written, apart from where it was read from.
    #[test]
    fn stored_objects_decode_to_what_was_encoded() {
        let policy = crate::synth::policy(&crate::synth::Shape::with_bindings(2_000), 42);
        let keys = Keys::new("/authzd/");
        let options = LoadOptions::default();
        let field_policy = "apiVersion: authzd.io/v1alpha1\nkind: FieldPolicy\nmetadata: {name: fp}\nspec:\n  ignore: [\".status\"]\n  keyedLists: [{path: \".spec.containers\", keys: [name]}]\n  protected: [{path: \".data\", resources: [secrets]}]\n";
        let field_policies = parse_manifest("fp.yaml", field_policy, &options).unwrap();
        let gate = "apiVersion: authzd.io/v1alpha1\nkind: ChangeGate\nmetadata: {name: g}\nspec:\n  rules:\n  - name: keep\n    type: NeverRemove\n    subjects: [{kind: ServiceAccount, namespace: ns, name: sa}]\n    namespaces: [\"\", ns]\n    access: [{apiGroups: [\"\"], resources: [\"*\", \"-secrets\"], verbs: [get]}, {nonResourceURLs: [\"/x/*\"], verbs: [\"*\"]}]\n";
        let gates = parse_manifest("gate.yaml", gate, &options).unwrap();
        let objects = policy
            .roles
            .iter()
            .cloned()
            .map(|role| PolicyObject::Role(Arc::unwrap_or_clone(role)))
            .chain(
                policy
                    .bindings
                    .iter()
                    .cloned()
                    .map(|binding| PolicyObject::Binding(Arc::unwrap_or_clone(binding))),
            )
            .chain(field_policies)
            .chain(gates);
        let mut kinds = std::collections::BTreeSet::new();
        for object in objects {
            let reference = ObjectRef::of(&object);
            let key = keys.object(&reference);
            assert_eq!(keys.object_of(&key), Some(reference.clone()), "{key}");
            kinds.insert(reference.kind);
            let decoded = decode(&key, &encode(&object), &options).unwrap();
            assert!(
                crate::store::same_content(ObjectView::from(&object), &decoded),
                "{key}:\n{object:?}\n{decoded:?}"
            );
        }
        assert_eq!(kinds.len(), ObjectKind::ALL.len(), "{kinds:?}");
    }
}
