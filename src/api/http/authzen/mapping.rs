//! What AuthZEN's entities mean to authzd (docs/authzen.md §2): the one mapping from a
//! Subject, an Action and a Resource to the request a SubjectAccessReview asks, so that an
//! evaluation is decided exactly as the same review is. The mapped request is built as the
//! review's wire message and validated by the same conversion (`api::convert`), its errors
//! renamed to the AuthZEN document's paths.

use std::borrow::Cow;

use serde_json::Value;

use super::super::document::BodyError;
use super::wire::{ActionEntity, Entity};
use crate::api::convert;
use crate::api::error::{ApiError, Result};
use crate::api::limits::ContentLimits;
use crate::proto;
use crate::request::{self, UserInfo};

/// `subject.type` of a group: the id is the group, asked for by a user bound to nothing.
pub const GROUP: &str = "group";
/// `subject.type` of a Kubernetes service account: the id is `namespace:name`.
pub const SERVICE_ACCOUNT: &str = "serviceaccount";
/// `resource.type` of a non-resource URL: the id is the path (`/healthz`).
pub const ROUTE: &str = "route";

/// The key of `resource.properties` that is the namespace, not part of the object.
const NAMESPACE: &str = "namespace";

/// The user a Subject stands for (§5.1), its id required: a `user` (or any other type) is the
/// user named by the id; a `group` a user with no name in that group; a `serviceaccount`
/// (`namespace:name`) the service account's user with the groups Kubernetes gives it.
/// `properties.groups` adds groups; other properties are not read.
pub fn subject(entity: &Entity) -> Result<UserInfo> {
    let id = entity.required_id()?;
    let at = |key: &str| format!("{}.{key}", entity.path);
    let mut user = match entity.kind.as_str() {
        GROUP => UserInfo {
            groups: vec![id.to_string()],
            ..UserInfo::default()
        },
        SERVICE_ACCOUNT => {
            let parts = id.split_once(':').filter(|(namespace, name)| {
                !namespace.is_empty() && !name.is_empty() && !name.contains(':')
            });
            let Some((namespace, name)) = parts else {
                return Err(BodyError::field(
                    &at("id"),
                    &format!("`{id}` is not a service account; write it `namespace:name`"),
                )
                .into());
            };
            request::service_account(namespace, name)
        }
        _ => UserInfo {
            name: id.to_string(),
            ..UserInfo::default()
        },
    };
    user.groups.extend(groups(entity)?);
    let UserInfo { name, groups, .. } = user;
    let renames = [
        ("user".to_string(), at("id")),
        ("groups".to_string(), at("properties.groups")),
    ];
    convert::review_subject(name, String::new(), groups, Default::default())
        .map_err(|error| error.renamed(&borrowed(&renames)))
}

/// `properties.groups`: a list of strings.
fn groups(entity: &Entity) -> Result<Vec<String>, BodyError> {
    let path = format!("{}.properties.groups", entity.path);
    match entity.properties.get("groups") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(group) => Ok(group.clone()),
                _ => Err(BodyError::field(
                    &format!("{path}[{i}]"),
                    "must be a string",
                )),
            })
            .collect(),
        Some(_) => Err(BodyError::field(&path, "must be a list of strings")),
    }
}

/// Which id of a Resource the request reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Id {
    /// Required (evaluations, subject and action searches).
    Required,
    /// Ignored (resource search: the id is what is searched for, §8.5.1).
    Ignored,
}

