//! Request bodies: read bounded; parsed as Kubernetes protobuf when the Content-Type says so,
//! else as JSON or YAML, told apart by the body whatever JSON, YAML or text type is declared (or
//! none: `kubectl create --raw` sends none); then read field by field with the JSON path of every
//! bad field. A protobuf body becomes the JSON document the same object sent as JSON is, so the
//! field-by-field reading is one for both.

use axum::body::Body;
use http_body_util::BodyExt as _;
use serde_json::{Map, Value};

use thiserror::Error;

use super::kube_protobuf::{self, ProtobufError};
use crate::api::error::{ApiError, Invalid};
use crate::api::limits::MAX_REQUEST_BYTES;

/// How deep a request document may nest. Real review objects are 4 levels deep; anything
/// near this is an attack or a bug, refused before it can cost stack or time.
pub const MAX_DOCUMENT_DEPTH: usize = 32;

/// Why a body could not be used. Becomes the adapters' [`ApiError`] (and so a Kubernetes
/// `Status` response) through the one HTTP mapping, `status::refusal_answer`.
#[derive(Debug, Error)]
pub enum BodyError {
    /// Over [`MAX_REQUEST_BYTES`] (413).
    #[error("request body is larger than the limit of {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    /// Unreadable, not JSON/YAML, too deep, or not an object (400); names no field.
    #[error("{0}")]
    Malformed(String),
    /// A field of the wrong shape (400), by its JSON path.
    #[error("{field}: {problem}")]
    Field { field: String, problem: String },
    /// A Content-Type that is not read (415); the message names the ones that are.
    #[error("{0}")]
    UnsupportedMediaType(String),
}

impl BodyError {
    pub fn field(field: &str, problem: &str) -> Self {
        BodyError::Field {
            field: field.to_string(),
            problem: problem.to_string(),
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge => ApiError::TooLarge,
            BodyError::Malformed(message) => ApiError::Malformed(message),
            BodyError::Field { field, problem } => {
                ApiError::invalid(field, Invalid::Other(problem))
            }
            BodyError::UnsupportedMediaType(message) => ApiError::UnsupportedMediaType(message),
        }
    }
}

impl From<ProtobufError> for BodyError {
    fn from(error: ProtobufError) -> Self {
        match error {
            ProtobufError::TooLarge => BodyError::TooLarge,
            other => BodyError::Malformed(other.to_string()),
        }
    }
}

/// How a request body is read, as its Content-Type declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyMedia {
    /// JSON or YAML, told apart by the body ([`parse_document`]).
    JsonOrYaml,
    /// Kubernetes protobuf ([`kube_protobuf::MEDIA_TYPE`]), as kubectl's auth commands send.
    KubeProtobuf,
}

/// Content-Types read as JSON or YAML, besides any `+json` or `+yaml` type: the JSON and YAML
/// types, `text/plain`, and a form, which is what `curl -d` declares (seed 000's examples post
/// with it).
const JSON_OR_YAML_TYPES: [&str; 7] = [
    "application/json",
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "text/plain",
    "application/x-www-form-urlencoded",
];

/// What the 415 answer says is read.
const READ_MEDIA_TYPES: &str = "JSON or YAML (application/json, application/yaml, text/plain, \
     or no Content-Type) or Kubernetes protobuf (application/vnd.kubernetes.protobuf)";

impl BodyMedia {
    /// The body's media from its Content-Type: none (kubectl create --raw sends none) is JSON
    /// or YAML; a type that is neither read as JSON or YAML nor protobuf is refused (415),
    /// before the body is read.
    pub fn of(headers: &http::HeaderMap) -> Result<Self, BodyError> {
        let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
            return Ok(BodyMedia::JsonOrYaml);
        };
        let Ok(value) = value.to_str() else {
            return Err(BodyError::UnsupportedMediaType(format!(
                "the Content-Type is not readable text; send {READ_MEDIA_TYPES}"
            )));
        };
        let declared = media_type(value);
        if declared.is_empty()
            || JSON_OR_YAML_TYPES.contains(&declared.as_str())
            || declared.ends_with("+json")
            || declared.ends_with("+yaml")
        {
            Ok(BodyMedia::JsonOrYaml)
        } else if declared == kube_protobuf::MEDIA_TYPE {
            Ok(BodyMedia::KubeProtobuf)
        } else {
            Err(BodyError::UnsupportedMediaType(format!(
                "the Content-Type `{declared}` is not read here; send {READ_MEDIA_TYPES}"
            )))
        }
    }
}

