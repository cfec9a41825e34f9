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

/// A verified client certificate's caller, as kube-apiserver's x509 authenticator reads it
/// (`CommonNameUserConversion` in kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/
/// authentication/request/x509/x509.go`): CN = user, each non-empty O = a group; `Ok(None)` when the subject has no
/// CommonName (or an empty one), so the certificate names nobody and the next authenticator is
/// asked, as upstream.
///
/// Refused (`UNAUTHENTICATED`), where upstream and authzd could name different callers:
///
/// * **more than one CommonName.** Go's `pkix.Name.FillFromRDNSequence`
///   (golang/go `src/crypto/x509/pkix/pkix.go`) keeps the *last* CN it meets, so kube-apiserver, and a
///   CSR approver or signer written in Go, see `/CN=root/CN=eve` as `eve`, while a reader that
///   searches from the start (OpenSSL's `X509_NAME_get_index_by_NID`, and authzd before this
///   check) sees `root`. Reading it as Go does would make authzd agree with kube-apiserver but
///   not with every tool in the issuing chain: an approver that checked one CN may have let
///   the other through. A certificate that names two users names no one for sure, so it
///   authenticates no one, and the refusal says how to fix it.
/// * **a CN or O whose value is not read as text** (a BMPString or T61String, which Go reads,
///   or a type it refuses): left out, an O could be a group a deny rule names, and reading it
///   differently from Go could name another user.
pub fn certificate_user(identity: &ClientIdentity) -> Result<Option<Arc<UserInfo>>> {
    if !identity.unreadable.is_empty() {
        return Err(ApiError::Unauthenticated(format!(
            "client certificate refused: its subject holds {} that authzd does not read as \
             text (UTF8String, PrintableString, IA5String and NumericString are read); \
             issue one with UTF8String names",
            identity.unreadable.join(", ")
        )));
    }
    let name = match identity.common_names.as_slice() {
        [] => return Ok(None),
        [name] if name.is_empty() => return Ok(None),
        [name] => name,
        names => {
            return Err(ApiError::Unauthenticated(format!(
                "client certificate refused: its subject names {} users ({}); kube-apiserver \
                 would take the last CommonName and other readers the first, so authzd takes \
                 neither. Issue a certificate with exactly one CN",
                names.len(),
                names
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    Ok(Some(Arc::new(UserInfo {
        name: name.clone(),
        groups: identity
            .organizations
            .iter()
            .filter(|o| !o.is_empty())
            .cloned()
            .collect(),
        ..UserInfo::default()
    })))
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
            if let Some(user) = certificate_user(client)? {
                return Ok(authenticated(user));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ListenAddr;

    fn subject(common_names: &[&str], organizations: &[&str]) -> ClientIdentity {
        ClientIdentity {
            common_names: common_names.iter().map(|n| n.to_string()).collect(),
            organizations: organizations.iter().map(|o| o.to_string()).collect(),
            unreadable: Vec::new(),
        }
    }

    fn refusal(result: Result<Option<Arc<UserInfo>>>) -> String {
        match result {
            Err(ApiError::Unauthenticated(message)) => message,
            other => panic!("expected UNAUTHENTICATED, got {other:?}"),
        }
    }

    #[test]
    fn one_common_name_is_the_user_and_each_organization_a_group() {
        let user = certificate_user(&subject(&["carla"], &["ops", "", "reviewers"]))
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "carla");
        assert_eq!(user.groups, ["ops", "reviewers"]);
    }

    /// As upstream: a subject without a CommonName (or an empty one) names nobody, and the
    /// next authenticator is asked.
    #[test]
    fn no_common_name_names_nobody() {
        assert!(certificate_user(&subject(&[], &["ops"])).unwrap().is_none());
        assert!(certificate_user(&subject(&[""], &["ops"]))
            .unwrap()
            .is_none());
    }

    #[test]
    fn two_common_names_are_refused_naming_both() {
        let message = refusal(certificate_user(&subject(
            &["root", "eve"],
            &["system:masters"],
        )));
        assert!(
            message.contains("names 2 users (`root`, `eve`)"),
            "{message}"
        );
        assert!(message.contains("exactly one CN"), "{message}");
        // An empty CN beside a real one is still two: Go would read `/CN=eve/CN=` as no user.
        refusal(certificate_user(&subject(&["eve", ""], &[])));
    }

    #[test]
    fn a_value_not_read_as_text_is_refused() {
        let mut identity = subject(&["carla"], &["ops"]);
        identity.unreadable.push("O (BmpString)".into());
        let message = refusal(certificate_user(&identity));
        assert!(message.contains("O (BmpString)"), "{message}");
    }

    fn connection(identity: ClientIdentity) -> ConnectionInfo {
        ConnectionInfo {
            listener: Arc::new(ListenAddr::Tcp("127.0.0.1:1".parse().unwrap())),
            remote_addr: None,
            local_addr: None,
            client_identity: Some(identity),
        }
    }

    /// A refused certificate is a credential that does not verify: a valid bearer token sent
    /// beside it does not stand in for it. One that names nobody leaves the token to decide.
    #[test]
    fn a_refused_certificate_never_falls_back_to_a_token() {
        let tokens = TokenFile::parse("tokens.csv", "secret,olga,u1\n").unwrap();
        let chain = AuthChain::new(Some(tokens), None);
        let mut metadata = MetadataMap::new();
        metadata.insert("authorization", "Bearer secret".parse().unwrap());
        let ask = |identity| {
            let connection = connection(identity);
            chain.authenticate(&Peer {
                metadata: &metadata,
                remote_addr: None,
                connection: Some(&connection),
            })
        };
        assert!(matches!(
            ask(subject(&["root", "eve"], &[])),
            Err(ApiError::Unauthenticated(_))
        ));
        assert_eq!(ask(subject(&[], &["ops"])).unwrap().name, "olga");
        let carla = ask(subject(&["carla"], &["ops"])).unwrap();
        assert_eq!(carla.name, "carla");
        assert_eq!(carla.groups, ["ops", AUTHENTICATED_GROUP]);
    }
}
