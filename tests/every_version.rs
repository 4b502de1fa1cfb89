//! Every version of every API the broker advertises gets a response the client can
//! decode. (kafka-protocol refuses to encode a field a version does not carry; a handler
//! that sets one would close the connection instead of answering.)

mod common;

use bytes::Bytes;
use common::{record_batch, Broker, RawClient};
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsRequest, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::{DeleteTopicState, DeleteTopicsRequest};
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_protocol::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
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
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::{ApiKey, GroupId, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use shardlog_net::legacy_format::{encode_message_set, Codec, LegacyMessage};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn topic(v: &str) -> TopicName {
    TopicName(s(v))
}

/// The version ranges the broker advertises (ApiVersions v3).
fn advertised(
    client: &mut RawClient,
) -> Vec<kafka_protocol::messages::api_versions_response::ApiVersion> {
    let request = RequestKind::ApiVersions(ApiVersionsRequest::default());
    match client.call(ApiKey::ApiVersions, 3, request) {
        ResponseKind::ApiVersions(r) => r.api_keys,
        other => panic!("{other:?}"),
    }
}

/// A message set of format v0 (Produce v0-v1) or v1 (v2) holding one record.
fn legacy_message_set(version: i16) -> Bytes {
    let magic = if version < 2 { 0 } else { 1 };
    let message = LegacyMessage {
        offset: 0,
        magic,
        attributes: 0,
        timestamp: if magic == 0 { -1 } else { 7 },
        key: Some(Bytes::from_static(b"k")),
        value: Some(Bytes::from_static(b"v")),
    };
    encode_message_set(&[message], Codec::None)
}

/// A meaningful request of `api` at `version` (topic "v" partition 0 exists, with id
/// `topic_id`).
fn request_for(api: ApiKey, version: i16, topic_id: uuid::Uuid) -> RequestKind {
    let group = |prefix: &str| GroupId(s(&format!("{prefix}-{version}")));
    match api {
        ApiKey::Produce => RequestKind::Produce(
            ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
                TopicProduceData::default().with_name(topic("v")).with_partition_data(vec![
                    PartitionProduceData::default().with_index(0).with_records(Some(
                        if version < 3 {
                            legacy_message_set(version)
                        } else {
                            record_batch(&[(b"k", b"v")], 7)
                        },
                    )),
                ]),
            ]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(
            FetchRequest::default().with_max_bytes(1 << 20).with_session_epoch(-1).with_topics(
                // v13+ name the topic by id only (the encoder leaves the name out).
                vec![FetchTopic::default()
                    .with_topic(topic("v"))
                    .with_topic_id(topic_id)
                    .with_partitions(vec![
                        FetchPartition::default().with_partition_max_bytes(1 << 20)
                    ])],
            ),
        ),
        ApiKey::ListOffsets => RequestKind::ListOffsets(
            ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic("v"))
                    .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-1)]),
            ]),
        ),
        ApiKey::Metadata => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic("v"))),
            ])))
        }
        ApiKey::ApiVersions => RequestKind::ApiVersions(ApiVersionsRequest::default()),
        ApiKey::CreateTopics => RequestKind::CreateTopics(
            CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(topic(&format!("created-{version}")))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
        ),
        ApiKey::DeleteTopics if version >= 6 => RequestKind::DeleteTopics(
            DeleteTopicsRequest::default()
                .with_topics(vec![DeleteTopicState::default().with_name(Some(topic("missing")))]),
        ),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![topic("missing")]),
        ),
        ApiKey::DescribeConfigs => {
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(
                vec![DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("v"))
                .with_configuration_keys(None)],
            ))
        }
        ApiKey::FindCoordinator if version >= 4 => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")]),
        ),
        ApiKey::FindCoordinator => {
            RequestKind::FindCoordinator(FindCoordinatorRequest::default().with_key(s("g")))
        }
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group("join"))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(Bytes::from_static(&[0, 0, 0, 0, 0, 0]))]),
        ),
        ApiKey::SyncGroup => {
            RequestKind::SyncGroup(SyncGroupRequest::default().with_group_id(group("sync")))
        }
        ApiKey::Heartbeat => {
            RequestKind::Heartbeat(HeartbeatRequest::default().with_group_id(group("join")))
        }
        ApiKey::LeaveGroup if version >= 3 => RequestKind::LeaveGroup(
            LeaveGroupRequest::default()
                .with_group_id(group("join"))
                .with_members(vec![MemberIdentity::default().with_member_id(s("nobody"))]),
        ),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(
            LeaveGroupRequest::default().with_group_id(group("join")).with_member_id(s("nobody")),
        ),
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(group("commit"))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(topic("v"))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default().with_committed_offset(1)
                    ])]),
        ),
        ApiKey::OffsetFetch if version >= 8 => RequestKind::OffsetFetch(
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("commit-8")))
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(topic("v"))
                    .with_partition_indexes(vec![0])]))]),
        ),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(
            OffsetFetchRequest::default().with_group_id(GroupId(s("commit-8"))).with_topics(Some(
                vec![OffsetFetchRequestTopic::default()
                    .with_name(topic("v"))
                    .with_partition_indexes(vec![0])],
            )),
        ),
        ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(
            DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(s("commit-8")), group("none")]),
        ),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![group("none")]),
        ),
        ApiKey::OffsetDelete => RequestKind::OffsetDelete(
            OffsetDeleteRequest::default().with_group_id(GroupId(s("commit-8"))).with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(topic("v"))
                    .with_partitions(vec![OffsetDeleteRequestPartition::default()]),
            ]),
        ),
        ApiKey::InitProducerId => RequestKind::InitProducerId(
            kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest::default()
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        ),
        ApiKey::AlterConfigs => {
            use kafka_protocol::messages::alter_configs_request::{
                AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
            };
            RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(
                vec![AlterConfigsResource::default(
                )
                .with_resource_type(2)
                .with_resource_name(s("v"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("604800000")))])],
            ))
        }
        ApiKey::IncrementalAlterConfigs => {
            use kafka_protocol::messages::incremental_alter_configs_request::{
                AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
            };
            RequestKind::IncrementalAlterConfigs(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(s("v"))
                        .with_configs(vec![AlterableConfig::default()
                            .with_name(s("retention.bytes"))
                            .with_value(Some(s("-1")))]),
                ]),
            )
        }
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(
            CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic("v"))
                .with_count(2 + version as i32)
                .with_assignments(None)]),
        ),
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(
            DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![
                DeleteRecordsTopic::default().with_name(topic("v")).with_partitions(vec![
                    DeleteRecordsPartition::default().with_partition_index(0).with_offset(-1),
                ]),
            ]),
        ),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        ApiKey::DescribeLogDirs => {
            RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default().with_topics(None))
        }
        // Transactions: an id nobody initialised, so each gets a decodable refusal.
        ApiKey::AddPartitionsToTxn => {
            use kafka_protocol::messages::add_partitions_to_txn_request::{
                AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
            };
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(s("t").into())
                    .with_v3_and_below_producer_id(1.into())
                    .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                        .with_name(topic("v"))
                        .with_partitions(vec![0])]),
            )
        }
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(
            kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest::default()
                .with_transactional_id(s("t").into())
                .with_group_id(GroupId(s("g"))),
        ),
        ApiKey::EndTxn => RequestKind::EndTxn(
            kafka_protocol::messages::end_txn_request::EndTxnRequest::default()
                .with_transactional_id(s("t").into()),
        ),
        ApiKey::TxnOffsetCommit => {
            use kafka_protocol::messages::txn_offset_commit_request::{
                TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                TxnOffsetCommitRequestTopic,
            };
            RequestKind::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(s("t").into())
                    .with_group_id(GroupId(s("txn-g")))
                    .with_producer_id(1.into())
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(topic("v"))
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()])]),
            )
        }
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(
            kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![s("t").into()]),
        ),
        ApiKey::ListTransactions => RequestKind::ListTransactions(
            kafka_protocol::messages::list_transactions_request::ListTransactionsRequest::default(),
        ),
        ApiKey::DescribeAcls => RequestKind::DescribeAcls(
            kafka_protocol::messages::describe_acls_request::DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        ),
        ApiKey::CreateAcls => RequestKind::CreateAcls(
            kafka_protocol::messages::create_acls_request::CreateAclsRequest::default()
                .with_creations(vec![
                    kafka_protocol::messages::create_acls_request::AclCreation::default()
                        .with_resource_type(2)
                        .with_resource_name(s("v"))
                        .with_resource_pattern_type(3)
                        .with_principal(s(&format!("User:v{version}")))
                        .with_host(s("*"))
                        .with_operation(3)
                        .with_permission_type(3),
                ]),
        ),
        ApiKey::DeleteAcls => RequestKind::DeleteAcls(
            kafka_protocol::messages::delete_acls_request::DeleteAclsRequest::default()
                .with_filters(vec![
                    kafka_protocol::messages::delete_acls_request::DeleteAclsFilter::default()
                        .with_resource_type_filter(2)
                        .with_resource_name_filter(Some(s("v")))
                        .with_pattern_type_filter(3)
                        .with_principal_filter(Some(s(&format!("User:v{version}"))))
                        .with_host_filter(None)
                        .with_operation(1)
                        .with_permission_type(1),
                ]),
        ),
        ApiKey::OffsetForLeaderEpoch => RequestKind::OffsetForLeaderEpoch(
            OffsetForLeaderEpochRequest::default().with_replica_id((-1).into()).with_topics(vec![
                OffsetForLeaderTopic::default().with_topic(topic("v")).with_partitions(vec![
                    OffsetForLeaderPartition::default().with_leader_epoch(0),
                ]),
            ]),
        ),
        // On a PLAINTEXT listener both answer ILLEGAL_SASL_STATE (tests/sasl.rs serves them).
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(
            kafka_protocol::messages::SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        ),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
            kafka_protocol::messages::SaslAuthenticateRequest::default(),
        ),
        ApiKey::DescribeUserScramCredentials => RequestKind::DescribeUserScramCredentials(
            kafka_protocol::messages::DescribeUserScramCredentialsRequest::default(),
        ),
        ApiKey::AlterUserScramCredentials => RequestKind::AlterUserScramCredentials(
            kafka_protocol::messages::AlterUserScramCredentialsRequest::default(),
        ),
        other => panic!("the broker advertises {other:?}: add it to this test"),
    }
}

