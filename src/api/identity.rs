//! Who is calling, and what they need to be allowed to call (SPEC §3, "Review flavours").
//!
//! * [`AuthChain`] turns a transport peer into the caller: a verified client certificate, else
//!   a bearer token from the `--token-auth-file`, else — only where the listener allows it —
//!   the configured local identity, else `UNAUTHENTICATED`.
//! * [`listener_access`] decides at startup whether a listener may hand out the local identity
//!   (loopback and Unix sockets may; anything else needs real authentication or an explicit
//!   insecure flag).
//! * [`Privilege`] states what an RPC needs; [`Gate`] checks it through the policy itself.
//!   Every adapter (gRPC, HTTP, Envoy ext_authz) asks the same gate, so the same policy
//!   decides who may ask.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, LazyLock, Weak};

use subtle::ConstantTimeEq;
use thiserror::Error;
use tonic::metadata::{Ascii, MetadataKey, MetadataMap};

use crate::api::error::{ApiError, Result};
use crate::engine::{Authorize as _, Engine};
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};
use crate::serving::{ServingState, Snapshot};
use crate::store::ObjectKind;
use crate::transport::{ClientIdentity, ConnectionInfo};

/// The group every authenticated caller is in, as upstream adds it.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// What an authenticator may look at: request metadata (bearer tokens), the peer, and the
/// identity of a client certificate the transport verified (`ConnectionInfo`).
pub struct Peer<'a> {
    pub metadata: &'a MetadataMap,
    pub remote_addr: Option<SocketAddr>,
    /// The connection the request arrived on (listener, verified client certificate);
    /// `None` only for a request that did not come through `transport` (in-process calls).
    pub connection: Option<&'a ConnectionInfo>,
}

impl<'a> Peer<'a> {
    pub fn of<T>(request: &'a tonic::Request<T>) -> Self {
        let connection = request
            .extensions()
            .get::<Arc<ConnectionInfo>>()
            .map(|info| &**info);
        Self {
            metadata: request.metadata(),
            // The accept loop's `ConnectionInfo` knows the caller's address; tonic's
            // `remote_addr` (another extension lookup) only serves requests from elsewhere.
            remote_addr: match connection {
                Some(connection) => connection.remote_addr,
                None => request.remote_addr(),
            },
            connection,
        }
    }
}

/// A verified client certificate's caller, as kube-apiserver's x509 authenticator reads it:
/// CN = user, each O = a group.
pub fn certificate_user(identity: &ClientIdentity) -> Arc<UserInfo> {
    Arc::new(UserInfo {
        name: identity.common_name.clone(),
        groups: identity.organizations.clone(),
        ..UserInfo::default()
    })
}

/// Turns a transport peer into the caller's identity. Shared, because most callers are a few
/// fixed identities (the local identity, a token's user) asking again and again: handing out
/// the same `Arc` costs a reference count where a copy would allocate each name.
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate(&self, peer: &Peer<'_>) -> Result<Arc<UserInfo>>;
}

/// The identity of every caller on a listener that allows it (loopback or Unix socket, no
/// authentication configured): `--local-user`, `--local-group`, exactly as configured.
pub struct LocalIdentity {
    user: Arc<UserInfo>,
}

impl LocalIdentity {
    pub fn new(name: String, groups: Vec<String>) -> Self {
        Self {
            user: Arc::new(UserInfo {
                name,
                groups,
                ..UserInfo::default()
            }),
        }
    }
}

impl Authenticator for LocalIdentity {
    fn authenticate(&self, _peer: &Peer<'_>) -> Result<Arc<UserInfo>> {
        Ok(Arc::clone(&self.user))
    }
}

// ---------------------------------------------------------------------------------------------
// Bearer tokens: kube-apiserver's `--token-auth-file`.

/// A bad `--token-auth-file`; the server refuses to start.
#[derive(Debug, Error)]
pub enum TokenFileError {
    #[error("cannot read token file `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
}

