//! shardlog-net: the Kafka wire layer.
//!
//! Runs on every shard: each accepted connection is served by the shard whose listener
//! accepted it. This crate frames requests (4-byte big-endian length prefix), decodes them
//! with the `kafka-protocol` crate, hands them to a [`RequestHandler`] supplied by the
//! binary, and writes responses back in request order.
//!
//! Hot path: yes (every request). Per request it allocates the frame buffer and the
//! decoded request; response bytes are encoded into one buffer per response.
//!
//! Rooms: `net` never touches a file and never talks to another shard; it knows sockets
//! and bytes only. Error policy: a frame that cannot be parsed closes that one connection
//! (logged), nothing else.
//!
//! Invariants:
//! 1. A frame larger than `max_frame_bytes` is refused before it is buffered.
//! 2. Responses leave in the order their requests arrived (Kafka's per-connection ordering).
//! 3. At most `max_in_flight` requests of one connection are read and not yet answered;
//!    at the limit the connection reads nothing more until the oldest is answered.
//! 4. Per shard: at most `max_connections_per_shard` connections, and produce bytes read
//!    but not yet answered within the shard's budget (`limits.rs`).
//! 5. TLS handshakes are bounded per shard in number and time (`tls.rs`); plaintext
//!    connections never pass through TLS code.

mod codec;
mod connection;
pub mod fuzzing;
pub mod legacy_format;
mod limits;
pub mod partitioner;
pub mod sasl;
pub mod tls;

pub use codec::{decode_request, encode_request, encode_response, DecodeError, Request};
pub use connection::{serve_connection, ConnectionLimits, Reply, RequestHandler, RequestStages};
pub use kafka_protocol;
pub use limits::{ConnectionSlot, ConnectionSlots, ProduceBudget};
