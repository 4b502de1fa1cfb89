//! The refusals of the ACL checks (docs/security.md, "What each API checks") for the group,
//! transaction, config and topic-admin APIs: a principal without the ACL gets Kafka's
//! error code and nothing happens — no group joined, listed, described or deleted, no
//! offset committed, deleted or revealed, no producer id handed out, no config, topic,
//! partition or record changed.
//!
//! `alice` logs in with SASL: librdkafka where it sends the request, a raw client (PLAIN)
//! where it cannot or where the exact code matters. The operator is User:ANONYMOUS on the
//! PLAINTEXT listener, a super user; it grants what each step needs to reach the check
//! under test, and checks afterwards what the refusal left.

#[path = "common/acl.rs"]
mod acl;
mod common;
#[path = "common/tls.rs"]
mod tls;

use std::time::{Duration, Instant};

use acl::{allow, ALTER_CONFIGS, CLUSTER, DELETE, DESCRIBE, GROUP, IDEMPOTENT_WRITE, READ, TOPIC};
use acl::{binding, create_acls, DENY, LITERAL, TRANSACTIONAL_ID, WRITE};
use bytes::Bytes;
use common::{create_topic, produce_tagged, runtime, topic_name, Broker, RawClient};
use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig as Replaced,
};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncrementalResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestTopic};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, ProducerId, RequestKind, ResponseKind, SaslAuthenticateRequest,
    SaslHandshakeRequest, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const ALICE: &str = "User:alice";
const ALICE_PASSWORD: &str = "alice-secret";
const TIMEOUT: Duration = Duration::from_secs(30);
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// One core (every group and transactional id is coordinated by shard 0), the authorizer
/// on, User:ANONYMOUS the only super user, `alice` the SASL bootstrap user. The SASL port
/// and the operator's connection.
fn start() -> (Broker, u16, RawClient) {
    let extra = ["--authorizer", "true", "--super-users", "User:ANONYMOUS"];
    let (broker, port) = tls::sasl_broker(1, "SASL_PLAINTEXT", ("alice", ALICE_PASSWORD), &extra);
    let operator = RawClient::connect(broker.shard_addr(0));
    (broker, port, operator)
}

/// librdkafka as alice.
fn alice(port: u16) -> ClientConfig {
    tls::sasl_client(port, "SCRAM-SHA-256", "alice", ALICE_PASSWORD)
}

fn alice_admin(port: u16) -> AdminClient<DefaultClientContext> {
    alice(port).create().expect("a librdkafka admin client")
}

