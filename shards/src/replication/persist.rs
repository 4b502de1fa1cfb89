//! Raft groups' write requests on the shard log: the `Raft` internal stream.
//!
//! A group's `WriteRequest` (hard state, entries, snapshot marker) becomes one entry of
//! the shard log's `InternalStream::Raft`, appended with `ShardLog::append_internal`, so
//! it rides the shard's group commit: one fdatasync covers every group's writes and the
//! partitions' batches of the same flush. `ShardLogSink` is the `GroupSink` that does it;
//! the host reports a write durable when the flusher's `Durable` for its entry resolves,
//! never earlier. At start-up `replay` rebuilds each group's `LogImage` from the stream's
//! entries, in log order, with `LogImage::apply`: the durable-state contract of
//! `replication::log`.
//!
//! Runs on the shard that owns the groups. Not a hot path yet: `encode` allocates the
//! payload once per write request; `decode` allocates the entry list and slices entry data
//! out of the payload without copying.
//!
//! Payload of one `Raft` entry (version 1, little-endian; every length is checked against
//! what remains before anything is allocated, and trailing bytes are refused):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | flags: bit 0 hard state present, bit 1 snapshot marker present, bit 2 snapshot data present (only with bit 1); others 0 |
//! | 8 | group id |
//! | 8 | `number` (the driver's ready number; diagnostics only: numbers restart per life) |
//! | 24 | hard state, if bit 0: term, vote, commit |
//! | 16 + conf | snapshot marker, if bit 1: index, term, conf state (below) |
//! | 4 + data | snapshot data, if bit 2: length u32, then the application's bytes (the metadata group's table) |
//! | 4 | entry count n |
//! | n × (25 + data + context) | entry: index u64, term u64, type u8 (0 normal, 1 conf change, 2 conf change v2), data length u32, data, context length u32, context |
//!
//! An *applying marker* of a partition group (`partition::ApplyingMarker`, written before
//! the group's committed entry `index` is applied to a partition; version 2, 33 bytes):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 2) |
//! | 8 | group id |
//! | 8 | the entry's raft index |
//! | 8 | the partition's log id on this node (`PartitionId`) |
//! | 8 | the partition's next offset before the apply (i64) |
//!
//! A broker that knows only version 1 refuses a version-2 payload (`UnknownVersion`) and
//! so does not start on a log it cannot read, rather than skip the marker.
//!
//! A *stream snapshot* (version 3, appended with the log's snapshot flag, which nothing
//! else in this stream sets): the state of every group of the shard and each partition
//! group's last applying marker, as records of the two kinds above, so the log may forget
//! every earlier entry of the stream (docs/replication.md, "Log compaction"):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 3) |
//! | 4 | record count n |
//! | n × (4 + len) | record: length u32, then a version-1 payload (a group's image as one write request: `LogImage::as_write`) or a version-2 marker |
//!
//! Images come before the markers of their groups. Replaying a stream snapshot drops
//! every image and marker replayed so far and replays its records.
//!
//! Conf state: voters, learners, voters outgoing, learners next (each a count u32 then
//! that many u64), auto leave u8 (0 or 1). A snapshot marker names the snapshot's index,
//! term and voters; its data follows only when it has some: a snapshot the metadata group
//! sent (the topic table, docs/replication.md "Metadata snapshots"), and a compacted
//! image of that group (`LogImage::snapshot_data`), or a partition group's manifest
//! (docs/replication.md, "Partition snapshots"). Bit 2 came with metadata snapshots; a broker that
//! predates it refuses the flag (`UnknownFlags`) rather than drop the data.
//!
//! Invariants:
//! 1. `decode(encode(g, w)) == (g, w)` for every write request whose snapshot carries
//!    only index, term, conf state and data, and whose entries are dense (the driver's always are) and clear `sync_log`
//!    (deprecated in raft-rs, never set).
//! 2. `decode` never panics: bad bytes are a `DecodeError`.
//! 3. `replay` never panics on entries that decode: a write that `LogImage::apply` could
//!    not take (an append that leaves a gap) is a `ReplayError`, as is an image whose
//!    commit index passes its last entry, a marker of a group with no write before it,
//!    and a marker below the group's previous one.
//! 4. `replay_with_markers` keeps each group's last marker (`partition` invariant 3);
//!    checkpoints carry every entry of the stream since its latest durable stream
//!    snapshot (docs/storage.md), markers included.
//! 5. Replaying a stream snapshot gives each group the image it encoded (`LogImage::
//!    as_write` applied to `new_image(group)`), and the entries after it apply on top as
//!    they did on the images it was taken from.
//! 6. A write request larger than one log entry holds (under a segment) is appended as
//!    several, cut at entry boundaries (`split_write`); applied in turn they give the image
//!    the whole write gives, every prefix of them recovers (the commit index of all but
//!    the last piece goes no further than the piece's own entries), and the host hears the
//!    write durable only with its last piece. What cannot be cut (one entry or a snapshot
//!    over the bound) is refused, and the sink appends nothing of that group after a
//!    refusal: a later write would leave a gap in the replayed log.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::rc::Rc;

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, Snapshot};
use shardlog_storage::{
    AppendError, Disk, Durable, InternalEntry, InternalStream, PartitionId, ShardLog,
};

use super::group::Outcome;
use super::host::{GroupSink, Written};
use super::log::{LogImage, WriteRequest};
use super::partition::ApplyingMarker;

/// Version byte of a `Raft` entry's payload holding a write request.
pub const RAFT_PAYLOAD_VERSION: u8 = 1;
/// Version byte of a `Raft` entry's payload holding an applying marker.
pub const MARKER_PAYLOAD_VERSION: u8 = 2;
/// Version byte of a `Raft` entry's payload holding a stream snapshot.
pub const SNAPSHOT_PAYLOAD_VERSION: u8 = 3;
const MARKER_BYTES: usize = 1 + 8 + 8 + 8 + 8;
const HAS_HARD_STATE: u8 = 1;
const HAS_SNAPSHOT: u8 = 2;
const HAS_SNAPSHOT_DATA: u8 = 4;
/// Bytes of an entry without its data and context.
const ENTRY_FIXED_BYTES: usize = 8 + 8 + 1 + 4 + 4;

/// Why a payload is not a write request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// It ends before a field it announces.
    Truncated,
    UnknownVersion(u8),
    UnknownFlags(u8),
    UnknownEntryType(u8),
    /// `auto_leave` other than 0 or 1.
    BadBool(u8),
    /// Entries whose indexes are not consecutive from a first index above 0.
    NotDense {
        at: u64,
    },
    /// Bytes after the last entry.
    Trailing(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft write request: {self:?}")
    }
}

impl std::error::Error for DecodeError {}

