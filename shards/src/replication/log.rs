//! A raft group's log as a plain value: the image of what a replica has written (hard
//! state, configuration, snapshot point, entries), and the write requests that change it.
//!
//! One type, `LogImage`, plays both roles the driver needs:
//! - the raft-rs `Storage` the group reads from: everything *written*, durable or not
//!   (raft-rs requires a write to be readable before `advance_append_async`);
//! - what a host recovers after a crash: everything *durable*, which a restarted group
//!   starts from (`RaftGroup::recover`).
//!
//! A host makes `WriteRequest`s durable in order (on the shard's log later: one log entry
//! per request, covered by the flusher's group-commit fdatasync) and reports each one's
//! `number` back to the driver. Replaying the same requests in the same order with
//! `LogImage::apply` gives back the same image: that is the whole durable-state contract.
//!
//! Runs on the shard that owns the group; not a hot path yet (entries are cloned into the
//! image; the shard-log version will keep positions instead).
//!
//! Invariants:
//! 1. Entries are dense: `entries[k].index == snapshot_index + 1 + k`.
//! 2. An appended entry at index i replaces the entry at i and everything after it (raft's
//!    log matching: a conflicting suffix is never kept).
//! 3. `hard_state.commit <= last_index()` in every image a write request produced, since a
//!    request carries the entries its commit index covers (checked on recovery).
//! 4. `snapshot_data`, when not empty, is the application's state as of the snapshot
//!    point or of a later committed index: compacting further clears it (the application
//!    sets it again, `RaftGroup::set_snapshot_data`), a received snapshot brings its own.
//!    "Later" is safe only for an application that skips what it already applied (the
//!    metadata group's table versions: docs/replication.md, "Metadata snapshots").

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// One write a group asks its host to make durable, in `number` order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteRequest {
    /// The raft-rs ready number; report it with `RaftGroup::durable` once durable.
    pub number: u64,
    /// The new term, vote and commit index, when they changed.
    pub hard_state: Option<HardState>,
    /// Entries to append; the first one replaces the log from its index on (invariant 2).
    pub entries: Vec<Entry>,
    /// A snapshot that replaces the log up to its index: one a leader sent (only the
    /// metadata group's carry data, docs/replication.md "Metadata snapshots"), or a
    /// compacted image stored as one by a stream snapshot (`LogImage::as_write`).
    pub snapshot: Option<Snapshot>,
}

impl WriteRequest {
    /// Whether the request changes nothing (then the driver does not hand it out).
    pub fn is_empty(&self) -> bool {
        self.hard_state.is_none() && self.entries.is_empty() && self.snapshot.is_none()
    }
}

/// A replica's log: hard state, voters, snapshot point and entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogImage {
    /// Term, vote and commit index.
    pub hard_state: HardState,
    /// The voters (static membership: fixed when the group is created).
    pub conf_state: ConfState,
    /// Index of the last entry folded into the snapshot (0: none).
    pub snapshot_index: u64,
    /// Term of that entry.
    pub snapshot_term: u64,
    /// Entries after the snapshot, dense (invariant 1).
    pub entries: Vec<Entry>,
    /// The application's state at the snapshot point or later (invariant 4), which
    /// `Storage::snapshot` sends to a follower the log was compacted past; empty: none
    /// (a partition group's leader sets its manifest only while a voter needs it).
    pub snapshot_data: bytes::Bytes,
}

impl LogImage {
    /// A new group's log: no entries, term 0, the given voters.
    pub fn new(voters: &[u64]) -> LogImage {
        let mut image = LogImage::default();
        image.conf_state.voters = voters.to_vec();
        image
    }

    /// Index of the last entry (the snapshot's when there is none after it).
    pub fn last_index(&self) -> u64 {
        self.snapshot_index + self.entries.len() as u64
    }

