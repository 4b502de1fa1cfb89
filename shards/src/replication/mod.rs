//! Replication: raft groups driven by the shard that owns them (issue 16, first slices).
//!
//! The driver does no IO. A `RaftGroup` wraps one raft-rs `RawNode` and turns its `Ready`s
//! into three queues a host drains: messages for peers, write requests for durable
//! storage (the shard's log later, one group-commit fdatasync for many groups), and
//! committed entries with the outcome of each proposal (acks=all). A `LogImage` is both
//! the log raft-rs reads and what a host recovers after a crash.
//!
//! The transport (`transport.rs`, wire format in `frame.rs`) carries the messages: one
//! per shard, over TCP to the same shard of every peer node, on the shard's glommio
//! executor. `GroupHost` (`host.rs`) is the shard's replication event loop: it owns the
//! transport and the shard's groups, steps each group with what arrives for it, ticks
//! them, and sends what they emit. The broker starts one on every shard when `--peers`
//! names other nodes; shard 0's hosts the metadata group (`crate::metadata_group`), and
//! every shard the partition groups of its replicated partitions
//! (`crate::partition_group`); what arrives for a group not hosted is counted and dropped.
//!
//! `persist.rs` puts a group's write requests on the shard log (`InternalStream::Raft`,
//! one entry per request, in the shard's group commit), and rebuilds the groups'
//! `LogImage`s from that stream at start-up, with each partition group's last applying
//! marker.
//!
//! Raft snapshots: a group's log is compacted up to what every voter has (a voter not
//! heard from for `GroupConfig::compact_past_inactive_ticks` aside); a voter that lost its
//! log (a data dir replaced) or was away past the compaction point is sent the image's
//! snapshot data: the metadata group's topic table (`crate::metadata_group` invariant 4),
//! a partition group's manifest (`partition_snapshot.rs`), whose records the follower
//! pulls (`pull.rs`, `snapshot_transfer.rs`, `crate::partition_snapshots`) before the
//! `MsgSnapshot` is stepped (`GroupSink::hold_snapshot`). The driver hands a received
//! snapshot to the host before later entries (`GroupSink::install`), and survives the
//! lost log itself (`group.rs` invariant 5). `partition.rs` holds the partition groups' pieces without IO: group ids of a
//! (replica set, shard), the produce entry, and the exactly-once rule of the markers.
//!
//! Runs on: the shard that owns the group (shard s of every node replicates with shard s
//! of the others). The design, the measurements behind it, the simulation that checks it
//! and what remains are in docs/replication.md.
//!
//! Invariants (held by tests/replication_sim.rs, seeded, with a faulty network, crashes
//! that lose unsynced writes, and restarts; and by tests/replication_sim_disk.rs, the
//! same over each node's `SimDisk` shard log with several groups per node, power losses
//! that lose, keep or tear unsynced writes, the start-up replay, compaction and stream
//! snapshots):
//! 1. At most one leader per term.
//! 2. Committed prefixes never diverge between replicas, across crashes.
//! 3. No proposal reported `Committed` is ever lost.
//! 4. A leader cut off in a minority never reports a proposal made there `Committed`.

pub mod fragment;
pub mod frame;
mod group;
mod host;
mod log;
pub mod node_rpc;
pub mod notice;
pub mod partition;
pub mod partition_snapshot;
pub mod persist;
pub mod pull;
pub mod snapshot_transfer;
pub mod transport;

pub use group::{GroupConfig, Outcome, Proposal, ProposeError, RaftGroup};
pub use host::{node_of, raft_id, GroupExists, GroupHost, GroupSink, HostStats, Written, TICK};
pub use log::{LogImage, WriteRequest};
pub use raft::eraftpb::{ConfState, Entry, HardState, Message, MessageType, Snapshot};
pub use transport::{Inbound, Keepalive, Transport, TransportConfig, TransportStats, UnknownPeer};
