//! A partition group's raft snapshot data: a small manifest, not the records
//! (docs/replication.md, "Partition snapshots").
//!
//! The leader of a partition group sends a voter its log was compacted past a `MsgSnapshot`
//! whose data is a `SnapshotManifest`: the raft index A its state reflects (the leader's
//! applied index, at or above the snapshot point), and per partition of the group what a
//! replica that applied every entry up to A holds: the log start and next offset, the
//! idempotent producers' state and the leader-epoch cache; for a shard's offsets group
//! also the consumer-group offsets image (a `GroupOffsets` snapshot entry, its own
//! versioned encoding carried whole). The follower pulls the records named here from the
//! leader before it installs the manifest (`snapshot_transfer.rs`).
//!
//! Runs on the shard that hosts the group; not a hot path (one manifest per snapshot
//! sent). Decoding is total: any bytes give a manifest or a `ManifestError` naming the
//! field, never a panic, and no allocation larger than the input.
//!
//! Format (version 1, little-endian):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 8 | applied index A (u64) |
//! | 4 | partition count (u32), then per partition: |
//! | 16 | topic id |
//! | 4 | partition index (i32) |
//! | 8 | log start offset (i64, 0 <= log start <= next offset) |
//! | 8 | next offset as of A (i64) |
//! | 4 | producer count (u32), then per producer: id (i64), epoch (i16), last append ms |
//! |   | (i64), batch count (u8, at most `BATCHES_KEPT`), then per batch: first and last |
//! |   | sequence (i32 each), base and last offset (i64 each) |
//! | 4 | epoch count (u32), then per epoch: epoch (i32), start offset (i64); both strictly |
//! |   | increasing (`LeaderEpochs` invariant 1) |
//! | 4 | offsets image length n (u32, 0: none), then n bytes |
//!
//! Version 2 adds, per partition after its epochs, the partition's transaction state as a
//! replica that applied every entry up to A holds it (`txn::partition::PartitionTxns`;
//! docs/transactions.md, "Replicated partitions"):
//!
//! | size | field |
//! |---|---|
//! | 4 | open transaction count (u32), then per transaction: producer id (i64), first |
//! |   | offset (i64), marker offset (i64, -1: none yet); at most one without a marker per |
//! |   | producer (`PartitionTxns` invariant 1) |
//! | 4 | aborted transaction count (u32), then per transaction: producer id (i64), first |
//! |   | offset (i64), ABORT marker offset (i64); markers strictly increasing, each at or |
//! |   | after its first offset (`PartitionTxns` invariant 2) |
//!
//! Version 3 is version 2 followed by the transaction coordinator's image, for a shard's
//! offsets group (docs/transactions.md, "The coordinator fails over"): the metadata of every
//! transactional id the shard coordinates and the pending TxnOffsetCommit offsets, as a
//! replica that applied every entry up to A holds them (a `Transactions` stream
//! `Coordinator` entry, its own versioned encoding carried whole):
//!
//! | size | field |
//! |---|---|
//! | 4 | coordinator image length n (u32, at least 1), then n bytes |
//!
//! `encode` writes version 1 when no partition has transaction state and there is no
//! coordinator image, so a node of the version before reads the manifests of a cluster
//! that does not use transactions; version 2 when only partitions have transaction state;
//! `decode` reads all three (a version-1 partition has none, a version 1 or 2 manifest no
//! coordinator image).
//!
//! Invariants:
//! 1. `decode(encode(m)) == m` for every manifest `encode` accepts; `decode` never panics.
//! 2. A decoded manifest's fields are those an installer can use without a further check:
//!    log start within [0, next offset], epochs in order, at most `BATCHES_KEPT` batches
//!    per producer, transaction state that keeps `PartitionTxns`' invariants.
//! 3. `encode` refuses a manifest over `MAX_MANIFEST_BYTES` (it must fit one transport
//!    frame with the raft message around it) rather than let the transport drop it.

use std::fmt;

use bytes::Bytes;
use shardlog_storage::{EpochEntry, Offset};

use crate::producer::{BatchMeta, ProducerEntry, BATCHES_KEPT};
use crate::txn::partition::{AbortedTxn, OpenTxn, PartitionTxns};

