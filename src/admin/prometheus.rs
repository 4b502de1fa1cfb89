//! Renders every shard's snapshot as Prometheus text exposition format 0.0.4: one
//! `# HELP` and `# TYPE` per family, then its samples for every shard. docs/metrics.md
//! lists each family (tests/metrics.rs fails if one rendered here is missing there).
//!
//! Runs on shard 0 per scrape (not a hot path). Units: durations in seconds (probes
//! keep microseconds), sizes in bytes.

use std::fmt::{Display, Write};

use kafka_protocol::messages::ApiKey;
use shardlog_shards::metrics::{consumer_lags, ReplicationMetrics, ShardMetrics, TopicCounters};
use shardlog_storage::Histogram;

const MICROS_PER_SECOND: f64 = 1e6;

/// One per-topic counter, read from a topic's counters.
type TopicValue = fn(&TopicCounters) -> u64;
/// One of the log's histograms, read from a shard's snapshot.
type LogHistogram = fn(&ShardMetrics) -> &Histogram;
/// Reads one per-shard counter out of a shard's snapshot.
type ShardValue = fn(&ShardMetrics) -> u64;
/// Reads one figure out of a shard's replication snapshot.
type ReplicationValue = fn(&ReplicationMetrics) -> u64;

/// The text of one scrape.
pub fn render(shards: &[ShardMetrics]) -> String {
    let mut text = Text::default();
    render_traffic(&mut text, shards);
    render_requests(&mut text, shards);
    render_log(&mut text, shards);
    render_flushes(&mut text, shards);
    render_consumer_lag(&mut text, shards);
    render_replication(&mut text, shards);
    text.out
}

fn render_traffic(text: &mut Text, shards: &[ShardMetrics]) {
    // Requests count partitions: one per partition per request, on the owner shard.
    let per_topic: [(&str, &str, TopicValue); 5] = [
        ("shardlog_produce_requests_total", "Partitions produced to.", |c| c.produce_requests),
        ("shardlog_produce_batches_total", "Record batches appended.", |c| c.produce_batches),
        ("shardlog_produce_bytes_total", "Record batch bytes appended.", |c| c.produce_bytes),
        ("shardlog_fetch_requests_total", "Partitions read by Fetch.", |c| c.fetch_requests),
        ("shardlog_fetch_bytes_total", "Record batch bytes returned by Fetch.", |c| c.fetch_bytes),
    ];
    for (name, help, value) in per_topic {
        text.family(name, "counter", help);
        for s in shards {
            for t in &s.topics {
                text.sample(name, &[("shard", &s.shard), ("topic", &t.topic)], value(&t.counters));
            }
        }
    }
    let forwarded = "Requests (or parts) for partitions of another shard, forwarded over the mesh.";
    text.per_shard("shardlog_forwarded_requests_total", "counter", forwarded, shards, |s| {
        s.forwarded_requests
    });
    let connections = "Kafka connections open.";
    text.per_shard("shardlog_connections", "gauge", connections, shards, |s| s.connections);
    let accepted = "Kafka connections accepted.";
    text.per_shard("shardlog_connections_accepted_total", "counter", accepted, shards, |s| {
        s.connections_accepted
    });
    render_tls(text, shards);
    let trailing = "Requests served although bytes followed their body (Kafka ignores them).";
    let name = "shardlog_requests_with_trailing_bytes_total";
    text.per_shard(name, "counter", trailing, shards, |s| s.requests_with_trailing_bytes);
    let producers = "Idempotent producers with state on the shard's partitions.";
    text.per_shard("shardlog_idempotent_producers", "gauge", producers, shards, |s| {
        s.idempotent_producers
    });
}

fn render_tls(text: &mut Text, shards: &[ShardMetrics]) {
    let counters: [(&str, &str, ShardValue); 6] = [
        ("shardlog_tls_handshakes_total", "TLS handshakes completed.", |s| s.tls_handshakes),
        (
            "shardlog_tls_handshake_errors_total",
            "TLS connections closed after a failed handshake (not TLS, a bad certificate).",
            |s| s.tls_handshake_errors,
        ),
        (
            "shardlog_tls_handshake_timeouts_total",
            "TLS connections closed because the handshake did not finish in time.",
            |s| s.tls_handshake_timeouts,
        ),
        (
            "shardlog_tls_handshakes_refused_total",
            "TLS connections closed at once: the shard ran its most handshakes.",
            |s| s.tls_handshakes_refused,
        ),
        (
            "shardlog_sasl_authentications_total",
            "SASL logins that completed on SASL listeners.",
            |s| s.sasl_authentications,
        ),
        (
            "shardlog_sasl_authentication_failures_total",
            "SASL logins refused: wrong password, unknown user, malformed exchange.",
            |s| s.sasl_authentication_failures,
        ),
    ];
    for (name, help, value) in counters {
        text.per_shard(name, "counter", help, shards, value);
    }
}

