//! Every message that crosses cores, in one place.
//!
//! Requests and replies are paired by variant name. Nothing here is a closure: every
//! cross-core interaction is a plain `Send` value, so it can be logged, counted and (later)
//! recorded in a simulation. Payloads are `Bytes`, so batch bytes cross cores without a copy.

use std::sync::Arc;

use bytes::Bytes;
use shardlog_storage::Offset;

use crate::acl::{AclBinding, AclFilter};
use crate::credentials::{CredentialAlteration, CredentialResults};
use crate::error::{GroupError, PartitionError, TopicError, TxnError};
use crate::group::admin::{GroupDescription, ResetResults};
use crate::metadata::{NewPartitions, NewTopic, TopicTable};
use crate::metadata_log::ChangeRecord;
use crate::metrics::{MetricsScope, ShardMetrics};
use crate::topic_config::TopicConfigChange;

/// A request from one shard to another.
#[derive(Debug)]
pub enum ShardRequest {
    /// Append the record batches of one partition on its owner (a forwarded Produce).
    /// `transactional_id`: the request's, which the owner needs to verify a transaction's
    /// first batch with its coordinator (KIP-890).
    Produce {
        topic: String,
        partition: i32,
        records: Bytes,
        acks: i16,
        transactional_id: Option<String>,
    },
    /// Read partitions owned by the receiver (a forwarded Fetch); long-polls there.
    Fetch { reads: Vec<PartitionRead>, max_wait_ms: u64, min_bytes: usize, max_bytes: usize },
    /// Resolve a ListOffsets query on the partition's owner (latest is the last stable
    /// offset when `read_committed`).
    ListOffsets {
        topic: String,
        partition: i32,
        timestamp_ms: i64,
        read_committed: bool,
        current_leader_epoch: i32,
    },
    /// Where a leader epoch ended in a partition, on its owner (OffsetForLeaderEpoch).
    OffsetForLeaderEpoch {
        topic: String,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    },
    /// Ask the controller (shard 0) to create topics.
    CreateTopics { topics: Vec<NewTopic>, validate_only: bool },
    /// Ask the controller (shard 0) to delete topics by name.
    DeleteTopics { names: Vec<String> },
    /// The controller's topic table at start-up; every shard replaces its copy.
    ApplyTopicTable(Box<TopicTable>),
    /// A change record of the metadata log, durable on the controller; every shard applies
    /// it to its copy (the change travels, not the table).
    ApplyTopicChanges(Arc<ChangeRecord>),
    /// Which node leads the metadata group, as shard 0 knows it.
    ControllerNode,
    /// A partition group's (leader node, raft term) changed on the shard that hosts it.
    PartitionLeader { group: u64, leader: Option<u32>, term: u64 },
    /// A partition group's ISR (node ids, ascending) as the shard that hosts it applied it.
    PartitionIsr { group: u64, isr: Vec<u32> },
    /// Ask the controller (shard 0) to change topics' configs.
    AlterTopicConfigs { changes: Vec<TopicConfigChange>, validate_only: bool },
    /// A snapshot of the receiver's counters, of the parts `MetricsScope` names (the admin
    /// endpoint's shard asks, per metrics scrape or console page).
    Metrics(MetricsScope),
    /// Whether the receiver is well: it answers, with why its log stopped if it did.
    Health,
    /// Ask the controller (shard 0) to add partitions to existing topics.
    CreatePartitions { topics: Vec<NewPartitions>, validate_only: bool },
    /// Move a partition's log start forward on its owner (a forwarded DeleteRecords).
    DeleteRecords { topic: String, partition: i32, offset: Offset },
    /// Write a transaction's COMMIT/ABORT marker to a partition on its owner; answered
    /// once durable.
    TxnMarker { topic: String, partition: i32, producer_id: i64, producer_epoch: i16, commit: bool },
    /// Commit or drop a transaction's pending offsets on the group's coordinator; answered
    /// once durable.
    TxnOffsetsMarker { group: String, producer_id: i64, commit: bool },
    /// Ask the transactional id's coordinator whether (topic, partition) is in the
    /// producer's open transaction at this epoch (KIP-890 part 1; Kafka's verify-only
    /// AddPartitionsToTxn v4). Answered from memory, without IO, once no call on the id
    /// is in progress (so the answer is about durable metadata).
    VerifyTxnPartition {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        topic: String,
        partition: i32,
    },
    /// Ask the controller (shard 0) to add ACL bindings (validated by the sender).
    CreateAcls { bindings: Vec<AclBinding> },
    /// Ask the controller (shard 0) to remove the ACL bindings each filter matches.
    DeleteAcls { filters: Vec<AclFilter> },
    /// Ask the controller (shard 0) to alter SASL users' SCRAM credentials.
    AlterScramCredentials { alterations: Vec<CredentialAlteration> },
    /// A group's membership and committed offsets, from its coordinator (the console).
    DescribeGroup { group: String },
    /// Commit (topic, partition, offset) for a group without members, on its coordinator
    /// (the console's offset reset); answered once durable.
    ResetGroupOffsets { group: String, offsets: Vec<(String, i32, i64)> },
}