/// A raw connection logged in as alice (SASL PLAIN).
fn alice_raw(port: u16) -> RawClient {
    let mut client = RawClient::connect(([127, 0, 0, 1], port).into());
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let answer = client.call(ApiKey::SaslHandshake, 1, RequestKind::SaslHandshake(handshake));
    let ResponseKind::SaslHandshake(answer) = answer else { panic!("{answer:?}") };
    assert_eq!(answer.error_code, 0);
    let token = Bytes::from(format!("\0alice\0{ALICE_PASSWORD}"));
    let authenticate = SaslAuthenticateRequest::default().with_auth_bytes(token);
    let answer =
        client.call(ApiKey::SaslAuthenticate, 2, RequestKind::SaslAuthenticate(authenticate));
    let ResponseKind::SaslAuthenticate(answer) = answer else { panic!("{answer:?}") };
    assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
    client
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

// ---- groups ----

/// OffsetCommit v8 of partition 0 of each (topic, offset): the error code per topic.
fn commit(client: &mut RawClient, group: &str, offsets: &[(&str, i64)]) -> Vec<i16> {
    let topics = offsets
        .iter()
        .map(|(topic, offset)| {
            let partition = OffsetCommitRequestPartition::default().with_committed_offset(*offset);
            OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![partition])
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(topics);
    match client.call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(request)) {
        ResponseKind::OffsetCommit(r) => {
            r.topics.iter().map(|t| t.partitions[0].error_code).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v7 of partition 0 of `topics` (None: every committed partition): the
/// group's error code and (topic, committed offset, error code) per partition answered.
fn fetch_offsets(
    client: &mut RawClient,
    group: &str,
    topics: Option<&[&str]>,
) -> (i16, Vec<(String, i64, i16)>) {
    let topics = topics.map(|names| {
        let topic = |n: &&str| {
            OffsetFetchRequestTopic::default()
                .with_name(topic_name(n))
                .with_partition_indexes(vec![0])
        };
        names.iter().map(topic).collect()
    });
    let request =
        OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(topics);
    match client.call(ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(request)) {
        ResponseKind::OffsetFetch(r) => {
            let partitions = r.topics.iter().flat_map(|t| {
                let name = t.name.0.to_string();
                t.partitions.iter().map(move |p| (name.clone(), p.committed_offset, p.error_code))
            });
            (r.error_code, partitions.collect())
        }
        other => panic!("{other:?}"),
    }
}

/// DescribeGroups v5 as the operator: (state, member count).
fn group_state(operator: &mut RawClient, group: &str) -> (String, usize) {
    let (code, state, members) = describe_group(operator, group);
    assert_eq!(code, 0);
    (state, members)
}

/// DescribeGroups v5: (error code, state, member count).
fn describe_group(client: &mut RawClient, group: &str) -> (i16, String, usize) {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    match client.call(ApiKey::DescribeGroups, 5, RequestKind::DescribeGroups(request)) {
        ResponseKind::DescribeGroups(r) => {
            let g = &r.groups[0];
            (g.error_code, g.group_state.to_string(), g.members.len())
        }
        other => panic!("{other:?}"),
    }
}

/// ListGroups v4: the ids listed.
fn list_groups(client: &mut RawClient) -> Vec<String> {
    let request = ListGroupsRequest::default();
    match client.call(ApiKey::ListGroups, 4, RequestKind::ListGroups(request)) {
        ResponseKind::ListGroups(r) => {
            assert_eq!(r.error_code, 0);
            r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// OffsetDelete v0 of partition 0 of `topic`: the group's code and the partition's.
fn offset_delete(client: &mut RawClient, group: &str, topic: &str) -> (i16, Option<i16>) {
    let partition = OffsetDeleteRequestPartition::default().with_partition_index(0);
    let topic = OffsetDeleteRequestTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(vec![partition]);
    let request =
        OffsetDeleteRequest::default().with_group_id(GroupId(s(group))).with_topics(vec![topic]);
    match client.call(ApiKey::OffsetDelete, 0, RequestKind::OffsetDelete(request)) {
        ResponseKind::OffsetDelete(r) => {
            let partition = r.topics.first().map(|t| t.partitions[0].error_code);
            (r.error_code, partition)
        }
        other => panic!("{other:?}"),
    }
}

/// Polls `consumer` until it reports an error (its code) or 30 s pass; a record is a
/// failure (the consumer was not meant to get one).
fn first_consumer_error(consumer: &BaseConsumer) -> Option<RDKafkaErrorCode> {
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(_)) => panic!("a record reached a consumer that may not join"),
            Some(Err(e)) => return e.rdkafka_error_code(),
            None => {}
        }
    }
    None
}

#[test]
fn group_apis_without_group_acls_are_refused_and_join_commit_or_reveal_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "events", 1);
    create_topic(&broker, "hidden", 1);
    produce_tagged(&broker, "events", 1, "e", 3);
    allow(&mut operator, TOPIC, "events", ALICE, READ);
    // DESCRIBE on the group gets FindCoordinator through: the JoinGroup and OffsetCommit
    // checks (READ on the group) decide.
    allow(&mut operator, GROUP, "team", ALICE, DESCRIBE);

    // JoinGroup: librdkafka's consumer gets GROUP_AUTHORIZATION_FAILED and no record, and
    // the group has no member.
    let consumer: BaseConsumer = alice(port)
        .set("group.id", "team")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&["events"]).unwrap();
    assert_eq!(first_consumer_error(&consumer), Some(RDKafkaErrorCode::GroupAuthorizationFailed));
    assert_eq!(group_state(&mut operator, "team").1, 0, "alice joined the group");
    drop(consumer);

    // OffsetCommit (librdkafka's, outside a group generation): refused, nothing committed.
    let consumer: BaseConsumer = alice(port).set("group.id", "team").create().unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("events", 0, Offset::Offset(2)).unwrap();
    let committed = consumer.commit(&offsets, CommitMode::Sync);
    let code = match committed {
        Err(KafkaError::ConsumerCommit(code)) => code,
        other => panic!("alice's commit: {other:?}"),
    };
    assert_eq!(code, RDKafkaErrorCode::GroupAuthorizationFailed);
    assert_eq!(fetch_offsets(&mut operator, "team", None), (0, vec![]), "a commit was kept");
    drop(consumer);

    // With READ on the group, a commit keeps only the topics alice may READ.
    allow(&mut operator, GROUP, "crew", ALICE, READ);
    let mut as_alice = alice_raw(port);
    let codes = commit(&mut as_alice, "crew", &[("events", 2), ("hidden", 1)]);
    assert_eq!(codes, [0, TOPIC_AUTHORIZATION_FAILED]);
    let (code, stored) = fetch_offsets(&mut operator, "crew", Some(&["events", "hidden"]));
    assert_eq!((code, stored), (0, vec![("events".into(), 2, 0), ("hidden".into(), -1, 0)]));

    // OffsetFetch needs DESCRIBE on the group (none on "audit") and on each topic: what the
    // operator committed is not revealed.
    assert_eq!(commit(&mut operator, "audit", &[("events", 3)]), [0]);
    assert_eq!(commit(&mut operator, "crew", &[("hidden", 1)]), [0]);
    let (code, revealed) = fetch_offsets(&mut as_alice, "audit", Some(&["events"]));
    assert_eq!(code, GROUP_AUTHORIZATION_FAILED);
    assert!(revealed.iter().all(|(_, offset, _)| *offset == -1), "{revealed:?}");
    let (code, revealed) = fetch_offsets(&mut as_alice, "crew", Some(&["events", "hidden"]));
    let hidden = ("hidden".to_string(), -1, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!((code, revealed), (0, vec![("events".into(), 2, 0), hidden]));
    assert_eq!(fetch_offsets(&mut as_alice, "crew", None), (0, vec![("events".into(), 2, 0)]));
}

/// ListGroups, DescribeGroups, DeleteGroups and OffsetDelete as alice against the
/// operator's group: left out, refused, and its committed offset kept until alice is
/// granted each ACL in turn.
#[test]
fn group_admin_apis_without_group_acls_are_refused_and_delete_or_reveal_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "events", 1);
    assert_eq!(commit(&mut operator, "kept", &[("events", 3)]), [0]);
    let stored = (0, vec![("events".to_string(), 3, 0)]);
    let kept = |operator: &mut RawClient| fetch_offsets(operator, "kept", Some(&["events"]));
    assert_eq!(kept(&mut operator), stored);
    assert_eq!(list_groups(&mut operator), ["kept"]);
    let mut as_alice = alice_raw(port);

    // No DESCRIBE on the cluster or the group: ListGroups leaves it out (librdkafka's group
    // list too), DescribeGroups answers GROUP_AUTHORIZATION_FAILED with no state.
    assert_eq!(list_groups(&mut as_alice), Vec::<String>::new());
    let consumer: BaseConsumer = alice(port).create().unwrap();
    let listed = consumer.fetch_group_list(None, TIMEOUT).unwrap();
    let names: Vec<&str> = listed.groups().iter().map(|g| g.name()).collect();
    assert!(!names.contains(&"kept"), "{names:?}");
    let refused = (GROUP_AUTHORIZATION_FAILED, String::new(), 0);
    assert_eq!(describe_group(&mut as_alice, "kept"), refused);
    // DESCRIBE on the group shows it (and gets librdkafka's FindCoordinator through).
    allow(&mut operator, GROUP, "kept", ALICE, DESCRIBE);
    assert_eq!(list_groups(&mut as_alice), ["kept"]);
    assert_eq!(describe_group(&mut as_alice, "kept"), (0, "Empty".to_string(), 0));

    // DeleteGroups (librdkafka's admin client) without DELETE: refused, the offset is kept.
    let admin = alice_admin(port);
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let deleted = runtime().block_on(admin.delete_groups(&["kept"], &options)).unwrap();
    let refused = Err(("kept".to_string(), RDKafkaErrorCode::GroupAuthorizationFailed));
    assert_eq!(deleted, vec![refused]);
    assert_eq!(kept(&mut operator), stored);

    // OffsetDelete without DELETE on the group, then without READ on the topic: refused,
    // the offset is kept.
    assert_eq!(offset_delete(&mut as_alice, "kept", "events"), (GROUP_AUTHORIZATION_FAILED, None));
    assert_eq!(kept(&mut operator), stored);
    allow(&mut operator, GROUP, "kept", ALICE, DELETE);
    let refused = (0, Some(TOPIC_AUTHORIZATION_FAILED));
    assert_eq!(offset_delete(&mut as_alice, "kept", "events"), refused);
    assert_eq!(kept(&mut operator), stored);

    // Granted both, alice deletes the offset, then the group.
    allow(&mut operator, TOPIC, "events", ALICE, READ);
    assert_eq!(offset_delete(&mut as_alice, "kept", "events"), (0, Some(0)));
    assert_eq!(kept(&mut operator), (0, vec![("events".to_string(), -1, 0)]));
    let deleted = runtime().block_on(admin.delete_groups(&["kept"], &options)).unwrap();
    assert_eq!(deleted, vec![Ok("kept".to_string())]);
    assert_eq!(list_groups(&mut operator), Vec::<String>::new());
}

