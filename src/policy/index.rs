//! The immutable compiled index: what a decision reads instead of scanning bindings.
//!
//! # Partitions
//!
//! The index is split into parts that a policy change can replace one by one (see
//! [`compile::apply`](crate::policy::compile::apply)); every part sits behind an `Arc`, so an
//! update shares everything it does not rebuild:
//!
//! * [`ClusterRoles`]: every ClusterRole's effective rules (after aggregation) and their who-can
//!   index. Always rebuilt whole, since aggregation relates ClusterRoles to each other; there
//!   are few of them.
//! * **cluster scope** ([`ScopeBindings`]): the ClusterRoleBindings.
//! * one [`NamespacePartition`] per namespace: its Roles (with their who-can index) and its
//!   RoleBindings. A namespace's RoleBindings can only reference its own Roles or ClusterRoles,
//!   so a namespace is rebuilt with nothing but its own objects.
//! * [`AbacPartition`]: the ABAC lines.
//!
//! # Stable ClusterRole slots
//!
//! Bindings in cluster scope and in every namespace reference ClusterRoles, but must survive the
//! ClusterRoles being rebuilt without being rebuilt themselves. So ClusterRoles live in
//! *slots*: a slot belongs to one name for the life of an index and all its updates. A rebuild
//! carries the name → slot map over; a deleted ClusterRole leaves a tombstone (its slot holds
//! `None`, so bindings to it report the missing role); a re-created name gets its old slot back.
//! A binding whose ClusterRole had no slot when its partition was built (the role did not exist
//! and never had) is resolved by name at query time instead ([`RoleTarget::ClusterByName`]).
//! A full build ([`compile`](crate::policy::compile::compile)) starts from fresh slots.
//!
//! # Grants by subject (Authorize)
//!
//! Cluster scope and each namespace hold a hash map from user name (users and service
//! accounts) and from group name to the bindings that name that subject ([`NameMap`], keyed by
//! the name's hash). `Authorize` hashes the request's user and each of its groups once and looks
//! each up at cluster scope and in the request's namespace — `2 × (1 + groups)` lookups — and
//! evaluates only those bindings' roles. Binding ids are
//! positions within their scope, in canonical order (by namespace and name), so sorting the
//! cluster candidates and then the namespace candidates by position visits bindings exactly in
//! the canonical order of a full walk (cluster bindings first), which the explanation depends on.
//!
//! # Rules by (verb, resource) and bindings by role (who-can)
//!
//! Each rule is filed under its positive verb entries (or `*`) and positive resource entries
//! (`res`, `res/sub`, `*`, `*/sub`) or a non-resource marker; a request probes at most six keys.
//! Candidates are then checked with the exact matcher, so the index only narrows, never
//! decides. ClusterRole rules live in [`ClusterRoles`], a namespace's Role rules in its
//! partition (Roles of other namespaces cannot be reached from the request's scope). From a rule,
//! each scope maps a role (ClusterRole slot or local Role) to the bindings referencing it.
//!
//! # Rules of one big role (Authorize)
//!
//! A role with more than [`RULE_INDEX_THRESHOLD`] rules (an aggregated ClusterRole, a long
//! deny list) carries a [`RuleIndex`]: the same keys ([`filing_keys`]), but per role and
//! holding rule positions, so `Authorize` does not scan the roles of its candidate bindings.
//! The lists a request probes ([`RuleProbe`]) are merged in ascending position, so rules are
//! still met in rule order and the first allowing and denying rules are those a walk finds.
//! Rules with only negated verbs or resources match nothing (see `policy::rbac`) and are filed
//! nowhere; a negated entry beside positive ones only narrows what the positives match.
//!
//! # Memory
//!
//! The index is resident for the life of the process and holds every binding, so a binding
//! costs only what decisions and explanations read ([`BindingEntry`]): no copy of the model
//! binding, the binding's and role's names stored once as the tails of the ids a decision
//! returns, each subject in one allocation ([`BoundSubject`]), role ids, namespaces and
//! sources shared by all bindings of one build with the same value, a user or group's grants
//! inline when there is one ([`NameGrants`]), and every per-scope collection built to its
//! exact size (a namespace holds few bindings, so growth slack would dominate).
//! `authzd-bench-peers` (in `bench-peers/`) reports the resulting bytes per binding.
//!
//! INVARIANT: every query answers exactly what the reference evaluator answers on the same
//! policy; `tests/properties/differential.rs` property-tests this, and `tests/properties/incremental.rs` that an
//! updated index answers exactly what a full build of the new policy answers.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

pub use crate::policy::namespace_map::NamespaceMap;

use crate::policy::describe::{self, BindingFacts};
use crate::policy::model::{
    AbacRule, BindingKind, PolicyRule, RoleKind, Subject, SERVICE_ACCOUNT_PREFIX,
};
use crate::policy::rbac::is_negated;
use crate::request::{ActionRef, Groups};

/// A binding's position within its scope (cluster scope, or one namespace).
pub type BindingId = u32;
/// A Role's position within its namespace partition, or a ClusterRole slot.
pub type RoleId = u32;

/// What a binding's roleRef resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleTarget {
    /// A Role of the binding's own namespace partition (built together with the binding).
    Local(RoleId),
    /// A ClusterRole slot, stable across ClusterRole rebuilds; a tombstone means missing.
    ClusterSlot(RoleId),
    /// A ClusterRole that had no slot when the binding's partition was built: looked up by
    /// name at query time.
    ClusterByName,
    /// A `Role` referenced from a ClusterRoleBinding (every loader rejects this): looked up by
    /// name in the partition of the binding's namespace at query time.
    ForeignRole,
    /// A Role missing from the binding's own namespace. Final: the namespace's Roles and
    /// RoleBindings are always rebuilt together.
    Missing,
}