#[test]
fn every_advertised_version_of_every_api_gets_a_decodable_response() {
    let broker = Broker::start(1, &["--group-min-session-timeout-ms", "1000"]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(topic("v"))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    let topic_id = match client.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(create)) {
        ResponseKind::CreateTopics(r) => r.topics[0].topic_id,
        other => panic!("{other:?}"),
    };
    assert!(!topic_id.is_nil());
    let advertised = advertised(&mut client);
    let mut exercised = 0;
    for api in advertised {
        let key = ApiKey::try_from(api.api_key).unwrap();
        for version in api.min_version..=api.max_version {
            let request = request_for(key, version, topic_id);
            let id = client.send(key, version, &request);
            // Panics (and prints the broker log) if the broker closed the connection.
            let response = client.receive(key, version, id);
            if let ResponseKind::Fetch(fetch) = &response {
                // By name or by id, every version finds the topic.
                let errors: Vec<i16> = fetch
                    .responses
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                    .collect();
                assert_eq!(errors, vec![0], "Fetch v{version}: {fetch:?}");
            }
            if let ResponseKind::OffsetForLeaderEpoch(r) = &response {
                // Epoch 0 (a partition of one replica) ends at the log end, in every version.
                let p = &r.topics[0].partitions[0];
                assert_eq!(p.error_code, 0, "OffsetForLeaderEpoch v{version}: {r:?}");
                assert!(p.end_offset >= 0, "OffsetForLeaderEpoch v{version}: {r:?}");
            }
            exercised += 1;
        }
    }
    // Kafka 3.9's versions of the served APIs (every_version covers each one).
    assert!(exercised > 120, "only {exercised} api versions exercised");
}