/// The reply to a [`ShardRequest`] of the same name.
#[derive(Debug)]
pub enum ShardReply {
    Produce(Result<ProduceAck, PartitionError>),
    Fetch(Vec<PartitionData>),
    /// (offset, timestamp, leader epoch).
    ListOffsets(Result<ListedOffset, PartitionError>),
    /// (leader epoch, end offset).
    OffsetForLeaderEpoch(Result<(i32, Offset), PartitionError>),
    CreateTopics(Vec<Result<(), TopicError>>),
    DeleteTopics(Vec<Result<(), TopicError>>),
    ApplyTopicTable,
    ApplyTopicChanges,
    ControllerNode(Option<u64>),
    PartitionLeader,
    PartitionIsr,
    AlterTopicConfigs(Vec<Result<(), TopicError>>),
    Metrics(Box<ShardMetrics>),
    Health(Option<String>),
    CreatePartitions(Vec<Result<(), TopicError>>),
    /// The new log start offset (Kafka's low watermark), durable.
    DeleteRecords(Result<Offset, PartitionError>),
    TxnMarker(Result<(), PartitionError>),
    TxnOffsetsMarker(Result<(), GroupError>),
    VerifyTxnPartition(Result<(), TxnError>),
    CreateAcls(Result<(), TopicError>),
    /// Per filter, the bindings it removed.
    DeleteAcls(Result<Vec<Vec<AclBinding>>, TopicError>),
    AlterScramCredentials(CredentialResults),
    DescribeGroup(Box<GroupDescription>),
    ResetGroupOffsets(ResetResults),
}

/// Where a produce landed.
#[derive(Clone, Copy, Debug)]
pub struct ProduceAck {
    pub base_offset: Offset,
    pub log_start_offset: Offset,
    /// The broker's append time on a LogAppendTime topic, else -1.
    pub log_append_time_ms: i64,
}

/// One partition of a Fetch.
#[derive(Clone, Debug)]
pub struct PartitionRead {
    pub topic: String,
    pub partition: i32,
    pub fetch_offset: Offset,
    pub partition_max_bytes: usize,
    /// isolation_level=1: only up to the last stable offset, with the aborted list.
    pub read_committed: bool,
    /// The leader epoch the client believes current (Fetch v9+; -1: not checked).
    pub current_leader_epoch: i32,
}

/// What ListOffsets found in one partition: an offset, its record's timestamp (-1 when
/// not looked up by time) and the leader epoch of its batch (-1 when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedOffset {
    pub offset: Offset,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

/// What a Fetch returns for one partition.
#[derive(Clone, Debug)]
pub struct PartitionData {
    pub topic: String,
    pub partition: i32,
    pub result: Result<FetchedRecords, PartitionError>,
}

/// Batches read from one partition, with the offsets a consumer needs.
#[derive(Clone, Debug)]
pub struct FetchedRecords {
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    /// read_committed: the aborted transactions (producer id, first offset) the records
    /// overlap, for the client to drop.
    pub aborted_transactions: Vec<(i64, Offset)>,
    pub records: Bytes,
}

/// What travels on the mesh: a request with its id, or the reply to one.
#[derive(Debug)]
pub enum Envelope {
    Request { id: u64, request: ShardRequest },
    Reply { id: u64, reply: ShardReply },
}