/// The media type of a Content-Type or an Accept entry: what precedes its parameters, trimmed,
/// lower-case (media types are case-insensitive).
pub fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The body as a JSON document, read as `media` says.
pub fn parse_body(media: BodyMedia, bytes: &[u8]) -> Result<Value, BodyError> {
    match media {
        BodyMedia::JsonOrYaml => parse_document(bytes),
        BodyMedia::KubeProtobuf => Ok(kube_protobuf::decode(bytes)?),
    }
}

/// Reads the whole body, refusing more than [`MAX_REQUEST_BYTES`] whether or not it declared
/// a Content-Length (chunked bodies are counted as they arrive).
pub async fn read_body(headers: &http::HeaderMap, body: Body) -> Result<Vec<u8>, BodyError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_REQUEST_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    match http_body_util::Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes().to_vec()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(error) => Err(BodyError::Malformed(format!(
            "cannot read the request body: {error}"
        ))),
    }
}

/// Parses one JSON or YAML document. JSON is tried first when the body looks like JSON (its
/// errors are clearer); everything else is YAML, of which JSON is a subset.
pub fn parse_document(bytes: &[u8]) -> Result<Value, BodyError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| BodyError::Malformed("request body is not UTF-8 text".to_string()))?;
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(BodyError::Malformed("request body is empty".to_string()));
    }
    let value = if trimmed.starts_with('{') {
        // serde_json stops at 128 levels by itself; the depth check below is stricter.
        serde_json::from_str::<Value>(text).map_err(|error| {
            BodyError::Malformed(format!("request body is not valid JSON: {error}"))
        })?
    } else {
        let options = serde_saphyr::Options {
            budget: Some(serde_saphyr::Budget {
                max_documents: 1,
                max_depth: MAX_DOCUMENT_DEPTH,
                ..serde_saphyr::Budget::default()
            }),
            duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
            strict_booleans: true,
            with_snippet: false,
            ..serde_saphyr::Options::default()
        };
        serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|error| {
            BodyError::Malformed(format!(
                "request body is not valid JSON or YAML: {}",
                error.without_snippet()
            ))
        })?
    };
    if depth(&value) > MAX_DOCUMENT_DEPTH {
        return Err(BodyError::Malformed(format!(
            "request body nests deeper than {MAX_DOCUMENT_DEPTH} levels"
        )));
    }
    Ok(value)
}

/// Nesting depth, iteratively (a recursive walk is what the limit protects against).
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((value, level)) = pending.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => pending.extend(map.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

/// An object in the document and its JSON path, for error messages.
#[derive(Clone)]
pub struct Object<'a> {
    pub map: &'a Map<String, Value>,
    pub path: String,
}

impl<'a> Object<'a> {
    /// The document root, which must be an object.
    pub fn root(value: &'a Value) -> Result<Self, BodyError> {
        match value {
            Value::Object(map) => Ok(Object {
                map,
                path: String::new(),
            }),
            _ => Err(BodyError::Malformed(
                "request body must be an object".to_string(),
            )),
        }
    }

    pub fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    /// A nested object; `None` when absent or null.
    pub fn object(&self, key: &str) -> Result<Option<Object<'a>>, BodyError> {
        let path = self.field_path(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Object { map, path })),
            Some(_) => Err(BodyError::field(&path, "must be an object")),
        }
    }

    /// A string; empty when absent or null.
    pub fn string(&self, key: &str) -> Result<String, BodyError> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(BodyError::field(&self.field_path(key), "must be a string")),
        }
    }

    /// A boolean; false when absent or null.
    pub fn bool(&self, key: &str) -> Result<bool, BodyError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(BodyError::field(&self.field_path(key), "must be a boolean")),
        }
    }

    /// A list of strings; empty when absent or null.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, BodyError> {
        string_list(self.get(key), &self.field_path(key))
    }

    /// A list of objects; empty when absent or null.
    pub fn objects(&self, key: &str) -> Result<Vec<Object<'a>>, BodyError> {
        let path = self.field_path(key);
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Object(map) => Ok(Object {
                        map,
                        path: format!("{path}[{i}]"),
                    }),
                    _ => Err(BodyError::field(
                        &format!("{path}[{i}]"),
                        "must be an object",
                    )),
                })
                .collect(),
            Some(_) => Err(BodyError::field(&path, "must be a list of objects")),
        }
    }
}

