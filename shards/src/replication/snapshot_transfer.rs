//! The follower's side of a partition group snapshot, as a plain state machine: which
//! records to pull from the leader before the `MsgSnapshot` may be stepped into raft-rs
//! (docs/replication.md, "Partition snapshots").
//!
//! A `MsgSnapshot` of a partition group carries a `SnapshotManifest` (the raft index A it
//! reflects and, per partition, the next offset as of A). Before raft-rs hears of it, the
//! follower's shard pulls each partition's batches from its own end to the manifest's end
//! from the leader's shard of the same index and writes them into its shard log verbatim,
//! at the leader's offsets; only then does it install the rest of the manifest (producer
//! state, offsets image, log starts), record that the entries up to A are applied, and
//! step the message. This type decides what to ask and what to write; the host does the
//! IO (the pull over the replication transport, the appends, the wait for durability).
//!
//! Runs on the shard that hosts the group; no `.await`, no IO, tested with tables below.
//!
//! Invariants:
//! 1. Nothing past a partition's manifest end is ever written: later entries produce
//!    those records (at the offsets the leader gave them), and a record written twice
//!    would shift every later offset.
//! 2. Batches are written in offset order, each once: a batch wholly below the partition's
//!    next offset (an overlap of a resent response) is dropped; one that straddles it is
//!    refused.
//! 3. A transfer is never started for a manifest below what the partition already holds
//!    (its next offset past the manifest's end: data of a newer manifest pulled before a
//!    crash): the follower waits for a newer manifest instead. Partial data below the end
//!    is kept, and the next transfer resumes from it.
//! 4. A manifest at or below the transfer's own index is a duplicate (raft-rs resends the
//!    snapshot while the follower answers nothing) and changes nothing; a newer one
//!    extends the targets and replaces the message to step.

use std::fmt;

use bytes::Bytes;
use shardlog_storage::Offset;

use super::partition_snapshot::SnapshotManifest;

/// What the follower's shard log holds of a partition now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPartition {
    pub log_start_offset: Offset,
    pub next_offset: Offset,
}

/// What to ask the leader for: the partition's batches from `from` (the follower's next
/// offset) up to `to` (the manifest's end, exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullRange {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub from: Offset,
    pub to: Offset,
}

/// One batch the leader sent, its offsets read from its header, its bytes untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledBatch {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub bytes: Bytes,
}

/// The leader's answer to a `PullRange`: its log start now, and whole batches from the
/// request's `from` (the first may start below it) in offset order, possibly none yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub log_start_offset: Offset,
    pub batches: Vec<PulledBatch>,
}

/// A write the host makes on the follower's shard log, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Move the partition's log start (and its end, when it holds nothing there) up to
    /// `offset`: the leader's log starts past what the follower holds.
    LogStart { topic_id: [u8; 16], partition: i32, offset: Offset },
    /// Append these batches at their own offsets (verbatim).
    Batches { topic_id: [u8; 16], partition: i32, batches: Vec<PulledBatch> },
}

/// Why a transfer cannot start or go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferError {
    /// The follower does not know the partition yet (its topic table is behind): retry
    /// once the metadata group brought it there.
    UnknownPartition { topic_id: [u8; 16], partition: i32 },
    /// The follower holds more than the manifest (invariant 3): wait for a newer one.
    AheadOfManifest { partition: i32, next_offset: Offset, manifest_end: Offset },
    /// A response for a partition this transfer does not pull.
    Unexpected { partition: i32 },
    /// A batch that straddles the follower's next offset or the manifest's end, or that
    /// leaves a gap after records the follower holds (a compacted topic's removed batch:
    /// not supported yet, docs/replication.md).
    Misaligned { partition: i32, base_offset: Offset, last_offset: Offset, next: Offset },
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "partition snapshot transfer: {self:?}")
    }
}

/// What became of a manifest offered to a running transfer (invariant 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offered {
    /// At or below the transfer's index: dropped.
    Duplicate,
    /// Newer: the targets moved to its ends.
    Extended,
}

