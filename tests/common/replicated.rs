//! Helpers for tests of a replicated topic on three broker processes on 127.0.0.1
//! (`partition_groups.rs`, `replication_kill_loop.rs`; docs/replication.md, "What exists:
//! partition groups"): each node's Metadata view of the topic and waits on those views,
//! the copies' sizes (DescribeLogDirs), an idempotent acks=all librdkafka producer that
//! writes unique records until told to stop, and the checker of acknowledged records.
//! Included with `#[path = "common/replicated.rs"] mod replicated;` next to `mod common;`.
//!
//! Every wait has a deadline (`DEADLINE`) that fails with what it waited for; nothing
//! asserts on speed.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::common::{self, Broker, RawClient, Stored};

pub const NODES: usize = 3;
/// Bootstrap, one Kafka shard port, one replication port, the admin port (of a node of one
/// shard; each more shard adds a Kafka and a replication port).
pub const PORTS_PER_NODE: usize = 4;
/// Each wait's deadline: generous, the machine is shared; a hang fails, slowness does not.
pub const DEADLINE: Duration = Duration::from_secs(120);
/// replica.lag.time.max.ms of the test clusters: short, so a dead replica leaves the ISR
/// within a test (Kafka's default is 30 s).
pub const ISR_LAG_MS: &str = "1000";

/// One node's Metadata of a topic: per partition (error, leader broker, leader epoch,
/// replicas).
pub type View = Vec<(i16, i32, i32, Vec<i32>)>;

/// The node id (1-based) of a broker id (`node * 1024 + shard`).
pub fn node_of(broker_id: i32) -> usize {
    broker_id as usize / 1024
}

/// A replicated topic on the cluster: its name, partition count and replication factor.
#[derive(Clone, Copy, Debug)]
pub struct Topic {
    pub name: &'static str,
    pub partitions: i32,
    pub replicas: usize,
}

impl Topic {
    /// `broker`'s Metadata of the topic, or None if it does not answer or does not know
    /// the topic.
    pub fn view(&self, broker: &Broker) -> Option<View> {
        let r = common::all_metadata(broker)?;
        let named = |n: &kafka_protocol::messages::TopicName| n.0.as_str() == self.name;
        let topic = r.topics.iter().find(|t| t.name.as_ref().is_some_and(named))?;
        let partitions = topic.partitions.iter().map(|p| {
            let replicas = p.replica_nodes.iter().map(|b| b.0).collect();
            (p.error_code, p.leader_id.0, p.leader_epoch, replicas)
        });
        Some(partitions.collect())
    }

    /// `broker`'s Metadata ISR of each of the topic's partitions (node ids, ascending), or
    /// None if it does not answer or does not know the topic.
    pub fn isrs(&self, broker: &Broker) -> Option<Vec<Vec<usize>>> {
        let r = common::all_metadata(broker)?;
        let named = |n: &kafka_protocol::messages::TopicName| n.0.as_str() == self.name;
        let topic = r.topics.iter().find(|t| t.name.as_ref().is_some_and(named))?;
        let isr = |p: &kafka_protocol::messages::metadata_response::MetadataResponsePartition| {
            let mut nodes: Vec<usize> = p.isr_nodes.iter().map(|b| node_of(b.0)).collect();
            nodes.sort_unstable();
            nodes
        };
        Some(topic.partitions.iter().map(isr).collect())
    }

    /// Waits until every node of `nodes` shows `isr` (node ids) for every partition.
    pub fn wait_for_isr(&self, cluster: &[Broker], nodes: &[usize], isr: &[usize]) {
        let what = format!("every partition's ISR to be {isr:?}");
        let shown = |n: usize| self.isrs(&cluster[n]);
        let done = |views: &[Vec<Vec<usize>>]| views.iter().flatten().all(|p| p == isr);
        common::wait_for_views(DEADLINE, nodes, &what, shown, done)
    }

