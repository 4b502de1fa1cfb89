//! The admin commands of the `shardlog` binary (`shardlog topic ...`, `group ...`, `txn ...`,
//! `acl ...`,
//! `produce`, `consume`): short-lived processes that talk the Kafka protocol to a running
//! broker through a small blocking client (`client.rs`), never its files; and
//! `disk-check`, which measures the data dir's disk (`disk_check.rs`).
//!
//! Not a hot path. Errors are messages for a person: what went wrong to what, with Kafka's
//! error name (`errors.rs`); every failure exits non-zero, none panics.

mod acl;
mod client;
mod disk_check;
pub(crate) mod errors;
pub(crate) mod group;
mod output;
mod records;
mod security;
mod topic;
mod txn;
mod user;

use std::io::Write;

use clap::{Args, Subcommand};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseTopic};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

pub use client::Client;
pub use errors::{api_error, check};
pub use output::OutputFormat;

/// Flags shared by every admin command (accepted before or after the command).
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Admin commands: the broker to connect to (HOST:PORT).
    #[arg(long, global = true, env = "SHARDLOG_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,

    /// Admin commands: print tables for people or JSON for scripts.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,

    /// Admin commands: Kafka client properties (security.protocol, sasl.*, ssl.*; as
    /// Kafka's tools' --command-config). The flags below win over the file.
    #[arg(long, global = true, env = "SHARDLOG_COMMAND_CONFIG", value_name = "PATH")]
    pub command_config: Option<std::path::PathBuf>,

    /// Admin commands: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: PLAINTEXT, or
    /// SASL_PLAINTEXT with --sasl-username).
    #[arg(long, global = true, env = "SHARDLOG_SECURITY_PROTOCOL", value_name = "PROTOCOL")]
    pub security_protocol: Option<String>,

    /// Admin commands: log in with SASL as this user.
    #[arg(long, global = true, env = "SHARDLOG_SASL_USERNAME", value_name = "NAME")]
    pub sasl_username: Option<String>,

    /// Admin commands: the password of --sasl-username (prefer the environment variable).
    #[arg(long, global = true, env = "SHARDLOG_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<String>,

    /// Admin commands: the SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default).
    #[arg(long, global = true, env = "SHARDLOG_SASL_MECHANISM", value_name = "MECHANISM")]
    pub sasl_mechanism: Option<String>,

    /// Admin commands: CA certificates (PEM) that sign the broker's certificate (SSL).
    #[arg(long, global = true, env = "SHARDLOG_SSL_CA_LOCATION", value_name = "PATH")]
    pub ssl_ca_location: Option<String>,

    /// Admin commands: a client certificate chain (PEM) for brokers that ask for one.
    #[arg(long, global = true, env = "SHARDLOG_SSL_CERTIFICATE_LOCATION", value_name = "PATH")]
    pub ssl_certificate_location: Option<String>,

    /// Admin commands: the private key (PEM, unencrypted) of --ssl-certificate-location.
    #[arg(long, global = true, env = "SHARDLOG_SSL_KEY_LOCATION", value_name = "PATH")]
    pub ssl_key_location: Option<String>,
}

impl AdminArgs {
    /// Connects to --bootstrap with the security the flags and --command-config ask for.
    pub fn connect(&self) -> Result<Client, String> {
        Client::connect(&self.bootstrap, self.security()?)
    }

    /// --command-config's properties, with the flags' values over them.
    fn security(&self) -> Result<security::ClientSecurity, String> {
        let mut properties = match &self.command_config {
            Some(path) => security::read_properties(path)?,
            None => Default::default(),
        };
        let flags = [
            ("security.protocol", &self.security_protocol),
            ("sasl.username", &self.sasl_username),
            ("sasl.password", &self.sasl_password),
            ("sasl.mechanism", &self.sasl_mechanism),
            ("ssl.ca.location", &self.ssl_ca_location),
            ("ssl.certificate.location", &self.ssl_certificate_location),
            ("ssl.key.location", &self.ssl_key_location),
        ];
        for (key, value) in flags {
            if let Some(value) = value {
                properties.insert(key.to_string(), value.clone());
            }
        }
        security::resolve(&properties)
    }
}

