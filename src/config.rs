//! Configuration: every broker setting is a flag, an environment variable
//! (`SHARDLOG_<KEY>`) and a key of the TOML file given by `--config`.
//!
//! Precedence: flag > environment > file > default. clap parses flags and environment and
//! says (`value_source`) which settings neither set; the file fills only those. The file's
//! keys are the clap argument ids (the field names below), so adding a setting is adding
//! one field to [`Config`]: its flag, variable, file key and `--print-config` line follow.
//! Every setting is documented in docs/configuration.md (a test checks it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser};
use serde::{Deserialize, Serialize};

use crate::cli::{AdminArgs, Command};

/// shardlog: a Kafka-API-compatible, thread-per-core, durable message broker.
///
/// With no command it runs the broker; the commands are admin tools that talk the Kafka
/// protocol to a running broker.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Cli {
    /// The broker's settings.
    #[command(flatten)]
    pub config: Config,

    /// A TOML file of settings (keys as in --print-config); flags and environment win.
    #[arg(long = "config", env = "SHARDLOG_CONFIG", value_name = "PATH")]
    pub config_file: Option<PathBuf>,

    /// Print the effective configuration as TOML (file, environment and flags merged) and exit.
    #[arg(long)]
    pub print_config: bool,

    #[command(flatten)]
    pub admin: AdminArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// How log lines are written to stderr.
#[derive(clap::ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    Human,
    /// One JSON object per line (tracing-subscriber's JSON format).
    Json,
}

/// How a flush makes its writes durable (docs/storage.md, "Making a flush durable").
#[derive(clap::ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogSync {
    /// The flush's DMA writes, then one fdatasync per segment touched.
    Fdatasync,
    /// Segment files opened O_DSYNC: each DMA write is durable when it completes.
    Dsync,
}

/// The broker's settings. Field name = TOML key = flag without `--` (with `-` for `_`).
#[derive(Args, Serialize, Deserialize, Clone, Debug)]
pub struct Config {
    /// Where the shards keep their logs (one sub-directory per shard).
    #[arg(long, env = "SHARDLOG_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// The PLAINTEXT listener when --listeners is not set: the bootstrap port; shard N also
    /// listens on this port + 1 + N.
    #[arg(long, env = "SHARDLOG_KAFKA_ADDR", default_value = "127.0.0.1:9092")]
    pub kafka_addr: SocketAddr,

    /// Host name clients are told to connect to (default: the IP of --kafka-addr).
    #[arg(long, env = "SHARDLOG_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,

    /// Listeners as PROTOCOL://HOST:PORT (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), each
    /// with its own shard ports (PORT + 1 + shard). Repeat the flag (or --listener) or
    /// separate with commas. When set, it replaces --kafka-addr; unset: PLAINTEXT on it.
    #[arg(long, visible_alias = "listener", env = "SHARDLOG_LISTENERS", value_delimiter = ',')]
    pub listeners: Vec<String>,

    /// Per listener, where clients are told to connect, as PROTOCOL://HOST:PORT (shard N
    /// is advertised at PORT + 1 + N). Unset for a listener: --advertised-host (or its
    /// IP) and its own port.
    #[arg(long, env = "SHARDLOG_ADVERTISED_LISTENERS", value_delimiter = ',')]
    pub advertised_listeners: Vec<String>,

    /// The SSL listener's certificate chain (PEM, the broker's certificate first).
    /// Reloaded on SIGHUP.
    #[arg(long, env = "SHARDLOG_TLS_CERT_FILE", value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,

    /// The private key of --tls-cert-file (PEM: PKCS#8, PKCS#1 or SEC1). Reloaded on SIGHUP.
    #[arg(long, env = "SHARDLOG_TLS_KEY_FILE", value_name = "PATH")]
    pub tls_key_file: Option<PathBuf>,

    /// CA certificates (PEM) that sign client certificates. When set, SSL clients must
    /// present a certificate (mTLS); their principal is User:<certificate subject>.
    /// Reloaded on SIGHUP.
    #[arg(long, env = "SHARDLOG_TLS_CLIENT_CA_FILE", value_name = "PATH")]
    pub tls_client_ca_file: Option<PathBuf>,

