//! SASL (docs/security.md) with real clients: librdkafka over SASL_PLAINTEXT with
//! SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, and over SASL_SSL; users made by the bootstrap
//! settings, by `shardlog user` (AlterUserScramCredentials) and deleted again, across a
//! kill -9; a raw client for exact error codes and the order Kafka enforces.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{Broker, RawClient};
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tls::{produce, read_values, sasl_client};

const ADMIN_PASSWORD: &str = "admin-secret";

/// A two-core broker with a SASL listener (`protocol`), the bootstrap user `admin`.
fn sasl_broker(protocol: &str) -> (Broker, u16) {
    sasl_broker_with(protocol, &[])
}

/// `sasl_broker` with more flags.
fn sasl_broker_with(protocol: &str, extra: &[&str]) -> (Broker, u16) {
    tls::sasl_broker(2, protocol, ("admin", ADMIN_PASSWORD), extra)
}

/// Runs `shardlog <args>` as an admin command with `stdin`; its stdout, or its stderr as
/// the error.
fn cli(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Result<String, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardlog"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    match output.status.success() {
        true => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

/// Errors librdkafka reports to its client context (an authentication failure is one).
#[derive(Clone, Default)]
struct ErrorLog(Arc<Mutex<Vec<String>>>);

impl ClientContext for ErrorLog {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.lock().unwrap().push(format!("{error}: {reason}"));
    }
}

impl ErrorLog {
    fn contains(&self, text: &str) -> bool {
        self.0.lock().unwrap().iter().any(|e| e.contains(text))
    }
}

/// Whether `config` logs in: a producer's record is acknowledged, or it fails with an
/// authentication error (within the message timeout).
fn logs_in(config: &ClientConfig, topic: &str) -> bool {
    let log = ErrorLog::default();
    let producer: FutureProducer<ErrorLog> =
        config.clone().set("message.timeout.ms", "3000").create_with_context(log.clone()).unwrap();
    let record = FutureRecord::<(), _>::to(topic).payload("probe").partition(0);
    let sent = common::runtime().block_on(producer.send(record, std::time::Duration::ZERO));
    match sent {
        Ok(_) => true,
        Err(_) => {
            // Failures are answered after a delay that grows per address (up to 5 s), so
            // the message may time out before librdkafka hears why.
            let what = "librdkafka to report an authentication error";
            common::eventually(std::time::Duration::from_secs(30), what, || {
                log.contains("Authentication failed")
            });
            false
        }
    }
}

#[test]
fn scram_sha_512_scram_sha_256_and_plain_clients_produce_and_consume() {
    let (broker, port) = sasl_broker("SASL_PLAINTEXT");
    common::create_topic(&broker, "sasl-roundtrip", 2);
    let mechanisms = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"];
    for mechanism in mechanisms {
        let client = sasl_client(port, mechanism, "admin", ADMIN_PASSWORD);
        assert_eq!(produce(&client, "sasl-roundtrip", 2, mechanism, 20), 20, "{mechanism}");
    }
    // Read back over SASL too (the consumer follows Metadata to the SASL shard ports).
    let client = sasl_client(port, "SCRAM-SHA-256", "admin", ADMIN_PASSWORD);
    let values = read_values(&client, "sasl-roundtrip", 2, 60);
    let mut expected: Vec<String> =
        mechanisms.iter().flat_map(|m| (0..20).map(move |i| format!("{m}-{i}"))).collect();
    expected.sort();
    assert_eq!(values, expected);
    assert!(broker.metric_sum("shardlog_sasl_authentications_total") >= 4.0);
    assert_eq!(broker.metric_sum("shardlog_sasl_authentication_failures_total"), 0.0);
}

