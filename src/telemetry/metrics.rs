//! Prometheus metrics.
//!
//! Every instrument the request path touches is registered once, at startup, into fixed
//! tables indexed by small enums, so recording a decision or a request indexes an array: no key
//! hashing, no label formatting. Figures the server already
//! keeps (cache counters, the revision, reload errors) are not duplicated: [`Metrics::render`]
//! copies them into the exposition at scrape time.
//!
//! The counts the request path bumps (decisions, requests, requests in flight) are kept the
//! same way, in striped counters ([`crate::counter::Counter`]) that [`Metrics::render`] copies
//! out: an exporter counter or gauge update is two atomic read-modify-writes on lines every
//! worker writes (the value and its generation; a gauge's float takes a compare-exchange loop),
//! five times per request. Only the latency histogram records through the exporter.
//!
//! The recorder is owned, not installed globally, so several servers in one process (tests)
//! keep separate figures.
//!
//! The subscriber table of the invalidation stream ([`SubscriberTableFigures`]) is exported as
//! aggregates, not one series per subscriber: a subscriber's id is its caller's to choose, and
//! `Status` lists them one by one.
//!
//! Where the policy lives ([`StoreFigures`]) is exported too: `authzd_store_info` in either
//! mode, and in etcd mode this replica's freshness, fenced state and the size of the replica
//! table. Those gauges are registered on the first etcd-mode scrape, so a directory-mode
//! exposition does not carry etcd series stuck at 0.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::formatting::{write_help_line, write_type_line};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::counter::Counter as Tally;
use crate::engine::Decision;

/// Latency buckets in seconds: a cached decision takes microseconds, a `min_revision` wait or a
/// large who-can answer can take seconds.
const LATENCY_BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

static METADATA: Metadata<'static> = Metadata::new("authzd", Level::INFO, Some(module_path!()));

/// The APIs that answer with a decision, for `authzd_decisions_total{api}`. The HTTP paths
/// that translate to one of these count as it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionApi {
    Authorize,
    BatchAuthorize,
    SubjectAccessReview,
    PersonalSubjectAccessReview,
    LocalSubjectAccessReview,
    EnvoyCheck,
    /// AuthZEN's Access Evaluation API (`POST /access/v1/evaluation`).
    AuthzenEvaluation,
    /// AuthZEN's Access Evaluations API (`POST /access/v1/evaluations`), each item.
    AuthzenEvaluations,
}

impl DecisionApi {
    const ALL: [DecisionApi; 8] = [
        DecisionApi::Authorize,
        DecisionApi::BatchAuthorize,
        DecisionApi::SubjectAccessReview,
        DecisionApi::PersonalSubjectAccessReview,
        DecisionApi::LocalSubjectAccessReview,
        DecisionApi::EnvoyCheck,
        DecisionApi::AuthzenEvaluation,
        DecisionApi::AuthzenEvaluations,
    ];

    /// The RPC's name as the audit log and the proto spell it.
    pub fn rpc(self) -> &'static str {
        match self {
            DecisionApi::Authorize => "Authorize",
            DecisionApi::BatchAuthorize => "BatchAuthorize",
            DecisionApi::SubjectAccessReview => "SubjectAccessReview",
            DecisionApi::PersonalSubjectAccessReview => "PersonalSubjectAccessReview",
            DecisionApi::LocalSubjectAccessReview => "LocalSubjectAccessReview",
            DecisionApi::EnvoyCheck => "Check",
            DecisionApi::AuthzenEvaluation => "AuthzenEvaluation",
            DecisionApi::AuthzenEvaluations => "AuthzenEvaluations",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            DecisionApi::Authorize => "authorize",
            DecisionApi::BatchAuthorize => "batch_authorize",
            DecisionApi::SubjectAccessReview => "subject_access_review",
            DecisionApi::PersonalSubjectAccessReview => "personal_subject_access_review",
            DecisionApi::LocalSubjectAccessReview => "local_subject_access_review",
            DecisionApi::EnvoyCheck => "envoy_check",
            DecisionApi::AuthzenEvaluation => "authzen_evaluation",
            DecisionApi::AuthzenEvaluations => "authzen_evaluations",
        }
    }
}

const DECISIONS: [Decision; 3] = [Decision::Allow, Decision::Deny, Decision::NoOpinion];

/// `allow`, `deny`, `no_opinion`: the decision as metrics labels and span fields spell it.
pub fn decision_label(decision: Decision) -> &'static str {
    match decision {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::NoOpinion => "no_opinion",
    }
}

/// Decisions counted locally, for [`Metrics::tally`].
#[derive(Debug, Default)]
pub struct DecisionTally([u64; 3]);

impl DecisionTally {
    pub fn add(&mut self, decision: Decision) {
        self.0[decision_index(decision)] += 1;
    }
}

fn decision_index(decision: Decision) -> usize {
    match decision {
        Decision::Allow => 0,
        Decision::Deny => 1,
        Decision::NoOpinion => 2,
    }
}

