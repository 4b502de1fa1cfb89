//! Cluster view for the load generator: create a topic, then follow Metadata to each
//! partition's leader (on shardlog, the port of the shard that owns the partition).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::conn::{ClientError, Connection, Result};

/// Kafka's TOPIC_ALREADY_EXISTS.
const TOPIC_ALREADY_EXISTS: i16 = 36;

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

/// Creates `topic` with `partitions` (an existing topic is fine).
pub fn create_topic(conn: &mut Connection, topic: &str, partitions: i32) -> Result<()> {
    let version = conn.version(ApiKey::CreateTopics)?;
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
        .with_timeout_ms(60_000);
    let response = conn.call(&request, version)?;
    for t in response.topics {
        if t.error_code != 0 && t.error_code != TOPIC_ALREADY_EXISTS {
            let message = t.error_message.map(|m| m.to_string()).unwrap_or_default();
            return Err(ClientError::Protocol(format!(
                "CreateTopics {topic}: error {} {message}",
                t.error_code
            )));
        }
    }
    Ok(())
}

/// Asks Metadata until every partition of `topic` has a leader (creation may lag).
pub fn wait_for_layout(conn: &mut Connection, topic: &str, partitions: i32) -> Result<TopicLayout> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(layout) = layout(conn, topic)? {
            if layout.leaders.len() == partitions as usize {
                return Ok(layout);
            }
        }
        if Instant::now() > deadline {
            return Err(ClientError::Protocol(format!("{topic}: no leaders after 60 s")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The topic's layout as Metadata reports it now, or `None` if some partition lacks a
/// known leader.
pub fn layout(conn: &mut Connection, topic: &str) -> Result<Option<TopicLayout>> {
    let version = conn.version(ApiKey::Metadata)?;
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name(topic)))]))
        .with_allow_auto_topic_creation(false);
    let response = conn.call(&request, version)?;
    let brokers: BTreeMap<i32, String> =
        response.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port))).collect();
    let Some(t) = response.topics.iter().find(|t| t.name.as_ref().map(|n| &*n.0) == Some(topic))
    else {
        return Ok(None);
    };
    if t.error_code != 0 || t.partitions.is_empty() {
        return Ok(None);
    }
    let mut leaders = vec![String::new(); t.partitions.len()];
    for p in &t.partitions {
        let index = p.partition_index as usize;
        match (leaders.get_mut(index), brokers.get(&p.leader_id.0)) {
            (Some(slot), Some(addr)) if p.error_code == 0 => *slot = addr.clone(),
            _ => return Ok(None),
        }
    }
    Ok(Some(TopicLayout { topic: topic.to_string(), leaders }))
}
