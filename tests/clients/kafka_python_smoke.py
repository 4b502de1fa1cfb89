"""kafka-python: idempotent producer (its default), a consumer group, commit, lag."""
import os, sys
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

bootstrap = os.environ["BOOTSTRAP"]
p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
for i in range(100):
    p.send("kp", key=str(i % 3).encode(), value=f"v{i}".encode())
p.flush()
c = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kpg",
                  auto_offset_reset="earliest", consumer_timeout_ms=8000)
n = sum(1 for _ in c)
c.commit()
c.close()
committed = KafkaAdminClient(bootstrap_servers=bootstrap).list_group_offsets("kpg")["kpg"]
offset = list(committed.values())[0].offset
print(f"kafka-python consumed={n} committed={offset}")
sys.exit(0 if n == 100 and offset == 100 else 1)