/// One partition's pull: what the follower holds and where the manifest ends.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pull {
    topic_id: [u8; 16],
    partition: i32,
    local: LocalPartition,
    end: Offset,
}

/// The transfer of one group's snapshot (module docs); `M` is the message to step once
/// the data is in (raft-rs's `MsgSnapshot`).
#[derive(Debug)]
pub struct SnapshotTransfer<M> {
    manifest: SnapshotManifest,
    message: M,
    pulls: Vec<Pull>,
}

impl<M> SnapshotTransfer<M> {
    /// A transfer of `manifest`, `local` saying what the follower holds of a partition.
    pub fn start(
        manifest: SnapshotManifest,
        message: M,
        local: impl Fn(&[u8; 16], i32) -> Option<LocalPartition>,
    ) -> Result<SnapshotTransfer<M>, TransferError> {
        let pulls = pulls_of(&manifest, local)?;
        Ok(SnapshotTransfer { manifest, message, pulls })
    }

    /// A manifest that arrived while this transfer runs (invariant 4).
    pub fn offer(
        &mut self,
        manifest: SnapshotManifest,
        message: M,
        local: impl Fn(&[u8; 16], i32) -> Option<LocalPartition>,
    ) -> Result<Offered, TransferError> {
        if manifest.applied_index <= self.manifest.applied_index {
            return Ok(Offered::Duplicate);
        }
        self.pulls = pulls_of(&manifest, local)?;
        self.manifest = manifest;
        self.message = message;
        Ok(Offered::Extended)
    }

    /// The next pull to ask the leader for; None once every partition reached its end.
    pub fn next_request(&self) -> Option<PullRange> {
        let pull = self.pulls.iter().find(|p| p.local.next_offset < p.end)?;
        Some(PullRange {
            topic_id: pull.topic_id,
            partition: pull.partition,
            from: pull.local.next_offset,
            to: pull.end,
        })
    }

    /// The writes a response calls for (invariants 1 and 2), the transfer's view of the
    /// partition moved past them. An error stops the transfer (nothing was changed here).
    pub fn on_response(&mut self, response: Pulled) -> Result<Vec<Write>, TransferError> {
        let (topic_id, partition) = (response.topic_id, response.partition);
        let pull = self
            .pulls
            .iter_mut()
            .find(|p| p.topic_id == topic_id && p.partition == partition)
            .ok_or(TransferError::Unexpected { partition })?;
        let mut local = pull.local;
        let mut writes = Vec::new();
        let mut batches = Vec::new();
        // The leader's log starts past what the follower holds (retention, DeleteRecords):
        // start there, never past the manifest's end (invariant 1).
        let leader_start = response.log_start_offset.min(pull.end);
        if leader_start > local.next_offset {
            // The batch holding the leader's start is kept whole (a fetch from the log
            // start returns it whole), where the follower holds nothing of it.
            let holding = response.batches.iter().find(|b| b.last_offset >= leader_start);
            let start = match holding {
                Some(b) if b.base_offset >= local.next_offset => b.base_offset.min(leader_start),
                _ => leader_start,
            };
            if start > local.next_offset {
                writes.push(Write::LogStart { topic_id, partition, offset: start });
                local = LocalPartition { log_start_offset: start, next_offset: start };
            }
        }
        for batch in response.batches {
            let misaligned = TransferError::Misaligned {
                partition,
                base_offset: batch.base_offset,
                last_offset: batch.last_offset,
                next: local.next_offset,
            };
            if batch.last_offset < local.next_offset {
                continue; // held already (invariant 2)
            }
            if batch.base_offset >= pull.end {
                break; // written by later entries (invariant 1)
            }
            if batch.base_offset < local.next_offset || batch.last_offset >= pull.end {
                return Err(misaligned);
            }
            if batch.base_offset > local.next_offset {
                // A gap: only where the follower holds nothing, by moving its start.
                if local.next_offset > local.log_start_offset || !batches.is_empty() {
                    return Err(misaligned);
                }
                let offset = batch.base_offset;
                writes.push(Write::LogStart { topic_id, partition, offset });
                local = LocalPartition { log_start_offset: offset, next_offset: offset };
            }
            local.next_offset = batch.last_offset + 1;
            batches.push(batch);
        }
        if !batches.is_empty() {
            writes.push(Write::Batches { topic_id, partition, batches });
        }
        pull.local = local;
        Ok(writes)
    }

