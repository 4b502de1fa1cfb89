//! KIP-890 part 1 through raw Kafka requests: a partition appends a transaction's first
//! batch only once the transactional id's coordinator confirms the partition is in the
//! producer's open transaction at that epoch. A batch for a partition never added (a
//! "hanging transaction" in Kafka before 3.6) is refused, appends nothing and leaves the
//! last stable offset where it was; the normal path (AddPartitionsToTxn, then produce)
//! still works, with pipelined batches kept in order. Run with the partition owned by the
//! coordinator's shard (verified locally) and by the other shard (verified over the mesh,
//! the produce itself forwarded).

mod common;

use bytes::Bytes;
use common::{create_topic, latest_offset, leaders, topic_name, Broker, RawClient};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
};
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ApiKey, ProducerId, RequestKind, ResponseKind, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use shardlog_benches::load::record_batch::{transactional_batch, ProducerFields};

const ID: &str = "verified-id";
const NONE: i16 = 0;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

fn id() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(ID))
}

/// A transactional batch of `count` records at `base_sequence`.
fn txn_batch(producer_id: i64, epoch: i16, base_sequence: i32, count: usize) -> Bytes {
    let producer = ProducerFields { producer_id, producer_epoch: epoch, base_sequence };
    let values = (0..count).map(|i| format!("record-{base_sequence}-{i}"));
    Bytes::from(transactional_batch(producer, 1_700_000_000_000, values))
}

/// Produce v9 (acks=all) of `records` to one partition, with the transactional id or not.
fn produce_request(partition: i32, records: Bytes, with_id: bool) -> RequestKind {
    let data = PartitionProduceData::default().with_index(partition).with_records(Some(records));
    let topic =
        TopicProduceData::default().with_name(topic_name("t")).with_partition_data(vec![data]);
    let request = ProduceRequest::default()
        .with_transactional_id(with_id.then(id))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![topic]);
    RequestKind::Produce(request)
}

/// A produce response's (error code, base offset, error message).
fn produce_answer(answer: ResponseKind) -> (i16, i64, String) {
    let ResponseKind::Produce(answer) = answer else { panic!("{answer:?}") };
    let p = &answer.responses[0].partition_responses[0];
    let message = p.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    (p.error_code, p.base_offset, message)
}

fn produce(
    client: &mut RawClient,
    partition: i32,
    records: Bytes,
    with_id: bool,
) -> (i16, i64, String) {
    let request = produce_request(partition, records, with_id);
    produce_answer(client.call(ApiKey::Produce, 9, request))
}

/// (high watermark, last stable offset) of `partition` of "t".
fn offsets(client: &mut RawClient, partition: i32) -> (i64, i64) {
    (latest_offset(client, "t", partition, 0), latest_offset(client, "t", partition, 1))
}

/// The coordinator's calls, on a connection to the coordinator shard.
struct Coordinator {
    client: RawClient,
    producer_id: i64,
    epoch: i16,
}

impl Coordinator {
    fn start(broker: &Broker) -> (Coordinator, usize) {
        let mut any = RawClient::connect(broker.shard_addr(0));
        let find = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str(ID))
            .with_key_type(1);
        let shard = match any.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(find)) {
            ResponseKind::FindCoordinator(r) if r.error_code == NONE => r.node_id.0 as usize,
            other => panic!("{other:?}"),
        };
        let mut client = RawClient::connect(broker.shard_addr(shard));
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(id()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let (producer_id, epoch) =
            match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(init)) {
                ResponseKind::InitProducerId(r) if r.error_code == NONE => {
                    (r.producer_id.0, r.producer_epoch)
                }
                other => panic!("{other:?}"),
            };
        (Coordinator { client, producer_id, epoch }, shard)
    }

    fn add_partition(&mut self, partition: i32) {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(id())
            .with_v3_and_below_producer_id(ProducerId(self.producer_id))
            .with_v3_and_below_producer_epoch(self.epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![partition])]);
        let answer = self.client.call(
            ApiKey::AddPartitionsToTxn,
            3,
            RequestKind::AddPartitionsToTxn(request),
        );
        let ResponseKind::AddPartitionsToTxn(answer) = answer else { panic!("{answer:?}") };
        let code =
            answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(code, NONE, "AddPartitionsToTxn");
    }

    fn commit(&mut self) {
        let request = EndTxnRequest::default()
            .with_transactional_id(id())
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_committed(true);
        match self.client.call(ApiKey::EndTxn, 3, RequestKind::EndTxn(request)) {
            ResponseKind::EndTxn(r) => assert_eq!(r.error_code, NONE, "EndTxn"),
            other => panic!("{other:?}"),
        }
    }
}

