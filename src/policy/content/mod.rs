//! Rules over an object's content (docs/policy.md §4; seeds 003 and 004): the clauses a rule may carry
//! and what they mean for one request.
//!
//! A rule's clauses AND with its match and with each other. Field clauses decide per changed
//! path; the other clauses are predicates over the object(s) or, for collection verbs, over
//! the request's own selectors. What cannot be known without content the request does not
//! carry is [`Coverage::Missing`], which the caller folds: an allow grants nothing, a deny
//! applies (KEP-5681's fold; docs/policy.md §4).

pub mod condition;
pub mod path;
pub mod selector;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use smallvec::SmallVec;

use serde_json::Value;

use crate::request::{Content, SelectorOperator, SelectorRequirement, Which};
use path::{DiffConfig, FieldPath, PathPattern};
use selector::LabelSelector;

/// Content a rule needed and could not read: the request gets `INVALID_ARGUMENT` naming the
/// field, never a decision (docs/api.md §7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentError {
    /// The API field at fault (`content.object`, `content.changed_paths[3]`).
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {}", self.field, self.problem)
    }
}

impl std::error::Error for ContentError {}

/// A rule's content clauses (authzd's extensions, or seed 003's restrictions translated).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clauses {
    /// `fields:`: the changed paths the rule covers; empty = no field clause (every path).
    pub fields: Vec<PathPattern>,
    /// `objectSelector:` over the object's labels.
    pub object_selector: Option<LabelSelector>,
    /// `fieldSelector:` / `labelSelector:` (values may hold `{{user}}` and `{{nodeName}}`).
    pub field_selector: Vec<SelectorRequirement>,
    pub label_selector: Vec<SelectorRequirement>,
    /// Seed 003's `sameMinionRestriction`: `system:node:N` acts only on objects whose
    /// `spec.nodeName` is N.
    pub same_node: bool,
    /// A restriction authzd cannot evaluate (its description): never satisfied, never widens.
    pub unevaluable: Option<String>,
    /// `condition:`, a CEL expression over the request and its objects (docs/policy.md §6).
    pub condition: Option<condition::Condition>,
}

/// Whether a rule's clauses hold for a request and cover one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    Covers,
    Not,
    /// Undecidable without what this names (`the object (content.object)`).
    Missing(String),
    /// Undecidable: the rule's condition failed to evaluate (this says how). Folded as
    /// `Missing` is: an allow grants nothing, a deny applies.
    Failed(String),
}

impl Coverage {
    /// Both: `Not` if either does not hold, else the first that cannot be known.
    pub fn and(self, other: impl FnOnce() -> Coverage) -> Coverage {
        match self {
            Coverage::Not => Coverage::Not,
            Coverage::Covers => other(),
            unknown => match other() {
                Coverage::Not => Coverage::Not,
                _ => unknown,
            },
        }
    }
}

/// One unit of change a rule must cover.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// A changed path (the root for verbs that change nothing: get, delete, ...).
    Path(FieldPath),
    /// A write that changes nothing; every field clause covers it.
    Nothing,
    /// A write whose changes are unknown: the request carries no content to diff.
    Unknown,
}

impl Change {
    /// How an explanation names it; `None` for the one unit every request without a
    /// change set has (so such answers read as before content existed).
    pub fn describe(&self) -> Option<String> {
        match self {
            Change::Path(path) if path.0.is_empty() => None,
            Change::Path(path) => Some(format!("changed path {path}")),
            Change::Nothing => Some("no changed path".into()),
            Change::Unknown => None,
        }
    }
}

/// What protected paths (`FieldPolicy` `spec.protected`) leave an allow without a `fields`
/// clause: a change touching one is not covered, and an unknown change cannot be known to
/// avoid them.
pub fn unprotected(change: &Change, protected: &[&PathPattern]) -> Coverage {
    match change {
        Change::Path(path) if protected.iter().any(|p| p.touched_by(path)) => Coverage::Not,
        Change::Unknown if !protected.is_empty() => Coverage::Missing(format!(
            "the changed fields (content.object and content.old_object, or content.changed_paths): the write may change protected paths ({})",
            protected.iter().map(|p| p.text()).collect::<Vec<_>>().join(", ")
        )),
        _ => Coverage::Covers,
    }
}

/// Verbs that act on a collection, where selectors replace the object.
pub fn is_collection_verb(verb: &str) -> bool {
    matches!(verb, "list" | "watch" | "deletecollection")
}

fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch")
}

