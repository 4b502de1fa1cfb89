//! Topic auto-creation on a cluster (docs/replication.md, metadata group): three broker
//! processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports). A Metadata request
//! that auto-creates a topic at a node that is not the controller is forwarded to the
//! controller, and answered LEADER_NOT_AVAILABLE until the topic is in that node's table;
//! at the controller it creates the topic at once, as on a single node. A librdkafka
//! producer bootstrapped only at a node that is not the controller writes to a topic
//! nobody created, and a consumer bootstrapped there reads every record back.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::collections::BTreeSet;

use common::{Broker, RawClient};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rdkafka::producer::{FutureProducer, FutureRecord};
use replicated::{controller, node_of, wait_for_one_controller, DEADLINE, NODES, PORTS_PER_NODE};

const PARTITIONS: i32 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;

/// Metadata v12 of topic `name` at `broker`, auto-creation allowed: (the topic's error
/// code, its partitions' leaders).
fn auto_create_metadata(broker: &Broker, name: &str) -> (i16, Vec<i32>) {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let topic = MetadataRequestTopic::default().with_name(Some(common::topic_name(name)));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![topic]))
        .with_allow_auto_topic_creation(true);
    match client.call(ApiKey::Metadata, 12, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => {
            let topic = &r.topics[0];
            (topic.error_code, topic.partitions.iter().map(|p| p.leader_id.0).collect())
        }
        other => panic!("{other:?}"),
    }
}

/// Produces `count` records "<name>-<i>" to `topic` (no partition, no key: the
/// partitioner spreads them) with a producer that knows only `broker`; every delivery
/// report must be a success.
fn produce_auto_created(broker: &Broker, topic: &str, count: usize) -> BTreeSet<Vec<u8>> {
    // allow.auto.create.topics is on by default for a producer: its Metadata may create
    // the topic. message.timeout.ms bounds each delivery, so a topic never created fails
    // the test instead of hanging it (the default is 300 s).
    let producer: FutureProducer = common::acks_all_config(broker)
        .set("message.timeout.ms", "120000")
        .create()
        .expect("a librdkafka producer");
    let values: Vec<String> = (0..count).map(|i| format!("{topic}-{i}")).collect();
    common::runtime().block_on(async {
        let mut pending = Vec::new();
        for value in &values {
            let record = FutureRecord::<(), _>::to(topic).payload(value);
            pending.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
        }
        for (i, p) in pending.into_iter().enumerate() {
            let delivered = p.await.expect("a delivery report");
            delivered.unwrap_or_else(|(e, _)| panic!("record {i} of {topic}: {e}"));
        }
    });
    values.into_iter().map(String::into_bytes).collect()
}

#[test]
fn a_producer_bootstrapped_at_a_node_that_is_not_the_controller_auto_creates_its_topic() {
    let partitions = PARTITIONS.to_string();
    let args = ["--default-partitions", partitions.as_str()];
    let cluster = Broker::start_cluster_with(NODES, 1, PORTS_PER_NODE, &args);
    wait_for_one_controller(&cluster);
    let controller = node_of(controller(&cluster[0])) - 1;
    let follower = (controller + 1) % NODES;

    // A librdkafka producer and consumer that know only the node that is not the controller.
    let sent = produce_auto_created(&cluster[follower], "produced", 30);
    let placed = |views: &[Vec<i32>]| {
        views[0].len() == PARTITIONS as usize && views.iter().all(|v| *v == views[0])
    };
    let view = |n: usize| Some(auto_create_metadata(&cluster[n], "produced").1);
    let all: Vec<usize> = (0..NODES).collect();
    common::wait_for_views(DEADLINE, &all, "every node to show topic produced", view, placed);
    let stored = common::read_topic(&cluster[follower], "produced", PARTITIONS);
    let mut read = BTreeSet::new();
    for (partition, records) in &stored {
        let offsets: Vec<i64> = records.iter().map(|(offset, _)| *offset).collect();
        let expected: Vec<i64> = (0..records.len() as i64).collect();
        assert_eq!(offsets, expected, "partition {partition}'s offsets");
        read.extend(records.iter().map(|(_, value)| value.clone()));
    }
    let count: usize = stored.values().map(Vec::len).sum();
    assert_eq!(count, sent.len(), "each record stored once");
    assert_eq!(read, sent, "every record read back");

    // At a node that is not the controller: forwarded, retriable until it is created.
    let (code, _) = auto_create_metadata(&cluster[follower], "asked");
    assert_eq!(code, LEADER_NOT_AVAILABLE, "the first answer at node {}", follower + 1);
    common::eventually(DEADLINE, "topic asked to be created through the controller", || {
        let (code, leaders) = auto_create_metadata(&cluster[follower], "asked");
        code == 0 && leaders.len() == PARTITIONS as usize
    });
    // At the controller: created before the answer, as before.
    let (code, leaders) = auto_create_metadata(&cluster[controller], "at-controller");
    assert_eq!((code, leaders.len()), (0, PARTITIONS as usize), "at the controller");
}
