//! `metav1` objects: the metadata a review carries and echoes, and `Status`, every refusal.

use prost::Message;
use serde::{Deserialize, Serialize};

use super::{always, is_zero};

/// `metav1.ObjectMeta`, only the fields a review may carry and echo.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[prost(string, tag = "5")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[prost(string, tag = "6")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// `metav1.ListMeta`, the metadata of a `Status`; none of its fields is ever set on a refusal.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default)]
pub struct ListMeta {}

/// `metav1.Status`: every refusal.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    #[prost(message, optional, tag = "1")]
    #[serde(serialize_with = "always")]
    pub metadata: Option<ListMeta>,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[prost(string, tag = "4")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[prost(message, optional, tag = "5")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[prost(int32, tag = "6")]
    #[serde(skip_serializing_if = "is_zero")]
    pub code: i32,
}

/// `metav1.StatusDetails`.
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatusDetails {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[prost(string, tag = "6")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[prost(message, repeated, tag = "4")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[prost(int32, tag = "5")]
    #[serde(skip_serializing_if = "is_zero")]
    pub retry_after_seconds: i32,
}

/// `metav1.StatusCause` (its Go field `Type` is `reason` on both wires).
#[derive(Clone, PartialEq, Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StatusCause {
    #[prost(string, tag = "1")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[prost(string, tag = "2")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[prost(string, tag = "3")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}
