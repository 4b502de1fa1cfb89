//! Partition groups' pieces that need no IO (docs/replication.md, step 3): the group id of a
//! (replica set, shard), the raft entry that carries one produce of one partition, and the
//! rule that applies each committed entry exactly once across restarts (the "applying"
//! marker).
//!
//! Runs on the shard that hosts the group (shard s of every replica node). Not a hot path
//! by itself: `ProduceEntry::encode` copies the produced batches once into the entry
//! (raft-rs owns its entries' bytes), `decode` slices them out without copying.
//!
//! Group ids: FNV-1a (64 bits, a fixed function: `std`'s `DefaultHasher` may change
//! between Rust releases, and every node must compute the same id) over the shard and
//! the sorted, deduplicated replica node ids, with the top bit set. So an id is never 0
//! (`METADATA_GROUP`), is the same on every node, and two different (replica set, shard)
//! pairs can collide only by a hash collision, which `check_group_ids` finds (the caller
//! refuses the placement that makes one: an error, never a panic).
//!
//! Produce entry (version 1, little-endian except the Kafka batches, which are stored as
//! produced; lengths checked against what remains before anything is sliced, trailing
//! bytes refused):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 1, a produce) |
//! | 16 | topic id (the same on every node, unlike the node-local `PartitionId`) |
//! | 4 | partition index (i32) |
//! | 8 | the topic table version the leader validated against (u64): a replica applies the
//! |   | entry only once its own table reached it, so a topic it has not heard of yet is
//! |   | waited for, not skipped |
//! | 8 | the leader's wall clock in ms, for LogAppendTime topics (every replica stamps it) |
//! | 4 | length n of the record batches |
//! | n | the validated record batches, as produced |
//!
//! Compaction entry (version 1, kind 2; docs/replication.md, "Log compaction"): proposed
//! by the leader, applied by every replica in index order, each then compacting its own
//! log up to `to`:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 2, a compaction) |
//! | 8 | `to`: the last index to fold away (u64), below the entry's own index |
//!
//! Offsets entry (version 1, kind 3; docs/replication.md, "Consumer-group offsets"): one
//! change to the committed offsets of the consumer groups the shard coordinates, proposed
//! by the group's coordinator (the leader of the shard's group of every node), applied by
//! every replica to its own copy:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 3, committed offsets) |
//! | n | the change, as the `GroupOffsets` stream stores it (`group::offsets`: its own |
//! |   | version byte, then the rest of the entry) |
//!
//! ISR entry (version 1, kind 4; docs/replication.md, "The ISR"): the replicas the leader
//! found caught up, which every replica's Metadata shows from when it applies the entry:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 4, the ISR) |
//! | 4 x n | the in-sync node ids (u32 each), ascending, at least one |
//!
//! Log start entry (version 1, kind 5; docs/replication.md, "DeleteRecords"): the
//! partition's log start moves to `offset` (DeleteRecords), proposed by the leader,
//! applied by every replica to its own copy, so the records stay deleted on whichever
//! replica leads next:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 5, a log start) |
//! | 16 | topic id |
//! | 4 | partition index (i32) |
//! | 8 | the topic table version the leader validated against (u64), as a produce's |
//! | 8 | the new log start offset (i64, at least 0, at most the leader's high watermark) |
//!
//! Transaction marker entry (version 1, kind 6; docs/transactions.md, "Replicated
//! partitions"): the transaction coordinator's COMMIT or ABORT of one producer's
//! transaction in one partition, proposed by the partition's leader, applied by every
//! replica (the control batch appended at its next offset, the partition's transaction
//! state updated), so every replica holds the same markers and the same LSO and aborted
//! list:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 6, a transaction marker) |
//! | 16 | topic id |
//! | 4 | partition index (i32) |
//! | 8 | the topic table version the leader validated against (u64), as a produce's |
//! | 8 | producer id (i64) |
//! | 2 | producer epoch (i16) |
//! | 1 | 1: COMMIT, 0: ABORT (any other byte is refused) |
//! | 8 | the leader's wall clock in ms: the control batch's timestamps on every replica |
//!
//! Transaction state entry (version 1, kind 7; docs/transactions.md, "Replicated
//! partitions", phase 2b): one change to the state of the transaction coordinator of the
//! shard's transactional ids (a `Txn` transition, a TxnOffsetCommit's pending offsets, their
//! resolution), proposed by the coordinator (the leader of the shard's group of every node,
//! as for consumer-group offsets), applied by every replica to its own copy:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (= 7, transaction state) |
//! | 4 | length n of the change (u32, at least 1) |
//! | n | the change, as the `Transactions` stream stores it (`txn::log`: its own version |
//! |   | byte, then the rest of the entry) |
//!
//! Invariants:
//! 1. `ProduceEntry::decode(encode(e)) == e`, and likewise for every entry kind; `decode`
//!    never panics on any bytes.
//! 2. `partition_group_id` never returns 0, and depends only on the replica *set* and the
//!    shard (not the replicas' order).
//! 3. Exactly once across restarts (`applied_before_restart`): before entry N of a group is
//!    applied, an `ApplyingMarker` (group, N, partition p, p's next offset o before the
//!    apply) is appended to the shard log, then p's batches. The log recovers a prefix,
//!    so after a restart the group's last recovered marker (N, p, o) says: entries below N
//!    applied; N applied iff p's recovered next offset is past o; entries above N not.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use shardlog_storage::{Offset, PartitionId};

