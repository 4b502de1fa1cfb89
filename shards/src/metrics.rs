//! Metrics and health across shards: each shard's counters are plain cells on its own
//! core; shard 0 (which serves the admin endpoint) asks every shard for a snapshot over
//! the mesh per scrape, and a health check asks every shard to answer within a bound.
//!
//! Hot path: `count_produce` and `count_fetches` run per partition of a produce or fetch
//! on its owner: one hash-map lookup by topic number and a few adds;
//! `RequestDurations::record` runs once per request (a histogram record). Everything
//! else runs per scrape.
//!
//! Invariants:
//! 1. Counters only grow (gauges excepted); a snapshot is a copy, never a reference.
//! 2. A shard that does not answer within the bound is reported by id, never waited for
//!    forever.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use shardlog_storage::{Histogram, LogProbes, Offset, LATENCY_BOUNDS_US};

use crate::message::{PartitionData, ShardReply, ShardRequest};
use crate::shard::Shard;

/// Request-latency histograms are kept for Kafka API keys below this (every key the
/// broker serves is; a larger one is simply not recorded).
pub const API_KEYS: usize = 64;

/// Per-topic traffic counted on the partition owner (one entry per topic number).
#[derive(Clone, Copy, Debug, Default)]
pub struct TopicCounters {
    /// Partitions produced to (one per partition per Produce request, forwarded or not).
    pub produce_requests: u64,
    pub produce_batches: u64,
    pub produce_bytes: u64,
    /// Partitions read by Fetch requests that returned (one per partition per request).
    pub fetch_requests: u64,
    pub fetch_bytes: u64,
}

/// Request latency per Kafka API, from the decoded request to the written response.
pub struct RequestDurations {
    by_api_key: RefCell<[Histogram; API_KEYS]>,
}

impl Default for RequestDurations {
    fn default() -> Self {
        RequestDurations { by_api_key: RefCell::new([Histogram::new(LATENCY_BOUNDS_US); API_KEYS]) }
    }
}

impl std::fmt::Debug for RequestDurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestDurations")
    }
}

impl RequestDurations {
    pub fn record(&self, api_key: i16, elapsed: Duration) {
        if let Some(histogram) = self.by_api_key.borrow_mut().get_mut(api_key as usize) {
            histogram.record(elapsed.as_micros() as u64);
        }
    }

    /// The histograms of APIs that saw at least one request.
    fn snapshot(&self) -> Vec<(i16, Histogram)> {
        let all = self.by_api_key.borrow();
        let used = all.iter().enumerate().filter(|(_, h)| h.count() > 0);
        used.map(|(key, h)| (key as i16, *h)).collect()
    }
}

/// One shard's counters and state at the moment of a scrape.
#[derive(Clone, Debug)]
pub struct ShardMetrics {
    pub shard: usize,
    pub forwarded_requests: u64,
    pub connections: u64,
    pub connections_accepted: u64,
    pub requests_with_trailing_bytes: u64,
    pub idempotent_producers: u64,
    pub request_durations_us: Vec<(i16, Histogram)>,
    pub log: LogProbes,
    pub log_segments: u64,
    /// Why the log stopped (a failed write or fdatasync), if it did.
    pub log_stopped: Option<String>,
    pub topics: Vec<TopicMetrics>,
    pub partitions: Vec<PartitionMetrics>,
    pub committed: Vec<CommittedOffset>,
}

/// A topic's traffic and size on one shard.
#[derive(Clone, Debug)]
pub struct TopicMetrics {
    pub topic: String,
    pub counters: TopicCounters,
    pub partitions: u64,
    pub size_bytes: u64,
}

/// A partition this shard owns.
#[derive(Clone, Debug)]
pub struct PartitionMetrics {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: Offset,
}

/// A committed offset held by this shard as a group coordinator.
#[derive(Clone, Debug)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: Offset,
}

/// A shard that failed a health check, and why.
#[derive(Clone, Debug)]
pub struct Unhealthy {
    pub shard: usize,
    pub reason: String,
}

impl Shard {
    /// Counts a produce to a partition of `topic_number` (on the owner, once queued).
    pub(crate) fn count_produce(&self, topic_number: u32, batches: usize, bytes: usize) {
        let mut topics = self.probes.topics.borrow_mut();
        let counters = topics.entry(topic_number).or_default();
        counters.produce_requests += 1;
        counters.produce_batches += batches as u64;
        counters.produce_bytes += bytes as u64;
    }

    /// Counts the partition reads of a fetch that returned (on the owner).
    pub(crate) fn count_fetches(&self, results: &[PartitionData]) {
        let table = self.table();
        let mut topics = self.probes.topics.borrow_mut();
        for data in results {
            let (Ok(fetched), Some(meta)) = (&data.result, table.topic(&data.topic)) else {
                continue;
            };
            let counters = topics.entry(meta.topic_number).or_default();
            counters.fetch_requests += 1;
            counters.fetch_bytes += fetched.records.len() as u64;
        }
    }

