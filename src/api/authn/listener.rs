//! The startup rule for a listener (docs/security.md §1): whether callers without credentials get the
//! local identity on it.

use thiserror::Error;

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
    "refusing to listen on {listener} without authentication: anyone who can reach it would act as the local identity `{local_user}`. Configure --token-auth-file and/or --client-ca-file (with --tls-cert-file and --tls-private-key-file), listen on a loopback address (e.g. 127.0.0.1) or a Unix socket other users cannot write to (--unix-socket-mode 0600 or 0660), or, if this really is intended, pass {INSECURE_REMOTE_FLAG}"
)]
pub struct UnsafeListener {
    pub listener: String,
    pub local_user: String,
}

/// The startup rule for a listener (docs/security.md §1): with authentication configured nobody gets the
/// local identity; without it, only local listeners (loopback, a Unix socket other users
/// cannot write to) hand it out, and a remote one — a Unix socket with write for others is
/// one: every user of the machine can connect — refuses to start unless the operator passed
/// [`INSECURE_REMOTE_FLAG`].
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
