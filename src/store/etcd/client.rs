//! A small etcd v3 client: the calls the etcd policy store makes (range, transaction, watch,
//! leases), over the API subset in `proto/third_party/etcd/kv.proto`, with its own endpoint
//! failover.
//!
//! Failover is ours because a balanced channel keeps routing to a dead or frozen endpoint
//! (etcd-client's issue #39, <https://github.com/etcdv3/etcd-client/issues/39>): one endpoint is
//! active at a time; a call that fails for a transport reason (unreachable, timed out) marks it
//! failed and the next call connects to the next endpoint in order. Reads are retried on the
//! other endpoints; a transaction is not (its outcome is unknown: the caller says
//! `UNAVAILABLE`, and retrying it is safe because every write compares the revision it
//! validated against).

use std::sync::Mutex;
use std::time::Duration;

use thiserror::Error;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub mod rpc {
    #![allow(clippy::all, clippy::pedantic, clippy::nursery, missing_docs)]
    tonic::include_proto!("etcdserverpb");
}

use rpc::kv_client::KvClient;
use rpc::lease_client::LeaseClient;
use rpc::watch_client::WatchClient;

/// How to reach the etcd cluster (`--etcd-servers`, `--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile`, as kube-apiserver names them).
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    /// Connecting to one endpoint, and any unary call, gives up after this long.
    pub timeout: Duration,
}

#[derive(Debug, Error)]
pub enum EtcdError {
    /// No endpoint answered, or the call's outcome is unknown.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// etcd answered with an error of its own.
    #[error("etcd refused the request: {0}")]
    Refused(String),
    #[error("etcd TLS configuration: {0}")]
    Tls(String),
}

/// The largest response read from etcd: a page of a listing, or a watch response catching up
/// (etcd sends many revisions at once to a watcher that is behind; tonic's default is 4 MiB).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Whether a failed call says nothing about etcd's state (the endpoint is unreachable, frozen
/// or lost its leader): the next endpoint may do better.
fn is_transport(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unknown
            // tonic's own request timeout ("Timeout expired").
            | tonic::Code::Cancelled
    ) || status.message().contains("leader")
}

struct Active {
    index: usize,
    channel: Option<Channel>,
}

pub struct EtcdClient {
    config: EtcdConfig,
    tls: Option<ClientTlsConfig>,
    active: Mutex<Active>,
}

impl EtcdClient {
    /// A client over `config`; connects on first use. Fails only on unreadable TLS files.
    pub fn new(config: EtcdConfig) -> Result<Self, EtcdError> {
        let tls = tls_config(&config)?;
        Ok(Self {
            config,
            tls,
            active: Mutex::new(Active {
                index: 0,
                channel: None,
            }),
        })
    }

    /// The endpoint calls go to now.
    pub fn active_endpoint(&self) -> String {
        let index = self.active.lock().map_or(0, |a| a.index);
        self.config
            .endpoints
            .get(index)
            .cloned()
            .unwrap_or_default()
    }

    pub fn endpoints(&self) -> &[String] {
        &self.config.endpoints
    }

    /// The channel to the active endpoint, connecting it (and, when it does not answer, the
    /// ones after it, each once) if needed.
    async fn channel(&self) -> Result<(usize, Channel), EtcdError> {
        let (start, existing) = {
            let active = self
                .active
                .lock()
                .map_err(|_| EtcdError::Unavailable("client state poisoned".into()))?;
            (active.index, active.channel.clone())
        };
        if let Some(channel) = existing {
            return Ok((start, channel));
        }
        let count = self.config.endpoints.len().max(1);
        let mut last = String::from("no --etcd-servers given");
        for step in 0..count {
            let index = (start + step) % count;
            let Some(url) = self.config.endpoints.get(index) else {
                break;
            };
            match self.connect(url).await {
                Ok(channel) => {
                    if let Ok(mut active) = self.active.lock() {
                        active.index = index;
                        active.channel = Some(channel.clone());
                    }
                    if step > 0 {
                        tracing::warn!(endpoint = %url, "etcd: failed over");
                    }
                    return Ok((index, channel));
                }
                Err(error) => last = format!("{url}: {error}"),
            }
        }
        Err(EtcdError::Unavailable(last))
    }

