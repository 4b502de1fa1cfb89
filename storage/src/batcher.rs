//! The group-commit batcher: where each entry goes in the log, and what the next flush
//! writes. A plain state machine, no `.await`: the flusher task in `log.rs` drives it.
//!
//! Runs on the shard; hot path (every append copies its entry into the open chunk once; no
//! other allocation except a new chunk buffer every `chunk_bytes`).
//!
//! States: Idle (no flush in flight) and Flushing(end). `append` works in both: entries
//! gather in chunks. `take_flush` (only when Idle and something gathered) pads to the page
//! boundary, seals the chunks and hands them out; `flush_done` moves `durable` to its end.
//!
//! Invariants:
//! 1. Chunks start on a page boundary, hold whole pages when sealed, never cross a segment
//!    end, and a flush's chunks are contiguous from the previous flush's end.
//! 2. Every flush ends on a page boundary (Pad entry or rule-1 zeros): a later flush never
//!    writes a page that holds acknowledged bytes. Exception: after recovery ended mid-page
//!    the first chunk rewrites that page starting with the identical recovered prefix.
//! 3. `durable <= position`; an entry is durable once `durable >= its end`.

use crate::disk::IoBuffer;
use crate::frame::{
    align_down, align_up, next_entry_position, EntryHeader, EntryKind, ENTRY_HEADER_BYTES,
    PAGE_BYTES,
};
use crate::{Offset, PartitionId};

/// A sealed, page-aligned piece of a flush, destined for one segment file.
pub(crate) struct Chunk<B> {
    pub segment_base: u64,
    /// Log position of the first byte.
    pub start: u64,
    pub buf: B,
    len: usize,
}

impl<B: IoBuffer> Chunk<B> {
    pub fn offset_in_segment(&self) -> u64 {
        self.start - self.segment_base
    }
}

/// What one flush writes and then makes durable.
pub(crate) struct Flush<B> {
    pub chunks: Vec<Chunk<B>>,
    pub end: u64,
    /// High watermarks that become true once this flush is durable.
    pub high_watermarks: Vec<(PartitionId, Offset)>,
    /// Entries placed since the previous flush (what this fdatasync makes durable).
    pub entries: u64,
}

pub(crate) struct Batcher<B> {
    alloc: Box<dyn Fn(usize) -> B>,
    chunk_bytes: usize,
    segment_size: u64,
    segment_base: u64,
    segment_end: u64,
    /// Next byte to fill.
    position: u64,
    /// Start of the bytes not yet handed to a flush.
    unflushed_from: u64,
    open: Option<Chunk<B>>,
    sealed: Vec<Chunk<B>>,
    high_watermarks: Vec<(PartitionId, Offset)>,
    in_flight: Option<u64>,
    durable: u64,
    /// Entries placed since the last `take_flush`.
    entries: u64,
}

impl<B: IoBuffer> Batcher<B> {
    /// Starts at `position` (recovered end of log) in segment `[segment_base, segment_end)`;
    /// `prefix` holds the recovered bytes of the page containing `position`.
    pub fn new(
        alloc: Box<dyn Fn(usize) -> B>,
        chunk_bytes: usize,
        segment_size: u64,
        segment: (u64, u64),
        position: u64,
        prefix: &[u8],
    ) -> Batcher<B> {
        assert!(
            (chunk_bytes as u64).is_multiple_of(PAGE_BYTES)
                && segment_size.is_multiple_of(PAGE_BYTES)
        );
        assert_eq!(prefix.len() as u64, position - align_down(position));
        let mut batcher = Batcher {
            alloc,
            chunk_bytes,
            segment_size,
            segment_base: segment.0,
            segment_end: segment.1,
            position,
            unflushed_from: position,
            open: None,
            sealed: Vec::new(),
            high_watermarks: Vec::new(),
            in_flight: None,
            durable: position,
            entries: 0,
        };
        if !prefix.is_empty() {
            batcher.open_chunk(prefix.len() + PAGE_BYTES as usize);
            batcher.fill(align_down(position), prefix);
        }
        batcher
    }