    /// Polls the views of `nodes` (indexes into `cluster`) until `done` holds, or fails
    /// after the deadline with them.
    pub fn wait_for(
        &self,
        cluster: &[Broker],
        nodes: &[usize],
        what: &str,
        done: impl Fn(&[View]) -> bool,
    ) {
        common::wait_for_views(DEADLINE, nodes, what, |n| self.view(&cluster[n]), done)
    }

    /// Every view names the same known leader for every partition, in the same epoch.
    pub fn one_leader(&self, views: &[View]) -> bool {
        let first = &views[0];
        first.len() == self.partitions as usize
            && first.iter().all(|(error, leader, _, _)| *error == 0 && *leader >= 0)
            && views.iter().all(|v| v == first)
    }

    /// Waits until every node of `nodes` names the same leader; returns the view they share.
    pub fn wait_for_one_leader(&self, cluster: &[Broker], nodes: &[usize], what: &str) -> View {
        let shared = std::cell::RefCell::new(None);
        self.wait_for(cluster, nodes, what, |views| {
            let one = self.one_leader(views);
            if one {
                *shared.borrow_mut() = Some(views[0].clone());
            }
            one
        });
        shared.into_inner().expect("the views that ended the wait")
    }

    /// Starts a cluster of `NODES` (one shard each; a replica leaves the ISR after
    /// `ISR_LAG_MS`), waits for its controller, creates the topic and waits until every
    /// node names the same leader: the cluster and that view.
    pub fn start_cluster(&self) -> (Vec<Broker>, View) {
        self.start_cluster_with(&[])
    }

    /// `start_cluster` with more broker arguments.
    pub fn start_cluster_with(&self, args: &[&str]) -> (Vec<Broker>, View) {
        self.start_cluster_on(1, args)
    }

    /// `start_cluster_with` on nodes of `cores` shards each.
    pub fn start_cluster_on(&self, cores: usize, args: &[&str]) -> (Vec<Broker>, View) {
        let args = [&["--replica-lag-time-max-ms", ISR_LAG_MS][..], args].concat();
        let ports = PORTS_PER_NODE + 2 * (cores - 1);
        let cluster = Broker::start_cluster_with(NODES, cores, ports, &args);
        wait_for_one_controller(&cluster);
        self.create(&cluster[0]);
        let all: Vec<usize> = (0..NODES).collect();
        let view = self.wait_for_one_leader(&cluster, &all, "every node to name the same leader");
        (cluster, view)
    }

    /// The size in bytes of each of the topic's partitions in `broker`'s log (-1: none
    /// there). Each shard is a Kafka broker and DescribeLogDirs answers for its own
    /// partitions, so every shard of the node is asked.
    pub fn log_sizes(&self, broker: &Broker) -> Vec<i64> {
        let mut sizes = vec![-1; self.partitions as usize];
        for shard in 0..broker.cores {
            let mut client = RawClient::connect(broker.shard_addr(shard));
            let request = DescribeLogDirsRequest::default().with_topics(None);
            let ResponseKind::DescribeLogDirs(r) =
                client.call(ApiKey::DescribeLogDirs, 1, RequestKind::DescribeLogDirs(request))
            else {
                panic!("not a DescribeLogDirs response")
            };
            let results = r.results.iter().flat_map(|d| &d.topics);
            for topic in results.filter(|t| t.name.0.as_str() == self.name) {
                for partition in &topic.partitions {
                    sizes[partition.partition_index as usize] = partition.partition_size;
                }
            }
        }
        sizes
    }

    /// Creates the topic with its replication factor through librdkafka's admin API.
    pub fn create(&self, broker: &Broker) {
        use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
        let admin = common::admin_client(broker);
        let replication = TopicReplication::Fixed(self.replicas as i32);
        let topic = NewTopic::new(self.name, self.partitions, replication);
        let (topics, options) = ([topic], AdminOptions::new());
        for result in common::runtime().block_on(admin.create_topics(&topics, &options)).unwrap() {
            result.expect("replicated topic created");
        }
    }

