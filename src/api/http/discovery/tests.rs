//! The documents' shapes, the 404s, the policy's resources and who may ask, through the
//! whole HTTP router (so the discovery routes are tested beside the review routes they share
//! `/apis/...` with).

use std::sync::Arc;

use axum::body::Body;
use http::StatusCode;
use serde_json::{json, Value};
use tokio::sync::watch;
use tower::ServiceExt as _;

use super::builtin::{GROUPS, READ_WRITE};
use super::{kind_of, singular_of};
use crate::api::authn::{Authenticator, LocalIdentity, Peer};
use crate::api::error::ApiError;
use crate::api::grpc::GrpcApi;
use crate::api::http::{router, HttpApi};
use crate::cache::CacheConfig;
use crate::engine::EngineConfig;
use crate::policy::impact::Impact;
use crate::policy::model::{AbacRule, PolicySet};
use crate::request::UserInfo;
use crate::serving::ServingState;
use crate::store::{ChangeCause, Publisher as _};

/// Rules naming resources the table lacks, beside built-in ones, wildcards and negations.
const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widgets}
rules:
- apiGroups: [example.com]
  resources: [widgets, widgets/scale, "-gadgets", "*", "*/status"]
  verbs: [get, list, "-delete"]
- apiGroups: [example.com]
  resources: [gizmos/status]
  verbs: [update]
- apiGroups: ["*"]
  resources: [things]
  verbs: [get]
- apiGroups: ["", apps]
  resources: [pods, deployments, pods/resize, deployments/status, Bad_Name]
  verbs: ["*"]
- apiGroups: [apps]
  resources: [cron-tabs]
  verbs: [watch, get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-sprockets, namespace: dev}
rules:
- apiGroups: [""]
  resources: [sprockets]
  verbs: [delete]
  deny: true
"#;

fn policy_of(manifest: &str) -> PolicySet {
    let objects = crate::policy::load::parse_manifest(
        "discovery.yaml",
        manifest,
        &crate::policy::load::LoadOptions::default(),
    )
    .unwrap();
    let mut policy = PolicySet::default();
    for object in objects {
        policy.push(object)
    }
    policy.canonicalize();
    policy
}

/// Refuses every caller, as the chain refuses one without credentials.
struct NoOne;

impl Authenticator for NoOne {
    fn authenticate(&self, _peer: &Peer<'_>) -> crate::api::error::Result<Arc<UserInfo>> {
        Err(ApiError::Unauthenticated("no credentials".into()))
    }
}

fn api_with(state: &Arc<ServingState>, authenticator: Arc<dyn Authenticator>) -> HttpApi {
    let grpc = GrpcApi::new(Arc::clone(state), authenticator);
    let (_draining, draining) = watch::channel(false);
    HttpApi::new(
        grpc,
        Arc::clone(state),
        draining,
        "/authorize",
        crate::api::http::test_authzen(),
    )
}

/// A server holding `policy`, every caller authenticated as `me`.
fn serving(policy: &PolicySet) -> (Arc<ServingState>, HttpApi) {
    let state = Arc::new(ServingState::new(
        EngineConfig::default(),
        CacheConfig::default(),
    ));
    state.publish(policy, 1, &Impact::everything(), ChangeCause::Reload, None);
    let api = api_with(&state, Arc::new(LocalIdentity::new("me".into(), vec![])));
    (state, api)
}

struct Answer {
    status: StatusCode,
    content_type: String,
    body: Value,
}

