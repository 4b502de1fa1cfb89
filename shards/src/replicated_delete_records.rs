//! DeleteRecords on a replicated partition (docs/replication.md, "DeleteRecords"): the
//! log start moves on every replica, through the partition's raft group.
//!
//! On a single node DeleteRecords appends a log-start entry to the partition's own log
//! (`admin::delete_records_local`). On a replicated partition that would move the log
//! start of the leader's copy alone, and the records would be back as soon as another
//! replica leads. So the leader proposes a log start entry (`replication::partition`,
//! kind 5) and every replica applies it to its own copy, in index order with the
//! partition's produces: the same offset on every copy.
//!
//! - The leader checks what a single node checks (the leadership, the cleanup policy, an
//!   offset between 0 and its high watermark, -1 meaning the high watermark), proposes,
//!   and answers the new low watermark once the entry is committed and applied here
//!   (as a produce: `COMMIT_WAIT` bounds the wait; no answer in time is
//!   NOT_LEADER_OR_FOLLOWER, retriable, and a retry moves nothing further).
//! - A replica applies it once its topic table reached the entry's table version (as a
//!   produce entry). Every entry before it is applied to its copy, but the copy's last
//!   batches may not be durable yet, and a log start moves only within the durable log
//!   (the storage's rule): the applier waits for the log's next flushes until the offset
//!   is durable here. The leader's offset is at most its high watermark, which is at most
//!   what it applied, and every replica applied the same entries before this one, so the
//!   wait ends.
//!
//! Runs on the shard that hosts the partition's group; not a hot path.
//!
//! Invariants:
//! 1. Every replica moves the partition's log start to the entry's offset (or keeps a
//!    higher one: applying the entry twice, after a restart, changes nothing), in the
//!    entry's index order among the group's produces.
//! 2. A committed log start entry that a replica's log cannot take stops that broker
//!    (as a produce entry does): its copy would otherwise keep records the others deleted.

use shardlog_storage::{LogStartError, Offset};

use crate::admin::DELETE_TO_HIGH_WATERMARK;
use crate::error::PartitionError;
use crate::ops::append_error;
use crate::partition_group::{within_commit_wait, TABLE_WAIT_POLL};
use crate::replication::partition::LogStartEntry;
use crate::shard::Shard;

impl Shard {
    /// DeleteRecords of `topic`-`partition`, replicated in `group`, on the replica that
    /// leads it (module docs): the new log start offset.
    pub(crate) async fn delete_records_replicated(
        &self,
        group: u64,
        topic: &str,
        partition: i32,
        offset: Offset,
    ) -> Result<Offset, PartitionError> {
        let groups = self.partition_groups().ok_or(PartitionError::NotLeaderOrFollower)?;
        let entry = {
            let table = self.table_ref();
            let meta = table.topic(topic).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let partition_id =
                meta.partition_id(partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
            let info = self
                .log
                .partition_info(partition_id)
                .ok_or(PartitionError::UnknownTopicOrPartition)?;
            let offset = match offset {
                DELETE_TO_HIGH_WATERMARK => info.high_watermark,
                o if o < 0 || o > info.high_watermark => {
                    return Err(PartitionError::OffsetOutOfRange)
                }
                o => o,
            };
            LogStartEntry {
                topic_id: meta.topic_id,
                partition,
                table_version: table.version,
                offset,
            }
        };
        let proposal = groups.propose_partition_entry(group, entry.encode())?;
        let receiver = groups.wait_for_log_start(group, proposal);
        let applied = within_commit_wait(receiver).await;
        groups.forget_log_start_waiter(group, proposal.index);
        let log_start = applied.unwrap_or(Err(PartitionError::NotLeaderOrFollower))?;
        tracing::info!(
            shard = self.id,
            topic,
            partition,
            log_start,
            "records deleted (replicated)"
        );
        Ok(log_start)
    }

    /// Applies a committed log start entry of `group` at `index` to this replica's copy
    /// (invariants 1 and 2): the partition's log start after it.
    pub(crate) async fn apply_log_start(
        &self,
        group: u64,
        index: u64,
        entry: &LogStartEntry,
    ) -> Result<Offset, PartitionError> {
        while self.table_ref().version < entry.table_version {
            glommio::timer::sleep(TABLE_WAIT_POLL).await;
        }
        let partition_id = {
            let table = self.table_ref();
            let meta = table.topic_by_id(entry.topic_id);
            let meta = meta.ok_or(PartitionError::UnknownTopicOrPartition)?; // deleted since
            meta.partition_id(entry.partition).ok_or(PartitionError::UnknownTopicOrPartition)?
        };
        loop {
            // Made before the check, so a flush that lands in between is not missed.
            let flushed = self.log.flushed();
            let info = self
                .log
                .partition_info(partition_id)
                .ok_or(PartitionError::UnknownTopicOrPartition)?;
            if entry.offset <= info.high_watermark {
                break;
            }
            if entry.offset > info.log_end_offset || self.log.is_closing() {
                // Not this replica's own entries (the copies agree up to here), or the
                // shard is stopping (the entry applies again at restart).
                let error = format!(
                    "log start {} past this copy's end {} (partition {} of group {group:#x})",
                    entry.offset, info.log_end_offset, entry.partition
                );
                self.unstorable_committed_entry(group, index, &error);
                return Err(PartitionError::NotLeaderOrFollower);
            }
            flushed.await;
        }
        match self.log.advance_log_start(partition_id, entry.offset) {
            Ok((log_start, _durable)) => Ok(log_start),
            Err(e) => {
                // AboveHighWatermark cannot be (checked above, no await since).
                self.unstorable_committed_entry(group, index, &format!("{e:?}"));
                Err(match e {
                    LogStartError::Append(e) => append_error(e),
                    LogStartError::AboveHighWatermark { .. } => PartitionError::OffsetOutOfRange,
                })
            }
        }
    }
}
