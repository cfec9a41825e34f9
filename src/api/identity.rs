//! Who is calling, and what they need to be allowed to call (SPEC §3, "Review flavours").
//!
//! Today every caller is the configured local identity and every caller is admitted. The seam
//! is here so that mTLS / bearer-token authentication and the privilege checks of the review
//! table plug in without touching the handlers: handlers ask an [`Authenticator`] for the
//! caller and state the [`Privilege`] each RPC needs.

use std::net::SocketAddr;

use tonic::metadata::MetadataMap;

use crate::api::error::Result;
use crate::engine::UserInfo;
use crate::transport::ConnectionInfo;

/// What an authenticator may look at: request metadata (bearer tokens) and the peer.
pub struct Peer<'a> {
    pub metadata: &'a MetadataMap,
    pub remote_addr: Option<SocketAddr>,
    /// The connection the request arrived on (listener, verified client certificate);
    /// `None` only for a request that did not come through `transport` (in-process calls).
    pub connection: Option<&'a ConnectionInfo>,
}

impl<'a> Peer<'a> {
    pub fn of<T>(request: &'a tonic::Request<T>) -> Self {
        Self {
            metadata: request.metadata(),
            remote_addr: request.remote_addr(),
            connection: request.extensions().get::<ConnectionInfo>(),
        }
    }
}

/// Turns a transport peer into the caller's identity.
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate(&self, peer: &Peer<'_>) -> Result<UserInfo>;
}

/// The identity of every caller on a loopback listener with no authentication configured
/// (`--local-user`, `--local-group`).
pub struct LocalIdentity {
    user: UserInfo,
}

impl LocalIdentity {
    pub fn new(name: String, groups: Vec<String>) -> Self {
        Self {
            user: UserInfo {
                name,
                groups,
                ..UserInfo::default()
            },
        }
    }
}

impl Authenticator for LocalIdentity {
    fn authenticate(&self, _peer: &Peer<'_>) -> Result<UserInfo> {
        Ok(self.user.clone())
    }
}

/// What the caller of an RPC must be allowed to do (the "who may call it" column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege<'a> {
    /// `create` on `resource` (group `authorization.k8s.io`) cluster-wide.
    Cluster { resource: &'static str },
    /// `create` on `resource` in `namespace`.
    Namespaced {
        resource: &'static str,
        namespace: &'a str,
    },
    /// Any authenticated caller (PersonalSubjectAccessReview).
    Authenticated,
}

impl<'a> Privilege<'a> {
    /// SubjectAccessReview, and Authorize/BatchAuthorize ("same as the cluster-wide reviews").
    pub const SUBJECT_ACCESS_REVIEW: Privilege<'static> = Privilege::Cluster {
        resource: "subjectaccessreviews",
    };
    /// ResourceAccessReview and GetAllowedSubjects.
    pub const RESOURCE_ACCESS_REVIEW: Privilege<'static> = Privilege::Cluster {
        resource: "resourceaccessreviews",
    };

    pub fn local_subject_access_review(namespace: &'a str) -> Self {
        Privilege::Namespaced {
            resource: "localsubjectaccessreviews",
            namespace,
        }
    }

    pub fn local_resource_access_review(namespace: &'a str) -> Self {
        Privilege::Namespaced {
            resource: "localresourceaccessreviews",
            namespace,
        }
    }
}
