//! The client commands (`apply`, `delete`, `get`, `watch`, `status`): `authz.v1.PolicyAdmin`
//! calls to a running server, answers rendered for people on `out`.
//!
//! Errors keep the server's gRPC code and message (`NotFound: Role `dev/x` not found`); a
//! connection that cannot be made is reported as `Unavailable`, a timeout as
//! `DeadlineExceeded`, so every failure reads `CODE: MESSAGE`.
//!
//! [`text`] renders the offline commands' answers (`check`, `who-can`) the same way.

pub mod text;

use std::future::Future;
use std::io::{Read, Write};
use std::time::Duration;

use thiserror::Error;
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::config::{ClientCommand, ClientSettings, ManifestSource};
use crate::proto;
use crate::proto::policy_admin_client::PolicyAdminClient;
use crate::store::ObjectRef;

#[derive(Debug, Error)]
pub enum ClientError {
    /// The server refused, or the connection failed or timed out.
    #[error("{}: {}", code_name(.status.code()), context_message(.context.as_deref(), .status.message()))]
    Rpc {
        status: Status,
        /// What was being done, when the command does several things (e.g. the file applied).
        context: Option<String>,
    },
    /// An `-f` file (or stdin) could not be read; nothing was sent.
    #[error("cannot read {source_name}: {error}")]
    Read {
        source_name: String,
        error: std::io::Error,
    },
    /// Writing the answer failed (other than the reader going away).
    #[error("cannot write output: {0}")]
    Output(std::io::Error),
}

impl ClientError {
    /// 2 when the input given on the command line is unusable (like a usage error), 1 when
    /// the server or the connection failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Read { .. } => 2,
            ClientError::Rpc { .. } | ClientError::Output(_) => 1,
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        ClientError::Rpc {
            status,
            context: None,
        }
    }
}

impl From<std::io::Error> for ClientError {
    fn from(error: std::io::Error) -> Self {
        ClientError::Output(error)
    }
}

/// The gRPC code as the Rust and Go clients spell it: `NotFound`, `InvalidArgument`, ...
fn code_name(code: Code) -> String {
    format!("{code:?}")
}

