//! shardlog-shards: the thread-per-core runtime.
//!
//! One glommio executor per core, pinned; each is a shard that owns its partitions, its
//! sockets and its log outright. Shards share nothing mutable: they cooperate only
//! through the mesh of bounded channels (`mesh`), carrying the `Send` enums of
//! `message` (the one file that lists all cross-core traffic).
//!
//! Rooms: this is the only crate that touches glommio channels or crosses cores. It
//! knows partitions, topics and shards; it does not know the Kafka wire format.
//!
//! Invariants:
//! 1. Shard-local state is `Rc`/`RefCell`/`Cell`; no `RefCell` borrow is held across `.await`.
//! 2. A partition is served only by its owner shard; others forward (and count it).
//! 3. Shard 0 is the controller: the only writer of the topic table.

pub mod acl;
pub mod admin;
pub mod auto_create;
pub mod codec;
pub mod compaction;
pub mod controller;
pub mod credentials;
pub mod error;
pub mod group;
pub mod leader_acks;
pub mod leader_balance;
pub mod leader_notices;
pub mod mesh;
pub mod message;
pub mod metadata;
pub mod metadata_group;
pub mod metadata_log;
pub mod metrics;
mod node_calls;
pub mod ops;
pub mod partition_group;
pub mod partition_snapshots;
pub mod producer;
pub mod producer_log;
pub mod replicated_delete_records;
pub mod replication;
pub mod retention;
pub mod runtime;
pub mod service;
pub mod shard;
pub mod topic_config;
pub mod txn;
pub mod write_caching;

pub use auto_create::AutoCreate;
pub use error::{GroupError, PartitionError, TopicError, TxnError};
pub use mesh::{mesh_builder, Mesh, ShardMeshBuilder};
pub use message::{FetchedRecords, ListedOffset, PartitionData, PartitionRead, ProduceAck};
pub use metadata::{NewPartitions, NewTopic, TopicMeta, TopicTable};
pub use shard::{Shard, ShardConfig, ShardProbes};