fn render_requests(text: &mut Text, shards: &[ShardMetrics]) {
    let name = "shardlog_request_duration_seconds";
    let help = "Kafka request latency per API, from decoded request to written response.";
    text.family(name, "histogram", help);
    for s in shards {
        for (api_key, histogram, _) in &s.request_durations_us {
            let api = api_name(*api_key);
            let labels: [(&str, &dyn Display); 2] = [("shard", &s.shard), ("api", &api)];
            text.histogram(name, &labels, histogram, MICROS_PER_SECOND);
        }
    }
    let name = "shardlog_request_stage_seconds";
    let help = "A request's latency split in stages: decoded_to_queued (phase one; Produce: \
                validated and appended), queued_to_ready (Produce: until durable; Fetch: the \
                long poll), ready_to_written (the response written).";
    text.family(name, "histogram", help);
    for s in shards {
        for (api_key, _, stages) in &s.request_durations_us {
            let api = api_name(*api_key);
            let split = [
                ("decoded_to_queued", &stages.decoded_to_queued_us),
                ("queued_to_ready", &stages.queued_to_ready_us),
                ("ready_to_written", &stages.ready_to_written_us),
            ];
            for (stage, histogram) in split {
                let labels: [(&str, &dyn Display); 3] =
                    [("shard", &s.shard), ("api", &api), ("stage", &stage)];
                text.histogram(name, &labels, histogram, MICROS_PER_SECOND);
            }
        }
    }
}

fn api_name(api_key: i16) -> String {
    ApiKey::try_from(api_key).map_or_else(|_| format!("ApiKey{api_key}"), |k| format!("{k:?}"))
}

/// A per-shard counter: its value in a shard's snapshot.
type Counter = fn(&ShardMetrics) -> u64;

fn render_log(text: &mut Text, shards: &[ShardMetrics]) {
    let partitions = "Partitions owned by the shard.";
    text.per_shard("shardlog_partitions", "gauge", partitions, shards, |s| {
        s.partitions.len() as u64
    });
    let name = "shardlog_log_size_bytes";
    text.family(name, "gauge", "Bytes of record batches kept, per topic, on the owner shard.");
    for s in shards {
        for t in &s.topics {
            text.sample(name, &[("shard", &s.shard), ("topic", &t.topic)], t.size_bytes);
        }
    }
    let segments = "Segment files the shard's log holds.";
    text.per_shard("shardlog_log_segments", "gauge", segments, shards, |s| s.log_segments);
    let stopped = "1 if the shard's log stopped after a failed write or fdatasync, else 0.";
    text.per_shard("shardlog_log_stopped", "gauge", stopped, shards, |s| {
        s.log_stopped.is_some() as u64
    });
    let deleted = "Segment files deleted after retention freed them.";
    text.per_shard("shardlog_retention_deleted_segments_total", "counter", deleted, shards, |s| {
        s.log.retention_deleted_segments
    });
    let deleted_bytes = "Bytes of segment files deleted after retention freed them.";
    text.per_shard(
        "shardlog_retention_deleted_bytes_total",
        "counter",
        deleted_bytes,
        shards,
        |s| s.log.retention_deleted_bytes,
    );
    let cleaner: [(&str, &str, Counter); 5] = [
        ("shardlog_cleaner_passes_total", "Log cleaner passes run (compacted partitions).", |s| {
            s.log.cleaner_passes
        }),
        ("shardlog_cleaner_read_bytes_total", "Batch bytes log cleaner passes read.", |s| {
            s.log.cleaner_read_bytes
        }),
        (
            "shardlog_cleaner_written_bytes_total",
            "Bytes of Replace entries the log cleaner wrote.",
            |s| s.log.cleaner_written_bytes,
        ),
        ("shardlog_cleaner_removed_records_total", "Records the log cleaner removed.", |s| {
            s.log.cleaner_removed_records
        }),
        ("shardlog_cleaner_removed_tombstones_total", "Tombstones the log cleaner removed.", |s| {
            s.log.cleaner_removed_tombstones
        }),
    ];
    for (name, help, value) in cleaner {
        text.per_shard(name, "counter", help, shards, value);
    }
    let zeros = "Bytes of prepared segments zero-filled while the log was idle.";
    text.per_shard("shardlog_zero_filled_bytes_total", "counter", zeros, shards, |s| {
        s.log.zero_filled_bytes
    });
}

