//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`, see `fuzz/README.md`)
//! through the same functions the fuzz targets run, so every `cargo test` covers every
//! input the fuzzer kept, including the reproducers of the bugs it found.

use std::path::PathBuf;

use shardlog_net::fuzzing as net;
use shardlog_storage::fuzzing as storage;

/// Runs `body` on every file of `fuzz/corpus/<target>`; returns how many there were.
fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut replayed = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        // Printed (shown on failure) so a crashing input names itself.
        println!("{}", path.display());
        body(&data);
        replayed += 1;
    }
    replayed
}

#[test]
fn every_frame_in_the_fuzz_corpus_decodes_or_fails_without_panicking() {
    let replayed = replay("frame", net::frame);
    assert!(replayed >= 80, "only {replayed} frame inputs: is fuzz/corpus/frame committed?");
}

#[test]
fn every_request_in_the_fuzz_corpus_decodes_or_fails_without_panicking() {
    let replayed = replay("request", net::request);
    assert!(replayed >= 80, "only {replayed} request inputs: is fuzz/corpus/request committed?");
}

#[test]
fn every_batch_in_the_fuzz_corpus_validates_or_fails_without_panicking() {
    let replayed = replay("batch", storage::batches);
    assert!(replayed >= 5, "only {replayed} batch inputs: is fuzz/corpus/batch committed?");
}

#[test]
fn every_log_image_in_the_fuzz_corpus_recovers_or_fails_without_panicking() {
    let replayed = replay("recover", storage::recover);
    assert!(replayed >= 2, "only {replayed} log images: is fuzz/corpus/recover committed?");
}
