//! `authorization.k8s.io/v1` (and v1beta1's spec): the access reviews, with KEP-4601's
//! selectors; KEP-5681's conditional fields (alpha, JSON only) beside them.

use std::collections::BTreeMap;

use prost::Message;
use serde::{Deserialize, Serialize};

use super::meta::ObjectMeta;
use super::{always, is_false};
use crate::request::{Action, Request};

/// `metav1.FieldSelectorRequirement` and `metav1.LabelSelectorRequirement`: the same fields
/// and numbers; `key` and `operator` are written even when empty.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelectorRequirement {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub operator: String,
    #[prost(string, repeated, tag = "3")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// `SubjectAccessReview`; also `LocalSubjectAccessReview`, whose fields and numbers are the
/// same.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectAccessReview {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    #[serde(serialize_with = "always")]
    pub spec: Option<SubjectAccessReviewSpec>,
    #[prost(message, optional, tag = "3")]
    #[serde(serialize_with = "always")]
    pub status: Option<SubjectAccessReviewStatus>,
}

/// `SelfSubjectAccessReview`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectAccessReview {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    #[serde(serialize_with = "always")]
    pub spec: Option<SelfSubjectAccessReviewSpec>,
    #[prost(message, optional, tag = "3")]
    #[serde(serialize_with = "always")]
    pub status: Option<SubjectAccessReviewStatus>,
}

/// `SubjectAccessReviewSpec`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectAccessReviewSpec {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[prost(string, repeated, tag = "4")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[prost(btree_map = "string, message", tag = "5")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, ExtraValue>,
    #[prost(string, tag = "6")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// `SelfSubjectAccessReviewSpec`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectAccessReviewSpec {
    #[prost(message, optional, tag = "1")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[prost(message, optional, tag = "2")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
}

/// `ExtraValue` of authorization/v1 and of authentication/v1: one repeated string at 1, a
/// plain list of strings in JSON.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExtraValue {
    #[prost(string, repeated, tag = "1")]
    pub items: Vec<String>,
}

/// `ResourceAttributes`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceAttributes {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub verb: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[prost(string, tag = "4")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[prost(string, tag = "5")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[prost(string, tag = "6")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[prost(string, tag = "7")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[prost(message, optional, tag = "8")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<SelectorAttributes>,
    #[prost(message, optional, tag = "9")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<SelectorAttributes>,
}

/// `FieldSelectorAttributes` and `LabelSelectorAttributes` (KEP-4601): the same fields and
/// numbers.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelectorAttributes {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub raw_selector: String,
    #[prost(message, repeated, tag = "2")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<SelectorRequirement>,
}

/// `NonResourceAttributes`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NonResourceAttributes {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub verb: String,
}

/// `SubjectAccessReviewStatus`: `allowed` is always written, the rest only when set.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectAccessReviewStatus {
    #[prost(bool, tag = "1")]
    pub allowed: bool,
    #[prost(bool, tag = "4")]
    #[serde(skip_serializing_if = "is_false")]
    pub denied: bool,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

/// `SelfSubjectRulesReview` (`kubectl auth can-i --list`).
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectRulesReview {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    #[serde(serialize_with = "always")]
    pub spec: Option<SelfSubjectRulesReviewSpec>,
    #[prost(message, optional, tag = "3")]
    #[serde(serialize_with = "always")]
    pub status: Option<SubjectRulesReviewStatus>,
}

/// `SelfSubjectRulesReviewSpec`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectRulesReviewSpec {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// `SubjectRulesReviewStatus`: the rule lists and `incomplete` are always written.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectRulesReviewStatus {
    #[prost(message, repeated, tag = "1")]
    pub resource_rules: Vec<ResourceRule>,
    #[prost(message, repeated, tag = "2")]
    pub non_resource_rules: Vec<NonResourceRule>,
    #[prost(bool, tag = "3")]
    pub incomplete: bool,
    #[prost(string, tag = "4")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