/// Version byte of a manifest without transaction state (module docs).
pub const MANIFEST_VERSION: u8 = 1;
/// Version byte of a manifest with transaction state.
pub const MANIFEST_VERSION_TXNS: u8 = 2;
/// Version byte of a manifest with transaction state and a coordinator image.
pub const MANIFEST_VERSION_COORDINATOR: u8 = 3;

/// Largest manifest `encode` makes: a frame's body limit less room for the raft message's
/// own fields (invariant 3).
pub const MAX_MANIFEST_BYTES: usize = super::frame::MAX_BODY_BYTES as usize - (64 << 10);

const PARTITION_FIXED_BYTES: usize = 16 + 4 + 8 + 8;
const PRODUCER_FIXED_BYTES: usize = 8 + 2 + 8 + 1;
const BATCH_BYTES: usize = 4 + 4 + 8 + 8;
const EPOCH_BYTES: usize = 4 + 8;
const TXN_BYTES: usize = 8 + 8 + 8;

/// One partition as a replica holds it after applying every entry up to the manifest's
/// index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionManifest {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub log_start_offset: Offset,
    /// The partition's next offset as of the manifest's index: the end of what the
    /// follower pulls (later entries produce the records after it).
    pub next_offset: Offset,
    /// Idempotent producers' state: producer id -> state.
    pub producers: Vec<(i64, ProducerEntry)>,
    pub leader_epochs: Vec<EpochEntry>,
    /// The partition's transaction state (version 2; empty in version 1).
    pub transactions: PartitionTxns,
}

/// A partition group's snapshot data (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotManifest {
    /// The raft index A whose applied state this is: a follower that installs it skips
    /// the committed entries up to A.
    pub applied_index: u64,
    pub partitions: Vec<PartitionManifest>,
    /// The consumer-group offsets image (`OffsetLogEntry::Snapshot`), for the shard's
    /// offsets group; empty: none.
    pub offsets_image: Bytes,
    /// The transaction coordinator's image (`TxnLogEntry::Coordinator`), for the shard's
    /// offsets group (version 3); empty: none.
    pub coordinator_image: Bytes,
}

/// Why bytes are not a manifest, or a manifest cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// The bytes end inside this field.
    Truncated {
        field: &'static str,
    },
    UnknownVersion(u8),
    /// A field whose value breaks invariant 2.
    BadField {
        field: &'static str,
        value: i64,
    },
    /// Bytes after the offsets image.
    Trailing(usize),
    /// The encoding would be longer than `MAX_MANIFEST_BYTES` (invariant 3).
    TooLarge {
        bytes: usize,
        max: usize,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Truncated { field } => write!(f, "manifest truncated in {field}"),
            ManifestError::UnknownVersion(v) => write!(f, "manifest version {v} unknown"),
            ManifestError::BadField { field, value } => write!(f, "manifest {field} = {value}"),
            ManifestError::Trailing(n) => write!(f, "{n} bytes after the manifest"),
            ManifestError::TooLarge { bytes, max } => {
                write!(f, "manifest of {bytes} bytes, at most {max} fit a frame")
            }
        }
    }
}

impl std::error::Error for ManifestError {}

