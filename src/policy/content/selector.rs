//! Selectors in rule clauses: matched against an object's labels and fields, or, for list,
//! watch and deletecollection, compared with the request's own KEP-4601 selectors.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::request::{SelectorOperator, SelectorRequirement};

/// `metav1.LabelSelector`, as ClusterRole `aggregationRule` and a rule's `objectSelector` use
/// it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry: the same shape as a request's selector requirement.
pub type LabelSelectorRequirement = SelectorRequirement;

impl LabelSelector {
    /// Kubernetes semantics: every `matchLabels` pair and every expression must hold; an empty
    /// selector matches everything.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|req| {
                let value = labels.get(&req.key).map(String::as_str);
                admits(req.operator, value, |v| req.values.iter().any(|w| w == v))
            })
    }
}

/// Whether `value` (the selected thing's value for the key, `None` when absent) satisfies a
/// requirement with `operator` whose values `listed` recognises, as `labels.Selector`
/// matches: the one statement of the four operators.
fn admits(operator: SelectorOperator, value: Option<&str>, listed: impl Fn(&str) -> bool) -> bool {
    match operator {
        SelectorOperator::In => value.is_some_and(listed),
        SelectorOperator::NotIn => value.is_none_or(|v| !listed(v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
    }
}

/// A rule's requirement as one request sees it (templates resolved).
pub struct Requirement<'a> {
    pub key: &'a str,
    pub operator: SelectorOperator,
    pub values: &'a [Cow<'a, str>],
}

impl Requirement<'_> {
    /// Whether `value` (the object's value for the key, `None` when absent) satisfies the
    /// requirement, as `labels.Selector` matches.
    pub fn holds(&self, value: Option<&str>) -> bool {
        admits(self.operator, value, |v| self.values.iter().any(|w| w == v))
    }
}

/// The object's label `key`.
pub fn label<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object.get("metadata")?.get("labels")?.get(key)?.as_str()
}

