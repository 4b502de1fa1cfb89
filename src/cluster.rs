//! The cluster this node belongs to: `--node-id` and `--peers` (docs/replication.md,
//! "Nodes and membership"), checked once at start-up, before any shard starts.
//!
//! Membership is static: every node is given the same list, itself included, of every
//! node's id and Kafka bootstrap address. Shard s of a node with C shards and bootstrap
//! port P listens for replication on `P + 1 + C + s` (right after its Kafka shard ports
//! `P + 1 + s`), and connects to shard s of every other node at the port computed the
//! same way from that node's entry. No list, or a list of this node alone, is a single
//! node: no replication port is opened and nothing changes.
//!
//! Invariants (each refused at start-up with a message naming the setting):
//! 1. Node ids are unique and at most `MAX_NODE_ID`, so a broker id
//!    `node_id * 1024 + shard` fits Kafka's int32 (and a node runs at most 1024 shards).
//! 2. This node is in the list, on the bootstrap port (and IP, unless it binds all
//!    interfaces) of its first listener: the address its peers compute its ports from.
//! 3. Every address resolves, and every node's replication ports fit in 1..=65535; no two
//!    nodes share an address; this node's replication ports collide with none of its own
//!    Kafka ports nor its admin port.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use shardlog_shards::replication::frame::MAX_BODY_BYTES;

use crate::config::Config;
use crate::listeners::Listener;

/// The largest node id: `node_id * 1024 + 1023` is at most `i32::MAX`.
pub const MAX_NODE_ID: u64 = (i32::MAX as u64 + 1) / SHARDS_PER_NODE_MAX - 1;

/// Broker ids leave 1024 per node (`node_id * 1024 + shard`).
const SHARDS_PER_NODE_MAX: u64 = 1024;

/// One node of `--peers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: u64,
    /// The entry as written (HOST:PORT), for messages.
    pub written: String,
    /// Its Kafka bootstrap address (HOST resolved once, here; the first address if it
    /// has several). Its IP is also the only one its connections may come from.
    pub bootstrap: SocketAddr,
}

/// This node and the others, when `--peers` names other nodes.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub node_id: u64,
    /// Every other node, by id.
    pub peers: Vec<Node>,
    /// Shards of every node (checked at each connection's hand-shake).
    pub nr_shards: usize,
    /// The IP this node's replication ports bind (its first listener's).
    bind_ip: IpAddr,
    /// This node's bootstrap port.
    bootstrap_port: u16,
}

