//! Topic churn for the power-loss test: the metadata log under power loss.
//!
//! Each shard runs a loop of topic requests through the controller, as fast as they are
//! answered, interleaved with the produce and commit workload: create a topic (1-3
//! partitions, a `retention.ms`), change its `retention.ms` (AlterConfigs), add
//! partitions, delete it. The controller's snapshot policy is drawn per incarnation
//! (a snapshot every 1-40 changes or 0-4 KiB), so power losses land between change
//! records, snapshots in flight and checkpoints. Churn topics are never produced to.
//!
//! Checked after every restart, against shard 0's table: every acknowledged churn topic
//! exists with its topic number, partition count and `retention.ms` (or the values of the
//! one request in flight on it when the power went); no deleted topic is back; no topic
//! exists that was never asked for. After an answer, the asking shard's own copy already
//! shows the change (the change record reached it before the answer).

use super::*;
use shardlog_shards::metadata_log::SnapshotPolicy;
use shardlog_shards::topic_config::{ConfigChange, TopicConfigChange};

/// A request sent and not answered (or answered after the power went).
#[derive(Clone, Debug, PartialEq)]
pub enum ChurnOp {
    Create,
    Delete,
    Partitions(usize),
    Retention(String),
}

/// One churn topic as the clients saw it.
#[derive(Clone, Debug)]
pub struct ChurnTopic {
    /// The shard whose loop owns it (only that loop sends requests about it).
    shard: usize,
    created: bool,
    deleted: bool,
    topic_number: u32,
    partitions: usize,
    retention_ms: String,
    pending: Option<ChurnOp>,
}

pub const PREFIX: &str = "churn-";

/// The controller's snapshot policy for one incarnation (its own generator, so the
/// workload's draws stay what they were).
pub fn snapshot_policy(seed: u64, number: u64) -> SnapshotPolicy {
    let mut rng = XorShift::new(seed ^ (number << 40) ^ 0x3E7A_10C5);
    SnapshotPolicy { max_changes: 1 + rng.below(40), min_change_bytes: rng.below(4096) }
}

pub fn spawn(world: &Arc<Incarnation>, shard: &Rc<Shard>) {
    let (world, shard) = (world.clone(), shard.clone());
    glommio::spawn_local(async move { churn_loop(&world, &shard).await }).detach();
}

async fn churn_loop(world: &Incarnation, shard: &Rc<Shard>) {
    let mut rng = world.rng(shard.id, 71);
    for k in 0.. {
        for _ in 0..2 + rng.below(8) {
            futures_lite::future::yield_now().await;
        }
        if world.off() {
            power_gone().await;
        }
        let mine: Vec<String> = {
            let model = world.model.lock().unwrap();
            let live = model.churn.iter().filter(|(_, t)| {
                t.shard == shard.id && t.created && !t.deleted && t.pending.is_none()
            });
            live.map(|(name, _)| name.clone()).collect()
        };
        if mine.len() < 3 || rng.chance(2, 5) {
            let name = format!("{PREFIX}{}-{}-{k}", world.number, shard.id);
            create(world, shard, name, 1 + rng.below(3) as usize, rng.below(1000)).await;
            continue;
        }
        let name = mine[rng.below(mine.len() as u64) as usize].clone();
        match rng.below(10) {
            0..=4 => alter(world, shard, name, rng.below(1000).to_string()).await,
            5..=6 => add_partitions(world, shard, name, 1 + rng.below(2) as usize).await,
            _ => delete(world, shard, name).await,
        }
    }
}

/// Marks the op in flight on `name` (or a new topic); returns nothing.
fn begin(world: &Incarnation, name: &str, op: ChurnOp, new: Option<ChurnTopic>) {
    let mut model = world.model.lock().unwrap();
    if let Some(topic) = new {
        model.churn.insert(name.to_string(), topic);
    }
    model.churn.get_mut(name).unwrap().pending = Some(op);
}

