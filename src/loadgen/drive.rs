//! Drives one target: `concurrency` workers, each cycling through its prepared plan, sending
//! request after request (closed loop) round-robin over `connections` HTTP/2 channels. Every
//! answer is checked; latencies of calls that start after the warm-up and end within the
//! window go into per-kind histograms (µs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tonic::client::Grpc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use super::answer::{AuthorizeAnswer, BatchAnswer};
use super::workload::{Answers, Kind, Op, Outgoing, WireCodec, Workload};
use super::LoadgenError;
use crate::proto;

const AUTHORIZE: &str = "/authz.v1.Authorizer/Authorize";
const BATCH_AUTHORIZE: &str = "/authz.v1.Authorizer/BatchAuthorize";
const GET_ALLOWED_SUBJECTS: &str = "/authz.v1.Authorizer/GetAllowedSubjects";
/// A call without an answer by then is an error (and the run does not hang on it).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Error messages kept per target to explain a non-zero error count.
const ERROR_SAMPLES: usize = 5;
/// Latencies are recorded in µs, from 1 µs to 60 s, 3 significant digits.
const MAX_LATENCY_US: u64 = 60_000_000;

#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub concurrency: usize,
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Which round of a run this is (0-based): fresh names are numbered per round, so a later
    /// round never repeats an earlier one's (the same round against each target does).
    pub round: u32,
}

pub fn histogram() -> Result<Histogram<u64>, LoadgenError> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
        .map_err(|e| LoadgenError::Histogram(e.to_string()))
}

/// One kind of call against one target.
#[derive(Clone, Debug)]
pub struct KindStats {
    /// Calls answered correctly within the window, and their latencies.
    pub latency: Histogram<u64>,
    /// Decisions those calls carried (1 per Authorize, the batch size per batch).
    pub decisions: u64,
    /// Of those decisions, answered from authzd's cache.
    pub cached: u64,
    /// Failed calls and wrong answers, warm-up included.
    pub errors: u64,
}

impl KindStats {
    fn new() -> Result<Self, LoadgenError> {
        Ok(KindStats {
            latency: histogram()?,
            decisions: 0,
            cached: 0,
            errors: 0,
        })
    }

    fn merge(&mut self, other: &KindStats) -> Result<(), LoadgenError> {
        self.latency
            .add(&other.latency)
            .map_err(|e| LoadgenError::Histogram(format!("{e:?}")))?;
        self.decisions += other.decisions;
        self.cached += other.cached;
        self.errors += other.errors;
        Ok(())
    }
}

/// One target's run.
#[derive(Clone, Debug)]
pub struct TargetStats {
    pub endpoint: String,
    /// Indexed by [`Kind`].
    pub kinds: [KindStats; 3],
    /// The measured window (after the warm-up).
    pub window: Duration,
    pub error_samples: Vec<String>,
}

impl TargetStats {
    fn new(endpoint: &str, window: Duration) -> Result<Self, LoadgenError> {
        Ok(TargetStats {
            endpoint: endpoint.to_string(),
            kinds: [KindStats::new()?, KindStats::new()?, KindStats::new()?],
            window,
            error_samples: Vec::new(),
        })
    }

    fn merge(&mut self, other: &TargetStats) -> Result<(), LoadgenError> {
        for (mine, theirs) in self.kinds.iter_mut().zip(&other.kinds) {
            mine.merge(theirs)?;
        }
        for sample in &other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(sample.clone());
            }
        }
        Ok(())
    }

    /// Adds another round against the same target: its calls, and its window to this one's.
    pub fn add_round(&mut self, other: &TargetStats) -> Result<(), LoadgenError> {
        self.merge(other)?;
        self.window += other.window;
        Ok(())
    }

    pub fn kind(&self, kind: Kind) -> &KindStats {
        &self.kinds[kind as usize]
    }

    pub fn errors(&self) -> u64 {
        self.kinds.iter().map(|k| k.errors).sum()
    }
}

/// What a correct answer carried.
struct Answer {
    decisions: u64,
    cached: u64,
}

/// Runs the load against `endpoint` and returns what was measured.
pub async fn drive(
    endpoint: &str,
    workload: Arc<Workload>,
    answers: Answers,
    config: RunConfig,
) -> Result<TargetStats, LoadgenError> {
    let connect_error = |source| LoadgenError::Connect {
        target: endpoint.to_string(),
        source,
    };
    let endpoint_config = Endpoint::from_shared(endpoint.to_string())
        .map_err(connect_error)?
        .connect_timeout(Duration::from_secs(5));
    let mut channels = Vec::with_capacity(config.connections);
    for _ in 0..config.connections.max(1) {
        // One Endpoint::connect is one HTTP/2 connection.
        channels.push(endpoint_config.connect().await.map_err(connect_error)?);
    }

    let start = Instant::now();
    let warm_end = start + config.warmup;
    let end = warm_end + config.duration;
    let mut workers = JoinSet::new();
    for id in 0..config.concurrency {
        let clients: Vec<Grpc<Channel>> = channels.iter().cloned().map(Grpc::new).collect();
        let workload = Arc::clone(&workload);
        let window = Window { warm_end, end };
        workers.spawn(worker(
            id,
            clients,
            workload,
            answers,
            window,
            fresh_names_from(config.round, id),
            endpoint.to_string(),
        ));
    }
    let mut total = TargetStats::new(endpoint, config.duration)?;
    while let Some(done) = workers.join_next().await {
        total.merge(&done??)?;
    }
    total.window = end.saturating_duration_since(warm_end);
    Ok(total)
}

#[derive(Clone, Copy)]
struct Window {
    warm_end: Instant,
    end: Instant,
}

