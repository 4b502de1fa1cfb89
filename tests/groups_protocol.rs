//! Consumer-group APIs with raw requests, for exact error codes and coordinator placement.

mod common;

use bytes::Bytes;
use common::{Broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestGroup};
use kafka_protocol::messages::{ApiKey, GroupId, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use shardlog_shards::group::coordinator_shard;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A group id coordinated by `shard` of `nr_shards`.
fn group_on(shard: usize, nr_shards: usize) -> String {
    (0..).map(|i| format!("group-{i}")).find(|g| coordinator_shard(g, nr_shards) == shard).unwrap()
}

fn join_request(group: &str, member_id: &str) -> RequestKind {
    RequestKind::JoinGroup(
        JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(member_id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(&[0, 0, 0, 0, 0, 0]))]),
    )
}

fn join(client: &mut RawClient, group: &str, member_id: &str) -> (i16, String) {
    match client.call(ApiKey::JoinGroup, 5, join_request(group, member_id)) {
        ResponseKind::JoinGroup(r) => (r.error_code, r.member_id.to_string()),
        other => panic!("{other:?}"),
    }
}

fn commit(client: &mut RawClient, group: &str, topic: &str, metadata: &str) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)
                .with_committed_metadata(Some(s(metadata)))])]);
    match client.call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(request)) {
        ResponseKind::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[test]
fn group_requests_get_the_right_coordinator_and_error_codes() {
    let broker = Broker::start(2, &[]);
    let on_one = group_on(1, 2);
    let mut shard0 = RawClient::connect(broker.shard_addr(0));
    let mut shard1 = RawClient::connect(broker.shard_addr(1));

    let request = FindCoordinatorRequest::default()
        .with_coordinator_keys(vec![s(&on_one), s(&group_on(0, 2))]);
    match shard0.call(ApiKey::FindCoordinator, 4, RequestKind::FindCoordinator(request)) {
        ResponseKind::FindCoordinator(r) => {
            let nodes: Vec<i32> = r.coordinators.iter().map(|c| c.node_id.0).collect();
            assert_eq!(nodes, vec![1, 0]);
            assert_eq!(r.coordinators[0].port as u16, broker.shard_addr(1).port());
        }
        other => panic!("{other:?}"),
    }

    assert_eq!(join(&mut shard0, &on_one, "").0, 16, "NOT_COORDINATOR on the wrong shard");
    let (code, member_id) = join(&mut shard1, &on_one, "");
    assert_eq!(code, 79, "MEMBER_ID_REQUIRED first");
    assert!(!member_id.is_empty());
    assert_eq!(join(&mut shard1, &on_one, "made-up").0, 25, "UNKNOWN_MEMBER_ID");
    assert_eq!(join(&mut shard1, &on_one, &member_id).0, 0);

    let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
        .with_name(TopicName(s("committed")))
        .with_num_partitions(1)
        .with_replication_factor(1)]);
    shard0.call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(create));
    let standalone = group_on(0, 2);
    assert_eq!(commit(&mut shard0, &standalone, "nope", ""), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(
        commit(&mut shard0, &standalone, "committed", &"m".repeat(5000)),
        12,
        "OFFSET_METADATA_TOO_LARGE"
    );
    assert_eq!(commit(&mut shard0, &standalone, "committed", "meta"), 0);
    assert_eq!(
        commit(&mut shard1, &on_one, "committed", ""),
        25,
        "a member group needs its member id"
    );

    let fetch = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(&standalone)))
        .with_topics(None)]);
    match shard0.call(ApiKey::OffsetFetch, 8, RequestKind::OffsetFetch(fetch)) {
        ResponseKind::OffsetFetch(r) => {
            let p = &r.groups[0].topics[0].partitions[0];
            assert_eq!((p.committed_offset, p.metadata.as_deref()), (5, Some("meta")));
        }
        other => panic!("{other:?}"),
    }

    let delete = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(s("never-seen-group-x")), GroupId(s(&standalone))]);
    let target = coordinator_shard("never-seen-group-x", 2);
    let client = if target == 0 { &mut shard0 } else { &mut shard1 };
    match client.call(ApiKey::DeleteGroups, 2, RequestKind::DeleteGroups(delete)) {
        ResponseKind::DeleteGroups(r) => {
            assert_eq!(r.results[0].error_code, 69, "GROUP_ID_NOT_FOUND");
        }
        other => panic!("{other:?}"),
    }
}

/// Two consumers that start together both get MEMBER_ID_REQUIRED; the first to come back
/// must wait for the second (Kafka's hasAllMembersJoined counts pending ids), or it forms
/// a generation alone and the second forces a rebalance at once (librdkafka test 0118).
#[test]
fn consumers_starting_together_land_in_one_first_generation() {
    let broker = Broker::start(2, &[]);
    let group = group_on(1, 2);
    let mut first = RawClient::connect(broker.shard_addr(1));
    let mut second = RawClient::connect(broker.shard_addr(1));
    let (code, first_id) = join(&mut first, &group, "");
    assert_eq!(code, 79, "MEMBER_ID_REQUIRED");
    let (code, second_id) = join(&mut second, &group, "");
    assert_eq!(code, 79, "MEMBER_ID_REQUIRED");

    let first_call = first.send(ApiKey::JoinGroup, 5, &join_request(&group, &first_id));
    let second_call = second.send(ApiKey::JoinGroup, 5, &join_request(&group, &second_id));
    let ResponseKind::JoinGroup(first_joined) = first.receive(ApiKey::JoinGroup, 5, first_call)
    else {
        panic!("not a JoinGroup response")
    };
    let ResponseKind::JoinGroup(second_joined) = second.receive(ApiKey::JoinGroup, 5, second_call)
    else {
        panic!("not a JoinGroup response")
    };
    assert_eq!((first_joined.error_code, second_joined.error_code), (0, 0));
    assert_eq!(first_joined.generation_id, 1, "the first generation");
    assert_eq!(second_joined.generation_id, 1, "the same generation");
    let leader =
        if first_joined.leader.as_str() == first_id { &first_joined } else { &second_joined };
    let mut members: Vec<String> = leader.members.iter().map(|m| m.member_id.to_string()).collect();
    members.sort();
    let mut expected = vec![first_id, second_id];
    expected.sort();
    assert_eq!(members, expected, "the leader is given both members to assign");
}
