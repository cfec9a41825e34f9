//! authzd's synthetic RBAC policy ([`authzd::synth`]) expressed for its peers, cedar-policy and
//! casbin, plus a deterministic sample of requests whose answers every peer must agree on with
//! authzd before anything is timed (a benchmark of a wrong answer is worthless).
//!
//! Translations cover what the synthetic policy uses: User and Group subjects, RoleBindings and
//! ClusterRoleBindings, Roles and ClusterRoles whose rules list verbs, API groups and resources
//! (with seed 003's deny rules and `-resource` negation). Anything else (resource names,
//! non-resource URLs, attribute restrictions, service accounts, ABAC) is refused with an error
//! rather than translated approximately.
//!
//! Group membership is a request attribute in Kubernetes. Neither peer can take a list of groups
//! with a request in its RBAC model, so both get it as data: the sample users' groups are stored
//! as memberships (cedar: entity parents; casbin: `g` links in the domains where the group holds
//! a grant), which is how each would be deployed with a directory.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context as _, Result};
use authzd::engine::Decision;
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use authzd::policy::model::{BindingKind, PolicyRule, PolicySet, RoleKind};
use authzd::synth::{self, Shape};

/// A user of the sample and the groups a directory would report for it.
#[derive(Clone, Debug)]
pub struct SampleUser {
    pub name: String,
    pub groups: Vec<String>,
}

/// Requests every engine answers, and the users they come from.
pub struct Sample {
    pub users: Vec<SampleUser>,
    pub requests: Vec<Request>,
}

/// xorshift64*, as in `authzd::synth`: deterministic spread of names.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as usize
    }
}

/// The resources a sample request asks about, with their API group. Covers plain allows
/// (pods), seed 003 denies (secrets), negation in `edit` (roles, secrets), the apps group
/// (deployments) and resources only `*` grants (configmaps).
const RESOURCES: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "secrets"),
    ("", "configmaps"),
    ("apps", "deployments"),
    ("rbac.authorization.k8s.io", "roles"),
];
const VERBS: &[&str] = &["get", "list", "delete", "create"];

/// The namespaces each subject (`User/x`, `Group/x`) holds a RoleBinding in.
fn namespaces_by_subject(policy: &PolicySet) -> HashMap<String, Vec<String>> {
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for binding in &policy.bindings {
        if binding.kind != BindingKind::RoleBinding {
            continue;
        }
        for subject in &binding.subjects {
            map.entry(format!("{}/{}", subject.kind, subject.name))
                .or_default()
                .push(binding.namespace.clone());
        }
    }
    map
}

/// A deterministic sample: the probe user (`bench-user` in the shape's groups), an operator
/// (cluster-wide view), and `users` random users in two random groups each, asking about
/// namespaces where they hold bindings about half the time and anywhere otherwise.
pub fn sample(shape: &Shape, policy: &PolicySet, users: usize, seed: u64) -> Sample {
    let mut rng = Rng(seed.max(1));
    let by_subject = namespaces_by_subject(policy);
    let mut sample_users = vec![
        SampleUser {
            name: synth::PROBE_USER.to_string(),
            groups: synth::probe_groups(shape),
        },
        SampleUser {
            name: "operator-0".to_string(),
            groups: Vec::new(),
        },
    ];
    // Each user once: a directory knows one set of groups per user, and the peers store it.
    let mut names = HashSet::new();
    for _ in 0..users * 4 {
        if sample_users.len() >= users + 2 {
            break;
        }
        let name = format!("user-{}", rng.below(shape.users));
        let groups = (0..2)
            .map(|_| format!("group-{}", rng.below(shape.groups)))
            .collect();
        if names.insert(name.clone()) {
            sample_users.push(SampleUser { name, groups });
        }
    }
    let mut requests = Vec::new();
    for user in &sample_users {
        let mut homes: Vec<&String> = by_subject
            .get(&format!("User/{}", user.name))
            .into_iter()
            .flatten()
            .collect();
        for group in &user.groups {
            homes.extend(
                by_subject
                    .get(&format!("Group/{group}"))
                    .into_iter()
                    .flatten(),
            );
        }
        for _ in 0..6 {
            let namespace = if !homes.is_empty() && rng.below(2) == 0 {
                homes[rng.below(homes.len())].clone()
            } else {
                synth::namespace(rng.below(shape.namespaces))
            };
            let (group, resource) = RESOURCES[rng.below(RESOURCES.len())];
            requests.push(Request {
                user: UserInfo {
                    name: user.name.clone(),
                    groups: user.groups.clone(),
                    ..Default::default()
                },
                action: Action::Resource(ResourceAttributes {
                    namespace,
                    verb: VERBS[rng.below(VERBS.len())].to_string(),
                    group: group.to_string(),
                    version: "v1".to_string(),
                    resource: resource.to_string(),
                    subresource: String::new(),
                    name: String::new(),
                }),
            });
        }
    }
    requests.extend([
        synth::allowed_request(shape),
        synth::denied_request(shape),
        synth::unmatched_request(shape),
    ]);
    Sample {
        users: sample_users,
        requests,
    }
}

