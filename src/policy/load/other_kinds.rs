//! Objects of other API groups in a policy directory: which are skipped, which are still
//! refused, and the count of what was skipped.
//!
//! A directory taken from a GitOps repository or `helm template`'s output holds
//! ServiceAccounts, Deployments, Services, CustomResourceDefinitions, ... beside its RBAC
//! objects. authzd reads the API groups its policy lives in ([`POLICY_GROUPS`]) and skips every
//! object of another group, counting it per kind and apiVersion ([`Skipped`]: printed by
//! `authzd lint` and logged by the server when it loads the directory).
//!
//! The group decides, not the kind: inside a policy group a kind authzd does not read is a typo
//! (`rbac.authorization.k8s.io/v1` `ClusterRoleBindng`) and refused with `file:line` as before,
//! while `iam.aws.upbound.io/v1beta1` `Role` is someone else's Role and skipped. Skipping a
//! misspelt policy object could widen access (a dropped Role may hold the deny rules), so these
//! are refused with `file:line` rather than skipped:
//!
//! * an object with no `kind`; or with no `apiVersion` (seed 003's documents aside, which have
//!   none), since without a group nothing tells policy from the rest;
//! * a kind authzd reads (`Role`, `ClusterRoleBinding`, `FieldPolicy`, ...) in the core group
//!   (`apiVersion: v1`), which has none of them: a wrong apiVersion, reported by the kind's reader;
//! * an apiVersion that is neither `group/version` nor a core-group version (`v1`):
//!   `rbac.authorization.k8s.io` with its version left off would otherwise parse as the core
//!   group at version `rbac.authorization.k8s.io` (upstream's `ParseGroupVersion`) and be skipped;
//! * a group at most two edits from a policy group (`rbac.authorizaton.k8s.io`,
//!   `RBAC.authorization.k8s.io`, `authzd.com`): a likely typo.
//!
//! Only reading policy files skips; a write through the admin API holds policy objects only
//! (`parse_manifest` refuses the others).

use std::collections::BTreeMap;
use std::fmt;

use crate::policy::model::{Source, CHANGE_GATE_KIND, FIELD_POLICY_GROUP, FIELD_POLICY_KIND};

use super::node::{Node, Value};
use super::rules::API_GROUP;
use super::{Cx, LoadError, SEED003_KINDS};

/// The API groups authzd reads policy from; every object of another group is skipped.
///
/// * `rbac.authorization.k8s.io`: upstream's RBAC group, `const GroupName =
///   "rbac.authorization.k8s.io"` in kubernetes/kubernetes
///   `staging/src/k8s.io/api/rbac/v1/register.go` (Role, ClusterRole, RoleBinding,
///   ClusterRoleBinding and their lists), where seed 003's deny rules and negation live too;
/// * `authzd.io`: authzd's own, for `FieldPolicy` (`authzd.io/v1alpha1`);
/// * `abac.authorization.kubernetes.io`: upstream's ABAC group, `const GroupName =
///   "abac.authorization.kubernetes.io"` in kubernetes/kubernetes `pkg/apis/abac/register.go`.
///   authzd reads ABAC policies as `.jsonl` lines only, so one in a YAML or JSON file is refused
///   (an unknown kind of a policy group), never skipped.
pub const POLICY_GROUPS: [&str; 3] = [API_GROUP, FIELD_POLICY_GROUP, ABAC_GROUP];

pub(super) const ABAC_GROUP: &str = "abac.authorization.kubernetes.io";

/// What the loader does with one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// A policy reader (RBAC, FieldPolicy, seed 003) reads it, and reports what is wrong with it.
    Policy,
    /// Of another API group: skipped and counted.
    Other,
    /// Neither, for the reason given.
    Refused(String),
}

/// Which kinds the RBAC reader reads (its own `reads_kind`, handed in by the loader so this
/// file and the reader do not name each other).
pub(super) type ReadsKind = fn(&str) -> bool;

