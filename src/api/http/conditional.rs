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
//! How authzd's conditional answer (rules in precedence order, the first that holds deciding)
//! becomes condition sets (in which any true Deny beats any true Allow, and a set with neither
//! passes to the next): one set per precedence tier that has returned rules (cluster rules,
//! then namespace rules: within a tier denies precede allows, so "any deny, else any allow" is
//! the first-match of the tier), then an unconditional set for what the authorizers after
//! RBAC answer. That decomposition is exact only when each rule holds or not for the request
//! as a whole; a rule scoped to changed paths (a `fields` clause, a condition over
//! `changedPaths`, an allow narrowed by a FieldPolicy) is decided per path, together with the
//! others, so then the whole answer travels as one set of two opaque conditions (deny if the
//! rules deny, allow if they allow). A condition is `k8s.io/cel` when it is the rule's CEL
//! condition over `object`/`oldObject` alone (or `true`), which kube-apiserver can evaluate
//! itself; otherwise the set is of type `authzd.io/conditions`, each condition a JSON object
//! carrying the rules and the request attributes they read, so it is self-contained as the
//! KEP asks.

use serde_json::{json, Map, Value};

use super::document::{BodyError, Object};
use crate::api::convert;
use crate::api::error::{ApiError, Invalid, Result};
use crate::api::grpc::Review;
use crate::api::limits::{ContentLimits, MAX_CONDITIONS};
use crate::engine::conditional::ReturnedRule;
use crate::engine::Decision;
use crate::proto;
use crate::request;
use crate::serving::{Call, Privilege};

/// The review's group version, as the KEP names it.
pub const REVIEW_API_VERSION: &str = "authorization.k8s.io/v1alpha1";
pub const REVIEW_KIND: &str = "AuthorizationConditionsReview";
/// Conditions authzd evaluates itself (see the module documentation).
pub const AUTHZD_CONDITIONS: &str = "authzd.io/conditions";
/// Kubernetes' built-in CEL condition type.
pub const KUBE_CEL: &str = "k8s.io/cel";

/// Nested `conditionSetChain`s followed at most this deep (composite authorizers).
const MAX_CHAIN_DEPTH: usize = 8;
/// Condition sets in one chain, at every level together.
const MAX_SETS: usize = 64;

/// Whether `spec` asks for conditions (`spec.conditionalAuthorization.mode` set).
pub(super) fn asks_conditions(spec: &Object<'_>) -> std::result::Result<bool, BodyError> {
    Ok(match spec.object("conditionalAuthorization")? {
        Some(config) => !config.string("mode")?.is_empty(),
        None => false,
    })
}

/// What of the review's `spec` an `authzd.io/conditions` condition carries: the subject and
/// the attributes, as the `SubjectAccessReview` wrote them.
pub(super) fn request_context(spec: &Object<'_>) -> Value {
    let mut context = Map::new();
    for key in [
        "user",
        "groups",
        "resourceAttributes",
        "nonResourceAttributes",
    ] {
        if let Some(value) = spec.map.get(key).filter(|v| !v.is_null()) {
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
    let decomposable = rules
        .as_deref()
        .is_some_and(|rules| rules.iter().all(|rule| !path_scoped(rule)));
    if !decomposable {
        return whole_answer_set(conditions, context);
    }
    let rules = rules.unwrap_or_default();
    let mut chain = Vec::new();
    let mut start = 0;
    while start < conditions.len() {
        if rules[start].otherwise {
            let verdict = if rules[start].deny {
                "denied"
            } else {
                "allowed"
            };
            chain.push(json!({
                "authorizerName": "after-rbac",
                verdict: true,
            }));
            start += 1;
            continue;
        }
        let cluster = rules[start].cluster;
        let end = (start..conditions.len())
            .find(|&i| rules[i].otherwise || rules[i].cluster != cluster)
            .unwrap_or(conditions.len());
        chain.push(tier_set(
            cluster,
            &conditions[start..end],
            &rules[start..end],
            start,
            context,
        ));
        start = end;
    }
    Value::Array(chain)
}

/// Whether a rule is decided per changed path (so not alone, as a condition is).
fn path_scoped(rule: &ReturnedRule) -> bool {
    rule.protected || rule.clauses.as_deref().is_some_and(|c| c.reads_changes())
}

/// A rule that is its CEL condition over the objects alone (or holds whatever the content).
fn kube_cel(rule: &ReturnedRule) -> Option<String> {
    let (language, expression) = rule.expression();
    if language != crate::engine::conditional::CEL {
        return None;
    }
    let reads_more = rule
        .clauses
        .as_deref()
        .and_then(|c| c.condition.as_ref())
        .is_some_and(|c| {
            let reads = c.reads();
            reads.request || reads.changed_paths || reads.selectors
        });
    (!reads_more).then_some(expression)
}

/// One precedence tier's rules as a condition set.
fn tier_set(
    cluster: bool,
    wire: &[proto::Condition],
    rules: &[ReturnedRule],
    first_index: usize,
    context: &Value,
) -> Value {
    let cel: Option<Vec<String>> = rules.iter().map(kube_cel).collect();
    let any_deny = rules.iter().any(|r| r.deny);
    let conditions: Vec<Value> = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let condition = match &cel {
                Some(texts) => texts[i].clone(),
                None => authzd_condition(std::slice::from_ref(&wire[i]), context),
            };
            json!({
                "id": format!("rule-{}", first_index + i),
                "effect": if rule.deny { "Deny" } else { "Allow" },
                "condition": condition,
                "description": description(rule),
            })
        })
        .collect();
    json!({
        "authorizerName": if cluster { "cluster-rules" } else { "namespace-rules" },
        "conditionsType": if cel.is_some() { KUBE_CEL } else { AUTHZD_CONDITIONS },
        "failureMode": if any_deny { "Deny" } else { "NoOpinion" },
        "conditions": conditions,
    })
}

