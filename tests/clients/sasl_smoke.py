"""kafka-python or aiokafka (argv[1]) over SASL_PLAINTEXT: produce and consume in a group as
a user made with `shardlog user create`, with the mechanism in SASL_MECHANISM (SCRAM-SHA-256,
SCRAM-SHA-512 or PLAIN); with CHECK_WRONG_PASSWORD=1, a wrong password must not get in. run.sh
sets SASL_BOOTSTRAP, SASL_USER, SASL_PASSWORD."""
import asyncio, os, sys

client = sys.argv[1]
bootstrap = os.environ["SASL_BOOTSTRAP"]
mechanism = os.environ["SASL_MECHANISM"]
topic = f"sasl-{client}-{mechanism.lower()}"
count = 20
check_wrong = os.environ.get("CHECK_WRONG_PASSWORD") == "1"


def login(password=None):
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username=os.environ["SASL_USER"],
                sasl_plain_password=password or os.environ["SASL_PASSWORD"])


def kafka_python():
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    p = KafkaProducer(acks="all", **login())
    for i in range(count):
        p.send(topic, value=f"v{i}".encode())
    p.flush()
    p.close()
    c = KafkaConsumer(topic, group_id=f"{topic}-g", auto_offset_reset="earliest",
                      consumer_timeout_ms=8000, **login())
    values = sorted(m.value.decode() for m in c)
    c.commit()
    c.close()
    if not check_wrong:
        return values, None
    # kafka-python 3.0 reports the refusal as a lost connection and, after max_block_ms,
    # "Unable to bootstrap": it must not get a producer, whatever it calls the error.
    try:
        KafkaProducer(max_block_ms=5000, **login("wrong-password")).close()
        refused = False
    except KafkaError as e:
        print(f"kafka-python with a wrong password: {type(e).__name__}: {e}")
        refused = True
    return values, refused


async def aiokafka_run():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError
    p = AIOKafkaProducer(acks="all", **login())
    await p.start()
    for i in range(count):
        await p.send_and_wait(topic, f"v{i}".encode())
    await p.stop()
    c = AIOKafkaConsumer(topic, group_id=f"{topic}-g", auto_offset_reset="earliest",
                         enable_auto_commit=False, **login())
    await c.start()
    values = []
    try:
        while len(values) < count:
            batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
            values += [m.value.decode() for ms in batch.values() for m in ms]
        await c.commit()
    finally:
        await c.stop()
    if not check_wrong:
        return sorted(values), None
    wrong = AIOKafkaProducer(**login("wrong-password"))
    try:
        await wrong.start()
        refused = False
    except KafkaError as e:  # it logs error 58 and raises a connection error
        print(f"aiokafka with a wrong password: {type(e).__name__}: {e}")
        refused = True
    finally:
        await wrong.stop()
    return sorted(values), refused


values, refused = kafka_python() if client == "kafka-python" else asyncio.run(aiokafka_run())
expected = sorted(f"v{i}" for i in range(count))
print(f"{client} {mechanism} over SASL_PLAINTEXT consumed={len(values)}"
      + ("" if refused is None else f" wrong_password_refused={refused}"))
sys.exit(0 if values == expected and refused is not False else 1)