#[test]
fn a_wrong_password_gets_an_authentication_error_and_no_data() {
    let (broker, port) = sasl_broker("SASL_PLAINTEXT");
    common::create_topic(&broker, "guarded", 1);
    for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
        let wrong = sasl_client(port, mechanism, "admin", "not-the-password");
        assert!(!logs_in(&wrong, "guarded"), "{mechanism}: logged in with a wrong password");
        let nobody = sasl_client(port, mechanism, "nobody", ADMIN_PASSWORD);
        assert!(!logs_in(&nobody, "guarded"), "{mechanism}: an unknown user logged in");
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "sasl-checker")
        .create()
        .unwrap();
    let watermarks = consumer.fetch_watermarks("guarded", 0, std::time::Duration::from_secs(30));
    assert_eq!(watermarks.unwrap(), (0, 0), "nothing was written");
    assert!(broker.metric_sum("shardlog_sasl_authentication_failures_total") >= 4.0);
    assert!(broker.log().contains("SASL authentication failed"));
    assert!(!broker.log().contains("not-the-password"), "a password in the log");

    // Exactly, with a raw client: SASL_AUTHENTICATION_FAILED with a message, then closed.
    let addr = ([127, 0, 0, 1], port).into();
    let mut raw = RawClient::connect(addr);
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let ResponseKind::SaslHandshake(answer) =
        raw.call(ApiKey::SaslHandshake, 1, RequestKind::SaslHandshake(handshake))
    else {
        panic!("not a SaslHandshake answer")
    };
    assert_eq!(answer.error_code, 0);
    let token = Bytes::from_static(b"\0admin\0wrong");
    let authenticate = SaslAuthenticateRequest::default().with_auth_bytes(token);
    let ResponseKind::SaslAuthenticate(answer) =
        raw.call(ApiKey::SaslAuthenticate, 2, RequestKind::SaslAuthenticate(authenticate))
    else {
        panic!("not a SaslAuthenticate answer")
    };
    assert_eq!(answer.error_code, 58, "SASL_AUTHENTICATION_FAILED");
    assert!(answer.error_message.unwrap().contains("invalid credentials"));
    assert!(raw.is_closed_by_broker());

    // Other requests before authentication close the connection unanswered; a
    // SaslAuthenticate before the handshake gets ILLEGAL_SASL_STATE.
    let mut early = RawClient::connect(addr);
    let authenticate = SaslAuthenticateRequest::default();
    let ResponseKind::SaslAuthenticate(answer) =
        early.call(ApiKey::SaslAuthenticate, 1, RequestKind::SaslAuthenticate(authenticate))
    else {
        panic!("not a SaslAuthenticate answer")
    };
    assert_eq!(answer.error_code, 34, "ILLEGAL_SASL_STATE");
    let mut unauthenticated = RawClient::connect(addr);
    unauthenticated.send(ApiKey::Fetch, 11, &common::fetch_request("guarded", 0, 0, 0));
    assert!(unauthenticated.is_closed_by_broker());
}

