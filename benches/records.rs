//! Decision records and replay (docs/records.md), measured in one run:
//!
//! * `format`: what one record costs its two threads — packing the request on the serving
//!   thread, formatting the line on the writer's — per record, median of 5 rounds;
//! * `writer`: records through a real [`DecisionRecorder`] and [`LineWriter`] into a file,
//!   from the first record to the last line flushed, per record (the writer's throughput);
//! * `replay`: `authzd replay`'s engine over a file of 1,000,000 records on the synthetic
//!   policy of 10,000 bindings, against a candidate of 9,000, trusting the recorded answers
//!   and re-deciding them on the old policy (the bar: at most 30 s).
//!
//! Run: `cargo bench --bench records` (under `cargo test --benches`: 10,000 records, as a
//! smoke test). Its figures are in BENCHMARKS.md's run notes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use authzd::engine::{Authorize, Engine, EngineConfig};
use authzd::records::decision::{DecisionRecord, DecisionRecorder, PackedRequest, RecordCounts};
use authzd::records::format::write_decision;
use authzd::records::writer::{Destination, LineWriter};
use authzd::request::{Action, Request, ResourceAttributes, UserInfo};
use authzd::synth::{Rng, Shape};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Requests over the synthetic policy's users, groups, namespaces and resources.
fn requests(shape: &Shape, count: usize) -> Vec<Request> {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut below = |n: usize| rng.below(n);
    let verbs = ["get", "list", "watch", "create", "update", "delete"];
    let resources = ["pods", "secrets", "configmaps", "deployments"];
    (0..count)
        .map(|_| Request {
            user: UserInfo {
                name: format!("user-{}", below(shape.users)),
                groups: (0..below(4))
                    .map(|_| format!("group-{}", below(shape.groups)))
                    .collect(),
                ..UserInfo::default()
            },
            action: Action::Resource(ResourceAttributes {
                namespace: format!("ns-{}", below(shape.namespaces)),
                verb: verbs[below(verbs.len())].into(),
                resource: resources[below(resources.len())].into(),
                group: String::new(),
                version: "v1".into(),
                ..ResourceAttributes::default()
            }),
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let records = if full { 1_000_000 } else { 10_000 };
    let shape = Shape::with_bindings(10_000);
    let old_engine = Engine::new(&authzd::synth::policy(&shape, 7), EngineConfig::default());
    let candidate = Shape {
        bindings: 9_000,
        ..shape
    };
    let new_policy = authzd::synth::policy(&candidate, 7);
    let new_engine = Engine::new(&new_policy, EngineConfig::default());
    let requests = requests(&shape, records.min(100_000));
    let caller = Arc::new(UserInfo {
        name: "envoy".into(),
        groups: vec!["system:authenticated".into()],
        ..UserInfo::default()
    });
    let responses: Vec<_> = requests
        .iter()
        .map(|r| old_engine.decide(r.as_borrowed()).response)
        .collect();

    // format: pack + write, per record.
    let mut line = Vec::with_capacity(2048);
    let mut per_record = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        for (request, response) in requests.iter().zip(&responses) {
            let record = DecisionRecord {
                seq: 1,
                time: SystemTime::now(),
                api: "Authorize",
                caller: Arc::clone(&caller),
                request: PackedRequest::pack(request.as_borrowed()),
                content: None,
                response: Arc::clone(response),
                revision: 1,
                cached: true,
            };
            line.clear();
            write_decision(&mut line, &record);
            std::hint::black_box(&line);
        }
        per_record.push(started.elapsed().as_nanos() as f64 / requests.len() as f64);
    }
    println!(
        "records/format: {:.0} ns per record (median of 5 rounds of {})",
        median(per_record),
        requests.len()
    );

    // writer: through the recorder and the writer thread into a file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decisions.jsonl");
    let counts = Arc::new(RecordCounts::default());
    let (queue, writer) = LineWriter::start(
        "bench-writer",
        Destination::append(&path),
        1 << 20,
        Arc::clone(&counts),
    )
    .unwrap();
    let recorder = DecisionRecorder::new(queue, Arc::clone(&counts));
    let started = Instant::now();
    for n in 0..records {
        let i = n % requests.len();
        recorder.record(
            "Authorize",
            &caller,
            requests[i].as_borrowed(),
            &responses[i],
            1,
            n >= requests.len(),
        );
    }
    let queued = started.elapsed();
    drop(recorder);
    writer.finish();
    let written = started.elapsed();
    let figures = authzd::records::decision::figures(&counts);
    println!(
        "records/writer: {records} records queued in {:.2} s ({:.0} ns each on the recording thread), written in {:.2} s ({:.0} ns each), {} dropped, {:.0} bytes per line",
        queued.as_secs_f64(),
        queued.as_nanos() as f64 / records as f64,
        written.as_secs_f64(),
        written.as_nanos() as f64 / records as f64,
        figures.queue_full,
        std::fs::metadata(&path).unwrap().len() as f64 / records as f64,
    );

    // replay: the file just written (its requests recorded with the old policy's answers).
    for (label, old) in [
        ("recorded answers", None),
        ("old policy", Some(&old_engine)),
    ] {
        let started = Instant::now();
        let replayed =
            authzd::replay::replay(std::slice::from_ref(&path), &new_engine, old).unwrap();
        let took = started.elapsed();
        assert_eq!(replayed.records, records as u64);
        println!(
            "replay/{label}: {records} records in {:.2} s ({:.0} ns each), {} flipped in {} requests{}",
            took.as_secs_f64(),
            took.as_nanos() as f64 / records as f64,
            replayed.flipped(),
            replayed.flips.len(),
            if full && took > Duration::from_secs(30) {
                " — over the 30 s bar"
            } else {
                ""
            }
        );
    }
}
