//! Who is asking, as kube-rbac-proxy's delegating authenticator decides it
//! (`pkg/authn/delegating.go` in brancz/kube-rbac-proxy, over upstream's request
//! authenticator union): a verified client certificate (CN the user, each O a group), else a
//! bearer token, looked up in `--token-auth-file` and then, when it is not there, asked of the
//! API server's TokenReview. Anonymous requests are never let through.

use std::sync::Arc;

use http::HeaderMap;

use crate::api::authn::token_file::TokenFile;
use crate::api::authn::{authenticated, bearer_token, certificate_user};
use crate::request::UserInfo;
use crate::transport::ConnectionInfo;
use crate::webhook::TokenReviewer;

/// The caller, and whether a bearer token named them (its header is then not passed on, as
/// upstream's bearer-token authenticator removes it).
pub struct Caller {
    pub user: Arc<UserInfo>,
    pub by_token: bool,
}

pub struct Identify {
    tokens: Option<TokenFile>,
    reviewer: Option<TokenReviewer>,
}

impl Identify {
    pub fn new(tokens: Option<TokenFile>, reviewer: Option<TokenReviewer>) -> Self {
        Identify {
            tokens: tokens.map(TokenFile::authenticated),
            reviewer,
        }
    }

    /// The caller, or why the request is not authenticated (for the log; the client is told
    /// only `Unauthorized`, as kube-rbac-proxy tells it).
    pub async fn caller(
        &self,
        connection: Option<&ConnectionInfo>,
        headers: &HeaderMap,
    ) -> Result<Caller, String> {
        if let Some(identity) = connection.and_then(|c| c.client_identity.as_ref()) {
            // A certificate that names no user falls through to the token, as upstream; one
            // whose subject is ambiguous is refused, never passed over (`certificate_user`).
            if let Some(user) = certificate_user(identity).map_err(|e| e.to_string())? {
                return Ok(Caller {
                    user: authenticated(user),
                    by_token: false,
                });
            }
        }
        let Some(header) = headers.get(http::header::AUTHORIZATION) else {
            return Err("no client certificate and no bearer token".to_string());
        };
        let token = bearer_token(header.to_str().ok()).map_err(|e| e.to_string())?;
        if let Some(user) = self.tokens.as_ref().and_then(|t| t.lookup(token)) {
            return Ok(Caller {
                user: Arc::clone(user),
                by_token: true,
            });
        }
        let Some(reviewer) = &self.reviewer else {
            return Err("the bearer token is not in --token-auth-file".to_string());
        };
        match reviewer.review(token).await? {
            Some(user) => Ok(Caller {
                user,
                by_token: true,
            }),
            None => Err("the API server's TokenReview did not authenticate the token".into()),
        }
    }
}
