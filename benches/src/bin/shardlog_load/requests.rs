//! `topics --requests N`: the latency of the requests that must not depend on how many
//! topics the broker holds. One request at a time, each about one partition of a topic
//! picked at random from the created ones: Metadata for that topic (bootstrap broker),
//! ListOffsets (latest) and Fetch (offset 0, max_wait_ms 0) on the partition's leader,
//! OffsetCommit of one offset by a group with no members on the group's coordinator.

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

/// Sends one request about topic number `t` and checks its answer.
type SendOne<'a> = &'a dyn Fn(&mut Probe, usize) -> Result<(), String>;

/// Times `count` requests of each kind; one report line per kind.
pub fn run(
    bootstrap: &str,
    layouts: &[TopicLayout],
    count: usize,
    label: &str,
) -> Result<(), String> {
    let mut probe = Probe::connect(bootstrap, layouts)?;
    let group = format!("{}-probe", layouts[0].topic);
    let coordinator = probe.coordinator(&group)?;
    let topics = layouts.len();
    let kinds: [(&str, SendOne); 4] = [
        ("metadata_one_topic", &|p, t| p.metadata(t)),
        ("list_offsets", &|p, t| p.list_offsets(t)),
        ("fetch", &|p, t| p.fetch(t)),
        ("offset_commit", &|p, t| p.offset_commit(t, &group, &coordinator)),
    ];
    for (kind, send) in kinds {
        let mut histogram = new_histogram();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ topics as u64;
        for _ in 0..count {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let started = Instant::now();
            send(&mut probe, (rng % topics as u64) as usize)?;
            record(&mut histogram, started.elapsed());
        }
        print_latency(kind, topics, label, &histogram);
    }
    Ok(())
}

fn print_latency(kind: &str, topics: usize, label: &str, histogram: &Histogram<u64>) {
    let mut report = Report::new("topics_requests", label);
    report.add("request", kind).add("topics", topics).add_latency("latency", histogram);
    report.print();
}

/// Connections by address, and what the requests are about.
struct Probe<'a> {
    bootstrap: String,
    layouts: &'a [TopicLayout],
    connections: BTreeMap<String, Connection>,
}

impl<'a> Probe<'a> {
    fn connect(bootstrap: &str, layouts: &'a [TopicLayout]) -> Result<Probe<'a>, String> {
        if layouts.is_empty() {
            return Err("no topics to ask about".into());
        }
        Ok(Probe { bootstrap: bootstrap.to_string(), layouts, connections: BTreeMap::new() })
    }

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

    /// Partition 0 of topic `t` and its leader.
    fn partition_0(&self, t: usize) -> (&'a str, String) {
        let layout = &self.layouts[t];
        (layout.topic.as_str(), layout.leaders[0].clone())
    }

    fn metadata(&mut self, t: usize) -> Result<(), String> {
        let topic = self.layouts[t].topic.as_str();
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
            ]))
            .with_allow_auto_topic_creation(false);
        let bootstrap = self.bootstrap.clone();
        let response = self.call(&bootstrap, &request)?;
        match response.topics.first() {
            Some(answer) if answer.error_code == 0 && !answer.partitions.is_empty() => Ok(()),
            Some(answer) => Err(format!("Metadata {topic}: error {}", answer.error_code)),
            None => Err(format!("Metadata {topic}: no topic in the answer")),
        }
    }

    fn list_offsets(&mut self, t: usize) -> Result<(), String> {
        let (topic, leader) = self.partition_0(t);
        let request =
            ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
                ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(-1),
                ]),
            ]);
        let response = self.call(&leader, &request)?;
        let code = response.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next();
        check(code, "ListOffsets", topic)
    }

    fn fetch(&mut self, t: usize) -> Result<(), String> {
        let (topic, leader) = self.partition_0(t);
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(1 << 20)])]);
        let response = self.call(&leader, &request)?;
        if response.error_code != 0 {
            return Err(format!("Fetch {topic}: error {}", response.error_code));
        }
        let code =
            response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next();
        check(code, "Fetch", topic)
    }

    fn coordinator(&mut self, group: &str) -> Result<String, String> {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0);
        let bootstrap = self.bootstrap.clone();
        let response = self.call(&bootstrap, &request)?;
        if response.error_code != 0 {
            return Err(format!("FindCoordinator {group}: error {}", response.error_code));
        }
        Ok(format!("{}:{}", response.host, response.port))
    }

    fn offset_commit(&mut self, t: usize, group: &str, coordinator: &str) -> Result<(), String> {
        let (topic, _) = self.partition_0(t);
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(0)
                    .with_committed_leader_epoch(-1)])]);
        let response = self.call(coordinator, &request)?;
        let code = response.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).next();
        check(code, "OffsetCommit", topic)
    }
}

fn check(code: Option<i16>, api: &str, topic: &str) -> Result<(), String> {
    match code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("{api} {topic}-0: error {code}")),
        None => Err(format!("{api} {topic}-0: no partition in the answer")),
    }
}
