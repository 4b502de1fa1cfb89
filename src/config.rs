//! Command-line flags (each also an environment variable).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// shardlog: a Kafka-API-compatible, thread-per-core, durable message broker.
#[derive(Parser, Clone, Debug)]
#[command(version, about)]
pub struct Config {
    /// Where the shards keep their logs (one sub-directory per shard).
    #[arg(long, env = "SHARDLOG_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// The bootstrap listener; shard N also listens on this port + 1 + N.
    #[arg(long, env = "SHARDLOG_KAFKA_ADDR", default_value = "127.0.0.1:9092")]
    pub kafka_addr: SocketAddr,

    /// Host name clients are told to connect to (default: the IP of --kafka-addr).
    #[arg(long, env = "SHARDLOG_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,

    /// Number of shards (one per core); default: all cores. Fixed when the data dir is created.
    #[arg(long, env = "SHARDLOG_CORES")]
    pub cores: Option<usize>,

    /// Log level (or a tracing filter); the SHARDLOG_LOG environment variable overrides it.
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// Create unknown topics when a client asks for their metadata.
    #[arg(long, env = "SHARDLOG_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,

    /// Partitions of auto-created topics (Kafka's num.partitions).
    #[arg(long, env = "SHARDLOG_DEFAULT_PARTITIONS", default_value_t = 1)]
    pub default_partitions: i32,

    /// Largest record batch accepted (Kafka's message.max.bytes).
    #[arg(long, env = "SHARDLOG_MAX_MESSAGE_BYTES", default_value_t = 1_048_588)]
    pub max_message_bytes: usize,

    /// Largest request frame accepted (Kafka's socket.request.max.bytes).
    #[arg(long, env = "SHARDLOG_MAX_REQUEST_BYTES", default_value_t = 100 << 20)]
    pub max_request_bytes: usize,

    /// A connection with no complete request for this long is closed (Kafka's
    /// connections.max.idle.ms); it also bounds a client that sends half a frame and stalls.
    #[arg(long, env = "SHARDLOG_CONNECTION_IDLE_TIMEOUT_MS", default_value_t = 600_000)]
    pub connection_idle_timeout_ms: u64,

    /// How often each shard logs its counters (forwarded requests, bytes), when they changed.
    #[arg(long, env = "SHARDLOG_PROBE_LOG_INTERVAL_MS", default_value_t = 60_000)]
    pub probe_log_interval_ms: u64,

    /// Shortest consumer session timeout accepted (Kafka's group.min.session.timeout.ms).
    #[arg(long, env = "SHARDLOG_GROUP_MIN_SESSION_TIMEOUT_MS", default_value_t = 6000)]
    pub group_min_session_timeout_ms: u64,

    /// Idle idempotent producers' state is dropped after this (producer.id.expiration.ms).
    #[arg(long, env = "SHARDLOG_PRODUCER_ID_EXPIRATION_MS", default_value_t = 86_400_000)]
    pub producer_id_expiration_ms: i64,

    /// How often each shard applies topics' retention.ms / retention.bytes.
    #[arg(long, env = "SHARDLOG_RETENTION_CHECK_INTERVAL_MS", default_value_t = 30_000)]
    pub retention_check_interval_ms: u64,

    /// How often each shard writes an index checkpoint (and producer-state snapshot).
    #[arg(long, env = "SHARDLOG_CHECKPOINT_INTERVAL_MS", default_value_t = 60_000)]
    pub checkpoint_interval_ms: u64,

    /// Size of each log segment file (preallocated).
    #[arg(long, env = "SHARDLOG_SEGMENT_BYTES", default_value_t = 128 << 20)]
    pub segment_bytes: u64,

    /// Connections one shard serves at once, both of its listeners counted (Kafka's
    /// max.connections, per core). A connection over the limit is closed right after
    /// accept (a warning, at most one per 10 s, counts them); open ones are unaffected.
    #[arg(long, env = "SHARDLOG_MAX_CONNECTIONS_PER_SHARD", default_value_t = 10_000)]
    pub max_connections_per_shard: usize,

    /// Requests of one connection read and not yet answered. At the limit the broker
    /// reads nothing more from that connection until the oldest response is written;
    /// pipelining clients still get every answer, in order (librdkafka keeps up to 5).
    #[arg(long, env = "SHARDLOG_MAX_INFLIGHT_REQUESTS_PER_CONNECTION", default_value_t = 32)]
    pub max_inflight_requests_per_connection: usize,

    /// Bytes of Produce requests one shard holds, read from sockets and not yet answered
    /// (acks=0: not yet appended). When they are spent, connections stop reading Produce
    /// bodies from their sockets (TCP slows the producers) instead of buffering more. One
    /// request larger than the budget waits for the others to finish and proceeds alone.
    #[arg(long, env = "SHARDLOG_MAX_PENDING_PRODUCE_BYTES_PER_SHARD", default_value_t = 256 << 20)]
    pub max_pending_produce_bytes_per_shard: usize,

    /// Most record bytes in one Fetch response, whatever the client asks (Kafka's broker
    /// side fetch.max.bytes, 55 MiB). The first batch found is returned even if it is
    /// larger, so a consumer always makes progress.
    #[arg(long, env = "SHARDLOG_FETCH_MAX_BYTES", default_value_t = 55 << 20)]
    pub fetch_max_bytes: usize,
}