impl SnapshotManifest {
    /// The manifest's bytes (module docs), or `TooLarge` (invariant 3).
    pub fn encode(&self) -> Result<Vec<u8>, ManifestError> {
        let bytes = self.encoded_len();
        if bytes > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge { bytes, max: MAX_MANIFEST_BYTES });
        }
        let mut out = Vec::with_capacity(bytes);
        let with_txns = self.with_txns();
        out.push(match (with_txns, self.coordinator_image.is_empty()) {
            (_, false) => MANIFEST_VERSION_COORDINATOR,
            (true, true) => MANIFEST_VERSION_TXNS,
            (false, true) => MANIFEST_VERSION,
        });
        out.extend_from_slice(&self.applied_index.to_le_bytes());
        out.extend_from_slice(&(self.partitions.len() as u32).to_le_bytes());
        for p in &self.partitions {
            out.extend_from_slice(&p.topic_id);
            out.extend_from_slice(&p.partition.to_le_bytes());
            out.extend_from_slice(&p.log_start_offset.to_le_bytes());
            out.extend_from_slice(&p.next_offset.to_le_bytes());
            out.extend_from_slice(&(p.producers.len() as u32).to_le_bytes());
            for (id, producer) in &p.producers {
                encode_producer(&mut out, *id, producer);
            }
            out.extend_from_slice(&(p.leader_epochs.len() as u32).to_le_bytes());
            for epoch in &p.leader_epochs {
                out.extend_from_slice(&epoch.epoch.to_le_bytes());
                out.extend_from_slice(&epoch.start_offset.to_le_bytes());
            }
            if with_txns {
                encode_txns(&mut out, &p.transactions);
            }
        }
        out.extend_from_slice(&(self.offsets_image.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.offsets_image);
        if !self.coordinator_image.is_empty() {
            out.extend_from_slice(&(self.coordinator_image.len() as u32).to_le_bytes());
            out.extend_from_slice(&self.coordinator_image);
        }
        debug_assert_eq!(out.len(), bytes);
        Ok(out)
    }

    /// Whether the partitions' transaction state is written (version 2 or 3).
    fn with_txns(&self) -> bool {
        !self.coordinator_image.is_empty()
            || self.partitions.iter().any(|p| !p.transactions.is_empty())
    }

    fn encoded_len(&self) -> usize {
        let with_txns = self.with_txns();
        let partition = |p: &PartitionManifest| {
            let txns = match with_txns {
                true => {
                    4 + 4 + TXN_BYTES * (p.transactions.open.len() + p.transactions.aborted.len())
                }
                false => 0,
            };
            let producers: usize = p
                .producers
                .iter()
                .map(|(_, e)| {
                    PRODUCER_FIXED_BYTES + BATCH_BYTES * e.batches.len().min(BATCHES_KEPT)
                })
                .sum();
            PARTITION_FIXED_BYTES + 4 + producers + 4 + EPOCH_BYTES * p.leader_epochs.len() + txns
        };
        1 + 8
            + 4
            + self.partitions.iter().map(partition).sum::<usize>()
            + 4
            + self.offsets_image.len()
            + match self.coordinator_image.len() {
                0 => 0,
                n => 4 + n,
            }
    }

    /// The manifest of `bytes` (invariants 1 and 2).
    pub fn decode(bytes: &Bytes) -> Result<SnapshotManifest, ManifestError> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.array::<1>("version")?[0];
        if !(MANIFEST_VERSION..=MANIFEST_VERSION_COORDINATOR).contains(&version) {
            return Err(ManifestError::UnknownVersion(version));
        }
        let applied_index = u64::from_le_bytes(r.array("applied index")?);
        let count = r.count("partition count", PARTITION_FIXED_BYTES + 8)?;
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            let mut partition = decode_partition(&mut r)?;
            if version >= MANIFEST_VERSION_TXNS {
                partition.transactions = decode_txns(&mut r)?;
            }
            partitions.push(partition);
        }
        let image_len = u32::from_le_bytes(r.array("offsets image length")?) as usize;
        let offsets_image = r.slice("offsets image", image_len)?;
        let mut coordinator_image = Bytes::new();
        if version == MANIFEST_VERSION_COORDINATOR {
            let len = u32::from_le_bytes(r.array("coordinator image length")?) as usize;
            if len == 0 {
                return Err(ManifestError::BadField {
                    field: "coordinator image length",
                    value: 0,
                });
            }
            coordinator_image = r.slice("coordinator image", len)?;
        }
        match bytes.len() - r.at {
            0 => {
                Ok(SnapshotManifest { applied_index, partitions, offsets_image, coordinator_image })
            }
            trailing => Err(ManifestError::Trailing(trailing)),
        }
    }
}

fn encode_producer(out: &mut Vec<u8>, id: i64, producer: &ProducerEntry) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&producer.epoch.to_le_bytes());
    out.extend_from_slice(&producer.last_append_ms.to_le_bytes());
    // `ProducerStates` keeps at most BATCHES_KEPT; a longer list keeps its newest.
    let kept = &producer.batches[producer.batches.len().saturating_sub(BATCHES_KEPT)..];
    out.push(kept.len() as u8);
    for batch in kept {
        out.extend_from_slice(&batch.first_sequence.to_le_bytes());
        out.extend_from_slice(&batch.last_sequence.to_le_bytes());
        out.extend_from_slice(&batch.base_offset.to_le_bytes());
        out.extend_from_slice(&batch.last_offset.to_le_bytes());
    }
}

