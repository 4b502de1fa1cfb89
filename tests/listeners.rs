//! Listeners and TLS (docs/security.md), with real clients: librdkafka over PLAINTEXT and
//! SSL (with and without client certificates), a rustls client for exact checks on one
//! connection, and raw sockets for what misbehaving clients do. Every certificate is made
//! here with rcgen, in the broker's temp dir.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{eventually, Broker, RawClient};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rdkafka::config::ClientConfig;
use tls::{
    api_versions, ca_file, call, produce, read_values, ssl_client, tls_connect,
    two_listener_broker, write, BrokerTls, Ca,
};

/// The (host, port) of every broker a Metadata v9 response lists, by node id.
fn advertised(response: ResponseKind) -> Vec<(String, i32)> {
    let ResponseKind::Metadata(metadata) = response else { panic!("{response:?}") };
    let mut brokers: Vec<_> = metadata.brokers.iter().map(|b| (b.node_id.0, b)).collect();
    brokers.sort_by_key(|(id, _)| *id);
    brokers.into_iter().map(|(_, b)| (b.host.to_string(), b.port)).collect()
}

fn all_topics() -> RequestKind {
    RequestKind::Metadata(MetadataRequest::default().with_topics(None))
}

#[test]
fn each_listener_advertises_its_own_shard_ports_and_ssl_clients_stay_on_ssl() {
    let (broker, ssl_port) = two_listener_broker(2, &[], &[]);
    let mut plaintext = RawClient::connect(broker.bootstrap().parse().unwrap());
    let brokers = advertised(plaintext.call(ApiKey::Metadata, 9, all_topics()));
    let expected =
        |port: u16| (0..2).map(move |s| ("127.0.0.1".to_string(), (port + 1 + s) as i32));
    assert_eq!(brokers, expected(broker.port).collect::<Vec<_>>());
    let ca = std::fs::read_to_string(ca_file(&broker)).unwrap();
    let ssl_bootstrap = SocketAddr::from(([127, 0, 0, 1], ssl_port));
    let mut tls = tls_connect(ssl_bootstrap, &ca, None).expect("a TLS connection");
    let brokers = advertised(call(&mut tls, ApiKey::Metadata, 9, all_topics()).unwrap());
    assert_eq!(brokers, expected(ssl_port).collect::<Vec<_>>(), "SSL metadata: SSL ports only");

    // librdkafka over SSL, on both shards' SSL ports; read back over both listeners.
    common::create_topic(&broker, "over-ssl", 2);
    let ssl = ssl_client(&broker, ssl_port);
    assert_eq!(produce(&ssl, "over-ssl", 2, "ssl", 20), 20);
    let mut plain = ClientConfig::new();
    plain.set("bootstrap.servers", broker.bootstrap());
    let expected: Vec<String> = {
        let mut v: Vec<String> = (0..20).map(|i| format!("ssl-{i}")).collect();
        v.sort();
        v
    };
    assert_eq!(read_values(&ssl, "over-ssl", 2, 20), expected);
    assert_eq!(read_values(&plain, "over-ssl", 2, 20), expected);
    assert!(broker.metric_sum("shardlog_tls_handshakes_total") >= 3.0, "bootstrap + 2 shards");
    assert_eq!(broker.metric_sum("shardlog_tls_handshake_errors_total"), 0.0);
}

#[test]
fn a_plaintext_client_on_the_ssl_port_is_refused_cleanly_and_counted() {
    let (broker, ssl_port) = two_listener_broker(1, &[], &[]);
    for port in [ssl_port, ssl_port + 1] {
        let mut client = RawClient::connect(SocketAddr::from(([127, 0, 0, 1], port)));
        client.send(ApiKey::ApiVersions, 3, &RequestKind::ApiVersions(api_versions()));
        // The broker answers with at most a TLS alert, never a Kafka response, and closes.
        let stream = client.stream();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut received = Vec::new();
        let mut chunk = [0u8; 64];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("the broker did not close the connection: {e}"),
            }
        }
        assert!(received.is_empty() || received[0] == 0x15, "not a TLS alert: {received:?}");
    }
    eventually(Duration::from_secs(10), "the refusals counted", || {
        broker.metric_sum("shardlog_tls_handshake_errors_total") >= 2.0
    });
    let ca = std::fs::read_to_string(ca_file(&broker)).unwrap();
    tls_connect(SocketAddr::from(([127, 0, 0, 1], ssl_port)), &ca, None)
        .expect("TLS clients are still served");
    let mut plaintext = RawClient::connect(broker.bootstrap().parse().unwrap());
    plaintext.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(api_versions()));
}

