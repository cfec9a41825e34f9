//! The question: who asks to do what. The ground floor that policy and engine both stand on
//! (as Kubernetes keeps `Attributes` in `authorizer/interfaces.go`, imported by `rbac` and
//! `union`): nothing here names a module above it.
//!
//! Requests come owned ([`Request`], decoded from a review) or borrowed ([`RequestRef`], over
//! an owned request or over the bytes of a request still on the wire).
//! [`RequestRef::decision_fields`] is the one list of the fields that determine a decision:
//! the decision cache builds its key from it, so a field added to a request and forgotten in
//! the key cannot happen in two files.

pub mod selector;

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The prefix of a service account's user name, `system:serviceaccount:NS:NAME`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The group of every service account; `system:serviceaccounts:NS` holds those of one
/// namespace.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";

/// The user a service account authenticates as, as Kubernetes' service account
/// authenticator makes it (`k8s.io/apiserver/pkg/authentication/serviceaccount`,
/// `UserInfo` and `MakeGroupNames`): `system:serviceaccount:NS:NAME`, in the groups
/// `system:serviceaccounts` and `system:serviceaccounts:NS`.
pub fn service_account(namespace: &str, name: &str) -> UserInfo {
    UserInfo {
        name: format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"),
        groups: vec![
            SERVICE_ACCOUNTS_GROUP.to_string(),
            format!("{SERVICE_ACCOUNTS_GROUP}:{namespace}"),
        ],
        ..UserInfo::default()
    }
}

/// [`service_account`] for a user name `system:serviceaccount:NS:NAME`; `None` for any
/// other name (no namespace, no name, or more parts).
pub fn service_account_of(user_name: &str) -> Option<UserInfo> {
    let (namespace, name) = user_name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)?
        .split_once(':')?;
    if namespace.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some(service_account(namespace, name))
}

/// The subject of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceAttributes {
    pub namespace: String,
    pub verb: String,
    /// API group; `""` is the core group.
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NonResourceAttributes {
    pub path: String,
    pub verb: String,
}

/// What is being done: a resource request or a non-resource request, never both. Ordered so
/// that reports over requests (`authzd replay`) can sort them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Resource(ResourceAttributes),
    NonResource(NonResourceAttributes),
}

impl Action {
    pub fn verb(&self) -> &str {
        match self {
            Action::Resource(r) => &r.verb,
            Action::NonResource(n) => &n.verb,
        }
    }

    /// The namespace a resource request targets; `""` for cluster scope and non-resource paths.
    pub fn namespace(&self) -> &str {
        match self {
            Action::Resource(r) => &r.namespace,
            Action::NonResource(_) => "",
        }
    }
}

/// An [`Action`] borrowed from wherever its strings live (an owned action, or the bytes of a
/// request on the wire), so a cache lookup needs no copy of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionRef<'a> {
    Resource(ResourceRef<'a>),
    NonResource { path: &'a str, verb: &'a str },
}

/// Borrowed [`ResourceAttributes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceRef<'a> {
    pub namespace: &'a str,
    pub verb: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub name: &'a str,
}

impl Action {
    pub fn as_borrowed(&self) -> ActionRef<'_> {
        match self {
            Action::Resource(r) => ActionRef::Resource(ResourceRef {
                namespace: &r.namespace,
                verb: &r.verb,
                group: &r.group,
                version: &r.version,
                resource: &r.resource,
                subresource: &r.subresource,
                name: &r.name,
            }),
            Action::NonResource(n) => ActionRef::NonResource {
                path: &n.path,
                verb: &n.verb,
            },
        }
    }
}

impl<'a> ActionRef<'a> {
    /// The action's fields that determine a decision, in canonical order (for a resource
    /// action the namespace comes first: cache invalidation reads it back from there).
    pub fn decision_fields(self) -> ActionFields<'a> {
        match self {
            ActionRef::Resource(ResourceRef {
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
            }) => ActionFields::Resource([
                namespace,
                verb,
                group,
                version,
                resource,
                subresource,
                name,
            ]),
            ActionRef::NonResource { path, verb } => ActionFields::NonResource([path, verb]),
        }
    }

    pub fn verb(&self) -> &'a str {
        match self {
            ActionRef::Resource(r) => r.verb,
            ActionRef::NonResource { verb, .. } => verb,
        }
    }

    /// As [`Action::namespace`].
    pub fn namespace(&self) -> &'a str {
        match self {
            ActionRef::Resource(r) => r.namespace,
            ActionRef::NonResource { .. } => "",
        }
    }

    /// Upstream `IsReadOnly`: exactly get, list and watch, case-sensitive.
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb(), "get" | "list" | "watch")
    }

    pub fn to_action(&self) -> Action {
        match *self {
            ActionRef::Resource(r) => Action::Resource(ResourceAttributes {
                namespace: r.namespace.to_owned(),
                verb: r.verb.to_owned(),
                group: r.group.to_owned(),
                version: r.version.to_owned(),
                resource: r.resource.to_owned(),
                subresource: r.subresource.to_owned(),
                name: r.name.to_owned(),
            }),
            ActionRef::NonResource { path, verb } => Action::NonResource(NonResourceAttributes {
                path: path.to_owned(),
                verb: verb.to_owned(),
            }),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub user: UserInfo,
    pub action: Action,
}

impl Request {
    pub fn as_borrowed(&self) -> RequestRef<'_> {
        RequestRef {
            user: self.user.as_borrowed(),
            action: self.action.as_borrowed(),
            content: None,
        }
    }

    /// [`Self::as_borrowed`], carrying `content` for the rules that read it.
    pub fn with_content<'a>(&'a self, content: Option<&'a Content>) -> RequestRef<'a> {
        RequestRef {
            content,
            ..self.as_borrowed()
        }
    }
}

