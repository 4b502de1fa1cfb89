//! Calls between nodes: a coordinator's COMMIT/ABORT marker for a partition led on
//! another node, a partition leader's KIP-890 verification question to a coordinator on
//! another node, a coordinator's resolution of a transaction's pending consumer-group
//! offsets on the group's coordinator on another node (docs/transactions.md, "Replicated
//! partitions"), and a topic auto-creation forwarded to the controller's node
//! (`crate::auto_create`; docs/replication.md, metadata group).
//!
//! They ride the raft transport as the `context` bytes of a raft `Message` addressed to
//! the reserved group id `NODE_RPC_GROUP` (2^63 - 3, beside the pulls' 2^63 - 2 and the
//! notices' 2^63 - 1; partition and offsets group ids have the top bit set and the
//! metadata group is 0), as the pulls do: shard s of one node to shard s of another, and
//! the receiving shard forwards over its node's mesh (`crate::node_calls`).
//!
//! Runs on any shard of a cluster; not a hot path (one request per marker of a partition
//! led elsewhere, one per transaction's first batch in such a partition, one per topic a
//! client asks a node that is not the controller to auto-create).
//!
//! Encoding (version 1, little-endian):
//!
//! | size | field |
//! |---|---|
//! | 1 | version (= 1) |
//! | 1 | kind (1 marker request, 2 marker answer, 3 verification request, 4 its answer, 5 offsets request, 6 its answer, 7 topic creation request, 8 its answer) |
//! | 8 | request id (u64, the asker's, echoed in the answer) |
//!
//! then a marker request: topic id (16), partition (i32), producer id (i64), epoch (i16),
//! commit (u8: 0 abort, 1 commit); a marker answer: Kafka error code (i16); a verification
//! request: transactional id (u16 length, UTF-8), producer id (i64), epoch (i16), topic
//! (u16 length, UTF-8), partition (i32); its answer: Kafka error code (i16, 0 verified),
//! message (u16 length, UTF-8); an offsets request: group id (u16 length, UTF-8), producer
//! id (i64), commit (u8); its answer: Kafka error code (i16); a topic creation request:
//! name (u16 length, UTF-8), partitions (i32), replication factor (i16), configs (u16
//! count, then each: name, value, u16 length and UTF-8 each); its answer: Kafka error code
//! (i16, 0 created), message (u16 length, UTF-8).
//!
//! Invariants:
//! 1. Decoding is total: any bytes give a message or a `NodeRpcError` naming the field,
//!    never a panic.
//! 2. `decode(encode(m)) == m`.

use std::fmt;

use crate::metadata::NewTopic;

/// The group id calls between nodes travel under; never a raft group's, the notices' or
/// the pulls'.
pub const NODE_RPC_GROUP: u64 = (u64::MAX >> 1) - 2;

const VERSION: u8 = 1;
const KIND_MARKER: u8 = 1;
const KIND_MARKER_ANSWER: u8 = 2;
const KIND_VERIFY: u8 = 3;
const KIND_VERIFY_ANSWER: u8 = 4;
const KIND_OFFSETS: u8 = 5;
const KIND_OFFSETS_ANSWER: u8 = 6;
const KIND_CREATE_TOPIC: u8 = 7;
const KIND_CREATE_TOPIC_ANSWER: u8 = 8;

/// A coordinator's marker for a partition whose leader is this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerRequest {
    pub request_id: u64,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
}

/// A partition leader's question: is the partition in the producer's open transaction?
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyRequest {
    pub request_id: u64,
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topic: String,
    pub partition: i32,
}

/// A decoded call between nodes, or its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRpc {
    Marker(MarkerRequest),
    /// The marker's outcome: a Kafka error code, 0 once the marker is durable.
    MarkerAnswer {
        request_id: u64,
        error_code: i16,
    },
    Verify(VerifyRequest),
    /// 0: verified; else the coordinator's Kafka error code and its message.
    VerifyAnswer {
        request_id: u64,
        error_code: i16,
        message: String,
    },
    /// Resolve (commit or drop) the producer's pending offsets of a group.
    Offsets {
        request_id: u64,
        group: String,
        producer_id: i64,
        commit: bool,
    },
    /// The resolution's outcome: a Kafka error code, 0 once it is durable.
    OffsetsAnswer {
        request_id: u64,
        error_code: i16,
    },
    /// Create a topic, as auto-creation asks for it, at the controller's node.
    CreateTopic {
        request_id: u64,
        topic: NewTopic,
    },
    /// 0: created; else the controller's Kafka error code and its message.
    CreateTopicAnswer {
        request_id: u64,
        error_code: i16,
        message: String,
    },
}

