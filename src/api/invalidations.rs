//! `Authorizer/WatchInvalidations`: a caller's cache following this server
//! (docs/caller-cache.md). Conversion only: the subscriber's messages become calls on its
//! [`Subscription`] (confirmations, probes), and the subscription's events become messages.
//! What is sent, in which order, and when a write may be acknowledged is the serving core's
//! (`serving::subscribers`).

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::api::error::{ApiError, Invalid};
use crate::proto;
use crate::serving::subscribers::{Event, Subscription};
use crate::serving::{Caller, ServingState};

/// The events of one subscription, as tonic streams them.
pub type InvalidationStream =
    Pin<Box<dyn Stream<Item = Result<proto::InvalidationEvent, Status>> + Send>>;

/// Events buffered for a subscriber that reads slowly. Past this the sender waits (the
/// subscriber's proof meanwhile expires, and writes stop waiting for it); changes published
/// meanwhile are kept by the serving core, not here.
const EVENTS_BUFFERED: usize = 64;

/// Subscribes `caller` with the stream's first message and serves the stream until the
/// subscriber leaves or the server drains.
pub async fn watch(
    state: Arc<ServingState>,
    caller: Caller,
    mut incoming: Streaming<proto::InvalidationsRequest>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) -> Result<InvalidationStream, Status> {
    let first = incoming
        .message()
        .await?
        .ok_or_else(|| ApiError::invalid("subscriber_id", Invalid::Empty))?;
    // The id itself is checked by the serving core's `subscribe` (its one place).
    let mut subscription = state
        .subscribe(
            caller,
            first.subscriber_id.clone(),
            first.epoch,
            first.held_revision,
        )
        .await
        .map_err(ApiError::from)?;
    let (events, received) = mpsc::channel(EVENTS_BUFFERED);
    tokio::spawn(async move {
        let mut next = Some(first);
        loop {
            let out = match next.take() {
                Some(message) => answer(&state, &mut subscription, &message),
                None => tokio::select! {
                    message = incoming.message() => match message {
                        Ok(Some(message)) => answer(&state, &mut subscription, &message),
                        // The subscriber left (or its stream broke): the subscription's drop
                        // marks it gone.
                        Ok(None) | Err(_) => return,
                    },
                    () = subscription.next_change() => subscription.pending(),
                    _ = draining.wait_for(|draining| *draining) => return,
                    () = events.closed() => return,
                },
            };
            for event in out {
                let message = to_wire(subscription.epoch(), state.subscriber_staleness(), event);
                if events.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(received)))
}

/// What one subscriber message asks: a confirmation recorded, and a probe answered with the
/// changes still to send and a heartbeat.
fn answer(
    state: &ServingState,
    subscription: &mut Subscription,
    message: &proto::InvalidationsRequest,
) -> Vec<Event> {
    if message.applied_revision != 0 {
        subscription.confirm(message.applied_revision);
    }
    if message.probe == 0 {
        return subscription.pending();
    }
    subscription.heartbeat(message.probe, |revision| state.proof_age(revision))
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn to_wire(
    epoch: u64,
    max_staleness: std::time::Duration,
    event: Event,
) -> proto::InvalidationEvent {
    use proto::invalidation_event::Event as Wire;
    match event {
        Event::Invalidate { revision, impact } => {
            let (cluster, namespaced) = impact.keys();
            proto::InvalidationEvent {
                epoch,
                revision,
                event: Some(Wire::Invalidation(proto::Invalidation {
                    everything: impact.everything,
                    cluster: cluster.collect(),
                    namespaced: namespaced.collect(),
                })),
            }
        }
        Event::Heartbeat {
            revision,
            probe,
            proof_age,
        } => proto::InvalidationEvent {
            epoch,
            revision,
            event: Some(Wire::Heartbeat(proto::Heartbeat {
                probe,
                proven: proof_age.is_some(),
                proof_age_micros: proof_age.map_or(0, micros),
                max_staleness_micros: micros(max_staleness),
            })),
        },
    }
}