fn render_flushes(text: &mut Text, shards: &[ShardMetrics]) {
    let histograms: [(&str, &str, f64, LogHistogram); 3] = [
        (
            "shardlog_fsync_duration_seconds",
            "Time in the fdatasync(s) of one flush (group commit).",
            MICROS_PER_SECOND,
            |s| &s.log.fsync_duration_us,
        ),
        (
            "shardlog_fsync_bytes",
            "Bytes written by one flush (group-commit batch size, page-padded).",
            1.0,
            |s| &s.log.fsync_bytes,
        ),
        ("shardlog_appends_per_fsync", "Log entries made durable by one flush.", 1.0, |s| {
            &s.log.appends_per_fsync
        }),
    ];
    let name = "shardlog_flush_stage_seconds";
    let help = "A flush's latency split in stages: gather (first append carried to DMA write \
                submitted), write (the DMA write), fdatasync.";
    text.family(name, "histogram", help);
    for s in shards {
        let split = [
            ("gather", &s.log.flush_gather_us),
            ("write", &s.log.flush_write_duration_us),
            ("fdatasync", &s.log.flush_fdatasync_us),
        ];
        for (stage, histogram) in split {
            let labels: [(&str, &dyn Display); 2] = [("shard", &s.shard), ("stage", &stage)];
            text.histogram(name, &labels, histogram, MICROS_PER_SECOND);
        }
    }
    let name = "shardlog_fetch_wake_seconds";
    let help = "From a flush's completion to a Fetch parked on it running again.";
    text.family(name, "histogram", help);
    for s in shards {
        text.histogram(name, &[("shard", &s.shard)], &s.fetch_wake_us, MICROS_PER_SECOND);
    }
    for (name, help, scale, histogram) in histograms {
        text.family(name, "histogram", help);
        for s in shards {
            text.histogram(name, &[("shard", &s.shard)], histogram(s), scale);
        }
    }
    let name = "shardlog_flush_write_seconds_total";
    text.family(name, "counter", "Time in the DMA writes of flushes.");
    for s in shards {
        let seconds = s.log.flush_write_us as f64 / MICROS_PER_SECOND;
        text.sample(name, &[("shard", &s.shard)], seconds);
    }
    let name = "shardlog_blocking_flushes_total";
    let help = "Flushes written and fdatasync'd with blocking syscalls on the shard's thread.";
    text.family(name, "counter", help);
    for s in shards {
        text.sample(name, &[("shard", &s.shard)], s.log.blocking_flushes);
    }
    let name = "shardlog_segment_wait_seconds_total";
    text.family(name, "counter", "Time flushes waited for their next segment to be prepared.");
    for s in shards {
        let seconds = s.log.segment_wait_us as f64 / MICROS_PER_SECOND;
        text.sample(name, &[("shard", &s.shard)], seconds);
    }
}

/// Lag = high watermark (on the partition's owner) - committed offset (on the group's
/// coordinator), joined by `consumer_lags`; a partition whose topic is gone is left out.
fn render_consumer_lag(text: &mut Text, shards: &[ShardMetrics]) {
    let name = "shardlog_consumer_group_lag";
    let help = "Records between a group's committed offset and the partition's high watermark.";
    text.family(name, "gauge", help);
    for joined in consumer_lags(shards, shards) {
        let Some(lag) = joined.lag() else { continue };
        let c = joined.committed;
        let labels: [(&str, &dyn Display); 3] =
            [("group", &c.group), ("topic", &c.topic), ("partition", &c.partition)];
        text.sample(name, &labels, lag);
    }
}

