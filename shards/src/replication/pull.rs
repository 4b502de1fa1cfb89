//! The pull of a partition snapshot's records: the request a follower's shard sends the
//! leader's shard of the same index, and the answer (docs/replication.md, "Partition
//! snapshots").
//!
//! Pulls ride the raft transport as the `context` bytes of a raft `Message` addressed to
//! the reserved group id `PULL_GROUP` (2^63 - 2, beside the leader notices' 2^63 - 1;
//! partition group ids have the top bit set and the metadata group is 0), as the notices
//! do, so the frames, their CRC, their body limit and the connection handling are the
//! transport's own (`frame.rs`, unchanged); the host hands them to the shard instead of
//! stepping a group (`GroupHost::take_pulls`).
//!
//! Runs on the shard that hosts the group; not a hot path (one request per
//! `MAX_PULL_BYTES` of records while a follower catches up from a snapshot).
//!
//! Encoding (version 1, little-endian):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (1 = request, 2 = response) |
//! | 8 | group id |
//! | 16 | topic id |
//! | 4 | partition index (i32) |
//! | 8 | from: the follower's next offset (i64) |
//!
//! then a request: `to` (i64, the manifest's end, exclusive), `max_bytes` (u32); a
//! response: the leader's log start offset (i64), an error byte (0 none, 1 the leader does
//! not lead the group or host the partition, 2 not readable yet: retry), the length n of
//! the batches (u32), n bytes of whole record batches as the leader's log stores them.
//!
//! Invariants:
//! 1. Decoding is total: any bytes give a request, a response or a `PullError` naming the
//!    field, never a panic, and no allocation (the batches are a slice of the input).
//! 2. `decode(encode(p)) == p`.

use std::fmt;

use bytes::Bytes;
use shardlog_storage::Offset;

/// The group id pulls travel under; never a raft group's, nor the notices'.
pub const PULL_GROUP: u64 = (u64::MAX >> 1) - 1;
/// Most record bytes one response carries (whole batches; at least one batch even if
/// larger, which the frame's 4 MiB body limit bounds with the batch size limit).
pub const MAX_PULL_BYTES: u32 = 1 << 20;

const VERSION: u8 = 1;
const KIND_REQUEST: u8 = 1;
const KIND_RESPONSE: u8 = 2;
const COMMON_BYTES: usize = 1 + 1 + 8 + 16 + 4 + 8;

/// A follower's request for a partition's batches from `from` to `to` (exclusive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    pub group: u64,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub from: Offset,
    pub to: Offset,
    pub max_bytes: u32,
}

/// Why a leader sends no batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullRefusal {
    /// This replica does not lead the group, or does not hold the partition.
    NotLeader,
    /// Nothing readable at `from` yet (past the durable high watermark): ask again.
    NotYet,
}

/// The leader's answer: its log start, and whole batches from `from` (or its log start,
/// when that moved past `from`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullResponse {
    pub group: u64,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub from: Offset,
    pub log_start_offset: Offset,
    pub refusal: Option<PullRefusal>,
    pub batches: Bytes,
}

/// A decoded pull message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pull {
    Request(PullRequest),
    Response(PullResponse),
}

/// Why bytes are not a pull message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullError {
    /// The bytes end inside this field.
    Truncated {
        field: &'static str,
    },
    UnknownVersion(u8),
    UnknownKind(u8),
    /// An error byte this version does not define.
    UnknownRefusal(u8),
    /// Bytes after the message.
    Trailing(usize),
}

impl fmt::Display for PullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "snapshot pull message: {self:?}")
    }
}

impl std::error::Error for PullError {}

fn encode_common(
    kind: u8,
    group: u64,
    topic_id: &[u8; 16],
    partition: i32,
    from: Offset,
    extra: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(COMMON_BYTES + extra);
    out.extend_from_slice(&[VERSION, kind]);
    out.extend_from_slice(&group.to_le_bytes());
    out.extend_from_slice(topic_id);
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&from.to_le_bytes());
    out
}

impl PullRequest {
    pub fn encode(&self) -> Vec<u8> {
        let (g, t, p) = (self.group, &self.topic_id, self.partition);
        let mut out = encode_common(KIND_REQUEST, g, t, p, self.from, 12);
        out.extend_from_slice(&self.to.to_le_bytes());
        out.extend_from_slice(&self.max_bytes.to_le_bytes());
        out
    }
}

