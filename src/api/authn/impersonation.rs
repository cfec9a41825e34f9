//! Impersonation, with Kubernetes' headers and rules (kube-apiserver's impersonation filter):
//! `Impersonate-User`, `Impersonate-Group` (repeatable), `Impersonate-Uid` and
//! `Impersonate-Extra-KEY` (repeatable) on HTTP; the same names, lower-case, as gRPC metadata
//! (HTTP/2 and gRPC carry header names lower-case anyway, so one reader serves both).
//!
//! The authenticated caller must be allowed `impersonate` on each thing it asks to be, checked
//! through the policy like any privilege: `users` NAME (or `serviceaccounts` NAME in the
//! account's namespace, for `system:serviceaccount:NS:NAME`) and `groups` NAME in the core
//! group; `uids` UID and `userextras/KEY` VALUE in `authentication.k8s.io`. The request is
//! then served as the impersonated user, who gets `system:authenticated` (or
//! `system:unauthenticated` for `system:anonymous`) as upstream adds it, and — a service
//! account impersonated without groups — its fixed groups.

use std::collections::BTreeMap;

use tonic::metadata::MetadataMap;

use crate::api::error::{ApiError, Invalid, Result};
use crate::api::limits::{MAX_EXTRA_KEYS, MAX_EXTRA_VALUES, MAX_GROUPS, MAX_STRING_BYTES};
use crate::policy::model::SERVICE_ACCOUNT_PREFIX;
use crate::request::{Action, ResourceAttributes, UserInfo};
use crate::serving::{Impersonating, Needed};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
const ANONYMOUS: &str = "system:anonymous";
const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// Who a request asks to be served as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    user: String,
    groups: Vec<String>,
    uid: Option<String>,
    extra: BTreeMap<String, Vec<String>>,
}

impl Impersonation {
    /// The impersonation `metadata` asks for, if any. Headers other than `Impersonate-User`
    /// without it are refused, as upstream refuses them; so are values that are not text or
    /// are over the request limits.
    pub fn requested(metadata: &MetadataMap) -> Result<Option<Impersonation>> {
        // Most requests carry no impersonation header: one pass over the few header names,
        // no allocation, decides that.
        let asks = metadata.keys().any(|key| match key {
            tonic::metadata::KeyRef::Ascii(key) => key.as_str().starts_with("impersonate-"),
            tonic::metadata::KeyRef::Binary(_) => false,
        });
        if !asks {
            return Ok(None);
        }
        let text = |header: &str, value: &tonic::metadata::MetadataValue<_>| -> Result<String> {
            let value = value.to_str().map_err(|_| {
                ApiError::invalid(header, Invalid::Other("is not printable ASCII".into()))
            })?;
            if value.len() > MAX_STRING_BYTES {
                return Err(ApiError::invalid(
                    header,
                    Invalid::Other(format!("is longer than {MAX_STRING_BYTES} bytes")),
                ));
            }
            Ok(value.to_string())
        };
        let user = match metadata.get(USER) {
            Some(value) => Some(text(USER, value)?),
            None => None,
        };
        let mut groups = Vec::new();
        for value in metadata.get_all(GROUP) {
            groups.push(text(GROUP, value)?);
        }
        let uid = match metadata.get(UID) {
            Some(value) => Some(text(UID, value)?),
            None => None,
        };
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for key in metadata.keys() {
            let tonic::metadata::KeyRef::Ascii(key) = key else {
                continue;
            };
            let Some(escaped) = key.as_str().strip_prefix(EXTRA_PREFIX) else {
                continue;
            };
            // Header names cannot carry every character a key may hold, so upstream
            // percent-encodes them (`Impersonate-Extra-example.com%2fscopes`).
            let name = percent_decode(escaped).ok_or_else(|| {
                ApiError::invalid(
                    key.as_str(),
                    Invalid::Other("is not a valid percent-encoded extra key".into()),
                )
            })?;
            let values = extra.entry(name).or_default();
            for value in metadata.get_all(key.as_str()) {
                values.push(text(key.as_str(), value)?);
            }
            if values.len() > MAX_EXTRA_VALUES {
                return Err(ApiError::invalid(
                    key.as_str(),
                    Invalid::Other(format!("has more than {MAX_EXTRA_VALUES} values")),
                ));
            }
        }
        if groups.len() > MAX_GROUPS {
            return Err(ApiError::invalid(
                GROUP,
                Invalid::Other(format!("has more than {MAX_GROUPS} values")),
            ));
        }
        if extra.len() > MAX_EXTRA_KEYS {
            return Err(ApiError::invalid(
                EXTRA_PREFIX,
                Invalid::Other(format!("has more than {MAX_EXTRA_KEYS} keys")),
            ));
        }
        let Some(user) = user.filter(|user| !user.is_empty()) else {
            // Upstream: "requested [...] without impersonating a user".
            return Err(ApiError::invalid(
                USER,
                Invalid::Other(
                    "is required when impersonating groups, a uid or extra values".into(),
                ),
            ));
        };
        Ok(Some(Impersonation {
            user,
            groups,
            uid,
            extra,
        }))
    }

