//! Kafka error codes, and the one mapping from internal errors to them.

use shardlog_net::legacy_format::LegacyFormatError;
use shardlog_shards::credentials::CredentialError;
use shardlog_shards::{GroupError, PartitionError, TopicError, TxnError};

pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const NOT_CONTROLLER: i16 = 41;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const INVALID_REQUEST: i16 = 42;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
pub const POLICY_VIOLATION: i16 = 44;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub const FENCED_LEADER_EPOCH: i16 = 74;
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
pub const INVALID_RECORD: i16 = 87;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const PRODUCER_FENCED: i16 = 90;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

/// The Kafka error code for a partition-level failure.
pub fn partition_error_code(error: &PartitionError) -> i16 {
    match error {
        PartitionError::UnknownTopicOrPartition => UNKNOWN_TOPIC_OR_PARTITION,
        PartitionError::NotLeaderOrFollower => NOT_LEADER_OR_FOLLOWER,
        PartitionError::CorruptMessage(_) => CORRUPT_MESSAGE,
        PartitionError::InvalidRecord(_) | PartitionError::InvalidRecords { .. } => INVALID_RECORD,
        PartitionError::MessageTooLarge { .. } => MESSAGE_TOO_LARGE,
        PartitionError::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        PartitionError::UnknownProducerId => UNKNOWN_PRODUCER_ID,
        PartitionError::OutOfOrderSequence => OUT_OF_ORDER_SEQUENCE_NUMBER,
        PartitionError::InvalidProducerEpoch => INVALID_PRODUCER_EPOCH,
        PartitionError::UnsupportedForMessageFormat => UNSUPPORTED_FOR_MESSAGE_FORMAT,
        PartitionError::Storage(_) => KAFKA_STORAGE_ERROR,
        PartitionError::InvalidRequiredAcks(_) => INVALID_REQUIRED_ACKS,
        PartitionError::PolicyViolation(_) => POLICY_VIOLATION,
        // KIP-890's translations (Kafka's ReplicaManager): a partition never added is
        // INVALID_TXN_STATE, which clients treat as abortable; a coordinator that cannot
        // answer yet is NOT_ENOUGH_REPLICAS, which every client retries.
        PartitionError::NotInTransaction(_) => INVALID_TXN_STATE,
        PartitionError::InvalidProducerIdMapping => INVALID_PRODUCER_ID_MAPPING,
        PartitionError::TxnNotVerified(_) => NOT_ENOUGH_REPLICAS,
        PartitionError::TransactionalIdMissing => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        PartitionError::InvalidRequest(_) => INVALID_REQUEST,
        PartitionError::NotEnoughReplicas(_) => NOT_ENOUGH_REPLICAS,
        PartitionError::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        PartitionError::UnknownLeaderEpoch => UNKNOWN_LEADER_EPOCH,
    }
}

/// The Kafka error code for a refused SCRAM credential alteration (KIP-554's).
pub fn credential_error_code(error: &CredentialError) -> i16 {
    match error {
        CredentialError::NotFound(_) => RESOURCE_NOT_FOUND,
        CredentialError::Duplicate(_) => DUPLICATE_RESOURCE,
        CredentialError::Unacceptable(_) => UNACCEPTABLE_CREDENTIAL,
        CredentialError::UnsupportedMechanism(_) => UNSUPPORTED_SASL_MECHANISM,
        CredentialError::Storage(_) => KAFKA_STORAGE_ERROR,
    }
}

/// The Kafka error code for a message set that could not be converted to or from
/// message format v0/v1 (Produce v0-v2, Fetch v0-v3).
pub fn legacy_format_error_code(error: &LegacyFormatError) -> i16 {
    match error {
        LegacyFormatError::Corrupt(_) => CORRUPT_MESSAGE,
        LegacyFormatError::Invalid(_) => INVALID_RECORD,
        LegacyFormatError::UnsupportedCompression(_) => UNSUPPORTED_COMPRESSION_TYPE,
        LegacyFormatError::TooLarge(_) => MESSAGE_TOO_LARGE,
    }
}

/// The Kafka error code for a topic-level failure.
pub fn topic_error_code(error: &TopicError) -> i16 {
    match error {
        TopicError::AlreadyExists(_) => TOPIC_ALREADY_EXISTS,
        TopicError::InvalidTopic(_) => INVALID_TOPIC_EXCEPTION,
        TopicError::InvalidPartitions(_) => INVALID_PARTITIONS,
        TopicError::InvalidReplicationFactor(_) => INVALID_REPLICATION_FACTOR,
        TopicError::InvalidConfig(_) => INVALID_CONFIG,
        TopicError::InvalidRequest(_) => INVALID_REQUEST,
        TopicError::UnknownTopic(_) => UNKNOWN_TOPIC_OR_PARTITION,
        TopicError::Storage(_) => KAFKA_STORAGE_ERROR,
        TopicError::InvalidReplicaAssignment(_) => INVALID_REPLICA_ASSIGNMENT,
        TopicError::AuthorizationFailed(_) => TOPIC_AUTHORIZATION_FAILED,
        TopicError::NotController(_) => NOT_CONTROLLER,
    }
}

