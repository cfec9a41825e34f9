//! Kubernetes API discovery, enough for kubectl to map a resource name to its group and
//! version (`deployments` to `apps/v1`) before it asks a review: kube-apiserver's legacy
//! discovery documents, `GET /api`, `/api/v1`, `/apis`, `/apis/{group}` and
//! `/apis/{group}/{version}`, shaped as upstream serves them (`APIVersions`,
//! `APIResourceList`, `APIGroupList`, `APIGroup`).
//!
//! * What they list: the built-in groups and resources of kube-apiserver 1.32 ([`builtin`]),
//!   plus every resource the policy in force names that the table lacks, so that
//!   `kubectl auth can-i get widgets.example.com` resolves (see [`PolicyResources`]).
//! * Aggregated discovery (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;...`) is
//!   declined as kube-apiserver would let a client fall back: every answer is plain
//!   `application/json`, without the `g`/`v`/`as` parameters, and client-go then reads the
//!   legacy documents and fetches each group version.
//! * Who may ask: any authenticated caller. kube-apiserver authorizes discovery through the
//!   `system:discovery` ClusterRole, bound to `system:authenticated` by default; authzd has no
//!   bootstrap roles, so it takes the same default as a fixed rule. The documents reveal the
//!   names of resources the policy mentions and the verbs its rules name on them: policy
//!   content, which no other endpoint gives a caller it has not identified (`/metrics` and
//!   the probes show none). A discovery request takes the same steps as every review
//!   (`GrpcApi::serve`: the authenticator chain, the listener rule, impersonation headers as
//!   `kubectl --as` sends them, the snapshot in force) with the privilege "any authenticated
//!   caller"; before the first policy it is refused with 503, as the reviews are.
//!
//! Nothing here is on the decision path: the policy's resources are computed from the
//! snapshot's compiled index when a discovery request first meets that snapshot, and kept
//! until the next one.

mod builtin;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwapOption;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::response::Response;
use axum::routing::{get, MethodRouter};
use http::StatusCode;
use serde_json::{json, Map, Value};
use tonic::metadata::MetadataMap;

use super::{status, HttpApi};
use crate::api::error::{bounded_message, ApiError, Result};
use crate::api::grpc::Review;
use crate::api::limits::ContentLimits;
use crate::policy::index::Index;
use crate::policy::model::PolicyRule;
use crate::serving::{Call, Privilege, Snapshot};

use builtin::{Group, Resource, GROUPS, READ_WRITE};

/// The version policy-named resources are served under, in every group.
const POLICY_VERSION: &str = "v1";

/// The discovery routes, each answering `GET` (and `HEAD`) only. They share one cache of the
/// policy's resources.
pub(super) fn routes() -> axum::Router<HttpApi> {
    let policy = PolicyCache::default();
    axum::Router::new()
        .route("/api", serve(&policy, |()| Asked::CoreVersions))
        .route("/api/v1", serve(&policy, |()| Asked::CoreResources))
        .route("/apis", serve(&policy, |()| Asked::Groups))
        .route(
            "/apis/{group}",
            serve(&policy, |Path(group): Path<String>| Asked::Group(group)),
        )
        .route(
            "/apis/{group}/{version}",
            serve(&policy, |Path((group, version)): Path<(String, String)>| {
                Asked::GroupVersion(group, version)
            }),
        )
}

/// `GET` of the document `asked` names from the path parameters `P`; any other method is
/// refused with a `Status`, as the webhook path refuses one.
fn serve<P>(
    policy: &PolicyCache,
    asked: impl Fn(P) -> Asked + Clone + Send + Sync + 'static,
) -> MethodRouter<HttpApi>
where
    P: FromRequestParts<HttpApi> + Send + 'static,
{
    let policy = policy.clone();
    get(
        move |State(api): State<HttpApi>, parameters: P, request: Request| {
            let policy = policy.clone();
            let asked = asked(parameters);
            async move { answer(api, policy, asked, request).await }
        },
    )
    .fallback(method_not_allowed)
}

async fn method_not_allowed() -> Response {
    status::failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        "discovery documents are read with GET",
    )
}

/// Which document a request asks for.
#[derive(Debug)]
enum Asked {
    /// `/api`: `APIVersions`.
    CoreVersions,
    /// `/api/v1`: the core group's `APIResourceList`.
    CoreResources,
    /// `/apis`: `APIGroupList`.
    Groups,
    /// `/apis/{group}`: `APIGroup`.
    Group(String),
    /// `/apis/{group}/{version}`: `APIResourceList`.
    GroupVersion(String, String),
}