/// The replication transport's figures, per shard; nothing on a single node (no transport).
fn render_replication(text: &mut Text, shards: &[ShardMetrics]) {
    let replicating: Vec<(usize, &ReplicationMetrics)> =
        shards.iter().filter_map(|s| Some((s.shard, s.replication.as_ref()?))).collect();
    if replicating.is_empty() {
        return;
    }
    let figures: [(&str, &str, &str, ReplicationValue); 34] = [
        ("shardlog_replication_peers", "gauge", "Peer nodes this shard replicates with.", |r| {
            r.peers
        }),
        ("shardlog_replication_groups", "gauge", "Raft groups this shard hosts.", |r| r.groups),
        (
            "shardlog_replication_connected_peers",
            "gauge",
            "Peers this shard has a working outbound replication connection to.",
            |r| r.connected_peers,
        ),
        (
            "shardlog_replication_inbound_connections",
            "gauge",
            "Replication connections from peers (hand-shake passed) open on this shard.",
            |r| r.inbound_connections,
        ),
        ("shardlog_replication_frames_sent_total", "counter", "Replication frames sent.", |r| {
            r.stats.frames_sent
        }),
        (
            "shardlog_replication_frames_received_total",
            "counter",
            "Replication frames received.",
            |r| r.stats.frames_received,
        ),
        (
            "shardlog_replication_bytes_sent_total",
            "counter",
            "Bytes of replication frames sent.",
            |r| r.stats.bytes_sent,
        ),
        (
            "shardlog_replication_bytes_received_total",
            "counter",
            "Bytes of replication frames received.",
            |r| r.stats.bytes_received,
        ),
        ("shardlog_replication_messages_sent_total", "counter", "Raft messages sent.", |r| {
            r.stats.messages_sent
        }),
        (
            "shardlog_replication_messages_received_total",
            "counter",
            "Raft messages received.",
            |r| r.stats.messages_received,
        ),
        (
            "shardlog_replication_messages_cut_total",
            "counter",
            "Raft messages larger than a frame (snapshots of large tables) sent in pieces.",
            |r| r.stats.messages_cut,
        ),
        (
            "shardlog_replication_messages_reassembled_total",
            "counter",
            "Raft messages received in pieces and put together.",
            |r| r.stats.messages_reassembled,
        ),
        (
            "shardlog_replication_messages_stepped_total",
            "counter",
            "Raft messages received and stepped into one of this shard's groups.",
            |r| r.host.messages_stepped,
        ),
        (
            "shardlog_replication_connects_total",
            "counter",
            "Outbound replication connections that passed the hand-shake.",
            |r| r.stats.connects,
        ),
        (
            "shardlog_replication_reconnects_total",
            "counter",
            "Outbound replication connections made again to a peer after one was lost.",
            |r| r.stats.reconnects,
        ),
        (
            "shardlog_replication_connect_failures_total",
            "counter",
            "Outbound replication connection attempts that failed.",
            |r| r.stats.connect_failures,
        ),
        (
            "shardlog_replication_refused_handshakes_total",
            "counter",
            "Replication hand-shakes refused (either side): shards, node id or address.",
            |r| r.stats.refused_hellos,
        ),
        (
            "shardlog_replication_bad_frames_total",
            "counter",
            "Inbound replication connections closed for a frame that did not decode.",
            |r| r.stats.bad_frames,
        ),
        (
            "shardlog_raft_log_entries",
            "gauge",
            "Entries this shard's raft groups hold in memory, after their compaction points.",
            |r| r.log_entries,
        ),
        (
            "shardlog_raft_log_entry_bytes",
            "gauge",
            "Data bytes of the entries this shard's raft groups hold in memory.",
            |r| r.log_entry_bytes,
        ),
        (
            "shardlog_raft_stream_held_bytes",
            "gauge",
            "Bytes of the shard log's Raft stream held in memory and in the next checkpoint.",
            |r| r.stream_held_bytes,
        ),
        (
            "shardlog_raft_compactions_total",
            "counter",
            "Compaction entries applied that dropped entries from a raft group's log.",
            |r| r.compaction.compactions,
        ),
        (
            "shardlog_raft_lost_logs_seen_total",
            "counter",
            "Raft logs found shorter than what they had acknowledged (a replaced data dir), by this shard's groups.",
            |r| r.lost_logs_seen,
        ),
        (
            "shardlog_partition_snapshots_installed_total",
            "counter",
            "Partitions this shard installed from a leader's partition snapshot (a replica caught up).",
            |r| r.partition_snapshots.partitions_installed,
        ),
        (
            "shardlog_partition_snapshot_transfers_failed_total",
            "counter",
            "Partition snapshot transfers this shard stopped before installing (raft sends again).",
            |r| r.partition_snapshots.transfers_failed,
        ),
        (
            "shardlog_partition_snapshot_manifests_refused_total",
            "counter",
            "Partition snapshot manifests this shard could not send (over the frame limit).",
            |r| r.partition_snapshots.manifests_refused,
        ),
        (
            "shardlog_partition_snapshot_bytes_pulled_total",
            "counter",
            "Record bytes this shard pulled from leaders to install partition snapshots.",
            |r| r.partition_snapshots.bytes_pulled,
        ),
        (
            "shardlog_partition_snapshot_bytes_served_total",
            "counter",
            "Record bytes this shard served to replicas installing partition snapshots.",
            |r| r.partition_snapshots.bytes_served,
        ),
        (
            "shardlog_replicated_early_acks_total",
            "counter",
            "acks=1 produces to replicated partitions answered on the leader's fdatasync, before commit.",
            |r| r.leader_acks.early_acks,
        ),
        (
            "shardlog_replicated_early_ack_mispredictions_total",
            "counter",
            "Entries applied at another offset than their early acks=1 answer said (a bug if ever above 0).",
            |r| r.leader_acks.mispredictions,
        ),
        (
            "shardlog_raft_stream_snapshots_total",
            "counter",
            "Snapshots of the shard's raft groups written to its Raft stream.",
            |r| r.compaction.stream_snapshots,
        ),
        (
            "shardlog_under_replicated_partitions",
            "gauge",
            "Partitions this shard leads whose ISR is smaller than their replica set.",
            |r| r.under_replicated_partitions,
        ),
        (
            "shardlog_replication_leader_notices_received_total",
            "counter",
            "Leader notices received: how nodes outside a replica set learn its leader.",
            |r| r.host.notices_received,
        ),
        (
            "shardlog_raft_stream_snapshot_failures_total",
            "counter",
            "Raft stream snapshots the shard log refused (too large, or a stopped log).",
            |r| r.compaction.stream_snapshot_failures,
        ),
    ];
    for (name, kind, help, value) in figures {
        text.family(name, kind, help);
        for (shard, r) in &replicating {
            text.sample(name, &[("shard", shard)], value(r));
        }
    }
    let name = "shardlog_replication_dropped_messages_total";
    let help = "Raft messages dropped: outbox_full (the oldest, past the outbox bound), \
                write_failed (in a frame whose write failed), peer_away (for a peer whose \
                connection was lost, until it is back), too_large (over 256 MiB), \
                pieces_abandoned (half received in pieces: a piece out of place or a \
                connection that ended mid-message), \
                unknown_group (received for a group not hosted here), refused (received, \
                refused by its group), unknown_peer (addressed to a node not in --peers), \
                notices_untaken (leader notices received past the bound the shard takes).";
    text.family(name, "counter", help);
    for (shard, r) in &replicating {
        let reasons = [
            ("outbox_full", r.stats.dropped_overflow),
            ("write_failed", r.stats.dropped_unsent),
            ("peer_away", r.stats.dropped_away),
            ("too_large", r.stats.dropped_too_large),
            ("pieces_abandoned", r.stats.reassemblies_abandoned),
            ("unknown_group", r.host.dropped_unknown_group),
            ("refused", r.host.dropped_refused),
            ("unknown_peer", r.host.dropped_unknown_peer),
            ("notices_untaken", r.host.dropped_notices),
        ];
        for (reason, value) in reasons {
            text.sample(name, &[("shard", shard), ("reason", &reason)], value);
        }
    }
}