    /// Check every request against the ACLs (Kafka's authorizer with
    /// allow.everyone.if.no.acl.found=false): what no ACL allows is denied.
    #[arg(long, env = "SHARDLOG_AUTHORIZER", default_value_t = false, action = clap::ArgAction::Set)]
    pub authorizer: bool,

    /// Principals allowed everything whatever the ACLs say (User:admin); repeat the flag or
    /// separate with semicolons (certificate subjects hold commas), as Kafka's super.users.
    #[arg(long, visible_alias = "super-user", env = "SHARDLOG_SUPER_USERS", value_delimiter = ';')]
    pub super_users: Vec<String>,

    /// SASL mechanisms served on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN,
    /// SCRAM-SHA-256, SCRAM-SHA-512 (repeat the flag or separate with commas). PLAIN sends
    /// the password itself: use it on SASL_SSL only.
    #[arg(
        long,
        env = "SHARDLOG_SASL_MECHANISMS",
        value_delimiter = ',',
        default_values_t = ["SCRAM-SHA-256".to_string(), "SCRAM-SHA-512".to_string()]
    )]
    pub sasl_mechanisms: Vec<String>,

    /// A SASL user created at start-up (SCRAM-SHA-256 and SCRAM-SHA-512) if it does not
    /// exist yet, with --sasl-bootstrap-password: the first user, to create the others.
    #[arg(long, env = "SHARDLOG_SASL_BOOTSTRAP_USER", value_name = "NAME")]
    pub sasl_bootstrap_user: Option<String>,

    /// The password of --sasl-bootstrap-user (used only when the user is created; never
    /// printed by --print-config). Prefer the environment variable to the flag.
    #[arg(long, env = "SHARDLOG_SASL_BOOTSTRAP_PASSWORD", hide_env_values = true)]
    pub sasl_bootstrap_password: Option<String>,

    /// A TLS handshake not finished in this long is abandoned and its connection closed.
    #[arg(long, env = "SHARDLOG_TLS_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub tls_handshake_timeout_ms: u64,

    /// TLS handshakes one shard runs at once; a connection over the limit is closed right
    /// after accept, so slow or half-open handshakes cannot take every connection slot.
    #[arg(long, env = "SHARDLOG_MAX_TLS_HANDSHAKES_PER_SHARD", default_value_t = 64)]
    pub max_tls_handshakes_per_shard: usize,

    /// This node's id in the cluster --peers lists (0 to 2097151, so that the broker ids
    /// node_id * 1024 + shard fit Kafka's int32). Only read when --peers is set.
    #[arg(long, env = "SHARDLOG_NODE_ID", default_value_t = 0)]
    pub node_id: u64,

    /// Every node of the cluster, this one included, as ID=HOST:PORT with the node's Kafka
    /// bootstrap address; the same list on every node (repeat the flag or separate with
    /// commas). Shard S of each node replicates with shard S of the others on port
    /// PORT + 1 + cores + S. Empty (or this node alone): a single node, no replication port.
    #[arg(long, env = "SHARDLOG_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,

    /// Number of shards (one per core); default: all cores. Fixed when the data dir is created.
    #[arg(long, env = "SHARDLOG_CORES")]
    pub cores: Option<usize>,

    /// Log level (or a tracing filter); the SHARDLOG_LOG environment variable overrides it.
    #[arg(long, env = "SHARDLOG_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Log line format: human (readable) or json (one object per line).
    #[arg(long, env = "SHARDLOG_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Create unknown topics when a client asks for their metadata.
    #[arg(long, env = "SHARDLOG_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,

    /// Partitions of auto-created topics (Kafka's num.partitions).
    #[arg(long, env = "SHARDLOG_DEFAULT_PARTITIONS", default_value_t = 1)]
    pub default_partitions: i32,

    /// Replication factor of auto-created topics and of CreateTopics asking -1 (Kafka's
    /// default.replication.factor): 1 to the number of nodes (1 + the other --peers).
    /// Resolved by the controller, so start every node with the same value.
    #[arg(
        long,
        env = "SHARDLOG_DEFAULT_REPLICATION_FACTOR",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub default_replication_factor: i16,

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

    /// A replica of a replicated partition that has not caught up with its leader for this
    /// long leaves the partition's ISR (Kafka's replica.lag.time.max.ms).
    #[arg(long, env = "SHARDLOG_REPLICA_LAG_TIME_MAX_MS", default_value_t = 30_000)]
    pub replica_lag_time_max_ms: u64,

    /// A replica of a replicated partition's raft group that its leader has not heard from
    /// for this long no longer holds the group's raft log compaction back; when it returns
    /// it catches up from a partition snapshot (docs/replication.md, "Partition
    /// snapshots"). 0: never (it holds compaction back for as long as it is away).
    #[arg(long, env = "SHARDLOG_REPLICA_SNAPSHOT_AFTER_MS", default_value_t = 60_000)]
    pub replica_snapshot_after_ms: u64,

    /// How often the leader of a replicated partition's group checks whether the group's
    /// preferred replica is caught up, and hands it the leadership if so (Kafka's
    /// leader.imbalance.check.interval.seconds, in ms); 0: never.
    #[arg(long, env = "SHARDLOG_LEADER_IMBALANCE_CHECK_INTERVAL_MS", default_value_t = 300_000)]
    pub leader_imbalance_check_interval_ms: u64,

    /// Shortest consumer session timeout accepted (Kafka's group.min.session.timeout.ms).
    #[arg(long, env = "SHARDLOG_GROUP_MIN_SESSION_TIMEOUT_MS", default_value_t = 6000)]
    pub group_min_session_timeout_ms: u64,

    /// Idle idempotent producers' state is dropped after this (producer.id.expiration.ms).
    #[arg(long, env = "SHARDLOG_PRODUCER_ID_EXPIRATION_MS", default_value_t = 86_400_000)]
    pub producer_id_expiration_ms: i64,

    /// Largest transaction.timeout.ms a transactional producer may ask
    /// (Kafka's transaction.max.timeout.ms).
    #[arg(long, env = "SHARDLOG_TRANSACTION_MAX_TIMEOUT_MS", default_value_t = 900_000,
        value_parser = clap::value_parser!(i32).range(1..))]
    pub transaction_max_timeout_ms: i32,

    /// How often each transaction coordinator aborts transactions past their timeout
    /// (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms).
    #[arg(long, env = "SHARDLOG_TRANSACTION_CHECK_INTERVAL_MS", default_value_t = 1_000)]
    pub transaction_check_interval_ms: u64,

    /// How often each shard applies topics' retention.ms / retention.bytes.
    #[arg(long, env = "SHARDLOG_RETENTION_CHECK_INTERVAL_MS", default_value_t = 30_000)]
    pub retention_check_interval_ms: u64,

    /// How often each shard looks for a compacted partition to clean (Kafka's
    /// log.cleaner.backoff.ms).
    #[arg(long, env = "SHARDLOG_LOG_CLEANER_INTERVAL_MS", default_value_t = 15_000)]
    pub log_cleaner_interval_ms: u64,

    /// Bytes the log cleaner may read plus write per second on each shard (Kafka's
    /// log.cleaner.io.max.bytes.per.second).
    #[arg(long, env = "SHARDLOG_LOG_CLEANER_BYTES_PER_SEC", default_value_t = 32 << 20,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub log_cleaner_bytes_per_sec: u64,

    /// How often each shard writes an index checkpoint (and producer-state snapshot).
    #[arg(long, env = "SHARDLOG_CHECKPOINT_INTERVAL_MS", default_value_t = 60_000)]
    pub checkpoint_interval_ms: u64,

    /// The controller snapshots the topic table after this many change records.
    #[arg(long, env = "SHARDLOG_METADATA_SNAPSHOT_MAX_CHANGES", default_value_t = 100_000)]
    pub metadata_snapshot_max_changes: u64,

    /// ... or once the change records since the last snapshot hold this many bytes, or as
    /// many as that snapshot if it is larger.
    #[arg(long, env = "SHARDLOG_METADATA_SNAPSHOT_MIN_CHANGE_BYTES", default_value_t = 1 << 20)]
    pub metadata_snapshot_min_change_bytes: u64,

    /// Size of each log segment file (preallocated).
    #[arg(long, env = "SHARDLOG_SEGMENT_BYTES", default_value_t = 128 << 20)]
    pub segment_bytes: u64,

    /// The admin HTTP endpoint (GET /metrics in Prometheus text format, GET /health, the
    /// console), served by shard 0. Open to anyone who reaches it unless --admin-token(-file)
    /// is set: keep it on loopback or a management network.
    #[arg(long, env = "SHARDLOG_ADMIN_ADDR", default_value = "127.0.0.1:9644")]
    pub admin_addr: SocketAddr,

    /// A bearer token every admin request must carry (`Authorization: Bearer <token>`),
    /// except GET /health's status; others get 401. Never printed by --print-config;
    /// prefer --admin-token-file or the environment variable to the flag.
    #[arg(long, env = "SHARDLOG_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// A file holding the admin bearer token (one line; surrounding whitespace is
    /// ignored), read at start-up. The same as --admin-token, which it excludes.
    #[arg(long, env = "SHARDLOG_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// The admin endpoint's certificate chain (PEM): with --admin-tls-key-file, it serves
    /// HTTPS only. Reloaded on SIGHUP.
    #[arg(long, env = "SHARDLOG_ADMIN_TLS_CERT_FILE", value_name = "PATH")]
    pub admin_tls_cert_file: Option<PathBuf>,

    /// The private key of --admin-tls-cert-file (PEM: PKCS#8, PKCS#1 or SEC1). Reloaded on
    /// SIGHUP.
    #[arg(long, env = "SHARDLOG_ADMIN_TLS_KEY_FILE", value_name = "PATH")]
    pub admin_tls_key_file: Option<PathBuf>,

    /// Let the web console on the admin endpoint change things: its forms create, delete
    /// and alter topics and reset the offsets of groups without members. Off, the console
    /// is read-only and refuses every POST with 403. `--console-write` alone means true.
    #[arg(long, env = "SHARDLOG_CONSOLE_WRITE", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub console_write: bool,

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

    /// Poll mode: a shard with nothing to run keeps polling its io_uring for this many
    /// microseconds before it sleeps (glommio's spin_before_park), so a completion or a
    /// request that arrives meanwhile is served without a wake-up. Costs a busy core while
    /// traffic flows; for cores isolated for the broker (docs/tuning.md). 0: off. Only
    /// takes effect when shards are pinned (no more shards than CPUs).
    #[arg(long, env = "SHARDLOG_POLL_US", default_value_t = 0)]
    pub poll_us: u64,

    /// How a flush makes its writes durable: `fdatasync` (write, then fdatasync) or
    /// `dsync` (segment files opened O_DSYNC, so each write is durable when it
    /// completes: one operation per flush; faster on idle cores, much slower on busy ones,
    /// docs/storage.md). Either way an ack waits for durability.
    #[arg(long, env = "SHARDLOG_LOG_SYNC", value_enum, default_value_t = LogSync::Fdatasync)]
    pub log_sync: LogSync,

    /// A flush of at most this many bytes is written and fdatasync'd with blocking
    /// syscalls on the shard's own thread instead of through io_uring: fewer thread
    /// hand-offs per durable ack on a lightly loaded shard, while larger flushes keep the
    /// shard serving during their IO (docs/storage.md). 0: never.
    #[arg(long, env = "SHARDLOG_LOG_BLOCKING_FLUSH_MAX_BYTES", default_value_t = 0)]
    pub log_blocking_flush_max_bytes: u64,
}

