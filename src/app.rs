//! The composition root: the only place that names every concrete type and wires them.

use std::sync::Arc;

use thiserror::Error;
use tonic::server::NamedService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::api::admin::{AdminApi, StoreCell};
use crate::api::authn::listener::{
    listener_access, LocalAccess, UnsafeListener, INSECURE_REMOTE_FLAG,
};
use crate::api::authn::token_file::{TokenFile, TokenFileError};
use crate::api::authn::{AuthChain, Authenticator, LocalIdentity};
use crate::api::envoy::EnvoyApi;
use crate::api::grpc::GrpcApi;
use crate::api::http::metrics::{MetricsAccess, MetricsEndpoint};
use crate::api::http::{AuthzenConfig, HttpApi, PageTokenKey};
use crate::api::limits::MAX_REQUEST_BYTES;
use crate::api::shed::ShedLayer;
use crate::api::wire::service::authorizer_server::AuthorizerServer;
use crate::client::text;
use crate::client::{self, ClientError};
use crate::config::{
    ClientCommand, ClientSettings, EngineSettings, PolicySettings, RecordSink, ServeSettings,
    Settings, TestOutput, TestSettings,
};
use crate::engine::Engine;
use crate::policy::load::{load_paths, load_paths_reporting, LoadErrors};
use crate::proto::access_review_server::AccessReviewServer;
use crate::proto::policy_admin_server::PolicyAdminServer;
use crate::records::audit::AuditLog;
use crate::records::decision::{DecisionRecorder, RecordCounts};
use crate::records::writer::LineWriter;
use crate::serving::delegation::{Delegation, RemoteAnswer, RemoteAuthorizer};
use crate::serving::ServingState;
use crate::store::dir::DirectoryBackend;
use crate::store::{watch, Publisher, Store};
use crate::telemetry::request::RequestTelemetryLayer;
use crate::telemetry::{self, LogFormat};
use crate::transport::tls::{TlsError, TlsFiles, TlsServer};
use crate::transport::{self, ListenAddr, Listener};
use crate::webhook::WebhookAuthorizer;

/// How often histogram samples are folded into buckets, so memory stays bounded however long
/// nobody scrapes `/metrics`.
const METRICS_UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
use envoy_types::ext_authz::v3::pb::AuthorizationServer;

/// How a command that did its job ended; `main` maps it to the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0: served until shut down, the checked request is allowed, the policy is clean,
    /// the server did what a client command asked.
    Success,
    /// Exit 1: `check` answered "not allowed" (a deny or no opinion).
    NotAllowed,
    /// Exit 1: `lint` found problems (already printed).
    LintFailed,
    /// Exit 1: `test` ran every file and a case failed (already reported).
    TestsFailed,
    /// Exit 1: a `diff` gate (`--fail-on-gain`, `--fail-on-loss`) fired (already reported).
    GateFired,
}

impl Outcome {
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::NotAllowed
            | Outcome::LintFailed
            | Outcome::TestsFailed
            | Outcome::GateFired => 1,
        }
    }
}