/// The action on a Resource (§5.2) a request asks: `verb` (the Action's name, verbatim) on
/// the resource `resource.type` names (`resource[.group][/subresource]`: `pods`,
/// `deployments.apps`, `pods/log`), the object `resource.id` in the namespace
/// `resource.properties.namespace` (cluster scope without one), the other properties being
/// the object as content rules and conditions read it (`object.*`); or, for a `route`, `verb`
/// on the non-resource URL the id is.
pub fn target(
    verb: &ActionEntity,
    resource: &Entity,
    id: Id,
    limits: &ContentLimits,
) -> Result<(request::Action, Option<request::Content>)> {
    let name = match id {
        Id::Required => resource.required_id()?.to_string(),
        Id::Ignored => String::new(),
    };
    let at = |key: &str| format!("{}.{key}", resource.path);
    let (kind, content) = if resource.kind == ROUTE {
        let path = if name.is_empty() { "/".into() } else { name };
        let kind = proto::action::Kind::NonResourceAttributes(proto::NonResourceAttributes {
            path,
            verb: verb.name.clone(),
        });
        (kind, None)
    } else {
        let (resource_name, group, subresource) = resource_type(&resource.kind);
        let mut object = resource.properties.clone();
        let namespace = match object.remove(NAMESPACE) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(namespace)) => namespace,
            Some(_) => {
                return Err(
                    BodyError::field(&at("properties.namespace"), "must be a string").into(),
                )
            }
        };
        let kind = proto::action::Kind::ResourceAttributes(proto::ResourceAttributes {
            namespace,
            verb: verb.name.clone(),
            group: group.to_string(),
            version: String::new(),
            resource: resource_name.to_string(),
            subresource: subresource.to_string(),
            name,
            field_selector: None,
            label_selector: None,
        });
        let content = if object.is_empty() {
            None
        } else {
            let object = serde_json::to_vec(&object).map_err(|error| {
                ApiError::Malformed(format!("cannot encode {}: {error}", at("properties")))
            })?;
            Some(proto::Content {
                object,
                ..Default::default()
            })
        };
        (kind, content)
    };
    let renames = [
        (
            "action.resource_attributes.verb".to_string(),
            format!("{}.name", verb.path),
        ),
        (
            "action.non_resource_attributes.verb".to_string(),
            format!("{}.name", verb.path),
        ),
        (
            "action.resource_attributes.resource".to_string(),
            at("type"),
        ),
        ("action.resource_attributes.group".to_string(), at("type")),
        (
            "action.resource_attributes.subresource".to_string(),
            at("type"),
        ),
        ("action.resource_attributes.name".to_string(), at("id")),
        (
            "action.resource_attributes.namespace".to_string(),
            at("properties.namespace"),
        ),
        ("action.non_resource_attributes.path".to_string(), at("id")),
        ("content".to_string(), at("properties")),
        ("content.object".to_string(), at("properties")),
    ];
    let action = proto::Action { kind: Some(kind) };
    convert::action(Some(action), content, limits).map_err(|e| e.renamed(&borrowed(&renames)))
}

/// `content` with the request's `context` (§5.4), which CEL conditions read as `context`: a
/// request with a context and no properties carries a context alone. An empty context is
/// none.
pub fn with_context(
    content: Option<request::Content>,
    context: Option<&serde_json::Map<String, Value>>,
) -> Option<request::Content> {
    let Some(context) = context.filter(|c| !c.is_empty()) else {
        return content;
    };
    let mut content = content.unwrap_or_default();
    content.context = Some(Value::Object(context.clone()));
    Some(content)
}

/// `resource[.group][/subresource]`: the resource is up to the first `.` (resource names
/// have none; API groups do), the subresource after the first `/`.
pub fn resource_type(kind: &str) -> (&str, &str, &str) {
    let (base, subresource) = kind.split_once('/').unwrap_or((kind, ""));
    let (resource, group) = base.split_once('.').unwrap_or((base, ""));
    (resource, group, subresource)
}

/// The subject id a service account's user name is listed as (`namespace:name`).
pub fn service_account_id(user_name: &str) -> Cow<'_, str> {
    match user_name.strip_prefix(request::SERVICE_ACCOUNT_PREFIX) {
        Some(id) => Cow::Borrowed(id),
        None => Cow::Borrowed(user_name),
    }
}