/// The whole answer as one set: a Deny condition true when the rules deny, an Allow condition
/// true when they allow (each only when the rules can answer so).
fn whole_answer_set(conditions: &[proto::Condition], context: &Value) -> Value {
    let effect = |c: &proto::Condition| c.effect == proto::RuleEffect::Deny as i32;
    let can_deny = conditions.iter().any(effect);
    let can_allow = conditions.iter().any(|c| !effect(c));
    let condition = authzd_condition(conditions, context);
    let mut set = Vec::new();
    if can_deny {
        set.push(json!({
            "id": "deny",
            "effect": "Deny",
            "condition": condition,
            "description": "the rules, evaluated together (per changed path), deny",
        }));
    }
    if can_allow {
        set.push(json!({
            "id": "allow",
            "effect": "Allow",
            "condition": condition,
            "description": "the rules, evaluated together (per changed path), allow",
        }));
    }
    json!([{
        "authorizerName": "rbac",
        "conditionsType": AUTHZD_CONDITIONS,
        "failureMode": if can_deny { "Deny" } else { "NoOpinion" },
        "conditions": set,
    }])
}

fn description(rule: &ReturnedRule) -> String {
    let r = &rule.rule_ref;
    let mut text = String::new();
    if !r.binding.is_empty() {
        text.push_str(&r.binding);
        text.push_str(" -> ");
    }
    if !r.role.is_empty() {
        text.push_str(&format!("{} rules[{}]", r.role, r.rule_index));
    } else {
        text.push_str(r.authorizer);
    }
    text
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

/// One condition to evaluate: the rules it stands for and the request they are asked about.
struct PendingCondition {
    id: String,
    effect: Effect,
    rules: Vec<ReturnedRule>,
    request: request::Request,
    /// Which of the review's contents (the objects, with this request's selectors).
    content: usize,
}

/// The selectors a request carries (KEP-4601's, from the review's `resourceAttributes`),
/// which rules read as content.
type Selectors = (
    Vec<request::SelectorRequirement>,
    Vec<request::SelectorRequirement>,
);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    Allow,
    Deny,
    NoOpinion,
}

/// One condition set of the chain sent back.
enum PendingSet {
    Allowed,
    Denied,
    Conditions(Vec<PendingCondition>),
    Chain(Vec<PendingSet>),
}

/// An `AuthorizationConditionsReview` as sent: parsed when the content limits are at hand.
pub struct ConditionsReviewCall(pub Value);

/// A parsed `AuthorizationConditionsReview`: the chain and the content to evaluate it against.
pub struct ConditionsReview {
    chain: Vec<PendingSet>,
    /// The objects sent, with each distinct request's selectors (in practice one: the
    /// conditions of one answer share its request): decoded once each.
    contents: Vec<request::Content>,
    /// Condition sets in the chain, nested ones included (for the explanation).
    sets: usize,
}

