//! Message format v0/v1 (magic 0 and 1) to and from record batches (magic 2), for the
//! clients that only speak Produce v0-v2 and Fetch v0-v3 (Kafka before 0.11, and clients
//! such as segmentio kafka-go 0.2.1). The log stores magic-2 batches only, so, as Kafka 3.x
//! does, a legacy message set is converted up on produce and the stored batches are
//! converted down on fetch.
//!
//! Runs on the shard that serves the request (the produce and fetch handlers each call
//! it at one place). Not the hot path of current clients: only old request versions get
//! here, and both directions copy every key and value once (and decompress and
//! recompress a compressed set), which is what down-conversion costs in Kafka too.
//!
//! A legacy message set is a sequence of entries, with no header of its own:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | offset i64 (ignored on produce: the log assigns offsets) |
//! | 8 | message_size i32 (the bytes that follow) |
//! | 12 | crc u32: CRC-32 (IEEE, not CRC-32C) of everything after it |
//! | 16 | magic i8: 0 or 1 (a v2 batch has its magic at the same place) |
//! | 17 | attributes i8: bits 0-2 compression codec, bit 3 LogAppendTime (magic 1) |
//! | 18 | timestamp i64, magic 1 only |
//! | .. | key: i32 length (-1 = null) + bytes, value: i32 length (-1 = null) + bytes |
//!
//! A compressed set is one wrapper message whose value is the compressed bytes of an inner
//! set of uncompressed messages of the same magic. Inner offsets are absolute for magic 0
//! and relative (0, 1, ...) for magic 1, where the wrapper carries the last one's offset.
//!
//! Invariants:
//! 1. Conversion never panics on client input: every length is checked before it is used,
//!    and a bad message is an error naming what is wrong ([`LegacyFormatError`]).
//! 2. Up-conversion yields one v2 batch with base offset 0, offset deltas 0..n, the
//!    records' keys, values and timestamps (-1 for magic 0), no headers, producer id -1.
//! 3. Down-conversion yields whole messages only, never above `max_bytes` except that the
//!    first converted batch is always whole (so a consumer always makes progress);
//!    control batches are skipped and record headers dropped, as Kafka does.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy};
use kafka_protocol::records::{Record, RecordBatchDecoder, IEEE};

/// Why a message set could not be converted, by the Kafka error it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyFormatError {
    /// Framing, a length or the CRC is wrong: CORRUPT_MESSAGE.
    Corrupt(String),
    /// Well-framed but not allowed here (a v2 batch in a Produce below v3, nested
    /// compression, an inner magic that differs from its wrapper's): INVALID_RECORD.
    Invalid(String),
    /// zstd, which message format v0/v1 cannot carry: UNSUPPORTED_COMPRESSION_TYPE.
    UnsupportedCompression(String),
}

impl std::fmt::Display for LegacyFormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegacyFormatError::Corrupt(m)
            | LegacyFormatError::Invalid(m)
            | LegacyFormatError::UnsupportedCompression(m) => f.write_str(m),
        }
    }
}

fn corrupt(message: String) -> LegacyFormatError {
    LegacyFormatError::Corrupt(message)
}

/// offset (8) + message_size (4): what precedes every message.
const LOG_OVERHEAD: usize = 12;
/// crc + magic + attributes + key length + value length: the smallest magic-0 message.
const MIN_MESSAGE_V0: usize = 4 + 1 + 1 + 4 + 4;
/// Bit 3 of a magic-1 message's attributes, and of a v2 batch's.
const LOG_APPEND_TIME: u8 = 0x08;
/// Bit 5 of a v2 batch's attributes.
const CONTROL_BATCH: u8 = 0x20;
/// The fixed part of a v2 batch, up to and including its record count.
const BATCH_HEADER_BYTES: usize = 61;

/// The compression codecs message format v0/v1 can carry (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
}

impl Codec {
    fn from_attributes(attributes: u8) -> Result<Codec, LegacyFormatError> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Err(LegacyFormatError::UnsupportedCompression(
                "zstd needs message format v2 (Produce v3+ / Fetch v10+)".to_string(),
            )),
            other => Err(corrupt(format!("unknown compression codec {other}"))),
        }
    }

    fn decompress(self, mut compressed: Bytes) -> Result<Bytes, String> {
        let take = |b: &mut Bytes| Ok(b.split_off(0));
        let plain = match self {
            Codec::None => return Ok(compressed),
            Codec::Gzip => Gzip::decompress(&mut compressed, take),
            Codec::Snappy => Snappy::decompress(&mut compressed, take),
            Codec::Lz4 => Lz4::decompress(&mut compressed, take),
        };
        plain.map_err(|e| e.to_string())
    }

    fn compress(self, plain: &[u8]) -> Result<Bytes, String> {
        let mut out = BytesMut::new();
        let put = |b: &mut BytesMut| {
            b.put_slice(plain);
            Ok(())
        };
        let done = match self {
            Codec::None => Ok(out.put_slice(plain)),
            Codec::Gzip => Gzip::compress(&mut out, put),
            Codec::Snappy => Snappy::compress(&mut out, put),
            Codec::Lz4 => Lz4::compress(&mut out, put),
        };
        done.map_err(|e| e.to_string())?;
        Ok(out.freeze())
    }
}