/// Where a worker's fresh names start: each round and worker numbers its own, 2^40 of them
/// (workers are at most 4096, 12 bits; rounds at most 10, the bits above).
fn fresh_names_from(round: u32, worker: usize) -> u64 {
    (u64::from(round) << 52) | ((worker as u64) << 40)
}

async fn worker(
    id: usize,
    mut clients: Vec<Grpc<Channel>>,
    workload: Arc<Workload>,
    answers: Answers,
    window: Window,
    first_name: u64,
    endpoint: String,
) -> Result<TargetStats, LoadgenError> {
    let mut stats = TargetStats::new(&endpoint, Duration::ZERO)?;
    let channels = clients.len();
    // Fresh names never repeat within a run (see `fresh_names_from`).
    let mut counter = first_name;
    let mut index = 0usize;
    loop {
        let started = Instant::now();
        if started >= window.end {
            break;
        }
        let Some(op) = workload.op(id, index) else {
            break;
        };
        let Some(client) = clients.get_mut((id + index) % channels.max(1)) else {
            break;
        };
        let outgoing = Outgoing {
            workload: Arc::clone(&workload),
            worker: id,
            op: index,
            counter,
        };
        counter += op.messages();
        index += 1;
        let result =
            tokio::time::timeout(CALL_TIMEOUT, call(client, &workload, answers, op, outgoing))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {CALL_TIMEOUT:?}")));
        let done = Instant::now();
        let kind = &mut stats.kinds[op.kind() as usize];
        match result {
            Ok(answer) => {
                if started >= window.warm_end && done <= window.end {
                    let micros = u64::try_from(done.duration_since(started).as_micros())
                        .unwrap_or(MAX_LATENCY_US);
                    kind.latency.saturating_record(micros.max(1));
                    kind.decisions += answer.decisions;
                    kind.cached += answer.cached;
                }
            }
            Err(message) => {
                kind.errors += 1;
                if stats.error_samples.len() < ERROR_SAMPLES {
                    stats
                        .error_samples
                        .push(format!("{}: {message}", op.kind().name()));
                }
            }
        }
    }
    Ok(stats)
}

async fn call(
    client: &mut Grpc<Channel>,
    workload: &Workload,
    answers: Answers,
    op: &Op,
    outgoing: Outgoing,
) -> Result<Answer, String> {
    client
        .ready()
        .await
        .map_err(|e| format!("channel not ready: {e}"))?;
    let request = tonic::Request::new(outgoing);
    let status = |s: tonic::Status| format!("{:?}: {}", s.code(), s.message());
    match op {
        Op::Authorize(item) => {
            let response: AuthorizeAnswer = client
                .unary(
                    request,
                    PathAndQuery::from_static(AUTHORIZE),
                    WireCodec::default(),
                )
                .await
                .map_err(status)?
                .into_inner();
            let cached = Workload::check_authorize(answers, item.expect, &response)?;
            Ok(Answer {
                decisions: 1,
                cached: u64::from(cached),
            })
        }
        Op::Batch(items) => {
            let response: BatchAnswer = client
                .unary(
                    request,
                    PathAndQuery::from_static(BATCH_AUTHORIZE),
                    WireCodec::default(),
                )
                .await
                .map_err(status)?
                .into_inner();
            let mut cached = 0;
            match answers {
                Answers::Empty if response.responses.is_empty() => {}
                Answers::Empty => return Err("the no-op server answered a non-empty batch".into()),
                Answers::Real if response.responses.len() != items.len() => {
                    return Err(format!(
                        "{} answers to a batch of {}",
                        response.responses.len(),
                        items.len()
                    ))
                }
                Answers::Real => {
                    for (i, (item, one)) in items.iter().zip(&response.responses).enumerate() {
                        let hit = Workload::check_authorize(answers, item.expect, one)
                            .map_err(|e| format!("responses[{i}]: {e}"))?;
                        cached += u64::from(hit);
                    }
                }
            }
            Ok(Answer {
                decisions: items.len() as u64,
                cached,
            })
        }
        Op::WhoCan(_) => {
            let response: proto::GetAllowedSubjectsResponse = client
                .unary(
                    request,
                    PathAndQuery::from_static(GET_ALLOWED_SUBJECTS),
                    WireCodec::default(),
                )
                .await
                .map_err(status)?
                .into_inner();
            workload.check_who_can(answers, &response)?;
            Ok(Answer {
                decisions: 1,
                cached: 0,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_do_not_repeat_across_rounds_or_workers() {
        let mut starts: Vec<u64> = (0..10)
            .flat_map(|round| [0, 1, 4095].map(|worker| fresh_names_from(round, worker)))
            .collect();
        let count = starts.len();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), count);
        // Each start has 2^40 names before the next could begin.
        assert!(starts.windows(2).all(|w| w[1] - w[0] >= 1 << 40));
    }

    #[test]
    fn rounds_add_their_calls_and_their_windows() {
        let round = |decisions: u64, errors: u64, window_ms: u64| {
            let mut stats = TargetStats::new("x", Duration::from_millis(window_ms)).unwrap();
            stats.kinds[0].decisions = decisions;
            stats.kinds[0].errors = errors;
            stats.kinds[0].latency.record(100).unwrap();
            stats
        };
        let mut total = round(10, 1, 1000);
        total.add_round(&round(5, 0, 2000)).unwrap();
        assert_eq!(total.window, Duration::from_millis(3000));
        assert_eq!(total.kinds[0].decisions, 15);
        assert_eq!(total.errors(), 1);
        assert_eq!(total.kinds[0].latency.len(), 2);
    }
}