/// The concrete decision a chain evaluates to, and why.
pub struct ChainVerdict {
    pub decision: Decision,
    pub reason: String,
    pub evaluation_error: String,
}

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
fn parse_review(root: &Object<'_>, limits: &ContentLimits) -> Result<ConditionsReview> {
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
        contents: Vec::new(),
        selectors: Vec::new(),
        sets: 0,
    };
    let chain = parse.chain(&body, 0)?;
    if chain.is_empty() {
        return Err(BodyError::field(&body.field_path("conditionSetChain"), "is required").into());
    }
    Ok(ConditionsReview {
        chain,
        contents: parse.contents,
        sets: parse.sets,
    })
}

fn json_bytes(body: &Object<'_>, key: &str) -> std::result::Result<Vec<u8>, BodyError> {
    match body.map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(value @ Value::Object(_)) => Ok(value.to_string().into_bytes()),
        Some(_) => Err(BodyError::field(&body.field_path(key), "must be an object")),
    }
}

/// The action a `k8s.io/cel` condition is evaluated under. It reads only `object` and
/// `oldObject`, so no attribute matters but the verb's kind: not a write, so that the
/// condition is evaluated once over the whole request (a write's rules are evaluated per
/// changed path), as a condition of a set is.
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
    contents: Vec<request::Content>,
    /// The selectors of each of `contents`.
    selectors: Vec<Selectors>,
    sets: usize,
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
            self.sets += 1;
            if self.sets > MAX_SETS {
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
            let (rules, request, selectors) = match kind.as_str() {
                KUBE_CEL => (
                    vec![cel_rule(&text, &at, effect)?],
                    placeholder_request(self.limits)?,
                    Selectors::default(),
                ),
                AUTHZD_CONDITIONS => authzd_rules(&text, &at, self.verb, self.limits)?,
                other => {
                    return Err(BodyError::field(
                        &set.field_path("conditionsType"),
                        &format!(
                            "`{other}` is not a condition type authzd wrote \
                             ({KUBE_CEL} or {AUTHZD_CONDITIONS})"
                        ),
                    )
                    .into())
                }
            };
            let content = self.content_for(selectors);
            pending.push(PendingCondition {
                id: condition.string("id")?,
                effect,
                rules,
                request,
                content,
            });
        }
        Ok(PendingSet::Conditions(pending))
    }

    /// The index of the objects with `selectors`, added on first use.
    fn content_for(&mut self, selectors: Selectors) -> usize {
        if let Some(i) = self.selectors.iter().position(|s| *s == selectors) {
            return i;
        }
        let mut content = self.objects.clone();
        (content.field_selector, content.label_selector) = selectors.clone();
        self.contents.push(content);
        self.selectors.push(selectors);
        self.contents.len() - 1
    }
}

/// A `k8s.io/cel` condition as a rule that holds when the expression does: an allow rule for
/// an Allow condition, else a deny rule (so that an evaluation error counts as true, as the
/// fold counts a deny that cannot be evaluated).
fn cel_rule(text: &str, at: &str, effect: Effect) -> Result<ReturnedRule> {
    let clauses = if text.trim() == "true" {
        None
    } else {
        let condition = crate::policy::content::condition::Condition::compile(text)
            .map_err(|problem| BodyError::field(at, &problem))?;
        Some(std::sync::Arc::new(crate::policy::content::Clauses {
            condition: Some(condition),
            ..Default::default()
        }))
    };
    Ok(ReturnedRule {
        deny: effect != Effect::Allow,
        cluster: false,
        rule_ref: crate::engine::explain::simple_rule_ref(crate::engine::explain::RBAC, ""),
        reason: format!("the condition at {at} holds"),
        clauses,
        otherwise: false,
        protected: false,
    })
}