/// A binding's data as decisions and explanations need it, and nothing more: the index keeps
/// no copy of the model [`Binding`](crate::policy::model::Binding). Strings repeated across
/// bindings (namespace, role id, source) are single allocations shared by every binding of one
/// build that has the same value; the binding's and its role's names are the tails of their
/// ids.
#[derive(Debug)]
pub struct BindingEntry {
    /// `ClusterRoleBinding/NAME` / `RoleBinding/NS/NAME`.
    pub binding_id: Arc<str>,
    /// `ClusterRole/NAME` / `Role/NS/NAME`.
    pub role_id: Arc<str>,
    /// The binding's namespace (`""` for ClusterRoleBindings as loaders write them).
    pub namespace: Arc<str>,
    /// `file:line`.
    pub source: Arc<str>,
    /// The subjects as written, in order.
    pub subjects: Box<[BoundSubject]>,
    pub role: RoleTarget,
    /// Lengths of the binding's name and its role's name, the tails of `binding_id` and
    /// `role_id`.
    name_len: u32,
    role_name_len: u32,
    pub kind: BindingKind,
    pub role_kind: RoleKind,
    pub cluster: bool,
}

impl BindingEntry {
    /// `binding_id` must end with `name` and `role_id` with `role_name` (as
    /// [`describe::binding_id`] and
    /// [`describe::role_id`] write them).
    pub fn new(
        facts: BindingFacts<'_>,
        ids: (Arc<str>, Arc<str>, Arc<str>, Arc<str>),
        subjects: Box<[BoundSubject]>,
        role: RoleTarget,
    ) -> Self {
        let (binding_id, role_id, namespace, source) = ids;
        Self {
            name_len: tail_len(&binding_id, facts.name),
            role_name_len: tail_len(&role_id, facts.role_name),
            binding_id,
            role_id,
            namespace,
            source,
            subjects,
            role,
            kind: facts.kind,
            role_kind: facts.role_kind,
            cluster: facts.kind == BindingKind::ClusterRoleBinding,
        }
    }

    pub fn name(&self) -> &str {
        str_tail(&self.binding_id, self.name_len)
    }

    /// The name in the binding's roleRef.
    pub fn role_name(&self) -> &str {
        str_tail(&self.role_id, self.role_name_len)
    }

    /// What explanations say about this binding.
    pub fn facts(&self) -> BindingFacts<'_> {
        BindingFacts {
            kind: self.kind,
            namespace: &self.namespace,
            name: self.name(),
            role_kind: self.role_kind,
            role_name: self.role_name(),
        }
    }
}

/// Length of `tail` when `text` ends with it; 0 otherwise (ids are always built ending with
/// their names, and names never approach 4 GiB, so 0 is never reached in practice).
fn tail_len(text: &str, tail: &str) -> u32 {
    if text.ends_with(tail) {
        u32::try_from(tail.len()).unwrap_or(0)
    } else {
        0
    }
}

/// The last `len` bytes of `text` (all of it if shorter; `""` if not at a char boundary).
fn str_tail(text: &str, len: u32) -> &str {
    let start = text.len().saturating_sub(len as usize);
    text.get(start..).unwrap_or("")
}

/// One binding subject as written, in one allocation: its kind (as a tag for the three kinds
/// that match anything), its name and, for service accounts, the user name it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundSubject {
    /// `User`/`Group`: the name. `ServiceAccount` with a namespace (its own or the binding's):
    /// the user name it matches, `system:serviceaccount:NS:NAME`. `ServiceAccount` without:
    /// NAME. Any other kind: KIND followed by NAME.
    text: Box<str>,
    /// Where NAME starts in `text`.
    name_at: u32,
    kind: BoundKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoundKind {
    User,
    Group,
    ServiceAccount,
    /// A service account with no namespace of its own in a binding without one: matches nothing.
    NamespacelessServiceAccount,
    /// Any other kind (never matches).
    Other,
}

impl BoundSubject {
    /// `subject` of a binding in `binding_namespace`.
    pub fn new(subject: &Subject, binding_namespace: &str) -> Self {
        let (kind, text, name_at) = match subject.kind.as_str() {
            "User" => (BoundKind::User, subject.name.clone(), 0),
            "Group" => (BoundKind::Group, subject.name.clone(), 0),
            "ServiceAccount" => match subject.user_name(binding_namespace) {
                Some(user) => {
                    let name_at = user.len() - subject.name.len();
                    (BoundKind::ServiceAccount, user, name_at)
                }
                None => (
                    BoundKind::NamespacelessServiceAccount,
                    subject.name.clone(),
                    0,
                ),
            },
            other => (
                BoundKind::Other,
                format!("{other}{}", subject.name),
                other.len(),
            ),
        };
        Self {
            text: text.into_boxed_str(),
            name_at: u32::try_from(name_at).unwrap_or(0),
            kind,
        }
    }