fn context_message(context: Option<&str>, message: &str) -> String {
    match context {
        Some(context) => format!("{context}: {message}"),
        None => message.to_string(),
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Runs one client command to completion, writing its answer to `out`.
pub async fn run(
    server: &ClientSettings,
    command: ClientCommand,
    out: &mut dyn Write,
) -> Result<()> {
    // Read every manifest before connecting: a missing second file must not leave the first
    // one applied.
    let manifests = match &command {
        ClientCommand::Apply { sources, .. } => read_sources(sources)?,
        _ => Vec::new(),
    };
    let mut client = connect(server).await?;
    let result = match command {
        ClientCommand::Apply { dry_run, .. } => {
            apply(&mut client, server, manifests, dry_run, out).await
        }
        ClientCommand::Delete(object) => {
            let response = unary(
                server,
                client.delete(request(
                    server,
                    proto::DeleteRequest {
                        object: Some(wire_ref(&object)),
                        ..Default::default()
                    },
                )?),
            )
            .await?;
            writeln!(out, "deleted at revision {}", response.revision).map_err(ClientError::from)
        }
        ClientCommand::Get(object) => {
            let response = unary(
                server,
                client.get(request(
                    server,
                    proto::GetRequest {
                        object: Some(wire_ref(&object)),
                    },
                )?),
            )
            .await?;
            out.write_all(with_newline(&response.manifest).as_bytes())
                .map_err(ClientError::from)
        }
        ClientCommand::List { kind, namespace } => {
            let response = unary(
                server,
                client.list(request(
                    server,
                    proto::ListRequest {
                        kind: kind.as_str().to_string(),
                        namespace: namespace.clone(),
                    },
                )?),
            )
            .await?;
            if response.manifests.is_empty() {
                // Stdout stays an (empty) YAML stream; the note is for the person.
                eprintln!(
                    "no {} objects found{}",
                    kind.as_str(),
                    in_namespace(&namespace)
                );
            }
            out.write_all(documents(&response.manifests).as_bytes())
                .map_err(ClientError::from)
        }
        ClientCommand::Watch {
            from_revision,
            manifests,
        } => watch(&mut client, server, from_revision, manifests, out).await,
        ClientCommand::Status => {
            let response = unary(
                server,
                client.status(request(server, proto::StatusRequest {})?),
            )
            .await?;
            out.write_all(status(&response).as_bytes())
                .map_err(ClientError::from)
        }
    };
    match result.and_then(|()| out.flush().map_err(ClientError::from)) {
        // `authzd get ... | head`: the reader having gone is not a failure.
        Err(ClientError::Output(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn read_sources(sources: &[ManifestSource]) -> Result<Vec<(String, String)>> {
    sources
        .iter()
        .map(|source| {
            let read_error = |error| ClientError::Read {
                source_name: source.to_string(),
                error,
            };
            let text = match source {
                ManifestSource::Stdin => {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .map_err(read_error)?;
                    text
                }
                ManifestSource::File(path) => std::fs::read_to_string(path).map_err(read_error)?,
            };
            Ok((source.to_string(), text))
        })
        .collect()
}

/// TLS for an `https://` server: its CA (required: no system roots are used) and the client
/// certificate, if one is configured.
fn tls_config(server: &ClientSettings) -> Result<ClientTlsConfig> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|error| ClientError::Read {
            source_name: path.display().to_string(),
            error,
        })
    };
    let Some(ca) = &server.certificate_authority else {
        return Err(Status::invalid_argument(format!(
            "{} is https: give the CA its certificate chains to with --certificate-authority",
            server.url
        ))
        .into());
    };
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
    if let Some((cert, key)) = &server.client_identity {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(tls)
}

async fn connect(server: &ClientSettings) -> Result<PolicyAdminClient<Channel>> {
    let unavailable =
        |detail: String| Status::unavailable(format!("cannot connect to {}: {detail}", server.url));
    let mut endpoint = Endpoint::from_shared(server.url.clone())
        .map_err(|e| unavailable(error_chain(&e)))?
        .connect_timeout(server.timeout);
    if server.url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(tls_config(server)?)
            .map_err(|e| unavailable(error_chain(&e)))?;
    }
    let channel = match tokio::time::timeout(server.timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(error)) => return Err(unavailable(error_chain(&error)).into()),
        Err(_) => {
            return Err(Status::deadline_exceeded(format!(
                "no connection to {} within {}",
                server.url,
                human(server.timeout)
            ))
            .into())
        }
    };
    Ok(PolicyAdminClient::new(channel))
}

/// `transport error: tcp connect error: Connection refused (os error 111)`: tonic's top-level
/// message alone ("transport error") says nothing.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.ends_with(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}

/// `message` with the caller's `authorization: Bearer` token, when one is configured.
fn request<T>(server: &ClientSettings, message: T) -> Result<tonic::Request<T>> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = &server.token {
        let value = format!("Bearer {token}").parse().map_err(|_| {
            Status::invalid_argument(
                "the token is not a valid header value (visible ASCII, no spaces)",
            )
        })?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}

/// Awaits one unary call within the timeout (the server learns the deadline too: tonic sends
/// it as `grpc-timeout` when the request carries one, but the local bound is what counts).
async fn unary<T>(
    server: &ClientSettings,
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T> {
    match tokio::time::timeout(server.timeout, call).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(status.into()),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer from {} within {}",
            server.url,
            human(server.timeout)
        ))
        .into()),
    }
}

async fn apply(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    manifests: Vec<(String, String)>,
    dry_run: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let suffix = if dry_run { " (dry run)" } else { "" };
    for (source_name, manifest) in manifests {
        // A file is one write (atomic) where the server can take it whole; an etcd-mode
        // server refuses more objects than one etcd transaction takes, and then the file goes
        // in chunks.
        let response = match apply_one(client, server, &source_name, &manifest, dry_run).await {
            Err(ClientError::Rpc { status, .. })
                if status.code() == tonic::Code::InvalidArgument
                    && status.message().contains(TRANSACTION_LIMIT) =>
            {
                let mut last = None;
                for (name, chunk) in chunked(source_name.clone(), manifest) {
                    let response = apply_one(client, server, &name, &chunk, dry_run).await?;
                    for object in &response.applied {
                        writeln!(out, "{} applied{suffix}", object_label(object))?;
                    }
                    out.flush()?;
                    last = Some(response);
                }
                match last {
                    Some(response) => {
                        writeln!(out, "revision {}{suffix}", response.revision)?;
                        out.flush()?;
                        continue;
                    }
                    None => continue,
                }
            }
            other => other?,
        };
        for object in &response.applied {
            writeln!(out, "{} applied{suffix}", object_label(object))?;
        }
        writeln!(out, "revision {}{suffix}", response.revision)?;
        // Each file is its own request: show its result before the next one can fail.
        out.flush()?;
    }
    Ok(())
}

/// What an etcd-mode server says when one write holds more objects than etcd's transaction
/// limit (`store::etcd::EtcdSink`): the client then sends the file in chunks.
const TRANSACTION_LIMIT: &str = "etcd's transaction limit";