/// The tokens of a `--token-auth-file`: CSV lines `token,user,uid[,"group1,group2"]`.
///
/// Read as upstream reads it (Go's `encoding/csv`, any number of columns, at least three;
/// columns after the fourth ignored; empty lines skipped; `"…"` quoting with `""` for a quote;
/// the groups column split on commas), but stricter where upstream only logs a warning: an
/// empty token, an empty user name or a token listed twice is an error naming the line, because
/// each of those is an operator mistake that would otherwise decide silently who a caller is.
pub struct TokenFile {
    /// Scanned in full on every lookup with a constant-time comparison, so the time taken
    /// says nothing about how much of a presented token matched.
    entries: Vec<(Vec<u8>, Arc<UserInfo>)>,
}

impl fmt::Debug for TokenFile {
    // Never print the tokens.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenFile({} tokens)", self.entries.len())
    }
}

impl TokenFile {
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&shown, &text)
    }

    /// Parses the file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, TokenFileError> {
        let error = |line: usize, problem: String| TokenFileError::Line {
            path: path.to_string(),
            line,
            problem,
        };
        let mut entries: Vec<(Vec<u8>, Arc<UserInfo>)> = Vec::new();
        let mut first_seen: HashMap<String, usize> = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            if raw.is_empty() {
                continue;
            }
            let record = csv_record(raw).map_err(|problem| error(line, problem))?;
            if record.len() < 3 {
                return Err(error(
                    line,
                    format!(
                        "must have at least 3 columns (token, user name, user uid), found {}",
                        record.len()
                    ),
                ));
            }
            let token = &record[0];
            if token.is_empty() {
                return Err(error(line, "the token (column 1) is empty".to_string()));
            }
            if token.chars().any(char::is_whitespace) {
                return Err(error(
                    line,
                    "the token (column 1) contains whitespace, which no bearer header can carry"
                        .to_string(),
                ));
            }
            if record[1].is_empty() {
                return Err(error(line, "the user name (column 2) is empty".to_string()));
            }
            if let Some(earlier) = first_seen.insert(token.clone(), line) {
                return Err(error(
                    line,
                    format!("this token is already given on line {earlier}; each token must name one user"),
                ));
            }
            let groups = record
                .get(3)
                .map(|groups| {
                    groups
                        .split(',')
                        .filter(|g| !g.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            entries.push((
                token.as_bytes().to_vec(),
                Arc::new(UserInfo {
                    name: record[1].clone(),
                    uid: record[2].clone(),
                    groups,
                    ..UserInfo::default()
                }),
            ));
        }
        Ok(Self { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The user a token belongs to. Every entry is compared (no early exit), each in
    /// constant time.
    pub fn lookup(&self, token: &str) -> Option<&Arc<UserInfo>> {
        let presented = token.as_bytes();
        let mut found = None;
        for (stored, user) in &self.entries {
            if bool::from(stored.as_slice().ct_eq(presented)) {
                found = Some(user);
            }
        }
        found
    }
}

/// One CSV line as Go's `encoding/csv` reads it (comma-separated; a field that starts with `"`
/// is quoted and `""` inside it is a quote; a quote inside an unquoted field is an error).
/// Quoted fields spanning lines are refused: no token file needs them.
fn csv_record(line: &str) -> std::result::Result<Vec<String>, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(format!(
                            "column {}: a quoted field is not closed on this line",
                            fields.len() + 1
                        ))
                    }
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => {
                    return Err(format!(
                    "column {}: `{c}` after a closing quote (expected `,` or the end of the line)",
                    fields.len() + 1
                ))
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => {
                        return Err(format!(
                            "column {}: a quote inside an unquoted field (quote the whole field and write `\"\"` for a quote)",
                            fields.len() + 1
                        ))
                    }
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The authenticator chain.

/// Whether a listener may treat unauthenticated callers as the local identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAccess {
    /// Loopback or Unix socket with no authentication configured: the quick start.
    Allowed,
    /// A remote listener without authentication, started with the insecure flag.
    AllowedInsecurely,
    /// Authentication is configured: callers must present credentials.
    Refused,
}

/// The flag that lets a remote listener run without authentication.
pub const INSECURE_REMOTE_FLAG: &str = "--insecure-allow-unauthenticated-remote";

/// Why a listener may not start as configured.
#[derive(Debug, Error)]
#[error(
    "refusing to listen on {listener} without authentication: anyone who can reach it would act as the local identity `{local_user}`. Configure --token-auth-file and/or --client-ca-file (with --tls-cert-file and --tls-private-key-file), listen on a loopback address (e.g. 127.0.0.1) or a Unix socket, or, if this really is intended, pass {INSECURE_REMOTE_FLAG}"
)]
pub struct UnsafeListener {
    pub listener: String,
    pub local_user: String,
}

