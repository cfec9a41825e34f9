//! Raw KEP-4601 selectors (`rawSelector`) parsed into requirements, as kube-apiserver parses
//! them before it asks an authorizer: label selector syntax as
//! k8s.io/apimachinery/pkg/labels/selector.go reads it, field selector syntax as
//! k8s.io/apimachinery/pkg/fields/selector.go reads it. A requirement comes out as KEP-4601's
//! requirements do: `k=v` and `k==v` are `In [v]`, `k!=v` is `NotIn [v]`.
//!
//! Only the syntax is checked here; bounds (requirement and value counts, lengths) are the
//! adapters' (the API's conversion, the test file loader), applied alike to parsed and to
//! explicit requirements. Parsing is one pass
//! over the text, and the text is bounded before it gets here.

use std::fmt;

use crate::request::{SelectorOperator, SelectorRequirement};

/// Parses a label selector: comma-separated requirements `k=v`, `k==v`, `k!=v`,
/// `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist), whitespace anywhere
/// between tokens. `>` and `<` (upstream's `Gt`/`Lt`) are refused: KEP-4601's requirements have
/// no such operators. An empty (or blank) selector has no requirements.
pub fn parse_label_selector(raw: &str) -> Result<Vec<SelectorRequirement>, String> {
    let mut lexer = Lexer::new(raw);
    let mut requirements = Vec::new();
    if lexer.peek() == Token::End {
        return Ok(requirements);
    }
    loop {
        requirements.push(label_requirement(&mut lexer)?);
        match lexer.next() {
            Token::End => return Ok(requirements),
            Token::Comma if lexer.peek() == Token::End => {
                return Err("expected a requirement after the last `,`".to_string())
            }
            Token::Comma => {}
            other => return Err(format!("expected `,` or the end, found {other}")),
        }
    }
}

fn label_requirement(lexer: &mut Lexer<'_>) -> Result<SelectorRequirement, String> {
    let negated = lexer.peek() == Token::Bang;
    if negated {
        lexer.next();
    }
    let key = match lexer.next() {
        Token::Ident(key) => key.to_string(),
        other => return Err(format!("expected a label key, found {other}")),
    };
    let requirement = |operator, values| SelectorRequirement {
        key: key.clone(),
        operator,
        values,
    };
    if negated {
        return match lexer.peek() {
            Token::Comma | Token::End => Ok(requirement(SelectorOperator::DoesNotExist, vec![])),
            other => Err(format!(
                "`!{key}` takes no operator or value, found {other}"
            )),
        };
    }
    if matches!(lexer.peek(), Token::Comma | Token::End) {
        return Ok(requirement(SelectorOperator::Exists, vec![]));
    }
    match lexer.next() {
        Token::Eq | Token::DoubleEq => {
            Ok(requirement(SelectorOperator::In, vec![exact_value(lexer)?]))
        }
        Token::NotEq => Ok(requirement(
            SelectorOperator::NotIn,
            vec![exact_value(lexer)?],
        )),
        Token::In => Ok(requirement(SelectorOperator::In, value_set(lexer, "in")?)),
        Token::NotIn => Ok(requirement(
            SelectorOperator::NotIn,
            value_set(lexer, "notin")?,
        )),
        token @ (Token::Gt | Token::Lt) => Err(format!(
            "{token} is not supported: a selector's requirements are In, NotIn, Exists and \
             DoesNotExist"
        )),
        other => Err(format!(
            "expected an operator (`=`, `==`, `!=`, `in`, `notin`) after `{key}`, found {other}"
        )),
    }
}

/// The value of `k=v`, `k==v` or `k!=v`; empty when the requirement ends there (`k=` means
/// the label's value is empty, as upstream reads it).
fn exact_value(lexer: &mut Lexer<'_>) -> Result<String, String> {
    match lexer.peek() {
        Token::Comma | Token::End => Ok(String::new()),
        _ => match lexer.next().as_value() {
            Some(value) => Ok(value.to_string()),
            None => Err(format!("expected a value, found {}", lexer.last)),
        },
    }
}