/// Why bytes are not a call between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRpcError {
    /// The bytes end inside this field.
    Truncated {
        field: &'static str,
    },
    UnknownVersion(u8),
    UnknownKind(u8),
    /// A commit byte other than 0 or 1.
    BadCommit(u8),
    /// A string field that is not UTF-8.
    NotUtf8 {
        field: &'static str,
    },
    /// Bytes after the message.
    Trailing(usize),
}

impl fmt::Display for NodeRpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call between nodes: {self:?}")
    }
}

impl std::error::Error for NodeRpcError {}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Longer strings are cut at a character boundary below 64 KiB: no transactional id,
    // topic, config or message the broker accepts comes near.
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

impl NodeRpc {
    /// The request id the message carries.
    pub fn request_id(&self) -> u64 {
        match self {
            NodeRpc::Marker(m) => m.request_id,
            NodeRpc::Verify(v) => v.request_id,
            NodeRpc::MarkerAnswer { request_id, .. }
            | NodeRpc::VerifyAnswer { request_id, .. }
            | NodeRpc::Offsets { request_id, .. }
            | NodeRpc::OffsetsAnswer { request_id, .. }
            | NodeRpc::CreateTopic { request_id, .. }
            | NodeRpc::CreateTopicAnswer { request_id, .. } => *request_id,
        }
    }

    /// Whether the message answers a call (else it is a call to serve).
    pub fn is_answer(&self) -> bool {
        match self {
            NodeRpc::MarkerAnswer { .. }
            | NodeRpc::VerifyAnswer { .. }
            | NodeRpc::OffsetsAnswer { .. }
            | NodeRpc::CreateTopicAnswer { .. } => true,
            NodeRpc::Marker(_)
            | NodeRpc::Verify(_)
            | NodeRpc::Offsets { .. }
            | NodeRpc::CreateTopic { .. } => false,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let kind = match self {
            NodeRpc::Marker(_) => KIND_MARKER,
            NodeRpc::MarkerAnswer { .. } => KIND_MARKER_ANSWER,
            NodeRpc::Verify(_) => KIND_VERIFY,
            NodeRpc::VerifyAnswer { .. } => KIND_VERIFY_ANSWER,
            NodeRpc::Offsets { .. } => KIND_OFFSETS,
            NodeRpc::OffsetsAnswer { .. } => KIND_OFFSETS_ANSWER,
            NodeRpc::CreateTopic { .. } => KIND_CREATE_TOPIC,
            NodeRpc::CreateTopicAnswer { .. } => KIND_CREATE_TOPIC_ANSWER,
        };
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&[VERSION, kind]);
        out.extend_from_slice(&self.request_id().to_le_bytes());
        match self {
            NodeRpc::Marker(m) => {
                out.extend_from_slice(&m.topic_id);
                out.extend_from_slice(&m.partition.to_le_bytes());
                out.extend_from_slice(&m.producer_id.to_le_bytes());
                out.extend_from_slice(&m.producer_epoch.to_le_bytes());
                out.push(m.commit as u8);
            }
            NodeRpc::MarkerAnswer { error_code, .. } => {
                out.extend_from_slice(&error_code.to_le_bytes())
            }
            NodeRpc::Verify(v) => {
                put_str(&mut out, &v.transactional_id);
                out.extend_from_slice(&v.producer_id.to_le_bytes());
                out.extend_from_slice(&v.producer_epoch.to_le_bytes());
                put_str(&mut out, &v.topic);
                out.extend_from_slice(&v.partition.to_le_bytes());
            }
            NodeRpc::VerifyAnswer { error_code, message, .. }
            | NodeRpc::CreateTopicAnswer { error_code, message, .. } => {
                out.extend_from_slice(&error_code.to_le_bytes());
                put_str(&mut out, message);
            }
            NodeRpc::Offsets { group, producer_id, commit, .. } => {
                put_str(&mut out, group);
                out.extend_from_slice(&producer_id.to_le_bytes());
                out.push(*commit as u8);
            }
            NodeRpc::OffsetsAnswer { error_code, .. } => {
                out.extend_from_slice(&error_code.to_le_bytes())
            }
            NodeRpc::CreateTopic { topic, .. } => put_new_topic(&mut out, topic),
        }
        out
    }

