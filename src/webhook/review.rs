//! The SubjectAccessReview a webhook is sent, and the status read back from its answer
//! (docs/semantics.md §8; upstream's `Authorize` in
//! `staging/src/k8s.io/apiserver/plugin/pkg/authorizer/webhook/webhook.go`).
//!
//! The spec is the typed model's (`crate::kube::authorization`), written once, as JSON: it is
//! both the cache key (upstream keys its cache on `json.Marshal(r.Spec)`) and the body's
//! `spec`. Fields come in the order of upstream's Go structs, and empty strings, lists and maps
//! are left out (`omitempty`), so the body reads as upstream's does.

use serde::Deserialize;

use super::WebhookVersion;
use crate::kube::authorization::{
    SubjectAccessReviewSpec, SubjectAccessReviewSpecV1beta1, SubjectAccessReviewStatus,
};
use crate::request::{Action, Request};

/// Upstream's `maxControlledAttrCacheSize`: a request whose requester-controlled attributes
/// add up to this many bytes or more is never cached (it may be an attempt to fill the cache).
pub(super) const MAX_CACHED_ATTRIBUTES_LEN: usize = 10_000;

/// The status of a SubjectAccessReview answer, as cached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ReviewStatus {
    pub allowed: bool,
    pub denied: bool,
    pub reason: String,
}

impl WebhookVersion {
    pub(super) fn api_version(self) -> &'static str {
        match self {
            WebhookVersion::V1 => "authorization.k8s.io/v1",
            WebhookVersion::V1beta1 => "authorization.k8s.io/v1beta1",
        }
    }
}

/// The JSON of `request`'s SubjectAccessReview spec in `version`'s shape (v1 renamed
/// v1beta1's `spec.group` to `spec.groups`).
pub(super) fn spec_json(request: &Request, version: WebhookVersion) -> String {
    let spec = SubjectAccessReviewSpec::from(request);
    let json = match version {
        WebhookVersion::V1 => serde_json::to_string(&spec),
        WebhookVersion::V1beta1 => {
            serde_json::to_string(&SubjectAccessReviewSpecV1beta1::from(spec))
        }
    };
    // Serializing strings and maps of strings into a String cannot fail; an empty object would
    // still be a well-formed spec if it ever did.
    json.unwrap_or_else(|_| "{}".to_string())
}

/// The request body: the review around a spec from [`spec_json`].
pub(super) fn body(spec_json: &str, version: WebhookVersion) -> String {
    format!(
        r#"{{"apiVersion":"{}","kind":"SubjectAccessReview","spec":{spec_json}}}"#,
        version.api_version()
    )
}

/// Upstream's `shouldCache`: the requester-controlled attributes (namespace, verb, group,
/// version, resource, subresource, name, path) add up to fewer than
/// [`MAX_CACHED_ATTRIBUTES_LEN`] bytes. The subject is not counted, as upstream.
pub(super) fn should_cache(action: &Action) -> bool {
    let len: usize = match action {
        Action::Resource(r) => [
            &r.namespace,
            &r.verb,
            &r.group,
            &r.version,
            &r.resource,
            &r.subresource,
            &r.name,
        ]
        .iter()
        .map(|field| field.len())
        .sum(),
        Action::NonResource(n) => n.path.len() + n.verb.len(),
    };
    len < MAX_CACHED_ATTRIBUTES_LEN
}