    /// Waits until the three copies have the same size per partition (the same batches at
    /// the same offsets), none empty; returns the sizes. Only once nothing is produced.
    pub fn wait_for_equal_copies(&self, cluster: &[Broker]) -> Vec<Vec<i64>> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let sizes: Vec<Vec<i64>> = cluster.iter().map(|b| self.log_sizes(b)).collect();
            if sizes[0].iter().all(|s| *s > 0) && sizes.iter().all(|s| *s == sizes[0]) {
                return sizes;
            }
            assert!(Instant::now() < deadline, "the three copies differ: {sizes:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The controller `broker` names in Metadata (-1 while none is known).
pub fn controller(broker: &Broker) -> i32 {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = MetadataRequest::default().with_topics(Some(vec![]));
    match client.call(ApiKey::Metadata, 12, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => r.controller_id.0,
        other => panic!("{other:?}"),
    }
}

/// Waits until every node names the same controller (librdkafka's admin API goes to the
/// controller it finds in Metadata).
pub fn wait_for_one_controller(cluster: &[Broker]) {
    common::eventually(DEADLINE, "every node to name the same controller", || {
        let named: Vec<i32> = cluster.iter().map(controller).collect();
        named[0] >= 0 && named.iter().all(|c| *c == named[0])
    });
}

/// Waits until `broker`'s listeners refuse connections (the kernel may keep a killed
/// process's io_uring listeners for a moment), so that it can start again on its ports.
pub fn wait_for_listeners_closed(broker: &Broker) {
    let bootstrap: SocketAddr = broker.bootstrap().parse().unwrap();
    common::eventually(DEADLINE, "the stopped node's listeners to close", || {
        TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_err()
    });
}

/// (partition, offset, value) of an acknowledged record.
pub type Ack = (i32, i64, String);

/// What a producer thread reports: its acknowledged records, in the order acknowledged,
/// and why it stopped if it failed.
#[derive(Default)]
pub struct Acked {
    records: Mutex<Vec<Ack>>,
    failure: Mutex<Option<String>>,
}

impl Acked {
    pub fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    pub fn records(&self) -> Vec<Ack> {
        self.records.lock().unwrap().clone()
    }

    /// Waits until `count` records are acknowledged in all; fails at once with the
    /// producer's error if it stopped.
    pub fn wait_for(&self, count: usize, what: &str) {
        common::eventually(DEADLINE, what, || {
            if let Some(failure) = self.failure.lock().unwrap().as_ref() {
                panic!("waiting for {what}: the producer stopped: {failure}");
            }
            self.len() >= count
        });
    }
}

/// Produces records `<tag>-0`, `<tag>-1`, ... round-robin over the topic's partitions,
/// with an idempotent acks=all producer, ten in flight at a time, until `stop`; pushes
/// each acknowledged record to `acked`. A record the producer gives up on stops it and is
/// reported through `acked` (its message timeout is far past an election).
pub fn produce_until(bootstrap: String, topic: Topic, tag: &str, acked: &Acked, stop: &AtomicBool) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "100000")
        .create()
        .expect("a librdkafka producer");
    let mut next = 0usize;
    common::runtime().block_on(async {
        while !stop.load(Ordering::SeqCst) {
            let mut pending = Vec::new();
            for _ in 0..10 {
                let value = format!("{tag}-{next}");
                let partition = (next % topic.partitions as usize) as i32;
                let record =
                    FutureRecord::<(), _>::to(topic.name).payload(&value).partition(partition);
                let delivery = producer.send_result(record).map_err(|(e, _)| e).unwrap();
                pending.push((value, delivery));
                next += 1;
            }
            for (value, delivery) in pending {
                let (partition, offset) = match delivery.await.unwrap() {
                    Ok(delivered) => (delivered.partition, delivered.offset),
                    Err((e, _)) => {
                        let failure = format!("record {value} was not acknowledged: {e}");
                        *acked.failure.lock().unwrap() = Some(failure);
                        return;
                    }
                };
                acked.records.lock().unwrap().push((partition, offset, value));
            }
        }
    });
}