/// The resource attributes of a request the translations understand.
fn resource_of(request: &Request) -> Result<&ResourceAttributes> {
    match &request.action {
        Action::Resource(r) if r.subresource.is_empty() && r.name.is_empty() => Ok(r),
        _ => bail!("only resource requests without subresource or name are translated"),
    }
}

/// A rule split into what the peers need, refusing what they are not given.
struct SimpleRule<'a> {
    verbs: &'a [String],
    groups: &'a [String],
    /// Resources granted (`*`, `res`, `*/sub`, `res/sub`).
    resources: Vec<&'a str>,
    /// Resources excepted by seed 003 negation (`-res`).
    excepted: Vec<&'a str>,
    deny: bool,
}

fn simple_rule(rule: &PolicyRule) -> Result<SimpleRule<'_>> {
    if !rule.resource_names.is_empty()
        || !rule.non_resource_urls.is_empty()
        || rule.attribute_restrictions.is_some()
    {
        bail!("rule uses resource names, non-resource URLs or restrictions: not translated");
    }
    let (excepted, resources): (Vec<&str>, Vec<&str>) = rule
        .resources
        .iter()
        .map(String::as_str)
        .partition(|r| r.starts_with('-'));
    Ok(SimpleRule {
        verbs: &rule.verbs,
        groups: &rule.api_groups,
        resources,
        excepted: excepted.iter().map(|r| &r[1..]).collect(),
        deny: rule.deny,
    })
}

/// One grant: a role made effective by a binding, in a namespace or cluster-wide (`*`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    scope: String,
    role_kind: RoleKind,
    role: String,
}

impl Grant {
    fn id(&self) -> String {
        format!("{}|{}/{}", self.scope, self.role_kind.as_str(), self.role)
    }

    /// The role's own key: `ClusterRole/NAME` or `Role/NS/NAME`.
    fn role_key(&self) -> String {
        match self.role_kind {
            RoleKind::ClusterRole => format!("ClusterRole/{}", self.role),
            RoleKind::Role => format!("Role/{}/{}", self.scope, self.role),
        }
    }
}

/// Grants with their subjects (`User/x`, `Group/x`), and each role's rules by key.
struct Flattened<'a> {
    grants: BTreeMap<Grant, BTreeSet<String>>,
    rules: HashMap<String, Vec<SimpleRule<'a>>>,
}