impl UserInfo {
    pub fn as_borrowed(&self) -> SubjectRef<'_> {
        SubjectRef {
            name: &self.name,
            groups: Groups::Owned(&self.groups),
        }
    }
}

/// A request as the engine reads it, borrowed from wherever its strings live (an owned
/// [`Request`], or a request still on the wire), so a cache miss evaluates without copying it.
/// UID and extra are absent: no authorizer in the chain reads them.
#[derive(Clone, Copy, Debug)]
pub struct RequestRef<'a> {
    pub user: SubjectRef<'a>,
    pub action: ActionRef<'a>,
    /// The object and the request's selectors, for rules with content clauses. Never part of
    /// the decision's key: a cached answer is a content-free plan that content finishes.
    pub content: Option<&'a Content>,
}

impl<'a> RequestRef<'a> {
    /// The one list of what determines a decision: the subject's name, its groups, and the
    /// action's fields (see [`ActionRef::decision_fields`]). The decision cache builds its key
    /// from exactly this, so a field that can change an answer is never missing from the key.
    ///
    /// INVARIANT: both halves are destructured without `..`, here and in
    /// [`ActionRef::decision_fields`]: a field added to [`SubjectRef`], [`ActionRef`] or
    /// [`ResourceRef`] does not compile until it is listed (or stated not to decide).
    pub fn decision_fields(self) -> (&'a str, Groups<'a>, ActionFields<'a>) {
        let RequestRef {
            user: SubjectRef { name, groups },
            action,
            // Content never decides which answer is cached (docs/api.md §4): rules that
            // read it are finished per request from a content-free plan.
            content: _,
        } = self;
        (name, groups, action.decision_fields())
    }
}

/// The subject of a [`RequestRef`]: its name and groups.
#[derive(Clone, Copy, Debug)]
pub struct SubjectRef<'a> {
    pub name: &'a str,
    pub groups: Groups<'a>,
}

/// A request's groups as they are held: owned strings (a decoded request) or borrowed ones (a
/// view of the wire bytes). An enum rather than a type parameter, so the engine is compiled once.
#[derive(Clone, Copy, Debug)]
pub enum Groups<'a> {
    Owned(&'a [String]),
    Borrowed(&'a [&'a str]),
}

impl<'a> Groups<'a> {
    pub const NONE: Groups<'static> = Groups::Borrowed(&[]);

    pub fn iter(self) -> GroupsIter<'a> {
        match self {
            Groups::Owned(groups) => GroupsIter::Owned(groups.iter()),
            Groups::Borrowed(groups) => GroupsIter::Borrowed(groups.iter()),
        }
    }

    /// Exact, case-sensitive membership.
    pub fn contains(self, group: &str) -> bool {
        self.iter().any(|g| g == group)
    }
}

/// The iterator of [`Groups::iter`].
#[derive(Clone, Debug)]
pub enum GroupsIter<'a> {
    Owned(std::slice::Iter<'a, String>),
    Borrowed(std::slice::Iter<'a, &'a str>),
}

impl<'a> Iterator for GroupsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        match self {
            GroupsIter::Owned(groups) => groups.next().map(String::as_str),
            GroupsIter::Borrowed(groups) => groups.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            GroupsIter::Owned(groups) => groups.size_hint(),
            GroupsIter::Borrowed(groups) => groups.size_hint(),
        }
    }
}

impl ExactSizeIterator for GroupsIter<'_> {}

