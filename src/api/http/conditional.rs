//! Kubernetes' conditional authorization (KEP-5681), alpha, on the webhook path: only with
//! `serve --alpha-conditional-authorization`, following the KEP's shapes as written in
//! kubernetes/enhancements (`keps/sig-auth/5681-conditional-authorization`), which may still
//! change.
//!
//! * A `SubjectAccessReview` whose `spec.conditionalAuthorization.mode` is set (any value:
//!   honouring `HumanReadable` or `Optimized` is voluntary) is asked in RETURN mode. When the
//!   answer depends on content, `status` is `allowed: false` with `conditionSetChain`
//!   ([`condition_set_chain`]); otherwise the answer is the usual one.
//! * `POST /apis/authorization.k8s.io/v1alpha1/authorizationconditionsreviews` takes an
//!   `AuthorizationConditionsReview` (the chain sent back with `object`/`oldObject`) and
//!   answers allowed, denied or neither ([`evaluate_chain`]).
//!
//! Without the flag the field is ignored (an old webhook: conditions are never returned, the
//! fold answers) and the review endpoint does not exist.
//!
//! What the sets say and how a chain is evaluated is the engine's
//! (`engine::condition_sets`); this file reads and writes them as the KEP's JSON.

use serde_json::{json, Map, Value};

use super::document::{BodyError, Object};
use super::kube_review;
use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::grpc::Review;
use crate::api::limits::{ContentLimits, MAX_CONDITIONS};
use crate::engine::condition_sets::{
    self, ChainVerdict, ConditionChain, ConditionSetError, Effect, Expression, PendingCondition,
    PendingSet, Selectors, WrittenSet, AUTHZD_CONDITIONS,
};
use crate::engine::conditional::{ReturnedRule, CEL};
use crate::engine::Decision;
use crate::kube::authorization::SubjectAccessReviewSpec;
use crate::proto;
use crate::request;
use crate::serving::{Call, Privilege};

/// The review's group version, as the KEP names it.
pub const REVIEW_API_VERSION: &str = "authorization.k8s.io/v1alpha1";
pub const REVIEW_KIND: &str = "AuthorizationConditionsReview";

/// Nested `conditionSetChain`s followed at most this deep (composite authorizers).
const MAX_CHAIN_DEPTH: usize = 8;
/// Condition sets in one chain, at every level together.
const MAX_SETS: usize = 64;

/// What of the review's `spec` an `authzd.io/conditions` condition carries: the subject and
/// the attributes, as the `SubjectAccessReview` wrote them.
pub(super) fn request_context(spec: Option<&Value>) -> Value {
    let mut context = Map::new();
    for key in [
        "user",
        "groups",
        "resourceAttributes",
        "nonResourceAttributes",
    ] {
        if let Some(value) = spec.and_then(|s| s.get(key)).filter(|v| !v.is_null()) {
            context.insert(key.to_string(), value.clone());
        }
    }
    Value::Object(context)
}

/// `status.conditionSetChain` for a conditional answer: `conditions` as the gRPC reply gives
/// them (precedence order), `context` from [`request_context`].
pub fn condition_set_chain(conditions: &[proto::Condition], context: &Value) -> Value {
    let rules: Option<Vec<ReturnedRule>> = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| convert::returned_rule(c.clone(), &format!("conditions[{i}]")).ok())
        .collect();
    let sets = match rules {
        Some(rules) => condition_sets::condition_sets(&rules),
        // Conditions this server wrote always read back; if one did not, the whole answer
        // still travels, evaluated together.
        None => vec![condition_sets::whole_answer(conditions.iter().map(is_deny))],
    };
    Value::Array(
        sets.iter()
            .map(|set| set_json(set, conditions, context))
            .collect(),
    )
}

fn is_deny(condition: &proto::Condition) -> bool {
    condition.effect == proto::RuleEffect::Deny as i32
}

/// One written set as the KEP's JSON.
fn set_json(set: &WrittenSet, wire: &[proto::Condition], context: &Value) -> Value {
    match set {
        WrittenSet::Decided {
            authorizer,
            allowed,
        } => {
            let verdict = if *allowed { "allowed" } else { "denied" };
            json!({"authorizerName": authorizer, verdict: true})
        }
        WrittenSet::Conditions {
            authorizer,
            conditions_type,
            failure_mode,
            conditions,
        } => {
            let conditions: Vec<Value> = conditions
                .iter()
                .map(|c| {
                    let condition = match &c.expression {
                        Expression::Cel(text) => text.clone(),
                        Expression::Rules(range) => {
                            authzd_condition(wire.get(range.clone()).unwrap_or_default(), context)
                        }
                    };
                    json!({
                        "id": c.id,
                        "effect": c.effect.as_str(),
                        "condition": condition,
                        "description": c.description,
                    })
                })
                .collect();
            json!({
                "authorizerName": authorizer,
                "conditionsType": conditions_type.as_str(),
                "failureMode": failure_mode.as_str(),
                "conditions": conditions,
            })
        }
    }
}

