//! The admin CLI (`shardlog topic|group|produce|consume`) run as a process against a real
//! broker: table output read as text, JSON output parsed, errors in words with a non-zero
//! exit code and never a panic.

mod common;
#[path = "common/tls.rs"]
mod tls;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{eventually, Broker};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

/// What one CLI run printed.
struct Run {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }

    /// stdout's lines, each parsed as JSON (produce and consume print JSON lines).
    fn json_lines(&self) -> Vec<Value> {
        self.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
    }

    /// Table rows below the header, split into cells.
    fn rows(&self) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }

    /// Asserts success and returns self.
    fn ok(self) -> Run {
        assert!(self.success, "command failed:\n{}", self.stderr);
        self
    }

    /// Asserts a clean failure: non-zero exit, a message, no panic.
    fn failed(self) -> Run {
        assert!(!self.success, "command succeeded:\n{}", self.stdout);
        assert!(self.stderr.starts_with("shardlog: "), "stderr: {}", self.stderr);
        assert!(!self.stderr.contains("panicked"), "stderr: {}", self.stderr);
        self
    }
}

/// Runs `shardlog --bootstrap <broker> <args>` with `stdin`.
fn cli(bootstrap: &str, args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardlog"))
        .arg("--bootstrap")
        .arg(bootstrap)
        .args(args)
        .env_remove("SHARDLOG_BOOTSTRAP")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting shardlog");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let Output { status, stdout, stderr } = child.wait_with_output().unwrap();
    Run {
        success: status.success(),
        code: status.code(),
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

#[test]
fn cli_topic_create_list_describe_and_delete() {
    let broker = Broker::start(2, &[]);
    let b = &broker.bootstrap();
    let created = cli(
        b,
        &["topic", "create", "trades", "--partitions", "3", "--config", "retention.ms=3600000"],
        "",
    )
    .ok();
    assert_eq!(created.stdout, "created topic 'trades' with 3 partitions\n");
    cli(b, &["topic", "create", "quotes", "--partitions", "1", "--format", "json"], "").ok();

    let list = cli(b, &["topic", "list"], "").ok();
    assert!(list.stdout.starts_with("TOPIC"), "{}", list.stdout);
    assert_eq!(list.rows(), vec![vec!["quotes", "1"], vec!["trades", "3"]]);
    let list = cli(b, &["--format", "json", "topic", "list"], "").ok().json();
    assert_eq!(list[1]["name"], "trades");
    assert_eq!(list[1]["partitions"], 3);

    let described = cli(b, &["topic", "describe", "trades", "--format", "json"], "").ok().json();
    let partitions = described["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 3);
    for (i, p) in partitions.iter().enumerate() {
        assert_eq!(p["partition"], i as i64);
        assert!((0..2).contains(&p["leader"].as_i64().unwrap()), "leader is a shard: {p}");
        assert_eq!(
            (p["log_start_offset"].as_i64(), p["log_end_offset"].as_i64()),
            (Some(0), Some(0))
        );
    }
    assert_eq!(described["configs"]["retention.ms"]["value"], "3600000");
    assert_eq!(described["configs"]["retention.ms"]["is_default"], false);
    assert_eq!(described["configs"]["cleanup.policy"]["is_default"], true);
    let table = cli(b, &["topic", "describe", "trades"], "").ok().stdout;
    assert!(table.contains("PARTITION  LEADER_SHARD  LOG_START_OFFSET  LOG_END_OFFSET"), "{table}");
    let retention =
        table.lines().find(|l| l.starts_with("retention.ms")).expect("retention.ms row");
    assert_eq!(
        retention.split_whitespace().collect::<Vec<_>>(),
        ["retention.ms", "3600000", "topic"]
    );

    let deleted = cli(b, &["topic", "delete", "quotes"], "").ok();
    assert_eq!(deleted.stdout, "deleted topic 'quotes'\n");
    assert_eq!(cli(b, &["topic", "list"], "").ok().rows(), vec![vec!["trades", "3"]]);
}

#[test]
fn cli_errors_are_sentences_with_kafka_names_and_a_failing_exit_code() {
    let broker = Broker::start(1, &[]);
    let b = &broker.bootstrap();
    cli(b, &["topic", "create", "orders", "--partitions", "1"], "").ok();
    let again = cli(b, &["topic", "create", "orders", "--partitions", "1"], "").failed();
    assert_eq!(again.stderr, "shardlog: topic 'orders' already exists (TOPIC_ALREADY_EXISTS)\n");
    let missing = cli(b, &["topic", "describe", "nope"], "").failed();
    assert!(missing.stderr.contains("topic 'nope' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"));
    let missing = cli(b, &["topic", "delete", "nope"], "").failed();
    assert!(missing.stderr.contains("(UNKNOWN_TOPIC_OR_PARTITION)"), "{}", missing.stderr);
    let zero = cli(b, &["topic", "create", "z", "--partitions", "0"], "").failed();
    assert!(zero.stderr.contains("(INVALID_PARTITIONS)"), "{}", zero.stderr);
    let produce = cli(b, &["produce", "orders", "--partition", "5"], "x\n").failed();
    assert!(produce.stderr.contains("topic 'orders' has no partition 5"), "{}", produce.stderr);
    let group = cli(b, &["group", "describe", "no-such-group"], "").failed();
    assert!(group.stderr.contains("group 'no-such-group' does not exist"), "{}", group.stderr);

    // A port nothing listens on (a killed broker's listeners can linger for a moment, so
    // not its port): one the kernel handed out and that was closed again.
    let gone =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let unreachable = cli(&gone, &["topic", "list"], "").failed();
    assert!(
        unreachable.stderr.starts_with(&format!("shardlog: cannot reach broker at {gone}")),
        "{}",
        unreachable.stderr
    );
}

#[test]
fn cli_produce_prints_offsets_and_consume_reads_them_back() {
    let broker = Broker::start(2, &[]);
    let b = &broker.bootstrap();
    cli(b, &["topic", "create", "ticks", "--partitions", "2"], "").ok();

    let produced = cli(b, &["produce", "ticks", "--partition", "1"], "a\nb\nc\n").ok();
    assert_eq!(produced.rows(), vec![vec!["1", "0"], vec!["1", "1"], vec!["1", "2"]]);
    let produced = cli(
        b,
        &["produce", "ticks", "--partition", "1", "--key", "AAPL", "--format", "json"],
        "d\r\ne\n",
    )
    .ok();
    let offsets: Vec<(i64, i64)> = produced
        .json_lines()
        .iter()
        .map(|l| (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap()))
        .collect();
    assert_eq!(offsets, vec![(1, 3), (1, 4)]);
    let keyed = cli(b, &["produce", "ticks", "--key", "MSFT", "--format", "json"], "f\n").ok();
    let keyed_partition = keyed.json_lines()[0]["partition"].as_i64().unwrap();
    let expected = shardlog_net::partitioner::partition_for_key(b"MSFT", 2);
    assert_eq!(
        keyed_partition,
        i64::from(expected),
        "keyed records go where Java's partitioner puts them"
    );

    let consumed = cli(
        b,
        &[
            "consume",
            "ticks",
            "--from-beginning",
            "--partition",
            "1",
            "--max-messages",
            "5",
            "--format",
            "json",
        ],
        "",
    )
    .ok();
    let records: Vec<(i64, Value, String)> = consumed
        .json_lines()
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().unwrap(),
                r["key"].clone(),
                r["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let aapl = Value::from("AAPL");
    assert_eq!(
        records,
        vec![
            (0, Value::Null, "a".into()),
            (1, Value::Null, "b".into()),
            (2, Value::Null, "c".into()),
            (3, aapl.clone(), "d".into()),
            (4, aapl, "e".into()),
        ]
    );
    // All partitions, until nothing arrives for a while: every record once.
    let all = cli(b, &["consume", "ticks", "--from-beginning", "--timeout-ms", "1500"], "").ok();
    assert!(all.stdout.starts_with("PARTITION"), "{}", all.stdout);
    let mut values: Vec<String> = all.rows().iter().map(|r| r.last().unwrap().clone()).collect();
    values.sort();
    assert_eq!(values, ["a", "b", "c", "d", "e", "f"]);
    // From the end (the default), nothing old is printed.
    let tail = cli(b, &["consume", "ticks", "--timeout-ms", "500"], "").ok();
    assert_eq!(tail.rows().len(), 0, "{}", tail.stdout);

    let described = cli(b, &["topic", "describe", "ticks", "--format", "json"], "").ok().json();
    assert_eq!(described["partitions"][1]["log_end_offset"], 5);
}

/// A subscribed rdkafka consumer of `group` that has its assignment.
fn subscribed_consumer(broker: &Broker, group: &str, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", group)
        .set("client.id", "lag-test")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    eventually(Duration::from_secs(30), "the consumer's assignment", || {
        let _ = consumer.poll(Duration::from_millis(100));
        consumer.assignment().is_ok_and(|a| a.count() > 0)
    });
    consumer
}

#[test]
fn cli_group_list_and_describe_show_members_committed_offsets_and_lag() {
    let broker = Broker::start(2, &[]);
    let b = &broker.bootstrap();
    cli(b, &["topic", "create", "feed", "--partitions", "1"], "").ok();
    cli(b, &["produce", "feed"], "1\n2\n3\n4\n5\n").ok();
    let consumer = subscribed_consumer(&broker, "readers", "feed");
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset("feed", 0, Offset::Offset(2)).unwrap();
    consumer.commit(&commit, CommitMode::Sync).unwrap();

    let list = cli(b, &["group", "list"], "").ok();
    let row = list.rows().into_iter().find(|r| r[0] == "readers").expect("group listed");
    assert_eq!(&row[1..3], ["Stable", "consumer"]);
    let listed = cli(b, &["group", "list", "--format", "json"], "").ok().json();
    assert_eq!(listed[0]["group"], "readers");

    let described = cli(b, &["group", "describe", "readers", "--format", "json"], "").ok().json();
    assert_eq!(described["state"], "Stable");
    let members = described["members"].as_array().unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0]["client_id"], "lag-test");
    assert_eq!(members[0]["assignment"]["feed"], serde_json::json!([0]));
    let offsets = &described["offsets"][0];
    assert_eq!((offsets["topic"].as_str(), offsets["partition"].as_i64()), (Some("feed"), Some(0)));
    assert_eq!(offsets["committed_offset"], 2);
    assert_eq!(offsets["high_watermark"], 5);
    assert_eq!(offsets["lag"], 3);
    assert_eq!(offsets["member_id"], members[0]["member_id"]);

    let table = cli(b, &["group", "describe", "readers"], "").ok().stdout;
    assert!(table.starts_with("group: readers  state: Stable"), "{table}");
    let row = table.lines().find(|l| l.starts_with("feed ")).expect("offsets row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..5], ["feed", "0", "2", "5", "3"]);
}

/// Expected to fail until the broker serves IncrementalAlterConfigs (API key 44); until
/// then the CLI must say so in words.
#[test]
fn cli_topic_alter_config() {
    let broker = Broker::start(1, &[]);
    let b = &broker.bootstrap();
    cli(b, &["topic", "create", "alerts", "--partitions", "1"], "").ok();
    let altered = cli(b, &["topic", "alter-config", "alerts", "--set", "retention.ms=1000"], "");
    assert!(!altered.stderr.contains("panicked"), "{}", altered.stderr);
    let altered = altered.ok();
    assert_eq!(altered.stdout, "altered configs of topic 'alerts'\n");
    let configs = |b: &str| {
        cli(b, &["topic", "describe", "alerts", "--format", "json"], "").ok().json()["configs"]
            .clone()
    };
    assert_eq!(configs(b)["retention.ms"]["value"], "1000");
    assert_eq!(configs(b)["retention.ms"]["is_default"], false);
    cli(b, &["topic", "alter-config", "alerts", "--delete", "retention.ms"], "").ok();
    assert_eq!(configs(b)["retention.ms"]["is_default"], true);
}

#[test]
fn cli_alter_config_without_changes_is_refused() {
    let broker = Broker::start(1, &[]);
    let refused = cli(&broker.bootstrap(), &["topic", "alter-config", "alerts"], "").failed();
    assert!(refused.stderr.contains("nothing to change"), "{}", refused.stderr);
}

#[test]
fn cli_disk_check_measures_both_sync_modes_and_leaves_no_scratch_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["disk-check", "--dir", data.to_str().unwrap(), "--ops", "20", "--pace-us", "100"];
    let run = cli("127.0.0.1:1", &args, "").ok();
    for mode in ["(fdatasync)", "(dsync)", "100 us apart (paced)"] {
        let line = run.stdout.lines().find(|l| l.contains(mode)).expect(mode);
        let figures: Vec<u64> =
            line.split_whitespace().rev().take(2).map(|f| f.parse().expect(line)).collect();
        assert!(figures.iter().all(|&us| us > 0), "{line}");
    }
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0, "scratch file removed");
    cli("127.0.0.1:1", &["disk-check", "--dir", data.to_str().unwrap(), "--ops", "0"], "").failed();
}

#[test]
fn cli_txn_list_and_describe_show_an_open_transaction_and_its_partitions() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let broker = Broker::start(2, &[]);
    let b = &broker.bootstrap();
    cli(b, &["topic", "create", "pay", "--partitions", "2"], "").ok();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b)
        .set("transactional.id", "payments-1")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    producer.begin_transaction().unwrap();
    for partition in [0, 1] {
        let record = BaseRecord::<(), _>::to("pay").payload("x").partition(partition);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(timeout).unwrap();

    let list = cli(b, &["txn", "list"], "").ok();
    let row = list.rows().into_iter().find(|r| r[0] == "payments-1").expect("id listed");
    assert_eq!(row[2], "Ongoing");
    let described = cli(b, &["txn", "describe", "payments-1", "--format", "json"], "").ok().json();
    assert_eq!(described["state"], "Ongoing");
    assert_eq!(described["partitions"], serde_json::json!(["pay-0", "pay-1"]));
    assert!(described["start_time_ms"].as_i64().is_some());

    producer.commit_transaction(timeout).unwrap();
    let described = cli(b, &["txn", "describe", "payments-1", "--format", "json"], "").ok().json();
    assert_eq!(described["state"], "CompleteCommit");
    assert_eq!(described["partitions"], serde_json::json!([]));
    let unknown = cli(b, &["txn", "describe", "nobody"], "").failed();
    assert!(unknown.stderr.contains("TRANSACTIONAL_ID_NOT_FOUND"), "{}", unknown.stderr);
}

