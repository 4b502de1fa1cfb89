//! The cost of raft groups at many partitions: one group per partition against one group
//! per (replica set, shard) carrying all its partitions (issue 16's key decision;
//! docs/replication.md).
//!
//! Everything runs in this one process: every replica of every group of a 3-node cluster
//! is a `RaftGroup` (shards/src/replication/, raft-rs underneath), messages go through an
//! in-process router that loses nothing, and each node's disk makes all of its writes
//! durable at once per round (one fdatasync per node per round: the group commit the
//! shard log gives every group on a shard). Time is simulated: one tick is `--tick-ms`.
//!
//! Measured per shape, after every group has elected a leader:
//! - idle: messages, message bytes (protobuf-encoded, no transport framing) and write
//!   requests per simulated second, and the CPU (wall) time one simulated second costs;
//! - memory: resident set growth per replica (from /proc/self/statm) once elected;
//! - produce: `--produce-rounds` requests, each one batch to each of `--batch-partitions`
//!   random partitions, proposed on their leaders (one entry per group: a group carrying
//!   several of the request's partitions proposes them as one entry), routed until
//!   committed; counts per produce request: entries, write requests (log appends),
//!   fdatasyncs (nodes with writes, per round) and messages.
//!
//! Run: `cargo bench -p shardlog-benches --bench raft_groups -- --partitions 10000`
//! (options: `--groups N` groups of shape B, default 8 = shards per node; `--seconds`,
//! `--tick-ms`, `--heartbeat-ticks`, `--batch-partitions`, `--produce-rounds`). Under
//! `cargo test` it runs once with 60 partitions, as a check that it still works.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use protobuf::Message as _;
use shardlog_shards::replication::{GroupConfig, LogImage, Message, RaftGroup};

const NODES: u64 = 3;

struct Options {
    partitions: usize,
    groups: usize,
    seconds: u64,
    tick_ms: u64,
    heartbeat_ticks: usize,
    batch_partitions: usize,
    produce_rounds: usize,
    batch_bytes: usize,
}

impl Options {
    fn parse() -> Options {
        let args: Vec<String> = std::env::args().collect();
        let benching = args.iter().any(|a| a == "--bench");
        let value = |name: &str, default: u64| -> u64 {
            args.iter()
                .position(|a| a == name)
                .and_then(|k| args.get(k + 1))
                .map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name} {v}?")))
        };
        let partitions = value("--partitions", if benching { 10_000 } else { 60 }) as usize;
        Options {
            partitions,
            groups: value("--groups", 8) as usize,
            seconds: value("--seconds", if benching { 10 } else { 2 }),
            tick_ms: value("--tick-ms", 100),
            heartbeat_ticks: value("--heartbeat-ticks", 2) as usize,
            batch_partitions: (value("--batch-partitions", 100) as usize).min(partitions),
            produce_rounds: value("--produce-rounds", if benching { 200 } else { 5 }) as usize,
            batch_bytes: value("--batch-bytes", 1024) as usize,
        }
    }
}

/// One group's three replicas, replica r on node r (raft id r + 1).
struct Cluster {
    /// groups[g][node]
    groups: Vec<Vec<RaftGroup>>,
    counts: Counts,
}

#[derive(Clone, Copy, Default, Debug)]
struct Counts {
    messages: u64,
    message_bytes: u64,
    writes: u64,
    entries_written: u64,
    fdatasyncs: u64,
}

impl Counts {
    fn since(self, before: Counts) -> Counts {
        Counts {
            messages: self.messages - before.messages,
            message_bytes: self.message_bytes - before.message_bytes,
            writes: self.writes - before.writes,
            entries_written: self.entries_written - before.entries_written,
            fdatasyncs: self.fdatasyncs - before.fdatasyncs,
        }
    }
}

impl Cluster {
    fn new(groups: usize, heartbeat_ticks: usize) -> Cluster {
        let voters: Vec<u64> = (1..=NODES).collect();
        let groups = (0..groups)
            .map(|_| {
                voters
                    .iter()
                    .map(|&id| {
                        let mut config = GroupConfig::new(id);
                        config.heartbeat_tick = heartbeat_ticks;
                        config.election_tick = 10 * heartbeat_ticks / 2;
                        RaftGroup::recover(&config, LogImage::new(&voters), 0).unwrap()
                    })
                    .collect()
            })
            .collect();
        Cluster { groups, counts: Counts::default() }
    }