/// The Kafka error code for a consumer-group failure.
pub fn group_error_code(error: &GroupError) -> i16 {
    match error {
        GroupError::NotCoordinator => NOT_COORDINATOR,
        GroupError::CoordinatorLoadInProgress => COORDINATOR_LOAD_IN_PROGRESS,
        GroupError::CoordinatorNotAvailable => COORDINATOR_NOT_AVAILABLE,
        GroupError::InvalidGroupId => INVALID_GROUP_ID,
        GroupError::UnknownMemberId => UNKNOWN_MEMBER_ID,
        GroupError::MemberIdRequired => MEMBER_ID_REQUIRED,
        GroupError::IllegalGeneration => ILLEGAL_GENERATION,
        GroupError::RebalanceInProgress => REBALANCE_IN_PROGRESS,
        GroupError::InconsistentGroupProtocol => INCONSISTENT_GROUP_PROTOCOL,
        GroupError::InvalidSessionTimeout => INVALID_SESSION_TIMEOUT,
        GroupError::GroupIdNotFound => GROUP_ID_NOT_FOUND,
        GroupError::NonEmptyGroup => NON_EMPTY_GROUP,
        GroupError::GroupSubscribedToTopic => GROUP_SUBSCRIBED_TO_TOPIC,
        GroupError::OffsetMetadataTooLarge => OFFSET_METADATA_TOO_LARGE,
        GroupError::UnknownTopicOrPartition => UNKNOWN_TOPIC_OR_PARTITION,
        GroupError::Storage => KAFKA_STORAGE_ERROR,
        GroupError::GroupAuthorizationFailed => GROUP_AUTHORIZATION_FAILED,
        GroupError::TopicAuthorizationFailed => TOPIC_AUTHORIZATION_FAILED,
        GroupError::TransactionalIdAuthorizationFailed => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
}

/// The Kafka error code for a transaction failure. `fenced_code` says whether the request
/// version knows PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH.
pub fn txn_error_code(error: &TxnError, fenced_code: bool) -> i16 {
    match error {
        TxnError::NotCoordinator => NOT_COORDINATOR,
        TxnError::CoordinatorLoadInProgress => COORDINATOR_LOAD_IN_PROGRESS,
        TxnError::InvalidProducerIdMapping => INVALID_PRODUCER_ID_MAPPING,
        TxnError::ProducerFenced if fenced_code => PRODUCER_FENCED,
        TxnError::ProducerFenced => INVALID_PRODUCER_EPOCH,
        TxnError::ConcurrentTransactions | TxnError::MarkersPending(_) => CONCURRENT_TRANSACTIONS,
        TxnError::InvalidTxnState(_) => INVALID_TXN_STATE,
        TxnError::InvalidTransactionTimeout => INVALID_TRANSACTION_TIMEOUT,
        TxnError::EmptyTransactionalId => INVALID_REQUEST,
        TxnError::Storage(_) => KAFKA_STORAGE_ERROR,
    }
}

/// A human-readable message for a partition-level failure (Produce v8+ carries it).
pub fn partition_error_message(error: &PartitionError) -> String {
    match error {
        PartitionError::MessageTooLarge { size, max } => {
            format!("record batch of {size} bytes exceeds the limit of {max} bytes")
        }
        PartitionError::UnknownProducerId => {
            "no state for this producer id here (expired or lost): bump the epoch".to_string()
        }
        PartitionError::InvalidRecord(message)
        | PartitionError::CorruptMessage(message)
        | PartitionError::PolicyViolation(message)
        | PartitionError::NotInTransaction(message)
        | PartitionError::TxnNotVerified(message)
        | PartitionError::InvalidRequest(message)
        | PartitionError::NotEnoughReplicas(message) => message.clone(),
        PartitionError::TransactionalIdMissing => {
            "transactional records need the request's transactional_id".to_string()
        }
        // Kafka's wording: the count, then at most the first three.
        PartitionError::InvalidRecords { message, record_indexes } => format!(
            "One or more records have been rejected due to {} record errors in total, and only \
             showing the first three errors at most: {:?}: {message}",
            record_indexes.len(),
            &record_indexes[..record_indexes.len().min(3)]
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_error_maps_to_a_distinct_nonzero_code() {
        let errors = [
            PartitionError::UnknownTopicOrPartition,
            PartitionError::CorruptMessage(String::new()),
            PartitionError::InvalidRecord(String::new()),
            PartitionError::MessageTooLarge { size: 2, max: 1 },
            PartitionError::OffsetOutOfRange,
            PartitionError::UnknownProducerId,
            PartitionError::OutOfOrderSequence,
            PartitionError::InvalidProducerEpoch,
            PartitionError::UnsupportedForMessageFormat,
            PartitionError::Storage(String::new()),
            PartitionError::InvalidRequiredAcks(2),
            PartitionError::PolicyViolation(String::new()),
            PartitionError::NotInTransaction(String::new()),
            PartitionError::InvalidProducerIdMapping,
            PartitionError::TxnNotVerified(String::new()),
            PartitionError::TransactionalIdMissing,
            PartitionError::InvalidRequest(String::new()),
            PartitionError::FencedLeaderEpoch,
            PartitionError::UnknownLeaderEpoch,
        ];
        let mut codes: Vec<i16> = errors.iter().map(partition_error_code).collect();
        assert!(codes.iter().all(|c| *c != NONE));
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), errors.len());
        let keyless =
            PartitionError::InvalidRecords { message: "no key".into(), record_indexes: vec![0, 9] };
        assert_eq!(partition_error_code(&keyless), INVALID_RECORD);
        let message = partition_error_message(&keyless);
        assert!(message.contains("2 record errors") && message.contains("no key"), "{message}");
    }

    #[test]
    fn a_full_disk_is_a_kafka_storage_error_for_produce_topics_and_commits() {
        // What `Shard::produce` returns when the log refuses an append for ENOSPC.
        let full = PartitionError::Storage("prepare segment: No space left on device".into());
        assert_eq!(partition_error_code(&full), KAFKA_STORAGE_ERROR);
        assert_eq!(topic_error_code(&TopicError::Storage(String::new())), KAFKA_STORAGE_ERROR);
        assert_eq!(group_error_code(&GroupError::Storage), KAFKA_STORAGE_ERROR);
    }
}
