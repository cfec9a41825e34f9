//! The decision record format, version 1 (docs/records.md): one JSON object per line, written
//! here and read back here, so the writer and `authzd replay` cannot disagree about it.
//!
//! ```json
//! {"v":1,"kind":"decision","seq":41,"time":"2026-12-03T15:00:00.123Z","api":"Authorize",
//!  "caller":{"user":"envoy","groups":["system:authenticated"]},
//!  "request":{"user":"alice","groups":["dev"],
//!             "resource":{"namespace":"default","verb":"get","group":"","version":"v1",
//!                         "resource":"pods","subresource":"","name":""}},
//!  "decision":"allow","reason":"...","allowed_by":[{"authorizer":"RBAC",...}],
//!  "denied_by":[],"errors":[],"revision":12,"cached":true}
//! {"v":1,"kind":"gap","time":"2026-12-03T15:00:01.000Z","reason":"queue_full","dropped":250}
//! ```
//!
//! The request is spelled as `authzd test` files spell a case (`resource` or `non_resource`,
//! `content` with `object`, `old_object`, `changed_paths` and the selectors), so a record can
//! become a test case. A reader ignores fields it does not know (later minor additions); a
//! record of a version it does not know is an error naming the version.

use serde::{Deserialize, Serialize};

use super::record::{DecisionRecord, Gap, PackedAction, PackedStrings};
use super::time::rfc3339;
use std::io::Write as _;

use crate::engine::{Decision, Response, RuleRef};
use crate::request::{
    Action, Content, NonResourceAttributes, ResourceAttributes, SelectorOperator,
    SelectorRequirement, UserInfo,
};

/// The format version written, and the newest read.
pub const VERSION: u32 = 1;

/// How records spell a decision (as `authzd test` files do).
pub fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::NoOpinion => "no_opinion",
    }
}

fn parse_decision(name: &str) -> Option<Decision> {
    match name {
        "allow" => Some(Decision::Allow),
        "deny" => Some(Decision::Deny),
        "no_opinion" => Some(Decision::NoOpinion),
        _ => None,
    }
}

/// A decision line up to its answer; the answer's fields follow from [`AnswerOut`], written once
/// per shared answer ([`Response::recorded`](crate::engine::Response::recorded)), then
/// `revision` and `cached`.
#[derive(Serialize)]
struct DecisionOut<'a> {
    v: u32,
    kind: &'static str,
    seq: u64,
    time: String,
    api: &'static str,
    caller: CallerOut<'a>,
    request: RequestOut<'a>,
}

#[derive(Serialize)]
struct AnswerOut<'a> {
    decision: &'static str,
    reason: &'a str,
    allowed_by: Vec<RuleOut<'a>>,
    denied_by: Vec<RuleOut<'a>>,
    errors: &'a [String],
}

/// `"decision":...,"errors":[...]`: the answer's fields, without the braces.
fn answer_fields(response: &Response) -> Box<[u8]> {
    let answer = AnswerOut {
        decision: decision_name(response.decision),
        reason: &response.reason,
        allowed_by: response.allowed_by.iter().map(RuleOut::of).collect(),
        denied_by: response.denied_by.iter().map(RuleOut::of).collect(),
        errors: &response.errors,
    };
    let mut out = serde_json::to_vec(&answer).unwrap_or_default();
    out.pop();
    out.remove(0);
    out.into_boxed_slice()
}

#[derive(Serialize)]
struct CallerOut<'a> {
    user: &'a str,
    groups: &'a [String],
}

#[derive(Serialize)]
struct RequestOut<'a> {
    user: &'a str,
    groups: GroupsOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<ResourceOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    non_resource: Option<NonResourceOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<ContentOut<'a>>,
}

/// The packed groups, written as a list without collecting them.
struct GroupsOut<'a>(PackedStrings<'a>);

impl Serialize for GroupsOut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

#[derive(Serialize)]
struct ResourceOut<'a> {
    namespace: &'a str,
    verb: &'a str,
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    subresource: &'a str,
    name: &'a str,
}

#[derive(Serialize)]
struct NonResourceOut<'a> {
    path: &'a str,
    verb: &'a str,
}

#[derive(Serialize)]
struct ContentOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    old_object: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    changed_paths: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    field_selector: Vec<RequirementOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    label_selector: Vec<RequirementOut<'a>>,
    /// An AuthZEN request's `context`, which CEL conditions read.
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<&'a serde_json::Value>,
}

/// An object as the request carried it: its JSON when it is a JSON object (as content rules
/// read it), else its bytes as a JSON string. The server may decide on bytes that do not
/// parse (when no rule reads them), and replay must see the same bytes; no JSON object is a
/// string, so the two never read alike.
fn object_out(raw: &[u8]) -> serde_json::Value {
    match serde_json::from_slice(raw) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        _ => serde_json::Value::String(String::from_utf8_lossy(raw).into_owned()),
    }
}