/// An action's deciding fields (from [`ActionRef::decision_fields`]), with a tag naming the
/// kind of action so that a resource and a non-resource action never read the same.
#[derive(Clone, Copy, Debug)]
pub enum ActionFields<'a> {
    Resource([&'a str; 7]),
    NonResource([&'a str; 2]),
}

impl<'a> ActionFields<'a> {
    /// The tag of a resource action; its first field, the namespace, follows it.
    pub const RESOURCE_TAG: &'static [u8] = b"r";
    /// The tag of a non-resource action.
    pub const NON_RESOURCE_TAG: &'static [u8] = b"n";

    /// One byte naming the kind of action.
    pub fn tag(&self) -> &'static [u8] {
        match self {
            ActionFields::Resource(_) => Self::RESOURCE_TAG,
            ActionFields::NonResource(_) => Self::NON_RESOURCE_TAG,
        }
    }

    /// The field values, in canonical order.
    pub fn values(&self) -> &[&'a str] {
        match self {
            ActionFields::Resource(fields) => fields,
            ActionFields::NonResource(fields) => fields,
        }
    }
}

/// What a request carries beyond its deciding fields (docs/api.md §4): the object as it
/// will be stored, the stored object, or the caller's own list of changed paths, and the
/// request's field and label selectors (KEP-4601). Read only by rules with content clauses,
/// after the cache lookup; the JSON is decoded at most once, and only when such a rule asks.
#[derive(Debug, Default)]
pub struct Content {
    /// JSON: the object as it will be stored (create, update, patch).
    pub object: Option<Vec<u8>>,
    /// JSON: the stored object (update, patch, delete, get).
    pub old_object: Option<Vec<u8>>,
    /// Paths the caller diffed itself (structured-merge-diff syntax); exclusive with the
    /// objects.
    pub changed_paths: Vec<String>,
    /// KEP-4601 `fieldSelector` requirements (parsed from the raw selector when given raw).
    pub field_selector: Vec<SelectorRequirement>,
    /// KEP-4601 `labelSelector` requirements.
    pub label_selector: Vec<SelectorRequirement>,
    /// The environment an AuthZEN request carries (its `context` object), which CEL
    /// conditions read as `context` (docs/authzen.md §2); no other API sets it.
    pub context: Option<serde_json::Value>,
    decoded: [OnceLock<Result<serde_json::Value, String>>; 2],
}

/// Which of a [`Content`]'s objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Object,
    OldObject,
}

impl Which {
    /// The field's name in the API, for errors (`content.object`).
    pub fn field(self) -> &'static str {
        match self {
            Which::Object => "content.object",
            Which::OldObject => "content.old_object",
        }
    }
}

impl Content {
    /// Whether the request carries either object.
    pub fn has_objects(&self) -> bool {
        self.object.is_some() || self.old_object.is_some()
    }

    /// The raw JSON of one object, if the request carries it.
    pub fn raw(&self, which: Which) -> Option<&[u8]> {
        match which {
            Which::Object => self.object.as_deref(),
            Which::OldObject => self.old_object.as_deref(),
        }
    }

    /// One object decoded, once per request however many rules read it: `None` when the
    /// request does not carry it, `Err` (the parser's message) when it is not a JSON object.
    /// The size was bounded where the request was read; serde_json bounds nesting at 128.
    pub fn decoded(&self, which: Which) -> Option<Result<&serde_json::Value, &str>> {
        let raw = self.raw(which)?;
        let slot = &self.decoded[which as usize];
        let value = slot.get_or_init(|| match serde_json::from_slice(raw) {
            Ok(value @ serde_json::Value::Object(_)) => Ok(value),
            Ok(_) => Err("must be a JSON object".to_string()),
            Err(e) => Err(format!("is not JSON: {e}")),
        });
        Some(value.as_ref().map_err(String::as_str))
    }

    /// Whether the request carries a context and nothing else (an AuthZEN evaluation without
    /// resource properties): its selectors are unknown, as without content.
    pub fn only_context(&self) -> bool {
        self.context.is_some()
            && !self.has_objects()
            && self.changed_paths.is_empty()
            && self.field_selector.is_empty()
            && self.label_selector.is_empty()
    }

    /// Whether the objects were decoded (for tests that hold "not at all when no rule asks").
    pub fn was_decoded(&self) -> bool {
        self.decoded.iter().any(|slot| slot.get().is_some())
    }
}

/// A copy carries the raw content; the copy decodes on its own.
impl Clone for Content {
    fn clone(&self) -> Self {
        Content {
            object: self.object.clone(),
            old_object: self.old_object.clone(),
            changed_paths: self.changed_paths.clone(),
            field_selector: self.field_selector.clone(),
            label_selector: self.label_selector.clone(),
            context: self.context.clone(),
            decoded: Default::default(),
        }
    }
}

/// One requirement of a KEP-4601 field or label selector, or of a rule's selector clause.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

/// `metav1.LabelSelectorOperator`, which KEP-4601 uses for field selectors too (`a=b` is `In
/// [b]`, `a!=b` is `NotIn [b]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl SelectorOperator {
    /// The Kubernetes spelling (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "In" => Some(Self::In),
            "NotIn" => Some(Self::NotIn),
            "Exists" => Some(Self::Exists),
            "DoesNotExist" => Some(Self::DoesNotExist),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
        }
    }
}
