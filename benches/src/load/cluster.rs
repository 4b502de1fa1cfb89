//! Cluster view for the load generator: create topics, then follow Metadata to each
//! partition's leader (on shardlog, the port of the shard that owns the partition).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::conn::{ClientError, Connection, Result};

/// Kafka's TOPIC_ALREADY_EXISTS.
const TOPIC_ALREADY_EXISTS: i16 = 36;
/// Kafka's NOT_CONTROLLER: in a cluster, topics are created by the controller only.
const NOT_CONTROLLER: i16 = 41;
/// How long CreateTopics follows NOT_CONTROLLER (a controller election takes seconds).
const CONTROLLER_WAIT: Duration = Duration::from_secs(60);

/// Where each partition of one topic lives.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    pub topic: String,
    /// leader address ("host:port") per partition index.
    pub leaders: Vec<String>,
}

impl TopicLayout {
    /// Partitions grouped by leader address, in partition order.
    pub fn by_leader(&self) -> BTreeMap<String, Vec<i32>> {
        let mut map: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (partition, leader) in self.leaders.iter().enumerate() {
            map.entry(leader.clone()).or_default().push(partition as i32);
        }
        map
    }
}

pub fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Creates `topic` with `partitions` of `replication_factor` replicas (an existing topic
/// is fine).
pub fn create_topic(
    conn: &mut Connection,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
) -> Result<()> {
    create_topics(conn, &[topic.to_string()], partitions, replication_factor, 1)
}

/// Asks Metadata until every partition of `topic` has a leader (creation may lag).
pub fn wait_for_layout(conn: &mut Connection, topic: &str, partitions: i32) -> Result<TopicLayout> {
    let names = [topic.to_string()];
    let layout = wait_for_layouts(conn, &names, partitions, 1)?.pop().expect("one per name");
    // In a cluster the bootstrap node may know the topic before its leaders' nodes do
    // (each applies the metadata log on its own); ask each leader until it knows it too.
    for leader in layout.by_leader().keys() {
        wait_for_layouts(&mut Connection::connect(leader)?, &names, partitions, 1)?;
    }
    Ok(layout)
}

/// The topic's layout as Metadata reports it now, or `None` if some partition lacks a
/// known leader.
pub fn layout(conn: &mut Connection, topic: &str) -> Result<Option<TopicLayout>> {
    Ok(layouts_of(conn, &[topic.to_string()])?.pop().flatten())
}

/// Creates `names`, each with `partitions` of `replication_factor` replicas,
/// `per_request` topics per CreateTopics request (existing topics are fine), at the
/// controller Metadata names (a cluster's other nodes answer NOT_CONTROLLER, and then the
/// controller is asked for again, for up to `CONTROLLER_WAIT`).
pub fn create_topics(
    conn: &mut Connection,
    names: &[String],
    partitions: i32,
    replication_factor: i16,
    per_request: usize,
) -> Result<()> {
    let deadline = Instant::now() + CONTROLLER_WAIT;
    let mut controller = controller_connection(conn)?;
    for chunk in names.chunks(per_request.max(1)) {
        let topics: Vec<CreatableTopic> = chunk
            .iter()
            .map(|name| {
                CreatableTopic::default()
                    .with_name(topic_name(name))
                    .with_num_partitions(partitions)
                    .with_replication_factor(replication_factor)
            })
            .collect();
        let request = CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(60_000);
        loop {
            let target = controller.as_mut().unwrap_or(&mut *conn);
            let response = target.call(&request, target.version(ApiKey::CreateTopics)?)?;
            let failed = response
                .topics
                .iter()
                .find(|t| t.error_code != 0 && t.error_code != TOPIC_ALREADY_EXISTS);
            match failed {
                None => break,
                Some(t) if t.error_code == NOT_CONTROLLER && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                    controller = controller_connection(conn)?;
                }
                Some(t) => {
                    let message =
                        t.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
                    return Err(ClientError::Protocol(format!(
                        "CreateTopics {}: error {} {message}",
                        &*t.name.0, t.error_code
                    )));
                }
            }
        }
    }
    Ok(())
}

/// A connection to the controller Metadata names through `conn`, or `None` if it names
/// none (yet).
fn controller_connection(conn: &mut Connection) -> Result<Option<Connection>> {
    let request = MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false);
    let response = conn.call(&request, conn.version(ApiKey::Metadata)?)?;
    let controller = response.brokers.iter().find(|b| b.node_id == response.controller_id);
    controller.map(|b| Connection::connect(&format!("{}:{}", b.host, b.port))).transpose()
}

/// Waits until every partition of every topic in `names` has a leader, asking Metadata
/// for `per_request` topics at a time; the layouts come back in the order of `names`.
pub fn wait_for_layouts(
    conn: &mut Connection,
    names: &[String],
    partitions: i32,
    per_request: usize,
) -> Result<Vec<TopicLayout>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut layouts = Vec::with_capacity(names.len());
    for chunk in names.chunks(per_request.max(1)) {
        loop {
            let found = layouts_of(conn, chunk)?;
            if found
                .iter()
                .all(|l| l.as_ref().is_some_and(|l| l.leaders.len() == partitions as usize))
            {
                layouts.extend(found.into_iter().flatten());
                break;
            }
            if Instant::now() > deadline {
                return Err(ClientError::Protocol(format!(
                    "{} topics: not every partition has a leader after 120 s",
                    names.len()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(layouts)
}

/// The layout of each topic in `topics` (one Metadata request), `None` for a topic with
/// a partition that lacks a known leader.
pub fn layouts_of(conn: &mut Connection, topics: &[String]) -> Result<Vec<Option<TopicLayout>>> {
    let version = conn.version(ApiKey::Metadata)?;
    let request = MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect(),
        ))
        .with_allow_auto_topic_creation(false);
    let response = conn.call(&request, version)?;
    let brokers: BTreeMap<i32, String> =
        response.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
    let by_name: BTreeMap<&str, &MetadataResponseTopic> =
        response.topics.iter().filter_map(|t| Some((&*t.name.as_ref()?.0, t))).collect();
    Ok(topics
        .iter()
        .map(|name| by_name.get(name.as_str()).and_then(|t| topic_layout(name, t, &brokers)))
        .collect())
}

fn topic_layout(
    topic: &str,
    t: &MetadataResponseTopic,
    brokers: &BTreeMap<i32, String>,
) -> Option<TopicLayout> {
    if t.error_code != 0 || t.partitions.is_empty() {
        return None;
    }
    let mut leaders = vec![String::new(); t.partitions.len()];
    for p in &t.partitions {
        match (leaders.get_mut(p.partition_index as usize), brokers.get(&p.leader_id.0)) {
            (Some(slot), Some(addr)) if p.error_code == 0 => *slot = addr.clone(),
            _ => return None,
        }
    }
    Some(TopicLayout { topic: topic.to_string(), leaders })
}
