//! Kafka v2 record batches: validation on append, base-offset rewrite, record timestamps.
//!
//! Runs on the shard that owns the partition; hot path (every produced batch). It allocates
//! nothing per record: validation reads the 61-byte header and computes one CRC-32C.
//!
//! Layout of a v2 batch (all big-endian; Kafka's `DefaultRecordBatch`):
//!
//! | offset | field |
//! |---|---|
//! | 0 | base_offset i64 |
//! | 8 | batch_length i32 (bytes after this field) |
//! | 12 | partition_leader_epoch i32 |
//! | 16 | magic i8 (= 2) |
//! | 17 | crc u32: CRC-32C of bytes 21.. |
//! | 21 | attributes i16 |
//! | 23 | last_offset_delta i32 |
//! | 27 | base_timestamp i64 |
//! | 35 | max_timestamp i64 |
//! | 43 | producer_id i64 |
//! | 51 | producer_epoch i16 |
//! | 53 | base_sequence i32 |
//! | 57 | records_count i32 |
//! | 61 | records |
//!
//! Invariants: (1) a batch accepted here has magic 2, a length that matches its bytes, a
//! valid CRC-32C and `records_count == last_offset_delta + 1 >= 1`; (2) rewriting the base
//! offset or the partition leader epoch never changes the CRC (it starts at `attributes`).

use bytes::{Bytes, BytesMut};

use crate::{BatchError, Offset};

/// Size of the fixed part of a v2 record batch.
pub const RECORD_BATCH_HEADER_BYTES: usize = 61;
const CRC_START: usize = 21;
/// Bits 0..2 of `attributes`: compression codec (0 = none).
const COMPRESSION_MASK: i16 = 0x07;
/// Bit 3 of `attributes`: timestamps are LogAppendTime.
const LOG_APPEND_TIME: i16 = 0x08;

/// Parsed fixed header (61 bytes) of a Kafka v2 record batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordBatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().unwrap())
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

impl RecordBatchHeader {
    /// Reads the header fields without validating anything but the length (>= 61 bytes).
    pub fn parse_unvalidated(batch: &[u8]) -> Result<RecordBatchHeader, BatchError> {
        if batch.len() < RECORD_BATCH_HEADER_BYTES {
            return Err(BatchError::TooShort { len: batch.len() });
        }
        Ok(RecordBatchHeader {
            base_offset: be_i64(batch, 0),
            batch_length: be_i32(batch, 8),
            partition_leader_epoch: be_i32(batch, 12),
            magic: batch[16] as i8,
            crc: be_i32(batch, 17) as u32,
            attributes: be_i16(batch, 21),
            last_offset_delta: be_i32(batch, 23),
            base_timestamp: be_i64(batch, 27),
            max_timestamp: be_i64(batch, 35),
            producer_id: be_i64(batch, 43),
            producer_epoch: be_i16(batch, 51),
            base_sequence: be_i32(batch, 53),
            records_count: be_i32(batch, 57),
        })
    }

    /// Parses and fully validates one batch (magic 2, lengths, CRC-32C, counts).
    pub fn parse_validated(batch: &[u8]) -> Result<RecordBatchHeader, BatchError> {
        let header = Self::parse_unvalidated(batch)?;
        let declared = header.batch_length as i64 + 12;
        if header.batch_length < 0 || declared != batch.len() as i64 {
            return Err(BatchError::LengthMismatch {
                declared: declared.max(0) as usize,
                actual: batch.len(),
            });
        }
        if header.magic != 2 {
            return Err(BatchError::UnsupportedMagic(header.magic));
        }
        let computed = crc32c::crc32c(&batch[CRC_START..]);
        if computed != header.crc {
            return Err(BatchError::CrcMismatch { stored: header.crc, computed });
        }
        if header.records_count < 1 || header.last_offset_delta != header.records_count - 1 {
            return Err(BatchError::BadRecordCount {
                records: header.records_count,
                last_offset_delta: header.last_offset_delta,
            });
        }
        Ok(header)
    }

    /// Total size of the batch in bytes (base_offset and batch_length fields included).
    pub fn total_bytes(&self) -> usize {
        self.batch_length as usize + 12
    }

    /// Codec bits of `attributes` (0 = uncompressed).
    pub fn compression(&self) -> i16 {
        self.attributes & COMPRESSION_MASK
    }

