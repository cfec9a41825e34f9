//! `authentication.k8s.io/v1`: `SelfSubjectReview` (`kubectl auth whoami`).

use std::collections::BTreeMap;

use prost::Message;
use serde::{Deserialize, Serialize};

use super::always;
use super::authorization::ExtraValue;
use super::meta::ObjectMeta;

/// `SelfSubjectReview` (`kubectl auth whoami`): no spec, the caller in `status.userInfo`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectReview {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    #[serde(serialize_with = "always")]
    pub status: Option<SelfSubjectReviewStatus>,
}

/// `SelfSubjectReviewStatus`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SelfSubjectReviewStatus {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub user_info: Option<UserInfo>,
}

/// `UserInfo` of authentication/v1.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UserInfo {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[prost(string, repeated, tag = "3")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[prost(btree_map = "string, message", tag = "4")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, ExtraValue>,
}
