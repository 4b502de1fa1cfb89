//! The replication wire format (version 1): the hand-shake that opens a connection and the
//! frames that carry raft messages from shard s of one node to shard s of another.
//!
//! Pure functions, no IO. Runs on the shard that owns the transport (`transport.rs`); not
//! a hot path yet (encoding allocates the protobuf bytes of each message, decoding
//! allocates each message), which is fine for raft traffic: a few frames per tick.
//!
//! A connection starts with one `Hello` from each side, then carries frames one after the
//! other (TCP keeps them in order; a frame never spans connections). All integers are
//! little-endian, as in the shard log's own format.
//!
//! Hello, `HELLO_BYTES` = 24 bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SLRH` |
//! | 4 | 1 | version (= 1) |
//! | 5 | 3 | reserved (0) |
//! | 8 | 8 | node id of the sender |
//! | 16 | 4 | shard of the sender |
//! | 20 | 4 | shard count of the sender's node |
//!
//! Frame header, `FRAME_HEADER_BYTES` = 32 bytes, followed by `body_bytes` body bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SLRF` |
//! | 4 | 1 | version (= 1) |
//! | 5 | 3 | reserved (0) |
//! | 8 | 8 | node id of the sender |
//! | 16 | 4 | shard of the sender |
//! | 20 | 4 | message count |
//! | 24 | 4 | body bytes (at most `MAX_BODY_BYTES`) |
//! | 28 | 4 | CRC-32C of the body |
//!
//! The body is `message count` entries, each: group id u64, message length u32, and the
//! raft-rs `eraftpb::Message` in its protobuf encoding (`message length` bytes).
//!
//! Invariants:
//! 1. Decoding is total: any bytes give a value or a `FrameError`, never a panic, and never
//!    an allocation larger than the input or `MAX_BODY_BYTES` (tests below and the
//!    `replication_frame` fuzz target).
//! 2. A decoded frame's entries cover its body exactly, and their number is the stated
//!    count.
//! 3. `FrameEncoder` never makes a body over `MAX_BODY_BYTES`: a message that does not fit
//!    is refused (the caller starts the next frame, or drops a message too large for any).

use std::fmt;

use protobuf::Message as _;
use raft::eraftpb::Message;

/// Bytes of a `Hello`.
pub const HELLO_BYTES: usize = 24;
/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 32;
/// Bytes of an entry's header in the body (group id, message length).
pub const ENTRY_HEADER_BYTES: usize = 12;
/// The wire format's version; a peer that speaks another one is refused.
pub const WIRE_VERSION: u8 = 1;
/// Largest body a frame may carry: a reader refuses a longer one before reading it. Four
/// times raft's default `max_size_per_msg` (1 MiB), so an append message of a full
/// batch fits with room.
pub const MAX_BODY_BYTES: u32 = 4 << 20;

const HELLO_MAGIC: [u8; 4] = *b"SLRH";
const FRAME_MAGIC: [u8; 4] = *b"SLRF";