// ---- producer ids and transactions ----

/// InitProducerId v4: (error code, producer id).
fn init_producer_id(client: &mut RawClient, transactional_id: Option<&str>) -> (i16, i64) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|id| TransactionalId(s(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(request)) {
        ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0),
        other => panic!("{other:?}"),
    }
}

/// DescribeTransactions v0 as the operator: the id's error code.
fn describe_transaction(operator: &mut RawClient, id: &str) -> i16 {
    let request =
        DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(id))]);
    let answer =
        operator.call(ApiKey::DescribeTransactions, 0, RequestKind::DescribeTransactions(request));
    let ResponseKind::DescribeTransactions(answer) = answer else { panic!("{answer:?}") };
    answer.transaction_states[0].error_code
}

#[test]
fn producer_ids_without_transactional_id_write_or_idempotent_write_are_refused_and_none_used() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "ledger", 1);
    allow(&mut operator, TOPIC, "ledger", ALICE, READ);
    let mut as_alice = alice_raw(port);

    // Idempotent, with WRITE on no topic and no IDEMPOTENT_WRITE: CLUSTER_AUTHORIZATION_FAILED,
    // and no producer id is used up (the operator's ids keep their step).
    let (_, first) = init_producer_id(&mut operator, None);
    let (_, second) = init_producer_id(&mut operator, None);
    assert_eq!(init_producer_id(&mut as_alice, None), (CLUSTER_AUTHORIZATION_FAILED, -1));
    // librdkafka's idempotent producer stops with the same fatal error.
    let producer: FutureProducer = alice(port)
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "5000")
        .create()
        .unwrap();
    let record = FutureRecord::<(), _>::to("ledger").payload("refused").partition(0);
    assert!(runtime().block_on(producer.send(record, TIMEOUT)).is_err());
    let fatal = producer.client().fatal_error().map(|(code, _)| code);
    assert_eq!(fatal, Some(RDKafkaErrorCode::ClusterAuthorizationFailed));
    let (_, third) = init_producer_id(&mut operator, None);
    assert_eq!(third - second, second - first, "a refused InitProducerId took an id");
    // IDEMPOTENT_WRITE on the cluster is enough (WRITE on any topic would be too).
    allow(&mut operator, CLUSTER, "kafka-cluster", ALICE, IDEMPOTENT_WRITE);
    assert_eq!(init_producer_id(&mut as_alice, None).0, 0);

    // Transactional, with WRITE on the topic and DESCRIBE (for FindCoordinator) but not
    // WRITE on the transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, no transaction.
    allow(&mut operator, TOPIC, "ledger", ALICE, WRITE);
    allow(&mut operator, TRANSACTIONAL_ID, "tx-1", ALICE, DESCRIBE);
    let producer: FutureProducer = alice(port).set("transactional.id", "tx-1").create().unwrap();
    let code = match producer.init_transactions(TIMEOUT) {
        Err(KafkaError::Transaction(e)) => e.code(),
        other => panic!("alice's init_transactions: {other:?}"),
    };
    assert_eq!(code, RDKafkaErrorCode::TransactionalIdAuthorizationFailed);
    let refused = init_producer_id(&mut as_alice, Some("tx-1"));
    assert_eq!(refused, (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1));
    assert_eq!(describe_transaction(&mut operator, "tx-1"), TRANSACTIONAL_ID_NOT_FOUND);
    allow(&mut operator, TRANSACTIONAL_ID, "tx-1", ALICE, WRITE);
    assert_eq!(init_producer_id(&mut as_alice, Some("tx-1")).0, 0);
    assert_eq!(describe_transaction(&mut operator, "tx-1"), 0);
}