/// `(a, b, c)`: at least one value; an empty entry (`(a,,b)`) is the empty value, as upstream
/// reads it.
fn value_set(lexer: &mut Lexer<'_>, operator: &str) -> Result<Vec<String>, String> {
    match lexer.next() {
        Token::Open => {}
        other => return Err(format!("expected `(` after `{operator}`, found {other}")),
    }
    if lexer.peek() == Token::Close {
        return Err(format!(
            "`{operator} ()`: the set of values must not be empty"
        ));
    }
    let mut values = Vec::new();
    loop {
        let value = match lexer.peek() {
            Token::Comma | Token::Close => "",
            _ => match lexer.next().as_value() {
                Some(value) => value,
                None => return Err(format!("expected a value, found {}", lexer.last)),
            },
        };
        values.push(value.to_string());
        match lexer.next() {
            Token::Comma => {}
            Token::Close => return Ok(values),
            other => return Err(format!("expected `,` or `)`, found {other}")),
        }
    }
}

/// One token of the label selector syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
    /// The keywords `in` and `notin` (values where a value is expected).
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
    End,
}

impl<'a> Token<'a> {
    /// The token where a value is expected: an identifier, or a keyword taken literally
    /// (`k = in` is the value `in`, as upstream reads it).
    fn as_value(self) -> Option<&'a str> {
        match self {
            Token::Ident(value) => Some(value),
            Token::In => Some("in"),
            Token::NotIn => Some("notin"),
            _ => None,
        }
    }
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let symbol = match self {
            Token::Ident(text) => return write!(f, "`{text}`"),
            Token::End => return f.write_str("the end"),
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Bang => "!",
            Token::Gt => ">",
            Token::Lt => "<",
        };
        write!(f, "`{symbol}`")
    }
}

/// The characters that end an identifier (upstream's `isSpecialSymbol`).
fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

struct Lexer<'a> {
    rest: &'a str,
    /// The token `next` returned last, for messages.
    last: Token<'a>,
}

impl<'a> Lexer<'a> {
    fn new(raw: &'a str) -> Self {
        Self {
            rest: raw,
            last: Token::End,
        }
    }

    fn peek(&self) -> Token<'a> {
        Self::scan(self.rest).0
    }

    fn next(&mut self) -> Token<'a> {
        let (token, rest) = Self::scan(self.rest);
        self.rest = rest;
        self.last = token;
        token
    }

    /// The next token of `text` and what follows it.
    fn scan(text: &'a str) -> (Token<'a>, &'a str) {
        let text = text.trim_start();
        let mut chars = text.chars();
        let Some(first) = chars.next() else {
            return (Token::End, text);
        };
        let second = chars.next();
        let (token, len) = match (first, second) {
            ('=', Some('=')) => (Token::DoubleEq, 2),
            ('!', Some('=')) => (Token::NotEq, 2),
            ('=', _) => (Token::Eq, 1),
            ('!', _) => (Token::Bang, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            ('>', _) => (Token::Gt, 1),
            ('<', _) => (Token::Lt, 1),
            _ => {
                let end = text
                    .find(|c: char| c.is_whitespace() || is_special(c))
                    .unwrap_or(text.len());
                let ident = &text[..end];
                let token = match ident {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Ident(ident),
                };
                (token, end)
            }
        };
        (token, &text[len..])
    }
}