/// Why bytes did not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the header or the stated body needs.
    Truncated { needed: usize, available: usize },
    /// Not a hello or frame of this protocol.
    BadMagic([u8; 4]),
    /// Another version of the wire format.
    UnsupportedVersion(u8),
    /// Reserved bytes are not zero.
    BadReserved([u8; 3]),
    /// The stated body is longer than `MAX_BODY_BYTES`.
    TooLarge { body_bytes: u32, max: u32 },
    /// The body's CRC-32C is not the stated one.
    BadCrc { stated: u32, computed: u32 },
    /// An entry of the body is cut short or its message does not parse.
    BadEntry { entry: u32, reason: String },
    /// The body holds another number of entries than stated.
    WrongCount { stated: u32, found: u32 },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated { needed, available } => {
                write!(f, "truncated: {needed} bytes needed, {available} available")
            }
            FrameError::BadMagic(magic) => write!(f, "bad magic {magic:02x?}"),
            FrameError::UnsupportedVersion(v) => {
                write!(f, "wire version {v}, this node speaks {WIRE_VERSION}")
            }
            FrameError::BadReserved(bytes) => write!(f, "reserved bytes {bytes:02x?} not zero"),
            FrameError::TooLarge { body_bytes, max } => {
                write!(f, "body of {body_bytes} bytes, at most {max} allowed")
            }
            FrameError::BadCrc { stated, computed } => {
                write!(f, "body CRC-32C {computed:#010x}, header says {stated:#010x}")
            }
            FrameError::BadEntry { entry, reason } => write!(f, "entry {entry}: {reason}"),
            FrameError::WrongCount { stated, found } => {
                write!(f, "{found} entries in the body, header says {stated}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// What each side says first: who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub node_id: u64,
    pub shard: u32,
    pub shard_count: u32,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = [0u8; HELLO_BYTES];
        out[0..4].copy_from_slice(&HELLO_MAGIC);
        out[4] = WIRE_VERSION;
        out[8..16].copy_from_slice(&self.node_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.shard.to_le_bytes());
        out[20..24].copy_from_slice(&self.shard_count.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Hello, FrameError> {
        check_preamble(bytes, HELLO_BYTES, HELLO_MAGIC)?;
        Ok(Hello {
            node_id: u64_at(bytes, 8),
            shard: u32_at(bytes, 16),
            shard_count: u32_at(bytes, 20),
        })
    }
}

/// A frame's header: who sent it and what its body holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub sender: u64,
    pub shard: u32,
    pub count: u32,
    pub body_bytes: u32,
    pub crc: u32,
}

impl FrameHeader {
    /// Decodes and checks a header: a reader then reads exactly `body_bytes` more bytes,
    /// which are at most `MAX_BODY_BYTES` (invariant 1).
    pub fn decode(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
        check_preamble(bytes, FRAME_HEADER_BYTES, FRAME_MAGIC)?;
        let header = FrameHeader {
            sender: u64_at(bytes, 8),
            shard: u32_at(bytes, 16),
            count: u32_at(bytes, 20),
            body_bytes: u32_at(bytes, 24),
            crc: u32_at(bytes, 28),
        };
        if header.body_bytes > MAX_BODY_BYTES {
            return Err(FrameError::TooLarge {
                body_bytes: header.body_bytes,
                max: MAX_BODY_BYTES,
            });
        }
        Ok(header)
    }

    /// Checks the body's CRC and decodes its entries: (group id, message) in the order
    /// they were pushed (invariant 2).
    pub fn decode_body(&self, body: &[u8]) -> Result<Vec<(u64, Message)>, FrameError> {
        if body.len() != self.body_bytes as usize {
            let needed = self.body_bytes as usize;
            return Err(FrameError::Truncated { needed, available: body.len() });
        }
        let computed = crc32c::crc32c(body);
        if computed != self.crc {
            return Err(FrameError::BadCrc { stated: self.crc, computed });
        }
        let mut messages = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let entry = messages.len() as u32;
            let bad = |reason: String| FrameError::BadEntry { entry, reason };
            if rest.len() < ENTRY_HEADER_BYTES {
                return Err(bad(format!("{} bytes left, an entry header is 12", rest.len())));
            }
            let group = u64_at(rest, 0);
            let length = u32_at(rest, 8) as usize;
            let Some(encoded) = rest.get(ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + length) else {
                let left = rest.len() - ENTRY_HEADER_BYTES;
                return Err(bad(format!("message of {length} bytes, {left} left in the body")));
            };
            let message = Message::parse_from_bytes(encoded)
                .map_err(|e| bad(format!("message of group {group} does not parse: {e}")))?;
            messages.push((group, message));
            rest = &rest[ENTRY_HEADER_BYTES + length..];
        }
        let found = messages.len() as u32;
        if found != self.count {
            return Err(FrameError::WrongCount { stated: self.count, found });
        }
        Ok(messages)
    }
}

