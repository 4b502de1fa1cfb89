//! Topic auto-creation on a cluster (docs/replication.md, metadata group): three broker
//! processes on 127.0.0.1 (`--cores 1` each, temp dirs, free ports). A Metadata request
//! that auto-creates a topic at a node that is not the controller is forwarded to the
//! controller, and answered LEADER_NOT_AVAILABLE until the topic is in that node's table;
//! at the controller it creates the topic at once, as on a single node. A librdkafka
//! producer bootstrapped only at a node that is not the controller writes to a topic
//! nobody created, and a consumer bootstrapped there reads every record back.
//!
//! A cluster started with `--default-replication-factor 3` gives an auto-created topic and
//! one created with replication factor -1 three replicas on every node, answers
//! CreateTopics and DescribeConfigs of the broker with 3, and acknowledges acks=all
//! produces to the auto-created topic.
//!
//! Every wait has a deadline that fails with what it waited for; nothing asserts on speed.

mod common;
#[path = "common/replicated.rs"]
mod replicated;

use std::collections::BTreeSet;

use common::{Broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{FutureProducer, FutureRecord};
use replicated::{
    controller, node_of, wait_for_one_controller, Topic, DEADLINE, NODES, PORTS_PER_NODE,
};

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

/// CreateTopics v7 of `name` (2 partitions, replication factor -1: the broker default) at
/// `broker`: (error code, replication factor answered).
fn create_with_default_replication(broker: &Broker, name: &str) -> (i16, i16) {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let topic = CreatableTopic::default()
        .with_name(common::topic_name(name))
        .with_num_partitions(2)
        .with_replication_factor(-1);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000);
    match client.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => (r.topics[0].error_code, r.topics[0].replication_factor),
        other => panic!("{other:?}"),
    }
}

/// `broker`'s default.replication.factor in DescribeConfigs v1 of the broker resource.
fn described_default_replication(broker: &Broker) -> Option<String> {
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let key = StrBytes::from_static_str("default.replication.factor");
    let resource = DescribeConfigsResource::default()
        .with_resource_type(4)
        .with_resource_name(StrBytes::from_static_str(""))
        .with_configuration_keys(Some(vec![key]));
    let request = DescribeConfigsRequest::default().with_resources(vec![resource]);
    match client.call(ApiKey::DescribeConfigs, 1, RequestKind::DescribeConfigs(request)) {
        ResponseKind::DescribeConfigs(r) => {
            let config = r.results[0].configs.first()?;
            config.value.as_ref().map(|v| v.as_str().to_string())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_default_replication_factor_applies_to_auto_created_topics_and_to_minus_one() {
    let args = ["--default-replication-factor", "3"];
    let cluster = Broker::start_cluster_with(NODES, 1, PORTS_PER_NODE, &args);
    wait_for_one_controller(&cluster);
    let controller = node_of(controller(&cluster[0])) - 1;
    let follower = (controller + 1) % NODES;

    // Created at the controller (another node answers NOT_CONTROLLER), which answers the
    // replication factor it used.
    let answered = create_with_default_replication(&cluster[controller], "asked-default");
    assert_eq!(answered, (0, 3), "CreateTopics with replication factor -1: (error, factor)");
    // Auto-created through a node that is not the controller: forwarded, resolved there.
    common::eventually(DEADLINE, "topic auto-created through the controller", || {
        auto_create_metadata(&cluster[follower], "auto-default").0 == 0
    });
    let all: Vec<usize> = (0..NODES).collect();
    for topic in [("asked-default", 2), ("auto-default", 1)] {
        let topic = Topic { name: topic.0, partitions: topic.1, replicas: NODES };
        let what = format!("every node to show 3 replicas of each partition of {}", topic.name);
        topic.wait_for(&cluster, &all, &what, |views| {
            views.iter().all(|v| {
                v.len() == topic.partitions as usize
                    && v.iter().all(|(_, _, _, replicas)| replicas.len() == NODES)
            })
        });
    }
    produce_auto_created(&cluster[follower], "auto-default", 3);
    for (n, broker) in cluster.iter().enumerate() {
        let described = described_default_replication(broker);
        assert_eq!(described.as_deref(), Some("3"), "node {}'s broker config", n + 1);
    }
}