    pub fn position(&self) -> u64 {
        self.position
    }
    pub fn is_flushing(&self) -> bool {
        self.in_flight.is_some()
    }
    pub fn segment_base(&self) -> u64 {
        self.segment_base
    }
    /// Whether entries are waiting for a flush.
    pub fn has_gathered(&self) -> bool {
        self.position > self.unflushed_from
    }
    /// Bytes gathered and not yet handed to a flush.
    pub fn gathered_bytes(&self) -> u64 {
        self.position - self.unflushed_from
    }

    /// `Some(next segment base)` if an entry of `entry_bytes` needs a new segment.
    pub fn needs_roll(&self, entry_bytes: u64) -> Option<u64> {
        let at = next_entry_position(self.position);
        (at + entry_bytes > self.segment_end).then_some(self.segment_end)
    }

    /// The bases of the segments that entries of these sizes would roll into (dry run).
    pub fn plan_rolls(&self, entry_sizes: impl Iterator<Item = u64>) -> Vec<u64> {
        let (mut position, mut segment_end) = (self.position, self.segment_end);
        let mut rolls = Vec::new();
        for size in entry_sizes {
            let mut at = next_entry_position(position);
            if at + size > segment_end {
                rolls.push(segment_end);
                at = segment_end;
                segment_end += self.segment_size;
            }
            position = at + size;
        }
        rolls
    }

    /// Ends the current segment (Pad to its end) and continues in the next one.
    pub fn roll(&mut self) {
        let at = next_entry_position(self.position);
        if at < self.segment_end {
            self.ensure_room(at + ENTRY_HEADER_BYTES as u64);
            self.zero_to(at);
            let skip = self.segment_end - at - ENTRY_HEADER_BYTES as u64;
            self.put_pad(at, skip);
            self.zero_to(align_up(at + ENTRY_HEADER_BYTES as u64));
        } else {
            self.zero_to(at);
        }
        self.seal_open();
        self.segment_base = self.segment_end;
        self.segment_end = self.segment_base + self.segment_size;
        self.position = self.segment_base;
    }

    /// Places one entry (caller checked `needs_roll` is None); returns its log position.
    pub fn append(&mut self, mut header: EntryHeader, payload: &[u8]) -> u64 {
        let at = next_entry_position(self.position);
        let end = at + (ENTRY_HEADER_BYTES + payload.len()) as u64;
        assert!(end <= self.segment_end, "entry crosses the segment end (invariant 1)");
        self.ensure_room(end);
        self.zero_to(at);
        header.position = at;
        header.payload_len = payload.len() as u32;
        self.fill(at, &header.encode(payload));
        self.fill(at + ENTRY_HEADER_BYTES as u64, payload);
        self.position = end;
        self.entries += 1;
        at
    }

    /// Records that `partition`'s high watermark becomes `high_watermark` with the flush
    /// that covers the entries appended so far.
    pub fn note_high_watermark(&mut self, partition: PartitionId, high_watermark: Offset) {
        self.high_watermarks.push((partition, high_watermark));
    }

    /// Hands out everything gathered, padded to the page boundary (Idle state only).
    pub fn take_flush(&mut self) -> Option<Flush<B>> {
        if self.in_flight.is_some() || !self.has_gathered() {
            return None;
        }
        let at = self.position;
        if !at.is_multiple_of(PAGE_BYTES) {
            let page_end = align_up(at);
            if page_end - at >= ENTRY_HEADER_BYTES as u64 {
                self.put_pad(at, page_end - at - ENTRY_HEADER_BYTES as u64);
            }
            self.zero_to(page_end);
            self.position = page_end;
        }
        self.seal_open();
        let end = self.position;
        self.unflushed_from = end;
        self.in_flight = Some(end);
        Some(Flush {
            chunks: std::mem::take(&mut self.sealed),
            end,
            high_watermarks: std::mem::take(&mut self.high_watermarks),
            entries: std::mem::take(&mut self.entries),
        })
    }

    /// Everything before this position is covered by a completed fdatasync.
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// The flush in flight completed (write + fdatasync). Returns the new durable position.
    pub fn flush_done(&mut self) -> u64 {
        let end = self.in_flight.take().expect("flush_done without a flush in flight");
        assert!(end >= self.durable);
        self.durable = end;
        end
    }