/// Alice's requests inside a transaction: AddPartitionsToTxn v3 (the (topic, code) of
/// partition 0 of each), AddOffsetsToTxn v3 and EndTxn v3 (their codes).
struct Txn<'a> {
    client: &'a mut RawClient,
    id: &'static str,
    producer_id: ProducerId,
    epoch: i16,
}

impl Txn<'_> {
    fn add_partitions(&mut self, topics: &[&str]) -> Vec<(String, i16)> {
        let topics = topics.iter().map(|t| {
            AddPartitionsToTxnTopic::default().with_name(topic_name(t)).with_partitions(vec![0])
        });
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(self.id)))
            .with_v3_and_below_producer_id(self.producer_id)
            .with_v3_and_below_producer_epoch(self.epoch)
            .with_v3_and_below_topics(topics.collect());
        let answer = self.client.call(
            ApiKey::AddPartitionsToTxn,
            3,
            RequestKind::AddPartitionsToTxn(request),
        );
        let ResponseKind::AddPartitionsToTxn(answer) = answer else { panic!("{answer:?}") };
        let results = answer.results_by_topic_v3_and_below.iter();
        results
            .map(|t| (t.name.0.to_string(), t.results_by_partition[0].partition_error_code))
            .collect()
    }

    fn add_offsets(&mut self, group: &str) -> i16 {
        let request = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(self.id)))
            .with_producer_id(self.producer_id)
            .with_producer_epoch(self.epoch)
            .with_group_id(GroupId(s(group)));
        let answer =
            self.client.call(ApiKey::AddOffsetsToTxn, 3, RequestKind::AddOffsetsToTxn(request));
        let ResponseKind::AddOffsetsToTxn(answer) = answer else { panic!("{answer:?}") };
        answer.error_code
    }

    /// TxnOffsetCommit v3 of partition 0 of each (topic, offset): (topic, code) of each.
    fn commit_offsets(&mut self, group: &str, offsets: &[(&str, i64)]) -> Vec<(String, i16)> {
        let topics = offsets.iter().map(|(topic, offset)| {
            let partition =
                TxnOffsetCommitRequestPartition::default().with_committed_offset(*offset);
            TxnOffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![partition])
        });
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(self.id)))
            .with_group_id(GroupId(s(group)))
            .with_producer_id(self.producer_id)
            .with_producer_epoch(self.epoch)
            .with_generation_id(-1)
            .with_topics(topics.collect());
        let answer =
            self.client.call(ApiKey::TxnOffsetCommit, 3, RequestKind::TxnOffsetCommit(request));
        let ResponseKind::TxnOffsetCommit(answer) = answer else { panic!("{answer:?}") };
        let topics = answer.topics.iter();
        topics.map(|t| (t.name.0.to_string(), t.partitions[0].error_code)).collect()
    }

    fn end(&mut self, committed: bool) -> i16 {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s(self.id)))
            .with_producer_id(self.producer_id)
            .with_producer_epoch(self.epoch)
            .with_committed(committed);
        let answer = self.client.call(ApiKey::EndTxn, 3, RequestKind::EndTxn(request));
        let ResponseKind::EndTxn(answer) = answer else { panic!("{answer:?}") };
        answer.error_code
    }
}