/// Reads the status of a webhook's answer. A JSON object is required; a missing `status`, or
/// missing or null fields in it, read as false and empty, as Go's decoder leaves them.
/// `evaluationError` is not read: upstream does not pass a webhook's own evaluation error on.
pub(super) fn decode_status(body: &[u8]) -> Result<ReviewStatus, String> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        status: Option<SubjectAccessReviewStatus>,
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("the answer has an empty body".to_string());
    }
    let not_a_review = |error: String| format!("the answer is not a SubjectAccessReview: {error}");
    let document: serde_json::Value =
        serde_json::from_slice(body).map_err(|error| not_a_review(error.to_string()))?;
    let answer: Answer =
        crate::kube::from_document(&document).map_err(|error| not_a_review(error.to_string()))?;
    let status = answer.status.unwrap_or_default();
    Ok(ReviewStatus {
        allowed: status.allowed,
        denied: status.denied,
        reason: status.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{NonResourceAttributes, ResourceAttributes, UserInfo};
    use serde_json::{json, Value};

    fn jane_reads_a_pod() -> Request {
        Request {
            user: UserInfo {
                name: "jane".into(),
                uid: "1".into(),
                groups: vec!["group1".into(), "group2".into()],
                extra: [("scopes".to_string(), vec!["a".to_string()])].into(),
            },
            action: Action::Resource(ResourceAttributes {
                namespace: "kittensandponies".into(),
                verb: "GET".into(),
                group: "group3".into(),
                version: "v7beta3".into(),
                resource: "pods".into(),
                subresource: "proxy".into(),
                name: "my-pod".into(),
            }),
        }
    }

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    /// Upstream's `TestV1Webhook` case 3, plus extra: verb case passes through unchanged.
    #[test]
    fn a_resource_request_in_v1() {
        let spec = spec_json(&jane_reads_a_pod(), WebhookVersion::V1);
        assert_eq!(
            parsed(&body(&spec, WebhookVersion::V1)),
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "namespace": "kittensandponies", "verb": "GET", "group": "group3",
                        "version": "v7beta3", "resource": "pods", "subresource": "proxy",
                        "name": "my-pod"
                    },
                    "user": "jane",
                    "groups": ["group1", "group2"],
                    "extra": {"scopes": ["a"]},
                    "uid": "1"
                }
            })
        );
        // Upstream's field order, so the body reads as upstream's.
        assert!(spec.starts_with(r#"{"resourceAttributes":{"namespace":"#));
        assert!(spec.ends_with(r#""uid":"1"}"#));
    }

    #[test]
    fn v1beta1_names_the_groups_group() {
        let spec = spec_json(&jane_reads_a_pod(), WebhookVersion::V1beta1);
        let review = parsed(&body(&spec, WebhookVersion::V1beta1));
        assert_eq!(review["apiVersion"], "authorization.k8s.io/v1beta1");
        assert_eq!(review["spec"]["group"], json!(["group1", "group2"]));
        assert!(review["spec"].get("groups").is_none());
    }

    /// Upstream's `TestV1Webhook` cases 1 and 2: empty strings are left out, and an empty
    /// non-resource request still says it is one.
    #[test]
    fn empty_fields_are_left_out() {
        let mut request = Request {
            user: UserInfo::default(),
            action: Action::NonResource(NonResourceAttributes::default()),
        };
        assert_eq!(
            parsed(&spec_json(&request, WebhookVersion::V1)),
            json!({"nonResourceAttributes": {}})
        );
        request.user.name = "jane".into();
        assert_eq!(
            parsed(&spec_json(&request, WebhookVersion::V1)),
            json!({"nonResourceAttributes": {}, "user": "jane"})
        );
        request.action = Action::Resource(ResourceAttributes {
            verb: "list".into(),
            resource: "pods".into(),
            ..ResourceAttributes::default()
        });
        assert_eq!(
            parsed(&spec_json(&request, WebhookVersion::V1)),
            json!({"resourceAttributes": {"verb": "list", "resource": "pods"}, "user": "jane"})
        );
    }

    #[test]
    fn the_spec_names_the_whole_request() {
        let request = jane_reads_a_pod();
        let mut other_extra = request.clone();
        other_extra
            .user
            .extra
            .insert("scopes".into(), vec!["b".into()]);
        let mut other_uid = request.clone();
        other_uid.user.uid = "2".into();
        let key = spec_json(&request, WebhookVersion::V1);
        assert_ne!(key, spec_json(&other_extra, WebhookVersion::V1));
        assert_ne!(key, spec_json(&other_uid, WebhookVersion::V1));
        assert_eq!(key, spec_json(&request.clone(), WebhookVersion::V1));
    }

    /// Upstream's "ridiculous" requests: 5 × 2000 bytes of attributes is not cached; the
    /// subject's size does not count.
    #[test]
    fn large_attributes_are_not_cached() {
        let long = |c: &str| c.repeat(2000);
        let ridiculous = Action::Resource(ResourceAttributes {
            namespace: "kittensandponies".into(),
            verb: long("v"),
            group: long("g"),
            version: long("a"),
            resource: long("r"),
            name: long("n"),
            ..ResourceAttributes::default()
        });
        assert!(!should_cache(&ridiculous));
        let just_under = Action::NonResource(NonResourceAttributes {
            path: "p".repeat(MAX_CACHED_ATTRIBUTES_LEN - 3),
            verb: "get".into(),
        });
        assert!(!should_cache(&just_under));
        let fits = Action::NonResource(NonResourceAttributes {
            path: "p".repeat(MAX_CACHED_ATTRIBUTES_LEN - 4),
            verb: "get".into(),
        });
        assert!(should_cache(&fits));
    }

    #[test]
    fn statuses_are_read_leniently_and_garbage_is_refused() {
        let status = |text: &str| decode_status(text.as_bytes());
        assert_eq!(
            status(
                r#"{"apiVersion":"authorization.k8s.io/v1","status":{"allowed":true,"reason":"ok"}}"#
            ),
            Ok(ReviewStatus {
                allowed: true,
                denied: false,
                reason: "ok".into()
            })
        );
        assert_eq!(
            status(r#"{"status":{"allowed":false,"denied":true}}"#),
            Ok(ReviewStatus {
                allowed: false,
                denied: true,
                reason: String::new()
            })
        );
        assert_eq!(
            status(r#"{"kind":"SubjectAccessReview"}"#),
            Ok(ReviewStatus::default())
        );
        assert_eq!(
            status(r#"{"status":{"allowed":null,"reason":null}}"#),
            Ok(ReviewStatus::default())
        );
        for garbage in [
            "",
            "  ",
            "not json",
            "[1,2]",
            r#"{"status":{"allowed":"yes"}}"#,
            "{",
        ] {
            assert!(status(garbage).is_err(), "{garbage:?} was read");
        }
    }
}
