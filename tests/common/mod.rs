//! Test harness: a real shardlog process on 127.0.0.1 with its own temp dir and free
//! ports, plus a raw Kafka-protocol client for exact error codes.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use shardlog_benches::load::record_batch::{ProducerFields, RecordBatchWriter};

/// How a test broker is told where its data dir is.
#[derive(Clone, Copy, Debug)]
pub enum DataDirFlag {
    /// `--data-dir <temp dir>/data` (every test but the newcomer's).
    Absolute,
    /// No `--data-dir`: the default `./data`, from the temp dir as working directory.
    Omitted,
    /// `--data-dir <relative>`, from the temp dir as working directory.
    Relative(&'static str),
}

/// A running broker process; killed (SIGKILL) when dropped.
pub struct Broker {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub cores: usize,
    pub extra_args: Vec<String>,
    /// How the data dir is given; a relative one is resolved against `dir`.
    pub data_dir_flag: DataDirFlag,
    child: Option<Child>,
    /// The admin HTTP port (/metrics, /health): the port after the shard ports.
    pub admin_port: u16,
    /// Environment variables set for the broker process (after SHARDLOG_LOG=info).
    pub env: Vec<(String, String)>,
}

impl Broker {
    /// Starts a broker with `cores` shards and extra flags.
    pub fn start(cores: usize, extra_args: &[&str]) -> Broker {
        let mut broker = Broker::unstarted(cores, extra_args);
        broker.spawn();
        broker
    }

    /// A temp dir and free ports, no process yet.
    fn unstarted(cores: usize, extra_args: &[&str]) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port_range(cores + 2);
        let extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        let admin_port = port + 1 + cores as u16;
        let data_dir_flag = DataDirFlag::Absolute;
        let env = Vec::new();
        Broker { dir, port, cores, extra_args, data_dir_flag, child: None, admin_port, env }
    }

    /// Starts a broker whose flags depend on its bootstrap port (`--listeners`, files in
    /// its temp dir), with extra environment variables.
    pub fn start_configured(
        cores: usize,
        env: &[(&str, &str)],
        args: impl FnOnce(&Broker) -> Vec<String>,
    ) -> Broker {
        let mut broker = Broker::unstarted(cores, &[]);
        broker.extra_args = args(&broker);
        broker.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        broker.spawn();
        broker
    }

    /// The sum over shards of a counter or gauge from `GET /metrics`.
    pub fn metric_sum(&self, name: &str) -> f64 {
        self.metric_sum_labelled(name, "")
    }

    /// The sum over shards of a metric's samples whose labels contain `label` (such as
    /// `api="Fetch"`) from `GET /metrics`.
    pub fn metric_sum_labelled(&self, name: &str, label: &str) -> f64 {
        let mut stream = TcpStream::connect(("127.0.0.1", self.admin_port)).expect("admin port");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("the metrics, then close");
        let prefix = format!("{name}{{");
        let samples = text.lines().filter(|l| l.starts_with(&prefix) && l.contains(label));
        samples.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    }