#[derive(Debug, Error)]
pub enum AppError {
    /// Displayed as one `file:line: message` line per problem.
    #[error("policy rejected:\n{0}")]
    Policy(LoadErrors),
    #[error("{0}")]
    Delta(#[from] crate::engine::delta::DeltaError),
    #[error("{0}")]
    Replay(#[from] crate::replay::ReplayError),
    #[error("cannot listen on `{addr}`: {source}")]
    Listen {
        addr: ListenAddr,
        source: std::io::Error,
    },
    /// `file:line: problem`.
    #[error("bad --token-auth-file: {0}")]
    TokenFile(#[from] TokenFileError),
    #[error(transparent)]
    UnsafeListener(#[from] UnsafeListener),
    #[error("bad TLS files: {0}")]
    Tls(#[from] TlsError),
    #[error("the AuthZEN page token key: {0}")]
    PageTokenKey(#[from] crate::api::http::KeyError),
    #[error(transparent)]
    Audit(#[from] crate::records::audit::AuditError),
    #[error("the decision records: {0}")]
    Records(crate::records::writer::OpenError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error(transparent)]
    Otlp(#[from] crate::telemetry::otlp::OtlpError),
    #[error("background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// etcd mode could not start (unreachable, bad TLS files).
    #[error("{0}")]
    Etcd(#[from] crate::store::etcd::EtcdError),
    /// Another server writes the policy directory, or its lock cannot be taken (exit 1, as
    /// a listen address in use).
    #[error(transparent)]
    Lock(#[from] crate::store::lock::LockError),
    /// A client command failed: `CODE: MESSAGE` from the server or the connection.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A webhook of the chain that cannot be set up (its kubeconfig, its TLS files).
    #[error("{0}")]
    Webhook(#[from] crate::webhook::WebhookError),
    #[error("{0}")]
    Chain(String),
    /// `authzd proxy` could not start (its files, authzd, a listener).
    #[error("proxy: {0}")]
    Proxy(String),
    /// `--object` / `--old-object` / `--changed-path` that a rule needed and could not read.
    #[error("bad content: {0}")]
    Content(crate::engine::content::ContentError),
    /// `test`: files that did not load, or whose policy did not (their other files ran, and
    /// the report is on stdout); one `file:line: problem` line each.
    #[error("{} test file(s) did not load:\n{}", .count, .problems.join("\n"))]
    TestFiles { count: usize, problems: Vec<String> },
    /// The report could not be written (stdout closed).
    #[error("cannot write the report: {0}")]
    Output(std::io::Error),
}

impl AppError {
    /// 2 for bad policy or an unreadable `-f` file (as for usage errors: the input is wrong),
    /// 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Policy(_)
            | AppError::TokenFile(_)
            | AppError::UnsafeListener(_)
            | AppError::Tls(_)
            | AppError::PageTokenKey(_)
            | AppError::Content(_)
            | AppError::TestFiles { .. }
            | AppError::Delta(_)
            | AppError::Replay(_) => 2,
            AppError::Client(error) => error.exit_code(),
            _ => 1,
        }
    }

    /// The line(s) `main` prints on stderr: `error: CODE: MESSAGE` for client commands (as
    /// kubectl and clap do), `authzd: MESSAGE` otherwise.
    pub fn report(&self) -> String {
        match self {
            AppError::Client(error) => format!("error: {error}"),
            other => format!("authzd: {other}"),
        }
    }
}

pub type Result<T, E = AppError> = std::result::Result<T, E>;

/// Runs one command to completion, logging in `log_format`.
pub fn run(settings: Settings, log_format: LogFormat) -> Result<Outcome> {
    // The server and the proxy start their own logging (at info, or what `-v` says): a
    // subscriber set here first would keep the proxy's startup lines at warn.
    if !matches!(settings, Settings::Serve(_) | Settings::Proxy(_)) {
        // Offline and client commands print their answer on stdout; logs are for problems.
        telemetry::init(log_format, "warn", None);
    }
    match settings {
        Settings::Serve(settings) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(AppError::Runtime)?
            .block_on(async {
                // The OTLP exporter needs the runtime, so the server's logging starts here.
                let otlp = telemetry::otlp::exporter(settings.otlp_endpoint.as_deref())?;
                let (layer, _flush_on_exit) = otlp.unzip();
                let exporting = layer.is_some();
                telemetry::init(log_format, "info", layer);
                if exporting {
                    tracing::info!("exporting traces over OTLP");
                }
                serve(settings).await
            }),
        Settings::Check {
            engine,
            request,
            content,
            return_conditions,
        } => {
            let engine = build_engine(&engine)?;
            if return_conditions && content.is_none() {
                use crate::engine::conditional::{returned, Returned};
                let fold = engine.authorize_shared(request.as_borrowed());
                if let Returned::Conditional(conditions) =
                    returned(&fold, request.as_borrowed(), engine.diff())
                {
                    print!("{}", text::conditions(&conditions));
                    return Ok(Outcome::NotAllowed);
                }
            }
            let response = engine
                .authorize_content(request.with_content(content.as_ref()))
                .map_err(AppError::Content)?;
            print!("{}", text::decision(&response));
            Ok(if response.allowed() {
                Outcome::Success
            } else {
                Outcome::NotAllowed
            })
        }
        Settings::WhoCan {
            engine,
            action,
            content,
            return_conditions,
        } => {
            let engine = build_engine(&engine)?;
            let subjects = engine
                .allowed_subjects_content(&action, content.as_ref())
                .map_err(AppError::Content)?;
            print!("{}", text::allowed_subjects(&subjects));
            if return_conditions && content.is_none() {
                for subject in crate::engine::conditional::conditional_subjects(&engine, &action) {
                    let kind = if subject.user { "user" } else { "group" };
                    println!("conditional {kind} {}:", subject.name);
                    print!("{}", text::conditions(&subject.conditions));
                }
            }
            Ok(Outcome::Success)
        }
        Settings::Lint(policy) => Ok(lint(&policy)),
        Settings::Test(settings) => run_tests(&settings),
        Settings::Diff(settings) => run_diff(&settings),
        Settings::Replay(settings) => run_replay(&settings),
        Settings::Client { server, command } => run_client(&server, command),
        Settings::Help(text) => {
            print!("{text}");
            Ok(Outcome::Success)
        }
        Settings::Proxy(settings) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(AppError::Runtime)?
            .block_on(async {
                // klog's -v: 4 and up is where kube-rbac-proxy logs each request.
                let level = if settings.verbosity >= 4 {
                    "debug"
                } else {
                    "info"
                };
                telemetry::init(log_format, level, None);
                crate::proxy::run(*settings, shutdown_signal())
                    .await
                    .map_err(AppError::Proxy)?;
                Ok(Outcome::Success)
            }),
    }
}

/// A client command on a single-threaded runtime: one connection, one call (or stream).
fn run_client(server: &ClientSettings, command: ClientCommand) -> Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AppError::Runtime)?;
    let mut out = std::io::stdout().lock();
    runtime.block_on(client::run(server, command, &mut out))?;
    Ok(Outcome::Success)
}

/// Loads and compiles the policy: the one path for startup, offline commands and (later)
/// reloads.
pub fn build_engine(settings: &EngineSettings) -> Result<Engine> {
    compile_engine(settings).map_err(AppError::Policy)
}

fn compile_engine(settings: &EngineSettings) -> Result<Engine, LoadErrors> {
    let policy = load_paths(&settings.policy.paths, &settings.policy.load)?;
    Ok(Engine::new(&policy, settings.engine.clone()))
}

/// `authzd diff`: both policies loaded (either failing to is exit 2), the delta printed, and
/// the gates checked (exit 1 when one fires, naming it on stderr).
fn run_diff(settings: &crate::config::DiffSettings) -> Result<Outcome> {
    let old_policy = load_paths(&settings.old.policy.paths, &settings.old.policy.load)
        .map_err(AppError::Policy)?;
    let new_policy =
        load_paths(&settings.new_paths, &settings.old.policy.load).map_err(AppError::Policy)?;
    let old_engine = Engine::new(&old_policy, settings.old.engine.clone());
    let new_engine = Engine::new(&new_policy, settings.old.engine.clone());
    let delta =
        crate::engine::delta::access_delta(&old_policy, &new_policy, &old_engine, &new_engine)
            .map_err(AppError::Delta)?;
    // The old policy's ChangeGates judge the change as a server holding it would.
    let gate = crate::engine::gate::check(
        &old_policy.gates,
        &old_policy,
        &new_policy,
        &old_engine,
        &new_engine,
    );
    let written = match settings.output {
        crate::config::DiffOutput::Text => text::delta(&delta, settings.witness),
        crate::config::DiffOutput::Json => {
            let mut json = text::delta_json(&delta, settings.witness).to_string();
            json.push('\n');
            json
        }
    };
    let mut fired = Vec::new();
    for (gates, gain) in [
        (&settings.fail_on_gain, true),
        (&settings.fail_on_loss, false),
    ] {
        for gate in gates {
            for row in &delta.rows {
                let subjects = if gain { &row.gains } else { &row.losses };
                for name in subjects.matching(gate) {
                    let what = if gain { "gains" } else { "loses" };
                    fired.push(format!(
                        "--fail-on-{} {gate}: {name} {what} {}",
                        if gain { "gain" } else { "loss" },
                        text::delta_action(&row.action)
                    ));
                }
            }
        }
    }
    if let Err(refusal) = gate {
        fired.push(refusal.to_string());
    }
    report_and_gate(&written, &fired)
}

/// A report command's end (`diff`, `replay`): `written` to stdout, each gate that `fired` named
/// on stderr, and exit 1 when any did.
fn report_and_gate(written: &str, fired: &[String]) -> Result<Outcome> {
    use std::io::Write;

    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(written.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(AppError::Output)?;
    for line in fired {
        eprintln!("authzd: {line}");
    }
    Ok(if fired.is_empty() {
        Outcome::Success
    } else {
        Outcome::GateFired
    })
}

/// `authzd replay`: the candidate (and, with --policy, the old) policy compiled as `check`
/// compiles it, the records streamed through them, the report printed, the gates checked
/// (exit 1 when one fires, naming it on stderr).
fn run_replay(settings: &crate::config::ReplaySettings) -> Result<Outcome> {
    let load = &settings.engine.policy.load;
    let new_policy = load_paths(&settings.new_paths, load).map_err(AppError::Policy)?;
    let new_engine = Engine::new(&new_policy, settings.engine.engine.clone());
    let old_engine = if settings.old_policy {
        Some(build_engine(&settings.engine)?)
    } else {
        None
    };
    let replayed = crate::replay::replay(&settings.records, &new_engine, old_engine.as_ref())?;
    let written = match settings.output {
        crate::config::DiffOutput::Text => crate::replay::report::text(&replayed),
        crate::config::DiffOutput::Json => {
            let mut json = crate::replay::report::json(&replayed).to_string();
            json.push('\n');
            json
        }
    };
    let fired = crate::replay::report::fired_gates(
        &replayed,
        &settings.fail_on_gain,
        &settings.fail_on_loss,
    );
    report_and_gate(&written, &fired)
}

/// `authzd test`: every file is run (against engines built as `check` builds its own), the
/// report goes to stdout, and the files that did not load to stderr (exit 2).
fn run_tests(settings: &TestSettings) -> Result<Outcome> {
    use std::io::Write;

    use crate::policy_test::report;

    let gate = gate_against(settings)?;
    let outcomes = crate::policy_test::run::run_files(settings, compile_engine);
    let written = match settings.output {
        TestOutput::Text => report::text(&outcomes),
        TestOutput::Junit => report::junit(&outcomes),
    };
    if let Some(Err(refusal)) = &gate {
        eprintln!("authzd: {refusal}");
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(written.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(AppError::Output)?;
    let problems: Vec<String> = outcomes
        .iter()
        .filter_map(|outcome| outcome.result.as_ref().err())
        .flatten()
        .map(ToString::to_string)
        .collect();
    let totals = report::Totals::of(&outcomes);
    if totals.not_loaded > 0 {
        return Err(AppError::TestFiles {
            count: totals.not_loaded,
            problems,
        });
    }
    Ok(if totals.failed > 0 || matches!(gate, Some(Err(_))) {
        Outcome::TestsFailed
    } else {
        Outcome::Success
    })
}

/// `authzd test --gate-against OLD --policy NEW`: the change from OLD to NEW checked against
/// OLD's ChangeGates on engines of the chain the tests use (`None` without the flag). Either
/// policy failing to load is exit 2.
fn gate_against(
    settings: &TestSettings,
) -> Result<Option<Result<(), crate::engine::gate::GateError>>> {
    if settings.gate_against.is_empty() {
        return Ok(None);
    }
    let old = load_paths(&settings.gate_against, &settings.load).map_err(AppError::Policy)?;
    let new = load_paths(&settings.policy, &settings.load).map_err(AppError::Policy)?;
    // The chain a test file naming none runs on: the flags, else `authzd test`'s defaults.
    let config = crate::policy_test::run::engine_settings(settings, &Default::default()).engine;
    let (old_engine, new_engine) = (Engine::new(&old, config.clone()), Engine::new(&new, config));
    Ok(Some(crate::engine::gate::check(
        &old.gates,
        &old,
        &new,
        &old_engine,
        &new_engine,
    )))
}

fn lint(settings: &PolicySettings) -> Outcome {
    let paths = settings
        .paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match load_paths_reporting(&settings.paths, &settings.load) {
        Ok(crate::policy::load::Loaded { policy, skipped }) => {
            // Likely typos in content clauses load fine and match nothing: say so.
            for role in &policy.roles {
                for (index, rule) in role.rules.iter().enumerate() {
                    let Some(clauses) = &rule.clauses else {
                        continue;
                    };
                    for warning in clauses.warnings(&rule.verbs) {
                        println!(
                            "warning: {}: {} rule {index}: {warning}",
                            role.source,
                            role.describe()
                        );
                    }
                }
            }
            // Information, not a problem: a Helm chart's or GitOps repository's other objects.
            if !skipped.is_empty() {
                println!("note: {skipped}");
            }
            println!(
                "ok: {paths}: {} roles, {} bindings, {} ABAC rules",
                policy.roles.len(),
                policy.bindings.len(),
                policy.abac.len()
            );
            Outcome::Success
        }
        Err(errors) => {
            println!("{errors}");
            println!("{} problem(s) in {paths}", errors.0.len());
            Outcome::LintFailed
        }
    }
}

/// Every name health reports on: the whole server (`""`) and each authz service.
const HEALTH_SERVICES: [&str; 5] = [
    "",
    <AuthorizerServer<GrpcApi> as NamedService>::NAME,
    <AccessReviewServer<GrpcApi> as NamedService>::NAME,
    <PolicyAdminServer<AdminApi> as NamedService>::NAME,
    <AuthorizationServer<EnvoyApi> as NamedService>::NAME,
];

async fn set_health(reporter: &HealthReporter, status: ServingStatus) {
    for name in HEALTH_SERVICES {
        reporter.set_service_status(name, status).await;
    }
}

/// The caller authentication for `settings` (docs/security.md §1): tokens if configured, the local identity
/// only where [`listener_access`] allows it (loopback and Unix-socket listeners are local).
/// Refuses an unauthenticated remote listener. With it, who may read `/metrics`: with
/// authentication configured, callers the policy allows it; without, every caller, each of
/// whom is the local identity anyway.
fn authenticator(settings: &ServeSettings) -> Result<(AuthChain, MetricsAccess)> {
    let tokens = settings
        .auth
        .token_auth_file
        .as_deref()
        .map(TokenFile::load)
        .transpose()?;
    if let (Some(tokens), Some(path)) = (&tokens, &settings.auth.token_auth_file) {
        tracing::info!(tokens = tokens.len(), file = %path.display(), "bearer tokens loaded");
    }
    // Listeners anyone beyond this machine's operator can reach: a TCP address other than
    // loopback, or a Unix socket whose mode lets every local user connect.
    let remote = settings
        .listen
        .iter()
        .filter_map(|addr| match addr {
            ListenAddr::Tcp(socket) => (!socket.ip().is_loopback()).then(|| addr.to_string()),
            ListenAddr::Unix(_) => settings.unix_socket_mode.lets_any_user_connect().then(|| {
                format!(
                    "{addr} (--unix-socket-mode {} lets every local user connect)",
                    settings.unix_socket_mode
                )
            }),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let access = listener_access(
        &remote,
        remote.is_empty(),
        tokens.is_some() || settings.auth.client_ca_file.is_some(),
        settings.auth.insecure_allow_unauthenticated_remote,
        &settings.local_identity.name,
    )?;
    let local = LocalIdentity::new(
        settings.local_identity.name.clone(),
        settings.local_identity.groups.clone(),
    );
    let local = match access {
        LocalAccess::Allowed => Some(local),
        LocalAccess::AllowedInsecurely => {
            let warning = format!(
                "WARNING: {INSECURE_REMOTE_FLAG}: {} accepts unauthenticated callers from the network, each acting as `{}`",
                remote, settings.local_identity.name
            );
            eprintln!("authzd: {warning}");
            tracing::warn!("{warning}");
            Some(local)
        }
        LocalAccess::Refused => None,
    };
    let metrics = match access {
        LocalAccess::Refused => MetricsAccess::Authorized,
        LocalAccess::Allowed | LocalAccess::AllowedInsecurely => MetricsAccess::Open,
    };
    Ok((AuthChain::new(tokens, local), metrics))
}

/// The TLS configuration of `--tls-cert-file` / `--tls-private-key-file` / `--client-ca-file`
/// (clap enforces that they come together).
fn tls_server(settings: &ServeSettings) -> Result<Option<Arc<TlsServer>>> {
    let auth = &settings.auth;
    let (Some(cert), Some(key)) = (&auth.tls_cert_file, &auth.tls_private_key_file) else {
        return Ok(None);
    };
    let server = TlsServer::load(TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: auth.client_ca_file.clone(),
    })?;
    tracing::info!(files = ?server.files(), "TLS enabled on TCP listeners");
    Ok(Some(Arc::new(server)))
}

/// Binds, starts serving (health `NOT_SERVING`), compiles the policy, publishes it as
/// revision 1 and turns health `SERVING`. A policy that does not load stops the server.
/// The chain's webhooks, each set up now so a bad kubeconfig stops startup.
fn delegation(settings: &ServeSettings) -> Result<Delegation> {
    let mut remotes: Vec<Arc<dyn RemoteAuthorizer>> = Vec::new();
    for webhook in &settings.webhooks {
        remotes.push(Arc::new(WebhookAuthorizer::new(webhook.clone())?));
    }
    // Config builds one webhook per `Webhook(n)` of the chain, so this always holds.
    Delegation::new(settings.engine.engine.modes.clone(), remotes)
        .ok_or_else(|| AppError::Chain("the chain names a webhook that is not configured".into()))
}

/// The webhook client as a remote authorizer of the chain.
impl RemoteAuthorizer for WebhookAuthorizer {
    fn name(&self) -> &str {
        WebhookAuthorizer::name(self)
    }

    fn authorize<'a>(
        &'a self,
        request: &'a crate::request::Request,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = RemoteAnswer> + Send + 'a>> {
        Box::pin(async move {
            let answer = WebhookAuthorizer::authorize(self, request).await;
            RemoteAnswer {
                decision: answer.decision,
                reason: answer.reason,
                error: answer.error,
                cached: answer.cached,
            }
        })
    }
}

async fn serve(settings: ServeSettings) -> Result<Outcome> {
    // Before binding: a listener that may not serve as configured never opens.
    let (identity, metrics_access) = authenticator(&settings)?;
    let identity: Arc<dyn Authenticator> = Arc::new(identity);
    let tls = tls_server(&settings)?;
    // One writer per policy directory: decided before anything is bound, served or read, so
    // that a refused second writer touches nothing (binding a Unix socket replaces the file
    // at its path, which may be the writer's). Held until `serve` returns.
    let access = if settings.etcd.is_none() && !settings.embedded_policy {
        let listen = settings.listen.iter().map(ToString::to_string).collect();
        Some(crate::store::lock::claim(
            &settings.engine.policy.paths,
            settings.read_only,
            listen,
        )?)
    } else {
        None
    };
    let mut listeners = Vec::with_capacity(settings.listen.len());
    for addr in &settings.listen {
        let listener = Listener::bind(addr, settings.unix_socket_mode)
            .await
            .map_err(|source| AppError::Listen {
                addr: addr.clone(),
                source,
            })?;
        listeners.push(listener.with_tls(tls.clone()));
    }
    let https = tls.is_some();
    // The lock records where this server listens, port 0 resolved, once bound.
    if let Some(access) = &access {
        let listen = listeners
            .iter()
            .map(|listener| listener.local_addr().to_string())
            .collect();
        if let Err(error) = access.record_listeners(listen) {
            // The lock is held all the same; only a refused writer's message is poorer.
            tracing::warn!(%error, "cannot record the listen addresses in the policy directory's lock file");
        }
    }
    let _tls_reloader = tls.map(TlsServer::spawn_reloader);

    let state = Arc::new(
        ServingState::new(settings.engine.engine.clone(), settings.cache.clone())
            .with_max_revision_wait(settings.max_revision_wait)
            .with_subscribers(settings.max_staleness, settings.limits.max_subscribers),
    );
    if !settings.webhooks.is_empty() {
        state.set_delegation(Arc::new(delegation(&settings)?));
    }
    let _metrics_upkeep = state.metrics().spawn_upkeep(METRICS_UPKEEP_EVERY);
    let request_telemetry = RequestTelemetryLayer::new(
        Arc::clone(state.metrics()),
        &settings.webhook_path,
        telemetry::otlp::configured(settings.otlp_endpoint.as_deref()),
    );
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::NotServing).await;

    // One set of counts for the decision records, wherever they are written.
    let record_counts = Arc::new(RecordCounts::default());
    let audit_log = match &settings.audit {
        Some(audit) => Some(AuditLog::open(
            &audit.path,
            audit.queue,
            Arc::clone(&record_counts),
        )?),
        None => None,
    };
    let records_writer = match &settings.records {
        Some(records) => {
            let queue = match (&records.sink, &audit_log) {
                (RecordSink::File(destination), _) => {
                    let (queue, writer) = LineWriter::start(
                        "decision-records",
                        destination.clone(),
                        records.queue,
                        Arc::clone(&record_counts),
                    )
                    .map_err(AppError::Records)?;
                    Some((queue, Some(writer)))
                }
                (RecordSink::Audit, Some((log, _))) => Some((log.queue(), None)),
                // Refused by the settings: `audit` needs --audit-log.
                (RecordSink::Audit, None) => None,
            };
            queue.map(|(queue, writer)| {
                state.set_records(Arc::new(DecisionRecorder::new(
                    queue,
                    Arc::clone(&record_counts),
                )));
                writer
            })
        }
        None => None,
    }
    .flatten();
    let audit_writer = audit_log.map(|(log, writer)| {
        state.set_audit(log);
        writer
    });
    let audit_writer = Writers {
        audit: audit_writer,
        records: records_writer,
    };
    let envoy = EnvoyApi::new(
        Arc::clone(&state),
        Arc::clone(&identity),
        settings.envoy.clone(),
    )
    .with_content_limits(settings.limits.content)
    .service(MAX_REQUEST_BYTES);
    let (draining, draining_rx) = tokio::sync::watch::channel(false);
    let grpc_api = GrpcApi::new(Arc::clone(&state), Arc::clone(&identity))
        .with_content_limits(settings.limits.content)
        .with_draining(draining_rx.clone());
    let (authorizer, access_review) = grpc_api.clone().services(MAX_REQUEST_BYTES);
    let store_cell: StoreCell = Arc::default();
    let authzen = AuthzenConfig {
        base_url: settings.authzen.authzen_base_url.clone(),
        page_tokens: match &settings.authzen.authzen_page_token_key_file {
            Some(path) => PageTokenKey::from_file(path)?,
            None => PageTokenKey::random()?,
        },
    };
    let http_api = HttpApi::new(
        grpc_api,
        Arc::clone(&state),
        draining_rx.clone(),
        &settings.webhook_path,
        authzen,
    )
    .with_conditional_authorization(settings.conditional_authorization)
    .with_https(https);
    let replication_cell: crate::serving::ReplicationCell = Arc::default();
    let http_api = http_api.with_metrics(MetricsEndpoint::new(
        metrics_exposition(&state, &store_cell, &replication_cell),
        metrics_access,
    ));
    let admin = AdminApi::new(
        Arc::clone(&store_cell),
        Arc::clone(&state),
        identity,
        settings.engine.policy.load.clone(),
        draining_rx,
    )
    .with_replication(Arc::clone(&replication_cell))
    .with_max_watches(settings.limits.max_watches)
    .service(MAX_REQUEST_BYTES);
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(crate::proto::ENVOY_FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    let (stop, mut stopped) = tokio::sync::watch::channel(());
    let shutdown_health = health.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {
                tracing::info!("shutting down");
                set_health(&shutdown_health, ServingStatus::NotServing).await;
                // Long-lived watch streams end; in-flight unary requests finish.
                let _ = draining.send(true);
            }
            _ = stopped.changed() => {}
        }
    };
    // gRPC and HTTP share one router and so every listener and port.
    let limits = &settings.limits;
    let router = tonic::service::Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(access_review)
        .add_service(admin)
        .add_service(envoy)
        .into_axum_router();
    // The layers wrap the router once, as one service: `Router::layer` would wrap every route
    // in its own boxed service, a clone and an allocation per layer on every request.
    let service = tower::ServiceBuilder::new()
        // What an overloaded server refuses is still counted and timed...
        .layer(request_telemetry)
        // ...but it refuses before doing anything else.
        .layer(ShedLayer::new(
            limits.max_concurrent_requests,
            limits.request_timeout,
        ))
        .map_response(crate::api::error::caller_faults_get_their_codes)
        .service(crate::api::dispatch::ServiceFirst::new(
            authorizer,
            crate::api::http::router(router, http_api),
        ));
    for listener in &listeners {
        let addr = listener.local_addr();
        eprintln!("authzd listening on {addr}");
        tracing::info!(%addr, "listening");
    }
    let connection_limits = transport::ConnectionLimits {
        http2_max_concurrent_streams: limits.http2_max_concurrent_streams,
        http2_max_header_list_size: limits.http2_max_header_list_size,
        http2_keepalive_interval: limits.http2_keepalive_interval,
        http2_keepalive_timeout: limits.http2_keepalive_timeout,
        tcp_keepalive: limits.tcp_keepalive,
        max_connection_age: limits.max_connection_age,
        max_connections: limits.max_connections,
        http1_only: false,
    };
    let server = tokio::spawn(transport::serve(
        listeners,
        service,
        connection_limits,
        shutdown,
    ));

    // etcd mode: list, publish at etcd's revision, then apply etcd's watch (no directory).
    if let Some(mut etcd) = settings.etcd.clone() {
        let publisher: Arc<dyn Publisher> = Arc::clone(&state) as Arc<dyn Publisher>;
        // ABAC lines are not kept in etcd: each replica reads them from its file, once.
        if let Some(file) = &etcd.abac_file {
            match load_paths(std::slice::from_ref(file), &settings.engine.policy.load) {
                Ok(policy) => etcd.replication.abac = policy.abac,
                Err(errors) => {
                    let _ = stop.send(());
                    server.await?;
                    return Err(AppError::Policy(errors));
                }
            }
        }
        // Unreadable TLS files fail at once; an etcd that does not answer yet is waited for
        // (health NOT_SERVING meanwhile): replicas may start before their etcd does.
        if let Err(error) = crate::store::etcd::EtcdClient::new(etcd.client.clone()) {
            let _ = stop.send(());
            server.await?;
            return Err(AppError::Etcd(error));
        }
        let start = async {
            let mut backoff = std::time::Duration::from_millis(100);
            loop {
                let started = async {
                    let client = crate::store::etcd::EtcdClient::new(etcd.client.clone())?;
                    crate::store::etcd::Replication::start(
                        client,
                        &etcd.prefix,
                        settings.engine.policy.load.clone(),
                        etcd.replication.clone(),
                        Arc::clone(&publisher),
                    )
                    .await
                }
                .await;
                match started {
                    Ok(replication) => break replication,
                    Err(error) => {
                        tracing::warn!(%error, "etcd: cannot load the policy yet; retrying");
                        eprintln!("authzd: waiting for etcd: {error}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
                    }
                }
            }
        };
        let mut server = server;
        let replication = tokio::select! {
            replication = start => replication,
            // Shut down (a signal) before etcd answered.
            ended = &mut server => {
                ended?;
                return Ok(Outcome::Success);
            }
        };
        state.set_freshness(Arc::clone(&replication.freshness));
        let _ = store_cell.set(Arc::clone(&replication.store));
        let _ = replication_cell.set(Arc::clone(&replication));
        set_health(&health, ServingStatus::Serving).await;
        // gRPC health follows the fence: NOT_SERVING while this replica cannot prove itself
        // current, so load balancers route around it.
        let fence_watch = {
            let (health, freshness) = (health.clone(), Arc::clone(&replication.freshness));
            tokio::spawn(async move {
                let mut serving = true;
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    let fresh = !freshness.fenced();
                    if fresh != serving {
                        serving = fresh;
                        let status = if fresh {
                            ServingStatus::Serving
                        } else {
                            ServingStatus::NotServing
                        };
                        set_health(&health, status).await;
                    }
                }
            })
        };
        let revision = replication.store.revision();
        crate::store::served::log_startup(
            &crate::store::served::Source::Etcd {
                prefix: etcd.prefix.clone(),
                replica: replication.id().to_string(),
            },
            &replication.store.policy(),
            revision,
            replication.store.read_only(),
        );
        server.await?;
        fence_watch.abort();
        replication.leave().await;
        let closing = Arc::clone(&state);
        tokio::task::spawn_blocking(move || audit_writer.finish(&closing)).await?;
        tracing::info!("stopped");
        return Ok(Outcome::Success);
    }

    // Startup goes through the store like every later change: read, compile, publish rev 1.
    let policy = settings.engine.policy.clone();
    let publisher: Arc<dyn Publisher> = Arc::clone(&state) as Arc<dyn Publisher>;
    let (source, read_only) = match &access {
        Some(access) => (
            crate::store::served::Source::Directory(policy.paths.clone()),
            access.read_only().map(str::to_string),
        ),
        None => (crate::store::served::Source::Embedded, None),
    };
    let embedded = settings.embedded_policy;
    let opened = tokio::task::spawn_blocking(move || {
        if embedded {
            let example = crate::store::embedded::load(&policy.load)?;
            let backend = Arc::new(crate::store::embedded::EmbeddedBackend);
            return Ok(Store::open(backend, example, 1, publisher));
        }
        let backend = DirectoryBackend::with_read_only(policy.paths, policy.load, read_only);
        Store::open_directory(backend, publisher)
    })
    .await?;
    let _reloader = match opened {
        Ok(store) => {
            let _ = store_cell.set(Arc::clone(&store));
            let watched: &[std::path::PathBuf] = if settings.watch {
                &settings.engine.policy.paths
            } else {
                &[]
            };
            let reloader = watch::spawn(Arc::clone(&store), watched, watch::DEFAULT_DEBOUNCE);
            set_health(&health, ServingStatus::Serving).await;
            crate::store::served::log_startup(
                &source,
                &store.policy(),
                store.revision(),
                store.read_only(),
            );
            reloader
        }
        Err(errors) => {
            let _ = stop.send(());
            server.await?;
            return Err(AppError::Policy(errors));
        }
    };
    server.await?;
    // The services are gone: nothing more is recorded, and the writers drain and stop.
    let closing = Arc::clone(&state);
    tokio::task::spawn_blocking(move || audit_writer.finish(&closing)).await?;
    tracing::info!("stopped");
    Ok(Outcome::Success)
}

/// The log writers of `serve`, finished (drained) at shutdown once the services are gone.
struct Writers {
    audit: Option<LineWriter>,
    records: Option<LineWriter>,
}

impl Writers {
    /// The decision records' last gap queued, then every writer drained and stopped.
    fn finish(self, state: &ServingState) {
        state.close_records();
        for writer in [self.records, self.audit].into_iter().flatten() {
            writer.finish();
        }
    }
}

/// The `/metrics` page: Prometheus text, with the figures the state, store and (etcd mode)
/// replication keep read now.
fn metrics_exposition(
    state: &Arc<ServingState>,
    store: &StoreCell,
    replication: &crate::serving::ReplicationCell,
) -> impl Fn() -> String + Send + Sync + 'static {
    let state = Arc::clone(state);
    let store = Arc::clone(store);
    let replication = Arc::clone(replication);
    move || {
        let mut figures = state.scrape_figures();
        figures.reload_errors = store.get().map_or(0, |store| store.reload_errors());
        figures.store = crate::serving::store_figures(&replication);
        state.metrics().render(&figures)
    }
}

/// SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
