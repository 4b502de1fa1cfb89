//! Transactions for the power-loss test (issue 15): open, committing and aborting
//! transactions when the power goes.
//!
//! Each shard runs one transactional producer (a transactional id this shard coordinates)
//! over its own topic `txn-<shard>` (2 partitions, placed by the controller, so markers
//! often cross the mesh): AddPartitionsToTxn for 1-2 partitions, 1-3 transactional records
//! to each (acknowledged), then EndTxn, commit three times in four. After a restart the
//! producer starts again with InitProducerId, which fences the instance from before the
//! power loss and aborts its open transaction, as a restarted client does.
//!
//! Checked after every restart, once the coordinators' tickers have finished the
//! transactions found prepared, on the shard that owns each partition:
//! 1. a transaction whose EndTxn(commit) was answered is in the partition in full, followed
//!    by a COMMIT marker; one whose EndTxn(abort) was answered is followed by an ABORT
//!    marker; one never ended is never followed by a COMMIT marker;
//! 2. a transaction whose EndTxn was in flight is complete or aborted, never reverted: in
//!    all its partitions the same marker (or, if its Prepare* was not durable, none yet);
//! 3. no record of a transaction that was never sent;
//! 4. the last stable offset is the first offset of the open transaction (else the high
//!    watermark), and never below one a read_committed fetch saw before the power loss;
//! 5. the aborted-transactions list of a read_committed fetch names every aborted
//!    transaction below the last stable offset, and nothing else.

use super::*;
use shardlog_benches::load::record_batch::transactional_batch;
use shardlog_shards::txn::partition::{batch_kind, BatchKind};
use shardlog_storage::RecordBatchHeader;

pub const PREFIX: &str = "txn-";
const PARTITIONS: i32 = 2;
/// How often the coordinators' tickers finish prepared transactions in this test.
pub const TICK: Duration = Duration::from_millis(5);

/// How a transaction ended, as its producer knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Records sent, no EndTxn sent: aborted by the next InitProducerId.
    Open,
    /// EndTxn(commit?) sent and not answered when the power went.
    Ending(bool),
    Committed,
    Aborted,
}

/// One transaction as its producer saw it.
#[derive(Clone, Debug)]
struct Txn {
    shard: usize,
    producer_id: i64,
    /// Records sent per partition (sent before the next is counted; an unacknowledged
    /// one may be missing).
    records: BTreeMap<i32, usize>,
    outcome: Outcome,
}

/// The transactional part of the model.
#[derive(Default)]
pub struct TxnModel {
    /// Every transaction, by number (the value's tag).
    txns: Vec<Txn>,
    topics_acked: BTreeSet<String>,
    /// Per partition, the highest last stable offset a read_committed fetch returned.
    max_lso: HashMap<Key, i64>,
    /// Per in-flight-at-power-loss transaction: the markers its partitions showed.
    observed: BTreeMap<usize, Vec<Option<bool>>>,
    /// Producer id of each shard's transactional id, once known.
    producer_ids: BTreeMap<usize, i64>,
    pub committed: u64,
    pub aborted: u64,
    pub resolved_in_flight: u64,
}

fn transactional_id(shard: usize) -> String {
    (0..).map(|k| format!("tx-{k}")).find(|id| coordinator_shard(id, SHARDS) == shard).unwrap()
}

fn value(number: usize, partition: i32, i: usize) -> String {
    format!("txn:{number}:{partition}:{i}")
}

fn parse(value: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(value).ok()?;
    text.strip_prefix("txn:")?.split(':').next()?.parse().ok()
}

/// A transactional batch (the TRANSACTIONAL attribute set, CRC redone).
fn batch(producer: ProducerFields, values: &[String]) -> Bytes {
    Bytes::from(transactional_batch(producer, 1_700_000_000_000, values))
}

pub fn spawn(world: &Arc<Incarnation>, shard: &Rc<Shard>) {
    let (world, shard) = (world.clone(), shard.clone());
    glommio::spawn_local(async move { txn_loop(&world, &shard).await }).detach();
}

