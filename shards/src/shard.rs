//! One shard: its log, its copy of the topic table, its end of the mesh, its probes.
//!
//! Lives on exactly one core (`Rc`, never `Send`). Routing lives here: an operation on a
//! partition is served locally when this shard owns the partition and forwarded over
//! the mesh otherwise (counted in `probes.forwarded_requests`), never served through
//! shared state.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use shardlog_storage::{AnyDisk, Durable, Histogram, PartitionId, ShardLog, STAGE_BOUNDS_US};
use tracing::info;

use crate::error::PartitionError;
use crate::group::{GroupConfig, GroupCoordinator};
use crate::mesh::Mesh;
use crate::metadata::{NewTopic, TopicMeta, TopicTable};
use crate::metadata_log::{ChangeRecord, SnapshotPolicy, SnapshotSchedule, TopicChange};
use crate::producer::ProducerStates;
use crate::replication::GroupHost;
use crate::write_caching::UnsyncedAcks;

/// Broker-wide settings every shard needs.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Create a topic on Metadata for an unknown name, as Kafka's auto.create.topics.enable.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic (and of CreateTopics with -1), Kafka's num.partitions.
    pub default_partitions: i32,
    /// Replication factor of an auto-created topic and of CreateTopics with -1, Kafka's
    /// default.replication.factor (checked at start-up:
    /// `controller::validate_default_replication_factor`).
    pub default_replication_factor: i16,
    /// Largest record batch accepted, unless a topic says otherwise (message.max.bytes).
    pub max_message_bytes: usize,
    /// Largest `max.message.bytes` a topic may set, above or below `max_message_bytes`:
    /// what one log segment and one request frame can hold.
    pub topic_max_message_bytes_ceiling: usize,
    /// How often retention runs on each shard.
    pub retention_check_interval: Duration,
    /// How often each shard writes an index checkpoint.
    pub checkpoint_interval: Duration,
    /// How often each shard logs its probes (when they changed).
    pub probe_log_interval: Duration,
    /// Consumer-group settings.
    pub group: GroupConfig,
    /// Idle idempotent producers' state is dropped after this (producer.id.expiration.ms).
    pub producer_id_expiration_ms: i64,
    /// Transaction settings.
    pub txn: crate::txn::TxnConfig,
    /// Log cleaner (compacted topics) settings.
    pub cleaner: crate::compaction::CleanerConfig,
    /// When the controller snapshots the topic table (shard 0).
    pub metadata_snapshot: SnapshotPolicy,
    /// ACL checking (`authorizer`, `super_users`).
    pub authorizer: crate::acl::AuthorizerConfig,
    /// This node's id (`--node-id` with `--peers`; `SINGLE_NODE` without).
    pub node_id: u32,
    /// Every node of the cluster, this one included, sorted: where new partitions are
    /// placed (`[SINGLE_NODE]` without `--peers`).
    pub nodes: Vec<u32>,
    /// A replica not caught up with its leader for this long leaves the ISR
    /// (replica.lag.time.max.ms; `partition_group`).
    pub replica_lag_time_max: Duration,
    /// How often a group's leader hands the leadership to the group's preferred replica
    /// once it is caught up (`partition_group`); None: never.
    pub leader_imbalance_check_interval: Option<Duration>,
    /// A voter of a partition group its leader has not heard from for this long stops
    /// holding the group's raft log compaction back, and catches up from a partition
    /// snapshot when it returns (`crate::partition_snapshots`); None: it holds it back for
    /// as long as it is away.
    pub replica_snapshot_after: Option<Duration>,
}

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            auto_create_topics: true,
            default_partitions: 1,
            default_replication_factor: 1,
            max_message_bytes: 1_048_588,
            topic_max_message_bytes_ceiling: 100 << 20,
            retention_check_interval: Duration::from_secs(30),
            checkpoint_interval: Duration::from_secs(60),
            probe_log_interval: Duration::from_secs(60),
            group: GroupConfig::default(),
            producer_id_expiration_ms: 86_400_000,
            txn: Default::default(),
            cleaner: Default::default(),
            metadata_snapshot: SnapshotPolicy::default(),
            authorizer: Default::default(),
            node_id: crate::metadata::SINGLE_NODE,
            nodes: crate::metadata::SINGLE_NODE_LIST.to_vec(),
            replica_lag_time_max: Duration::from_secs(30),
            leader_imbalance_check_interval: Some(Duration::from_secs(300)),
            replica_snapshot_after: Some(Duration::from_secs(60)),
        }
    }
}