/// A producer thread running [`produce_until`] against every node of `cluster`, and the
/// flag that stops it.
pub struct Load {
    pub acked: Arc<Acked>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Load {
    pub fn start(cluster: &[Broker], topic: Topic, tag: &'static str) -> Load {
        let acked: Arc<Acked> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let bootstrap = cluster.iter().map(Broker::bootstrap).collect::<Vec<_>>().join(",");
        let thread = {
            let (acked, stop) = (acked.clone(), stop.clone());
            std::thread::spawn(move || produce_until(bootstrap, topic, tag, &acked, &stop))
        };
        Load { acked, stop, thread }
    }

    /// Stops the producer after its records in flight; every record it sent was
    /// acknowledged (or this fails with the one that was not). Returns them.
    pub fn stop(self) -> Vec<Ack> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the producer thread");
        if let Some(failure) = self.acked.failure.lock().unwrap().as_ref() {
            panic!("the producer stopped: {failure}");
        }
        self.acked.records()
    }
}

/// A consumer of `group` (assigned partitions, no membership: Kafka accepts its commits
/// while the group has no members), bootstrapped at `nodes` of `cluster`.
pub fn group_consumer(
    cluster: &[Broker],
    nodes: &[usize],
    group: &str,
) -> rdkafka::consumer::BaseConsumer {
    let bootstrap = nodes.iter().map(|n| cluster[*n].bootstrap()).collect::<Vec<_>>().join(",");
    rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a librdkafka consumer")
}

/// Commits for `group`, per partition of `topic`, the offset after the last record
/// acknowledged so far (a consumer's position after reading them), through every node;
/// returns what it committed.
pub fn commit_group_offsets(
    cluster: &[Broker],
    topic: &str,
    group: &str,
    acked: &[Ack],
) -> std::collections::BTreeMap<i32, i64> {
    use rdkafka::consumer::{CommitMode, Consumer};
    let mut offsets = std::collections::BTreeMap::new();
    for (partition, offset, _) in acked {
        let next = offsets.entry(*partition).or_insert(0);
        *next = (*next).max(offset + 1);
    }
    let mut commit = rdkafka::TopicPartitionList::new();
    for (partition, offset) in &offsets {
        let offset = rdkafka::Offset::Offset(*offset);
        commit.add_partition_offset(topic, *partition, offset).unwrap();
    }
    let all: Vec<usize> = (0..cluster.len()).collect();
    let consumer = group_consumer(cluster, &all, group);
    common::eventually(DEADLINE, "the group's offset commit to be acknowledged", || {
        consumer.commit(&commit, CommitMode::Sync).is_ok()
    });
    offsets
}

/// The checker: offsets dense from 0 in every partition, no value stored twice, and
/// every acknowledged record at its acknowledged offset. Returns the records stored per
/// partition.
pub fn check_acknowledged(stored: &Stored, acked: &[Ack]) -> Vec<usize> {
    for (partition, records) in stored {
        for (k, (offset, _)) in records.iter().enumerate() {
            assert_eq!(*offset, k as i64, "partition {partition}: offsets dense from 0");
        }
    }
    let mut values = BTreeSet::new();
    for records in stored.values() {
        for (offset, value) in records {
            let value = String::from_utf8(value.clone()).unwrap();
            assert!(values.insert(value.clone()), "{value} stored twice (again at {offset})");
        }
    }
    for (partition, offset, value) in acked {
        let found = stored.get(partition).and_then(|r| r.get(*offset as usize));
        let found = found.map(|(o, v)| (*o, String::from_utf8_lossy(v).to_string()));
        assert_eq!(found, Some((*offset, value.clone())), "acknowledged {value}");
    }
    stored.values().map(Vec::len).collect()
}
