//! Shared pieces of the shardlog benchmarks.
//!
//! [`load`] is the client side of `shardlog-load`, the native Kafka load generator: v2
//! record batches built by hand, blocking Kafka connections over std TCP, cluster
//! metadata and the partitioner. The criterion benches reuse the record-batch writer.

pub mod load;