/// One magic-0/1 message as read from the wire (keys and values share the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyMessage {
    pub offset: i64,
    pub magic: i8,
    pub attributes: u8,
    /// -1 for magic 0.
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// Reads every message of `set`, checking each one's size, magic and CRC. A message
/// that does not fit in what remains is an error, not silently dropped.
pub fn read_message_set(set: &Bytes) -> Result<Vec<LegacyMessage>, LegacyFormatError> {
    let mut messages = Vec::new();
    let mut at = 0;
    while at < set.len() {
        let left = set.len() - at;
        if left < LOG_OVERHEAD {
            return Err(corrupt(format!(
                "truncated message set: {left} bytes after the last message"
            )));
        }
        let offset = i64::from_be_bytes(set[at..at + 8].try_into().expect("8 bytes"));
        let size = i32::from_be_bytes(set[at + 8..at + 12].try_into().expect("4 bytes"));
        let size = usize::try_from(size).unwrap_or(0);
        if size < MIN_MESSAGE_V0 {
            return Err(corrupt(format!("message at offset {offset} claims {size} bytes")));
        }
        if left - LOG_OVERHEAD < size {
            return Err(corrupt(format!(
                "truncated message at offset {offset}: {size} bytes claimed, {} left",
                left - LOG_OVERHEAD
            )));
        }
        let start = at + LOG_OVERHEAD;
        messages.push(read_message(offset, set.slice(start..start + size))?);
        at = start + size;
    }
    Ok(messages)
}

/// One message's body (from its CRC to the end of its value).
fn read_message(offset: i64, body: Bytes) -> Result<LegacyMessage, LegacyFormatError> {
    let magic = body[4] as i8;
    match magic {
        0 | 1 => {}
        2 => {
            return Err(LegacyFormatError::Invalid(
                "a record batch (magic 2) needs Produce v3 or later".to_string(),
            ))
        }
        _ => return Err(corrupt(format!("message at offset {offset} has magic {magic}"))),
    }
    let stored_crc = u32::from_be_bytes(body[0..4].try_into().expect("4 bytes"));
    let crc = IEEE.checksum(&body[4..]);
    if crc != stored_crc {
        return Err(corrupt(format!(
            "message at offset {offset}: CRC {stored_crc:#010x} stored, {crc:#010x} computed"
        )));
    }
    let attributes = body[5];
    let mut rest = body.slice(6..);
    let timestamp = if magic == 1 {
        if rest.len() < 8 + 8 {
            return Err(corrupt(format!("magic 1 message at offset {offset} is too short")));
        }
        rest.get_i64()
    } else {
        -1
    };
    let key = read_bytes(&mut rest, offset, "key")?;
    let value = read_bytes(&mut rest, offset, "value")?;
    if !rest.is_empty() {
        return Err(corrupt(format!(
            "message at offset {offset}: {} bytes after its value",
            rest.len()
        )));
    }
    Ok(LegacyMessage { offset, magic, attributes, timestamp, key, value })
}

/// A Kafka `BYTES` field: i32 length, -1 for null.
fn read_bytes(
    rest: &mut Bytes,
    offset: i64,
    what: &str,
) -> Result<Option<Bytes>, LegacyFormatError> {
    if rest.len() < 4 {
        return Err(corrupt(format!("message at offset {offset}: no room for its {what} length")));
    }
    let len = rest.get_i32();
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if rest.len() < len {
        return Err(corrupt(format!(
            "message at offset {offset}: {what} of {len} bytes, {} left",
            rest.len()
        )));
    }
    Ok(Some(rest.split_to(len)))
}

/// The records of a message set, with wrappers opened, and the codec to store them with.
fn unwrap_messages(
    messages: Vec<LegacyMessage>,
) -> Result<(Vec<LegacyMessage>, Codec), LegacyFormatError> {
    let mut records = Vec::with_capacity(messages.len());
    let mut codec = Codec::None;
    for message in messages {
        let message_codec = Codec::from_attributes(message.attributes)?;
        if message_codec == Codec::None {
            records.push(message);
            continue;
        }
        // Kafka keeps the producer's codec (compression.type=producer): the last one seen.
        codec = message_codec;
        let Some(compressed) = message.value else {
            return Err(corrupt(format!(
                "compressed message at offset {} has no value",
                message.offset
            )));
        };
        let inner = message_codec.decompress(compressed).map_err(|e| {
            corrupt(format!(
                "cannot decompress {message_codec:?} message at offset {}: {e}",
                message.offset
            ))
        })?;
        for inner_message in read_message_set(&inner)? {
            if inner_message.magic != message.magic {
                return Err(LegacyFormatError::Invalid(format!(
                    "wrapper of magic {} holds a message of magic {}",
                    message.magic, inner_message.magic
                )));
            }
            if inner_message.attributes & 0x07 != 0 {
                return Err(LegacyFormatError::Invalid(
                    "a compressed message inside a compressed message".to_string(),
                ));
            }
            records.push(inner_message);
        }
    }
    Ok((records, codec))
}

