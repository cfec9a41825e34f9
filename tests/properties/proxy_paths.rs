//! `authzd proxy` authorizes exactly the path it forwards (src/proxy/request_path.rs): for
//! random request targets made of dot segments, percent escapes (`%2e`, `%2f`, `%25` among
//! them), repeated slashes, `;` parameters and query strings, either the request is refused, or
//!
//! * the path `--allow-paths`/`--ignore-paths` match and the non-resource URL authzd is asked
//!   about are one string, the path kube-rbac-proxy's `http.ServeMux` would have redirected to
//!   (Go's `cleanPath` of the decoded path, `src/net/http/server.go`, written again here as the
//!   oracle);
//! * the URI the upstream receives holds that path under `--upstream`'s, whichever order the
//!   upstream decodes and resolves dot segments in (nginx and Python's `http.server` decode
//!   first, Go resolves first), with nothing left for it to resolve, and the query as it came.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use authzd::proxy::attributes::RequestAttributes;
use authzd::proxy::forward::upstream_uri;
use authzd::proxy::paths::{any_matches, PathPattern};
use authzd::proxy::request_path::CleanPath;
use authzd::request::{Action, NonResourceAttributes};
use http::{HeaderMap, Method, Uri};
use proptest::prelude::*;

/// `--upstream`: a base path the request must not leave.
const UPSTREAM: &str = "http://upstream.test/base/";

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "metrics", "public", "secret", "flag", "", ".", "..", "%2e", "%2E", "%2e%2e",
            ".%2e", "%2E.", "%2f", "%2F", "..%2f", "..%2F..%2f", "%25", "%252e", "%252e%252e",
            "%252f", "me%74rics", "a%20b", "..;x", ";x", ".;", "a;b", "%ff", "%C3%A9", "%zz",
            "%", "%2", "%3B", "..%3b", "file%2ejson", "...",
        ])
        .prop_map(str::to_string),
        1 => "[a-z.%;0-9A-F]{1,6}",
    ]
}

fn target() -> impl Strategy<Value = (String, Option<String>)> {
    (
        prop::collection::vec(segment(), 0..8),
        any::<bool>(),
        prop::option::of("[a-z0-9=&%./;+]{0,12}"),
    )
        .prop_map(|(segments, trailing, query)| {
            let mut path = format!("/{}", segments.join("/"));
            if trailing {
                path.push('/');
            }
            (path, query)
        })
}

/// Percent-decodes `text` once, or `None` for a bad escape.
fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fn decode_utf8(text: &str) -> Option<String> {
    String::from_utf8(decode(text)?).ok()
}

/// Go's `cleanPath` (`src/net/http/server.go`): `path.Clean` of a rooted path, the trailing
/// slash put back.
fn go_clean_path(p: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in p.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            other => kept.push(other),
        }
    }
    let clean = format!("/{}", kept.join("/"));
    if p.ends_with('/') && clean != "/" {
        format!("{clean}/")
    } else {
        clean
    }
}

/// Whether some segment of `raw` is one the proxy must refuse: an escape that is not `%XX`,
/// an encoded slash, a dot segment only once decoded, or an empty or dot segment once its `;`
/// parameters are dropped; or `raw` decodes to bytes that are not UTF-8.
fn holds_a_hazard(raw: &str) -> bool {
    let segment_hazard = raw.split('/').any(|segment| match decode(segment) {
        None => true,
        Some(bytes) => {
            let literal_dots = segment == "." || segment == "..";
            let before_parameters = bytes.split(|&b| b == b';').next().unwrap_or_default();
            bytes.contains(&b'/')
                || (!literal_dots && (bytes == b"." || bytes == b".."))
                || (bytes.contains(&b';') && matches!(before_parameters, b"" | b"." | b".."))
        }
    });
    segment_hazard || decode_utf8(raw).is_none()
}

proptest! {
    #![proptest_config(crate::support::cases::config(10_000))]

    #[test]
    fn the_proxy_authorizes_exactly_the_path_it_forwards(target in target()) {
        let (raw, query) = target;
        let text = match &query {
            Some(query) => format!("{raw}?{query}"),
            None => raw.clone(),
        };
        let uri: Uri = text.parse().unwrap();
        let path = match CleanPath::of(&uri) {
            Ok(path) => path,
            Err(why) => {
                prop_assert!(
                    holds_a_hazard(&raw),
                    "`{}` refused ({}) with nothing to refuse",
                    raw,
                    why
                );
                return Ok(());
            }
        };
        let authorized = path.decoded().to_string();

        // What kube-rbac-proxy's ServeMux would have sent the client on to.
        if let Some(decoded) = decode_utf8(&raw) {
            prop_assert_eq!(&authorized, &go_clean_path(&decoded), "`{}`", raw);
        }

        // The non-resource URL authzd is asked about.
        let actions = RequestAttributes::default()
            .actions(&Method::GET, &path, uri.query(), &HeaderMap::new())
            .unwrap();
        prop_assert_eq!(
            actions,
            vec![Action::NonResource(NonResourceAttributes {
                path: authorized.clone(),
                verb: "get".into(),
            })]
        );

        // What the upstream receives, and what it serves whichever order it cleans in.
        let forwarded = upstream_uri(&UPSTREAM.parse().unwrap(), &path, uri.query()).unwrap();
        prop_assert_eq!(
            forwarded.query(),
            query.as_deref().filter(|q| !q.is_empty()),
            "the query is passed on as it came"
        );
        let sent = forwarded.path();
        let decoded_first = go_clean_path(&decode_utf8(sent).unwrap());
        let resolved_first = decode_utf8(&go_clean_path(sent)).unwrap();
        let received = decode_utf8(sent).unwrap();
        for cleaned in [&decoded_first, &resolved_first] {
            prop_assert_eq!(cleaned, &received, "`{}`: left to clean in `{}`", raw, sent);
        }
        prop_assert!(!holds_a_hazard(sent), "`{}` forwarded as `{}`", raw, sent);
        let served = received.strip_prefix("/base");
        prop_assert_eq!(
            served,
            Some(authorized.as_str()),
            "`{}` authorized as `{}`, served as `{}`",
            raw,
            authorized,
            received
        );

        // The patterns decide on the path served.
        let allow = ["/metrics/*", "/metrics"].map(|p| PathPattern::new(p).unwrap());
        let ignore = [PathPattern::new("/public/*").unwrap()];
        for patterns in [&allow[..], &ignore[..]] {
            prop_assert_eq!(
                any_matches(patterns, &authorized),
                any_matches(patterns, served.unwrap_or_default())
            );
        }
    }
}