fn decode_partition(r: &mut Reader<'_>) -> Result<PartitionManifest, ManifestError> {
    let topic_id = r.array("topic id")?;
    let partition = i32::from_le_bytes(r.array("partition")?);
    let log_start_offset = i64::from_le_bytes(r.array("log start offset")?);
    let next_offset = i64::from_le_bytes(r.array("next offset")?);
    if log_start_offset < 0 {
        return Err(ManifestError::BadField { field: "log start offset", value: log_start_offset });
    }
    if next_offset < log_start_offset {
        return Err(ManifestError::BadField { field: "next offset", value: next_offset });
    }
    let count = r.count("producer count", PRODUCER_FIXED_BYTES)?;
    let mut producers = Vec::with_capacity(count);
    for _ in 0..count {
        producers.push(decode_producer(r)?);
    }
    let count = r.count("epoch count", EPOCH_BYTES)?;
    let mut leader_epochs: Vec<EpochEntry> = Vec::with_capacity(count);
    for _ in 0..count {
        let epoch = i32::from_le_bytes(r.array("epoch")?);
        let start_offset = i64::from_le_bytes(r.array("epoch start offset")?);
        if let Some(last) = leader_epochs.last() {
            if epoch <= last.epoch {
                return Err(ManifestError::BadField { field: "epoch", value: epoch as i64 });
            }
            if start_offset <= last.start_offset {
                let value = start_offset;
                return Err(ManifestError::BadField { field: "epoch start offset", value });
            }
        }
        leader_epochs.push(EpochEntry { epoch, start_offset });
    }
    Ok(PartitionManifest {
        topic_id,
        partition,
        log_start_offset,
        next_offset,
        producers,
        leader_epochs,
        transactions: PartitionTxns::default(),
    })
}

fn encode_txns(out: &mut Vec<u8>, txns: &PartitionTxns) {
    out.extend_from_slice(&(txns.open.len() as u32).to_le_bytes());
    for open in &txns.open {
        out.extend_from_slice(&open.producer_id.to_le_bytes());
        out.extend_from_slice(&open.first_offset.to_le_bytes());
        out.extend_from_slice(&open.marker.unwrap_or(-1).to_le_bytes());
    }
    out.extend_from_slice(&(txns.aborted.len() as u32).to_le_bytes());
    for aborted in &txns.aborted {
        out.extend_from_slice(&aborted.producer_id.to_le_bytes());
        out.extend_from_slice(&aborted.first_offset.to_le_bytes());
        out.extend_from_slice(&aborted.last_offset.to_le_bytes());
    }
}

/// A partition's transaction state (version 2), checked against `PartitionTxns`'
/// invariants 1 and 2 (invariant 2 here).
fn decode_txns(r: &mut Reader<'_>) -> Result<PartitionTxns, ManifestError> {
    let bad = |field, value| Err(ManifestError::BadField { field, value });
    let mut txns = PartitionTxns::default();
    let count = r.count("open transaction count", TXN_BYTES)?;
    for _ in 0..count {
        let producer_id = i64::from_le_bytes(r.array("open producer id")?);
        let first_offset = i64::from_le_bytes(r.array("open first offset")?);
        let marker = match i64::from_le_bytes(r.array("open marker offset")?) {
            -1 => None,
            m if m >= first_offset => Some(m),
            m => return bad("open marker offset", m),
        };
        let unmarked = |t: &OpenTxn| t.producer_id == producer_id && t.marker.is_none();
        if first_offset < 0 || (marker.is_none() && txns.open.iter().any(unmarked)) {
            return bad("open transaction", producer_id);
        }
        txns.open.push(OpenTxn { producer_id, first_offset, marker });
    }
    let count = r.count("aborted transaction count", TXN_BYTES)?;
    for _ in 0..count {
        let producer_id = i64::from_le_bytes(r.array("aborted producer id")?);
        let first_offset = i64::from_le_bytes(r.array("aborted first offset")?);
        let last_offset = i64::from_le_bytes(r.array("aborted marker offset")?);
        if first_offset < 0 || last_offset < first_offset {
            return bad("aborted first offset", first_offset);
        }
        if txns.aborted.last().is_some_and(|a| a.last_offset >= last_offset) {
            return bad("aborted marker offset", last_offset);
        }
        txns.aborted.push(AbortedTxn { producer_id, first_offset, last_offset });
    }
    Ok(txns)
}

