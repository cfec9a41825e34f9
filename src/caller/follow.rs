//! Keeps a [`LocalCache`] following the server: one `WatchInvalidations` stream at a time,
//! re-opened after a break (with backoff), giving the epoch and revision the cache holds so
//! that the server sends exactly what changed since, or starts it over.
//!
//! Every fifth of `--max-staleness` it sends a probe, noting when; the heartbeat answering
//! probe `n` renews the cache's proof until that instant plus `--max-staleness` less the
//! server's own proof age. Each invalidation is applied before the next message is read, and
//! confirmed to the server, which a write's acknowledgement waits for.

use std::collections::VecDeque;
use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::InterceptedService;
use tonic::transport::Channel;

use super::connect::Credentials;
use super::local::LocalCache;
use crate::policy::impact::Impact;
use crate::proto;
use crate::proto::authorizer_client::AuthorizerClient;

type Authorizer = AuthorizerClient<InterceptedService<Channel, Credentials>>;

/// Probes answered at most this long ago are remembered (older heartbeats renew nothing).
const PROBES_KEPT: usize = 32;

/// Follows the server until the cache is dropped (with the last clone of its client): the
/// cache is held only while a message is handled, so a stream that stays up does not keep it
/// alive, and the next probe tick after the drop ends the stream.
pub(super) async fn run(local: Weak<LocalCache>, mut authorizer: Authorizer) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if local.strong_count() == 0 {
            return;
        }
        let followed = follow_once(&local, &mut authorizer).await;
        if let Some(cache) = local.upgrade() {
            cache.fence();
        }
        match followed {
            // A stream that carried heartbeats broke: retry soon.
            Ok(true) => backoff = Duration::from_millis(50),
            Ok(false) | Err(_) => backoff = (backoff * 2).min(Duration::from_secs(2)),
        }
        if let Err(error) = &followed {
            tracing::debug!(%error, "invalidation stream ended; fenced until it is back");
        }
        tokio::time::sleep(backoff).await;
    }
}

/// One stream, until it breaks. `Ok(true)` when it renewed the proof at least once.
async fn follow_once(
    cache: &Weak<LocalCache>,
    authorizer: &mut Authorizer,
) -> Result<bool, tonic::Status> {
    let Some(local) = cache.upgrade() else {
        return Ok(false);
    };
    let (epoch, held) = local.held();
    let (outgoing, requests) = mpsc::channel(16);
    let first = proto::InvalidationsRequest {
        subscriber_id: local.config().subscriber_id.clone(),
        epoch,
        held_revision: held,
        ..Default::default()
    };
    let _ = outgoing.send(first).await;
    let mut events = authorizer
        .watch_invalidations(ReceiverStream::new(requests))
        .await?
        .into_inner();
    let max_staleness = local.config().max_staleness;
    drop(local);
    let mut probe_every = max_staleness / 5;
    let mut ticker = tokio::time::interval(probe_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probes: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut next_probe = 1u64;
    let mut renewed = false;
    loop {
        enum Next {
            Probe,
            Event(Option<proto::InvalidationEvent>),
        }
        let next = tokio::select! {
            _ = ticker.tick() => Next::Probe,
            event = events.message() => Next::Event(event?),
        };
        let Some(local) = cache.upgrade() else {
            return Ok(renewed);
        };
        match next {
            Next::Probe => {
                let (_, applied) = local.held();
                probes.push_back((next_probe, Instant::now()));
                if probes.len() > PROBES_KEPT {
                    probes.pop_front();
                }
                let probe = proto::InvalidationsRequest {
                    probe: next_probe,
                    applied_revision: applied,
                    ..Default::default()
                };
                next_probe += 1;
                if outgoing.send(probe).await.is_err() {
                    return Ok(renewed);
                }
            }
            Next::Event(event) => {
                let Some(event) = event else {
                    return Ok(renewed);
                };
                match event.event {
                    Some(proto::invalidation_event::Event::Invalidation(wire)) => {
                        let impact =
                            Impact::from_keys(wire.everything, wire.cluster, wire.namespaced);
                        local.apply(event.epoch, event.revision, &impact);
                        let confirm = proto::InvalidationsRequest {
                            applied_revision: event.revision,
                            ..Default::default()
                        };
                        if outgoing.send(confirm).await.is_err() {
                            return Ok(renewed);
                        }
                    }
                    Some(proto::invalidation_event::Event::Heartbeat(beat)) => {
                        let server_max = Duration::from_micros(beat.max_staleness_micros);
                        let max = local.config().max_staleness.min(server_max);
                        // Probe as often as the shorter of the two asks.
                        if max / 5 < probe_every && !max.is_zero() {
                            probe_every = max / 5;
                            ticker = tokio::time::interval(probe_every);
                            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        }
                        let sent = probes
                            .iter()
                            .find(|(n, _)| *n == beat.probe)
                            .map(|(_, at)| *at);
                        // A heartbeat of another epoch than the changes applied proves nothing.
                        let (epoch, _) = local.held();
                        if let (true, Some(sent), true) = (beat.proven, sent, epoch == event.epoch)
                        {
                            let age = Duration::from_micros(beat.proof_age_micros);
                            if let Some(until) = (sent + max).checked_sub(age) {
                                local.renew(until);
                                renewed = true;
                            }
                        }
                    }
                    None => {}
                }
            }
        }
    }
}
