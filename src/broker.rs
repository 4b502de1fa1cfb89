//! Start-up of the broker: one shard per core, each with its log, its listeners and its
//! end of the mesh.
//!
//! Per shard, in order: join the mesh; open and recover the shard's log
//! (`<data-dir>/shard-NNN`); serve mesh requests; shard 0 restores the topic table and
//! sends it to every shard; every shard waits for it; then, for each listener
//! (`listeners.rs`), it listens on the listener's bootstrap port (SO_REUSEPORT, shared by
//! all shards) and on its own port of that listener; when `--peers` names other nodes,
//! it also starts its replication host, whose transport listens on its replication port
//! (`cluster.rs`).

use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::net::TcpListener;
use shardlog_net::sasl::{Mechanism, SaslConfig};
use shardlog_net::tls::{serve_tls_connection, HandshakeError, SharedTlsConfig, TlsAcceptor};
use shardlog_net::{serve_connection, ConnectionLimits, ConnectionSlots, ProduceBudget};
use shardlog_shards::compaction::CleanerConfig;
use shardlog_shards::group::GroupConfig;
use shardlog_shards::metadata::{SINGLE_NODE, SINGLE_NODE_LIST};
use shardlog_shards::metadata_group::recover_image;
use shardlog_shards::metadata_log::users::StoredScramCredential;
use shardlog_shards::metadata_log::SnapshotPolicy;
use shardlog_shards::partition_group;
use shardlog_shards::replication::{GroupHost, TransportConfig};
use shardlog_shards::txn::TxnConfig;
use shardlog_shards::{Mesh, Shard, ShardConfig, ShardMeshBuilder};
use shardlog_storage::{AnyDisk, DmaDisk, LogConfig, ShardLog, StorageError, PAGE_BYTES};
use tracing::{debug, error, info, warn};

use crate::admin::{AdminSecurity, AdminToken};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::handlers::KafkaHandler;
use crate::listeners::{Listener, SecurityProtocol};
use crate::shutdown::{ShardStop, Shutdown};
use crate::tls_files::TlsFiles;