/// Version byte of a produce entry.
pub const ENTRY_VERSION: u8 = 1;
/// Kind byte of an entry carrying one produce of one partition.
const KIND_PRODUCE: u8 = 1;
/// Kind byte of a compaction entry.
const KIND_COMPACT: u8 = 2;
/// Kind byte of an entry carrying a change to committed consumer-group offsets.
const KIND_OFFSETS: u8 = 3;
/// Kind byte of an entry carrying the group's in-sync replicas.
const KIND_ISR: u8 = 4;
/// Kind byte of an entry moving a partition's log start (DeleteRecords).
const KIND_LOG_START: u8 = 5;
/// Kind byte of an entry carrying a transaction's COMMIT/ABORT marker in one partition.
const KIND_TXN_MARKER: u8 = 6;
/// Kind byte of an entry carrying a change to the transaction coordinator's state.
const KIND_TXN_STATE: u8 = 7;
const ENTRY_HEADER_BYTES: usize = 1 + 1 + 16 + 4 + 8 + 8 + 4;
const COMPACT_ENTRY_BYTES: usize = 1 + 1 + 8;
const LOG_START_ENTRY_BYTES: usize = 1 + 1 + 16 + 4 + 8 + 8;
const TXN_MARKER_ENTRY_BYTES: usize = 1 + 1 + 16 + 4 + 8 + 8 + 2 + 1 + 8;

/// The raft group of a (replica set, shard) (module docs; invariant 2). `replicas` in any
/// order; duplicates count once.
pub fn partition_group_id(replicas: &[u32], shard: u32) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut nodes = replicas.to_vec();
    nodes.sort_unstable();
    nodes.dedup();
    let mut hash = FNV_OFFSET;
    let mut eat = |bytes: [u8; 4]| {
        for byte in bytes {
            hash ^= byte as u64;
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    };
    eat(shard.to_le_bytes());
    eat((nodes.len() as u32).to_le_bytes());
    for node in nodes {
        eat(node.to_le_bytes());
    }
    hash | 1 << 63
}

/// The preferred leader of the group of (`replicas`, `shard`) on a cluster of `nodes`
/// (sorted): the node whose window of consecutive nodes is the set, as
/// `TopicTable::placement` chose it (so the partitions' first replica, Kafka's preferred
/// leader), and for a set of every node, where every window is the set, node `shard % n`,
/// so the groups of a node's shards spread their leaders over the nodes. A set that is no
/// window (not placed by this version) prefers its lowest node.
pub fn preferred_leader(replicas: &[u32], shard: u32, nodes: &[u32]) -> u32 {
    let mut set = replicas.to_vec();
    set.sort_unstable();
    set.dedup();
    let n = nodes.len();
    if set.len() >= n && n > 0 {
        return nodes[shard as usize % n];
    }
    let window = |first: usize| {
        let mut window: Vec<u32> = (0..set.len()).map(|k| nodes[(first + k) % n]).collect();
        window.sort_unstable();
        window
    };
    let start = (0..n).find(|first| window(*first) == set);
    start.map_or(set[0], |first| nodes[first])
}

/// Two (replica set, shard) pairs whose group ids collide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupIdCollision {
    pub group: u64,
    pub first: (Vec<u32>, u32),
    pub second: (Vec<u32>, u32),
}

