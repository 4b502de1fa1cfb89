//! The transaction state of one partition: its open transactions, its aborted ones, and
//! its last stable offset (LSO). Also the COMMIT/ABORT control batch, built and read.
//!
//! Runs on the shard that owns the partition, in phase one of a produce (a transactional
//! batch opens a transaction) and when a marker is appended. No IO, no allocation on the
//! produce path unless a transaction opens.
//!
//! Durability: the state changes when a batch or marker is queued, but a transaction stops
//! holding the LSO back only once its marker is below the high watermark, that is durable.
//! So the LSO never covers a transaction whose end a crash could take back, and it never
//! moves backwards across a restart: recovery sees every durable marker.
//!
//! Invariants:
//! 1. At most one open transaction per producer id has no marker yet.
//! 2. `aborted` is ordered by `last_offset` (markers are appended in offset order).
//! 3. The LSO is at most the high watermark and is the first offset of a batch, or the
//!    high watermark.
//!
//! Control batch layout (Kafka's, magic 2): the 61-byte batch header with attributes
//! TRANSACTIONAL|CONTROL, `base_sequence` -1, and one record whose key is
//! `[version i16 = 0][type i16: 0 abort, 1 commit]` and whose value is
//! `[version i16 = 0][coordinator epoch i32]`.

use bytes::Bytes;
use shardlog_storage::{for_each_record, Offset, RecordBatchHeader, RECORD_BATCH_HEADER_BYTES};

/// Batch attribute bits (Kafka's).
pub const TRANSACTIONAL: i16 = 0x10;
pub const CONTROL: i16 = 0x20;

const CONTROL_ABORT: i16 = 0;
const CONTROL_COMMIT: i16 = 1;

/// A transaction of one producer in one partition whose end is not durable yet.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The offset of its COMMIT/ABORT marker, once queued.
    pub marker: Option<Offset>,
}

/// An aborted transaction, as Fetch reports it (Kafka's AbortedTxn index entry).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The offset of the ABORT marker.
    pub last_offset: Offset,
}

/// Transaction state of one partition.
#[derive(
    rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, Default, PartialEq, Eq,
)]
pub struct PartitionTxns {
    pub open: Vec<OpenTxn>,
    pub aborted: Vec<AbortedTxn>,
}

impl PartitionTxns {
    /// A transactional batch of `producer_id` queued at `base_offset`.
    pub fn on_data(&mut self, producer_id: i64, base_offset: Offset) {
        let open = self.open.iter().any(|t| t.producer_id == producer_id && t.marker.is_none());
        if !open {
            self.open.push(OpenTxn { producer_id, first_offset: base_offset, marker: None });
        }
    }

    /// A marker of `producer_id` queued at `offset`. `durable`: replayed from the log at
    /// start-up (the transaction is over at once).
    pub fn on_marker(&mut self, producer_id: i64, commit: bool, offset: Offset, durable: bool) {
        let index =
            self.open.iter().position(|t| t.producer_id == producer_id && t.marker.is_none());
        let Some(index) = index else { return };
        let first_offset = self.open[index].first_offset;
        if durable {
            self.open.remove(index);
        } else {
            self.open[index].marker = Some(offset);
        }
        if !commit {
            assert!(self.aborted.last().is_none_or(|a| a.last_offset < offset), "invariant 2");
            self.aborted.push(AbortedTxn { producer_id, first_offset, last_offset: offset });
        }
        assert!(
            self.open.iter().filter(|t| t.producer_id == producer_id && t.marker.is_none()).count()
                <= 1,
            "invariant 1"
        );
    }

    /// What a batch of `producer_id` of kind `kind` stored at `base_offset` does to the
    /// partition's transactions: the one rule of every path that stores one (a produce on
    /// one node, a replica's apply of a committed partition-group entry, a marker, the
    /// replay at start-up with `durable`), so replicas that store the same batches at the
    /// same offsets hold the same state.
    pub fn on_appended(
        &mut self,
        kind: BatchKind,
        producer_id: i64,
        base_offset: Offset,
        durable: bool,
    ) {
        match kind {
            BatchKind::Plain => {}
            BatchKind::Transactional => self.on_data(producer_id, base_offset),
            BatchKind::Marker { commit } => {
                self.on_marker(producer_id, commit, base_offset, durable)
            }
        }
    }

    /// The last stable offset under `high_watermark`; forgets transactions whose marker
    /// became durable.
    pub fn last_stable_offset(&mut self, high_watermark: Offset) -> Offset {
        self.open.retain(|t| t.marker.is_none_or(|m| m >= high_watermark));
        let lso = self.open.iter().map(|t| t.first_offset).min().unwrap_or(high_watermark);
        lso.min(high_watermark)
    }

