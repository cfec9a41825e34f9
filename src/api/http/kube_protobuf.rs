//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), as `kubectl auth can-i` and
//! `kubectl auth whoami` post their reviews: the envelope and the few objects authzd reads and
//! writes, converted to and from the JSON document the review endpoints work on.
//!
//! The envelope (k8s.io/apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`) is the
//! four magic bytes `k8s\0` and a `runtime.Unknown` (`pkg/runtime/generated.proto`): the
//! object's `apiVersion` and `kind`, and the object's own protobuf in `raw`. The objects are
//! the typed model of `crate::kube` (prost with upstream's field numbers, serde with its JSON
//! tags), so a protobuf request becomes exactly the JSON document the same review sent as
//! JSON would be, and the review endpoints read both alike; a JSON answer is encoded back the
//! same way.

use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::api::limits::MAX_REQUEST_BYTES;
use crate::kube::authentication::SelfSubjectReview;
use crate::kube::authorization::{
    SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};
use crate::kube::meta::Status;
use crate::kube::without_nulls;

/// The media type, in a Content-Type or an Accept header.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The bytes every Kubernetes protobuf body starts with: `k8s` and the encoding style, of which
/// only 0 (a `runtime.Unknown` follows) is defined.
const MAGIC: [u8; 4] = *b"k8s\0";

/// Why a body is not a Kubernetes protobuf object authzd reads, or an answer cannot be written
/// as one.
#[derive(Debug, Error)]
pub enum ProtobufError {
    #[error("Kubernetes protobuf body does not start with the magic bytes `k8s\\0`")]
    NoMagic,
    #[error("Kubernetes protobuf body holds nothing after its magic bytes")]
    Empty,
    #[error("Kubernetes protobuf body is larger than the limit of {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    #[error("Kubernetes protobuf envelope (runtime.Unknown) does not decode: {0}")]
    Envelope(prost::DecodeError),
    #[error("Kubernetes protobuf envelope names no apiVersion and kind")]
    Untyped,
    /// Upstream defines no content encoding; an encoded `raw` could not be read as protobuf.
    #[error(
        "Kubernetes protobuf envelope has contentEncoding `{0}`; only unencoded objects are read"
    )]
    ContentEncoding(String),
    #[error(
        "kind `{kind}` of `{api_version}` is not one authzd reads or writes as Kubernetes \
         protobuf; it does: {supported}",
        supported = supported_kinds()
    )]
    UnsupportedKind { api_version: String, kind: String },
    #[error("{kind} ({api_version}) in a Kubernetes protobuf body does not decode: {error}")]
    Object {
        api_version: String,
        kind: String,
        error: prost::DecodeError,
    },
    /// A JSON document that has no `apiVersion` and `kind` strings, or whose fields do not have
    /// the types of its kind's message.
    #[error("document cannot be written as Kubernetes protobuf: {0}")]
    Json(String),
}

// --- k8s.io/apimachinery pkg/runtime -----------------------------------------------------

/// `runtime.Unknown`: the envelope.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
    #[prost(string, tag = "3")]
    content_encoding: String,
    #[prost(string, tag = "4")]
    content_type: String,
}

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

// --- kinds ----------------------------------------------------------------------------------

/// The kinds this module reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    SubjectAccessReview,
    SelfSubjectAccessReview,
    LocalSubjectAccessReview,
    SelfSubjectRulesReview,
    SelfSubjectReview,
    Status,
}

/// Every kind by its `(apiVersion, kind)`.
const KINDS: [(&str, &str, Kind); 6] = [
    (
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        Kind::SubjectAccessReview,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        Kind::SelfSubjectAccessReview,
    ),
    (
        "authorization.k8s.io/v1",
        "LocalSubjectAccessReview",
        Kind::LocalSubjectAccessReview,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        Kind::SelfSubjectRulesReview,
    ),
    (
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        Kind::SelfSubjectReview,
    ),
    ("v1", "Status", Kind::Status),
];

