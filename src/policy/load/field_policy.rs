//! `kind: FieldPolicy` (`authzd.io/v1alpha1`): how the server-side diff of rules over object
//! content treats paths (docs/policy.md §5). Added to the built-in defaults:
//!
//! ```yaml
//! apiVersion: authzd.io/v1alpha1
//! kind: FieldPolicy
//! metadata: {name: deployments}
//! spec:
//!   ignore: [".metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"]
//!   sets: [".spec.template.metadata.finalizers"]
//!   keyedLists: [{path: ".spec.template.spec.containers", keys: [name]}]
//!   protected:
//!   - ".metadata.finalizers"                       # on every resource
//!   - {path: ".data", resources: ["secrets"]}      # `resource` (core) or `resource.group`
//! ```
//!
//! A protected path is one a plain allow (a rule without a `fields` clause) does not cover on
//! create, update or patch: only an allow whose `fields` clause covers the change may make it
//! (seed 004 designs 6 and 7: "special fields").

use crate::policy::content::path::{PathPattern, Protected};
use crate::policy::model::{FieldPolicy, Source};

use super::node::{Fields, Node, Problems, Value};
use super::Cx;

pub const API_VERSION: &str = "authzd.io/v1alpha1";

pub(super) fn parse(node: &Node, cx: &mut Cx<'_>) {
    let mut p = Problems::default();
    if let Some(policy) = read(node, &mut p) {
        if p.0.is_empty() {
            cx.field_policies.push(FieldPolicy {
                source: Source::new(cx.file.clone(), node.line),
                ..policy
            });
        }
    }
    cx.report("FieldPolicy", p);
}

/// The `apiVersion`, `kind` and `metadata` of one of authzd's own kinds (`authzd.io/v1alpha1`:
/// FieldPolicy, ChangeGate), read from `f`: the object's name, checked as a role's is (a path
/// segment: a file name, an etcd key).
pub(super) fn header(node: &Node, f: &mut Fields<'_>, p: &mut Problems) -> String {
    let api_version = f.string("apiVersion", p);
    if api_version != API_VERSION {
        p.push(
            node.line,
            format!("`apiVersion` must be `{API_VERSION}`, found `{api_version}`"),
        );
    }
    f.string("kind", p);
    let mut name = String::new();
    if let Some(metadata) = f.take("metadata", p) {
        if let Some(mut m) = Fields::new(metadata, "metadata", false, p) {
            name = m.string("name", p);
            m.ignore(&[
                "labels",
                "annotations",
                "uid",
                "resourceVersion",
                "creationTimestamp",
            ]);
            m.finish(p);
        }
    }
    if name.is_empty() {
        p.push(node.line, "missing `metadata.name`");
    }
    super::rules::check_name(&name, "metadata.name", node.line, p);
    name
}

fn read(node: &Node, p: &mut Problems) -> Option<FieldPolicy> {
    let mut f = Fields::new(node, "", false, p)?;
    let name = header(node, &mut f, p);
    let mut policy = FieldPolicy {
        name,
        source: Source::default(),
        ignore: Vec::new(),
        sets: Vec::new(),
        keyed_lists: Vec::new(),
        protected: Vec::new(),
    };
    let spec = f.take("spec", p);
    f.finish(p);
    let Some(spec) = spec else {
        p.push(node.line, "missing `spec`");
        return Some(policy);
    };
    let mut s = Fields::new(spec, "spec", false, p)?;
    let patterns = |s: &mut Fields<'_>, key: &str, p: &mut Problems| -> Vec<PathPattern> {
        let at = format!("spec.{key}");
        let line = s.line();
        s.strings(key, p)
            .iter()
            .enumerate()
            .filter_map(|(i, text)| match PathPattern::parse(text) {
                Ok(pattern) => Some(pattern),
                Err(problem) => {
                    p.push(line, format!("`{at}[{i}]` `{text}` {problem}"));
                    None
                }
            })
            .collect()
    };
    policy.ignore = patterns(&mut s, "ignore", p);
    policy.sets = patterns(&mut s, "sets", p);
    for (i, item) in s.list("keyedLists", p).iter().enumerate() {
        let at = format!("spec.keyedLists[{i}]");
        let Some(mut k) = Fields::new(item, &at, false, p) else {
            continue;
        };
        let path = k.string("path", p);
        let keys = k.strings("keys", p);
        k.finish(p);
        if keys.is_empty() {
            p.push(
                item.line,
                format!("`{at}.keys` must name at least one key field"),
            );
        }
        match PathPattern::parse(&path) {
            Ok(pattern) => policy.keyed_lists.push((pattern, keys)),
            Err(problem) => p.push(item.line, format!("`{at}.path` `{path}` {problem}")),
        }
    }
    for (i, item) in s.list("protected", p).iter().enumerate() {
        let at = format!("spec.protected[{i}]");
        if let Some(protected) = read_protected(item, &at, p) {
            policy.protected.push(protected);
        }
    }
    s.finish(p);
    Some(policy)
}

/// One `spec.protected` entry: a path pattern alone (every resource), or `{path, resources}`.
fn read_protected(item: &Node, at: &str, p: &mut Problems) -> Option<Protected> {
    let (path, resources) = match &item.value {
        Value::String(text) => (text.clone(), Vec::new()),
        _ => {
            let mut k = Fields::new(item, at, false, p)?;
            let path = k.string("path", p);
            let resources = k.strings("resources", p);
            k.finish(p);
            if resources.is_empty() {
                p.push(
                    item.line,
                    format!("`{at}.resources` must name at least one resource (`*` for all, or write the path alone)"),
                );
            }
            (path, resources)
        }
    };
    let pattern = match PathPattern::parse(&path) {
        Ok(pattern) => pattern,
        Err(problem) => {
            p.push(item.line, format!("`{at}.path` `{path}` {problem}"));
            return None;
        }
    };
    let mut out = Vec::new();
    for (j, name) in resources.iter().enumerate() {
        // `deployments.apps` is the resource `deployments` of the group `apps`; a resource
        // alone is the core group's; `*` (alone or for either part) is any.
        let (resource, group) = match name.split_once('.') {
            Some((resource, group)) => (resource, group),
            None if name == "*" => ("*", "*"),
            None => (name.as_str(), ""),
        };
        if resource.is_empty() || (group.is_empty() && name.ends_with('.')) {
            p.push(
                item.line,
                format!("`{at}.resources[{j}]` `{name}` is not `resource` or `resource.group`"),
            );
            continue;
        }
        out.push((group.to_string(), resource.to_string()));
    }
    Some(Protected {
        pattern,
        resources: out,
    })
}