/// Every route a request can take, for the per-route latency histogram and request counter.
/// A fixed set: a hostile client sending random paths adds to `other`, never a new series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Authorize,
    BatchAuthorize,
    SubjectAccessReview,
    PersonalSubjectAccessReview,
    LocalSubjectAccessReview,
    ResourceAccessReview,
    LocalResourceAccessReview,
    SubjectRulesReview,
    SelfSubjectRulesReview,
    SelfSubjectReview,
    GetAllowedSubjects,
    PolicyAdmin,
    EnvoyCheck,
    Health,
    Reflection,
    Webhook,
    HttpReview,
    /// Kubernetes API discovery (`/api`, `/apis`, …), for kubectl.
    Discovery,
    HttpProbe,
    Metrics,
    /// The AuthZEN API (`/access/v1/...`, its metadata; docs/authzen.md).
    Authzen,
    Other,
}

impl Route {
    const ALL: [Route; 22] = [
        Route::Authorize,
        Route::BatchAuthorize,
        Route::SubjectAccessReview,
        Route::PersonalSubjectAccessReview,
        Route::LocalSubjectAccessReview,
        Route::ResourceAccessReview,
        Route::LocalResourceAccessReview,
        Route::SubjectRulesReview,
        Route::SelfSubjectRulesReview,
        Route::SelfSubjectReview,
        Route::GetAllowedSubjects,
        Route::PolicyAdmin,
        Route::EnvoyCheck,
        Route::Health,
        Route::Reflection,
        Route::Webhook,
        Route::HttpReview,
        Route::Discovery,
        Route::HttpProbe,
        Route::Metrics,
        Route::Authzen,
        Route::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Route::Authorize => "authorize",
            Route::BatchAuthorize => "batch_authorize",
            Route::SubjectAccessReview => "subject_access_review",
            Route::PersonalSubjectAccessReview => "personal_subject_access_review",
            Route::LocalSubjectAccessReview => "local_subject_access_review",
            Route::ResourceAccessReview => "resource_access_review",
            Route::LocalResourceAccessReview => "local_resource_access_review",
            Route::SubjectRulesReview => "subject_rules_review",
            Route::SelfSubjectRulesReview => "self_subject_rules_review",
            Route::SelfSubjectReview => "self_subject_review",
            Route::GetAllowedSubjects => "get_allowed_subjects",
            Route::PolicyAdmin => "policy_admin",
            Route::EnvoyCheck => "envoy_check",
            Route::Health => "health",
            Route::Reflection => "reflection",
            Route::Webhook => "webhook",
            Route::HttpReview => "http_review",
            Route::Discovery => "discovery",
            Route::HttpProbe => "http_probe",
            Route::Metrics => "metrics",
            Route::Authzen => "authzen",
            Route::Other => "other",
        }
    }

    /// The route of a request path. `webhook_path` is the configured `--webhook-path`.
    pub fn of_path(path: &str, webhook_path: &str) -> Route {
        if let Some(method) = path.strip_prefix("/authz.v1.Authorizer/") {
            return match method {
                "Authorize" => Route::Authorize,
                "BatchAuthorize" => Route::BatchAuthorize,
                "GetAllowedSubjects" => Route::GetAllowedSubjects,
                _ => Route::Other,
            };
        }
        if let Some(method) = path.strip_prefix("/authz.v1.AccessReview/") {
            return match method {
                "SubjectAccessReview" => Route::SubjectAccessReview,
                "PersonalSubjectAccessReview" => Route::PersonalSubjectAccessReview,
                "LocalSubjectAccessReview" => Route::LocalSubjectAccessReview,
                "ResourceAccessReview" => Route::ResourceAccessReview,
                "LocalResourceAccessReview" => Route::LocalResourceAccessReview,
                "SubjectRulesReview" => Route::SubjectRulesReview,
                "SelfSubjectRulesReview" => Route::SelfSubjectRulesReview,
                "SelfSubjectReview" => Route::SelfSubjectReview,
                _ => Route::Other,
            };
        }
        if path.starts_with("/authz.v1.PolicyAdmin/") {
            return Route::PolicyAdmin;
        }
        if path == "/envoy.service.auth.v3.Authorization/Check" {
            return Route::EnvoyCheck;
        }
        if path.starts_with("/grpc.health.v1.Health/") {
            return Route::Health;
        }
        if path.starts_with("/grpc.reflection.") {
            return Route::Reflection;
        }
        if path == webhook_path {
            return Route::Webhook;
        }
        // Reviews are POSTed to a collection named `…reviews` (`…Reviews` on seed 000's
        // paths); everything else under `/api` and `/apis` is discovery.
        let last = path.rsplit('/').next().unwrap_or("");
        let kubernetes_api = path == "/api"
            || path == "/apis"
            || path.starts_with("/api/")
            || path.starts_with("/apis/");
        if kubernetes_api {
            let review = (path.starts_with("/apis/authorization.")
                || path.starts_with("/apis/authentication."))
                && (last.ends_with("reviews") || last.ends_with("Reviews"));
            return if review {
                Route::HttpReview
            } else {
                Route::Discovery
            };
        }
        if path.starts_with("/access/v1/") || path == "/.well-known/authzen-configuration" {
            return Route::Authzen;
        }
        match path {
            "/healthz" | "/readyz" | "/livez" => Route::HttpProbe,
            "/metrics" => Route::Metrics,
            _ => Route::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where the policy lives, as `Status` and `/metrics` show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum StoreFigures {
    /// A policy directory (the default).
    #[default]
    Directory,
    /// etcd mode: this replica's part in the replication.
    Etcd(EtcdFigures),
}

/// One etcd-mode replica as it sees itself and the others.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EtcdFigures {
    /// `--replica-id`.
    pub replica_id: String,
    /// The etcd endpoint this replica talks to now (it changes on failover).
    pub endpoint: String,
    /// How old this replica's last freshness proof is; `None` before the first.
    pub freshness_age: Option<Duration>,
    /// Whether allows are refused (or denied, per `--on-stale`) for want of a recent proof.
    pub fenced: bool,
    /// The replica table: every registered replica and the revision it reported applied.
    pub replicas: BTreeMap<String, u64>,
    /// etcd's head revision as the latest freshness proof read it (0 before the first).
    pub head_revision: u64,
}

impl EtcdFigures {
    /// The freshness age in seconds, -1 before the first proof (as `Status` reports it).
    pub fn freshness_age_seconds(&self) -> f64 {
        self.freshness_age.map_or(-1.0, |age| age.as_secs_f64())
    }
}

/// The callers' caches subscribed to the invalidation stream (`serving::subscribers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscriberTableFigures {
    /// In the table: connected, or closed with a proof that may still be in use.
    pub listed: u64,
    pub connected: u64,
    /// Connected and below the policy revision in force.
    pub behind: u64,
    /// The policy revision in force less the lowest revision a connected subscriber applied
    /// (etcd mode: etcd revisions, several to one change).
    pub max_lag_revisions: u64,
    /// Connected without a proof in force as this server recorded it (never sent a heartbeat,
    /// or not for `--max-staleness`): answering nothing from memory.
    pub without_proof: u64,
    /// Confirmations that advanced a subscriber's applied revision, since startup.
    pub confirmations: u64,
    /// Acknowledgements that counted a subscriber fenced, once per subscriber and revision.
    pub fenced: u64,
}

