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
fn every_legacy_message_set_in_the_fuzz_corpus_converts_or_fails_without_panicking() {
    let replayed = replay("legacy", net::legacy_message_set);
    assert!(replayed >= 8, "only {replayed} legacy inputs: is fuzz/corpus/legacy committed?");
}

#[test]
fn every_sasl_exchange_in_the_fuzz_corpus_ends_in_a_step_or_a_failure_without_panicking() {
    let replayed = replay("sasl", net::sasl);
    assert!(replayed >= 10, "only {replayed} sasl inputs: is fuzz/corpus/sasl committed?");
}

/// Writes the seeds of the `legacy` target: message sets of both magics, plain and with
/// each codec (to convert up), and their converted batches (to convert down). Run once by
/// hand: `cargo test --release -p shardlog --test fuzz_corpus -- --ignored`.
#[test]
#[ignore]
fn write_legacy_seed_corpus() {
    use shardlog_net::legacy_format::{
        encode_message_set, message_set_to_record_batch, Codec, LegacyMessage,
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/legacy");
    std::fs::create_dir_all(&dir).unwrap();
    for magic in [0u8, 1] {
        let messages: Vec<LegacyMessage> = (0..3)
            .map(|i| LegacyMessage {
                offset: i,
                magic: magic as i8,
                attributes: 0,
                timestamp: if magic == 0 { -1 } else { 1000 + i },
                key: (i != 0).then(|| bytes::Bytes::from(format!("k{i}"))),
                value: Some(bytes::Bytes::from(format!("value {i}"))),
            })
            .collect();
        for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4] {
            let set = encode_message_set(&messages, codec);
            let batch = message_set_to_record_batch(&set, 1 << 20).unwrap();
            let name = format!("seed-magic{magic}-{codec:?}");
            std::fs::write(dir.join(format!("{name}-up")), [&[magic << 1][..], &set].concat())
                .unwrap();
            let down = [&[1 | (magic << 1)][..], &batch].concat();
            std::fs::write(dir.join(format!("{name}-down")), down).unwrap();
        }
    }
}

#[test]
fn every_replication_frame_in_the_fuzz_corpus_decodes_or_fails_without_panicking() {
    let replayed = replay("replication_frame", shardlog_shards::replication::frame::fuzz_decode);
    assert!(replayed >= 6, "only {replayed} inputs: is fuzz/corpus/replication_frame committed?");
}

/// Writes the seeds of the `replication_frame` target: a hello, frames of the raft
/// messages a group sends (appends with entries, votes, heartbeats, a snapshot), several
/// groups, leader notices, an empty frame and two frames back to back. Run once by hand:
/// `cargo test --release -p shardlog --test fuzz_corpus -- --ignored`.
#[test]
#[ignore]
fn write_replication_frame_seed_corpus() {
    use shardlog_shards::replication::frame::{FrameEncoder, Hello};
    use shardlog_shards::replication::notice::{self, LeaderNotice};
    use shardlog_shards::replication::{Entry, Message, MessageType, Snapshot};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/replication_frame");
    std::fs::create_dir_all(&dir).unwrap();
    let message = |msg_type: MessageType, entries: usize| {
        let mut message = Message::default();
        message.set_msg_type(msg_type);
        (message.from, message.to, message.term, message.index) = (1, 2, 3, 40);
        (message.log_term, message.commit) = (2, 39);
        message.entries = (0..entries as u64)
            .map(|k| Entry {
                index: 41 + k,
                term: 3,
                data: format!("batch {k}").into_bytes().into(),
                ..Default::default()
            })
            .collect::<Vec<_>>()
            .into();
        message
    };
    let frame = |messages: &[(u64, Message)]| {
        let mut encoder = FrameEncoder::new(1, 0);
        for (group, message) in messages {
            assert!(encoder.push(*group, message));
        }
        encoder.finish()
    };
    let mut snapshot = Snapshot::default();
    snapshot.mut_metadata().index = 40;
    snapshot.mut_metadata().term = 2;
    snapshot.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
    let mut with_snapshot = message(MessageType::MsgSnapshot, 0);
    with_snapshot.set_snapshot(snapshot);
    let appends = frame(&[(1, message(MessageType::MsgAppend, 3))]);
    let votes = frame(&[
        (1, message(MessageType::MsgRequestPreVote, 0)),
        (2, message(MessageType::MsgRequestVote, 0)),
        (3, message(MessageType::MsgRequestVoteResponse, 0)),
    ]);
    let heartbeats = frame(&[
        (1, message(MessageType::MsgHeartbeat, 0)),
        (1, message(MessageType::MsgHeartbeatResponse, 0)),
        (u64::MAX, message(MessageType::MsgAppendResponse, 0)),
    ]);
    let notices = notice::encode(&[
        LeaderNotice { group: 1 << 63 | 7, leader: 2, term: 5, isr: vec![1, 2] },
        LeaderNotice { group: 1 << 63 | 9, leader: 2, term: 1, isr: vec![2] },
    ]);
    let mut with_notices = Message::default();
    with_notices.set_context(notices.into());
    let seeds = [
        ("seed-leader-notices", frame(&[(notice::NOTICE_GROUP, with_notices)])),
        ("seed-hello", Hello { node_id: 1, shard: 0, shard_count: 8 }.encode().to_vec()),
        ("seed-append-with-entries", appends.clone()),
        ("seed-votes-of-three-groups", votes),
        ("seed-heartbeats", heartbeats.clone()),
        ("seed-snapshot", frame(&[(1, with_snapshot)])),
        ("seed-empty-frame", frame(&[])),
        ("seed-two-frames", [appends, heartbeats].concat()),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
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
