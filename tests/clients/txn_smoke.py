"""Transactions with three Python clients: confluent-kafka (librdkafka in the wheel),
kafka-python and aiokafka. Each commits one transaction and aborts one; a read_committed
consumer must see exactly the committed records, a read_uncommitted one all of them."""
import asyncio, os, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap = os.environ["BOOTSTRAP"]


def confluent(topic):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-txn", "linger.ms": 0})
    p.init_transactions(10)
    for commit in (True, False):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=f"{'c' if commit else 'a'}{i}", partition=0)
        p.flush(10)  # an abort purges what is not sent yet: send it, so there is data to abort
        p.commit_transaction(10) if commit else p.abort_transaction(10)


def kafka_python(topic):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-txn")
    p.init_transactions()
    for commit in (True, False):
        p.begin_transaction()
        for i in range(5):
            p.send(topic, value=f"{'c' if commit else 'a'}{i}".encode(), partition=0)
        p.flush()
        p.commit_transaction() if commit else p.abort_transaction()
    p.close()


async def aiokafka_run(topic):
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn")
    await p.start()
    try:
        for commit in (True, False):
            try:
                async with p.transaction():
                    for i in range(5):
                        await p.send_and_wait(topic, f"{'c' if commit else 'a'}{i}".encode(), partition=0)
                    if not commit:
                        raise RuntimeError("abort")
            except RuntimeError:
                pass
    finally:
        await p.stop()


def read(topic, isolation):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0)])
    values, end = [], time.time() + 20
    while time.time() < end:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            break  # partition EOF
        values.append(m.value().decode())
    c.close()
    return values


ok = True
for name, run in (("confluent-kafka", confluent), ("kafka-python", kafka_python),
                  ("aiokafka", lambda t: asyncio.run(aiokafka_run(t)))):
    topic = f"txn-{name}"
    run(topic)
    committed, everything = read(topic, "read_committed"), read(topic, "read_uncommitted")
    good = committed == [f"c{i}" for i in range(5)] and len(everything) == 10
    ok = ok and good
    print(f"{name} transactions: read_committed={committed} read_uncommitted={len(everything)}"
          f" {'ok' if good else 'FAILED'}")
sys.exit(0 if ok else 1)