/// The startup rule for a listener (SPEC §3): with authentication configured nobody gets the
/// local identity; without it, only local listeners (loopback, Unix socket) hand it out, and a
/// remote one refuses to start unless the operator passed [`INSECURE_REMOTE_FLAG`].
pub fn listener_access(
    listener: &str,
    is_local: bool,
    authentication_configured: bool,
    insecure_remote: bool,
    local_user: &str,
) -> std::result::Result<LocalAccess, UnsafeListener> {
    match (authentication_configured, is_local, insecure_remote) {
        (true, _, _) => Ok(LocalAccess::Refused),
        (false, true, _) => Ok(LocalAccess::Allowed),
        (false, false, true) => Ok(LocalAccess::AllowedInsecurely),
        (false, false, false) => Err(UnsafeListener {
            listener: listener.to_string(),
            local_user: local_user.to_string(),
        }),
    }
}

/// Verified client certificate → bearer token → local identity (where the listener allows
/// it) → `UNAUTHENTICATED`. A presented credential that does not verify never falls back.
pub struct AuthChain {
    /// Its users already carry [`AUTHENTICATED_GROUP`], added once here instead of per request.
    tokens: Option<TokenFile>,
    local: Option<LocalIdentity>,
}

impl AuthChain {
    pub fn new(tokens: Option<TokenFile>, local: Option<LocalIdentity>) -> Self {
        let tokens = tokens.map(|mut file| {
            for (_, user) in &mut file.entries {
                *user = Self::authenticated(Arc::clone(user));
            }
            file
        });
        Self { tokens, local }
    }

    /// `user` with [`AUTHENTICATED_GROUP`] among its groups.
    fn authenticated(user: Arc<UserInfo>) -> Arc<UserInfo> {
        if user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            return user;
        }
        let mut user = Arc::unwrap_or_clone(user);
        user.groups.push(AUTHENTICATED_GROUP.to_string());
        Arc::new(user)
    }
}

impl Authenticator for AuthChain {
    fn authenticate(&self, peer: &Peer<'_>) -> Result<Arc<UserInfo>> {
        if let Some(client) = peer
            .connection
            .and_then(|connection| connection.client_identity.as_ref())
        {
            return Ok(Self::authenticated(certificate_user(client)));
        }
        // Named once: a `&str` key would be parsed on every request.
        static AUTHORIZATION: LazyLock<MetadataKey<Ascii>> =
            LazyLock::new(|| MetadataKey::from_static("authorization"));
        if let Some(header) = peer.metadata.get(&*AUTHORIZATION) {
            let token = bearer_token(header.to_str().ok())?;
            let Some(tokens) = &self.tokens else {
                return Err(ApiError::Unauthenticated(
                    "a bearer token was presented, but this server has no --token-auth-file"
                        .to_string(),
                ));
            };
            return match tokens.lookup(token) {
                Some(user) => Ok(Arc::clone(user)),
                None => Err(ApiError::Unauthenticated(
                    "invalid bearer token".to_string(),
                )),
            };
        }
        match &self.local {
            Some(local) => local.authenticate(peer),
            None => Err(ApiError::Unauthenticated(
                "no credentials: send `authorization: Bearer <token>` or connect with a client certificate"
                    .to_string(),
            )),
        }
    }
}