    /// Whether the records carry LogAppendTime (then every record has `max_timestamp`).
    pub fn log_append_time(&self) -> bool {
        self.attributes & LOG_APPEND_TIME != 0
    }
}

/// Splits a Produce request's `records` bytes into whole batches (each validated).
pub fn split_batches(records: &Bytes) -> Result<Vec<(RecordBatchHeader, Bytes)>, BatchError> {
    let mut batches = Vec::new();
    let mut at = 0usize;
    while at < records.len() {
        let rest = &records[at..];
        if rest.len() < RECORD_BATCH_HEADER_BYTES {
            return Err(BatchError::TooShort { len: rest.len() });
        }
        let batch_length = be_i32(rest, 8);
        let declared = batch_length as i64 + 12;
        if batch_length < 0 || declared > rest.len() as i64 {
            return Err(BatchError::LengthMismatch {
                declared: declared.max(0) as usize,
                actual: rest.len(),
            });
        }
        let bytes = records.slice(at..at + declared as usize);
        let header = RecordBatchHeader::parse_validated(&bytes)?;
        batches.push((header, bytes));
        at += declared as usize;
    }
    Ok(batches)
}

/// Copies `batch` with its base offset replaced by `base_offset` (the CRC stays valid).
#[cfg(test)]
pub(crate) fn with_base_offset(batch: &[u8], base_offset: Offset) -> Bytes {
    with_base_offset_and_epoch(batch, base_offset, None)
}

/// The copy an append stores: `base_offset` and, if given, the partition leader epoch
/// written into the header (Kafka's `setPartitionLeaderEpoch`). Neither is covered by the
/// CRC (invariant 2), so the copy costs nothing more than the base offset's.
pub(crate) fn with_base_offset_and_epoch(
    batch: &[u8],
    base_offset: Offset,
    partition_leader_epoch: Option<i32>,
) -> Bytes {
    let mut out = BytesMut::with_capacity(batch.len());
    out.extend_from_slice(&base_offset.to_be_bytes());
    match partition_leader_epoch {
        Some(epoch) => {
            out.extend_from_slice(&batch[8..12]);
            out.extend_from_slice(&epoch.to_be_bytes());
            out.extend_from_slice(&batch[16..]);
        }
        None => out.extend_from_slice(&batch[8..]),
    }
    out.freeze()
}

