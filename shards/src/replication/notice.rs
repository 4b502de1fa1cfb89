//! Leader notices: how a node outside a partition's replica set learns the partition's
//! leader (docs/replication.md, "Replication factors between 1 and n").
//!
//! A node hosts the raft group of a partition only if it is one of the partition's
//! replicas, yet Metadata on every node must name the leader and the ISR. So the leader of
//! each group whose replica set is not every node sends, on its shard's transport, a
//! notice (group, leader node, term, ISR) to the same shard of every node outside the set:
//! when what it would say changed since the last tick, and every `REFRESH_TICKS` in any
//! case (a notice is not acknowledged; a lost one, or a node that restarted, is repaired by
//! the next). The receiver keeps the highest term it heard per group, and forgets the
//! leader of a notice older than `EXPIRY_TICKS` (a group that lost its quorum elects no
//! leader and sends nothing: Metadata then says LEADER_NOT_AVAILABLE, as on its members).
//!
//! Notices ride the raft transport as the `context` bytes of a raft `Message` addressed
//! to the reserved group id `NOTICE_GROUP` (2^63 - 1; partition group ids have the top
//! bit set and the metadata group is 0), so the wire format (`frame.rs`) is unchanged;
//! the host hands them to the shard instead of stepping a group
//! (`GroupHost::take_notices`).
//!
//! Encoding (little-endian): version u8 (= 1), count u32, then per notice: group u64,
//! leader node u32, term u64, ISR length u16, the ISR's node ids u32 each.
//!
//! Invariants:
//! 1. Decoding is total: any bytes give notices or a `NoticeError`, never a panic, and
//!    never an allocation larger than the input (tests below).
//! 2. `decode(encode(n)) == n` for every list of notices whose ISRs have at most
//!    `u16::MAX` nodes.

use std::fmt;

/// The group id notices travel under; never a raft group's.
pub const NOTICE_GROUP: u64 = u64::MAX >> 1;
/// Ticks between two notices of an unchanged group (1 s at the broker's 100 ms tick).
pub const REFRESH_TICKS: u64 = 10;
/// Ticks after which a receiver forgets a leader it heard no notice about (3 s: three
/// refreshes lost in a row, or a leader gone).
pub const EXPIRY_TICKS: u64 = 30;

const VERSION: u8 = 1;
const HEADER_BYTES: usize = 5;
/// Bytes of a notice with an empty ISR.
const NOTICE_BYTES: usize = 8 + 4 + 8 + 2;

/// One group's leader as its leader announces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderNotice {
    pub group: u64,
    /// The leader's node id.
    pub leader: u32,
    /// The group's raft term (the partition leader epoch).
    pub term: u64,
    /// The group's in-sync replicas (node ids, ascending).
    pub isr: Vec<u32>,
}

/// Why bytes are not notices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoticeError {
    UnsupportedVersion(u8),
    /// Fewer bytes than the header or the stated notices need.
    Truncated,
    /// Bytes left after the stated notices.
    TrailingBytes(usize),
}

impl fmt::Display for NoticeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoticeError::UnsupportedVersion(v) => write!(f, "leader notice version {v}"),
            NoticeError::Truncated => write!(f, "leader notices truncated"),
            NoticeError::TrailingBytes(n) => write!(f, "{n} bytes after the leader notices"),
        }
    }
}

impl std::error::Error for NoticeError {}

/// The bytes of `notices` (invariant 2).
pub fn encode(notices: &[LeaderNotice]) -> Vec<u8> {
    let isr_bytes: usize = notices.iter().map(|n| 4 * n.isr.len()).sum();
    let mut out = Vec::with_capacity(HEADER_BYTES + NOTICE_BYTES * notices.len() + isr_bytes);
    out.push(VERSION);
    out.extend_from_slice(&(notices.len() as u32).to_le_bytes());
    for notice in notices {
        out.extend_from_slice(&notice.group.to_le_bytes());
        out.extend_from_slice(&notice.leader.to_le_bytes());
        out.extend_from_slice(&notice.term.to_le_bytes());
        let isr = &notice.isr[..notice.isr.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(isr.len() as u16).to_le_bytes());
        for node in isr {
            out.extend_from_slice(&node.to_le_bytes());
        }
    }
    out
}

/// The notices in `bytes` (invariant 1).
pub fn decode(bytes: &[u8]) -> Result<Vec<LeaderNotice>, NoticeError> {
    let mut input = Input(bytes);
    let version = input.take::<1>()?[0];
    if version != VERSION {
        return Err(NoticeError::UnsupportedVersion(version));
    }
    let count = u32::from_le_bytes(input.take()?) as usize;
    // Each notice takes at least NOTICE_BYTES: a count the input cannot hold is refused
    // before anything is allocated for it.
    if count > input.0.len() / NOTICE_BYTES {
        return Err(NoticeError::Truncated);
    }
    let mut notices = Vec::with_capacity(count);
    for _ in 0..count {
        let group = u64::from_le_bytes(input.take()?);
        let leader = u32::from_le_bytes(input.take()?);
        let term = u64::from_le_bytes(input.take()?);
        let len = u16::from_le_bytes(input.take()?) as usize;
        if len > input.0.len() / 4 {
            return Err(NoticeError::Truncated);
        }
        let isr =
            (0..len).map(|_| input.take().map(u32::from_le_bytes)).collect::<Result<_, _>>()?;
        notices.push(LeaderNotice { group, leader, term, isr });
    }
    match input.0.len() {
        0 => Ok(notices),
        left => Err(NoticeError::TrailingBytes(left)),
    }
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], NoticeError> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or(NoticeError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn notice() -> impl Strategy<Value = LeaderNotice> {
        (any::<u64>(), any::<u32>(), any::<u64>(), proptest::collection::vec(any::<u32>(), 0..5))
            .prop_map(|(group, leader, term, isr)| LeaderNotice { group, leader, term, isr })
    }

    proptest! {
        #[test]
        fn notices_decode_to_what_was_encoded(
            notices in proptest::collection::vec(notice(), 0..20),
        ) {
            prop_assert_eq!(decode(&encode(&notices)), Ok(notices));
        }

        #[test]
        fn any_bytes_decode_or_are_refused_without_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = decode(&bytes);
        }

        #[test]
        fn a_cut_or_extended_encoding_is_refused(
            notices in proptest::collection::vec(notice(), 1..5),
            cut in 1usize..20,
        ) {
            let bytes = encode(&notices);
            let cut = cut.min(bytes.len());
            prop_assert_eq!(decode(&bytes[..bytes.len() - cut]).is_err(), true);
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert_eq!(decode(&longer), Err(NoticeError::TrailingBytes(1)));
        }
    }

    #[test]
    fn a_count_larger_than_the_input_is_refused_before_allocating() {
        let mut bytes = vec![VERSION];
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&bytes), Err(NoticeError::Truncated));
        let mut isr_too_long =
            encode(&[LeaderNotice { group: 7, leader: 2, term: 3, isr: vec![] }]);
        let at = isr_too_long.len() - 2;
        isr_too_long[at..].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(decode(&isr_too_long), Err(NoticeError::Truncated));
        assert_eq!(decode(&[2, 0, 0, 0, 0]), Err(NoticeError::UnsupportedVersion(2)));
    }
}