/// A whole decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub sender: u64,
    pub shard: u32,
    pub messages: Vec<(u64, Message)>,
}

/// Decodes the frame at the start of `bytes`; returns it and the bytes it took.
pub fn decode_frame(bytes: &[u8]) -> Result<(Frame, usize), FrameError> {
    let header = FrameHeader::decode(bytes)?;
    let end = FRAME_HEADER_BYTES + header.body_bytes as usize;
    let Some(body) = bytes.get(FRAME_HEADER_BYTES..end) else {
        return Err(FrameError::Truncated { needed: end, available: bytes.len() });
    };
    let messages = header.decode_body(body)?;
    Ok((Frame { sender: header.sender, shard: header.shard, messages }, end))
}

/// Builds one frame from messages pushed one by one (invariant 3).
pub struct FrameEncoder {
    sender: u64,
    shard: u32,
    count: u32,
    /// The header's place (filled by `finish`), then the body.
    bytes: Vec<u8>,
}

impl FrameEncoder {
    pub fn new(sender: u64, shard: u32) -> FrameEncoder {
        FrameEncoder { sender, shard, count: 0, bytes: vec![0; FRAME_HEADER_BYTES] }
    }

    /// Bytes one message takes in a body.
    pub fn entry_bytes(message: &Message) -> usize {
        ENTRY_HEADER_BYTES + message.compute_size() as usize
    }

    /// Appends a message of `group` if the body stays within `MAX_BODY_BYTES`; returns
    /// whether it did.
    pub fn push(&mut self, group: u64, message: &Message) -> bool {
        let body = self.bytes.len() - FRAME_HEADER_BYTES;
        let length = message.compute_size();
        if body + ENTRY_HEADER_BYTES + length as usize > MAX_BODY_BYTES as usize {
            return false;
        }
        self.bytes.extend_from_slice(&group.to_le_bytes());
        self.bytes.extend_from_slice(&length.to_le_bytes());
        // Writing into a Vec fails only on a message protobuf cannot encode (none of
        // raft-rs's: it encodes them itself), so a failure is a bug.
        message.write_to_vec(&mut self.bytes).expect("a raft message encodes");
        assert_eq!(
            self.bytes.len() - FRAME_HEADER_BYTES,
            body + ENTRY_HEADER_BYTES + length as usize
        );
        self.count += 1;
        true
    }

    /// Messages pushed so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The finished frame: header and body.
    pub fn finish(mut self) -> Vec<u8> {
        let body_bytes = (self.bytes.len() - FRAME_HEADER_BYTES) as u32;
        let crc = crc32c::crc32c(&self.bytes[FRAME_HEADER_BYTES..]);
        let header = &mut self.bytes[..FRAME_HEADER_BYTES];
        header[0..4].copy_from_slice(&FRAME_MAGIC);
        header[4] = WIRE_VERSION;
        header[8..16].copy_from_slice(&self.sender.to_le_bytes());
        header[16..20].copy_from_slice(&self.shard.to_le_bytes());
        header[20..24].copy_from_slice(&self.count.to_le_bytes());
        header[24..28].copy_from_slice(&body_bytes.to_le_bytes());
        header[28..32].copy_from_slice(&crc.to_le_bytes());
        self.bytes
    }
}