/// Copies `batch` stamped with the broker's append time (a topic with
/// `message.timestamp.type=LogAppendTime`, as Kafka's `setMaxTimestamp`): the timestamp
/// type bit of `attributes` is set, `max_timestamp` becomes `append_time_ms` and the CRC is
/// recomputed. Consumers then read `max_timestamp` as every record's timestamp.
pub fn with_log_append_time(batch: &[u8], append_time_ms: i64) -> Bytes {
    assert!(batch.len() >= RECORD_BATCH_HEADER_BYTES, "a validated batch");
    let mut out = BytesMut::from(batch);
    let attributes = be_i16(batch, 21) | LOG_APPEND_TIME;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[35..43].copy_from_slice(&append_time_ms.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

/// Reads a zig-zag varint (Kafka `varint`/`varlong`) at `*at`, advancing it.
pub(crate) fn read_varlong(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = *bytes.get(*at)?;
        *at += 1;
        raw |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// The first record of an uncompressed batch whose timestamp is >= `timestamp_ms`, as
/// (offset, timestamp). `None` when the records cannot be decoded or none qualifies.
pub(crate) fn first_record_at_or_after(batch: &[u8], timestamp_ms: i64) -> Option<(Offset, i64)> {
    let header = RecordBatchHeader::parse_unvalidated(batch).ok()?;
    let mut at = RECORD_BATCH_HEADER_BYTES;
    for _ in 0..header.records_count {
        let length = read_varlong(batch, &mut at)?;
        let record_start = at;
        at += 1; // attributes (unused)
        let timestamp_delta = read_varlong(batch, &mut at)?;
        let offset_delta = read_varlong(batch, &mut at)?;
        let timestamp = header.base_timestamp + timestamp_delta;
        if timestamp >= timestamp_ms {
            return Some((header.base_offset + offset_delta, timestamp));
        }
        at = record_start.checked_add(usize::try_from(length).ok()?)?;
        if at > batch.len() {
            return None;
        }
    }
    None
}

/// Why the records of a batch could not be walked (`for_each_record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordsError {
    /// The records are compressed (codec bits of `attributes`): not decoded here.
    Compressed(i16),
    /// The record at this index (0-based, in the batch) overruns the batch or its own length.
    Malformed { index: i32 },
}

/// One record of an uncompressed batch: slices of the batch, nothing copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Index of the record in its batch (Kafka's `batch_index` of KIP-467).
    pub index: i32,
    pub offset_delta: i64,
    pub timestamp_delta: i64,
    /// None: a null key.
    pub key: Option<&'a [u8]>,
    /// None: a null value (a tombstone in a compacted topic).
    pub value: Option<&'a [u8]>,
    /// The whole record as stored, its length varint included (the cleaner copies it).
    pub bytes: &'a [u8],
}

/// Walks the records of an uncompressed, validated batch in order. Allocates nothing; the
/// records must exactly fill the batch, each within its own length.
pub fn for_each_record<'a>(
    batch: &'a [u8],
    mut f: impl FnMut(RecordView<'a>),
) -> Result<(), RecordsError> {
    let header = RecordBatchHeader::parse_unvalidated(batch)
        .map_err(|_| RecordsError::Malformed { index: 0 })?;
    if header.compression() != 0 {
        return Err(RecordsError::Compressed(header.compression()));
    }
    let mut at = RECORD_BATCH_HEADER_BYTES;
    for index in 0..header.records_count {
        let malformed = RecordsError::Malformed { index };
        let start = at;
        let length = read_varlong(batch, &mut at).ok_or(malformed)?;
        let end = usize::try_from(length).ok().and_then(|l| at.checked_add(l)).ok_or(malformed)?;
        let record = batch.get(..end).ok_or(malformed)?;
        at += 1; // attributes (unused)
        let timestamp_delta = read_varlong(record, &mut at).ok_or(malformed)?;
        let offset_delta = read_varlong(record, &mut at).ok_or(malformed)?;
        let key = read_nullable_bytes(record, &mut at).ok_or(malformed)?;
        let value = read_nullable_bytes(record, &mut at).ok_or(malformed)?;
        let bytes = &record[start..];
        f(RecordView { index, offset_delta, timestamp_delta, key, value, bytes });
        // Headers are skipped with the rest of the record.
        at = end;
    }
    if at != batch.len() {
        return Err(RecordsError::Malformed { index: header.records_count - 1 });
    }
    Ok(())
}

/// A varint length then that many bytes; length -1 is null.
fn read_nullable_bytes<'a>(record: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let length = read_varlong(record, at)?;
    if length == -1 {
        return Some(None);
    }
    let end = at.checked_add(usize::try_from(length).ok()?)?;
    let bytes = record.get(*at..end)?;
    *at = end;
    Some(Some(bytes))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn write_varlong(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        loop {
            if raw < 0x80 {
                out.push(raw as u8);
                return;
            }
            out.push((raw as u8 & 0x7f) | 0x80);
            raw >>= 7;
        }
    }

    /// Builds a valid uncompressed v2 batch of `values` with timestamps `base_ts + i*step`.
    pub(crate) fn record_batch(values: &[&[u8]], base_ts: i64, step: i64) -> Bytes {
        let mut records = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let mut body = vec![0u8]; // attributes
            write_varlong(&mut body, i as i64 * step);
            write_varlong(&mut body, i as i64);
            write_varlong(&mut body, -1); // null key
            write_varlong(&mut body, value.len() as i64);
            body.extend_from_slice(value);
            write_varlong(&mut body, 0); // headers
            write_varlong(&mut records, body.len() as i64);
            records.extend_from_slice(&body);
        }
        let count = values.len() as i32;
        let max_ts = base_ts + (count as i64 - 1).max(0) * step;
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&base_ts.to_be_bytes());
        b.extend_from_slice(&max_ts.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&records);
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }

    #[test]
    fn a_well_formed_batch_validates_and_reports_its_fields() {
        let batch = record_batch(&[b"a", b"bb", b"ccc"], 1000, 10);
        let header = RecordBatchHeader::parse_validated(&batch).unwrap();
        assert_eq!(header.records_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.max_timestamp, 1020);
        assert_eq!(header.total_bytes(), batch.len());
    }

    #[test]
    fn invalid_batches_are_rejected_with_typed_errors() {
        let good = record_batch(&[b"x"], 0, 0).to_vec();
        type Case = (Vec<u8>, fn(&BatchError) -> bool);
        let cases: Vec<Case> = vec![
            (good[..40].to_vec(), |e| matches!(e, BatchError::TooShort { len: 40 })),
            ([good.clone(), vec![0]].concat(), |e| matches!(e, BatchError::LengthMismatch { .. })),
            (
                {
                    let mut b = good.clone();
                    b[16] = 1;
                    b
                },
                |e| matches!(e, BatchError::UnsupportedMagic(1)),
            ),
            (
                {
                    let mut b = good.clone();
                    let n = b.len();
                    b[n - 1] ^= 1;
                    b
                },
                |e| matches!(e, BatchError::CrcMismatch { .. }),
            ),
            (
                {
                    let mut b = good.clone();
                    b[23..27].copy_from_slice(&5i32.to_be_bytes());
                    let crc = crc32c::crc32c(&b[CRC_START..]);
                    b[17..21].copy_from_slice(&crc.to_be_bytes());
                    b
                },
                |e| matches!(e, BatchError::BadRecordCount { records: 1, last_offset_delta: 5 }),
            ),
        ];
        for (bytes, expected) in cases {
            let err = RecordBatchHeader::parse_validated(&bytes).unwrap_err();
            assert!(expected(&err), "unexpected {err:?}");
        }
    }

    #[test]
    fn split_batches_returns_each_batch_of_a_produce_payload() {
        let a = record_batch(&[b"a"], 0, 0);
        let b = record_batch(&[b"b", b"c"], 5, 1);
        let all = Bytes::from([a.to_vec(), b.to_vec()].concat());
        let split = split_batches(&all).unwrap();
        assert_eq!(split.len(), 2);
        assert_eq!(split[0].1, a);
        assert_eq!(split[1].1, b);
        let truncated = all.slice(..all.len() - 3);
        assert!(matches!(split_batches(&truncated), Err(BatchError::LengthMismatch { .. })));
    }

    #[test]
    fn log_append_time_sets_the_type_bit_and_max_timestamp_and_keeps_the_crc_valid() {
        let batch = record_batch(&[b"a", b"b"], 1_000, 5);
        let stamped = with_log_append_time(&batch, 99_999);
        let header = RecordBatchHeader::parse_validated(&stamped).expect("valid CRC");
        assert!(header.log_append_time());
        assert_eq!(header.max_timestamp, 99_999);
        assert_eq!(header.base_timestamp, 1_000);
        assert_eq!(&stamped[61..], &batch[61..], "records are untouched");
    }

    #[test]
    fn rewriting_the_base_offset_keeps_the_batch_crc_valid() {
        let batch = record_batch(&[b"a", b"b"], 0, 0);
        let moved = with_base_offset(&batch, 4242);
        let header = RecordBatchHeader::parse_validated(&moved).unwrap();
        assert_eq!(header.base_offset, 4242);
    }

    #[test]
    fn records_are_walked_with_their_keys_and_values() {
        let batch = record_batch(&[b"a", b"bb"], 100, 10);
        let mut seen = Vec::new();
        for_each_record(&batch, |r| seen.push((r.index, r.offset_delta, r.key, r.value))).unwrap();
        assert_eq!(seen, vec![(0, 0, None, Some(&b"a"[..])), (1, 1, None, Some(&b"bb"[..]))]);
        // One byte short of the last record: malformed at its index.
        let mut short = batch.to_vec();
        short.truncate(short.len() - 1);
        assert_eq!(for_each_record(&short, |_| {}), Err(RecordsError::Malformed { index: 1 }));
        // A byte too many after the last record.
        let long = [&batch[..], &[0]].concat();
        assert_eq!(for_each_record(&long, |_| {}), Err(RecordsError::Malformed { index: 1 }));
        let mut compressed = batch.to_vec();
        compressed[22] |= 1; // gzip
        assert_eq!(for_each_record(&compressed, |_| {}), Err(RecordsError::Compressed(1)));
    }

    #[test]
    fn record_timestamps_are_decoded_to_find_the_exact_offset() {
        let batch = with_base_offset(&record_batch(&[b"a", b"b", b"c", b"d"], 100, 10), 7);
        assert_eq!(first_record_at_or_after(&batch, 0), Some((7, 100)));
        assert_eq!(first_record_at_or_after(&batch, 111), Some((9, 120)));
        assert_eq!(first_record_at_or_after(&batch, 130), Some((10, 130)));
        assert_eq!(first_record_at_or_after(&batch, 131), None);
    }
}