#[test]
fn cli_acl_add_list_and_remove_and_a_caller_without_alter_is_refused_cleanly() {
    let broker = Broker::start(1, &["--authorizer", "true", "--super-users", "User:ANONYMOUS"]);
    let b = &broker.bootstrap();
    let alice = "User:CN=alice,O=Example";
    let added = cli(
        b,
        &["acl", "add", "--principal", alice, "--operation", "write", "--operation", "read"],
        "",
    );
    added.failed();
    let add = ["acl", "add", "--principal", alice, "--operation", "write", "--operation", "read"];
    let added = cli(b, &[&add[..], &["--topic", "orders"]].concat(), "").ok();
    assert_eq!(added.stdout, "created 2 ACL(s)\n");
    let deny = ["acl", "add", "--principal", "User:*", "--operation", "all", "--deny"];
    cli(b, &[&deny[..], &["--topic", "ord", "--prefixed"]].concat(), "").ok();

    let listed = cli(b, &["acl", "list"], "").ok();
    assert!(listed.stdout.starts_with("RESOURCE"), "{}", listed.stdout);
    assert_eq!(listed.rows().len(), 3, "{}", listed.stdout);
    let matching =
        cli(b, &["acl", "list", "--topic", "orders", "--matching", "--format", "json"], "")
            .ok()
            .json();
    let operations: Vec<&str> =
        matching.as_array().unwrap().iter().map(|a| a["operation"].as_str().unwrap()).collect();
    assert_eq!(operations.len(), 3, "the literal ones and the prefixed DENY: {matching}");
    assert!(operations.contains(&"ALL") && operations.contains(&"WRITE"), "{matching}");
    let exact = cli(b, &["acl", "list", "--topic", "orders", "--format", "json"], "").ok().json();
    assert_eq!(exact.as_array().unwrap().len(), 2, "{exact}");

    let removed =
        cli(b, &["acl", "remove", "--topic", "ord", "--prefixed", "--format", "json"], "")
            .ok()
            .json();
    assert_eq!(removed[0]["permission"], "DENY");
    assert_eq!(removed[0]["pattern_type"], "PREFIXED");
    assert_eq!(cli(b, &["acl", "list"], "").ok().rows().len(), 2);
    cli(b, &["acl", "remove"], "").failed();

    // Without ALTER on the cluster the broker refuses, and the CLI says why.
    let locked = Broker::start(1, &["--authorizer", "true"]);
    let refused = cli(&locked.bootstrap(), &[&add[..], &["--topic", "orders"]].concat(), "");
    let refused = refused.failed();
    assert!(refused.stderr.contains("CLUSTER_AUTHORIZATION_FAILED"), "{}", refused.stderr);
}