/// DescribeTransactions v0 as the operator: the state and the (topic, partitions) in it.
fn transaction_state(operator: &mut RawClient, id: &str) -> (String, Vec<(String, Vec<i32>)>) {
    let request =
        DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(id))]);
    let answer =
        operator.call(ApiKey::DescribeTransactions, 0, RequestKind::DescribeTransactions(request));
    let ResponseKind::DescribeTransactions(answer) = answer else { panic!("{answer:?}") };
    let state = &answer.transaction_states[0];
    assert_eq!(state.error_code, 0, "{state:?}");
    let topics = state.topics.iter().map(|t| (t.topic.0.to_string(), t.partitions.clone()));
    (state.transaction_state.to_string(), topics.collect())
}

impl<'a> Txn<'a> {
    /// InitProducerId v4 for transactional id `id` as `client`; it must succeed.
    fn begin(client: &'a mut RawClient, id: &'static str) -> Txn<'a> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let answer = client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(request));
        let ResponseKind::InitProducerId(init) = answer else { panic!("{answer:?}") };
        assert_eq!(init.error_code, 0);
        Txn { client, id, producer_id: init.producer_id, epoch: init.producer_epoch }
    }
}

#[test]
fn transaction_apis_without_their_acls_are_refused_and_add_or_end_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "granted", 1);
    create_topic(&broker, "withheld", 1);
    allow(&mut operator, TRANSACTIONAL_ID, "tx-2", ALICE, WRITE);
    allow(&mut operator, TOPIC, "granted", ALICE, WRITE);
    let mut as_alice = alice_raw(port);
    let mut txn = Txn::begin(&mut as_alice, "tx-2");

    // No WRITE on one topic: that partition is refused, the other not attempted (as in
    // Kafka), and the transaction holds neither.
    let codes = txn.add_partitions(&["granted", "withheld"]);
    let expected = [
        ("granted".to_string(), OPERATION_NOT_ATTEMPTED),
        ("withheld".to_string(), TOPIC_AUTHORIZATION_FAILED),
    ];
    assert_eq!(codes, expected);
    assert_eq!(transaction_state(&mut operator, "tx-2"), ("Empty".to_string(), vec![]));

    // No READ on the group: AddOffsetsToTxn is refused and adds no offsets partition.
    assert_eq!(txn.add_offsets("g-2"), GROUP_AUTHORIZATION_FAILED);
    assert_eq!(transaction_state(&mut operator, "tx-2"), ("Empty".to_string(), vec![]));

    // The granted topic alone is added; then, with WRITE on the transactional id denied,
    // EndTxn is refused and the transaction stays open with its partition.
    assert_eq!(txn.add_partitions(&["granted"]), [("granted".to_string(), 0)]);
    let deny = binding((TRANSACTIONAL_ID, "tx-2", LITERAL), ALICE, WRITE, DENY);
    create_acls(&mut operator, vec![deny]);
    assert_eq!(txn.end(true), TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    let open = ("Ongoing".to_string(), vec![("granted".to_string(), vec![0])]);
    assert_eq!(transaction_state(&mut operator, "tx-2"), open);
    // The other transaction APIs are refused the same way once the id is denied.
    assert_eq!(txn.add_offsets("g-2"), TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    assert_eq!(
        txn.add_partitions(&["granted"]),
        [("granted".to_string(), TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    );
}

/// TxnOffsetCommit checks WRITE on the transactional id, READ on the group and READ on
/// each topic: each refusal commits nothing, even once the transaction commits.
#[test]
fn txn_offset_commit_without_its_acls_is_refused_and_commits_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "events", 1);
    create_topic(&broker, "withheld", 1);
    allow(&mut operator, TRANSACTIONAL_ID, "tx-3", ALICE, WRITE);
    allow(&mut operator, GROUP, "g-3", ALICE, READ);
    allow(&mut operator, TOPIC, "events", ALICE, READ);
    let mut as_alice = alice_raw(port);
    let mut txn = Txn::begin(&mut as_alice, "tx-3");
    assert_eq!(txn.add_offsets("g-3"), 0);

    // No READ on "withheld": its partition is refused, the readable one goes in.
    let codes = txn.commit_offsets("g-3", &[("events", 4), ("withheld", 2)]);
    let expected =
        [("events".to_string(), 0), ("withheld".to_string(), TOPIC_AUTHORIZATION_FAILED)];
    assert_eq!(codes, expected);
    // READ on the group denied: every partition refused.
    create_acls(&mut operator, vec![binding((GROUP, "g-3", LITERAL), ALICE, READ, DENY)]);
    let codes = txn.commit_offsets("g-3", &[("events", 9)]);
    assert_eq!(codes, [("events".to_string(), GROUP_AUTHORIZATION_FAILED)]);
    // The transaction commits what was accepted, and only that.
    assert_eq!(txn.end(true), 0);
    let (code, stored) = fetch_offsets(&mut operator, "g-3", Some(&["events", "withheld"]));
    let committed = vec![("events".to_string(), 4, 0), ("withheld".to_string(), -1, 0)];
    assert_eq!((code, stored), (0, committed));

    // WRITE on the transactional id denied: TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    let deny = binding((TRANSACTIONAL_ID, "tx-3", LITERAL), ALICE, WRITE, DENY);
    create_acls(&mut operator, vec![deny]);
    let codes = txn.commit_offsets("g-3", &[("events", 9)]);
    assert_eq!(codes, [("events".to_string(), TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]);
}

// ---- configs ----

/// DescribeConfigs v1 of one topic and of broker 0: (error code, configs described) each.
fn describe_configs(client: &mut RawClient, topic: &str) -> Vec<(i16, usize)> {
    let resources = [(2, topic), (4, "0")]
        .map(|(kind, name)| {
            DescribeConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_configuration_keys(None)
        })
        .to_vec();
    let request = DescribeConfigsRequest::default().with_resources(resources);
    match client.call(ApiKey::DescribeConfigs, 1, RequestKind::DescribeConfigs(request)) {
        ResponseKind::DescribeConfigs(r) => {
            r.results.iter().map(|r| (r.error_code, r.configs.len())).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// AlterConfigs v1 (replace) of one topic and of broker 0: their error codes.
fn alter_configs(client: &mut RawClient, topic: &str, config: (&str, &str)) -> Vec<i16> {
    let entry = Replaced::default().with_name(s(config.0)).with_value(Some(s(config.1)));
    let resources = [(2, topic), (4, "0")]
        .map(|(kind, name)| {
            AlterConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_configs(vec![entry.clone()])
        })
        .to_vec();
    let request = AlterConfigsRequest::default().with_resources(resources);
    match client.call(ApiKey::AlterConfigs, 1, RequestKind::AlterConfigs(request)) {
        ResponseKind::AlterConfigs(r) => r.responses.iter().map(|r| r.error_code).collect(),
        other => panic!("{other:?}"),
    }
}

/// IncrementalAlterConfigs v1 (set) of one topic and of broker 0: their error codes.
fn set_configs(client: &mut RawClient, topic: &str, config: (&str, &str)) -> Vec<i16> {
    let entry = AlterableConfig::default()
        .with_name(s(config.0))
        .with_config_operation(0)
        .with_value(Some(s(config.1)));
    let resources = [(2, topic), (4, "0")]
        .map(|(kind, name)| {
            IncrementalResource::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_configs(vec![entry.clone()])
        })
        .to_vec();
    let request = IncrementalAlterConfigsRequest::default().with_resources(resources);
    let answer = client.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(request),
    );
    match answer {
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().map(|r| r.error_code).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// A topic's configs as (name, value), described by `admin`.
fn topic_configs(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Vec<(String, Option<String>)>, RDKafkaErrorCode> {
    let resource = ResourceSpecifier::Topic(topic);
    let mut results =
        runtime().block_on(admin.describe_configs(&[resource], &AdminOptions::new())).unwrap();
    let entries = results.remove(0)?.entries;
    Ok(entries.into_iter().map(|e| (e.name, e.value)).collect())
}

#[test]
fn config_apis_without_config_acls_are_refused_and_change_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "prices", 1);
    // READ (and so DESCRIBE) on the topic, neither DESCRIBE_CONFIGS nor ALTER_CONFIGS.
    allow(&mut operator, TOPIC, "prices", ALICE, READ);
    let admin = alice_admin(port);
    let operator_admin = common::admin_client(&broker);
    let before = topic_configs(&operator_admin, "prices").unwrap();

    // DescribeConfigs: librdkafka gets no config of either resource (the rdkafka crate
    // 0.38 drops per-resource errors); raw, the topic's and the cluster's error codes.
    let resources = [ResourceSpecifier::Topic("prices"), ResourceSpecifier::Broker(0)];
    let described =
        runtime().block_on(admin.describe_configs(&resources, &AdminOptions::new())).unwrap();
    let counts: Vec<_> = described.iter().map(|r| r.as_ref().map(|r| r.entries.len())).collect();
    assert_eq!(counts, [Ok(0), Ok(0)], "configs described without DESCRIBE_CONFIGS");
    let mut as_alice = alice_raw(port);
    let refused = vec![(TOPIC_AUTHORIZATION_FAILED, 0), (CLUSTER_AUTHORIZATION_FAILED, 0)];
    assert_eq!(describe_configs(&mut as_alice, "prices"), refused);
    let described = describe_configs(&mut operator, "prices");
    assert!(described[0].0 == 0 && described[0].1 > 0, "{described:?}");

    // AlterConfigs and IncrementalAlterConfigs (raw: rdkafka 0.38 drops AlterConfigs'
    // per-resource errors): refused per resource, and the topic's configs are unchanged.
    let retention = ("retention.ms", "1000");
    let refused = [TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED];
    assert_eq!(alter_configs(&mut as_alice, "prices", retention), refused);
    assert_eq!(set_configs(&mut as_alice, "prices", retention), refused);
    assert_eq!(topic_configs(&operator_admin, "prices").unwrap(), before);

    // ALTER_CONFIGS on the topic allows the change (and describing it).
    allow(&mut operator, TOPIC, "prices", ALICE, ALTER_CONFIGS);
    assert_eq!(set_configs(&mut as_alice, "prices", retention)[0], 0);
    let after = topic_configs(&admin, "prices").unwrap();
    assert!(after.contains(&("retention.ms".into(), Some("1000".into()))), "{after:?}");
}

// ---- topics, partitions, records ----

/// ListOffsets v5 of partition 0 at `timestamp` (-2 earliest, -1 latest): (code, offset).
fn list_offset(client: &mut RawClient, topic: &str, timestamp: i64) -> (i16, i64) {
    let partition = ListOffsetsPartition::default().with_timestamp(timestamp);
    let topic =
        ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![partition]);
    let request =
        ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![topic]);
    match client.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(request)) {
        ResponseKind::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.offset)
        }
        other => panic!("{other:?}"),
    }
}