    /// The entry at `index`, if the log holds it.
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        let k = index.checked_sub(self.snapshot_index + 1)?;
        self.entries.get(k as usize)
    }

    /// Applies one write request, as a host does once it is durable (or on replay).
    pub fn apply(&mut self, write: &WriteRequest) {
        if let Some(snapshot) = &write.snapshot {
            self.apply_snapshot(snapshot);
        }
        self.append(&write.entries);
        if let Some(hard_state) = &write.hard_state {
            self.hard_state = hard_state.clone();
        }
    }

    /// Whether `apply(write)` keeps invariant 1: a replayed write that would not (a gap
    /// before its first entry, or an entry at or below the snapshot) is refused by the
    /// caller instead of asserted on.
    pub fn check_applies(&self, write: &WriteRequest) -> Result<(), String> {
        let Some(first) = write.entries.first() else { return Ok(()) };
        let (snapshot_index, last_index) = match &write.snapshot {
            Some(snapshot) => {
                let metadata = snapshot.get_metadata();
                let agrees = self.entry(metadata.index).map(|e| e.term) == Some(metadata.term);
                let last = if agrees { self.last_index() } else { metadata.index };
                (metadata.index, last)
            }
            None => (self.snapshot_index, self.last_index()),
        };
        if first.index <= snapshot_index || first.index > last_index.saturating_add(1) {
            return Err(format!(
                "append at {} to a log of ({snapshot_index}, {last_index}]",
                first.index
            ));
        }
        Ok(())
    }

    /// Invariant 2: the first new entry cuts the log at its index.
    fn append(&mut self, new: &[Entry]) {
        let Some(first) = new.first() else { return };
        assert!(
            first.index > self.snapshot_index && first.index <= self.last_index() + 1,
            "append at {} to a log of ({}, {}]",
            first.index,
            self.snapshot_index,
            self.last_index()
        );
        self.entries.truncate((first.index - self.snapshot_index - 1) as usize);
        self.entries.extend_from_slice(new);
    }

    fn apply_snapshot(&mut self, snapshot: &Snapshot) {
        let metadata = snapshot.get_metadata();
        // Keep the entries after the snapshot only if the log agrees with it at its index.
        let agrees = self.entry(metadata.index).map(|e| e.term) == Some(metadata.term);
        let keep_from = (metadata.index.saturating_sub(self.snapshot_index)) as usize;
        self.entries = if agrees { self.entries.split_off(keep_from) } else { Vec::new() };
        self.snapshot_index = metadata.index;
        self.snapshot_term = metadata.term;
        self.conf_state = metadata.get_conf_state().clone();
        self.hard_state.commit = self.hard_state.commit.max(metadata.index);
        self.snapshot_data = snapshot.data.clone();
    }

    /// Folds the entries up to `to` into the snapshot point (log compaction: docs/
    /// replication.md, "Log compaction"): they are applied on this replica and every voter
    /// has them, so no one reads them again. Returns whether it dropped anything; `to` at
    /// or below the snapshot point, or past the last entry, changes nothing.
    pub fn compact(&mut self, to: u64) -> bool {
        let Some(term) = self.entry(to).map(|e| e.term) else { return false };
        self.entries.drain(..(to - self.snapshot_index) as usize);
        self.snapshot_index = to;
        self.snapshot_term = term;
        // Invariant 4: the data may be as of an index below the new point.
        self.snapshot_data = bytes::Bytes::new();
        true
    }

    /// The raft snapshot this image can send: its snapshot point with the application's
    /// data (invariant 4); None without data.
    pub fn snapshot_to_send(&self) -> Option<Snapshot> {
        if self.snapshot_index == 0 || self.snapshot_data.is_empty() {
            return None;
        }
        let mut snapshot = Snapshot { data: self.snapshot_data.clone(), ..Snapshot::default() };
        let metadata = snapshot.mut_metadata();
        metadata.index = self.snapshot_index;
        metadata.term = self.snapshot_term;
        metadata.set_conf_state(self.conf_state.clone());
        Some(snapshot)
    }

    /// The image as one write request that gives it back when applied to a new image of
    /// the same group (`LogImage::new(voters)`): what a stream snapshot stores
    /// (`persist::encode_stream_snapshot`).
    pub fn as_write(&self) -> WriteRequest {
        let snapshot = (self.snapshot_index > 0).then(|| {
            let mut snapshot = Snapshot::default();
            let metadata = snapshot.mut_metadata();
            metadata.index = self.snapshot_index;
            metadata.term = self.snapshot_term;
            metadata.set_conf_state(self.conf_state.clone());
            snapshot.data = self.snapshot_data.clone();
            snapshot
        });
        WriteRequest {
            number: 0,
            hard_state: Some(self.hard_state.clone()),
            entries: self.entries.clone(),
            snapshot,
        }
    }

    /// Bytes of entry data and context the image holds (its memory, roughly).
    pub fn entry_bytes(&self) -> u64 {
        self.entries.iter().map(|e| (e.data.len() + e.context.len()) as u64).sum()
    }

    /// Invariant 3, checked where a host hands a recovered image back.
    pub fn check_recovered(&self) -> Result<(), String> {
        if self.hard_state.commit > self.last_index() {
            return Err(format!(
                "recovered commit index {} is past the last entry {}",
                self.hard_state.commit,
                self.last_index()
            ));
        }
        Ok(())
    }
}