fn string_list(value: Option<&Value>, path: &str) -> Result<Vec<String>, BodyError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(BodyError::field(
                    &format!("{path}[{i}]"),
                    "must be a string",
                )),
            })
            .collect(),
        Some(_) => Err(BodyError::field(path, "must be a list of strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_give_the_same_document() {
        let json = parse_document(br#"{"spec": {"user": "alice", "groups": ["a"]}}"#).unwrap();
        let yaml = parse_document(b"spec:\n  user: alice\n  groups: [a]\n").unwrap();
        assert_eq!(json, yaml);
    }

    #[test]
    fn deep_documents_are_refused_not_recursed() {
        let deep_json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let wrapped = format!("{{\"a\": {deep_json}}}");
        assert!(matches!(
            parse_document(wrapped.as_bytes()),
            Err(BodyError::Malformed(_))
        ));
        let deep_yaml = format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse_document(deep_yaml.as_bytes()),
            Err(BodyError::Malformed(_))
        ));
        let just_over = format!("{{\"a\": {}{}}}", "[".repeat(40), "]".repeat(40));
        let BodyError::Malformed(message) = parse_document(just_over.as_bytes()).unwrap_err()
        else {
            panic!("not invalid")
        };
        assert!(message.contains("deeper than"), "{message}");
    }

    fn media_of(content_type: Option<&str>) -> Result<BodyMedia, BodyError> {
        let mut headers = http::HeaderMap::new();
        if let Some(content_type) = content_type {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_str(content_type).unwrap(),
            );
        }
        BodyMedia::of(&headers)
    }

    #[test]
    fn content_types_pick_the_reader_or_are_refused() {
        for read_as_json_or_yaml in [
            None,
            Some(""),
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("application/yaml"),
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("application/merge-patch+json"),
            Some("application/apply-patch+yaml"),
        ] {
            assert_eq!(
                media_of(read_as_json_or_yaml).unwrap(),
                BodyMedia::JsonOrYaml,
                "{read_as_json_or_yaml:?}"
            );
        }
        assert_eq!(
            media_of(Some("application/vnd.kubernetes.protobuf")).unwrap(),
            BodyMedia::KubeProtobuf
        );
        for refused in [
            "application/xml",
            "application/octet-stream",
            "multipart/form-data; boundary=x",
        ] {
            let error = media_of(Some(refused)).unwrap_err();
            let BodyError::UnsupportedMediaType(message) = &error else {
                panic!("{refused}: {error}")
            };
            assert!(message.contains(&media_type(refused)), "{message}");
            assert!(
                message.contains("application/vnd.kubernetes.protobuf"),
                "{message}"
            );
        }
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_bytes(b"application/\xffjson").unwrap(),
        );
        assert!(matches!(
            BodyMedia::of(&headers),
            Err(BodyError::UnsupportedMediaType(_))
        ));
    }

    #[test]
    fn protobuf_bodies_become_the_json_document() {
        let json = parse_body(
            BodyMedia::JsonOrYaml,
            br#"{"apiVersion": "v1", "kind": "Status", "code": 7}"#,
        )
        .unwrap();
        let protobuf = kube_protobuf::encode(&json).unwrap();
        let mut decoded = parse_body(BodyMedia::KubeProtobuf, &protobuf).unwrap();
        // JSON always writes Status's metadata.
        decoded.as_object_mut().unwrap().remove("metadata");
        assert_eq!(decoded, json);
        // A JSON body declared as protobuf is refused, saying why.
        let error = parse_body(BodyMedia::KubeProtobuf, br#"{"kind": "Status"}"#).unwrap_err();
        assert!(error.to_string().contains("magic bytes"), "{error}");
    }

    #[test]
    fn wrong_shapes_name_the_field() {
        let value = parse_document(br#"{"spec": {"groups": ["a", 7]}}"#).unwrap();
        let root = Object::root(&value).unwrap();
        let spec = root.object("spec").unwrap().unwrap();
        let error = spec.strings("groups").unwrap_err();
        assert!(matches!(error, BodyError::Field { .. }), "not invalid");
        assert_eq!(error.to_string(), "spec.groups[1]: must be a string");
    }
}