/// Figures read at scrape time from where the server already keeps them.
#[derive(Clone, Debug, Default)]
pub struct ScrapeFigures {
    pub revision: u64,
    pub reload_errors: u64,
    pub cache_entries: u64,
    pub cache_capacity: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub cache_invalidations: u64,
    pub cache_stale_inserts_refused: u64,
    pub subscribers: SubscriberTableFigures,
    /// Decision records (`--decision-records`; all zero without).
    pub records: DecisionRecordFigures,
    /// The audit log (`--audit-log`; all zero without).
    pub audit: AuditLogFigures,
    pub store: StoreFigures,
}

/// Audit log entries written and dropped per reason (`authzd_audit_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditLogFigures {
    pub written: u64,
    pub dropped_queue_full: u64,
    pub dropped_write_failed: u64,
}

/// Decision records taken, written and dropped per reason (`authzd_decision_records_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionRecordFigures {
    pub taken: u64,
    pub written: u64,
    pub dropped_queue_full: u64,
    pub dropped_write_failed: u64,
}

/// etcd mode's gauges (see the module docs for why they are registered late).
struct StoreInstruments {
    fenced: Gauge,
    freshness_age_seconds: Gauge,
    replicas: Gauge,
    head_revision: Gauge,
}

/// The info-style series naming the store. Its labels change (the endpoint, on failover), and
/// an exporter series, once registered, stays: so it is written at scrape time, one current
/// line, with the exporter's own HELP/TYPE formatting and label escaping.
const STORE_INFO: &str = "authzd_store_info";
const STORE_INFO_HELP: &str = "Where the policy lives (store: directory or etcd; in etcd mode this replica's id and the etcd endpoint it talks to now); always 1.";

struct ScrapeInstruments {
    revision: Gauge,
    reload_errors: Counter,
    cache_entries: Gauge,
    cache_capacity: Gauge,
    cache_hits: Counter,
    cache_misses: Counter,
    cache_evictions: Counter,
    cache_invalidations: Counter,
    cache_stale_inserts_refused: Counter,
    subscribers_listed: Gauge,
    subscribers_connected: Gauge,
    subscribers_behind: Gauge,
    subscribers_max_lag_revisions: Gauge,
    subscribers_without_proof: Gauge,
    subscriber_confirmations: Counter,
    subscribers_fenced: Counter,
    records_taken: Counter,
    records_written: Counter,
    records_dropped_queue_full: Counter,
    records_dropped_write_failed: Counter,
    audit_written: Counter,
    audit_dropped_queue_full: Counter,
    audit_dropped_write_failed: Counter,
}

