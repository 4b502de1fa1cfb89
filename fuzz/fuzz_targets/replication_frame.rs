#![no_main]

// The body lives in the library so that a plain test replays the corpus (fuzz/README.md).
libfuzzer_sys::fuzz_target!(|data: &[u8]| shardlog_shards::replication::frame::fuzz_decode(data));
