//! The per-connection loop: read frames, run each request's first phase in arrival
//! order, await replies concurrently, write responses in arrival order.
//!
//! Why two phases: Kafka clients pipeline (librdkafka keeps up to 5 produce requests in
//! flight on its single connection per broker) and rely on the broker appending them in
//! the order sent. Phase one (ordering-critical work such as queueing an append, or
//! enqueueing a forward to another shard) runs before the next frame is read; phase two
//! (waiting for fdatasync, a long-poll fetch) runs concurrently with later requests.
//!
//! Back-pressure: a connection reads no further frame while `max_in_flight` of its
//! responses are pending, and reads no Produce body until the shard's `ProduceBudget` has
//! room for it; either way the socket is left unread and TCP slows the client down.
//!
//! Reads: a plaintext connection reads through glommio's receive buffer
//! (`READ_BUFFER_BYTES`), so a request that fits in it (length, api key and body) costs one
//! `recv` instead of three; a read at least that large bypasses the buffer into its frame.
//! So a connection holds at most `READ_BUFFER_BYTES` of bytes it has not framed yet beyond
//! what the budget accounts for. A TLS connection reads through its TLS layer's buffer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::{Preallocated, TcpStream};
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tracing::{debug, error, warn};

use crate::codec::{decode_request, encode_response, DecodeError, Request};
use crate::limits::ProduceBudget;
use crate::sasl::gate::{Answer, SaslGate};
use crate::sasl::{SaslConfig, ScramCredential, ScramMechanism};

/// The second phase of a request: resolves to the response, or `None` when the client
/// expects no response (Produce with acks=0).
pub type Reply = Pin<Box<dyn Future<Output = Option<ResponseKind>>>>;

/// What the binary plugs into the wire layer.
pub trait RequestHandler: 'static {
    /// The versions of `api_key` this broker serves, or `None` if it does not serve it.
    fn supported_versions(&self, api_key: ApiKey) -> Option<(i16, i16)>;
    /// ApiVersions response (error UNSUPPORTED_VERSION) for a client that asked with a
    /// version we do not serve; it is encoded as version 0, as Kafka does.
    fn unsupported_api_versions(&self) -> ResponseKind;
    /// Phase one of a request; see the module docs.
    fn handle(self: Rc<Self>, request: Request) -> impl Future<Output = Reply>;

    /// A request is done: its response was written (or, with no response, its reply
    /// resolved). `stages` says when each step ended. For latency probes; must be cheap.
    fn request_done(&self, _api_key: ApiKey, _stages: RequestStages) {}

    /// A request decoded with bytes left after its body, and is served as Kafka serves
    /// it (see `Request::trailing_bytes`). For a counter; must be cheap.
    fn request_with_trailing_bytes(&self, _api_key: ApiKey) {}

    /// The stored SCRAM credential of `user` for `mechanism`, for SASL listeners. Called
    /// on the connection's shard during a login: must read the shard's own copy.
    fn scram_credential(&self, _user: &str, _mechanism: ScramMechanism) -> Option<ScramCredential> {
        None
    }

    /// A SASL login completed, or failed (the connection then logs it and closes). For
    /// counters; must be cheap.
    fn authentication_done(&self, _succeeded: bool) {}

    /// Resolves when the broker is shutting down: the connection then reads no new
    /// frame, sends the responses of the requests it has read, and closes.
    fn stopping(&self) -> impl Future<Output = ()> {
        std::future::pending()
    }
}

/// When each step of one request ended, measured from the moment its frame was decoded:
/// the request path's part of the latency budget.
#[derive(Clone, Copy, Debug)]
pub struct RequestStages {
    /// Phase one done: for Produce, validated and queued on the owner's log.
    pub queued: Duration,
    /// Phase two done: the response is ready (Produce: durable; Fetch: its long poll
    /// ended).
    pub ready: Duration,
    /// The response was written to the socket (equal to `ready` with no response).
    pub written: Duration,
}

/// Bounds that keep one connection from holding unbounded resources.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Largest request frame accepted (Kafka's socket.request.max.bytes).
    pub max_frame_bytes: usize,
    /// Requests of one connection read and not yet answered; at the limit the connection
    /// reads no further frame until the oldest response is written.
    pub max_in_flight: usize,
    /// A connection with no complete frame for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_frame_bytes: 100 << 20,
            max_in_flight: 32,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