async fn send(api: &HttpApi, request: http::Request<Body>) -> Answer {
    use http_body_util::BodyExt as _;
    let response = router(axum::Router::new(), api.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    Answer {
        status,
        content_type,
        body,
    }
}

/// `GET path` as kubectl asks it: aggregated discovery preferred, plain JSON accepted.
async fn get(api: &HttpApi, path: &str) -> Answer {
    let request = http::Request::get(path)
        .header(http::header::HOST, "127.0.0.1:6443")
        .header(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
             application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
             application/json",
        )
        .body(Body::empty())
        .unwrap();
    send(api, request).await
}

/// The body of a `200`, which must be plain JSON (aggregated discovery declined).
async fn document(api: &HttpApi, path: &str) -> Value {
    let answer = get(api, path).await;
    assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    assert_eq!(answer.content_type, "application/json", "{path}");
    answer.body
}

fn resource<'d>(list: &'d Value, name: &str) -> &'d Value {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn names(list: &Value) -> Vec<&str> {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|resource| resource["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn api_versions_name_v1_and_the_address_the_client_used() {
    let (_state, api) = serving(&PolicySet::default());
    assert_eq!(
        document(&api, "/api").await,
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}
            ]
        })
    );
    let no_host = http::Request::get("/api").body(Body::empty()).unwrap();
    let answer = send(&api, no_host).await;
    assert_eq!(
        answer.body["serverAddressByClientCIDRs"][0]["serverAddress"],
        ""
    );
    let bad_host = http::Request::get("/api")
        .header(http::header::HOST, "not a host/")
        .body(Body::empty())
        .unwrap();
    let answer = send(&api, bad_host).await;
    assert_eq!(
        answer.body["serverAddressByClientCIDRs"][0]["serverAddress"],
        ""
    );
}

#[tokio::test]
async fn the_core_group_lists_its_resources_and_subresources_as_upstream() {
    let (_state, api) = serving(&PolicySet::default());
    let core = document(&api, "/api/v1").await;
    assert_eq!(core["kind"], "APIResourceList");
    assert_eq!(core["groupVersion"], "v1");
    // Upstream's `/api/v1` has no apiVersion.
    assert!(core.get("apiVersion").is_none(), "{core}");
    assert_eq!(
        resource(&core, "pods"),
        &json!({
            "name": "pods",
            "singularName": "pod",
            "namespaced": true,
            "kind": "Pod",
            "verbs": READ_WRITE,
            "shortNames": ["po"],
            "categories": ["all"],
        })
    );
    assert_eq!(
        resource(&core, "pods/log"),
        &json!({
            "name": "pods/log",
            "singularName": "",
            "namespaced": true,
            "kind": "Pod",
            "verbs": ["get"],
        })
    );
    assert_eq!(resource(&core, "pods/exec")["kind"], "PodExecOptions");
    assert_eq!(
        resource(&core, "pods/exec")["verbs"],
        json!(["create", "get"])
    );
    assert_eq!(
        resource(&core, "pods/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    let eviction = resource(&core, "pods/eviction");
    assert_eq!(
        (&eviction["group"], &eviction["version"], &eviction["kind"]),
        (&json!("policy"), &json!("v1"), &json!("Eviction"))
    );
    let namespaces = resource(&core, "namespaces");
    assert_eq!(namespaces["namespaced"], false);
    assert!(!namespaces["verbs"]
        .as_array()
        .unwrap()
        .contains(&json!("deletecollection")));
    assert_eq!(resource(&core, "endpoints")["singularName"], "endpoints");
    assert!(resource(&core, "secrets").get("shortNames").is_none());
    // By name, each resource followed by its subresources.
    let listed = names(&core);
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(listed, sorted);
    let pods = listed.iter().position(|name| *name == "pods").unwrap();
    assert_eq!(listed[pods + 1], "pods/attach");
}

#[tokio::test]
async fn the_group_list_has_every_builtin_group_in_upstream_order() {
    let (_state, api) = serving(&PolicySet::default());
    let list = document(&api, "/apis").await;
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("APIGroupList"), &json!("v1"))
    );
    let groups = list["groups"].as_array().unwrap();
    let listed: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(
        listed,
        [
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "node.k8s.io",
            "discovery.k8s.io",
            "flowcontrol.apiserver.k8s.io",
        ]
    );
    let autoscaling = groups.iter().find(|g| g["name"] == "autoscaling").unwrap();
    assert_eq!(
        autoscaling,
        &json!({
            "name": "autoscaling",
            "versions": [
                {"groupVersion": "autoscaling/v2", "version": "v2"},
                {"groupVersion": "autoscaling/v1", "version": "v1"},
            ],
            "preferredVersion": {"groupVersion": "autoscaling/v2", "version": "v2"},
        })
    );
}