impl ShardConfig {
    /// `topic` with what it leaves to the broker (-1, Kafka's "use the broker default")
    /// replaced by this broker's defaults. Applied where a creation is decided (the
    /// controller), so the change record and every node's table carry the real numbers.
    pub fn with_defaults(&self, topic: NewTopic) -> NewTopic {
        NewTopic {
            num_partitions: self.partitions_or_default(topic.num_partitions),
            replication_factor: self.replication_factor_or_default(topic.replication_factor),
            ..topic
        }
    }

    /// The partitions asked, or `default_partitions` for -1.
    pub fn partitions_or_default(&self, num_partitions: i32) -> i32 {
        if num_partitions == -1 {
            self.default_partitions
        } else {
            num_partitions
        }
    }

    /// The replication factor asked, or `default_replication_factor` for -1.
    pub fn replication_factor_or_default(&self, replication_factor: i16) -> i16 {
        if replication_factor == -1 {
            self.default_replication_factor
        } else {
            replication_factor
        }
    }
}

/// Per-shard counters (plain cells: read by this shard's metrics code only).
#[derive(Debug)]
pub struct ShardProbes {
    /// Requests (or parts of requests) that reached this shard for a partition another
    /// shard owns and were forwarded over the mesh.
    pub forwarded_requests: Cell<u64>,
    pub produce_batches: Cell<u64>,
    pub produce_bytes: Cell<u64>,
    pub fetch_bytes: Cell<u64>,
    /// Kafka connections open on this shard, and accepted so far.
    pub connections: Cell<u64>,
    pub connections_accepted: Cell<u64>,
    /// TLS handshakes completed, and connections of SSL listeners closed before their
    /// first request: a failed handshake (not TLS, a bad certificate), a timed-out one,
    /// one refused over the shard's handshake limit.
    pub tls_handshakes: Cell<u64>,
    pub tls_handshake_errors: Cell<u64>,
    pub tls_handshake_timeouts: Cell<u64>,
    pub tls_handshakes_refused: Cell<u64>,
    /// SASL logins that completed, and that failed (wrong password, unknown user, a
    /// malformed exchange).
    pub sasl_authentications: Cell<u64>,
    pub sasl_authentication_failures: Cell<u64>,
    /// Requests served although bytes followed their body in the frame (as Kafka does).
    pub requests_with_trailing_bytes: Cell<u64>,
    /// Latency per Kafka API of the requests this shard's connections carried.
    pub request_durations: crate::metrics::RequestDurations,
    /// From a flush's completion to a Fetch parked on it running again, in microseconds.
    pub fetch_wake_us: RefCell<Histogram>,
    /// Traffic per topic (keyed by topic number) on the partitions this shard owns.
    pub topics: crate::metrics::TopicCounterMap,
}

impl Default for ShardProbes {
    fn default() -> Self {
        ShardProbes {
            forwarded_requests: Cell::default(),
            produce_batches: Cell::default(),
            produce_bytes: Cell::default(),
            fetch_bytes: Cell::default(),
            connections: Cell::default(),
            connections_accepted: Cell::default(),
            tls_handshakes: Cell::default(),
            tls_handshake_errors: Cell::default(),
            tls_handshake_timeouts: Cell::default(),
            tls_handshakes_refused: Cell::default(),
            sasl_authentications: Cell::default(),
            sasl_authentication_failures: Cell::default(),
            requests_with_trailing_bytes: Cell::default(),
            request_durations: Default::default(),
            fetch_wake_us: RefCell::new(Histogram::new(STAGE_BOUNDS_US)),
            topics: Default::default(),
        }
    }
}

