//! The client commands (`apply`, `delete`, `get`, `watch`, `status`, `replicas`):
//! `authz.v1.PolicyAdmin` calls to a running server, answers rendered for people on `out`.
//!
//! Errors keep the server's gRPC code and message (`NotFound: Role `dev/x` not found`); a
//! connection that cannot be made is reported as `Unavailable`, a timeout as
//! `DeadlineExceeded`, so every failure reads `CODE: MESSAGE`.
//!
//! [`text`] renders the offline commands' answers (`check`, `who-can`) the same way.

pub mod ask;
pub mod text;

use std::future::Future;
use std::io::{Read, Write};

use thiserror::Error;
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::api::error::ErrorReason;
use crate::caller::connect::error_chain;
use crate::caller::deadline::{format_duration, Deadline};
use crate::config::{Ack, ClientCommand, ClientSettings, ManifestSource};
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
        ClientCommand::Ask {
            question,
            local_cache,
        } => return ask::run(server, question.clone(), local_cache.clone(), out).await,
        _ => Vec::new(),
    };
    let mut client = connect(server).await?;
    let result = match command {
        ClientCommand::Apply {
            dry_run,
            witness,
            ack,
            ..
        } => {
            let dry_run = dry_run.then_some(DryRun { witness });
            apply(&mut client, server, manifests, dry_run, ack, out).await
        }
        ClientCommand::Delete { object, ack } => {
            let response = unary(
                server,
                client.delete(request(
                    server,
                    proto::DeleteRequest {
                        object: Some(wire_ref(&object)),
                        ack: wire_ack(ack) as i32,
                    },
                )?),
            )
            .await?;
            writeln!(out, "deleted at revision {}", response.revision)?;
            out.write_all(
                acknowledgement(&response.replicas_confirmed, &response.replicas_fenced).as_bytes(),
            )?;
            out.write_all(
                caller_caches(response.subscribers_confirmed, response.subscribers_fenced)
                    .as_bytes(),
            )
            .map_err(ClientError::from)
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
        ClientCommand::Replicas => {
            let response = unary(
                server,
                client.status(request(server, proto::StatusRequest {})?),
            )
            .await?;
            match replica_table(&response) {
                Some(table) => out.write_all(table.as_bytes()).map_err(ClientError::from),
                None => {
                    // Not a failure: the answer is that there are none. Stdout stays empty
                    // (as for `get` of a kind with no objects); the note is for the person.
                    eprintln!(
                        "the server at {} is not in etcd mode (store: {}): it has no replicas",
                        server.url,
                        if response.store.is_empty() {
                            "directory"
                        } else {
                            &response.store
                        }
                    );
                    Ok(())
                }
            }
        }
        // Answered before connecting (above).
        ClientCommand::Ask { .. } => Ok(()),
    };
    match result.and_then(|()| out.flush().map_err(ClientError::from)) {
        // `authzd get ... | head`: the reader having gone is not a failure.
        Err(ClientError::Output(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn read_sources(sources: &[ManifestSource]) -> Result<Vec<(String, String)>> {
    let mut manifests = Vec::new();
    for source in sources {
        let read_error = |error| ClientError::Read {
            source_name: source.to_string(),
            error,
        };
        match source {
            ManifestSource::Stdin => {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .map_err(read_error)?;
                manifests.push((source.to_string(), text));
            }
            ManifestSource::File(path) if path.is_dir() => {
                manifests.extend(read_directory(path)?);
            }
            ManifestSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(read_error)?;
                manifests.push((source.to_string(), text));
            }
        }
    }
    Ok(manifests)
}

/// A directory's manifests, one per file, in the order the policy loader reads them. ABAC
/// lines are not policy objects the server stores: their files are skipped, and said so.
fn read_directory(dir: &std::path::Path) -> Result<Vec<(String, String)>> {
    use crate::policy::load::{policy_files, Format};
    let files = policy_files(dir).map_err(|errors| ClientError::Read {
        source_name: dir.display().to_string(),
        error: std::io::Error::other(errors.to_string()),
    })?;
    let mut manifests = Vec::new();
    for (path, format) in files {
        let name = path.display().to_string();
        if format == Format::AbacLines {
            eprintln!("authzd: skipping {name}: ABAC lines are read from a policy directory by the server, not applied");
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|error| ClientError::Read {
            source_name: name.clone(),
            error,
        })?;
        manifests.push((name, text));
    }
    Ok(manifests)
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
                format_duration(server.timeout)
            ))
            .into())
        }
    };
    Ok(PolicyAdminClient::new(channel))
}