impl fmt::Display for GroupIdCollision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replica sets {:?} on shard {} and {:?} on shard {} would share raft group id {:#x}",
            self.first.0, self.first.1, self.second.0, self.second.1, self.group
        )
    }
}

/// Checks that distinct (replica set, shard) pairs have distinct group ids (module docs).
pub fn check_group_ids<'a>(
    placements: impl IntoIterator<Item = (&'a [u32], u32)>,
) -> Result<(), GroupIdCollision> {
    check_ids_with(placements, partition_group_id)
}

/// `check_group_ids` with the id function as a parameter (a test forges collisions).
fn check_ids_with<'a>(
    placements: impl IntoIterator<Item = (&'a [u32], u32)>,
    id_of: impl Fn(&[u32], u32) -> u64,
) -> Result<(), GroupIdCollision> {
    let mut seen: BTreeMap<u64, (Vec<u32>, u32)> = BTreeMap::new();
    for (replicas, shard) in placements {
        let mut set = replicas.to_vec();
        set.sort_unstable();
        set.dedup();
        let group = id_of(&set, shard);
        match seen.get(&group) {
            Some(first) if *first != (set.clone(), shard) => {
                let (first, second) = (first.clone(), (set, shard));
                return Err(GroupIdCollision { group, first, second });
            }
            Some(_) => {}
            None => {
                seen.insert(group, (set, shard));
            }
        }
    }
    Ok(())
}

/// One produce of one partition, as a raft entry (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceEntry {
    pub topic_id: [u8; 16],
    pub partition: i32,
    /// The version of the leader's topic table when it validated the produce.
    pub table_version: u64,
    /// The leader's wall clock when it proposed, in ms: the LogAppendTime every replica
    /// stamps on the batches of a topic that asks for it.
    pub log_append_time_ms: i64,
    /// The record batches, validated by the leader, as produced.
    pub records: Bytes,
}

/// A partition group's committed entry with data (raft's own empty entries aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionEntry {
    Produce(ProduceEntry),
    /// Compact the log up to this index (module docs).
    Compact {
        to: u64,
    },
    /// A change to committed consumer-group offsets, as the `GroupOffsets` stream stores
    /// it (module docs); decoded by the group coordinator.
    Offsets(Bytes),
    /// The in-sync replicas' node ids, ascending.
    Isr(Vec<u32>),
    LogStart(LogStartEntry),
    TxnMarker(TxnMarkerEntry),
    /// A change to the transaction coordinator's state, as the `Transactions` stream stores
    /// it (module docs); decoded by the coordinator.
    TxnState(Bytes),
}

/// A transaction's COMMIT/ABORT marker in one partition (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnMarkerEntry {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub table_version: u64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// The leader's wall clock when it proposed: the control batch's timestamps.
    pub timestamp_ms: i64,
}

impl TxnMarkerEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TXN_MARKER_ENTRY_BYTES);
        out.extend_from_slice(&[ENTRY_VERSION, KIND_TXN_MARKER]);
        out.extend_from_slice(&self.topic_id);
        out.extend_from_slice(&self.partition.to_le_bytes());
        out.extend_from_slice(&self.table_version.to_le_bytes());
        out.extend_from_slice(&self.producer_id.to_le_bytes());
        out.extend_from_slice(&self.producer_epoch.to_le_bytes());
        out.push(self.commit as u8);
        out.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        out
    }

    /// The fields after the version and kind bytes (exactly `TXN_MARKER_ENTRY_BYTES - 2`).
    fn decode_fields(fields: &[u8]) -> Result<PartitionEntry, EntryError> {
        exact_len(fields.len() + 2, TXN_MARKER_ENTRY_BYTES)?;
        let commit = match fields[38] {
            0 => false,
            1 => true,
            other => return Err(EntryError::BadField("commit", other)),
        };
        Ok(PartitionEntry::TxnMarker(TxnMarkerEntry {
            topic_id: fields[..16].try_into().expect("16 bytes"),
            partition: i32::from_le_bytes(fields[16..20].try_into().expect("4 bytes")),
            table_version: u64::from_le_bytes(fields[20..28].try_into().expect("8 bytes")),
            producer_id: i64::from_le_bytes(fields[28..36].try_into().expect("8 bytes")),
            producer_epoch: i16::from_le_bytes(fields[36..38].try_into().expect("2 bytes")),
            commit,
            timestamp_ms: i64::from_le_bytes(fields[39..47].try_into().expect("8 bytes")),
        }))
    }
}

