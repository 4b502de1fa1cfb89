//! `shardlog txn list|describe`: transactions (KIP-664's ListTransactions and
//! DescribeTransactions). Each shard is a broker and coordinates its own transactional
//! ids, so `list` asks every broker in the metadata and `describe` asks the id's
//! coordinator (FindCoordinator, key type 1), as Kafka's kafka-transactions.sh does.

use clap::Subcommand;
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use serde::Serialize;

use super::output::{print_json, Table};
use super::{check, emit, metadata, str_bytes, AdminArgs, Client, OutputFormat};

#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// List the transactional ids of every shard, with their state.
    List,
    /// Show a transactional id's state, producer, timeout, start time and partitions.
    Describe { transactional_id: String },
}

pub fn run(command: TxnCommand, admin: &AdminArgs) -> Result<(), String> {
    let mut client = admin.connect()?;
    match command {
        TxnCommand::List => list(&mut client, admin.format),
        TxnCommand::Describe { transactional_id } => {
            describe(&mut client, admin.format, &transactional_id)
        }
    }
}

#[derive(Serialize)]
struct TxnSummary {
    transactional_id: String,
    producer_id: i64,
    state: String,
    coordinator: i32,
}

fn list(client: &mut Client, format: OutputFormat) -> Result<(), String> {
    let brokers = metadata(client, Some(&[]))?.brokers;
    let mut txns = Vec::new();
    for broker in brokers {
        let addr = format!("{}:{}", broker.host, broker.port);
        let response = client.connect_to(&addr)?.call(&ListTransactionsRequest::default())?;
        check(response.error_code, &format!("transactions of broker {addr}"), None)?;
        txns.extend(response.transaction_states.into_iter().map(|t| TxnSummary {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: t.producer_id.0,
            state: t.transaction_state.to_string(),
            coordinator: broker.node_id.0,
        }));
    }
    txns.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    match format {
        OutputFormat::Json => print_json(&txns),
        OutputFormat::Table => {
            let header = ["TRANSACTIONAL_ID", "PRODUCER_ID", "STATE", "COORDINATOR"];
            let mut table = Table::new(&header);
            for t in &txns {
                table.row(vec![
                    t.transactional_id.clone(),
                    t.producer_id.to_string(),
                    t.state.clone(),
                    t.coordinator.to_string(),
                ]);
            }
            emit(&table.render())
        }
    }
}

#[derive(Serialize)]
struct TxnDescription {
    transactional_id: String,
    state: String,
    producer_id: i64,
    producer_epoch: i16,
    timeout_ms: i32,
    /// Wall-clock ms when the open transaction began; None when none is open.
    start_time_ms: Option<i64>,
    coordinator: i32,
    /// "topic-partition" of every partition in the open transaction.
    partitions: Vec<String>,
}

fn describe(client: &mut Client, format: OutputFormat, id: &str) -> Result<(), String> {
    let subject = format!("transactional id '{id}'");
    let request = FindCoordinatorRequest::default().with_key(str_bytes(id)).with_key_type(1);
    let found = client.call(&request)?;
    check(found.error_code, &format!("coordinator of {subject}"), found.error_message.as_deref())?;
    let mut coordinator = client.connect_to(&format!("{}:{}", found.host, found.port))?;
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![kafka_protocol::messages::TransactionalId(str_bytes(id))]);
    let response = coordinator.call(&request)?;
    let t = response.transaction_states.into_iter().next().ok_or("no description")?;
    check(t.error_code, &subject, None)?;
    let partitions = t
        .topics
        .iter()
        .flat_map(|topic| topic.partitions.iter().map(move |p| format!("{}-{p}", topic.topic.0)))
        .collect();
    let described = TxnDescription {
        transactional_id: id.to_string(),
        state: t.transaction_state.to_string(),
        producer_id: t.producer_id.0,
        producer_epoch: t.producer_epoch,
        timeout_ms: t.transaction_timeout_ms,
        start_time_ms: (t.transaction_start_time_ms >= 0).then_some(t.transaction_start_time_ms),
        coordinator: found.node_id.0,
        partitions,
    };
    match format {
        OutputFormat::Json => print_json(&described),
        OutputFormat::Table => {
            let d = &described;
            let mut table = Table::new(&["FIELD", "VALUE"]);
            let start = d.start_time_ms.map_or("-".to_string(), |ms| ms.to_string());
            for (field, value) in [
                ("transactional_id", d.transactional_id.clone()),
                ("state", d.state.clone()),
                ("producer_id", d.producer_id.to_string()),
                ("producer_epoch", d.producer_epoch.to_string()),
                ("timeout_ms", d.timeout_ms.to_string()),
                ("start_time_ms", start),
                ("coordinator", d.coordinator.to_string()),
                ("partitions", d.partitions.join(",")),
            ] {
                table.row(vec![field.to_string(), value]);
            }
            emit(&table.render())
        }
    }
}