fn flatten(policy: &PolicySet) -> Result<Flattened<'_>> {
    if !policy.abac.is_empty() {
        bail!("ABAC policies are not translated");
    }
    let mut rules = HashMap::new();
    for role in &policy.roles {
        if role.aggregation_rule.is_some() {
            bail!("aggregated ClusterRoles are not translated");
        }
        let key = match role.kind {
            RoleKind::ClusterRole => format!("ClusterRole/{}", role.name),
            RoleKind::Role => format!("Role/{}/{}", role.namespace, role.name),
        };
        let simple = role.rules.iter().map(simple_rule).collect::<Result<_>>()?;
        rules.insert(key, simple);
    }
    let mut grants: BTreeMap<Grant, BTreeSet<String>> = BTreeMap::new();
    for binding in &policy.bindings {
        let scope = match binding.kind {
            BindingKind::ClusterRoleBinding => "*".to_string(),
            BindingKind::RoleBinding => binding.namespace.clone(),
        };
        if binding.kind == BindingKind::ClusterRoleBinding
            && binding.role_ref.kind != RoleKind::ClusterRole
        {
            bail!("ClusterRoleBinding to a Role");
        }
        let grant = Grant {
            scope,
            role_kind: binding.role_ref.kind,
            role: binding.role_ref.name.clone(),
        };
        let subjects = grants.entry(grant).or_default();
        for subject in &binding.subjects {
            if subject.kind != "User" && subject.kind != "Group" {
                bail!("subject kind {} is not translated", subject.kind);
            }
            subjects.insert(format!("{}/{}", subject.kind, subject.name));
        }
    }
    Ok(Flattened { grants, rules })
}

// ---------------------------------------------------------------------------------------------
// cedar-policy
// ---------------------------------------------------------------------------------------------

/// The policy for cedar: one policy per (grant, rule), `principal in Grant::"…"`; users and
/// groups are entities whose parents are their grants (and, for users, their groups).
pub struct CedarPolicy {
    pub policies: String,
    pub entities: Vec<cedar_policy::Entity>,
    pub policy_count: usize,
}

fn cedar_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

fn uid(kind: &str, id: &str) -> Result<cedar_policy::EntityUid> {
    Ok(cedar_policy::EntityUid::from_type_name_and_id(
        cedar_policy::EntityTypeName::from_str(kind)
            .map_err(|e| anyhow!("entity type {kind}: {e}"))?,
        cedar_policy::EntityId::new(id),
    ))
}

pub fn cedar_policy(policy: &PolicySet, users: &[SampleUser]) -> Result<CedarPolicy> {
    let flat = flatten(policy)?;
    let mut text = String::new();
    let mut policy_count = 0;
    let mut parents: HashMap<String, HashSet<cedar_policy::EntityUid>> = HashMap::new();
    for (grant, subjects) in &flat.grants {
        let key = grant.role_key();
        let rules = flat
            .rules
            .get(&key)
            .with_context(|| format!("binding to missing role {key}"))?;
        let grant_uid = uid("Grant", &grant.id())?;
        for subject in subjects {
            parents
                .entry(subject.clone())
                .or_default()
                .insert(grant_uid.clone());
        }
        for rule in rules {
            let action = if rule.verbs.iter().any(|v| v == "*") {
                "action".to_string()
            } else {
                let verbs: Vec<String> = rule
                    .verbs
                    .iter()
                    .map(|v| format!("Action::{v:?}"))
                    .collect();
                format!("action in [{}]", verbs.join(", "))
            };
            let mut when = Vec::new();
            if grant.scope != "*" {
                when.push(format!("context.namespace == {:?}", grant.scope));
            }
            if !rule.groups.iter().any(|g| g == "*") {
                let groups: Vec<&str> = rule.groups.iter().map(String::as_str).collect();
                when.push(format!("{}.contains(context.group)", cedar_list(&groups)));
            }
            if !rule.resources.contains(&"*") {
                let alternatives: Vec<String> = rule
                    .resources
                    .iter()
                    .map(|r| match r.strip_prefix("*/") {
                        Some(sub) => format!("context.resource like \"*/{sub}\""),
                        None => format!("context.resource == {r:?}"),
                    })
                    .collect();
                if alternatives.is_empty() {
                    continue;
                }
                when.push(format!("({})", alternatives.join(" || ")));
            }
            for excepted in &rule.excepted {
                when.push(format!("context.resource != {excepted:?}"));
            }
            let effect = if rule.deny { "forbid" } else { "permit" };
            let condition = if when.is_empty() {
                String::new()
            } else {
                format!(" when {{ {} }}", when.join(" && "))
            };
            text.push_str(&format!(
                "{effect}(principal in Grant::{:?}, {action}, resource){condition};\n",
                grant.id()
            ));
            policy_count += 1;
        }
    }
    for user in users {
        let entry = parents.entry(format!("User/{}", user.name)).or_default();
        for group in &user.groups {
            entry.insert(uid("Group", group)?);
        }
    }
    let mut entities = Vec::with_capacity(parents.len() + flat.grants.len());
    for grant in flat.grants.keys() {
        entities.push(cedar_policy::Entity::new_no_attrs(
            uid("Grant", &grant.id())?,
            HashSet::new(),
        ));
    }
    for (subject, parents) in parents {
        let (kind, name) = subject
            .split_once('/')
            .with_context(|| format!("subject key {subject}"))?;
        entities.push(cedar_policy::Entity::new_no_attrs(
            uid(kind, name)?,
            parents,
        ));
    }
    Ok(CedarPolicy {
        policies: text,
        entities,
        policy_count,
    })
}

