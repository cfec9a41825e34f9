//! The Kubernetes objects authzd reads and writes, as one typed model: their JSON is serde's
//! (upstream's `json` tags: camelCase names, `omitempty` fields left out when empty, the others
//! always written), their Kubernetes protobuf is prost's (the field numbers of upstream's
//! `generated.proto`). The review endpoints read and answer them, the protobuf codec converts
//! them, and the Webhook authorizer's client sends them: one model, every path.
//!
//! Upstream's definitions: k8s.io/api `authorization/v1/types.go` and `generated.proto`,
//! `authentication/v1/types.go` and `generated.proto`; k8s.io/apimachinery
//! `pkg/apis/meta/v1/types.go` and `generated.proto`. Fields a review does not use (most of
//! `ObjectMeta`) are not modelled: prost skips them on decode, serde ignores them.

pub mod authentication;
pub mod authorization;
pub mod meta;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// Reads `value` (null members read as empty, as Go reads them) as `T`; an error names the
/// path of the field at fault (`spec.resourceAttributes.verb`).
pub fn from_document<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(without_nulls(value)).map_err(|error| FieldError {
        field: error.path().to_string(),
        problem: error.into_inner().to_string(),
    })
}

/// A document that does not read as its type: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

/// Go writes a struct field that is not a pointer even when it is empty (`omitempty` does not
/// apply to structs): an absent message is written as its empty value.
pub(crate) fn always<T, S>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error>
where
    T: Serialize + Default,
    S: Serializer,
{
    match value {
        Some(value) => value.serialize(serializer),
        None => T::default().serialize(serializer),
    }
}

/// `skip_serializing_if` for a bool field: serde passes a reference.
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

/// `skip_serializing_if` for a number field: serde passes a reference.
pub(crate) fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// `value` without its null members and list entries: Go's JSON decoding reads null as the
/// zero value, serde as a type error. Recursive: the documents given here were parsed with a
/// bounded depth (the HTTP adapter's document limit) or built by authzd.
pub fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|v| !v.is_null())
                .map(without_nulls)
                .collect(),
        ),
        other => other.clone(),
    }
}