    /// What the caller must be allowed, in upstream's order: the user (or service account),
    /// each group, each extra value, the uid.
    pub fn needed(&self) -> Vec<Needed> {
        let impersonate =
            |group: &str, resource: &str, subresource: &str, namespace: &str, name: &str| {
                Action::Resource(ResourceAttributes {
                    namespace: namespace.to_string(),
                    verb: "impersonate".to_string(),
                    group: group.to_string(),
                    version: String::new(),
                    resource: resource.to_string(),
                    subresource: subresource.to_string(),
                    name: name.to_string(),
                })
            };
        let mut needed = Vec::new();
        needed.push(match service_account(&self.user) {
            Some((namespace, name)) => Needed {
                action: impersonate("", "serviceaccounts", "", namespace, name),
                what: format!("serviceaccounts {name:?} in namespace {namespace:?}"),
            },
            None => Needed {
                action: impersonate("", "users", "", "", &self.user),
                what: format!("users {:?}", self.user),
            },
        });
        for group in &self.groups {
            needed.push(Needed {
                action: impersonate("", "groups", "", "", group),
                what: format!("groups {group:?}"),
            });
        }
        for (key, values) in &self.extra {
            for value in values {
                needed.push(Needed {
                    action: impersonate(AUTHENTICATION_GROUP, "userextras", key, "", value),
                    what: format!("userextras/{key} {value:?}"),
                });
            }
        }
        if let Some(uid) = &self.uid {
            needed.push(Needed {
                action: impersonate(AUTHENTICATION_GROUP, "uids", "", "", uid),
                what: format!("uids {uid:?}"),
            });
        }
        needed
    }

    /// What admission checks and whom it serves (see `serving::admission`).
    pub fn into_admission(self) -> Impersonating {
        Impersonating {
            needed: self.needed(),
            user: self.into_user(),
        }
    }

    /// The identity the request is served as.
    pub fn into_user(self) -> UserInfo {
        let mut groups = self.groups;
        if groups.is_empty() {
            if let Some((namespace, _)) = service_account(&self.user) {
                // A service account's groups are fixed: upstream adds them when none are given.
                groups.push("system:serviceaccounts".to_string());
                groups.push(format!("system:serviceaccounts:{namespace}"));
            }
        }
        let implied = if self.user == ANONYMOUS {
            UNAUTHENTICATED_GROUP
        } else {
            super::AUTHENTICATED_GROUP
        };
        if !groups.iter().any(|g| g == implied) {
            groups.push(implied.to_string());
        }
        UserInfo {
            name: self.user,
            uid: self.uid.unwrap_or_default(),
            groups,
            extra: self.extra,
        }
    }
}

/// `system:serviceaccount:NS:NAME` split into (NS, NAME), as upstream's `SplitUsername`.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// `%XX` decoding of an extra key (upstream's `url.PathUnescape`); `None` for a bad escape
/// or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (key, value) in pairs {
            let key: tonic::metadata::MetadataKey<tonic::metadata::Ascii> = key.parse().unwrap();
            map.append(key, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn no_header_no_impersonation() {
        let plain = metadata(&[("authorization", "Bearer x"), ("te", "trailers")]);
        assert_eq!(Impersonation::requested(&plain).unwrap(), None);
    }

    #[test]
    fn a_user_with_groups_extra_and_uid_needs_each_and_becomes_that_user() {
        let asked = metadata(&[
            ("impersonate-user", "alice"),
            ("impersonate-group", "dev"),
            ("impersonate-group", "ops"),
            ("impersonate-uid", "u-1"),
            ("impersonate-extra-example.com%2fscopes", "view"),
        ]);
        let impersonation = Impersonation::requested(&asked).unwrap().unwrap();
        let what: Vec<String> = impersonation.needed().into_iter().map(|n| n.what).collect();
        assert_eq!(
            what,
            [
                "users \"alice\"",
                "groups \"dev\"",
                "groups \"ops\"",
                "userextras/example.com/scopes \"view\"",
                "uids \"u-1\"",
            ]
        );
        let user = impersonation.into_user();
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(user.extra["example.com/scopes"], ["view"]);
    }

    #[test]
    fn a_service_account_is_checked_in_its_namespace_and_gets_its_groups() {
        let asked = metadata(&[("impersonate-user", "system:serviceaccount:dev:builder")]);
        let impersonation = Impersonation::requested(&asked).unwrap().unwrap();
        let Action::Resource(r) = &impersonation.needed()[0].action else {
            panic!("a resource action")
        };
        assert_eq!(
            (r.resource.as_str(), r.namespace.as_str(), r.name.as_str()),
            ("serviceaccounts", "dev", "builder")
        );
        assert_eq!(
            impersonation.into_user().groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:dev",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn groups_without_a_user_and_bad_escapes_are_refused() {
        let error = Impersonation::requested(&metadata(&[("impersonate-group", "dev")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("impersonate-user"), "{error}");
        let bad = metadata(&[("impersonate-user", "a"), ("impersonate-extra-x%zz", "v")]);
        assert!(Impersonation::requested(&bad).is_err());
    }

    #[test]
    fn anonymous_is_unauthenticated() {
        let asked = metadata(&[("impersonate-user", "system:anonymous")]);
        let user = Impersonation::requested(&asked)
            .unwrap()
            .unwrap()
            .into_user();
        assert_eq!(user.groups, ["system:unauthenticated"]);
    }
}