/// The units of change of a request: per changed path for writes (computed server-side from
/// the objects, or the caller's own list), the root for every other verb.
pub fn changes(
    verb: &str,
    content: Option<&Content>,
    config: &DiffConfig,
) -> Result<Vec<Change>, ContentError> {
    if !is_write(verb) {
        return Ok(vec![Change::Path(FieldPath::ROOT)]);
    }
    let Some(content) = content else {
        return Ok(vec![Change::Unknown]);
    };
    let paths: BTreeSet<FieldPath> = if !content.changed_paths.is_empty() {
        let mut paths = BTreeSet::new();
        for (i, text) in content.changed_paths.iter().enumerate() {
            let path = FieldPath::parse(text).map_err(|problem| ContentError {
                field: format!("content.changed_paths[{i}]"),
                problem,
            })?;
            paths.insert(path);
        }
        paths
    } else {
        let new = decoded(content, Which::Object)?;
        let old = decoded(content, Which::OldObject)?;
        match (verb, old, new) {
            ("create", _, Some(new)) => diff(None, Some(new), config, Which::Object)?,
            (_, Some(old), Some(new)) => diff(Some(old), Some(new), config, Which::Object)?,
            _ => return Ok(vec![Change::Unknown]),
        }
    };
    if paths.is_empty() {
        return Ok(vec![Change::Nothing]);
    }
    Ok(paths.into_iter().map(Change::Path).collect())
}

fn diff(
    old: Option<&Value>,
    new: Option<&Value>,
    config: &DiffConfig,
    blame: Which,
) -> Result<BTreeSet<FieldPath>, ContentError> {
    path::changed_paths(old, new, config).map_err(|problem| ContentError {
        field: blame.field().to_string(),
        problem,
    })
}

/// One object of the request, decoded on first use.
pub fn decoded(content: &Content, which: Which) -> Result<Option<&Value>, ContentError> {
    match content.decoded(which) {
        None => Ok(None),
        Some(Ok(value)) => Ok(Some(value)),
        Some(Err(problem)) => Err(ContentError {
            field: which.field().to_string(),
            problem: problem.to_string(),
        }),
    }
}

/// Whether a requirement reads a field or a label.
#[derive(Clone, Copy, Debug)]
enum On {
    Field,
    Label,
}

/// A clause requirement as one request sees it: templates resolved, borrowed where possible.
struct Requirement<'s> {
    on: On,
    key: &'s str,
    operator: SelectorOperator,
    values: SmallVec<[Cow<'s, str>; 2]>,
}

impl Requirement<'_> {
    fn view(&self) -> selector::Requirement<'_> {
        selector::Requirement {
            key: self.key,
            operator: self.operator,
            values: &self.values,
        }
    }
}

type Requirements<'s> = SmallVec<[Requirement<'s>; 4]>;

/// What a rule's clauses are evaluated against.
#[derive(Clone, Copy, Debug)]
pub struct Evidence<'a> {
    pub verb: &'a str,
    pub user: &'a str,
    /// The subject's groups (a condition's `request.userInfo.groups`).
    pub groups: crate::request::Groups<'a>,
    pub action: crate::request::ActionRef<'a>,
    pub content: Option<&'a Content>,
    /// Every unit of change of the request (a condition's `changedPaths`).
    pub changes: &'a [Change],
}

impl Clauses {
    /// Whether the clauses need the change set (a field clause, or a condition that reads
    /// `changedPaths`).
    pub fn reads_changes(&self) -> bool {
        !self.fields.is_empty()
            || self
                .condition
                .as_ref()
                .is_some_and(|c| c.reads().changed_paths)
    }

    /// Whether what the clauses say of a request with verb `verb` can change with what it
    /// carries beside its attributes (objects, changes, selectors): conditional answers
    /// return such rules instead of deciding them. Conservative: any object or selector
    /// predicate counts.
    pub fn depends_on_content(&self, verb: &str) -> bool {
        if self.unevaluable.is_some() {
            // Never evaluable: decided the same way whatever the request carries.
            return false;
        }
        (!self.fields.is_empty() && is_write(verb))
            || self.has_predicates()
            || self
                .condition
                .as_ref()
                .is_some_and(|c| c.reads().depends_on_content())
    }

    /// Whether the rule, of effect `deny`, holds for the request and covers `change`.
    pub fn check(
        &self,
        deny: bool,
        evidence: &Evidence<'_>,
        change: &Change,
    ) -> Result<Coverage, ContentError> {
        if let Some(what) = &self.unevaluable {
            return Ok(Coverage::Missing(what.clone()));
        }
        let fields = || self.fields_cover(change);
        let held = match self.predicates(deny, evidence)? {
            Coverage::Not => Coverage::Not,
            held => {
                let condition = self.condition_holds(evidence)?;
                held.and(|| condition)
            }
        };
        Ok(held.and(fields))
    }