impl ShardProbes {
    /// One log line with every counter, if any changed since `last` (which is updated).
    pub fn log_if_changed(&self, shard: usize, producers: usize, last: &mut [u64; 5]) {
        let now = [
            self.forwarded_requests.get(),
            self.produce_batches.get(),
            self.produce_bytes.get(),
            self.fetch_bytes.get(),
            producers as u64,
        ];
        if now != *last {
            *last = now;
            info!(
                shard,
                forwarded_requests = now[0],
                produce_batches = now[1],
                produce_bytes = now[2],
                fetch_bytes = now[3],
                idempotent_producers = now[4],
                "probes"
            );
        }
    }
}

/// A shard's state.
pub struct Shard {
    pub id: usize,
    pub nr_shards: usize,
    pub config: ShardConfig,
    /// `AnyDisk`: the broker's DmaDisk, or a SimDisk in the power-loss simulation.
    pub log: ShardLog<AnyDisk>,
    pub mesh: Rc<Mesh>,
    pub probes: ShardProbes,
    /// Consumer groups this shard coordinates.
    pub groups: GroupCoordinator,
    /// Idempotent-producer state of this shard's partitions.
    pub producers: RefCell<ProducerStates>,
    /// Transactions this shard coordinates, and its partitions' transaction state.
    pub txn: crate::txn::Transactions,
    pub(crate) pid_next: Cell<u64>,
    pub(crate) pid_reserved: Cell<u64>,
    pub(crate) pid_lock: glommio::sync::Semaphore,
    /// `Arc` (not `Rc`) only so that the controller can encode a snapshot of it on a
    /// blocking thread; changes are applied in place (`Arc::make_mut`).
    table: RefCell<Arc<TopicTable>>,
    table_ready: Cell<bool>,
    ready_signal: LocalSender<()>,
    ready_wait: RefCell<Option<LocalReceiver<()>>>,
    /// Serialises the controller's read-modify-write of the topic table (shard 0 only).
    pub(crate) controller_lock: Rc<glommio::sync::Semaphore>,
    /// Change records since the last topic table snapshot (shard 0).
    pub(crate) metadata_snapshots: RefCell<SnapshotSchedule>,
    /// Relaxed acks (write.caching=true) not yet covered by an fdatasync.
    pub(crate) unsynced_acks: RefCell<UnsyncedAcks<Durable>>,
    /// This shard's replication event loop and transport, when the node has peers
    /// (`--peers`).
    replication: RefCell<Option<Rc<GroupHost>>>,
    /// The metadata raft group (shard 0 of a node with peers; `metadata_group.rs`).
    pub(crate) metadata_group: RefCell<Option<Rc<crate::metadata_group::MetadataGroup>>>,
    /// The partition groups this shard hosts (a node with peers; `partition_group.rs`).
    pub(crate) partition_groups: RefCell<Option<Rc<crate::partition_group::PartitionGroups>>>,
    /// Every partition group's (leader node, term) as the node's shards published them
    /// (Metadata reads it here: no lock, no cross-core call).
    pub(crate) partition_leaders:
        RefCell<std::collections::HashMap<u64, crate::partition_group::GroupLeader>>,
    /// Every partition group's ISR (node ids) as the node's shards applied it; a group
    /// not in the map has all its replicas in sync (no ISR entry applied yet).
    pub(crate) partition_isrs: RefCell<std::collections::HashMap<u64, Vec<u32>>>,
}