/// Sorts one object by its `apiVersion` and `kind` (see the module documentation).
pub(super) fn classify(
    api_version: Option<&str>,
    kind: Option<&str>,
    reads_kind: ReadsKind,
) -> Class {
    let Some(kind) = kind.filter(|k| !k.is_empty()) else {
        // The policy readers report a missing `kind` as they always have.
        return Class::Policy;
    };
    let read_here = reads_kind(kind) || kind == FIELD_POLICY_KIND || kind == CHANGE_GATE_KIND;
    let api_version = api_version.unwrap_or_default();
    if api_version.is_empty() {
        return if read_here || SEED003_KINDS.contains(&kind) {
            Class::Policy
        } else {
            Class::Refused(format!(
                "missing `apiVersion` for kind `{kind}` (authzd skips objects of other API groups, and needs the apiVersion to tell them from policy)"
            ))
        };
    }
    // Upstream's ParseGroupVersion (kubernetes/kubernetes
    // staging/src/k8s.io/apimachinery/pkg/runtime/schema/group_version.go): no `/` is the core
    // group (`v1`), one `/` is `group/version`, more is an error.
    let group = match api_version.split_once('/') {
        None if is_kube_version(api_version) => "",
        Some((group, version)) if !group.is_empty() && !version.is_empty() && !version.contains('/') => {
            group
        }
        _ => {
            return Class::Refused(format!(
                "apiVersion `{api_version}` of kind `{kind}` is neither `group/version` nor a core-group version such as `v1`"
            ))
        }
    };
    if POLICY_GROUPS.contains(&group) {
        return Class::Policy;
    }
    if group.is_empty() {
        // The core group has no policy kinds: `apiVersion: v1` on a Role is a mistake, which
        // the Role's reader names (`List` is read here: `kubectl get -o yaml` writes it).
        return if read_here || SEED003_KINDS.contains(&kind) {
            Class::Policy
        } else {
            Class::Other
        };
    }
    if let Some(meant) = near_miss(group) {
        return Class::Refused(format!(
            "unknown API group `{group}` in apiVersion `{api_version}` of kind `{kind}`: did you mean `{meant}`? (objects of other groups are skipped, so a misspelt policy group is refused)"
        ));
    }
    Class::Other
}

/// Whether a policy reader goes on to read `node` (a top-level document or an item of a
/// `List`): false when it was skipped and counted in `cx`, or refused and reported there.
pub(super) fn sift(node: &Node, cx: &mut Cx<'_>, reads_kind: ReadsKind) -> bool {
    let Value::Map(entries) = &node.value else {
        return true;
    };
    // Duplicate keys are refused when the document is parsed, so each is found at most once.
    let field = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| match &v.value {
                Value::String(s) => Some(s.as_str()),
                Value::Null => Some(""),
                _ => None,
            })
    };
    let (api_version, kind) = match (field("apiVersion"), field("kind")) {
        // Not a string: the policy readers report the type.
        (Some(None), _) | (_, Some(None)) => return true,
        (api_version, kind) => (api_version.flatten(), kind.flatten()),
    };
    match classify(api_version, kind, reads_kind) {
        Class::Policy => true,
        Class::Other => {
            cx.skipped.0.push(SkippedObject {
                source: cx.source(node.line),
                api_version: capped(api_version.unwrap_or_default()),
                kind: capped(kind.unwrap_or_default()),
            });
            false
        }
        Class::Refused(message) => {
            cx.errors.push(LoadError {
                file: cx.file.to_string(),
                line: node.line,
                message,
            });
            false
        }
    }
}

/// At most [`MAX_NAME`] bytes of a skipped object's kind or apiVersion: they are only counted
/// and printed, and a hostile file's 16 MiB kind must not become a 16 MiB log line.
fn capped(s: &str) -> String {
    /// A DNS subdomain's limit, which an API group is; kinds are far shorter in practice.
    const MAX_NAME: usize = 253;
    if s.len() <= MAX_NAME {
        return s.to_owned();
    }
    let mut end = MAX_NAME;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Kubernetes' version names, `v1`, `v1beta1`, `v2alpha3`: upstream's `kubeVersionRegex`
/// `^v([\d]+)(?:(alpha|beta)([\d]+))?$` (kubernetes/kubernetes
/// `staging/src/k8s.io/apimachinery/pkg/version/helpers.go`).
fn is_kube_version(s: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let major_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, tail) = rest.split_at(major_end);
    digits(major)
        && (tail.is_empty()
            || ["alpha", "beta"]
                .iter()
                .any(|pre| tail.strip_prefix(pre).is_some_and(digits)))
}