/// Kafka 3.9's request versions of the APIs shardlog implements (validVersions in
/// clients/src/main/resources/common/message/*Request.json at the 3.9 branch), including
/// Produce v0-v2 and Fetch v0-v3, which carry message format v0/v1 (converted).
const KAFKA_3_9: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 11),
    (ApiKey::Fetch, 0, 17),
    (ApiKey::ListOffsets, 0, 9),
    (ApiKey::Metadata, 0, 12),
    // Kafka 3.9 also serves v0-v1 (no current_leader_epoch); KIP-896 removed them in 4.0
    // and the codec has neither (docs/compatibility.md).
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::OffsetCommit, 0, 9),
    (ApiKey::OffsetFetch, 0, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 0, 7),
    (ApiKey::DeleteTopics, 0, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeConfigs, 0, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 0, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    // v4-v5 are the broker-to-broker form (KIP-890), which clients never send.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // Kafka 3.9 also serves v0 (no pattern type, LITERAL implied); KIP-896 removed it in
    // 4.0 and the codec has no v0, so it is not served here (docs/compatibility.md).
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

#[test]
fn advertised_versions_cover_what_kafka_3_9_serves() {
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let advertised = advertised(&mut client);
    for &(key, min, max) in KAFKA_3_9 {
        let served = advertised
            .iter()
            .find(|a| a.api_key == key as i16)
            .unwrap_or_else(|| panic!("{key:?} is not advertised"));
        assert!(
            served.min_version <= min && served.max_version >= max,
            "{key:?}: advertised v{}-v{}, Kafka 3.9 serves v{min}-v{max}",
            served.min_version,
            served.max_version
        );
    }
    // librdkafka gates features on Produce ranges that include v0-v2 (KAFKA-18659).
    let produce = advertised.iter().find(|a| a.api_key == ApiKey::Produce as i16).unwrap();
    assert_eq!(produce.min_version, 0);
    assert_eq!(advertised.len(), KAFKA_3_9.len(), "an API served beyond this table");
}

/// Writes the seed inputs of the `frame` and `request` fuzz targets (fuzz/README.md): one
/// meaningful request of every version the broker advertises. Run once by hand:
/// `cargo test --release -p shardlog --test every_version -- --ignored`.
#[test]
#[ignore]
fn write_fuzz_seed_corpus() {
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::Encodable;
    let broker = Broker::start(1, &[]);
    let mut client = RawClient::connect(broker.shard_addr(0));
    let advertised = advertised(&mut client);
    let corpus = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    std::fs::create_dir_all(corpus.join("frame")).unwrap();
    std::fs::create_dir_all(corpus.join("request")).unwrap();
    for api in advertised {
        let key = ApiKey::try_from(api.api_key).unwrap();
        for version in api.min_version..=api.max_version {
            let mut body = bytes::BytesMut::new();
            request_for(key, version, uuid::Uuid::nil()).encode(&mut body, version).unwrap();
            let header = RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version)
                .with_correlation_id(7)
                .with_client_id(Some(s("seed")));
            let mut frame = bytes::BytesMut::new();
            header.encode(&mut frame, key.request_header_version(version)).unwrap();
            frame.extend_from_slice(&body);
            let name = format!("seed-{key:?}-v{version}");
            std::fs::write(corpus.join("frame").join(&name), &frame).unwrap();
            let input = shardlog_net::fuzzing::request_input(key, version, &body);
            std::fs::write(corpus.join("request").join(&name), input).unwrap();
        }
    }
}