/// Parses a field selector: comma-separated terms `k=v`, `k==v`, `k!=v`; in values, `\,`,
/// `\=` and `\\` stand for `,`, `=` and `\`, and an unescaped `,` or `=` is an error. Empty
/// terms are skipped and an empty selector has no requirements, as upstream; blank terms and
/// whitespace around a key are ignored too (upstream reads them into the key), a value is
/// taken as written.
pub fn parse_field_selector(raw: &str) -> Result<Vec<SelectorRequirement>, String> {
    let mut requirements = Vec::new();
    for term in split_terms(raw) {
        if term.trim().is_empty() {
            continue;
        }
        let Some((key, operator, value)) = split_term(term) else {
            return Err(format!(
                "`{term}` is not `field=value`, `field==value` or `field!=value`"
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("`{term}` names no field"));
        }
        requirements.push(SelectorRequirement {
            key: key.to_string(),
            operator,
            values: vec![unescape_value(value)?],
        });
    }
    Ok(requirements)
}

/// `raw` split at every comma not escaped by a backslash.
fn split_terms(raw: &str) -> impl Iterator<Item = &str> {
    let mut escaped = false;
    raw.split(move |c: char| {
        let separator = c == ',' && !escaped;
        escaped = c == '\\' && !escaped;
        separator
    })
}

/// A term's key, operator and (still escaped) value, at the first operator: `!=` and `==`
/// before `=`, as upstream's `splitTerm` tries them.
fn split_term(term: &str) -> Option<(&str, SelectorOperator, &str)> {
    let at = term.find(['!', '='])?;
    let (key, rest) = term.split_at(at);
    if let Some(value) = rest.strip_prefix("!=") {
        return Some((key, SelectorOperator::NotIn, value));
    }
    if let Some(value) = rest.strip_prefix("==") {
        return Some((key, SelectorOperator::In, value));
    }
    if let Some(value) = rest.strip_prefix('=') {
        return Some((key, SelectorOperator::In, value));
    }
    // A `!` not followed by `=` belongs to the key; look for an operator after it.
    let (more_key, operator, value) = split_term(&rest[1..])?;
    Some((&term[..at + 1 + more_key.len()], operator, value))
}

/// A field selector value with its escapes resolved (upstream's `UnescapeValue`).
fn unescape_value(value: &str) -> Result<String, String> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => out.push(escaped),
                Some(other) => {
                    return Err(format!(
                        "`\\{other}` in `{value}` is not an escape; use `\\\\`, `\\,` or `\\=`"
                    ))
                }
                None => return Err(format!("`{value}` ends in an unfinished escape `\\`")),
            },
            ',' | '=' => {
                return Err(format!(
                    "`{value}` has an unescaped `{c}`; write it `\\{c}`"
                ))
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use SelectorOperator::{DoesNotExist, Exists, In, NotIn};

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn label_selectors_parse_as_upstream_reads_them() {
        let cases: &[(&str, Vec<SelectorRequirement>)] = &[
            ("", vec![]),
            ("   ", vec![]),
            ("app=web", vec![req("app", In, &["web"])]),
            ("app==web", vec![req("app", In, &["web"])]),
            ("app!=web", vec![req("app", NotIn, &["web"])]),
            ("app=", vec![req("app", In, &[""])]),
            ("app", vec![req("app", Exists, &[])]),
            ("!app", vec![req("app", DoesNotExist, &[])]),
            (
                " env in ( prod , staging ) ,tier notin (cache),!canary, team.example.com/owner ",
                vec![
                    req("env", In, &["prod", "staging"]),
                    req("tier", NotIn, &["cache"]),
                    req("canary", DoesNotExist, &[]),
                    req("team.example.com/owner", Exists, &[]),
                ],
            ),
            ("k in (a,,b)", vec![req("k", In, &["a", "", "b"])]),
            ("k in (in, notin)", vec![req("k", In, &["in", "notin"])]),
            ("k = notin", vec![req("k", In, &["notin"])]),
        ];
        for (raw, want) in cases {
            assert_eq!(&parse_label_selector(raw).unwrap(), want, "{raw:?}");
        }
    }

    #[test]
    fn bad_label_selectors_say_why() {
        for (raw, says) in [
            ("replicas>3", "`>` is not supported"),
            ("replicas < 3", "`<` is not supported"),
            ("a,", "after the last `,`"),
            (",a", "expected a label key, found `,`"),
            ("a in ()", "must not be empty"),
            ("a in (b", "expected `,` or `)`, found the end"),
            ("a in b", "expected `(` after `in`"),
            ("!a=b", "`!a` takes no operator or value"),
            ("a b", "expected an operator"),
            ("a=b=c", "expected `,` or the end, found `=`"),
            ("a=(b)", "expected a value, found `(`"),
            ("=b", "expected a label key, found `=`"),
            ("in=b", "expected a label key, found `in`"),
        ] {
            let error = parse_label_selector(raw).unwrap_err();
            assert!(error.contains(says), "{raw:?}: {error}");
        }
    }

    #[test]
    fn field_selectors_parse_as_upstream_reads_them() {
        let cases: &[(&str, Vec<SelectorRequirement>)] = &[
            ("", vec![]),
            (" , ", vec![]),
            (
                "spec.nodeName=node-1",
                vec![req("spec.nodeName", In, &["node-1"])],
            ),
            ("metadata.name==x", vec![req("metadata.name", In, &["x"])]),
            (
                "metadata.name!=x,,status.phase=Running",
                vec![
                    req("metadata.name", NotIn, &["x"]),
                    req("status.phase", In, &["Running"]),
                ],
            ),
            ("a=", vec![req("a", In, &[""])]),
            (r"a=x\,y\=z\\w", vec![req("a", In, &[r"x,y=z\w"])]),
            (
                r"a=x\\,b=y",
                vec![req("a", In, &["x\\"]), req("b", In, &["y"])],
            ),
            (" a =b", vec![req("a", In, &["b"])]),
            ("a!b=c", vec![req("a!b", In, &["c"])]),
        ];
        for (raw, want) in cases {
            assert_eq!(&parse_field_selector(raw).unwrap(), want, "{raw:?}");
        }
    }

    #[test]
    fn bad_field_selectors_say_why() {
        for (raw, says) in [
            ("a", "is not `field=value`"),
            ("a>3", "is not `field=value`"),
            ("=b", "names no field"),
            ("a=b=c", "unescaped `=`"),
            (r"a=b\", "unfinished escape"),
            (r"a=b\n", "is not an escape"),
        ] {
            let error = parse_field_selector(raw).unwrap_err();
            assert!(error.contains(says), "{raw:?}: {error}");
        }
    }

    /// A label requirement written in the raw syntax.
    fn label_raw(r: &SelectorRequirement) -> String {
        match r.operator {
            Exists => r.key.clone(),
            DoesNotExist => format!("!{}", r.key),
            In if r.values.len() == 1 => format!("{}={}", r.key, r.values[0]),
            In => format!("{} in ({})", r.key, r.values.join(",")),
            NotIn => format!("{} notin ({})", r.key, r.values.join(", ")),
        }
    }

    fn ident() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9./_-]{0,10}".prop_filter("keyword", |s| s != "in" && s != "notin")
    }

    fn label_requirement() -> impl Strategy<Value = SelectorRequirement> {
        (
            ident(),
            prop::sample::select(vec![In, NotIn, Exists, DoesNotExist]),
            prop::collection::vec(ident(), 1..4),
        )
            .prop_map(|(key, operator, values)| SelectorRequirement {
                key,
                operator,
                values: match operator {
                    In | NotIn => values,
                    Exists | DoesNotExist => vec![],
                },
            })
    }

    proptest! {
        /// Whatever the text, the parsers answer (requirements or a message); they never
        /// panic.
        #[test]
        fn arbitrary_text_never_panics(raw in "\\PC{0,64}|[a-z!=(),<> \\\\]{0,64}") {
            let _ = parse_label_selector(&raw);
            let _ = parse_field_selector(&raw);
        }

        /// Requirements written in label syntax read back as themselves.
        #[test]
        fn label_requirements_round_trip(
            requirements in prop::collection::vec(label_requirement(), 0..5),
        ) {
            let raw: Vec<String> = requirements.iter().map(label_raw).collect();
            prop_assert_eq!(parse_label_selector(&raw.join(", ")).unwrap(), requirements);
        }

        /// Field values with every character that needs escaping read back as written.
        #[test]
        fn escaped_field_values_round_trip(
            terms in prop::collection::vec((ident(), "[a-z,=\\\\!]{0,8}", any::<bool>()), 0..5),
        ) {
            let escape = |v: &str| v.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
            let raw: Vec<String> = terms
                .iter()
                .map(|(k, v, not)| format!("{k}{}{}", if *not { "!=" } else { "=" }, escape(v)))
                .collect();
            let want: Vec<SelectorRequirement> = terms
                .iter()
                .map(|(k, v, not)| req(k, if *not { NotIn } else { In }, &[v]))
                .collect();
            prop_assert_eq!(parse_field_selector(&raw.join(",")).unwrap(), want);
        }
    }
}