impl PullResponse {
    pub fn encode(&self) -> Vec<u8> {
        let (g, t, p) = (self.group, &self.topic_id, self.partition);
        let mut out = encode_common(KIND_RESPONSE, g, t, p, self.from, 13 + self.batches.len());
        out.extend_from_slice(&self.log_start_offset.to_le_bytes());
        out.push(match self.refusal {
            None => 0,
            Some(PullRefusal::NotLeader) => 1,
            Some(PullRefusal::NotYet) => 2,
        });
        out.extend_from_slice(&(self.batches.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.batches);
        out
    }
}

impl Pull {
    /// The message of `bytes` (invariant 1).
    pub fn decode(bytes: &Bytes) -> Result<Pull, PullError> {
        let mut at = 0;
        let mut take = |field: &'static str, len: usize| {
            let end = at + len;
            let slice = bytes.get(at..end).ok_or(PullError::Truncated { field })?;
            at = end;
            Ok::<_, PullError>(slice)
        };
        let version = take("version", 1)?[0];
        if version != VERSION {
            return Err(PullError::UnknownVersion(version));
        }
        let kind = take("kind", 1)?[0];
        if kind != KIND_REQUEST && kind != KIND_RESPONSE {
            return Err(PullError::UnknownKind(kind));
        }
        let group = u64::from_le_bytes(take("group", 8)?.try_into().expect("8 bytes"));
        let topic_id: [u8; 16] = take("topic id", 16)?.try_into().expect("16 bytes");
        let partition = i32::from_le_bytes(take("partition", 4)?.try_into().expect("4 bytes"));
        let from = i64::from_le_bytes(take("from", 8)?.try_into().expect("8 bytes"));
        let pull = if kind == KIND_REQUEST {
            let to = i64::from_le_bytes(take("to", 8)?.try_into().expect("8 bytes"));
            let max_bytes = u32::from_le_bytes(take("max bytes", 4)?.try_into().expect("4"));
            Pull::Request(PullRequest { group, topic_id, partition, from, to, max_bytes })
        } else {
            let start = take("log start offset", 8)?.try_into().expect("8 bytes");
            let log_start_offset = i64::from_le_bytes(start);
            let refusal = match take("error", 1)?[0] {
                0 => None,
                1 => Some(PullRefusal::NotLeader),
                2 => Some(PullRefusal::NotYet),
                other => return Err(PullError::UnknownRefusal(other)),
            };
            let len = u32::from_le_bytes(take("batches length", 4)?.try_into().expect("4"));
            take("batches", len as usize)?;
            let batches = bytes.slice(at - len as usize..at);
            let response = PullResponse {
                group,
                topic_id,
                partition,
                from,
                log_start_offset,
                refusal,
                batches,
            };
            Pull::Response(response)
        };
        match bytes.len() - at {
            0 => Ok(pull),
            trailing => Err(PullError::Trailing(trailing)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request() -> PullRequest {
        PullRequest {
            group: 1 << 63 | 5,
            topic_id: [7; 16],
            partition: 2,
            from: 100,
            to: 250,
            max_bytes: MAX_PULL_BYTES,
        }
    }

    fn response() -> PullResponse {
        PullResponse {
            group: 1 << 63 | 5,
            topic_id: [7; 16],
            partition: 2,
            from: 100,
            log_start_offset: 40,
            refusal: None,
            batches: Bytes::from_static(b"whole record batches"),
        }
    }

    #[test]
    fn a_request_and_a_response_round_trip_with_their_golden_headers() {
        let bytes = request().encode();
        assert_eq!(&bytes[..2], &[1, 1]);
        assert_eq!(&bytes[2..10], &(1u64 << 63 | 5).to_le_bytes());
        assert_eq!(&bytes[26..30], &2i32.to_le_bytes());
        assert_eq!(&bytes[30..38], &100i64.to_le_bytes());
        assert_eq!(&bytes[38..46], &250i64.to_le_bytes());
        assert_eq!(Pull::decode(&Bytes::from(bytes)), Ok(Pull::Request(request())));
        let bytes = response().encode();
        assert_eq!(&bytes[..2], &[1, 2]);
        assert_eq!(&bytes[38..46], &40i64.to_le_bytes());
        assert_eq!((bytes[46], &bytes[47..51]), (0, &20u32.to_le_bytes()[..]));
        assert_eq!(Pull::decode(&Bytes::from(bytes)), Ok(Pull::Response(response())));
        for refusal in [PullRefusal::NotLeader, PullRefusal::NotYet] {
            let refused =
                PullResponse { refusal: Some(refusal), batches: Bytes::new(), ..response() };
            let decoded = Pull::decode(&Bytes::from(refused.encode()));
            assert_eq!(decoded, Ok(Pull::Response(refused)));
        }
    }

    #[test]
    fn every_cut_is_truncated_and_bad_fields_are_named() {
        for bytes in [request().encode(), response().encode()] {
            for cut in 0..bytes.len() {
                let decoded = Pull::decode(&Bytes::copy_from_slice(&bytes[..cut]));
                assert!(matches!(decoded, Err(PullError::Truncated { .. })), "{cut}: {decoded:?}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(Pull::decode(&Bytes::from(longer)), Err(PullError::Trailing(1)));
        }
        let edited = |mut bytes: Vec<u8>, at: usize, value: u8| {
            bytes[at] = value;
            Pull::decode(&Bytes::from(bytes))
        };
        assert_eq!(edited(request().encode(), 0, 2), Err(PullError::UnknownVersion(2)));
        assert_eq!(edited(request().encode(), 1, 3), Err(PullError::UnknownKind(3)));
        assert_eq!(edited(response().encode(), 46, 3), Err(PullError::UnknownRefusal(3)));
        let long = edited(response().encode(), 47, 21);
        assert_eq!(long, Err(PullError::Truncated { field: "batches" }));
    }

    proptest! {
        #[test]
        fn any_pull_round_trips(
            group in any::<u64>(),
            topic_id in any::<[u8; 16]>(),
            partition in any::<i32>(),
            (from, to, max_bytes) in (any::<i64>(), any::<i64>(), any::<u32>()),
            batches in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let request = PullRequest { group, topic_id, partition, from, to, max_bytes };
            let decoded = Pull::decode(&Bytes::from(request.encode()));
            prop_assert_eq!(decoded, Ok(Pull::Request(request)));
            let log_start_offset = to;
            let batches = Bytes::from(batches);
            let response =
                PullResponse { group, topic_id, partition, from, log_start_offset, refusal: None, batches };
            let decoded = Pull::decode(&Bytes::from(response.encode()));
            prop_assert_eq!(decoded, Ok(Pull::Response(response)));
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..256)
        ) {
            let _ = Pull::decode(&Bytes::from(bytes));
        }
    }
}
