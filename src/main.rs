//! shardlog: a Kafka-API-compatible, thread-per-core, durable message broker.
//!
//! The binary parses the configuration, checks that its ports are free, and starts one
//! shard per core (`broker`). Kafka API handlers live in `handlers/`, one file per API.

mod admin;
mod broker;
mod config;
mod handlers;
mod shutdown;

use clap::Parser;

fn main() {
    let config = config::Config::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHARDLOG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    if let Err(message) = broker::run(config) {
        tracing::error!("{message}");
        eprintln!("shardlog: {message}");
        std::process::exit(1);
    }
}