    fn put_pad(&mut self, at: u64, skip: u64) {
        let header = EntryHeader {
            kind: EntryKind::Pad,
            snapshot: false,
            stream: 0,
            payload_len: skip as u32,
            partition: PartitionId(0),
            position: at,
        };
        self.fill(at, &header.encode(&[]));
        self.position = at + ENTRY_HEADER_BYTES as u64;
    }

    /// Makes sure the open chunk can take bytes up to `end` plus a page of padding.
    fn ensure_room(&mut self, end: u64) {
        if let Some(chunk) = &self.open {
            if end + PAGE_BYTES <= chunk.start + chunk.buf.as_slice().len() as u64 {
                return;
            }
            // Seal the whole pages; carry the partial last page into the next chunk.
            let keep_from = align_down(self.position);
            let mut chunk = self.open.take().unwrap();
            let carried = chunk.buf.as_slice()
                [(keep_from - chunk.start) as usize..(self.position - chunk.start) as usize]
                .to_vec();
            chunk.len = (keep_from - chunk.start) as usize;
            if chunk.len > 0 {
                chunk.buf.truncate(chunk.len);
                self.sealed.push(chunk);
            }
            self.open_chunk((end + PAGE_BYTES - keep_from) as usize);
            self.fill(keep_from, &carried);
        } else {
            self.open_chunk((end + PAGE_BYTES - align_down(self.position)) as usize);
        }
    }

    fn open_chunk(&mut self, min_bytes: usize) {
        assert!(self.open.is_none());
        let bytes = self.chunk_bytes.max(align_up(min_bytes as u64) as usize);
        self.open = Some(Chunk {
            segment_base: self.segment_base,
            start: align_down(self.position),
            buf: (self.alloc)(bytes),
            len: 0,
        });
    }

    fn seal_open(&mut self) {
        if let Some(mut chunk) = self.open.take() {
            let end = align_up(self.position.max(chunk.start));
            chunk.len = (end - chunk.start) as usize;
            // Rule-1 or pad bytes past `position` up to the page end are zero.
            let filled = (self.position - chunk.start) as usize;
            chunk.buf.as_mut_slice()[filled..chunk.len].fill(0);
            if chunk.len > 0 {
                chunk.buf.truncate(chunk.len);
                self.sealed.push(chunk);
            }
        }
    }

    fn fill(&mut self, at: u64, bytes: &[u8]) {
        let chunk = self.open.as_mut().expect("no open chunk");
        let from = (at - chunk.start) as usize;
        chunk.buf.as_mut_slice()[from..from + bytes.len()].copy_from_slice(bytes);
    }

    /// Zeroes `[position, to)` in the open chunk and moves `position` there.
    fn zero_to(&mut self, to: u64) {
        if to > self.position {
            if self.open.is_none() {
                self.open_chunk((to - align_down(self.position)) as usize + PAGE_BYTES as usize);
            }
            let chunk = self.open.as_mut().unwrap();
            let from = (self.position - chunk.start) as usize;
            chunk.buf.as_mut_slice()[from..(to - chunk.start) as usize].fill(0);
            self.position = to;
        }
    }
}

