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

use shardlog_storage::{
    Histogram, InternalStream, LogProbes, Offset, LATENCY_BOUNDS_US, STAGE_BOUNDS_US,
};

use crate::group::GroupSummary;
use crate::message::{PartitionData, ShardReply, ShardRequest};
use crate::metadata::TopicMeta;
use crate::replication::{HostStats, TransportStats};
use crate::runtime::Turns;
use crate::shard::Shard;
use tracing::info;

/// Request-latency histograms are kept for Kafka API keys below this (every key the
/// broker serves is; a larger one is simply not recorded).
pub const API_KEYS: usize = 64;

/// Kafka's api key of Produce (the stages of its requests make the latency budget).
const PRODUCE_API_KEY: i16 = 0;

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

/// Request latency per Kafka API, from the decoded request to the written response, and
/// split in its stages (see [`RequestStageHistograms`]).
pub struct RequestDurations {
    by_api_key: RefCell<[Histogram; API_KEYS]>,
    stages_by_api_key: RefCell<[RequestStageHistograms; API_KEYS]>,
}

/// The stages of a request, each its own histogram in microseconds (fine bounds):
/// decoded -> queued (phase one: Produce validated and appended), queued -> ready
/// (Produce: durable; Fetch: the long poll), ready -> written (the response on the socket).
#[derive(Clone, Copy, Debug)]
pub struct RequestStageHistograms {
    pub decoded_to_queued_us: Histogram,
    pub queued_to_ready_us: Histogram,
    pub ready_to_written_us: Histogram,
}

impl RequestStageHistograms {
    const EMPTY: RequestStageHistograms = RequestStageHistograms {
        decoded_to_queued_us: Histogram::new(STAGE_BOUNDS_US),
        queued_to_ready_us: Histogram::new(STAGE_BOUNDS_US),
        ready_to_written_us: Histogram::new(STAGE_BOUNDS_US),
    };
}

impl Default for RequestDurations {
    fn default() -> Self {
        RequestDurations {
            by_api_key: RefCell::new([Histogram::new(LATENCY_BOUNDS_US); API_KEYS]),
            stages_by_api_key: RefCell::new([RequestStageHistograms::EMPTY; API_KEYS]),
        }
    }
}

impl std::fmt::Debug for RequestDurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestDurations")
    }
}

impl RequestDurations {
    /// Records one request: `queued`, `ready` and `written` are measured from its decoding.
    pub fn record(&self, api_key: i16, queued: Duration, ready: Duration, written: Duration) {
        let us = |d: Duration| d.as_micros() as u64;
        if let Some(histogram) = self.by_api_key.borrow_mut().get_mut(api_key as usize) {
            histogram.record(us(written));
        }
        if let Some(stages) = self.stages_by_api_key.borrow_mut().get_mut(api_key as usize) {
            stages.decoded_to_queued_us.record(us(queued));
            stages.queued_to_ready_us.record(us(ready.saturating_sub(queued)));
            stages.ready_to_written_us.record(us(written.saturating_sub(ready)));
        }
    }

    /// The stage histograms of one API.
    pub fn stages(&self, api_key: i16) -> Option<RequestStageHistograms> {
        self.stages_by_api_key.borrow().get(api_key as usize).copied()
    }

    /// The histograms of APIs that saw at least one request.
    fn snapshot(&self) -> Vec<(i16, Histogram, RequestStageHistograms)> {
        let all = self.by_api_key.borrow();
        let stages = self.stages_by_api_key.borrow();
        let used = all.iter().zip(stages.iter()).enumerate().filter(|(_, (h, _))| h.count() > 0);
        used.map(|(key, (h, s))| (key as i16, *h, *s)).collect()
    }
}

/// Topics and partitions a metrics snapshot walks per turn of the executor.
const METRICS_PER_TURN: usize = 256;

/// What a snapshot covers. The per-shard figures are always there; the per-topic and
/// per-partition ones, and the coordinators' offsets, cost the shard time linear in what
/// they list (and nothing else runs on the shard meanwhile: ~0.15 s at 100,000 partitions
/// a shard), so a caller that shows a few topics asks for those only.
#[derive(Clone, Debug)]
pub struct MetricsScope {
    /// The topics whose topic and partition figures to include; `None`: every topic.
    pub topics: Option<Vec<String>>,
    /// Include the groups this shard coordinates and their committed offsets.
    pub groups: bool,
}

