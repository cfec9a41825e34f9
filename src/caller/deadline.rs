//! Every call to the server carries a deadline, in two forms: the server is told it
//! (`grpc-timeout`, which it reads to stop waiting for a `min_revision` before the caller
//! gives up: `serving::admission`), and a local timer bounds the caller's own wait, because a
//! server that is frozen (SIGSTOP, a paused VM, a black-holed network) reads nothing, the
//! deadline included. The local timer covers the whole call — waiting for the connection,
//! the answer's headers and its body — where tonic's own only covers the headers.
//!
//! A call past its deadline fails with `DEADLINE_EXCEEDED` naming the server and the deadline
//! (`no answer from http://10.0.0.7:50051 within 2s`); docs/caller-cache.md §5 says why the
//! default is [`DEFAULT_TIMEOUT`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
use tonic::Status;

/// How long connecting, and then each call, may take unless the caller says otherwise:
/// docs/caller-cache.md §5 says why.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One server's deadline for each call.
#[derive(Clone, Debug)]
pub struct Deadline {
    /// The server as the caller named it, for the error.
    server: Arc<str>,
    timeout: Duration,
    /// `grpc-timeout`'s value, spelled once (tonic spells it anew on every `set_timeout`).
    header: Option<MetadataValue<Ascii>>,
}

impl Deadline {
    pub fn new(server: &str, timeout: Duration) -> Self {
        let mut spelled = tonic::Request::new(());
        spelled.set_timeout(timeout);
        Self {
            server: server.into(),
            timeout,
            header: spelled.metadata().get(grpc_timeout()).cloned(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// `message` as a request that tells the server this deadline.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        self.tell(&mut request);
        request
    }

    /// Tells the server this deadline on `request` (`grpc-timeout`).
    pub fn tell<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(value) = &self.header {
            request.metadata_mut().insert(grpc_timeout(), value.clone());
        }
    }

    /// `call`, failed with [`Self::exceeded`] when it has not finished within the deadline.
    pub async fn bound<T>(
        &self,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Err(status)) if tonic_timer_expired(&status) => Err(self.exceeded()),
            Ok(answered) => answered,
            Err(_) => Err(self.exceeded()),
        }
    }

    /// `DEADLINE_EXCEEDED`: no answer from the server within the deadline.
    pub fn exceeded(&self) -> Status {
        Status::deadline_exceeded(format!(
            "no answer from {} within {}",
            self.server,
            format_duration(self.timeout)
        ))
    }
}

/// Whether `status` is tonic's own timer on the `grpc-timeout` a request carries: the same
/// deadline, which tonic reports as `CANCELLED: Timeout expired` when its timer fires before
/// ours (`Status::from_error` in tonic's `status.rs`).
fn tonic_timer_expired(status: &Status) -> bool {
    let mut cause = std::error::Error::source(status);
    while let Some(error) = cause {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        cause = error.source();
    }
    false
}

fn grpc_timeout() -> MetadataKey<Ascii> {
    MetadataKey::from_static("grpc-timeout")
}

/// `10s`, `250ms`, `1.500s`: how a deadline is named in messages.
pub fn format_duration(duration: Duration) -> String {
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

    #[test]
    fn durations_are_named_as_the_flags_spell_them() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.500s");
    }

    /// The server reads the deadline it is told (`api::grpc::request_deadline`).
    #[test]
    fn the_server_is_told_the_deadline() {
        let deadline = Deadline::new("http://authzd:50051", Duration::from_millis(2500));
        let request = deadline.request(());
        assert_eq!(
            crate::api::grpc::request_deadline(&request),
            Some(Duration::from_millis(2500))
        );
    }

    /// A call that does not finish is failed at the deadline, naming the server and the
    /// deadline; one that finishes in time is answered as it is.
    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_fails_naming_server_and_deadline() {
        let deadline = Deadline::new("http://authzd:50051", Duration::from_secs(2));
        let started = tokio::time::Instant::now();
        let never = deadline
            .bound(std::future::pending::<Result<(), Status>>())
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(never.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(
            never.message(),
            "no answer from http://authzd:50051 within 2s"
        );
        let answered = deadline.bound(async { Ok::<_, Status>(7) }).await;
        assert_eq!(answered.unwrap(), 7);
        let refused = deadline
            .bound(async { Err::<(), _>(Status::not_found("no such role")) })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::NotFound);
    }

    /// tonic's timer on the same deadline, firing first, is reported as ours.
    #[tokio::test]
    async fn tonics_own_timer_reads_as_the_deadline() {
        let deadline = Deadline::new("http://authzd:50051", Duration::from_secs(2));
        let tonics = Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(tonics.code(), tonic::Code::Cancelled, "{tonics:?}");
        let reported = deadline.bound(async { Err::<(), _>(tonics) }).await;
        let reported = reported.unwrap_err();
        assert_eq!(reported.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(
            reported.message(),
            "no answer from http://authzd:50051 within 2s"
        );
    }
}
