//! Kafka v2 record batches (magic 2), written and read by hand: the producer builds each
//! batch straight into the request buffer, and the consumer walks fetched bytes without
//! copying.
//!
//! Layout (big-endian): base_offset i64, batch_length i32, partition_leader_epoch i32,
//! magic i8 = 2, crc u32 (CRC-32C of everything after it), attributes i16,
//! last_offset_delta i32, base_timestamp i64, max_timestamp i64, producer_id i64,
//! producer_epoch i16, base_sequence i32, record_count i32, then the records. A record is
//! length varint, attributes i8, timestamp_delta varlong, offset_delta varint, key
//! (varint length, -1 = null), value (varint length), header count varint.
//!
//! Invariants: 1. `finish` is called once, after every `push`; it patches length, counts
//! and CRC. 2. Readers never trust a length before checking it against the bytes left.

/// Bytes before the first record.
pub const RECORD_BATCH_HEADER_BYTES: usize = 61;
const LENGTH_AT: usize = 8;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const MAX_TIMESTAMP_AT: usize = 35;
const RECORD_COUNT_AT: usize = 57;

/// The idempotent producer's fields of a batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Sequence number of the batch's first record, per partition, from 0.
    pub base_sequence: i32,
}

impl ProducerFields {
    /// A producer without idempotence.
    pub const NONE: ProducerFields =
        ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
}

/// Appends one v2 record batch to a buffer, record by record.
pub struct RecordBatchWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    record_count: i32,
    base_timestamp_ms: i64,
}

impl<'a> RecordBatchWriter<'a> {
    /// Starts a batch at the end of `out`; records carry `base_timestamp_ms`. Not from an
    /// idempotent producer (producer id, epoch and base sequence -1).
    pub fn new(out: &'a mut Vec<u8>, base_timestamp_ms: i64) -> Self {
        Self::with_producer(out, base_timestamp_ms, ProducerFields::NONE)
    }

    /// Starts a batch of an idempotent producer.
    pub fn with_producer(
        out: &'a mut Vec<u8>,
        base_timestamp_ms: i64,
        producer: ProducerFields,
    ) -> Self {
        let start = out.len();
        out.extend_from_slice(&0i64.to_be_bytes()); // base_offset: the broker assigns it
        out.extend_from_slice(&0i32.to_be_bytes()); // batch_length, patched
        out.extend_from_slice(&(-1i32).to_be_bytes()); // partition_leader_epoch
        out.push(2); // magic
        out.extend_from_slice(&0u32.to_be_bytes()); // crc, patched
        out.extend_from_slice(&0i16.to_be_bytes()); // attributes: no compression
        out.extend_from_slice(&0i32.to_be_bytes()); // last_offset_delta, patched
        out.extend_from_slice(&base_timestamp_ms.to_be_bytes());
        out.extend_from_slice(&base_timestamp_ms.to_be_bytes()); // max_timestamp
        out.extend_from_slice(&producer.producer_id.to_be_bytes());
        out.extend_from_slice(&producer.producer_epoch.to_be_bytes());
        out.extend_from_slice(&producer.base_sequence.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // record_count, patched
        debug_assert_eq!(out.len() - start, RECORD_BATCH_HEADER_BYTES);
        RecordBatchWriter { out, start, record_count: 0, base_timestamp_ms }
    }

    /// Appends one record with timestamp delta 0 and no headers.
    pub fn push(&mut self, key: Option<&[u8]>, value: &[u8]) {
        self.push_nullable(key, Some(value));
    }

    /// Appends one record whose value may be null (a tombstone of a compacted topic).
    pub fn push_nullable(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let offset_delta = self.record_count;
        let key_len = key.map_or(-1, |k| k.len() as i32);
        let value_len = value.map_or(-1, |v| v.len() as i32);
        let body_len = 1 // attributes
            + 1 // timestamp_delta 0
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varint_len(value_len)
            + value.map_or(0, <[u8]>::len)
            + 1; // header count 0
        put_varint(self.out, body_len as i32);
        self.out.push(0);
        self.out.push(0);
        put_varint(self.out, offset_delta);
        put_varint(self.out, key_len);
        if let Some(key) = key {
            self.out.extend_from_slice(key);
        }
        put_varint(self.out, value_len);
        if let Some(value) = value {
            self.out.extend_from_slice(value);
        }
        self.out.push(0);
        self.record_count += 1;
    }

    /// Patches length, counts and CRC (invariant 1); returns the batch's size in bytes.
    pub fn finish(self) -> usize {
        assert!(self.record_count > 0, "a record batch holds at least one record");
        let batch = &mut self.out[self.start..];
        let batch_length = (batch.len() - 12) as i32;
        batch[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
        let last = self.record_count - 1;
        batch[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&last.to_be_bytes());
        let ts = self.base_timestamp_ms.to_be_bytes();
        batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&ts);
        let count = self.record_count.to_be_bytes();
        batch[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count);
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch.len()
    }
}

/// A transactional batch of `producer` (TRANSACTIONAL set, CRC redone), one keyless record
/// per value, every record at `timestamp_ms`.
pub fn transactional_batch<V: AsRef<[u8]>>(
    producer: ProducerFields,
    timestamp_ms: i64,
    values: impl IntoIterator<Item = V>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::with_producer(&mut out, timestamp_ms, producer);
    for value in values {
        writer.push(None, value.as_ref());
    }
    writer.finish();
    set_transactional(&mut out);
    out
}

/// Sets the TRANSACTIONAL attribute of a finished batch and redoes its CRC.
pub fn set_transactional(batch: &mut [u8]) {
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_AT], batch[ATTRIBUTES_AT + 1]]) | 0x10;
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

