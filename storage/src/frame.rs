//! Entry framing of the shard log (on-disk format, version 1).
//!
//! Pure functions, no IO; used on the append hot path (encode: 32 bytes + one CRC pass over
//! the payload, no allocation) and by the recovery scan and disk reads (decode + verify).
//!
//! Byte layout of an entry header (little-endian), followed by `payload_len` payload bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version (= 1; 0 means "no entry here": end of log) |
//! | 1 | 1 | kind: 1 RecordBatch, 2 Internal, 3 Pad, 4 LogStart, 5 DropPartition, 6 Replace |
//! | 2 | 1 | flags: bit 0 = snapshot (Internal) |
//! | 3 | 1 | stream (Internal: `InternalStream` as u8; else 0) |
//! | 4 | 4 | payload_len u32 (Pad: bytes to skip after the header) |
//! | 8 | 8 | partition id u64 (RecordBatch, LogStart, DropPartition, Replace; else 0) |
//! | 16 | 8 | log position of this header (u64): stale or misplaced bytes never verify |
//! | 24 | 4 | reserved (0) |
//! | 28 | 4 | CRC-32C of bytes 0..28 and the payload (Pad: header only) |
//!
//! Placement rules (writer and scanner share them, see `next_entry_position`):
//! 1. An entry never starts in the last 31 bytes of a 4 KiB page: the writer skips to the
//!    page boundary (those bytes stay zero), the scanner does the same.
//! 2. An entry never crosses a segment end: the writer puts a Pad entry whose length reaches
//!    the segment end.
//! 3. Every flush ends on a page boundary (a Pad entry, or rule 1's zeros).
//! 4. An all-zero header is the end of the log; any other header that does not verify is a
//!    torn or corrupt entry and ends the log there.

use crate::{InternalStream, PartitionId};

/// Size of an entry header.
pub const ENTRY_HEADER_BYTES: usize = 32;
/// Page size: the unit of every flush and of O_DIRECT alignment.
pub const PAGE_BYTES: u64 = 4096;
/// Current on-disk format version.
pub const FORMAT_VERSION: u8 = 1;

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    RecordBatch = 1,
    Internal = 2,
    Pad = 3,
    /// A partition's new log_start_offset (retention), payload = i64 LE.
    LogStart = 4,
    /// A partition was dropped; replay forgets it.
    DropPartition = 5,
    /// The log cleaner's copy of one batch (compacted topics, `cleaner.rs`): the payload is
    /// the cleaned batch, whose base offset and last offset delta name the original range
    /// it replaces, or 16 bytes (first and last offset, i64 LE) when the whole range was
    /// removed. An older broker stops at this kind as at a corrupt entry.
    Replace = 6,
}

impl EntryKind {
    fn from_u8(value: u8) -> Option<EntryKind> {
        Some(match value {
            1 => EntryKind::RecordBatch,
            2 => EntryKind::Internal,
            3 => EntryKind::Pad,
            4 => EntryKind::LogStart,
            5 => EntryKind::DropPartition,
            6 => EntryKind::Replace,
            _ => return None,
        })
    }
}

impl InternalStream {
    pub(crate) fn from_u8(value: u8) -> Option<InternalStream> {
        Some(match value {
            1 => InternalStream::Metadata,
            2 => InternalStream::GroupOffsets,
            3 => InternalStream::ProducerState,
            4 => InternalStream::Transactions,
            5 => InternalStream::Raft,
            _ => return None,
        })
    }
}

/// A decoded entry header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub kind: EntryKind,
    pub snapshot: bool,
    pub stream: u8,
    pub payload_len: u32,
    pub partition: PartitionId,
    pub position: u64,
}

impl EntryHeader {
    /// Serializes the header, with the CRC over the header fields and `payload`.
    pub fn encode(&self, payload: &[u8]) -> [u8; ENTRY_HEADER_BYTES] {
        let mut out = [0u8; ENTRY_HEADER_BYTES];
        out[0] = FORMAT_VERSION;
        out[1] = self.kind as u8;
        out[2] = self.snapshot as u8;
        out[3] = self.stream;
        out[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        out[8..16].copy_from_slice(&self.partition.0.to_le_bytes());
        out[16..24].copy_from_slice(&self.position.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&out[..28]), payload);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }
}

/// Result of decoding the bytes at one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// All-zero header: the log ends here.
    End,
    /// A header that verifies on its own (payload CRC still to check with `verify_payload`).
    Header(EntryHeader),
    /// Torn or corrupt bytes.
    Corrupt(&'static str),
}