/// The server's instruments and the recorder that renders them.
pub struct Metrics {
    handle: PrometheusHandle,
    /// `[api][decision]`: the exported counters, and the tallies copied into them at scrape.
    decisions: Vec<[(Counter, Tally); 3]>,
    request_seconds: Vec<Histogram>,
    requests: Vec<(Counter, Tally)>,
    in_flight: Gauge,
    /// Requests started and finished; in flight is the difference, at scrape.
    started: Tally,
    finished: Tally,
    scrape: ScrapeInstruments,
    /// Kept to register etcd mode's gauges on the first etcd-mode scrape.
    recorder: PrometheusRecorder,
    store: OnceLock<StoreInstruments>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        // `set_buckets` only fails on an empty list; the constant is not empty.
        let builder = PrometheusBuilder::new()
            .set_buckets(&LATENCY_BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        describe(&recorder);

        let counter = |name: &'static str, labels: Vec<Label>| {
            recorder.register_counter(&Key::from_parts(name, labels), &METADATA)
        };
        let gauge = |name: &'static str| recorder.register_gauge(&Key::from_name(name), &METADATA);

        let decisions = DecisionApi::ALL
            .iter()
            .map(|api| {
                DECISIONS.map(|decision| {
                    let exported = counter(
                        "authzd_decisions_total",
                        vec![
                            Label::new("api", api.label()),
                            Label::new("decision", decision_label(decision)),
                        ],
                    );
                    (exported, Tally::default())
                })
            })
            .collect();
        let request_seconds = Route::ALL
            .iter()
            .map(|route| {
                recorder.register_histogram(
                    &Key::from_parts(
                        "authzd_request_duration_seconds",
                        vec![Label::new("route", route.label())],
                    ),
                    &METADATA,
                )
            })
            .collect();
        let requests = Route::ALL
            .iter()
            .map(|route| {
                let exported = counter(
                    "authzd_requests_total",
                    vec![Label::new("route", route.label())],
                );
                (exported, Tally::default())
            })
            .collect();
        let scrape = ScrapeInstruments {
            revision: gauge("authzd_policy_revision"),
            reload_errors: counter("authzd_policy_reload_errors_total", vec![]),
            cache_entries: gauge("authzd_cache_entries"),
            cache_capacity: gauge("authzd_cache_capacity"),
            cache_hits: counter("authzd_cache_hits_total", vec![]),
            cache_misses: counter("authzd_cache_misses_total", vec![]),
            cache_evictions: counter("authzd_cache_evictions_total", vec![]),
            cache_invalidations: counter("authzd_cache_invalidations_total", vec![]),
            cache_stale_inserts_refused: counter(
                "authzd_cache_stale_inserts_refused_total",
                vec![],
            ),
            subscribers_listed: gauge("authzd_subscribers"),
            subscribers_connected: gauge("authzd_subscribers_connected"),
            subscribers_behind: gauge("authzd_subscribers_behind"),
            subscribers_max_lag_revisions: gauge("authzd_subscribers_max_lag_revisions"),
            subscribers_without_proof: gauge("authzd_subscribers_without_proof"),
            subscriber_confirmations: counter("authzd_subscribers_confirmations_total", vec![]),
            subscribers_fenced: counter("authzd_subscribers_fenced_total", vec![]),
            records_taken: counter("authzd_decision_records_total", vec![]),
            records_written: counter("authzd_decision_records_written_total", vec![]),
            records_dropped_queue_full: counter(
                "authzd_decision_records_dropped_total",
                vec![Label::new("reason", "queue_full")],
            ),
            records_dropped_write_failed: counter(
                "authzd_decision_records_dropped_total",
                vec![Label::new("reason", "write_failed")],
            ),
            audit_written: counter("authzd_audit_written_total", vec![]),
            audit_dropped_queue_full: counter(
                "authzd_audit_dropped_total",
                vec![Label::new("reason", "queue_full")],
            ),
            audit_dropped_write_failed: counter(
                "authzd_audit_dropped_total",
                vec![Label::new("reason", "write_failed")],
            ),
        };
        let in_flight = gauge("authzd_requests_in_flight");
        Self {
            decisions,
            request_seconds,
            requests,
            in_flight,
            started: Tally::default(),
            finished: Tally::default(),
            scrape,
            handle,
            recorder,
            store: OnceLock::new(),
        }
    }

    /// Counts one decision answered by `api`.
    pub fn decision(&self, api: DecisionApi, decision: Decision) {
        self.decisions_counted(api, decision, 1);
    }

    /// Counts the decisions of a batch at once: one shared-counter update per outcome instead
    /// of one per decision.
    pub fn tally(&self, api: DecisionApi, tally: &DecisionTally) {
        for (decision, count) in DECISIONS.iter().zip(tally.0) {
            if count > 0 {
                self.decisions_counted(api, *decision, count);
            }
        }
    }

    fn decisions_counted(&self, api: DecisionApi, decision: Decision, count: u64) {
        if let Some(row) = self.decisions.get(api as usize) {
            row[decision_index(decision)].1.add(count);
        }
    }

    /// A request entered the server; pair with [`Metrics::request_finished`].
    pub fn request_started(&self) {
        self.started.add(1);
    }

    pub fn request_finished(&self, route: Route, elapsed: Duration) {
        self.finished.add(1);
        if let Some(histogram) = self.request_seconds.get(route.index()) {
            histogram.record(elapsed.as_secs_f64());
        }
        if let Some((_, tally)) = self.requests.get(route.index()) {
            tally.add(1);
        }
    }

    /// Drains histogram samples into their buckets every `every`, so memory stays bounded
    /// between scrapes; runs on the current tokio runtime until it stops or the task is aborted.
    pub fn spawn_upkeep(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                handle.run_upkeep();
            }
        })
    }

    /// The Prometheus text exposition, with the scrape-time figures filled in.
    pub fn render(&self, figures: &ScrapeFigures) -> String {
        let s = &self.scrape;
        s.revision.set(figures.revision as f64);
        s.reload_errors.absolute(figures.reload_errors);
        s.cache_entries.set(figures.cache_entries as f64);
        s.cache_capacity.set(figures.cache_capacity as f64);
        s.cache_hits.absolute(figures.cache_hits);
        s.cache_misses.absolute(figures.cache_misses);
        s.cache_evictions.absolute(figures.cache_evictions);
        s.cache_invalidations.absolute(figures.cache_invalidations);
        s.cache_stale_inserts_refused
            .absolute(figures.cache_stale_inserts_refused);
        let subscribers = &figures.subscribers;
        s.subscribers_listed.set(subscribers.listed as f64);
        s.subscribers_connected.set(subscribers.connected as f64);
        s.subscribers_behind.set(subscribers.behind as f64);
        s.subscribers_max_lag_revisions
            .set(subscribers.max_lag_revisions as f64);
        s.subscribers_without_proof
            .set(subscribers.without_proof as f64);
        s.subscriber_confirmations
            .absolute(subscribers.confirmations);
        s.subscribers_fenced.absolute(subscribers.fenced);
        let records = &figures.records;
        s.records_taken.absolute(records.taken);
        s.records_written.absolute(records.written);
        s.records_dropped_queue_full
            .absolute(records.dropped_queue_full);
        s.records_dropped_write_failed
            .absolute(records.dropped_write_failed);
        let audit = &figures.audit;
        s.audit_written.absolute(audit.written);
        s.audit_dropped_queue_full
            .absolute(audit.dropped_queue_full);
        s.audit_dropped_write_failed
            .absolute(audit.dropped_write_failed);
        for (exported, tally) in self.decisions.iter().flatten().chain(&self.requests) {
            exported.absolute(tally.get());
        }
        // Finished is read first: a request finishing between the two reads then counts as
        // still in flight, and the figure never goes below zero.
        let finished = self.finished.get();
        let started = self.started.get();
        self.in_flight.set(started.saturating_sub(finished) as f64);
        if let StoreFigures::Etcd(etcd) = &figures.store {
            let store = self.store.get_or_init(|| {
                let gauge = |name: &'static str| {
                    self.recorder
                        .register_gauge(&Key::from_name(name), &METADATA)
                };
                StoreInstruments {
                    fenced: gauge("authzd_store_fenced"),
                    freshness_age_seconds: gauge("authzd_store_freshness_age_seconds"),
                    replicas: gauge("authzd_store_replicas"),
                    head_revision: gauge("authzd_store_head_revision"),
                }
            });
            store.fenced.set(if etcd.fenced { 1.0 } else { 0.0 });
            store
                .freshness_age_seconds
                .set(etcd.freshness_age_seconds());
            store.replicas.set(etcd.replicas.len() as f64);
            store.head_revision.set(etcd.head_revision as f64);
        }
        let mut text = self.handle.render();
        store_info(&mut text, &figures.store);
        text
    }
}