/// The token of an `authorization: Bearer <token>` header (scheme case-insensitive, as
/// upstream).
fn bearer_token(header: Option<&str>) -> Result<&str> {
    let malformed = || {
        ApiError::Unauthenticated(
            "malformed authorization header: expected `Bearer <token>`".to_string(),
        )
    };
    let header = header.ok_or_else(malformed)?.trim();
    let (scheme, token) = header.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer")
        || token.is_empty()
        || token.contains(char::is_whitespace)
    {
        return Err(malformed());
    }
    Ok(token)
}

// ---------------------------------------------------------------------------------------------
// Privileges.

pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What the caller of an RPC must be allowed to do (the "who may call it" column), as one
/// request to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege<'a> {
    /// `verb` on `resource` in `group`, in `namespace` ("" = cluster scope), on the object
    /// `name` ("" = any).
    Resource {
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        namespace: &'a str,
        name: &'a str,
    },
    /// `verb` on a non-resource URL.
    NonResource {
        verb: &'static str,
        path: &'static str,
    },
    /// Any authenticated caller (PersonalSubjectAccessReview).
    Authenticated,
}

impl<'a> Privilege<'a> {
    const fn create_review(resource: &'static str, namespace: &'a str) -> Self {
        Privilege::Resource {
            verb: "create",
            group: AUTHORIZATION_GROUP,
            resource,
            namespace,
            name: "",
        }
    }

    /// SubjectAccessReview, and Authorize/BatchAuthorize ("same as the cluster-wide reviews").
    pub const SUBJECT_ACCESS_REVIEW: Privilege<'static> =
        Privilege::create_review("subjectaccessreviews", "");
    /// ResourceAccessReview and GetAllowedSubjects.
    pub const RESOURCE_ACCESS_REVIEW: Privilege<'static> =
        Privilege::create_review("resourceaccessreviews", "");
    /// PolicyAdmin Status: revision, last load error and cache counters are operational data,
    /// guarded like kube-apiserver's `/metrics`: `get` on the non-resource URL `/status`.
    pub const STATUS: Privilege<'static> = Privilege::NonResource {
        verb: "get",
        path: "/status",
    };

    /// `==`, quicker for the usual case: the `'static` parts come from the constants above, so
    /// two equal privileges nearly always share their strings' addresses, and a comparison
    /// by address skips a `memcmp` per string (the memo below does this on every Authorize).
    fn same_as(self, other: Privilege<'_>) -> bool {
        fn same(a: &str, b: &str) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        match (self, other) {
            (
                Privilege::Resource {
                    verb,
                    group,
                    resource,
                    namespace,
                    name,
                },
                Privilege::Resource {
                    verb: other_verb,
                    group: other_group,
                    resource: other_resource,
                    namespace: other_namespace,
                    name: other_name,
                },
            ) => {
                same(verb, other_verb)
                    && same(group, other_group)
                    && same(resource, other_resource)
                    && same(namespace, other_namespace)
                    && same(name, other_name)
            }
            (
                Privilege::NonResource { verb, path },
                Privilege::NonResource {
                    verb: other_verb,
                    path: other_path,
                },
            ) => same(verb, other_verb) && same(path, other_path),
            (Privilege::Authenticated, Privilege::Authenticated) => true,
            _ => false,
        }
    }

    pub fn local_subject_access_review(namespace: &'a str) -> Self {
        Privilege::create_review("localsubjectaccessreviews", namespace)
    }

    pub fn local_resource_access_review(namespace: &'a str) -> Self {
        Privilege::create_review("localresourceaccessreviews", namespace)
    }

    /// `verb` on policy objects of `kind` (API group `rbac.authorization.k8s.io`), as
    /// Kubernetes guards its RBAC API.
    pub fn rbac(verb: &'static str, kind: ObjectKind, namespace: &'a str, name: &'a str) -> Self {
        Privilege::Resource {
            verb,
            group: RBAC_GROUP,
            resource: rbac_resource(kind),
            namespace: if kind.is_namespaced() { namespace } else { "" },
            name,
        }
    }

    /// The request the policy is asked; `None` when any authenticated caller qualifies.
    pub fn action(&self) -> Option<Action> {
        match *self {
            Privilege::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
            } => Some(Action::Resource(ResourceAttributes {
                namespace: namespace.to_string(),
                verb: verb.to_string(),
                group: group.to_string(),
                version: "*".to_string(),
                resource: resource.to_string(),
                subresource: String::new(),
                name: name.to_string(),
            })),
            Privilege::NonResource { verb, path } => {
                Some(Action::NonResource(NonResourceAttributes {
                    path: path.to_string(),
                    verb: verb.to_string(),
                }))
            }
            Privilege::Authenticated => None,
        }
    }

    /// Whether `engine` allows `caller` this privilege, uncached (for checks made under the
    /// store's writer lock, against the policy the write changes).
    pub fn held_by(&self, engine: &Engine, caller: &UserInfo) -> bool {
        self.action().is_none_or(|action| {
            engine
                .authorize(&Request {
                    user: caller.clone(),
                    action,
                })
                .allowed()
        })
    }

    /// What the refusal says: `user "alice" cannot create
    /// subjectaccessreviews.authorization.k8s.io at cluster scope`.
    pub fn refusal(&self, caller: &UserInfo) -> String {
        match *self {
            Privilege::Resource {
                verb,
                group,
                resource,
                namespace,
                name,
            } => {
                let object = if name.is_empty() {
                    String::new()
                } else {
                    format!(" {name:?}")
                };
                let scope = if namespace.is_empty() {
                    "at cluster scope".to_string()
                } else {
                    format!("in namespace {namespace:?}")
                };
                format!(
                    "user {:?} cannot {verb} {resource}.{group}{object} {scope}",
                    caller.name
                )
            }
            Privilege::NonResource { verb, path } => {
                format!("user {:?} cannot {verb} path {path:?}", caller.name)
            }
            Privilege::Authenticated => format!("user {:?} is not authenticated", caller.name),
        }
    }
}

