"""kafka-python, aiokafka or confluent-kafka (argv[1]) over a secured listener: produce and
consume in a group, with the listener's protocol in SECURITY_PROTOCOL (SASL_PLAINTEXT, the
default, SASL_SSL or SSL). SASL logs in as a user made with `shardlog user create`, with the
mechanism in SASL_MECHANISM (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN); TLS trusts SSL_CA and,
with SSL_CERT and SSL_KEY, presents a client certificate. With CHECK_WRONG_PASSWORD=1 a
client with a wrong password (SASL) or without its certificate (SSL) must not get in.
run.sh sets SECURE_BOOTSTRAP, SASL_USER, SASL_PASSWORD and the rest."""
import asyncio, os, sys

client = sys.argv[1]
bootstrap = os.environ["SECURE_BOOTSTRAP"]
protocol = os.environ.get("SECURITY_PROTOCOL", "SASL_PLAINTEXT")
sasl = protocol.startswith("SASL")
tls = protocol.endswith("SSL")
mechanism = os.environ["SASL_MECHANISM"] if sasl else "cert"
topic = f"{protocol.lower()}-{client}-{mechanism.lower()}"
count = 20
check_wrong = os.environ.get("CHECK_WRONG_PASSWORD") == "1"


def login(wrong=False):
    """kafka-python's settings (aiokafka takes the same, with an SSL context instead)."""
    settings = dict(bootstrap_servers=bootstrap, security_protocol=protocol)
    if sasl:
        password = "wrong-password" if wrong else os.environ["SASL_PASSWORD"]
        settings.update(sasl_mechanism=mechanism, sasl_plain_username=os.environ["SASL_USER"],
                        sasl_plain_password=password)
    if tls:
        settings.update(ssl_cafile=os.environ["SSL_CA"])
        if os.environ.get("SSL_CERT") and not (wrong and not sasl):
            settings.update(ssl_certfile=os.environ["SSL_CERT"], ssl_keyfile=os.environ["SSL_KEY"])
    return settings


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
        KafkaProducer(max_block_ms=5000, **login(wrong=True)).close()
        refused = False
    except KafkaError as e:
        print(f"kafka-python refused: {type(e).__name__}: {e}")
        refused = True
    return values, refused


def aiokafka_login(wrong=False):
    from aiokafka.helpers import create_ssl_context
    settings = login(wrong)
    files = {k: settings.pop(k) for k in ["ssl_cafile", "ssl_certfile", "ssl_keyfile"]
             if k in settings}
    if files:
        settings["ssl_context"] = create_ssl_context(
            cafile=files["ssl_cafile"], certfile=files.get("ssl_certfile"),
            keyfile=files.get("ssl_keyfile"))
    return settings


async def aiokafka_run():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError
    p = AIOKafkaProducer(acks="all", **aiokafka_login())
    await p.start()
    for i in range(count):
        await p.send_and_wait(topic, f"v{i}".encode())
    await p.stop()
    c = AIOKafkaConsumer(topic, group_id=f"{topic}-g", auto_offset_reset="earliest",
                         enable_auto_commit=False, **aiokafka_login())
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
    wrong = AIOKafkaProducer(request_timeout_ms=10000, **aiokafka_login(wrong=True))
    try:
        await asyncio.wait_for(wrong.start(), 30)
        refused = False
    except (KafkaError, asyncio.TimeoutError) as e:  # SASL: it logs error 58 first
        print(f"aiokafka refused: {type(e).__name__}: {e}")
        refused = True
    finally:
        await wrong.stop()
    return sorted(values), refused


def confluent_conf(wrong=False):
    conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
    settings = login(wrong)
    if sasl:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": settings["sasl_plain_username"],
                     "sasl.password": settings["sasl_plain_password"]})
    if tls:
        conf["ssl.ca.location"] = settings["ssl_cafile"]
        if "ssl_certfile" in settings:
            conf.update({"ssl.certificate.location": settings["ssl_certfile"],
                         "ssl.key.location": settings["ssl_keyfile"]})
    return conf


def confluent_run():
    import time
    from confluent_kafka import Consumer, KafkaException, Producer
    p = Producer({**confluent_conf(), "acks": "all", "linger.ms": 1})
    for i in range(count):
        p.produce(topic, f"v{i}".encode())
    if p.flush(30) != 0:
        return [], None
    c = Consumer({**confluent_conf(), "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    values, deadline = [], time.time() + 30
    while len(values) < count and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            values.append(m.value().decode())
    c.commit(asynchronous=False)
    c.close()
    if not check_wrong:
        return sorted(values), None
    try:
        Producer(confluent_conf(wrong=True)).list_topics(timeout=10)
        refused = False
    except KafkaException as e:
        print(f"confluent-kafka refused: {e}")
        refused = True
    return sorted(values), refused


runs = {"kafka-python": kafka_python, "aiokafka": lambda: asyncio.run(aiokafka_run()),
        "confluent-kafka": confluent_run}
values, refused = runs[client]()
expected = sorted(f"v{i}" for i in range(count))
what = "wrong_password_refused" if sasl else "no_certificate_refused"
print(f"{client} {mechanism} over {protocol} consumed={len(values)}"
      + ("" if refused is None else f" {what}={refused}"))
sys.exit(0 if values == expected and refused is not False else 1)