    /// Starts a broker whose working directory is its temp dir, told of its data dir the
    /// way a newcomer would: `flag` is `Omitted` (the default `./data`) or `Relative`.
    pub fn start_in_working_dir(cores: usize, flag: DataDirFlag, extra_args: &[&str]) -> Broker {
        let mut broker = Broker::unstarted(cores, extra_args);
        broker.data_dir_flag = flag;
        broker.spawn();
        broker
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn shard_addr(&self, shard: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port + 1 + shard as u16))
    }

    pub fn data_dir(&self) -> PathBuf {
        match self.data_dir_flag {
            DataDirFlag::Relative(relative) => self.dir.path().join(relative),
            DataDirFlag::Absolute | DataDirFlag::Omitted => self.dir.path().join("data"),
        }
    }

    /// How many segment files shard `shard`'s log has now.
    pub fn segment_files(&self, shard: usize) -> usize {
        let dir = self.data_dir().join(format!("shard-{shard:03}"));
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
            .count()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// Everything the broker printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("broker log file");
        // SHARDLOG_BENCH_BIN runs another build (e.g. main's) under the same harness; only
        // the measurement in tests/many_topics.rs documents it.
        let binary = std::env::var_os("SHARDLOG_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_shardlog").into());
        let mut command = Command::new(binary);
        match self.data_dir_flag {
            DataDirFlag::Absolute => {
                command.arg("--data-dir").arg(self.data_dir());
            }
            DataDirFlag::Omitted => {
                command.current_dir(self.dir.path());
            }
            DataDirFlag::Relative(relative) => {
                command.current_dir(self.dir.path()).arg("--data-dir").arg(relative);
            }
        }
        command
            .arg("--kafka-addr")
            .arg(self.bootstrap())
            .arg("--cores")
            .arg(self.cores.to_string());
        // Small segments keep test data dirs small, unless a test picks its own.
        if !self.extra_args.iter().any(|a| a == "--segment-bytes") {
            command.arg("--segment-bytes").arg((8u64 << 20).to_string());
        }
        // Every broker gets its own admin port (the default one would be shared).
        if !self.extra_args.iter().any(|a| a == "--admin-addr") {
            command.arg("--admin-addr").arg(format!("127.0.0.1:{}", self.admin_port));
        }
        let child = command
            .args(&self.extra_args)
            .env("SHARDLOG_LOG", "info")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting the shardlog binary");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut addrs: Vec<SocketAddr> = (0..self.cores).map(|s| self.shard_addr(s)).collect();
        addrs.push(self.bootstrap().parse().unwrap());
        for addr in addrs {
            loop {
                if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                    panic!("broker exited with {status} during start-up:\n{}", self.log());
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                assert!(Instant::now() < deadline, "broker not ready in 60 s:\n{}", self.log());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// kill -9, then start again on the same data dir and ports.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        // The kernel may keep a dead broker's io_uring listeners for a moment.
        let bootstrap: SocketAddr = self.bootstrap().parse().unwrap();
        eventually(Duration::from_secs(10), "the old listeners to close", || {
            TcpStream::connect_timeout(&bootstrap, Duration::from_millis(100)).is_err()
        });
        self.spawn();
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- broker log ({}) ----\n{}", self.log_path().display(), self.log());
        }
        self.kill();
    }
}

/// A base port p such that p..p+count are free on 127.0.0.1 right now, below the
/// kernel's ephemeral range: after a kill -9, clients reconnecting from ephemeral ports
/// could otherwise take the broker's port before it restarts. Never a range that overlaps
/// one handed out before in this process: the tests of a binary run in parallel, and two
/// of them finding the same ports free before either broker binds would otherwise start
/// two brokers on them (the second refused by its port claim, src/port_claims.rs).
pub fn free_port_range(count: usize) -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<(u16, u16)>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
            as u64;
    let mut state = seed | 1;
    for _ in 0..500 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let base = 12_000 + (state % 20_000) as u16;
        let end = base + count as u16;
        if handed_out.iter().any(|&(b, e)| base < e && b < end) {
            continue;
        }
        let all_free =
            (0..count as u16).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            handed_out.push((base, end));
            return base;
        }
    }
    panic!("no free port range of {count} ports");
}

/// A minimal blocking Kafka client: one request at a time, exact responses.
pub struct RawClient {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        RawClient { stream, next_correlation_id: 1 }
    }

    /// The socket, for tests that read or write it directly.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one request and returns its decoded response.
    pub fn call(&mut self, api_key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        let correlation_id = self.send(api_key, version, &body);
        self.receive(api_key, version, correlation_id)
    }

    pub fn send(&mut self, api_key: ApiKey, version: i16, body: &RequestKind) -> i32 {
        let (correlation_id, frame) = self.frame(api_key, version, body);
        self.stream.write_all(&frame).unwrap();
        correlation_id
    }

    /// The next request as the bytes `send` would write (length prefix included), and its
    /// correlation id, for tests that write several requests at once or in pieces.
    pub fn frame(&mut self, api_key: ApiKey, version: i16, body: &RequestKind) -> (i32, BytesMut) {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("raw-test")));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header.encode(&mut frame, api_key.request_header_version(version)).unwrap();
        body.encode(&mut frame, version).unwrap();
        let len = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        (correlation_id, frame)
    }

    pub fn send_frame(&mut self, frame: &[u8]) {
        let mut out = BytesMut::with_capacity(frame.len() + 4);
        out.put_i32(frame.len() as i32);
        out.put_slice(frame);
        self.stream.write_all(&out).unwrap();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    pub fn receive(&mut self, api_key: ApiKey, version: i16, correlation_id: i32) -> ResponseKind {
        let mut frame = self.read_frame().expect("response frame");
        let header =
            ResponseHeader::decode(&mut frame, api_key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, correlation_id);
        let body = ResponseKind::decode(api_key, &mut frame, version).unwrap();
        assert_eq!(frame.remaining(), 0, "trailing bytes in response");
        body
    }

    /// The next frame, or None when the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut frame).ok()?;
        Some(Bytes::from(frame))
    }

    /// True when the broker closed the connection (EOF or reset) within 10 s; false if
    /// the connection was still open then or data arrived.
    pub fn is_closed_by_broker(&mut self) -> bool {
        self.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut byte = [0u8; 1];
        let closed = match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            ),
        };
        self.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        closed
    }
}