/// The fuzz target's body (fuzz/fuzz_targets/replication_frame.rs, replayed by
/// tests/fuzz_corpus.rs): arbitrary bytes as a hello and as a stream of frames must decode
/// or fail with an error (invariant 1); a frame that decodes must encode back to the
/// same messages (unless re-encoding makes it longer than the maximum: protobuf may write
/// a field longer than it read it, so that is no bug).
pub fn fuzz_decode(data: &[u8]) {
    let _ = Hello::decode(data);
    let mut rest = data;
    while let Ok((frame, used)) = decode_frame(rest) {
        assert!(used >= FRAME_HEADER_BYTES && used <= rest.len());
        // Leader notices ride as a message's context (`notice.rs`): they decode or fail too.
        for (_, message) in frame.messages.iter().filter(|(g, _)| *g == super::notice::NOTICE_GROUP)
        {
            if let Ok(notices) = super::notice::decode(&message.context) {
                assert_eq!(super::notice::encode(&notices)[..], message.context[..]);
            }
        }
        let mut encoder = FrameEncoder::new(frame.sender, frame.shard);
        if frame.messages.iter().all(|(group, message)| encoder.push(*group, message)) {
            let (again, _) = decode_frame(&encoder.finish()).expect("a re-encoded frame decodes");
            assert_eq!(again, frame);
        }
        rest = &rest[used..];
    }
}