impl MetricsScope {
    /// Everything (`/metrics`).
    pub fn all() -> MetricsScope {
        MetricsScope { topics: None, groups: true }
    }

    /// The per-shard figures only (the console's overview).
    pub fn shards() -> MetricsScope {
        MetricsScope { topics: Some(Vec::new()), groups: false }
    }

    /// The per-shard figures and those of `topics` (a page of topics, one topic).
    pub fn topics(topics: Vec<String>) -> MetricsScope {
        MetricsScope { topics: Some(topics), groups: false }
    }
}

/// One shard's counters and state at the moment of a scrape: every field but `topics`,
/// `partitions`, `committed` and `groups` whatever the scope, those four as the
/// `MetricsScope` asked.
#[derive(Clone, Debug)]
pub struct ShardMetrics {
    pub shard: usize,
    pub forwarded_requests: u64,
    pub connections: u64,
    pub connections_accepted: u64,
    pub tls_handshakes: u64,
    pub tls_handshake_errors: u64,
    pub tls_handshake_timeouts: u64,
    pub tls_handshakes_refused: u64,
    pub sasl_authentications: u64,
    pub sasl_authentication_failures: u64,
    pub requests_with_trailing_bytes: u64,
    pub idempotent_producers: u64,
    pub request_durations_us: Vec<(i16, Histogram, RequestStageHistograms)>,
    /// From a flush's completion to a Fetch parked on it running again.
    pub fetch_wake_us: Histogram,
    pub log: LogProbes,
    pub log_segments: u64,
    /// Each segment file's size (`segment_size_bytes`): segments × this is the log's disk use.
    pub log_segment_size_bytes: u64,
    /// Why the log stopped (a failed write or fdatasync), if it did.
    pub log_stopped: Option<String>,
    /// Partitions the shard owns.
    pub partition_count: u64,
    /// Bytes produced to and fetched from the shard's partitions since start-up, every
    /// topic's (deleted ones' too).
    pub produce_bytes: u64,
    pub fetch_bytes: u64,
    pub topics: Vec<TopicMetrics>,
    pub partitions: Vec<PartitionMetrics>,
    pub committed: Vec<CommittedOffset>,
    /// The groups this shard coordinates (for the console's group list).
    pub groups: Vec<GroupBrief>,
    /// The shard's replication host and transport, when the node has peers.
    pub replication: Option<ReplicationMetrics>,
}

/// One shard's replication host and transport at a scrape.
#[derive(Clone, Copy, Debug)]
pub struct ReplicationMetrics {
    /// Peer nodes listed (every node of `--peers` but this one).
    pub peers: u64,
    /// Peers with a working outbound connection (hand-shake passed, no failure since).
    pub connected_peers: u64,
    /// Inbound connections from peers whose hand-shake passed, still open.
    pub inbound_connections: u64,
    /// Raft groups the shard hosts.
    pub groups: u64,
    pub stats: TransportStats,
    pub host: HostStats,
    /// Entries the hosted groups' logs hold in memory (after their compaction points).
    pub log_entries: u64,
    /// Bytes of those entries' data.
    pub log_entry_bytes: u64,
    /// Bytes of the shard log's `Raft` stream held in memory (and in the next checkpoint).
    pub stream_held_bytes: u64,
    pub compaction: crate::partition_group::CompactionStats,
    /// Partitions this shard leads whose ISR is smaller than their replica set (Kafka's
    /// UnderReplicatedPartitions).
    pub under_replicated_partitions: u64,
    /// Lost logs the shard's groups saw (`GroupHost::lost_logs_seen`).
    pub lost_logs_seen: u64,
    /// Partition snapshots sent and installed (`crate::partition_snapshots`).
    pub partition_snapshots: crate::partition_snapshots::PartitionSnapshotStats,
    /// acks=1 answered on the leader's fdatasync (`crate::leader_acks`).
    pub leader_acks: crate::leader_acks::LeaderAckStats,
}

/// A group as the console's group list shows it.
#[derive(Clone, Debug)]
pub struct GroupBrief {
    pub group: String,
    /// Kafka's name of the state (`Empty`, `Stable`, ...).
    pub state: &'static str,
    pub members: usize,
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
    pub log_start_offset: Offset,
    pub high_watermark: Offset,
    /// Next offset to assign (at or past the high watermark while a flush is pending).
    pub log_end_offset: Offset,
    /// Bytes of the partition's batches in the shard log.
    pub size_bytes: u64,
}

