//! Client side of the native Kafka load generator (`shardlog-load`).
//!
//! Plain std TCP, one blocking thread per connection: no async runtime, so the client's
//! own cost per request is a syscall pair plus encoding, and what the figures measure is
//! the broker. Not a hot path in the broker sense, but the producer loop allocates only
//! per request (the request buffer), never per record.

pub mod cluster;
pub mod conn;
/// Kafka's default partitioner now lives in `net`, shared with the admin CLI.
pub use shardlog_net::partitioner;
pub mod record_batch;