/// Bytes of a write request's payload without its snapshot and entries: version, flags,
/// group, number, hard state, entry count.
const WRITE_FIXED_BYTES: usize = 1 + 1 + 8 + 8 + 24 + 4;

/// The most data one entry may carry so that a write request of that entry alone fits a
/// log entry of at most `max_payload` bytes (`ShardLog::max_internal_payload`): the bound
/// of `GroupConfig::max_entry_bytes`.
pub fn max_entry_bytes(max_payload: usize) -> usize {
    max_payload.saturating_sub(WRITE_FIXED_BYTES + ENTRY_FIXED_BYTES)
}

/// `encode(_, write).len()`, without encoding.
pub fn encoded_len(write: &WriteRequest) -> usize {
    let no_hard_state = if write.hard_state.is_some() { 0 } else { 24 };
    let snapshot = write.snapshot.as_ref().map_or(0, |snapshot| {
        let conf = snapshot.get_metadata().get_conf_state();
        let ids = conf.voters.len()
            + conf.learners.len()
            + conf.voters_outgoing.len()
            + conf.learners_next.len();
        let data = if snapshot.data.is_empty() { 0 } else { 4 + snapshot.data.len() };
        8 + 8 + 4 * 4 + 8 * ids + 1 + data
    });
    WRITE_FIXED_BYTES - no_hard_state
        + snapshot
        + write.entries.iter().map(entry_bytes).sum::<usize>()
}

fn entry_bytes(entry: &Entry) -> usize {
    ENTRY_FIXED_BYTES + entry.data.len() + entry.context.len()
}

/// `write` cut at entry boundaries into write requests whose payloads are at most `max`
/// bytes each, in order (invariant 6): one log entry holds at most a segment, and a
/// follower catching up, or a leader with many proposals in one ready, may hand out more.
/// The first piece carries the snapshot; each carries the hard state, with the commit
/// index of all but the last cut to the piece's own last index, so a crash between pieces
/// leaves a prefix of the entries and a commit index no further than them (what a shorter
/// write request would have left). All pieces keep the write's number: the host reports
/// the number durable only once the last piece is. Err with the size of a piece that
/// cannot be cut small enough (one entry, or the snapshot, over `max`).
pub fn split_write(write: WriteRequest, max: usize) -> Result<Vec<WriteRequest>, usize> {
    if encoded_len(&write) <= max {
        return Ok(vec![write]);
    }
    let bare = |snapshot: Option<Snapshot>| WriteRequest {
        number: write.number,
        hard_state: write.hard_state.clone(),
        entries: Vec::new(),
        snapshot,
    };
    let mut pieces = Vec::new();
    let mut piece = bare(write.snapshot.clone());
    let mut size = encoded_len(&piece);
    if size > max {
        return Err(size);
    }
    for entry in &write.entries {
        let bytes = entry_bytes(entry);
        if size + bytes > max && !(piece.entries.is_empty() && piece.snapshot.is_none()) {
            pieces.push(std::mem::replace(&mut piece, bare(None)));
            size = encoded_len(&piece);
        }
        if size + bytes > max {
            return Err(size + bytes);
        }
        piece.entries.push(entry.clone());
        size += bytes;
    }
    pieces.push(piece);
    let last = pieces.len() - 1;
    for piece in &mut pieces[..last] {
        let snapshot_index = piece.snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
        let through = piece.entries.last().map_or(snapshot_index, |e| e.index);
        if let Some(hard_state) = &mut piece.hard_state {
            hard_state.commit = hard_state.commit.min(through);
        }
    }
    Ok(pieces)
}