/// An `authzd.io/conditions` condition: `{"request": context, "rules": [...]}`, the rules as
/// EvaluateConditions takes them.
fn authzd_condition(conditions: &[proto::Condition], context: &Value) -> String {
    let rules: Vec<Value> = conditions.iter().map(condition_to_json).collect();
    json!({"request": context, "rules": rules}).to_string()
}

fn condition_to_json(c: &proto::Condition) -> Value {
    let rule = c.rule.clone().unwrap_or_default();
    json!({
        "effect": if c.effect == proto::RuleEffect::Deny as i32 { "Deny" } else { "Allow" },
        "rule": {
            "authorizer": rule.authorizer,
            "binding": rule.binding,
            "role": rule.role,
            "ruleIndex": rule.rule_index,
            "source": rule.source,
        },
        "language": c.language,
        "expression": c.expression,
        "cluster": c.cluster,
        "reason": c.reason,
        "otherwise": c.otherwise,
    })
}

fn condition_from_json(value: &Object<'_>) -> std::result::Result<proto::Condition, BodyError> {
    let effect = match value.string("effect")?.as_str() {
        "Allow" => proto::RuleEffect::Allow,
        "Deny" => proto::RuleEffect::Deny,
        other => {
            return Err(BodyError::field(
                &value.field_path("effect"),
                &format!("must be Allow or Deny (got `{other}`)"),
            ))
        }
    };
    let rule = match value.object("rule")? {
        Some(r) => proto::RuleRef {
            authorizer: r.string("authorizer")?,
            binding: r.string("binding")?,
            role: r.string("role")?,
            rule_index: match r.map.get("ruleIndex") {
                None | Some(Value::Null) => 0,
                Some(n) => n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        BodyError::field(&r.field_path("ruleIndex"), "must be a rule index")
                    })?,
            },
            source: r.string("source")?,
        },
        None => proto::RuleRef::default(),
    };
    Ok(proto::Condition {
        effect: effect as i32,
        rule: Some(rule),
        language: value.string("language")?,
        expression: value.string("expression")?,
        cluster: value.bool("cluster")?,
        reason: value.string("reason")?,
        otherwise: value.bool("otherwise")?,
    })
}

// --- AuthorizationConditionsReview -------------------------------------------------------------

/// An `AuthorizationConditionsReview` as sent: parsed when the content limits are at hand.
pub struct ConditionsReviewCall(pub Value);

/// Where the review's question is and where its answer goes: `request` and `response` (the
/// KEP's Go sketch, AdmissionReview's style) or `spec` and `status` (its YAML examples).
pub fn review_keys(root: &Map<String, Value>) -> (&'static str, &'static str) {
    if root.get("request").is_some_and(|v| !v.is_null()) || root.get("spec").is_none() {
        ("request", "response")
    } else {
        ("spec", "status")
    }
}

/// The review's question, parsed and bounded.
fn parse_review(root: &Object<'_>, limits: &ContentLimits) -> Result<ConditionChain> {
    let (question, _) = review_keys(root.map);
    let Some(body) = root.object(question)? else {
        return Err(BodyError::field(question, "is required").into());
    };
    let operation = body.string("operation")?;
    let verb = match operation.as_str() {
        "" => None,
        "CREATE" | "CONNECT" => Some("create"),
        "UPDATE" => Some("update"),
        "DELETE" => Some("delete"),
        other => {
            return Err(BodyError::field(
                &body.field_path("operation"),
                &format!("must be CREATE, UPDATE, DELETE or CONNECT (got `{other}`)"),
            )
            .into())
        }
    };
    let object = json_bytes(&body, "object")?;
    let old_object = json_bytes(&body, "oldObject")?;
    // The objects, bounded as any request's, through the gRPC conversion.
    let (_, bounded) = convert::action(
        Some(placeholder_action()),
        Some(proto::Content {
            object,
            old_object,
            changed_paths: Vec::new(),
        }),
        limits,
    )
    .map_err(|e| e.within(&format!("{}.", body.path)))?;
    // Absent objects are null to the conditions, not a request without content (which would
    // leave a rule that reads them unevaluated).
    let objects = bounded.unwrap_or_default();
    let mut parse = ChainParse {
        verb,
        limits,
        objects,
        chain: ConditionChain::default(),
    };
    let sets = parse.chain(&body, 0)?;
    if sets.is_empty() {
        return Err(BodyError::field(&body.field_path("conditionSetChain"), "is required").into());
    }
    Ok(ConditionChain {
        sets,
        ..parse.chain
    })
}