fn placeholder_request(limits: &ContentLimits) -> Result<request::Request> {
    let (action, _) = convert::action(Some(placeholder_action()), None, limits)?;
    Ok(request::Request {
        user: request::UserInfo::default(),
        action,
    })
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
    let Some(context) = root.object("request")? else {
        return Err(BodyError::field(&root.field_path("request"), "is required").into());
    };
    let mut action = super::reviews::kube_action(&context)?;
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
        context.string("user")?,
        String::new(),
        context.strings("groups")?,
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

impl ConditionsReview {
    /// The chain evaluated as the KEP says: set by set until one is concrete; within a set any
    /// true Deny denies (an error too: authzd's sets fail closed), else any true NoOpinion
    /// (or error) passes, else any true Allow allows; a set with none passes. `finish`
    /// finishes returned rules against a request with content (the server's EvaluateConditions
    /// path, or the engine's offline).
    pub fn evaluate(&self, finish: &mut Finish<'_>) -> Result<ChainVerdict> {
        let mut evaluate_one = |condition: &PendingCondition| -> Result<(bool, String)> {
            let content = self.contents.get(condition.content);
            let response = finish(&condition.rules, condition.request.with_content(content))?;
            let error = response.evaluation_error();
            let holds = match condition.effect {
                Effect::Allow => response.decision == Decision::Allow,
                // A deny rule that cannot be evaluated applies (the fold's rule): Deny.
                Effect::Deny => response.decision == Decision::Deny,
                // authzd writes none; one read as its rules denying, failing closed.
                Effect::NoOpinion => response.decision == Decision::Deny || !error.is_empty(),
            };
            Ok((holds, error))
        };
        let verdict = evaluate_chain(&self.chain, &mut evaluate_one)?;
        Ok(verdict.unwrap_or(ChainVerdict {
            decision: Decision::NoOpinion,
            reason: format!(
                "no condition of the {} condition set(s) decided the request",
                self.sets
            ),
            evaluation_error: String::new(),
        }))
    }
}

/// Finishes returned rules against a request with content.
pub type Finish<'a> = dyn FnMut(
        &[ReturnedRule],
        request::RequestRef<'_>,
    ) -> Result<std::sync::Arc<crate::engine::Response>>
    + 'a;

/// An `AuthorizationConditionsReview` document evaluated with `finish`, answered as the
/// endpoint answers it (the document with `response` or `status`).
pub fn answer_review(
    document: Value,
    limits: &ContentLimits,
    finish: &mut Finish<'_>,
) -> Result<Value> {
    let review = parse_review(&Object::root(&document)?, limits)?;
    let verdict = review.evaluate(finish)?;
    Ok(review_answer(document, &verdict))
}

/// The first concrete verdict of `chain`, or `None` (no opinion).
fn evaluate_chain(
    chain: &[PendingSet],
    evaluate_one: &mut dyn FnMut(&PendingCondition) -> Result<(bool, String)>,
) -> Result<Option<ChainVerdict>> {
    for set in chain {
        let verdict = match set {
            PendingSet::Allowed => Some(ChainVerdict {
                decision: Decision::Allow,
                reason: "allowed unconditionally after the conditional sets".into(),
                evaluation_error: String::new(),
            }),
            PendingSet::Denied => Some(ChainVerdict {
                decision: Decision::Deny,
                reason: "denied unconditionally after the conditional sets".into(),
                evaluation_error: String::new(),
            }),
            PendingSet::Chain(nested) => evaluate_chain(nested, evaluate_one)?,
            PendingSet::Conditions(conditions) => evaluate_set(conditions, evaluate_one)?,
        };
        if verdict.is_some() {
            return Ok(verdict);
        }
    }
    Ok(None)
}

fn evaluate_set(
    conditions: &[PendingCondition],
    evaluate_one: &mut dyn FnMut(&PendingCondition) -> Result<(bool, String)>,
) -> Result<Option<ChainVerdict>> {
    let mut errors = Vec::new();
    for effect in [Effect::Deny, Effect::NoOpinion, Effect::Allow] {
        for condition in conditions.iter().filter(|c| c.effect == effect) {
            let (holds, error) = evaluate_one(condition)?;
            if !error.is_empty() {
                errors.push(format!("condition '{}': {error}", condition.id));
            }
            if !holds {
                continue;
            }
            let (decision, verb) = match effect {
                Effect::Deny => (Decision::Deny, "denied"),
                Effect::Allow => (Decision::Allow, "allowed"),
                // This set cannot allow; later sets may.
                Effect::NoOpinion => return Ok(None),
            };
            return Ok(Some(ChainVerdict {
                decision,
                reason: format!("condition '{}' {verb} the request", condition.id),
                evaluation_error: errors.join("; "),
            }));
        }
    }
    Ok(None)
}

impl Review for ConditionsReviewCall {
    type Asked = ConditionsReview;
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
        asked.evaluate(&mut |rules, request| Ok(call.finish_conditions(rules, request)?))
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
