//! Finding a topic in the topic table as the request handlers do, at 8 to 50,000 topics:
//! by name (Produce, Fetch up to v12, ListOffsets, Metadata by name) through
//! `TopicTable::topic`'s hash index, beside the ordered map's lookup the handlers did before
//! it (`topics.get(name)`, a `BTreeMap<String, _>`), and by topic id (Fetch v13+, which
//! every librdkafka 2.x consumer sends; Metadata v10+ by id; DeleteTopics v6+), through
//! `TopicTable::topic_by_id`'s index, beside the linear scan over every topic the handlers
//! did before it (`topics.values().find(..)`), kept here as the baseline.
//!
//! Run: `cargo bench -p shardlog-benches --bench topic_lookup`. Under `cargo test`
//! (criterion's test mode) each case runs once.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use shardlog_shards::metadata::{NewTopic, TopicTable};

fn table(topics: usize) -> (TopicTable, Vec<([u8; 16], String)>) {
    let mut table = TopicTable::new(2);
    for i in 0..topics {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        let topic = NewTopic {
            name: format!("topic-{i:06}"),
            num_partitions: 4,
            replication_factor: 1,
            configs: Vec::new(),
        };
        table.add_topic(&topic, id);
    }
    // Asked for in a scattered order, as many consumers would.
    let mut asked: Vec<_> = table.topics.values().map(|t| (t.topic_id, t.name.clone())).collect();
    let len = asked.len();
    asked.sort_by_key(|(id, _)| *id);
    asked.truncate(len.min(1024));
    (table, asked)
}

fn lookups(c: &mut Criterion) {
    let mut group = c.benchmark_group("topic_lookup");
    for topics in [8, 1_000, 10_000, 50_000] {
        let (table, asked) = table(topics);
        let mut next = asked.iter().cycle();
        group.bench_function(BenchmarkId::new("by_name", topics), |b| {
            b.iter(|| table.topic(&next.next().unwrap().1).is_some())
        });
        group.bench_function(BenchmarkId::new("by_name_ordered_map", topics), |b| {
            b.iter(|| table.topics.contains_key(&next.next().unwrap().1))
        });
        group.bench_function(BenchmarkId::new("by_id_index", topics), |b| {
            b.iter(|| table.topic_by_id(next.next().unwrap().0).is_some())
        });
        group.bench_function(BenchmarkId::new("by_id_scan", topics), |b| {
            b.iter(|| {
                let id = next.next().unwrap().0;
                table.topics.values().any(|t| t.topic_id == id)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookups);
criterion_main!(benches);
