//! Rules over an object's content (issue 16, seeds 003 and 004): the clauses a rule may carry
//! and what they mean for one request.
//!
//! A rule's clauses AND with its match and with each other. Field clauses decide per changed
//! path; the other clauses are predicates over the object(s) or, for collection verbs, over
//! the request's own selectors. What cannot be known without content the request does not
//! carry is [`Coverage::Missing`], which the caller folds: an allow grants nothing, a deny
//! applies (KEP-5681's fold; docs/spec/SPEC.md §3).

pub mod path;
pub mod selector;

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::policy::model::LabelSelector;
use crate::request::{Content, SelectorOperator, SelectorRequirement, Which};
use path::{DiffConfig, FieldPath, PathPattern};

/// Content a rule needed and could not read: the request gets `INVALID_ARGUMENT` naming the
/// field, never a decision (docs/spec/SPEC.md §10).
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
}

/// Whether a rule's clauses hold for a request and cover one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    Covers,
    Not,
    /// Undecidable without what this names (`the object (content.object)`).
    Missing(String),
}

impl Coverage {
    fn and(self, other: impl FnOnce() -> Coverage) -> Coverage {
        match self {
            Coverage::Not => Coverage::Not,
            Coverage::Covers => other(),
            Coverage::Missing(what) => match other() {
                Coverage::Not => Coverage::Not,
                _ => Coverage::Missing(what),
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

/// What a rule's clauses are evaluated against.
#[derive(Clone, Copy, Debug)]
pub struct Evidence<'a> {
    pub verb: &'a str,
    pub user: &'a str,
    pub content: Option<&'a Content>,
}

impl Clauses {
    /// Whether the clauses need the change set (a field clause).
    pub fn reads_changes(&self) -> bool {
        !self.fields.is_empty()
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
        Ok(self.predicates(deny, evidence)?.and(fields))
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
        let Some((fields, labels)) = self.resolved(evidence.user, node) else {
            return Ok(Coverage::Not);
        };
        if is_collection_verb(evidence.verb) {
            let (asked_fields, asked_labels) = evidence.content.map_or((&[][..], &[][..]), |c| {
                (&c.field_selector[..], &c.label_selector[..])
            });
            let pairs = fields
                .iter()
                .map(|r| (asked_fields, r))
                .chain(labels.iter().map(|r| (asked_labels, r)));
            let holds = if deny {
                // A deny applies unless the request's selection provably avoids it.
                pairs
                    .into_iter()
                    .all(|(asked, r)| !selector::disjoint(asked, r))
            } else {
                pairs
                    .into_iter()
                    .all(|(asked, r)| selector::implies(asked, r))
            };
            return Ok(if holds {
                Coverage::Covers
            } else {
                Coverage::Not
            });
        }
        let object_holds = |object: &Value| {
            fields
                .iter()
                .all(|r| selector::holds(r, selector::field(object, &r.key).as_deref()))
                && labels
                    .iter()
                    .all(|r| selector::holds(r, selector::label(object, &r.key)))
        };
        let needed: &[Which] = match evidence.verb {
            "create" => &[Which::Object],
            "update" | "patch" => &[Which::OldObject, Which::Object],
            _ => match evidence.content {
                Some(c) if c.old_object.is_none() && c.object.is_some() => &[Which::Object],
                _ => &[Which::OldObject],
            },
        };
        let mut missing = Vec::new();
        let mut results = Vec::new();
        for &which in needed {
            match evidence
                .content
                .map(|c| decoded(c, which))
                .transpose()?
                .flatten()
            {
                Some(object) => results.push(object_holds(object)),
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
            if results.iter().any(|&r| r) {
                Coverage::Covers
            } else if !missing.is_empty() {
                what()
            } else {
                Coverage::Not
            }
        } else if results.iter().any(|&r| !r) {
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

    /// The field and label requirements with templates resolved (the object selector and the
    /// same-node rule included); `None` when a template cannot resolve.
    fn resolved(
        &self,
        user: &str,
        node: Option<&str>,
    ) -> Option<(Vec<SelectorRequirement>, Vec<SelectorRequirement>)> {
        let resolve = |r: &SelectorRequirement| -> Option<SelectorRequirement> {
            let mut values = Vec::with_capacity(r.values.len());
            for value in &r.values {
                let mut v = value.replace("{{user}}", user);
                if v.contains("{{nodeName}}") {
                    v = v.replace("{{nodeName}}", node?);
                }
                values.push(v);
            }
            Some(SelectorRequirement {
                key: r.key.clone(),
                operator: r.operator,
                values,
            })
        };
        let mut fields: Vec<SelectorRequirement> = self
            .field_selector
            .iter()
            .map(resolve)
            .collect::<Option<_>>()?;
        let mut labels: Vec<SelectorRequirement> = self
            .label_selector
            .iter()
            .map(resolve)
            .collect::<Option<_>>()?;
        if let Some(selector) = &self.object_selector {
            labels.extend(
                selector
                    .match_labels
                    .iter()
                    .map(|(k, v)| SelectorRequirement {
                        key: k.clone(),
                        operator: SelectorOperator::In,
                        values: vec![v.clone()],
                    }),
            );
            labels.extend(
                selector
                    .match_expressions
                    .iter()
                    .map(|e| SelectorRequirement {
                        key: e.key.clone(),
                        operator: e.operator,
                        values: e.values.clone(),
                    }),
            );
        }
        if self.same_node {
            fields.push(SelectorRequirement {
                key: "spec.nodeName".into(),
                operator: SelectorOperator::In,
                values: vec![node?.to_string()],
            });
        }
        Some((fields, labels))
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
        parts.join(", ")
    }
}
