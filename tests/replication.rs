//! The replication transport wired into the broker (docs/replication.md, "What exists: the
//! transport in the broker"): three real broker processes on 127.0.0.1, each with its own
//! temp dir and free ports, listing each other in `--peers`. Every shard of every node
//! must report both peers connected in /metrics; a node killed with SIGKILL must be
//! reported disconnected by the others, and reconnected once it restarts. Shard 0 hosts
//! the metadata group (tests/metadata_group.rs checks what it does), and every shard its
//! offsets group (tests/replicated_group_offsets.rs); only the count of groups and the
//! connections are checked here.
//!
//! Also: a bad peer list, and a replication port that cannot be bound, stop the start
//! with exit status 1 and the reason.
//!
//! Every wait polls with a generous deadline that fails with the last figures seen;
//! nothing asserts on speed.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{admin_get, create_topic, free_port_range, Broker};

const CORES: usize = 2;
const NODES: usize = 3;
/// Bootstrap, CORES Kafka shard ports, CORES replication ports, the admin port.
const PORTS_PER_NODE: usize = 2 * CORES + 2;
/// Each wait's deadline: generous, the machine is shared; a hang fails, slowness does not.
const DEADLINE: Duration = Duration::from_secs(120);

/// One node's replication figures: per shard, per metric name.
type Figures = BTreeMap<usize, BTreeMap<String, f64>>;

fn replication_figures(broker: &Broker) -> Figures {
    let (status, text) = admin_get(broker, "/metrics");
    assert_eq!(status, 200, "{text}");
    let mut figures = Figures::new();
    for line in text.lines().filter(|l| l.starts_with("shardlog_replication_")) {
        let Some((name, rest)) = line.split_once("{shard=\"") else { continue };
        let Some((shard, rest)) = rest.split_once('"') else { continue };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        // Labelled families (dropped messages by reason) are summed per shard.
        let shard: usize = shard.parse().unwrap();
        *figures.entry(shard).or_default().entry(name.to_string()).or_default() += value;
    }
    figures
}

/// The figure `name` of every shard of `broker` (a shard that reports none: missing).
fn per_shard(figures: &Figures, name: &str) -> Vec<Option<f64>> {
    (0..CORES).map(|s| figures.get(&s).and_then(|f| f.get(name)).copied()).collect()
}

