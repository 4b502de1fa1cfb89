//! Retention on each shard: every `retention_check_interval`, each local partition's
//! `retention.ms` / `retention.bytes` (Kafka's names and semantics, -1 = unlimited) move its
//! log start offset forward by whole batches; segment files are freed by the log once no
//! partition needs them and a checkpoint covers them. Topics whose `cleanup.policy` does not
//! list `delete` (compact only) are never trimmed by retention.
//!
//! A pass visits every local partition, so it is linear in their number. It runs on the
//! shard's executor beside the requests, so it gives way every `PER_TURN` partitions: at
//! 200,000 partitions a pass in one piece held the executor for ~200 ms (the requests on
//! that shard waited as long, every interval; docs/benchmarks.md "Background passes").

use std::rc::Rc;

use shardlog_storage::{PartitionId, RetentionPolicy};

use crate::producer_log::wall_ms;
use crate::runtime::Turns;
use crate::shard::Shard;
use crate::topic_config::CleanupPolicy;

/// Topics and partitions a retention pass visits between two yields: ~20-50 µs of work on
/// this VM, well under a request's own time.
const PER_TURN: usize = 256;

impl Shard {
    /// Applies every local partition's retention once, giving way to the shard's other
    /// tasks every `PER_TURN` topics and partitions. It walks the table as it was when
    /// the pass began: a partition deleted meanwhile is skipped by the log (no such
    /// partition), one created meanwhile waits for the next pass.
    pub async fn apply_retention(&self) {
        let table = self.table();
        let now_ms = wall_ms();
        let mut turns = Turns::new(PER_TURN);
        let mut moved = false;
        for meta in table.topics.values() {
            turns.step().await;
            // cleanup.policy=compact alone: kept whatever its age or size, as in Kafka.
            if !CleanupPolicy::of(meta).delete {
                continue;
            }
            let limit = |key: &str| meta.config_i64(key).filter(|v| *v >= 0);
            let policy = RetentionPolicy {
                retention_ms: limit("retention.ms"),
                retention_bytes: limit("retention.bytes").map(|v| v as u64),
            };
            if policy.retention_ms.is_none() && policy.retention_bytes.is_none() {
                continue;
            }
            for index in self.partitions_here(meta) {
                let partition = PartitionId::new(meta.topic_number, index);
                moved |= self.log.trim_by_retention(partition, policy, now_ms);
                turns.step().await;
            }
        }
        // Once per pass: finding what no partition needs looks at every partition.
        if moved {
            self.log.release_segments();
        }
    }

    /// Runs retention every `retention_check_interval`.
    pub fn spawn_retention(self: &Rc<Self>) {
        let shard = self.clone();
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(shard.config.retention_check_interval).await;
                shard.apply_retention().await;
            }
        })
        .detach();
    }
}