/// The plural resource name of a policy object kind.
pub fn rbac_resource(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ClusterRole => "clusterroles",
        ObjectKind::Role => "roles",
        ObjectKind::ClusterRoleBinding => "clusterrolebindings",
        ObjectKind::RoleBinding => "rolebindings",
    }
}

/// The privilege check every adapter shares (gRPC, HTTP, Envoy ext_authz): is `caller` allowed
/// a [`Privilege`] by the policy of `snapshot` — the same chain, super-users included, that
/// answers the request itself, so the privilege is granted and revoked like any permission.
///
/// Privilege checks are decisions, so they are cached, in the serving state's privilege cache:
/// invalidated by every policy change exactly as the decision cache is (a revocation takes
/// effect on the next call), but kept apart from it so that the decision cache's entries and
/// counters describe only the decisions callers asked for.
pub struct Gate<'a> {
    pub state: &'a ServingState,
    /// The snapshot the request is answered from: the privilege is checked against the same
    /// policy.
    pub snapshot: &'a Arc<Snapshot>,
}

impl Gate<'_> {
    /// `Ok` when allowed; `PERMISSION_DENIED` saying what was needed otherwise.
    pub fn admit(&self, caller: &Arc<UserInfo>, privilege: Privilege<'_>) -> Result<()> {
        // The memo first: building the action allocates each of its strings.
        if admitted_before(self.snapshot, caller, privilege) {
            return Ok(());
        }
        let Some(action) = privilege.action() else {
            return Ok(());
        };
        let request = Request {
            user: UserInfo::clone(caller),
            action,
        };
        let decided = self
            .state
            .privilege_authorizer(self.snapshot)
            .decide(request.as_borrowed());
        if decided.response.allowed() {
            remember_admitted(self.snapshot, Arc::clone(caller), privilege);
            Ok(())
        } else {
            tracing::debug!(caller = %caller.name, ?privilege, "privilege refused");
            Err(ApiError::PermissionDenied(privilege.refusal(caller)))
        }
    }
}