/// The whole scenario on the partition of "t" that `owned_by_coordinator` picks; produces
/// go to the partition's owner when it is the coordinator's shard, else through the
/// coordinator's shard (forwarded to the owner, which asks the coordinator over the mesh).
fn partitions_verify_each_transactions_first_batch(owned_by_coordinator: bool) {
    let broker = Broker::start(2, &[]);
    create_topic(&broker, "t", 2);
    let (mut coordinator, coordinator_shard) = Coordinator::start(&broker);
    let owners = leaders(&mut coordinator.client, "t");
    let partition = owners
        .iter()
        .position(|owner| (*owner as usize == coordinator_shard) == owned_by_coordinator)
        .expect("one partition on each shard") as i32;
    assert_eq!(owners[partition as usize] as usize == coordinator_shard, owned_by_coordinator);
    let mut client = RawClient::connect(broker.shard_addr(coordinator_shard));
    let (producer_id, epoch) = (coordinator.producer_id, coordinator.epoch);

    // Never added: refused, nothing appended, no transaction holds the LSO.
    let (code, base_offset, message) =
        produce(&mut client, partition, txn_batch(producer_id, epoch, 0, 3), true);
    assert_eq!((code, base_offset), (INVALID_TXN_STATE, -1), "{message}");
    assert!(message.contains("not added to the transaction"), "{message}");
    assert_eq!(offsets(&mut client, partition), (0, 0));
    // A transactional batch needs the request's transactional id, as in Kafka.
    let (code, ..) = produce(&mut client, partition, txn_batch(producer_id, epoch, 0, 3), false);
    assert_eq!(code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    assert_eq!(offsets(&mut client, partition), (0, 0));

    // Added: the first two batches, pipelined, are appended in order once verified.
    coordinator.add_partition(partition);
    let pipelined = [(0, 3), (3, 2)].map(|(sequence, count)| {
        let batch = txn_batch(producer_id, epoch, sequence, count);
        (client.send(ApiKey::Produce, 9, &produce_request(partition, batch, true)), sequence)
    });
    for (correlation_id, sequence) in pipelined {
        let answer = produce_answer(client.receive(ApiKey::Produce, 9, correlation_id));
        assert_eq!((answer.0, answer.1), (NONE, sequence as i64), "{}", answer.2);
    }
    assert_eq!(offsets(&mut client, partition), (5, 0), "the open transaction holds the LSO");
    // Another epoch than the coordinator's is fenced, and appends nothing.
    let (code, ..) = produce(&mut client, partition, txn_batch(producer_id, epoch + 1, 0, 1), true);
    assert_eq!(code, INVALID_PRODUCER_EPOCH);
    // Another producer id than the transactional id's: refused, nothing appended.
    let stranger = txn_batch(producer_id + 1, epoch, 0, 1);
    let (code, ..) = produce(&mut client, partition, stranger, true);
    assert_eq!(code, INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(offsets(&mut client, partition), (5, 0));
    coordinator.commit();
    assert_eq!(offsets(&mut client, partition), (6, 6), "five records and the COMMIT marker");

    // The marker ended what was verified: the next transaction must add the partition again.
    let (code, _, message) =
        produce(&mut client, partition, txn_batch(producer_id, epoch, 5, 1), true);
    assert_eq!(code, INVALID_TXN_STATE, "{message}");
    assert_eq!(offsets(&mut client, partition), (6, 6));
    coordinator.add_partition(partition);
    let (code, base_offset, message) =
        produce(&mut client, partition, txn_batch(producer_id, epoch, 5, 1), true);
    assert_eq!((code, base_offset), (NONE, 6), "{message}");
    assert_eq!(offsets(&mut client, partition), (7, 6));
}

#[test]
fn a_partition_owned_by_the_coordinators_shard_refuses_a_batch_of_a_transaction_it_is_not_in() {
    partitions_verify_each_transactions_first_batch(true);
}

#[test]
fn a_partition_on_the_other_shard_asks_the_coordinator_over_the_mesh_before_a_first_batch() {
    partitions_verify_each_transactions_first_batch(false);
}