    /// Routes messages and completes writes until nothing moves, visiting only groups with
    /// work (a host tracks those; scanning every group per round would be the benchmark's
    /// own cost). Each round, every node syncs all its groups' writes with one fdatasync,
    /// then messages are delivered.
    fn settle(&mut self, mut active: BTreeSet<usize>) {
        while !active.is_empty() {
            let mut next = BTreeSet::new();
            for node in 0..NODES as usize {
                let mut synced = false;
                for &g in &active {
                    let writes = self.groups[g][node].take_writes();
                    if let Some(last) = writes.last() {
                        self.counts.writes += writes.len() as u64;
                        self.counts.entries_written +=
                            writes.iter().map(|w| w.entries.len() as u64).sum::<u64>();
                        self.groups[g][node].durable(last.number);
                        synced = true;
                        next.insert(g);
                    }
                }
                self.counts.fdatasyncs += synced as u64;
            }
            let mut mail: Vec<(usize, Message)> = Vec::new();
            for &g in &active {
                for replica in self.groups[g].iter_mut() {
                    mail.extend(replica.take_messages().into_iter().map(|m| (g, m)));
                    replica.take_committed();
                    replica.take_outcomes();
                }
            }
            for (g, message) in mail {
                self.counts.messages += 1;
                self.counts.message_bytes += message.compute_size() as u64;
                let to = message.to as usize - 1;
                self.groups[g][to].step(message).expect("members only");
                next.insert(g);
            }
            active = next;
        }
    }

    fn tick(&mut self) {
        for group in self.groups.iter_mut() {
            for replica in group.iter_mut() {
                replica.tick();
            }
        }
        self.settle((0..self.groups.len()).collect());
    }

    fn leader(&self, g: usize) -> Option<usize> {
        self.groups[g].iter().position(|r| r.is_leader())
    }

    fn leaders_on(&self) -> [usize; NODES as usize] {
        let mut on = [0; NODES as usize];
        for g in 0..self.groups.len() {
            if let Some(node) = self.leader(g) {
                on[node] += 1;
            }
        }
        on
    }
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// A tiny deterministic generator for choosing partitions.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn run_shape(name: &str, groups: usize, options: &Options) {
    let partitions_per_group = options.partitions.div_ceil(groups);
    let before = resident_bytes();
    let mut cluster = Cluster::new(groups, options.heartbeat_ticks);
    let mut ticks = 0;
    while (0..groups).any(|g| cluster.leader(g).is_none()) {
        cluster.tick();
        ticks += 1;
        assert!(ticks < 1000, "{name}: groups without a leader after {ticks} ticks");
    }
    let memory = resident_bytes().saturating_sub(before);

    let ticks_per_second = 1000 / options.tick_ms;
    let idle_before = cluster.counts;
    let started = Instant::now();
    for _ in 0..options.seconds * ticks_per_second {
        cluster.tick();
    }
    let idle_wall = started.elapsed();
    let idle = cluster.counts.since(idle_before);
    let per_second = |n: u64| n / options.seconds;

    let mut seed = 0x9E37_79B9_7F4A_7C15;
    let produce_before = cluster.counts;
    let mut entries = 0u64;
    let batch = vec![7u8; options.batch_bytes];
    let started = Instant::now();
    for _ in 0..options.produce_rounds {
        let mut by_group: HashMap<usize, usize> = HashMap::new();
        for _ in 0..options.batch_partitions {
            let partition = next(&mut seed) as usize % options.partitions;
            *by_group.entry(partition / partitions_per_group).or_default() += 1;
        }
        for (&g, &batches) in &by_group {
            let leader = cluster.leader(g).expect("elected");
            let data = batch.repeat(batches);
            cluster.groups[g][leader].propose(data).expect("the leader accepts");
            entries += 1;
        }
        cluster.settle(by_group.keys().copied().collect());
    }
    let produce_wall = started.elapsed();
    let produce = cluster.counts.since(produce_before);
    let rounds = options.produce_rounds as f64;
    let replicas = (groups as u64 * NODES) as f64;
    println!("{name}: {groups} groups x {NODES} replicas, {partitions_per_group} partitions per group, leaders per node {:?}", cluster.leaders_on());
    println!(
        "  idle: {} messages/s ({} bytes/s), {} write requests/s, {:.1} ms CPU per simulated second",
        per_second(idle.messages),
        per_second(idle.message_bytes),
        per_second(idle.writes),
        idle_wall.as_secs_f64() * 1000.0 / options.seconds as f64,
    );
    println!(
        "  memory: {:.1} MiB resident for all replicas, {:.0} bytes per replica",
        memory as f64 / (1 << 20) as f64,
        memory as f64 / replicas
    );
    println!(
        "  produce request of {} batches: {:.1} entries proposed, {:.1} write requests \
         ({:.1} entries written), {:.1} fdatasyncs, {:.1} messages ({:.0} bytes), \
         {:.0} us CPU",
        options.batch_partitions,
        entries as f64 / rounds,
        produce.writes as f64 / rounds,
        produce.entries_written as f64 / rounds,
        produce.fdatasyncs as f64 / rounds,
        produce.messages as f64 / rounds,
        produce.message_bytes as f64 / rounds,
        produce_wall.as_secs_f64() * 1e6 / rounds,
    );
}

fn main() {
    let options = Options::parse();
    println!(
        "{} partitions, 3 nodes, RF 3, tick {} ms, heartbeat every {} ticks",
        options.partitions, options.tick_ms, options.heartbeat_ticks
    );
    // B first: after A, B's replicas would fit in memory A freed, and show no growth.
    run_shape("B: one group per (replica set, shard)", options.groups, &options);
    run_shape("A: one group per partition", options.partitions, &options);
}