impl Shard {
    pub fn new(log: ShardLog<AnyDisk>, mesh: Rc<Mesh>, config: ShardConfig) -> Rc<Shard> {
        let (ready_signal, ready_wait) = local_channel::new_bounded(1);
        Rc::new(Shard {
            id: mesh.shard_id(),
            nr_shards: mesh.nr_shards(),
            groups: GroupCoordinator::new(config.group.clone()),
            producers: RefCell::new(ProducerStates::default()),
            txn: crate::txn::Transactions::new(config.txn.clone()),
            pid_next: Cell::new(0),
            pid_reserved: Cell::new(0),
            pid_lock: glommio::sync::Semaphore::new(1),
            config,
            log,
            probes: ShardProbes::default(),
            table: RefCell::new(Arc::new(TopicTable::new(mesh.nr_shards() as u32))),
            mesh,
            table_ready: Cell::new(false),
            ready_signal,
            ready_wait: RefCell::new(Some(ready_wait)),
            controller_lock: Rc::new(glommio::sync::Semaphore::new(1)),
            metadata_snapshots: RefCell::default(),
            unsynced_acks: RefCell::new(UnsyncedAcks::default()),
            replication: RefCell::new(None),
            metadata_group: RefCell::new(None),
            partition_groups: RefCell::new(None),
            partition_leaders: RefCell::default(),
            partition_isrs: RefCell::default(),
        })
    }

    /// Keeps this shard's replication host (its counters are in the metrics).
    pub fn set_replication(&self, host: Rc<GroupHost>) {
        *self.replication.borrow_mut() = Some(host);
    }

    /// This shard's replication host, if the node has peers.
    pub fn replication(&self) -> Option<Rc<GroupHost>> {
        self.replication.borrow().clone()
    }

    /// Forgets the host: once its last `Rc` is gone it stops (its transport's listener and
    /// connections closed).
    pub fn take_replication(&self) -> Option<Rc<GroupHost>> {
        self.replication.borrow_mut().take()
    }

    /// This shard's current copy of the topic table. Hold it briefly: a change applied
    /// while a copy is held copies the whole table.
    pub fn table(&self) -> Arc<TopicTable> {
        self.table.borrow().clone()
    }