    /// What the subject matches: the same as [`Subject::user_name`] and
    /// [`Subject::group_name`] of the subject as written.
    pub fn matches(&self) -> SubjectName<'_> {
        match self.kind {
            BoundKind::User | BoundKind::ServiceAccount => SubjectName::User(&self.text),
            BoundKind::Group => SubjectName::Group(&self.text),
            BoundKind::NamespacelessServiceAccount | BoundKind::Other => SubjectName::Nothing,
        }
    }

    /// Upstream `describeSubject`, as [`describe::describe_subject`] words the subject as
    /// written.
    pub fn describe(&self) -> String {
        let name = self.text.get(self.name_at as usize..).unwrap_or("");
        match self.kind {
            BoundKind::User => describe::describe_subject_parts("User", name, ""),
            BoundKind::Group => describe::describe_subject_parts("Group", name, ""),
            BoundKind::ServiceAccount => {
                // `system:serviceaccount:NS:NAME`: NS sits between the prefix and `:NAME`.
                let end = (self.name_at as usize).saturating_sub(1);
                let namespace = self
                    .text
                    .get(SERVICE_ACCOUNT_PREFIX.len()..end)
                    .unwrap_or("");
                describe::describe_subject_parts("ServiceAccount", name, namespace)
            }
            BoundKind::NamespacelessServiceAccount => {
                describe::describe_subject_parts("ServiceAccount", name, "")
            }
            BoundKind::Other => {
                let kind = self.text.get(..self.name_at as usize).unwrap_or("");
                describe::describe_subject_parts(kind, name, "")
            }
        }
    }
}

/// What a binding subject matches: one user name (users, and service accounts as
/// `system:serviceaccount:NS:NAME`), one group, or nothing (unknown kinds, service accounts
/// without a namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectName<'a> {
    User(&'a str),
    Group(&'a str),
    Nothing,
}

/// A role's effective rules (after aggregation), with a [`RuleIndex`] when it has more than
/// [`RULE_INDEX_THRESHOLD`] of them.
///
/// Kept as small as the plain `Vec` it replaced (a boxed slice plus a nullable box): roles
/// with few rules, which is nearly all of them, pay no memory for the index.
#[derive(Debug, Default)]
pub struct RoleEntry {
    rules: Box<[PolicyRule]>,
    index: Option<Box<RuleIndex>>,
}

/// Roles with more rules than this get a [`RuleIndex`]. Below it a plain walk is cheaper: a
/// rule that fails on its verb costs a few nanoseconds to reject, while a probe costs up to six
/// hash lookups plus a merge, about what sixteen such rejections cost.
pub const RULE_INDEX_THRESHOLD: usize = 16;

impl RoleEntry {
    pub fn new(rules: Vec<PolicyRule>) -> Self {
        let index = (rules.len() > RULE_INDEX_THRESHOLD).then(|| Box::new(RuleIndex::new(&rules)));
        Self {
            rules: rules.into_boxed_slice(),
            index,
        }
    }

    pub fn rules(&self) -> &[PolicyRule] {
        &self.rules
    }

    /// The rule index, present only for roles above [`RULE_INDEX_THRESHOLD`].
    pub fn rule_index(&self) -> Option<&RuleIndex> {
        self.index.as_deref()
    }

    /// The rules that can match a request probing `probe`, as `(index, rule)` in rule order:
    /// every rule for a small role, the index's candidates for a big one. `probe` is only
    /// called for a big role, so callers can build it lazily. The exact matcher still decides
    /// each rule; this only skips rules that cannot match.
    pub fn candidates<'a, 'p>(
        &'a self,
        probe: impl FnOnce() -> &'p RuleProbe<'p>,
    ) -> RuleCandidates<'a> {
        match &self.index {
            None => RuleCandidates::All(self.rules.iter().enumerate()),
            Some(index) => RuleCandidates::Indexed {
                rules: &self.rules,
                merged: index.probe(probe()),
            },
        }
    }
}

/// What one request looks up in a [`RuleIndex`] or [`RulesByVerb`]: the verb keys (the verb
/// and `*`) and the resource keys (`res` or `res/sub`, `*`, `*/sub`; or the non-resource
/// marker). Built once per request, and only when a big role or who-can needs it.
#[derive(Debug)]
pub struct RuleProbe<'a> {
    pub verb: &'a str,
    combined: &'a str,
    /// `*/sub` for a subresource request, empty otherwise.
    wildcard_sub: String,
    non_resource: bool,
}

impl<'a> RuleProbe<'a> {
    /// `combined` is `res` or `res/sub` (see `rbac::MatchTarget::combined`).
    pub fn new(action: ActionRef<'a>, combined: &'a str) -> Self {
        match action {
            ActionRef::Resource(r) => Self {
                verb: r.verb,
                combined,
                wildcard_sub: if r.subresource.is_empty() {
                    String::new()
                } else {
                    format!("*/{}", r.subresource)
                },
                non_resource: false,
            },
            ActionRef::NonResource { verb, .. } => Self {
                verb,
                combined: "",
                wildcard_sub: String::new(),
                non_resource: true,
            },
        }
    }

    /// The resource keys a matching rule can be filed under, as [`filing_keys`] files them.
    pub fn resource_keys(&self) -> SmallVec<[&str; 3]> {
        if self.non_resource {
            SmallVec::from_slice(&[NON_RESOURCE_KEY])
        } else if self.wildcard_sub.is_empty() {
            SmallVec::from_slice(&[self.combined, "*"])
        } else {
            SmallVec::from_slice(&[self.combined, "*", self.wildcard_sub.as_str()])
        }
    }