/// A privilege granted to a caller by one snapshot's policy.
///
/// Every Authorize is also a privilege check for its caller, almost always the same caller
/// (a proxy's identity) asking for the same privilege. The answer is a function of the policy
/// and the request alone, so for the same snapshot it cannot change: each worker thread keeps
/// the last few grants and answers a repeat by comparing values instead of building, hashing and
/// looking up a second request. A policy change publishes a new snapshot, so a revoked privilege
/// is never answered from here (the snapshot no longer matches); the `Weak` keeps the old
/// snapshot's allocation from being reused for a new one without keeping its index alive.
/// Refusals are not remembered: they take the full path and are explained.
struct AdmittedPrivilege {
    snapshot: Weak<Snapshot>,
    /// Callers are shared identities (see [`Authenticator`]), so a repeat is usually the very
    /// same `Arc`, told by its address before its value is compared.
    caller: Arc<UserInfo>,
    privilege: Privilege<'static>,
}

/// Grants remembered per worker thread; a handful covers the callers and RPCs of a busy proxy.
const ADMITTED_MEMO: usize = 4;

thread_local! {
    /// The last [`ADMITTED_MEMO`] grants, newest last.
    static ADMITTED: RefCell<Vec<AdmittedPrivilege>> = const { RefCell::new(Vec::new()) };
}