    /// The rule's CEL condition for this request: `Missing` when it reads content the
    /// request does not carry, `Failed` with CEL's message when it cannot be evaluated.
    fn condition_holds(&self, evidence: &Evidence<'_>) -> Result<Coverage, ContentError> {
        let Some(condition) = &self.condition else {
            return Ok(Coverage::Covers);
        };
        let reads = condition.reads();
        let carried = evidence
            .content
            .is_some_and(|c| c.has_objects() || !c.changed_paths.is_empty());
        if reads.content() && !carried {
            return Ok(Coverage::Missing(format!(
                "the object (content.object, content.old_object or content.changed_paths) for its condition `{}`",
                condition.text()
            )));
        }
        // A condition over the AuthZEN context waits for one, as one over the object does.
        let context = evidence.content.and_then(|c| c.context.as_ref());
        if reads.context && context.is_none() {
            return Ok(Coverage::Missing(format!(
                "the request's context (AuthZEN `context`) for its condition `{}`",
                condition.text()
            )));
        }
        // Without content the request's selectors are unknown, not empty: a condition over
        // them need not be monotone (`all()` holds of none), so it waits for them. A context
        // alone says nothing of them either.
        if reads.selectors && evidence.content.is_none_or(Content::only_context) {
            return Ok(Coverage::Missing(format!(
                "the request's selectors (content.field_selector, content.label_selector) for its condition `{}`",
                condition.text()
            )));
        }
        let object = |which: Which, read: bool| -> Result<Option<&Value>, ContentError> {
            match (read, evidence.content) {
                (true, Some(content)) => decoded(content, which),
                _ => Ok(None),
            }
        };
        let changed_paths: Vec<String> = if reads.changed_paths {
            let mut paths = Vec::new();
            for change in evidence.changes {
                match change {
                    Change::Path(path) if path.0.is_empty() => {}
                    Change::Path(path) => paths.push(path.to_string()),
                    Change::Nothing => {}
                    Change::Unknown => {
                        return Ok(Coverage::Missing(format!(
                            "the changed fields (content.object and content.old_object, or content.changed_paths) for its condition `{}`",
                            condition.text()
                        )))
                    }
                }
            }
            paths
        } else {
            Vec::new()
        };
        let groups: SmallVec<[&str; 8]> = evidence.groups.iter().collect();
        let (field_selector, label_selector) = evidence.content.map_or((&[][..], &[][..]), |c| {
            (&c.field_selector[..], &c.label_selector[..])
        });
        let mut request = condition::RequestInput {
            verb: evidence.verb,
            username: evidence.user,
            groups: &groups,
            field_selector,
            label_selector,
            ..Default::default()
        };
        if let crate::request::ActionRef::Resource(r) = evidence.action {
            request.api_group = r.group;
            request.api_version = r.version;
            request.resource = r.resource;
            request.subresource = r.subresource;
            request.name = r.name;
            request.namespace = r.namespace;
        }
        let input = condition::Input {
            object: object(Which::Object, reads.object)?,
            old_object: object(Which::OldObject, reads.old_object)?,
            request,
            changed_paths: &changed_paths,
            context,
        };
        Ok(match condition.evaluate(&input) {
            Ok(true) => Coverage::Covers,
            Ok(false) => Coverage::Not,
            Err(message) => Coverage::Failed(format!(
                "its condition `{}` failed: {message}",
                condition.text()
            )),
        })
    }

    fn fields_cover(&self, change: &Change) -> Coverage {
        if self.fields.is_empty() {
            return Coverage::Covers;
        }
        match change {
            Change::Path(path) if self.fields.iter().any(|p| p.covers(path)) => Coverage::Covers,
            Change::Path(_) => Coverage::Not,
            Change::Nothing => Coverage::Covers,
            Change::Unknown => Coverage::Missing(
                "the changed fields (content.object and content.old_object, or content.changed_paths)"
                    .into(),
            ),
        }
    }

    fn has_predicates(&self) -> bool {
        self.object_selector.is_some()
            || !self.field_selector.is_empty()
            || !self.label_selector.is_empty()
            || self.same_node
    }