/// The CLI over SASL_SSL: Kafka client properties in `--command-config` log the super user
/// in with SCRAM-SHA-512 to create a user and a topic; the new user logs in with flags
/// (SCRAM and PLAIN; the authorizer then refuses it what it may not do, which shows it
/// authenticated); a wrong password and a missing CA fail in words with exit code 1.
#[test]
fn cli_creates_a_user_and_a_topic_over_sasl_ssl_with_scram_sha_512() {
    let extra = ["--authorizer", "true", "--super-users", "User:admin"];
    let (broker, port) = tls::sasl_broker(1, "SASL_SSL", ("admin", "admin-secret"), &extra);
    let addr = format!("127.0.0.1:{port}");
    let ca = tls::ca_file(&broker);
    let properties = format!(
        "# as for kafka-topics.sh --command-config\nsecurity.protocol=SASL_SSL\n\
         sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\n\
         ssl.ca.location={ca}\n"
    );
    let admin_config = tls::write(broker.dir.path(), "admin.properties", &properties);
    let as_admin = |args: &[&str], stdin: &str| {
        let mut all = vec!["--command-config", admin_config.to_str().unwrap()];
        all.extend(args);
        cli(&addr, &all, stdin)
    };
    let create = ["user", "create", "alice", "--mechanism", "SCRAM-SHA-512", "--password-stdin"];
    as_admin(&create, "alice-secret\n").ok();
    as_admin(&["topic", "create", "secured", "--partitions", "2"], "").ok();
    let users = as_admin(&["user", "list", "--format", "json"], "").ok().json();
    assert!(users.to_string().contains("alice"), "{users}");
    assert_eq!(as_admin(&["topic", "list"], "").ok().rows(), vec![vec!["secured", "2"]]);

    let as_alice = |mechanism: &str, password: &str, ca: &str| {
        let flags = ["--security-protocol", "SASL_SSL", "--ssl-ca-location", ca];
        let login = ["--sasl-username", "alice", "--sasl-password", password];
        let mut all = flags.to_vec();
        all.extend(login);
        all.extend(["--sasl-mechanism", mechanism, "user", "list"]);
        cli(&addr, &all, "")
    };
    for mechanism in ["SCRAM-SHA-512", "PLAIN"] {
        let refused = as_alice(mechanism, "alice-secret", &ca).failed();
        assert!(refused.stderr.contains("CLUSTER_AUTHORIZATION_FAILED"), "{}", refused.stderr);
    }
    let wrong = as_alice("SCRAM-SHA-512", "not-her-password", &ca).failed();
    assert!(wrong.stderr.contains("SASL_AUTHENTICATION_FAILED"), "{}", wrong.stderr);
    assert_eq!(wrong.code, Some(1));
    let other_ca = tls::Ca::new("another CA").write(broker.dir.path(), "other-ca.pem");
    let untrusted = as_alice("SCRAM-SHA-512", "alice-secret", other_ca.to_str().unwrap()).failed();
    assert!(untrusted.stderr.contains("TLS handshake"), "{}", untrusted.stderr);
}