/// Converts a Produce v0-v2 message set into one v2 record batch (invariant 2), with the
/// compression the producer used. An empty set converts to an empty `Bytes`.
pub fn message_set_to_record_batch(set: &Bytes) -> Result<Bytes, LegacyFormatError> {
    let (records, codec) = unwrap_messages(read_message_set(set)?)?;
    if records.is_empty() {
        return Ok(Bytes::new());
    }
    let mut plain = BytesMut::new();
    let base_timestamp = records[0].timestamp;
    for (delta, record) in records.iter().enumerate() {
        write_record(&mut plain, record, delta as i64, record.timestamp - base_timestamp);
    }
    let body = codec.compress(&plain).map_err(|e| {
        corrupt(format!("cannot compress the converted records with {codec:?}: {e}"))
    })?;
    let max_timestamp = records.iter().map(|r| r.timestamp).max().expect("one record or more");
    let count = i32::try_from(records.len())
        .map_err(|_| corrupt(format!("{} messages in one set", records.len())))?;
    let mut batch = BytesMut::with_capacity(BATCH_HEADER_BYTES + body.len());
    batch.put_i64(0); // base offset: the log assigns it
    batch.put_i32((BATCH_HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32);
    batch.put_i32(-1); // partition leader epoch
    batch.put_i8(2); // magic
    batch.put_u32(0); // CRC-32C, patched below
    batch.put_i16(codec as i16); // attributes: CreateTime, not transactional, not control
    batch.put_i32(count - 1); // last offset delta
    batch.put_i64(base_timestamp);
    batch.put_i64(max_timestamp);
    batch.put_i64(-1); // producer id: idempotence does not apply to v0/v1
    batch.put_i16(-1); // producer epoch
    batch.put_i32(-1); // base sequence
    batch.put_i32(count);
    batch.put_slice(&body);
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(batch.freeze())
}

/// One v2 record (no headers): varint-framed, deltas from the batch's base.
fn write_record(
    out: &mut BytesMut,
    record: &LegacyMessage,
    offset_delta: i64,
    timestamp_delta: i64,
) {
    let mut body = BytesMut::new();
    body.put_i8(0); // attributes
    put_varint(&mut body, timestamp_delta);
    put_varint(&mut body, offset_delta);
    for field in [&record.key, &record.value] {
        match field {
            Some(bytes) => {
                put_varint(&mut body, bytes.len() as i64);
                body.put_slice(bytes);
            }
            None => put_varint(&mut body, -1),
        }
    }
    put_varint(&mut body, 0); // headers
    put_varint(out, body.len() as i64);
    out.put_slice(&body);
}

/// Kafka's zigzag varint (as protobuf's sint64).
fn put_varint(out: &mut BytesMut, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.put_u8((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.put_u8(zigzag as u8);
}

/// Converts stored v2 batches (as a Fetch reads them) into a magic-0 or magic-1 message
/// set for Fetch v0-v3 (invariant 3). Records of an uncompressed batch below
/// `fetch_offset` are left out; a compressed batch is converted whole, as Kafka does (the
/// client skips what it did not ask for). A partial batch at the end is dropped.
pub fn record_batches_to_message_set(
    stored: &Bytes,
    magic: i8,
    fetch_offset: i64,
    max_bytes: usize,
) -> Result<Bytes, LegacyFormatError> {
    assert!(magic == 0 || magic == 1, "down-conversion to magic {magic}");
    let mut out = BytesMut::new();
    let mut at = 0;
    while stored.len() - at >= BATCH_HEADER_BYTES {
        let batch_length = i32::from_be_bytes(stored[at + 8..at + 12].try_into().expect("4"));
        let end = at + LOG_OVERHEAD + usize::try_from(batch_length).unwrap_or(0);
        if batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD) as i32 || end > stored.len() {
            break;
        }
        let batch = stored.slice(at..end);
        at = end;
        let attributes = batch[22];
        if attributes & CONTROL_BATCH != 0 {
            continue;
        }
        let codec = match Codec::from_attributes(attributes) {
            Ok(codec) => codec,
            // A consumer that reaches a batch it cannot read gets what came before it.
            Err(e) if out.is_empty() => return Err(e),
            Err(_) => break,
        };
        let log_append_time = (attributes & LOG_APPEND_TIME != 0)
            .then(|| i64::from_be_bytes(batch[35..43].try_into().expect("8 bytes")));
        let records = RecordBatchDecoder::decode(&mut batch.clone())
            .map_err(|e| corrupt(format!("stored batch cannot be decoded: {e}")))?
            .records;
        let messages = to_messages(&records, magic, log_append_time);
        let room = max_bytes.saturating_sub(out.len());
        let first = out.is_empty();
        if codec == Codec::None {
            let wanted = messages.iter().filter(|m| m.offset >= fetch_offset);
            for message in wanted {
                if !first && entry_size(message) > max_bytes.saturating_sub(out.len()) {
                    return Ok(out.freeze());
                }
                write_message(&mut out, message);
            }
        } else {
            let wrapper = wrap(&messages, magic, codec, log_append_time)?;
            if !first && entry_size(&wrapper) > room {
                break;
            }
            write_message(&mut out, &wrapper);
        }
        if out.len() >= max_bytes {
            break;
        }
    }
    Ok(out.freeze())
}

/// The records of one stored batch as messages of `magic`; headers are dropped.
fn to_messages(records: &[Record], magic: i8, log_append_time: Option<i64>) -> Vec<LegacyMessage> {
    let timestamp_type = if magic == 1 && log_append_time.is_some() { LOG_APPEND_TIME } else { 0 };
    records
        .iter()
        .filter(|r| !r.control)
        .map(|r| LegacyMessage {
            offset: r.offset,
            magic,
            attributes: timestamp_type,
            timestamp: if magic == 0 { -1 } else { log_append_time.unwrap_or(r.timestamp) },
            key: r.key.clone(),
            value: r.value.clone(),
        })
        .collect()
}

/// One compressed wrapper message holding `messages` (offsets made relative for magic 1).
fn wrap(
    messages: &[LegacyMessage],
    magic: i8,
    codec: Codec,
    log_append_time: Option<i64>,
) -> Result<LegacyMessage, LegacyFormatError> {
    let (Some(first), Some(last)) = (messages.first(), messages.last()) else {
        return Err(corrupt("a stored compressed batch without records".to_string()));
    };
    let mut inner = BytesMut::new();
    for message in messages {
        let offset = if magic == 1 { message.offset - first.offset } else { message.offset };
        write_message(&mut inner, &LegacyMessage { offset, ..message.clone() });
    }
    let value = codec
        .compress(&inner)
        .map_err(|e| corrupt(format!("cannot compress with {codec:?}: {e}")))?;
    let max_timestamp = messages.iter().map(|m| m.timestamp).max().unwrap_or(-1);
    Ok(LegacyMessage {
        offset: last.offset,
        magic,
        attributes: codec as u8 | first.attributes,
        timestamp: log_append_time.unwrap_or(max_timestamp),
        key: None,
        value: Some(value),
    })
}

/// Bytes `message` takes in a message set, overhead included.
fn entry_size(message: &LegacyMessage) -> usize {
    let fields =
        message.key.as_ref().map_or(0, Bytes::len) + message.value.as_ref().map_or(0, Bytes::len);
    let timestamp = if message.magic == 1 { 8 } else { 0 };
    LOG_OVERHEAD + MIN_MESSAGE_V0 + timestamp + fields
}

/// Appends `message` to a message set, computing its size and CRC.
pub fn write_message(out: &mut BytesMut, message: &LegacyMessage) {
    out.put_i64(message.offset);
    let size_at = out.len();
    out.put_i32(0);
    out.put_u32(0);
    let body_at = out.len();
    out.put_i8(message.magic);
    out.put_u8(message.attributes);
    if message.magic == 1 {
        out.put_i64(message.timestamp);
    }
    for field in [&message.key, &message.value] {
        match field {
            Some(bytes) => {
                out.put_i32(bytes.len() as i32);
                out.put_slice(bytes);
            }
            None => out.put_i32(-1),
        }
    }
    let crc = IEEE.checksum(&out[body_at..]);
    let size = (out.len() - size_at - 4) as i32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    out[size_at + 4..size_at + 8].copy_from_slice(&crc.to_be_bytes());
}

/// Builds a message set of `messages`, compressed into one wrapper when `codec` is not
/// `None` (what an old producer sends). For tests and the fuzz corpus.
pub fn encode_message_set(messages: &[LegacyMessage], codec: Codec) -> Bytes {
    let mut out = BytesMut::new();
    if codec == Codec::None {
        for message in messages {
            write_message(&mut out, message);
        }
    } else {
        let wrapper = wrap(messages, messages[0].magic, codec, None).expect("compressible");
        write_message(&mut out, &wrapper);
    }
    out.freeze()
}