/// A compiled cedar authorizer over the translated policy.
pub struct Cedar {
    pub policies: cedar_policy::PolicySet,
    pub entities: cedar_policy::Entities,
    authorizer: cedar_policy::Authorizer,
    resource: cedar_policy::EntityUid,
}

/// A request as cedar takes it: built once, outside the timed loop, as a caller would.
pub struct CedarRequest(cedar_policy::Request);

impl Cedar {
    pub fn new(translated: CedarPolicy) -> Result<Self> {
        let policies = cedar_policy::PolicySet::from_str(&translated.policies)
            .map_err(|e| anyhow!("cedar policies: {e}"))?;
        let entities = cedar_policy::Entities::from_entities(translated.entities, None)
            .map_err(|e| anyhow!("cedar entities: {e}"))?;
        Ok(Cedar {
            policies,
            entities,
            authorizer: cedar_policy::Authorizer::new(),
            resource: uid("Resource", "any")?,
        })
    }

    pub fn request(&self, request: &Request) -> Result<CedarRequest> {
        let r = resource_of(request)?;
        let context = cedar_policy::Context::from_pairs([
            (
                "namespace".to_string(),
                cedar_policy::RestrictedExpression::new_string(r.namespace.clone()),
            ),
            (
                "group".to_string(),
                cedar_policy::RestrictedExpression::new_string(r.group.clone()),
            ),
            (
                "resource".to_string(),
                cedar_policy::RestrictedExpression::new_string(r.resource.clone()),
            ),
        ])
        .map_err(|e| anyhow!("cedar context: {e}"))?;
        let request = cedar_policy::Request::new(
            uid("User", &request.user.name)?,
            uid("Action", &r.verb)?,
            self.resource.clone(),
            context,
            None,
        )
        .map_err(|e| anyhow!("cedar request: {e}"))?;
        Ok(CedarRequest(request))
    }

