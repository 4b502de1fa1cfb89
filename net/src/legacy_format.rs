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
//!    first message (or compressed wrapper) is always there, so a consumer always makes
//!    progress; control batches are skipped and record headers dropped, as Kafka does.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy};
use kafka_protocol::records::{Record, RecordBatchDecoder};

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
    /// Compressed records that decompress to more than the caller's limit:
    /// MESSAGE_TOO_LARGE (a few compressed bytes must not make the broker allocate GBs).
    TooLarge(String),
}

impl std::fmt::Display for LegacyFormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegacyFormatError::Corrupt(m)
            | LegacyFormatError::Invalid(m)
            | LegacyFormatError::UnsupportedCompression(m)
            | LegacyFormatError::TooLarge(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LegacyFormatError {}

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

    /// Decompresses a wrapper message's value (or a stored batch's records), never to
    /// more than `limit` bytes; `magic` matters for lz4 (below). The codec crate's own
    /// decompressors have no bound, so the streams are read here.
    fn decompress(
        self,
        compressed: Bytes,
        magic: i8,
        limit: usize,
    ) -> Result<Bytes, LegacyFormatError> {
        let failed = |e: std::io::Error| corrupt(format!("cannot decompress {self:?}: {e}"));
        match self {
            Codec::None => Ok(compressed),
            Codec::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(&compressed[..]), limit)
                .map_err(|e| e.unwrap_or_else(failed)),
            Codec::Snappy => snappy_decompress(&compressed, limit),
            Codec::Lz4 => {
                let frame = match magic {
                    0 => lz4_with_header_checksum(&compressed, false).map_err(corrupt)?,
                    _ => compressed,
                };
                let decoder = lz4::Decoder::new(&frame[..]).map_err(failed)?;
                read_bounded(decoder, limit).map_err(|e| e.unwrap_or_else(failed))
            }
        }
    }

    /// Compresses an inner message set; `magic` matters for lz4 (below).
    fn compress(self, plain: &[u8], magic: i8) -> Result<Bytes, String> {
        let mut out = BytesMut::new();
        let put = |b: &mut BytesMut| {
            b.put_slice(plain);
            Ok(())
        };
        let done = match self {
            Codec::None => return Ok(Bytes::copy_from_slice(plain)),
            Codec::Gzip => Gzip::compress(&mut out, put),
            Codec::Snappy => Snappy::compress(&mut out, put),
            Codec::Lz4 => Lz4::compress(&mut out, put),
        };
        done.map_err(|e| e.to_string())?;
        match self {
            Codec::Lz4 if magic == 0 => lz4_with_header_checksum(&out, true),
            _ => Ok(out.freeze()),
        }
    }
}

/// Reads `reader` to its end; `Err(Ok(..))` past `limit` bytes, `Err(Err(io))` on a bad
/// stream.
fn read_bounded(
    reader: impl std::io::Read,
    limit: usize,
) -> Result<Bytes, Result<LegacyFormatError, std::io::Error>> {
    use std::io::Read;
    let mut out = Vec::new();
    reader.take(limit as u64 + 1).read_to_end(&mut out).map_err(Err)?;
    if out.len() > limit {
        return Err(Ok(too_large(limit)));
    }
    Ok(Bytes::from(out))
}

fn too_large(limit: usize) -> LegacyFormatError {
    LegacyFormatError::TooLarge(format!("compressed records decompress to more than {limit} bytes"))
}

/// Kafka's snappy: xerial-framed blocks (what Kafka's Java client writes), or one raw
/// snappy block (accepted by Kafka too). Each block's length is read from its header
/// before anything is allocated for it.
fn snappy_decompress(data: &[u8], limit: usize) -> Result<Bytes, LegacyFormatError> {
    const XERIAL_HEADER_BYTES: usize = 16;
    let failed = |e: snap::Error| corrupt(format!("cannot decompress Snappy: {e}"));
    let mut out = Vec::new();
    let mut push = |block: &[u8]| {
        let len = snap::raw::decompress_len(block).map_err(failed)?;
        if len > limit - out.len() {
            return Err(too_large(limit));
        }
        let at = out.len();
        out.resize(at + len, 0);
        snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(failed)?;
        Ok(())
    };
    if data.len() < XERIAL_HEADER_BYTES || data[..8] != *b"\x82SNAPPY\x00" {
        push(data)?;
        return Ok(Bytes::from(out));
    }
    let mut rest = &data[XERIAL_HEADER_BYTES..];
    while !rest.is_empty() {
        let truncated = || corrupt("truncated xerial snappy block".to_string());
        let len_bytes: [u8; 4] = rest.get(..4).ok_or_else(truncated)?.try_into().expect("4");
        let len = u32::from_be_bytes(len_bytes) as usize;
        let block = rest.get(4..4 + len).ok_or_else(truncated)?;
        push(block)?;
        rest = &rest[4 + len..];
    }
    Ok(Bytes::from(out))
}