/// Appends `authzd_store_info{store="...",...} 1` (with its HELP and TYPE lines) to an
/// exposition.
fn store_info(text: &mut String, store: &StoreFigures) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    write_help_line(text, STORE_INFO, None, None, STORE_INFO_HELP);
    write_type_line(text, STORE_INFO, None, None, "gauge");
    match store {
        StoreFigures::Directory => {
            let _ = writeln!(text, "{STORE_INFO}{{store=\"directory\"}} 1");
        }
        StoreFigures::Etcd(etcd) => {
            let _ = writeln!(
                text,
                "{STORE_INFO}{{store=\"etcd\",replica_id=\"{}\",endpoint=\"{}\"}} 1",
                label_value(&etcd.replica_id),
                label_value(&etcd.endpoint),
            );
        }
    }
}

/// A label value as the text exposition format escapes it: `\` `"` and line feeds. (Not the
/// exporter's `sanitize_label_value`: it takes a backslash before a quote for an escape already
/// made and drops it, so a replica id `a\"b` would be shown as `a"b`.)
fn label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn describe(recorder: &PrometheusRecorder) {
    let counter = |name: &'static str, text: &'static str| {
        recorder.describe_counter(KeyName::from_const_str(name), None, text.into());
    };
    let gauge = |name: &'static str, text: &'static str| {
        recorder.describe_gauge(KeyName::from_const_str(name), None, text.into());
    };
    counter(
        "authzd_decisions_total",
        "Decisions answered, by API and result (allow, deny, no_opinion).",
    );
    counter("authzd_requests_total", "Requests finished, by route.");
    recorder.describe_histogram(
        KeyName::from_const_str("authzd_request_duration_seconds"),
        Some(Unit::Seconds),
        "Time from request received to response produced, by route.".into(),
    );
    gauge(
        "authzd_requests_in_flight",
        "Requests being handled right now.",
    );
    gauge(
        "authzd_policy_revision",
        "The policy revision in force (0 before the first load).",
    );
    counter(
        "authzd_policy_reload_errors_total",
        "Policy reloads rejected (the last good policy kept serving).",
    );
    gauge("authzd_cache_entries", "Decisions in the cache.");
    gauge("authzd_cache_capacity", "The cache's configured capacity.");
    counter(
        "authzd_cache_hits_total",
        "Decisions answered from the cache.",
    );
    counter(
        "authzd_cache_misses_total",
        "Cacheable decisions computed by the engine.",
    );
    counter(
        "authzd_cache_evictions_total",
        "Entries evicted to keep the cache within its capacity.",
    );
    counter(
        "authzd_cache_invalidations_total",
        "Entries removed because a policy change could affect them.",
    );
    counter(
        "authzd_cache_stale_inserts_refused_total",
        "Decisions not cached because the policy changed while they were computed.",
    );
    gauge(
        "authzd_subscribers",
        "Callers' caches in the invalidation stream's table: connected, or disconnected with a proof that may still be in use.",
    );
    gauge(
        "authzd_subscribers_connected",
        "Callers' caches with an invalidation stream open.",
    );
    gauge(
        "authzd_subscribers_behind",
        "Connected subscribers that have not confirmed the policy revision in force.",
    );
    gauge(
        "authzd_subscribers_max_lag_revisions",
        "The policy revision in force less the lowest revision a connected subscriber confirmed (0 without subscribers).",
    );
    gauge(
        "authzd_subscribers_without_proof",
        "Connected subscribers holding no proof of being current (no heartbeat within --max-staleness): they answer nothing from memory.",
    );
    counter(
        "authzd_subscribers_confirmations_total",
        "Confirmations from subscribers that advanced the revision they applied.",
    );
    counter(
        "authzd_subscribers_fenced_total",
        "Subscribers counted fenced by a write's acknowledgement (or, in etcd mode, this replica's report), once per subscriber and revision.",
    );
    counter(
        "authzd_decision_records_total",
        "Decision records taken (--decision-records): written, queued or dropped.",
    );
    counter(
        "authzd_decision_records_written_total",
        "Decision records written to their destination.",
    );
    counter(
        "authzd_decision_records_dropped_total",
        "Decision records dropped, by reason: queue_full (the writer could not keep up; no decision waits for it) or write_failed (the destination refused the write). Each gap is also written into the stream.",
    );
    counter(
        "authzd_audit_written_total",
        "Audit log entries written to the file (--audit-log): the file took every byte.",
    );
    counter(
        "authzd_audit_dropped_total",
        "Audit log entries not written, by reason: queue_full (the writer could not keep up; no request waits for it) or write_failed (the file refused the write: a full disk, an I/O error).",
    );
    gauge(
        "authzd_store_fenced",
        "etcd mode: 1 while this replica is fenced (its last freshness proof is older than --max-staleness: allows refused per --on-stale), else 0.",
    );
    gauge(
        "authzd_store_freshness_age_seconds",
        "etcd mode: age of this replica's last proof that its policy is current (-1 before the first).",
    );
    gauge(
        "authzd_store_replicas",
        "etcd mode: replicas registered in the replica table (this one included).",
    );
    gauge(
        "authzd_store_head_revision",
        "etcd mode: the policy's head revision in etcd as the latest freshness proof read it (0 before the first); authzd_policy_revision below it means this replica is catching up.",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `name{labels}` in an exposition, labels written as Prometheus
    /// prints them.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                (name == series).then(|| value.parse().ok())?
            })
    }

    #[test]
    fn decisions_are_counted_by_api_and_result() {
        let metrics = Metrics::new();
        metrics.decision(DecisionApi::Authorize, Decision::Allow);
        metrics.decision(DecisionApi::Authorize, Decision::Allow);
        metrics.decision(DecisionApi::EnvoyCheck, Decision::Deny);
        let text = metrics.render(&ScrapeFigures::default());
        assert_eq!(
            sample(
                &text,
                r#"authzd_decisions_total{api="authorize",decision="allow"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"authzd_decisions_total{api="envoy_check",decision="deny"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"authzd_decisions_total{api="authorize",decision="deny"}"#
            ),
            Some(0.0)
        );
    }

    #[test]
    fn scrape_figures_are_copied_into_the_exposition() {
        let metrics = Metrics::new();
        let figures = ScrapeFigures {
            revision: 7,
            reload_errors: 2,
            cache_entries: 40,
            cache_capacity: 100,
            cache_hits: 30,
            cache_misses: 12,
            cache_evictions: 3,
            cache_invalidations: 5,
            cache_stale_inserts_refused: 1,
            subscribers: SubscriberTableFigures {
                listed: 4,
                connected: 3,
                behind: 2,
                max_lag_revisions: 6,
                without_proof: 1,
                confirmations: 17,
                fenced: 2,
            },
            records: DecisionRecordFigures {
                taken: 100,
                written: 90,
                dropped_queue_full: 8,
                dropped_write_failed: 2,
            },
            audit: AuditLogFigures {
                written: 50,
                dropped_queue_full: 4,
                dropped_write_failed: 9,
            },
            store: StoreFigures::Directory,
        };
        let text = metrics.render(&figures);
        for (series, value) in [
            ("authzd_policy_revision", 7.0),
            ("authzd_policy_reload_errors_total", 2.0),
            ("authzd_cache_entries", 40.0),
            ("authzd_cache_capacity", 100.0),
            ("authzd_cache_hits_total", 30.0),
            ("authzd_cache_misses_total", 12.0),
            ("authzd_cache_evictions_total", 3.0),
            ("authzd_cache_invalidations_total", 5.0),
            ("authzd_cache_stale_inserts_refused_total", 1.0),
            ("authzd_subscribers", 4.0),
            ("authzd_subscribers_connected", 3.0),
            ("authzd_subscribers_behind", 2.0),
            ("authzd_subscribers_max_lag_revisions", 6.0),
            ("authzd_subscribers_without_proof", 1.0),
            ("authzd_subscribers_confirmations_total", 17.0),
            ("authzd_subscribers_fenced_total", 2.0),
            ("authzd_decision_records_total", 100.0),
            ("authzd_decision_records_written_total", 90.0),
            (
                r#"authzd_decision_records_dropped_total{reason="queue_full"}"#,
                8.0,
            ),
            (
                r#"authzd_decision_records_dropped_total{reason="write_failed"}"#,
                2.0,
            ),
            ("authzd_audit_written_total", 50.0),
            (r#"authzd_audit_dropped_total{reason="queue_full"}"#, 4.0),
            (r#"authzd_audit_dropped_total{reason="write_failed"}"#, 9.0),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
    }

    /// Directory mode: the info series says so and no etcd gauge appears. etcd mode: the
    /// gauges follow the figures scrape by scrape, and the info series carries the current
    /// endpoint only, its label values escaped.
    #[test]
    fn the_store_is_exported_by_mode() {
        let metrics = Metrics::new();
        let text = metrics.render(&ScrapeFigures::default());
        assert_eq!(
            sample(&text, r#"authzd_store_info{store="directory"}"#),
            Some(1.0),
            "{text}"
        );
        assert!(text.contains("# TYPE authzd_store_info gauge\n"), "{text}");
        assert!(text.contains("# HELP authzd_store_info "), "{text}");
        for etcd_only in [
            "authzd_store_fenced",
            "authzd_store_freshness_age_seconds",
            "authzd_store_replicas",
            "authzd_store_head_revision",
        ] {
            assert!(!text.contains(etcd_only), "{etcd_only} in\n{text}");
        }

        let mut etcd = EtcdFigures {
            replica_id: "a".into(),
            endpoint: "http://127.0.0.1:2379".into(),
            freshness_age: Some(Duration::from_millis(250)),
            fenced: false,
            replicas: [("a".to_string(), 9), ("b".to_string(), 7)].into(),
            head_revision: 11,
        };
        let figures = |etcd: &EtcdFigures| ScrapeFigures {
            store: StoreFigures::Etcd(etcd.clone()),
            ..ScrapeFigures::default()
        };
        let text = metrics.render(&figures(&etcd));
        assert_eq!(sample(&text, "authzd_store_fenced"), Some(0.0), "{text}");
        assert_eq!(
            sample(&text, "authzd_store_freshness_age_seconds"),
            Some(0.25)
        );
        assert_eq!(sample(&text, "authzd_store_replicas"), Some(2.0));
        assert_eq!(sample(&text, "authzd_store_head_revision"), Some(11.0));
        assert_eq!(
            sample(
                &text,
                r#"authzd_store_info{store="etcd",replica_id="a",endpoint="http://127.0.0.1:2379"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert!(!text.contains(r#"store="directory""#), "{text}");
        assert!(
            text.contains("# HELP authzd_store_fenced etcd mode: 1 while"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE authzd_store_fenced gauge\n"),
            "{text}"
        );

        // Fenced, never proved, failed over; an id with a backslash before a quote, and a
        // line feed.
        etcd.fenced = true;
        etcd.freshness_age = None;
        etcd.endpoint = "http://127.0.0.1:2381".into();
        etcd.replica_id = "we\\\"ird\nid".into();
        etcd.replicas.remove("b");
        let text = metrics.render(&figures(&etcd));
        assert_eq!(sample(&text, "authzd_store_fenced"), Some(1.0), "{text}");
        assert_eq!(
            sample(&text, "authzd_store_freshness_age_seconds"),
            Some(-1.0)
        );
        assert_eq!(sample(&text, "authzd_store_replicas"), Some(1.0));
        let info: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("authzd_store_info{"))
            .collect();
        assert_eq!(
            info,
            [
                r#"authzd_store_info{store="etcd",replica_id="we\\\"ird\nid",endpoint="http://127.0.0.1:2381"} 1"#
            ],
            "{text}"
        );
    }

    #[test]
    fn requests_are_timed_by_route_and_in_flight_returns_to_zero() {
        let metrics = Metrics::new();
        metrics.request_started();
        metrics.request_started();
        let text = metrics.render(&ScrapeFigures::default());
        assert_eq!(sample(&text, "authzd_requests_in_flight"), Some(2.0));
        metrics.request_finished(Route::Authorize, Duration::from_micros(80));
        metrics.request_finished(Route::Webhook, Duration::from_millis(30));
        let text = metrics.render(&ScrapeFigures::default());
        assert_eq!(sample(&text, "authzd_requests_in_flight"), Some(0.0));
        assert_eq!(
            sample(&text, r#"authzd_requests_total{route="authorize"}"#),
            Some(1.0)
        );
        // 80 µs falls in the 100 µs bucket and every larger one, not in the 50 µs bucket.
        assert_eq!(
            sample(
                &text,
                r#"authzd_request_duration_seconds_bucket{route="authorize",le="0.00005"}"#
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"authzd_request_duration_seconds_bucket{route="authorize",le="0.0001"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"authzd_request_duration_seconds_count{route="webhook"}"#
            ),
            Some(1.0)
        );
    }

    #[test]
    fn routes_are_a_fixed_set_whatever_the_path() {
        let webhook = "/authorize";
        assert_eq!(
            Route::of_path("/authz.v1.Authorizer/Authorize", webhook),
            Route::Authorize
        );
        assert_eq!(
            Route::of_path("/authz.v1.AccessReview/LocalResourceAccessReview", webhook),
            Route::LocalResourceAccessReview
        );
        assert_eq!(
            Route::of_path("/envoy.service.auth.v3.Authorization/Check", webhook),
            Route::EnvoyCheck
        );
        assert_eq!(Route::of_path("/authorize", webhook), Route::Webhook);
        assert_eq!(Route::of_path("/authorize", "/hook"), Route::Other);
        assert_eq!(
            Route::of_path(
                "/apis/authorization.k8s.io/v1/namespaces/a/localsubjectaccessreviews",
                webhook
            ),
            Route::HttpReview
        );
        assert_eq!(
            Route::of_path("/apis/authentication.k8s.io/v1/selfsubjectreviews", webhook),
            Route::HttpReview
        );
        assert_eq!(
            Route::of_path(
                "/apis/authorization.kubernetes.io/v1/ns/a/localResourceAccessReviews",
                webhook
            ),
            Route::HttpReview
        );
        for discovery in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps/v1",
            "/apis/authorization.k8s.io/v1",
        ] {
            assert_eq!(
                Route::of_path(discovery, webhook),
                Route::Discovery,
                "{discovery}"
            );
        }
        assert_eq!(
            Route::of_path("/authz.v1.AccessReview/SelfSubjectRulesReview", webhook),
            Route::SelfSubjectRulesReview
        );
        assert_eq!(Route::of_path("/readyz", webhook), Route::HttpProbe);
        assert_eq!(
            Route::of_path("/authz.v1.Authorizer/Nope", webhook),
            Route::Other
        );
        assert_eq!(Route::of_path("/random/../path", webhook), Route::Other);
        for (i, route) in Route::ALL.iter().enumerate() {
            assert_eq!(route.index(), i, "Route::ALL is in declaration order");
        }
        for (i, api) in DecisionApi::ALL.iter().enumerate() {
            assert_eq!(*api as usize, i, "DecisionApi::ALL is in declaration order");
        }
    }
}