fn supported_kinds() -> String {
    KINDS
        .iter()
        .map(|(api_version, kind, _)| format!("{kind} ({api_version})"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Kind {
    fn of(api_version: &str, kind: &str) -> Result<Self, ProtobufError> {
        KINDS
            .iter()
            .find(|(v, k, _)| *v == api_version && *k == kind)
            .map(|(_, _, known)| *known)
            .ok_or_else(|| ProtobufError::UnsupportedKind {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
            })
    }

    /// The object's protobuf as its JSON fields (without `apiVersion` and `kind`).
    fn to_json(self, raw: &[u8]) -> Result<Value, Failure> {
        match self {
            Kind::SubjectAccessReview | Kind::LocalSubjectAccessReview => {
                raw_to_json::<SubjectAccessReview>(raw)
            }
            Kind::SelfSubjectAccessReview => raw_to_json::<SelfSubjectAccessReview>(raw),
            Kind::SelfSubjectRulesReview => raw_to_json::<SelfSubjectRulesReview>(raw),
            Kind::SelfSubjectReview => raw_to_json::<SelfSubjectReview>(raw),
            Kind::Status => raw_to_json::<Status>(raw),
        }
    }

    /// The object's JSON document as its protobuf (`apiVersion`, `kind` and unknown fields are
    /// not read).
    fn to_raw(self, document: Value) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            Kind::SubjectAccessReview | Kind::LocalSubjectAccessReview => {
                json_to_raw::<SubjectAccessReview>(document)
            }
            Kind::SelfSubjectAccessReview => json_to_raw::<SelfSubjectAccessReview>(document),
            Kind::SelfSubjectRulesReview => json_to_raw::<SelfSubjectRulesReview>(document),
            Kind::SelfSubjectReview => json_to_raw::<SelfSubjectReview>(document),
            Kind::Status => json_to_raw::<Status>(document),
        }
    }
}

/// Why an object's own bytes did not convert.
enum Failure {
    Decode(prost::DecodeError),
    Json(serde_json::Error),
}

fn raw_to_json<M: Message + Default + Serialize>(raw: &[u8]) -> Result<Value, Failure> {
    let message = M::decode(raw).map_err(Failure::Decode)?;
    serde_json::to_value(&message).map_err(Failure::Json)
}

fn json_to_raw<M: Message + DeserializeOwned>(
    document: Value,
) -> Result<Vec<u8>, serde_json::Error> {
    Ok(serde_json::from_value::<M>(document)?.encode_to_vec())
}

// --- the envelope ------------------------------------------------------------------------------

/// The object in a Kubernetes protobuf body, as the JSON document upstream's JSON encoding of
/// it is, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    if body.len() > MAX_REQUEST_BYTES {
        return Err(ProtobufError::TooLarge);
    }
    let Some(envelope) = body.strip_prefix(&MAGIC) else {
        return Err(ProtobufError::NoMagic);
    };
    if envelope.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let unknown = Unknown::decode(envelope).map_err(ProtobufError::Envelope)?;
    if !unknown.content_encoding.is_empty() {
        return Err(ProtobufError::ContentEncoding(unknown.content_encoding));
    }
    let TypeMeta { api_version, kind } = unknown.type_meta.unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ProtobufError::Untyped);
    }
    let known = Kind::of(&api_version, &kind)?;
    let mut object = match known.to_json(&unknown.raw) {
        Ok(Value::Object(object)) => object,
        Ok(other) => {
            return Err(ProtobufError::Json(format!(
                "{kind} ({api_version}) converted to `{other}`, not an object"
            )))
        }
        Err(Failure::Decode(error)) => {
            return Err(ProtobufError::Object {
                api_version,
                kind,
                error,
            })
        }
        Err(Failure::Json(error)) => return Err(ProtobufError::Json(error.to_string())),
    };
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(object))
}