/// Kafka before 0.10 wrote the LZ4 frame's header checksum over the frame's magic number
/// too (KAFKA-3160), and magic-0 messages keep that: Kafka ignores the checksum when it
/// reads magic 0 and writes the old one when it writes magic 0 (librdkafka does the same).
/// Returns `frame` with its header checksum byte set to the old (`broken`) or the standard
/// value, which the lz4 library checks.
fn lz4_with_header_checksum(frame: &[u8], broken: bool) -> Result<Bytes, String> {
    const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];
    if frame.len() < 7 || frame[..4] != LZ4_FRAME_MAGIC {
        return Err("not an LZ4 frame".to_string());
    }
    let flags = frame[4];
    // FLG, BD, then an 8-byte content size (FLG bit 3) and a 4-byte dictionary id (bit 0).
    let descriptor_end =
        6 + if flags & 0x08 != 0 { 8 } else { 0 } + if flags & 0x01 != 0 { 4 } else { 0 };
    if frame.len() <= descriptor_end {
        return Err("LZ4 frame shorter than its header".to_string());
    }
    let covered = if broken { &frame[..descriptor_end] } else { &frame[4..descriptor_end] };
    let mut fixed = BytesMut::from(frame);
    fixed[descriptor_end] = (xxh32(covered) >> 8) as u8;
    Ok(fixed.freeze())
}