fn zigzag(n: i32) -> u32 {
    ((n << 1) ^ (n >> 31)) as u32
}

fn varint_len(n: i32) -> usize {
    let mut v = zigzag(n);
    let mut len = 1;
    while v >= 0x80 {
        v >>= 7;
        len += 1;
    }
    len
}

fn put_varint(out: &mut Vec<u8>, n: i32) {
    let mut v = zigzag(n);
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a zigzag varint (up to 64 bits) at `*at`; `None` if the bytes end first.
fn get_varlong(data: &[u8], at: &mut usize) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

/// One batch inside fetched bytes.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    pub base_offset: i64,
    pub last_offset_delta: i32,
    pub record_count: i32,
    pub attributes: i16,
    /// The whole batch, header included.
    pub bytes: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Offset after the batch's last record.
    pub fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }

    /// True when the stored CRC matches the bytes.
    pub fn crc_ok(&self) -> bool {
        let stored = u32::from_be_bytes(self.bytes[CRC_AT..CRC_AT + 4].try_into().unwrap());
        stored == crc32c::crc32c(&self.bytes[ATTRIBUTES_AT..])
    }

    /// Calls `f(offset, value)` for each record of an uncompressed batch; returns false if
    /// the records are malformed (invariant 2).
    pub fn for_each_value(&self, mut f: impl FnMut(i64, &'a [u8])) -> bool {
        let data = self.bytes;
        let mut at = RECORD_BATCH_HEADER_BYTES;
        for _ in 0..self.record_count {
            let Some(len) = get_varlong(data, &mut at) else { return false };
            let end = at + len as usize;
            if len < 0 || end > data.len() {
                return false;
            }
            at += 1; // attributes
            let parsed = (|| {
                get_varlong(data, &mut at)?; // timestamp_delta
                let offset_delta = get_varlong(data, &mut at)?;
                let key_len = get_varlong(data, &mut at)?;
                at += key_len.max(0) as usize;
                let value_len = get_varlong(data, &mut at)?;
                let value = data.get(at..at + value_len.max(0) as usize)?;
                Some((offset_delta, value))
            })();
            let Some((offset_delta, value)) = parsed else { return false };
            f(self.base_offset + offset_delta, value);
            at = end;
        }
        true
    }
}

/// Walks the complete batches in fetched `records` bytes; a trailing partial batch (the
/// broker may cut at max_bytes) is left out.
pub fn batches(records: &[u8]) -> impl Iterator<Item = BatchView<'_>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let rest = records.get(at..)?;
        if rest.len() < RECORD_BATCH_HEADER_BYTES {
            return None;
        }
        let batch_length = i32::from_be_bytes(rest[LENGTH_AT..LENGTH_AT + 4].try_into().unwrap());
        let total = 12 + usize::try_from(batch_length).ok()?;
        if total < RECORD_BATCH_HEADER_BYTES || total > rest.len() {
            return None;
        }
        let bytes = &rest[..total];
        at += total;
        let be_i32 = |i: usize| i32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
        Some(BatchView {
            base_offset: i64::from_be_bytes(bytes[..8].try_into().unwrap()),
            last_offset_delta: be_i32(LAST_OFFSET_DELTA_AT),
            record_count: be_i32(RECORD_COUNT_AT),
            attributes: i16::from_be_bytes([bytes[ATTRIBUTES_AT], bytes[ATTRIBUTES_AT + 1]]),
            bytes,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_batch_reads_back_with_valid_crc() {
        let mut out = vec![7u8; 3]; // a batch need not start at 0
        let mut writer = RecordBatchWriter::new(&mut out, 1_700_000_000_000);
        let big = vec![9u8; 300];
        writer.push(Some(b"k1"), b"v1");
        writer.push(None, &big);
        let size = writer.finish();
        assert_eq!(size, out.len() - 3);
        let views: Vec<_> = batches(&out[3..]).collect();
        assert_eq!(views.len(), 1);
        assert!(views[0].crc_ok());
        assert_eq!(views[0].record_count, 2);
        assert_eq!(views[0].next_offset(), 2);
        let mut values = Vec::new();
        assert!(views[0].for_each_value(|offset, v| values.push((offset, v.len()))));
        assert_eq!(values, vec![(0, 2), (1, 300)]);
    }

    #[test]
    fn partial_trailing_batch_is_skipped() {
        let mut out = Vec::new();
        let mut writer = RecordBatchWriter::new(&mut out, 0);
        writer.push(None, b"x");
        let size = writer.finish();
        let mut two = out.clone();
        two.extend_from_slice(&out[..size - 1]);
        assert_eq!(batches(&two).count(), 1);
    }
}