/// After an answer: the op is acknowledged (or the power went and it stays pending).
async fn answered(
    world: &Incarnation,
    shard: &Shard,
    name: &str,
    result: Result<(), shardlog_shards::TopicError>,
) {
    if world.off() {
        power_gone().await;
    }
    if let Err(e) = result {
        return world.fail(format!("churn request on {name}: {e}"));
    }
    let local = shard.topic(name);
    let mut model = world.model.lock().unwrap();
    let topic = model.churn.get_mut(name).unwrap();
    match topic.pending.take().unwrap() {
        ChurnOp::Create => {
            topic.created = true;
            topic.topic_number = local.as_ref().map_or(0, |m| m.topic_number);
        }
        ChurnOp::Delete => topic.deleted = true,
        ChurnOp::Partitions(count) => topic.partitions = count,
        ChurnOp::Retention(value) => topic.retention_ms = value,
    }
    let seen = local.map(|m| {
        (
            m.topic_number,
            m.partition_shards.len(),
            m.explicit_config("retention.ms").map(str::to_string),
        )
    });
    let expected = (!topic.deleted)
        .then(|| (topic.topic_number, topic.partitions, Some(topic.retention_ms.clone())));
    model.stats.topic_changes += 1;
    drop(model);
    if seen != expected {
        world.fail(format!(
            "shard {}: after the answer its copy of {name} is {seen:?}, not {expected:?}",
            shard.id
        ));
    }
}

async fn create(world: &Incarnation, shard: &Rc<Shard>, name: String, partitions: usize, ms: u64) {
    let topic = ChurnTopic {
        shard: shard.id,
        created: false,
        deleted: false,
        topic_number: 0,
        partitions,
        retention_ms: ms.to_string(),
        pending: None,
    };
    begin(world, &name, ChurnOp::Create, Some(topic));
    let request = NewTopic {
        name: name.clone(),
        num_partitions: partitions as i32,
        replication_factor: 1,
        configs: vec![("retention.ms".into(), ms.to_string())],
    };
    let result = shard.create_topics(vec![request], false).await.remove(0);
    answered(world, shard, &name, result).await;
}

async fn alter(world: &Incarnation, shard: &Rc<Shard>, name: String, value: String) {
    begin(world, &name, ChurnOp::Retention(value.clone()), None);
    let change = ConfigChange::Replace(vec![("retention.ms".into(), value)]);
    let request = TopicConfigChange { topic: name.clone(), change };
    let result = shard.alter_topic_configs(vec![request], false).await.remove(0);
    answered(world, shard, &name, result).await;
}

async fn add_partitions(world: &Incarnation, shard: &Rc<Shard>, name: String, more: usize) {
    let count = world.model.lock().unwrap().churn[&name].partitions + more;
    begin(world, &name, ChurnOp::Partitions(count), None);
    let request = shardlog_shards::NewPartitions {
        topic: name.clone(),
        count: count as i32,
        assignments: None,
    };
    let result = shard.create_partitions(vec![request], false).await.remove(0);
    answered(world, shard, &name, result).await;
}

async fn delete(world: &Incarnation, shard: &Rc<Shard>, name: String) {
    begin(world, &name, ChurnOp::Delete, None);
    let result = shard.delete_topics(vec![name.clone()]).await.remove(0);
    answered(world, shard, &name, result).await;
}

/// After a restart, on shard 0: the churn topics against the model (module header).
/// Requests in flight at the power loss are resolved by what the table holds.
pub fn check(world: &Incarnation, table: &TopicTable) {
    let mut model = world.model.lock().unwrap();
    let mut failures = Vec::new();
    for name in table.topics.keys().filter(|n| n.starts_with(PREFIX)) {
        match model.churn.get(name) {
            None => failures.push(format!("{name} exists but was never created")),
            Some(t) if t.deleted => failures.push(format!("{name} is back after its delete")),
            Some(_) => {}
        }
    }
    model.churn.retain(|name, topic| {
        let meta = table.topic(name);
        let pending = topic.pending.take();
        if topic.deleted {
            return true;
        }
        let Some(meta) = meta else {
            match pending {
                Some(ChurnOp::Create) => return false,
                Some(ChurnOp::Delete) => topic.deleted = true,
                _ => failures.push(format!("{name} lost: {topic:?}")),
            }
            return true;
        };
        let retention = meta.explicit_config("retention.ms").unwrap_or("none").to_string();
        let partitions = meta.partition_shards.len();
        if pending == Some(ChurnOp::Create) {
            topic.created = true;
            topic.topic_number = meta.topic_number;
        }
        let partitions_ok =
            partitions == topic.partitions || pending == Some(ChurnOp::Partitions(partitions));
        let retention_ok = retention == topic.retention_ms
            || pending == Some(ChurnOp::Retention(retention.clone()));
        if meta.topic_number != topic.topic_number || !partitions_ok || !retention_ok {
            failures.push(format!(
                "{name} changed: number {} partitions {partitions} retention.ms {retention}, \
                 acknowledged {topic:?} (in flight: {pending:?})",
                meta.topic_number
            ));
        }
        (topic.partitions, topic.retention_ms) = (partitions, retention);
        true
    });
    drop(model);
    if !failures.is_empty() {
        world.fail(format!("topic churn: {failures:?}"));
    }
}