    /// The table copy borrowed in place, for a decision that ends before any `.await`
    /// (no reference count touched).
    pub(crate) fn table_ref(&self) -> std::cell::Ref<'_, Arc<TopicTable>> {
        self.table.borrow()
    }

    /// The topic named `name` as this shard's table copy has it (shared, not copied:
    /// Metadata asks this on every request).
    pub fn topic(&self, name: &str) -> Option<Arc<TopicMeta>> {
        self.table.borrow().topic_shared(name)
    }

    /// Replaces the table copy (start-up), creating and dropping local partitions to match.
    pub fn apply_table(&self, table: TopicTable) {
        let old = self.table.replace(Arc::new(table));
        let new = self.table();
        for meta in new.topics.values() {
            self.ensure_local_partitions(meta, 0);
        }
        for meta in old.topics.values() {
            let still_there =
                new.topics.get(&meta.name).is_some_and(|m| m.topic_number == meta.topic_number);
            if !still_there {
                self.drop_local_partitions(meta);
            }
        }
        self.mark_table_ready();
    }

    /// Applies a change record of the metadata log to the table copy in place, creating
    /// and dropping the local partitions it names. The controller validated it, so a
    /// record that does not apply is a bug.
    pub fn apply_changes(&self, record: &ChangeRecord) {
        let deleted = {
            let mut table = self.table.borrow_mut();
            let table = Arc::make_mut(&mut table);
            record.apply(table).unwrap_or_else(|e| panic!("shard {}: {e}", self.id))
        };
        let table = self.table();
        for change in &record.changes {
            match change {
                TopicChange::Create(meta) => self.ensure_local_partitions(meta, 0),
                TopicChange::AddPartitions { name, partition_shards, .. } => {
                    let meta = table.topic(name).expect("a topic just given partitions");
                    let first = meta.partition_shards.len() - partition_shards.len();
                    self.ensure_local_partitions(meta, first);
                }
                TopicChange::Delete { .. }
                | TopicChange::SetConfigs { .. }
                | TopicChange::CreateAcls(_)
                | TopicChange::DeleteAcls(_)
                | TopicChange::Credentials(_) => {}
            }
        }
        for meta in &deleted {
            self.drop_local_partitions(meta);
        }
    }

    /// Indexes of a topic's partitions this shard leads (on this node).
    pub fn partitions_here<'a>(&self, meta: &'a TopicMeta) -> impl Iterator<Item = u32> + 'a {
        meta.partitions_on(self.config.node_id, self.id)
    }

    /// Opens this shard's partitions of a topic, from partition index `first` on, and
    /// hosts the raft groups of those that are replicated.
    fn ensure_local_partitions(&self, meta: &TopicMeta, first: usize) {
        for index in self.partitions_here(meta).filter(|i| *i as usize >= first) {
            self.log.ensure_partition(PartitionId::new(meta.topic_number, index));
            self.ensure_partition_group(meta, index as i32);
        }
    }

    /// Forgets this shard's partitions of a deleted topic.
    fn drop_local_partitions(&self, meta: &TopicMeta) {
        for index in self.partitions_here(meta) {
            let partition = PartitionId::new(meta.topic_number, index);
            self.log.drop_partition(partition);
            self.producers.borrow_mut().drop_partition(partition);
            self.txn.partitions.borrow_mut().remove(&partition);
            self.txn.verified.borrow_mut().retain(|(p, _), _| *p != partition);
        }
        info!(shard = self.id, topic = %meta.name, "topic deleted");
    }

    fn mark_table_ready(&self) {
        if !self.table_ready.replace(true) {
            let _ = self.ready_signal.try_send(());
        }
    }

    /// Waits until the controller's first table has arrived (start-up barrier).
    pub async fn wait_for_table(&self) {
        if self.table_ready.get() {
            return;
        }
        let receiver = self.ready_wait.borrow_mut().take();
        if let Some(receiver) = receiver {
            receiver.recv().await;
        }
    }

    /// The shard of this node that owns a partition; `UnknownTopicOrPartition` if the
    /// topic or partition does not exist, `NotLeaderOrFollower` if it has no replica on
    /// this node (its client asks Metadata again and goes there). Of a replicated
    /// partition, that shard answers NOT_LEADER_OR_FOLLOWER itself unless it leads.
    pub fn owner_of(&self, topic: &str, partition: i32) -> Result<usize, PartitionError> {
        let (_, owner, here) =
            self.placed(topic, partition).ok_or(PartitionError::UnknownTopicOrPartition)?;
        match here {
            true => Ok(owner),
            false => Err(PartitionError::NotLeaderOrFollower),
        }
    }

    /// A partition's log id and owner shard, wherever it is placed (its node may be
    /// another): for checks that a partition exists.
    pub fn locate(&self, topic: &str, partition: i32) -> Option<(PartitionId, usize)> {
        self.placed(topic, partition).map(|(id, owner, _)| (id, owner))
    }

    /// A partition's log id, owner shard and whether this node holds a replica, looked
    /// up in place (the hot paths call this per partition: one lookup in the table, no
    /// copy of the topic's metadata).
    fn placed(&self, topic: &str, partition: i32) -> Option<(PartitionId, usize, bool)> {
        let table = self.table.borrow();
        let meta = table.topic(topic)?;
        let here = meta.replicas(partition)?.contains(&self.config.node_id);
        Some((meta.partition_id(partition)?, meta.owner(partition)?, here))
    }

    /// The log id of a partition this shard holds (a replica on this node).
    pub fn local_partition(&self, topic: &str, partition: i32) -> Option<PartitionId> {
        let (id, owner, here) = self.placed(topic, partition)?;
        (owner == self.id && here).then_some(id)
    }
}