fn json_bytes(body: &Object<'_>, key: &str) -> std::result::Result<Vec<u8>, BodyError> {
    match body.map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(value @ Value::Object(_)) => Ok(value.to_string().into_bytes()),
        Some(_) => Err(BodyError::field(&body.field_path(key), "must be an object")),
    }
}

/// An action to bound the objects sent with, through the gRPC conversion.
fn placeholder_action() -> proto::Action {
    proto::Action {
        kind: Some(proto::action::Kind::ResourceAttributes(
            proto::ResourceAttributes {
                verb: "get".to_string(),
                resource: "*".to_string(),
                ..Default::default()
            },
        )),
    }
}

/// The state of parsing one review's chain.
struct ChainParse<'l> {
    /// The verb the admission `operation` names, if given.
    verb: Option<&'static str>,
    limits: &'l ContentLimits,
    /// The objects sent, without selectors.
    objects: request::Content,
    /// What is parsed so far: the contents and the count of sets.
    chain: ConditionChain,
}

impl ChainParse<'_> {
    fn chain(&mut self, body: &Object<'_>, depth: usize) -> Result<Vec<PendingSet>> {
        if depth > MAX_CHAIN_DEPTH {
            return Err(BodyError::field(
                &body.field_path("conditionSetChain"),
                &format!("nests deeper than {MAX_CHAIN_DEPTH} levels"),
            )
            .into());
        }
        let mut chain = Vec::new();
        for set in body.objects("conditionSetChain")? {
            self.chain.set_count += 1;
            if self.chain.set_count > MAX_SETS {
                return Err(BodyError::field(
                    &set.path,
                    &format!("the chain holds more than {MAX_SETS} condition sets"),
                )
                .into());
            }
            chain.push(self.set(&set, depth)?);
        }
        Ok(chain)
    }

    fn set(&mut self, set: &Object<'_>, depth: usize) -> Result<PendingSet> {
        if set.bool("allowed")? {
            return Ok(PendingSet::Allowed);
        }
        if set.bool("denied")? {
            return Ok(PendingSet::Denied);
        }
        if set.map.contains_key("conditionSetChain") {
            return Ok(PendingSet::Chain(self.chain(set, depth + 1)?));
        }
        let kind = set.string("conditionsType")?;
        let conditions = set.objects("conditions")?;
        if conditions.len() > MAX_CONDITIONS {
            return Err(ApiError::invalid(
                set.field_path("conditions"),
                Invalid::TooMany {
                    count: conditions.len(),
                    max: MAX_CONDITIONS,
                },
            ));
        }
        let mut pending = Vec::with_capacity(conditions.len());
        for condition in &conditions {
            let effect = match condition.string("effect")?.as_str() {
                "Allow" => Effect::Allow,
                "Deny" => Effect::Deny,
                "NoOpinion" => Effect::NoOpinion,
                other => {
                    return Err(BodyError::field(
                        &condition.field_path("effect"),
                        &format!("must be Allow, Deny or NoOpinion (got `{other}`)"),
                    )
                    .into())
                }
            };
            let text = condition.string("condition")?;
            let at = condition.field_path("condition");
            let id = condition.string("id")?;
            let (condition, selectors) = match kind.as_str() {
                CEL => PendingCondition::cel(id, effect, &text, &at)
                    .map_err(|ConditionSetError::Cel(problem)| BodyError::field(&at, &problem))?,
                AUTHZD_CONDITIONS => {
                    let (rules, request, selectors) =
                        authzd_rules(&text, &at, self.verb, self.limits)?;
                    let condition = PendingCondition {
                        id,
                        effect,
                        rules,
                        request,
                        content: 0,
                    };
                    (condition, selectors)
                }
                other => {
                    return Err(BodyError::field(
                        &set.field_path("conditionsType"),
                        &format!(
                            "`{other}` is not a condition type authzd wrote \
                             ({CEL} or {AUTHZD_CONDITIONS})"
                        ),
                    )
                    .into())
                }
            };
            let content = self.chain.content_for(&self.objects, selectors);
            pending.push(PendingCondition {
                content,
                ..condition
            });
        }
        Ok(PendingSet::Conditions(pending))
    }
}