fn object_in(value: serde_json::Value) -> Vec<u8> {
    match value {
        serde_json::Value::String(raw) => raw.into_bytes(),
        // A value read from JSON always writes back.
        other => serde_json::to_vec(&other).unwrap_or_default(),
    }
}

#[derive(Serialize)]
struct RequirementOut<'a> {
    key: &'a str,
    operator: &'static str,
    values: &'a [String],
}

#[derive(Serialize)]
struct RuleOut<'a> {
    authorizer: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    binding: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    role: &'a str,
    rule: u32,
    source: &'a str,
}

impl<'a> RuleOut<'a> {
    fn of(rule: &'a RuleRef) -> Self {
        Self {
            authorizer: rule.authorizer,
            binding: &rule.binding,
            role: &rule.role,
            rule: rule.rule_index,
            source: &rule.source,
        }
    }
}

fn requirements(list: &[SelectorRequirement]) -> Vec<RequirementOut<'_>> {
    list.iter()
        .map(|r| RequirementOut {
            key: &r.key,
            operator: r.operator.as_str(),
            values: &r.values,
        })
        .collect()
}

/// `{"resource": {...}}` or `{"non_resource": {...}}`: an action as a record's request spells
/// it (for reports over records, `authzd replay -o json`).
pub fn action_value(action: &Action) -> serde_json::Value {
    let value = match action {
        Action::Resource(r) => serde_json::to_value(ResourceOut {
            namespace: &r.namespace,
            verb: &r.verb,
            group: &r.group,
            version: &r.version,
            resource: &r.resource,
            subresource: &r.subresource,
            name: &r.name,
        })
        .map(|v| ("resource", v)),
        Action::NonResource(n) => serde_json::to_value(NonResourceOut {
            path: &n.path,
            verb: &n.verb,
        })
        .map(|v| ("non_resource", v)),
    };
    match value {
        Ok((key, value)) => serde_json::json!({ key: value }),
        Err(_) => serde_json::Value::Null,
    }
}

/// Appends `record` as one JSON object (no newline).
pub fn write_decision(out: &mut Vec<u8>, record: &DecisionRecord) {
    let request = record.request.view();
    let (resource, non_resource) = match request.action {
        PackedAction::Resource([namespace, verb, group, version, resource, subresource, name]) => (
            Some(ResourceOut {
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
            }),
            None,
        ),
        PackedAction::NonResource([path, verb]) => (None, Some(NonResourceOut { path, verb })),
    };
    let content = record.content.as_ref().map(|c| ContentOut {
        object: c.object.as_deref().map(object_out),
        old_object: c.old_object.as_deref().map(object_out),
        changed_paths: &c.changed_paths,
        field_selector: requirements(&c.field_selector),
        label_selector: requirements(&c.label_selector),
        context: c.context.as_ref(),
    });
    let response = &record.response;
    let line = DecisionOut {
        v: VERSION,
        kind: "decision",
        seq: record.seq,
        time: rfc3339(record.time),
        api: record.api,
        caller: CallerOut {
            user: &record.caller.name,
            groups: &record.caller.groups,
        },
        request: RequestOut {
            user: request.user,
            groups: GroupsOut(request.groups),
            resource,
            non_resource,
            content,
        },
    };
    // Serializing plain strings and numbers into memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, &line);
    out.pop();
    out.push(b',');
    out.extend_from_slice(response.recorded.get_or_init(|| answer_fields(response)));
    let _ = write!(
        out,
        r#","revision":{},"cached":{}}}"#,
        record.revision, record.cached
    );
}

#[derive(Serialize)]
struct GapOut {
    v: u32,
    kind: &'static str,
    time: String,
    reason: &'static str,
    dropped: u64,
}

/// Appends `gap` as one JSON object (no newline).
pub fn write_gap(out: &mut Vec<u8>, gap: &Gap) {
    let line = GapOut {
        v: VERSION,
        kind: "gap",
        time: rfc3339(gap.time),
        reason: gap.reason.label(),
        dropped: gap.dropped,
    };
    let _ = serde_json::to_writer(out, &line);
}

/// One line of a record stream, read back.
#[derive(Debug)]
pub enum Line {
    Decision(Box<ReadDecision>),
    /// `dropped` records lost here, for `reason` (as written: a reason this reader does not
    /// know is kept as it is spelled).
    Gap {
        reason: String,
        dropped: u64,
    },
    /// A line of a kind this reader does not know (a later minor addition): skipped.
    Other,
}

/// A decision record read back: what replay needs of it.
#[derive(Debug)]
pub struct ReadDecision {
    pub seq: u64,
    pub caller: String,
    pub user: UserInfo,
    pub action: Action,
    pub content: Option<Content>,
    pub decision: Decision,
    pub revision: u64,
}