fn decode_producer(r: &mut Reader<'_>) -> Result<(i64, ProducerEntry), ManifestError> {
    let id = i64::from_le_bytes(r.array("producer id")?);
    let epoch = i16::from_le_bytes(r.array("producer epoch")?);
    let last_append_ms = i64::from_le_bytes(r.array("last append ms")?);
    let count = r.array::<1>("batch count")?[0] as usize;
    if count > BATCHES_KEPT {
        return Err(ManifestError::BadField { field: "batch count", value: count as i64 });
    }
    let mut batches = Vec::with_capacity(count);
    for _ in 0..count {
        batches.push(BatchMeta {
            first_sequence: i32::from_le_bytes(r.array("first sequence")?),
            last_sequence: i32::from_le_bytes(r.array("last sequence")?),
            base_offset: i64::from_le_bytes(r.array("batch base offset")?),
            last_offset: i64::from_le_bytes(r.array("batch last offset")?),
        });
    }
    Ok((id, ProducerEntry { epoch, batches, last_append_ms }))
}

/// Reads fields in order, each checked against what remains.
struct Reader<'a> {
    bytes: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ManifestError> {
        let end = self.at.checked_add(N).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(ManifestError::Truncated { field })?;
        let value = self.bytes[self.at..end].try_into().expect("N bytes");
        self.at = end;
        Ok(value)
    }

    fn slice(&mut self, field: &'static str, len: usize) -> Result<Bytes, ManifestError> {
        let end = self.at.checked_add(len).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(ManifestError::Truncated { field })?;
        let value = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(value)
    }

    /// A count of items of at least `item_bytes` each: one the remaining bytes cannot hold
    /// is truncated before anything is allocated for it.
    fn count(&mut self, field: &'static str, item_bytes: usize) -> Result<usize, ManifestError> {
        let count = u32::from_le_bytes(self.array(field)?) as usize;
        if count.saturating_mul(item_bytes) > self.bytes.len() - self.at {
            return Err(ManifestError::Truncated { field });
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn batch(first_sequence: i32, base_offset: Offset) -> BatchMeta {
        BatchMeta {
            first_sequence,
            last_sequence: first_sequence + 1,
            base_offset,
            last_offset: base_offset + 1,
        }
    }

    fn manifest() -> SnapshotManifest {
        let producer = ProducerEntry {
            epoch: 3,
            batches: vec![batch(0, 40), batch(2, 42)],
            last_append_ms: 1_700_000_000_000,
        };
        SnapshotManifest {
            applied_index: 0x0102_0304,
            partitions: vec![
                PartitionManifest {
                    topic_id: [7; 16],
                    partition: 1,
                    log_start_offset: 10,
                    next_offset: 44,
                    producers: vec![(99, producer)],
                    leader_epochs: vec![
                        EpochEntry { epoch: 1, start_offset: 10 },
                        EpochEntry { epoch: 4, start_offset: 30 },
                    ],
                    transactions: PartitionTxns::default(),
                },
                PartitionManifest {
                    topic_id: [8; 16],
                    partition: 0,
                    log_start_offset: 0,
                    next_offset: 0,
                    producers: vec![],
                    leader_epochs: vec![],
                    transactions: PartitionTxns::default(),
                },
            ],
            offsets_image: Bytes::from_static(b"an offsets snapshot entry"),
            coordinator_image: Bytes::new(),
        }
    }

    #[test]
    fn a_manifest_round_trips_and_its_golden_header_holds() {
        let bytes = manifest().encode().unwrap();
        assert_eq!(bytes[0], MANIFEST_VERSION);
        assert_eq!(&bytes[1..9], &0x0102_0304u64.to_le_bytes());
        assert_eq!(&bytes[9..13], &2u32.to_le_bytes());
        assert_eq!(&bytes[13..29], &[7; 16]);
        assert_eq!(&bytes[29..33], &1i32.to_le_bytes());
        assert_eq!(&bytes[33..41], &10i64.to_le_bytes());
        assert_eq!(&bytes[41..49], &44i64.to_le_bytes());
        assert_eq!(SnapshotManifest::decode(&Bytes::from(bytes)), Ok(manifest()));
        let empty = SnapshotManifest {
            applied_index: 0,
            partitions: vec![],
            offsets_image: Bytes::new(),
            coordinator_image: Bytes::new(),
        };
        let bytes = empty.encode().unwrap();
        assert_eq!(bytes.len(), 1 + 8 + 4 + 4);
        assert_eq!(SnapshotManifest::decode(&Bytes::from(bytes)), Ok(empty));
    }

    #[test]
    fn a_coordinator_image_makes_version_3_whose_every_cut_is_truncated() {
        let m = SnapshotManifest {
            coordinator_image: Bytes::from_static(b"a coordinator entry"),
            ..manifest()
        };
        let bytes = m.encode().unwrap();
        assert_eq!(bytes[0], MANIFEST_VERSION_COORDINATOR);
        assert_eq!(&bytes[bytes.len() - 19 - 4..bytes.len() - 19], &19u32.to_le_bytes());
        assert_eq!(SnapshotManifest::decode(&Bytes::from(bytes.clone())), Ok(m));
        for cut in 0..bytes.len() {
            let decoded = SnapshotManifest::decode(&Bytes::copy_from_slice(&bytes[..cut]));
            assert!(matches!(decoded, Err(ManifestError::Truncated { .. })), "{cut}: {decoded:?}");
        }
        // An empty image is written as none (version 2 or 1), never as a zero length.
        let mut zero = bytes[..bytes.len() - 19].to_vec();
        let at = zero.len() - 4;
        zero[at..].copy_from_slice(&0u32.to_le_bytes());
        let refused = SnapshotManifest::decode(&Bytes::from(zero));
        let field = "coordinator image length";
        assert_eq!(refused, Err(ManifestError::BadField { field, value: 0 }));
    }

    #[test]
    fn every_cut_of_a_manifest_is_truncated() {
        let bytes = manifest().encode().unwrap();
        for cut in 0..bytes.len() {
            let decoded = SnapshotManifest::decode(&Bytes::copy_from_slice(&bytes[..cut]));
            assert!(matches!(decoded, Err(ManifestError::Truncated { .. })), "{cut}: {decoded:?}");
        }
        let mut longer = bytes;
        longer.extend_from_slice(b"xy");
        assert_eq!(SnapshotManifest::decode(&Bytes::from(longer)), Err(ManifestError::Trailing(2)));
    }

    #[test]
    fn bad_fields_are_named() {
        let decode = |m: SnapshotManifest| SnapshotManifest::decode(&Bytes::from(m.encode()?));
        let mut bytes = manifest().encode().unwrap();
        bytes[0] = 4;
        let unknown = SnapshotManifest::decode(&Bytes::from(bytes));
        assert_eq!(unknown, Err(ManifestError::UnknownVersion(4)));
        let edit = |change: &dyn Fn(&mut PartitionManifest)| {
            let mut m = manifest();
            change(&mut m.partitions[0]);
            decode(m)
        };
        let bad = |field, value| Err(ManifestError::BadField { field, value });
        assert_eq!(edit(&|p| p.log_start_offset = -1), bad("log start offset", -1));
        assert_eq!(edit(&|p| p.next_offset = 9), bad("next offset", 9));
        assert_eq!(edit(&|p| p.leader_epochs[1].epoch = 1), bad("epoch", 1));
        assert_eq!(edit(&|p| p.leader_epochs[1].start_offset = 10), bad("epoch start offset", 10));
        // A count the bytes cannot hold is truncated at the count, before any allocation.
        let mut bytes = manifest().encode().unwrap();
        bytes[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        let huge = SnapshotManifest::decode(&Bytes::from(bytes));
        assert_eq!(huge, Err(ManifestError::Truncated { field: "partition count" }));
        // A batch count above what a producer keeps (the count byte follows the producer's
        // id, epoch and last append time).
        let mut bytes = manifest().encode().unwrap();
        let batch_count_at = 13 + PARTITION_FIXED_BYTES + 4 + 8 + 2 + 8;
        assert_eq!(bytes[batch_count_at], 2);
        bytes[batch_count_at] = BATCHES_KEPT as u8 + 1;
        let too_many = SnapshotManifest::decode(&Bytes::from(bytes));
        assert_eq!(too_many, bad("batch count", BATCHES_KEPT as i64 + 1));
    }

    /// `manifest()` with transaction state in its first partition (version 2).
    fn manifest_with_txns() -> SnapshotManifest {
        let mut m = manifest();
        m.partitions[0].transactions = PartitionTxns {
            open: vec![
                OpenTxn { producer_id: 5, first_offset: 20, marker: Some(25) },
                OpenTxn { producer_id: 6, first_offset: 21, marker: None },
            ],
            aborted: vec![AbortedTxn { producer_id: 5, first_offset: 12, last_offset: 14 }],
        };
        m
    }

    #[test]
    fn a_manifest_with_transaction_state_is_version_2_and_round_trips_and_its_cuts_are_named() {
        let bytes = manifest_with_txns().encode().unwrap();
        assert_eq!(bytes[0], MANIFEST_VERSION_TXNS);
        assert_eq!(bytes.len(), manifest().encode().unwrap().len() + 2 * (4 + 4) + 3 * TXN_BYTES);
        // The first partition's state follows its epochs: open count 2, producer 5 from 20
        // with its marker at 25.
        let at = 13 + PARTITION_FIXED_BYTES + 4 + (PRODUCER_FIXED_BYTES + 2 * BATCH_BYTES) + 4;
        let at = at + 2 * EPOCH_BYTES;
        assert_eq!(&bytes[at..at + 4], &2u32.to_le_bytes());
        assert_eq!(&bytes[at + 4..at + 12], &5i64.to_le_bytes());
        assert_eq!(&bytes[at + 12..at + 20], &20i64.to_le_bytes());
        assert_eq!(&bytes[at + 20..at + 28], &25i64.to_le_bytes());
        assert_eq!(&bytes[at + 44..at + 52], &(-1i64).to_le_bytes(), "no marker yet");
        let decoded = SnapshotManifest::decode(&Bytes::from(bytes.clone()));
        assert_eq!(decoded, Ok(manifest_with_txns()));
        for cut in 0..bytes.len() {
            let decoded = SnapshotManifest::decode(&Bytes::copy_from_slice(&bytes[..cut]));
            assert!(matches!(decoded, Err(ManifestError::Truncated { .. })), "{cut}: {decoded:?}");
        }
        // Without transaction state a manifest stays version 1, as a node before it reads.
        assert_eq!(manifest().encode().unwrap()[0], MANIFEST_VERSION);
        // State that breaks `PartitionTxns`' invariants is named.
        let edit = |change: &dyn Fn(&mut PartitionTxns)| {
            let mut m = manifest_with_txns();
            change(&mut m.partitions[0].transactions);
            SnapshotManifest::decode(&Bytes::from(m.encode().unwrap()))
        };
        let bad = |field, value| Err(ManifestError::BadField { field, value });
        let second_unmarked = OpenTxn { producer_id: 6, first_offset: 30, marker: None };
        assert_eq!(edit(&|t| t.open.push(second_unmarked)), bad("open transaction", 6));
        assert_eq!(edit(&|t| t.open[0].marker = Some(19)), bad("open marker offset", 19));
        let earlier = AbortedTxn { producer_id: 7, first_offset: 13, last_offset: 14 };
        assert_eq!(edit(&|t| t.aborted.push(earlier)), bad("aborted marker offset", 14));
        assert_eq!(edit(&|t| t.aborted[0].first_offset = 15), bad("aborted first offset", 15));
    }

    #[test]
    fn a_manifest_over_the_frame_limit_is_refused_not_truncated() {
        let mut m = manifest();
        m.offsets_image = Bytes::from(vec![0; MAX_MANIFEST_BYTES]);
        let refused = m.encode();
        assert!(matches!(refused, Err(ManifestError::TooLarge { max: MAX_MANIFEST_BYTES, .. })));
        m.offsets_image = Bytes::from(vec![0; MAX_MANIFEST_BYTES - 200]);
        let fits = m.encode().unwrap();
        assert!(fits.len() <= MAX_MANIFEST_BYTES);
    }

    fn producer() -> impl Strategy<Value = (i64, ProducerEntry)> {
        let batch = (any::<i32>(), any::<i32>(), any::<i64>(), any::<i64>()).prop_map(
            |(first_sequence, last_sequence, base_offset, last_offset)| BatchMeta {
                first_sequence,
                last_sequence,
                base_offset,
                last_offset,
            },
        );
        let batches = proptest::collection::vec(batch, 0..=BATCHES_KEPT);
        (any::<i64>(), any::<i16>(), any::<i64>(), batches).prop_map(
            |(id, epoch, last_append_ms, batches)| {
                (id, ProducerEntry { epoch, batches, last_append_ms })
            },
        )
    }

    /// Transaction state as `PartitionTxns` builds it: open transactions of distinct
    /// producers (some with a marker queued), aborted ones in marker order.
    fn transactions() -> impl Strategy<Value = PartitionTxns> {
        let open = proptest::collection::vec((0..1000i64, proptest::option::of(0..50i64)), 0..4);
        let aborted = proptest::collection::vec((any::<i64>(), 0..50i64, 1..50i64), 0..4);
        (open, aborted).prop_map(|(open, aborted)| {
            let open = open.into_iter().enumerate().map(|(producer_id, (first_offset, marker))| {
                let marker = marker.map(|m| first_offset + m);
                OpenTxn { producer_id: producer_id as i64, first_offset, marker }
            });
            let mut last_offset = 0;
            let aborted = aborted.into_iter().map(|(producer_id, length, step)| {
                last_offset += length + step;
                AbortedTxn { producer_id, first_offset: last_offset - length, last_offset }
            });
            PartitionTxns { open: open.collect(), aborted: aborted.collect() }
        })
    }

    fn partition() -> impl Strategy<Value = PartitionManifest> {
        let epochs = proptest::collection::vec((1..100i32, 1..100i64), 0..4).prop_map(|steps| {
            let (mut epoch, mut start_offset) = (0, 0);
            let mut epochs = Vec::new();
            for (de, ds) in steps {
                (epoch, start_offset) = (epoch + de, start_offset + ds);
                epochs.push(EpochEntry { epoch, start_offset });
            }
            epochs
        });
        let producers = proptest::collection::vec(producer(), 0..4);
        let fields = (any::<[u8; 16]>(), any::<i32>(), 0..1000i64, 0..1000i64);
        (fields, producers, epochs, transactions()).prop_map(
            |(
                (topic_id, partition, log_start_offset, length),
                producers,
                leader_epochs,
                transactions,
            )| {
                PartitionManifest {
                    topic_id,
                    partition,
                    log_start_offset,
                    next_offset: log_start_offset + length,
                    producers,
                    leader_epochs,
                    transactions,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn any_manifest_round_trips(
            applied_index in any::<u64>(),
            partitions in proptest::collection::vec(partition(), 0..5),
            image in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let m = SnapshotManifest {
                applied_index,
                partitions,
                offsets_image: image.clone().into(),
                coordinator_image: Bytes::new(),
            };
            let bytes = Bytes::from(m.encode().unwrap());
            prop_assert_eq!(SnapshotManifest::decode(&bytes), Ok(m.clone()));
            // With a coordinator image (version 3): every partition's state is written too.
            let m = SnapshotManifest { coordinator_image: image.into(), ..m };
            let bytes = Bytes::from(m.encode().unwrap());
            prop_assert_eq!(SnapshotManifest::decode(&bytes), Ok(m));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            let _ = SnapshotManifest::decode(&Bytes::from(bytes));
        }

        #[test]
        fn a_manifest_with_bytes_overwritten_decodes_or_fails_without_panicking(
            at in any::<prop::sample::Index>(),
            value in any::<u8>(),
        ) {
            let mut bytes = manifest_with_txns().encode().unwrap();
            let at = at.index(bytes.len());
            bytes[at] = value;
            if let Ok(m) = SnapshotManifest::decode(&Bytes::from(bytes)) {
                prop_assert_eq!(SnapshotManifest::decode(&Bytes::from(m.encode().unwrap())), Ok(m));
            }
        }
    }
}
