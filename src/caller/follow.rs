//! Keeps a [`LocalCache`] following the server: one `WatchInvalidations` stream at a time,
//! re-opened after a break (with backoff), giving the epoch and revision the cache holds so
//! that the server sends exactly what changed since, or starts it over.
//!
//! Every fifth of `--max-staleness` it sends a probe, noting when; the heartbeat answering
//! probe `n` renews the cache's proof until that instant plus `--max-staleness` less the
//! server's own proof age. Each invalidation is applied before the next message is read, and
//! confirmed to the server, which a write's acknowledgement waits for.
//!
//! The stream is held to the client's [`Deadline`] as a call is: opening it, and each message
//! sent on it, must be done within the deadline, and a probe the server leaves unanswered that
//! long ends it ([`Silence`]). A frozen server then costs a broken stream and a new one (the
//! cache fenced in between, as after any break), not a follower waiting on it for ever. The
//! cache's exactness does not rest on this: its proof runs out by itself (`local` module docs).

use std::collections::VecDeque;
use std::sync::Weak;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::InterceptedService;
use tonic::transport::Channel;

use super::connect::Credentials;
use super::deadline::{format_duration, Deadline};
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
pub(super) async fn run(local: Weak<LocalCache>, mut authorizer: Authorizer, deadline: Deadline) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if local.strong_count() == 0 {
            return;
        }
        let followed = follow_once(&local, &mut authorizer, &deadline).await;
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
    deadline: &Deadline,
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
    // The stream is not told the deadline (the server would end it then); only its opening is
    // bounded by it.
    let opening = authorizer.watch_invalidations(ReceiverStream::new(requests));
    let mut events = deadline
        .bound(async { Ok(opening.await?.into_inner()) })
        .await?;
    let max_staleness = local.config().max_staleness;
    drop(local);
    let mut probe_every = max_staleness / 5;
    let mut ticker = tokio::time::interval(probe_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probes: VecDeque<(u64, Instant)> = VecDeque::new();
    let mut next_probe = 1u64;
    let mut silence = Silence::new(deadline.timeout());
    let mut renewed = false;
    // Each message the server is sent must be taken within the deadline: a server that reads
    // nothing fills the stream's window, then this queue.
    let send = |message: proto::InvalidationsRequest| {
        let outgoing = outgoing.clone();
        async move {
            match tokio::time::timeout(deadline.timeout(), outgoing.send(message)).await {
                Ok(Ok(())) => Ok(true),
                // The stream is gone: its end is read next.
                Ok(Err(_)) => Ok(false),
                Err(_) => Err(deadline.exceeded()),
            }
        }
    };
    loop {
        enum Next {
            Probe,
            Event(Option<proto::InvalidationEvent>),
        }
        let unanswered = silence.due();
        let next = tokio::select! {
            _ = ticker.tick() => Next::Probe,
            event = events.message() => Next::Event(event?),
            () = until(unanswered) => return Err(silence.broken(deadline)),
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
                silence.probed(tokio::time::Instant::now());
                next_probe += 1;
                if !send(probe).await? {
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
                        if !send(confirm).await? {
                            return Ok(renewed);
                        }
                    }
                    Some(proto::invalidation_event::Event::Heartbeat(beat)) => {
                        silence.answered(beat.probe, next_probe - 1, tokio::time::Instant::now());
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

/// Sleeps until `due`, or for ever without one.
async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// How long the server has left a probe unanswered: past the deadline, the stream is taken as
/// broken. The server answers each probe as soon as it has sent the changes before it
/// (`serving::subscribers`), in order, so a live server leaves none waiting for long.
#[derive(Debug)]
struct Silence {
    timeout: Duration,
    /// Since when a probe has waited for its answer (`None`: every probe is answered).
    waiting_since: Option<tokio::time::Instant>,
}

impl Silence {
    fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            waiting_since: None,
        }
    }

    /// A probe was sent at `now`.
    fn probed(&mut self, now: tokio::time::Instant) {
        self.waiting_since.get_or_insert(now);
    }

    /// The heartbeat answering probe `answered` came at `now`, `last` being the last probe
    /// sent: the server is alive, and the probes after `answered` wait from now.
    fn answered(&mut self, answered: u64, last: u64, now: tokio::time::Instant) {
        self.waiting_since = (answered < last).then_some(now);
    }

    /// When the stream is taken as broken if no heartbeat comes.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.waiting_since.map(|since| since + self.timeout)
    }

    fn broken(&self, deadline: &Deadline) -> tonic::Status {
        tonic::Status::deadline_exceeded(format!(
            "no heartbeat from {} within {}: the invalidation stream is taken as broken",
            deadline.server(),
            format_duration(self.timeout)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe left unanswered for the deadline breaks the stream; an answer to the last probe
    /// clears it, and one to an earlier probe restarts the wait for the later ones.
    #[test]
    fn a_probe_unanswered_for_the_deadline_breaks_the_stream() {
        let start = tokio::time::Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        let mut silence = Silence::new(Duration::from_secs(2));
        assert_eq!(silence.due(), None, "nothing asked, nothing awaited");
        silence.probed(at(0));
        silence.probed(at(200));
        assert_eq!(
            silence.due(),
            Some(at(2000)),
            "from the first unanswered probe"
        );
        silence.answered(1, 2, at(300));
        assert_eq!(silence.due(), Some(at(2300)), "probe 2 still waits");
        silence.answered(2, 2, at(400));
        assert_eq!(silence.due(), None);
        silence.probed(at(600));
        assert_eq!(silence.due(), Some(at(2600)));
    }
}
