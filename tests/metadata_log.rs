//! The metadata log through kill -9 on a real broker: thousands of topic changes
//! (CreateTopics with a config, IncrementalAlterConfigs, CreatePartitions, DeleteTopics),
//! sent to shard 1 (so each reaches the controller over the mesh), interleaved with
//! produce, with snapshots every few dozen changes and frequent checkpoints; kill -9 after
//! each round. After every restart: every topic answered exists with its partition count
//! and `retention.ms`, no deleted topic is back, no other topic exists, and every
//! acknowledged record is below the high watermark.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{latest_offset, raw_produce, record_batch, topic_name, Broker, RawClient};
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::delete_topics_request::{DeleteTopicState, DeleteTopicsRequest};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// What the clients were answered: live topics (partitions, retention.ms), deleted
/// names, and per topic the records acknowledged on partition 0.
#[derive(Default)]
struct Model {
    live: BTreeMap<String, (i32, String)>,
    deleted: BTreeSet<String>,
    produced: BTreeMap<String, i64>,
}

fn create(client: &mut RawClient, name: &str, partitions: i32, retention: &str) {
    let config =
        CreatableTopicConfig::default().with_name(s("retention.ms")).with_value(Some(s(retention)));
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(vec![config]);
    let request = CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000);
    match client.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(request)) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "create {name}"),
        other => panic!("{other:?}"),
    }
}

fn alter_retention(client: &mut RawClient, name: &str, retention: &str) {
    let set = AlterableConfig::default()
        .with_name(s("retention.ms"))
        .with_config_operation(0)
        .with_value(Some(s(retention)));
    let resource = AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(s(name))
        .with_configs(vec![set]);
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
    let kind = RequestKind::IncrementalAlterConfigs(request);
    match client.call(ApiKey::IncrementalAlterConfigs, 1, kind) {
        ResponseKind::IncrementalAlterConfigs(r) => {
            assert_eq!(r.responses[0].error_code, 0, "alter {name}")
        }
        other => panic!("{other:?}"),
    }
}

fn add_partitions(client: &mut RawClient, name: &str, count: i32) {
    let topic = CreatePartitionsTopic::default()
        .with_name(topic_name(name))
        .with_count(count)
        .with_assignments(None);
    let request =
        CreatePartitionsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000);
    match client.call(ApiKey::CreatePartitions, 1, RequestKind::CreatePartitions(request)) {
        ResponseKind::CreatePartitions(r) => assert_eq!(r.results[0].error_code, 0, "{name}"),
        other => panic!("{other:?}"),
    }
}

fn delete(client: &mut RawClient, name: &str) {
    let topic = DeleteTopicState::default().with_name(Some(topic_name(name)));
    let request = DeleteTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(30_000);
    match client.call(ApiKey::DeleteTopics, 6, RequestKind::DeleteTopics(request)) {
        ResponseKind::DeleteTopics(r) => assert_eq!(r.responses[0].error_code, 0, "{name}"),
        other => panic!("{other:?}"),
    }
}

/// Every topic with its partition count (Metadata v9, all topics).
fn all_topics(client: &mut RawClient) -> BTreeMap<String, i32> {
    let request = MetadataRequest::default().with_topics(None);
    match client.call(ApiKey::Metadata, 9, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => r
            .topics
            .iter()
            .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.partitions.len() as i32))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// `retention.ms` of each topic, in one DescribeConfigs v4 request.
fn retentions(client: &mut RawClient, names: &[String]) -> BTreeMap<String, String> {
    let resources = names
        .iter()
        .map(|n| {
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(n))
                .with_configuration_keys(Some(vec![s("retention.ms")]))
        })
        .collect();
    let request = DescribeConfigsRequest::default().with_resources(resources);
    match client.call(ApiKey::DescribeConfigs, 4, RequestKind::DescribeConfigs(request)) {
        ResponseKind::DescribeConfigs(r) => r
            .results
            .iter()
            .map(|t| {
                let value = t.configs[0].value.as_ref().unwrap().to_string();
                (t.resource_name.to_string(), value)
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// One round of changes; `k` numbers them across rounds (names are never reused).
fn round(client: &mut RawClient, model: &mut Model, round: usize, changes: usize) {
    for k in 0..changes {
        let live: Vec<String> = model.live.keys().cloned().collect();
        let pick = |salt: usize| live[(k * 7919 + salt) % live.len()].clone();
        match k % 10 {
            _ if live.len() < 5 || k % 10 < 4 => {
                let name = format!("meta-{round}-{k}");
                let partitions = 1 + (k % 3) as i32;
                create(client, &name, partitions, &k.to_string());
                model.live.insert(name, (partitions, k.to_string()));
            }
            4 | 5 => {
                let name = pick(1);
                let value = (k * 13).to_string();
                alter_retention(client, &name, &value);
                model.live.get_mut(&name).unwrap().1 = value;
            }
            6 => {
                let name = pick(2);
                let count = model.live[&name].0 + 1;
                add_partitions(client, &name, count);
                model.live.get_mut(&name).unwrap().0 = count;
            }
            7 => {
                let name = pick(3);
                delete(client, &name);
                model.live.remove(&name);
                model.produced.remove(&name);
                model.deleted.insert(name);
            }
            _ => {
                let name = pick(4);
                let batch = record_batch(&[(b"k", format!("v{k}").as_bytes())], 1_700_000_000_000);
                let (error, _) = raw_produce(client, &name, 0, batch);
                assert_eq!(error, 0, "produce to {name}");
                *model.produced.entry(name).or_default() += 1;
            }
        }
    }
}

fn check(client: &mut RawClient, model: &Model) {
    let topics = all_topics(client);
    let back: Vec<&String> = model.deleted.iter().filter(|n| topics.contains_key(*n)).collect();
    assert!(back.is_empty(), "deleted topics are back: {back:?}");
    let expected: BTreeMap<String, i32> =
        model.live.iter().map(|(n, (p, _))| (n.clone(), *p)).collect();
    assert_eq!(topics, expected, "the topics and their partition counts");
    let names: Vec<String> = model.live.keys().cloned().collect();
    let found = retentions(client, &names);
    let expected: BTreeMap<String, String> =
        model.live.iter().map(|(n, (_, r))| (n.clone(), r.clone())).collect();
    assert_eq!(found, expected, "retention.ms of every topic");
    for (name, &count) in &model.produced {
        assert!(latest_offset(client, name, 0, 0) >= count, "{name}: {count} records acknowledged");
    }
}

#[test]
fn topic_changes_interleaved_with_produce_survive_kill_9_and_nothing_deleted_comes_back() {
    let args = [
        "--metadata-snapshot-max-changes",
        "37",
        "--metadata-snapshot-min-change-bytes",
        "2048",
        "--checkpoint-interval-ms",
        "150",
    ];
    let mut broker = Broker::start(2, &args);
    let mut model = Model::default();
    for number in 0..3 {
        let mut client = RawClient::connect(broker.shard_addr(1));
        round(&mut client, &mut model, number, 700);
        check(&mut client, &model);
        drop(client);
        broker.kill_and_restart();
        let mut client = RawClient::connect(broker.shard_addr(1));
        check(&mut client, &model);
    }
    assert!(model.live.len() > 300 && model.deleted.len() > 100, "{} live", model.live.len());
    let log = broker.log();
    assert!(log.contains("topic table snapshot written"), "snapshots were taken");
}