/// Parses flags and environment and, when the broker is to run (no command), fills the
/// settings neither of them set from the `--config` file.
pub fn load() -> Result<Cli, String> {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    if let (None, Some(path)) = (&cli.command, &cli.config_file) {
        cli.config = apply_file(path, &cli.config, &matches)?;
    }
    Ok(cli)
}

/// The settings' clap arguments, in declaration order; their ids are the file's keys.
fn setting_args() -> Vec<clap::Arg> {
    Config::augment_args(clap::Command::new("settings")).get_arguments().cloned().collect()
}

/// The file's keys.
pub fn setting_keys() -> Vec<String> {
    setting_args().iter().map(|a| a.get_id().to_string()).collect()
}

/// Layers the file under what flags and environment set: a file value replaces only a
/// default. Each value is checked as it is merged, so a type error names its key.
fn apply_file(path: &Path, config: &Config, matches: &ArgMatches) -> Result<Config, String> {
    let file = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {file}: {e}"))?;
    let table: toml::Table =
        text.parse().map_err(|e| format!("config file {file} is not valid TOML: {e}"))?;
    let keys = setting_keys();
    let mut merged = toml::Table::try_from(config).map_err(|e| e.to_string())?;
    for (key, value) in table {
        if !keys.contains(&key) {
            return Err(format!(
                "config file {file}: unknown key '{key}' (known keys: {})",
                keys.join(", ")
            ));
        }
        let from_flag_or_env = matches!(
            matches.value_source(&key),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if from_flag_or_env {
            continue;
        }
        merged.insert(key.clone(), value);
        if let Err(e) = merged.clone().try_into::<Config>() {
            let message = plain_type_names(e.message());
            return Err(format!("config file {file}: key '{key}': {message}"));
        }
    }
    merged.try_into().map_err(|e| format!("config file {file}: {}", e.message()))
}

/// serde names the Rust type a value should have ("expected usize"); say it in TOML's words.
fn plain_type_names(message: &str) -> String {
    const NAMES: [(&str, &str); 6] = [
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected i32", "expected an integer"),
    ];
    let mut message = message.to_string();
    for (rust, plain) in NAMES {
        message = message.replace(rust, plain);
    }
    message
}

/// Settings whose values --print-config never shows.
const SECRETS: [&str; 2] = ["sasl_bootstrap_password", "admin_token"];

/// The effective configuration as a TOML file `--config` accepts: every key, in
/// declaration order, under its help text. A setting with no value (it has no default, and
/// nothing set it) is a commented-out line, since TOML has no null.
pub fn to_toml(config: &Config) -> Result<String, String> {
    let mut table = toml::Table::try_from(config).map_err(|e| e.to_string())?;
    // A secret is never printed: its line stays commented out.
    let secrets: Vec<(&str, &str)> = SECRETS
        .iter()
        .map(|key| (*key, table.remove(*key).map_or("(unset)", |_| "(set, not printed)")))
        .collect();
    let mut out = String::from("# shardlog configuration; accepted back by --config\n");
    for arg in setting_args() {
        let key = arg.get_id().as_str();
        out.push('\n');
        for line in arg.get_help().map(|h| h.to_string()).unwrap_or_default().lines() {
            out.push_str(&format!("# {line}\n"));
        }
        match table.get(key) {
            Some(value) => out.push_str(&format!("{key} = {value}\n")),
            None => match secrets.iter().find(|(secret, _)| *secret == key) {
                Some((_, shown)) => out.push_str(&format!("# {key} = {shown}\n")),
                None => out.push_str(&format!("# {key} = (unset)\n")),
            },
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings are looked up in the environment as SHARDLOG_<KEY> and named in the file by
    /// the same key; a field declared otherwise would break that contract silently.
    #[test]
    fn every_setting_has_a_flag_and_an_environment_variable_named_after_its_key() {
        for arg in setting_args() {
            let key = arg.get_id().as_str();
            assert_eq!(arg.get_long(), Some(key.replace('_', "-").as_str()), "flag of {key}");
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert_eq!(env, Some(format!("SHARDLOG_{}", key.to_uppercase())), "env of {key}");
        }
    }

    #[test]
    fn printed_defaults_parse_back_to_the_same_configuration() {
        let cli = Cli::try_parse_from(["shardlog", "--cores", "3"]).unwrap();
        let printed = to_toml(&cli.config).unwrap();
        let again: Config = toml::from_str(&printed).unwrap();
        assert_eq!(to_toml(&again).unwrap(), printed);
        assert_eq!(again.cores, Some(3));
    }
}