#[test]
fn users_made_with_the_cli_log_in_survive_kill_9_and_cannot_once_deleted() {
    let (mut broker, port) = sasl_broker("SASL_PLAINTEXT");
    common::create_topic(&broker, "team", 1);
    let sasl_addr = format!("127.0.0.1:{port}");
    // The CLI logs in as the bootstrap user on the SASL listener.
    let admin_env = [("SHARDLOG_SASL_PASSWORD", ADMIN_PASSWORD)];
    let as_admin = |args: &[&str], stdin: &str| {
        let mut all = args.to_vec();
        all.extend(["--bootstrap", &sasl_addr, "--sasl-username", "admin"]);
        cli(&all, &admin_env, stdin)
    };
    let create = ["user", "create", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin"];
    as_admin(&create, "alice-pw\n").unwrap();
    let listed = as_admin(&["user", "list"], "").unwrap();
    assert!(listed.contains("alice") && listed.contains("SCRAM-SHA-256"), "{listed}");
    let alice = sasl_client(port, "SCRAM-SHA-256", "alice", "alice-pw");
    assert!(logs_in(&alice, "team"));
    // PLAIN checks the same stored SCRAM keys.
    assert!(logs_in(&sasl_client(port, "PLAIN", "alice", "alice-pw"), "team"));
    assert!(!logs_in(&sasl_client(port, "SCRAM-SHA-512", "alice", "alice-pw"), "team"));
    // Without a login the CLI cannot reach the SASL listener.
    assert!(cli(&["user", "list", "--bootstrap", &sasl_addr], &[], "").is_err());

    broker.kill_and_restart();
    assert!(logs_in(&alice, "team"), "alice survived kill -9");
    as_admin(&["user", "delete", "alice"], "").unwrap();
    assert!(!logs_in(&alice, "team"), "a deleted user logged in");
    broker.kill_and_restart();
    assert!(!logs_in(&alice, "team"), "a deleted user came back after kill -9");
    let listed = as_admin(&["user", "list", "--format", "json"], "").unwrap();
    assert!(!listed.contains("alice") && listed.contains("admin"), "{listed}");
}

#[test]
fn sasl_ssl_clients_produce_and_consume_with_scram_sha_512_and_plain() {
    let (broker, port) = sasl_broker("SASL_SSL");
    common::create_topic(&broker, "sasl-ssl", 1);
    let ca = broker.dir.path().join("ca.pem").display().to_string();
    for (round, mechanism) in ["SCRAM-SHA-512", "PLAIN"].into_iter().enumerate() {
        let mut client = sasl_client(port, mechanism, "admin", ADMIN_PASSWORD);
        client.set("security.protocol", "sasl_ssl").set("ssl.ca.location", &ca);
        assert_eq!(produce(&client, "sasl-ssl", 1, mechanism, 10), 10, "{mechanism}");
        let values = read_values(&client, "sasl-ssl", 1, 10 * (round + 1));
        let ours = values.iter().filter(|v| v.starts_with(mechanism)).count();
        assert_eq!(ours, 10, "{values:?}");
    }
    assert!(broker.metric_sum("shardlog_tls_handshakes_total") >= 2.0);
}

/// With `authorizer = true` the principal a SASL login gives is what ACLs decide on: a user
/// without WRITE cannot produce (nothing is written) nor manage users; the super user
/// grants WRITE with `shardlog acl add`, and then it can.
#[test]
fn the_authorizer_decides_on_sasl_principals() {
    let extra = ["--authorizer", "true", "--super-users", "User:admin"];
    let (_broker, port) = sasl_broker_with("SASL_PLAINTEXT", &extra);
    let sasl_addr = format!("127.0.0.1:{port}");
    let login = |user: &'static str, password: &'static str| {
        let sasl_addr = sasl_addr.clone();
        move |args: &[&str], stdin: &str| {
            let mut all = args.to_vec();
            all.extend(["--bootstrap", &sasl_addr, "--sasl-username", user]);
            all.extend(["--sasl-mechanism", "SCRAM-SHA-256"]);
            cli(&all, &[("SHARDLOG_SASL_PASSWORD", password)], stdin)
        }
    };
    let as_admin = login("admin", ADMIN_PASSWORD);
    let as_alice = login("alice", "alice-pw");
    let create = ["user", "create", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin"];
    as_admin(&create, "alice-pw\n").unwrap();
    as_admin(&["topic", "create", "team", "--partitions", "1"], "").unwrap();

    let mut alice = sasl_client(port, "SCRAM-SHA-256", "alice", "alice-pw");
    alice.set("message.timeout.ms", "5000");
    assert_eq!(produce(&alice, "team", 1, "refused", 3), 0, "alice has no WRITE yet");
    let refused = as_alice(&["user", "create", "bob", "--password-stdin"], "bob-pw\n");
    assert!(refused.is_err_and(|e| e.contains("CLUSTER_AUTHORIZATION")), "alice made a user");

    let grant = ["acl", "add", "--principal", "User:alice", "--operation", "write"];
    as_admin(&[&grant[..], &["--topic", "team"]].concat(), "").unwrap();
    assert_eq!(produce(&alice, "team", 1, "alice", 3), 3, "alice has WRITE now");
    let admin = sasl_client(port, "SCRAM-SHA-256", "admin", ADMIN_PASSWORD);
    let values = read_values(&admin, "team", 1, 3);
    assert_eq!(values, ["alice-0", "alice-1", "alice-2"], "only what WRITE allowed was written");
}
