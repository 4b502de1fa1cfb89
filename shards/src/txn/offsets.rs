//! Transactional offsets (TxnOffsetCommit) on a group's coordinator shard.
//!
//! Offsets a transaction commits are pending until the transaction ends: written to the
//! log (`PendingOffsets`, fdatasync'd before TxnOffsetCommit is answered; in a cluster
//! committed in the shard's offsets group and applied by every replica, `txn::replicated`)
//! but invisible to OffsetFetch. When the transaction coordinator resolves them (mesh
//! `TxnOffsetsMarker`), a commit writes them as an ordinary `GroupOffsets` commit first,
//! then `OffsetsResolved`; an abort writes only `OffsetsResolved`. Both are durable
//! before the coordinator is answered. OffsetFetch with `require_stable` gets
//! UNSTABLE_OFFSET_COMMIT for a partition with pending offsets, as Kafka's.

use super::log::TxnLogEntry;
use crate::error::GroupError;
use crate::group::offsets::OffsetLogEntry;
use crate::group::OffsetCommitPartition;
use crate::shard::Shard;

impl Shard {
    /// TxnOffsetCommit: per partition, Ok or why not; the accepted ones are pending.
    pub async fn txn_offset_commit(
        &self,
        group_id: &str,
        producer_id: i64,
        generation: i32,
        member_id: &str,
        partitions: Vec<OffsetCommitPartition>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.check_coordinator(group_id)?;
        if !member_id.is_empty() || generation >= 0 {
            // KIP-447: a zombie of an earlier generation cannot commit.
            self.groups.check_txn_commit(group_id, generation, member_id)?;
        }
        let (results, offsets) = self.accept_commits(partitions);
        if !offsets.is_empty() {
            let group = group_id.to_string();
            self.write_txn_entry(TxnLogEntry::PendingOffsets { group, producer_id, offsets })
                .await?;
        }
        Ok(results)
    }

    /// The end of a transaction for its offsets in `group` (on the group's coordinator).
    pub async fn resolve_txn_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), GroupError> {
        let key = (group_id.to_string(), producer_id);
        let Some(offsets) = self.txn.pending.borrow().get(&key).cloned() else {
            return Ok(()); // resolved already (a retried marker), or nothing was committed
        };
        if commit {
            let entry = OffsetLogEntry::Commit { group: group_id.to_string(), offsets };
            self.write_offset_entry(entry).await?;
        }
        self.write_txn_entry(TxnLogEntry::OffsetsResolved { group: key.0, producer_id }).await
    }

    /// Whether a transaction has offsets pending for `group` on any of `partitions`
    /// (all partitions when None).
    pub fn has_pending_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> bool {
        let pending = self.txn.pending.borrow();
        pending.iter().filter(|((group, _), _)| group == group_id).any(|(_, offsets)| {
            offsets.iter().any(|(key, _)| partitions.is_none_or(|asked| asked.contains(key)))
        })
    }
}