/// Runs the broker until the process is stopped.
pub fn run(mut config: Config) -> Result<(), String> {
    let nr_shards = match config.cores {
        Some(0) => return Err("--cores must be at least 1".into()),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if config.segment_bytes < 2 * config.max_message_bytes as u64 {
        return Err(format!(
            "--segment-bytes {} must be at least twice --max-message-bytes {}",
            config.segment_bytes, config.max_message_bytes
        ));
    }
    for principal in &config.super_users {
        shardlog_shards::acl::validate_principal(principal)
            .map_err(|e| format!("--super-users: {e}"))?;
    }
    let listeners = crate::listeners::resolve(&config, nr_shards)?;
    let cluster = crate::cluster::resolve(&config, &listeners, nr_shards)?;
    check_default_replication_factor(&config, cluster.as_ref(), nr_shards)?;
    // Held until the broker stops: no other shardlog joins these SO_REUSEPORT ports.
    let addrs = listen_addrs(&config, &listeners, &cluster, nr_shards);
    let _claims = crate::port_claims::claim(&addrs)?;
    check_admin_addr(&config, &listeners, nr_shards)?;
    if cluster.is_some() && config.sasl_bootstrap_user.is_some() {
        // It would be written by each node alone, outside the metadata group.
        return Err("sasl_bootstrap_user is not supported with --peers yet: create the user \
                    through the controller (AlterUserScramCredentials)"
            .into());
    }
    check_addrs_free(&addrs)?;
    let tls = match TlsFiles::from_config(&config) {
        Some(files) if listeners.iter().any(|l| l.protocol.uses_tls()) => {
            let shared = SharedTlsConfig::new(files.load()?);
            Some((files, shared))
        }
        Some(_) => {
            warn!(
                "tls_cert_file and tls_key_file are set but no SSL or SASL_SSL listener uses them"
            );
            None
        }
        None => None,
    };
    let mut security = Security::from_config(&config, &listeners)?;
    let mut reloads: Vec<_> = tls.iter().cloned().collect();
    if let Some(files) = TlsFiles::admin_from_config(&config)? {
        let shared = SharedTlsConfig::new(files.load()?);
        security.admin.tls = Some(shared.clone());
        reloads.push((files, shared));
    }
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", config.data_dir.display()))?;
    // Resolved once, before any shard opens a file: glommio opens relative paths against
    // fd -1 instead of the working directory (see DmaDisk::open), and the log line below
    // should say where the data really is.
    config.data_dir = std::fs::canonicalize(&config.data_dir)
        .map_err(|e| format!("cannot resolve data dir {}: {e}", config.data_dir.display()))?;
    let summary: Vec<String> = listeners
        .iter()
        .map(|l| {
            let last = l.shard_addr(nr_shards - 1).port();
            let advertised = &l.advertised;
            format!(
                "{l} (shards {}-{last}, advertised {}:{})",
                l.bind.port() + 1,
                advertised.host,
                advertised.port
            )
        })
        .collect();
    let first = &listeners[0];
    let shard_ports: Vec<u16> = (0..nr_shards).map(|s| first.shard_addr(s).port()).collect();
    info!(
        shards = nr_shards,
        bootstrap = %first.bind,
        shard_ports = ?shard_ports,
        advertised_host = %first.advertised.host,
        listeners = ?summary,
        tls_client_auth = config.tls_client_ca_file.is_some() && tls.is_some(),
        data_dir = %config.data_dir.display(),
        version = env!("CARGO_PKG_VERSION"),
        admin = %config.admin_addr,
        admin_token = security.admin.token.is_some(),
        admin_tls = security.admin.tls.is_some(),
        durability = "ack after fdatasync (group commit)",
        node_id = cluster.as_ref().map(|c| c.node_id),
        replication_ports = ?cluster.as_ref().map(|c| c.ports()),
        peers = ?cluster.as_ref().map(Cluster::peer_bootstraps),
        "starting shardlog"
    );
    let shared_tls = tls.as_ref().map(|(_, shared)| shared.clone());
    crate::tls_files::reload_on_sighup(reloads)?;
    let shutdown = crate::shutdown::install(nr_shards)?;
    let poll = Duration::from_micros(config.poll_us);
    shardlog_shards::runtime::run_shards_polling(nr_shards, poll, move |mesh| {
        shard_main(mesh, config, (listeners, cluster), (shared_tls, security), shutdown)
    })
}

/// What SASL listeners need on every shard: the mechanisms to serve, and the bootstrap
/// user (created on shard 0 at start-up if absent; its keys derived once, here).
#[derive(Clone)]
struct Security {
    sasl_mechanisms: Option<Vec<Mechanism>>,
    bootstrap_user: Option<(String, Vec<StoredScramCredential>)>,
    /// The admin endpoint's token and TLS (shard 0 serves it).
    admin: AdminSecurity,
}

impl Security {
    fn from_config(config: &Config, listeners: &[Listener]) -> Result<Security, String> {
        let sasl_mechanisms = match listeners.iter().any(|l| l.protocol.uses_sasl()) {
            true => Some(crate::listeners::sasl_mechanisms(config)?),
            false => None,
        };
        let plain_in_clear =
            listeners.iter().any(|l| l.protocol == SecurityProtocol::SaslPlaintext);
        if plain_in_clear && sasl_mechanisms.as_ref().is_some_and(|m| m.contains(&Mechanism::Plain))
        {
            warn!("PLAIN is enabled on a SASL_PLAINTEXT listener: passwords cross the network in clear");
        }
        let bootstrap_user = match (&config.sasl_bootstrap_user, &config.sasl_bootstrap_password) {
            (None, None) => None,
            (Some(user), Some(password)) if !user.is_empty() && !password.is_empty() => {
                Some((user.clone(), crate::users::credentials_for(password)))
            }
            _ => {
                return Err("sasl_bootstrap_user and sasl_bootstrap_password go together, \
                            neither empty"
                    .into())
            }
        };
        let admin = AdminSecurity { token: AdminToken::from_config(config)?, tls: None };
        Ok(Security { sasl_mechanisms, bootstrap_user, admin })
    }
}

/// The largest record batch one log segment holds (two pages are kept for padding and the
/// entry header), and no more than one request frame can carry.
fn topic_max_message_bytes_ceiling(config: &Config) -> usize {
    let segment_room = config.segment_bytes.saturating_sub(2 * PAGE_BYTES);
    (segment_room.min(usize::MAX as u64) as usize).min(config.max_request_bytes)
}

/// Every address the broker will listen on: each listener's bootstrap and shard ports,
/// the admin endpoint, and the replication ports of a cluster node.
fn listen_addrs(
    config: &Config,
    listeners: &[Listener],
    cluster: &Option<Cluster>,
    nr_shards: usize,
) -> Vec<SocketAddr> {
    let mut addrs = vec![config.admin_addr];
    for listener in listeners {
        addrs.push(listener.bind);
        addrs.extend((0..nr_shards).map(|s| listener.shard_addr(s)));
    }
    if let Some(cluster) = cluster {
        addrs.extend((0..nr_shards).map(|s| cluster.listen_addr(s)));
    }
    addrs
}

/// The shards bind with SO_REUSEPORT, which would let two brokers of the same user share
/// a port silently; refuse to start when something keeps accepting connections there.
/// (A plain bind test is wrong here: sockets of a killed broker lingering in FIN_WAIT
/// hold the port for a non-REUSEPORT bind, though a restarted broker may reuse it.)
/// A listener of a broker killed a moment ago can outlive it briefly (io_uring tears its
/// ring down asynchronously), so a port is retried for a few seconds before giving up.
fn check_addrs_free(addrs: &[SocketAddr]) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    for a in addrs {
        // Nothing answers on an unspecified address: probe loopback instead.
        let probe = match a.ip().is_unspecified() {
            true if a.is_ipv4() => SocketAddr::from(([127, 0, 0, 1], a.port())),
            true => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
            false => *a,
        };
        while TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_ok() {
            if std::time::Instant::now() > deadline {
                return Err(format!("cannot listen on {a}: another process is listening there"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// `--default-replication-factor` must be a replication factor a topic may be created
/// with on this cluster (a single node: 1), or auto-creation would fail on every topic.
fn check_default_replication_factor(
    config: &Config,
    cluster: Option<&Cluster>,
    nr_shards: usize,
) -> Result<(), String> {
    let nodes = cluster.map_or(SINGLE_NODE_LIST.to_vec(), Cluster::nodes);
    let default = config.default_replication_factor;
    shardlog_shards::controller::validate_default_replication_factor(
        default,
        &nodes,
        nr_shards as u32,
    )
    .map_err(|e| format!("--default-replication-factor {default}: {e}"))
}

/// The admin port must not be one of the Kafka ports (whether it is free is probed with
/// them).
fn check_admin_addr(
    config: &Config,
    listeners: &[Listener],
    nr_shards: usize,
) -> Result<(), String> {
    let admin = config.admin_addr;
    for listener in listeners {
        let kafka_ports = listener.ports(nr_shards);
        if kafka_ports.contains(&admin.port()) {
            return Err(format!(
                "--admin-addr {admin} collides with the Kafka ports {kafka_ports:?} of {listener}"
            ));
        }
    }
    Ok(())
}

async fn shard_main(
    mesh_builder: ShardMeshBuilder,
    config: Config,
    network: (Vec<Listener>, Option<Cluster>),
    security: (Option<Arc<SharedTlsConfig>>, Security),
    shutdown: Arc<Shutdown>,
) {
    // The shard's tasks run in glommio's default task queue. Running them in a
    // `Latency::Matters` queue (which the storage bench favours under saturation) made 2-3
    // of 40 start-ups stall in the log's open on glommio 0.9, and measured no difference
    // end to end (docs/benchmarks.md): correctness first.
    // Test: tests/broker_rdkafka.rs, `the_broker_starts_every_time`.
    let started = start_shard(mesh_builder, config, network, security, shutdown).await;
    if let Err(message) = started {
        error!("{message}");
        eprintln!("shardlog: {message}");
        shardlog_shards::runtime::exit_process(1);
    }
}

async fn start_shard(
    mesh_builder: ShardMeshBuilder,
    config: Config,
    (listeners, cluster): (Vec<Listener>, Option<Cluster>),
    (tls, security): (Option<Arc<SharedTlsConfig>>, Security),
    shutdown: Arc<Shutdown>,
) -> Result<(), String> {
    let stop = ShardStop::spawn(shutdown);
    let (mesh, receivers) = Mesh::join(mesh_builder).await;
    let id = mesh.shard_id();
    // From here on, this executor ending for any reason but the shutdown below (a panic
    // in one of its tasks, an early return) takes the process down with a message.
    shardlog_shards::runtime::watch_shard(id);
    let dir = config.data_dir.join(format!("shard-{id:03}"));
    let disk = DmaDisk::open(dir.clone())
        .await
        .map_err(|e| format!("shard {id}: opening {}: {e}", dir.display()))?;
    disk.set_dsync_writes(config.log_sync == crate::config::LogSync::Dsync);
    // The log takes any batch a segment can hold; the produce path applies the topic's
    // max.message.bytes (or the broker's) below that.
    let log_config = LogConfig {
        segment_size_bytes: config.segment_bytes,
        max_batch_bytes: topic_max_message_bytes_ceiling(&config),
        blocking_flush_max_bytes: config.log_blocking_flush_max_bytes,
        ..LogConfig::default()
    };
    let (log, internal, report) = ShardLog::open(AnyDisk::Dma(disk), log_config)
        .await
        .map_err(|e| format!("shard {id}: recovering {}: {e}", dir.display()))?;
    info!(
        shard = id,
        replayed_entries = report.replayed_entries,
        replayed_bytes = report.replayed_bytes,
        checkpoint_position = ?report.checkpoint_position,
        ?report,
        "log recovered"
    );
    let shard_config = ShardConfig {
        auto_create_topics: config.auto_create_topics,
        default_partitions: config.default_partitions,
        default_replication_factor: config.default_replication_factor,
        max_message_bytes: config.max_message_bytes,
        topic_max_message_bytes_ceiling: topic_max_message_bytes_ceiling(&config),
        probe_log_interval: Duration::from_millis(config.probe_log_interval_ms.max(10)),
        producer_id_expiration_ms: config.producer_id_expiration_ms,
        txn: TxnConfig {
            max_timeout_ms: config.transaction_max_timeout_ms,
            check_interval: Duration::from_millis(config.transaction_check_interval_ms.max(10)),
        },
        retention_check_interval: Duration::from_millis(config.retention_check_interval_ms.max(10)),
        cleaner: CleanerConfig {
            check_interval: Duration::from_millis(config.log_cleaner_interval_ms.max(10)),
            bytes_per_second: config.log_cleaner_bytes_per_sec,
            ..CleanerConfig::default()
        },
        checkpoint_interval: Duration::from_millis(config.checkpoint_interval_ms.max(10)),
        group: GroupConfig {
            min_session_timeout_ms: config.group_min_session_timeout_ms,
            ..GroupConfig::default()
        },
        authorizer: shardlog_shards::acl::AuthorizerConfig {
            enabled: config.authorizer,
            super_users: config.super_users.clone(),
        },
        node_id: cluster.as_ref().map_or(SINGLE_NODE, Cluster::node),
        nodes: cluster.as_ref().map_or(SINGLE_NODE_LIST.to_vec(), Cluster::nodes),
        replica_lag_time_max: Duration::from_millis(config.replica_lag_time_max_ms.max(1)),
        replica_snapshot_after: (config.replica_snapshot_after_ms > 0)
            .then(|| Duration::from_millis(config.replica_snapshot_after_ms)),
        leader_imbalance_check_interval: (config.leader_imbalance_check_interval_ms > 0)
            .then(|| Duration::from_millis(config.leader_imbalance_check_interval_ms)),
        metadata_snapshot: SnapshotPolicy {
            max_changes: config.metadata_snapshot_max_changes.max(1),
            min_change_bytes: config.metadata_snapshot_min_change_bytes,
        },
    };
    let shard = Shard::new(log, mesh.clone(), shard_config);
    shard.groups.restore(&internal).map_err(|e| format!("shard {id}: committed offsets: {e}"))?;
    mesh.spawn_receivers(receivers, shard.clone());
    if id == 0 {
        shard.start_controller(&internal).await?;
        if let Some((user, credentials)) = &security.bootstrap_user {
            if shard.ensure_user(user, credentials.clone()).await? {
                info!(user, "SASL bootstrap user created");
            }
        }
    }
    shard.wait_for_table().await;
    shard.rebuild_producer_state(&internal).await.map_err(|e| format!("shard {id}: {e}"))?;
    let metadata_image = match &cluster {
        Some(cluster) if id == 0 => Some(recover_image(&internal, &cluster.nodes())?),
        _ => None,
    };
    // Every shard of a cluster node replays its own Raft stream for its partition groups.
    let partition_groups = match &cluster {
        Some(cluster) => {
            let replicas_of = shard.partition_groups_to_host();
            let replayed = partition_group::recover(&internal, &cluster.nodes(), &replicas_of)
                .map_err(|e| format!("shard {id}: {e}"))?;
            Some(replayed)
        }
        None => None,
    };
    drop(internal);
    release_recovery_memory();
    let checkpoints = spawn_checkpoints(shard.clone(), stop.clone());
    spawn_probe_log(shard.clone());
    spawn_failure_watch(shard.clone());
    shard.spawn_group_ticker();
    shard.spawn_txn_ticker();
    shard.spawn_retention();
    shard.spawn_cleaner();
    let handler = KafkaHandler {
        shard: shard.clone(),
        listener: listeners[0].advertised.clone(),
        log_dir: dir.clone(),
        stop: stop.clone(),
        fetch_max_bytes: config.fetch_max_bytes,
        max_records_bytes: config.max_request_bytes,
        peers: Rc::new(cluster.as_ref().map_or(Vec::new(), |c| c.peers.clone())),
    };
    let limits = ConnectionLimits {
        max_frame_bytes: config.max_request_bytes,
        idle_timeout: Duration::from_millis(config.connection_idle_timeout_ms.max(1)),
        max_in_flight: config.max_inflight_requests_per_connection.max(1),
    };
    let shard_limits = ShardLimits {
        connections: ConnectionSlots::new(config.max_connections_per_shard),
        produce_budget: ProduceBudget::new(config.max_pending_produce_bytes_per_shard),
    };
    if id == 0 {
        let admin = TcpListener::bind(config.admin_addr)
            .map_err(|e| format!("admin endpoint {}: {e}", config.admin_addr))?;
        let console = crate::admin::ConsoleSettings { write: config.console_write };
        crate::admin::spawn(admin, shard.clone(), console, security.admin.clone());
    }
    // One per shard: failures are slowed down per address on this shard.
    let sasl = security.sasl_mechanisms.map(|m| Rc::new(SaslConfig::new(m)));
    // One acceptor per shard (one SSL listener at most): its handshake limit is the shard's.
    let tls = tls.map(|shared| {
        let timeout = Duration::from_millis(config.tls_handshake_timeout_ms.max(1));
        Rc::new(TlsAcceptor::new(shared, config.max_tls_handshakes_per_shard, timeout))
    });
    if let Some(cluster) = &cluster {
        start_replication(&shard, cluster)?;
    }
    if let (Some(replayed), Some(host)) = (partition_groups, shard.replication()) {
        shard.start_partition_groups(host, replayed)?;
    }
    if let (Some(image), Some(host)) = (metadata_image, shard.replication()) {
        shard.start_metadata_group(host, image)?;
        info!(node_id = shard.config.node_id, "metadata group started");
    }
    let mut accept_loops = Vec::new();
    for listener in &listeners {
        let handler =
            Rc::new(KafkaHandler { listener: listener.advertised.clone(), ..handler.clone() });
        let tls = tls.clone().filter(|_| listener.protocol.uses_tls());
        let sasl = sasl.clone().filter(|_| listener.protocol.uses_sasl());
        let shard_addr = listener.shard_addr(id);
        for addr in [listener.bind, shard_addr] {
            let socket = TcpListener::bind(addr)
                .map_err(|e| format!("shard {id}: {listener}: {addr}: {e}"))?;
            let accept = Accept {
                handler: handler.clone(),
                tls: tls.clone(),
                sasl: sasl.clone(),
                limits,
                shard_limits: shard_limits.clone(),
            };
            accept_loops.push(glommio::spawn_local(accept.run(socket)));
        }
        info!(shard = id, listener = %listener, port = shard_addr.port(), "shard serving");
    }
    for accept_loop in accept_loops {
        accept_loop.await;
    }
    // Shutdown was requested: the Kafka listeners are closed; hand over raft leaderships,
    // drain, stop the raft groups, checkpoint, close.
    stop.finish(&shard, shard.take_replication(), checkpoints).await;
    shardlog_shards::runtime::shard_finished();
    Ok(())
}

/// Starts this shard's replication host: its transport listens on the shard's
/// replication port and keeps a connection to shard `id` of every peer
/// (docs/replication.md); what arrives is stepped into the shard's raft groups and what
/// they emit is sent. Shard 0 hosts the metadata group (`metadata_group.rs`), and every
/// shard the partition groups of the replicated partitions it holds
/// (`partition_group.rs`); a message for a group not hosted is counted and dropped. A
/// bind failure is a start-up error.
fn start_replication(shard: &Rc<Shard>, cluster: &Cluster) -> Result<(), String> {
    let id = shard.id;
    let listen = cluster.listen_addr(id);
    let transport_config = TransportConfig::new(
        cluster.node_id,
        id as u32,
        cluster.nr_shards as u32,
        listen,
        cluster.peer_addrs(id),
    );
    let host = GroupHost::start(transport_config, shardlog_shards::replication::TICK)
        .map_err(|e| format!("shard {id}: replication port {listen}: {e}"))?;
    shard.set_replication(Rc::new(host));
    info!(
        shard = id,
        node_id = cluster.node_id,
        port = listen.port(),
        peers = ?cluster.peer_addrs(id),
        "shard replicating"
    );
    Ok(())
}

/// What all connections of one shard share: its connection slots (every listener counts)
/// and its budget of produce bytes read but not yet answered.
#[derive(Clone)]
struct ShardLimits {
    connections: Rc<ConnectionSlots>,
    produce_budget: Rc<ProduceBudget>,
}

/// One listening socket's accept loop: what its connections are served with.
struct Accept {
    handler: Rc<KafkaHandler>,
    /// The shard's TLS acceptor on an SSL or SASL_SSL listener.
    tls: Option<Rc<TlsAcceptor>>,
    /// The shard's SASL settings on a SASL_PLAINTEXT or SASL_SSL listener.
    sasl: Option<Rc<SaslConfig>>,
    limits: ConnectionLimits,
    shard_limits: ShardLimits,
}

impl Accept {
    /// Accepts connections until shutdown is requested.
    async fn run(self, listener: TcpListener) {
        let handler = &self.handler;
        loop {
            let accepted =
                futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    handler.stop.stopping().await;
                    None
                })
                .await;
            let Some(accepted) = accepted else { return };
            match accepted {
                Ok(stream) => self.serve(stream),
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    warn!(error = %e, "accept failed");
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn serve(&self, stream: glommio::net::TcpStream) {
        // Over --max-connections-per-shard: dropping the stream closes it (logged).
        let Some(slot) = self.shard_limits.connections.try_take(stream.peer_addr().ok()) else {
            return;
        };
        let handler = self.handler.clone();
        let open = handler.stop.connection_opened();
        let probes = &handler.shard.probes;
        probes.connections_accepted.set(probes.connections_accepted.get() + 1);
        probes.connections.set(probes.connections.get() + 1);
        let budget = self.shard_limits.produce_budget.clone();
        let (limits, tls, sasl) = (self.limits, self.tls.clone(), self.sasl.clone());
        glommio::spawn_local(async move {
            match tls {
                None => {
                    let _ = serve_connection(stream, handler.clone(), limits, budget, sasl).await;
                }
                Some(tls) => serve_tls(&tls, stream, handler.clone(), (limits, budget), sasl).await,
            }
            let probes = &handler.shard.probes;
            probes.connections.set(probes.connections.get() - 1);
            drop((open, slot));
        })
        .detach();
    }
}

/// The handshake, counted by outcome, then the connection loop over TLS.
async fn serve_tls(
    tls: &TlsAcceptor,
    stream: glommio::net::TcpStream,
    handler: Rc<KafkaHandler>,
    (limits, budget): (ConnectionLimits, Rc<ProduceBudget>),
    sasl: Option<Rc<SaslConfig>>,
) {
    let probes = &handler.shard.probes;
    let connection = match tls.handshake(stream, &limits).await {
        Ok(connection) => connection,
        Err(e) => {
            let counter = match e {
                HandshakeError::OverLimit => &probes.tls_handshakes_refused,
                HandshakeError::TimedOut => &probes.tls_handshake_timeouts,
                HandshakeError::Failed(_) => &probes.tls_handshake_errors,
            };
            counter.set(counter.get() + 1);
            // Counted, not logged at warn: a port scan or a plaintext client must not
            // flood the log.
            debug!(error = %e, "TLS connection closed before its first request");
            return;
        }
    };
    probes.tls_handshakes.set(probes.tls_handshakes.get() + 1);
    let principal = connection.principal.as_deref().unwrap_or("User:ANONYMOUS");
    debug!(peer = %connection.peer, principal, "TLS handshake completed");
    let _ = serve_tls_connection(connection, handler, limits, budget, sasl).await;
}

/// Recovery reads the log in 4 MiB windows; glibc's malloc then raises its mmap threshold
/// to that size and keeps the freed windows in the shard thread's arena, about 4 MiB of
/// resident memory per shard that nothing uses after start-up. Hand the free pages back.
fn release_recovery_memory() {
    // SAFETY: malloc_trim only returns free memory to the kernel; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Periodic index checkpoints (with a producer-state snapshot first) keep recovery short.
/// The task ends when shutdown starts (the shutdown writes the last checkpoint).
fn spawn_checkpoints(shard: Rc<Shard>, stop: Rc<ShardStop>) -> glommio::Task<()> {
    glommio::spawn_local(async move {
        loop {
            let sleep = async {
                glommio::timer::sleep(shard.config.checkpoint_interval).await;
                true
            };
            let stopping = async {
                stop.stopping().await;
                false
            };
            if !futures_lite::future::or(sleep, stopping).await {
                return;
            }
            shard.snapshot_producer_state();
            if let Err(e) = shard.log.checkpoint().await {
                warn!(shard = shard.id, error = %e, "checkpoint failed");
            }
        }
    })
}

/// A log that stopped for good (EIO, failed fdatasync: see `ShardLog::failure`) stops the
/// broker, whichever request or task hit it first, with a clear message and exit 70.
fn spawn_failure_watch(shard: Rc<Shard>) {
    glommio::spawn_local(async move {
        let reason = shard.log.failure().await;
        eprintln!("shardlog: shard {}: {reason}", shard.id);
        shard.fatal_storage_error(&StorageError::Fatal(reason));
    })
    .detach();
}

fn spawn_probe_log(shard: Rc<Shard>) {
    glommio::spawn_local(async move {
        let mut last = [0u64; 5];
        let mut last_flushes = 0;
        loop {
            glommio::timer::sleep(shard.config.probe_log_interval).await;
            let producers = shard.producers.borrow().len();
            shard.probes.log_if_changed(shard.id, producers, &mut last);
            shard.log_latency_budget(&mut last_flushes);
        }
    })
    .detach();
}
