//! What every request learns about the connection it arrived on, and the per-connection
//! handshake seam.

use std::net::SocketAddr;
use std::sync::Arc;

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

use super::tls::TlsServer;
use super::ListenAddr;

/// The connection a request arrived on. Inserted into every request's `http::Extensions`
/// (and so into every `tonic::Request`'s extensions) by the accept loop.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The bound address of the listener that accepted the connection (with the real port
    /// when `:0` was asked for).
    pub listener: Arc<ListenAddr>,
    /// The caller's address; `None` on a Unix socket.
    pub remote_addr: Option<SocketAddr>,
    /// Our end of a TCP connection; `None` on a Unix socket.
    pub local_addr: Option<SocketAddr>,
    /// The identity from a verified client certificate. Always `None` until a TLS handshake
    /// in [`handshake`] fills it; authenticators must treat `None` as "no certificate".
    pub client_identity: Option<ClientIdentity>,
}

/// A verified client certificate's subject as the certificate states it: every CommonName and
/// every Organization attribute, in the order of its RDN sequence. The transport only reads;
/// which of them name the caller, and whether a subject is too ambiguous to name anyone, is
/// authentication's to decide (`api::authn::certificate_user`), so every one is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientIdentity {
    pub common_names: Vec<String>,
    pub organizations: Vec<String>,
    /// CommonName or Organization attributes whose value is not text this reader reads (a
    /// string type other than UTF8String, PrintableString, IA5String or NumericString, or bytes
    /// invalid for their type), each as `CN`/`O` and what was found, e.g. `O (BmpString)`.
    pub unreadable: Vec<String>,
}

/// Any byte stream a connection can run over (TCP, Unix socket, later TLS on top of either).
pub trait ConnectionIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ConnectionIo for T {}

pub type BoxedIo = Box<dyn ConnectionIo>;

/// The per-connection handshake, run on the connection's own task (never on the accept loop,
/// so a slow peer cannot stall accepting). Without TLS it passes the stream through; with TLS
/// it wraps `io` in the TLS stream and fills `info.client_identity` from a verified client
/// certificate. An error drops the connection (a failed or timed-out handshake).
pub async fn handshake(
    io: BoxedIo,
    mut info: ConnectionInfo,
    tls: Option<&TlsServer>,
) -> std::io::Result<(BoxedIo, ConnectionInfo)> {
    let Some(tls) = tls else {
        return Ok((io, info));
    };
    let (stream, identity) = tls.accept(io).await?;
    info.client_identity = identity;
    Ok((Box::new(stream), info))
}

/// A connection's byte stream as hyper sees it: small writes are gathered and go out
/// together at the next flush, a large one goes out with what was gathered, and hyper is told
/// the stream takes no vectored writes.
///
/// Why: h2 copies a DATA frame's payload into its own write buffer only when the payload is
/// below its "chain threshold"; a larger payload is chained behind the buffer, and until the
/// chain is written h2 buffers no further frame. The threshold is 256 bytes over a stream that
/// takes vectored writes (TCP does) and 1 KiB over one that does not. An Authorize answer
/// naming its rule and the rule's source (a file path and line, an etcd key) is often just over
/// 256 bytes, and each such answer then cost a system call of its own, where smaller answers
/// share one per batch of streams the connection finished together: over the same load, etcd
/// mode's longer sources made 0.24–0.28 writes per decision against directory mode's
/// 0.18–0.20, and its throughput fell behind with them (BENCHMARKS.md, "Replicas on etcd").
/// Told the stream takes no vectored writes, h2 copies answers under 1 KiB into its buffer; a
/// larger payload (a batch answer) is then written by h2 as two plain writes, its buffer and
/// the payload, which this stream turns back into one vectored write of both.
pub struct CoalescedWrites<T> {
    io: T,
    /// Bytes accepted but not yet written: `pending[written..]` remain.
    pending: Vec<u8>,
    written: usize,
}

/// A write of at most this many bytes is copied and gathered (when it fits, see below).
const GATHER_AT_MOST: usize = 4 * 1024;
/// At most this many bytes are gathered before they are written.
const PENDING_AT_MOST: usize = 16 * 1024;