/// This shard's transactional topic, created until acknowledged.
async fn ensure_txn_topic(world: &Incarnation, shard: &Rc<Shard>, topic: &str) -> bool {
    if world.model.lock().unwrap().txn.topics_acked.contains(topic) {
        return true;
    }
    if !ensure_topic(world, shard, topic, PARTITIONS, vec![]).await {
        return false;
    }
    world.model.lock().unwrap().txn.topics_acked.insert(topic.to_string());
    true
}

async fn txn_loop(world: &Incarnation, shard: &Rc<Shard>) {
    let mut rng = world.rng(shard.id, 80);
    let id = transactional_id(shard.id);
    let topic = format!("{PREFIX}{}", shard.id);
    if !ensure_txn_topic(world, shard, &topic).await {
        return;
    }
    let init = shard.txn_init_producer_id(&id, 60_000, None).await;
    check_off(world).await;
    let (producer_id, epoch) = match init {
        Ok(answer) => answer,
        Err(e) => return world.fail(format!("InitProducerId({id}): {e:?}")),
    };
    {
        let mut model = world.model.lock().unwrap();
        if model.txn.producer_ids.insert(shard.id, producer_id) != Some(producer_id)
            && !model.producer_ids.insert(producer_id)
        {
            drop(model);
            return world.fail(format!("producer id {producer_id} handed out twice"));
        }
        // The new epoch fenced the instance before the power loss: what it left open is
        // aborted now (an EndTxn in flight was settled by the checks).
        for txn in model.txn.txns.iter_mut().filter(|t| t.shard == shard.id) {
            if txn.outcome == Outcome::Open {
                txn.outcome = Outcome::Aborted;
            }
        }
    }
    let mut sequences: HashMap<i32, i32> = HashMap::new();
    loop {
        random_yields(&mut rng).await;
        let mut partitions = vec![rng.below(PARTITIONS as u64) as i32];
        if rng.chance(1, 2) {
            partitions = (0..PARTITIONS).collect();
        }
        let added: Vec<(String, i32)> = partitions.iter().map(|p| (topic.clone(), *p)).collect();
        let result = shard.add_to_txn(&id, producer_id, epoch, &added, None).await;
        check_off(world).await;
        if let Err(e) = result {
            return world.fail(format!("AddPartitionsToTxn({id}): {e:?}"));
        }
        let number = {
            let mut model = world.model.lock().unwrap();
            let txn = Txn {
                shard: shard.id,
                producer_id,
                records: BTreeMap::new(),
                outcome: Outcome::Open,
            };
            model.txn.txns.push(txn);
            model.txn.txns.len() - 1
        };
        for &partition in &partitions {
            let count = 1 + rng.below(3) as usize;
            let values: Vec<String> = (0..count).map(|i| value(number, partition, i)).collect();
            let sequence = sequences.entry(partition).or_insert(0);
            let fields =
                ProducerFields { producer_id, producer_epoch: epoch, base_sequence: *sequence };
            *sequence += count as i32;
            world.model.lock().unwrap().txn.txns[number].records.insert(partition, count);
            let wait = shard
                .produce(&topic, partition, batch(fields, &values), -1, Some(id.as_str()))
                .await;
            let acked = wait.await;
            check_off(world).await;
            if let Err(e) = acked {
                return world.fail(format!("transactional produce to {topic}/{partition}: {e}"));
            }
        }
        let commit = rng.chance(3, 4);
        world.model.lock().unwrap().txn.txns[number].outcome = Outcome::Ending(commit);
        let ended = shard.end_txn(&id, producer_id, epoch, commit).await;
        check_off(world).await;
        if let Err(e) = ended {
            return world.fail(format!("EndTxn({id}, commit {commit}): {e:?}"));
        }
        {
            let mut model = world.model.lock().unwrap();
            model.txn.txns[number].outcome =
                if commit { Outcome::Committed } else { Outcome::Aborted };
            if commit {
                model.txn.committed += 1;
            } else {
                model.txn.aborted += 1;
            }
        }
        note_stable_offsets(world, shard, &topic).await;
        world.op_done();
    }
}