#[test]
fn with_a_client_ca_only_clients_with_a_certificate_it_signed_are_served() {
    let env = [("SHARDLOG_LOG", "info,shardlog::broker=debug")];
    let broker = Broker::start_configured(1, &env, |b| {
        let dir = b.dir.path();
        let tls = BrokerTls::new(dir);
        let clients = Ca::new("client CA");
        clients.write(dir, "client-ca.pem");
        let (cert, key) = clients.issue_client("client-1");
        write(dir, "client-1.pem", &cert);
        write(dir, "client-1.key", &key);
        let (cert, key) = Ca::new("another CA").issue_client("intruder");
        write(dir, "intruder.pem", &cert);
        write(dir, "intruder.key", &key);
        let mut args = vec!["--listener".to_string(), format!("SSL://127.0.0.1:{}", b.port)];
        args.extend(tls.args());
        args.extend([
            "--tls-client-ca-file".into(),
            dir.join("client-ca.pem").display().to_string(),
        ]);
        args
    });
    let ssl_port = broker.port;
    let dir = broker.dir.path().to_path_buf();
    let file = |name: &str| dir.join(name).display().to_string();
    let with_certificate = |name: &str| {
        let mut config = ssl_client(&broker, ssl_port);
        config
            .set("ssl.certificate.location", file(&format!("{name}.pem")))
            .set("ssl.key.location", file(&format!("{name}.key")));
        config
    };
    // Created by the first produce (auto-create, one partition).
    assert_eq!(produce(&with_certificate("client-1"), "mtls", 1, "m", 5), 5);
    assert!(
        broker.log().contains("User:CN=client-1,OU=eng,O=Example"),
        "the principal is the certificate's subject, Kafka's way:\n{}",
        broker.log()
    );
    let errors_before = broker.metric_sum("shardlog_tls_handshake_errors_total");
    let short = |config: ClientConfig| {
        let mut config = config;
        config.set("message.timeout.ms", "3000");
        produce(&config, "mtls", 1, "refused", 1)
    };
    assert_eq!(short(ssl_client(&broker, ssl_port)), 0, "no client certificate: refused");
    assert_eq!(short(with_certificate("intruder")), 0, "a certificate of another CA: refused");
    assert!(broker.metric_sum("shardlog_tls_handshake_errors_total") >= errors_before + 2.0);
    // Exactly the one client's records, nothing of the refused ones.
    let values = read_values(&with_certificate("client-1"), "mtls", 1, 5);
    assert_eq!(values, ["m-0", "m-1", "m-2", "m-3", "m-4"]);
}

#[test]
fn slow_and_half_open_tls_handshakes_are_bounded_and_producers_keep_being_served() {
    let limits = [
        "--max-connections-per-shard",
        "12",
        "--max-tls-handshakes-per-shard",
        "3",
        "--tls-handshake-timeout-ms",
        "1500",
    ];
    let (broker, ssl_port) = two_listener_broker(2, &limits, &[]);
    // 15 stalled handshakes per shard, more than its connection slots: half of them send
    // the start of a ClientHello and stop, half send nothing at all.
    let mut stalled = Vec::new();
    for shard in 0..2u16 {
        for i in 0..15 {
            let mut socket = TcpStream::connect(("127.0.0.1", ssl_port + 1 + shard)).unwrap();
            if i % 2 == 0 {
                // Refused at once over the limit: the write may then fail, which is fine.
                let _ = socket.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
            }
            stalled.push(socket);
        }
    }
    // Producers on the same shards, over PLAINTEXT and over SSL, are still served.
    common::create_topic(&broker, "under-flood", 2);
    let mut plain = ClientConfig::new();
    plain.set("bootstrap.servers", broker.bootstrap());
    assert_eq!(produce(&plain, "under-flood", 2, "plain", 20), 20);
    assert_eq!(produce(&ssl_client(&broker, ssl_port), "under-flood", 2, "ssl", 20), 20);
    // Every stalled connection was closed by the broker: at once over the limit, else
    // when its handshake timed out.
    for mut socket in stalled {
        socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut byte = [0u8; 1];
        match socket.read(&mut byte) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("a stalled handshake was not closed: {other:?}"),
        }
    }
    assert!(broker.metric_sum("shardlog_tls_handshakes_refused_total") >= 1.0);
    assert!(broker.metric_sum("shardlog_tls_handshake_timeouts_total") >= 1.0);
    assert!(broker.log().contains("TLS handshake limit reached"), "the refusals are logged");
}