impl<T> CoalescedWrites<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> CoalescedWrites<T> {
    /// Writes what is gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.len() <= GATHER_AT_MOST && this.pending.len() + buf.len() <= PENDING_AT_MOST {
            this.pending.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        // Too large to gather: what is pending and `buf` go out together, in one vectored
        // write when the stream takes it (a stream that does not writes the first slice).
        loop {
            let rest = this.pending.len() - this.written;
            if rest == 0 {
                this.pending.clear();
                this.written = 0;
                return Pin::new(&mut this.io).poll_write(cx, buf);
            }
            let slices = [
                io::IoSlice::new(&this.pending[this.written..]),
                io::IoSlice::new(buf),
            ];
            let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n > rest {
                this.pending.clear();
                this.written = 0;
                return Poll::Ready(Ok(n - rest));
            }
            // Only (some of) the pending bytes went: go on, `buf` is not taken yet.
            this.written += n;
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use proptest::prelude::*;
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    /// What reached the stream beneath, and in how many calls.
    #[derive(Default)]
    struct Received {
        bytes: Vec<u8>,
        calls: usize,
    }

    /// A stream that takes vectored writes, as TCP does, accepts at most the next of `takes`
    /// bytes per call (cycling), and answers every `pending_every`-th call "not now" (0:
    /// never; 1 would never take anything).
    struct Scripted {
        received: Arc<Mutex<Received>>,
        takes: Vec<usize>,
        pending_every: usize,
        polls: usize,
    }

    impl Scripted {
        fn poll_take(&mut self, cx: &mut Context<'_>, slices: &[&[u8]]) -> Poll<io::Result<usize>> {
            self.polls += 1;
            if self.pending_every > 0 && self.polls.is_multiple_of(self.pending_every) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let mut room = self.takes[self.polls % self.takes.len()];
            let mut received = self.received.lock().unwrap();
            received.calls += 1;
            let mut taken = 0;
            for slice in slices {
                let n = slice.len().min(room);
                received.bytes.extend_from_slice(&slice[..n]);
                taken += n;
                room -= n;
            }
            Poll::Ready(Ok(taken))
        }
    }

    impl AsyncWrite for Scripted {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().poll_take(cx, &[buf])
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            self.get_mut().poll_take(cx, &slices)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn scripted(
        takes: Vec<usize>,
        pending_every: usize,
    ) -> (CoalescedWrites<Scripted>, Arc<Mutex<Received>>) {
        let received = Arc::new(Mutex::new(Received::default()));
        let stream = Scripted {
            received: Arc::clone(&received),
            takes,
            pending_every,
            polls: 0,
        };
        (CoalescedWrites::new(stream), received)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn a_frame_and_a_large_payload_go_out_in_one_write_at_the_flush() {
        runtime().block_on(async {
            let (mut stream, received) = scripted(vec![usize::MAX], 0);
            assert!(
                !stream.is_write_vectored(),
                "h2 must copy answers under 1 KiB"
            );
            // What h2 writes for a chained payload: its buffer (frame heads, small frames),
            // then the payload.
            stream.write_all(&[1; 300]).await.unwrap();
            stream.write_all(&[2; 9000]).await.unwrap();
            stream.write_all(&[3; 100]).await.unwrap();
            stream.flush().await.unwrap();
            let received = received.lock().unwrap();
            assert_eq!(
                received.calls, 2,
                "the payload with what preceded it, then the tail"
            );
            assert_eq!(received.bytes.len(), 9400);
        });
    }

    #[test]
    fn small_writes_wait_for_the_flush() {
        runtime().block_on(async {
            let (mut stream, received) = scripted(vec![usize::MAX], 0);
            for _ in 0..20 {
                stream.write_all(&[7; 280]).await.unwrap();
            }
            assert_eq!(received.lock().unwrap().calls, 0);
            stream.flush().await.unwrap();
            let received = received.lock().unwrap();
            assert_eq!(received.calls, 1);
            assert_eq!(received.bytes, vec![7; 5600]);
        });
    }

    proptest! {
        /// Whatever the sizes, partial writes and "not now"s, every byte arrives once and in
        /// order, and a flush leaves nothing behind.
        #[test]
        fn bytes_arrive_in_order_and_flushes_leave_nothing_behind(
            writes in prop::collection::vec((1usize..20_000, any::<bool>()), 1..40),
            takes in prop::collection::vec(1usize..20_000, 1..5),
            pending_every in prop_oneof![Just(0usize), 2usize..6],
        ) {
            runtime().block_on(async {
                let (mut stream, received) = scripted(takes, pending_every);
                let mut sent = Vec::new();
                for (i, (len, flush)) in writes.iter().enumerate() {
                    let chunk: Vec<u8> = (0..*len).map(|j| (i * 31 + j) as u8).collect();
                    stream.write_all(&chunk).await.unwrap();
                    sent.extend_from_slice(&chunk);
                    if *flush {
                        stream.flush().await.unwrap();
                        assert_eq!(received.lock().unwrap().bytes, sent);
                    }
                }
                stream.shutdown().await.unwrap();
                assert_eq!(received.lock().unwrap().bytes, sent);
            });
        }
    }
}
