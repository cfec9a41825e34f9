//! The one form of a request's path the proxy works with, computed once per request: the
//! `--allow-paths`/`--ignore-paths` patterns match it, authzd is asked about it and the
//! upstream receives it, so that what is authorized is what is served.
//!
//! kube-rbac-proxy serves behind Go's `http.ServeMux` (`mux.Handle("/", handler)` in
//! `cmd/kube-rbac-proxy/app/kube-rbac-proxy.go`), which answers a path that is not clean with a
//! redirect to its clean form (`cleanPath` in Go's `src/net/http/server.go`) before any filter
//! runs. This proxy cleans the path the same way and goes on with the clean one (docs/proxy.md
//! §2 says why it does not redirect):
//!
//! * empty segments (repeated slashes) and `.` segments are dropped, a `..` segment drops the
//!   segment before it (none at the root), as Go's `path.Clean` (`src/path/path.go`) does; a
//!   trailing slash is kept, as `cleanPath` keeps it;
//! * the segments left are passed on as the client escaped them; they are percent-decoded
//!   once, as Go's `URL.Path` holds them, for matching and for authzd.
//!
//! Whatever an upstream could read as another path is refused instead (400), because the
//! upstreams in front of which the proxy sits do not agree on it: nginx decodes `%2F` into a
//! separator and resolves `%2E%2E` as `..` (`ngx_http_parse_complex_uri` in its
//! `src/http/ngx_http_parse.c`), Python's `http.server` decodes before `posixpath.normpath`
//! (`SimpleHTTPRequestHandler.translate_path`), while a router that matches Go's `URL.RawPath`
//! keeps `%2F` inside a segment. So the proxy refuses an encoded slash (`%2F`), a segment that
//! is `.` or `..` only once decoded (`%2e%2e`, `.%2E`), a segment that is empty, `.` or `..`
//! once its `;` parameters are dropped (`..;x`, which Java servlet containers read as `..`),
//! an escape that is not `%` and two hex digits, and a path that is not UTF-8 once decoded.

use http::Uri;

/// A request's path after cleaning: what is matched, authorized and forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanPath {
    escaped: String,
    decoded: String,
}

/// Why a request's path is refused rather than cleaned (answered 400 with this text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UncleanPath {
    #[error("the path `{0}` does not start with `/`")]
    NotAbsolute(String),
    #[error(
        "the path segment `{0}` holds an encoded slash (`%2F`), which upstreams read either as \
         a separator or as data"
    )]
    EncodedSlash(String),
    #[error(
        "the path segment `{0}` is a dot segment only once decoded, which upstreams either \
         resolve or keep"
    )]
    EncodedDotSegment(String),
    #[error(
        "the path segment `{0}` is empty or a dot segment once its `;` parameters are dropped, \
         as servlet containers drop them"
    )]
    SegmentWithParameters(String),
    #[error("the path segment `{0}` holds a `%` that is not followed by two hex digits")]
    BadEscape(String),
    #[error("the path segment `{0}` is not UTF-8 once decoded")]
    NotUtf8(String),
}

impl CleanPath {
    /// The clean form of `uri`'s path, or why it has none.
    pub fn of(uri: &Uri) -> Result<Self, UncleanPath> {
        Self::new(uri.path())
    }

    /// The clean form of `raw`, a path as the client sent it (percent-encoded, no query).
    pub fn new(raw: &str) -> Result<Self, UncleanPath> {
        // Go's `cleanPath`: an empty path is the root.
        let raw = if raw.is_empty() { "/" } else { raw };
        let Some(rest) = raw.strip_prefix('/') else {
            return Err(UncleanPath::NotAbsolute(raw.to_string()));
        };
        let mut escaped = String::with_capacity(raw.len());
        let mut decoded: Vec<u8> = Vec::with_capacity(raw.len());
        for segment in rest.split('/') {
            match segment {
                "" | "." => continue,
                ".." => {
                    drop_last_segment(&mut escaped);
                    let cut = decoded.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    decoded.truncate(cut);
                    continue;
                }
                _ => {}
            }
            let start = decoded.len() + 1;
            decoded.push(b'/');
            decode_segment(segment, &mut decoded)?;
            let text = &decoded[start..];
            if text == b"." || text == b".." {
                return Err(UncleanPath::EncodedDotSegment(segment.to_string()));
            }
            if is_empty_or_dot_with_parameters(text) {
                return Err(UncleanPath::SegmentWithParameters(segment.to_string()));
            }
            escaped.push('/');
            escaped.push_str(segment);
        }
        // Go's `cleanPath` puts back the trailing slash `path.Clean` removes.
        // An empty path is the root.
        if escaped.is_empty() || raw.ends_with('/') {
            escaped.push('/');
            decoded.push(b'/');
        }
        let decoded = String::from_utf8(decoded)
            .map_err(|_| UncleanPath::NotUtf8(first_non_utf8_segment(raw)))?;
        Ok(CleanPath { escaped, decoded })
    }

    /// The path as the upstream receives it: each segment as the client escaped it.
    pub fn escaped(&self) -> &str {
        &self.escaped
    }

    /// The same path percent-decoded, as Go's `URL.Path` holds it: what `--allow-paths` and
    /// `--ignore-paths` match and the non-resource URL authzd is asked about.
    pub fn decoded(&self) -> &str {
        &self.decoded
    }
}