#[derive(Deserialize)]
struct LineIn {
    v: u32,
    kind: String,
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    caller: Option<CallerIn>,
    #[serde(default)]
    request: Option<RequestIn>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    revision: u64,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    dropped: u64,
}

#[derive(Deserialize)]
struct CallerIn {
    #[serde(default)]
    user: String,
}

#[derive(Deserialize)]
struct RequestIn {
    user: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    resource: Option<ResourceIn>,
    #[serde(default)]
    non_resource: Option<NonResourceIn>,
    #[serde(default)]
    content: Option<ContentIn>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResourceIn {
    namespace: String,
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    name: String,
}

#[derive(Deserialize)]
struct NonResourceIn {
    path: String,
    verb: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ContentIn {
    object: Option<serde_json::Value>,
    old_object: Option<serde_json::Value>,
    changed_paths: Vec<String>,
    field_selector: Vec<RequirementIn>,
    label_selector: Vec<RequirementIn>,
    context: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RequirementIn {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

fn requirements_in(list: Vec<RequirementIn>) -> Result<Vec<SelectorRequirement>, String> {
    list.into_iter()
        .map(|r| {
            let operator = SelectorOperator::parse(&r.operator)
                .ok_or_else(|| format!("unknown selector operator `{}`", r.operator))?;
            Ok(SelectorRequirement {
                key: r.key,
                operator,
                values: r.values,
            })
        })
        .collect()
}

/// Reads one line of a record stream; the error says what is wrong with it.
pub fn read_line(line: &str) -> Result<Line, String> {
    let line: LineIn = serde_json::from_str(line).map_err(|e| e.to_string())?;
    if line.v > VERSION {
        return Err(format!(
            "a record of format version {} (this authzd reads version {VERSION} and older)",
            line.v
        ));
    }
    match line.kind.as_str() {
        "decision" => {}
        "gap" => {
            return Ok(Line::Gap {
                reason: line.reason.unwrap_or_default(),
                dropped: line.dropped,
            })
        }
        _ => return Ok(Line::Other),
    }
    let request = line
        .request
        .ok_or_else(|| "a decision record without `request`".to_string())?;
    let decision = line
        .decision
        .as_deref()
        .and_then(parse_decision)
        .ok_or_else(|| {
            "a decision record without a `decision` (allow, deny, no_opinion)".to_string()
        })?;
    let action =
        match (request.resource, request.non_resource) {
            (Some(r), None) => Action::Resource(ResourceAttributes {
                namespace: r.namespace,
                verb: r.verb,
                group: r.group,
                version: r.version,
                resource: r.resource,
                subresource: r.subresource,
                name: r.name,
            }),
            (None, Some(n)) => Action::NonResource(NonResourceAttributes {
                path: n.path,
                verb: n.verb,
            }),
            _ => return Err(
                "a decision record's request needs exactly one of `resource` and `non_resource`"
                    .to_string(),
            ),
        };
    let content = match request.content {
        None => None,
        Some(c) => {
            let mut content = Content::default();
            content.object = c.object.map(object_in);
            content.old_object = c.old_object.map(object_in);
            content.changed_paths = c.changed_paths;
            content.field_selector = requirements_in(c.field_selector)?;
            content.label_selector = requirements_in(c.label_selector)?;
            content.context = c.context;
            Some(content)
        }
    };
    Ok(Line::Decision(Box::new(ReadDecision {
        seq: line.seq,
        caller: line.caller.map(|c| c.user).unwrap_or_default(),
        user: UserInfo {
            name: request.user,
            groups: request.groups,
            ..UserInfo::default()
        },
        action,
        content,
        decision,
        revision: line.revision,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EncodedOnce;
    use crate::records::record::{DropReason, PackedRequest};
    use crate::request::Request;
    use std::sync::Arc;
    use std::time::SystemTime;

    fn record(action: Action, content: Option<Content>) -> DecisionRecord {
        DecisionRecord {
            seq: 7,
            time: SystemTime::now(),
            api: "Authorize",
            caller: Arc::new(UserInfo {
                name: "envoy".into(),
                groups: vec!["system:authenticated".into()],
                ..UserInfo::default()
            }),
            request: PackedRequest::pack(
                Request {
                    user: UserInfo {
                        name: "alice".into(),
                        groups: vec!["dev".into()],
                        ..UserInfo::default()
                    },
                    action,
                }
                .as_borrowed(),
            ),
            content,
            response: Arc::new(Response {
                decision: Decision::Deny,
                reason: "denied by rule".into(),
                allowed_by: vec![RuleRef {
                    authorizer: "RBAC",
                    binding: "ClusterRoleBinding/readers".into(),
                    role: "ClusterRole/reader".into(),
                    rule_index: 2,
                    source: "p.yaml:3".into(),
                }],
                denied_by: vec![],
                errors: vec!["role `x` not found".into()],
                encoded: EncodedOnce::default(),
                recorded: EncodedOnce::default(),
                plan: Default::default(),
            }),
            revision: 12,
            cached: true,
        }
    }

    fn written(record: &DecisionRecord) -> String {
        let mut out = Vec::new();
        write_decision(&mut out, record);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_record_reads_back_as_it_was_decided() {
        let mut content = Content::default();
        content.object = Some(br#"{"metadata":{"labels":{"app":"web"}}}"#.to_vec());
        content.old_object = Some(b"not json".to_vec());
        content.changed_paths = vec![".metadata.labels".into()];
        content.label_selector = vec![SelectorRequirement {
            key: "tier".into(),
            operator: SelectorOperator::NotIn,
            values: vec!["db".into()],
        }];
        content.context = Some(serde_json::json!({"ip": "10.0.0.1"}));
        let action = Action::Resource(ResourceAttributes {
            namespace: "default".into(),
            verb: "update".into(),
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            subresource: "scale".into(),
            name: "web".into(),
        });
        let line = written(&record(action.clone(), Some(content)));
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(json["v"], 1);
        assert_eq!(json["kind"], "decision");
        assert_eq!(json["decision"], "deny");
        assert_eq!(
            json["allowed_by"][0]["binding"],
            "ClusterRoleBinding/readers"
        );
        assert_eq!(json["allowed_by"][0]["rule"], 2);
        assert_eq!(json["errors"][0], "role `x` not found");
        assert_eq!(json["cached"], true);
        assert_eq!(
            json["request"]["content"]["object"]["metadata"]["labels"]["app"],
            "web"
        );
        let Line::Decision(read) = read_line(&line).unwrap() else {
            panic!("not a decision: {line}")
        };
        assert_eq!(read.seq, 7);
        assert_eq!(read.caller, "envoy");
        assert_eq!(read.user.name, "alice");
        assert_eq!(read.user.groups, vec!["dev"]);
        assert_eq!(read.action, action);
        assert_eq!(read.decision, Decision::Deny);
        assert_eq!(read.revision, 12);
        let content = read.content.unwrap();
        assert_eq!(
            content
                .decoded(crate::request::Which::Object)
                .unwrap()
                .unwrap()["metadata"]["labels"]["app"],
            "web"
        );
        assert_eq!(content.old_object.as_deref(), Some(&b"not json"[..]));
        assert_eq!(content.changed_paths, vec![".metadata.labels"]);
        assert_eq!(content.label_selector[0].operator, SelectorOperator::NotIn);
        assert_eq!(content.context, Some(serde_json::json!({"ip": "10.0.0.1"})));
    }

    #[test]
    fn a_non_resource_record_and_a_gap_read_back() {
        let action = Action::NonResource(NonResourceAttributes {
            path: "/metrics".into(),
            verb: "get".into(),
        });
        let line = written(&record(action.clone(), None));
        let Line::Decision(read) = read_line(&line).unwrap() else {
            panic!("not a decision")
        };
        assert_eq!(read.action, action);
        assert!(read.content.is_none());

        let mut out = Vec::new();
        write_gap(
            &mut out,
            &Gap {
                reason: DropReason::QueueFull,
                dropped: 250,
                time: SystemTime::now(),
            },
        );
        let gap = String::from_utf8(out).unwrap();
        assert!(gap.contains(r#""kind":"gap""#), "{gap}");
        let Line::Gap { reason, dropped } = read_line(&gap).unwrap() else {
            panic!("not a gap")
        };
        assert_eq!((reason.as_str(), dropped), ("queue_full", 250));
    }

    #[test]
    fn readers_skip_new_kinds_and_refuse_new_versions_and_broken_lines() {
        assert!(matches!(
            read_line(r#"{"v":1,"kind":"checkpoint","extra":1}"#),
            Ok(Line::Other)
        ));
        let newer = read_line(r#"{"v":2,"kind":"decision"}"#).unwrap_err();
        assert!(newer.contains("format version 2"), "{newer}");
        assert!(read_line("{not json").is_err());
        let both = read_line(
            r#"{"v":1,"kind":"decision","decision":"allow","request":{"user":"a","resource":{},"non_resource":{"path":"/","verb":"get"}}}"#,
        )
        .unwrap_err();
        assert!(both.contains("exactly one"), "{both}");
        let no_decision =
            read_line(r#"{"v":1,"kind":"decision","request":{"user":"a","resource":{}}}"#)
                .unwrap_err();
        assert!(no_decision.contains("decision"), "{no_decision}");
    }
}