/// An admin command; without one, `shardlog` runs the broker.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Add, list and remove ACLs (CreateAcls, DescribeAcls, DeleteAcls).
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Create, list, describe, delete and reconfigure topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// List consumer groups, or describe one: members, assignments, committed offsets, lag.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// List transactional ids, or describe one: state, producer, partitions (KIP-664).
    #[command(subcommand)]
    Txn(txn::TxnCommand),
    /// Produce the lines of stdin as records (acks=all) and print their offsets.
    Produce(records::ProduceArgs),
    /// Print a topic's records as they arrive.
    Consume(records::ConsumeArgs),
    /// Create, delete and list SASL users (SCRAM credentials; KIP-554).
    #[command(subcommand)]
    User(user::UserCommand),
    /// Measure a durable 4 KiB write on the data dir's disk, both --log-sync ways (no
    /// broker needed; like rpk iotune).
    DiskCheck(disk_check::DiskCheckArgs),
}

/// Runs one admin command; returns the process exit code (0 on success).
pub fn run(command: Command, admin: &AdminArgs) -> i32 {
    let result = match command {
        Command::Acl(command) => acl::run(command, admin),
        Command::Topic(command) => topic::run(command, admin),
        Command::Group(command) => group::run(command, admin),
        Command::Txn(command) => txn::run(command, admin),
        Command::Produce(args) => records::produce(args, admin),
        Command::Consume(args) => records::consume(args, admin),
        Command::User(command) => user::run(command, admin),
        Command::DiskCheck(args) => return disk_check::run(args),
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("shardlog: {message}");
            1
        }
    }
}

/// Writes to stdout; a closed stdout (`| head`) is an error, not a panic as in `print!`.
pub fn emit(text: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Metadata of every topic (`None`) or of the named ones, never creating a topic.
pub fn metadata(client: &mut Client, topics: Option<&[&str]>) -> Result<MetadataResponse, String> {
    let topics = topics.map(|names| {
        names
            .iter()
            .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
            .collect()
    });
    let request =
        MetadataRequest::default().with_topics(topics).with_allow_auto_topic_creation(false);
    client.call(&request)
}

/// One topic's metadata; a topic the broker does not know is an error.
pub fn topic_metadata(client: &mut Client, name: &str) -> Result<MetadataResponseTopic, String> {
    let response = metadata(client, Some(&[name]))?;
    let topic = response
        .topics
        .into_iter()
        .next()
        .ok_or_else(|| format!("the broker's metadata does not mention topic '{name}'"))?;
    check(topic.error_code, &format!("topic '{name}'"), None)?;
    Ok(topic)
}

/// Kafka's special ListOffsets timestamps.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

/// The offset of each of `partitions` of `topic` at `timestamp` (`EARLIEST`: the log start
/// offset; `LATEST`: the high watermark), in the order given.
pub fn list_offsets(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> Result<Vec<i64>, String> {
    let request_partitions = partitions
        .iter()
        .map(|p| ListOffsetsPartition::default().with_partition_index(*p).with_timestamp(timestamp))
        .collect();
    let request = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(request_partitions),
    ]);
    let response = client.call(&request)?;
    let answered: Vec<_> = response.topics.into_iter().flat_map(|t| t.partitions).collect();
    partitions
        .iter()
        .map(|p| {
            let answer = answered
                .iter()
                .find(|a| a.partition_index == *p)
                .ok_or_else(|| format!("no offset for partition {p} of topic '{topic}'"))?;
            check(answer.error_code, &format!("partition {p} of topic '{topic}'"), None)?;
            Ok(answer.offset)
        })
        .collect()
}

/// Splits `k=v` (`--config`, `--set`).
pub fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got '{text}'")),
    }
}