/// An `authzd.io/conditions` condition: its rules and the request it carries (the verb the
/// admission `operation` names, when given: an update may have become a create).
fn authzd_rules(
    text: &str,
    at: &str,
    verb: Option<&str>,
    limits: &ContentLimits,
) -> Result<(Vec<ReturnedRule>, request::Request, Selectors)> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| BodyError::field(at, &format!("is not JSON: {e}")))?;
    let root = Object::root(&value).map_err(|_| BodyError::field(at, "must be a JSON object"))?;
    let root = Object {
        map: root.map,
        path: at.to_string(),
    };
    if root.object("request")?.is_none() {
        return Err(BodyError::field(&root.field_path("request"), "is required").into());
    }
    let context_at = format!("{}.", root.field_path("request"));
    let context: SubjectAccessReviewSpec =
        crate::kube::from_document(&value["request"]).map_err(kube_review::at(&context_at))?;
    let mut action = kube_review::action(
        context.resource_attributes,
        context.non_resource_attributes,
        &context_at,
    )?;
    if let (Some(verb), Some(proto::action::Kind::ResourceAttributes(r))) =
        (verb, action.kind.as_mut())
    {
        r.verb = verb.to_string();
    }
    let (action, selectors) = convert::action(Some(action), None, limits)?;
    let selectors = selectors
        .map(|c| (c.field_selector, c.label_selector))
        .unwrap_or_default();
    let user = convert::review_subject(
        context.user,
        String::new(),
        context.groups,
        Default::default(),
    )?;
    let wire_rules = root.objects("rules")?;
    if wire_rules.is_empty() || wire_rules.len() > MAX_CONDITIONS {
        return Err(BodyError::field(
            &root.field_path("rules"),
            &format!("must hold 1 to {MAX_CONDITIONS} rules"),
        )
        .into());
    }
    let mut rules = Vec::with_capacity(wire_rules.len());
    for rule in &wire_rules {
        let wire = condition_from_json(rule)?;
        rules.push(convert::returned_rule(wire, &rule.path)?);
    }
    Ok((rules, request::Request { user, action }, selectors))
}

impl Review for ConditionsReviewCall {
    type Asked = ConditionChain;
    type Reply = ChainVerdict;

    fn convert(self, limits: &ContentLimits) -> Result<(Self::Asked, u64)> {
        let root = Object::root(&self.0)?;
        Ok((parse_review(&root, limits)?, 0))
    }

    fn privilege(_: &Self::Asked) -> Privilege<'_> {
        // Evaluating conditions decides a request for a subject, as a SubjectAccessReview.
        Privilege::SUBJECT_ACCESS_REVIEW
    }

    async fn answer(call: &Call<'_>, asked: Self::Asked) -> Result<Self::Reply> {
        Ok(asked.evaluate(&mut |rules, request| call.finish_conditions(rules, request))?)
    }
}