    /// The verb keys a matching rule can be filed under: the verb, and `*` unless it is `*`.
    fn verb_keys(&self) -> impl Iterator<Item = &str> {
        let wildcard = (self.verb != "*").then_some("*");
        std::iter::once(self.verb).chain(wildcard)
    }
}

/// Calls `file(verb key, resource key)` for every key pair a rule must be filed under so that
/// every request it matches finds it (see [`RuleProbe`]). Completeness, from `policy::rbac`:
/// a match needs a positive verb entry equal to the verb or `*`, and either a positive
/// resource entry that is `*`, equal to `res`/`res/sub`, or exactly `*/sub`, or (non-resource
/// requests) a non-empty `nonResourceURLs`. Negated entries never make a rule match (a list of
/// only negated entries matches nothing), so they are not filed. A positive `*` makes other
/// entries of its list redundant keys.
pub fn filing_keys(rule: &PolicyRule, mut file: impl FnMut(&str, &str)) {
    fn positive(entries: &[String]) -> impl Iterator<Item = &str> {
        let wildcard = entries.iter().any(|e| e == "*");
        let all = entries
            .iter()
            .map(String::as_str)
            .filter(move |e| !wildcard && !is_negated(e));
        wildcard.then_some("*").into_iter().chain(all)
    }
    for verb in positive(&rule.verbs) {
        for resource in positive(&rule.resources) {
            file(verb, resource);
        }
        if !rule.non_resource_urls.is_empty() {
            file(verb, NON_RESOURCE_KEY);
        }
    }
}

/// One big role's rules by (verb key, resource key), each list in rule order. Only narrows:
/// a rule not filed under any key a request probes cannot match it.
#[derive(Debug, Default)]
pub struct RuleIndex {
    by_verb: FxHashMap<Box<str>, FxHashMap<Box<str>, Vec<u32>>>,
}

impl RuleIndex {
    fn new(rules: &[PolicyRule]) -> Self {
        let mut index = Self::default();
        for (position, rule) in rules.iter().enumerate() {
            let position = u32::try_from(position).unwrap_or(u32::MAX);
            filing_keys(rule, |verb, resource| {
                let by_resource = index.by_verb.entry(verb.into()).or_default();
                let list = by_resource.entry(resource.into()).or_default();
                // Entries repeated within a rule file it once.
                if list.last() != Some(&position) {
                    list.push(position);
                }
            });
        }
        for by_resource in index.by_verb.values_mut() {
            for list in by_resource.values_mut() {
                list.shrink_to_fit();
            }
        }
        index
    }

    /// The rules filed under any key `probe` visits, in rule order, each once.
    pub fn probe(&self, probe: &RuleProbe<'_>) -> MergedRules<'_> {
        let mut lists = SmallVec::new();
        for verb in probe.verb_keys() {
            let Some(by_resource) = self.by_verb.get(verb) else {
                continue;
            };
            for key in probe.resource_keys() {
                if let Some(list) = by_resource.get(key).filter(|l| !l.is_empty()) {
                    lists.push(list.as_slice());
                }
            }
        }
        MergedRules { lists }
    }
}

/// The union of up to six sorted rule lists, in ascending order without repeats: rules are
/// visited in the order a walk of the whole role would meet them, so "first matching rule"
/// stays what it was.
#[derive(Debug)]
pub struct MergedRules<'a> {
    lists: SmallVec<[&'a [u32]; 6]>,
}

impl Iterator for MergedRules<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let lowest = self.lists.iter().filter_map(|l| l.first()).min().copied()?;
        for list in self.lists.iter_mut() {
            if list.first() == Some(&lowest) {
                *list = &list[1..];
            }
        }
        Some(lowest)
    }
}

/// [`RoleEntry::candidates`]: every rule, or a big role's index candidates.
pub enum RuleCandidates<'a> {
    All(std::iter::Enumerate<std::slice::Iter<'a, PolicyRule>>),
    Indexed {
        rules: &'a [PolicyRule],
        merged: MergedRules<'a>,
    },
}

impl<'a> Iterator for RuleCandidates<'a> {
    type Item = (usize, &'a PolicyRule);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RuleCandidates::All(all) => all.next(),
            RuleCandidates::Indexed { rules, merged } => {
                // Positions come from the same rules, so `get` always finds them; a missing
                // one would only be skipped.
                merged.find_map(|i| rules.get(i as usize).map(|rule| (i as usize, rule)))
            }
        }
    }
}

/// "Subject `subject` of binding `binding` (of the scope holding the grant) is this
/// user/group." Ordered by binding position, then subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub binding: BindingId,
    /// Index of the subject within the binding, for the reason string.
    pub subject: u32,
}

/// The grants naming one user or group in one scope: almost always exactly one, kept inline
/// rather than in a vector of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameGrants {
    One(Grant),
    Many(Box<[Grant]>),
}

