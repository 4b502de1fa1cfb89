"""kafka-python with api_version pinned to old brokers' (0.9, 0.10.1, 1.0.0, 2.0.0): each API
at the version that broker release served. 0.9 writes and reads message format v0
(Produce v1, Fetch v1) and 0.10.1 message format v1 (Produce v2, Fetch v3), which the
broker converts to and from its record batches. Per pin: produce with acks=all, consume
back, a group that commits half, a restarted member resumes there, and a gzip-compressed
set read back."""
import os
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

BOOTSTRAP = os.environ.get("BOOTSTRAP", "127.0.0.1:9092")
TOTAL, HALF = 10, 5


def fail(message):
    print(f"FAIL kafka-python: {message}", file=sys.stderr)
    sys.exit(1)


def group_consumer(pin, topic, group):
    return KafkaConsumer(
        topic, bootstrap_servers=BOOTSTRAP, api_version=pin, group_id=group,
        client_id=f"kafka-python-{pin}", auto_offset_reset="earliest",
        enable_auto_commit=False, consumer_timeout_ms=30000)


def check(pin):
    name = ".".join(map(str, pin))
    suffix = time.time_ns()
    topic, group = f"kp-{suffix}", f"kp-group-{suffix}"
    # kafka-python's admin client needs 0.10+ (CreateTopics); the data path keeps the pin.
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, api_version=max(pin, (0, 10, 1)))
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, api_version=pin, acks="all",
                             client_id=f"kafka-python-{name}")
    for i in range(TOTAL):
        meta = producer.send(topic, f"m{i}".encode()).get(timeout=30)
        if (meta.partition, meta.offset) != (0, i):
            fail(f"{name}: m{i} landed at {meta.partition}/{meta.offset}")
    producer.close()
    print(f"ok kafka-python {name}: {TOTAL} messages produced with acks=all")

    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, api_version=pin,
                             consumer_timeout_ms=30000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [(m.offset, m.value.decode()) for _, m in zip(range(TOTAL), consumer)]
    consumer.close()
    if got != [(i, f"m{i}") for i in range(TOTAL)]:
        fail(f"{name}: consumed {got}")
    print(f"ok kafka-python {name}: {TOTAL} messages consumed back in order")

    first = group_consumer(pin, topic, group)
    seen = [m.offset for _, m in zip(range(HALF), first)]
    if seen != list(range(HALF)):
        fail(f"{name}: group read {seen}")
    first.commit({tp: _offset_and_metadata(HALF)})
    committed = first.committed(tp)
    first.close()
    if committed != HALF:
        fail(f"{name}: committed offset read back as {committed}, want {HALF}")
    print(f"ok kafka-python {name}: group committed offset {committed}")

    second = group_consumer(pin, topic, group)
    resumed = next(iter(second), None)
    second.close()
    if resumed is None or resumed.offset != HALF:
        fail(f"{name}: restarted member resumed at {resumed and resumed.offset}, want {HALF}")
    print(f"ok kafka-python {name}: restarted group member resumed at offset {HALF}")

    # A compressed set (one gzip wrapper message per batch below 0.11).
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, api_version=pin, acks="all",
                             compression_type="gzip", linger_ms=50,
                             client_id=f"kafka-python-{name}")
    sent = [f"gzip-{i}".encode() * 20 for i in range(5)]
    futures = [producer.send(topic, value) for value in sent]
    producer.flush()
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    if offsets != list(range(TOTAL, TOTAL + len(sent))):
        fail(f"{name}: gzip set landed at {offsets}")
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, api_version=pin,
                             consumer_timeout_ms=30000)
    consumer.assign([tp])
    consumer.seek(tp, TOTAL)
    got = [(m.offset, m.value) for _, m in zip(range(len(sent)), consumer)]
    consumer.close()
    if got != list(zip(offsets, sent)):
        fail(f"{name}: gzip set read back as {got}")
    print(f"ok kafka-python {name}: a gzip-compressed set produced and read back")


def _offset_and_metadata(offset):
    from kafka.structs import OffsetAndMetadata
    try:
        return OffsetAndMetadata(offset, "", -1)  # kafka-python 2.1+: leader epoch too
    except TypeError:
        return OffsetAndMetadata(offset, "")


for pin in [(0, 9), (0, 10, 1), (1, 0, 0), (2, 0, 0)]:
    check(pin)
