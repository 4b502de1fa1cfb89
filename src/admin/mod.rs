//! The admin endpoint, served by shard 0 on `--admin-addr`: `GET /metrics` (Prometheus
//! text format 0.0.4, every shard's counters gathered over the mesh per scrape),
//! `GET /health` (every shard answers within a bound and its log is not stopped), and the
//! web console (`console/`: `/`, `/topics`, `/groups`, ...; its forms POST only when
//! `--console-write` is set).
//!
//! Not a hot path: one small task per admin connection, one request per connection
//! (`Connection: close`). Bounds: at most `MAX_CONNECTIONS` at once (more are closed at
//! once), a request head over `http::MAX_HEAD_BYTES` gets 431, a body over
//! `http::MAX_BODY_BYTES` gets 413, a request not complete within `REQUEST_DEADLINE` is
//! dropped, a response not written within `WRITE_DEADLINE` is dropped. No Kafka traffic
//! waits on any of it.
//!
//! Security (docs/security.md, "The admin endpoint"): with a token (`auth.rs`), every
//! request but `GET /health` must carry it, or gets 401 and nothing else (a console POST
//! included); `/health` without it answers only `ok` or `unhealthy`. With `admin_tls_*`
//! files, the endpoint speaks HTTPS only (net's `TlsAcceptor`: its handshakes are bounded
//! like the SSL listeners', by `MAX_CONNECTIONS` and `REQUEST_DEADLINE`), and a SIGHUP
//! reloads the certificate.

mod auth;
mod console;
mod http;
mod prometheus;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpListener;
use shardlog_net::tls::{SharedTlsConfig, TlsAcceptor};
use shardlog_net::ConnectionLimits;
use shardlog_shards::metrics::{within, MetricsScope, Unhealthy};
use shardlog_shards::Shard;
use tracing::{debug, warn};

use http::{Refused, MAX_HEAD_BYTES};

pub use auth::AdminToken;
use auth::Verdict;
pub use console::ConsoleSettings;

/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 16;
/// A request (head and body) must arrive within this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// A response must be written within this.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// Every shard must answer a metrics or health request within this.
const SHARD_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What one request carried: its head (through the blank line) and its body.
pub struct Request {
    pub head: Vec<u8>,
    pub body: Vec<u8>,
    /// The address the client connected to (the admin endpoint as the client sees it).
    pub local_addr: Option<SocketAddr>,
    /// The client's address (the host ACLs name; failed logins are slowed down per
    /// address).
    pub peer_addr: Option<SocketAddr>,
}

/// How the admin endpoint is protected: a bearer token, TLS, both or neither.
#[derive(Clone, Default)]
pub struct AdminSecurity {
    pub token: Option<AdminToken>,
    pub tls: Option<Arc<SharedTlsConfig>>,
}

/// What every connection's task shares: the console and the protection.
struct Endpoint {
    shard: Rc<Shard>,
    console: console::Console,
    token: Option<AdminToken>,
}

/// Serves the admin endpoint on `listener` (bound on shard 0) until the broker stops.
pub fn spawn(
    listener: TcpListener,
    shard: Rc<Shard>,
    settings: ConsoleSettings,
    security: AdminSecurity,
) {
    let tls = security
        .tls
        .map(|shared| Rc::new(TlsAcceptor::new(shared, MAX_CONNECTIONS, REQUEST_DEADLINE)));
    let endpoint = Rc::new(Endpoint {
        shard,
        console: console::Console::new(settings, tls.is_some()),
        token: security.token,
    });
    glommio::spawn_local(accept_loop(listener, endpoint, tls)).detach();
}

async fn accept_loop(listener: TcpListener, endpoint: Rc<Endpoint>, tls: Option<Rc<TlsAcceptor>>) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                warn!(error = %e, "admin accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if open.get() >= MAX_CONNECTIONS {
            debug!("admin connection refused: {MAX_CONNECTIONS} already open");
            continue;
        }
        open.set(open.get() + 1);
        let (endpoint, open, tls) = (endpoint.clone(), open.clone(), tls.clone());
        glommio::spawn_local(async move {
            // The address the client reached, for the console's same-origin check.
            let addrs = (stream.local_addr().ok(), stream.peer_addr().ok());
            match tls {
                None => serve(stream, &endpoint, addrs).await,
                Some(tls) => {
                    let limits =
                        ConnectionLimits { idle_timeout: REQUEST_DEADLINE, ..Default::default() };
                    match tls.handshake(stream, &limits).await {
                        Ok(connection) => serve(connection.into_stream(), &endpoint, addrs).await,
                        // Plain HTTP on the HTTPS port ends here, as do scanners.
                        Err(e) => debug!("admin connection closed: {e}"),
                    }
                }
            }
            open.set(open.get() - 1);
        })
        .detach();
    }
}

/// The addresses of a connection: the endpoint's as the client reached it, the client's.
type Addresses = (Option<SocketAddr>, Option<SocketAddr>);