    /// Aborted transactions a read of `[from, to)` must tell the client about.
    pub fn aborted_between(&self, from: Offset, to: Offset) -> Vec<(i64, Offset)> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        self.aborted[start..]
            .iter()
            .filter(|a| a.first_offset < to)
            .map(|a| (a.producer_id, a.first_offset))
            .collect()
    }

    /// Forgets aborted transactions wholly below the log start (retention removed them).
    pub fn trim(&mut self, log_start_offset: Offset) {
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
    }

    /// Forgets aborted transactions whose marker, below `below`, is no longer in the log
    /// (`present` says whether a batch starts at an offset): the log cleaner removed it,
    /// and it removes a marker only once all its transaction's data are gone.
    pub fn forget_removed(&mut self, below: Offset, present: impl Fn(Offset) -> bool) {
        self.aborted.retain(|a| a.last_offset >= below || present(a.last_offset));
    }

    /// The durable view, for a snapshot: transactions whose marker is queued are over
    /// (the snapshot lands in the log after their marker).
    pub fn snapshot(&self) -> PartitionTxns {
        PartitionTxns {
            open: self.open.iter().filter(|t| t.marker.is_none()).copied().collect(),
            aborted: self.aborted.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.aborted.is_empty()
    }
}

/// What a batch means for transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    Plain,
    /// Data of an open transaction.
    Transactional,
    /// A COMMIT (true) or ABORT (false) marker.
    Marker {
        commit: bool,
    },
}

/// Classifies a stored batch (the record is read only for control batches).
pub fn batch_kind(header: &RecordBatchHeader, batch: &[u8]) -> Result<BatchKind, String> {
    if header.attributes & CONTROL != 0 {
        return control_type(batch).map(|t| BatchKind::Marker { commit: t == CONTROL_COMMIT });
    }
    if header.attributes & TRANSACTIONAL != 0 {
        return Ok(BatchKind::Transactional);
    }
    Ok(BatchKind::Plain)
}

