//! The log cleaner's scheduler on each shard: every `CleanerConfig::check_interval`, pick
//! the local compacted partition (`cleanup.policy` lists `compact`) that most needs it and
//! run one cleaning pass over it (`ShardLog::clean`, storage/src/cleaner.rs), in a task
//! queue of low shares, at `CleanerConfig::bytes_per_second`. Never on the produce path.
//!
//! Chooses, as Kafka's `LogCleanerManager`: a partition whose dirty ratio (bytes above its
//! last clean point over all cleanable bytes) reaches `min.cleanable.dirty.ratio`, or whose
//! oldest dirty batch is older than `max.compaction.lag.ms`, or whose tombstones kept by
//! `delete.retention.ms` have become removable; the highest ratio first.
//!
//! Tombstones: a pass may remove the tombstones below the clean point of an earlier pass
//! that started at least `delete.retention.ms` ago (Kafka keeps this per segment; here
//! per partition, in memory). After a restart nothing is remembered, so tombstones stay
//! one more `delete.retention.ms`: later, never sooner. Transaction markers whose data are
//! all gone use the same horizon.
//!
//! Transactions: a pass stops at the partition's last stable offset and gets its aborted
//! list (`txn::partition`), so it cleans committed records and removes aborted ones; after
//! it, the aborted transactions whose marker it removed leave the list.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use shardlog_storage::{AbortedTxnRange, Bounds, CleanPolicy, Cleanable, Offset, PartitionId};
use tracing::{debug, warn};

use crate::metadata::TopicMeta;
use crate::producer_log::wall_ms;
use crate::shard::Shard;
use crate::topic_config::CleanupPolicy;

/// Broker settings of the cleaner.
#[derive(Clone, Copy, Debug)]
pub struct CleanerConfig {
    /// How often each shard looks for a partition to clean (Kafka's log.cleaner.backoff.ms).
    pub check_interval: Duration,
    /// Budget of bytes read plus written per second per shard
    /// (Kafka's log.cleaner.io.max.bytes.per.second).
    pub bytes_per_second: u64,
    /// Most distinct keys one pass maps (Kafka's log.cleaner.dedupe.buffer.size).
    pub max_keys: usize,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            check_interval: Duration::from_secs(15),
            bytes_per_second: 32 << 20,
            max_keys: 1 << 20,
        }
    }
}

/// What the shard remembers of one partition's passes (in memory only).
#[derive(Debug, Default)]
struct Passes {
    /// Clean point of the last pass (the log start until the first).
    cleaned_to: Offset,
    /// (start time, clean point) of passes, oldest first; pruned to what can still matter.
    history: Vec<(i64, Offset)>,
    /// The last pass kept tombstones only because of `delete.retention.ms`.
    tombstones_waiting: bool,
    /// The tombstone horizon the last pass used.
    last_horizon: Offset,
}

impl Passes {
    /// Tombstones below this offset may go at `now_ms` (see the module header).
    fn tombstone_horizon(&self, now_ms: i64, delete_retention_ms: i64) -> Offset {
        let due = now_ms.saturating_sub(delete_retention_ms);
        self.history.iter().filter(|(at, _)| *at <= due).map(|(_, cp)| *cp).max().unwrap_or(0)
    }

    fn record(&mut self, now_ms: i64, clean_point: Offset, delete_retention_ms: i64) {
        self.history.push((now_ms, clean_point));
        // Of the passes already past the retention, only the newest can still matter.
        let due = now_ms.saturating_sub(delete_retention_ms);
        let past = self.history.iter().filter(|(at, _)| *at <= due).count();
        self.history.drain(..past.saturating_sub(1));
        self.cleaned_to = clean_point;
    }
}

/// A compacted topic's cleaning settings.
#[derive(Clone, Copy, Debug)]
struct TopicCleaning {
    min_dirty_ratio: f64,
    min_lag_ms: i64,
    max_lag_ms: i64,
    delete_retention_ms: i64,
}