/// Discovery as a call through `GrpcApi::serve`, for its authentication: nothing to convert,
/// any authenticated caller may ask, and the documents are built by the handler.
struct DiscoveryCall;

impl Review for DiscoveryCall {
    type Asked = ();
    /// The snapshot that admitted the call: the documents describe its policy.
    type Reply = Arc<Snapshot>;

    fn convert(self, _limits: &ContentLimits) -> Result<((), u64)> {
        Ok(((), 0))
    }

    fn privilege(_asked: &()) -> Privilege<'_> {
        Privilege::Authenticated
    }

    async fn answer(call: &Call<'_>, _asked: ()) -> Result<Arc<Snapshot>> {
        Ok(Arc::clone(call.snapshot()))
    }
}

async fn answer(api: HttpApi, policy: PolicyCache, asked: Asked, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    let server_address = server_address(&parts);
    let call = tonic::Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        DiscoveryCall,
    );
    let snapshot = match api.grpc.serve(call).await {
        Ok(snapshot) => snapshot,
        Err(error) => return refused(&error),
    };
    let policy = policy.for_snapshot(&snapshot);
    match document(&asked, &policy, &server_address) {
        Ok(document) => json(StatusCode::OK, &document),
        Err(missing) => {
            status::failure(StatusCode::NOT_FOUND, "NotFound", &bounded_message(missing))
        }
    }
}

// Every discovery answer is plain `application/json`, whatever the Accept header prefers:
// that is what declines aggregated discovery, and kubectl asks for nothing else here. These
// two are the only places that say how.

fn json(code: StatusCode, document: &Value) -> Response {
    status::json_response(code, document)
}

fn refused(error: &ApiError) -> Response {
    status::refusal(error)
}

/// Where the client reached this server (`host:port`), as `APIVersions` reports it: the
/// request's authority (HTTP/2) or `Host` header (HTTP/1.1) when it is a valid authority, else
/// empty.
fn server_address(parts: &http::request::Parts) -> String {
    if let Some(authority) = parts.uri.authority() {
        return authority.to_string();
    }
    parts
        .headers
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<http::uri::Authority>().ok())
        .map(|authority| authority.to_string())
        .unwrap_or_default()
}

/// The document asked for, or what is missing.
fn document(
    asked: &Asked,
    policy: &PolicyResources,
    server_address: &str,
) -> std::result::Result<Value, String> {
    match asked {
        Asked::CoreVersions => Ok(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        })),
        Asked::CoreResources => Ok(resource_list("", "v1", policy)),
        Asked::Groups => {
            let groups: Vec<Value> = served_groups(policy)
                .map(|group| group_document(&group))
                .collect();
            Ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        Asked::Group(name) => {
            let group = served_group(name, policy).ok_or_else(|| no_group(name))?;
            let mut document = group_document(&group);
            if let Value::Object(fields) = &mut document {
                fields.insert("kind".into(), json!("APIGroup"));
                fields.insert("apiVersion".into(), json!("v1"));
            }
            Ok(document)
        }
        Asked::GroupVersion(name, version) => {
            let group = served_group(name, policy).ok_or_else(|| no_group(name))?;
            if !group.versions.contains(&version.as_str()) {
                return Err(format!(
                    "the server has no version {version:?} of API group {name:?}"
                ));
            }
            Ok(resource_list(name, version, policy))
        }
    }
}

fn no_group(name: &str) -> String {
    format!("the server has no API group {name:?}")
}

/// A group of `/apis` as served: the table's, with `v1` added when the policy names
/// resources the table's versions lack, or one the policy alone names.
struct ServedGroup<'a> {
    name: &'a str,
    /// The preferred version first.
    versions: Vec<&'a str>,
}

fn served_groups(policy: &PolicyResources) -> impl Iterator<Item = ServedGroup<'_>> {
    let builtin = GROUPS
        .iter()
        .filter(|group| !group.name.is_empty())
        .map(|group| builtin_served(group, policy));
    let policy_only = policy
        .by_group
        .keys()
        .filter(|name| !name.is_empty() && builtin_group(name).is_none())
        .map(|name| ServedGroup {
            name,
            versions: vec![POLICY_VERSION],
        });
    builtin.chain(policy_only)
}