struct InFlight {
    /// When the request was decoded (its latency is measured from here).
    started: Instant,
    /// When phase one returned.
    queued: Instant,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    /// The response, and when it was ready.
    reply: glommio::Task<(Option<ResponseKind>, Instant)>,
    /// One of the connection's `max_in_flight` slots, free once the response is written.
    _slot: StaticPermit,
    /// A SASL token after SaslHandshake v0: written as a bare frame of its bytes.
    raw: bool,
}

/// The receive buffer of a plaintext connection (module docs, "Reads").
pub const READ_BUFFER_BYTES: usize = 8 << 10;

/// Serves one accepted plaintext connection until the peer closes it or sends a bad frame.
/// Produce requests take their bytes from `budget`, the shard's, until they are answered.
/// With `sasl` (a SASL_PLAINTEXT listener) the client must authenticate first.
pub async fn serve_connection<H: RequestHandler>(
    stream: TcpStream,
    handler: Rc<H>,
    limits: ConnectionLimits,
    budget: Rc<ProduceBudget>,
    sasl: Option<Rc<SaslConfig>>,
) -> io::Result<()> {
    let peer = prepare_socket(&stream, &limits)?;
    let stream = stream.buffered_with(Preallocated::new(READ_BUFFER_BYTES));
    serve_stream(stream, peer, None, handler, limits, budget, sasl).await
}

/// Socket options every Kafka connection gets, set before any byte is read (a TLS
/// handshake included); returns the peer's address.
pub(crate) fn prepare_socket(
    stream: &TcpStream,
    limits: &ConnectionLimits,
) -> io::Result<std::net::SocketAddr> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(limits.idle_timeout))?;
    Ok(stream.peer_addr()?)
}

/// The connection loop over any byte stream: monomorphized per stream type, so a
/// plaintext connection runs on the bare `TcpStream` (no TLS branch, no dynamic dispatch).
/// `principal` is the authenticated client (`User:...`), `None` for ANONYMOUS; with `sasl`
/// the client must authenticate first, and its SASL user becomes the principal.
pub(crate) async fn serve_stream<S, H>(
    stream: S,
    peer: std::net::SocketAddr,
    principal: Option<Rc<str>>,
    handler: Rc<H>,
    limits: ConnectionLimits,
    budget: Rc<ProduceBudget>,
    sasl: Option<Rc<SaslConfig>>,
) -> io::Result<()>
where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
    H: RequestHandler,
{
    let (reader, writer) = futures_lite::io::split(stream);
    let (queue, pending) = local_channel::new_bounded::<InFlight>(limits.max_in_flight.max(1));
    let writer_task = glommio::spawn_local(write_responses(writer, pending, handler.clone()));
    let trailing_bytes_logged = std::cell::Cell::new(false);
    let connection = Connection {
        handler,
        limits,
        budget,
        peer,
        principal: std::cell::RefCell::new(principal),
        trailing_bytes_logged,
        sasl: sasl.map(|config| SaslGate::new(config, peer)),
        closing: std::cell::Cell::new(false),
    };
    let read_result = connection.read_requests(reader, queue).await;
    if let Err(e) = &read_result {
        warn!(%peer, error = %e, "closing connection");
    } else {
        debug!(%peer, "connection closed by peer");
    }
    // The queue sender is gone: the writer drains what is in flight, then stops.
    let write_result = writer_task.await;
    read_result.and(write_result)
}

struct Connection<H> {
    handler: Rc<H>,
    limits: ConnectionLimits,
    budget: Rc<ProduceBudget>,
    peer: std::net::SocketAddr,
    principal: std::cell::RefCell<Option<Rc<str>>>,
    /// Whether a request with trailing bytes was logged (once per connection).
    trailing_bytes_logged: std::cell::Cell<bool>,
    /// On a SASL listener: the client's authentication state.
    sasl: Option<SaslGate>,
    /// Read no further frame: the last answer queued ends the connection (a SASL failure).
    closing: std::cell::Cell<bool>,
}