impl NameGrants {
    /// `grants` (in the order given) in the smallest form holding them.
    pub fn from_vec(grants: Vec<Grant>) -> Self {
        match grants.as_slice() {
            [one] => NameGrants::One(*one),
            _ => NameGrants::Many(grants.into_boxed_slice()),
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[Grant] {
        match self {
            NameGrants::One(grant) => std::slice::from_ref(grant),
            NameGrants::Many(grants) => grants,
        }
    }
}

/// Bindings of one scope by the subject they name.
#[derive(Debug, Default)]
pub struct ScopeGrants {
    pub users: NameMap<NameGrants>,
    pub groups: NameMap<NameGrants>,
}

impl ScopeGrants {
    /// The grants naming a request's user or one of its groups, in cluster scope (`cluster`)
    /// and in the request's namespace (`local`), appended to `into_cluster` and `into_local`.
    /// Each name is hashed once for both scopes.
    pub fn collect<A: smallvec::Array<Item = Grant>>(
        cluster: &ScopeGrants,
        local: Option<&ScopeGrants>,
        user: &str,
        groups: Groups<'_>,
        into_cluster: &mut smallvec::SmallVec<A>,
        into_local: &mut smallvec::SmallVec<A>,
    ) {
        let users = (&cluster.users, local.map(|l| &l.users));
        lookup_names(users, [user].into_iter(), into_cluster, into_local);
        let groups = groups.iter();
        let maps = (&cluster.groups, local.map(|l| &l.groups));
        lookup_names(maps, groups, into_cluster, into_local);
    }
}

/// Looks each name up in a cluster-scope and a namespace map, hashing it once; maps that are
/// empty are skipped (and nothing is hashed when both are).
#[inline]
fn lookup_names<'a, A: smallvec::Array<Item = Grant>>(
    (cluster, local): (&NameMap<NameGrants>, Option<&NameMap<NameGrants>>),
    names: impl Iterator<Item = &'a str>,
    into_cluster: &mut smallvec::SmallVec<A>,
    into_local: &mut smallvec::SmallVec<A>,
) {
    let cluster = Some(cluster).filter(|map| !map.is_empty());
    let local = local.filter(|map| !map.is_empty());
    match (cluster, local) {
        (None, None) => {}
        (Some(map), None) => {
            for name in names {
                if let Some(grants) = map.get(HashedName::new(name)) {
                    into_cluster.extend_from_slice(grants.as_slice());
                }
            }
        }
        (None, Some(map)) => {
            for name in names {
                if let Some(grants) = map.get(HashedName::new(name)) {
                    into_local.extend_from_slice(grants.as_slice());
                }
            }
        }
        (Some(cluster), Some(local)) => {
            for name in names {
                let name = HashedName::new(name);
                if let Some(grants) = cluster.get(name) {
                    into_cluster.extend_from_slice(grants.as_slice());
                }
                if let Some(grants) = local.get(name) {
                    into_local.extend_from_slice(grants.as_slice());
                }
            }
        }
    }
}

/// A name with its [`name_hash`].
#[derive(Clone, Copy, Debug)]
pub struct HashedName<'a> {
    pub name: &'a str,
    pub hash: u64,
}

impl<'a> HashedName<'a> {
    pub fn new(name: &'a str) -> Self {
        Self {
            name,
            hash: name_hash(name),
        }
    }
}

/// The hash [`NameMap`] files a name under.
pub fn name_hash(name: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(name)
}

/// A map from user or group name, keyed by the name's [`name_hash`] so that a request hashes
/// each of its names once however many scopes it looks in. Names whose hashes collide share a
/// slot and are told apart by comparison.
#[derive(Debug)]
pub struct NameMap<V> {
    map: HashMap<u64, NameSlot<V>, BuildHasherDefault<PrehashedHasher>>,
}

/// The names sharing a hash: almost always one, held inline (a `SmallVec` of one would add a
/// capacity word and a tag to every slot of every map).
#[derive(Debug)]
enum NameSlot<V> {
    One((Box<str>, V)),
    /// Names whose hashes collide.
    Many(Box<[(Box<str>, V)]>),
}

