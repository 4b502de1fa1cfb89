//! `topics --requests N`: the latency of the requests that must not depend on how many
//! topics the broker holds. One request at a time, each about one partition of a topic
//! picked at random from the created ones (or the first `--requests-among` of them):
//! Metadata for that topic (bootstrap broker), ListOffsets (latest) and Fetch (offset 0,
//! max_wait_ms 0) on the partition's leader, OffsetCommit of one offset by a group with no
//! members on the group's coordinator.
//!
//! Each kind's requests are built before its clock starts and the timed loop walks them in
//! order, so what the client itself touches per request (a request it built moments ago,
//! a handful of connections) is the same at 8 topics as at 50,000: a client that looked
//! up a random topic's name and leader among 50,000 per request paid its own cache misses
//! for it, which the latency then charged to the broker.

use std::collections::BTreeMap;
use std::time::Instant;

use hdrhistogram::Histogram;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FindCoordinatorRequest, GroupId, ListOffsetsRequest,
    MetadataRequest, OffsetCommitRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use shardlog_benches::load::cluster::{topic_name, TopicLayout};
use shardlog_benches::load::conn::Connection;

use crate::report::{new_histogram, record, Report};

/// Times `count` requests of each kind, about topics picked among the first `among` of
/// `layouts` (0: all); one report line per kind.
pub fn run(
    bootstrap: &str,
    layouts: &[TopicLayout],
    count: usize,
    among: usize,
    label: &str,
) -> Result<(), String> {
    if layouts.is_empty() {
        return Err("no topics to ask about".into());
    }
    let among = match among {
        0 => layouts.len(),
        n => n.min(layouts.len()),
    };
    let mut probe = Probe { connections: BTreeMap::new() };
    let group = format!("{}-probe", layouts[0].topic);
    let coordinator = probe.coordinator(bootstrap, &group)?;
    // The same topics, in the same order, for every kind.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ layouts.len() as u64;
    let picks: Vec<usize> = (0..count)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % among as u64) as usize
        })
        .collect();
    let report = |kind: &str, histogram: Histogram<u64>| {
        print_latency(kind, layouts.len(), among, label, &histogram)
    };
    let partition_0 = |t: usize| (layouts[t].topic.as_str(), layouts[t].leaders[0].as_str());

    let metadata = picks.iter().map(|&t| (t, bootstrap, metadata_request(&layouts[t].topic)));
    report("metadata_one_topic", probe.time(metadata.collect(), layouts, check_metadata)?);

    let list_offsets = picks.iter().map(|&t| {
        let (topic, leader) = partition_0(t);
        (t, leader, list_offsets_request(topic))
    });
    report("list_offsets", probe.time(list_offsets.collect(), layouts, check_list_offsets)?);

    let fetch = picks.iter().map(|&t| {
        let (topic, leader) = partition_0(t);
        (t, leader, fetch_request(topic))
    });
    report("fetch", probe.time(fetch.collect(), layouts, check_fetch)?);

    let commit = picks
        .iter()
        .map(|&t| (t, coordinator.as_str(), offset_commit_request(&layouts[t].topic, &group)));
    report("offset_commit", probe.time(commit.collect(), layouts, check_offset_commit)?);
    Ok(())
}

fn print_latency(kind: &str, topics: usize, among: usize, label: &str, histogram: &Histogram<u64>) {
    let mut report = Report::new("topics_requests", label);
    report.add("request", kind).add("topics", topics).add("among", among);
    report.add_latency("latency", histogram);
    report.print();
}

/// Connections by address.
struct Probe {
    connections: BTreeMap<String, Connection>,
}

impl Probe {
    fn call<R: Request>(&mut self, addr: &str, request: &R) -> Result<R::Response, String> {
        if !self.connections.contains_key(addr) {
            let conn = Connection::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
            self.connections.insert(addr.to_string(), conn);
        }
        let conn = self.connections.get_mut(addr).expect("connected above");
        let key = ApiKey::try_from(R::KEY).map_err(|_| "unknown api key".to_string())?;
        let version = conn.version(key).map_err(|e| e.to_string())?;
        conn.call(request, version).map_err(|e| format!("{key:?} to {addr}: {e}"))
    }

    /// Sends the built requests one at a time, in order, timing each until its answer;
    /// `check` the answer (`t`: the topic's number, only read for the error message).
    fn time<R: Request>(
        &mut self,
        requests: Vec<(usize, &str, R)>,
        layouts: &[TopicLayout],
        check: fn(&R::Response) -> Option<i16>,
    ) -> Result<Histogram<u64>, String> {
        let mut histogram = new_histogram();
        for (t, addr, request) in &requests {
            let started = Instant::now();
            let response = self.call(addr, request)?;
            record(&mut histogram, started.elapsed());
            match check(&response) {
                Some(0) => {}
                Some(code) => {
                    return Err(format!("{:?} {}-0: error {code}", R::KEY, layouts[*t].topic))
                }
                None => return Err(format!("{:?} {}-0: no partition", R::KEY, layouts[*t].topic)),
            }
        }
        Ok(histogram)
    }

    fn coordinator(&mut self, bootstrap: &str, group: &str) -> Result<String, String> {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0);
        let response = self.call(bootstrap, &request)?;
        if response.error_code != 0 {
            return Err(format!("FindCoordinator {group}: error {}", response.error_code));
        }
        Ok(format!("{}:{}", response.host, response.port))
    }
}

fn metadata_request(topic: &str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(topic)))]))
        .with_allow_auto_topic_creation(false)
}

/// The topic's error, or 0 once it has partitions.
fn check_metadata(response: &kafka_protocol::messages::MetadataResponse) -> Option<i16> {
    let answer = response.topics.first()?;
    match answer.error_code {
        0 if answer.partitions.is_empty() => None,
        code => Some(code),
    }
}

fn list_offsets_request(topic: &str) -> ListOffsetsRequest {
    ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1),
        ]),
    ])
}

fn check_list_offsets(response: &kafka_protocol::messages::ListOffsetsResponse) -> Option<i16> {
    response.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next()
}

fn fetch_request(topic: &str) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(topic_name(topic)).with_partitions(
            vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(-1)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)],
        )])
}

/// The request's own error first, then the partition's.
fn check_fetch(response: &kafka_protocol::messages::FetchResponse) -> Option<i16> {
    if response.error_code != 0 {
        return Some(response.error_code);
    }
    response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next()
}

fn offset_commit_request(topic: &str, group: &str) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(0)
                .with_committed_leader_epoch(-1)])])
}

fn check_offset_commit(response: &kafka_protocol::messages::OffsetCommitResponse) -> Option<i16> {
    response.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next()
}
