//! `authzd ask`: Authorize questions through the callers' library ([`crate::caller`]), one
//! from the command line or one per line of stdin, each answered on its own line as
//! `DECISION SOURCE REVISION` (`allow local 7`, `deny remote 8`), or `error: ...` for a
//! question that cannot be asked. With `--local-cache` the answers come from a cache in this
//! process when it is fresh (docs/caller-cache.md). `--timeout` bounds the connection and each
//! question the server is asked; the question on the command line that cannot be answered
//! fails the command (`error: CODE: MESSAGE`, exit 1).

use std::io::Write;

use tokio::io::AsyncBufReadExt;

use super::{ClientError, Result};
use crate::caller::{Answer, Client, Endpoint, LocalCacheConfig};
use crate::config::ClientSettings;
use crate::proto;
use crate::request::{Action, NonResourceAttributes, Request, ResourceAttributes, UserInfo};

/// `USER[,GROUP...] VERB RESOURCE [NAMESPACE]` (RESOURCE `/path`: a non-resource URL).
pub fn parse_question(line: &str) -> std::result::Result<Request, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (who, verb, what, namespace) = match fields.as_slice() {
        [who, verb, what] => (*who, *verb, *what, ""),
        [who, verb, what, namespace] => (*who, *verb, *what, *namespace),
        _ => return Err(format!("`{line}`: expected USER VERB RESOURCE [NAMESPACE]")),
    };
    let mut names = who.split(',');
    let user = UserInfo {
        name: names.next().unwrap_or_default().to_string(),
        groups: names
            .filter(|g| !g.is_empty())
            .map(str::to_string)
            .collect(),
        ..Default::default()
    };
    let action = if what.starts_with('/') {
        Action::NonResource(NonResourceAttributes {
            path: what.into(),
            verb: verb.into(),
        })
    } else {
        let (resource, subresource) = what.split_once('/').unwrap_or((what, ""));
        Action::Resource(ResourceAttributes {
            namespace: namespace.into(),
            verb: verb.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            ..Default::default()
        })
    };
    Ok(Request { user, action })
}

fn decision_word(response: &proto::AuthorizeResponse) -> &'static str {
    match proto::Decision::try_from(response.decision) {
        Ok(proto::Decision::Allow) => "allow",
        Ok(proto::Decision::Deny) => "deny",
        Ok(proto::Decision::Conditional) => "conditional",
        _ => "no_opinion",
    }
}

pub async fn run(
    server: &ClientSettings,
    question: Option<String>,
    local_cache: Option<(String, std::time::Duration)>,
    out: &mut dyn Write,
) -> Result<()> {
    let endpoint = Endpoint {
        url: server.url.clone(),
        certificate_authority: server.certificate_authority.clone(),
        client_identity: server.client_identity.clone(),
        token: server.token.clone(),
        timeout: server.timeout,
    };
    let mut client = Client::connect(&endpoint)
        .await
        .map_err(|e| ClientError::from(tonic::Status::from(e)))?;
    if let Some((id, max_staleness)) = local_cache {
        client = client.with_local_cache(LocalCacheConfig {
            max_staleness,
            ..LocalCacheConfig::new(id)
        });
    }
    if let Some(question) = question {
        let request = parse_question(&question)
            .map_err(|e| ClientError::from(tonic::Status::invalid_argument(e)))?;
        let answered = client.authorize(&request).await?;
        return write_answer(&answered, out);
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        match parse_question(&line) {
            Ok(request) => answer(&client, &request, out).await?,
            Err(problem) => writeln!(out, "error: {problem}")?,
        }
        out.flush()?;
    }
    Ok(())
}

/// One question of stdin answered on its line, or `error: CODE: MESSAGE` there: the questions
/// after it are still asked.
async fn answer(client: &Client, request: &Request, out: &mut dyn Write) -> Result<()> {
    match client.authorize(request).await {
        Ok(answer) => write_answer(&answer, out),
        Err(status) => {
            writeln!(out, "error: {:?}: {}", status.code(), status.message())?;
            Ok(())
        }
    }
}

/// `DECISION SOURCE REVISION`.
fn write_answer(answer: &Answer, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{} {} {}",
        decision_word(&answer.response),
        if answer.from_local_cache {
            "local"
        } else {
            "remote"
        },
        answer.response.revision
    )?;
    Ok(())
}
