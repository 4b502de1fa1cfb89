//! The metadata log: the topic table kept as a log of changes with periodic snapshots
//! (after KRaft's metadata log), in the `Metadata` internal stream of shard 0's log.
//!
//! Runs on shard 0 (the controller) for writing; every shard applies the change records
//! to its copy. Not a hot path: one entry per answered topic request.
//!
//! - A CreateTopics, DeleteTopics, CreatePartitions or config change is validated against
//!   the table plus the request's earlier changes ([`PendingTable`]), written as one
//!   change record ([`ChangeRecord`], not a snapshot) and fdatasync'd, sent to every shard
//!   (each applies it to its copy and creates or drops its own partitions), and only then
//!   answered. Bytes written per change do not depend on the number of topics.
//! - A snapshot (the whole table, `TopicTable`'s format) is written in the background when
//!   the changes since the last snapshot reach [`SnapshotPolicy`]'s bound: `max_changes`
//!   records, or as many bytes as the last snapshot (at least `min_change_bytes`). Tying the
//!   bytes to the snapshot's own size keeps snapshot bytes per change at most about one
//!   change record's, whatever the table size, and recovery replays at most about one
//!   table's worth of changes.
//! - Recovery loads the newest snapshot and applies the change records after it
//!   ([`restore`]). Storage keeps, in memory and in every checkpoint, each stream's entries
//!   since its latest durable snapshot (storage `state.rs` invariants 4 and 5), so the
//!   newest durable snapshot and every change after it survive; older snapshots and change
//!   records are freed with their segments like any retention.
//! - A data dir written before change records holds only snapshots: it restores as before.
//!
//! Invariants:
//! 1. A snapshot is appended under the controller lock with the table every change record
//!    appended before it produced, and no change record after it, so replaying "newest
//!    snapshot, then the records after it" gives the table the controller had.
//! 2. A change record applies only to the table version it names; recovery refuses a log
//!    where one does not (it never guesses).
//! 3. A fresh data dir gets a snapshot of the empty table (durable) before the first
//!    change, so every change follows a snapshot and the shard count is always recorded.

pub mod change;
pub mod pending;
pub mod users;

pub use change::{ChangeRecord, TopicChange};
pub use pending::PendingTable;
use shardlog_storage::{InternalEntry, InternalStream};

use crate::metadata::TopicTable;

/// When the controller writes a snapshot of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// A snapshot after this many change records since the last one.
    pub max_changes: u64,
    /// A snapshot once the change records since the last one hold this many payload bytes,
    /// or as many as the last snapshot if that is more.
    pub min_change_bytes: u64,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy { max_changes: 100_000, min_change_bytes: 1 << 20 }
    }
}

/// What the controller counts to apply the policy (a plain state machine).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotSchedule {
    pub changes_since: u64,
    pub change_bytes_since: u64,
    pub last_snapshot_bytes: u64,
}

impl SnapshotSchedule {
    pub fn record_change(&mut self, payload_bytes: usize) {
        self.changes_since += 1;
        self.change_bytes_since += payload_bytes as u64;
    }

    pub fn snapshot_taken(&mut self, payload_bytes: usize) {
        *self =
            SnapshotSchedule { last_snapshot_bytes: payload_bytes as u64, ..Default::default() };
    }

    pub fn due(&self, policy: &SnapshotPolicy) -> bool {
        self.changes_since >= policy.max_changes
            || (self.changes_since > 0
                && self.change_bytes_since >= policy.min_change_bytes.max(self.last_snapshot_bytes))
    }
}

/// The table recovery gives: the newest `Metadata` snapshot with the change records after
/// it applied, and the schedule's counts. `Ok(None)` when the stream holds nothing (a
/// fresh data dir).
pub fn restore(
    recovered: &[InternalEntry],
) -> Result<Option<(TopicTable, SnapshotSchedule)>, String> {
    let stream: Vec<&InternalEntry> =
        recovered.iter().filter(|e| e.stream == InternalStream::Metadata).collect();
    let Some(start) = stream.iter().rposition(|e| e.snapshot) else {
        return match stream.is_empty() {
            true => Ok(None),
            false => Err(format!(
                "the topic table log holds {} change records and no snapshot before them",
                stream.len()
            )),
        };
    };
    let mut table = TopicTable::decode(&stream[start].payload)?;
    let mut schedule = SnapshotSchedule::default();
    schedule.snapshot_taken(stream[start].payload.len());
    for entry in &stream[start + 1..] {
        let record = ChangeRecord::decode(&entry.payload)?;
        record.apply(&mut table).map_err(|e| format!("replaying the topic table: {e}"))?;
        schedule.record_change(entry.payload.len());
    }
    Ok(Some((table, schedule)))
}

#[cfg(test)]
mod tests;