/// Builds an uncompressed Kafka v2 record batch holding `values` (keys optional).
pub fn record_batch(values: &[(&[u8], &[u8])], base_timestamp: i64) -> Bytes {
    idempotent_batch(values, base_timestamp, -1, -1, -1)
}

/// A record batch from an idempotent producer (`producer_id` >= 0) at `base_sequence`,
/// built by the load generator's batch writer.
pub fn idempotent_batch(
    values: &[(&[u8], &[u8])],
    base_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Bytes {
    let producer = ProducerFields { producer_id, producer_epoch, base_sequence };
    let mut out = Vec::new();
    let mut writer = RecordBatchWriter::with_producer(&mut out, base_timestamp, producer);
    for (key, value) in values {
        writer.push(Some(key), value);
    }
    writer.finish();
    Bytes::from(out)
}

/// Polls `view` of each of `nodes` until every one answers and `done` holds of the
/// answers, or fails after `limit` with what it waited for and the last answers.
#[allow(dead_code)]
pub fn wait_for_views<V: Clone + std::fmt::Debug>(
    limit: Duration,
    nodes: &[usize],
    what: &str,
    view: impl Fn(usize) -> Option<V>,
    done: impl Fn(&[V]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let views: Vec<Option<V>> = nodes.iter().map(|&n| view(n)).collect();
        if views.iter().all(Option::is_some) {
            let views: Vec<V> = views.iter().flatten().cloned().collect();
            if done(&views) {
                return;
            }
        }
        if Instant::now() > deadline {
            panic!("waited {limit:?} for {what}; last views (nodes {nodes:?}): {views:#?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Metadata v12 of every topic from `broker`, or None if its bootstrap port does not
/// accept a connection (a node that is down).
#[allow(dead_code)]
pub fn all_metadata(
    broker: &Broker,
) -> Option<kafka_protocol::messages::metadata_response::MetadataResponse> {
    use kafka_protocol::messages::metadata_request::MetadataRequest;
    let addr: SocketAddr = broker.bootstrap().parse().unwrap();
    drop(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?);
    let mut client = RawClient::connect(addr);
    let request = MetadataRequest::default().with_topics(None);
    match client.call(ApiKey::Metadata, 12, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => Some(r),
        other => panic!("not a Metadata response: {other:?}"),
    }
}

/// FindCoordinator v3 of group `group` asked of `broker`: (error, broker id, port).
#[allow(dead_code)]
pub fn find_coordinator(broker: &Broker, group: &str) -> (i16, i32, i32) {
    use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
    let mut client = RawClient::connect(broker.bootstrap().parse().unwrap());
    let request = FindCoordinatorRequest::default().with_key(group.to_string().into());
    match client.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(request)) {
        ResponseKind::FindCoordinator(r) => (r.error_code, r.node_id.0, r.port),
        other => panic!("{other:?}"),
    }
}

/// Waits until `f` returns true (polling), or panics with `what` after `limit`.
pub fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn path_exists(p: &Path) -> bool {
    p.exists()
}

/// Sends `request` as is to the broker's admin endpoint and returns the status code and
/// body of the response (one request per connection: read to the close).
pub fn admin_http(broker: &Broker, request: &[u8]) -> (u16, String) {
    let (status, _, body) = admin_exchange(broker, request);
    (status, body)
}

/// `admin_http` with the response head too (its header lines, for Set-Cookie, Location).
pub fn admin_exchange(broker: &Broker, request: &[u8]) -> (u16, String, String) {
    let addr = SocketAddr::from(([127, 0, 0, 1], broker.admin_port));
    let mut stream = TcpStream::connect(addr).expect("connect to the admin port");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("the response, then close");
    let response = String::from_utf8(response).expect("a UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a complete response head");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    (status, head.to_string(), body.to_string())
}

/// `text` percent-encoded for an `application/x-www-form-urlencoded` body.
pub fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` on the broker's admin endpoint: status code and body.
pub fn admin_get(broker: &Broker, path: &str) -> (u16, String) {
    admin_http(broker, format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
}

/// A tokio runtime to drive rdkafka's futures.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Creates a topic through librdkafka's admin API (replication factor 1).
/// A librdkafka admin client for `broker`.
pub fn admin_client(
    broker: &Broker,
) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("a librdkafka admin client")
}

pub fn create_topic(broker: &Broker, name: &str, partitions: i32) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let admin = admin_client(broker);
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for result in runtime().block_on(admin.create_topics(&[topic], &AdminOptions::new())).unwrap() {
        result.expect("topic created");
    }
}

impl Broker {
    /// Starts a broker on `port` (its shard ports follow) with its admin endpoint on
    /// `admin_port`: for brokers that must know each other's ports before any starts (a
    /// cluster, tests/replication.rs).
    pub fn start_at(cores: usize, port: u16, admin_port: u16, extra_args: Vec<String>) -> Broker {
        let mut broker = Broker::unstarted(cores, &[]);
        (broker.port, broker.admin_port, broker.extra_args) = (port, admin_port, extra_args);
        broker.spawn();
        broker
    }

    /// Starts `nodes` brokers of `cores` shards as one cluster on 127.0.0.1: node ids 1..,
    /// each on its own block of `ports_per_node` free ports (bootstrap first, admin last),
    /// all listed in every node's `--peers`.
    pub fn start_cluster(nodes: usize, cores: usize, ports_per_node: usize) -> Vec<Broker> {
        Broker::start_cluster_with(nodes, cores, ports_per_node, &[])
    }

    /// [`Broker::start_cluster`] with `extra_args` for every node.
    pub fn start_cluster_with(
        nodes: usize,
        cores: usize,
        ports_per_node: usize,
        extra_args: &[&str],
    ) -> Vec<Broker> {
        let base = free_port_range(nodes * ports_per_node);
        let port = |node: usize| base + (node * ports_per_node) as u16;
        let peers: Vec<String> =
            (0..nodes).map(|n| format!("{}=127.0.0.1:{}", n + 1, port(n))).collect();
        let peers = peers.join(",");
        (0..nodes)
            .map(|n| {
                let admin_port = port(n) + ports_per_node as u16 - 1;
                let mut args =
                    vec!["--node-id".into(), (n + 1).to_string(), "--peers".into(), peers.clone()];
                args.extend(extra_args.iter().map(|a| a.to_string()));
                Broker::start_at(cores, port(n), admin_port, args)
            })
            .collect()
    }

    /// Starts a broker whose data dir is `data_dir` (e.g. on a small file system) instead
    /// of one inside its temp dir.
    pub fn start_with_data_dir(data_dir: PathBuf, cores: usize, extra_args: &[&str]) -> Broker {
        let mut broker = Broker::unstarted(cores, extra_args);
        std::os::unix::fs::symlink(&data_dir, broker.data_dir()).expect("data dir link");
        broker.spawn();
        broker
    }

    /// The broker's process id (to send it signals).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker running").id()
    }

    /// Waits up to `limit` for the process to exit on its own; its exit status, if it did.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut()?.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Starts the broker again on the same data dir and ports after it exited.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the broker is still running");
        self.spawn();
    }
}

/// A Produce request (v9, acks=all) of `records` to one partition.
pub fn produce_request(topic: &str, partition: i32, records: Bytes) -> RequestKind {
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    let name = kafka_protocol::messages::TopicName(StrBytes::from_string(topic.to_string()));
    let data = PartitionProduceData::default().with_index(partition).with_records(Some(records));
    let topic_data = TopicProduceData::default().with_name(name).with_partition_data(vec![data]);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic_data]);
    RequestKind::Produce(request)
}

/// A Fetch request (v11) of one partition from `offset`, parking up to `max_wait_ms`.
pub fn fetch_request(topic: &str, partition: i32, offset: i64, max_wait_ms: i32) -> RequestKind {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
    let name = kafka_protocol::messages::TopicName(StrBytes::from_string(topic.to_string()));
    let partition = FetchPartition::default()
        .with_partition(partition)
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1 << 20);
    let request = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name).with_partitions(vec![partition])]);
    RequestKind::Fetch(request)
}

/// Produces `count` acknowledged records "<tag>-<i>" round-robin over `partitions`.
pub fn produce_tagged(broker: &Broker, topic: &str, partitions: i32, tag: &str, count: usize) {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "1")
        .create()
        .unwrap();
    runtime().block_on(async {
        let mut pending = Vec::new();
        for i in 0..count {
            let value = format!("{tag}-{i}");
            let record =
                FutureRecord::<(), _>::to(topic).payload(&value).partition(i as i32 % partitions);
            pending.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
        }
        for p in pending {
            p.await.unwrap().map_err(|(e, _)| e).unwrap();
        }
    });
}

/// Per partition, in offset order: (offset, payload).
pub type Stored = std::collections::BTreeMap<i32, Vec<(i64, Vec<u8>)>>;

/// Everything stored in `topic` from its log starts up to its high watermarks, read with
/// librdkafka.
pub fn read_topic(broker: &Broker, topic: &str, partitions: i32) -> Stored {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "read-topic-checker")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut ends = std::collections::BTreeMap::new();
    for p in 0..partitions {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        let (low, high) =
            consumer.fetch_watermarks(topic, p, Duration::from_secs(60)).expect("watermarks");
        ends.insert(p, high - low); // records to read: from the log start (DeleteRecords)
    }
    consumer.assign(&assignment).unwrap();
    let mut stored = Stored::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    let done = |stored: &Stored| {
        ends.iter().all(|(p, end)| stored.get(p).map_or(0, Vec::len) as i64 >= *end)
    };
    while !done(&stored) {
        assert!(Instant::now() < deadline, "read back incomplete: ends {ends:?}");
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let m = message.expect("read back");
            let value = m.payload().unwrap_or_default().to_vec();
            stored.entry(m.partition()).or_default().push((m.offset(), value));
        }
    }
    stored
}

/// A librdkafka producer with acks=all and linger.ms=1 (what most tests want).
pub fn acks_all_producer(broker: &Broker) -> rdkafka::producer::FutureProducer {
    acks_all_config(broker).create().expect("a librdkafka producer")
}

/// The config of [`acks_all_producer`], for a test that sets more.
pub fn acks_all_config(broker: &Broker) -> rdkafka::config::ClientConfig {
    let mut config = rdkafka::config::ClientConfig::new();
    config.set("bootstrap.servers", broker.bootstrap()).set("acks", "all").set("linger.ms", "1");
    config
}

/// A topic name for raw requests.
pub fn topic_name(name: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(name.to_string()))
}

/// Produce v9 with acks=all of `records` to one partition: (error code, base offset).
pub fn raw_produce(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> (i16, i64) {
    raw_produce_acks(client, topic, partition, records, -1)
}

/// [`raw_produce`] with `acks` (1 or -1; acks=0 gets no response).
pub fn raw_produce_acks(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> (i16, i64) {
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest, TopicProduceData,
    };
    let request =
        ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(vec![
            TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(vec![
                PartitionProduceData::default().with_index(partition).with_records(Some(records)),
            ]),
        ]);
    match client.call(ApiKey::Produce, 9, RequestKind::Produce(request)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

/// The leader (owner shard) of each partition of `topic`, from Metadata v9.
pub fn leaders(client: &mut RawClient, topic: &str) -> Vec<i32> {
    use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(topic))),
    ]));
    match client.call(ApiKey::Metadata, 9, RequestKind::Metadata(request)) {
        ResponseKind::Metadata(r) => r.topics[0].partitions.iter().map(|p| p.leader_id.0).collect(),
        other => panic!("{other:?}"),
    }
}

/// A librdkafka consumer for reads by assignment (no group membership, no commits).
pub fn assign_only_consumer(broker: &Broker) -> rdkafka::consumer::BaseConsumer {
    assign_only_config(broker).create().unwrap()
}

/// The settings of [`assign_only_consumer`], for a test that adds its own.
pub fn assign_only_config(broker: &Broker) -> rdkafka::config::ClientConfig {
    let mut config = rdkafka::config::ClientConfig::new();
    config
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100");
    config
}

/// `SHARDLOG_SEED` if set, else a fresh seed from the clock (printed by the caller).
pub fn seed_from_env() -> u64 {
    let fallback =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64;
    std::env::var("SHARDLOG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(fallback)
}

/// Prints the seed if the test fails, so that the run can be replayed.
pub struct SeedOnFailure {
    pub test: &'static str,
    pub seed: u64,
}

impl Drop for SeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{} FAILED with SHARDLOG_SEED={}", self.test, self.seed);
        }
    }
}

/// ListOffsets v5 latest (-1) of `partition` of `topic` at isolation level `isolation` (0
/// read_uncommitted: the high watermark; 1 read_committed: the last stable offset).
pub fn latest_offset(client: &mut RawClient, topic: &str, partition: i32, isolation: i8) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    match client.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(request)) {
        ResponseKind::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets of {topic}-{partition}");
            p.offset
        }
        other => panic!("{other:?}"),
    }
}

/// A group's committed offsets of `topic`'s partitions as `consumer`'s coordinator reports
/// them now (None: no commit), asked again until it answers or `limit` passes.
pub fn committed_offsets(
    consumer: &rdkafka::consumer::BaseConsumer,
    topic: &str,
    partitions: i32,
    limit: Duration,
) -> std::collections::BTreeMap<i32, Option<i64>> {
    use rdkafka::consumer::Consumer;
    use rdkafka::{Offset, TopicPartitionList};
    let mut asked = TopicPartitionList::new();
    for partition in 0..partitions {
        asked.add_partition(topic, partition);
    }
    let deadline = Instant::now() + limit;
    let found = loop {
        match consumer.committed_offsets(asked.clone(), Duration::from_secs(10)) {
            Ok(found) => break found,
            Err(e) => assert!(Instant::now() < deadline, "committed offsets unavailable: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let offset = |o: Offset| if let Offset::Offset(o) = o { Some(o) } else { None };
    found.elements().iter().map(|e| (e.partition(), offset(e.offset()))).collect()
}

/// OffsetForLeaderEpoch (v4, KIP-320) of one partition: (error code, leader epoch, end
/// offset).
pub fn offset_for_leader_epoch(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> (i16, i32, i64) {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderEpochRequest, OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let partition = OffsetForLeaderPartition::default()
        .with_partition(partition)
        .with_current_leader_epoch(current_leader_epoch)
        .with_leader_epoch(leader_epoch);
    let topic = OffsetForLeaderTopic::default()
        .with_topic(topic_name(topic))
        .with_partitions(vec![partition]);
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![topic]);
    let body = RequestKind::OffsetForLeaderEpoch(request);
    match client.call(ApiKey::OffsetForLeaderEpoch, 4, body) {
        ResponseKind::OffsetForLeaderEpoch(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.leader_epoch, p.end_offset)
        }
        other => panic!("{other:?}"),
    }
}

/// ListOffsets (v7) of one partition at `timestamp` with `current_leader_epoch`: (error
/// code, offset, leader epoch).
pub fn list_offset_epoch(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    timestamp: i64,
    current_leader_epoch: i32,
) -> (i16, i64, i32) {
    use kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    };
    let partition = ListOffsetsPartition::default()
        .with_partition_index(partition)
        .with_timestamp(timestamp)
        .with_current_leader_epoch(current_leader_epoch);
    let topic =
        ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(vec![partition]);
    let request =
        ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![topic]);
    match client.call(ApiKey::ListOffsets, 7, RequestKind::ListOffsets(request)) {
        ResponseKind::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.offset, p.leader_epoch)
        }
        other => panic!("{other:?}"),
    }
}

/// Fetch (v12) of one partition from `offset` with `current_leader_epoch`, not parked:
/// its error code and each returned batch's (base offset, partition leader epoch).
pub fn fetch_batch_epochs(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    offset: i64,
    current_leader_epoch: i32,
) -> (i16, Vec<(i64, i32)>) {
    let RequestKind::Fetch(mut request) = fetch_request(topic, partition, offset, 0) else {
        unreachable!()
    };
    request.topics[0].partitions[0].current_leader_epoch = current_leader_epoch;
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 12, RequestKind::Fetch(request)) else {
        panic!("not a Fetch response")
    };
    let p = &r.responses[0].partitions[0];
    let mut batches = Vec::new();
    let mut rest = p.records.clone().unwrap_or_default();
    // v2 batch header: base_offset i64, batch_length i32, partition_leader_epoch i32.
    while rest.len() >= 12 {
        let base_offset = i64::from_be_bytes(rest[..8].try_into().unwrap());
        let total = 12 + i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        if rest.len() < total {
            break; // a partial batch at the end of the response
        }
        batches.push((base_offset, i32::from_be_bytes(rest[12..16].try_into().unwrap())));
        rest = rest.slice(total..);
    }
    (p.error_code, batches)
}
