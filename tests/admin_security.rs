//! The admin endpoint's protection (docs/security.md, "The admin endpoint"): a bearer
//! token on every request but /health's status, HTTPS with a certificate made by rcgen,
//! and plain HTTP on the HTTPS port refused without harm to the broker.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{admin_http, Broker, RawClient};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

const TOKEN: &str = "3f9c1d0e-admin-token-for-tests";

/// An HTTP response: status, head and body.
struct Response {
    status: u16,
    head: String,
    body: String,
}

/// Sends GET `path` (with `Authorization: <authorization>` if given) over `stream` and reads
/// the response to the end.
fn get_over(stream: &mut impl tls::ReadWrite, path: &str, authorization: Option<&str>) -> Response {
    let header = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{header}\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // rustls reports a peer that closes without close_notify as an error after the data.
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8(response).expect("a UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a complete response head");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    Response { status, head: head.to_string(), body: body.to_string() }
}

fn admin_addr(broker: &Broker) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], broker.admin_port))
}

fn get(broker: &Broker, path: &str, authorization: Option<&str>) -> Response {
    let mut stream = TcpStream::connect(admin_addr(broker)).expect("the admin port");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    get_over(&mut stream, path, authorization)
}

fn https_get(broker: &Broker, ca_pem: &str, path: &str, authorization: Option<&str>) -> Response {
    let mut stream = tls::tls_stream(admin_addr(broker), ca_pem, None).expect("a TLS connection");
    get_over(&mut stream, path, authorization)
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// A broker whose admin token is in a file, with `extra` flags (paths in its temp dir).
fn broker_with_token(extra: impl FnOnce(&Broker) -> Vec<String>) -> Broker {
    Broker::start_configured(1, &[], |b| {
        let token_file = b.dir.path().join("admin-token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let mut args = vec!["--admin-token-file".to_string(), token_file.display().to_string()];
        args.extend(extra(b));
        args
    })
}

fn assert_refused(response: &Response, challenge: &str) {
    assert_eq!(response.status, 401, "{}\n{}", response.head, response.body);
    assert!(response.head.contains(&format!("WWW-Authenticate: {challenge}")), "{}", response.head);
    assert!(!response.body.contains("shardlog_"), "metrics leaked: {}", response.body);
}

#[test]
fn admin_requests_without_the_right_bearer_token_get_401_and_nothing_else() {
    let broker = broker_with_token(|_| Vec::new());

    assert_refused(&get(&broker, "/metrics", None), r#"Bearer realm="shardlog-admin""#);
    let wrong = get(&broker, "/metrics", Some(&format!("Bearer {TOKEN}x")));
    assert_refused(&wrong, r#"Bearer realm="shardlog-admin", error="invalid_token""#);
    let prefix = get(&broker, "/metrics", Some(&format!("Bearer {}", &TOKEN[..10])));
    assert_refused(&prefix, r#"Bearer realm="shardlog-admin", error="invalid_token""#);
    let basic = get(&broker, "/metrics", Some("Basic YWRtaW46YWRtaW4="));
    assert_refused(&basic, r#"Bearer realm="shardlog-admin""#);
    // The console and unknown paths are refused alike (nothing about what exists).
    assert_refused(&get(&broker, "/", None), "Bearer");
    assert_refused(&get(&broker, "/no-such-page", None), "Bearer");

    let metrics = get(&broker, "/metrics", Some(&bearer()));
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(metrics.body.contains("shardlog_connections_accepted_total"), "{}", metrics.body);
    let console = get(&broker, "/", Some(&format!("bearer {TOKEN}")));
    assert_eq!(console.status, 200, "the scheme is case-insensitive: {}", console.head);

    // Health probes carry no token: the status and one word, no per-shard detail.
    let health = get(&broker, "/health", None);
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let detailed = get(&broker, "/health", Some(&bearer()));
    assert_eq!(detailed.status, 200);
    assert!(detailed.body.contains("shard 0: ok"), "{}", detailed.body);
}

/// The token guards the console's actions too: with `--console-write`, a POST without it
/// gets 401 before the console looks at the form, and nothing is created; with it, the
/// POST reaches the console (whose own CSRF check then refuses the forged form).
#[test]
fn a_console_action_without_the_token_gets_401_and_changes_nothing() {
    let broker = broker_with_token(|_| vec!["--console-write".to_string()]);
    let own = format!("http://127.0.0.1:{}", broker.admin_port);
    let form = "name=forged&partitions=1&confirm=yes&csrf=0";
    let post = |authorization: &str| {
        let request = format!(
            "POST /actions/create-topic HTTP/1.1\r\nOrigin: {own}\r\n{authorization}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        );
        admin_http(&broker, request.as_bytes())
    };
    let (status, body) = post("");
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(&format!("Authorization: {}\r\n", bearer()));
    assert_eq!(status, 403, "past the token, the console refuses the forged form: {body}");
    let topics = get(&broker, "/topics", Some(&bearer()));
    assert_eq!(topics.status, 200);
    assert!(!topics.body.contains("forged"), "a topic was created: {}", topics.body);
}

#[test]
fn the_admin_endpoint_serves_https_and_plain_http_on_its_port_is_closed_without_harm() {
    let mut ca_pem = String::new();
    let broker = broker_with_token(|b| {
        let files = tls::BrokerTls::new(b.dir.path());
        ca_pem = files.ca.cert.pem();
        let path = |p: &std::path::PathBuf| p.display().to_string();
        vec![
            "--admin-tls-cert-file".into(),
            path(&files.cert_file),
            "--admin-tls-key-file".into(),
            path(&files.key_file),
        ]
    });

    let metrics = https_get(&broker, &ca_pem, "/metrics", Some(&bearer()));
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(metrics.body.contains("shardlog_connections_accepted_total"));
    assert_eq!(https_get(&broker, &ca_pem, "/metrics", None).status, 401);

    // Plain HTTP on the HTTPS port: no HTTP answer (at most a TLS alert), then a close.
    for _ in 0..3 {
        let mut stream = TcpStream::connect(admin_addr(&broker)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let request = format!("GET /metrics HTTP/1.1\r\nAuthorization: {}\r\n\r\n", bearer());
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(!answer.starts_with(b"HTTP/"), "{}", String::from_utf8_lossy(&answer));
        assert!(!String::from_utf8_lossy(&answer).contains("shardlog_"));
    }

    // The broker is unharmed: HTTPS and Kafka are served as before.
    assert_eq!(https_get(&broker, &ca_pem, "/health", Some(&bearer())).status, 200);
    let mut kafka = RawClient::connect(broker.shard_addr(0));
    let versions = RequestKind::ApiVersions(tls::api_versions());
    match kafka.call(ApiKey::ApiVersions, 3, versions) {
        ResponseKind::ApiVersions(response) => assert_eq!(response.error_code, 0),
        other => panic!("unexpected answer {other:?}"),
    }
}

#[test]
fn conflicting_or_empty_admin_token_settings_stop_the_start_up_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    let port = common::free_port_range(3).to_string();
    let cases: [(&[&str], &str); 3] = [
        (&["--admin-token-file", empty.to_str().unwrap()], "is empty"),
        (&["--admin-token", "a", "--admin-token-file", empty.to_str().unwrap()], "exclude"),
        (&["--admin-tls-cert-file", "/nonexistent.pem"], "go together"),
    ];
    for (args, expected) in cases {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_shardlog"))
            .args(["--data-dir", dir.path().join("data").to_str().unwrap()])
            .args(["--kafka-addr", &format!("127.0.0.1:{port}"), "--cores", "1"])
            .args(["--admin-addr", &format!("127.0.0.1:{}", port.parse::<u16>().unwrap() + 2)])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