    /// Whether every partition holds its records up to the manifest's end.
    pub fn is_pulled(&self) -> bool {
        self.next_request().is_none()
    }

    /// The log starts to move once pulled: the manifest's, where it is past the
    /// follower's (a log start inside a batch the follower holds whole).
    pub fn final_log_starts(&self) -> Vec<Write> {
        let manifest = self.manifest.partitions.iter();
        let moves = manifest.zip(&self.pulls).filter_map(|(m, pull)| {
            (m.log_start_offset > pull.local.log_start_offset).then_some(Write::LogStart {
                topic_id: m.topic_id,
                partition: m.partition,
                offset: m.log_start_offset,
            })
        });
        moves.collect()
    }

    pub fn manifest(&self) -> &SnapshotManifest {
        &self.manifest
    }

    /// The manifest and the message to step, once pulled.
    pub fn finish(self) -> (SnapshotManifest, M) {
        (self.manifest, self.message)
    }
}

/// One pull per partition of `manifest` (invariant 3), in the manifest's order.
fn pulls_of(
    manifest: &SnapshotManifest,
    local: impl Fn(&[u8; 16], i32) -> Option<LocalPartition>,
) -> Result<Vec<Pull>, TransferError> {
    let mut pulls = Vec::with_capacity(manifest.partitions.len());
    for m in &manifest.partitions {
        let (topic_id, partition) = (m.topic_id, m.partition);
        let held = local(&topic_id, partition);
        let held = held.ok_or(TransferError::UnknownPartition { topic_id, partition })?;
        if held.next_offset > m.next_offset {
            return Err(TransferError::AheadOfManifest {
                partition,
                next_offset: held.next_offset,
                manifest_end: m.next_offset,
            });
        }
        pulls.push(Pull { topic_id, partition, local: held, end: m.next_offset });
    }
    Ok(pulls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::partition_snapshot::PartitionManifest;

    const T: [u8; 16] = [7; 16];

    fn manifest(applied_index: u64, ends: &[(i32, Offset, Offset)]) -> SnapshotManifest {
        let partitions = ends
            .iter()
            .map(|&(partition, log_start_offset, next_offset)| PartitionManifest {
                topic_id: T,
                partition,
                log_start_offset,
                next_offset,
                producers: vec![],
                leader_epochs: vec![],
                transactions: Default::default(),
            })
            .collect();
        SnapshotManifest {
            applied_index,
            partitions,
            offsets_image: Bytes::new(),
            coordinator_image: Bytes::new(),
        }
    }

    fn held(
        next: &'static [(i32, Offset, Offset)],
    ) -> impl Fn(&[u8; 16], i32) -> Option<LocalPartition> {
        move |_, partition| {
            let &(_, log_start_offset, next_offset) = next.iter().find(|h| h.0 == partition)?;
            Some(LocalPartition { log_start_offset, next_offset })
        }
    }

    fn batch(base_offset: Offset, last_offset: Offset) -> PulledBatch {
        PulledBatch { base_offset, last_offset, bytes: Bytes::from(format!("{base_offset}")) }
    }

    fn response(partition: i32, log_start_offset: Offset, batches: Vec<PulledBatch>) -> Pulled {
        Pulled { topic_id: T, partition, log_start_offset, batches }
    }

    fn appended(partition: i32, batches: &[(Offset, Offset)]) -> Write {
        let batches = batches.iter().map(|&(b, l)| batch(b, l)).collect();
        Write::Batches { topic_id: T, partition, batches }
    }

    fn log_start(partition: i32, offset: Offset) -> Write {
        Write::LogStart { topic_id: T, partition, offset }
    }

    #[test]
    fn an_empty_follower_pulls_each_partition_from_its_end_to_the_manifests() {
        let m = manifest(50, &[(0, 0, 30), (1, 0, 0)]);
        let mut transfer =
            SnapshotTransfer::start(m, "snapshot", held(&[(0, 0, 0), (1, 0, 0)])).unwrap();
        assert!(!transfer.is_pulled());
        let request = transfer.next_request().unwrap();
        assert_eq!(request, PullRange { topic_id: T, partition: 0, from: 0, to: 30 });
        let writes = transfer.on_response(response(0, 0, vec![batch(0, 9), batch(10, 19)]));
        assert_eq!(writes, Ok(vec![appended(0, &[(0, 9), (10, 19)])]));
        assert_eq!(transfer.next_request().unwrap().from, 20);
        // A response resent (overlap) is dropped batch by batch; the next one goes on.
        let writes = transfer.on_response(response(0, 0, vec![batch(10, 19), batch(20, 29)]));
        assert_eq!(writes, Ok(vec![appended(0, &[(20, 29)])]));
        assert!(transfer.is_pulled(), "partition 1 is empty in the manifest too");
        assert_eq!(transfer.final_log_starts(), vec![]);
        assert_eq!(transfer.finish().1, "snapshot");
    }

    #[test]
    fn nothing_past_the_manifests_end_is_written() {
        let m = manifest(50, &[(0, 0, 20)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 10)])).unwrap();
        assert_eq!(transfer.next_request().unwrap().from, 10, "resumes from what it holds");
        // The leader's log grew since the manifest: batches from its end on are later
        // entries' records, which the follower will apply itself.
        let writes = transfer.on_response(response(0, 0, vec![batch(10, 19), batch(20, 24)]));
        assert_eq!(writes, Ok(vec![appended(0, &[(10, 19)])]));
        assert!(transfer.is_pulled());
        // A batch across the end cannot be the leader's log at the manifest's index.
        let m = manifest(50, &[(0, 0, 20)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 10)])).unwrap();
        let refused = transfer.on_response(response(0, 0, vec![batch(10, 24)]));
        let misaligned =
            TransferError::Misaligned { partition: 0, base_offset: 10, last_offset: 24, next: 10 };
        assert_eq!(refused, Err(misaligned));
        assert_eq!(transfer.next_request().unwrap().from, 10, "an error changes nothing");
    }

    #[test]
    fn a_leaders_log_start_past_the_followers_end_moves_the_followers_first() {
        let m = manifest(50, &[(0, 15, 40)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 5)])).unwrap();
        // Retention moved the leader's start to 15, inside its batch 10..=19: the follower
        // starts at that batch, whole, then moves its start to the manifest's once pulled.
        let writes = transfer.on_response(response(0, 15, vec![batch(10, 19), batch(20, 39)]));
        assert_eq!(writes, Ok(vec![log_start(0, 10), appended(0, &[(10, 19), (20, 39)])]));
        assert!(transfer.is_pulled());
        assert_eq!(transfer.final_log_starts(), vec![log_start(0, 15)]);
        // A leader whose first batch starts past its log start (a compacted head): there.
        let m = manifest(50, &[(0, 15, 40)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 5)])).unwrap();
        let writes = transfer.on_response(response(0, 15, vec![batch(20, 39)]));
        assert_eq!(writes, Ok(vec![log_start(0, 15), log_start(0, 20), appended(0, &[(20, 39)])]));
        assert_eq!(transfer.final_log_starts(), vec![], "20 is past the manifest's 15");
        // Past the manifest's end the start stops at the end (invariant 1).
        let m = manifest(50, &[(0, 0, 40)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 5)])).unwrap();
        assert_eq!(transfer.on_response(response(0, 70, vec![])), Ok(vec![log_start(0, 40)]));
        assert!(transfer.is_pulled());
        // A batch straddling what the follower holds is refused, and changes nothing.
        let m = manifest(50, &[(0, 0, 40)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 12)])).unwrap();
        let refused = transfer.on_response(response(0, 0, vec![batch(10, 19)]));
        let misaligned =
            TransferError::Misaligned { partition: 0, base_offset: 10, last_offset: 19, next: 12 };
        assert_eq!(refused, Err(misaligned));
        assert_eq!(transfer.next_request().unwrap().from, 12);
    }

    #[test]
    fn a_gap_is_bridged_only_where_the_follower_holds_nothing() {
        let m = manifest(50, &[(0, 0, 40)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 0)])).unwrap();
        let writes = transfer.on_response(response(0, 0, vec![batch(3, 9), batch(12, 19)]));
        assert!(matches!(writes, Err(TransferError::Misaligned { base_offset: 12, .. })));
        let writes = transfer.on_response(response(0, 0, vec![batch(3, 9)]));
        assert_eq!(writes, Ok(vec![log_start(0, 3), appended(0, &[(3, 9)])]));
        // The manifest's log start (0) is not past the follower's (3): nothing to move.
        assert_eq!(transfer.final_log_starts(), vec![]);
    }

    #[test]
    fn a_follower_ahead_of_the_manifest_waits_and_an_unknown_partition_is_named() {
        let m = manifest(50, &[(0, 0, 20)]);
        let ahead = SnapshotTransfer::start(m.clone(), (), held(&[(0, 0, 25)])).unwrap_err();
        let expected =
            TransferError::AheadOfManifest { partition: 0, next_offset: 25, manifest_end: 20 };
        assert_eq!(ahead, expected);
        let unknown = SnapshotTransfer::start(m, (), held(&[])).unwrap_err();
        assert_eq!(unknown, TransferError::UnknownPartition { topic_id: T, partition: 0 });
    }

    #[test]
    fn a_duplicate_manifest_is_dropped_and_a_newer_one_extends_the_targets() {
        let m = manifest(50, &[(0, 0, 20)]);
        let mut transfer = SnapshotTransfer::start(m, "first", held(&[(0, 0, 0)])).unwrap();
        transfer.on_response(response(0, 0, vec![batch(0, 9)])).unwrap();
        let at_10 = held(&[(0, 0, 10)]);
        let again = transfer.offer(manifest(50, &[(0, 0, 20)]), "again", &at_10);
        assert_eq!(again, Ok(Offered::Duplicate));
        let older = transfer.offer(manifest(40, &[(0, 0, 15)]), "older", &at_10);
        assert_eq!(older, Ok(Offered::Duplicate));
        assert_eq!(transfer.next_request().unwrap().to, 20);
        let newer = transfer.offer(manifest(60, &[(0, 5, 35), (1, 0, 0)]), "newer", |_, p| {
            Some(LocalPartition { log_start_offset: 0, next_offset: if p == 0 { 10 } else { 0 } })
        });
        assert_eq!(newer, Ok(Offered::Extended));
        assert_eq!(
            transfer.next_request(),
            Some(PullRange { topic_id: T, partition: 0, from: 10, to: 35 })
        );
        let writes = transfer.on_response(response(0, 0, vec![batch(10, 34)]));
        assert_eq!(writes, Ok(vec![appended(0, &[(10, 34)])]));
        assert!(transfer.is_pulled());
        assert_eq!(transfer.final_log_starts(), vec![log_start(0, 5)]);
        let (manifest, message) = transfer.finish();
        assert_eq!((manifest.applied_index, message), (60, "newer"));
    }

    #[test]
    fn a_response_for_a_partition_not_pulled_is_unexpected() {
        let m = manifest(50, &[(0, 0, 20)]);
        let mut transfer = SnapshotTransfer::start(m, (), held(&[(0, 0, 0)])).unwrap();
        let unexpected = transfer.on_response(response(3, 0, vec![batch(0, 1)]));
        assert_eq!(unexpected, Err(TransferError::Unexpected { partition: 3 }));
    }
}