/// The CLI over SSL with a client certificate whose principal is a super user: it creates
/// a user and a topic; without the certificate the broker refuses the connection, and the
/// CLI says so.
#[test]
fn cli_creates_a_user_and_a_topic_over_ssl_with_a_client_certificate() {
    let cores = 1;
    let (mut ssl_port, mut cert_file, mut key_file) = (0, String::new(), String::new());
    let super_user = "User:CN=ops,OU=eng,O=Example";
    let broker = Broker::start_configured(cores, &[], |b| {
        ssl_port = tls::second_listener_port(b.port, cores);
        let files = tls::BrokerTls::new(b.dir.path());
        let (cert, key) = files.ca.issue_client("ops");
        cert_file = tls::write(b.dir.path(), "ops.pem", &cert).display().to_string();
        key_file = tls::write(b.dir.path(), "ops.key", &key).display().to_string();
        let listeners = format!("SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{}", b.port);
        let mut args = vec!["--listeners".to_string(), listeners];
        args.extend(files.args());
        let ca = b.dir.path().join("ca.pem").display().to_string();
        args.extend(["--tls-client-ca-file".into(), ca]);
        args.extend(["--authorizer", "true", "--super-users", super_user].map(String::from));
        args
    });
    let addr = format!("127.0.0.1:{ssl_port}");
    let ca = tls::ca_file(&broker);
    let ssl = ["--security-protocol", "SSL", "--ssl-ca-location", &ca];
    let with_certificate = |args: &[&str], stdin: &str| {
        let mut all = ssl.to_vec();
        all.extend(["--ssl-certificate-location", &cert_file, "--ssl-key-location", &key_file]);
        all.extend(args);
        cli(&addr, &all, stdin)
    };
    with_certificate(&["user", "create", "bob", "--password-stdin"], "bob-secret\n").ok();
    with_certificate(&["topic", "create", "over-ssl"], "").ok();
    let users = with_certificate(&["user", "list", "--format", "json"], "").ok().json();
    assert!(users.to_string().contains("bob"), "{users}");
    let topics = with_certificate(&["topic", "list"], "").ok();
    assert_eq!(topics.rows(), vec![vec!["over-ssl", "1"]]);

    let mut without = ssl.to_vec();
    without.extend(["topic", "list"]);
    let refused = cli(&addr, &without, "").failed();
    assert!(refused.stderr.contains("TLS"), "{}", refused.stderr);
    // The listener's ports advertise TLS only: plaintext to it is refused, cleanly.
    let plaintext = cli(&addr, &["topic", "list"], "").failed();
    assert!(plaintext.stderr.contains(&addr), "{}", plaintext.stderr);
}

#[test]
fn cli_refuses_client_properties_it_cannot_honour_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let properties = "security.protocol=SSL\nssl.key.password=secret\n";
    let file = tls::write(dir.path(), "client.properties", properties);
    let run =
        cli("127.0.0.1:1", &["--command-config", file.to_str().unwrap(), "topic", "list"], "");
    let run = run.failed();
    assert!(run.stderr.contains("ssl.key.password"), "{}", run.stderr);
    let missing =
        cli("127.0.0.1:1", &["--command-config", "/nonexistent/x.properties", "topic", "list"], "");
    assert!(missing.failed().stderr.contains("/nonexistent/x.properties"));
}