async fn apply_one(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    source_name: &str,
    manifest: &str,
    dry_run: bool,
) -> Result<proto::ApplyResponse> {
    let call = client.apply(request(
        server,
        proto::ApplyRequest {
            manifest: manifest.to_string(),
            dry_run,
            ..Default::default()
        },
    )?);
    unary(server, call).await.map_err(|error| match error {
        ClientError::Rpc { status, .. } => ClientError::Rpc {
            status,
            context: Some(source_name.to_string()),
        },
        other => other,
    })
}

/// The most objects one `Apply` carries when a file holds more: an etcd-mode server commits one
/// write as one transaction, and etcd allows 128 operations in one (one is the policy head).
const APPLY_CHUNK: usize = 100;

/// A file of more than [`APPLY_CHUNK`] objects (a bulk import, a cluster's export) as several
/// manifests of at most that many, each named `FILE (objects N-M)`; any other file as it is.
/// Only for a server that cannot take the file whole (etcd mode): chunks are applied one after
/// another, so such a file is not applied atomically.
fn chunked(source_name: String, manifest: String) -> Vec<(String, String)> {
    let options = crate::policy::load::LoadOptions {
        max_file_bytes: u64::MAX,
        ..crate::policy::load::LoadOptions::default()
    };
    let objects = match crate::policy::load::parse_manifest(&source_name, &manifest, &options) {
        Ok(objects) if objects.len() > APPLY_CHUNK => objects,
        // Small, or not loadable here: the server decides, and says why.
        _ => return vec![(source_name, manifest)],
    };
    objects
        .chunks(APPLY_CHUNK)
        .enumerate()
        .map(|(i, chunk)| {
            let text = chunk
                .iter()
                .map(|object| {
                    crate::policy::render::to_yaml(&match object {
                        crate::policy::model::PolicyObject::Role(role) => {
                            crate::policy::render::role_to_value(role)
                        }
                        crate::policy::model::PolicyObject::Binding(binding) => {
                            crate::policy::render::binding_to_value(binding)
                        }
                    })
                })
                .collect::<Vec<_>>()
                .join("---\n");
            let first = i * APPLY_CHUNK + 1;
            let name = format!(
                "{source_name} (objects {first}-{})",
                first + chunk.len() - 1
            );
            (name, text)
        })
        .collect()
}

/// Prints events until the stream ends (exit 0), fails (the server's status), or SIGINT.
async fn watch(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    from_revision: u64,
    manifests: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let call = client.watch(request(server, proto::WatchRequest { from_revision })?);
    let mut stream = unary(server, call).await?;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = &mut interrupted => return Ok(()),
        };
        match event {
            None => return Ok(()),
            Some(Err(status)) => return Err(status.into()),
            Some(Ok(event)) => {
                out.write_all(watch_event(&event, manifests).as_bytes())?;
                // One event at a time: whoever reads the output sees it as it happens.
                out.flush()?;
            }
        }
    }
}

/// `ClusterRole/name`, `RoleBinding/ns/name`: the form rule references use.
pub fn object_label(object: &proto::ObjectRef) -> String {
    if object.namespace.is_empty() {
        format!("{}/{}", object.kind, object.name)
    } else {
        format!("{}/{}/{}", object.kind, object.namespace, object.name)
    }
}

fn wire_ref(object: &ObjectRef) -> proto::ObjectRef {
    proto::ObjectRef {
        kind: object.kind.as_str().to_string(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
    }
}

fn with_newline(text: &str) -> String {
    if text.is_empty() || text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    }
}

fn in_namespace(namespace: &str) -> String {
    if namespace.is_empty() {
        String::new()
    } else {
        format!(" in namespace {namespace}")
    }
}