/// The policy group `group` is probably a misspelling of: equal but for case, or within two
/// edits (three for the 32 characters of the ABAC group) by optimal string alignment distance,
/// which counts a swap of neighbours as one edit. The groups real objects come in are farther:
/// `authorization.k8s.io` is five edits from `rbac.authorization.k8s.io`, SpiceDB operator's
/// `authzed.com` three from `authzd.io`.
fn near_miss(group: &str) -> Option<&'static str> {
    let lower = group.to_ascii_lowercase();
    POLICY_GROUPS
        .into_iter()
        .find(|&policy| distance(&lower, policy) <= (policy.len() / 10).max(2))
}

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions), over bytes.
/// Past a length difference of [`FAR`] the difference itself is answered: a lower bound, and
/// already more than [`near_miss`] allows.
fn distance(a: &str, b: &str) -> usize {
    const FAR: usize = 3;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().abs_diff(b.len()) > FAR {
        return a.len().abs_diff(b.len());
    }
    // Three rows: the one two back (for transpositions), the previous and the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// One object skipped: where it is, and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedObject {
    pub source: Source,
    pub api_version: String,
    pub kind: String,
}

/// Every object a load skipped, in the order read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped(pub Vec<SkippedObject>);

impl Skipped {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `(kind, apiVersion, count)`, the most numerous first (then by kind and apiVersion).
    pub fn counts(&self) -> Vec<(&str, &str, usize)> {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for object in &self.0 {
            *counts
                .entry((object.kind.as_str(), object.api_version.as_str()))
                .or_default() += 1;
        }
        let mut counts: Vec<_> = counts
            .into_iter()
            .map(|((kind, api_version), n)| (kind, api_version, n))
            .collect();
        // Stable: equal counts keep the map's (kind, apiVersion) order.
        counts.sort_by_key(|&(_, _, n)| std::cmp::Reverse(n));
        counts
    }
}