/// Metadata v9 of one topic, never auto-created: (error code, partition count).
fn topic_metadata(client: &mut RawClient, topic: &str) -> (i16, usize) {
    let named = MetadataRequestTopic::default().with_name(Some(topic_name(topic)));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![named]))
        .with_allow_auto_topic_creation(false);
    match client.call(ApiKey::Metadata, 9, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => (r.topics[0].error_code, r.topics[0].partitions.len()),
        other => panic!("{other:?}"),
    }
}

/// The one topic result of a librdkafka admin call: its error code, if any.
fn topic_error(
    results: rdkafka::error::KafkaResult<Vec<rdkafka::admin::TopicResult>>,
) -> Option<RDKafkaErrorCode> {
    let mut results = results.expect("the admin request answered");
    assert_eq!(results.len(), 1);
    results.remove(0).err().map(|(_, code)| code)
}

#[test]
fn topic_admin_apis_without_acls_are_refused_and_create_delete_or_reveal_nothing() {
    let (broker, port, mut operator) = start();
    create_topic(&broker, "kept", 1);
    create_topic(&broker, "secret", 1);
    produce_tagged(&broker, "kept", 1, "k", 5);
    produce_tagged(&broker, "secret", 1, "s", 2);
    // READ (and so DESCRIBE) on "kept": librdkafka finds its leader; no CREATE, DELETE or
    // ALTER anywhere.
    allow(&mut operator, TOPIC, "kept", ALICE, READ);
    let admin = alice_admin(port);
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let failed = Some(RDKafkaErrorCode::TopicAuthorizationFailed);

    // CreateTopics: refused, and the topic does not exist.
    let fresh = NewTopic::new("fresh", 1, TopicReplication::Fixed(1));
    assert_eq!(topic_error(runtime().block_on(admin.create_topics(&[fresh], &options))), failed);
    assert_eq!(topic_metadata(&mut operator, "fresh").0, UNKNOWN_TOPIC_OR_PARTITION);

    // DeleteTopics: refused, the topic and its records are there.
    assert_eq!(topic_error(runtime().block_on(admin.delete_topics(&["kept"], &options))), failed);
    assert_eq!(topic_metadata(&mut operator, "kept"), (0, 1));
    assert_eq!(list_offset(&mut operator, "kept", -1), (0, 5));

    // CreatePartitions: refused, still one partition.
    let grow = NewPartitions::new("kept", 3);
    assert_eq!(topic_error(runtime().block_on(admin.create_partitions(&[grow], &options))), failed);
    assert_eq!(topic_metadata(&mut operator, "kept"), (0, 1));

    // DeleteRecords: refused, the log start has not moved.
    let mut before = TopicPartitionList::new();
    before.add_partition_offset("kept", 0, Offset::Offset(3)).unwrap();
    let result = runtime().block_on(admin.delete_records(&before, &options)).unwrap();
    let element = result.find_partition("kept", 0).unwrap();
    let code = match element.error() {
        Err(KafkaError::OffsetFetch(code)) => code,
        other => panic!("alice's DeleteRecords: {other:?}"),
    };
    assert_eq!(code, RDKafkaErrorCode::TopicAuthorizationFailed);
    assert_eq!(list_offset(&mut operator, "kept", -2), (0, 0));

    // ListOffsets without DESCRIBE: refused, no offset revealed.
    let mut as_alice = alice_raw(port);
    assert_eq!(list_offset(&mut as_alice, "secret", -1), (TOPIC_AUTHORIZATION_FAILED, -1));
    assert_eq!(list_offset(&mut as_alice, "kept", -1), (0, 5));
    // OffsetForLeaderEpoch likewise (DESCRIBE, or CLUSTER_ACTION on the cluster).
    let epoch_end = |client: &mut RawClient, topic: &str| {
        common::offset_for_leader_epoch(client, topic, 0, -1, 0)
    };
    assert_eq!(epoch_end(&mut as_alice, "secret"), (TOPIC_AUTHORIZATION_FAILED, -1, -1));
    assert_eq!(epoch_end(&mut as_alice, "kept"), (0, 0, 5));
}
