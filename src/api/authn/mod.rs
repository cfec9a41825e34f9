//! Who is calling (docs/security.md §1), as kube-apiserver answers it: a union of
//! authenticators, each with its own file.
//!
//! * [`AuthChain`] turns a transport peer into the caller: a verified client certificate
//!   ([`certificate_user`]), else a bearer token (`bearer.rs` reads the header) from the
//!   `--token-auth-file` ([`token_file`]), else — only where the listener allows it — the
//!   configured [`LocalIdentity`], else `UNAUTHENTICATED`.
//! * [`listener`] decides at startup whether a listener may hand out the local identity
//!   (loopback and Unix sockets may; anything else needs real authentication or an explicit
//!   insecure flag).
//!
//! What the caller is then allowed to call is [`crate::api::privilege`].

mod bearer;
pub mod impersonation;
pub mod listener;
pub mod token_file;

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use tonic::metadata::{Ascii, MetadataKey, MetadataMap};

use crate::api::error::{ApiError, Result};
use crate::request::UserInfo;
use crate::serving::Caller;
use crate::transport::{ClientIdentity, ConnectionInfo};

pub(crate) use bearer::bearer_token;
use token_file::TokenFile;

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

/// `user` with [`AUTHENTICATED_GROUP`] among its groups (upstream's `AuthenticatedGroupAdder`).
pub fn authenticated(user: Arc<UserInfo>) -> Arc<UserInfo> {
    if user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        return user;
    }
    let mut user = Arc::unwrap_or_clone(user);
    user.groups.push(AUTHENTICATED_GROUP.to_string());
    Arc::new(user)
}

/// Who asks, and whom it asks to be served as (Kubernetes' impersonation headers): the one
/// place every gRPC service — the reviews, PolicyAdmin, Envoy's `Check` — and the HTTP
/// endpoints that call them identify their caller. The serving core then checks the
/// impersonation ([`crate::serving::ServingState::admit`], or `identify` for policy writes);
/// an adapter never decides it, and never drops it.
pub fn identify<T>(
    authenticator: &dyn Authenticator,
    request: &tonic::Request<T>,
) -> Result<Caller> {
    let user = authenticator.authenticate(&Peer::of(request))?;
    Ok(Caller {
        impersonation: impersonation::Impersonation::requested(request.metadata())?
            .map(impersonation::Impersonation::into_admission),
        ..Caller::new(user)
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

/// Verified client certificate → bearer token → local identity (where the listener allows
/// it) → `UNAUTHENTICATED`. A presented credential that does not verify never falls back.
pub struct AuthChain {
    /// Its users already carry [`AUTHENTICATED_GROUP`], added once here instead of per request.
    tokens: Option<TokenFile>,
    local: Option<LocalIdentity>,
}

impl AuthChain {
    pub fn new(tokens: Option<TokenFile>, local: Option<LocalIdentity>) -> Self {
        let tokens = tokens.map(TokenFile::authenticated);
        Self { tokens, local }
    }
}

impl Authenticator for AuthChain {
    fn authenticate(&self, peer: &Peer<'_>) -> Result<Arc<UserInfo>> {
        if let Some(client) = peer
            .connection
            .and_then(|connection| connection.client_identity.as_ref())
        {
            return Ok(authenticated(certificate_user(client)));
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
