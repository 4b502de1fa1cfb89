//! What a replicated topic does besides acks=all produce and failover (docs/replication.md,
//! "What exists: partition groups"), on three broker processes on 127.0.0.1:
//!
//! - acks=1 and acks=0 produces to the leader of a topic of replication factor 3 are
//!   stored at the offsets the connection's order gives them, on every copy; a
//!   transactional batch in a produce without a transactional id is refused with
//!   TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) by the leader's verification (KIP-890, as
//!   on one node; transactions on replicated partitions: `replicated_transactions.rs`) and
//!   stores nothing, and so are records larger than one raft entry holds, with
//!   MESSAGE_TOO_LARGE (10);
//! - DeleteRecords moves the log start of every copy (each shrinks alike), so the leader
//!   after a kill of the old one's node starts the partition there too;
//! - CreatePartitions grows the topic: every node names a leader for each new partition,
//!   which take records; DeleteTopics removes it from every node, and a topic created
//!   again under the same name starts empty on every node;
//! - with two shards per node, the groups of a topic's partitions are spread over both
//!   shards of every node, and an idempotent producer's records are each stored once;
//! - read after ack: right after each acks=all answer, ListOffsets (both isolation levels)
//!   and Fetch at the leader already show the record, before the leader's own copy is
//!   durable.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use bytes::Bytes;
use common::{read_topic, Broker, RawClient};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, RequestKind};
use replicated::{node_of, Topic, DEADLINE, ISR_LAG_MS, NODES};
use shardlog_benches::load::record_batch::{transactional_batch, ProducerFields};

const LIFE: Topic = Topic { name: "life", partitions: 1, replicas: NODES };
/// The same topic once CreatePartitions grew it.
const GROWN: Topic = Topic { name: "life", partitions: 3, replicas: NODES };

/// A batch of one record stamped now (a timestamp of 0 is older than any retention.ms,
/// and the retention check would delete it mid-test).
fn one_record(value: &str) -> Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    common::record_batch(&[(&b"k"[..], value.as_bytes())], now.as_millis() as i64)
}

/// Values per partition, in offset order, with their offsets.
fn values(stored: &common::Stored, partition: i32) -> Vec<(i64, String)> {
    let records = stored.get(&partition).map(Vec::as_slice).unwrap_or_default();
    records.iter().map(|(o, v)| (*o, String::from_utf8(v.clone()).unwrap())).collect()
}

/// Each partition's high watermark (asked with librdkafka, which asks the leaders) is
/// `ends[partition]` right after the acknowledgements, with no wait: the leader answers
/// an applied record's offsets before its own copy is durable, as Kafka's leader answers
/// acks=all once its high watermark passed the record (docs/replication.md, "Read after
/// ack"). It used to be one flush behind, and this waited for it.
fn assert_high_watermarks(broker: &Broker, topic: &str, ends: &[i64]) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = common::assign_only_config(broker).create().unwrap();
    let high = |p: usize| consumer.fetch_watermarks(topic, p as i32, DEADLINE).unwrap().1;
    let watermarks: Vec<i64> = (0..ends.len()).map(high).collect();
    assert_eq!(watermarks, ends, "the high watermarks right after the acks");
}

fn all_nodes() -> Vec<usize> {
    (0..NODES).collect()
}

/// librdkafka's DeleteRecords of partition 0 up to `offset`: the low watermark, or the
/// error.
fn delete_records(broker: &Broker, topic: &str, offset: i64) -> Result<i64, String> {
    use rdkafka::admin::AdminOptions;
    use rdkafka::{Offset, TopicPartitionList};
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(topic, 0, Offset::Offset(offset)).unwrap();
    let admin = common::admin_client(broker);
    let options = AdminOptions::new().operation_timeout(Some(DEADLINE));
    let result = common::runtime().block_on(admin.delete_records(&offsets, &options)).unwrap();
    let element = result.find_partition(topic, 0).unwrap();
    element.error().map(|()| element.offset().to_raw().unwrap()).map_err(|e| e.to_string())
}