/// A committed offset held by this shard as a group coordinator.
#[derive(Clone, Debug)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: Offset,
}

/// A group's committed offset of a partition, joined with that partition's high watermark.
#[derive(Clone, Debug)]
pub struct GroupLag<'a> {
    pub committed: &'a CommittedOffset,
    /// `None` when the topic is gone.
    pub high_watermark: Option<Offset>,
}

impl GroupLag<'_> {
    /// High watermark - committed offset; never negative (a commit past the watermark reads
    /// as 0).
    pub fn lag(&self) -> Option<i64> {
        self.high_watermark.map(|hw| (hw - self.committed.offset).max(0))
    }
}

/// Every committed offset in `coordinators`' snapshots joined with its partition's high
/// watermark from `owners`' (the same snapshots when they hold both), in the shards' order.
pub fn consumer_lags<'a>(
    coordinators: &'a [ShardMetrics],
    owners: &[ShardMetrics],
) -> Vec<GroupLag<'a>> {
    let high_watermarks: HashMap<(&str, i32), Offset> = owners
        .iter()
        .flat_map(|s| &s.partitions)
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let committed = coordinators.iter().flat_map(|s| &s.committed);
    committed
        .map(|c| GroupLag {
            committed: c,
            high_watermark: high_watermarks.get(&(c.topic.as_str(), c.partition)).copied(),
        })
        .collect()
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

    /// One log line with the latency budget of a durable produce, if the log flushed since
    /// `last_flushes` (which is updated): the median of each stage since start-up, as the
    /// upper bound of its histogram bucket (`None`: no sample yet).
    pub fn log_latency_budget(&self, last_flushes: &mut u64) {
        let log = self.log.probes();
        if log.flushes == *last_flushes {
            return;
        }
        *last_flushes = log.flushes;
        let produce = self.probes.request_durations.stages(PRODUCE_API_KEY);
        let p50 = |h: Option<&Histogram>| h.and_then(|h| h.quantile_bound(0.5));
        info!(
            shard = self.id,
            produce_queued_p50_us = ?p50(produce.as_ref().map(|s| &s.decoded_to_queued_us)),
            flush_gather_p50_us = ?p50(Some(&log.flush_gather_us)),
            flush_write_p50_us = ?p50(Some(&log.flush_write_duration_us)),
            flush_fdatasync_p50_us = ?p50(Some(&log.flush_fdatasync_us)),
            produce_durable_p50_us = ?p50(produce.as_ref().map(|s| &s.queued_to_ready_us)),
            produce_written_p50_us = ?p50(produce.as_ref().map(|s| &s.ready_to_written_us)),
            fetch_wake_p50_us = ?p50(Some(&self.probes.fetch_wake_us.borrow())),
            "latency budget (medians since start-up, as bucket upper bounds)"
        );
    }

    /// This shard's snapshot of what `scope` asks (answers `ShardRequest::Metrics`). The
    /// topics and partitions are walked in turns (`METRICS_PER_TURN`), so a snapshot of
    /// every one of 100,000 partitions does not hold the shard's requests for all of it;
    /// the snapshot is then not of one instant (counters move between turns).
    pub async fn metrics_snapshot(&self, scope: &MetricsScope) -> ShardMetrics {
        let probes = &self.probes;
        let (topics, partitions) = self.topic_and_partition_metrics(scope.topics.as_deref()).await;
        let traffic = probes.topics.borrow();
        let produce_bytes = traffic.values().map(|c| c.produce_bytes).sum();
        let fetch_bytes = traffic.values().map(|c| c.fetch_bytes).sum();
        let (committed, groups) = match scope.groups {
            true => (self.committed_offsets(), self.group_briefs()),
            false => (Vec::new(), Vec::new()),
        };
        ShardMetrics {
            shard: self.id,
            forwarded_requests: probes.forwarded_requests.get(),
            connections: probes.connections.get(),
            connections_accepted: probes.connections_accepted.get(),
            tls_handshakes: probes.tls_handshakes.get(),
            tls_handshake_errors: probes.tls_handshake_errors.get(),
            tls_handshake_timeouts: probes.tls_handshake_timeouts.get(),
            tls_handshakes_refused: probes.tls_handshakes_refused.get(),
            sasl_authentications: probes.sasl_authentications.get(),
            sasl_authentication_failures: probes.sasl_authentication_failures.get(),
            requests_with_trailing_bytes: probes.requests_with_trailing_bytes.get(),
            idempotent_producers: self.producers.borrow().len() as u64,
            request_durations_us: probes.request_durations.snapshot(),
            fetch_wake_us: *probes.fetch_wake_us.borrow(),
            log: self.log.probes(),
            log_segments: self.log.segments().len() as u64,
            log_segment_size_bytes: self.log.segment_size_bytes(),
            log_stopped: self.log.stopped_reason(),
            partition_count: self.log.partition_count() as u64,
            produce_bytes,
            fetch_bytes,
            topics,
            partitions,
            committed,
            groups,
            replication: self.replication().map(|host| {
                let transport = host.transport();
                let (log_entries, log_entry_bytes) = host.with_logs(|logs| {
                    let entries = logs.iter().map(|(_, log)| log.entries.len() as u64).sum();
                    (entries, logs.iter().map(|(_, log)| log.entry_bytes()).sum())
                });
                let groups = self.partition_groups();
                ReplicationMetrics {
                    log_entries,
                    log_entry_bytes,
                    stream_held_bytes: self.log.internal_stream_held_bytes(InternalStream::Raft),
                    compaction: groups.as_ref().map(|g| g.compaction_stats()).unwrap_or_default(),
                    under_replicated_partitions: self.under_replicated_partitions(),
                    lost_logs_seen: host.lost_logs_seen(),
                    leader_acks: groups.as_ref().map(|g| g.leader_ack_stats()).unwrap_or_default(),
                    partition_snapshots: groups
                        .map(|g| g.partition_snapshot_stats())
                        .unwrap_or_default(),
                    peers: transport.peer_count() as u64,
                    connected_peers: transport.connected_peers() as u64,
                    inbound_connections: transport.inbound_connections() as u64,
                    groups: host.group_count() as u64,
                    stats: transport.stats(),
                    host: host.stats(),
                }
            }),
        }
    }

    /// The groups this shard coordinates, in brief.
    fn group_briefs(&self) -> Vec<GroupBrief> {
        let groups = self.groups.list().into_iter();
        let brief = |g: GroupSummary| GroupBrief {
            group: g.group_id,
            state: g.state.name(),
            members: g.members.len(),
        };
        groups.map(brief).collect()
    }

    /// Per-topic counters and sizes, and the offsets and size of every local partition,
    /// of `only` those topics or of every topic in this shard's table as it was when the
    /// walk began (counters of deleted topics are left out), giving way to the shard's
    /// other tasks every `METRICS_PER_TURN` topics and partitions.
    async fn topic_and_partition_metrics(
        &self,
        only: Option<&[String]>,
    ) -> (Vec<TopicMetrics>, Vec<PartitionMetrics>) {
        let table = self.table();
        let mut turns = Turns::new(METRICS_PER_TURN);
        let mut topics = Vec::new();
        let mut partitions = Vec::new();
        let metas: Vec<&TopicMeta> = match only {
            None => table.topics.values().map(|t| &**t).collect(),
            Some(names) => names.iter().filter_map(|name| table.topic(name)).collect(),
        };
        for meta in metas {
            turns.step().await;
            let counters = self.probes.topics.borrow().get(&meta.topic_number).copied();
            let mut topic = TopicMetrics {
                topic: meta.name.clone(),
                counters: counters.unwrap_or_default(),
                partitions: 0,
                size_bytes: 0,
            };
            for index in 0..meta.partition_shards.len() as i32 {
                turns.step().await;
                if meta.owner(index) != Some(self.id) {
                    continue;
                }
                let Some(id) = meta.partition_id(index) else { continue };
                let Some(info) = self.log.partition_info(id) else { continue };
                topic.partitions += 1;
                topic.size_bytes += info.size_bytes;
                partitions.push(PartitionMetrics {
                    topic: meta.name.clone(),
                    partition: index,
                    log_start_offset: info.log_start_offset,
                    high_watermark: info.high_watermark,
                    log_end_offset: info.log_end_offset,
                    size_bytes: info.size_bytes,
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
        scope: MetricsScope,
        timeout: Duration,
    ) -> Result<Vec<ShardMetrics>, Vec<Unhealthy>> {
        let ask = || ShardRequest::Metrics(scope.clone());
        let replies = self.ask_every_shard(ask, timeout).await;
        let mut snapshots = Vec::with_capacity(self.nr_shards);
        let mut missing = Vec::new();
        for (shard, reply) in replies {
            match reply {
                None if shard == self.id => snapshots.push(self.metrics_snapshot(&scope).await),
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