impl<H: RequestHandler> Connection<H> {
    async fn read_requests(
        &self,
        mut reader: impl futures_lite::AsyncRead + Unpin,
        queue: local_channel::LocalSender<InFlight>,
    ) -> io::Result<()> {
        let slots = Rc::new(Semaphore::new(self.limits.max_in_flight.max(1) as u64));
        loop {
            // Invariant 3: no further frame is read while every slot has a pending response.
            let slot = slots.acquire_static_permit(1).await.expect("never closed");
            let next = futures_lite::future::or(
                async { Some(self.read_frame_length(&mut reader).await) },
                async {
                    self.handler.stopping().await;
                    None
                },
            )
            .await;
            // Shutting down (`None`) or closed by the peer: no new request; the writer
            // drains those in flight.
            let Some(Some(len)) = next.transpose()? else { return Ok(()) };
            let (frame, produce_bytes) = self.read_frame(&mut reader, len).await?;
            let in_flight = self.start(frame, produce_bytes, slot).await?;
            if queue.send(in_flight).await.is_err() {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "response writer stopped"));
            }
            if self.closing.get() {
                return Ok(());
            }
        }
    }

    /// The next frame's length, or `None` when the peer closed the connection.
    async fn read_frame_length(
        &self,
        reader: &mut (impl futures_lite::AsyncRead + Unpin),
    ) -> io::Result<Option<usize>> {
        let mut len_bytes = [0u8; 4];
        match reader.read_exact(&mut len_bytes).await {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = i32::from_be_bytes(len_bytes);
        let max = match &self.sasl {
            Some(gate) if !gate.is_open() => {
                self.limits.max_frame_bytes.min(crate::sasl::MAX_UNAUTHENTICATED_FRAME_BYTES)
            }
            _ => self.limits.max_frame_bytes,
        };
        // Invariant 1: refuse before buffering.
        if len < 0 || len as usize > max {
            return Err(invalid(format!("frame of {len} bytes exceeds the limit of {max} bytes")));
        }
        Ok(Some(len as usize))
    }

    /// Reads a frame of `len` bytes. A Produce request reserves its bytes in the shard's
    /// budget before its body is read (or even allocated): while the budget is spent, the
    /// connection leaves its socket unread instead of buffering more.
    async fn read_frame(
        &self,
        reader: &mut (impl futures_lite::AsyncRead + Unpin),
        len: usize,
    ) -> io::Result<(Bytes, Option<StaticPermit>)> {
        let mut api_key = [0u8; 2];
        let head = len.min(api_key.len());
        reader.read_exact(&mut api_key[..head]).await?;
        let is_produce = head == 2 && i16::from_be_bytes(api_key) == ApiKey::Produce as i16;
        let produce_bytes = match is_produce {
            true => Some(self.budget.reserve(len).await),
            false => None,
        };
        let mut frame = BytesMut::zeroed(len);
        frame[..head].copy_from_slice(&api_key[..head]);
        reader.read_exact(&mut frame[head..]).await?;
        Ok((frame.freeze(), produce_bytes))
    }

    /// Decodes a frame and runs phase one of its request; phase two becomes a task. The
    /// produce bytes are given back when that task ends: the response is ready (or, for
    /// acks=0, the append is queued), whatever else is still ahead of it on this
    /// connection (a long-poll fetch must not hold the shard's produce budget).
    async fn start(
        &self,
        frame: Bytes,
        produce_bytes: Option<StaticPermit>,
        slot: StaticPermit,
    ) -> io::Result<InFlight> {
        let handler = &self.handler;
        let started = Instant::now();
        let gate = self.sasl.as_ref().filter(|gate| !gate.is_open());
        if let Some(gate) = gate.filter(|gate| gate.expects_raw_token()) {
            let answer = gate.raw_token(&**handler, frame).await;
            return Ok(self.answered(started, answer, slot));
        }
        match decode_request(frame, |k| handler.supported_versions(k)) {
            Ok(request) if gate.is_some() && request.api_key != ApiKey::ApiVersions => {
                let answer = gate.expect("checked").request(&**handler, request).await?;
                Ok(self.answered(started, answer, slot))
            }
            Ok(mut request) => {
                request.peer = Some(self.peer);
                request.principal = self.principal.borrow().clone();
                let api_key = request.api_key;
                let api_version = request.api_version;
                if request.trailing_bytes > 0 {
                    self.note_trailing_bytes(&request);
                }
                let correlation_id = request.header.correlation_id;
                // Which versions each client negotiates (docs/compatibility.md was built
                // from these lines): off unless the log level is debug.
                debug!(
                    peer = %self.peer,
                    api = ?api_key,
                    version = api_version,
                    client_id = request.header.client_id.as_deref().unwrap_or(""),
                    "request"
                );
                let reply = handler.clone().handle(request).await;
                let queued = Instant::now();
                let reply = glommio::spawn_local(async move {
                    let response = reply.await;
                    drop(produce_bytes);
                    (response, Instant::now())
                });
                Ok(InFlight {
                    started,
                    queued,
                    api_key,
                    api_version,
                    correlation_id,
                    reply,
                    _slot: slot,
                    raw: false,
                })
            }
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                let body = handler.unsupported_api_versions();
                let reply = glommio::spawn_local(async move { (Some(body), Instant::now()) });
                let api_key = ApiKey::ApiVersions;
                Ok(InFlight {
                    started,
                    queued: started,
                    api_key,
                    api_version: 0,
                    correlation_id,
                    reply,
                    _slot: slot,
                    raw: false,
                })
            }
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// Queues the answer to a frame read before authentication; a completed exchange
    /// sets the principal, a failed one ends the connection once answered.
    fn answered(&self, started: Instant, answer: Answer, slot: StaticPermit) -> InFlight {
        let Answer { api_key, api_version, correlation_id, body, raw, delay, close, principal } =
            answer;
        if let Some(principal) = principal {
            *self.principal.borrow_mut() = Some(principal);
        }
        self.closing.set(close);
        let reply = glommio::spawn_local(async move {
            if !delay.is_zero() {
                glommio::timer::sleep(delay).await;
            }
            (body, Instant::now())
        });
        InFlight {
            started,
            queued: started,
            api_key,
            api_version,
            correlation_id,
            reply,
            _slot: slot,
            raw,
        }
    }
}

impl<H: RequestHandler> Connection<H> {
    fn note_trailing_bytes(&self, request: &Request) {
        self.handler.request_with_trailing_bytes(request.api_key);
        if !self.trailing_bytes_logged.replace(true) {
            debug!(
                peer = %self.peer,
                api = ?request.api_key,
                version = request.api_version,
                trailing_bytes = request.trailing_bytes,
                "serving a request with bytes after its body, as Kafka does (logged once per connection)"
            );
        }
    }
}

async fn write_responses<H: RequestHandler>(
    mut writer: impl futures_lite::AsyncWrite + Unpin,
    pending: local_channel::LocalReceiver<InFlight>,
    handler: Rc<H>,
) -> io::Result<()> {
    // Invariant 2: one queue, awaited in order.
    while let Some(in_flight) = pending.recv().await {
        let (body, ready) = in_flight.reply.await;
        let stages = |written: Instant| RequestStages {
            queued: in_flight.queued - in_flight.started,
            ready: ready - in_flight.started,
            written: written - in_flight.started,
        };
        let Some(body) = body else {
            handler.request_done(in_flight.api_key, stages(ready));
            continue;
        };
        if in_flight.raw {
            write_raw_token(&mut writer, body).await?;
            continue;
        }
        let frame = encode_response(
            in_flight.api_key,
            in_flight.api_version,
            in_flight.correlation_id,
            &body,
        )
        .map_err(|e| {
            // A handler built a response its version cannot carry: a bug, made loud.
            error!(api = ?in_flight.api_key, version = in_flight.api_version, error = %e, "encoding a response failed");
            invalid(e)
        })?;
        writer.write_all(&frame).await?;
        // A TLS stream may keep encrypted bytes buffered until flushed. On a TcpStream
        // this is a no-op (glommio's poll_flush is ready at once).
        writer.flush().await?;
        handler.request_done(in_flight.api_key, stages(Instant::now()));
    }
    writer.flush().await
}

/// A SASL token after SaslHandshake v0: its bytes as a bare length-prefixed frame.
async fn write_raw_token(
    writer: &mut (impl futures_lite::AsyncWrite + Unpin),
    body: ResponseKind,
) -> io::Result<()> {
    let ResponseKind::SaslAuthenticate(response) = body else {
        return Err(invalid("a bare SASL token answer that is not a token".into()));
    };
    let token = response.auth_bytes;
    writer.write_all(&(token.len() as u32).to_be_bytes()).await?;
    writer.write_all(&token).await?;
    writer.flush().await
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}