/// The payload of group `group`'s write request `write` (module docs).
pub fn encode(group: u64, write: &WriteRequest) -> Vec<u8> {
    let data: usize = write.entries.iter().map(|e| e.data.len() + e.context.len()).sum();
    let mut out = Vec::with_capacity(64 + write.entries.len() * ENTRY_FIXED_BYTES + data);
    out.push(RAFT_PAYLOAD_VERSION);
    let has_data = write.snapshot.as_ref().is_some_and(|s| !s.data.is_empty());
    let flags = (write.hard_state.is_some() as u8 * HAS_HARD_STATE)
        | (write.snapshot.is_some() as u8 * HAS_SNAPSHOT)
        | (has_data as u8 * HAS_SNAPSHOT_DATA);
    out.push(flags);
    out.extend_from_slice(&group.to_le_bytes());
    out.extend_from_slice(&write.number.to_le_bytes());
    if let Some(hard_state) = &write.hard_state {
        for value in [hard_state.term, hard_state.vote, hard_state.commit] {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
    if let Some(snapshot) = &write.snapshot {
        let metadata = snapshot.get_metadata();
        out.extend_from_slice(&metadata.index.to_le_bytes());
        out.extend_from_slice(&metadata.term.to_le_bytes());
        encode_conf_state(metadata.get_conf_state(), &mut out);
        if has_data {
            out.extend_from_slice(&(snapshot.data.len() as u32).to_le_bytes());
            out.extend_from_slice(&snapshot.data);
        }
    }
    out.extend_from_slice(&(write.entries.len() as u32).to_le_bytes());
    for entry in &write.entries {
        out.extend_from_slice(&entry.index.to_le_bytes());
        out.extend_from_slice(&entry.term.to_le_bytes());
        out.push(entry.entry_type as u8);
        for bytes in [&entry.data, &entry.context] {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
    out
}

fn encode_conf_state(conf_state: &ConfState, out: &mut Vec<u8>) {
    let lists = [
        &conf_state.voters,
        &conf_state.learners,
        &conf_state.voters_outgoing,
        &conf_state.learners_next,
    ];
    for list in lists {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for id in list {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    out.push(conf_state.auto_leave as u8);
}

/// The group id and write request of a `Raft` entry's payload (invariant 2).
pub fn decode(payload: &Bytes) -> Result<(u64, WriteRequest), DecodeError> {
    let mut reader = Reader { bytes: payload, at: 0 };
    let version = reader.u8()?;
    if version != RAFT_PAYLOAD_VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let flags = reader.u8()?;
    let data_without_snapshot = flags & HAS_SNAPSHOT_DATA != 0 && flags & HAS_SNAPSHOT == 0;
    if flags & !(HAS_HARD_STATE | HAS_SNAPSHOT | HAS_SNAPSHOT_DATA) != 0 || data_without_snapshot {
        return Err(DecodeError::UnknownFlags(flags));
    }
    let group = reader.u64()?;
    let mut write = WriteRequest { number: reader.u64()?, ..WriteRequest::default() };
    if flags & HAS_HARD_STATE != 0 {
        let (term, vote, commit) = (reader.u64()?, reader.u64()?, reader.u64()?);
        write.hard_state = Some(HardState { term, vote, commit, ..HardState::default() });
    }
    if flags & HAS_SNAPSHOT != 0 {
        let mut snapshot = Snapshot::default();
        let metadata = snapshot.mut_metadata();
        metadata.index = reader.u64()?;
        metadata.term = reader.u64()?;
        metadata.set_conf_state(reader.conf_state()?);
        if flags & HAS_SNAPSHOT_DATA != 0 {
            let len = reader.u32()? as usize;
            snapshot.data = reader.take(len)?;
        }
        write.snapshot = Some(snapshot);
    }
    let count = reader.u32()? as usize;
    if count > reader.remaining() / ENTRY_FIXED_BYTES {
        return Err(DecodeError::Truncated);
    }
    write.entries.reserve_exact(count);
    for _ in 0..count {
        let entry = reader.entry()?;
        let expected = match write.entries.last() {
            Some(last) => last.index.checked_add(1),
            None => Some(entry.index.max(1)),
        };
        if Some(entry.index) != expected {
            return Err(DecodeError::NotDense { at: entry.index });
        }
        write.entries.push(entry);
    }
    match reader.remaining() {
        0 => Ok((group, write)),
        left => Err(DecodeError::Trailing(left)),
    }
}

/// The payload of an applying marker (module docs).
pub fn encode_marker(marker: &ApplyingMarker) -> Vec<u8> {
    let mut out = Vec::with_capacity(MARKER_BYTES);
    out.push(MARKER_PAYLOAD_VERSION);
    out.extend_from_slice(&marker.group.to_le_bytes());
    out.extend_from_slice(&marker.index.to_le_bytes());
    out.extend_from_slice(&marker.partition.0.to_le_bytes());
    out.extend_from_slice(&marker.next_offset.to_le_bytes());
    out
}

/// What one `Raft` entry holds.
#[derive(Clone, Debug, PartialEq)]
pub enum RaftRecord {
    /// A group's write request.
    Write(u64, WriteRequest),
    /// A partition group's applying marker.
    Applying(ApplyingMarker),
    /// A stream snapshot: writes (one per group) and markers, never a snapshot.
    Snapshot(Vec<RaftRecord>),
}

/// The payload of a stream snapshot of `images` (group id, image) and `markers` (module
/// docs); a marker of a group without an image here is left out, as replay would refuse it.
pub fn encode_stream_snapshot<'a>(
    images: impl IntoIterator<Item = (u64, &'a LogImage)>,
    markers: impl IntoIterator<Item = &'a ApplyingMarker>,
) -> Vec<u8> {
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut groups = std::collections::BTreeSet::new();
    for (group, image) in images {
        groups.insert(group);
        records.push(encode(group, &image.as_write()));
    }
    let markers = markers.into_iter().filter(|m| groups.contains(&m.group));
    records.extend(markers.map(encode_marker));
    let bytes: usize = records.iter().map(|r| 4 + r.len()).sum();
    let mut out = Vec::with_capacity(5 + bytes);
    out.push(SNAPSHOT_PAYLOAD_VERSION);
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for record in records {
        out.extend_from_slice(&(record.len() as u32).to_le_bytes());
        out.extend_from_slice(&record);
    }
    out
}

/// A `Raft` entry's payload, whichever it holds (invariant 2).
pub fn decode_record(payload: &Bytes) -> Result<RaftRecord, DecodeError> {
    if payload.first() != Some(&SNAPSHOT_PAYLOAD_VERSION) {
        return decode_plain(payload);
    }
    let mut reader = Reader { bytes: payload, at: 1 };
    let count = reader.u32()? as usize;
    if count > reader.remaining() / 4 {
        return Err(DecodeError::Truncated);
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let len = reader.u32()? as usize;
        let record = reader.take(len)?;
        if record.first() == Some(&SNAPSHOT_PAYLOAD_VERSION) {
            return Err(DecodeError::UnknownVersion(SNAPSHOT_PAYLOAD_VERSION)); // nested
        }
        records.push(decode_plain(&record)?);
    }
    match reader.remaining() {
        0 => Ok(RaftRecord::Snapshot(records)),
        left => Err(DecodeError::Trailing(left)),
    }
}

/// A write request or a marker.
fn decode_plain(payload: &Bytes) -> Result<RaftRecord, DecodeError> {
    if payload.first() != Some(&MARKER_PAYLOAD_VERSION) {
        return decode(payload).map(|(group, write)| RaftRecord::Write(group, write));
    }
    let mut reader = Reader { bytes: payload, at: 1 };
    let marker = ApplyingMarker {
        group: reader.u64()?,
        index: reader.u64()?,
        partition: PartitionId(reader.u64()?),
        next_offset: reader.u64()? as i64,
    };
    match reader.remaining() {
        0 => Ok(RaftRecord::Applying(marker)),
        left => Err(DecodeError::Trailing(left)),
    }
}

/// Appends an applying marker to the shard log's `Raft` stream, before the partition
/// append it announces (`partition` invariant 3): durable with the same flush or an
/// earlier one, since the log recovers a prefix.
pub fn append_marker<D: Disk>(
    log: &ShardLog<D>,
    marker: &ApplyingMarker,
) -> Result<Durable, AppendError> {
    log.append_internal(InternalStream::Raft, false, &encode_marker(marker))
}

/// Appends a stream snapshot's payload (`encode_stream_snapshot`) with the log's snapshot
/// flag: once durable, the log forgets the stream's entries before it.
pub fn append_stream_snapshot<D: Disk>(
    log: &ShardLog<D>,
    payload: &[u8],
) -> Result<Durable, AppendError> {
    log.append_internal(InternalStream::Raft, true, payload)
}

/// A bounds-checked cursor over a payload.
struct Reader<'a> {
    bytes: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, len: usize) -> Result<Bytes, DecodeError> {
        if len > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        self.at += len;
        Ok(self.bytes.slice(self.at - len..self.at))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        Ok(bytes[..].try_into().expect("took N bytes"))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn ids(&mut self) -> Result<Vec<u64>, DecodeError> {
        let count = self.u32()? as usize;
        if count > self.remaining() / 8 {
            return Err(DecodeError::Truncated);
        }
        (0..count).map(|_| self.u64()).collect()
    }

    fn conf_state(&mut self) -> Result<ConfState, DecodeError> {
        let (voters, learners) = (self.ids()?, self.ids()?);
        let (voters_outgoing, learners_next) = (self.ids()?, self.ids()?);
        let auto_leave = match self.u8()? {
            0 => false,
            1 => true,
            other => return Err(DecodeError::BadBool(other)),
        };
        Ok(ConfState {
            voters,
            learners,
            voters_outgoing,
            learners_next,
            auto_leave,
            ..ConfState::default()
        })
    }

    fn entry(&mut self) -> Result<Entry, DecodeError> {
        let (index, term) = (self.u64()?, self.u64()?);
        let entry_type = match self.u8()? {
            0 => EntryType::EntryNormal,
            1 => EntryType::EntryConfChange,
            2 => EntryType::EntryConfChangeV2,
            other => return Err(DecodeError::UnknownEntryType(other)),
        };
        let data_len = self.u32()? as usize;
        let data = self.take(data_len)?;
        let context_len = self.u32()? as usize;
        let context = self.take(context_len)?;
        Ok(Entry { entry_type, term, index, data, context, ..Entry::default() })
    }
}

/// Why the `Raft` stream does not replay (the broker refuses to start rather than guess).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// An entry's payload does not decode.
    Decode { entry: usize, error: DecodeError },
    /// The log's snapshot flag and the payload disagree: a stream snapshot without the
    /// flag, or a flagged entry that is not one.
    StreamSnapshot { entry: usize },
    /// A write the group's image cannot take (invariant 3).
    Inconsistent { group: u64, why: String },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replaying the raft stream: {self:?}")
    }
}

impl std::error::Error for ReplayError {}

/// The groups' recovered images and each partition group's last applying marker.
#[derive(Debug, Default)]
pub struct Replayed {
    pub images: BTreeMap<u64, LogImage>,
    pub markers: BTreeMap<u64, ApplyingMarker>,
}

/// Rebuilds every group's image from the recovered internal entries (all streams, in log
/// order, as `ShardLog::open` returns them): each group starts from `new_image(group)`
/// (`LogImage::new(voters)`) and takes its write requests in order (invariant 3).
pub fn replay(
    recovered: &[InternalEntry],
    new_image: impl FnMut(u64) -> LogImage,
) -> Result<BTreeMap<u64, LogImage>, ReplayError> {
    replay_with_markers(recovered, new_image).map(|replayed| replayed.images)
}

/// `replay`, and each group's last applying marker (invariants 3 and 4).
pub fn replay_with_markers(
    recovered: &[InternalEntry],
    mut new_image: impl FnMut(u64) -> LogImage,
) -> Result<Replayed, ReplayError> {
    let mut replayed = Replayed::default();
    let raft = recovered.iter().filter(|e| e.stream == InternalStream::Raft);
    for (k, recovered) in raft.enumerate() {
        let record = decode_record(&recovered.payload)
            .map_err(|error| ReplayError::Decode { entry: k, error })?;
        if recovered.snapshot != matches!(record, RaftRecord::Snapshot(_)) {
            return Err(ReplayError::StreamSnapshot { entry: k });
        }
        match record {
            RaftRecord::Snapshot(records) => {
                replayed = Replayed::default();
                for record in records {
                    replay_record(&mut replayed, record, &mut new_image)?;
                }
            }
            record => replay_record(&mut replayed, record, &mut new_image)?,
        }
    }
    for (&group, image) in &replayed.images {
        image.check_recovered().map_err(|why| ReplayError::Inconsistent { group, why })?;
    }
    Ok(replayed)
}

/// One write request or marker (a stream snapshot's records are never snapshots).
fn replay_record(
    replayed: &mut Replayed,
    record: RaftRecord,
    new_image: &mut impl FnMut(u64) -> LogImage,
) -> Result<(), ReplayError> {
    let (group, write) = match record {
        RaftRecord::Write(group, write) => (group, write),
        RaftRecord::Applying(marker) => return replay_marker(replayed, marker, new_image),
        RaftRecord::Snapshot(_) => unreachable!("decode_record refuses a nested snapshot"),
    };
    let image = replayed.images.entry(group).or_insert_with(|| new_image(group));
    image.check_applies(&write).map_err(|why| ReplayError::Inconsistent { group, why })?;
    image.apply(&write);
    Ok(())
}

/// A marker of a partition snapshot's install (next offset -1) may come before any write
/// of its group: a wiped follower whose first message from the leader was the snapshot
/// writes the install's marker before raft-rs's first write of the group (the snapshot
/// itself), and a power loss may keep the one without the other. Its group then starts
/// from an empty image, as after a wipe, and the leader sends the snapshot again. Any
/// other marker before a write is an entry applied that was never durable here.
fn replay_marker(
    replayed: &mut Replayed,
    marker: ApplyingMarker,
    new_image: &mut impl FnMut(u64) -> LogImage,
) -> Result<(), ReplayError> {
    let group = marker.group;
    let inconsistent = |why: String| Err(ReplayError::Inconsistent { group, why });
    if marker.next_offset == -1 && !replayed.images.contains_key(&group) {
        replayed.images.insert(group, new_image(group));
    }
    if !replayed.images.contains_key(&group) {
        return inconsistent(format!(
            "an applying marker (index {}) before any write",
            marker.index
        ));
    }
    if let Some(last) = replayed.markers.get(&group) {
        if marker.index < last.index {
            let (index, last) = (marker.index, last.index);
            return inconsistent(format!("an applying marker of index {index} after {last}"));
        }
    }
    replayed.markers.insert(group, marker);
    Ok(())
}

/// Write requests appended to the shard log whose flush has not been reported yet, in log
/// order, shared by a host's sinks and its durability task (`GroupHost`). Bounded by what
/// the groups write while one flush is in flight: the driver hands out a group's next
/// writes only as fast as raft-rs produces readies.
pub type Flushes = Rc<RefCell<VecDeque<(u64, u64, Durable)>>>;

/// A group's `GroupSink` over the shard log: each write request becomes one `Raft` entry
/// (module docs); committed entries and outcomes go to `on_apply`.
pub struct ShardLogSink<D: Disk> {
    log: ShardLog<D>,
    group: u64,
    on_apply: Box<dyn FnMut(Vec<Entry>, Vec<Outcome>)>,
    /// Where a snapshot from the leader goes (the metadata group's applier); None for a
    /// group that never gets one (`GroupSink::install`'s default).
    on_install: Option<Box<dyn FnMut(Snapshot)>>,
    /// The log refused one of this group's writes: nothing later is appended, as it would
    /// leave a gap in the replayed log and raft-rs would count the refused write durable
    /// once a later one was.
    refused: bool,
    /// Writes appended as more than one log entry (`split_write`).
    cut_writes: u64,
    /// Where a `MsgSnapshot` goes before it is stepped (a partition group's catch-up,
    /// which steps it once the records it names are in); None: stepped at once.
    on_snapshot_message: Option<Box<dyn FnMut(Message)>>,
    /// Told the persisted index while the replica leads (`GroupSink::persisted`): a
    /// partition group's acks=1 answers; None: nothing to tell.
    on_persisted: Option<Box<dyn FnMut(u64, u64)>>,
    /// The term and vote of the last hard state this sink appended (None: none yet).
    written_term_vote: Option<(u64, u64)>,
}

impl<D: Disk> ShardLogSink<D> {
    pub fn new(
        log: ShardLog<D>,
        group: u64,
        on_apply: Box<dyn FnMut(Vec<Entry>, Vec<Outcome>)>,
    ) -> Self {
        ShardLogSink {
            log,
            group,
            on_apply,
            on_install: None,
            on_snapshot_message: None,
            on_persisted: None,
            written_term_vote: None,
            refused: false,
            cut_writes: 0,
        }
    }

    /// The sink with `on_snapshot_message` holding the `MsgSnapshot`s that arrive
    /// (`GroupSink::hold_snapshot`).
    pub fn with_held_snapshots(mut self, on_message: Box<dyn FnMut(Message)>) -> Self {
        self.on_snapshot_message = Some(on_message);
        self
    }

    /// The sink with `on_install` taking the snapshots the leader sends (after the write
    /// that carries one went to the log, like every write).
    pub fn with_install(mut self, on_install: Box<dyn FnMut(Snapshot)>) -> Self {
        self.on_install = Some(on_install);
        self
    }

    /// The sink with `on_persisted` told the persisted index (and term) while the replica
    /// leads (`GroupSink::persisted`).
    pub fn with_persisted(mut self, on_persisted: Box<dyn FnMut(u64, u64)>) -> Self {
        self.on_persisted = Some(on_persisted);
        self
    }

    /// Writes appended as more than one log entry so far.
    pub fn cut_writes(&self) -> u64 {
        self.cut_writes
    }

    /// Whether `write` only moves the commit index: no entries, no snapshot, and the term
    /// and vote of the last hard state appended. Notes its term and vote.
    fn only_moves_commit(&mut self, write: &WriteRequest) -> bool {
        let Some(hard_state) = &write.hard_state else { return false };
        let term_vote = Some((hard_state.term, hard_state.vote));
        let same = std::mem::replace(&mut self.written_term_vote, term_vote) == term_vote;
        same && write.entries.is_empty() && write.snapshot.is_none()
    }

    /// Appends `write` as one log entry, or several if it is larger than one entry holds
    /// (`split_write`); the `Durable` of the last.
    fn append(&mut self, write: WriteRequest) -> Result<Durable, String> {
        let max = self.log.max_internal_payload();
        let number = write.number;
        let pieces = split_write(write, max).map_err(|size| {
            format!("write {number} has a piece of {size} bytes, one log entry holds {max}")
        })?;
        self.cut_writes += (pieces.len() > 1) as u64;
        let mut last = None;
        for piece in &pieces {
            let payload = encode(self.group, piece);
            let durable = self.log.append_internal(InternalStream::Raft, false, &payload);
            last = Some(durable.map_err(|error| format!("write {number}: {error:?}"))?);
        }
        Ok(last.expect("a write request is at least one piece"))
    }
}

impl<D: Disk> GroupSink for ShardLogSink<D> {
    fn write(&mut self, writes: Vec<WriteRequest>) -> Written {
        let mut last = None;
        for write in writes {
            let number = write.number;
            // A log that refuses an append (stopped after a failed fdatasync, closed, a
            // piece over a segment) never makes this write durable, so the group is never
            // told it is: raft then counts this replica as lagging, and the shard's own
            // handling of the stopped log ends the broker.
            let appended = if self.refused {
                Err("an earlier write of the group was refused".to_string())
            } else if self.only_moves_commit(&write) {
                // A commit index need not be durable at once (raft learns it again after
                // a restart): this write rides the next one's flush, as the applied copies
                // of partition entries do (`partition_group` invariant 6).
                let log = self.log.clone();
                log.deferring_flush(|| self.append(write))
            } else {
                self.append(write)
            };
            match appended {
                Ok(durable) => last = Some((number, durable)),
                Err(error) => {
                    let group = self.group;
                    tracing::error!(group, number, error, "replication: a raft write refused");
                    self.refused = true;
                    return Written::Failed;
                }
            }
        }
        match last {
            Some((number, durable)) => Written::OnFlush { number, durable },
            None => Written::Later,
        }
    }

    fn apply(&mut self, committed: Vec<Entry>, outcomes: Vec<Outcome>) {
        (self.on_apply)(committed, outcomes)
    }

    fn persisted(&mut self, index: u64, term: u64) {
        if let Some(on_persisted) = self.on_persisted.as_mut() {
            on_persisted(index, term);
        }
    }

    fn install(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        let group = self.group;
        let on_install = self.on_install.as_mut().unwrap_or_else(|| {
            panic!("raft group {group} got a snapshot at {index}: it cannot install one")
        });
        on_install(snapshot)
    }

    fn hold_snapshot(&mut self, message: Message) -> Option<Message> {
        match self.on_snapshot_message.as_mut() {
            Some(hold) => {
                hold(message);
                None
            }
            None => Some(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(index: u64, term: u64, data: &'static [u8]) -> Entry {
        let mut entry = Entry { index, term, ..Default::default() };
        entry.data = Bytes::from_static(data);
        entry
    }

    fn full_write() -> WriteRequest {
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = 4;
        snapshot.mut_metadata().term = 2;
        snapshot.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        snapshot.mut_metadata().mut_conf_state().learners = vec![9];
        let mut conf_change = entry(6, 3, b"cc");
        conf_change.entry_type = EntryType::EntryConfChangeV2;
        conf_change.context = Bytes::from_static(b"ctx");
        WriteRequest {
            number: 17,
            hard_state: Some(HardState { term: 3, vote: 2, commit: 5, ..Default::default() }),
            entries: vec![entry(5, 3, b"hello"), conf_change],
            snapshot: Some(snapshot),
        }
    }

    #[test]
    fn a_write_request_round_trips_and_its_golden_prefix_holds() {
        let write = full_write();
        let bytes = encode(7, &write);
        assert_eq!(&bytes[..10], &[1, 3, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&bytes[10..18], &17u64.to_le_bytes());
        assert_eq!(decode(&Bytes::from(bytes)), Ok((7, write)));
        let empty = WriteRequest { number: 1, ..Default::default() };
        assert_eq!(encode(0, &empty).len(), 1 + 1 + 8 + 8 + 4);
        assert_eq!(decode(&Bytes::from(encode(0, &empty))), Ok((0, empty)));
    }

    /// Entries `first..=last` of term 2 with 100 bytes each, the commit index at `last`.
    fn appends(first: u64, last: u64) -> WriteRequest {
        let entries = (first..=last).map(|i| entry(i, 2, &[7; 100])).collect();
        let hard_state = HardState { term: 2, vote: 1, commit: last, ..Default::default() };
        WriteRequest { number: 3, hard_state: Some(hard_state), entries, snapshot: None }
    }

    #[test]
    fn a_write_too_large_for_one_log_entry_is_cut_at_entries_with_the_commit_cut_to_each() {
        let write = appends(5, 9);
        assert_eq!(encoded_len(&write), encode(1, &write).len());
        assert_eq!(split_write(write.clone(), encoded_len(&write)), Ok(vec![write.clone()]));
        let max = WRITE_FIXED_BYTES + 2 * (ENTRY_FIXED_BYTES + 100);
        let pieces = split_write(write.clone(), max).unwrap();
        let cut: Vec<(Vec<u64>, u64)> = pieces
            .iter()
            .map(|p| {
                (p.entries.iter().map(|e| e.index).collect(), p.hard_state.clone().unwrap().commit)
            })
            .collect();
        assert_eq!(cut, [(vec![5, 6], 6), (vec![7, 8], 8), (vec![9], 9)]);
        assert!(pieces.iter().all(|p| encode(1, p).len() <= max && p.number == write.number));
        // One entry alone over the bound cannot be cut; neither can a snapshot.
        assert_eq!(split_write(write, max / 2), Err(WRITE_FIXED_BYTES + ENTRY_FIXED_BYTES + 100));
        let mut snapshot = full_write();
        snapshot.snapshot.as_mut().unwrap().data = Bytes::from(vec![1; 1000]);
        let with_snapshot = encoded_len(&WriteRequest { entries: Vec::new(), ..snapshot.clone() });
        assert_eq!(split_write(snapshot, 500), Err(with_snapshot));
    }

    #[test]
    fn a_received_snapshot_round_trips_with_its_data_and_replays_into_the_image() {
        let mut write = full_write();
        let snapshot = write.snapshot.as_mut().unwrap();
        snapshot.data = Bytes::from_static(b"the topic table");
        snapshot.mut_metadata().mut_conf_state().learners.clear();
        let bytes = encode(7, &write);
        assert_eq!(bytes[1], HAS_HARD_STATE | HAS_SNAPSHOT | HAS_SNAPSHOT_DATA);
        assert_eq!(decode(&Bytes::from(bytes.clone())), Ok((7, write.clone())));
        for cut in 0..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(decode(&cut), Err(DecodeError::Truncated), "cut at {}", cut.len());
        }
        // Replay gives the image the driver had: the snapshot point, its data and the
        // entries after it (an empty log before: a node that lost its data dir).
        let recovered = [InternalEntry {
            stream: InternalStream::Raft,
            snapshot: false,
            payload: Bytes::from(bytes),
        }];
        let images = replay(&recovered, |_| LogImage::new(&[1, 2, 3])).unwrap();
        let mut expected = LogImage::new(&[1, 2, 3]);
        expected.apply(&write);
        assert_eq!(images[&7], expected);
        assert_eq!(images[&7].snapshot_data, Bytes::from_static(b"the topic table"));
        assert_eq!((images[&7].snapshot_index, images[&7].last_index()), (4, 6));
        // A stream snapshot of that image keeps the data, and so can send it again.
        let mut again = LogImage::new(&[1, 2, 3]);
        again.apply(&decode(&Bytes::from(encode(7, &images[&7].as_write()))).unwrap().1);
        assert_eq!(again, images[&7]);
        assert_eq!(again.snapshot_to_send().unwrap().data, write.snapshot.unwrap().data);
    }

    #[test]
    fn every_cut_of_a_payload_is_truncated_and_bad_fields_are_named() {
        let bytes = encode(7, &full_write());
        for cut in 0..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(decode(&cut), Err(DecodeError::Truncated), "cut at {}", cut.len());
        }
        let edited = |at: usize, value: u8| {
            let mut b = bytes.clone();
            b[at] = value;
            decode(&Bytes::from(b))
        };
        assert_eq!(edited(0, 2), Err(DecodeError::UnknownVersion(2)));
        assert_eq!(edited(1, 11), Err(DecodeError::UnknownFlags(11)));
        assert_eq!(edited(1, 5), Err(DecodeError::UnknownFlags(5)), "data without a snapshot");
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&Bytes::from(longer)), Err(DecodeError::Trailing(1)));
        // The first entry's type byte: after the header (18), hard state (24), snapshot
        // index and term (16), conf state (4 lists: 3 voters, 1 learner; auto leave) and
        // the entry count (4), then index and term (16).
        let conf = 4 * 4 + 4 * 8 + 1;
        let first_type = 18 + 24 + 16 + conf + 4 + 16;
        assert_eq!(edited(first_type, 3), Err(DecodeError::UnknownEntryType(3)));
        assert_eq!(edited(18 + 24 + 16 + conf - 1, 2), Err(DecodeError::BadBool(2)));
        let first_index = 18 + 24 + 16 + conf + 4;
        assert_eq!(edited(first_index, 9), Err(DecodeError::NotDense { at: 6 }));
    }

    #[test]
    fn replay_rebuilds_each_group_and_refuses_a_gap_or_a_commit_past_the_end() {
        let raft = |group: u64, write: &WriteRequest| InternalEntry {
            stream: InternalStream::Raft,
            snapshot: false,
            payload: Bytes::from(encode(group, write)),
        };
        let append = |number, entries: Vec<Entry>, commit| WriteRequest {
            number,
            hard_state: Some(HardState { term: 1, vote: 1, commit, ..Default::default() }),
            entries,
            snapshot: None,
        };
        let writes = [
            (1, append(1, vec![entry(1, 1, b"a"), entry(2, 1, b"b")], 0)),
            (2, append(1, vec![entry(1, 1, b"x")], 1)),
            (1, append(2, vec![entry(2, 2, b"c")], 2)),
        ];
        let mut entries: Vec<InternalEntry> = writes.iter().map(|(g, w)| raft(*g, w)).collect();
        let other = InternalEntry {
            stream: InternalStream::Metadata,
            snapshot: true,
            payload: Bytes::from_static(b"not raft"),
        };
        entries.insert(1, other);
        let images = replay(&entries, |_| LogImage::new(&[1, 2, 3])).unwrap();
        let mut model: BTreeMap<u64, LogImage> = BTreeMap::new();
        for (group, write) in &writes {
            model.entry(*group).or_insert_with(|| LogImage::new(&[1, 2, 3])).apply(write);
        }
        assert_eq!(images, model);
        assert_eq!(images[&1].entries, vec![entry(1, 1, b"a"), entry(2, 2, b"c")]);

        let gap = raft(2, &append(3, vec![entry(5, 1, b"gap")], 1));
        assert!(matches!(
            replay(&[entries.clone(), vec![gap]].concat(), |_| LogImage::default()),
            Err(ReplayError::Inconsistent { group: 2, .. })
        ));
        let past = raft(2, &append(3, vec![], 9));
        assert!(matches!(
            replay(&[entries, vec![past]].concat(), |_| LogImage::default()),
            Err(ReplayError::Inconsistent { group: 2, .. })
        ));
    }

    #[test]
    fn an_applying_marker_round_trips_and_its_cuts_and_extra_bytes_are_refused() {
        let marker = ApplyingMarker {
            group: 1 << 63 | 5,
            index: 12,
            partition: PartitionId::new(3, 1),
            next_offset: 40,
        };
        let bytes = encode_marker(&marker);
        assert_eq!(bytes.len(), 33);
        assert_eq!(&bytes[..1], &[2]);
        assert_eq!(&bytes[9..17], &12u64.to_le_bytes());
        assert_eq!(decode_record(&Bytes::from(bytes.clone())), Ok(RaftRecord::Applying(marker)));
        for cut in 1..bytes.len() {
            let cut = Bytes::copy_from_slice(&bytes[..cut]);
            assert_eq!(decode_record(&cut), Err(DecodeError::Truncated), "cut at {}", cut.len());
        }
        let mut longer = bytes;
        longer.push(0);
        assert_eq!(decode_record(&Bytes::from(longer)), Err(DecodeError::Trailing(1)));
        // A write request still decodes through `decode_record`; a version-1 reader
        // refuses the marker by its version.
        let write = full_write();
        let payload = Bytes::from(encode(7, &write));
        assert_eq!(decode_record(&payload), Ok(RaftRecord::Write(7, write)));
        let marker = Bytes::from(encode_marker(&marker));
        assert_eq!(decode(&marker), Err(DecodeError::UnknownVersion(2)));
    }

    #[test]
    fn replay_keeps_each_groups_last_marker_and_refuses_one_out_of_place() {
        let internal = |payload: Vec<u8>| InternalEntry {
            stream: InternalStream::Raft,
            snapshot: false,
            payload: Bytes::from(payload),
        };
        let write = |number, entries| WriteRequest { number, entries, ..Default::default() };
        let marker = |group, index, next_offset| ApplyingMarker {
            group,
            index,
            partition: PartitionId::new(1, 0),
            next_offset,
        };
        let entries = vec![
            internal(encode(1, &write(1, vec![entry(1, 1, b"a"), entry(2, 1, b"b")]))),
            internal(encode(2, &write(1, vec![entry(1, 1, b"x")]))),
            internal(encode_marker(&marker(1, 1, 0))),
            internal(encode_marker(&marker(2, 1, 7))),
            internal(encode_marker(&marker(1, 2, 3))),
            // The same index again: a restart that found entry 2 not applied.
            internal(encode_marker(&marker(1, 2, 3))),
        ];
        let replayed = replay_with_markers(&entries, |_| LogImage::default()).unwrap();
        assert_eq!(replayed.markers[&1], marker(1, 2, 3));
        assert_eq!(replayed.markers[&2], marker(2, 1, 7));
        assert_eq!(replayed.images[&1].last_index(), 2);
        assert_eq!(replay(&entries, |_| LogImage::default()).unwrap(), replayed.images);

        let lower = internal(encode_marker(&marker(1, 1, 0)));
        assert!(matches!(
            replay_with_markers(&[entries.clone(), vec![lower]].concat(), |_| LogImage::default()),
            Err(ReplayError::Inconsistent { group: 1, .. })
        ));
        let orphan = internal(encode_marker(&marker(3, 1, 0)));
        assert!(matches!(
            replay_with_markers(&[entries.clone(), vec![orphan]].concat(), |_| LogImage::default()),
            Err(ReplayError::Inconsistent { group: 3, .. })
        ));
        // A snapshot install's marker whose raft write a power loss took: the group starts
        // empty (as a wiped one) and keeps the marker; the others are as before.
        let install = internal(encode_marker(&marker(3, 40, -1)));
        let replayed =
            replay_with_markers(&[entries, vec![install]].concat(), |_| LogImage::default())
                .unwrap();
        assert_eq!(replayed.markers[&3], marker(3, 40, -1));
        assert_eq!(replayed.images[&3], LogImage::default());
        assert_eq!(replayed.markers[&1], marker(1, 2, 3));
    }

    #[test]
    fn a_stream_snapshot_replaces_what_came_before_it_and_later_writes_apply_on_top() {
        let internal = |payload: Vec<u8>, snapshot| InternalEntry {
            stream: InternalStream::Raft,
            snapshot,
            payload: Bytes::from(payload),
        };
        let write = |number, entries, commit| WriteRequest {
            number,
            hard_state: Some(HardState { term: 1, vote: 1, commit, ..Default::default() }),
            entries,
            snapshot: None,
        };
        let marker = |group, index| ApplyingMarker {
            group,
            index,
            partition: PartitionId::new(1, 0),
            next_offset: 9,
        };
        let voters = |_| LogImage::new(&[1, 2, 3]);
        let before = vec![
            internal(encode(1, &write(1, vec![entry(1, 1, b"a"), entry(2, 1, b"b")], 2)), false),
            internal(encode(2, &write(1, vec![entry(1, 1, b"gone")], 1)), false),
            internal(encode_marker(&marker(1, 2)), false),
            internal(encode_marker(&marker(2, 1)), false),
        ];
        // The shard's state then: group 1 compacted to 1 (its group 2 since dropped, with
        // its marker, which the snapshot leaves out since it has no image of group 2).
        let mut images = replay_with_markers(&before, voters).unwrap();
        let mut group_1 = images.images.remove(&1).unwrap();
        assert!(group_1.compact(1));
        let markers = [marker(1, 2), marker(2, 1)];
        let payload = encode_stream_snapshot([(1, &group_1)], &markers);
        assert_eq!(payload[0], SNAPSHOT_PAYLOAD_VERSION);
        assert_eq!(&payload[1..5], &2u32.to_le_bytes(), "group 1's image and its marker");
        let after = vec![
            internal(payload.clone(), true),
            internal(encode(1, &write(2, vec![entry(3, 2, b"c")], 3)), false),
            internal(encode_marker(&marker(1, 3)), false),
        ];
        let replayed = replay_with_markers(&[before.clone(), after.clone()].concat(), voters);
        let replayed = replayed.unwrap();
        assert_eq!(replayed.images.keys().collect::<Vec<_>>(), vec![&1]);
        let image = &replayed.images[&1];
        assert_eq!((image.snapshot_index, image.snapshot_term), (1, 1));
        assert_eq!(image.entries, vec![entry(2, 1, b"b"), entry(3, 2, b"c")]);
        assert_eq!(image.hard_state.commit, 3);
        assert_eq!(replayed.markers.values().collect::<Vec<_>>(), vec![&marker(1, 3)]);
        // What the log keeps after the snapshot is durable replays the same.
        let alone = replay_with_markers(&after, voters).unwrap();
        assert_eq!((alone.images, alone.markers), (replayed.images, replayed.markers));
        // The flag and the payload must agree.
        let unflagged = internal(payload.clone(), false);
        assert_eq!(replay(&[unflagged], voters), Err(ReplayError::StreamSnapshot { entry: 0 }));
        let flagged = internal(encode_marker(&marker(1, 3)), true);
        assert_eq!(replay(&[flagged], voters), Err(ReplayError::StreamSnapshot { entry: 0 }));
        // Every cut is truncated; a nested snapshot and trailing bytes are named.
        for cut in 1..payload.len() {
            let cut = Bytes::copy_from_slice(&payload[..cut]);
            assert_eq!(decode_record(&cut), Err(DecodeError::Truncated), "cut at {}", cut.len());
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert_eq!(decode_record(&Bytes::from(longer)), Err(DecodeError::Trailing(1)));
        let mut nested = vec![SNAPSHOT_PAYLOAD_VERSION, 1, 0, 0, 0];
        nested.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        nested.extend_from_slice(&payload);
        let nested = decode_record(&Bytes::from(nested));
        assert_eq!(nested, Err(DecodeError::UnknownVersion(SNAPSHOT_PAYLOAD_VERSION)));
    }

    fn arbitrary_entry() -> impl Strategy<Value = (u64, u8, Vec<u8>, Vec<u8>)> {
        let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
        (any::<u64>(), 0u8..3, bytes(), bytes())
    }

    fn arbitrary_write() -> impl Strategy<Value = (u64, WriteRequest)> {
        let ids = || proptest::collection::vec(any::<u64>(), 0..4);
        let hard_state = proptest::option::of((any::<u64>(), any::<u64>(), any::<u64>()));
        let data = proptest::collection::vec(any::<u8>(), 0..40);
        let snapshot =
            proptest::option::of(((any::<u64>(), any::<u64>()), ids(), ids(), any::<bool>(), data));
        let entries = (1u64..1 << 40, proptest::collection::vec(arbitrary_entry(), 0..6));
        (any::<u64>(), any::<u64>(), hard_state, snapshot, entries).prop_map(
            |(group, number, hard_state, snapshot, (first, entries))| {
                let hard_state = hard_state.map(|(term, vote, commit)| HardState {
                    term,
                    vote,
                    commit,
                    ..Default::default()
                });
                let snapshot =
                    snapshot.map(|((index, term), voters, learners, auto_leave, data)| {
                        let mut snapshot = Snapshot { data: data.into(), ..Snapshot::default() };
                        let metadata = snapshot.mut_metadata();
                        (metadata.index, metadata.term) = (index, term);
                        let conf_state = metadata.mut_conf_state();
                        (conf_state.voters, conf_state.learners_next) = (voters, learners);
                        conf_state.auto_leave = auto_leave;
                        snapshot
                    });
                let entries = entries
                    .into_iter()
                    .enumerate()
                    .map(|(k, (term, kind, data, context))| {
                        let mut entry =
                            Entry { index: first + k as u64, term, ..Default::default() };
                        entry.entry_type = match kind {
                            0 => EntryType::EntryNormal,
                            1 => EntryType::EntryConfChange,
                            _ => EntryType::EntryConfChangeV2,
                        };
                        (entry.data, entry.context) = (data.into(), context.into());
                        entry
                    })
                    .collect();
                (group, WriteRequest { number, hard_state, entries, snapshot })
            },
        )
    }

    proptest! {
        #[test]
        fn any_write_request_round_trips((group, write) in arbitrary_write()) {
            let bytes = Bytes::from(encode(group, &write));
            prop_assert_eq!(encoded_len(&write), bytes.len());
            prop_assert_eq!(decode(&bytes), Ok((group, write)));
        }

        /// Invariant 6: applying the pieces of a write one after the other gives the image
        /// the whole write gives, and every prefix of them (a crash between pieces) leaves
        /// a log that recovers, with a commit index no lower than before.
        #[test]
        fn the_pieces_of_a_cut_write_replay_as_the_write_and_every_prefix_recovers(
            (kept, committed) in (0u64..8).prop_flat_map(|n| (Just(n), 0..=n)),
            from in 0u64..9,
            sizes in proptest::collection::vec(0usize..200, 0..12),
            commit in 0u64..24,
            keep_hard_state in any::<bool>(),
            max in (WRITE_FIXED_BYTES + ENTRY_FIXED_BYTES + 200)..2_000,
        ) {
            let mut base = LogImage::new(&[1, 2, 3]);
            let mut setup = appends(1, kept);
            setup.hard_state.as_mut().unwrap().commit = committed;
            base.apply(&setup);
            // A follower's append starts past its commit index and at most one past its end.
            let first = (committed + 1 + from).min(kept + 1);
            let entries: Vec<Entry> = sizes
                .iter()
                .enumerate()
                .map(|(k, size)| {
                    let mut entry = Entry { index: first + k as u64, term: 3, ..Default::default() };
                    entry.data = Bytes::from(vec![k as u8; *size]);
                    entry
                })
                .collect();
            let last = (first + entries.len() as u64 - 1).max(committed);
            let commit = committed.max(commit.min(last));
            let hard_state = HardState { term: 3, vote: 2, commit, ..Default::default() };
            let hard_state = keep_hard_state.then_some(hard_state);
            let write = WriteRequest { number: 9, hard_state, entries, snapshot: None };
            let pieces = split_write(write.clone(), max).unwrap();
            let mut whole = base.clone();
            whole.apply(&write);
            let mut image = base.clone();
            for piece in &pieces {
                prop_assert!(encode(4, piece).len() <= max);
                image.check_applies(piece).map_err(TestCaseError::fail)?;
                image.apply(piece);
                image.check_recovered().map_err(TestCaseError::fail)?;
                prop_assert!(image.hard_state.commit >= committed);
            }
            prop_assert_eq!(image, whole);
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            let bytes = Bytes::from(bytes);
            let _ = decode(&bytes);
            let _ = decode_record(&bytes);
        }

        #[test]
        fn edited_payloads_decode_or_fail_without_panicking(
            (group, write) in arbitrary_write(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        ) {
            let mut bytes = encode(group, &write);
            for (at, value) in edits {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            if let Ok((group, write)) = decode(&Bytes::from(bytes)) {
                let again = Bytes::from(encode(group, &write));
                prop_assert_eq!(decode(&again), Ok((group, write)));
            }
        }

        #[test]
        fn edited_stream_snapshots_decode_or_fail_without_panicking(
            (group, write) in arbitrary_write(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        ) {
            let record = encode(group, &write);
            let mut bytes = vec![SNAPSHOT_PAYLOAD_VERSION, 1, 0, 0, 0];
            bytes.extend_from_slice(&(record.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&record);
            let unedited = decode_record(&Bytes::from(bytes.clone()));
            prop_assert_eq!(unedited, Ok(RaftRecord::Snapshot(vec![RaftRecord::Write(group, write)])));
            for (at, value) in edits {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            let _ = decode_record(&Bytes::from(bytes));
        }
    }
}