/// Waits until every copy of `topic` has the same size per partition and `done` holds of
/// those sizes: the sizes.
fn wait_for_copies(
    cluster: &[Broker],
    topic: Topic,
    done: impl Fn(&[i64]) -> bool,
) -> Vec<Vec<i64>> {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let sizes: Vec<Vec<i64>> = cluster.iter().map(|b| topic.log_sizes(b)).collect();
        if sizes.iter().all(|s| *s == sizes[0]) && done(&sizes[0]) {
            return sizes;
        }
        assert!(std::time::Instant::now() < deadline, "the copies differ: {sizes:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Waits until no node of `cluster` knows `topic` (its Metadata has no such topic).
fn wait_until_forgotten(cluster: &[Broker], topic: Topic) {
    let all: Vec<usize> = (0..cluster.len()).collect();
    let known = |n: usize| common::all_metadata(&cluster[n]).map(|_| topic.view(&cluster[n]));
    let forgotten = |views: &[Option<replicated::View>]| views.iter().all(Option::is_none);
    common::wait_for_views(DEADLINE, &all, "every node to forget the topic", known, forgotten);
}

#[test]
fn a_replicated_topic_takes_acks_1_and_0_grows_and_is_deleted_on_every_node() {
    let (cluster, view) = LIFE.start_cluster();
    let leader = &cluster[node_of(view[0].1) - 1];
    let mut client = RawClient::connect(leader.shard_addr(0));

    // acks=1, then acks=0 (no answer), then acks=all on the same connection: Kafka keeps a
    // connection's order, so they are at offsets 0, 1 and 2.
    assert_eq!(common::raw_produce_acks(&mut client, LIFE.name, 0, one_record("one"), 1), (0, 0));
    let partition =
        PartitionProduceData::default().with_index(0).with_records(Some(one_record("zero")));
    let topic = TopicProduceData::default()
        .with_name(common::topic_name(LIFE.name))
        .with_partition_data(vec![partition]);
    let unanswered =
        ProduceRequest::default().with_acks(0).with_timeout_ms(10_000).with_topic_data(vec![topic]);
    client.send(ApiKey::Produce, 9, &RequestKind::Produce(unanswered));
    assert_eq!(common::raw_produce(&mut client, LIFE.name, 0, one_record("all")), (0, 2));

    // A transactional batch without the request's transactional id: refused by the
    // leader's verification before it is proposed, nothing stored.
    let producer = ProducerFields { producer_id: 4242, producer_epoch: 0, base_sequence: 0 };
    let batch = Bytes::from(transactional_batch(producer, 0, ["in a transaction"]));
    let refused = common::raw_produce(&mut client, LIFE.name, 0, batch).0;
    assert_eq!(refused, 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED");
    // One partition's records larger than one entry of the log holds (nine batches of
    // ~1 MB, 8 MiB segments): refused whole as MESSAGE_TOO_LARGE, nothing stored, and the
    // group goes on taking produces (the steps below), where the leader's raft write of
    // them would have been refused by its log and the group stalled.
    let value = vec![b'x'; 1_000_000];
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let big = common::record_batch(&[(&b"k"[..], &value[..])], now.as_millis() as i64);
    let nine: Vec<u8> = std::iter::repeat_n(&big[..], 9).flatten().copied().collect();
    let refused = common::raw_produce(&mut client, LIFE.name, 0, Bytes::from(nine));
    assert_eq!(refused.0, 10, "MESSAGE_TOO_LARGE");
    LIFE.wait_for_equal_copies(&cluster);
    assert_high_watermarks(leader, LIFE.name, &[3]);
    let expected = vec![(0, "one".to_string()), (1, "zero".to_string()), (2, "all".to_string())];
    for node in &cluster {
        assert_eq!(values(&read_topic(node, LIFE.name, 1), 0), expected);
    }

    // DeleteRecords up to offset 2: every copy loses the two batches, and the next leader
    // starts the partition at 2 too.
    let before = LIFE.log_sizes(leader)[0];
    assert_eq!(delete_records(&cluster[0], LIFE.name, 2), Ok(2));
    let sizes = wait_for_copies(&cluster, LIFE, |s| s[0] < before);
    assert!(sizes.iter().all(|s| s[0] > 0), "offset 2 stays: {sizes:?}");
    let mut cluster = cluster;
    let old_leader = node_of(view[0].1) - 1;
    cluster[old_leader].kill();
    let others: Vec<usize> = (0..NODES).filter(|n| *n != old_leader).collect();
    LIFE.wait_for(&cluster, &others, "a new leader", |views| {
        LIFE.one_leader(views) && node_of(views[0][0].1) - 1 != old_leader
    });
    let next = LIFE.view(&cluster[others[0]]).expect("a view");
    let mut client = RawClient::connect(cluster[node_of(next[0].1) - 1].shard_addr(0));
    assert_eq!(common::list_offset_epoch(&mut client, LIFE.name, 0, -2, -1).0, 0);
    assert_eq!(common::list_offset_epoch(&mut client, LIFE.name, 0, -2, -1).1, 2, "log start");
    cluster[old_leader].restart();
    LIFE.wait_for_one_leader(&cluster, &all_nodes(), "every node to name the leader");
    wait_for_copies(&cluster, LIFE, |s| s[0] < before);

    // CreatePartitions: 1 -> 3; every node names a leader for each, and each takes records.
    {
        use rdkafka::admin::{AdminOptions, NewPartitions};
        let admin = common::admin_client(&cluster[0]);
        let grow = [NewPartitions::new(LIFE.name, GROWN.partitions as usize)];
        let results =
            common::runtime().block_on(admin.create_partitions(&grow, &AdminOptions::new()));
        results.unwrap()[0].clone().expect("partitions created");
    }
    let all = all_nodes();
    let grown =
        GROWN.wait_for_one_leader(&cluster, &all, "every node to name 3 partitions' leaders");
    for (partition, (_, _, _, replicas)) in grown.iter().enumerate() {
        assert_eq!(replicas.len(), NODES, "partition {partition}'s replicas: {replicas:?}");
    }
    common::produce_tagged(&cluster[1], GROWN.name, GROWN.partitions, "grown", 30);
    assert_high_watermarks(&cluster[2], GROWN.name, &[13, 10, 10]);
    let stored = read_topic(&cluster[2], GROWN.name, GROWN.partitions);
    assert_eq!(values(&stored, 0)[..1], expected[2..], "partition 0 kept what it had");
    for partition in 0..GROWN.partitions {
        let tags: Vec<String> = values(&stored, partition)
            .into_iter()
            .filter(|(_, v)| v.starts_with("grown-"))
            .map(|(_, v)| v)
            .collect();
        let wanted: Vec<String> =
            (0..30).filter(|i| i % 3 == partition).map(|i| format!("grown-{i}")).collect();
        assert_eq!(tags, wanted, "partition {partition}");
    }
    GROWN.wait_for_equal_copies(&cluster);

    // DeleteTopics: gone from every node; created again, it starts empty everywhere.
    {
        use rdkafka::admin::AdminOptions;
        let admin = common::admin_client(&cluster[1]);
        let results =
            common::runtime().block_on(admin.delete_topics(&[LIFE.name], &AdminOptions::new()));
        results.unwrap()[0].clone().expect("topic deleted");
    }
    wait_until_forgotten(&cluster, LIFE);
    LIFE.create(&cluster[2]);
    let again =
        LIFE.wait_for_one_leader(&cluster, &all, "every node to name the new topic's leader");
    for (node, broker) in cluster.iter().enumerate() {
        assert_eq!(LIFE.log_sizes(broker), vec![0], "the new topic's copy on node {}", node + 1);
    }
    let leader = &cluster[node_of(again[0].1) - 1];
    let mut client = RawClient::connect(leader.shard_addr(0));
    assert_eq!(common::latest_offset(&mut client, LIFE.name, 0, 0), 0);
    assert_eq!(common::raw_produce(&mut client, LIFE.name, 0, one_record("new")), (0, 0));
}

#[test]
fn with_two_shards_per_node_partition_groups_use_both_shards_and_store_each_record_once() {
    const WIDE: Topic = Topic { name: "wide", partitions: 4, replicas: NODES };
    const CORES: usize = 2;
    // Bootstrap, two shard ports, two replication ports, the admin port.
    let args = ["--replica-lag-time-max-ms", ISR_LAG_MS];
    let cluster = Broker::start_cluster_with(NODES, CORES, 2 + 2 * CORES, &args);
    replicated::wait_for_one_controller(&cluster);
    WIDE.create(&cluster[0]);
    let all: Vec<usize> = (0..NODES).collect();
    let view = WIDE.wait_for_one_leader(&cluster, &all, "every node to name the same leaders");
    let shards: std::collections::BTreeSet<i32> =
        view.iter().flat_map(|(_, _, _, replicas)| replicas.iter().map(|b| b % 1024)).collect();
    assert_eq!(shards.into_iter().collect::<Vec<_>>(), vec![0, 1], "replicas' shards: {view:?}");

    let producer: rdkafka::producer::FutureProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", cluster[1].bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    common::runtime().block_on(async {
        let mut pending = Vec::new();
        for i in 0..200 {
            let value = format!("wide-{i}");
            let record = rdkafka::producer::FutureRecord::<(), _>::to(WIDE.name)
                .payload(&value)
                .partition(i % WIDE.partitions);
            pending.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
        }
        for p in pending {
            p.await.unwrap().map_err(|(e, _)| e).unwrap();
        }
    });
    assert_high_watermarks(&cluster[2], WIDE.name, &[50; 4]);
    let stored = read_topic(&cluster[2], WIDE.name, WIDE.partitions);
    for partition in 0..WIDE.partitions {
        let got: Vec<(i64, String)> = values(&stored, partition);
        let wanted: Vec<(i64, String)> = (0..200)
            .filter(|i| i % WIDE.partitions == partition)
            .enumerate()
            .map(|(offset, i)| (offset as i64, format!("wide-{i}")))
            .collect();
        assert_eq!(got, wanted, "partition {partition}: each record once, in order, dense");
    }
    WIDE.wait_for_equal_copies(&cluster);
}

/// Read after ack (docs/replication.md, "Read after ack"): on one connection to the
/// leader, each acks=all produce is followed at once by ListOffsets (read_uncommitted and
/// read_committed) and a Fetch from the record's offset: the high watermark already passes
/// the record and the Fetch returns it, though the answer came at commit and apply, before
/// the leader's own fdatasync of its applied copy. Until the leader served its applied
/// end (and the tail cache past its durable end) they lagged by that flush: with
/// `Shard::readable_partition` answering the durable end (by hand), the first ListOffsets
/// answers 0.
#[test]
fn a_record_is_visible_at_the_leader_right_after_its_acks_all_answer() {
    const NOW: Topic = Topic { name: "read-after-ack", partitions: 1, replicas: NODES };
    let (cluster, view) = NOW.start_cluster();
    let leader = &cluster[node_of(view[0].1) - 1];
    let mut client = RawClient::connect(leader.shard_addr(0));
    for i in 0..50 {
        let value = format!("now-{i}");
        let (error, base) = common::raw_produce(&mut client, NOW.name, 0, one_record(&value));
        assert_eq!((error, base), (0, i), "produce {i}");
        for isolation in [0, 1] {
            let latest = common::latest_offset(&mut client, NOW.name, 0, isolation);
            assert_eq!(latest, i + 1, "ListOffsets (isolation {isolation}) right after ack {i}");
        }
        let fetched = match client.call(ApiKey::Fetch, 11, common::fetch_request(NOW.name, 0, i, 0))
        {
            kafka_protocol::messages::ResponseKind::Fetch(r) => {
                r.responses[0].partitions[0].clone()
            }
            other => panic!("{other:?}"),
        };
        assert_eq!((fetched.error_code, fetched.high_watermark), (0, i + 1), "Fetch after ack {i}");
        let records = fetched.records.expect("records");
        assert!(
            records.windows(value.len()).any(|w| w == value.as_bytes()),
            "Fetch right after ack {i} returns the record"
        );
    }
}
