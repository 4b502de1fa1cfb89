"""confluent-kafka (librdkafka in the wheel): idempotent producer, group consumer, commit."""
import os, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap = os.environ["BOOTSTRAP"]
p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
for i in range(50):
    p.produce("ck", key=str(i % 5), value=f"v{i}")
p.flush(10)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ckg", "auto.offset.reset": "earliest"})
c.subscribe(["ck"])
n, end = 0, time.time() + 20
while n < 50 and time.time() < end:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        n += 1
c.commit(asynchronous=False)
offset = c.committed([TopicPartition("ck", 0)])[0].offset
c.close()
print(f"confluent-kafka consumed={n} committed={offset}")
sys.exit(0 if n == 50 and offset == 50 else 1)