/// Remembers the last stable offset of this shard's own partitions of `topic`.
async fn note_stable_offsets(world: &Incarnation, shard: &Shard, topic: &str) {
    for partition in 0..PARTITIONS {
        if shard.owner_of(topic, partition) != Ok(shard.id) {
            continue;
        }
        let Ok(fetched) = fetch(shard, topic, partition, true).await else { continue };
        check_off(world).await;
        let mut model = world.model.lock().unwrap();
        let max = model.txn.max_lso.entry((topic.to_string(), partition)).or_insert(0);
        *max = (*max).max(fetched.last_stable_offset);
    }
}

async fn fetch(
    shard: &Shard,
    topic: &str,
    partition: i32,
    read_committed: bool,
) -> Result<shardlog_shards::FetchedRecords, String> {
    fetch_at(shard, &(topic.to_string(), partition), 0, read_committed, 8 << 20).await
}

/// One transaction's run of data in a partition, and the marker that ended it.
#[derive(Debug)]
struct Run {
    number: usize,
    producer_id: i64,
    first_offset: i64,
    records: usize,
    marker: Option<bool>,
}

/// The runs of a partition written by one producer at a time, in offset order.
fn runs(records: &[u8]) -> Result<Vec<Run>, String> {
    let mut runs: Vec<Run> = Vec::new();
    for batch in batches(records) {
        let header = RecordBatchHeader::parse_unvalidated(batch.bytes);
        let header = match header {
            Ok(header) if batch.crc_ok() => header,
            _ => return Err(format!("batch at {} is damaged", batch.base_offset)),
        };
        let producer_id = header.producer_id;
        if let BatchKind::Marker { commit } = batch_kind(&header, batch.bytes)? {
            match runs.last_mut() {
                Some(run) if run.marker.is_none() && run.producer_id == producer_id => {
                    run.marker = Some(commit)
                }
                // A marker for a partition the transaction added but wrote nothing to.
                _ => {}
            }
            continue;
        }
        let mut numbers = Vec::new();
        if !batch.for_each_value(|_, v| numbers.push(parse(v))) {
            return Err(format!("batch at {} has malformed records", batch.base_offset));
        }
        for number in numbers {
            let number = number.ok_or(format!("a foreign record at {}", batch.base_offset))?;
            match runs.last_mut() {
                Some(run) if run.number == number && run.marker.is_none() => run.records += 1,
                _ => runs.push(Run {
                    number,
                    producer_id,
                    first_offset: batch.base_offset,
                    records: 1,
                    marker: None,
                }),
            }
        }
    }
    Ok(runs)
}

/// The checks after a restart (see the module's comment); every shard calls it.
pub async fn check(world: &Incarnation, shard: &Rc<Shard>) {
    // The tickers finish what was found prepared (markers cross the mesh both ways).
    let deadline = Instant::now() + Duration::from_secs(30);
    while shard.txn.list().iter().any(|t| t.state.is_prepared()) {
        if Instant::now() > deadline {
            return world
                .fail(format!("shard {}: a prepared transaction never finished", shard.id));
        }
        glommio::timer::sleep(TICK).await;
    }
    world.rendezvous(3, false).await;
    let topics: Vec<String> =
        world.model.lock().unwrap().txn.topics_acked.iter().cloned().collect();
    for topic in topics {
        if shard.topic(&topic).is_none() {
            world.fail(format!("acknowledged transactional topic {topic} is gone"));
            continue;
        }
        for partition in 0..PARTITIONS {
            if shard.owner_of(&topic, partition) == Ok(shard.id) {
                if let Err(problem) = check_partition(world, shard, &topic, partition).await {
                    world.fail(format!("{topic}/{partition}: {problem}"));
                }
            }
        }
    }
    world.rendezvous(4, false).await;
    if shard.id == 0 {
        settle_in_flight(world);
    }
}

