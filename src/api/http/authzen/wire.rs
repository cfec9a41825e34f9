//! The AuthZEN 1.0 request documents as JSON (the specification's §5 information model, its
//! §7–§8 requests and §9 pagination): read field by field with the JSON path of every bad
//! field, unknown fields ignored (§11.1.1: "receivers MUST ignore unknown fields"). What the
//! entities mean to authzd is `mapping.rs`'s; this file only reads them.

use serde_json::{Map, Value};

use super::super::document::{BodyError, Object};
use crate::api::limits::{DEFAULT_SEARCH_PAGE, MAX_SEARCH_PAGE};

/// A Subject or a Resource (§5.1, §5.2): `type` and `id` (required where the endpoint says),
/// and `properties`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entity {
    /// The JSON path of the entity (`subject`, `evaluations[2].resource`), for errors.
    pub path: String,
    pub kind: String,
    /// `None` when absent (searches omit the id of the entity searched for).
    pub id: Option<String>,
    pub properties: Map<String, Value>,
}

impl Entity {
    /// The id, required here: `{path}.id: is required` otherwise.
    pub fn required_id(&self) -> Result<&str, BodyError> {
        match self.id.as_deref() {
            Some(id) if !id.is_empty() => Ok(id),
            _ => Err(BodyError::field(
                &format!("{}.id", self.path),
                "is required",
            )),
        }
    }
}

/// An Action (§5.3): its `name` (its `properties` are not read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionEntity {
    pub path: String,
    pub name: String,
}

/// The four entities of one evaluation, each absent when the document leaves it out (the
/// Access Evaluations API fills absent ones from its defaults, §7.1.1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parts {
    pub subject: Option<Entity>,
    pub action: Option<ActionEntity>,
    pub resource: Option<Entity>,
    pub context: Option<Map<String, Value>>,
}

impl Parts {
    /// The entities of `object` (the document, or one item of `evaluations`).
    pub fn read(object: &Object<'_>) -> Result<Self, BodyError> {
        Ok(Parts {
            subject: entity(object, "subject")?,
            action: action(object)?,
            resource: entity(object, "resource")?,
            context: object.object("context")?.map(|c| c.map.clone()),
        })
    }

    /// `self`, each absent entity taken from `defaults` (§7.1.1: an item's key overrides the
    /// top-level one, whole).
    pub fn or(self, defaults: &Parts) -> Parts {
        Parts {
            subject: self.subject.or_else(|| defaults.subject.clone()),
            action: self.action.or_else(|| defaults.action.clone()),
            resource: self.resource.or_else(|| defaults.resource.clone()),
            context: self.context.or_else(|| defaults.context.clone()),
        }
    }

    /// The subject, required: `{at}subject: is required` otherwise.
    pub fn subject(&self, at: &str) -> Result<&Entity, BodyError> {
        self.subject.as_ref().ok_or_else(|| required(at, "subject"))
    }

    pub fn action(&self, at: &str) -> Result<&ActionEntity, BodyError> {
        self.action.as_ref().ok_or_else(|| required(at, "action"))
    }

    pub fn resource(&self, at: &str) -> Result<&Entity, BodyError> {
        self.resource
            .as_ref()
            .ok_or_else(|| required(at, "resource"))
    }
}

fn required(at: &str, key: &str) -> BodyError {
    BodyError::field(&format!("{at}{key}"), "is required")
}

/// A required, non-empty string field.
fn required_string(object: &Object<'_>, key: &str) -> Result<String, BodyError> {
    let value = object.string(key)?;
    if value.is_empty() {
        return Err(BodyError::field(&object.field_path(key), "is required"));
    }
    Ok(value)
}

fn entity(object: &Object<'_>, key: &str) -> Result<Option<Entity>, BodyError> {
    let Some(entity) = object.object(key)? else {
        return Ok(None);
    };
    let id = match entity.map.get("id") {
        None | Some(Value::Null) => None,
        Some(_) => Some(entity.string("id")?),
    };
    Ok(Some(Entity {
        kind: required_string(&entity, "type")?,
        id,
        properties: entity
            .object("properties")?
            .map(|p| p.map.clone())
            .unwrap_or_default(),
        path: entity.path,
    }))
}