fn borrowed(renames: &[(String, String)]) -> Vec<(&str, &str)> {
    renames
        .iter()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(path: &str, kind: &str, id: &str, properties: Value) -> Entity {
        Entity {
            path: path.into(),
            kind: kind.into(),
            id: Some(id.into()),
            properties: properties.as_object().cloned().unwrap_or_default(),
        }
    }

    fn verb(name: &str) -> ActionEntity {
        ActionEntity {
            path: "action".into(),
            name: name.into(),
        }
    }

    #[test]
    fn subjects_map_to_users_groups_and_service_accounts() {
        let jane = subject(&entity(
            "subject",
            "user",
            "jane",
            serde_json::json!({"groups": ["dev"]}),
        ))
        .unwrap();
        assert_eq!(
            (jane.name.as_str(), jane.groups.clone()),
            ("jane", vec!["dev".to_string()])
        );
        let other = subject(&entity("subject", "identity", "x", Value::Null)).unwrap();
        assert_eq!(other.name, "x");
        let group = subject(&entity("subject", GROUP, "ops", Value::Null)).unwrap();
        assert_eq!(
            (group.name.as_str(), group.groups.clone()),
            ("", vec!["ops".to_string()])
        );
        let sa = subject(&entity(
            "subject",
            SERVICE_ACCOUNT,
            "kube-system:builder",
            Value::Null,
        ))
        .unwrap();
        assert_eq!(sa.name, "system:serviceaccount:kube-system:builder");
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system"
            ]
        );
        assert_eq!(service_account_id(&sa.name), "kube-system:builder");
        for (e, message) in [
            (
                entity("subject", SERVICE_ACCOUNT, "builder", Value::Null),
                "subject.id: `builder` is not a service account; write it `namespace:name`",
            ),
            (
                entity(
                    "evaluations[0].subject",
                    "user",
                    "a",
                    serde_json::json!({"groups": [1]}),
                ),
                "evaluations[0].subject.properties.groups[0]: must be a string",
            ),
            (
                entity("subject", "user", "", Value::Null),
                "subject.id: is required",
            ),
        ] {
            assert_eq!(subject(&e).unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn resources_map_to_attributes_and_content() {
        let limits = ContentLimits::default();
        let pod = entity(
            "resource",
            "pods",
            "web",
            serde_json::json!({"namespace": "dev", "ownerID": "jane"}),
        );
        let (action, content) = target(&verb("get"), &pod, Id::Required, &limits).unwrap();
        let request::Action::Resource(r) = action else {
            panic!("not a resource")
        };
        assert_eq!(
            (
                r.namespace.as_str(),
                r.verb.as_str(),
                r.resource.as_str(),
                r.name.as_str()
            ),
            ("dev", "get", "pods", "web")
        );
        let object: Value =
            serde_json::from_slice(content.unwrap().object.as_deref().unwrap()).unwrap();
        assert_eq!(object, serde_json::json!({"ownerID": "jane"}));

        let scale = entity("resource", "deployments.apps/scale", "d", Value::Null);
        let (action, content) = target(&verb("update"), &scale, Id::Required, &limits).unwrap();
        let request::Action::Resource(r) = action else {
            panic!("not a resource")
        };
        assert_eq!(
            (
                r.group.as_str(),
                r.resource.as_str(),
                r.subresource.as_str(),
                r.namespace.as_str()
            ),
            ("apps", "deployments", "scale", "")
        );
        assert!(content.is_none());

        let route = entity("resource", ROUTE, "/healthz", Value::Null);
        let (action, _) = target(&verb("get"), &route, Id::Required, &limits).unwrap();
        assert_eq!(
            action,
            request::Action::NonResource(request::NonResourceAttributes {
                path: "/healthz".into(),
                verb: "get".into()
            })
        );

        let bad = entity(
            "evaluations[2].resource",
            "pods",
            "p",
            serde_json::json!({"namespace": 3}),
        );
        let error = target(&verb("get"), &bad, Id::Required, &limits).unwrap_err();
        assert_eq!(
            error.to_string(),
            "evaluations[2].resource.properties.namespace: must be a string"
        );
        let long = entity("resource", &"p".repeat(5000), "p", Value::Null);
        let error = target(&verb("get"), &long, Id::Required, &limits).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("resource.type: is 5000 bytes long"),
            "{error}"
        );
        let no_id = entity("resource", "pods", "", Value::Null);
        assert_eq!(
            target(&verb("get"), &no_id, Id::Required, &limits)
                .unwrap_err()
                .to_string(),
            "resource.id: is required"
        );
        assert!(target(&verb("get"), &no_id, Id::Ignored, &limits).is_ok());
    }
}