/// `skipped 3 objects of other kinds: 2 ServiceAccount (v1), 1 Deployment (apps/v1)`.
impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len() {
            1 => write!(f, "skipped 1 object of another kind: ")?,
            n => write!(f, "skipped {n} objects of other kinds: ")?,
        }
        for (i, (kind, api_version, n)) in self.counts().into_iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{n} {kind} ({api_version})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RBAC reader's kinds, as its `reads_kind` answers (the loader's tests hold the two
    /// together through whole documents).
    fn rbac(kind: &str) -> bool {
        kind == "List"
            || ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]
                .iter()
                .any(|k| kind == *k || kind.strip_suffix("List") == Some(k))
    }

    fn class(api_version: &str, kind: &str) -> Class {
        classify(Some(api_version), Some(kind), rbac)
    }

    #[test]
    fn the_group_decides() {
        for (api_version, kind) in [
            ("v1", "ServiceAccount"),
            ("v1", "Namespace"),
            ("apps/v1", "Deployment"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("authorization.k8s.io/v1", "SubjectAccessReview"),
            // Someone else's Role: same name, other group.
            ("iam.aws.upbound.io/v1beta1", "Role"),
            ("authzed.com/v1alpha1", "SpiceDBCluster"),
            ("example.com/v1-preview", "Widget"),
        ] {
            assert_eq!(
                class(api_version, kind),
                Class::Other,
                "{api_version} {kind}"
            );
        }
        for (api_version, kind) in [
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            // A typo of a kind, or a wrong version, in a policy group: its reader refuses it.
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBindng"),
            ("rbac.authorization.k8s.io/v9", "Role"),
            ("authzd.io/v1alpha1", "FieldPolicy"),
            ("authzd.io/v1alpha1", "ChangeGate"),
            ("abac.authorization.kubernetes.io/v1beta1", "Policy"),
            // Policy kinds in the core group: a wrong apiVersion, named by their reader.
            ("v1", "List"),
            ("v1", "Role"),
            ("v1", "ClusterRoleBindingList"),
            ("v1", "FieldPolicy"),
            ("v1", "roleBinding"),
        ] {
            assert_eq!(
                class(api_version, kind),
                Class::Policy,
                "{api_version} {kind}"
            );
        }
        assert_eq!(classify(None, None, rbac), Class::Policy);
        assert_eq!(classify(None, Some("role"), rbac), Class::Policy);
        assert_eq!(classify(None, Some("ClusterRole"), rbac), Class::Policy);
    }

    #[test]
    fn likely_typos_are_refused() {
        let refused = |api_version: &str, kind: &str| match class(api_version, kind) {
            Class::Refused(message) => message,
            other => panic!("{api_version} {kind}: {other:?}"),
        };
        assert_eq!(
            refused("rbac.authorizaton.k8s.io/v1", "ClusterRole"),
            "unknown API group `rbac.authorizaton.k8s.io` in apiVersion `rbac.authorizaton.k8s.io/v1` of kind `ClusterRole`: did you mean `rbac.authorization.k8s.io`? (objects of other groups are skipped, so a misspelt policy group is refused)"
        );
        for (api_version, kind) in [
            ("RBAC.authorization.k8s.io/v1", "Role"),
            ("rbac.authroization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.oi/v1", "RoleBinding"),
            ("authzd.com/v1alpha1", "FieldPolicy"),
            ("authz.io/v1alpha1", "FieldPolicy"),
            ("abac.authorization.k8s.io/v1beta1", "Policy"),
        ] {
            assert!(
                refused(api_version, kind).contains("did you mean"),
                "{api_version}"
            );
        }
        for api_version in [
            "rbac.authorization.k8s.io",
            "apps",
            "/v1",
            "apps/",
            "a/b/c",
            "V1",
        ] {
            assert!(
                refused(api_version, "Deployment").contains("neither `group/version`"),
                "{api_version}"
            );
        }
        assert_eq!(
            classify(None, Some("ServiceAccount"), rbac),
            Class::Refused("missing `apiVersion` for kind `ServiceAccount` (authzd skips objects of other API groups, and needs the apiVersion to tell them from policy)".into())
        );
        assert_eq!(
            classify(Some(""), Some("Deployment"), rbac),
            classify(None, Some("Deployment"), rbac)
        );
    }

    #[test]
    fn versions_and_distances() {
        for v in ["v1", "v2", "v1beta1", "v10alpha22"] {
            assert!(is_kube_version(v), "{v}");
        }
        for v in [
            "", "v", "1", "v1beta", "v1gamma1", "v1beta1x", "vbeta1", "v1 ",
        ] {
            assert!(!is_kube_version(v), "{v}");
        }
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("abc", "acb"), 1);
        assert_eq!(distance("abc", "ab"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("authorization.k8s.io", API_GROUP), 5);
        assert_eq!(distance("authzed.com", FIELD_POLICY_GROUP), 3);
    }

    #[test]
    fn long_names_are_capped() {
        let long = "é".repeat(200);
        let capped = capped(&long);
        assert_eq!(capped.len(), 252 + 3, "{capped}");
        assert!(capped.ends_with("..."));
        assert_eq!(super::capped("Deployment"), "Deployment");
    }

    #[test]
    fn counts_read_most_numerous_first() {
        let object = |kind: &str, api_version: &str| SkippedObject {
            source: Source::new("f.yaml", 1),
            api_version: api_version.into(),
            kind: kind.into(),
        };
        let skipped = Skipped(vec![
            object("Deployment", "apps/v1"),
            object("ServiceAccount", "v1"),
            object("Service", "v1"),
            object("ServiceAccount", "v1"),
        ]);
        assert_eq!(
            skipped.to_string(),
            "skipped 4 objects of other kinds: 2 ServiceAccount (v1), 1 Deployment (apps/v1), 1 Service (v1)"
        );
        assert_eq!(
            Skipped(vec![object("Namespace", "v1")]).to_string(),
            "skipped 1 object of another kind: 1 Namespace (v1)"
        );
    }
}
