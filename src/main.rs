//! shardlog: a Kafka-API-compatible, thread-per-core, durable message broker.
//!
//! The binary reads its configuration (`config`: flags > environment > file > defaults)
//! and either starts one shard per core (`broker`) or, given a command, runs an admin tool
//! against a running broker (`cli`). Kafka API handlers live in `handlers/`, one file per
//! API.

mod admin;
mod broker;
mod cli;
mod cluster;
mod config;
mod handlers;
mod listeners;
mod port_claims;
mod shutdown;
mod tls_files;
mod users;

use config::{Config, LogFormat};

fn main() {
    let cli = config::load().unwrap_or_else(|message| {
        eprintln!("shardlog: {message}");
        std::process::exit(2);
    });
    if let Some(command) = cli.command {
        std::process::exit(cli::run(command, &cli.admin));
    }
    if cli.print_config {
        if let Err(message) = config::to_toml(&cli.config).and_then(|text| cli::emit(&text)) {
            eprintln!("shardlog: cannot print the configuration: {message}");
            std::process::exit(1);
        }
        return;
    }
    init_logging(&cli.config);
    if let Err(message) = broker::run(cli.config) {
        tracing::error!("{message}");
        eprintln!("shardlog: {message}");
        // Shard threads may be exiting too: one exit at a time.
        shardlog_shards::runtime::exit_process(1);
    }
}

/// Logs go to stderr, human-readable or one JSON object per line (`--log-format`).
fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHARDLOG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Human => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            builder.with_ansi(ansi).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
