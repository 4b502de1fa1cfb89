"""confluent-kafka (the newest librdkafka from PyPI) on a compacted topic: created with
cleanup.policy=compact and its related keys, described back, keyed records and tombstones
accepted, a record without a key refused with INVALID_RECORD and not written."""
import os, uuid
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

bootstrap = os.environ["BOOTSTRAP"]
admin = AdminClient({"bootstrap.servers": bootstrap})
topic = f"changelog-{uuid.uuid4().hex[:8]}"
configs = {"cleanup.policy": "compact", "delete.retention.ms": "60000",
           "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.2"}
admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=10)
resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
described = admin.describe_configs([resource])[resource].result(timeout=10)
for key, value in configs.items():
    assert described[key].value == value, f"{key} = {described[key].value}, not {value}"

bad = admin.create_topics([NewTopic(f"{topic}-bad", 1, 1,
                                    config={"min.cleanable.dirty.ratio": "2"})])
try:
    bad[f"{topic}-bad"].result(timeout=10)
    raise AssertionError("min.cleanable.dirty.ratio=2 was accepted")
except Exception as e:  # KafkaException wrapping INVALID_CONFIG
    assert e.args[0].code() == KafkaError.INVALID_CONFIG, e

outcomes = {}
def delivered(err, msg):
    outcomes[msg.value()] = err

producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
producer.produce(topic, key=b"k1", value=b"v1", on_delivery=delivered)
producer.flush(10)
producer.produce(topic, value=b"keyless", on_delivery=delivered)
producer.flush(10)
producer.produce(topic, key=b"k1", value=None, on_delivery=delivered)  # a tombstone
producer.flush(10)
assert outcomes[b"v1"] is None, outcomes
assert outcomes[None] is None, f"tombstone: {outcomes[None]}"
err = outcomes[b"keyless"]
assert err is not None and err.code() == KafkaError.INVALID_RECORD, f"keyless: {err}"

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
seen = []
while len(seen) < 2:
    msg = consumer.poll(10)
    assert msg is not None, f"timed out after {seen}"
    assert msg.error() is None, msg.error()
    seen.append((msg.offset(), msg.key(), msg.value()))
consumer.close()
assert seen == [(0, b"k1", b"v1"), (1, b"k1", None)], seen
print(f"confluent-kafka compacted topic ok: configs described, keyless record refused "
      f"({err.name()}), {len(seen)} keyed records read back at offsets 0-1")