impl TopicCleaning {
    fn of(meta: &TopicMeta) -> Option<TopicCleaning> {
        if !CleanupPolicy::of(meta).compact {
            return None;
        }
        let ms = |key: &str, default: i64| meta.config_i64(key).unwrap_or(default).max(0);
        Some(TopicCleaning {
            min_dirty_ratio: meta
                .config("min.cleanable.dirty.ratio")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.5),
            min_lag_ms: ms("min.compaction.lag.ms", 0),
            max_lag_ms: ms("max.compaction.lag.ms", i64::MAX),
            delete_retention_ms: ms("delete.retention.ms", 86_400_000),
        })
    }
}

/// Whether a partition is due, and how urgently (higher first).
fn urgency(c: &Cleanable, topic: &TopicCleaning, passes: &Passes, now_ms: i64) -> Option<f64> {
    let total = c.clean_bytes + c.dirty_bytes;
    let ratio = if total == 0 { 0.0 } else { c.dirty_bytes as f64 / total as f64 };
    let lagging =
        c.first_dirty_timestamp.is_some_and(|ts| ts < now_ms.saturating_sub(topic.max_lag_ms));
    let tombstones_due = passes.tombstones_waiting
        && passes.tombstone_horizon(now_ms, topic.delete_retention_ms) > passes.last_horizon;
    let dirty = c.dirty_bytes > 0 && ratio >= topic.min_dirty_ratio;
    (dirty || lagging || tombstones_due).then_some(ratio)
}

impl Shard {
    /// Runs the cleaner every `config.cleaner.check_interval`, in a task queue of low
    /// shares (its reads and `Replace` writes still go through the shard's one log).
    pub fn spawn_cleaner(self: &Rc<Self>) {
        let shard = self.clone();
        let queue = glommio::executor().create_task_queue(
            glommio::Shares::Static(100),
            glommio::Latency::NotImportant,
            "log-cleaner",
        );
        let task = async move {
            let mut passes: HashMap<PartitionId, Passes> = HashMap::new();
            loop {
                glommio::timer::sleep(shard.config.cleaner.check_interval).await;
                shard.clean_once(&mut passes).await;
            }
        };
        match glommio::spawn_local_into(task, queue) {
            Ok(task) => {
                task.detach();
            }
            Err(error) => warn!(shard = self.id, %error, "log cleaner not started"),
        }
    }

    /// Picks the partition most in need and cleans it once. Returns whether a pass ran.
    async fn clean_once(&self, passes: &mut HashMap<PartitionId, Passes>) -> bool {
        if !self.txn.ready.get() {
            return false; // no last stable offset nor aborted list yet
        }
        let now_ms = wall_ms();
        let table = self.table();
        let mut best: Option<(f64, PartitionId, TopicCleaning)> = None;
        for meta in table.topics.values() {
            let Some(topic) = TopicCleaning::of(meta) else { continue };
            for index in self.partitions_here(meta) {
                let partition = PartitionId::new(meta.topic_number, index);
                let Some(info) = self.log.partition_info(partition) else { continue };
                let state = passes.entry(partition).or_default();
                let from = state.cleaned_to.max(info.log_start_offset);
                let bounds = Bounds {
                    now_ms,
                    min_compaction_lag_ms: topic.min_lag_ms,
                    upper_bound: self.last_stable_offset(partition, &info),
                };
                let Some(c) = self.log.cleanable(partition, from, &bounds) else { continue };
                if let Some(u) = urgency(&c, &topic, state, now_ms) {
                    if best.as_ref().is_none_or(|(b, ..)| u > *b) {
                        best = Some((u, partition, topic));
                    }
                }
            }
        }
        drop(table);
        let Some((_, partition, topic)) = best else { return false };
        let state = passes.entry(partition).or_default();
        let horizon = state.tombstone_horizon(now_ms, topic.delete_retention_ms);
        let Some(info) = self.log.partition_info(partition) else { return false };
        let policy = CleanPolicy {
            now_ms,
            min_compaction_lag_ms: topic.min_lag_ms,
            tombstones_removable_below: horizon,
            bytes_per_second: self.config.cleaner.bytes_per_second,
            max_keys: self.config.cleaner.max_keys,
            upper_bound: self.last_stable_offset(partition, &info),
            aborted: self.aborted_ranges(partition),
        };
        match self.log.clean(partition, policy).await {
            Ok(report) => {
                debug!(shard = self.id, ?partition, ?report, "cleaned a partition");
                self.forget_removed_aborts(partition, report.clean_point);
                let state = passes.entry(partition).or_default();
                state.record(now_ms, report.clean_point, topic.delete_retention_ms);
                state.tombstones_waiting = report.tombstones_waiting + report.markers_waiting > 0;
                state.last_horizon = horizon;
            }
            Err(error) => warn!(shard = self.id, ?partition, %error, "cleaning pass failed"),
        }
        true
    }