fn drop_last_segment(path: &mut String) {
    let cut = path.rfind('/').unwrap_or(0);
    path.truncate(cut);
}

/// Appends `segment` percent-decoded to `out`; an escape that decodes to `/` is refused.
fn decode_segment(segment: &str, out: &mut Vec<u8>) -> Result<(), UncleanPath> {
    let bytes = segment.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let byte = match (bytes.get(i + 1), bytes.get(i + 2)) {
            (Some(&high), Some(&low)) => hex(high).zip(hex(low)).map(|(h, l)| h << 4 | l),
            _ => None,
        }
        .ok_or_else(|| UncleanPath::BadEscape(segment.to_string()))?;
        if byte == b'/' {
            return Err(UncleanPath::EncodedSlash(segment.to_string()));
        }
        out.push(byte);
        i += 3;
    }
    Ok(())
}

fn hex(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// `;x`, `.;x` or `..;x`: servlet containers drop a segment's `;` parameters before they
/// resolve dot segments (Jakarta Servlet 6.0, §3.5.2 "URI Path Canonicalization", which
/// rejects these segments too).
fn is_empty_or_dot_with_parameters(segment: &[u8]) -> bool {
    match segment.iter().position(|&b| b == b';') {
        Some(at) => matches!(&segment[..at], b"" | b"." | b".."),
        None => false,
    }
}

/// The first segment of `raw` that does not decode to UTF-8 (for the refusal's message).
fn first_non_utf8_segment(raw: &str) -> String {
    raw.split('/')
        .find(|segment| {
            let mut bytes = Vec::new();
            decode_segment(segment, &mut bytes).is_ok() && std::str::from_utf8(&bytes).is_err()
        })
        .unwrap_or(raw)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(raw: &str) -> Result<(String, String), UncleanPath> {
        CleanPath::new(raw).map(|p| (p.escaped, p.decoded))
    }

    fn same(raw: &str, want: &str) {
        assert_eq!(
            clean(raw),
            Ok((want.to_string(), want.to_string())),
            "{raw}"
        );
    }

    // Cases from Go's `path.Clean` tests (`src/path/path_test.go`, rooted ones) and
    // `cleanPath` (`src/net/http/server.go`, the trailing slash).
    #[test]
    fn dot_segments_and_repeated_slashes_are_cleaned_as_go_cleans_them() {
        same("", "/");
        same("/", "/");
        same("/abc", "/abc");
        same("/abc/def/", "/abc/def/");
        same("//abc//def//", "/abc/def/");
        same("/abc/./def", "/abc/def");
        same("/abc/def/..", "/abc");
        same("/abc/def/../", "/abc/");
        same("/abc/def/../../..", "/");
        same("/../../abc", "/abc");
        same("/metrics/../secret/flag", "/secret/flag");
        same("/a/./", "/a/");
        same("/.", "/");
        same("/..", "/");
        same("/...", "/...");
        same("/a..b/.x", "/a..b/.x");
    }

    #[test]
    fn segments_are_passed_on_as_escaped_and_decoded_once() {
        assert_eq!(
            clean("/me%74rics/a%20b/x/../%252e%252e"),
            Ok((
                "/me%74rics/a%20b/%252e%252e".into(),
                "/metrics/a b/%2e%2e".into()
            ))
        );
        assert_eq!(
            clean("/caf%C3%A9/"),
            Ok(("/caf%C3%A9/".into(), "/café/".into()))
        );
        // Parameters of any other segment are data.
        same("/a;v=1/b", "/a;v=1/b");
        // A `%2e` inside a segment is only a dot.
        assert_eq!(
            clean("/file%2ejson"),
            Ok(("/file%2ejson".into(), "/file.json".into()))
        );
    }

    #[test]
    fn what_upstreams_could_read_otherwise_is_refused() {
        for (raw, why) in [
            (
                "/metrics/..%2fsecret/flag",
                UncleanPath::EncodedSlash("..%2fsecret".into()),
            ),
            ("/a%2Fb", UncleanPath::EncodedSlash("a%2Fb".into())),
            (
                "/metrics/%2e%2e/secret",
                UncleanPath::EncodedDotSegment("%2e%2e".into()),
            ),
            (
                "/public/%2E%2E",
                UncleanPath::EncodedDotSegment("%2E%2E".into()),
            ),
            (
                "/public/.%2e",
                UncleanPath::EncodedDotSegment(".%2e".into()),
            ),
            ("/a/%2e/b", UncleanPath::EncodedDotSegment("%2e".into())),
            (
                "/metrics/..;x/secret",
                UncleanPath::SegmentWithParameters("..;x".into()),
            ),
            (
                "/metrics/%2e%2e;/secret",
                UncleanPath::SegmentWithParameters("%2e%2e;".into()),
            ),
            (
                "/metrics/;x/secret",
                UncleanPath::SegmentWithParameters(";x".into()),
            ),
            ("/a%zz", UncleanPath::BadEscape("a%zz".into())),
            ("/a%2", UncleanPath::BadEscape("a%2".into())),
            ("/ok/a%ff", UncleanPath::NotUtf8("a%ff".into())),
            ("*", UncleanPath::NotAbsolute("*".into())),
        ] {
            assert_eq!(clean(raw), Err(why), "{raw}");
        }
    }
}
