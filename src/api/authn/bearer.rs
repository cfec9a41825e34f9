//! The bearer token of an `authorization` header, as kube-apiserver's bearer-token
//! authenticator reads it; the chain looks it up in the token file.

use crate::api::error::{ApiError, Result};

/// The token of an `authorization: Bearer <token>` header (scheme case-insensitive, as
/// upstream).
pub(crate) fn bearer_token(header: Option<&str>) -> Result<&str> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
