//! Raft messages larger than one transport frame, sent as pieces and put together again
//! (docs/replication.md, "Messages larger than a frame").
//!
//! A frame's body is at most `MAX_BODY_BYTES` (4 MiB), which bounds what a reader
//! allocates before it checks a frame. Most raft messages are far smaller (appends are cut
//! at `max_size_per_msg`), but a snapshot's data is whatever the group's state is: the
//! metadata group's topic table passes 4 MiB at about 19,000 topics. So the writer cuts a
//! message that fits no frame into pieces of `PIECE_BYTES` of its protobuf encoding, each
//! the context of a message of the reserved group `FRAGMENT_GROUP` (2^63 - 4, beside the
//! notices', pulls' and calls between nodes'), sent one after the other on the connection;
//! the reader of that connection appends them in order and delivers the whole message,
//! as if it had come in one frame. The frame format is unchanged.
//!
//! Runs inside the transport (`transport.rs`), on the shard that owns it; not a hot path.
//!
//! Piece encoding (version 1, little-endian), the context of the carrying message:
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 8 | message id (the sender's count of cut messages) |
//! | 8 | group id of the whole message |
//! | 4 | total bytes of the whole message's encoding |
//! | 4 | offset of this piece in it |
//!
//! then the piece's bytes (at least one).
//!
//! Invariants:
//! 1. A reassembly delivers a message only from pieces of one id, in order, without a gap,
//!    that add up to its total: a piece out of place (another id, a gap, a repeat, a
//!    connection that broke mid-message) abandons the partial message, which raft treats
//!    as a lost message (the leader sends its snapshot again).
//! 2. Memory is bounded: a reassembly holds at most one partial message, of at most
//!    `MAX_MESSAGE_BYTES` (a larger total is refused from its first piece), grown as its
//!    pieces arrive, never allocated ahead from a total the peer claims.
//! 3. Decoding is total: any bytes give a piece or a `FragmentError`, never a panic.

use std::fmt;

use protobuf::Message as _;
use raft::eraftpb::Message;

/// The group id pieces travel under; never a raft group's, nor another reserved one's.
pub const FRAGMENT_GROUP: u64 = (u64::MAX >> 1) - 3;
/// Bytes of the whole message's encoding per piece (a frame holds a few).
pub const PIECE_BYTES: usize = 1 << 20;
/// The largest message sent in pieces and put together again: a topic table of about a
/// million topics. A larger one is dropped as too large, as before pieces existed.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

const VERSION: u8 = 1;
const PIECE_HEADER_BYTES: usize = 1 + 8 + 8 + 4 + 4;

/// Why a piece was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FragmentError {
    /// Shorter than its header, or no bytes after it.
    Truncated,
    UnsupportedVersion(u8),
    /// A total over `MAX_MESSAGE_BYTES`.
    TooLarge(u32),
    /// Not the piece the partial message needs next (another id or group, a gap, a
    /// repeat), or one reaching past its total; the partial message is abandoned.
    OutOfPlace {
        id: u64,
        offset: u32,
    },
    /// The pieces added up, but not to a raft message.
    BadMessage,
}

impl fmt::Display for FragmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FragmentError::Truncated => f.write_str("a message piece cut short"),
            FragmentError::UnsupportedVersion(v) => write!(f, "message piece version {v}"),
            FragmentError::TooLarge(total) => {
                write!(f, "a message of {total} bytes in pieces, over {MAX_MESSAGE_BYTES}")
            }
            FragmentError::OutOfPlace { id, offset } => {
                write!(f, "a piece of message {id} at {offset}, out of place")
            }
            FragmentError::BadMessage => f.write_str("message pieces that are no raft message"),
        }
    }
}

/// `message` of `group` as the messages carrying its pieces, in order; None when its
/// encoding is over `MAX_MESSAGE_BYTES`.
pub fn cut(id: u64, group: u64, message: &Message) -> Option<Vec<Message>> {
    cut_within(MAX_MESSAGE_BYTES, id, group, message)
}