/// The text being built.
#[derive(Default)]
struct Text {
    out: String,
}

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &dyn Display)], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    fn per_shard(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        shards: &[ShardMetrics],
        value: impl Fn(&ShardMetrics) -> u64,
    ) {
        self.family(name, kind, help);
        for s in shards {
            self.sample(name, &[("shard", &s.shard)], value(s));
        }
    }

    /// `_bucket` samples (cumulative, ending with `le="+Inf"` = count), `_sum`, `_count`;
    /// values are divided by `scale` (microseconds to seconds).
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &dyn Display)],
        histogram: &Histogram,
        scale: f64,
    ) {
        for (bound, cumulative) in histogram.cumulative() {
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&(bound as f64 / scale)));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let _ = write!(self.out, "{name}_bucket");
        self.labels(labels, Some(&"+Inf"));
        let _ = writeln!(self.out, " {}", histogram.count());
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", histogram.sum() as f64 / scale);
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", histogram.count());
    }

    fn labels(&mut self, labels: &[(&str, &dyn Display)], le: Option<&dyn Display>) {
        let le = le.map(|value| ("le", value));
        let mut all = labels.iter().copied().chain(le).peekable();
        if all.peek().is_none() {
            return;
        }
        self.out.push('{');
        for (i, (key, value)) in all.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{key}=\"{}\"", escape(&value.to_string()));
        }
        self.out.push('}');
    }
}

/// Label values escape backslash, double quote and newline (group ids are free text).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histograms_end_with_inf_equal_to_count() {
        let mut histogram = Histogram::new(&[10, 100]);
        histogram.record(5);
        histogram.record(500);
        let mut text = Text::default();
        text.histogram("h", &[("shard", &0)], &histogram, 1.0);
        let expected = "h_bucket{shard=\"0\",le=\"10\"} 1\nh_bucket{shard=\"0\",le=\"100\"} 1\n\
                        h_bucket{shard=\"0\",le=\"+Inf\"} 2\nh_sum{shard=\"0\"} 505\n\
                        h_count{shard=\"0\"} 2\n";
        assert_eq!(text.out, expected);
    }
}