/// `document`, a JSON object with `apiVersion` and `kind` of a kind this module knows, as a
/// Kubernetes protobuf body. Null fields read as empty, as Go reads them; fields the kind's
/// message does not have are left out.
pub fn encode(document: &Value) -> Result<Vec<u8>, ProtobufError> {
    let type_string = |key| {
        document
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| ProtobufError::Json(format!("no `{key}` string")))
    };
    let api_version = type_string("apiVersion")?;
    let kind = type_string("kind")?;
    let raw = Kind::of(api_version, kind)?
        .to_raw(without_nulls(document))
        .map_err(|error| ProtobufError::Json(format!("{kind} ({api_version}): {error}")))?;
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }),
        raw,
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    Ok(body)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use std::collections::BTreeMap;

    use crate::kube::authentication::*;
    use crate::kube::authorization::*;
    use crate::kube::meta::*;

    /// `kubectl auth whoami` (kubectl 1.32), as captured: a SelfSubjectReview whose metadata
    /// and userInfo carry every string explicitly empty (gogo's non-nullable fields), metadata's
    /// `generation` (7) and `creationTimestamp` (8) included, as do the envelope's
    /// `contentEncoding` and `contentType`. By line: the magic; typeMeta; raw, holding metadata
    /// and status; contentEncoding and contentType.
    const KUBECTL_WHOAMI: &[u8] = b"k8s\x00\
        \x0a\x2d\x0a\x18authentication.k8s.io/v1\x12\x11SelfSubjectReview\
        \x12\x1a\
            \x0a\x10\x0a\x00\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\
            \x12\x06\x0a\x04\x0a\x00\x12\x00\
        \x1a\x00\x22\x00";

    #[test]
    fn kubectl_whoami_decodes_to_upstreams_json() {
        let document = decode(KUBECTL_WHOAMI).unwrap();
        assert_eq!(
            document,
            json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
                "metadata": {},
                "status": {"userInfo": {}}
            })
        );
    }

    /// One document of every kind, with every modelled field set.
    fn full_documents() -> Vec<Value> {
        let metadata = json!({"name": "n", "generateName": "g", "namespace": "ns", "uid": "u",
                              "resourceVersion": "7"});
        let resource = json!({
            "namespace": "ns", "verb": "list", "group": "apps", "version": "v1",
            "resource": "deployments", "subresource": "scale", "name": "web",
            "fieldSelector": {"rawSelector": "spec.nodeName=a",
                              "requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["a", "b"]}]},
            "labelSelector": {"requirements": [{"key": "app", "operator": "Exists"}]}
        });
        let status =
            json!({"allowed": true, "denied": true, "reason": "r", "evaluationError": "e"});
        vec![
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "metadata": metadata,
                   "spec": {"resourceAttributes": resource, "user": "alice", "groups": ["g1", "g2"],
                            "extra": {"scopes": ["a", "b"], "x": ["y"]}, "uid": "42"},
                   "status": status}),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
                   "metadata": {"namespace": "ns"},
                   "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}, "user": "bob"},
                   "status": {"allowed": false}}),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": metadata,
                   "spec": {"resourceAttributes": resource},
                   "status": status}),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "metadata": {},
            "spec": {"namespace": "dev"},
            "status": {
                "resourceRules": [
                    {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"],
                     "resourceNames": ["web"]},
                    {"verbs": ["*"]}
                ],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}],
                "incomplete": true,
                "evaluationError": "deny rules are not listed"
            }}),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                   "metadata": {},
                   "status": {"userInfo": {"username": "jane", "uid": "1", "groups": ["devs", "system:authenticated"],
                                           "extra": {"scopes": ["view"]}}}}),
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                   "message": "spec.user: must not be empty", "reason": "BadRequest", "code": 400,
                   "details": {"name": "n", "group": "g", "kind": "k", "uid": "u", "retryAfterSeconds": 3,
                               "causes": [{"reason": "FieldValueInvalid", "message": "must not be empty", "field": "spec.user"}]}}),
        ]
    }

    #[test]
    fn every_kind_round_trips_json_protobuf_json() {
        for document in full_documents() {
            let body = encode(&document).unwrap();
            assert!(body.starts_with(b"k8s\0"));
            assert_eq!(decode(&body).unwrap(), document);
            // And the bytes are stable: the same document encodes to the same bytes.
            assert_eq!(encode(&decode(&body).unwrap()).unwrap(), body);
        }
    }

    #[test]
    fn every_kind_round_trips_with_nothing_set() {
        for (api_version, kind, _) in KINDS {
            let body = encode(&json!({"apiVersion": api_version, "kind": kind})).unwrap();
            let document = decode(&body).unwrap();
            assert_eq!(document["apiVersion"], api_version);
            assert_eq!(document["kind"], kind);
            // The empty messages JSON always writes (`metadata: {}`) come back as present.
            let again = decode(&encode(&document).unwrap()).unwrap();
            assert_eq!(again, document, "{kind}");
        }
    }

    /// Upstream's `omitempty`: empty optional fields are left out; `metadata`, `spec`,
    /// `status`, `allowed`, the rule lists, `incomplete` and `verbs` are always written.
    #[test]
    fn empty_fields_are_written_as_upstream_writes_them() {
        let empty = |api_version, kind| {
            decode(&encode(&json!({"apiVersion": api_version, "kind": kind})).unwrap()).unwrap()
        };
        assert_eq!(
            empty("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {}, "spec": {}, "status": {"allowed": false}})
        );
        assert_eq!(
            empty("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                   "metadata": {}, "spec": {},
                   "status": {"resourceRules": [], "nonResourceRules": [], "incomplete": false}})
        );
        assert_eq!(
            empty("v1", "Status"),
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}})
        );
        let rules = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                           "status": {"resourceRules": [{}], "nonResourceRules": [{}]}});
        let decoded = decode(&encode(&rules).unwrap()).unwrap();
        assert_eq!(decoded["status"]["resourceRules"], json!([{"verbs": []}]));
        assert_eq!(
            decoded["status"]["nonResourceRules"],
            json!([{"verbs": []}])
        );
        // A selector requirement's key and operator are written even when empty.
        let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                         "spec": {"resourceAttributes": {"labelSelector": {"requirements": [{}]}}}});
        let decoded = decode(&encode(&sar).unwrap()).unwrap();
        assert_eq!(
            decoded["spec"]["resourceAttributes"],
            json!({"labelSelector": {"requirements": [{"key": "", "operator": ""}]}})
        );
    }

    /// The field numbers, pinned byte by byte to upstream's generated.proto (so a wrong tag
    /// fails here, not only against a real kubectl).
    #[test]
    fn field_numbers_are_upstreams() {
        let status = SubjectAccessReviewStatus {
            allowed: true,
            denied: true,
            reason: "r".into(),
            evaluation_error: "e".into(),
        };
        // allowed=1 (varint), reason=2, evaluationError=3, denied=4 (varint).
        assert_eq!(
            status.encode_to_vec(),
            b"\x08\x01\x12\x01r\x1a\x01e\x20\x01"
        );
        let attributes = ResourceAttributes {
            namespace: "a".into(),
            verb: "b".into(),
            group: "c".into(),
            version: "d".into(),
            resource: "e".into(),
            subresource: "f".into(),
            name: "g".into(),
            field_selector: Some(SelectorAttributes {
                raw_selector: "h".into(),
                requirements: vec![],
            }),
            label_selector: Some(SelectorAttributes {
                raw_selector: String::new(),
                requirements: vec![SelectorRequirement {
                    key: "k".into(),
                    operator: "o".into(),
                    values: vec!["v".into()],
                }],
            }),
        };
        assert_eq!(
            attributes.encode_to_vec(),
            b"\x0a\x01a\x12\x01b\x1a\x01c\x22\x01d\x2a\x01e\x32\x01f\x3a\x01g\x42\x03\x0a\x01h\x4a\x0b\x12\x09\x0a\x01k\x12\x01o\x1a\x01v"
        );
        let spec = SubjectAccessReviewSpec {
            resource_attributes: None,
            non_resource_attributes: Some(NonResourceAttributes {
                path: "p".into(),
                verb: "v".into(),
            }),
            user: "u".into(),
            groups: vec!["g".into()],
            extra: BTreeMap::from([(
                "k".into(),
                ExtraValue {
                    items: vec!["x".into()],
                },
            )]),
            uid: "i".into(),
        };
        // nonResourceAttributes=2 {path=1, verb=2}, user=3, groups=4, extra=5 (map entry
        // key=1, value=2 {items=1}), uid=6.
        assert_eq!(
            spec.encode_to_vec(),
            b"\x12\x06\x0a\x01p\x12\x01v\x1a\x01u\x22\x01g\x2a\x08\x0a\x01k\x12\x03\x0a\x01x\x32\x01i"
        );
        let rules = SubjectRulesReviewStatus {
            resource_rules: vec![ResourceRule {
                verbs: vec!["a".into()],
                api_groups: vec!["b".into()],
                resources: vec!["c".into()],
                resource_names: vec!["d".into()],
            }],
            non_resource_rules: vec![NonResourceRule {
                verbs: vec!["e".into()],
                non_resource_urls: vec!["f".into()],
            }],
            incomplete: true,
            evaluation_error: "g".into(),
        };
        assert_eq!(
            rules.encode_to_vec(),
            b"\x0a\x0c\x0a\x01a\x12\x01b\x1a\x01c\x22\x01d\x12\x06\x0a\x01e\x12\x01f\x18\x01\x22\x01g"
        );
        let user = UserInfo {
            username: "a".into(),
            uid: "b".into(),
            groups: vec!["c".into()],
            extra: BTreeMap::from([(
                "k".into(),
                ExtraValue {
                    items: vec!["x".into()],
                },
            )]),
        };
        assert_eq!(
            user.encode_to_vec(),
            b"\x0a\x01a\x12\x01b\x1a\x01c\x22\x08\x0a\x01k\x12\x03\x0a\x01x"
        );
        let status = Status {
            metadata: Some(ListMeta {}),
            status: "a".into(),
            message: "b".into(),
            reason: "c".into(),
            details: Some(StatusDetails {
                name: "d".into(),
                group: "e".into(),
                kind: "f".into(),
                uid: "g".into(),
                causes: vec![StatusCause {
                    reason: "h".into(),
                    message: "i".into(),
                    field: "j".into(),
                }],
                retry_after_seconds: 1,
            }),
            code: 2,
        };
        assert_eq!(
            status.encode_to_vec(),
            b"\x0a\x00\x12\x01a\x1a\x01b\x22\x01c\x2a\x19\x0a\x01d\x12\x01e\x1a\x01f\x22\x09\x0a\x01h\x12\x01i\x1a\x01j\x28\x01\x32\x01g\x30\x02"
        );
        let metadata = ObjectMeta {
            name: "a".into(),
            generate_name: "b".into(),
            namespace: "c".into(),
            uid: "d".into(),
            resource_version: "e".into(),
        };
        assert_eq!(
            metadata.encode_to_vec(),
            b"\x0a\x01a\x12\x01b\x1a\x01c\x2a\x01d\x32\x01e"
        );
        // The envelope: typeMeta=1 {apiVersion=1, kind=2}, raw=2, after the magic.
        let body = encode(&json!({"apiVersion": "v1", "kind": "Status", "code": 2})).unwrap();
        assert_eq!(
            body,
            b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Status\x12\x02\x30\x02"
        );
    }

    /// A SelfSubjectAccessReview as kubectl auth can-i builds it decodes to the document
    /// the review endpoint reads.
    #[test]
    fn a_kubectl_can_i_review_decodes_to_the_reviews_json() {
        let review = SelfSubjectAccessReview {
            metadata: Some(ObjectMeta::default()),
            spec: Some(SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: "dev".into(),
                    verb: "get".into(),
                    resource: "pods".into(),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: None,
            }),
            status: Some(SubjectAccessReviewStatus::default()),
        };
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: "authorization.k8s.io/v1".into(),
                kind: "SelfSubjectAccessReview".into(),
            }),
            raw: review.encode_to_vec(),
            content_encoding: String::new(),
            content_type: String::new(),
        };
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown.encode_to_vec());
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                   "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "dev", "verb": "get", "resource": "pods"}},
                   "status": {"allowed": false}})
        );
    }

    fn envelope(type_meta: Option<(&str, &str)>, raw: &[u8], content_encoding: &str) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: type_meta.map(|(api_version, kind)| TypeMeta {
                api_version: api_version.into(),
                kind: kind.into(),
            }),
            raw: raw.to_vec(),
            content_encoding: content_encoding.into(),
            content_type: String::new(),
        };
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn malformed_envelopes_are_refused_saying_why() {
        let message = |body: &[u8]| decode(body).unwrap_err().to_string();
        assert!(message(b"{\"kind\": \"SelfSubjectReview\"}").contains("magic bytes"));
        assert!(message(b"k8s").contains("magic bytes"));
        assert!(message(b"k8s\x01\x0a\x00").contains("magic bytes"));
        assert!(message(b"k8s\0").contains("nothing after"));
        // Truncated: typeMeta declares 45 bytes, 3 follow.
        assert!(message(b"k8s\0\x0a\x2d\x0a\x18a").contains("runtime.Unknown"));
        // A length of 2^63: refused, nothing allocated.
        let huge = b"k8s\0\x12\xff\xff\xff\xff\xff\xff\xff\xff\x7f";
        assert!(message(huge).contains("runtime.Unknown"));
        // A varint that never ends.
        assert!(
            message(b"k8s\0\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
                .contains("runtime.Unknown")
        );
        // typeMeta (a message) sent as a varint: a wrong wire type.
        assert!(message(b"k8s\0\x08\x01").contains("runtime.Unknown"));
        // Tag 0 is not a field.
        assert!(message(b"k8s\0\x00\x01").contains("runtime.Unknown"));
        // An object with no typeMeta.
        let untyped = envelope(None, b"\x0a\x00", "");
        assert!(message(&untyped).contains("no apiVersion and kind"));
        let kindless = envelope(Some(("authorization.k8s.io/v1", "")), b"", "");
        assert!(message(&kindless).contains("no apiVersion and kind"));
        let pod = envelope(Some(("v1", "Pod")), b"", "");
        let refused = message(&pod);
        assert!(refused.contains("`Pod` of `v1`"), "{refused}");
        assert!(
            refused.contains("SelfSubjectAccessReview (authorization.k8s.io/v1)"),
            "{refused}"
        );
        let v1beta1 = envelope(
            Some(("authorization.k8s.io/v1beta1", "SubjectAccessReview")),
            b"",
            "",
        );
        assert!(message(&v1beta1).contains("not one authzd reads"));
        let gzip = envelope(Some(("v1", "Status")), b"", "gzip");
        assert!(message(&gzip).contains("contentEncoding `gzip`"));
        // The object itself: spec (a message) sent as a varint.
        let wrong = envelope(
            Some(("authorization.k8s.io/v1", "SelfSubjectAccessReview")),
            b"\x10\x01",
            "",
        );
        let refused = message(&wrong);
        assert!(refused.starts_with("SelfSubjectAccessReview (authorization.k8s.io/v1) in a Kubernetes protobuf body does not decode"), "{refused}");
        // A string that is not UTF-8.
        let latin1 = envelope(
            Some(("authentication.k8s.io/v1", "SelfSubjectReview")),
            b"\x12\x05\x0a\x03\x0a\x01\xff",
            "",
        );
        assert!(message(&latin1).contains("does not decode"));
        let oversized = [b"k8s\0".as_slice(), &vec![0; MAX_REQUEST_BYTES]].concat();
        assert!(matches!(decode(&oversized), Err(ProtobufError::TooLarge)));
    }

    /// Every prefix of a good body, and every single-byte change of one, decodes or is refused:
    /// never a panic.
    #[test]
    fn mutated_bodies_never_panic() {
        let mut bodies: Vec<Vec<u8>> = full_documents()
            .iter()
            .map(|document| encode(document).unwrap())
            .collect();
        bodies.push(KUBECTL_WHOAMI.to_vec());
        let mut decoded = 0;
        for body in &bodies {
            for end in 0..body.len() {
                let _ = decode(&body[..end]);
            }
            for at in 0..body.len() {
                for byte in [0x00, 0x01, 0x7f, 0x80, 0xff, body[at] ^ 0x08] {
                    let mut mutated = body.clone();
                    mutated[at] = byte;
                    if decode(&mutated).is_ok() {
                        decoded += 1;
                    }
                }
            }
        }
        // Many changes (a byte of a string) still decode: the loop did decode, not only refuse.
        assert!(decoded > 100, "{decoded}");
    }

    #[test]
    fn answers_that_do_not_fit_are_refused_not_guessed() {
        let untyped = json!({"status": {"allowed": true}});
        assert!(encode(&untyped)
            .unwrap_err()
            .to_string()
            .contains("apiVersion"));
        let seed = json!({"apiVersion": "authorization.kubernetes.io/v1", "kind": "SubjectAccessReviewResponse", "allowed": true});
        assert!(matches!(
            encode(&seed),
            Err(ProtobufError::UnsupportedKind { .. })
        ));
        let wrong_type = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                "status": {"allowed": "yes"}});
        let refused = encode(&wrong_type).unwrap_err().to_string();
        assert!(
            refused.contains("SubjectAccessReview (authorization.k8s.io/v1)"),
            "{refused}"
        );
    }

    /// Nulls read as empty (Go's reading of JSON null); fields the message lacks are dropped.
    #[test]
    fn nulls_and_unknown_fields_in_answers_are_empty() {
        let document = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                              "metadata": {"creationTimestamp": null, "labels": {"a": "b"}},
                              "spec": {"groups": null, "user": "alice", "extra": {"k": [null, "v"]},
                                       "resourceAttributes": {"verb": "get", "surprise": [1, 2]}},
                              "status": {"allowed": true, "reason": null}});
        let decoded = decode(&encode(&document).unwrap()).unwrap();
        assert_eq!(
            decoded,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "metadata": {},
                   "spec": {"user": "alice", "extra": {"k": ["v"]}, "resourceAttributes": {"verb": "get"}},
                   "status": {"allowed": true}})
        );
    }
}