/// A partition's log start moved by DeleteRecords (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStartEntry {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub table_version: u64,
    pub offset: Offset,
}

impl LogStartEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LOG_START_ENTRY_BYTES);
        out.extend_from_slice(&[ENTRY_VERSION, KIND_LOG_START]);
        out.extend_from_slice(&self.topic_id);
        out.extend_from_slice(&self.partition.to_le_bytes());
        out.extend_from_slice(&self.table_version.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out
    }

    /// The fields after the version and kind bytes (exactly `LOG_START_ENTRY_BYTES - 2`).
    fn decode_fields(fields: &[u8]) -> Result<PartitionEntry, EntryError> {
        exact_len(fields.len() + 2, LOG_START_ENTRY_BYTES)?;
        Ok(PartitionEntry::LogStart(LogStartEntry {
            topic_id: fields[..16].try_into().expect("16 bytes"),
            partition: i32::from_le_bytes(fields[16..20].try_into().expect("4 bytes")),
            table_version: u64::from_le_bytes(fields[20..28].try_into().expect("8 bytes")),
            offset: i64::from_le_bytes(fields[28..36].try_into().expect("8 bytes")),
        }))
    }
}

impl PartitionEntry {
    /// The bytes of a compaction entry up to `to`.
    pub fn encode_compact(to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(COMPACT_ENTRY_BYTES);
        out.extend_from_slice(&[ENTRY_VERSION, KIND_COMPACT]);
        out.extend_from_slice(&to.to_le_bytes());
        out
    }

    /// The bytes of an offsets entry carrying `change` (a `GroupOffsets` entry's payload).
    pub fn encode_offsets(change: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + change.len());
        out.extend_from_slice(&[ENTRY_VERSION, KIND_OFFSETS]);
        out.extend_from_slice(change);
        out
    }

    /// The bytes of a transaction state entry carrying `change` (a `Transactions` entry's
    /// payload, not empty).
    pub fn encode_txn_state(change: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + change.len());
        out.extend_from_slice(&[ENTRY_VERSION, KIND_TXN_STATE]);
        out.extend_from_slice(&(change.len() as u32).to_le_bytes());
        out.extend_from_slice(change);
        out
    }

    /// The bytes of an ISR entry naming `nodes` (ascending, at least one).
    pub fn encode_isr(nodes: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + 4 * nodes.len());
        out.extend_from_slice(&[ENTRY_VERSION, KIND_ISR]);
        nodes.iter().for_each(|n| out.extend_from_slice(&n.to_le_bytes()));
        out
    }

    /// The entry of `bytes`, whichever kind (invariant 1: never panics).
    pub fn decode(bytes: &Bytes) -> Result<PartitionEntry, EntryError> {
        if bytes.len() < 2 {
            return Err(EntryError::Truncated);
        }
        if bytes[0] != ENTRY_VERSION {
            return Err(EntryError::UnknownVersion(bytes[0]));
        }
        match bytes[1] {
            KIND_PRODUCE => return ProduceEntry::decode(bytes).map(PartitionEntry::Produce),
            KIND_COMPACT => {}
            KIND_OFFSETS if bytes.len() > 2 => {
                return Ok(PartitionEntry::Offsets(bytes.slice(2..)))
            }
            KIND_OFFSETS => return Err(EntryError::Truncated),
            KIND_ISR => return decode_isr(&bytes[2..]),
            KIND_LOG_START => return LogStartEntry::decode_fields(&bytes[2..]),
            KIND_TXN_MARKER => return TxnMarkerEntry::decode_fields(&bytes[2..]),
            KIND_TXN_STATE => return decode_txn_state(bytes),
            other => return Err(EntryError::UnknownKind(other)),
        }
        exact_len(bytes.len(), COMPACT_ENTRY_BYTES)?;
        let to = u64::from_le_bytes(bytes[2..].try_into().expect("8 bytes"));
        Ok(PartitionEntry::Compact { to })
    }
}

/// An entry of a fixed size: `len` bytes where `expected` are due.
fn exact_len(len: usize, expected: usize) -> Result<(), EntryError> {
    match len.cmp(&expected) {
        std::cmp::Ordering::Less => Err(EntryError::Truncated),
        std::cmp::Ordering::Greater => Err(EntryError::Trailing(len - expected)),
        std::cmp::Ordering::Equal => Ok(()),
    }
}