/// The review sent, answered under `response` or `status` (as it asked, [`review_keys`]).
pub fn review_answer(document: Value, verdict: &ChainVerdict) -> Value {
    let answer_key = match &document {
        Value::Object(map) => review_keys(map).1,
        _ => "response",
    };
    let mut answer = Map::new();
    answer.insert(
        "allowed".into(),
        Value::Bool(verdict.decision == Decision::Allow),
    );
    if verdict.decision == Decision::Deny {
        answer.insert("denied".into(), Value::Bool(true));
    }
    if !verdict.reason.is_empty() {
        answer.insert("reason".into(), Value::String(verdict.reason.clone()));
    }
    if !verdict.evaluation_error.is_empty() {
        answer.insert(
            "evaluationError".into(),
            Value::String(verdict.evaluation_error.clone()),
        );
    }
    let mut document = document;
    if let Value::Object(map) = &mut document {
        map.insert(answer_key.to_string(), Value::Object(answer));
    }
    document
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::condition_sets::{AFTER_RBAC, CLUSTER_RULES, NAMESPACE_RULES, WHOLE_ANSWER};
    use crate::engine::conditional::evaluate;
    use crate::engine::content::DEFAULT_DIFF;
    use crate::engine::RuleRef;
    use crate::policy::content::condition::Condition;
    use crate::policy::content::Clauses;

    fn rule(deny: bool, cluster: bool, condition: Option<&str>) -> ReturnedRule {
        ReturnedRule {
            deny,
            cluster,
            rule_ref: RuleRef {
                authorizer: crate::engine::explain::RBAC,
                binding: Arc::from("ClusterRoleBinding/b"),
                role: Arc::from("ClusterRole/r"),
                rule_index: 0,
                source: Arc::from("p.yaml:1"),
            },
            reason: "a rule".into(),
            clauses: condition.map(|text| {
                Arc::new(Clauses {
                    condition: Some(Condition::compile(text).unwrap()),
                    ..Default::default()
                })
            }),
            otherwise: false,
            protected: false,
        }
    }

    /// Every shape the engine writes (CEL tiers, authzd tiers, the whole answer, an
    /// authorizer after RBAC), written as JSON here and read back by the review endpoint's
    /// parser, evaluates exactly as the engine's own chain for the same request and objects.
    #[test]
    fn written_chains_read_back_to_the_same_verdicts() {
        let after = ReturnedRule {
            otherwise: true,
            ..rule(false, false, None)
        };
        let protected = ReturnedRule {
            protected: true,
            ..rule(false, false, None)
        };
        let answers = [
            vec![
                rule(true, true, Some("object.spec.x == 2")),
                rule(false, true, Some("object.spec.x >= 1")),
            ],
            vec![
                rule(
                    false,
                    true,
                    Some("request.verb == 'get' && object.spec.x == 1"),
                ),
                after.clone(),
            ],
            vec![
                rule(true, false, Some("object.spec.x == 3")),
                protected,
                after,
            ],
            vec![rule(false, false, Some("object.spec.x == 1"))],
        ];
        let request = crate::request::Request {
            user: crate::request::UserInfo {
                name: "alice".into(),
                groups: vec!["dev".into()],
                ..Default::default()
            },
            action: crate::request::Action::Resource(crate::request::ResourceAttributes {
                namespace: "ns".into(),
                verb: "get".into(),
                resource: "widgets".into(),
                name: "w".into(),
                ..Default::default()
            }),
        };
        let context = json!({
            "user": "alice",
            "groups": ["dev"],
            "resourceAttributes": {"namespace": "ns", "verb": "get", "resource": "widgets", "name": "w"},
        });
        let finish = |rules: &[ReturnedRule], with: crate::request::RequestRef<'_>| {
            evaluate(rules, with, &DEFAULT_DIFF)
        };
        let shapes = [
            vec![(CLUSTER_RULES, Some(CEL))],
            vec![(CLUSTER_RULES, Some(AUTHZD_CONDITIONS)), (AFTER_RBAC, None)],
            vec![(WHOLE_ANSWER, Some(AUTHZD_CONDITIONS))],
            vec![(NAMESPACE_RULES, Some(CEL))],
        ];
        let mut decisions = std::collections::BTreeSet::new();
        for (rules, shape) in answers.iter().zip(shapes) {
            let wire: Vec<proto::Condition> = rules.iter().map(convert::condition).collect();
            let chain = condition_set_chain(&wire, &context);
            let written: Vec<_> = chain
                .as_array()
                .unwrap()
                .iter()
                .map(|set| {
                    (
                        set["authorizerName"].as_str().unwrap(),
                        set["conditionsType"].as_str(),
                    )
                })
                .collect();
            assert_eq!(written, shape, "{chain}");
            for x in [1, 2, 3] {
                let object = json!({"spec": {"x": x}});
                let review = json!({
                    "apiVersion": REVIEW_API_VERSION,
                    "kind": REVIEW_KIND,
                    "request": {"conditionSetChain": chain, "object": object},
                });
                let parsed =
                    parse_review(&Object::root(&review).unwrap(), &ContentLimits::default())
                        .unwrap();
                let from_json = parsed.evaluate(&mut |r, w| finish(r, w)).unwrap();
                let mut content = crate::request::Content::default();
                content.object = Some(object.to_string().into_bytes());
                let sets = condition_sets::condition_sets(rules);
                let engine = ConditionChain::of_written(&sets, rules, &request, &content).unwrap();
                let from_engine = engine.evaluate(&mut |r, w| finish(r, w)).unwrap();
                assert_eq!(from_json, from_engine, "{chain} with x = {x}");
                decisions.insert(format!("{:?}", from_json.decision));
            }
        }
        assert_eq!(decisions.len(), 3, "every decision comes up: {decisions:?}");
    }
}