/// A COMMIT or ABORT control batch of `producer_id` at offset 0 (the log assigns it).
pub fn control_batch(producer_id: i64, epoch: i16, commit: bool, now_ms: i64) -> Bytes {
    let mut record = Vec::with_capacity(17);
    // length (zigzag 16), attributes, timestamp delta, offset delta, key length (zigzag 4)
    record.extend_from_slice(&[32, 0, 0, 0, 8]);
    record.extend_from_slice(&0i16.to_be_bytes());
    let kind = if commit { CONTROL_COMMIT } else { CONTROL_ABORT };
    record.extend_from_slice(&kind.to_be_bytes());
    // value length (zigzag 6), version, coordinator epoch; then no headers
    record.push(12);
    record.extend_from_slice(&0i16.to_be_bytes());
    record.extend_from_slice(&0i32.to_be_bytes());
    record.push(0);
    assert_eq!(record.len(), 17, "a control record is 16 bytes after its length");
    let mut batch = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + record.len());
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
                                                  // batch length: what follows the base offset (8 bytes) and this field (4)
    let batch_length = RECORD_BATCH_HEADER_BYTES - 12 + record.len();
    batch.extend_from_slice(&(batch_length as i32).to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&[0; 4]); // crc, below
    batch.extend_from_slice(&(TRANSACTIONAL | CONTROL).to_be_bytes());
    batch.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    batch.extend_from_slice(&now_ms.to_be_bytes());
    batch.extend_from_slice(&now_ms.to_be_bytes());
    batch.extend_from_slice(&producer_id.to_be_bytes());
    batch.extend_from_slice(&epoch.to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    batch.extend_from_slice(&1i32.to_be_bytes()); // records
    batch.extend_from_slice(&record);
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

/// The control type (0 abort, 1 commit) in the key of a control batch's first record.
fn control_type(batch: &[u8]) -> Result<i16, String> {
    let mut first_key = None;
    for_each_record(batch, |record| {
        if record.index == 0 {
            first_key = record.key;
        }
    })
    .map_err(|e| format!("a control batch whose records cannot be read: {e:?}"))?;
    match first_key {
        // version (i16), then the type (i16)
        Some(key) if key.len() >= 4 => Ok(i16::from_be_bytes([key[2], key[3]])),
        _ => Err("a control batch without a control record key".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_batches_validate_and_say_what_they_are() {
        for commit in [true, false] {
            let batch = control_batch(42, 3, commit, 1_000);
            let header = RecordBatchHeader::parse_validated(&batch).expect("a valid batch");
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(header.total_bytes(), batch.len());
            assert_eq!(batch_kind(&header, &batch), Ok(BatchKind::Marker { commit }));
        }
    }

    #[test]
    fn the_lso_waits_for_the_first_open_transaction_until_its_marker_is_durable() {
        let mut p = PartitionTxns::default();
        assert_eq!(p.last_stable_offset(10), 10);
        p.on_data(1, 10);
        p.on_data(1, 12); // same transaction
        p.on_data(2, 13);
        assert_eq!(p.last_stable_offset(20), 10);
        p.on_marker(1, false, 20, false);
        assert_eq!(p.last_stable_offset(20), 10, "the marker is not durable yet");
        assert_eq!(p.last_stable_offset(21), 13, "producer 2 still open");
        p.on_marker(2, true, 21, false);
        assert_eq!(p.last_stable_offset(22), 22);
        assert_eq!(p.aborted_between(0, 22), vec![(1, 10)]);
        assert_eq!(p.aborted_between(21, 30), vec![]);
        p.on_data(1, 23); // producer 1's next transaction
        assert_eq!(p.last_stable_offset(30), 23);
        p.trim(21);
        assert!(p.aborted.is_empty());
    }

    #[test]
    fn aborted_transactions_whose_marker_was_cleaned_leave_the_list() {
        let mut p = PartitionTxns::default();
        for (producer_id, first, marker) in [(1, 0, 2), (2, 3, 5), (1, 6, 8)] {
            p.on_data(producer_id, first);
            p.on_marker(producer_id, false, marker, true);
        }
        // Markers 2 and 8 were removed; 8 lies at the clean point, so it stays listed.
        p.forget_removed(8, |offset| offset == 5);
        assert_eq!(p.aborted_between(0, 10), vec![(2, 3), (1, 6)]);
    }

    /// A replica of a replicated partition as its group's apply leaves it: every committed
    /// entry's batch at the next offset of its own log, its transaction state updated by
    /// `on_appended`, and a high watermark that follows its own flushes.
    #[derive(Default)]
    struct Replica {
        next_offset: Offset,
        high_watermark: Offset,
        txns: PartitionTxns,
        /// What it stored: (kind, producer id, base offset).
        stored: Vec<(BatchKind, i64, Offset)>,
    }

    impl Replica {
        fn apply(&mut self, (kind, producer_id, records): (BatchKind, i64, i64)) {
            let base_offset = self.next_offset;
            self.next_offset += records;
            self.txns.on_appended(kind, producer_id, base_offset, false);
            self.stored.push((kind, producer_id, base_offset));
        }

        fn flush(&mut self) {
            self.high_watermark = self.next_offset;
        }

        /// A replica that rebuilds its state from the stored batches (a restart's replay).
        fn replayed(&self) -> Replica {
            let mut txns = PartitionTxns::default();
            for (kind, producer_id, base_offset) in &self.stored {
                txns.on_appended(*kind, *producer_id, *base_offset, true);
            }
            let (next_offset, high_watermark) = (self.next_offset, self.high_watermark);
            Replica { next_offset, high_watermark, txns, stored: self.stored.clone() }
        }

        fn lso_and_aborted(&mut self) -> (Offset, Vec<(i64, Offset)>) {
            let lso = self.txns.last_stable_offset(self.high_watermark);
            (lso, self.txns.aborted_between(0, self.high_watermark))
        }
    }

    #[test]
    fn replicas_applying_the_same_entries_hold_the_same_lso_and_aborted_list() {
        // The kinds of the batches as the apply reads them: a real marker batch.
        let marker = |commit| {
            let batch = control_batch(1, 0, commit, 1_000);
            let header = RecordBatchHeader::parse_validated(&batch).unwrap();
            batch_kind(&header, &batch).unwrap()
        };
        let data = BatchKind::Transactional;
        let entries = [
            (data, 1, 3), // producer 1 opens at 0
            (BatchKind::Plain, -1, 1),
            (data, 2, 2),          // producer 2 opens at 4
            (data, 1, 1),          // producer 1's same transaction
            (marker(false), 1, 1), // ABORT of producer 1 at 7
            (marker(true), 2, 1),  // COMMIT of producer 2 at 8
            (data, 1, 2),          // producer 1's next transaction opens at 9
        ];
        let (mut leader, mut follower) = (Replica::default(), Replica::default());
        for (at, entry) in entries.iter().enumerate() {
            leader.apply(*entry);
            leader.flush();
            if at == 4 {
                // The follower applied up to the ABORT, not yet durable there: producer 1
                // still holds its LSO back.
                entries[..=4].iter().for_each(|e| follower.apply(*e));
                assert_eq!(follower.lso_and_aborted(), (0, vec![]));
                follower.flush();
                assert_eq!(follower.lso_and_aborted(), (4, vec![(1, 0)]));
            }
        }
        entries[5..].iter().for_each(|e| follower.apply(*e));
        follower.flush();
        let expected = (9, vec![(1, 0)]);
        assert_eq!(leader.lso_and_aborted(), expected);
        assert_eq!(follower.lso_and_aborted(), expected);
        assert_eq!(leader.txns, follower.txns);
        // A replica that restarts (or a new leader after one) rebuilds the same from its log.
        assert_eq!(follower.replayed().lso_and_aborted(), expected);
    }

    #[test]
    fn a_marker_without_an_open_transaction_changes_nothing() {
        let mut p = PartitionTxns::default();
        p.on_marker(9, false, 5, false);
        assert!(p.is_empty());
        p.on_data(9, 6);
        p.on_marker(9, true, 7, true);
        assert!(p.is_empty(), "a replayed marker closes at once");
    }
}