#[tokio::test]
async fn a_group_and_its_versions() {
    let (_state, api) = serving(&PolicySet::default());
    assert_eq!(
        document(&api, "/apis/apps").await,
        json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": "apps",
            "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"},
        })
    );
    let apps = document(&api, "/apis/apps/v1").await;
    assert_eq!(
        (&apps["kind"], &apps["apiVersion"], &apps["groupVersion"]),
        (&json!("APIResourceList"), &json!("v1"), &json!("apps/v1"))
    );
    assert_eq!(
        resource(&apps, "deployments")["shortNames"],
        json!(["deploy"])
    );
    assert_eq!(
        resource(&apps, "deployments/scale"),
        &json!({
            "name": "deployments/scale",
            "singularName": "",
            "namespaced": true,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        })
    );
    let authorization = document(&api, "/apis/authorization.k8s.io/v1").await;
    assert_eq!(
        names(&authorization),
        [
            "localsubjectaccessreviews",
            "selfsubjectaccessreviews",
            "selfsubjectrulesreviews",
            "subjectaccessreviews"
        ]
    );
    for review in authorization["resources"].as_array().unwrap() {
        assert_eq!(review["verbs"], json!(["create"]), "{review}");
    }
    assert_eq!(
        resource(&authorization, "localsubjectaccessreviews")["namespaced"],
        true
    );
    let authentication = document(&api, "/apis/authentication.k8s.io/v1").await;
    assert_eq!(
        names(&authentication),
        ["selfsubjectreviews", "tokenreviews"]
    );
    let hpa_v1 = document(&api, "/apis/autoscaling/v1").await;
    assert_eq!(
        resource(&hpa_v1, "horizontalpodautoscalers")["shortNames"],
        json!(["hpa"])
    );
}

async fn assert_not_found(api: &HttpApi, path: &str, says: &str) {
    let answer = get(api, path).await;
    assert_eq!(
        answer.status,
        StatusCode::NOT_FOUND,
        "{path}: {}",
        answer.body
    );
    assert_eq!(answer.body["kind"], "Status", "{path}");
    assert_eq!(answer.body["reason"], "NotFound", "{path}");
    assert_eq!(answer.body["code"], 404, "{path}");
    let message = answer.body["message"].as_str().unwrap();
    assert!(message.contains(says), "{path}: {message}");
}

#[tokio::test]
async fn unknown_groups_and_versions_are_404_statuses() {
    let (_state, api) = serving(&policy_of(POLICY));
    assert_not_found(
        &api,
        "/apis/nope.example.com",
        "no API group \"nope.example.com\"",
    )
    .await;
    assert_not_found(&api, "/apis/nope.example.com/v1", "no API group").await;
    assert_not_found(
        &api,
        "/apis/apps/v2",
        "no version \"v2\" of API group \"apps\"",
    )
    .await;
    // A group the policy names exists in `v1` only.
    assert_not_found(&api, "/apis/example.com/v2", "no version").await;
    // The core group is not under `/apis`, and has only `v1`.
    assert_not_found(&api, "/apis/v1", "no API group \"v1\"").await;
    assert_not_found(&api, "/api/v2", "no endpoint").await;
}

#[tokio::test]
async fn other_methods_are_refused_and_reviews_still_reach_their_endpoints() {
    let (_state, api) = serving(&policy_of(POLICY));
    let post = http::Request::post("/apis/apps/v1")
        .body(Body::from("{}"))
        .unwrap();
    let answer = send(&api, post).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.body["kind"], "Status");

    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}
    });
    let post = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        .body(Body::from(review.to_string()))
        .unwrap();
    let answer = send(&api, post).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(answer.body["status"]["allowed"], false);
}