/// One request, one response, then close.
async fn serve<S>(mut stream: S, endpoint: &Endpoint, (local_addr, peer_addr): Addresses)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = match within(Instant::now() + REQUEST_DEADLINE, read_request(&mut stream)).await {
        Some(Ok(Ok(Some(request)))) => Ok(request),
        Some(Ok(Err(refused))) => Err(refused),
        _ => return, // closed by the peer, failed, or too slow: drop it
    };
    let response = match request {
        Ok((head, body)) => {
            let request = Request { head, body, local_addr, peer_addr };
            route(endpoint, &request).await
        }
        Err(refused) => http::response(refused.status, TEXT, &format!("{}\n", refused.reason)),
    };
    let _ = within(Instant::now() + WRITE_DEADLINE, async {
        stream.write_all(&response).await?;
        stream.close().await
    })
    .await;
}

/// Head and body of a request.
type HeadAndBody = (Vec<u8>, Vec<u8>);

/// Reads the request head, then its body (Content-Length bytes, bounded). `Ok(None)`: the
/// peer closed first.
async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<Result<Option<HeadAndBody>, Refused>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Ok(None));
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(len) = http::head_len(&buffer) {
            if len <= MAX_HEAD_BYTES {
                let body_len = match http::body_len(&buffer[..len]) {
                    Ok(body_len) => body_len,
                    Err(refused) => return Ok(Err(refused)),
                };
                let mut body = buffer.split_off(len);
                while body.len() < body_len {
                    let n = stream.read(&mut chunk).await?;
                    if n == 0 {
                        return Ok(Ok(None));
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                body.truncate(body_len);
                return Ok(Ok(Some((buffer, body))));
            }
        }
        if buffer.len() > MAX_HEAD_BYTES {
            let reason = format!("request head exceeds {MAX_HEAD_BYTES} bytes");
            return Ok(Err(Refused { status: 431, reason }));
        }
    }
}

async fn route(endpoint: &Endpoint, request: &Request) -> Vec<u8> {
    let (shard, console) = (&endpoint.shard, &endpoint.console);
    let line = match http::parse_request_line(&request.head) {
        Ok(line) => line,
        Err(refused) => {
            return http::response(refused.status, TEXT, &format!("{}\n", refused.reason))
        }
    };
    let authorization = http::header(&request.head, "Authorization");
    let verdict = endpoint.token.as_ref().map_or(Verdict::Admitted, |t| t.check(authorization));
    if verdict != Verdict::Admitted {
        // Probes (a load balancer, Kubernetes) rarely carry a token: they get the status
        // and one word, not the per-shard reasons.
        if (line.method, line.path) == ("GET", "/health") {
            return health(shard, false).await;
        }
        return unauthorized(verdict);
    }
    match line.method {
        "GET" => {}
        "POST" => return console.post(shard, line.path, request).await,
        _ => return http::response(405, TEXT, "only GET and POST are served\n"),
    }
    match line.path {
        "/metrics" => metrics(shard).await,
        "/health" => health(shard, true).await,
        path => match console.route(shard, path, line.query, request).await {
            Some(response) => response,
            None => http::response(404, TEXT, "not found: try /, /metrics or /health\n"),
        },
    }
}

async fn metrics(shard: &Rc<Shard>) -> Vec<u8> {
    match shard.gather_metrics(MetricsScope::all(), SHARD_ANSWER_TIMEOUT).await {
        // The text is linear in topics and partitions (~49 MB at 200,000 partitions, ~1 s
        // to render): made on the blocking thread, not on this shard's executor.
        Ok(snapshots) => {
            let text =
                move || http::response(200, PROMETHEUS_TEXT, &prometheus::render(&snapshots));
            glommio::executor().spawn_blocking(text).await
        }
        Err(missing) => http::response(503, TEXT, &describe(&missing)),
    }
}

/// `detailed`: a line per shard after the verdict; otherwise the verdict alone.
async fn health(shard: &Rc<Shard>, detailed: bool) -> Vec<u8> {
    let unhealthy = shard.check_health(SHARD_ANSWER_TIMEOUT).await;
    match (unhealthy.is_empty(), detailed) {
        (true, true) => {
            let body: String = (0..shard.nr_shards).map(|s| format!("shard {s}: ok\n")).collect();
            http::response(200, TEXT, &format!("ok\n{body}"))
        }
        (true, false) => http::response(200, TEXT, "ok\n"),
        (false, true) => http::response(503, TEXT, &describe(&unhealthy)),
        (false, false) => http::response(503, TEXT, "unhealthy\n"),
    }
}

/// 401 with the challenge RFC 6750 asks for (`error` only when a token was wrong).
fn unauthorized(verdict: Verdict) -> Vec<u8> {
    let (challenge, body) = match verdict {
        Verdict::Invalid => (
            r#"Bearer realm="shardlog-admin", error="invalid_token""#,
            "the admin token is not valid\n",
        ),
        _ => (
            r#"Bearer realm="shardlog-admin""#,
            "an admin token is required: Authorization: Bearer <token>\n",
        ),
    };
    http::response_with_headers(401, TEXT, &[("WWW-Authenticate", challenge)], body)
}

fn describe(unhealthy: &[Unhealthy]) -> String {
    let lines: String =
        unhealthy.iter().map(|u| format!("shard {}: {}\n", u.shard, u.reason)).collect();
    format!("unhealthy\n{lines}")
}
