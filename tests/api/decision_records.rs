//! Decision records (`serve --decision-records`, docs/records.md) from a real server: every
//! decision written with its request, answer and provenance; under a sink that stops reading,
//! or that refuses writes for a while, decisions go on, and what is missing from the stream is
//! exactly what the gap lines and the drop metric count; what is counted written is only what
//! the sink took.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers outside #[test]

use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::server::{
    authorize_concurrently, metric, resource_request, sample_policy, Server,
};
use crate::support::wait::eventually;
use authzd::proto::authorizer_client::AuthorizerClient;
use authzd::proto::{BatchAuthorizeRequest, Content};
use authzd::records::format::{read_line, Line};

/// The lines of a record stream, read back by the same reader `authzd replay` uses.
fn read_stream(text: &str) -> Vec<Line> {
    text.lines()
        .map(|line| read_line(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[tokio::test]
async fn every_decision_is_recorded_with_what_decided_it() {
    let policy = sample_policy();
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("decisions.jsonl");
    let sink = format!("file:{}", path.display());
    let server = Server::start_serving(policy.path(), &["--decision-records", &sink]).await;
    let mut client = AuthorizerClient::new(server.channel().await);

    let alice = resource_request("alice", &[], "dev", "get", "pods");
    client.authorize(alice.clone()).await.unwrap();
    client.authorize(alice.clone()).await.unwrap(); // a cache hit
    let mut with_content = resource_request("bob", &["devs"], "dev", "create", "secrets");
    with_content.content = Some(Content {
        object: br#"{"metadata":{"labels":{"app":"web"}}}"#.to_vec(),
        ..Default::default()
    });
    client.authorize(with_content).await.unwrap();
    client
        .batch_authorize(BatchAuthorizeRequest {
            requests: vec![
                resource_request("mallory", &["interns", "devs"], "dev", "get", "secrets"),
                resource_request("eve", &[], "dev", "get", "pods"),
            ],
        })
        .await
        .unwrap();
    drop(client);
    server.stop_gracefully().await;

    let text = std::fs::read_to_string(&path).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 5, "{text}");
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4], "{text}");
    for record in &records {
        assert_eq!(record["v"], 1);
        assert_eq!(record["kind"], "decision");
        assert_eq!(record["revision"], 1);
        assert!(record["time"].as_str().unwrap().ends_with('Z'));
        assert!(!record["caller"]["user"].as_str().unwrap().is_empty());
    }
    let (first, hit) = (&records[0], &records[1]);
    assert_eq!(first["api"], "Authorize");
    assert_eq!(first["request"]["user"], "alice");
    assert_eq!(first["request"]["resource"]["namespace"], "dev");
    assert_eq!(first["request"]["resource"]["resource"], "pods");
    assert_eq!(first["decision"], "allow");
    assert!(!first["allowed_by"][0]["binding"]
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(
        (first["cached"].clone(), hit["cached"].clone()),
        (false.into(), true.into())
    );
    assert_eq!(
        records[2]["request"]["content"]["object"]["metadata"]["labels"]["app"], "web",
        "the content decided on is recorded"
    );
    assert_eq!(records[2]["request"]["groups"][0], "devs");
    let (denied, erred) = (&records[3], &records[4]);
    assert_eq!(denied["api"], "BatchAuthorize");
    assert_eq!(denied["decision"], "deny", "{denied}");
    assert!(!denied["denied_by"][0]["role"].as_str().unwrap().is_empty());
    assert!(
        !erred["errors"].as_array().unwrap().is_empty(),
        "eve's binding names a missing role: {erred}"
    );
    // And each reads back as the request it was.
    let Line::Decision(read) = read_line(text.lines().next().unwrap()).unwrap() else {
        panic!("not a decision")
    };
    assert_eq!(read.user.name, "alice");
}

/// The sink stops reading entirely (a FIFO whose reader pauses): 3,000 decisions still all
/// answer, so none waited on it. Then the reader drains the stream: the records present plus
/// the gaps' counts are every decision taken, the sequence numbers missing are exactly as many
/// as the gaps count, and the metric says the same.
#[tokio::test]
async fn a_stalled_sink_drops_counts_and_marks_the_gap() {
    let policy = sample_policy();
    let out = tempfile::tempdir().unwrap();
    let fifo = out.path().join("decisions.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");

    let paused = Arc::new(AtomicBool::new(true));
    let reader = {
        let (fifo, paused) = (fifo.clone(), Arc::clone(&paused));
        std::thread::spawn(move || read_fifo(&fifo, &paused))
    };
    let sink = format!("file:{}", fifo.display());
    let server = Server::start_serving(
        policy.path(),
        &[
            "--decision-records",
            &sink,
            "--decision-records-queue",
            "64",
        ],
    )
    .await;
    let channel = server.channel().await;

    let decisions = 3_000usize;
    let answered =
        authorize_concurrently(&channel, decisions, 8, 50, Duration::from_secs(120)).await;
    assert!(answered, "decisions waited on a sink that does not read");
    let dropped_metric = metric(
        server.addr,
        r#"authzd_decision_records_dropped_total{reason="queue_full"}"#,
    )
    .await
    .unwrap();
    assert!(
        dropped_metric > 0.0,
        "a stalled sink and a queue of 64 must drop some of {decisions} records"
    );
    assert_eq!(
        metric(server.addr, "authzd_decision_records_total").await,
        Some(decisions as f64)
    );

    paused.store(false, Ordering::Release);
    drop(channel);
    server.stop_gracefully().await;
    let text = reader.join().unwrap();

    let mut present = Vec::new();
    let mut gap_total = 0u64;
    for line in read_stream(&text) {
        match line {
            Line::Decision(record) => present.push(record.seq),
            Line::Gap { reason, dropped } => {
                assert_eq!(reason, "queue_full");
                gap_total += dropped;
            }
            Line::Other => panic!("an unknown line"),
        }
    }
    present.sort_unstable();
    present.dedup();
    let missing = decisions - present.len();
    assert!(present.iter().all(|&seq| seq < decisions as u64));
    assert_eq!(
        present.len() as u64 + gap_total,
        decisions as u64,
        "every decision is either in the stream or counted by a gap"
    );
    assert_eq!(
        missing as u64, gap_total,
        "the gaps count exactly what is missing"
    );
    assert!(
        gap_total as f64 >= dropped_metric,
        "the gaps cover the drops the metric counted before shutdown"
    );
}

/// Reads the FIFO to its end, not at all while `paused`.
fn read_fifo(fifo: &Path, paused: &AtomicBool) -> String {
    let mut file = std::fs::File::open(fifo).unwrap();
    let mut text = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if paused.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("reading the FIFO: {e}"),
        }
    }
    String::from_utf8(text).unwrap()
}