fn cut_within(max_bytes: usize, id: u64, group: u64, message: &Message) -> Option<Vec<Message>> {
    // Encoding into a Vec fails only for a message protobuf cannot encode (none of
    // raft-rs's), so a failure is a bug, as in `FrameEncoder::push`.
    let whole = message.write_to_bytes().expect("a raft message encodes");
    if whole.len() > max_bytes {
        return None;
    }
    let total = whole.len() as u32;
    let pieces = whole.chunks(PIECE_BYTES).enumerate().map(|(k, piece)| {
        let mut context = Vec::with_capacity(PIECE_HEADER_BYTES + piece.len());
        context.push(VERSION);
        context.extend_from_slice(&id.to_le_bytes());
        context.extend_from_slice(&group.to_le_bytes());
        context.extend_from_slice(&total.to_le_bytes());
        context.extend_from_slice(&((k * PIECE_BYTES) as u32).to_le_bytes());
        context.extend_from_slice(piece);
        let mut carrier = Message::default();
        carrier.set_context(context.into());
        carrier
    });
    Some(pieces.collect())
}

/// One piece, decoded.
#[derive(Debug, PartialEq, Eq)]
struct Piece<'a> {
    id: u64,
    group: u64,
    total: u32,
    offset: u32,
    bytes: &'a [u8],
}

fn decode(context: &[u8]) -> Result<Piece<'_>, FragmentError> {
    if context.len() <= PIECE_HEADER_BYTES {
        return Err(FragmentError::Truncated);
    }
    if context[0] != VERSION {
        return Err(FragmentError::UnsupportedVersion(context[0]));
    }
    let u64_at = |at: usize| u64::from_le_bytes(context[at..at + 8].try_into().expect("8"));
    let u32_at = |at: usize| u32::from_le_bytes(context[at..at + 4].try_into().expect("4"));
    Ok(Piece {
        id: u64_at(1),
        group: u64_at(9),
        total: u32_at(17),
        offset: u32_at(21),
        bytes: &context[PIECE_HEADER_BYTES..],
    })
}

/// The message being put together on one connection.
#[derive(Debug)]
struct Partial {
    id: u64,
    group: u64,
    total: u32,
    bytes: Vec<u8>,
}

/// Puts the pieces that arrive on one connection together (invariants 1 and 2).
#[derive(Debug, Default)]
pub struct Reassembly {
    partial: Option<Partial>,
}

impl Reassembly {
    /// Takes the context of a `FRAGMENT_GROUP` message: `Some((group, message))` once its
    /// last piece is in, None while pieces are missing. An error abandons the partial
    /// message (if any).
    pub fn take(&mut self, context: &[u8]) -> Result<Option<(u64, Message)>, FragmentError> {
        let taken = self.take_piece(context);
        if taken.is_err() {
            self.partial = None;
        }
        taken
    }

    fn take_piece(&mut self, context: &[u8]) -> Result<Option<(u64, Message)>, FragmentError> {
        let piece = decode(context)?;
        if piece.total as usize > MAX_MESSAGE_BYTES {
            return Err(FragmentError::TooLarge(piece.total));
        }
        if piece.offset == 0 {
            let (id, group, total) = (piece.id, piece.group, piece.total);
            self.partial = Some(Partial { id, group, total, bytes: Vec::new() });
        }
        let out_of_place = FragmentError::OutOfPlace { id: piece.id, offset: piece.offset };
        let Some(partial) = &mut self.partial else { return Err(out_of_place) };
        let fits = partial.bytes.len() + piece.bytes.len() <= partial.total as usize;
        if (partial.id, partial.group, partial.total) != (piece.id, piece.group, piece.total)
            || partial.bytes.len() != piece.offset as usize
            || !fits
        {
            return Err(out_of_place);
        }
        partial.bytes.extend_from_slice(piece.bytes);
        if partial.bytes.len() < partial.total as usize {
            return Ok(None);
        }
        let whole = self.partial.take().expect("checked above");
        let message =
            Message::parse_from_bytes(&whole.bytes).map_err(|_| FragmentError::BadMessage)?;
        Ok(Some((whole.group, message)))
    }

    /// Whether a message is half put together (a connection that ends now loses it).
    pub fn is_partial(&self) -> bool {
        self.partial.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::MessageType;

    fn snapshot_message(len: usize) -> Message {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgSnapshot);
        (message.from, message.to, message.term) = (1, 2, 7);
        let snapshot = message.mut_snapshot();
        snapshot.data = (0..len).map(|i| (i * 7 + i / 251) as u8).collect::<Vec<u8>>().into();
        snapshot.mut_metadata().index = 120;
        message
    }

    fn contexts(pieces: &[Message]) -> Vec<Vec<u8>> {
        pieces.iter().map(|m| m.get_context().to_vec()).collect()
    }

