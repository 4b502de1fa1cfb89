//! `shardlog group list|describe`. Each shard is a broker and coordinates its own groups,
//! so `list` asks every broker in the metadata and `describe` asks the group's
//! coordinator (FindCoordinator), as Kafka's admin tools do.

use std::collections::BTreeMap;

use bytes::Buf;
use clap::Subcommand;
use kafka_protocol::messages::consumer_protocol_assignment::ConsumerProtocolAssignment;
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::Decodable;
use serde::Serialize;

use super::output::{print_json, Table};
use super::{
    api_error, check, emit, list_offsets, metadata, str_bytes, AdminArgs, Client, OutputFormat,
    LATEST,
};

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List the consumer groups of every shard.
    List,
    /// Show a group's state, members and assignments, committed offsets and lag.
    Describe { group: String },
}

pub fn run(command: GroupCommand, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    match command {
        GroupCommand::List => list(&mut client, admin.format),
        GroupCommand::Describe { group } => describe(&mut client, admin.format, &group),
    }
}

#[derive(Serialize)]
struct GroupSummary {
    group: String,
    state: String,
    protocol_type: String,
    coordinator: i32,
}

fn list(client: &mut Client, format: OutputFormat) -> Result<(), String> {
    let brokers = metadata(client, Some(&[]))?.brokers;
    let mut groups = Vec::new();
    for broker in brokers {
        let addr = format!("{}:{}", broker.host, broker.port);
        let response = client.connect_to(&addr)?.call(&ListGroupsRequest::default())?;
        check(response.error_code, &format!("groups of broker {addr}"), None)?;
        groups.extend(response.groups.into_iter().map(|g| GroupSummary {
            group: g.group_id.0.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            coordinator: broker.node_id.0,
        }));
    }
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    match format {
        OutputFormat::Json => print_json(&groups),
        OutputFormat::Table => {
            let mut table = Table::new(&["GROUP", "STATE", "PROTOCOL_TYPE", "COORDINATOR"]);
            for g in &groups {
                let coordinator = g.coordinator.to_string();
                table.row(vec![
                    g.group.clone(),
                    g.state.clone(),
                    g.protocol_type.clone(),
                    coordinator,
                ]);
            }
            emit(&table.render())
        }
    }
}

#[derive(Serialize)]
struct MemberDescription {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    /// topic -> partitions assigned to this member.
    assignment: BTreeMap<String, Vec<i32>>,
}

#[derive(Serialize)]
struct PartitionOffsets {
    topic: String,
    partition: i32,
    /// None when the group has not committed an offset for the partition.
    committed_offset: Option<i64>,
    high_watermark: i64,
    /// high_watermark - committed_offset.
    lag: Option<i64>,
    member_id: Option<String>,
}

#[derive(Serialize)]
struct GroupDescription {
    group: String,
    state: String,
    protocol_type: String,
    protocol: String,
    coordinator: i32,
    members: Vec<MemberDescription>,
    offsets: Vec<PartitionOffsets>,
}

fn describe(client: &mut Client, format: OutputFormat, group: &str) -> Result<(), String> {
    let subject = format!("group '{group}'");
    let (coordinator_id, coordinator_addr) = find_coordinator(client, group)?;
    let mut coordinator = client.connect_to(&coordinator_addr)?;
    let described = describe_group(&mut coordinator, group)?;
    let committed = committed_offsets(&mut coordinator, group)?;
    // A group the coordinator has never seen is "Dead" with nothing committed (Kafka).
    if described.group_state.as_str() == "Dead" && committed.is_empty() {
        return Err(api_error(
            kafka_protocol::error::ResponseError::GroupIdNotFound.code(),
            &subject,
            None,
        ));
    }
    let members: Vec<MemberDescription> =
        described.members.iter().map(|m| member_description(&described, m)).collect();
    let offsets = partition_offsets(client, &members, committed)?;
    let description = GroupDescription {
        group: group.to_string(),
        state: described.group_state.to_string(),
        protocol_type: described.protocol_type.to_string(),
        protocol: described.protocol_data.to_string(),
        coordinator: coordinator_id,
        members,
        offsets,
    };
    match format {
        OutputFormat::Json => print_json(&description),
        OutputFormat::Table => emit(&describe_table(&description)),
    }
}

/// The coordinator's node id and address.
fn find_coordinator(client: &mut Client, group: &str) -> Result<(i32, String), String> {
    let request = FindCoordinatorRequest::default().with_key(str_bytes(group)).with_key_type(0);
    let response = client.call(&request)?;
    check(
        response.error_code,
        &format!("coordinator of group '{group}'"),
        response.error_message.as_deref(),
    )?;
    Ok((response.node_id.0, format!("{}:{}", response.host, response.port)))
}

