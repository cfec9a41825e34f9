//! `--allow-paths` and `--ignore-paths` patterns, matched as Go's `path.Match` matches them
//! (kube-rbac-proxy matches each pattern against the request's path with it, `pkg/filters/
//! path.go`): `*` is any run of characters but `/`, `?` one character but `/`, `[...]` a
//! class (`[^...]` negated, `a-z` ranges), `\` escapes the next character. A pattern must
//! match the whole path. A malformed pattern is refused at startup, as kube-rbac-proxy's
//! `Validate` does.

/// A checked pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathPattern(Vec<char>);

impl PathPattern {
    /// `pattern`, or why Go would answer `ErrBadPattern` for it.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let chars: Vec<char> = pattern.chars().collect();
        validate(&chars).map_err(|problem| format!("path pattern `{pattern}`: {problem}"))?;
        Ok(PathPattern(chars))
    }

    pub fn matches(&self, path: &str) -> bool {
        let path: Vec<char> = path.chars().collect();
        matches(&self.0, &path)
    }
}

/// Whether any of `patterns` matches `path`.
pub fn any_matches(patterns: &[PathPattern], path: &str) -> bool {
    patterns.iter().any(|p| p.matches(path))
}

fn validate(pattern: &[char]) -> Result<(), String> {
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            '\\' => {
                if i + 1 >= pattern.len() {
                    return Err("a trailing `\\` escapes nothing".into());
                }
                i += 2;
            }
            '[' => i = class(pattern, i, None)?.1,
            _ => i += 1,
        }
    }
    Ok(())
}

/// Reads the class starting at `pattern[start] == '['`; with `c`, whether it matches `c`.
/// Returns (matched, the index after `]`).
fn class(pattern: &[char], start: usize, c: Option<char>) -> Result<(bool, usize), String> {
    let mut i = start + 1;
    let negated = pattern.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let Some(&next) = pattern.get(i) else {
            return Err("a `[` class is not closed".into());
        };
        if next == ']' && !first {
            i += 1;
            break;
        }
        first = false;
        let (low, after) = class_char(pattern, i)?;
        i = after;
        let high = if pattern.get(i) == Some(&'-') {
            let (high, after) = class_char(pattern, i + 1)?;
            i = after;
            if high < low {
                return Err(format!("the range `{low}-{high}` is empty"));
            }
            high
        } else {
            low
        };
        if c.is_some_and(|c| low <= c && c <= high) {
            matched = true;
        }
    }
    Ok((matched != negated, i))
}

fn class_char(pattern: &[char], i: usize) -> Result<(char, usize), String> {
    match pattern.get(i) {
        None => Err("a `[` class is not closed".into()),
        Some('-') | Some(']') => Err("a class holds an unescaped `-` or `]`".into()),
        Some('\\') => pattern
            .get(i + 1)
            .map(|&c| (c, i + 2))
            .ok_or_else(|| "a trailing `\\` escapes nothing".into()),
        Some(&c) => Ok((c, i + 1)),
    }
}

/// `pattern` (validated) against the whole of `path`.
fn matches(pattern: &[char], path: &[char]) -> bool {
    let Some((&first, rest)) = pattern.split_first() else {
        return path.is_empty();
    };
    match first {
        // The star takes as few or as many characters but `/` as lets the rest match.
        '*' => (0..=path.iter().take_while(|&&c| c != '/').count())
            .any(|taken| matches(rest, &path[taken..])),
        '?' => path
            .split_first()
            .is_some_and(|(&c, tail)| c != '/' && matches(rest, tail)),
        '[' => path
            .split_first()
            .is_some_and(|(&c, tail)| match class(pattern, 0, Some(c)) {
                Ok((true, after)) => c != '/' && matches(&pattern[after..], tail),
                _ => false,
            }),
        '\\' => pattern.get(1).is_some_and(|&escaped| {
            path.split_first()
                .is_some_and(|(&c, tail)| c == escaped && matches(&pattern[2..], tail))
        }),
        literal => path
            .split_first()
            .is_some_and(|(&c, tail)| c == literal && matches(rest, tail)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        PathPattern::new(pattern).unwrap().matches(path)
    }

    // Cases from Go's `path.Match` documentation and its match_test.go semantics.
    #[test]
    fn patterns_match_as_go_path_match() {
        assert!(m("/metrics", "/metrics"));
        assert!(!m("/metrics", "/metrics/"));
        assert!(m("/api/*", "/api/v1"));
        assert!(!m("/api/*", "/api/v1/pods"), "a star stops at a slash");
        assert!(m("/api/*/pods", "/api/v1/pods"));
        assert!(m("/healthz*", "/healthz"));
        assert!(m("/a?c", "/abc"));
        assert!(!m("/a?c", "/a/c"));
        assert!(m("/[a-c]x", "/bx"));
        assert!(!m("/[^a-c]x", "/bx"));
        assert!(m("/[^a-c]x", "/dx"));
        assert!(m("/a\\*b", "/a*b"));
        assert!(!m("/a\\*b", "/axb"));
        assert!(m("*", "metrics"));
        assert!(!m("*", "/metrics"));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["/[a-", "/[", "/a\\", "/[]", "/[z-a]"] {
            assert!(PathPattern::new(bad).is_err(), "{bad}");
        }
    }
}