/// `ResourceRule`: `verbs` is always written.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceRule {
    #[prost(string, repeated, tag = "1")]
    pub verbs: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
}

/// `NonResourceRule`: `verbs` is always written.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NonResourceRule {
    #[prost(string, repeated, tag = "1")]
    pub verbs: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    #[serde(rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

/// v1beta1's `SubjectAccessReviewSpec`: v1's fields, with `groups` named `group` (v1 renamed
/// it). Its JSON form only: Kubernetes protobuf bodies are v1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubjectAccessReviewSpecV1beta1 {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(rename = "group", skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, ExtraValue>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl From<SubjectAccessReviewSpecV1beta1> for SubjectAccessReviewSpec {
    fn from(spec: SubjectAccessReviewSpecV1beta1) -> Self {
        let SubjectAccessReviewSpecV1beta1 {
            resource_attributes,
            non_resource_attributes,
            user,
            groups,
            extra,
            uid,
        } = spec;
        SubjectAccessReviewSpec {
            resource_attributes,
            non_resource_attributes,
            user,
            groups,
            extra,
            uid,
        }
    }
}

impl From<SubjectAccessReviewSpec> for SubjectAccessReviewSpecV1beta1 {
    fn from(spec: SubjectAccessReviewSpec) -> Self {
        let SubjectAccessReviewSpec {
            resource_attributes,
            non_resource_attributes,
            user,
            groups,
            extra,
            uid,
        } = spec;
        SubjectAccessReviewSpecV1beta1 {
            resource_attributes,
            non_resource_attributes,
            user,
            groups,
            extra,
            uid,
        }
    }
}

/// The spec of the review authzd sends a Webhook authorizer about `request` (upstream's
/// webhook authorizer fills the same fields): the attributes, the user, groups, extra and uid.
/// A non-resource request sends its attributes even when both are empty: they say
/// "non-resource".
impl From<&Request> for SubjectAccessReviewSpec {
    fn from(request: &Request) -> Self {
        let (resource_attributes, non_resource_attributes) = match &request.action {
            Action::Resource(r) => (
                Some(ResourceAttributes {
                    namespace: r.namespace.clone(),
                    verb: r.verb.clone(),
                    group: r.group.clone(),
                    version: r.version.clone(),
                    resource: r.resource.clone(),
                    subresource: r.subresource.clone(),
                    name: r.name.clone(),
                    field_selector: None,
                    label_selector: None,
                }),
                None,
            ),
            Action::NonResource(n) => (
                None,
                Some(NonResourceAttributes {
                    path: n.path.clone(),
                    verb: n.verb.clone(),
                }),
            ),
        };
        let user = &request.user;
        SubjectAccessReviewSpec {
            resource_attributes,
            non_resource_attributes,
            user: user.name.clone(),
            groups: user.groups.clone(),
            extra: user
                .extra
                .iter()
                .map(|(key, values)| {
                    let items = values.clone();
                    (key.clone(), ExtraValue { items })
                })
                .collect(),
            uid: user.uid.clone(),
        }
    }
}

/// KEP-5681 (alpha) on a review's spec: `conditionalAuthorization.mode` asks for conditions
/// (any value; honouring `HumanReadable` or `Optimized` is voluntary). JSON only: the KEP
/// gives the field no protobuf number yet, so it stands beside the spec, read from the same
/// document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConditionalSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditional_authorization: Option<ConditionalAuthorization>,
}

/// `spec.conditionalAuthorization`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConditionalAuthorization {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

impl ConditionalSpec {
    /// Whether the review asks for conditions.
    pub fn asks_conditions(&self) -> bool {
        self.conditional_authorization
            .as_ref()
            .is_some_and(|c| !c.mode.is_empty())
    }
}

/// KEP-5681 (alpha) on a review's status: a conditional answer is `allowed: false` with the
/// chain of condition sets (written by the webhook adapter from the engine's sets). JSON only,
/// as [`ConditionalSpec`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConditionalStatus {
    pub allowed: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    pub condition_set_chain: serde_json::Value,
}