#[tokio::test]
async fn resources_the_policy_names_are_listed_in_their_group() {
    let (_state, api) = serving(&policy_of(POLICY));
    let groups = document(&api, "/apis").await;
    let example = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|group| group["name"] == "example.com")
        .unwrap_or_else(|| panic!("no example.com in {groups}"));
    assert_eq!(
        example,
        &json!({
            "name": "example.com",
            "versions": [{"groupVersion": "example.com/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "example.com/v1", "version": "v1"},
        })
    );
    assert_eq!(
        document(&api, "/apis/example.com").await["kind"],
        "APIGroup"
    );

    let listed = document(&api, "/apis/example.com/v1").await;
    assert_eq!(listed["groupVersion"], "example.com/v1");
    // Not `gadgets` (negated), nor the wildcards; `gizmos` through its subresource only.
    assert_eq!(
        names(&listed),
        ["gizmos", "gizmos/status", "widgets", "widgets/scale"]
    );
    assert_eq!(
        resource(&listed, "widgets"),
        &json!({
            "name": "widgets",
            "singularName": "widget",
            "namespaced": true,
            "kind": "Widget",
            "verbs": ["get", "list"],
        })
    );
    assert_eq!(
        resource(&listed, "widgets/scale"),
        &json!({
            "name": "widgets/scale",
            "singularName": "",
            "namespaced": true,
            "kind": "Widget",
            "verbs": ["get", "list"],
        })
    );
    assert_eq!(resource(&listed, "gizmos")["verbs"], json!([]));
    assert_eq!(resource(&listed, "gizmos")["kind"], "Gizmo");
    assert_eq!(
        resource(&listed, "gizmos/status")["verbs"],
        json!(["update"])
    );

    // The core group gains what it lacks: a subresource of a built-in resource (its kind
    // and scope) and a resource only a deny rule names; not `deployments`, which is apps'.
    let core = document(&api, "/api/v1").await;
    assert_eq!(
        resource(&core, "pods/resize"),
        &json!({
            "name": "pods/resize",
            "singularName": "",
            "namespaced": true,
            "kind": "Pod",
            "verbs": READ_WRITE,
        })
    );
    assert_eq!(resource(&core, "sprockets")["verbs"], json!(["delete"]));
    assert_eq!(resource(&core, "sprockets")["kind"], "Sprocket");
    let core_names = names(&core);
    assert!(!core_names.contains(&"deployments"), "{core_names:?}");
    assert!(
        !core_names.iter().any(|name| name.contains("Bad")),
        "{core_names:?}"
    );
    assert_eq!(core_names.iter().filter(|name| **name == "pods").count(), 1);

    // apps gains `cron-tabs`, not `pods`, nor a second `deployments/status`.
    let apps = document(&api, "/apis/apps/v1").await;
    let app_names = names(&apps);
    assert!(!app_names.contains(&"pods") && !app_names.contains(&"pods/resize"));
    assert_eq!(
        app_names
            .iter()
            .filter(|n| **n == "deployments/status")
            .count(),
        1
    );
    assert_eq!(
        resource(&apps, "cron-tabs"),
        &json!({
            "name": "cron-tabs",
            "singularName": "cron-tab",
            "namespaced": true,
            "kind": "CronTab",
            "verbs": ["get", "watch"],
        })
    );
    // `things` names no group.
    assert!(!groups.to_string().contains("things"));
}

#[tokio::test]
async fn abac_lines_name_resources_too() {
    let mut policy = PolicySet::default();
    policy.abac.push(AbacRule {
        user: "alice".into(),
        readonly: true,
        api_group: "abac.example.com".into(),
        namespace: "*".into(),
        resource: "doohickeys".into(),
        ..AbacRule::default()
    });
    policy.abac.push(AbacRule {
        user: "bob".into(),
        api_group: "*".into(),
        namespace: "*".into(),
        resource: "everywhere".into(),
        ..AbacRule::default()
    });
    let (_state, api) = serving(&policy);
    let listed = document(&api, "/apis/abac.example.com/v1").await;
    assert_eq!(names(&listed), ["doohickeys"]);
    assert_eq!(
        resource(&listed, "doohickeys")["verbs"],
        json!(["get", "list", "watch"])
    );
    assert!(!document(&api, "/apis")
        .await
        .to_string()
        .contains("everywhere"));
}

/// The policy's resources follow the snapshot in force: a new policy's are served on the next
/// request, and the old ones are gone.
#[tokio::test]
async fn a_policy_change_changes_the_resources_served() {
    let (state, api) = serving(&policy_of(POLICY));
    assert_eq!(
        document(&api, "/apis/example.com/v1").await["resources"][0]["name"],
        "gizmos"
    );
    let changed = POLICY.replace("example.com", "example.org");
    state.publish(
        &policy_of(&changed),
        2,
        &Impact::everything(),
        ChangeCause::Reload,
        None,
    );
    assert_not_found(&api, "/apis/example.com/v1", "no API group").await;
    let listed = document(&api, "/apis/example.org/v1").await;
    assert!(names(&listed).contains(&"widgets"));
}

#[tokio::test]
async fn discovery_needs_an_authenticated_caller_and_a_policy() {
    let state = Arc::new(ServingState::new(
        EngineConfig::default(),
        CacheConfig::default(),
    ));
    let anyone = api_with(&state, Arc::new(LocalIdentity::new("me".into(), vec![])));
    let answer = get(&anyone, "/apis").await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert_eq!(answer.body["kind"], "Status");

    state.publish(
        &PolicySet::default(),
        1,
        &Impact::everything(),
        ChangeCause::Reload,
        None,
    );
    let no_one = api_with(&state, Arc::new(NoOne));
    for path in ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1"] {
        let answer = get(&no_one, path).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{path}: {}",
            answer.body
        );
        assert_eq!(answer.body["reason"], "Unauthorized", "{path}");
    }
    assert_eq!(get(&anyone, "/apis").await.status, StatusCode::OK);
}