/// Waits until every broker of `nodes` has `connected` peers connected and as many inbound
/// connections on every shard; fails after the deadline with what each reported last.
fn wait_for_peers(cluster: &[Broker], nodes: &[usize], connected: f64, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let figures: Vec<Figures> =
            nodes.iter().map(|&n| replication_figures(&cluster[n])).collect();
        let all = |name: &str| {
            figures.iter().all(|f| per_shard(f, name).iter().all(|v| *v == Some(connected)))
        };
        if all("shardlog_replication_connected_peers")
            && all("shardlog_replication_inbound_connections")
        {
            return;
        }
        if Instant::now() > deadline {
            let shown: Vec<String> = nodes
                .iter()
                .zip(&figures)
                .map(|(n, f)| {
                    format!(
                        "node {}: connected {:?}, inbound {:?}",
                        n + 1,
                        per_shard(f, "shardlog_replication_connected_peers"),
                        per_shard(f, "shardlog_replication_inbound_connections")
                    )
                })
                .collect();
            panic!("waited {DEADLINE:?} for {what}:\n{}", shown.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_brokers_connect_every_shard_notice_a_killed_node_and_reconnect_it() {
    let mut cluster = Broker::start_cluster(NODES, CORES, PORTS_PER_NODE);

    wait_for_peers(&cluster, &[0, 1, 2], 2.0, "every shard of every node to connect both peers");
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    for (n, broker) in cluster.iter().enumerate() {
        let figures = replication_figures(broker);
        let node = n + 1;
        assert_eq!(per_shard(&figures, "shardlog_replication_peers"), vec![Some(2.0); CORES]);
        let refused = per_shard(&figures, "shardlog_replication_refused_handshakes_total");
        assert_eq!(refused, vec![Some(0.0); CORES], "node {node}: a hand-shake was refused");
        // Every shard hosts its offsets group (consumer-group offsets), shard 0 the
        // metadata group as well.
        let groups = per_shard(&figures, "shardlog_replication_groups");
        assert_eq!(groups, [vec![Some(2.0)], vec![Some(1.0); CORES - 1]].concat(), "node {node}");
        assert!(broker.log().contains("shard replicating"), "node {node}");
        for name in figures.values().flat_map(|f| f.keys()) {
            assert!(docs.contains(&format!("`{name}`")), "{name} is not in docs/metrics.md");
        }
    }

    cluster[2].kill();
    wait_for_peers(&cluster, &[0, 1], 1.0, "nodes 1 and 2 to see node 3 gone");
    // The kernel may keep a dead broker's io_uring listeners for a moment.
    let replication_port = cluster[2].port + 1 + CORES as u16;
    common::eventually(DEADLINE, "node 3's replication ports to close", || {
        (0..CORES as u16).all(|s| TcpStream::connect(("127.0.0.1", replication_port + s)).is_err())
    });

    cluster[2].restart();
    wait_for_peers(&cluster, &[0, 1, 2], 2.0, "node 3 to be reconnected on every shard");
    for (n, broker) in cluster.iter().enumerate().take(2) {
        let figures = replication_figures(broker);
        let reconnects = per_shard(&figures, "shardlog_replication_reconnects_total");
        assert!(
            reconnects.iter().all(|r| r.is_some_and(|r| r >= 1.0)),
            "node {}: reconnects {reconnects:?}",
            n + 1
        );
    }
}

#[test]
fn a_single_node_or_a_node_listed_alone_opens_no_replication_port_and_serves_as_before() {
    let alone = |b: &Broker| {
        let peers = format!("5=127.0.0.1:{}", b.port);
        vec!["--node-id".to_string(), "5".to_string(), "--peers".to_string(), peers]
    };
    let brokers = [Broker::start(CORES, &[]), Broker::start_configured(CORES, &[], alone)];
    for broker in &brokers {
        let (status, text) = admin_get(broker, "/metrics");
        assert_eq!(status, 200, "{text}");
        assert!(!text.contains("shardlog_replication_"), "{text}");
        assert!(!broker.log().contains("shard replicating"), "{}", broker.log());
        // Served as before: a topic is created, and its partitions are on both shards.
        create_topic(broker, "single", 2);
        let partitions = broker.metric_sum("shardlog_partitions");
        assert_eq!(partitions, 2.0, "{}", broker.log());
    }
}

/// The shardlog binary run to its end: exit code and stderr.
fn run_to_failure(dir: &std::path::Path, args: &[String]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_shardlog"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the shardlog binary");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_bad_peer_list_or_a_taken_replication_port_stops_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port_range(PORTS_PER_NODE);
    let admin = format!("127.0.0.1:{}", port + 1 + 2 * CORES as u16);
    let args = |peers: &str| -> Vec<String> {
        [
            "--kafka-addr",
            &format!("127.0.0.1:{port}"),
            "--cores",
            &CORES.to_string(),
            "--admin-addr",
            &admin,
            "--node-id",
            "1",
            "--peers",
            peers,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let (code, stderr) = run_to_failure(dir.path(), &args("2=127.0.0.2:9092,3=127.0.0.3:9092"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("but not this node (--node-id 1)"), "{stderr}");
    let twice = format!("1=127.0.0.1:{port},1=127.0.0.2:9092");
    let (code, stderr) = run_to_failure(dir.path(), &args(&twice));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("node 1 is listed twice"), "{stderr}");

    // Shard 1's replication port bound (not listening) by another socket: shard 1 cannot
    // bind it and the broker exits with the reason.
    let taken = port + 1 + CORES as u16 + 1;
    let _holder = bound_not_listening(taken);
    let peers = format!("1=127.0.0.1:{port},2=127.0.0.2:{port}");
    let (code, stderr) = run_to_failure(dir.path(), &args(&peers));
    assert_eq!(code, Some(1), "{stderr}");
    let expected = format!("shard 1: replication port 127.0.0.1:{taken}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_data_dir_written_by_a_single_node_is_refused_by_a_cluster_node() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let single = Broker::start_with_data_dir(dir.path().join("data"), 1, &[]);
    create_topic(&single, "from-a-single-node", 1);
    drop(single);
    let port = free_port_range(4);
    let peers = format!("1=127.0.0.1:{port},2=127.0.0.1:{}", port + 100);
    let args: Vec<String> = [
        "--kafka-addr",
        &format!("127.0.0.1:{port}"),
        "--cores",
        "1",
        "--admin-addr",
        &format!("127.0.0.1:{}", port + 3),
        "--node-id",
        "1",
        "--peers",
        &peers,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Spawned with a deadline: a broker that accepts the data dir would run on.
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardlog"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(&args)
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the shardlog binary");
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            panic!("a cluster node started on a single node's data dir:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a node joins a cluster with an empty data dir"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A TCP socket bound to 127.0.0.1:`port` that does not listen: nothing answers there (the
/// broker's check for a running broker passes), but a bind fails with EADDRINUSE.
fn bound_not_listening(port: u16) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain socket + bind on a new descriptor, owned by the returned OwnedFd.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
            sin_zero: [0; 8],
        };
        let rc = libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
        owned
    }
}