/// Length, magic, version and reserved bytes of a hello or frame header.
fn check_preamble(bytes: &[u8], needed: usize, magic: [u8; 4]) -> Result<(), FrameError> {
    if bytes.len() < needed {
        return Err(FrameError::Truncated { needed, available: bytes.len() });
    }
    let found: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
    if found != magic {
        return Err(FrameError::BadMagic(found));
    }
    if bytes[4] != WIRE_VERSION {
        return Err(FrameError::UnsupportedVersion(bytes[4]));
    }
    let reserved: [u8; 3] = bytes[5..8].try_into().expect("3 bytes");
    if reserved != [0; 3] {
        return Err(FrameError::BadReserved(reserved));
    }
    Ok(())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use raft::eraftpb::{Entry, MessageType};

    fn append(to: u64, index: u64, data: &[u8]) -> Message {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgAppend);
        message.from = 1;
        message.to = to;
        message.term = 3;
        message.index = index;
        message.log_term = 2;
        message.commit = index;
        let entry =
            Entry { index: index + 1, term: 3, data: data.to_vec().into(), ..Default::default() };
        message.entries = vec![entry].into();
        message
    }

    fn frame_of(messages: &[(u64, Message)]) -> Vec<u8> {
        let mut encoder = FrameEncoder::new(7, 2);
        for (group, message) in messages {
            assert!(encoder.push(*group, message));
        }
        encoder.finish()
    }

    fn two_messages() -> Vec<(u64, Message)> {
        vec![(1, append(2, 10, b"batch")), (u64::MAX, append(3, 11, b""))]
    }

    #[test]
    fn a_frame_round_trips_with_its_sender_shard_and_messages_in_order() {
        let bytes = frame_of(&two_messages());
        let (frame, used) = decode_frame(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(frame, Frame { sender: 7, shard: 2, messages: two_messages() });
    }

    #[test]
    fn a_snapshot_message_carries_its_data_up_to_the_body_limit() {
        let snapshot_message = |data: Vec<u8>| {
            let mut message = append(2, 0, b"");
            message.set_msg_type(MessageType::MsgSnapshot);
            message.entries.clear();
            let snapshot = message.mut_snapshot();
            snapshot.data = data.into();
            let metadata = snapshot.mut_metadata();
            (metadata.index, metadata.term) = (120, 3);
            metadata.mut_conf_state().voters = vec![1, 2, 3];
            message
        };
        let table = snapshot_message((0..200_000u32).map(|i| i as u8).collect());
        let bytes = frame_of(&[(0, table.clone())]);
        let (frame, _) = decode_frame(&bytes).unwrap();
        assert_eq!(frame.messages, vec![(0, table)]);
        // A snapshot over the body limit does not fit a frame: the transport sends it in
        // pieces (`fragment.rs`).
        let too_large = snapshot_message(vec![7; MAX_BODY_BYTES as usize]);
        assert!(!FrameEncoder::new(7, 2).push(0, &too_large));
    }

    #[test]
    fn a_hello_round_trips() {
        let hello = Hello { node_id: u64::MAX, shard: 3, shard_count: 8 };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
    }

    #[test]
    fn every_cut_of_a_frame_or_hello_is_truncated() {
        let bytes = frame_of(&two_messages());
        for cut in 0..bytes.len() {
            let error = decode_frame(&bytes[..cut]).unwrap_err();
            assert!(matches!(error, FrameError::Truncated { .. }), "cut {cut}: {error:?}");
        }
        let hello = Hello { node_id: 1, shard: 0, shard_count: 1 }.encode();
        for cut in 0..HELLO_BYTES {
            let error = Hello::decode(&hello[..cut]).unwrap_err();
            assert_eq!(error, FrameError::Truncated { needed: HELLO_BYTES, available: cut });
        }
    }

    #[test]
    fn a_body_longer_than_the_maximum_is_refused_from_its_header() {
        let mut bytes = frame_of(&two_messages());
        bytes[24..28].copy_from_slice(&(MAX_BODY_BYTES + 1).to_le_bytes());
        let error = FrameHeader::decode(&bytes).unwrap_err();
        assert_eq!(
            error,
            FrameError::TooLarge { body_bytes: MAX_BODY_BYTES + 1, max: MAX_BODY_BYTES }
        );
    }

    #[test]
    fn the_encoder_refuses_a_message_that_would_pass_the_maximum() {
        let big = append(2, 1, &vec![0xab; MAX_BODY_BYTES as usize / 2]);
        let mut encoder = FrameEncoder::new(1, 0);
        assert!(encoder.push(1, &big));
        assert!(!encoder.push(1, &big), "a second half-maximum message must not fit");
        assert_eq!(encoder.count(), 1);
        let bytes = encoder.finish();
        assert!(bytes.len() - FRAME_HEADER_BYTES <= MAX_BODY_BYTES as usize);
        assert_eq!(decode_frame(&bytes).unwrap().0.messages, vec![(1, big)]);
    }

    #[test]
    fn a_flipped_body_bit_fails_the_crc() {
        let mut bytes = frame_of(&two_messages());
        for at in [FRAME_HEADER_BYTES, bytes.len() - 1] {
            bytes[at] ^= 0x10;
            let error = decode_frame(&bytes).unwrap_err();
            assert!(matches!(error, FrameError::BadCrc { .. }), "byte {at}: {error:?}");
            bytes[at] ^= 0x10;
        }
    }

    #[test]
    fn a_bad_magic_version_or_reserved_byte_is_refused() {
        let frame = frame_of(&two_messages());
        let hello = Hello { node_id: 1, shard: 0, shard_count: 1 }.encode();
        for bytes in [frame, hello.to_vec()] {
            let decode = |b: &[u8]| match b.len() {
                HELLO_BYTES => Hello::decode(b).map(|_| ()),
                _ => decode_frame(b).map(|_| ()),
            };
            let mut bad = bytes.clone();
            bad[0] = b'X';
            assert!(matches!(decode(&bad), Err(FrameError::BadMagic(_))));
            let mut bad = bytes.clone();
            bad[4] = 2;
            assert_eq!(decode(&bad), Err(FrameError::UnsupportedVersion(2)));
            let mut bad = bytes.clone();
            bad[6] = 1;
            assert_eq!(decode(&bad), Err(FrameError::BadReserved([0, 1, 0])));
        }
        // A hello is not a frame, nor a frame a hello.
        let hello = Hello { node_id: 1, shard: 0, shard_count: 1 }.encode();
        assert!(matches!(
            decode_frame(&[&hello[..], &[0; 8]].concat()),
            Err(FrameError::BadMagic(_))
        ));
        assert!(matches!(Hello::decode(&frame_of(&[])), Err(FrameError::BadMagic(_))));
    }

    /// A body whose CRC is right but whose content is not: the header restamped.
    fn with_body(count: u32, body: &[u8]) -> Vec<u8> {
        let mut bytes = frame_of(&[]);
        bytes[20..24].copy_from_slice(&count.to_le_bytes());
        bytes[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
        bytes[28..32].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn a_body_whose_entries_do_not_fit_or_parse_is_a_bad_entry() {
        let good = frame_of(&two_messages())[FRAME_HEADER_BYTES..].to_vec();
        // An entry header cut short.
        let error = decode_frame(&with_body(3, &[&good[..], &[1, 2, 3]].concat())).unwrap_err();
        assert!(matches!(error, FrameError::BadEntry { entry: 2, .. }), "{error:?}");
        // A message length past the body's end.
        let mut long = good.clone();
        long[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let error = decode_frame(&with_body(2, &long)).unwrap_err();
        assert!(matches!(error, FrameError::BadEntry { entry: 0, .. }), "{error:?}");
        // Bytes that are not a protobuf message (a field number 0 tag).
        let garbage = [&1u64.to_le_bytes()[..], &2u32.to_le_bytes(), &[0, 0]].concat();
        let error = decode_frame(&with_body(1, &garbage)).unwrap_err();
        assert!(matches!(error, FrameError::BadEntry { entry: 0, .. }), "{error:?}");
    }

    #[test]
    fn a_count_other_than_the_entries_found_is_refused() {
        let body = frame_of(&two_messages())[FRAME_HEADER_BYTES..].to_vec();
        let error = decode_frame(&with_body(3, &body)).unwrap_err();
        assert_eq!(error, FrameError::WrongCount { stated: 3, found: 2 });
    }

    fn message() -> impl Strategy<Value = Message> {
        let types = prop::sample::select(vec![
            MessageType::MsgAppend,
            MessageType::MsgAppendResponse,
            MessageType::MsgRequestVote,
            MessageType::MsgRequestPreVoteResponse,
            MessageType::MsgHeartbeat,
            MessageType::MsgHeartbeatResponse,
        ]);
        let entries = prop::collection::vec(
            (any::<u64>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..64)),
            0..4,
        );
        (types, any::<[u64; 6]>(), any::<bool>(), entries).prop_map(
            |(msg_type, [from, to, term, log_term, index, commit], reject, entries)| {
                let mut message = Message::default();
                message.set_msg_type(msg_type);
                (message.from, message.to, message.term) = (from, to, term);
                (message.log_term, message.index, message.commit) = (log_term, index, commit);
                message.reject = reject;
                message.entries = entries
                    .into_iter()
                    .map(|(index, term, data)| Entry {
                        index,
                        term,
                        data: data.into(),
                        ..Default::default()
                    })
                    .collect::<Vec<_>>()
                    .into();
                message
            },
        )
    }

    proptest! {
        #[test]
        fn any_messages_round_trip(
            sender in any::<u64>(),
            shard in any::<u32>(),
            messages in prop::collection::vec((any::<u64>(), message()), 0..8),
        ) {
            let mut encoder = FrameEncoder::new(sender, shard);
            for (group, message) in &messages {
                prop_assert!(encoder.push(*group, message));
            }
            let bytes = encoder.finish();
            let (frame, used) = decode_frame(&bytes).unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(frame, Frame { sender, shard, messages });
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
        ) {
            fuzz_decode(&bytes);
        }

        #[test]
        fn a_valid_frame_with_bytes_overwritten_decodes_or_fails_without_panicking(
            messages in prop::collection::vec((any::<u64>(), message()), 1..4),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            restamp_crc in any::<bool>(),
        ) {
            let mut encoder = FrameEncoder::new(1, 0);
            for (group, message) in &messages {
                prop_assert!(encoder.push(*group, message));
            }
            let mut bytes = encoder.finish();
            for (at, value) in edits {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if restamp_crc && bytes.len() >= FRAME_HEADER_BYTES {
                // So the edits reach the entry and protobuf parsers, not only the CRC check.
                let crc = crc32c::crc32c(&bytes[FRAME_HEADER_BYTES..]);
                bytes[28..32].copy_from_slice(&crc.to_le_bytes());
            }
            fuzz_decode(&bytes);
        }
    }
}