fn describe_group(coordinator: &mut Client, group: &str) -> Result<DescribedGroup, String> {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(group))]);
    let response = coordinator.call(&request)?;
    let described = response.groups.into_iter().next().ok_or("no description of the group")?;
    check(described.error_code, &format!("group '{group}'"), described.error_message.as_deref())?;
    Ok(described)
}

/// The group's committed offsets: (topic, partition) -> offset.
fn committed_offsets(
    coordinator: &mut Client,
    group: &str,
) -> Result<BTreeMap<(String, i32), i64>, String> {
    // No topic list (null): every topic the group committed.
    let request =
        OffsetFetchRequest::default().with_group_id(GroupId(str_bytes(group))).with_topics(None);
    let response = coordinator.call(&request)?;
    check(response.error_code, &format!("offsets of group '{group}'"), None)?;
    let mut committed = BTreeMap::new();
    for topic in response.topics {
        for p in topic.partitions.into_iter().filter(|p| p.committed_offset >= 0) {
            committed.insert((topic.name.0.to_string(), p.partition_index), p.committed_offset);
        }
    }
    Ok(committed)
}

fn member_description(group: &DescribedGroup, member: &DescribedGroupMember) -> MemberDescription {
    let consumer = group.protocol_type.as_str() == "consumer";
    MemberDescription {
        member_id: member.member_id.to_string(),
        group_instance_id: member.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: member.client_id.to_string(),
        client_host: member.client_host.to_string(),
        assignment: if consumer {
            decode_assignment(&member.member_assignment)
        } else {
            BTreeMap::new()
        },
    }
}

/// A consumer's assignment (version i16, then the ConsumerProtocolAssignment of that
/// version); bytes that do not decode count as no assignment.
pub(crate) fn decode_assignment(bytes: &bytes::Bytes) -> BTreeMap<String, Vec<i32>> {
    let mut bytes = bytes.clone();
    if bytes.remaining() < 2 {
        return BTreeMap::new();
    }
    let version = bytes.get_i16().clamp(0, 3);
    let Ok(assignment) = ConsumerProtocolAssignment::decode(&mut bytes, version) else {
        return BTreeMap::new();
    };
    assignment
        .assigned_partitions
        .into_iter()
        .map(|tp| (tp.topic.0.to_string(), tp.partitions))
        .collect()
}

/// Committed offset, high watermark and lag of every partition the group committed or
/// has assigned.
fn partition_offsets(
    client: &mut Client,
    members: &[MemberDescription],
    committed: BTreeMap<(String, i32), i64>,
) -> Result<Vec<PartitionOffsets>, String> {
    let mut owners: BTreeMap<(String, i32), Option<String>> =
        committed.keys().map(|k| (k.clone(), None)).collect();
    for member in members {
        for (topic, partitions) in &member.assignment {
            for p in partitions {
                owners.insert((topic.clone(), *p), Some(member.member_id.clone()));
            }
        }
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in owners.keys() {
        by_topic.entry(topic.as_str()).or_default().push(*partition);
    }
    let mut offsets = Vec::new();
    for (topic, partitions) in by_topic {
        let high_watermarks = list_offsets(client, topic, &partitions, LATEST)?;
        for (partition, high_watermark) in partitions.into_iter().zip(high_watermarks) {
            let key = (topic.to_string(), partition);
            let committed_offset = committed.get(&key).copied();
            offsets.push(PartitionOffsets {
                topic: topic.to_string(),
                partition,
                committed_offset,
                high_watermark,
                lag: committed_offset.map(|c| high_watermark - c),
                member_id: owners[&key].clone(),
            });
        }
    }
    Ok(offsets)
}

fn describe_table(d: &GroupDescription) -> String {
    let mut members = Table::new(&["MEMBER", "CLIENT_ID", "HOST", "ASSIGNMENT"]);
    for m in &d.members {
        let assignment: Vec<String> =
            m.assignment.iter().map(|(t, ps)| format!("{t}:{ps:?}")).collect();
        members.row(vec![
            m.member_id.clone(),
            m.client_id.clone(),
            m.client_host.clone(),
            assignment.join(" "),
        ]);
    }
    let mut offsets =
        Table::new(&["TOPIC", "PARTITION", "COMMITTED_OFFSET", "HIGH_WATERMARK", "LAG", "MEMBER"]);
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for o in &d.offsets {
        offsets.row(vec![
            o.topic.clone(),
            o.partition.to_string(),
            or_dash(o.committed_offset.map(|c| c.to_string())),
            o.high_watermark.to_string(),
            or_dash(o.lag.map(|l| l.to_string())),
            or_dash(o.member_id.clone()),
        ]);
    }
    format!(
        "group: {}  state: {}  protocol: {}  coordinator: {}\n\n{}\n{}",
        d.group,
        d.state,
        d.protocol,
        d.coordinator,
        members.render(),
        offsets.render()
    )
}