impl Storage for LogImage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.snapshot_index - 1) as usize;
        let to = (high - self.snapshot_index - 1) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snapshot_index {
            return Ok(self.snapshot_term);
        }
        if index < self.snapshot_index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        match self.entry(index) {
            Some(entry) => Ok(entry.term),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snapshot_index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(LogImage::last_index(self))
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // A voter that lost its data dir, or was away past the compaction point, needs a
        // snapshot. The metadata group's applier keeps its table here (invariant 4), a
        // partition group's leader its manifest while a voter needs one
        // (`crate::partition_snapshots`); without data raft-rs keeps asking.
        match self.snapshot_to_send() {
            Some(snapshot) => Ok(snapshot),
            None => Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry { index, term, ..Default::default() }
    }

    fn terms(image: &LogImage) -> Vec<(u64, u64)> {
        image.entries.iter().map(|e| (e.index, e.term)).collect()
    }

    #[test]
    fn an_append_replaces_the_conflicting_suffix() {
        let mut image = LogImage::new(&[1, 2, 3]);
        let write = |entries| WriteRequest { number: 1, entries, ..Default::default() };
        image.apply(&write(vec![entry(1, 1), entry(2, 1), entry(3, 1)]));
        image.apply(&write(vec![entry(2, 2)]));
        assert_eq!(terms(&image), vec![(1, 1), (2, 2)]);
        image.apply(&write(vec![entry(3, 2), entry(4, 2)]));
        assert_eq!(terms(&image), vec![(1, 1), (2, 2), (3, 2), (4, 2)]);
        assert_eq!(image.term(0).unwrap(), 0);
        assert_eq!(image.term(4).unwrap(), 2);
        assert!(image.term(5).is_err());
        let read = image.entries(2, 4, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(read, vec![entry(2, 2), entry(3, 2)]);
    }

    #[test]
    fn compaction_drops_a_prefix_and_the_image_as_a_write_gives_it_back() {
        let mut image = LogImage::new(&[1, 2, 3]);
        let entries = (1..=5).map(|i| entry(i, i.div_ceil(2))).collect();
        image.apply(&WriteRequest { number: 1, entries, ..Default::default() });
        image.hard_state.commit = 4;
        assert!(!image.compact(0) && !image.compact(6), "nothing at 0 or past the end");
        assert!(image.compact(3));
        assert_eq!(terms(&image), vec![(4, 2), (5, 3)]);
        assert_eq!((image.first_index().unwrap(), image.term(3).unwrap()), (4, 2));
        assert!(image.term(2).is_err() && !image.compact(2) && !image.compact(3));
        let read = image.entries(4, 6, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(read, vec![entry(4, 2), entry(5, 3)]);
        let mut again = LogImage::new(&[1, 2, 3]);
        again.apply(&image.as_write());
        assert_eq!(again, image);
        // Never compacted: no snapshot point in the write, the voters come from the group.
        let fresh = LogImage::new(&[1, 2, 3]);
        assert_eq!(fresh.as_write().snapshot, None);
        let mut from_fresh = LogImage::new(&[1, 2, 3]);
        from_fresh.apply(&fresh.as_write());
        assert_eq!(from_fresh, fresh);
        assert!(image.compact(5) && image.entries.is_empty());
        assert_eq!((LogImage::last_index(&image), image.entry_bytes()), (5, 0));
    }

    #[test]
    fn a_snapshot_keeps_only_agreeing_entries_after_it() {
        let mut image = LogImage::new(&[1, 2, 3]);
        let entries = (1..=5).map(|i| entry(i, 1)).collect();
        image.apply(&WriteRequest { number: 1, entries, ..Default::default() });
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = 3;
        snapshot.mut_metadata().term = 1;
        snapshot.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        image.apply(&WriteRequest {
            number: 2,
            snapshot: Some(snapshot.clone()),
            ..Default::default()
        });
        assert_eq!(terms(&image), vec![(4, 1), (5, 1)]);
        assert_eq!(image.first_index().unwrap(), 4);
        assert_eq!(image.hard_state.commit, 3);
        assert!(matches!(
            image.entries(3, 4, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        snapshot.mut_metadata().index = 7;
        snapshot.mut_metadata().term = 2;
        image.apply(&WriteRequest { number: 3, snapshot: Some(snapshot), ..Default::default() });
        assert!(image.entries.is_empty());
        assert_eq!(LogImage::last_index(&image), 7);
        assert_eq!(image.term(7).unwrap(), 2);
    }
}
