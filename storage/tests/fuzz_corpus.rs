//! The recovery fuzz target's sample log image, and the seed writer of the `batch` and
//! `recover` corpora (`fuzz/README.md`). The corpus itself is replayed by the workspace
//! root's `tests/fuzz_corpus.rs`.

mod common;

use std::path::PathBuf;

use bytes::Bytes;
use common::batch_of;
use shardlog_storage::fuzzing;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target)
}

#[test]
fn the_sample_log_image_recovers_to_its_batches() {
    // The recovery target is not vacuous: a log image written by ShardLog replays whole.
    let image = fuzzing::sample_log_image(&sample_batches());
    assert!(image.len() > fuzzing::FUZZ_SEGMENT_BYTES as usize, "the sample spans segments");
    let report = fuzzing::recover_report(&image).expect("the sample log opens");
    // 24 batches and 8 internal entries; pads are not counted.
    assert_eq!(report.replayed_entries, 32, "{report:?}");
    assert_eq!(report.truncated_at, None, "{report:?}");
}

fn sample_batches() -> Vec<Bytes> {
    (0..24).map(|i| batch_of(1 + i % 5, 40 + 70 * (i % 4), i as u64, 1_000 + i as i64)).collect()
}

/// Writes the seed inputs of the `batch` and `recover` targets (run once by hand:
/// `cargo test --release -p shardlog-storage --test fuzz_corpus -- --ignored`).
#[test]
#[ignore]
fn write_seed_corpus() {
    let batches = sample_batches();
    let write = |target: &str, name: &str, data: &[u8]| {
        std::fs::create_dir_all(corpus_dir(target)).unwrap();
        std::fs::write(corpus_dir(target).join(name), data).unwrap();
    };
    for (i, batch) in batches.iter().take(6).enumerate() {
        let flags = (i % 2) as u8 * fuzzing::FIX_BATCH_CRCS;
        write("batch", &format!("seed-one-batch-{i}"), &[&[flags][..], batch].concat());
    }
    let mut several = vec![fuzzing::FIX_BATCH_CRCS];
    several.extend(batches[..4].iter().flat_map(|b| b.to_vec()));
    write("batch", "seed-four-batches", &several);
    let image = fuzzing::sample_log_image(&batches);
    write("recover", "seed-log-image", &image);
    let mut fixing = image.clone();
    fixing[0] = fuzzing::FIX_ENTRY_CRCS;
    write("recover", "seed-log-image-fix-crcs", &fixing);
    let short = fuzzing::sample_log_image(&batches[..3]);
    write("recover", "seed-short-log-image", &short);
}