/// The privilege with its borrowed parts, if it has none (every cluster-wide privilege):
/// only those are remembered, so an entry owns nothing borrowed from a request.
fn static_privilege(privilege: Privilege<'_>) -> Option<Privilege<'static>> {
    match privilege {
        Privilege::Resource {
            verb,
            group,
            resource,
            namespace: "",
            name: "",
        } => Some(Privilege::Resource {
            verb,
            group,
            resource,
            namespace: "",
            name: "",
        }),
        Privilege::Resource { .. } => None,
        Privilege::NonResource { verb, path } => Some(Privilege::NonResource { verb, path }),
        Privilege::Authenticated => Some(Privilege::Authenticated),
    }
}

fn admitted_before(
    snapshot: &Arc<Snapshot>,
    caller: &Arc<UserInfo>,
    privilege: Privilege<'_>,
) -> bool {
    let Some(privilege) = static_privilege(privilege) else {
        return false;
    };
    ADMITTED.with(|memo| {
        memo.borrow().iter().any(|entry| {
            std::ptr::eq(entry.snapshot.as_ptr(), Arc::as_ptr(snapshot))
                && entry.privilege.same_as(privilege)
                && (Arc::ptr_eq(&entry.caller, caller) || entry.caller == *caller)
        })
    })
}

fn remember_admitted(snapshot: &Arc<Snapshot>, caller: Arc<UserInfo>, privilege: Privilege<'_>) {
    let Some(privilege) = static_privilege(privilege) else {
        return;
    };
    ADMITTED.with(|memo| {
        let mut entries = memo.borrow_mut();
        // Entries of replaced snapshots can never match again.
        entries.retain(|entry| std::ptr::eq(entry.snapshot.as_ptr(), Arc::as_ptr(snapshot)));
        if entries.len() >= ADMITTED_MEMO {
            entries.remove(0);
        }
        entries.push(AdmittedPrivilege {
            snapshot: Arc::downgrade(snapshot),
            caller,
            privilege,
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(revision: u64) -> Arc<Snapshot> {
        let engine = crate::engine::Engine::new(
            &crate::policy::model::PolicySet::default(),
            crate::engine::EngineConfig::default(),
        );
        Arc::new(Snapshot {
            engine: Arc::new(engine),
            revision,
        })
    }

    fn user(name: &str, groups: &[&str]) -> Arc<UserInfo> {
        Arc::new(UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        })
    }

    /// `same_as` is `==` whether or not the strings share an address.
    #[test]
    fn same_as_is_equality() {
        // Equal contents at other addresses, as a privilege built elsewhere could have.
        let copy = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        let privileges = [
            Privilege::SUBJECT_ACCESS_REVIEW,
            Privilege::RESOURCE_ACCESS_REVIEW,
            Privilege::STATUS,
            Privilege::Authenticated,
            Privilege::local_subject_access_review("team-a"),
            Privilege::local_subject_access_review("team-b"),
            Privilege::Resource {
                verb: copy("create"),
                group: copy(AUTHORIZATION_GROUP),
                resource: copy("subjectaccessreviews"),
                namespace: "",
                name: "",
            },
            Privilege::Resource {
                verb: "create",
                group: AUTHORIZATION_GROUP,
                resource: "subjectaccessreviews",
                namespace: "",
                name: "one",
            },
            Privilege::NonResource {
                verb: copy("get"),
                path: copy("/status"),
            },
            Privilege::NonResource {
                verb: "get",
                path: "/statusz",
            },
        ];
        for a in privileges {
            for b in privileges {
                assert_eq!(a.same_as(b), a == b, "{a:?} against {b:?}");
            }
        }
        // The copies are equal to the constants they copy.
        assert!(privileges[0].same_as(privileges[6]));
        assert!(privileges[2].same_as(privileges[8]));
    }

    #[test]
    fn a_remembered_grant_answers_only_the_same_snapshot_caller_and_privilege() {
        let first = snapshot(1);
        let proxy = user("proxy", &["system:authenticated"]);
        let sar = Privilege::SUBJECT_ACCESS_REVIEW;
        assert!(!admitted_before(&first, &proxy, sar));
        remember_admitted(&first, proxy.clone(), sar);
        assert!(admitted_before(&first, &proxy, sar));
        // The same identity in another allocation is the same caller.
        assert!(admitted_before(
            &first,
            &Arc::new(UserInfo::clone(&proxy)),
            sar
        ));
        // Another caller, one group more or less, another privilege: not this grant.
        assert!(!admitted_before(&first, &user("proxy", &[]), sar));
        assert!(!admitted_before(
            &first,
            &user("other", &["system:authenticated"]),
            sar
        ));
        assert!(!admitted_before(
            &first,
            &proxy,
            Privilege::RESOURCE_ACCESS_REVIEW
        ));
        // A new snapshot (a policy change, even at the same revision number) starts over.
        let second = snapshot(1);
        assert!(!admitted_before(&second, &proxy, sar));
        drop(first);
        let third = snapshot(2);
        assert!(!admitted_before(&third, &proxy, sar));
        // Namespaced privileges borrow from the request and are never remembered.
        let local = Privilege::local_subject_access_review("team-a");
        remember_admitted(&third, proxy.clone(), local);
        assert!(!admitted_before(&third, &proxy, local));
    }

    #[test]
    fn the_memo_keeps_the_newest_grants_of_the_current_snapshot_only() {
        let old = snapshot(1);
        let current = snapshot(2);
        let sar = Privilege::SUBJECT_ACCESS_REVIEW;
        remember_admitted(&old, user("a", &[]), sar);
        let callers: Vec<Arc<UserInfo>> = (0..=ADMITTED_MEMO)
            .map(|i| user(&format!("u{i}"), &[]))
            .collect();
        for caller in &callers {
            remember_admitted(&current, caller.clone(), sar);
        }
        ADMITTED.with(|memo| assert_eq!(memo.borrow().len(), ADMITTED_MEMO));
        assert!(!admitted_before(&old, &user("a", &[]), sar));
        assert!(!admitted_before(&current, &callers[0], sar));
        assert!(admitted_before(&current, &callers[ADMITTED_MEMO], sar));
    }

    fn parse(text: &str) -> std::result::Result<TokenFile, String> {
        TokenFile::parse("tokens.csv", text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_kubernetes_token_lines() {
        let file = parse(
            "t1,alice,uid-1,\"devs,ops\"\n\nt2,bob,uid-2\r\nt3,carol,,\"\",extra,columns\n\"t\"\"4\",\"dave, jr\",u4,admins\n",
        )
        .unwrap();
        assert_eq!(file.len(), 4);
        let alice = file.lookup("t1").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "uid-1");
        assert_eq!(alice.groups, vec!["devs", "ops"]);
        assert!(file.lookup("t2").unwrap().groups.is_empty());
        let carol = file.lookup("t3").unwrap();
        assert_eq!((carol.uid.as_str(), carol.groups.len()), ("", 0));
        let dave = file.lookup("t\"4").unwrap();
        assert_eq!(dave.name, "dave, jr");
        assert_eq!(dave.groups, vec!["admins"]);
        assert!(file.lookup("t").is_none());
        assert!(file.lookup("t11").is_none());
        assert!(file.lookup("").is_none());
    }

    #[test]
    fn bad_lines_are_named_by_file_and_line() {
        let cases = [
            (
                "t1,alice,u1\nt2,bob\n",
                "tokens.csv:2: must have at least 3 columns",
            ),
            (
                "t1,alice,u1\n \n",
                "tokens.csv:2: must have at least 3 columns",
            ),
            (",alice,u1\n", "tokens.csv:1: the token (column 1) is empty"),
            (
                "t1,,u1\n",
                "tokens.csv:1: the user name (column 2) is empty",
            ),
            (
                "t1,a,u\nt2,b,u\nt1,c,u\n",
                "tokens.csv:3: this token is already given on line 1",
            ),
            (
                "t1,alice,u1,\"devs\n",
                "tokens.csv:1: column 4: a quoted field is not closed",
            ),
            (
                "t1,al\"ice,u1\n",
                "tokens.csv:1: column 2: a quote inside an unquoted field",
            ),
            (
                "\"t1\"x,alice,u1\n",
                "tokens.csv:1: column 1: `x` after a closing quote",
            ),
            (
                "t 1,alice,u1\n",
                "tokens.csv:1: the token (column 1) contains whitespace",
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).err().unwrap_or_default();
            assert!(
                got.starts_with(want),
                "{text:?}: got {got:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn bearer_header_forms() {
        assert_eq!(bearer_token(Some("Bearer abc")).ok(), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")).ok(), Some("abc"));
        for bad in ["Basic abc", "Bearer", "Bearer ", "Bearer a b", "abc"] {
            assert!(
                matches!(bearer_token(Some(bad)), Err(ApiError::Unauthenticated(_))),
                "{bad:?}"
            );
        }
        assert!(bearer_token(None).is_err());
    }

    #[test]
    fn listener_rules() {
        let access = |local, auth, insecure| listener_access("L", local, auth, insecure, "u");
        assert_eq!(access(true, false, false).ok(), Some(LocalAccess::Allowed));
        assert_eq!(access(true, true, false).ok(), Some(LocalAccess::Refused));
        assert_eq!(access(false, true, false).ok(), Some(LocalAccess::Refused));
        assert_eq!(
            access(false, false, true).ok(),
            Some(LocalAccess::AllowedInsecurely)
        );
        let refused = access(false, false, false).unwrap_err().to_string();
        assert!(refused.contains("--token-auth-file"), "{refused}");
        assert!(refused.contains(INSECURE_REMOTE_FLAG), "{refused}");
    }

    #[test]
    fn refusals_say_what_was_needed() {
        let alice = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        assert_eq!(
            Privilege::SUBJECT_ACCESS_REVIEW.refusal(&alice),
            "user \"alice\" cannot create subjectaccessreviews.authorization.k8s.io at cluster scope"
        );
        assert_eq!(
            Privilege::local_resource_access_review("dev").refusal(&alice),
            "user \"alice\" cannot create localresourceaccessreviews.authorization.k8s.io in namespace \"dev\""
        );
        assert_eq!(
            Privilege::rbac("get", ObjectKind::ClusterRole, "ignored", "admin").refusal(&alice),
            "user \"alice\" cannot get clusterroles.rbac.authorization.k8s.io \"admin\" at cluster scope"
        );
    }
}