    /// The partition's aborted transactions, for a pass.
    fn aborted_ranges(&self, partition: PartitionId) -> Vec<AbortedTxnRange> {
        let partitions = self.txn.partitions.borrow();
        let Some(state) = partitions.get(&partition) else { return Vec::new() };
        state
            .aborted
            .iter()
            .map(|a| AbortedTxnRange {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                marker_offset: a.last_offset,
            })
            .collect()
    }

    /// Drops the aborted transactions below `clean_point` whose marker a pass removed (it
    /// removes a marker only after all its data: cleaner.rs invariant 6), so Fetch stops
    /// listing ranges with nothing in them. Also those restored from a snapshot older than
    /// the removal.
    fn forget_removed_aborts(&self, partition: PartitionId, clean_point: Offset) {
        let mut partitions = self.txn.partitions.borrow_mut();
        let Some(state) = partitions.get_mut(&partition) else { return };
        state.forget_removed(clean_point, |marker| self.log.has_batch_at(partition, marker));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_become_removable_below_passes_older_than_the_retention() {
        let mut passes = Passes::default();
        passes.record(1_000, 10, 500);
        passes.record(1_400, 20, 500);
        passes.record(2_000, 30, 500);
        // (now, delete.retention.ms, horizon)
        let table = [
            (2_000, 500, 20),
            (2_400, 500, 20),
            (2_500, 500, 30),
            (2_000, 0, 30),
            (2_000, 2_000, 0),
        ];
        for (now, retention, horizon) in table {
            assert_eq!(passes.tombstone_horizon(now, retention), horizon, "now {now}");
        }
        assert_eq!(passes.cleaned_to, 30);
    }

    #[test]
    fn a_partition_is_due_by_dirty_ratio_lag_or_waiting_tombstones() {
        let topic = TopicCleaning {
            min_dirty_ratio: 0.5,
            min_lag_ms: 0,
            max_lag_ms: 1_000,
            delete_retention_ms: 100,
        };
        let c = |clean, dirty, ts| Cleanable {
            clean_point: 50,
            clean_bytes: clean,
            dirty_bytes: dirty,
            first_dirty_timestamp: ts,
        };
        let idle = Passes::default();
        let mut waiting = Passes::default();
        waiting.record(0, 40, 100);
        waiting.tombstones_waiting = true;
        let mut used = Passes { last_horizon: 40, ..Passes::default() };
        used.record(0, 40, 100);
        used.tombstones_waiting = true;
        let cases = [
            (c(100, 100, Some(5_000)), &idle, true),
            (c(300, 100, Some(5_000)), &idle, false),
            (c(300, 100, Some(3_000)), &idle, true), // older than max.compaction.lag.ms
            (c(300, 0, None), &idle, false),
            (c(300, 0, None), &waiting, true),
            (c(300, 0, None), &used, false), // that horizon was already used
        ];
        for (i, (cleanable, passes, due)) in cases.iter().enumerate() {
            assert_eq!(urgency(cleanable, &topic, passes, 5_000).is_some(), *due, "case {i}");
        }
    }
}