/// XXH32 with seed 0 (the LZ4 frame format's checksum), for the few header bytes above.
fn xxh32(data: &[u8]) -> u32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;
    const P3: u32 = 3_266_489_917;
    const P4: u32 = 668_265_263;
    const P5: u32 = 374_761_393;
    let lane = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let mut stripes = data.chunks_exact(16);
    let mut hash = if data.len() >= 16 {
        let mut v = [P1.wrapping_add(P2), P2, 0, 0u32.wrapping_sub(P1)];
        for stripe in &mut stripes {
            for (i, acc) in v.iter_mut().enumerate() {
                let input = lane(&stripe[4 * i..4 * i + 4]);
                *acc = acc.wrapping_add(input.wrapping_mul(P2)).rotate_left(13).wrapping_mul(P1);
            }
        }
        let [a, b, c, d] = v;
        a.rotate_left(1)
            .wrapping_add(b.rotate_left(7))
            .wrapping_add(c.rotate_left(12))
            .wrapping_add(d.rotate_left(18))
    } else {
        P5
    };
    hash = hash.wrapping_add(data.len() as u32);
    let rest = stripes.remainder();
    let mut words = rest.chunks_exact(4);
    for word in &mut words {
        hash = hash.wrapping_add(lane(word).wrapping_mul(P3)).rotate_left(17).wrapping_mul(P4);
    }
    for &byte in words.remainder() {
        hash = hash.wrapping_add(u32::from(byte).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    hash ^= hash >> 15;
    hash = hash.wrapping_mul(P2);
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(P3);
    hash ^ (hash >> 16)
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
    let crc = crc32fast::hash(&body[4..]);
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
    max_records_bytes: usize,
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
        let inner = message_codec.decompress(compressed, message.magic, max_records_bytes)?;
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
pub fn message_set_to_record_batch(
    set: &Bytes,
    max_records_bytes: usize,
) -> Result<Bytes, LegacyFormatError> {
    let (records, codec) = unwrap_messages(read_message_set(set)?, max_records_bytes)?;
    if records.is_empty() {
        return Ok(Bytes::new());
    }
    let mut plain = BytesMut::new();
    let base_timestamp = records[0].timestamp;
    for (delta, record) in records.iter().enumerate() {
        write_record(&mut plain, record, delta as i64, record.timestamp - base_timestamp);
    }
    // A v2 batch's lz4 frame has the standard header checksum.
    let body = codec.compress(&plain, 2).map_err(|e| {
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
    // The length prefix comes first: size the body from its fields instead of building
    // it in a buffer of its own (no allocation per record).
    let fields = [&record.key, &record.value];
    let field_len = |f: &Option<Bytes>| f.as_ref().map_or(-1, |b| b.len() as i64);
    let body_len = 1
        + varint_len(timestamp_delta)
        + varint_len(offset_delta)
        + fields
            .iter()
            .map(|f| varint_len(field_len(f)) + field_len(f).max(0) as usize)
            .sum::<usize>()
        + varint_len(0);
    put_varint(out, body_len as i64);
    out.put_i8(0); // attributes
    put_varint(out, timestamp_delta);
    put_varint(out, offset_delta);
    for field in fields {
        put_varint(out, field_len(field));
        if let Some(bytes) = field {
            out.put_slice(bytes);
        }
    }
    put_varint(out, 0); // headers
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Bytes [`put_varint`] writes for `value`.
fn varint_len(value: i64) -> usize {
    let bits = 64 - zigzag(value).leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

/// Kafka's zigzag varint (as protobuf's sint64).
fn put_varint(out: &mut BytesMut, value: i64) {
    let mut zigzag = zigzag(value);
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
    max_records_bytes: usize,
) -> Result<Bytes, LegacyFormatError> {
    assert!(magic == 0 || magic == 1, "down-conversion to magic {magic}");
    let mut out = BytesMut::new();
    for batch in whole_batches(stored) {
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
        let records = match decode_stored_batch(&batch, codec, max_records_bytes) {
            Ok(records) => records,
            Err(e) if out.is_empty() => return Err(e),
            Err(_) => break,
        };
        let messages = to_messages(&records, magic, log_append_time);
        if messages.is_empty() {
            continue;
        }
        if codec == Codec::None {
            let wanted = messages.iter().filter(|m| m.offset >= fetch_offset);
            for message in wanted {
                if !out.is_empty() && entry_size(message) > max_bytes.saturating_sub(out.len()) {
                    return Ok(out.freeze());
                }
                write_message(&mut out, message);
            }
        } else {
            let wrapper = wrap(&messages, magic, codec, log_append_time)?;
            if !out.is_empty() && entry_size(&wrapper) > max_bytes.saturating_sub(out.len()) {
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

/// The whole v2 batches of `stored` (as a Fetch reads them), in order; a partial batch
/// at the end, or bytes too short to be a batch, end the iteration.
fn whole_batches(stored: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if stored.len() - at < BATCH_HEADER_BYTES {
            return None;
        }
        let batch_length = i32::from_be_bytes(stored[at + 8..at + 12].try_into().expect("4"));
        let end = at + LOG_OVERHEAD + usize::try_from(batch_length).unwrap_or(0);
        if batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD) as i32 || end > stored.len() {
            return None;
        }
        let batch = stored.slice(at..end);
        at = end;
        Some(batch)
    })
}

/// The data batches of `stored` (control batches, the transaction markers, left out), each
/// as its base offset and its records decompressed to at most `max_records_bytes`, or why
/// they cannot be read (zstd, corruption). For showing records, not for serving them.
pub fn stored_records(
    stored: &Bytes,
    max_records_bytes: usize,
) -> Vec<(i64, Result<Vec<Record>, LegacyFormatError>)> {
    whole_batches(stored)
        .filter(|batch| batch[22] & CONTROL_BATCH == 0)
        .map(|batch| {
            let base_offset = i64::from_be_bytes(batch[0..8].try_into().expect("8 bytes"));
            let records = Codec::from_attributes(batch[22])
                .and_then(|codec| decode_stored_batch(&batch, codec, max_records_bytes));
            (base_offset, records)
        })
        .collect()
}

/// The records of one stored v2 batch, decompressed to at most `limit` bytes.
fn decode_stored_batch(
    batch: &Bytes,
    codec: Codec,
    limit: usize,
) -> Result<Vec<Record>, LegacyFormatError> {
    let failure = std::cell::RefCell::new(None);
    let decompress = |records: &mut Bytes, _| {
        codec.decompress(records.clone(), 2, limit).map_err(|e| {
            failure.replace(Some(e.clone()));
            e.into()
        })
    };
    match RecordBatchDecoder::decode_with_custom_compression(&mut batch.clone(), Some(decompress)) {
        Ok(set) => Ok(set.records),
        Err(e) => Err(failure
            .take()
            .unwrap_or_else(|| corrupt(format!("stored batch cannot be decoded: {e}")))),
    }
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
        .compress(&inner, magic)
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
    let crc = crc32fast::hash(&out[body_at..]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tests allow compressed records to decompress to.
    const LIMIT: usize = 1 << 26;

    fn up(set: &Bytes) -> Result<Bytes, LegacyFormatError> {
        message_set_to_record_batch(set, LIMIT)
    }

    fn down(
        stored: &Bytes,
        magic: i8,
        fetch_offset: i64,
        max_bytes: usize,
    ) -> Result<Bytes, LegacyFormatError> {
        record_batches_to_message_set(stored, magic, fetch_offset, max_bytes, LIMIT)
    }
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
    use kafka_protocol::records::{TimestampType, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};

    fn message(
        offset: i64,
        magic: i8,
        timestamp: i64,
        key: Option<&str>,
        value: &str,
    ) -> LegacyMessage {
        LegacyMessage {
            offset,
            magic,
            attributes: 0,
            timestamp: if magic == 0 { -1 } else { timestamp },
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
        }
    }

    /// `n` messages from offset `first`, every third with a null key, one null value.
    fn messages(first: i64, n: i64, magic: i8) -> Vec<LegacyMessage> {
        (0..n)
            .map(|i| {
                let key = format!("key-{i}");
                let mut m = message(first + i, magic, 1_700_000_000_000 + 7 * i, None, "");
                m.key = (i % 3 != 0).then(|| Bytes::from(key));
                m.value = (i != 4).then(|| Bytes::from(format!("value-{i}:\0\u{1}\u{ff}")));
                m
            })
            .collect()
    }

    /// The stored form of a converted batch: its base offset rewritten, as the log does.
    fn stored_at(batch: &Bytes, base_offset: i64) -> Bytes {
        let mut stored = BytesMut::from(&batch[..]);
        stored[0..8].copy_from_slice(&base_offset.to_be_bytes());
        stored.freeze()
    }

    fn header_i64(batch: &[u8], at: usize) -> i64 {
        i64::from_be_bytes(batch[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn an_uncompressed_magic_1_set_round_trips_byte_identical() {
        let sent = encode_message_set(&messages(0, 10, 1), Codec::None);
        let batch = up(&sent).unwrap();
        assert_eq!(batch[16], 2, "magic");
        assert_eq!(
            u32::from_be_bytes(batch[17..21].try_into().unwrap()),
            crc32c::crc32c(&batch[21..])
        );
        assert_eq!(i32::from_be_bytes(batch[53..57].try_into().unwrap()), -1, "base sequence");
        let fetched = down(&batch, 1, 0, usize::MAX).unwrap();
        assert_eq!(fetched, sent);
        // At the offsets the log gave them.
        let expected = encode_message_set(&messages(100, 10, 1), Codec::None);
        let fetched = down(&stored_at(&batch, 100), 1, 100, usize::MAX);
        assert_eq!(fetched.unwrap(), expected);
    }

    #[test]
    fn magic_0_has_no_timestamps_and_magic_1_keeps_them() {
        let sent = encode_message_set(&messages(0, 3, 0), Codec::None);
        let batch = up(&sent).unwrap();
        assert_eq!(
            (header_i64(&batch, 27), header_i64(&batch, 35)),
            (-1, -1),
            "base/max timestamp"
        );
        let as_v1 = read_message_set(&down(&batch, 1, 0, usize::MAX).unwrap());
        assert!(as_v1.unwrap().iter().all(|m| m.magic == 1 && m.timestamp == -1));
        assert_eq!(down(&batch, 0, 0, usize::MAX).unwrap(), sent);

        let sent = messages(0, 3, 1);
        let batch = up(&encode_message_set(&sent, Codec::None)).unwrap();
        assert_eq!(header_i64(&batch, 27), sent[0].timestamp);
        assert_eq!(header_i64(&batch, 35), sent[2].timestamp);
        let as_v0 = down(&batch, 0, 0, usize::MAX).unwrap();
        let as_v0 = read_message_set(&as_v0).unwrap();
        assert!(as_v0.iter().all(|m| m.magic == 0 && m.timestamp == -1));
        assert_eq!(
            as_v0.iter().map(|m| &m.value).collect::<Vec<_>>(),
            sent.iter().map(|m| &m.value).collect::<Vec<_>>()
        );
    }

    /// A fetched wrapper opened as a client does: inner offsets made absolute.
    fn open_wrapper(set: &Bytes) -> (Codec, Vec<LegacyMessage>) {
        let wrappers = read_message_set(set).unwrap();
        assert_eq!(wrappers.len(), 1, "one wrapper message");
        let wrapper = &wrappers[0];
        let codec = Codec::from_attributes(wrapper.attributes).unwrap();
        let inner = codec.decompress(wrapper.value.clone().unwrap(), wrapper.magic, LIMIT).unwrap();
        let mut inner = read_message_set(&inner).unwrap();
        if wrapper.magic == 1 {
            let base = wrapper.offset - inner.last().unwrap().offset;
            inner.iter_mut().for_each(|m| m.offset += base);
        }
        (codec, inner)
    }

    #[test]
    fn compressed_wrapper_sets_convert_both_ways_with_their_codec() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4] {
            for magic in [0, 1] {
                let sent = messages(0, 6, magic);
                let set = encode_message_set(&sent, codec);
                let batch = up(&set).unwrap();
                assert_eq!(batch[22] & 0x07, codec as u8, "{codec:?} kept");
                let records = RecordBatchDecoder::decode(&mut batch.clone()).unwrap().records;
                assert_eq!(records.len(), 6);
                assert!(records
                    .iter()
                    .zip(&sent)
                    .all(|(r, m)| r.key == m.key && r.value == m.value));

                let fetched = down(&stored_at(&batch, 40), magic, 42, usize::MAX);
                let (fetched_codec, inner) = open_wrapper(&fetched.unwrap());
                assert_eq!(fetched_codec, codec);
                let expected = messages(40, 6, magic);
                assert_eq!(
                    inner, expected,
                    "{codec:?} magic {magic}: the whole batch, at its offsets"
                );
            }
        }
    }

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        for value in [0, 1, -1, 63, 64, -64, -65, 300, i64::from(i32::MAX), i64::MIN, i64::MAX] {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            assert_eq!(varint_len(value), out.len(), "{value}");
        }
    }

    #[test]
    fn xxh32_matches_its_reference_vectors() {
        assert_eq!(xxh32(b""), 0x02cc_5d05);
        assert_eq!(xxh32(b"a"), 0x550d_7456);
        assert_eq!(xxh32(b"abc"), 0x32d1_53ff);
        assert_eq!(xxh32(b"Nobody inspects the spammish repetition"), 0xe229_3b2f);
    }

    /// Magic-0 lz4 sets carry Kafka's old header checksum (KAFKA-3160), as librdkafka
    /// writes them for message format v0 (kcat with broker.version.fallback=0.9.0 was
    /// refused before): read whatever the byte says, written back the old way.
    #[test]
    fn magic_0_lz4_frames_keep_the_old_header_checksum() {
        let plain = b"lz4 lz4 lz4 lz4 lz4 lz4 lz4 lz4 lz4 lz4 lz4 lz4".repeat(8);
        let standard = Codec::Lz4.compress(&plain, 1).unwrap();
        assert_eq!(lz4_with_header_checksum(&standard, false).unwrap(), standard);
        let old = Codec::Lz4.compress(&plain, 0).unwrap();
        assert_ne!(old, standard, "the header checksum byte differs");
        assert_eq!(old.len(), standard.len());
        assert!(Codec::Lz4.decompress(old.clone(), 1, LIMIT).is_err(), "lz4 checks the byte");
        assert_eq!(Codec::Lz4.decompress(old, 0, LIMIT).unwrap(), plain);
        assert_eq!(Codec::Lz4.decompress(standard, 0, LIMIT).unwrap(), plain, "either is read");
    }

    #[test]
    fn a_bad_crc_a_truncated_message_or_a_bad_magic_is_refused() {
        let set = encode_message_set(&messages(0, 2, 1), Codec::None);
        let mut flipped = BytesMut::from(&set[..]);
        let last = flipped.len() - 1;
        flipped[last] ^= 0x01;
        let err = up(&flipped.freeze()).unwrap_err();
        assert!(matches!(&err, LegacyFormatError::Corrupt(m) if m.contains("CRC")), "{err:?}");

        for cut in [1, 5, set.len() - 20] {
            let err = up(&set.slice(..set.len() - cut)).unwrap_err();
            assert!(matches!(err, LegacyFormatError::Corrupt(_)), "cut {cut}: {err:?}");
        }

        let mut magic_3 = BytesMut::from(&set[..]);
        magic_3[16] = 3;
        let err = up(&magic_3.freeze()).unwrap_err();
        assert!(matches!(err, LegacyFormatError::Corrupt(_)), "{err:?}");

        let record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: 0,
            timestamp: 0,
            key: None,
            value: Some(Bytes::from_static(b"v2")),
            headers: Default::default(),
        };
        let mut v2 = BytesMut::new();
        let options = RecordEncodeOptions { version: 2, compression: Compression::None };
        RecordBatchEncoder::encode(&mut v2, [&record], &options).unwrap();
        let err = up(&v2.freeze()).unwrap_err();
        assert!(matches!(err, LegacyFormatError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn nested_compression_mixed_magic_and_zstd_are_refused() {
        let inner = encode_message_set(&messages(0, 2, 1), Codec::Gzip);
        let mut wrapper = message(1, 1, 5, None, "");
        wrapper.attributes = Codec::Gzip as u8;
        wrapper.value = Some(Codec::Gzip.compress(&inner, 1).unwrap());
        let err = up(&encode_message_set(&[wrapper.clone()], Codec::None));
        assert!(matches!(err, Err(LegacyFormatError::Invalid(_))), "{err:?}");

        wrapper.value = Some(
            Codec::Gzip.compress(&encode_message_set(&messages(0, 2, 0), Codec::None), 1).unwrap(),
        );
        let err = up(&encode_message_set(&[wrapper.clone()], Codec::None));
        assert!(matches!(err, Err(LegacyFormatError::Invalid(_))), "{err:?}");

        wrapper.attributes = 4;
        let err = up(&encode_message_set(&[wrapper], Codec::None));
        assert!(matches!(err, Err(LegacyFormatError::UnsupportedCompression(_))), "{err:?}");
    }

    /// A few KB that decompress to 4 MiB are refused (MESSAGE_TOO_LARGE) before the
    /// broker allocates past its limit, in both directions and with every codec.
    #[test]
    fn compressed_records_past_the_limit_are_too_large() {
        let mut big = message(0, 1, 5, None, "");
        big.value = Some(Bytes::from(vec![0u8; 4 << 20]));
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4] {
            let set = encode_message_set(std::slice::from_ref(&big), codec);
            assert!(set.len() < 1 << 20, "{codec:?}: {} bytes", set.len());
            let err = message_set_to_record_batch(&set, 1 << 20).unwrap_err();
            assert!(matches!(err, LegacyFormatError::TooLarge(_)), "{codec:?}: {err:?}");
            let batch = up(&set).unwrap();
            let err = record_batches_to_message_set(&batch, 1, 0, 1 << 20, 1 << 20).unwrap_err();
            assert!(matches!(err, LegacyFormatError::TooLarge(_)), "{codec:?} down: {err:?}");
            assert!(record_batches_to_message_set(&batch, 1, 0, 1 << 20, 5 << 20).is_ok());
        }
    }

    #[test]
    fn an_empty_set_converts_to_nothing_both_ways() {
        assert_eq!(up(&Bytes::new()).unwrap(), Bytes::new());
        assert_eq!(down(&Bytes::new(), 1, 0, 100).unwrap(), Bytes::new());
    }

    #[test]
    fn down_conversion_gives_whole_messages_within_max_bytes_and_at_least_one() {
        let sent = messages(0, 10, 1);
        let batch = up(&encode_message_set(&sent, Codec::None)).unwrap();
        let one = encode_message_set(&sent[..1], Codec::None).len();
        let fetched = down(&batch, 1, 0, 3 * one).unwrap();
        let read = read_message_set(&fetched).unwrap();
        assert!(!read.is_empty() && fetched.len() <= 3 * one, "{} bytes", fetched.len());
        assert_eq!(read, sent[..read.len()]);
        // The first message is there even when it alone is over the limit.
        let fetched = down(&batch, 1, 0, 1).unwrap();
        assert_eq!(read_message_set(&fetched).unwrap(), sent[..1]);
        // Records below the fetch offset of an uncompressed batch are left out, and a
        // limit can end the set inside the next batch.
        let two = Bytes::from([batch.to_vec(), stored_at(&batch, 10).to_vec()].concat());
        let up_to_10 = encode_message_set(&sent[7..], Codec::None).len() + one;
        let fetched = down(&two, 1, 7, up_to_10).unwrap();
        let offsets: Vec<i64> =
            read_message_set(&fetched).unwrap().iter().map(|m| m.offset).collect();
        assert_eq!(offsets, vec![7, 8, 9, 10]);
        let fetched = down(&two, 1, 7, usize::MAX).unwrap();
        assert_eq!(read_message_set(&fetched).unwrap().len(), 13);
        // A partial batch at the end is dropped.
        let partial = two.slice(..two.len() - 5);
        let fetched = down(&partial, 1, 0, usize::MAX).unwrap();
        assert_eq!(read_message_set(&fetched).unwrap().len(), 10);
    }

    #[test]
    fn log_append_time_batches_give_that_time_to_every_message() {
        let batch = up(&encode_message_set(&messages(0, 3, 1), Codec::None));
        let mut stored = BytesMut::from(&batch.unwrap()[..]);
        stored[22] |= LOG_APPEND_TIME;
        stored[35..43].copy_from_slice(&99_000i64.to_be_bytes());
        let crc = crc32c::crc32c(&stored[21..]);
        stored[17..21].copy_from_slice(&crc.to_be_bytes());
        let fetched = down(&stored.freeze(), 1, 0, usize::MAX).unwrap();
        let read = read_message_set(&fetched).unwrap();
        assert!(read.iter().all(|m| m.timestamp == 99_000 && m.attributes == LOG_APPEND_TIME));
    }

    #[test]
    fn control_batches_are_skipped_and_zstd_is_refused_down() {
        let batch = up(&encode_message_set(&messages(0, 2, 1), Codec::None)).unwrap();
        let with_attributes = |bits: u8| {
            let mut stored = BytesMut::from(&batch[..]);
            stored[22] |= bits;
            let crc = crc32c::crc32c(&stored[21..]);
            stored[17..21].copy_from_slice(&crc.to_be_bytes());
            stored.freeze()
        };
        let control = with_attributes(CONTROL_BATCH);
        let both = Bytes::from([control.to_vec(), stored_at(&batch, 2).to_vec()].concat());
        let fetched = down(&both, 1, 0, usize::MAX).unwrap();
        let offsets: Vec<i64> =
            read_message_set(&fetched).unwrap().iter().map(|m| m.offset).collect();
        assert_eq!(offsets, vec![2, 3]);
        let zstd = with_attributes(4);
        let err = down(&zstd, 1, 0, usize::MAX).unwrap_err();
        assert!(matches!(err, LegacyFormatError::UnsupportedCompression(_)), "{err:?}");
    }

    #[test]
    fn arbitrary_bytes_convert_or_fail_without_panicking() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds = [
            encode_message_set(&messages(0, 3, 1), Codec::None),
            encode_message_set(&messages(0, 3, 0), Codec::Gzip),
            up(&encode_message_set(&messages(0, 3, 1), Codec::Snappy)).unwrap(),
        ];
        for round in 0..3000 {
            let mut data = BytesMut::from(&seeds[round % seeds.len()][..]);
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % data.len();
                data[at] = next() as u8;
            }
            let cut = (next() as usize) % (data.len() + 1);
            let data = data.freeze().slice(..cut);
            let _ = up(&data);
            let _ = down(&data, (round % 2) as i8, 0, 1 << 20);
        }
    }
}