    /// The policies that determined cedar's answer, as text (for a disagreement's report).
    pub fn explain(&self, request: &CedarRequest) -> String {
        let response = self
            .authorizer
            .is_authorized(&request.0, &self.policies, &self.entities);
        response
            .diagnostics()
            .reason()
            .filter_map(|id| self.policies.policy(id))
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Cedar's answer in authzd's terms: a deny with a determining policy is an explicit
    /// deny (a `forbid` matched); a deny with none is "no policy applies", NoOpinion.
    pub fn decide(&self, request: &CedarRequest) -> Decision {
        let response = self
            .authorizer
            .is_authorized(&request.0, &self.policies, &self.entities);
        match response.decision() {
            cedar_policy::Decision::Allow => Decision::Allow,
            cedar_policy::Decision::Deny if response.diagnostics().reason().next().is_some() => {
                Decision::Deny
            }
            cedar_policy::Decision::Deny => Decision::NoOpinion,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// casbin
// ---------------------------------------------------------------------------------------------

/// RBAC with domains: a binding is a `g` link subject -> role in the binding's namespace (or
/// `*` for a ClusterRoleBinding); a role's rules are `p` lines in the role's namespace (or `*`
/// for a ClusterRole). Deny rules have effect `deny`, which overrides any allow, as seed 003's
/// deny does for every subject the synthetic policy has. Cheap field tests come first in the
/// matcher so casbin's evaluation short-circuits as early as it can.
pub const CASBIN_MODEL: &str = r#"
[request_definition]
r = sub, dom, grp, res, act

[policy_definition]
p = sub, dom, grp, res, act, ex, eft

[role_definition]
g = _, _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = (p.dom == "*" || p.dom == r.dom) && (p.act == "*" || p.act == r.act) && (p.grp == "*" || p.grp == r.grp) && (p.res == "*" || p.res == r.res) && (g(r.sub, p.sub, r.dom) || g(r.sub, p.sub, "*")) && (p.ex == "-" || !regexMatch(r.res, p.ex))
"#;

pub struct CasbinPolicy {
    pub policies: Vec<Vec<String>>,
    pub links: Vec<Vec<String>>,
}

fn casbin_subject(subject: &str) -> String {
    // Users and groups share casbin's one namespace of names: keep them apart.
    match subject.split_once('/') {
        Some(("User", name)) => format!("u:{name}"),
        Some(("Group", name)) => format!("g:{name}"),
        _ => subject.to_string(),
    }
}

pub fn casbin_policy(policy: &PolicySet, users: &[SampleUser]) -> Result<CasbinPolicy> {
    let flat = flatten(policy)?;
    let mut policies = Vec::new();
    for role in &policy.roles {
        let (key, domain) = match role.kind {
            RoleKind::ClusterRole => (format!("ClusterRole/{}", role.name), "*".to_string()),
            RoleKind::Role => (
                format!("Role/{}/{}", role.namespace, role.name),
                role.namespace.clone(),
            ),
        };
        for rule in flat.rules.get(&key).into_iter().flatten() {
            let excepted = if rule.excepted.is_empty() {
                "-".to_string()
            } else {
                format!("^({})$", rule.excepted.join("|"))
            };
            let effect = if rule.deny { "deny" } else { "allow" };
            for verb in rule.verbs {
                for group in rule.groups {
                    for resource in &rule.resources {
                        policies.push(vec![
                            key.clone(),
                            domain.clone(),
                            group.clone(),
                            resource.to_string(),
                            verb.clone(),
                            excepted.clone(),
                            effect.to_string(),
                        ]);
                    }
                }
            }
        }
    }
    let mut links = Vec::new();
    let mut group_scopes: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (grant, subjects) in &flat.grants {
        for subject in subjects {
            links.push(vec![
                casbin_subject(subject),
                grant.role_key(),
                grant.scope.clone(),
            ]);
            if let Some(group) = subject.strip_prefix("Group/") {
                group_scopes
                    .entry(group.to_string())
                    .or_default()
                    .insert(grant.scope.clone());
            }
        }
    }
    // Memberships, in every domain where the group holds a grant: casbin follows role links
    // only within one domain.
    let mut seen = HashSet::new();
    for user in users {
        for group in &user.groups {
            for scope in group_scopes.get(group).into_iter().flatten() {
                let link = vec![
                    format!("u:{}", user.name),
                    format!("g:{group}"),
                    scope.clone(),
                ];
                if seen.insert(link.clone()) {
                    links.push(link);
                }
            }
        }
    }
    Ok(CasbinPolicy { policies, links })
}

/// The request tuple casbin enforces: subject, domain (namespace), API group, resource, verb.
pub type CasbinRequest = (String, String, String, String, String);

pub fn casbin_request(request: &Request) -> Result<CasbinRequest> {
    let r = resource_of(request)?;
    Ok((
        format!("u:{}", request.user.name),
        r.namespace.clone(),
        r.group.clone(),
        r.resource.clone(),
        r.verb.clone(),
    ))
}

/// Loads the translated policy into a casbin enforcer (plain or cached).
pub async fn casbin_enforcer<E>(translated: CasbinPolicy) -> Result<E>
where
    E: casbin::CoreApi + casbin::MgmtApi,
{
    let model = casbin::DefaultModel::from_str(CASBIN_MODEL)
        .await
        .map_err(|e| anyhow!("casbin model: {e}"))?;
    let mut enforcer = E::new(model, casbin::MemoryAdapter::default())
        .await
        .map_err(|e| anyhow!("casbin enforcer: {e}"))?;
    enforcer
        .add_policies(translated.policies)
        .await
        .map_err(|e| anyhow!("casbin policies: {e}"))?;
    enforcer
        .add_grouping_policies(translated.links)
        .await
        .map_err(|e| anyhow!("casbin links: {e}"))?;
    Ok(enforcer)
}

/// A policy and shape for `bindings` bindings, namespaces capped at 10,000 (the scaling shape
/// of BENCHMARKS.md's peers table: at 100k bindings and beyond, 10k namespaces; the probe user is in 10 groups).
pub fn scaling_shape(bindings: usize) -> Shape {
    Shape {
        namespaces: (bindings / 10).clamp(1, 10_000),
        ..Shape::with_bindings(bindings)
    }
}

#[cfg(test)]
mod tests {
    //! `cd bench-peers && cargo test --release` (release shares the artifacts bench.sh builds).
    use super::*;
    use authzd::engine::{Engine, EngineConfig};
    use casbin::CoreApi as _;

    fn fixture() -> (PolicySet, Sample, Vec<Decision>) {
        let shape = scaling_shape(2_000);
        let policy = synth::policy(&shape, 42);
        let sample = sample(&shape, &policy, 60, 7);
        let engine = Engine::new(&policy, EngineConfig::default());
        let truth = sample
            .requests
            .iter()
            .map(|r| engine.authorize(r).decision)
            .collect();
        (policy, sample, truth)
    }

    #[test]
    fn the_sample_exercises_allow_deny_and_no_opinion() {
        let (_, sample, truth) = fixture();
        for decision in [Decision::Allow, Decision::Deny, Decision::NoOpinion] {
            let n = truth.iter().filter(|d| **d == decision).count();
            assert!(n >= 5, "{decision:?}: {n} of {}", sample.requests.len());
        }
    }

    #[test]
    fn cedar_gives_authzds_answer_on_every_sampled_request() {
        let (policy, sample, truth) = fixture();
        let cedar = Cedar::new(cedar_policy(&policy, &sample.users).unwrap()).unwrap();
        for (request, expected) in sample.requests.iter().zip(&truth) {
            let got = cedar.decide(&cedar.request(request).unwrap());
            assert_eq!(got, *expected, "{request:?}");
        }
    }

    #[test]
    fn casbin_gives_authzds_answer_on_every_sampled_request() {
        let (policy, sample, truth) = fixture();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let translated = casbin_policy(&policy, &sample.users).unwrap();
        let enforcer: casbin::Enforcer = runtime.block_on(casbin_enforcer(translated)).unwrap();
        for (request, expected) in sample.requests.iter().zip(&truth) {
            let allowed = enforcer.enforce(casbin_request(request).unwrap()).unwrap();
            assert_eq!(allowed, *expected == Decision::Allow, "{request:?}");
        }
    }

    #[test]
    fn untranslatable_policy_is_refused() {
        let (mut policy, sample, _) = fixture();
        policy.roles[0].rules[0].resource_names = vec!["only-this".to_string()];
        assert!(cedar_policy(&policy, &sample.users).is_err());
        assert!(casbin_policy(&policy, &sample.users).is_err());
    }
}
