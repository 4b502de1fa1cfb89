//! `shardlog-load`: a native Kafka load generator for shardlog and any Kafka-API broker.
//!
//! It speaks the Kafka protocol itself (the `kafka-protocol` crate for requests, v2
//! record batches built by hand) over plain std TCP with one thread per connection, so
//! the client costs little next to the broker. It follows Metadata: each partition's
//! traffic goes to its leader (on shardlog, the port of the shard that owns it).
//! Latencies go into HdrHistograms (microseconds).
//!
//! Modes: `produce`, `e2e`, `consume` (alias `replay`), `partitions`, `topics`. Each
//! prints a human table and a machine-readable `RESULT mode=... key=value` line on stdout;
//! errors go to stderr with a non-zero exit.

mod args;
mod consume;
mod e2e;
mod probe;
mod produce;
mod report;
mod requests;
mod topics;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Mode};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.mode {
        Mode::Produce(args) => produce::run_mode(&args),
        Mode::E2e(args) => e2e::run_mode(&args),
        Mode::Consume(args) | Mode::Replay(args) => consume::run_mode(&args),
        Mode::Partitions(args) => produce::run_partitions_mode(&args),
        Mode::Topics(args) => topics::run_mode(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shardlog-load: {e}");
            ExitCode::FAILURE
        }
    }
}