    /// The clauses over the object (or, for collection verbs, the request's selectors).
    fn predicates(&self, deny: bool, evidence: &Evidence<'_>) -> Result<Coverage, ContentError> {
        if !self.has_predicates() {
            return Ok(Coverage::Covers);
        }
        // Templates resolve per request; a `{{nodeName}}` asked of a user that is no node
        // (or a same-node rule) cannot hold.
        let node = evidence.user.strip_prefix("system:node:");
        if self.same_node && node.is_none() {
            return Ok(Coverage::Not);
        }
        let Some(requirements) = self.resolved(evidence.user, node) else {
            return Ok(Coverage::Not);
        };
        if is_collection_verb(evidence.verb) {
            let (asked_fields, asked_labels) = evidence.content.map_or((&[][..], &[][..]), |c| {
                (&c.field_selector[..], &c.label_selector[..])
            });
            let asked = |r: &Requirement<'_>| match r.on {
                On::Field => asked_fields,
                On::Label => asked_labels,
            };
            let holds = if deny {
                // A deny applies unless the request's selection provably avoids it.
                requirements
                    .iter()
                    .all(|r| !selector::disjoint(asked(r), &r.view()))
            } else {
                requirements
                    .iter()
                    .all(|r| selector::implies(asked(r), &r.view()))
            };
            return Ok(if holds {
                Coverage::Covers
            } else {
                Coverage::Not
            });
        }
        let object_holds = |object: &Value| {
            requirements.iter().all(|r| match r.on {
                On::Field => r.view().holds(selector::field(object, r.key).as_deref()),
                On::Label => r.view().holds(selector::label(object, r.key)),
            })
        };
        let needed: &[Which] = match evidence.verb {
            "create" => &[Which::Object],
            "update" | "patch" => &[Which::OldObject, Which::Object],
            _ => match evidence.content {
                Some(c) if c.old_object.is_none() && c.object.is_some() => &[Which::Object],
                _ => &[Which::OldObject],
            },
        };
        let mut missing: SmallVec<[&str; 2]> = SmallVec::new();
        let (mut any_holds, mut any_fails) = (false, false);
        for &which in needed {
            match evidence
                .content
                .map(|c| decoded(c, which))
                .transpose()?
                .flatten()
            {
                Some(object) if object_holds(object) => any_holds = true,
                Some(_) => any_fails = true,
                None => missing.push(which.field()),
            }
        }
        let what = || {
            Coverage::Missing(format!(
                "the object's {} ({})",
                self.predicate_words(),
                missing.join(" and ")
            ))
        };
        Ok(if deny {
            if any_holds {
                Coverage::Covers
            } else if !missing.is_empty() {
                what()
            } else {
                Coverage::Not
            }
        } else if any_fails {
            Coverage::Not
        } else if !missing.is_empty() {
            what()
        } else {
            Coverage::Covers
        })
    }

    fn predicate_words(&self) -> &'static str {
        match (
            self.same_node,
            self.object_selector.is_some() || !self.label_selector.is_empty(),
        ) {
            (true, _) => "node",
            (false, true) if self.field_selector.is_empty() => "labels",
            (false, true) => "labels and fields",
            (false, false) => "fields",
        }
    }

    /// Every field and label requirement (the object selector and the same-node rule
    /// included), with templates resolved; `None` when a template cannot resolve. Borrows
    /// from the clauses: only a templated value is a new string.
    fn resolved<'s>(&'s self, user: &str, node: Option<&'s str>) -> Option<Requirements<'s>> {
        let mut out = Requirements::new();
        let resolve = |value: &'s str| -> Option<Cow<'s, str>> {
            if !value.contains("{{") {
                return Some(Cow::Borrowed(value));
            }
            let mut v = value.replace("{{user}}", user);
            if v.contains("{{nodeName}}") {
                v = v.replace("{{nodeName}}", node?);
            }
            Some(Cow::Owned(v))
        };
        for (on, list) in [
            (On::Field, &self.field_selector),
            (On::Label, &self.label_selector),
        ] {
            for r in list {
                out.push(Requirement {
                    on,
                    key: &r.key,
                    operator: r.operator,
                    values: r.values.iter().map(|v| resolve(v)).collect::<Option<_>>()?,
                });
            }
        }
        if let Some(selector) = &self.object_selector {
            for (k, v) in &selector.match_labels {
                out.push(Requirement {
                    on: On::Label,
                    key: k,
                    operator: SelectorOperator::In,
                    values: smallvec::smallvec![Cow::Borrowed(v.as_str())],
                });
            }
            for e in &selector.match_expressions {
                out.push(Requirement {
                    on: On::Label,
                    key: &e.key,
                    operator: e.operator,
                    values: e.values.iter().map(|v| Cow::Borrowed(v.as_str())).collect(),
                });
            }
        }
        if self.same_node {
            out.push(Requirement {
                on: On::Field,
                key: "spec.nodeName",
                operator: SelectorOperator::In,
                values: smallvec::smallvec![Cow::Borrowed(node?)],
            });
        }
        Some(out)
    }

    /// Likely mistakes in clauses that load (for `authzd lint`): a misspelt top-level or
    /// metadata field, a field clause on a rule that writes nothing, a template authzd does
    /// not know.
    pub fn warnings(&self, verbs: &[String]) -> Vec<String> {
        const TOP: &[&str] = &[
            "apiVersion",
            "kind",
            "metadata",
            "spec",
            "status",
            "data",
            "stringData",
            "binaryData",
            "type",
            "immutable",
            "rules",
            "subjects",
            "roleRef",
            "webhooks",
            "secrets",
            "imagePullSecrets",
            "automountServiceAccountToken",
            "provisioner",
            "parameters",
            "reclaimPolicy",
            "allowVolumeExpansion",
            "volumeBindingMode",
        ];
        const METADATA: &[&str] = &[
            "name",
            "namespace",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "generateName",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ];
        let mut out = Vec::new();
        for pattern in &self.fields {
            let steps = pattern.steps();
            if let Some(path::PatternStep::Member(top)) = steps.first() {
                if !TOP.contains(&top.as_str()) {
                    out.push(format!(
                        "field pattern `{pattern}`: `{top}` is not a top-level field of Kubernetes objects (metadata, spec, status, data, …); a typo matches nothing"
                    ));
                }
                if let (true, Some(path::PatternStep::Member(child))) =
                    (top == "metadata", steps.get(1))
                {
                    if !METADATA.contains(&child.as_str()) {
                        out.push(format!(
                            "field pattern `{pattern}`: `metadata.{child}` is not a metadata field a client sets (labels, annotations, finalizers, …)"
                        ));
                    }
                }
            }
        }
        let writes = verbs
            .iter()
            .any(|v| matches!(v.as_str(), "*" | "create" | "update" | "patch"));
        if !self.fields.is_empty() && !writes {
            out.push(
                "a `fields` clause on a rule without create, update or patch: other verbs change only the root, which the clause does not cover, so the rule never applies"
                    .to_string(),
            );
        }
        for requirement in self.field_selector.iter().chain(&self.label_selector) {
            for value in &requirement.values {
                let mut rest = value.as_str();
                while let Some(at) = rest.find("{{") {
                    let end = rest[at..].find("}}").map_or(rest.len(), |e| at + e + 2);
                    let template = &rest[at..end];
                    if template != "{{user}}" && template != "{{nodeName}}" {
                        out.push(format!(
                            "selector value `{value}`: `{template}` is not a template authzd resolves ({{{{user}}}}, {{{{nodeName}}}}); it is compared literally"
                        ));
                    }
                    rest = &rest[end..];
                }
            }
        }
        out
    }

    /// A short description for explanations and errors.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(what) = &self.unevaluable {
            parts.push(what.clone());
        }
        if !self.fields.is_empty() {
            let list: Vec<&str> = self.fields.iter().map(PathPattern::text).collect();
            parts.push(format!("fields [{}]", list.join(", ")));
        }
        if self.object_selector.is_some() {
            parts.push("an object selector".into());
        }
        if !self.field_selector.is_empty() {
            parts.push("a field selector".into());
        }
        if !self.label_selector.is_empty() {
            parts.push("a label selector".into());
        }
        if self.same_node {
            parts.push("same node".into());
        }
        if let Some(condition) = &self.condition {
            parts.push(format!("condition `{}`", condition.text()));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `authzd lint` warns on clauses that load but can never match what was meant.
    #[test]
    fn likely_typos_are_warned() {
        let pattern = |t: &str| PathPattern::parse(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        let clauses = Clauses {
            fields: vec![
                pattern(".metdata.labels"),
                pattern(".metadata.label"),
                pattern(".spec"),
            ],
            label_selector: vec![SelectorRequirement {
                key: "owner".into(),
                operator: SelectorOperator::In,
                values: vec!["{{User}}".into(), "{{user}}".into()],
            }],
            ..Clauses::default()
        };
        let warnings = clauses.warnings(&["get".to_string()]);
        assert_eq!(warnings.len(), 4, "{warnings:#?}");
        assert!(warnings[0].contains("`metdata` is not a top-level field"));
        assert!(warnings[1].contains("`metadata.label` is not a metadata field"));
        assert!(warnings[2].contains("without create, update or patch"));
        assert!(warnings[3].contains("`{{User}}` is not a template"));
        let fine = Clauses {
            fields: vec![pattern(".metadata.labels['a/*']"), pattern(".data")],
            ..Clauses::default()
        };
        assert!(fine.warnings(&["update".to_string()]).is_empty());
    }
}