/// The sink refuses writes for a while, then takes them again: a FIFO whose reader leaves
/// (every write fails with EPIPE, as on a full disk) and a new reader that comes. The records
/// decided meanwhile are counted `write_failed` and never written; once there is a reader
/// again the writer carries on by itself, and the first line it hands the new reader is the
/// gap line counting them, before the next record. Across both readers, the records present
/// plus the gaps' counts are every decision taken, and the sequence numbers missing are
/// exactly as many as the gaps count.
#[tokio::test]
async fn a_sink_that_refuses_writes_loses_counted_records_then_recovers() {
    const FIRST: usize = 20;
    const LOST: usize = 30;
    const AFTER: usize = 10;
    let policy = sample_policy();
    let out = tempfile::tempdir().unwrap();
    let fifo = out.path().join("decisions.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");

    // The first reader takes the first records, then leaves (the server's open waits for it).
    let first_reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let file = std::fs::File::open(&fifo).unwrap();
            let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(file))
                .take(FIRST)
                .map(Result::unwrap)
                .collect();
            lines.join("\n")
        })
    };
    let sink = format!("file:{}", fifo.display());
    let server = Server::start_serving(policy.path(), &["--decision-records", &sink]).await;
    let client = AuthorizerClient::new(server.channel().await);
    let ask = |count: usize| {
        let mut client = client.clone();
        async move {
            for n in 0..count {
                let user = format!("user-{}", n % 7);
                client
                    .authorize(resource_request(&user, &[], "dev", "get", "pods"))
                    .await
                    .unwrap();
            }
        }
    };
    ask(FIRST).await;
    let first = tokio::task::spawn_blocking(move || first_reader.join().unwrap())
        .await
        .unwrap();

    // No reader: every record is refused, counted lost, none written; no decision waits.
    tokio::time::timeout(Duration::from_secs(60), ask(LOST))
        .await
        .expect("decisions waited on a refusing sink");
    let write_failed = r#"authzd_decision_records_dropped_total{reason="write_failed"}"#;
    let lost = eventually(
        Duration::from_secs(20),
        || format!("{LOST} records lost; stderr:\n{}", server.stderr()),
        || async {
            let lost = metric(server.addr, write_failed).await?;
            (lost >= LOST as f64).then_some(lost)
        },
    )
    .await;
    assert_eq!(lost, LOST as f64);
    assert_eq!(
        metric(server.addr, "authzd_decision_records_written_total").await,
        Some(FIRST as f64),
        "only the records the first reader took are counted written"
    );

    // A reader again: the writer's own retries hand it the gap line, then new records.
    let second_reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(&fifo).unwrap())
    };
    ask(AFTER).await;
    eventually(
        Duration::from_secs(20),
        || "the records after recovery written".into(),
        || async {
            let written = metric(server.addr, "authzd_decision_records_written_total").await?;
            (written == (FIRST + AFTER) as f64).then_some(())
        },
    )
    .await;
    drop(client);
    server.stop_gracefully().await;
    let second = tokio::task::spawn_blocking(move || second_reader.join().unwrap())
        .await
        .unwrap();

    let second_lines = read_stream(&second);
    assert!(
        matches!(&second_lines[0], Line::Gap { reason, dropped } if reason == "write_failed" && *dropped == LOST as u64),
        "the gap comes first: {second}"
    );
    let (mut present, mut gaps) = (Vec::new(), 0u64);
    for line in read_stream(&first).into_iter().chain(second_lines) {
        match line {
            Line::Decision(record) => present.push(record.seq),
            Line::Gap { dropped, .. } => gaps += dropped,
            Line::Other => panic!("an unknown line"),
        }
    }
    let taken = (FIRST + LOST + AFTER) as u64;
    assert_eq!(present.len(), FIRST + AFTER, "{first}\n{second}");
    assert_eq!(present.len() as u64 + gaps, taken);
    present.sort_unstable();
    let missing = (0..taken).filter(|seq| present.binary_search(seq).is_err());
    assert_eq!(
        missing.count() as u64,
        gaps,
        "the gap counts exactly what is missing"
    );
}