    #[test]
    fn a_message_cut_into_pieces_comes_back_whole() {
        for len in [1, PIECE_BYTES - 100, PIECE_BYTES, 3 * PIECE_BYTES + 17, 10 << 20] {
            let message = snapshot_message(len);
            let pieces = cut(5, 0, &message).unwrap();
            let encoded = message.compute_size() as usize;
            assert_eq!(pieces.len(), encoded.div_ceil(PIECE_BYTES), "{len}");
            let mut reassembly = Reassembly::default();
            let (last, rest) = pieces.split_last().unwrap();
            for piece in rest {
                assert_eq!(reassembly.take(piece.get_context()), Ok(None));
                assert!(reassembly.is_partial());
            }
            assert_eq!(reassembly.take(last.get_context()), Ok(Some((0, message))));
            assert!(!reassembly.is_partial());
        }
    }

    #[test]
    fn a_piece_out_of_place_abandons_the_message_and_the_next_one_still_arrives() {
        let message = snapshot_message(3 * PIECE_BYTES);
        let pieces = contexts(&cut(1, 9, &message).unwrap());
        assert_eq!(pieces.len(), 4);
        let out_of_place = |id, k| FragmentError::OutOfPlace { id, offset: k * PIECE_BYTES as u32 };
        // A gap (piece 1 lost), a repeat, a piece of another message mid-way, a message
        // whose first piece never came (a connection that broke mid-message).
        let mut r = Reassembly::default();
        assert_eq!(r.take(&pieces[0]), Ok(None));
        assert_eq!(r.take(&pieces[2]), Err(out_of_place(1, 2)));
        assert!(!r.is_partial());
        assert_eq!(r.take(&pieces[3]), Err(out_of_place(1, 3)));
        let mut r = Reassembly::default();
        assert_eq!(r.take(&pieces[0]), Ok(None));
        assert_eq!(r.take(&pieces[0]), Ok(None), "a first piece starts the message again");
        assert_eq!(r.take(&pieces[1]), Ok(None));
        assert_eq!(r.take(&pieces[1]), Err(out_of_place(1, 1)));
        let other = contexts(&cut(2, 9, &message).unwrap());
        let mut r = Reassembly::default();
        assert_eq!(r.take(&pieces[0]), Ok(None));
        assert_eq!(r.take(&other[1]), Err(out_of_place(2, 1)));
        // The next whole message arrives after any of those.
        for (k, piece) in other.iter().enumerate() {
            let expected = (k == 3).then(|| (9, message.clone()));
            assert_eq!(r.take(piece), Ok(expected));
        }
    }

    #[test]
    fn bad_pieces_are_refused_with_their_reason() {
        let message = snapshot_message(PIECE_BYTES + 1);
        let pieces = contexts(&cut(3, 0, &message).unwrap());
        let mut r = Reassembly::default();
        for len in 0..=PIECE_HEADER_BYTES {
            assert_eq!(r.take(&pieces[0][..len]), Err(FragmentError::Truncated));
        }
        let mut versioned = pieces[0].clone();
        versioned[0] = 2;
        assert_eq!(r.take(&versioned), Err(FragmentError::UnsupportedVersion(2)));
        // A total over the bound, from the first piece, before anything is kept.
        let mut huge = pieces[0].clone();
        huge[17..21].copy_from_slice(&(MAX_MESSAGE_BYTES as u32 + 1).to_le_bytes());
        assert_eq!(r.take(&huge), Err(FragmentError::TooLarge(MAX_MESSAGE_BYTES as u32 + 1)));
        assert!(!r.is_partial());
        // A piece reaching past its total.
        let mut short_total = pieces[0].clone();
        short_total[17..21].copy_from_slice(&10u32.to_le_bytes());
        let out_of_place = FragmentError::OutOfPlace { id: 3, offset: 0 };
        assert_eq!(r.take(&short_total), Err(out_of_place));
        // Pieces that add up to bytes protobuf cannot parse as a raft message.
        let mut garbage = vec![VERSION];
        garbage.extend_from_slice(&4u64.to_le_bytes());
        garbage.extend_from_slice(&0u64.to_le_bytes());
        garbage.extend_from_slice(&3u32.to_le_bytes());
        garbage.extend_from_slice(&0u32.to_le_bytes());
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert_eq!(r.take(&garbage), Err(FragmentError::BadMessage));
    }

    #[test]
    fn a_message_over_the_bound_is_not_cut() {
        // The bound applies to the encoding (a few bytes over the data here).
        let message = snapshot_message(1000);
        let encoded = message.compute_size() as usize;
        assert!(cut_within(encoded, 0, 0, &message).is_some());
        assert_eq!(cut_within(encoded - 1, 0, 0, &message), None);
    }
}