    /// The message of `bytes` (invariant 1).
    pub fn decode(bytes: &[u8]) -> Result<NodeRpc, NodeRpcError> {
        let mut reader = Reader { bytes, at: 0 };
        let version = reader.take::<1>("version")?[0];
        if version != VERSION {
            return Err(NodeRpcError::UnknownVersion(version));
        }
        let kind = reader.take::<1>("kind")?[0];
        if !(KIND_MARKER..=KIND_CREATE_TOPIC_ANSWER).contains(&kind) {
            return Err(NodeRpcError::UnknownKind(kind));
        }
        let request_id = u64::from_le_bytes(reader.take("request id")?);
        let rpc = match kind {
            KIND_MARKER => {
                let topic_id = reader.take::<16>("topic id")?;
                let partition = i32::from_le_bytes(reader.take("partition")?);
                let producer_id = i64::from_le_bytes(reader.take("producer id")?);
                let producer_epoch = i16::from_le_bytes(reader.take("producer epoch")?);
                let commit = reader.commit()?;
                NodeRpc::Marker(MarkerRequest {
                    request_id,
                    topic_id,
                    partition,
                    producer_id,
                    producer_epoch,
                    commit,
                })
            }
            KIND_MARKER_ANSWER => {
                let error_code = i16::from_le_bytes(reader.take("error code")?);
                NodeRpc::MarkerAnswer { request_id, error_code }
            }
            KIND_VERIFY => {
                let transactional_id = reader.string("transactional id")?;
                let producer_id = i64::from_le_bytes(reader.take("producer id")?);
                let producer_epoch = i16::from_le_bytes(reader.take("producer epoch")?);
                let topic = reader.string("topic")?;
                let partition = i32::from_le_bytes(reader.take("partition")?);
                NodeRpc::Verify(VerifyRequest {
                    request_id,
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    topic,
                    partition,
                })
            }
            KIND_VERIFY_ANSWER => {
                let error_code = i16::from_le_bytes(reader.take("error code")?);
                let message = reader.string("message")?;
                NodeRpc::VerifyAnswer { request_id, error_code, message }
            }
            KIND_OFFSETS => {
                let group = reader.string("group")?;
                let producer_id = i64::from_le_bytes(reader.take("producer id")?);
                let commit = reader.commit()?;
                NodeRpc::Offsets { request_id, group, producer_id, commit }
            }
            KIND_OFFSETS_ANSWER => {
                let error_code = i16::from_le_bytes(reader.take("error code")?);
                NodeRpc::OffsetsAnswer { request_id, error_code }
            }
            KIND_CREATE_TOPIC => NodeRpc::CreateTopic { request_id, topic: reader.new_topic()? },
            _ => {
                let error_code = i16::from_le_bytes(reader.take("error code")?);
                let message = reader.string("message")?;
                NodeRpc::CreateTopicAnswer { request_id, error_code, message }
            }
        };
        match bytes.len() - reader.at {
            0 => Ok(rpc),
            trailing => Err(NodeRpcError::Trailing(trailing)),
        }
    }
}

