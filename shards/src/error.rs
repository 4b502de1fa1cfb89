//! Errors that cross cores (so they carry strings, not `io::Error`).
//!
//! The binary maps each to one Kafka error code in one function
//! (`src/handlers/errors.rs`).

use std::fmt;

/// Why one partition's operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionError {
    UnknownTopicOrPartition,
    /// The partition is placed on another node of the cluster (Kafka's
    /// NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and goes there).
    NotLeaderOrFollower,
    /// The batch failed validation (CRC, lengths, magic): nothing was written.
    CorruptMessage(String),
    /// The batch is well formed but not acceptable (e.g. counts, unsupported features).
    InvalidRecord(String),
    /// Some records are not acceptable (KIP-467): each at its index among the produced
    /// records, all for the same reason; nothing was written.
    InvalidRecords {
        message: String,
        record_indexes: Vec<i32>,
    },
    MessageTooLarge {
        size: usize,
        max: usize,
    },
    OffsetOutOfRange,
    /// An idempotent producer this partition has no state for, not starting at sequence 0.
    UnknownProducerId,
    /// A gap in an idempotent producer's sequence.
    OutOfOrderSequence,
    /// An idempotent batch from an epoch older than the producer's current one.
    InvalidProducerEpoch,

    /// The request version cannot carry what the log stores (Produce v0-v2: magic < 2).
    UnsupportedForMessageFormat,
    /// The disk failed; for fdatasync failures the broker stops.
    Storage(String),
    /// acks was not 0, 1 or -1.
    InvalidRequiredAcks(i16),
    /// The topic's configs forbid the operation (DeleteRecords on a compact-only topic).
    PolicyViolation(String),
    /// KIP-890 part 1: the transaction coordinator does not hold this partition in the
    /// producer's open transaction (or the transaction ended while it was asked): nothing
    /// was written.
    NotInTransaction(String),
    /// The coordinator knows another producer id for the transactional id, or none.
    InvalidProducerIdMapping,
    /// The coordinator could not confirm the partition yet (its markers are being written,
    /// or it is not the coordinator): nothing was written, and a retry may succeed.
    TxnNotVerified(String),
    /// A transactional batch in a produce that names no transactional id.
    TransactionalIdMissing,
    /// A request field no broker accepts (an empty transactional id).
    InvalidRequest(String),
    /// acks=all to a partition with fewer in-sync replicas than its min.insync.replicas.
    NotEnoughReplicas(String),
    /// The request's current leader epoch is older than the partition's (KIP-320): the
    /// client refreshes its metadata.
    FencedLeaderEpoch,
    /// The request's current leader epoch is newer than this replica knows (KIP-320).
    UnknownLeaderEpoch,
}

/// Why a topic operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicError {
    AlreadyExists(String),
    InvalidTopic(String),
    InvalidPartitions(String),
    InvalidReplicationFactor(String),
    InvalidConfig(String),
    InvalidRequest(String),
    UnknownTopic(String),
    Storage(String),
    /// CreatePartitions with assignments that name no shard or more than one replica.
    InvalidReplicaAssignment(String),
    /// The caller's ACLs do not allow the operation on the topic (decided by the handler).
    AuthorizationFailed(String),
    /// This node is not the cluster's controller (the metadata group's leader), none is
    /// elected, or the change did not commit: retriable at the controller.
    NotController(String),
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicError::AlreadyExists(m)
            | TopicError::InvalidTopic(m)
            | TopicError::InvalidPartitions(m)
            | TopicError::InvalidReplicationFactor(m)
            | TopicError::InvalidConfig(m)
            | TopicError::InvalidRequest(m)
            | TopicError::UnknownTopic(m)
            | TopicError::Storage(m)
            | TopicError::InvalidReplicaAssignment(m)
            | TopicError::AuthorizationFailed(m)
            | TopicError::NotController(m) => f.write_str(m),
        }
    }
}

impl fmt::Display for PartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// Why a consumer-group request failed (each maps to one Kafka error code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupError {
    NotCoordinator,
    /// In a cluster: this replica leads the offsets group but has not applied what was
    /// committed before its term yet.
    CoordinatorLoadInProgress,
    /// In a cluster: no leader of the group's offsets group is known, or a change to its
    /// offsets did not commit in time.
    CoordinatorNotAvailable,
    InvalidGroupId,
    UnknownMemberId,
    MemberIdRequired,
    IllegalGeneration,
    RebalanceInProgress,
    InconsistentGroupProtocol,
    InvalidSessionTimeout,
    GroupIdNotFound,
    NonEmptyGroup,
    GroupSubscribedToTopic,
    OffsetMetadataTooLarge,
    UnknownTopicOrPartition,
    /// Writing the commit to the log failed (the broker stops on fsync failure).
    Storage,
    /// The caller's ACLs refuse the group, a topic, or the transactional id (decided by
    /// the handler, before the coordinator is asked).
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
}

/// Why a transaction call failed (each maps to one Kafka error code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// This shard does not coordinate the transactional id (or the group).
    NotCoordinator,
    /// The coordinator is completing transactions recovered at start-up.
    CoordinatorLoadInProgress,
    /// The call's producer id is not the transactional id's.
    InvalidProducerIdMapping,
    /// A newer instance of the producer holds the transactional id (a newer epoch).
    ProducerFenced,
    /// Another call on the same transactional id is in progress, or markers are being
    /// written: retriable.
    ConcurrentTransactions,
    /// The call does not fit the transaction's state (with which call in which state).
    InvalidTxnState(String),
    /// transaction.timeout.ms is not in 1..=transaction_max_timeout_ms.
    InvalidTransactionTimeout,
    /// An empty transactional id.
    EmptyTransactionalId,
    /// Writing to the log failed (the broker stops on fsync failure).
    Storage(String),
    /// A marker could not be written yet (a replicated partition's leader is not on the
    /// coordinator's node): the transaction stays prepared and the ticker tries again;
    /// answered CONCURRENT_TRANSACTIONS, retriable, as a call while markers are written.
    MarkersPending(String),
}

impl fmt::Display for TxnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxnError::InvalidTxnState(m) | TxnError::Storage(m) | TxnError::MarkersPending(m) => {
                f.write_str(m)
            }
            other => write!(f, "{other:?}"),
        }
    }
}
