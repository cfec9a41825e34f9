//! Bearer tokens: kube-apiserver's `--token-auth-file`, read once at startup into a
//! [`TokenFile`] that the chain looks presented tokens up in.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use subtle::ConstantTimeEq;
use thiserror::Error;

use crate::request::UserInfo;

/// A bad `--token-auth-file`; the server refuses to start.
#[derive(Debug, Error)]
pub enum TokenFileError {
    #[error("cannot read token file `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
}

/// The tokens of a `--token-auth-file`: CSV lines `token,user,uid[,"group1,group2"]`.
///
/// Read as upstream reads it (Go's `encoding/csv`, any number of columns, at least three;
/// columns after the fourth ignored; empty lines skipped; `"…"` quoting with `""` for a quote;
/// the groups column split on commas), but stricter where upstream only logs a warning: an
/// empty token, an empty user name or a token listed twice is an error naming the line, because
/// each of those is an operator mistake that would otherwise decide silently who a caller is.
pub struct TokenFile {
    /// Scanned in full on every lookup with a constant-time comparison, so the time taken
    /// says nothing about how much of a presented token matched. Visible to the chain, which
    /// adds `system:authenticated` to every user once, at startup.
    pub(super) entries: Vec<(Vec<u8>, Arc<UserInfo>)>,
}

impl fmt::Debug for TokenFile {
    // Never print the tokens.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenFile({} tokens)", self.entries.len())
    }
}

impl TokenFile {
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&shown, &text)
    }

    /// Parses the file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, TokenFileError> {
        let error = |line: usize, problem: String| TokenFileError::Line {
            path: path.to_string(),
            line,
            problem,
        };
        let mut entries: Vec<(Vec<u8>, Arc<UserInfo>)> = Vec::new();
        let mut first_seen: HashMap<String, usize> = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            if raw.is_empty() {
                continue;
            }
            let record = csv_record(raw).map_err(|problem| error(line, problem))?;
            if record.len() < 3 {
                return Err(error(
                    line,
                    format!(
                        "must have at least 3 columns (token, user name, user uid), found {}",
                        record.len()
                    ),
                ));
            }
            let token = &record[0];
            if token.is_empty() {
                return Err(error(line, "the token (column 1) is empty".to_string()));
            }
            if token.chars().any(char::is_whitespace) {
                return Err(error(
                    line,
                    "the token (column 1) contains whitespace, which no bearer header can carry"
                        .to_string(),
                ));
            }
            if record[1].is_empty() {
                return Err(error(line, "the user name (column 2) is empty".to_string()));
            }
            if let Some(earlier) = first_seen.insert(token.clone(), line) {
                return Err(error(
                    line,
                    format!("this token is already given on line {earlier}; each token must name one user"),
                ));
            }
            let groups = record
                .get(3)
                .map(|groups| {
                    groups
                        .split(',')
                        .filter(|g| !g.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            entries.push((
                token.as_bytes().to_vec(),
                Arc::new(UserInfo {
                    name: record[1].clone(),
                    uid: record[2].clone(),
                    groups,
                    ..UserInfo::default()
                }),
            ));
        }
        Ok(Self { entries })
    }

    /// Every user in [`super::AUTHENTICATED_GROUP`], added once here rather than per request.
    pub fn authenticated(mut self) -> Self {
        for (_, user) in &mut self.entries {
            *user = super::authenticated(Arc::clone(user));
        }
        self
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The user a token belongs to. Every entry is compared (no early exit), each in
    /// constant time.
    pub fn lookup(&self, token: &str) -> Option<&Arc<UserInfo>> {
        let presented = token.as_bytes();
        let mut found = None;
        for (stored, user) in &self.entries {
            if bool::from(stored.as_slice().ct_eq(presented)) {
                found = Some(user);
            }
        }
        found
    }
}

/// One CSV line as Go's `encoding/csv` reads it (comma-separated; a field that starts with `"`
/// is quoted and `""` inside it is a quote; a quote inside an unquoted field is an error).
/// Quoted fields spanning lines are refused: no token file needs them.
fn csv_record(line: &str) -> std::result::Result<Vec<String>, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => {
                        return Err(format!(
                            "column {}: a quoted field is not closed on this line",
                            fields.len() + 1
                        ))
                    }
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(c) => {
                    return Err(format!(
                    "column {}: `{c}` after a closing quote (expected `,` or the end of the line)",
                    fields.len() + 1
                ))
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => {
                        return Err(format!(
                            "column {}: a quote inside an unquoted field (quote the whole field and write `\"\"` for a quote)",
                            fields.len() + 1
                        ))
                    }
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<TokenFile, String> {
        TokenFile::parse("tokens.csv", text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_kubernetes_token_lines() {
        let file = parse(
            "t1,alice,uid-1,\"devs,ops\"\n\nt2,bob,uid-2\r\nt3,carol,,\"\",extra,columns\n\"t\"\"4\",\"dave, jr\",u4,admins\n",
        )
        .unwrap();
        assert_eq!(file.len(), 4);
        let alice = file.lookup("t1").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "uid-1");
        assert_eq!(alice.groups, vec!["devs", "ops"]);
        assert!(file.lookup("t2").unwrap().groups.is_empty());
        let carol = file.lookup("t3").unwrap();
        assert_eq!((carol.uid.as_str(), carol.groups.len()), ("", 0));
        let dave = file.lookup("t\"4").unwrap();
        assert_eq!(dave.name, "dave, jr");
        assert_eq!(dave.groups, vec!["admins"]);
        assert!(file.lookup("t").is_none());
        assert!(file.lookup("t11").is_none());
        assert!(file.lookup("").is_none());
    }

    #[test]
    fn bad_lines_are_named_by_file_and_line() {
        let cases = [
            (
                "t1,alice,u1\nt2,bob\n",
                "tokens.csv:2: must have at least 3 columns",
            ),
            (
                "t1,alice,u1\n \n",
                "tokens.csv:2: must have at least 3 columns",
            ),
            (",alice,u1\n", "tokens.csv:1: the token (column 1) is empty"),
            (
                "t1,,u1\n",
                "tokens.csv:1: the user name (column 2) is empty",
            ),
            (
                "t1,a,u\nt2,b,u\nt1,c,u\n",
                "tokens.csv:3: this token is already given on line 1",
            ),
            (
                "t1,alice,u1,\"devs\n",
                "tokens.csv:1: column 4: a quoted field is not closed",
            ),
            (
                "t1,al\"ice,u1\n",
                "tokens.csv:1: column 2: a quote inside an unquoted field",
            ),
            (
                "\"t1\"x,alice,u1\n",
                "tokens.csv:1: column 1: `x` after a closing quote",
            ),
            (
                "t 1,alice,u1\n",
                "tokens.csv:1: the token (column 1) contains whitespace",
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).err().unwrap_or_default();
            assert!(
                got.starts_with(want),
                "{text:?}: got {got:?}, want {want:?}"
            );
        }
    }
}