fn builtin_served<'a>(group: &'a Group, policy: &PolicyResources) -> ServedGroup<'a> {
    let mut versions: Vec<&str> = group.versions.iter().map(|v| v.version).collect();
    if policy.by_group.contains_key(group.name) && !versions.contains(&POLICY_VERSION) {
        versions.push(POLICY_VERSION);
    }
    ServedGroup {
        name: group.name,
        versions,
    }
}

/// A non-core group as served, `None` when neither the table nor the policy has it.
fn served_group<'a>(name: &'a str, policy: &'a PolicyResources) -> Option<ServedGroup<'a>> {
    if name.is_empty() {
        // The core group lives under `/api`.
        return None;
    }
    match builtin_group(name) {
        Some(group) => Some(builtin_served(group, policy)),
        None => policy.by_group.contains_key(name).then(|| ServedGroup {
            name,
            versions: vec![POLICY_VERSION],
        }),
    }
}

/// An `APIGroup` without its type: the shape `APIGroupList` lists.
fn group_document(group: &ServedGroup<'_>) -> Value {
    let version = |version: &str| {
        let group_version = format!("{}/{version}", group.name);
        json!({"groupVersion": group_version, "version": version})
    };
    let versions: Vec<Value> = group.versions.iter().map(|v| version(v)).collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group.name, "versions": versions, "preferredVersion": preferred})
}

fn builtin_group(name: &str) -> Option<&'static Group> {
    GROUPS.iter().find(|group| group.name == name)
}