fn put_new_topic(out: &mut Vec<u8>, topic: &NewTopic) {
    put_str(out, &topic.name);
    out.extend_from_slice(&topic.num_partitions.to_le_bytes());
    out.extend_from_slice(&topic.replication_factor.to_le_bytes());
    // No topic has more configs than the broker knows (`topic_config::TOPIC_CONFIGS`),
    // far below the count's limit; auto-creation sends none.
    let configs = &topic.configs[..topic.configs.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(configs.len() as u16).to_le_bytes());
    for (name, value) in configs {
        put_str(out, name);
        put_str(out, value);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], NodeRpcError> {
        let slice = self.slice(field, N)?;
        Ok(slice.try_into().expect("N bytes"))
    }

    fn slice(&mut self, field: &'static str, len: usize) -> Result<&[u8], NodeRpcError> {
        let end = self.at + len;
        let slice = self.bytes.get(self.at..end).ok_or(NodeRpcError::Truncated { field })?;
        self.at = end;
        Ok(slice)
    }

    fn commit(&mut self) -> Result<bool, NodeRpcError> {
        match self.take::<1>("commit")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(NodeRpcError::BadCommit(other)),
        }
    }

    fn string(&mut self, field: &'static str) -> Result<String, NodeRpcError> {
        let len = u16::from_le_bytes(self.take(field)?) as usize;
        let bytes = self.slice(field, len)?;
        let s = std::str::from_utf8(bytes).map_err(|_| NodeRpcError::NotUtf8 { field })?;
        Ok(s.to_string())
    }

    fn new_topic(&mut self) -> Result<NewTopic, NodeRpcError> {
        let name = self.string("topic")?;
        let num_partitions = i32::from_le_bytes(self.take("partitions")?);
        let replication_factor = i16::from_le_bytes(self.take("replication factor")?);
        let count = u16::from_le_bytes(self.take("config count")?);
        // Grown as configs arrive: a count the bytes do not hold allocates nothing.
        let mut configs = Vec::new();
        for _ in 0..count {
            configs.push((self.string("config name")?, self.string("config value")?));
        }
        Ok(NewTopic { name, num_partitions, replication_factor, configs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn marker() -> NodeRpc {
        NodeRpc::Marker(MarkerRequest {
            request_id: 9,
            topic_id: [7; 16],
            partition: 2,
            producer_id: 4000,
            producer_epoch: 3,
            commit: true,
        })
    }

    fn verify() -> NodeRpc {
        NodeRpc::Verify(VerifyRequest {
            request_id: 10,
            transactional_id: "tx-é".to_string(),
            producer_id: 4000,
            producer_epoch: 3,
            topic: "orders".to_string(),
            partition: 1,
        })
    }

    fn offsets() -> NodeRpc {
        NodeRpc::Offsets {
            request_id: 11,
            group: "g".to_string(),
            producer_id: 4000,
            commit: false,
        }
    }

    fn create_topic() -> NodeRpc {
        let configs = vec![("cleanup.policy".to_string(), "compact".to_string())];
        let topic =
            NewTopic { name: "t".to_string(), num_partitions: 3, replication_factor: 1, configs };
        NodeRpc::CreateTopic { request_id: 12, topic }
    }

    fn all() -> Vec<NodeRpc> {
        vec![
            marker(),
            NodeRpc::MarkerAnswer { request_id: 9, error_code: 6 },
            verify(),
            NodeRpc::VerifyAnswer { request_id: 10, error_code: 48, message: "no".to_string() },
            offsets(),
            NodeRpc::OffsetsAnswer { request_id: 11, error_code: 16 },
            create_topic(),
            NodeRpc::CreateTopicAnswer { request_id: 12, error_code: 41, message: "n".into() },
        ]
    }

    #[test]
    fn every_kind_round_trips_with_its_golden_bytes() {
        let mut golden = vec![1, 1, 9, 0, 0, 0, 0, 0, 0, 0];
        golden.extend_from_slice(&[7; 16]);
        golden.extend_from_slice(&[2, 0, 0, 0, 0xa0, 0x0f, 0, 0, 0, 0, 0, 0, 3, 0, 1]);
        assert_eq!(marker().encode(), golden);
        let answer = NodeRpc::MarkerAnswer { request_id: 9, error_code: 6 };
        assert_eq!(answer.encode(), [1, 2, 9, 0, 0, 0, 0, 0, 0, 0, 6, 0]);
        let mut golden = vec![1, 3, 10, 0, 0, 0, 0, 0, 0, 0, 5, 0];
        golden.extend_from_slice("tx-é".as_bytes());
        golden.extend_from_slice(&[0xa0, 0x0f, 0, 0, 0, 0, 0, 0, 3, 0, 6, 0]);
        golden.extend_from_slice(b"orders");
        golden.extend_from_slice(&[1, 0, 0, 0]);
        assert_eq!(verify().encode(), golden);
        let answer = NodeRpc::VerifyAnswer { request_id: 10, error_code: 48, message: "no".into() };
        assert_eq!(answer.encode(), [1, 4, 10, 0, 0, 0, 0, 0, 0, 0, 48, 0, 2, 0, b'n', b'o']);
        let golden = [1, 5, 11, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'g', 0xa0, 0x0f, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(offsets().encode(), golden);
        let answer = NodeRpc::OffsetsAnswer { request_id: 11, error_code: 16 };
        assert_eq!(answer.encode(), [1, 6, 11, 0, 0, 0, 0, 0, 0, 0, 16, 0]);
        let mut golden = vec![1, 7, 12, 0, 0, 0, 0, 0, 0, 0, 1, 0, b't', 3, 0, 0, 0, 1, 0, 1, 0];
        golden.extend_from_slice(&[14, 0]);
        golden.extend_from_slice(b"cleanup.policy");
        golden.extend_from_slice(&[7, 0]);
        golden.extend_from_slice(b"compact");
        assert_eq!(create_topic().encode(), golden);
        let answer =
            NodeRpc::CreateTopicAnswer { request_id: 12, error_code: 41, message: "n".into() };
        assert_eq!(answer.encode(), [1, 8, 12, 0, 0, 0, 0, 0, 0, 0, 41, 0, 1, 0, b'n']);
        for rpc in all() {
            assert_eq!(NodeRpc::decode(&rpc.encode()), Ok(rpc));
        }
    }

    #[test]
    fn every_cut_is_truncated_and_bad_fields_are_named() {
        for rpc in all() {
            let bytes = rpc.encode();
            for cut in 0..bytes.len() {
                let decoded = NodeRpc::decode(&bytes[..cut]);
                assert!(
                    matches!(decoded, Err(NodeRpcError::Truncated { .. })),
                    "{cut}: {decoded:?}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(NodeRpc::decode(&longer), Err(NodeRpcError::Trailing(1)));
        }
        let edited = |mut bytes: Vec<u8>, at: usize, value: u8| {
            bytes[at] = value;
            NodeRpc::decode(&bytes)
        };
        assert_eq!(edited(marker().encode(), 0, 2), Err(NodeRpcError::UnknownVersion(2)));
        assert_eq!(edited(marker().encode(), 1, 9), Err(NodeRpcError::UnknownKind(9)));
        assert_eq!(edited(offsets().encode(), 21, 3), Err(NodeRpcError::BadCommit(3)));
        assert_eq!(edited(marker().encode(), 1, 0), Err(NodeRpcError::UnknownKind(0)));
        assert_eq!(edited(marker().encode(), 40, 2), Err(NodeRpcError::BadCommit(2)));
        let not_utf8 = edited(verify().encode(), 15, 0xff);
        assert_eq!(not_utf8, Err(NodeRpcError::NotUtf8 { field: "transactional id" }));
        let long = edited(verify().encode(), 10, 200);
        assert!(matches!(long, Err(NodeRpcError::Truncated { .. })), "{long:?}");
        // A config count the bytes do not hold: the first missing config is truncated.
        let many = edited(create_topic().encode(), 19, 0xff);
        assert_eq!(many, Err(NodeRpcError::Truncated { field: "config name" }));
        let not_utf8 = edited(create_topic().encode(), 23, 0xff);
        assert_eq!(not_utf8, Err(NodeRpcError::NotUtf8 { field: "config name" }));
    }

    #[test]
    fn the_group_is_none_of_the_other_reserved_ones_nor_a_raft_groups() {
        use crate::replication::notice::NOTICE_GROUP;
        use crate::replication::pull::PULL_GROUP;
        assert_ne!(NODE_RPC_GROUP, NOTICE_GROUP);
        assert_ne!(NODE_RPC_GROUP, PULL_GROUP);
        assert_ne!(NODE_RPC_GROUP, 0, "the metadata group");
        assert_eq!(NODE_RPC_GROUP >> 63, 0, "partition and offsets groups have the top bit set");
    }

    proptest! {
        #[test]
        fn any_call_round_trips(
            request_id in any::<u64>(),
            topic_id in any::<[u8; 16]>(),
            (partition, producer_id, producer_epoch) in (any::<i32>(), any::<i64>(), any::<i16>()),
            commit in any::<bool>(),
            error_code in any::<i16>(),
            (transactional_id, topic) in ("\\PC{0,40}", "\\PC{0,40}"),
            configs in proptest::collection::vec(("\\PC{0,20}", "\\PC{0,20}"), 0..4),
        ) {
            let rpcs = [
                NodeRpc::Marker(MarkerRequest {
                    request_id, topic_id, partition, producer_id, producer_epoch, commit,
                }),
                NodeRpc::MarkerAnswer { request_id, error_code },
                NodeRpc::Verify(VerifyRequest {
                    request_id,
                    transactional_id: transactional_id.clone(),
                    producer_id,
                    producer_epoch,
                    topic: topic.clone(),
                    partition,
                }),
                NodeRpc::VerifyAnswer { request_id, error_code, message: transactional_id.clone() },
                NodeRpc::Offsets { request_id, group: transactional_id, producer_id, commit },
                NodeRpc::OffsetsAnswer { request_id, error_code },
                NodeRpc::CreateTopic {
                    request_id,
                    topic: NewTopic {
                        name: topic.clone(),
                        num_partitions: partition,
                        replication_factor: producer_epoch,
                        configs,
                    },
                },
                NodeRpc::CreateTopicAnswer { request_id, error_code, message: topic },
            ];
            for rpc in rpcs {
                prop_assert_eq!(NodeRpc::decode(&rpc.encode()), Ok(rpc));
            }
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_without_panicking(
            bytes in proptest::collection::vec(any::<u8>(), 0..256)
        ) {
            let _ = NodeRpc::decode(&bytes);
        }
    }
}