/// Manifests as one YAML stream: documents separated by `---` lines.
pub fn documents(manifests: &[String]) -> String {
    manifests
        .iter()
        .map(|m| with_newline(m.strip_prefix("---\n").unwrap_or(m)))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `REVISION TYPE KIND/ns/name`, then (with `manifests`) the manifest indented by two spaces,
/// so that event lines are exactly the unindented ones either way.
pub fn watch_event(event: &proto::WatchEvent, manifests: bool) -> String {
    let object = event
        .object
        .as_ref()
        .map_or_else(|| "-".to_string(), object_label);
    let mut text = format!("{} {} {object}\n", event.revision, event.r#type);
    if manifests {
        for line in event.manifest.lines() {
            if line.is_empty() {
                text.push('\n');
            } else {
                text.push_str("  ");
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// ```text
/// revision: 3
/// last error: none
/// cache entries: 12
/// cache hits: 40
/// cache misses: 12
/// cache inserts: 12
/// cache invalidations: 2
/// cache evictions: 0
/// cache stale inserts refused: 0
/// ```
/// A multi-line last error continues on indented lines.
pub fn status(response: &proto::StatusResponse) -> String {
    let last_error = if response.last_error.trim().is_empty() {
        "none".to_string()
    } else {
        response.last_error.trim_end().replace('\n', "\n  ")
    };
    format!(
        "revision: {}\nlast error: {last_error}\ncache entries: {}\ncache hits: {}\n\
         cache misses: {}\ncache inserts: {}\ncache invalidations: {}\ncache evictions: {}\n\
         cache stale inserts refused: {}\n",
        response.revision,
        response.cache_entries,
        response.cache_hits,
        response.cache_misses,
        response.cache_inserts,
        response.cache_invalidations,
        response.cache_evictions,
        response.cache_stale_inserts_refused,
    )
}

/// `10s`, `250ms`, `1.5s`: how the timeout is named in messages.
fn human(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.as_secs() == 0 {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:.3}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(revision: u64, kind: &str, ns: &str, name: &str, manifest: &str) -> proto::WatchEvent {
        proto::WatchEvent {
            r#type: "ADDED".into(),
            object: Some(proto::ObjectRef {
                kind: kind.into(),
                namespace: ns.into(),
                name: name.into(),
            }),
            manifest: manifest.into(),
            revision,
        }
    }

    /// A file of 250 objects goes as three manifests of at most 100, which load back to the
    /// same objects; a small file goes as it is.
    #[test]
    fn large_files_are_applied_in_chunks() {
        let text: String = (0..250)
            .map(|i| {
                format!(
                    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: b{i}}}\nsubjects: [{{kind: User, name: u{i}}}]\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}\n---\n"
                )
            })
            .collect();
        let options = crate::policy::load::LoadOptions::default();
        let whole = crate::policy::load::parse_manifest("all.yaml", &text, &options).unwrap();
        let chunks = chunked("all.yaml".into(), text.clone());
        assert_eq!(
            chunks.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            [
                "all.yaml (objects 1-100)",
                "all.yaml (objects 101-200)",
                "all.yaml (objects 201-250)"
            ]
        );
        let mut again = Vec::new();
        for (name, manifest) in &chunks {
            again.extend(crate::policy::load::parse_manifest(name, manifest, &options).unwrap());
        }
        let refs =
            |objects: &[crate::policy::model::PolicyObject]| -> Vec<crate::store::ObjectRef> {
                objects.iter().map(crate::store::ObjectRef::of).collect()
            };
        assert_eq!(refs(&again), refs(&whole));
        let small: String = text
            .split("---\n")
            .take(3)
            .collect::<Vec<_>>()
            .join("---\n");
        assert_eq!(
            chunked("s.yaml".into(), small.clone()),
            vec![("s.yaml".to_string(), small)]
        );
    }

    #[test]
    fn labels_cluster_and_namespaced_objects() {
        let e = event(3, "ClusterRole", "", "admin", "");
        assert_eq!(watch_event(&e, false), "3 ADDED ClusterRole/admin\n");
        let e = event(
            4,
            "RoleBinding",
            "dev",
            "b",
            "kind: RoleBinding\nmetadata:\n  name: b\n",
        );
        assert_eq!(
            watch_event(&e, true),
            "4 ADDED RoleBinding/dev/b\n  kind: RoleBinding\n  metadata:\n    name: b\n"
        );
    }

    #[test]
    fn documents_are_separated_by_dashes() {
        assert_eq!(documents(&[]), "");
        assert_eq!(documents(&["a: 1\n".into()]), "a: 1\n");
        assert_eq!(
            documents(&["a: 1".into(), "---\nb: 2\n".into()]),
            "a: 1\n---\nb: 2\n"
        );
    }

    #[test]
    fn status_says_none_without_an_error_and_indents_a_long_one() {
        let mut response = proto::StatusResponse {
            revision: 7,
            cache_hits: 2,
            ..Default::default()
        };
        let text = status(&response);
        assert!(
            text.starts_with("revision: 7\nlast error: none\n"),
            "{text}"
        );
        assert!(text.contains("cache hits: 2\n"), "{text}");
        response.last_error = "a.yaml:1: x\nb.yaml:2: y\n".into();
        assert!(status(&response).contains("last error: a.yaml:1: x\n  b.yaml:2: y\ncache"));
    }

    #[test]
    fn errors_read_code_then_message() {
        let error = ClientError::from(Status::not_found("Role `dev/x` not found"));
        assert_eq!(error.to_string(), "NotFound: Role `dev/x` not found");
        assert_eq!(error.exit_code(), 1);
        let error = ClientError::Rpc {
            status: Status::invalid_argument("manifest:3: bad"),
            context: Some("bad.yaml".into()),
        };
        assert_eq!(
            error.to_string(),
            "InvalidArgument: bad.yaml: manifest:3: bad"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human(Duration::from_secs(10)), "10s");
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.500s");
    }
}
