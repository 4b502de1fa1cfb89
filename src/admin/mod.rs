//! The admin endpoint, served by shard 0 on `--admin-addr`: `GET /metrics` (Prometheus
//! text format 0.0.4, every shard's counters gathered over the mesh per scrape),
//! `GET /health` (every shard answers within a bound and its log is not stopped), and the
//! read-only web console (`console/`: `/`, `/topics`, `/groups`, ...).
//!
//! Not a hot path: one small task per admin connection, one request per connection
//! (`Connection: close`). Bounds: at most `MAX_CONNECTIONS` at once (more are closed at
//! once), a request head over `http::MAX_HEAD_BYTES` gets 431, a head not complete within
//! `HEAD_DEADLINE` is dropped, a response not written within `WRITE_DEADLINE` is dropped.
//! No Kafka traffic waits on any of it.

mod console;
mod http;
mod prometheus;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use shardlog_shards::metrics::{within, Unhealthy};
use shardlog_shards::Shard;
use tracing::{debug, warn};

use http::{Refused, MAX_HEAD_BYTES};

/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 16;
/// A request head must arrive within this.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// A response must be written within this.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// Every shard must answer a metrics or health request within this.
const SHARD_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the admin endpoint on `listener` (bound on shard 0) until the broker stops.
pub fn spawn(listener: TcpListener, shard: Rc<Shard>) {
    glommio::spawn_local(accept_loop(listener, shard)).detach();
}

async fn accept_loop(listener: TcpListener, shard: Rc<Shard>) {
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
        let (shard, open) = (shard.clone(), open.clone());
        glommio::spawn_local(async move {
            serve(stream, &shard).await;
            open.set(open.get() - 1);
        })
        .detach();
    }
}

/// One request, one response, then close.
async fn serve(mut stream: TcpStream, shard: &Rc<Shard>) {
    let head = match within(Instant::now() + HEAD_DEADLINE, read_head(&mut stream)).await {
        Some(Ok(Ok(Some(head)))) => Ok(head),
        Some(Ok(Err(refused))) => Err(refused),
        _ => return, // closed by the peer, failed, or too slow: drop it
    };
    let response = match head {
        Ok(head) => route(shard, &head).await,
        Err(refused) => http::response(refused.status, TEXT, &format!("{}\n", refused.reason)),
    };
    let _ = within(Instant::now() + WRITE_DEADLINE, async {
        stream.write_all(&response).await?;
        stream.close().await
    })
    .await;
}

/// Reads until the end of the request head. `Ok(None)`: the peer closed first.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Result<Option<Vec<u8>>, Refused>> {
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
                buffer.truncate(len);
                return Ok(Ok(Some(buffer)));
            }
        }
        if buffer.len() > MAX_HEAD_BYTES {
            let reason = format!("request head exceeds {MAX_HEAD_BYTES} bytes");
            return Ok(Err(Refused { status: 431, reason }));
        }
    }
}

async fn route(shard: &Rc<Shard>, head: &[u8]) -> Vec<u8> {
    let line = match http::parse_request_line(head) {
        Ok(line) => line,
        Err(refused) => {
            return http::response(refused.status, TEXT, &format!("{}\n", refused.reason))
        }
    };
    if line.method != "GET" {
        return http::response(405, TEXT, "only GET is served\n");
    }
    match line.path {
        "/metrics" => metrics(shard).await,
        "/health" => health(shard).await,
        path => match console::route(shard, path, line.query).await {
            Some(response) => response,
            None => http::response(404, TEXT, "not found: try /, /metrics or /health\n"),
        },
    }
}

async fn metrics(shard: &Rc<Shard>) -> Vec<u8> {
    match shard.gather_metrics(SHARD_ANSWER_TIMEOUT).await {
        Ok(snapshots) => http::response(200, PROMETHEUS_TEXT, &prometheus::render(&snapshots)),
        Err(missing) => http::response(503, TEXT, &describe(&missing)),
    }
}

async fn health(shard: &Rc<Shard>) -> Vec<u8> {
    let unhealthy = shard.check_health(SHARD_ANSWER_TIMEOUT).await;
    if unhealthy.is_empty() {
        let body: String = (0..shard.nr_shards).map(|s| format!("shard {s}: ok\n")).collect();
        return http::response(200, TEXT, &format!("ok\n{body}"));
    }
    http::response(503, TEXT, &describe(&unhealthy))
}

fn describe(unhealthy: &[Unhealthy]) -> String {
    let lines: String =
        unhealthy.iter().map(|u| format!("shard {}: {}\n", u.shard, u.reason)).collect();
    format!("unhealthy\n{lines}")
}
