"""confluent-kafka AdminClient (the newest librdkafka from PyPI): create a topic with a
config, list all topics, describe its configs, delete it and see it gone."""
import os, sys, time, uuid
import confluent_kafka
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

bootstrap = os.environ["BOOTSTRAP"]
version = confluent_kafka.version()  # a string in 2.x, a (string, int) pair in 1.x
version = version[0] if isinstance(version, tuple) else version
print(f"confluent-kafka {version}, librdkafka {confluent_kafka.libversion()[0]}")
admin = AdminClient({"bootstrap.servers": bootstrap})
topic = f"admin-{uuid.uuid4().hex[:8]}"

new = NewTopic(topic, num_partitions=3, replication_factor=1,
               config={"retention.ms": "3600000"})
admin.create_topics([new])[topic].result(timeout=10)

# All topics: librdkafka 2.13+ sends this Metadata request with 3 stray trailing bytes
# (librdkafka issue 5049); Kafka serves it, so must shardlog.
listed = admin.list_topics(timeout=10)
assert topic in listed.topics, f"{topic} missing from list_topics(): {sorted(listed.topics)}"
assert len(listed.topics[topic].partitions) == 3, listed.topics[topic].partitions

resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
configs = admin.describe_configs([resource])[resource].result(timeout=10)
retention = configs["retention.ms"]
assert retention.value == "3600000", f"retention.ms = {retention.value}"
assert "cleanup.policy" in configs, sorted(configs)

admin.delete_topics([topic])[topic].result(timeout=10)
end = time.time() + 10
while topic in admin.list_topics(timeout=10).topics:
    assert time.time() < end, f"{topic} still listed 10 s after its deletion"
    time.sleep(0.2)
print(f"confluent-kafka admin ok: created, listed ({len(listed.topics)} topics), "
      f"described ({len(configs)} configs), deleted {topic}")
