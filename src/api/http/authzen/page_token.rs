//! AuthZEN page tokens (docs/authzen.md §5): where the next page of a search starts — the
//! policy revision every page is answered at and how many results earlier pages gave —
//! sealed with the server's key, so that a caller can neither forge a token nor change one.
//!
//! A token is opaque to the caller (AuthZEN 1.0 §9.2) and, unsealed, would be an instruction
//! the caller writes: "answer from revision N, from result M". Changing N would read a policy
//! the caller was never answered from; changing M, a page of another search. So the token
//! carries an HMAC-SHA256 (RFC 2104) over its fields and the query it was issued for, under a
//! key only the server holds: random per process by default, or read from
//! `--authzen-page-token-key-file` so that replicas behind one load balancer accept each
//! other's tokens. A token that does not verify is refused with one message, whatever was
//! wrong with it.
//!
//! The token is `authzd2.REVISION.OFFSET.TAG` in URL-safe base64, `TAG` being the HMAC (itself
//! URL-safe base64) of `authzd2.REVISION.OFFSET`, a newline and the canonical query. The fields
//! are verified as sent, then read.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::hmac;

const PREFIX: &str = "authzd2";

/// The shortest key read from a file: HMAC-SHA256's own output length (RFC 2104 §3 asks at
/// least that much).
pub const MIN_KEY_BYTES: usize = 32;

/// The server's key for page tokens.
pub struct PageTokenKey(hmac::Key);

impl std::fmt::Debug for PageTokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PageTokenKey(..)")
    }
}

/// Why a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("`{path}` holds {len} bytes; a page token key needs at least {MIN_KEY_BYTES}")]
    TooShort { path: String, len: usize },
    #[error("the system's random number generator failed")]
    Random,
}

impl PageTokenKey {
    /// A key of this process only: tokens it seals verify on no other server.
    pub fn random() -> Result<Self, KeyError> {
        let rng = ring::rand::SystemRandom::new();
        hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map(PageTokenKey)
            .map_err(|_| KeyError::Random)
    }

    /// The key in a file shared by replicas: its bytes, leading and trailing ASCII
    /// whitespace removed (an editor's last newline changes nothing), at least
    /// [`MIN_KEY_BYTES`] of them.
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let key = bytes.trim_ascii();
        if key.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                path: path.display().to_string(),
                len: key.len(),
            });
        }
        Ok(Self::from_bytes(key))
    }

    fn from_bytes(key: &[u8]) -> Self {
        PageTokenKey(hmac::Key::new(hmac::HMAC_SHA256, key))
    }

    fn tag(&self, fields: &str, query: &str) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.0);
        context.update(fields.as_bytes());
        context.update(b"\n");
        context.update(query.as_bytes());
        context.sign()
    }
}

/// Where a page starts: the revision every page of the search is answered at, and how many
/// results earlier pages gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub revision: u64,
    pub offset: usize,
}

impl Cursor {
    /// The opaque `next_token` (§9.2) of `query` (the search's canonical text).
    pub fn seal(self, key: &PageTokenKey, query: &str) -> String {
        let fields = format!("{PREFIX}.{}.{}", self.revision, self.offset);
        let tag = URL_SAFE_NO_PAD.encode(key.tag(&fields, query).as_ref());
        URL_SAFE_NO_PAD.encode(format!("{fields}.{tag}"))
    }

    /// The cursor of a token this server's key sealed for `query`; `None` for anything else
    /// (not a token, another key, another query, a field changed), never saying which.
    pub fn open(token: &str, key: &PageTokenKey, query: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        let text = std::str::from_utf8(&bytes).ok()?;
        let (fields, tag) = text.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut message = Vec::with_capacity(fields.len() + 1 + query.len());
        message.extend_from_slice(fields.as_bytes());
        message.push(b'\n');
        message.extend_from_slice(query.as_bytes());
        // Constant time in the tag (ring compares the whole of it).
        hmac::verify(&key.0, &message, &tag).ok()?;
        let mut fields = fields.split('.');
        if fields.next()? != PREFIX {
            return None;
        }
        let revision = fields.next()?.parse().ok()?;
        let offset = fields.next()?.parse().ok()?;
        fields
            .next()
            .is_none()
            .then_some(Cursor { revision, offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUERY: &str = r#"/access/v1/search/subject{"action":{"name":"get"}}"#;

    fn key() -> PageTokenKey {
        PageTokenKey::random().unwrap()
    }

    /// The token's text, its fields changed by `edit`, sealed again with the same tag: what a
    /// caller could forge without the key.
    fn forged(token: &str, edit: impl FnOnce(&mut Vec<String>)) -> String {
        let text = String::from_utf8(URL_SAFE_NO_PAD.decode(token).unwrap()).unwrap();
        let mut fields: Vec<String> = text.split('.').map(str::to_string).collect();
        edit(&mut fields);
        URL_SAFE_NO_PAD.encode(fields.join("."))
    }

    #[test]
    fn a_sealed_cursor_opens_with_its_key_and_query_only() {
        let key = key();
        let cursor = Cursor {
            revision: 7,
            offset: 200,
        };
        let token = cursor.seal(&key, QUERY);
        assert_eq!(Cursor::open(&token, &key, QUERY), Some(cursor));

        assert_eq!(
            Cursor::open(&token, &self::key(), QUERY),
            None,
            "another key"
        );
        assert_eq!(Cursor::open(&token, &key, "/other"), None, "another query");
        for edit in [
            |f: &mut Vec<String>| f[1] = "6".into(),
            |f: &mut Vec<String>| f[2] = "0".into(),
            |f: &mut Vec<String>| f[2] = "0200".into(),
            |f: &mut Vec<String>| f[0] = "authzd1".into(),
            |f: &mut Vec<String>| f.truncate(3),
            |f: &mut Vec<String>| f[3].insert(0, 'A'),
        ] {
            let forged = forged(&token, edit);
            assert_eq!(Cursor::open(&forged, &key, QUERY), None, "{forged}");
        }
        for bad in ["", "abc", "YXV0aHpkMS4xLjI", &token[1..]] {
            assert_eq!(Cursor::open(bad, &key, QUERY), None, "{bad}");
        }
    }

    #[test]
    fn keys_from_files_are_shared_and_at_least_32_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        let (a, b) = (
            PageTokenKey::from_file(&path).unwrap(),
            PageTokenKey::from_file(&path).unwrap(),
        );
        let cursor = Cursor {
            revision: 3,
            offset: 2,
        };
        assert_eq!(
            Cursor::open(&cursor.seal(&a, QUERY), &b, QUERY),
            Some(cursor),
            "two servers with one key file accept each other's tokens"
        );
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(
            PageTokenKey::from_file(&path),
            Err(KeyError::TooShort { len: 5, .. })
        ));
        assert!(matches!(
            PageTokenKey::from_file(&dir.path().join("missing")),
            Err(KeyError::Read { .. })
        ));
    }
}