/// `message` as a call answered once: with the caller's token, and telling the server the
/// deadline (`grpc-timeout`), which [`unary`] also holds it to.
fn request<T>(server: &ClientSettings, message: T) -> Result<tonic::Request<T>> {
    let mut request = stream_request(server, message)?;
    deadline(server).tell(&mut request);
    Ok(request)
}

/// `message` with the caller's `authorization: Bearer` token, when one is configured, and no
/// deadline: a stream told one would be ended by the server when it passes.
fn stream_request<T>(server: &ClientSettings, message: T) -> Result<tonic::Request<T>> {
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

/// Awaits one call (or a stream's start) within the timeout: the server is told the deadline
/// ([`request`]), but a server that is frozen reads nothing, so the local bound is what
/// counts.
async fn unary<T>(
    server: &ClientSettings,
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T> {
    let answered = deadline(server)
        .bound(async { Ok(call.await?.into_inner()) })
        .await?;
    Ok(answered)
}

/// The deadline of each call to `server` ([`crate::caller::deadline`], as `authzd ask` has it).
fn deadline(server: &ClientSettings) -> Deadline {
    Deadline::new(&server.url, server.timeout)
}

async fn apply(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    manifests: Vec<(String, String)>,
    dry_run: Option<DryRun>,
    ack: Ack,
    out: &mut dyn Write,
) -> Result<()> {
    let suffix = if dry_run.is_some() { " (dry run)" } else { "" };
    for (source_name, manifest) in manifests {
        // A file is one write (atomic) where the server can take it whole. It goes in chunks
        // when it is larger than one request may be (an export of a large cluster), and when
        // the server refuses it whole: an etcd-mode server takes no more objects than one
        // etcd transaction holds, and a server may read smaller requests than this client
        // assumes.
        let whole = if manifest.len() <= MAX_WHOLE_APPLY_BYTES {
            let sent = apply_one(
                client,
                server,
                &source_name,
                &manifest,
                dry_run.is_some(),
                ack,
            );
            Some(sent.await)
        } else {
            // Larger than one request may be: never sent whole.
            None
        };
        let response = match whole {
            Some(Err(ClientError::Rpc { status, .. })) if needs_chunks(&status) => None,
            None => None,
            Some(other) => Some(other?),
        };
        let Some(response) = response else {
            let chunks = chunked(source_name, manifest);
            apply_in_chunks(client, server, chunks, dry_run, ack, out).await?;
            continue;
        };
        for object in &response.applied {
            writeln!(out, "{} applied{suffix}", object_label(object))?;
        }
        writeln!(out, "revision {}{suffix}", response.revision)?;
        out.write_all(
            acknowledgement(&response.replicas_confirmed, &response.replicas_fenced).as_bytes(),
        )?;
        out.write_all(
            caller_caches(response.subscribers_confirmed, response.subscribers_fenced).as_bytes(),
        )?;
        if let Some(DryRun { witness }) = dry_run {
            out.write_all(dry_run_delta(response, witness).as_bytes())?;
        }
        // Each file is its own request: show its result before the next one can fail.
        out.flush()?;
    }
    Ok(())
}

/// The largest file sent as one `Apply`: the server reads requests of up to
/// `MAX_REQUEST_BYTES`, and the request carries a little more than the manifest.
const MAX_WHOLE_APPLY_BYTES: usize = crate::api::limits::MAX_REQUEST_BYTES - 64 * 1024;

/// Whether a refusal of a whole file means "send it in chunks", as the server says it in the
/// refusal's `google.rpc.ErrorInfo` reason: more objects or bytes than one commit takes
/// (etcd's transaction limits), or a request larger than the server reads. Other refusals
/// (an overloaded server shedding load) are not about size: the file is not split for them,
/// the error stands.
fn needs_chunks(status: &Status) -> bool {
    matches!(
        ErrorReason::of(status),
        Some(ErrorReason::WriteTooLarge | ErrorReason::RequestTooLarge)
    )
}

/// Applies a file's chunks one after another, printing each one's objects, then the last
/// revision and its acknowledgement.
async fn apply_in_chunks(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    chunks: Vec<(String, String)>,
    dry_run: Option<DryRun>,
    ack: Ack,
    out: &mut dyn Write,
) -> Result<()> {
    let suffix = if dry_run.is_some() { " (dry run)" } else { "" };
    let mut last = None;
    for (name, chunk) in chunks {
        let response = apply_one(client, server, &name, &chunk, dry_run.is_some(), ack).await?;
        for object in &response.applied {
            writeln!(out, "{} applied{suffix}", object_label(object))?;
        }
        out.flush()?;
        last = Some(response);
    }
    let Some(response) = last else {
        return Ok(());
    };
    writeln!(out, "revision {}{suffix}", response.revision)?;
    // The last chunk's acknowledgement covers the earlier ones: a replica that applied its
    // revision applied theirs (revisions only grow).
    out.write_all(
        acknowledgement(&response.replicas_confirmed, &response.replicas_fenced).as_bytes(),
    )?;
    out.write_all(
        caller_caches(response.subscribers_confirmed, response.subscribers_fenced).as_bytes(),
    )?;
    if dry_run.is_some() {
        // Each chunk was compared with the policy in force alone, so their deltas do not add
        // up to the file's.
        writeln!(
            out,
            "access delta: not computed for a file sent in chunks; \
             compare the policies with `authzd diff`"
        )?;
    }
    out.flush()?;
    Ok(())
}

/// A dry run's extra: the access delta is printed (with witnesses when asked).
#[derive(Clone, Copy, Debug)]
struct DryRun {
    witness: bool,
}

/// A dry run's access delta as `authzd diff` prints it, then its traffic impact, or why the
/// server withheld them.
fn dry_run_delta(response: proto::ApplyResponse, witness: bool) -> String {
    match response.delta {
        Some(delta) => {
            let delta = crate::api::delta_wire::from_wire(delta);
            let mut text = crate::client::text::delta(&delta, witness);
            if let Some(traffic) = &response.traffic {
                text.push_str(&crate::client::text::traffic(traffic));
            }
            text
        }
        None if !response.delta_withheld.is_empty() => {
            format!("access delta withheld: {}\n", response.delta_withheld)
        }
        None => "access delta: not reported by this server\n".to_string(),
    }
}

async fn apply_one(
    client: &mut PolicyAdminClient<Channel>,
    server: &ClientSettings,
    source_name: &str,
    manifest: &str,
    dry_run: bool,
    ack: Ack,
) -> Result<proto::ApplyResponse> {
    let call = client.apply(request(
        server,
        proto::ApplyRequest {
            manifest: manifest.to_string(),
            dry_run,
            ack: wire_ack(ack) as i32,
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

/// The most manifest bytes one chunk carries: the server refuses a transaction of more than
/// 1 MiB of objects (etcd's request limit is 1.5 MiB), and stored objects are JSON, about as
/// large as their YAML.
const APPLY_CHUNK_BYTES: usize = 512 * 1024;

/// A file the server cannot take whole (etcd mode: more objects or bytes than one transaction
/// holds — a bulk import, a cluster's export) as several manifests of at most [`APPLY_CHUNK`]
/// objects and [`APPLY_CHUNK_BYTES`] bytes, each named `FILE (objects N-M)`; a file that does
/// not load here, or holds one object, as it is (the server says why). Chunks are applied one
/// after another, so such a file is not applied atomically.
fn chunked(source_name: String, manifest: String) -> Vec<(String, String)> {
    let options = crate::policy::load::LoadOptions {
        max_file_bytes: u64::MAX,
        ..crate::policy::load::LoadOptions::default()
    };
    let objects = match crate::policy::load::parse_manifest(&source_name, &manifest, &options) {
        Ok(objects) if objects.len() > 1 => objects,
        _ => return vec![(source_name, manifest)],
    };
    let rendered = objects
        .iter()
        .map(|object| crate::store::ObjectView::from(object).manifest());
    let mut chunks: Vec<(usize, Vec<String>)> = Vec::new();
    let mut bytes = 0;
    for (i, text) in rendered.enumerate() {
        let full = chunks.last().is_none_or(|(_, chunk)| {
            chunk.len() >= APPLY_CHUNK || bytes + text.len() > APPLY_CHUNK_BYTES
        });
        if full {
            chunks.push((i + 1, Vec::new()));
            bytes = 0;
        }
        bytes += text.len();
        if let Some((_, chunk)) = chunks.last_mut() {
            chunk.push(text);
        }
    }
    chunks
        .into_iter()
        .map(|(first, chunk)| {
            let name = format!(
                "{source_name} (objects {first}-{})",
                first + chunk.len() - 1
            );
            (name, chunk.join("---\n"))
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
    let call = client.watch(stream_request(
        server,
        proto::WatchRequest { from_revision },
    )?);
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

fn wire_ack(ack: Ack) -> proto::Ack {
    match ack {
        Ack::Cluster => proto::Ack::Cluster,
        Ack::Local => proto::Ack::Local,
        Ack::Committed => proto::Ack::Committed,
    }
}

/// `acknowledged by a, b; fenced: c` and a newline: who confirmed a write and who was taken as
/// fenced (etcd mode); empty when the server named no replica (directory mode, a dry run).
pub fn acknowledgement(confirmed: &[String], fenced: &[String]) -> String {
    let mut parts = Vec::new();
    if !confirmed.is_empty() {
        parts.push(format!("acknowledged by {}", confirmed.join(", ")));
    }
    if !fenced.is_empty() {
        parts.push(format!("fenced: {}", fenced.join(", ")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{}\n", parts.join("; "))
    }
}

/// The callers' caches (WatchInvalidations subscribers) a write's acknowledgement waited for:
/// a line only when there were any.
pub fn caller_caches(confirmed: u32, fenced: u32) -> String {
    match (confirmed, fenced) {
        (0, 0) => String::new(),
        (confirmed, 0) => format!("caller caches: {confirmed} confirmed\n"),
        (confirmed, fenced) => format!("caller caches: {confirmed} confirmed, {fenced} fenced\n"),
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
/// subscribers: none
/// ```
/// A multi-line last error continues on indented lines. The callers' caches subscribed to the
/// invalidation stream are listed last, one line each ([`subscriber_table`]). An etcd-mode
/// server's store comes after the last error (`revision` is then the etcd revision this
/// replica applied last):
/// ```text
/// store: etcd
/// replica id: a
/// etcd endpoint: http://10.0.0.1:2379
/// etcd head revision: 42
/// freshness age: 0.2s
/// fenced: no
/// replicas:
///   REPLICA  APPLIED  NOTE
///   a        42       this replica
///   b        40       behind
/// ```
pub fn status(response: &proto::StatusResponse) -> String {
    let last_error = if response.last_error.trim().is_empty() {
        "none".to_string()
    } else {
        response.last_error.trim_end().replace('\n', "\n  ")
    };
    let store = if is_etcd(response) {
        let age = if response.freshness_age_seconds < 0.0 {
            "none (not yet proved current with etcd)".to_string()
        } else {
            format!("{:.1}s", response.freshness_age_seconds)
        };
        let fenced = if response.fenced {
            "yes (allows are refused until this replica proves its policy current again)"
        } else {
            "no"
        };
        let replicas: String = replica_table(response)
            .unwrap_or_default()
            .lines()
            .map(|line| format!("  {line}\n"))
            .collect();
        let head = match response.head_revision {
            0 => "not read yet".to_string(),
            head if head > response.revision => format!("{head} (this replica is catching up)"),
            head => head.to_string(),
        };
        format!(
            "store: etcd\nreplica id: {}\netcd endpoint: {}\netcd head revision: {head}\n\
             freshness age: {age}\nfenced: {fenced}\nreplicas:\n{replicas}",
            response.replica_id, response.etcd_endpoint,
        )
    } else {
        String::new()
    };
    let subscribers = match subscriber_table(response) {
        None => "subscribers: none\n".to_string(),
        Some(table) => {
            let rows: String = table.lines().map(|line| format!("  {line}\n")).collect();
            format!("subscribers:\n{rows}")
        }
    };
    format!(
        "revision: {}\nlast error: {last_error}\n{store}cache entries: {}\ncache hits: {}\n\
         cache misses: {}\ncache inserts: {}\ncache invalidations: {}\ncache evictions: {}\n\
         cache stale inserts refused: {}\n{subscribers}",
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

fn is_etcd(response: &proto::StatusResponse) -> bool {
    response.store == "etcd"
}

/// The replica table of an etcd-mode server, one line per replica under a header; `None` in
/// directory mode. `this replica` marks the server's own; `behind` a replica whose applied
/// revision is below the newest policy revision the answer knows (the server's own, or one a
/// replica reported): it has not applied the latest change yet (or is gone, and its entry
/// not yet expired).
/// ```text
/// REPLICA  APPLIED  NOTE
/// a        42       this replica
/// b        40       behind
/// c        42
/// ```
pub fn replica_table(response: &proto::StatusResponse) -> Option<String> {
    if !is_etcd(response) {
        return None;
    }
    let newest = response
        .replicas
        .iter()
        .map(|replica| replica.applied_revision)
        .chain([response.revision])
        .max()
        .unwrap_or(0);
    let rows: Vec<[String; 3]> = response
        .replicas
        .iter()
        .map(|replica| {
            let mut notes = Vec::new();
            if replica.id == response.replica_id {
                notes.push("this replica");
            }
            if replica.applied_revision < newest {
                notes.push("behind");
            }
            [
                replica.id.clone(),
                replica.applied_revision.to_string(),
                notes.join(", "),
            ]
        })
        .collect();
    Some(columns(["REPLICA", "APPLIED", "NOTE"], &rows))
}

/// The callers' caches subscribed to this server's invalidation stream, one line per
/// subscriber under a header; `None` without any. `HEARTBEAT` is the age of its last
/// heartbeat (what its proof of being current stands on); `disconnected` marks one whose
/// stream closed (listed until its last proof has expired), `behind` one that has not
/// confirmed the server's revision, `no heartbeat yet` one that holds no proof.
/// ```text
/// SUBSCRIBER  APPLIED  HEARTBEAT  NOTE
/// proxy-1     42       0.4s ago
/// proxy-2     40       3.1s ago   disconnected, behind
/// ```
pub fn subscriber_table(response: &proto::StatusResponse) -> Option<String> {
    if response.subscribers.is_empty() {
        return None;
    }
    let rows: Vec<[String; 4]> = response
        .subscribers
        .iter()
        .map(|subscriber| {
            let mut notes = Vec::new();
            if !subscriber.connected {
                notes.push("disconnected");
            }
            if subscriber.applied_revision < response.revision {
                notes.push("behind");
            }
            let heartbeat = if subscriber.proof_age_seconds < 0.0 {
                notes.push("no heartbeat yet");
                "none".to_string()
            } else {
                format!("{:.1}s ago", subscriber.proof_age_seconds)
            };
            [
                subscriber.id.clone(),
                subscriber.applied_revision.to_string(),
                heartbeat,
                notes.join(", "),
            ]
        })
        .collect();
    Some(columns(
        ["SUBSCRIBER", "APPLIED", "HEARTBEAT", "NOTE"],
        &rows,
    ))
}

/// `rows` under `header`, each column but the last padded to its widest cell, two spaces
/// apart; trailing blanks trimmed.
fn columns<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let header = header.map(str::to_string);
    let widths: Vec<usize> = (0..N)
        .map(|column| {
            std::iter::once(&header)
                .chain(rows)
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut table = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 < N {
                let pad = widths[column] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            } else {
                line.push_str(cell);
            }
        }
        table.push_str(line.trim_end());
        table.push('\n');
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Size refusals split a file, by the reason the server gives them; an overloaded
    /// server's refusal does not (the write stays atomic and the error is reported), whatever
    /// its message says.
    #[test]
    fn only_size_refusals_split_a_file() {
        use crate::api::error::ApiError;
        use crate::store::StoreError;
        let typed = |error: ApiError| needs_chunks(&Status::from(error));
        assert!(typed(ApiError::Store(StoreError::TooLarge(
            "one write may change at most 127 objects".into()
        ))));
        assert!(typed(ApiError::TooLarge));
        assert!(needs_chunks(
            &ErrorReason::RequestTooLarge.status(Code::ResourceExhausted, String::new())
        ));
        let plain = |code, message: &str| needs_chunks(&Status::new(code, message));
        assert!(!plain(
            Code::ResourceExhausted,
            "server overloaded: 1024 requests already in flight (--max-concurrent-requests); retry with backoff"
        ));
        // Text alone never splits: the reason decides.
        assert!(!plain(
            Code::InvalidArgument,
            "too many objects (etcd's transaction limit); split it"
        ));
        assert!(!plain(Code::ResourceExhausted, "message length too large"));
        assert!(!typed(ApiError::invalid(
            "kind",
            crate::api::error::Invalid::Empty
        )));
    }

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
    /// same objects; large objects go fewer to a chunk; a single object goes as it is.
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
        // Large objects: a chunk holds at most APPLY_CHUNK_BYTES of them.
        let big_role = |i: usize| {
            let verbs: Vec<String> = (0..12_000).map(|v| format!("verb{v}")).collect();
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: r{i}}}\nrules: [{{apiGroups: [\"\"], resources: [pods], verbs: [{}]}}]\n---\n",
                verbs.join(", ")
            )
        };
        let large: String = (0..5).map(big_role).collect();
        let chunks = chunked("big.yaml".into(), large);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        assert!(chunks
            .iter()
            .all(|(_, text)| text.len() <= APPLY_CHUNK_BYTES));
        assert_eq!(chunks[0].0, "big.yaml (objects 1-2)");
        // One object goes as it is (the server's refusal stands).
        let one: String = text.split("---\n").next().unwrap().to_string();
        assert_eq!(
            chunked("s.yaml".into(), one.clone()),
            vec![("s.yaml".to_string(), one)]
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

    fn etcd_status(fenced: bool, age: f64) -> proto::StatusResponse {
        proto::StatusResponse {
            revision: 42,
            cache_entries: 3,
            store: "etcd".into(),
            replica_id: "b".into(),
            etcd_endpoint: "http://10.0.0.1:2379".into(),
            freshness_age_seconds: age,
            fenced,
            head_revision: 42,
            replicas: [("a", 42), ("b", 42), ("replica-c", 40)]
                .into_iter()
                .map(|(id, applied_revision)| proto::ReplicaStatus {
                    id: id.into(),
                    applied_revision,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Directory mode prints what it always did, nothing of etcd; etcd mode adds the store,
    /// replica id, endpoint, freshness, fenced state and the replica table.
    #[test]
    fn status_shows_the_etcd_store_only_in_etcd_mode() {
        let directory = proto::StatusResponse {
            revision: 7,
            cache_entries: 3,
            store: "directory".into(),
            ..Default::default()
        };
        assert_eq!(
            status(&directory),
            "revision: 7\nlast error: none\ncache entries: 3\ncache hits: 0\ncache misses: 0\n\
             cache inserts: 0\ncache invalidations: 0\ncache evictions: 0\n\
             cache stale inserts refused: 0\nsubscribers: none\n"
        );
        assert_eq!(replica_table(&directory), None);

        assert_eq!(
            status(&etcd_status(false, 0.25)),
            "revision: 42\nlast error: none\nstore: etcd\nreplica id: b\n\
             etcd endpoint: http://10.0.0.1:2379\netcd head revision: 42\nfreshness age: 0.2s\n\
             fenced: no\nreplicas:\n\
             \x20 REPLICA    APPLIED  NOTE\n\
             \x20 a          42\n\
             \x20 b          42       this replica\n\
             \x20 replica-c  40       behind\n\
             cache entries: 3\ncache hits: 0\ncache misses: 0\ncache inserts: 0\n\
             cache invalidations: 0\ncache evictions: 0\ncache stale inserts refused: 0\n\
             subscribers: none\n"
        );
        let text = status(&etcd_status(true, -1.0));
        assert!(text.contains("\nfenced: yes (allows are refused"), "{text}");
        assert!(
            text.contains("\nfreshness age: none (not yet proved current with etcd)\n"),
            "{text}"
        );
    }

    /// One line per replica; this server's own marked, and a replica below the newest known
    /// revision marked behind — this server's own too, when another is ahead of it.
    #[test]
    fn the_replica_table_marks_this_replica_and_those_behind() {
        assert_eq!(
            replica_table(&etcd_status(false, 0.1)).unwrap(),
            "REPLICA    APPLIED  NOTE\na          42\nb          42       this replica\n\
             replica-c  40       behind\n"
        );
        let mut behind = etcd_status(false, 0.1);
        behind.revision = 40;
        behind.replica_id = "replica-c".into();
        behind.replicas[2].applied_revision = 40;
        behind.replicas[0].applied_revision = 45;
        let table = replica_table(&behind).unwrap();
        assert!(
            table.ends_with("replica-c  40       this replica, behind\n"),
            "{table}"
        );
        assert!(table.contains("\na          45\n"), "{table}");
        assert!(table.contains("\nb          42       behind\n"), "{table}");
    }

    /// One line per subscriber, last in the status: its applied revision, its last
    /// heartbeat's age, and whether it is disconnected, behind or without a heartbeat.
    #[test]
    fn status_lists_the_subscribers_one_line_each() {
        let subscriber =
            |id: &str, applied_revision, connected, proof_age_seconds| proto::SubscriberStatus {
                id: id.into(),
                applied_revision,
                connected,
                proof_age_seconds,
            };
        let response = proto::StatusResponse {
            revision: 42,
            subscribers: vec![
                subscriber("proxy-1", 42, true, 0.43),
                subscriber("a-much-longer-id", 40, false, 3.06),
                subscriber("new", 0, true, -1.0),
            ],
            ..Default::default()
        };
        assert_eq!(
            subscriber_table(&response).unwrap(),
            "SUBSCRIBER        APPLIED  HEARTBEAT  NOTE\n\
             proxy-1           42       0.4s ago\n\
             a-much-longer-id  40       3.1s ago   disconnected, behind\n\
             new               0        none       behind, no heartbeat yet\n"
        );
        let text = status(&response);
        assert!(
            text.ends_with(
                "cache stale inserts refused: 0\nsubscribers:\n\
                 \x20 SUBSCRIBER        APPLIED  HEARTBEAT  NOTE\n\
                 \x20 proxy-1           42       0.4s ago\n\
                 \x20 a-much-longer-id  40       3.1s ago   disconnected, behind\n\
                 \x20 new               0        none       behind, no heartbeat yet\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn writes_report_who_acknowledged_and_who_was_fenced() {
        let names = |list: &[&str]| -> Vec<String> { list.iter().map(|s| s.to_string()).collect() };
        assert_eq!(acknowledgement(&[], &[]), "");
        assert_eq!(
            acknowledgement(&names(&["a", "b"]), &[]),
            "acknowledged by a, b\n"
        );
        assert_eq!(
            acknowledgement(&names(&["a", "b"]), &names(&["c"])),
            "acknowledged by a, b; fenced: c\n"
        );
        assert_eq!(acknowledgement(&[], &names(&["c", "d"])), "fenced: c, d\n");
        assert_eq!(caller_caches(0, 0), "");
        assert_eq!(caller_caches(3, 0), "caller caches: 3 confirmed\n");
        assert_eq!(
            caller_caches(1, 1),
            "caller caches: 1 confirmed, 1 fenced\n"
        );
        for (ack, wire) in [
            (Ack::Cluster, proto::Ack::Cluster),
            (Ack::Local, proto::Ack::Local),
            (Ack::Committed, proto::Ack::Committed),
        ] {
            assert_eq!(wire_ack(ack), wire);
        }
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
}