impl<B: IoBuffer> Chunk<B> {
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8] {
        &self.buf.as_slice()[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode_header, Decoded};

    fn batcher(chunk: usize, segment: u64) -> Batcher<Vec<u8>> {
        Batcher::new(Box::new(|n| vec![0xEE; n]), chunk, segment, (0, segment), 0, &[])
    }

    fn entry(partition: u64) -> EntryHeader {
        EntryHeader {
            kind: EntryKind::RecordBatch,
            snapshot: false,
            stream: 0,
            payload_len: 0,
            partition: PartitionId(partition),
            position: 0,
        }
    }

    /// Applies a flush to a flat image of the log, as a disk would.
    fn apply(image: &mut Vec<u8>, flush: &Flush<Vec<u8>>) {
        for chunk in &flush.chunks {
            let end = (chunk.start as usize) + chunk.bytes().len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[chunk.start as usize..end].copy_from_slice(chunk.bytes());
        }
    }

    #[test]
    fn a_lone_append_is_flushed_at_once_as_one_padded_page() {
        let mut b = batcher(8192, 1 << 20);
        let at = b.append(entry(1), &[7; 100]);
        assert_eq!(at, 0);
        let flush = b.take_flush().expect("idle batcher flushes at once");
        assert_eq!(flush.end, 4096);
        assert_eq!(flush.chunks.len(), 1);
        let page = flush.chunks[0].bytes();
        assert_eq!(page.len(), 4096);
        match decode_header(&page[132..], 132) {
            Decoded::Header(h) => assert_eq!((h.kind, h.payload_len), (EntryKind::Pad, 3932)),
            other => panic!("{other:?}"),
        }
        assert!(page[164..].iter().all(|&x| x == 0), "padding is zeroed");
    }

    #[test]
    fn appends_during_a_flush_gather_for_the_next_one() {
        // (action, expected flush end or None)
        let mut b = batcher(8192, 1 << 20);
        b.append(entry(1), &[1; 10]);
        let first = b.take_flush().unwrap();
        b.append(entry(2), &[2; 10]);
        b.append(entry(3), &[3; 10]);
        assert!(b.take_flush().is_none(), "one flush in flight at a time");
        assert_eq!(b.flush_done(), first.end);
        let second = b.take_flush().unwrap();
        assert_eq!(second.chunks[0].start, 4096, "next flush starts at the next page");
        assert_eq!(second.end, 8192);
        b.flush_done();
        assert!(b.take_flush().is_none(), "nothing gathered, nothing to flush");
    }

    #[test]
    fn placement_table_skips_page_tails_and_pads_segment_ends() {
        // segment 16 KiB; entries of given payload sizes; expected positions.
        let table: &[(usize, u64)] = &[
            (4000, 0),      // ends at 4032: 64 bytes left in page
            (10, 4032),     // ends at 4074: 22 bytes left < header
            (10, 4096),     // rule 1: skips to the page boundary
            (12300, 16384), // does not fit in segment 0 (4138 + 12332 > 16384): roll
        ];
        let mut b = batcher(1 << 16, 16384);
        for &(len, expected) in table {
            if b.needs_roll((ENTRY_HEADER_BYTES + len) as u64).is_some() {
                b.roll();
            }
            assert_eq!(b.append(entry(1), &vec![9; len]), expected, "entry of {len}");
        }
        let flush = b.take_flush().unwrap();
        let segments: Vec<u64> = flush.chunks.iter().map(|c| c.segment_base).collect();
        assert_eq!(segments, vec![0, 16384], "a chunk never crosses a segment end");
        let mut image = Vec::new();
        apply(&mut image, &flush);
        match decode_header(&image[4138..], 4138) {
            Decoded::Header(h) => {
                assert_eq!(h.kind, EntryKind::Pad);
                assert_eq!(4138 + 32 + h.payload_len as u64, 16384);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_full_chunk_carries_its_partial_page_into_the_next_chunk() {
        let mut b = batcher(8192, 1 << 20);
        let mut expected = Vec::new();
        for i in 0..10u8 {
            let at = b.append(entry(1), &[i; 1500]) as usize;
            expected.push((at, i));
        }
        let flush = b.take_flush().unwrap();
        assert!(flush.chunks.len() > 1);
        let mut image = Vec::new();
        apply(&mut image, &flush);
        for (at, i) in expected {
            assert!(matches!(decode_header(&image[at..], at as u64), Decoded::Header(_)));
            assert!(image[at + 32..at + 1532].iter().all(|&x| x == i));
        }
        let mut next = flush.chunks[0].start;
        for chunk in &flush.chunks {
            assert_eq!(chunk.start, next, "chunks are contiguous");
            next += chunk.bytes().len() as u64;
        }
    }

    #[test]
    fn after_recovery_mid_page_the_first_write_repeats_the_recovered_prefix() {
        let prefix = vec![0x42u8; 100];
        let mut b =
            Batcher::new(Box::new(|n| vec![0; n]), 8192, 1 << 20, (0, 1 << 20), 4196, &prefix);
        assert_eq!(b.append(entry(1), &[1; 8]), 4196);
        let flush = b.take_flush().unwrap();
        assert_eq!(flush.chunks[0].start, 4096);
        assert_eq!(&flush.chunks[0].bytes()[..100], &prefix[..]);
    }
}