/// The object's field for a field-selector key (`spec.nodeName`, `metadata.name`), rendered
/// as a field selector compares it: strings as they are, numbers and booleans as text.
pub fn field(object: &Value, key: &str) -> Option<String> {
    let mut at = object;
    for part in key.split('.') {
        at = at.get(part)?;
    }
    match at {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Whether every object the request's selector selects satisfies `clause`: the request's
/// requirements on the same key imply it. Only what can be shown is shown; anything else is
/// `false` (an allow that cannot be shown to apply does not apply).
pub fn implies(request: &[SelectorRequirement], clause: &Requirement<'_>) -> bool {
    let on_key = || request.iter().filter(|r| r.key == clause.key);
    let in_clause = |v: &String| clause.values.iter().any(|c| c == v.as_str());
    match clause.operator {
        SelectorOperator::In => {
            on_key().any(|r| r.operator == SelectorOperator::In && r.values.iter().all(in_clause))
        }
        SelectorOperator::NotIn => on_key().any(|r| match r.operator {
            SelectorOperator::In => !r.values.iter().any(in_clause),
            SelectorOperator::NotIn => clause
                .values
                .iter()
                .all(|c| r.values.iter().any(|v| v == c.as_ref())),
            SelectorOperator::DoesNotExist => true,
            SelectorOperator::Exists => false,
        }),
        SelectorOperator::Exists => {
            on_key().any(|r| matches!(r.operator, SelectorOperator::In | SelectorOperator::Exists))
        }
        SelectorOperator::DoesNotExist => {
            on_key().any(|r| r.operator == SelectorOperator::DoesNotExist)
        }
    }
}

/// Whether no object the request's selector selects can satisfy `clause`: the selections are
/// provably disjoint. A deny applies unless this is shown.
pub fn disjoint(request: &[SelectorRequirement], clause: &Requirement<'_>) -> bool {
    let negated = Requirement {
        key: clause.key,
        operator: match clause.operator {
            SelectorOperator::In => SelectorOperator::NotIn,
            SelectorOperator::NotIn => SelectorOperator::In,
            SelectorOperator::Exists => SelectorOperator::DoesNotExist,
            SelectorOperator::DoesNotExist => SelectorOperator::Exists,
        },
        values: clause.values,
    };
    implies(request, &negated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// The clause side of a requirement.
    fn check(
        f: fn(&[SelectorRequirement], &Requirement<'_>) -> bool,
        request: &[SelectorRequirement],
        clause: &SelectorRequirement,
    ) -> bool {
        let values: Vec<Cow<'_, str>> = clause
            .values
            .iter()
            .map(|v| Cow::Borrowed(v.as_str()))
            .collect();
        f(
            request,
            &Requirement {
                key: &clause.key,
                operator: clause.operator,
                values: &values,
            },
        )
    }

    fn implies(request: &[SelectorRequirement], clause: &SelectorRequirement) -> bool {
        check(super::implies, request, clause)
    }

    fn disjoint(request: &[SelectorRequirement], clause: &SelectorRequirement) -> bool {
        check(super::disjoint, request, clause)
    }

    fn holds(clause: &SelectorRequirement, value: Option<&str>) -> bool {
        let values: Vec<Cow<'_, str>> = clause
            .values
            .iter()
            .map(|v| Cow::Borrowed(v.as_str()))
            .collect();
        Requirement {
            key: &clause.key,
            operator: clause.operator,
            values: &values,
        }
        .holds(value)
    }

    use SelectorOperator::*;

    #[test]
    fn implication_is_what_every_selected_object_satisfies() {
        let node_a = req("spec.nodeName", In, &["a"]);
        assert!(implies(
            &[node_a.clone()][..],
            &req("spec.nodeName", In, &["a", "b"])
        ));
        assert!(!implies(&[req("spec.nodeName", In, &["a", "c"])], &node_a));
        assert!(!implies(&[], &node_a));
        assert!(!implies(&[req("other", In, &["a"])], &node_a));
        assert!(implies(
            &[node_a.clone()][..],
            &req("spec.nodeName", NotIn, &["b"])
        ));
        assert!(implies(
            &[req("k", NotIn, &["x", "y"])],
            &req("k", NotIn, &["x"])
        ));
        assert!(!implies(
            &[req("k", NotIn, &["x"])],
            &req("k", NotIn, &["x", "y"])
        ));
        assert!(implies(
            &[node_a.clone()][..],
            &req("spec.nodeName", Exists, &[])
        ));
        assert!(!implies(&[req("k", NotIn, &["x"])], &req("k", Exists, &[])));
        assert!(implies(
            &[req("k", DoesNotExist, &[])],
            &req("k", DoesNotExist, &[])
        ));
        assert!(implies(
            &[req("k", DoesNotExist, &[])],
            &req("k", NotIn, &["v"])
        ));
    }

    #[test]
    fn disjointness_is_shown_only_when_certain() {
        let protected = req("protected", Exists, &[]);
        assert!(disjoint(&[req("protected", DoesNotExist, &[])], &protected));
        assert!(!disjoint(&[], &protected));
        assert!(!disjoint(&[req("protected", NotIn, &["true"])], &protected));
        assert!(disjoint(
            &[req("tier", In, &["a"])],
            &req("tier", In, &["b"])
        ));
        assert!(!disjoint(
            &[req("tier", In, &["a", "b"])],
            &req("tier", In, &["b"])
        ));
    }

    #[test]
    fn objects_are_read_by_label_and_by_field() {
        let pod = json!({"metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "replicas": 3, "on": true}});
        assert_eq!(label(&pod, "app"), Some("web"));
        assert_eq!(label(&pod, "none"), None);
        assert_eq!(field(&pod, "spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(field(&pod, "spec.replicas").as_deref(), Some("3"));
        assert_eq!(field(&pod, "spec.on").as_deref(), Some("true"));
        assert_eq!(field(&pod, "spec"), None);
        assert!(holds(&req("app", In, &["web"]), Some("web")));
        assert!(holds(&req("app", NotIn, &["web"]), None));
        assert!(!holds(&req("app", Exists, &[]), None));
        assert!(holds(&req("app", DoesNotExist, &[]), None));
    }
}