    /// This shard's snapshot (answers `ShardRequest::Metrics`).
    pub fn metrics_snapshot(&self) -> ShardMetrics {
        let probes = &self.probes;
        let (topics, partitions) = self.topic_and_partition_metrics();
        ShardMetrics {
            shard: self.id,
            forwarded_requests: probes.forwarded_requests.get(),
            connections: probes.connections.get(),
            connections_accepted: probes.connections_accepted.get(),
            requests_with_trailing_bytes: probes.requests_with_trailing_bytes.get(),
            idempotent_producers: self.producers.borrow().len() as u64,
            request_durations_us: probes.request_durations.snapshot(),
            log: self.log.probes(),
            log_segments: self.log.segments().len() as u64,
            log_stopped: self.log.stopped_reason(),
            topics,
            partitions,
            committed: self.committed_offsets(),
        }
    }

    /// Per-topic counters and sizes, and the high watermark of every local partition,
    /// for the topics in this shard's table (counters of deleted topics are left out).
    fn topic_and_partition_metrics(&self) -> (Vec<TopicMetrics>, Vec<PartitionMetrics>) {
        let table = self.table();
        let counters = self.probes.topics.borrow();
        let mut topics = Vec::new();
        let mut partitions = Vec::new();
        for meta in table.topics.values() {
            let mut topic = TopicMetrics {
                topic: meta.name.clone(),
                counters: counters.get(&meta.topic_number).copied().unwrap_or_default(),
                partitions: 0,
                size_bytes: 0,
            };
            for index in 0..meta.partition_shards.len() as i32 {
                let Some(id) = self.local_partition(&meta.name, index) else { continue };
                let Some(info) = self.log.partition_info(id) else { continue };
                topic.partitions += 1;
                topic.size_bytes += info.size_bytes;
                partitions.push(PartitionMetrics {
                    topic: meta.name.clone(),
                    partition: index,
                    high_watermark: info.high_watermark,
                });
            }
            if topic.partitions > 0 {
                topics.push(topic);
            }
        }
        (topics, partitions)
    }

    fn committed_offsets(&self) -> Vec<CommittedOffset> {
        let all = self.groups.all_committed();
        let offsets = all.into_iter().map(|(group, (topic, partition), offset)| CommittedOffset {
            group,
            topic,
            partition,
            offset,
        });
        offsets.collect()
    }

    /// Every shard's snapshot, in shard order (shard 0 asks; see invariant 2). Errors
    /// name the shards that did not answer within `timeout`.
    pub async fn gather_metrics(
        self: &Rc<Self>,
        timeout: Duration,
    ) -> Result<Vec<ShardMetrics>, Vec<Unhealthy>> {
        let replies = self.ask_every_shard(|| ShardRequest::Metrics, timeout).await;
        let mut snapshots = Vec::with_capacity(self.nr_shards);
        let mut missing = Vec::new();
        for (shard, reply) in replies {
            match reply {
                None if shard == self.id => snapshots.push(self.metrics_snapshot()),
                Some(ShardReply::Metrics(snapshot)) => snapshots.push(*snapshot),
                None => missing.push(Unhealthy { shard, reason: no_answer(timeout) }),
                Some(other) => panic!("metrics answered with {other:?}"),
            }
        }
        if missing.is_empty() {
            Ok(snapshots)
        } else {
            Err(missing)
        }
    }

    /// The shards that are not healthy: did not answer a ping within `timeout`, or whose
    /// log is stopped. Empty when all are well.
    pub async fn check_health(self: &Rc<Self>, timeout: Duration) -> Vec<Unhealthy> {
        let replies = self.ask_every_shard(|| ShardRequest::Health, timeout).await;
        let mut unhealthy = Vec::new();
        for (shard, reply) in replies {
            let stopped = match reply {
                None if shard == self.id => self.log.stopped_reason(),
                Some(ShardReply::Health(stopped)) => stopped,
                None => Some(no_answer(timeout)),
                Some(other) => panic!("health answered with {other:?}"),
            };
            if let Some(reason) = stopped {
                unhealthy.push(Unhealthy { shard, reason });
            }
        }
        unhealthy
    }

    /// Sends `request()` to every other shard and waits for the replies until `timeout`
    /// has passed. Returns one entry per shard in order: `None` for this shard (the
    /// caller answers locally) and for shards that did not answer in time.
    async fn ask_every_shard(
        &self,
        request: impl Fn() -> ShardRequest,
        timeout: Duration,
    ) -> Vec<(usize, Option<ShardReply>)> {
        let deadline = Instant::now() + timeout;
        let mut pending = Vec::with_capacity(self.nr_shards);
        for shard in 0..self.nr_shards {
            let sent = if shard == self.id {
                None
            } else {
                within(deadline, self.mesh.send(shard, request())).await
            };
            pending.push((shard, sent));
        }
        let mut replies = Vec::with_capacity(self.nr_shards);
        for (shard, sent) in pending {
            let reply = match sent {
                Some(pending) => within(deadline, pending.wait()).await,
                None => None,
            };
            replies.push((shard, reply));
        }
        replies
    }
}

/// `future`'s output, or `None` if `deadline` passes first.
pub async fn within<T>(
    deadline: Instant,
    future: impl std::future::Future<Output = T>,
) -> Option<T> {
    let left = deadline.saturating_duration_since(Instant::now());
    let timer = async {
        glommio::timer::sleep(left).await;
        None
    };
    futures_lite::future::or(async { Some(future.await) }, timer).await
}

fn no_answer(timeout: Duration) -> String {
    format!("did not answer within {} ms", timeout.as_millis())
}

/// Topic counters of one shard, keyed by topic number (shard-local, see invariant 1).
pub type TopicCounterMap = RefCell<HashMap<u32, TopicCounters>>;