/// A transaction state entry: its length, then exactly that many bytes, at least one.
fn decode_txn_state(bytes: &Bytes) -> Result<PartitionEntry, EntryError> {
    let Some(length) = bytes.get(2..6) else { return Err(EntryError::Truncated) };
    let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
    if length == 0 {
        return Err(EntryError::Truncated);
    }
    exact_len(bytes.len(), 6 + length)?;
    Ok(PartitionEntry::TxnState(bytes.slice(6..)))
}

fn decode_isr(nodes: &[u8]) -> Result<PartitionEntry, EntryError> {
    if nodes.len() < 4 {
        return Err(EntryError::Truncated);
    }
    if !nodes.len().is_multiple_of(4) {
        return Err(EntryError::Trailing(nodes.len() % 4));
    }
    let nodes = nodes.chunks_exact(4).map(|n| u32::from_le_bytes(n.try_into().expect("4 bytes")));
    Ok(PartitionEntry::Isr(nodes.collect()))
}

/// Why an entry's bytes are not a produce entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// It ends before a field it announces.
    Truncated,
    UnknownVersion(u8),
    UnknownKind(u8),
    /// Bytes after the record batches.
    Trailing(usize),
    /// A field whose byte has no meaning (the field's name, the byte).
    BadField(&'static str, u8),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "partition group entry: {self:?}")
    }
}

impl std::error::Error for EntryError {}

impl ProduceEntry {
    /// The entry's bytes (module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENTRY_HEADER_BYTES + self.records.len());
        out.push(ENTRY_VERSION);
        out.push(KIND_PRODUCE);
        out.extend_from_slice(&self.topic_id);
        out.extend_from_slice(&self.partition.to_le_bytes());
        out.extend_from_slice(&self.table_version.to_le_bytes());
        out.extend_from_slice(&self.log_append_time_ms.to_le_bytes());
        out.extend_from_slice(&(self.records.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.records);
        out
    }

    /// The entry of `bytes` (invariant 1: never panics).
    pub fn decode(bytes: &Bytes) -> Result<ProduceEntry, EntryError> {
        if bytes.len() < ENTRY_HEADER_BYTES {
            return Err(EntryError::Truncated);
        }
        match bytes[0] {
            ENTRY_VERSION => {}
            other => return Err(EntryError::UnknownVersion(other)),
        }
        match bytes[1] {
            KIND_PRODUCE => {}
            other => return Err(EntryError::UnknownKind(other)),
        }
        let field = |at: usize, len: usize| &bytes[at..at + len];
        let topic_id: [u8; 16] = field(2, 16).try_into().expect("16 bytes");
        let partition = i32::from_le_bytes(field(18, 4).try_into().expect("4 bytes"));
        let table_version = u64::from_le_bytes(field(22, 8).try_into().expect("8 bytes"));
        let log_append_time_ms = i64::from_le_bytes(field(30, 8).try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(field(38, 4).try_into().expect("4 bytes")) as usize;
        let remaining = bytes.len() - ENTRY_HEADER_BYTES;
        if len > remaining {
            return Err(EntryError::Truncated);
        }
        if len < remaining {
            return Err(EntryError::Trailing(remaining - len));
        }
        let records = bytes.slice(ENTRY_HEADER_BYTES..);
        Ok(ProduceEntry { topic_id, partition, table_version, log_append_time_ms, records })
    }
}

/// Written to the shard log before entry `index` of `group` is applied to `partition`,
/// whose next offset was `next_offset` (invariant 3). Node-local: `partition` is this
/// node's log id of the partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplyingMarker {
    pub group: u64,
    pub index: u64,
    pub partition: PartitionId,
    pub next_offset: Offset,
}