fn action(object: &Object<'_>) -> Result<Option<ActionEntity>, BodyError> {
    let Some(action) = object.object("action")? else {
        return Ok(None);
    };
    Ok(Some(ActionEntity {
        name: required_string(&action, "name")?,
        path: action.path,
    }))
}

/// `options.evaluations_semantic` (§7.1.2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Semantic {
    /// Every item decided, every answer returned.
    #[default]
    ExecuteAll,
    /// Items decided in order up to the first that is not allowed (an item in error counts).
    DenyOnFirstDeny,
    /// Items decided in order up to the first that is allowed.
    PermitOnFirstPermit,
}

/// What `options` asks (§7.1.2), and authzd's own option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub semantic: Semantic,
    /// `options.reasons: true`: decisions carry why, and every answer its revision, in
    /// `context` (docs/authzen.md §3). An authzd option, as §7.1.2 lets a PDP define.
    pub reasons: bool,
}

impl Options {
    pub fn read(root: &Object<'_>) -> Result<Self, BodyError> {
        let Some(options) = root.object("options")? else {
            return Ok(Options::default());
        };
        let semantic = match options.string("evaluations_semantic")?.as_str() {
            "" | "execute_all" => Semantic::ExecuteAll,
            "deny_on_first_deny" => Semantic::DenyOnFirstDeny,
            "permit_on_first_permit" => Semantic::PermitOnFirstPermit,
            other => {
                return Err(BodyError::field(
                    &options.field_path("evaluations_semantic"),
                    &format!(
                        "`{other}` is not a semantic; use execute_all, deny_on_first_deny or permit_on_first_permit"
                    ),
                ))
            }
        };
        Ok(Options {
            semantic,
            reasons: options.bool("reasons")?,
        })
    }
}

/// `page` of a search request (§9.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRequest {
    /// The `next_token` of an earlier page, if this continues a search.
    pub token: Option<String>,
    /// Results per page: `limit` when given (0 and absent both mean the default), bounded.
    pub limit: usize,
}

impl PageRequest {
    pub fn read(root: &Object<'_>) -> Result<Self, BodyError> {
        let Some(page) = root.object("page")? else {
            return Ok(PageRequest {
                token: None,
                limit: DEFAULT_SEARCH_PAGE,
            });
        };
        let token = Some(page.string("token")?).filter(|t| !t.is_empty());
        let limit = match page.map.get("limit") {
            None | Some(Value::Null) => DEFAULT_SEARCH_PAGE,
            Some(value) => match value.as_u64() {
                Some(0) => DEFAULT_SEARCH_PAGE,
                Some(n) if n <= MAX_SEARCH_PAGE as u64 => n as usize,
                Some(n) => {
                    return Err(BodyError::field(
                        &page.field_path("limit"),
                        &format!("is {n}; the limit is {MAX_SEARCH_PAGE}"),
                    ))
                }
                None => {
                    return Err(BodyError::field(
                        &page.field_path("limit"),
                        "must be a non-negative integer",
                    ))
                }
            },
        };
        Ok(PageRequest { token, limit })
    }
}

/// `context.min_revision`, when the context carries one (docs/authzen.md §6).
pub fn min_revision(context: Option<&Map<String, Value>>) -> Result<u64, BodyError> {
    match context.and_then(|c| c.get("min_revision")) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value.as_u64().ok_or_else(|| {
            BodyError::field(
                "context.min_revision",
                "must be a non-negative integer (a policy revision)",
            )
        }),
    }
}