/// Decodes the header in `bytes[..32]` found at log position `position`.
pub fn decode_header(bytes: &[u8], position: u64) -> Decoded {
    let bytes = &bytes[..ENTRY_HEADER_BYTES];
    if bytes.iter().all(|&b| b == 0) {
        return Decoded::End;
    }
    if bytes[0] != FORMAT_VERSION {
        return Decoded::Corrupt("unknown format version");
    }
    let Some(kind) = EntryKind::from_u8(bytes[1]) else {
        return Decoded::Corrupt("unknown entry kind");
    };
    let header = EntryHeader {
        kind,
        snapshot: bytes[2] & 1 != 0,
        stream: bytes[3],
        payload_len: u32::from_le_bytes(bytes[4..8].try_into().unwrap()),
        partition: PartitionId(u64::from_le_bytes(bytes[8..16].try_into().unwrap())),
        position: u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
    };
    if header.position != position {
        return Decoded::Corrupt("entry position does not match its place");
    }
    if kind == EntryKind::Pad {
        let stored = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
        if crc32c::crc32c(&bytes[..28]) != stored {
            return Decoded::Corrupt("pad header CRC mismatch");
        }
    }
    Decoded::Header(header)
}

/// Checks the CRC of a non-pad entry: `header_bytes` is the 32-byte header.
pub fn verify_payload(header_bytes: &[u8], payload: &[u8]) -> bool {
    let stored = u32::from_le_bytes(header_bytes[28..32].try_into().unwrap());
    crc32c::crc32c_append(crc32c::crc32c(&header_bytes[..28]), payload) == stored
}

/// Where an entry must start if the writer (or scanner) is at `position` (rule 1).
pub fn next_entry_position(position: u64) -> u64 {
    let in_page = position % PAGE_BYTES;
    if in_page != 0 && PAGE_BYTES - in_page < ENTRY_HEADER_BYTES as u64 {
        position + (PAGE_BYTES - in_page)
    } else {
        position
    }
}

pub fn align_up(value: u64) -> u64 {
    value.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

pub fn align_down(value: u64) -> u64 {
    value / PAGE_BYTES * PAGE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: EntryKind, len: u32, position: u64) -> EntryHeader {
        EntryHeader {
            kind,
            snapshot: false,
            stream: 0,
            payload_len: len,
            partition: PartitionId(7),
            position,
        }
    }

    #[test]
    fn an_encoded_header_decodes_and_verifies_with_its_payload() {
        let h = header(EntryKind::RecordBatch, 3, 4096);
        let bytes = h.encode(b"abc");
        assert_eq!(decode_header(&bytes, 4096), Decoded::Header(h));
        assert!(verify_payload(&bytes, b"abc"));
        assert!(!verify_payload(&bytes, b"abd"));
    }

    #[test]
    fn golden_bytes_of_a_version_1_header() {
        let bytes = header(EntryKind::Internal, 2, 64).encode(b"hi");
        assert_eq!(
            &bytes[..24],
            &[1, 2, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(&bytes[24..28], &[0, 0, 0, 0]);
    }

    #[test]
    fn headers_that_do_not_verify_are_corrupt_and_zeros_are_the_end() {
        let good = header(EntryKind::Pad, 100, 0).encode(&[]);
        let cases: Vec<([u8; 32], u64, bool)> = vec![
            ([0; 32], 0, true),
            (good, 0, false),
            (good, 4096, false),
            (
                {
                    let mut b = good;
                    b[5] ^= 1;
                    b
                },
                0,
                false,
            ),
            (
                {
                    let mut b = good;
                    b[0] = 9;
                    b
                },
                0,
                false,
            ),
        ];
        let results: Vec<Decoded> = cases.iter().map(|(b, p, _)| decode_header(b, *p)).collect();
        assert!(matches!(results[0], Decoded::End));
        assert!(matches!(results[1], Decoded::Header(_)));
        for r in &results[2..] {
            assert!(matches!(r, Decoded::Corrupt(_)), "{r:?}");
        }
    }

    #[test]
    fn entries_skip_to_the_page_boundary_when_a_header_does_not_fit() {
        let table = [(0, 0), (100, 100), (4064, 4064), (4065, 4096), (4095, 4096), (4096, 4096)];
        for (at, expected) in table {
            assert_eq!(next_entry_position(at), expected, "at {at}");
        }
    }
}
