//! Command-line flags of `shardlog-load` (`--help` prints them with their defaults).

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "shardlog-load",
    about = "Native Kafka load generator: produce, end-to-end latency, consume/replay, \
             partition scaling. Prints a table and `RESULT mode=... key=value` lines.",
    after_help = "Examples:\n  \
      shardlog-load produce --bootstrap 127.0.0.1:9092 --messages 100000 --size 1024 \
      --acks all --partitions 3 --keys 1000 --topic tp\n  \
      shardlog-load consume --bootstrap 127.0.0.1:9092 --topic tp\n  \
      shardlog-load e2e --rate 200 --secs 20\n  \
      shardlog-load partitions --counts 8,100,1000,10000\n  \
      shardlog-load topics --topics 10000 --partitions 4 --broker-pid PID \
      --admin-addr 127.0.0.1:9644"
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Subcommand, Debug)]
pub enum Mode {
    /// Send N messages as fast as the in-flight window allows; msg/s, MB/s and
    /// produce->ack latency percentiles.
    Produce(ProduceArgs),
    /// Produce at a fixed rate while consumers long-poll; end-to-end latency from a
    /// timestamp in each payload, received/sent.
    E2e(E2eArgs),
    /// Read a topic from the beginning up to its high watermarks; msg/s and MB/s.
    Consume(ConsumeArgs),
    /// Same as consume: a new reader replays everything.
    Replay(ConsumeArgs),
    /// The same produce load over several partition counts; throughput and p99 each.
    /// Whole batches go round-robin over the partitions (--keys is ignored), and
    /// --messages is raised to at least (largest count x --batch) so every partition
    /// gets a batch.
    Partitions(PartitionsArgs),
    /// N topics x P partitions created up front, then a produce load spread over all of
    /// them in each request shape (many partitions per request, one per request);
    /// msg/s, produce->ack percentiles, broker RSS and bytes flushed per message.
    Topics(TopicsArgs),
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Any broker of the cluster; Metadata tells where each partition's leader is.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Topic name (default: a fresh name per run).
    #[arg(long)]
    pub topic: Option<String>,
    /// Label copied into the RESULT lines (e.g. the broker's name).
    #[arg(long, default_value = "")]
    pub label: String,
    /// Replication factor of the topic it creates (a cluster of that many nodes or more).
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
}

#[derive(Args, Debug, Clone)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub common: Common,
    /// Messages to send.
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    /// Value size in bytes (at least 16: a send timestamp and a sequence number).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// acks: 0, 1 or all (-1).
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: i16,
    /// Records per record batch (one batch per Produce request).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Partitions of the topic (created if missing).
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Distinct keys, message i has key `i % keys` placed by Kafka's murmur2
    /// partitioner; 0 = no keys, batches round-robin over partitions.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Producers; each has one connection (one thread) per partition leader.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Produce requests in flight per connection.
    #[arg(long, default_value_t = 5)]
    pub in_flight: usize,
    /// Idempotent producer: InitProducerId, then producer id, epoch and per-partition
    /// sequence numbers in every batch (needs acks=all; Kafka allows at most 5 in flight).
    #[arg(long)]
    pub idempotent: bool,
}

#[derive(Args, Debug, Clone)]
pub struct E2eArgs {
    #[command(flatten)]
    pub common: Common,
    /// Messages per second, in total.
    #[arg(long, default_value_t = 200)]
    pub rate: u64,
    /// Seconds of producing.
    #[arg(long, default_value_t = 20)]
    pub secs: u64,
    /// Value size in bytes (at least 16).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: i16,
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Produce requests in flight per connection (each message is its own request).
    #[arg(long, default_value_t = 5)]
    pub in_flight: usize,
    /// Fetch max_wait_ms (long poll).
    #[arg(long, default_value_t = 500)]
    pub max_wait_ms: i32,
}

#[derive(Args, Debug, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Fetch partition_max_bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub partition_max_bytes: i32,
    /// Fetch max_bytes.
    #[arg(long, default_value_t = 64 << 20)]
    pub max_bytes: i32,
    /// Check the CRC-32C of every batch read.
    #[arg(long)]
    pub verify_crc: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PartitionsArgs {
    #[command(flatten)]
    pub produce: ProduceArgs,
    /// Partition counts to run, one topic each.
    #[arg(long, default_value = "8,100,1000,10000", value_delimiter = ',')]
    pub counts: Vec<i32>,
}

#[derive(Args, Debug, Clone)]
pub struct TopicsArgs {
    /// Any broker of the cluster.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Topic names are `<prefix>-<n>` (default: a fresh prefix per run).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Label copied into the RESULT lines.
    #[arg(long, default_value = "")]
    pub label: String,
    /// Topics to create.
    #[arg(long, default_value_t = 1000)]
    pub topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Topics per CreateTopics request (and per Metadata request).
    #[arg(long, default_value_t = 500)]
    pub create_batch: usize,
    /// Messages per shape; raised to (topics x partitions x --batch) so that every
    /// partition gets a batch.
    #[arg(long, default_value_t = 200_000)]
    pub messages: u64,
    /// Value size in bytes (at least 16).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Records per record batch (one batch per partition per request).
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    pub acks: i16,
    /// Request shapes to run, in order: `many` (up to --partitions-per-request batches,
    /// each for a different partition, per Produce request, as the Java client sends
    /// what its accumulator holds for a broker) and `one` (one partition per request, as
    /// librdkafka sends). `none` runs no load (memory only).
    #[arg(long, default_value = "many,one", value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Batches (partitions) per request in the `many` shape; at most the partitions a
    /// connection's leader owns.
    #[arg(long, default_value_t = 16)]
    pub partitions_per_request: usize,
    /// Produce requests in flight per connection (one connection per leader).
    #[arg(long, default_value_t = 5)]
    pub in_flight: usize,
    /// The broker's process id: its VmRSS (/proc/PID/status) goes into the results.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// The broker's admin endpoint (host:port): bytes flushed per message come from
    /// `shardlog_fsync_bytes_sum` on its /metrics.
    #[arg(long)]
    pub admin_addr: Option<String>,
    /// Before the load: produce one record to every partition and report RSS again
    /// (memory per partition with one record each).
    #[arg(long)]
    pub touch_each: bool,
    /// After set-up, time this many requests of each kind, one at a time, each about
    /// a random topic: Metadata (one topic), ListOffsets, Fetch, OffsetCommit.
    #[arg(long, default_value_t = 0)]
    pub requests: usize,
    /// Pick the timed requests' topics among the first N created only (0: among all).
    /// A few among many keeps what the broker touches per request in its caches, so
    /// what is left is what the number of topics costs by itself, apart from the cache
    /// misses of touching a random topic's memory.
    #[arg(long, default_value_t = 0)]
    pub requests_among: usize,
    /// Wait before each RSS reading (ms), so freed memory settles.
    #[arg(long, default_value_t = 1000)]
    pub settle_ms: u64,
}

fn parse_acks(s: &str) -> Result<i16, String> {
    match s {
        "all" | "-1" => Ok(-1),
        "0" => Ok(0),
        "1" => Ok(1),
        _ => Err(format!("acks must be 0, 1 or all, not {s}")),
    }
}
