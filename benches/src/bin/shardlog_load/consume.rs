//! `consume` / `replay` mode, and the Fetch loop `e2e` shares: one thread per partition
//! leader, each fetching all of its partitions in one request, from offset 0.

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use shardlog_benches::load::cluster::{self, topic_name};
use shardlog_benches::load::conn::Connection;
use shardlog_benches::load::record_batch::batches;

use crate::args::ConsumeArgs;
use crate::report::{mb_per_s, Report};

/// Fetch settings for one connection.
#[derive(Clone)]
pub struct FetchSettings {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub partition_max_bytes: i32,
    pub max_bytes: i32,
}

/// Reads one leader's partitions; `on_value(partition, offset, value)` sees each record.
pub struct PartitionReader {
    conn: Connection,
    version: i16,
    topic: String,
    /// (partition, next offset, high watermark seen last, -1 before the first answer)
    positions: Vec<(i32, i64, i64)>,
    settings: FetchSettings,
    pub batches: u64,
    pub batch_bytes: u64,
    pub crc_failures: u64,
}

impl PartitionReader {
    pub fn new(
        leader: &str,
        topic: &str,
        partitions: &[i32],
        settings: FetchSettings,
    ) -> Result<Self, String> {
        let conn = Connection::connect(leader).map_err(|e| format!("{leader}: {e}"))?;
        let version = conn.version(ApiKey::Fetch).map_err(|e| e.to_string())?;
        Ok(PartitionReader {
            conn,
            version,
            topic: topic.to_string(),
            positions: partitions.iter().map(|&p| (p, 0, -1)).collect(),
            settings,
            batches: 0,
            batch_bytes: 0,
            crc_failures: 0,
        })
    }

    /// True once every partition's next offset reached the high watermark last seen.
    pub fn caught_up(&self) -> bool {
        self.positions.iter().all(|&(_, next, hw)| hw >= 0 && next >= hw)
    }

    /// One Fetch round trip over the partitions not yet caught up (all of them when
    /// `all`); returns how many records it delivered.
    pub fn fetch(
        &mut self,
        all: bool,
        verify_crc: bool,
        mut on_value: impl FnMut(i32, i64, &[u8]),
    ) -> Result<u64, String> {
        let partitions: Vec<FetchPartition> = self
            .positions
            .iter()
            .filter(|&&(_, next, hw)| all || hw < 0 || next < hw)
            .map(|&(partition, next, _)| {
                FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(next)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(self.settings.partition_max_bytes)
            })
            .collect();
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(self.settings.max_wait_ms)
            .with_min_bytes(self.settings.min_bytes)
            .with_max_bytes(self.settings.max_bytes)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&self.topic))
                .with_partitions(partitions)]);
        let response: FetchResponse =
            self.conn.call(&request, self.version).map_err(|e| e.to_string())?;
        if response.error_code != 0 {
            return Err(format!("fetch error {}", response.error_code));
        }
        let mut delivered = 0;
        for data in response.responses.iter().flat_map(|t| &t.partitions) {
            if data.error_code != 0 {
                return Err(format!(
                    "partition {} error {}",
                    data.partition_index, data.error_code
                ));
            }
            let Some(position) = self.positions.iter_mut().find(|p| p.0 == data.partition_index)
            else {
                continue;
            };
            position.2 = data.high_watermark;
            let Some(records) = &data.records else { continue };
            for batch in batches(records) {
                if batch.next_offset() <= position.1 {
                    continue;
                }
                self.batches += 1;
                self.batch_bytes += batch.bytes.len() as u64;
                if verify_crc && !batch.crc_ok() {
                    self.crc_failures += 1;
                }
                let from = position.1;
                let ok = batch.for_each_value(|offset, value| {
                    if offset >= from {
                        delivered += 1;
                        on_value(data.partition_index, offset, value);
                    }
                });
                if !ok {
                    return Err(format!("malformed batch at offset {}", batch.base_offset));
                }
                position.1 = batch.next_offset();
            }
        }
        Ok(delivered)
    }
}

pub fn run_mode(args: &ConsumeArgs) -> Result<(), String> {
    let topic = args.common.topic.clone().ok_or("consume needs --topic")?;
    let mut bootstrap = Connection::connect(&args.common.bootstrap)
        .map_err(|e| format!("{}: {e}", args.common.bootstrap))?;
    let layout = cluster::layout(&mut bootstrap, &topic)
        .map_err(|e| e.to_string())?
        .ok_or(format!("topic {topic} has no leaders"))?;
    let settings = FetchSettings {
        max_wait_ms: 100,
        min_bytes: 1,
        partition_max_bytes: args.partition_max_bytes,
        max_bytes: args.max_bytes,
    };
    let mut readers = Vec::new();
    for (leader, partitions) in layout.by_leader() {
        readers.push(PartitionReader::new(&leader, &topic, &partitions, settings.clone())?);
    }
    let started = Instant::now();
    let verify = args.verify_crc;
    let handles: Vec<_> = readers
        .into_iter()
        .map(|mut reader| {
            std::thread::spawn(move || -> Result<(u64, u64, PartitionReader), String> {
                let (mut records, mut value_bytes) = (0u64, 0u64);
                let deadline = Instant::now() + Duration::from_secs(600);
                while !reader.caught_up() && Instant::now() < deadline {
                    records +=
                        reader.fetch(false, verify, |_, _, v| value_bytes += v.len() as u64)?;
                }
                Ok((records, value_bytes, reader))
            })
        })
        .collect();
    let (mut records, mut value_bytes, mut batch_bytes, mut crc_failures) = (0, 0, 0, 0);
    for handle in handles {
        let (r, v, reader) = handle.join().map_err(|_| "a consumer thread panicked")??;
        records += r;
        value_bytes += v;
        batch_bytes += reader.batch_bytes;
        crc_failures += reader.crc_failures;
    }
    let elapsed = started.elapsed();
    let mut report = Report::new("consume", &args.common.label);
    report
        .add("topic", &topic)
        .add("partitions", layout.leaders.len())
        .add("records", records)
        .add_f("elapsed_ms", elapsed.as_secs_f64() * 1e3)
        .add_f("msg_per_s", records as f64 / elapsed.as_secs_f64())
        .add_f("mb_per_s", mb_per_s(value_bytes, elapsed))
        .add_f("wire_mb_per_s", mb_per_s(batch_bytes, elapsed));
    if verify {
        report.add("crc_failures", crc_failures);
    }
    report.print();
    Ok(())
}