/// The `APIResourceList` of a group version that is served (checked by the caller): the
/// table's resources and, in `v1`, the policy's, sorted by name as upstream lists them.
fn resource_list(group: &str, version: &str, policy: &PolicyResources) -> Value {
    let mut resources: Vec<Value> = Vec::new();
    let table = builtin_group(group)
        .and_then(|g| g.versions.iter().find(|v| v.version == version))
        .map_or(&[][..], |v| v.resources);
    for resource in table {
        resources.push(builtin_resource(resource));
        for sub in resource.subresources {
            let mut document = json!({
                "name": format!("{}/{}", resource.name, sub.name),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            if let (Some((group, version)), Value::Object(fields)) =
                (sub.kind_group_version, &mut document)
            {
                fields.insert("group".into(), json!(group));
                fields.insert("version".into(), json!(version));
            }
            resources.push(document);
        }
    }
    if version == POLICY_VERSION {
        for named in policy.by_group.get(group).into_iter().flatten() {
            resources.push(policy_resource(named));
        }
    }
    // By full name, as upstream lists them: `pods` < `pods/log` < `podtemplates`.
    let name_of = |document: &Value| document["name"].as_str().unwrap_or_default().to_owned();
    resources.sort_by_cached_key(name_of);
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let mut list = Map::new();
    list.insert("kind".into(), json!("APIResourceList"));
    // Upstream's `/api/v1` carries no apiVersion; every `/apis/...` list does.
    if !group.is_empty() {
        list.insert("apiVersion".into(), json!("v1"));
    }
    list.insert("groupVersion".into(), json!(group_version));
    list.insert("resources".into(), Value::Array(resources));
    Value::Object(list)
}

fn builtin_resource(resource: &Resource) -> Value {
    let mut document = json!({
        "name": resource.name,
        "singularName": resource.kind.to_lowercase(),
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": resource.verbs,
    });
    if let Value::Object(fields) = &mut document {
        if !resource.short_names.is_empty() {
            fields.insert("shortNames".into(), json!(resource.short_names));
        }
        if !resource.categories.is_empty() {
            fields.insert("categories".into(), json!(resource.categories));
        }
    }
    document
}

fn policy_resource(named: &NamedResource) -> Value {
    json!({
        "name": named.name,
        "singularName": named.singular_name,
        "namespaced": named.namespaced,
        "kind": named.kind,
        "verbs": named.verbs,
    })
}

/// The policy's resources of the last snapshot a discovery request met. A policy change
/// publishes a new snapshot, and the next request recomputes; the `Weak` tells snapshots
/// apart without keeping an old one's index alive (and keeps its allocation from being
/// reused for a new one).
#[derive(Clone, Default)]
struct PolicyCache(Arc<ArcSwapOption<PolicyResources>>);

impl PolicyCache {
    fn for_snapshot(&self, snapshot: &Arc<Snapshot>) -> Arc<PolicyResources> {
        let current = Arc::downgrade(snapshot);
        if let Some(cached) = self.0.load_full() {
            if Weak::ptr_eq(&cached.snapshot, &current) {
                return cached;
            }
        }
        let computed = Arc::new(PolicyResources::of(snapshot.engine.index(), current));
        // Two requests meeting a new snapshot at once both compute it; either result is right.
        self.0.store(Some(Arc::clone(&computed)));
        computed
    }
}

/// The resources a policy names that the built-in table lacks, by group (`""` is the core
/// group), each group's sorted by name. They are listed in `{group}/v1`.
///
/// * Every rule of every Role and ClusterRole (aggregated ClusterRoles by their effective
///   rules), deny rules included, and every ABAC line: each explicit API group with each
///   explicit resource. Wildcards (`*`, `*/scale`) and seed 003's negated entries (`-secrets`)
///   name nothing; names that are not lowercase DNS-style (`a-z`, `0-9`, `-`, `.`) are
///   skipped, as no API server could serve them.
/// * A resource the table has in another group is not listed in this one: rules often name
///   several groups and resources at once (`apiGroups: ["", apps]`, `resources: [pods,
///   deployments]`), and a core `deployments` would make kubectl resolve `deployments` to the
///   core group, which comes first.
/// * Namespaced (a rule cannot say; namespaced lets `-n` reach the review), with the verbs
///   the rules name (`*` as the eight verbs of a stored resource; negated verbs add
///   nothing). Kind and singular name come from the plural by English rules (`policies` ->
///   `policy` -> `Policy`; `-` and `.` start a new word: `cron-tabs` -> `CronTab`).
/// * A subresource (`widgets/scale`) is listed as upstream lists one: no singular name, its
///   resource's kind and scope; a resource named only through a subresource is listed too,
///   with no verbs, so that kubectl can resolve it.
struct PolicyResources {
    snapshot: Weak<Snapshot>,
    by_group: BTreeMap<String, Vec<NamedResource>>,
}

/// One policy-named resource as listed.
#[derive(Debug, PartialEq, Eq)]
struct NamedResource {
    name: String,
    singular_name: String,
    namespaced: bool,
    kind: String,
    verbs: Vec<String>,
}

impl PolicyResources {
    fn of(index: &Index, snapshot: Weak<Snapshot>) -> Self {
        let mut named = NamedVerbs::default();
        let cluster_roles = index.cluster_roles.roles.iter().flatten();
        let namespaced_roles = index
            .namespaces
            .iter()
            .flat_map(|(_, partition)| partition.roles.iter());
        for role in cluster_roles.chain(namespaced_roles) {
            for rule in role.rules() {
                named.add_rule(rule);
            }
        }
        for line in &index.abac.rules {
            let verbs: &[&str] = if line.readonly {
                &["get", "list", "watch"]
            } else {
                READ_WRITE
            };
            named.add(&line.api_group, &line.resource, verbs);
        }
        Self {
            snapshot,
            by_group: named.listed(),
        }
    }
}

/// What the policy names: `(group, resource or resource/subresource)` -> verbs.
#[derive(Default)]
struct NamedVerbs(BTreeMap<(String, String), BTreeSet<String>>);

impl NamedVerbs {
    fn add_rule(&mut self, rule: &PolicyRule) {
        let mut verbs: Vec<&str> = Vec::with_capacity(rule.verbs.len());
        for verb in &rule.verbs {
            match verb.as_str() {
                "*" => verbs.extend_from_slice(READ_WRITE),
                negated if negated.starts_with('-') => {}
                verb => verbs.push(verb),
            }
        }
        for group in &rule.api_groups {
            for resource in &rule.resources {
                self.add(group, resource, &verbs);
            }
        }
    }

    fn add(&mut self, group: &str, resource: &str, verbs: &[&str]) {
        if !is_api_group(group) || !is_resource(resource) {
            return;
        }
        let key = (group.to_owned(), resource.to_owned());
        let named = self.0.entry(key).or_default();
        for verb in verbs {
            if !named.contains(*verb) {
                named.insert((*verb).to_owned());
            }
        }
    }

    /// The resources to list, by group, without those the table serves (see
    /// [`PolicyResources`]).
    fn listed(self) -> BTreeMap<String, Vec<NamedResource>> {
        let mut listed: BTreeMap<String, BTreeMap<String, NamedResource>> = BTreeMap::new();
        for ((group, name), verbs) in self.0 {
            let (base, subresource) = match name.split_once('/') {
                Some((base, subresource)) => (base, Some(subresource)),
                None => (name.as_str(), None),
            };
            let builtin = builtin_resource_in(&group, base);
            if builtin.is_none() && builtin_anywhere(base) {
                continue;
            }
            let group_listed = listed.entry(group.clone()).or_default();
            let (kind, namespaced) = match builtin {
                Some(resource) => (resource.kind.to_owned(), resource.namespaced),
                None => (kind_of(base), true),
            };
            match subresource {
                None if builtin.is_some() => {}
                None => {
                    group_listed.insert(
                        name.clone(),
                        NamedResource {
                            singular_name: singular_of(&name),
                            name,
                            namespaced,
                            kind,
                            verbs: verbs.into_iter().collect(),
                        },
                    );
                }
                Some(subresource) => {
                    let served = builtin.is_some_and(|resource| {
                        resource.subresources.iter().any(|s| s.name == subresource)
                    });
                    if served {
                        continue;
                    }
                    if builtin.is_none() {
                        // Its resource, unless the policy names that itself (then it came
                        // first, with its own verbs: `widgets` sorts before `widgets/scale`).
                        group_listed
                            .entry(base.to_owned())
                            .or_insert_with(|| NamedResource {
                                name: base.to_owned(),
                                singular_name: singular_of(base),
                                namespaced,
                                kind: kind.clone(),
                                verbs: Vec::new(),
                            });
                    }
                    group_listed.insert(
                        name.clone(),
                        NamedResource {
                            name,
                            singular_name: String::new(),
                            namespaced,
                            kind,
                            verbs: verbs.into_iter().collect(),
                        },
                    );
                }
            }
        }
        listed
            .into_iter()
            .filter(|(_, resources)| !resources.is_empty())
            .map(|(group, resources)| (group, resources.into_values().collect()))
            .collect()
    }
}

/// A name part upstream could serve: lowercase letters, digits, `-` and `.`, starting with a
/// letter or digit (so neither a wildcard nor a negation).
fn is_dns_like(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// `""` (the core group) or a DNS-style group name.
fn is_api_group(group: &str) -> bool {
    group.is_empty() || is_dns_like(group)
}

/// `resource` or `resource/subresource`, each part DNS-style.
fn is_resource(resource: &str) -> bool {
    match resource.split_once('/') {
        Some((base, subresource)) => is_dns_like(base) && is_dns_like(subresource),
        None => is_dns_like(resource),
    }
}

fn builtin_resource_in(group: &str, name: &str) -> Option<&'static Resource> {
    builtin_group(group)?
        .versions
        .iter()
        .flat_map(|version| version.resources)
        .find(|resource| resource.name == name)
}

fn builtin_anywhere(name: &str) -> bool {
    GROUPS
        .iter()
        .flat_map(|group| group.versions)
        .flat_map(|version| version.resources)
        .any(|resource| resource.name == name)
}

/// English plural to singular, for the rules resource names follow: `policies` -> `policy`,
/// `classes` -> `class`, `boxes` -> `box`, `widgets` -> `widget`; a name that does not end
/// in `s` (or ends in `ss`, `us`, `is`: `status`, `analysis`) is its own singular. Rules,
/// not a dictionary: `caches` becomes `cach`. kubectl takes the singular only as another
/// name for the resource.
fn singular_of(plural: &str) -> String {
    if let Some(stem) = plural.strip_suffix("ies").filter(|stem| !stem.is_empty()) {
        return format!("{stem}y");
    }
    for sibilant in ["sses", "xes", "zes", "ches", "shes"] {
        if plural.len() > sibilant.len() && plural.ends_with(sibilant) {
            return plural[..plural.len() - 2].to_owned();
        }
    }
    match plural.strip_suffix('s') {
        Some(stem) if !stem.is_empty() && !stem.ends_with(['s', 'u', 'i']) => stem.to_owned(),
        _ => plural.to_owned(),
    }
}

/// A kind for a plural resource name: its singular in upper camel case, `-` and `.` starting
/// a new word (`cron-tabs` -> `CronTab`).
fn kind_of(plural: &str) -> String {
    let mut kind = String::with_capacity(plural.len());
    let mut word_start = true;
    for c in singular_of(plural).chars() {
        if c == '-' || c == '.' {
            word_start = true;
        } else if word_start {
            kind.push(c.to_ascii_uppercase());
            word_start = false;
        } else {
            kind.push(c);
        }
    }
    kind
}

#[cfg(test)]
mod tests;
