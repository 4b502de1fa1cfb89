//! The newcomer's start: the broker with no `--data-dir` (default `./data`) or a relative
//! one, from a fresh working directory, serves a real client and keeps its data across a
//! restart. Every other test passes an absolute temp dir, which is how issue 22 (glommio
//! opening relative paths against fd -1) went unseen.

mod common;

use common::{create_topic, produce_tagged, read_topic, Broker, DataDirFlag};

fn serves_and_survives_a_restart(flag: DataDirFlag) {
    let mut broker = Broker::start_in_working_dir(2, flag, &[]);
    create_topic(&broker, "newcomer", 3);
    produce_tagged(&broker, "newcomer", 3, "before", 30);
    broker.kill_and_restart();
    produce_tagged(&broker, "newcomer", 3, "after", 30);

    let stored = read_topic(&broker, "newcomer", 3);
    let values: Vec<String> =
        stored.values().flatten().map(|(_, v)| String::from_utf8(v.clone()).unwrap()).collect();
    assert_eq!(values.len(), 60, "stored: {stored:?}");
    for tag in ["before", "after"] {
        for i in 0..30 {
            assert!(values.contains(&format!("{tag}-{i}")), "{tag}-{i} missing: {values:?}");
        }
    }
    // The data is where the flag said, and the start-up line names it absolutely.
    let shard_dir = broker.data_dir().join("shard-000");
    assert!(shard_dir.is_dir(), "{} missing", shard_dir.display());
    let resolved = std::fs::canonicalize(broker.data_dir()).unwrap();
    assert!(
        broker.log().contains(&format!("data_dir={}", resolved.display())),
        "start-up line should name {}:\n{}",
        resolved.display(),
        broker.log()
    );
}

#[test]
fn the_default_data_dir_serves_a_client_and_survives_a_restart() {
    serves_and_survives_a_restart(DataDirFlag::Omitted);
}

#[test]
fn a_relative_data_dir_serves_a_client_and_survives_a_restart() {
    serves_and_survives_a_restart(DataDirFlag::Relative("nested/relative-data"));
}