impl Node {
    /// The host of its entry as written (a name or an IP, without brackets): where
    /// clients are told to reach its shards.
    pub fn host(&self) -> &str {
        let host = self.written.rsplit_once(':').map_or(self.written.as_str(), |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl Cluster {
    /// Where this node's shard `shard` listens for its peers.
    pub fn listen_addr(&self, shard: usize) -> SocketAddr {
        SocketAddr::new(self.bind_ip, replication_port(self.bootstrap_port, self.nr_shards, shard))
    }

    /// Where shard `shard` of every peer listens: (node id, address).
    pub fn peer_addrs(&self, shard: usize) -> Vec<(u64, SocketAddr)> {
        let addr = |n: &Node| {
            SocketAddr::new(
                n.bootstrap.ip(),
                replication_port(n.bootstrap.port(), self.nr_shards, shard),
            )
        };
        self.peers.iter().map(|n| (n.id, addr(n))).collect()
    }

    /// This node's id as the topic table records it (`MAX_NODE_ID` fits a u32).
    pub fn node(&self) -> u32 {
        self.node_id as u32
    }

    /// Every node's id, this one included, sorted: where partitions are placed.
    pub fn nodes(&self) -> Vec<u32> {
        let mut nodes: Vec<u32> = self.peers.iter().map(|n| n.id as u32).collect();
        nodes.push(self.node());
        nodes.sort_unstable();
        nodes
    }

    /// Every other node's (id, bootstrap address), for the start-up line.
    pub fn peer_bootstraps(&self) -> Vec<(u64, SocketAddr)> {
        self.peers.iter().map(|n| (n.id, n.bootstrap)).collect()
    }

    /// This node's replication ports, first to last.
    pub fn ports(&self) -> std::ops::RangeInclusive<u16> {
        let first = replication_port(self.bootstrap_port, self.nr_shards, 0);
        first..=replication_port(self.bootstrap_port, self.nr_shards, self.nr_shards - 1)
    }
}

/// `P + 1 + C + s`; `resolve` checked that it fits.
fn replication_port(bootstrap: u16, nr_shards: usize, shard: usize) -> u16 {
    (bootstrap as usize + 1 + nr_shards + shard) as u16
}

/// The cluster from the settings, `None` for a single node; see the module docs for the
/// rules. `listeners` are this node's, resolved (`listeners::resolve`).
pub fn resolve(
    config: &Config,
    listeners: &[Listener],
    nr_shards: usize,
) -> Result<Option<Cluster>, String> {
    if config.peers.is_empty() {
        return Ok(None);
    }
    let node_id = config.node_id;
    if node_id > MAX_NODE_ID {
        return Err(format!(
            "--node-id {node_id}: at most {MAX_NODE_ID} (broker ids are node_id * 1024 + shard, \
             a Kafka int32)"
        ));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(config.peers.len());
    for entry in &config.peers {
        let node = parse_node(entry).map_err(|e| format!("--peers: {e}"))?;
        if let Some(other) = nodes.iter().find(|n| n.id == node.id) {
            return Err(format!(
                "--peers: node {} is listed twice ({} and {})",
                node.id, other.written, node.written
            ));
        }
        if let Some(other) = nodes.iter().find(|n| n.bootstrap == node.bootstrap) {
            return Err(format!(
                "--peers: nodes {} and {} have the same address {}",
                other.id, node.id, node.bootstrap
            ));
        }
        nodes.push(node);
    }
    let Some(own) = nodes.iter().position(|n| n.id == node_id) else {
        let ids: Vec<String> = nodes.iter().map(|n| n.id.to_string()).collect();
        return Err(format!(
            "--peers lists nodes {} but not this node (--node-id {node_id}): list every \
             node, this one included, the same list on every node",
            ids.join(", ")
        ));
    };
    let own = nodes.remove(own);
    if nodes.is_empty() {
        return Ok(None);
    }
    nodes.sort_by_key(|n| n.id);
    if nr_shards as u64 > SHARDS_PER_NODE_MAX {
        return Err(format!(
            "--peers: a node of a cluster runs at most {SHARDS_PER_NODE_MAX} shards, not \
             {nr_shards} (broker ids are node_id * 1024 + shard)"
        ));
    }
    // A raft snapshot a leader sends (up to one frame's body) is written as one entry of
    // this node's log, and one entry holds at most a segment (docs/replication.md, "Raft
    // writes larger than one log entry").
    let min_segment = 2 * MAX_BODY_BYTES as u64;
    if config.segment_bytes < min_segment {
        return Err(format!(
            "--segment-bytes {} is too small for a node of a cluster: a raft snapshot of up \
             to {MAX_BODY_BYTES} bytes must fit one log entry; use at least {min_segment}",
            config.segment_bytes
        ));
    }
    let first = &listeners[0];
    check_own_entry(&own, first)?;
    for node in nodes.iter().chain([&own]) {
        let last = node.bootstrap.port() as usize + 2 * nr_shards;
        if last > u16::MAX as usize {
            return Err(format!(
                "--peers: node {} ({}): its replication ports would end at {last}, past \
                 65535 (bootstrap port + 1 + 2 x {nr_shards} shards)",
                node.id, node.written
            ));
        }
    }
    let cluster = Cluster {
        node_id,
        peers: nodes,
        nr_shards,
        bind_ip: first.bind.ip(),
        bootstrap_port: own.bootstrap.port(),
    };
    check_collisions(&cluster, config, listeners)?;
    Ok(Some(cluster))
}

/// Invariant 2: peers compute this node's ports from its entry.
fn check_own_entry(own: &Node, first: &Listener) -> Result<(), String> {
    if own.bootstrap.port() != first.bind.port() {
        return Err(format!(
            "--peers lists this node (node {}) at {}, but its first listener {first} binds \
             port {}: its peers compute its replication ports from the listed port",
            own.id,
            own.written,
            first.bind.port()
        ));
    }
    let bind_ip = first.bind.ip();
    if !bind_ip.is_unspecified() && bind_ip.to_canonical() != own.bootstrap.ip().to_canonical() {
        return Err(format!(
            "--peers lists this node (node {}) at {} ({}), but its first listener {first} \
             binds {bind_ip}: its peers could not reach its replication ports",
            own.id,
            own.written,
            own.bootstrap.ip()
        ));
    }
    Ok(())
}

/// Invariant 3, this node's side: its replication ports are its own.
fn check_collisions(
    cluster: &Cluster,
    config: &Config,
    listeners: &[Listener],
) -> Result<(), String> {
    let ports = cluster.ports();
    for listener in listeners {
        let kafka = listener.ports(cluster.nr_shards);
        if kafka.start() <= ports.end() && ports.start() <= kafka.end() {
            return Err(format!(
                "the replication ports {ports:?} (bootstrap port + 1 + shards + shard) collide \
                 with the Kafka ports {kafka:?} of {listener}"
            ));
        }
    }
    if ports.contains(&config.admin_addr.port()) {
        return Err(format!(
            "--admin-addr {} collides with the replication ports {ports:?} (bootstrap port + \
             1 + shards + shard)",
            config.admin_addr
        ));
    }
    Ok(())
}

/// `ID=HOST:PORT`; HOST a name, an IPv4 address or a bracketed IPv6 address.
fn parse_node(entry: &str) -> Result<Node, String> {
    let bad = |why: String| format!("'{entry}': {why} (expected ID=HOST:PORT)");
    let (id, address) = entry.trim().split_once('=').ok_or_else(|| bad("no '='".into()))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| bad(format!("the node id '{id}' is not a non-negative integer")))?;
    if id > MAX_NODE_ID {
        return Err(bad(format!("node id {id} is over {MAX_NODE_ID}")));
    }
    let address = address.trim();
    let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no port".into()))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| bad(format!("the port '{port}' is not a number from 1 to 65535")))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() {
        return Err(bad("no host".into()));
    }
    let resolved = match host.parse::<IpAddr>() {
        Ok(ip) => Some(SocketAddr::new(ip, port)),
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(format!("cannot resolve '{host}': {e}")))?
            .next(),
    };
    let bootstrap = resolved.ok_or_else(|| bad(format!("'{host}' resolves to no address")))?;
    if bootstrap.ip().is_unspecified() {
        return Err(bad(format!("{} is not an address a peer can connect to", bootstrap.ip())));
    }
    Ok(Node { id, written: address.to_string(), bootstrap })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    fn cluster(args: &[&str]) -> Result<Option<Cluster>, String> {
        let mut all = vec!["shardlog", "--kafka-addr", "127.0.0.1:9092", "--cores", "2"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).unwrap();
        let listeners = crate::listeners::resolve(&cli.config, 2).unwrap();
        resolve(&cli.config, &listeners, 2)
    }

    const THREE: &str = "1=127.0.0.1:9092,2=127.0.0.2:9092,3=localhost:19092";

    #[test]
    fn no_peers_or_this_node_alone_is_a_single_node() {
        assert!(cluster(&[]).unwrap().is_none());
        assert!(cluster(&["--node-id", "4", "--peers", "4=127.0.0.1:9092"]).unwrap().is_none());
    }

    #[test]
    fn shard_s_listens_and_connects_on_bootstrap_plus_one_plus_shards_plus_s() {
        let cluster = cluster(&["--node-id", "1", "--peers", THREE]).unwrap().unwrap();
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(cluster.listen_addr(0), addr("127.0.0.1:9095"));
        assert_eq!(cluster.listen_addr(1), addr("127.0.0.1:9096"));
        assert_eq!(cluster.ports(), 9095..=9096);
        let peers = cluster.peer_addrs(1);
        assert_eq!(peers[0], (2, addr("127.0.0.2:9096")));
        assert_eq!(peers[1].0, 3);
        assert_eq!(peers[1].1.port(), 19096);
        assert!(peers[1].1.ip().is_loopback(), "{:?}", peers[1]);
    }

    #[test]
    fn a_bad_list_is_refused_with_the_reason() {
        let refused = |node: &str, peers: &str, expected: &str| {
            let e = cluster(&["--node-id", node, "--peers", peers]).unwrap_err();
            assert!(e.contains(expected), "{peers}: {e}");
        };
        refused("9", THREE, "but not this node (--node-id 9)");
        refused("1", "1=127.0.0.1:9092,1=127.0.0.2:9092", "node 1 is listed twice");
        refused("1", "1=127.0.0.1:9092,2=127.0.0.1:9092", "have the same address");
        refused("1", "1=127.0.0.1:9092,2127.0.0.2:9092", "no '='");
        refused("1", "1=127.0.0.1:9092,x=127.0.0.2:9092", "node id 'x'");
        refused("1", "1=127.0.0.1:9092,2=127.0.0.2", "no port");
        refused("1", "1=127.0.0.1:9092,2=127.0.0.2:0", "the port '0'");
        refused("1", "1=127.0.0.1:9092,2=127.0.0.2:70000", "the port '70000'");
        refused("1", "1=127.0.0.1:9092,2=:9092", "no host");
        refused("1", "1=127.0.0.1:9092,2=no-such-host.invalid:9092", "cannot resolve");
        refused("1", "1=127.0.0.1:9092,2=0.0.0.0:9092", "not an address a peer can connect to");
        refused("1", "1=127.0.0.1:9093,2=127.0.0.2:9092", "binds port 9092");
        refused("1", "1=127.0.0.3:9092,2=127.0.0.2:9092", "binds 127.0.0.1");
        refused("1", "1=127.0.0.1:9092,2=127.0.0.2:65533", "past 65535");
        refused("3000000", "3000000=127.0.0.1:9092", "at most 2097151");
        let e = cluster(&["--node-id", "1", "--peers", THREE, "--segment-bytes", "8388607"])
            .unwrap_err();
        assert!(e.contains("use at least 8388608"), "{e}");
        assert!(
            cluster(&["--node-id", "1", "--peers", THREE, "--segment-bytes", "8388608"]).is_ok()
        );
        let e = cluster(&["--node-id", "1", "--peers", THREE, "--admin-addr", "127.0.0.1:9096"])
            .unwrap_err();
        assert!(e.contains("collides with the replication ports"), "{e}");
        let e = cluster(&[
            "--node-id",
            "1",
            "--peers",
            THREE,
            "--listeners",
            "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9096",
            "--tls-cert-file",
            "c",
            "--tls-key-file",
            "k",
        ])
        .unwrap_err();
        assert!(e.contains("collide with the Kafka ports"), "{e}");
    }
}