#[test]
fn sighup_reloads_certificates_for_new_connections_and_keeps_open_ones() {
    let broker = Broker::start_configured(1, &[], |b| {
        let tls = BrokerTls::new(b.dir.path());
        let mut args = vec!["--listeners".to_string(), format!("SSL://127.0.0.1:{}", b.port)];
        args.extend(tls.args());
        args
    });
    let dir = broker.dir.path().to_path_buf();
    let addr = broker.shard_addr(0);
    let first_ca = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    let mut open = tls_connect(addr, &first_ca, None).expect("served with the first certificate");

    std::fs::create_dir_all(dir.join("second")).unwrap();
    let second = BrokerTls::new(&dir.join("second"));
    write(&dir, "broker.pem", &std::fs::read_to_string(&second.cert_file).unwrap());
    write(&dir, "broker.key", &std::fs::read_to_string(&second.key_file).unwrap());
    let second_ca = second.ca.cert.pem();
    assert!(tls_connect(addr, &second_ca, None).is_err(), "not reloaded before SIGHUP");
    hangup(&broker);
    eventually(Duration::from_secs(10), "the new certificate served", || {
        tls_connect(addr, &second_ca, None).is_ok()
    });
    assert!(tls_connect(addr, &first_ca, None).is_err(), "new connections: the new certificate");
    let again = call(&mut open, ApiKey::ApiVersions, 3, RequestKind::ApiVersions(api_versions()));
    assert!(again.is_ok(), "the connection opened before the reload still works: {again:?}");

    // A broken key file: the reload is refused and the current certificate stays.
    write(&dir, "broker.key", "not a key\n");
    hangup(&broker);
    eventually(Duration::from_secs(10), "the failed reload logged", || {
        broker.log().contains("TLS reload failed")
    });
    tls_connect(addr, &second_ca, None).expect("still served with the second certificate");
}

fn hangup(broker: &Broker) {
    assert_eq!(unsafe { libc::kill(broker.pid() as i32, libc::SIGHUP) }, 0);
}

/// A socket bound to 127.0.0.1 on a free port and not listening, and its port: nothing
/// answers there, so the broker's start-up check passes, but every shard's bind fails.
fn bound_not_listening() -> (std::os::fd::OwnedFd, u16) {
    use std::mem::size_of;
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; the address struct is
    // a zeroed `sockaddr_in` of the length passed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let sockaddr = &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr;
        assert_eq!(libc::bind(fd, sockaddr, len), 0, "{}", std::io::Error::last_os_error());
        let mut got = len;
        assert_eq!(libc::getsockname(fd, sockaddr, &mut got), 0);
        (owned, u16::from_be(addr.sin_port))
    }
}

/// When every shard fails to bind its port at once (the Kafka port held by a socket that
/// does not listen), the broker exits with 1 and the shard's reason, not with SIGABRT from
/// an exit called again from the exiting shard's own shard watch (`runtime::exit_process`;
/// before, 10 starts of 10 ended in SIGABRT).
#[test]
fn every_shard_failing_to_bind_exits_1_with_the_reason_not_an_abort() {
    let (_blocker, port) = bound_not_listening();
    for run in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shardlog"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--kafka-addr", &format!("127.0.0.1:{port}"), "--cores", "2"])
            .args(["--admin-addr", &admin.to_string()])
            .output()
            .expect("running shardlog");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "run {run}: {:?}\n{stderr}", out.status);
        assert!(stderr.contains(&format!("127.0.0.1:{port}: ")), "run {run}: {stderr}");
        assert!(stderr.contains("in use"), "run {run}: {stderr}");
    }
}