#[test]
fn kinds_and_singular_names_follow_english_plurals() {
    for (plural, singular, kind) in [
        ("widgets", "widget", "Widget"),
        ("policies", "policy", "Policy"),
        ("classes", "class", "Class"),
        ("boxes", "box", "Box"),
        ("patches", "patch", "Patch"),
        ("status", "status", "Status"),
        ("address", "address", "Address"),
        ("analysis", "analysis", "Analysis"),
        ("data", "data", "Data"),
        ("cron-tabs", "cron-tab", "CronTab"),
        ("v1.things", "v1.thing", "V1Thing"),
        ("s", "s", "S"),
    ] {
        assert_eq!(singular_of(plural), singular, "{plural}");
        assert_eq!(kind_of(plural), kind, "{plural}");
    }
}

/// The table as data: verbs sorted and known, names unique and sorted (the order upstream
/// lists), subresources sorted, singular names (the kind in lower case) unique in a group.
#[test]
fn the_builtin_table_is_consistent() {
    const KNOWN_VERBS: &[&str] = &[
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    assert_eq!(GROUPS[0].name, "", "the core group comes first");
    let mut group_names: Vec<&str> = GROUPS.iter().map(|g| g.name).collect();
    group_names.sort_unstable();
    group_names.dedup();
    assert_eq!(group_names.len(), GROUPS.len(), "a group listed twice");
    for group in GROUPS {
        assert!(!group.versions.is_empty(), "{}", group.name);
        for version in group.versions {
            let context = format!("{}/{}", group.name, version.version);
            let names: Vec<&str> = version.resources.iter().map(|r| r.name).collect();
            assert!(
                names.windows(2).all(|w| w[0] < w[1]),
                "{context}: {names:?}"
            );
            let mut singulars: Vec<String> = version
                .resources
                .iter()
                .map(|r| r.kind.to_lowercase())
                .collect();
            singulars.sort_unstable();
            assert!(singulars.windows(2).all(|w| w[0] != w[1]), "{context}");
            for resource in version.resources {
                let verb_lists = std::iter::once(resource.verbs)
                    .chain(resource.subresources.iter().map(|s| s.verbs));
                for verbs in verb_lists {
                    assert!(!verbs.is_empty(), "{context} {}", resource.name);
                    assert!(verbs.windows(2).all(|w| w[0] < w[1]), "{context} {verbs:?}");
                    assert!(verbs.iter().all(|v| KNOWN_VERBS.contains(v)), "{verbs:?}");
                }
                let subs: Vec<&str> = resource.subresources.iter().map(|s| s.name).collect();
                assert!(subs.windows(2).all(|w| w[0] < w[1]), "{context}: {subs:?}");
            }
        }
    }
}