impl<V> NameSlot<V> {
    fn as_slice(&self) -> &[(Box<str>, V)] {
        match self {
            NameSlot::One(entry) => std::slice::from_ref(entry),
            NameSlot::Many(entries) => entries,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [(Box<str>, V)] {
        match self {
            NameSlot::One(entry) => std::slice::from_mut(entry),
            NameSlot::Many(entries) => entries,
        }
    }

    /// This slot with `entry` added last.
    fn with(self, entry: (Box<str>, V)) -> Self {
        match self {
            NameSlot::Many(entries) if entries.is_empty() => NameSlot::One(entry),
            NameSlot::One(first) => NameSlot::Many(Box::new([first, entry])),
            NameSlot::Many(entries) => {
                let mut entries = entries.into_vec();
                entries.push(entry);
                NameSlot::Many(entries.into_boxed_slice())
            }
        }
    }

    fn map<W>(self, mut convert: impl FnMut(V) -> W) -> NameSlot<W> {
        match self {
            NameSlot::One((name, value)) => NameSlot::One((name, convert(value))),
            NameSlot::Many(entries) => NameSlot::Many(
                entries
                    .into_vec()
                    .into_iter()
                    .map(|(name, value)| (name, convert(value)))
                    .collect(),
            ),
        }
    }
}

impl<V> Default for NameSlot<V> {
    /// No names yet (only while a name is being added).
    fn default() -> Self {
        NameSlot::Many(Box::default())
    }
}

impl<V> Default for NameMap<V> {
    fn default() -> Self {
        Self {
            map: HashMap::default(),
        }
    }
}

impl<V> NameMap<V> {
    #[inline]
    pub fn get(&self, name: HashedName<'_>) -> Option<&V> {
        let slot = self.map.get(&name.hash)?;
        slot.as_slice()
            .iter()
            .find(|(key, _)| **key == *name.name)
            .map(|(_, value)| value)
    }

    /// The value for `name`, inserted as `V::default()` if absent.
    pub fn entry(&mut self, name: &str) -> &mut V
    where
        V: Default,
    {
        self.entry_hashed(HashedName::new(name))
    }

    fn entry_hashed(&mut self, name: HashedName<'_>) -> &mut V
    where
        V: Default,
    {
        let slot = self.map.entry(name.hash).or_default();
        let found = slot
            .as_slice()
            .iter()
            .position(|(key, _)| **key == *name.name);
        let position = match found {
            Some(position) => position,
            None => {
                let entry = (name.name.into(), V::default());
                *slot = std::mem::take(slot).with(entry);
                slot.as_slice().len() - 1
            }
        };
        &mut slot.as_mut_slice()[position].1
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The same names with each value converted by `convert`, in a map (and slots) of exactly
    /// the size they need: building by insertion leaves up to half of a map's room unused.
    pub fn map_values<W>(self, mut convert: impl FnMut(V) -> W) -> NameMap<W> {
        NameMap {
            map: self
                .map
                .into_iter()
                .map(|(hash, slot)| (hash, slot.map(&mut convert)))
                .collect(),
        }
    }
}

/// The hasher of [`NameMap`]: its keys already are hashes.
#[derive(Default)]
pub struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u64` keys; a plain FNV-1a fold keeps it correct regardless.
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Where a rule lives: role (local Role id or ClusterRole slot, depending on the index holding
/// it) and index within the role's effective rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleLoc {
    pub role: RoleId,
    pub rule: u32,
}

/// Marker resource key for rules filed by their non-resource URLs.
pub const NON_RESOURCE_KEY: &str = "\0non-resource";

/// The who-can index of one set of roles: verb key (`verb` or `*`) -> resource key -> rules.
#[derive(Debug, Default)]
pub struct RulesByVerb {
    pub by_verb: FxHashMap<Box<str>, FxHashMap<Box<str>, Vec<RuleLoc>>>,
}

impl RulesByVerb {
    /// Rules filed under any key the action can hit: `(verb | *) × (combined | * | */sub)`, or
    /// the non-resource marker. Sorted and de-duplicated.
    pub fn candidate_rules(&self, verb: &str, resource_keys: &[&str]) -> Vec<RuleLoc> {
        let mut found = Vec::new();
        for verb_key in [verb, "*"] {
            let Some(by_resource) = self.by_verb.get(verb_key) else {
                continue;
            };
            for key in resource_keys {
                if let Some(locs) = by_resource.get(*key) {
                    found.extend_from_slice(locs);
                }
            }
            if verb == "*" {
                break;
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// Every ClusterRole, in stable slots.
#[derive(Debug, Default)]
pub struct ClusterRoles {
    /// By slot; `None` is a tombstone (a ClusterRole that existed once and was deleted).
    pub roles: Vec<Option<RoleEntry>>,
    /// Name of each slot.
    pub names: Vec<Box<str>>,
    pub slot_by_name: FxHashMap<Box<str>, RoleId>,
    /// Slots holding `None`, for who-can's missing-role report.
    pub tombstones: Vec<RoleId>,
    pub rules: RulesByVerb,
}

impl ClusterRoles {
    /// The ClusterRole in `slot`, `None` for a tombstone.
    pub fn slot(&self, slot: RoleId) -> Option<&RoleEntry> {
        self.roles.get(slot as usize).and_then(Option::as_ref)
    }

    /// The ClusterRole called `name`, `None` if it does not exist.
    pub fn named(&self, name: &str) -> Option<&RoleEntry> {
        self.slot_by_name
            .get(name)
            .and_then(|slot| self.slot(*slot))
    }

    /// Rules of the ClusterRole in `slot`, `None` for a tombstone.
    pub fn slot_rules(&self, slot: RoleId) -> Option<&[PolicyRule]> {
        self.slot(slot).map(RoleEntry::rules)
    }
}

/// The bindings of one scope: the ClusterRoleBindings, or one namespace's RoleBindings.
#[derive(Debug, Default)]
pub struct ScopeBindings {
    /// In canonical order (namespace, then name); a [`BindingId`] is a position here.
    pub bindings: Vec<BindingEntry>,
    pub grants: ScopeGrants,
    /// Local Role id -> bindings referencing it (namespace scope only).
    pub by_local_role: Box<[Box<[BindingId]>]>,
    /// ClusterRole slot -> bindings referencing it.
    pub by_cluster_slot: FxHashMap<RoleId, Box<[BindingId]>>,
    /// Bindings resolved at query time ([`RoleTarget::ClusterByName`], [`RoleTarget::ForeignRole`]).
    pub deferred: Box<[BindingId]>,
    /// Bindings whose role is missing for good ([`RoleTarget::Missing`]).
    pub missing: Box<[BindingId]>,
}

impl ScopeBindings {
    pub fn binding(&self, id: BindingId) -> &BindingEntry {
        &self.bindings[id as usize]
    }
}

/// One namespace: its Roles and its RoleBindings.
#[derive(Debug, Default)]
pub struct NamespacePartition {
    /// In name order; a local [`RoleId`] is a position here.
    pub roles: Vec<RoleEntry>,
    pub role_by_name: FxHashMap<Box<str>, RoleId>,
    pub rules: RulesByVerb,
    pub scope: ScopeBindings,
}

/// The ABAC lines, in file order, by the subject they name.
#[derive(Debug, Default)]
pub struct AbacPartition {
    pub rules: Vec<AbacRule>,
    pub by_user: FxHashMap<Box<str>, Vec<u32>>,
    /// Lines with a group and no user.
    pub by_group: FxHashMap<Box<str>, Vec<u32>>,
}

#[derive(Debug, Default)]
pub struct Index {
    pub cluster_roles: Arc<ClusterRoles>,
    /// The ClusterRoleBindings.
    pub cluster: Arc<ScopeBindings>,
    /// Non-empty namespaces only.
    pub namespaces: NamespaceMap<NamespacePartition>,
    pub abac: Arc<AbacPartition>,
}

impl Index {
    pub fn namespace(&self, namespace: &str) -> Option<&NamespacePartition> {
        self.namespaces.get(namespace).map(|p| &**p)
    }

    /// The effective rules of a binding's role, `None` when the role does not exist. `local`
    /// is the namespace partition holding the binding (`None` for cluster scope).
    pub fn role_rules<'a>(
        &'a self,
        local: Option<&'a NamespacePartition>,
        entry: &BindingEntry,
    ) -> Option<&'a [PolicyRule]> {
        self.role_entry(local, entry).map(RoleEntry::rules)
    }

    /// The role a binding references (its rules and rule index), `None` when it does not
    /// exist. `local` is the namespace partition holding the binding (`None` for cluster scope).
    pub fn role_entry<'a>(
        &'a self,
        local: Option<&'a NamespacePartition>,
        entry: &BindingEntry,
    ) -> Option<&'a RoleEntry> {
        match entry.role {
            RoleTarget::Local(id) => local.and_then(|ns| ns.roles.get(id as usize)),
            RoleTarget::ClusterSlot(slot) => self.cluster_roles.slot(slot),
            RoleTarget::ClusterByName => self.cluster_roles.named(entry.role_name()),
            RoleTarget::ForeignRole => {
                let ns = self.namespace(&entry.namespace)?;
                let id = ns.role_by_name.get(entry.role_name())?;
                ns.roles.get(*id as usize)
            }
            RoleTarget::Missing => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Action, NonResourceAttributes, ResourceAttributes};

    fn rule(verbs: &[&str], resources: &[&str], urls: &[&str]) -> PolicyRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: strings(verbs),
            api_groups: vec![String::new()],
            resources: strings(resources),
            non_resource_urls: strings(urls),
            ..Default::default()
        }
    }

    fn resource(verb: &str, resource: &str, subresource: &str) -> Action {
        Action::Resource(ResourceAttributes {
            verb: verb.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            ..Default::default()
        })
    }

    /// The positions `role.candidates` yields for `action`.
    fn candidates(role: &RoleEntry, action: &Action) -> Vec<usize> {
        let combined = match action {
            Action::Resource(r) if r.subresource.is_empty() => r.resource.clone(),
            Action::Resource(r) => format!("{}/{}", r.resource, r.subresource),
            Action::NonResource(_) => String::new(),
        };
        let probe = RuleProbe::new(action.as_borrowed(), &combined);
        role.candidates(|| &probe).map(|(i, _)| i).collect()
    }

    #[test]
    fn role_entries_are_no_bigger_than_a_rule_vec() {
        // Every Role and ClusterRole has one; the index must not cost small roles memory.
        assert!(std::mem::size_of::<RoleEntry>() <= std::mem::size_of::<Vec<PolicyRule>>());
        assert!(std::mem::size_of::<Option<RoleEntry>>() <= std::mem::size_of::<Vec<PolicyRule>>());
    }

    #[test]
    fn only_roles_above_the_threshold_are_indexed() {
        let rules = |n| vec![rule(&["get"], &["pods"], &[]); n];
        assert!(RoleEntry::new(rules(RULE_INDEX_THRESHOLD))
            .rule_index()
            .is_none());
        assert!(RoleEntry::new(rules(RULE_INDEX_THRESHOLD + 1))
            .rule_index()
            .is_some());
        // A small role yields every rule, whatever the request.
        let small = RoleEntry::new(vec![rule(&["list"], &["nodes"], &[]); 3]);
        assert_eq!(candidates(&small, &resource("get", "pods", "")), [0, 1, 2]);
    }

    /// A deny-heavy role: the index yields only the rules filed under keys the request probes,
    /// in rule order, each once, and the rules it skips are exactly ones that cannot match.
    #[test]
    fn a_big_role_yields_only_rules_that_can_match_in_order() {
        let mut rules: Vec<PolicyRule> = (0..40)
            .map(|i| rule(&["*"], &[&format!("res-{i}")], &[]))
            .collect();
        rules.push(rule(&["get"], &["pods", "pods/status", "*/status"], &[])); // 40
        rules.push(rule(&["-get"], &["*"], &[])); // 41: only negated verbs, matches nothing
        rules.push(rule(&["list", "get"], &["*", "-secrets"], &[])); // 42
        rules.push(rule(&["get"], &[], &["/healthz"])); // 43
        rules.push(rule(&["GET"], &["res-7"], &[])); // 44: case differs
        rules.push(rule(&["*"], &["res-7"], &[])); // 45
        let role = RoleEntry::new(rules);
        assert!(role.rule_index().is_some());

        assert_eq!(
            candidates(&role, &resource("get", "res-7", "")),
            [7, 42, 45]
        );
        assert_eq!(
            candidates(&role, &resource("GET", "res-7", "")),
            [7, 44, 45]
        );
        assert_eq!(candidates(&role, &resource("get", "pods", "")), [40, 42]);
        // `pods/status` and `*/status` both file rule 40; it comes once.
        assert_eq!(
            candidates(&role, &resource("get", "pods", "status")),
            [40, 42]
        );
        assert_eq!(
            candidates(&role, &resource("get", "nodes", "status")),
            [40, 42]
        );
        assert_eq!(candidates(&role, &resource("watch", "res-39", "")), [39]);
        assert_eq!(
            candidates(&role, &resource("*", "x", "")),
            Vec::<usize>::new()
        );
        let healthz = Action::NonResource(NonResourceAttributes {
            verb: "get".into(),
            path: "/healthz".into(),
        });
        assert_eq!(candidates(&role, &healthz), [43]);
    }

    #[test]
    fn merged_lists_come_out_ascending_without_repeats() {
        let (a, b, c) = ([1, 4, 9], [2, 4, 10, 11], [0, 9]);
        let merged = MergedRules {
            lists: SmallVec::from_slice(&[&a[..], &b[..], &[][..], &c[..]]),
        };
        assert_eq!(merged.collect::<Vec<_>>(), [0, 1, 2, 4, 9, 10, 11]);
    }

    #[test]
    fn names_sharing_a_hash_are_told_apart() {
        let mut map: NameMap<u32> = NameMap::default();
        let same = |name| HashedName { name, hash: 7 };
        *map.entry_hashed(same("alice")) = 1;
        *map.entry_hashed(same("bob")) = 2;
        *map.entry_hashed(same("alice")) += 10;
        assert_eq!(map.get(same("alice")), Some(&11));
        assert_eq!(map.get(same("bob")), Some(&2));
        assert_eq!(map.get(same("carol")), None);
        assert_eq!(map.get(HashedName::new("alice")), None);

        *map.entry("dave") = 4;
        assert_eq!(map.get(HashedName::new("dave")), Some(&4));
        assert_eq!(map.get(HashedName::new("Dave")), None);

        // Compacting keeps every name, colliding ones included, with its converted value.
        let map = map.map_values(|n| n * 2);
        assert_eq!(map.get(same("alice")), Some(&22));
        assert_eq!(map.get(same("bob")), Some(&4));
        assert_eq!(map.get(HashedName::new("dave")), Some(&8));
        assert_eq!(map.get(same("carol")), None);
    }

    fn subject(kind: &str, name: &str, namespace: &str) -> Subject {
        Subject {
            kind: kind.into(),
            api_group: "rbac.authorization.k8s.io".into(),
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    /// A compact subject describes itself and matches exactly as the subject as written does,
    /// for every kind, with and without namespaces, and with names holding the separators the
    /// compact form splits on.
    #[test]
    fn bound_subjects_describe_and_match_as_written() {
        let subjects = [
            subject("User", "jane", ""),
            subject("User", "system:serviceaccount:x:y", "ignored"),
            subject("Group", "devs", ""),
            subject("ServiceAccount", "builder", "ci"),
            subject("ServiceAccount", "builder", ""),
            subject("ServiceAccount", "a:b/c", "n:s"),
            subject("Robot", "r2", ""),
            subject("user", "jane", ""),
            subject("", "nobody", ""),
        ];
        for binding_namespace in ["", "team", "x:y"] {
            for written in &subjects {
                let bound = BoundSubject::new(written, binding_namespace);
                let context = format!("{written:?} in {binding_namespace:?}");
                assert_eq!(
                    bound.describe(),
                    describe::describe_subject(written, binding_namespace),
                    "{context}"
                );
                let expected = match (written.user_name(binding_namespace), written.group_name()) {
                    (Some(user), _) => Some((true, user)),
                    (None, Some(group)) => Some((false, group.to_string())),
                    (None, None) => None,
                };
                let got = match bound.matches() {
                    SubjectName::User(user) => Some((true, user.to_string())),
                    SubjectName::Group(group) => Some((false, group.to_string())),
                    SubjectName::Nothing => None,
                };
                assert_eq!(got, expected, "{context}");
            }
        }
    }

    /// An entry gives back the names it was built from, for both kinds of binding and role.
    #[test]
    fn binding_entries_keep_their_names() {
        for (kind, namespace) in [
            (BindingKind::RoleBinding, "team-a"),
            (BindingKind::ClusterRoleBinding, ""),
        ] {
            for role_kind in [RoleKind::Role, RoleKind::ClusterRole] {
                let binding = crate::policy::model::Binding {
                    kind,
                    namespace: namespace.into(),
                    name: "readers/x".into(),
                    subjects: vec![subject("User", "jane", "")],
                    role_ref: crate::policy::model::RoleRef {
                        kind: role_kind,
                        name: "pod-reader".into(),
                    },
                    source: crate::policy::model::Source::new("p.yaml", 3),
                };
                let facts = BindingFacts::of(&binding);
                let ids = (
                    Arc::from(describe::binding_id(&binding)),
                    Arc::from(describe::role_id(&binding)),
                    Arc::from(namespace),
                    Arc::from("p.yaml:3"),
                );
                let entry = BindingEntry::new(facts, ids, Box::new([]), RoleTarget::Missing);
                assert_eq!(entry.name(), "readers/x");
                assert_eq!(entry.role_name(), "pod-reader");
                assert_eq!(entry.facts().describe(), binding.describe());
                assert_eq!(
                    describe::missing_role_error_of(&entry.facts()),
                    describe::missing_role_error(&binding)
                );
                assert_eq!(entry.cluster, kind == BindingKind::ClusterRoleBinding);
            }
        }
    }
}