/// Whether entry `index` of a group was applied before the restart (invariant 3), from
/// the group's last recovered marker and `next_offset`, the recovered next offset of a
/// partition (`None`: the partition is gone here, so there is nothing left to apply to
/// it).
pub fn applied_before_restart(
    last: Option<&ApplyingMarker>,
    index: u64,
    next_offset: impl FnOnce(PartitionId) -> Option<Offset>,
) -> bool {
    let Some(marker) = last else { return false };
    match index.cmp(&marker.index) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        std::cmp::Ordering::Equal => {
            next_offset(marker.partition).is_none_or(|next| next > marker.next_offset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_preferred_leader_is_where_the_placement_starts_the_set_or_spread_by_shard() {
        let nodes = [1, 2, 3];
        assert_eq!(preferred_leader(&[1, 2], 0, &nodes), 1);
        assert_eq!(preferred_leader(&[3, 2], 5, &nodes), 2);
        assert_eq!(preferred_leader(&[1, 3], 0, &nodes), 3, "the window from 3 wraps to 1");
        for shard in 0..6 {
            assert_eq!(preferred_leader(&[3, 1, 2], shard, &nodes), nodes[shard as usize % 3]);
        }
        assert_eq!(preferred_leader(&[1, 3], 0, &[1, 2, 3, 4]), 1, "no window: the lowest");
        assert_eq!(preferred_leader(&[4, 1], 0, &[1, 2, 3, 4]), 4);
    }

    fn entry() -> ProduceEntry {
        ProduceEntry {
            topic_id: [7; 16],
            partition: 3,
            table_version: 11,
            log_append_time_ms: 1_700_000_000_123,
            records: Bytes::from_static(b"batches as produced"),
        }
    }

    #[test]
    fn a_produce_entry_round_trips_and_its_golden_header_holds() {
        let bytes = entry().encode();
        assert_eq!(&bytes[..2], &[1, 1]);
        assert_eq!(&bytes[2..18], &[7; 16]);
        assert_eq!(&bytes[18..22], &3i32.to_le_bytes());
        assert_eq!(&bytes[22..30], &11u64.to_le_bytes());
        assert_eq!(&bytes[38..42], &19u32.to_le_bytes());
        assert_eq!(ProduceEntry::decode(&Bytes::from(bytes)), Ok(entry()));
        let empty = ProduceEntry { records: Bytes::new(), ..entry() };
        assert_eq!(ProduceEntry::decode(&Bytes::from(empty.encode())), Ok(empty));
    }

    #[test]
    fn every_cut_of_an_entry_is_truncated_and_bad_fields_are_named() {
        let bytes = entry().encode();
        for cut in 0..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(ProduceEntry::decode(&cut), Err(EntryError::Truncated), "{}", cut.len());
        }
        let edited = |at: usize, value: u8| {
            let mut b = bytes.clone();
            b[at] = value;
            ProduceEntry::decode(&Bytes::from(b))
        };
        assert_eq!(edited(0, 2), Err(EntryError::UnknownVersion(2)));
        assert_eq!(edited(1, 0), Err(EntryError::UnknownKind(0)));
        assert_eq!(edited(38, 20), Err(EntryError::Truncated));
        assert_eq!(edited(38, 18), Err(EntryError::Trailing(1)));
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"xy");
        assert_eq!(ProduceEntry::decode(&Bytes::from(longer)), Err(EntryError::Trailing(2)));
    }

    #[test]
    fn a_compaction_entry_round_trips_and_its_cuts_are_named() {
        let bytes = PartitionEntry::encode_compact(0x0102_0304);
        assert_eq!(bytes, [1, 2, 4, 3, 2, 1, 0, 0, 0, 0]);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(PartitionEntry::Compact { to: 0x0102_0304 }));
        assert_cuts_truncated_and_a_byte_more_trailing(&bytes);
        let produce = Bytes::from(entry().encode());
        assert_eq!(PartitionEntry::decode(&produce), Ok(PartitionEntry::Produce(entry())));
        let mut unknown = bytes;
        unknown[1] = 8;
        assert_eq!(PartitionEntry::decode(&Bytes::from(unknown)), Err(EntryError::UnknownKind(8)));
    }

    #[test]
    fn a_log_start_entry_round_trips_and_its_cuts_are_named() {
        let entry = LogStartEntry {
            topic_id: [7; 16],
            partition: 0x0102,
            table_version: 3,
            offset: 0x0405,
        };
        let bytes = entry.encode();
        assert_eq!(bytes.len(), LOG_START_ENTRY_BYTES);
        assert_eq!(&bytes[..2], &[1, 5]);
        assert_eq!(&bytes[18..22], &[2, 1, 0, 0]);
        assert_eq!(&bytes[30..], &[5, 4, 0, 0, 0, 0, 0, 0]);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(PartitionEntry::LogStart(entry)));
        for cut in 2..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(PartitionEntry::decode(&cut), Err(EntryError::Truncated), "{}", cut.len());
        }
        let mut longer = bytes;
        longer.extend_from_slice(&[0, 0]);
        assert_eq!(PartitionEntry::decode(&Bytes::from(longer)), Err(EntryError::Trailing(2)));
    }

    fn txn_marker() -> TxnMarkerEntry {
        TxnMarkerEntry {
            topic_id: [7; 16],
            partition: 0x0102,
            table_version: 3,
            producer_id: 0x0a0b,
            producer_epoch: 0x0405,
            commit: true,
            timestamp_ms: 0x0607,
        }
    }

    #[test]
    fn a_txn_marker_entry_round_trips_its_golden_bytes_hold_and_its_cuts_are_named() {
        let bytes = txn_marker().encode();
        assert_eq!(bytes.len(), TXN_MARKER_ENTRY_BYTES);
        assert_eq!(&bytes[..2], &[1, 6]);
        assert_eq!(&bytes[2..18], &[7; 16]);
        assert_eq!(&bytes[18..22], &[2, 1, 0, 0]);
        assert_eq!(&bytes[22..30], &[3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[30..38], &[0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[38..40], &[5, 4]);
        assert_eq!(bytes[40], 1, "commit");
        assert_eq!(&bytes[41..], &[7, 6, 0, 0, 0, 0, 0, 0]);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(PartitionEntry::TxnMarker(txn_marker())));
        let abort = TxnMarkerEntry { commit: false, ..txn_marker() };
        let decoded = PartitionEntry::decode(&Bytes::from(abort.encode()));
        assert_eq!(decoded, Ok(PartitionEntry::TxnMarker(abort)));
        assert_cuts_truncated_and_a_byte_more_trailing(&bytes);
        let mut bad = bytes;
        bad[40] = 2;
        assert_eq!(
            PartitionEntry::decode(&Bytes::from(bad)),
            Err(EntryError::BadField("commit", 2))
        );
    }

    #[test]
    fn an_isr_entry_round_trips_and_its_cuts_are_named() {
        let bytes = PartitionEntry::encode_isr(&[1, 0x0302]);
        assert_eq!(bytes, [1, 4, 1, 0, 0, 0, 2, 3, 0, 0]);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(PartitionEntry::Isr(vec![1, 0x0302])));
        for cut in [2, 3, 4, 5] {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(PartitionEntry::decode(&cut), Err(EntryError::Truncated), "{}", cut.len());
        }
        let cut = Bytes::copy_from_slice(&bytes[..7]);
        assert_eq!(PartitionEntry::decode(&cut), Err(EntryError::Trailing(1)));
    }

    #[test]
    fn an_offsets_entry_carries_its_change_whole_and_an_empty_one_is_truncated() {
        let bytes = PartitionEntry::encode_offsets(b"change");
        assert_eq!(&bytes[..2], &[1, 3]);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes));
        assert_eq!(decoded, Ok(PartitionEntry::Offsets(Bytes::from_static(b"change"))));
        let empty = Bytes::from(PartitionEntry::encode_offsets(b""));
        assert_eq!(PartitionEntry::decode(&empty), Err(EntryError::Truncated));
    }

    /// Every cut of `bytes` decodes to `Truncated`, and one byte more to `Trailing(1)`.
    fn assert_cuts_truncated_and_a_byte_more_trailing(bytes: &[u8]) {
        for cut in 0..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(PartitionEntry::decode(&cut), Err(EntryError::Truncated), "{}", cut.len());
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(PartitionEntry::decode(&Bytes::from(longer)), Err(EntryError::Trailing(1)));
    }

    #[test]
    fn a_txn_state_entry_round_trips_and_every_cut_is_truncated() {
        let bytes = PartitionEntry::encode_txn_state(b"state");
        assert_eq!(bytes, [1, 7, 5, 0, 0, 0, b's', b't', b'a', b't', b'e']);
        let decoded = PartitionEntry::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(PartitionEntry::TxnState(Bytes::from_static(b"state"))));
        assert_cuts_truncated_and_a_byte_more_trailing(&bytes);
        let empty = Bytes::from(PartitionEntry::encode_txn_state(b""));
        assert_eq!(PartitionEntry::decode(&empty), Err(EntryError::Truncated));
    }

    #[test]
    fn group_ids_depend_on_the_set_and_the_shard_never_on_order_and_are_never_zero() {
        let id = partition_group_id(&[3, 1, 2], 0);
        assert_eq!(id, partition_group_id(&[1, 2, 3], 0));
        assert_eq!(id, partition_group_id(&[2, 3, 1, 3], 0));
        assert_ne!(id, partition_group_id(&[1, 2, 3], 1));
        assert_ne!(id, partition_group_id(&[1, 2], 0));
        assert_ne!(id, crate::metadata_group::METADATA_GROUP);
        // Every pair and triple of 40 nodes on 8 shards: distinct ids, none 0.
        let mut sets = Vec::new();
        for a in 0..40u32 {
            for b in a + 1..40 {
                sets.push(vec![a, b]);
                for c in b + 1..40 {
                    sets.push(vec![a, b, c]);
                }
            }
        }
        let placements = sets.iter().flat_map(|s| (0..8).map(move |shard| (&s[..], shard)));
        assert_eq!(check_group_ids(placements), Ok(()));
    }

    #[test]
    fn a_collision_of_group_ids_is_found_and_named() {
        // A repeated (set, shard), in any order, is the same group, not a collision.
        let same = [(&[1u32, 2, 3][..], 0), (&[3, 2, 1][..], 0), (&[1, 2, 3][..], 1)];
        assert_eq!(check_group_ids(same), Ok(()));
        // No collision of FNV-1a is known among small sets, so one is forged: an id of the
        // shard alone makes two sets on shard 0 collide.
        let placements = [(&[1u32, 2][..], 0), (&[2, 1][..], 0), (&[4, 3][..], 0)];
        let collision = check_ids_with(placements, |_, shard| shard as u64 + 5).unwrap_err();
        let expected =
            GroupIdCollision { group: 5, first: (vec![1, 2], 0), second: (vec![3, 4], 0) };
        assert_eq!(collision, expected);
        let message = collision.to_string();
        assert!(message.contains("[1, 2] on shard 0") && message.contains("0x5"), "{message}");
    }

    #[test]
    fn the_last_marker_says_which_entries_applied_before_a_restart() {
        let p = PartitionId::new(4, 1);
        let marker = ApplyingMarker { group: 9, index: 10, partition: p, next_offset: 100 };
        let at = |next: Option<Offset>| move |_: PartitionId| next;
        // No marker: nothing applied (a fresh group, or none of its entries applied).
        assert!(!applied_before_restart(None, 1, at(Some(0))));
        // Below the marker: applied, whatever the partition holds.
        assert!(applied_before_restart(Some(&marker), 9, at(Some(100))));
        assert!(applied_before_restart(Some(&marker), 1, at(Some(0))));
        // The marker's own entry: applied iff its batches were recovered.
        assert!(!applied_before_restart(Some(&marker), 10, at(Some(100))));
        assert!(applied_before_restart(Some(&marker), 10, at(Some(101))));
        // ... and nothing to apply when the partition is gone here.
        assert!(applied_before_restart(Some(&marker), 10, at(None)));
        // Above it: not applied.
        assert!(!applied_before_restart(Some(&marker), 11, at(Some(500))));
    }

    proptest! {
        #[test]
        fn any_produce_entry_round_trips(
            topic_id in any::<[u8; 16]>(),
            partition in any::<i32>(),
            table_version in any::<u64>(),
            log_append_time_ms in any::<i64>(),
            records in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let records = records.into();
            let entry =
                ProduceEntry { topic_id, partition, table_version, log_append_time_ms, records };
            prop_assert_eq!(ProduceEntry::decode(&Bytes::from(entry.encode())), Ok(entry));
            let log_start = LogStartEntry { topic_id, partition, table_version, offset: log_append_time_ms };
            let decoded = PartitionEntry::decode(&Bytes::from(log_start.encode()));
            prop_assert_eq!(decoded, Ok(PartitionEntry::LogStart(log_start)));
            let marker = TxnMarkerEntry {
                topic_id,
                partition,
                table_version,
                producer_id: log_append_time_ms,
                producer_epoch: partition as i16,
                commit: partition % 2 == 0,
                timestamp_ms: log_append_time_ms,
            };
            let decoded = PartitionEntry::decode(&Bytes::from(marker.encode()));
            prop_assert_eq!(decoded, Ok(PartitionEntry::TxnMarker(marker)));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            let bytes = Bytes::from(bytes);
            let _ = ProduceEntry::decode(&bytes);
            let _ = PartitionEntry::decode(&bytes);
        }
    }
}