/// A JSON value written with its object keys sorted, at every depth: the same query sent
/// with its keys in another order reads the same (pagination's query fingerprint).
pub fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(json: &str) -> Result<Parts, BodyError> {
        let value: Value = serde_json::from_str(json).unwrap();
        Parts::read(&Object::root(&value).unwrap())
    }

    #[test]
    fn entities_name_their_bad_fields() {
        let read = parts(r#"{"subject": {"type": "user", "id": "a"}, "action": {"name": "get"}, "resource": {"type": "pods"}}"#).unwrap();
        assert_eq!(read.subject.as_ref().unwrap().required_id().unwrap(), "a");
        let error = read.resource.as_ref().unwrap().required_id().unwrap_err();
        assert_eq!(error.to_string(), "resource.id: is required");
        for (json, message) in [
            (r#"{"subject": {"id": "a"}}"#, "subject.type: is required"),
            (r#"{"subject": "alice"}"#, "subject: must be an object"),
            (r#"{"action": {}}"#, "action.name: is required"),
            (
                r#"{"action": {"name": 123}}"#,
                "action.name: must be a string",
            ),
            (
                r#"{"resource": {"type": "pods", "properties": 1}}"#,
                "resource.properties: must be an object",
            ),
        ] {
            assert_eq!(parts(json).unwrap_err().to_string(), message, "{json}");
        }
        // Unknown fields are ignored.
        assert!(parts(r#"{"foo": "bar", "subject": {"type": "user", "id": "a", "x": 1}}"#).is_ok());
    }

    #[test]
    fn items_take_absent_entities_from_the_defaults() {
        let defaults = parts(r#"{"subject": {"type": "user", "id": "a"}, "action": {"name": "get"}, "context": {"t": 1}}"#).unwrap();
        let item =
            parts(r#"{"action": {"name": "list"}, "resource": {"type": "pods", "id": "p"}}"#)
                .unwrap();
        let merged = item.or(&defaults);
        assert_eq!(merged.subject, defaults.subject);
        assert_eq!(merged.action.unwrap().name, "list");
        assert_eq!(merged.context, defaults.context);
        assert_eq!(
            parts("{}")
                .unwrap()
                .subject("evaluations[1].")
                .unwrap_err()
                .to_string(),
            "evaluations[1].subject: is required"
        );
    }

    #[test]
    fn options_and_pages_are_bounded_and_named() {
        let read = |json: &str| {
            let value: Value = serde_json::from_str(json).unwrap();
            let root = Object::root(&value).unwrap();
            (Options::read(&root), PageRequest::read(&root))
        };
        let (options, page) = read(
            r#"{"options": {"evaluations_semantic": "deny_on_first_deny", "reasons": true}, "page": {"limit": 2, "token": "t"}}"#,
        );
        assert_eq!(
            options.unwrap(),
            Options {
                semantic: Semantic::DenyOnFirstDeny,
                reasons: true
            }
        );
        assert_eq!(
            page.unwrap(),
            PageRequest {
                token: Some("t".into()),
                limit: 2
            }
        );
        let (options, _) = read(r#"{"options": {"evaluations_semantic": "all"}}"#);
        assert!(options
            .unwrap_err()
            .to_string()
            .starts_with("options.evaluations_semantic: `all`"));
        let (_, page) = read(r#"{"page": {"limit": -1}}"#);
        assert_eq!(
            page.unwrap_err().to_string(),
            "page.limit: must be a non-negative integer"
        );
        let (_, page) = read(r#"{"page": {"limit": 1000000}}"#);
        assert!(page
            .unwrap_err()
            .to_string()
            .starts_with("page.limit: is 1000000"));
        let (_, page) = read("{}");
        assert_eq!(page.unwrap().limit, DEFAULT_SEARCH_PAGE);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [2, {"q": 1, "p": 0}]}, "a": "s"}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a": "s", "b": {"x": [2, {"p": 0, "q": 1}], "y": 1}}"#)
                .unwrap();
        let (mut one, mut two) = (String::new(), String::new());
        canonical(&a, &mut one);
        canonical(&b, &mut two);
        assert_eq!(one, two);
        assert_eq!(one, r#"{"a":"s","b":{"x":[2,{"p":0,"q":1}],"y":1}}"#);
    }
}