async fn check_partition(
    world: &Incarnation,
    shard: &Shard,
    topic: &str,
    partition: i32,
) -> Result<(), String> {
    let all = fetch(shard, topic, partition, false).await?;
    let committed = fetch(shard, topic, partition, true).await?;
    let runs = runs(&all.records)?;
    let mut model = world.model.lock().unwrap();
    let key = (topic.to_string(), partition);
    for run in &runs {
        let txn = model.txn.txns.get(run.number).ok_or(format!("{run:?} was never sent"))?;
        let sent = txn.records.get(&partition).copied().unwrap_or(0);
        if txn.producer_id != run.producer_id || run.records > sent {
            return Err(format!("{run:?} does not match what was sent: {txn:?}"));
        }
        let fine = match txn.outcome {
            Outcome::Committed => run.marker == Some(true) && run.records == sent,
            Outcome::Aborted => run.marker == Some(false),
            Outcome::Open => run.marker != Some(true),
            Outcome::Ending(commit) => run.marker.is_none() || run.marker == Some(commit),
        };
        if !fine {
            return Err(format!("{run:?} after a transaction that ended {:?}", txn.outcome));
        }
        if let Outcome::Ending(_) = txn.outcome {
            model.txn.observed.entry(run.number).or_default().push(run.marker);
        }
    }
    let present: BTreeSet<usize> = runs.iter().map(|r| r.number).collect();
    for (number, txn) in model.txn.txns.iter().enumerate() {
        let written = txn.records.get(&partition).is_some_and(|n| *n > 0)
            && topic == format!("{PREFIX}{}", txn.shard);
        if written && txn.outcome == Outcome::Committed && !present.contains(&number) {
            return Err(format!("committed transaction {number} is missing: {txn:?}"));
        }
    }
    let open = runs.iter().find(|r| r.marker.is_none()).map(|r| r.first_offset);
    let lso = committed.last_stable_offset;
    if lso != open.unwrap_or(committed.high_watermark) {
        return Err(format!(
            "last stable offset {lso}, open transaction at {open:?}, hw {}",
            committed.high_watermark
        ));
    }
    let before = model.txn.max_lso.get(&key).copied().unwrap_or(0);
    if lso < before {
        return Err(format!("last stable offset {lso} below {before} seen before the loss"));
    }
    let expected: BTreeSet<(i64, i64)> = runs
        .iter()
        .filter(|r| r.marker == Some(false) && r.first_offset < lso)
        .map(|r| (r.producer_id, r.first_offset))
        .collect();
    let listed: BTreeSet<(i64, i64)> = committed.aborted_transactions.iter().copied().collect();
    if listed != expected {
        return Err(format!("aborted transactions listed {listed:?}, expected {expected:?}"));
    }
    Ok(())
}

/// A transaction whose EndTxn was in flight: the same marker everywhere (complete), or
/// none anywhere yet (its Prepare* was lost: still open, the next InitProducerId aborts it).
fn settle_in_flight(world: &Incarnation) {
    let mut model = world.model.lock().unwrap();
    let observed = std::mem::take(&mut model.txn.observed);
    let mut problems = Vec::new();
    for (number, markers) in observed {
        let txn = &mut model.txn.txns[number];
        let first = markers[0];
        if markers.iter().any(|m| *m != first) {
            problems.push(format!("transaction {number} half ended: {markers:?} ({txn:?})"));
            continue;
        }
        txn.outcome = match first {
            Some(true) => Outcome::Committed,
            Some(false) => Outcome::Aborted,
            None => Outcome::Open,
        };
        model.txn.resolved_in_flight += 1;
    }
    for txn in model.txn.txns.iter_mut() {
        // In flight with no record anywhere (all its partitions were written elsewhere,
        // or nothing landed): decided by its coordinator; the next InitProducerId aborts
        // it if still open, which is all a client may assume.
        if let Outcome::Ending(_) = txn.outcome {
            txn.outcome = Outcome::Open;
        }
    }
    drop(model);
    if !problems.is_empty() {
        world.fail(problems.join("; "));
    }
}