    async fn connect(&self, url: &str) -> Result<Channel, String> {
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| e.to_string())?
            .connect_timeout(self.config.timeout)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(self.config.timeout)
            .keep_alive_while_idle(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|e| e.to_string())?;
        }
        endpoint.connect().await.map_err(|e| {
            // The transport error's source says why (refused, timed out, TLS).
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            message
        })
    }

    /// Endpoint `index` failed for a transport reason (or its watch went silent): the next
    /// call tries the next one. Only if `index` is still the active endpoint: the calls of
    /// several tasks to a frozen member fail at about the same time, and each failure must not
    /// move the client once more (past the good endpoint another task already moved to, and
    /// back to the frozen one).
    pub fn fail_over_from(&self, index: usize) {
        if let Ok(mut active) = self.active.lock() {
            if active.index == index {
                active.channel = None;
                active.index = (index + 1) % self.config.endpoints.len().max(1);
            }
        }
    }

    fn refused(&self, status: tonic::Status, index: usize) -> EtcdError {
        if is_transport(&status) {
            self.fail_over_from(index);
            let url = self.config.endpoints.get(index).map_or("", String::as_str);
            EtcdError::Unavailable(format!("{url}: {}", status.message()))
        } else {
            EtcdError::Refused(status.message().to_string())
        }
    }

    /// A read, retried on every endpoint in turn while the failure is a transport one.
    pub async fn range(&self, request: rpc::RangeRequest) -> Result<rpc::RangeResponse, EtcdError> {
        let mut last = None;
        for _ in 0..self.config.endpoints.len().max(1) {
            let (index, channel) = self.channel().await?;
            let mut kv = KvClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
            let mut call = tonic::Request::new(request.clone());
            call.set_timeout(self.config.timeout);
            match kv.range(call).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => match self.refused(status, index) {
                    error @ EtcdError::Unavailable(_) => last = Some(error),
                    error => return Err(error),
                },
            }
        }
        Err(last.unwrap_or_else(|| EtcdError::Unavailable("no endpoint".into())))
    }

    /// A transaction, once: a transport failure leaves its outcome unknown.
    pub async fn txn(&self, request: rpc::TxnRequest) -> Result<rpc::TxnResponse, EtcdError> {
        let (index, channel) = self.channel().await?;
        let mut kv = KvClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        let mut call = tonic::Request::new(request);
        call.set_timeout(self.config.timeout);
        kv.txn(call)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| self.refused(status, index))
    }

    /// Compacts etcd's history up to `revision` (operators run etcd's auto-compaction; the
    /// tests call this to compact under a replica whose watch is behind).
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let (index, channel) = self.channel().await?;
        let mut kv = KvClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        let mut call = tonic::Request::new(rpc::CompactionRequest {
            revision,
            physical: true,
        });
        call.set_timeout(self.config.timeout);
        kv.compact(call)
            .await
            .map(|_| ())
            .map_err(|status| self.refused(status, index))
    }

    /// A watch stream with one watcher created by `create`, and the index of the endpoint it
    /// streams from (for [`Self::fail_over_from`] when it goes silent).
    pub async fn watch(
        &self,
        create: rpc::WatchCreateRequest,
    ) -> Result<
        (
            tokio::sync::mpsc::Sender<rpc::WatchRequest>,
            tonic::Streaming<rpc::WatchResponse>,
            usize,
        ),
        EtcdError,
    > {
        let (index, channel) = self.channel().await?;
        let mut watch = WatchClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(rpc::WatchRequest {
            request_union: Some(rpc::watch_request::RequestUnion::CreateRequest(create)),
        })
        .await
        .map_err(|_| EtcdError::Unavailable("watch request channel closed".into()))?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let response = watch
            .watch(stream)
            .await
            .map_err(|status| self.refused(status, index))?;
        Ok((tx, response.into_inner(), index))
    }

    /// A lease of `ttl` seconds.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let (index, channel) = self.channel().await?;
        let mut lease = LeaseClient::new(channel);
        let mut call = tonic::Request::new(rpc::LeaseGrantRequest { ttl, id: 0 });
        call.set_timeout(self.config.timeout);
        let response = lease
            .lease_grant(call)
            .await
            .map_err(|status| self.refused(status, index))?
            .into_inner();
        if !response.error.is_empty() {
            return Err(EtcdError::Refused(response.error));
        }
        Ok(response.id)
    }

    /// Keeps `id` alive once; `false` when etcd says it has expired.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<bool, EtcdError> {
        use tokio_stream::StreamExt;
        let (index, channel) = self.channel().await?;
        let mut lease = LeaseClient::new(channel);
        let request = tokio_stream::once(rpc::LeaseKeepAliveRequest { id });
        let mut call = tonic::Request::new(request);
        call.set_timeout(self.config.timeout);
        let mut responses = lease
            .lease_keep_alive(call)
            .await
            .map_err(|status| self.refused(status, index))?
            .into_inner();
        match responses.next().await {
            Some(Ok(response)) => Ok(response.ttl > 0),
            Some(Err(status)) => Err(self.refused(status, index)),
            None => Err(EtcdError::Unavailable(
                "lease keep-alive stream ended".into(),
            )),
        }
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), EtcdError> {
        let (index, channel) = self.channel().await?;
        let mut lease = LeaseClient::new(channel);
        let mut call = tonic::Request::new(rpc::LeaseRevokeRequest { id });
        call.set_timeout(self.config.timeout);
        lease
            .lease_revoke(call)
            .await
            .map(|_| ())
            .map_err(|status| self.refused(status, index))
    }
}

fn tls_config(config: &EtcdConfig) -> Result<Option<ClientTlsConfig>, EtcdError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| EtcdError::Tls(format!("cannot read {}: {e}", path.display())))
    };
    let https = config.endpoints.iter().any(|e| e.starts_with("https://"));
    if config.ca_file.is_none() && config.cert_file.is_none() && !https {
        return Ok(None);
    }
    let mut tls = ClientTlsConfig::new().with_enabled_roots();
    if let Some(ca) = &config.ca_file {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(EtcdError::Tls(
                "--etcd-certfile and --etcd-keyfile go together".into(),
            ))
        }
    }
    Ok(Some(tls))
}

/// The end of the range of keys starting with `prefix` (etcd's "prefix plus one").
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // A prefix of only 0xff bytes: every key from it on.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_prefix_plus_one() {
        assert_eq!(prefix_end(b"/authzd/"), b"/authzd0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
