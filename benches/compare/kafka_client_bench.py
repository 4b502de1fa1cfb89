#!/usr/bin/env python3
"""The reference workload through a real Kafka client (confluent-kafka, i.e. librdkafka
driven from Python), against any Kafka-API broker.

tp:     creates TOPIC with PARTITIONS partitions, produces N x SIZE bytes, acks=all,
        enable.idempotence=true, keys str(i % KEYS) (librdkafka's default partitioner),
        librdkafka's default linger; then a consumer in a new group reads all N.
replay: a consumer in another new group reads everything in TOPIC from the beginning.
lat:    RATE msg/s for SECS s on a fresh topic, acks=all, linger.ms=0, while a consumer
        (assigned before the first send) reads; end-to-end latency from a timestamp in the
        payload, and produce->delivery report.

Prints `RESULT mode=produce|consume|e2e label=... key=value` lines in the shape of
shardlog-load's, plus client= and librdkafka= so a results file says what measured it.
The client shares the machine with the broker; Python calls produce() and polls once per
message, so its own per-message cost is in every figure.
"""

import argparse
import struct
import threading
import time
import uuid

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench_results import latency_fields, result

STAMP = struct.Struct(">QQ")  # send time (perf_counter_ns), sequence number


def client_fields():
    return [("client", f"confluent-kafka-{confluent_kafka.__version__}"),
            ("librdkafka", confluent_kafka.libversion()[0])]


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)], operation_timeout=10)
    try:
        futures[topic].result(timeout=30)
    except KafkaException as e:
        if e.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def producer(bootstrap, **extra):
    config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
    config.update(extra)
    return Producer(config)


def consumer(bootstrap, group, **extra):
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    config.update(extra)
    return Consumer(config)


def produce_all(args):
    p = producer(args.bootstrap)
    tail = b"x" * (args.size - STAMP.size)
    acked = errors = 0

    def on_delivery(err, _msg):
        nonlocal acked, errors
        if err is None:
            acked += 1
        else:
            errors += 1

    start = time.perf_counter()
    for i in range(args.messages):
        value = STAMP.pack(time.perf_counter_ns(), i) + tail
        while True:
            try:
                p.produce(args.topic, value, str(i % args.keys).encode(),
                          on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                p.poll(0.001)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    result("produce", args.label, [
        ("topic", args.topic), ("partitions", args.partitions), ("size", args.size),
        ("acks", -1), ("idempotent", "true"), ("sent", args.messages), ("acked", acked),
        ("errors", errors), ("elapsed_ms", f"{elapsed * 1e3:.1f}"),
        ("msg_per_s", f"{args.messages / elapsed:.1f}"),
        ("mb_per_s", f"{args.messages * args.size / 1e6 / elapsed:.1f}")] + client_fields())


def consume_all(args, label, expected):
    """Reads `expected` records with a new group; the rate counts from the first record
    (group join and assignment are reported apart, as first_record_ms)."""
    c = consumer(args.bootstrap, f"bench-{label}-{uuid.uuid4().hex[:8]}")
    c.subscribe([args.topic])
    start = time.perf_counter()
    first = None
    records = value_bytes = 0
    deadline = start + args.timeout
    while records < expected and time.perf_counter() < deadline:
        for msg in c.consume(num_messages=10_000, timeout=0.5):
            if msg.error():
                raise KafkaException(msg.error())
            if first is None:
                first = time.perf_counter()
            records += 1
            value_bytes += len(msg.value())
    end = time.perf_counter()
    c.close()
    first = first or end
    elapsed = max(end - first, 1e-9)
    result("consume", label, [
        ("topic", args.topic), ("records", records), ("expected", expected),
        ("first_record_ms", f"{(first - start) * 1e3:.1f}"),
        ("elapsed_ms", f"{elapsed * 1e3:.1f}"), ("msg_per_s", f"{records / elapsed:.1f}"),
        ("mb_per_s", f"{value_bytes / 1e6 / elapsed:.1f}")] + client_fields())


def tp(args):
    create_topic(args.bootstrap, args.topic, args.partitions)
    produce_all(args)
    consume_all(args, args.label, args.messages)


def replay(args):
    consume_all(args, args.label, args.messages)


class LatencyReader(threading.Thread):
    """A consumer thread recording end-to-end latency; `assigned` is set once it holds
    partitions, so the first send is not measured against the group join."""

    def __init__(self, args, topic):
        super().__init__(daemon=True)
        self.consumer = consumer(args.bootstrap, f"bench-lat-{uuid.uuid4().hex[:8]}")
        self.topic = topic
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.e2e_us = []

    def on_assign(self, _consumer, partitions):
        if partitions:
            self.assigned.set()

    def run(self):
        self.consumer.subscribe([self.topic], on_assign=self.on_assign)
        while not self.stop.is_set():
            for msg in self.consumer.consume(num_messages=100, timeout=0.05):
                if msg.error():
                    continue
                now = time.perf_counter_ns()
                sent_ns, _ = STAMP.unpack_from(msg.value())
                self.e2e_us.append((now - sent_ns) / 1e3)
        self.consumer.close()


def lat(args):
    topic = f"{args.topic}-lat-{uuid.uuid4().hex[:8]}"
    create_topic(args.bootstrap, topic, args.partitions)
    reader = LatencyReader(args, topic)
    reader.start()
    if not reader.assigned.wait(30):
        raise SystemExit("the latency consumer got no partitions in 30 s")
    p = producer(args.bootstrap, **{"linger.ms": 0})
    tail = b"x" * (args.size - STAMP.size)
    acks_us = []
    errors = 0

    def on_delivery(err, msg):
        nonlocal errors
        if err is not None:
            errors += 1
            return
        sent_ns, _ = STAMP.unpack_from(msg.value())
        acks_us.append((time.perf_counter_ns() - sent_ns) / 1e3)

    total = args.rate * args.secs
    start = time.perf_counter() + 0.2
    for k in range(total):
        # Serve delivery reports while waiting for the next slot, so they are timely.
        while (delay := start + k / args.rate - time.perf_counter()) > 0:
            p.poll(delay)
        p.produce(topic, STAMP.pack(time.perf_counter_ns(), k) + tail,
                  str(k % args.keys).encode(), on_delivery=on_delivery)
        p.poll(0)
    produced_s = time.perf_counter() - start
    p.flush(30)
    deadline = time.perf_counter() + 5
    while len(reader.e2e_us) < total and time.perf_counter() < deadline:
        time.sleep(0.01)
    reader.stop.set()
    reader.join(10)
    fields = [("topic", topic), ("partitions", args.partitions), ("size", args.size),
              ("acks", -1), ("rate", args.rate), ("secs", args.secs),
              ("achieved_rate", f"{total / produced_s:.1f}"), ("sent", total),
              ("received", len(reader.e2e_us)), ("produce_errors", errors)]
    result("e2e", args.label, fields + latency_fields("e2e", reader.e2e_us)
           + latency_fields("ack", acks_us) + client_fields())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["tp", "replay", "lat"])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic", default="bench-client")
    p.add_argument("--label", help="label of the result lines (default: the mode)")
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--secs", type=int, default=20)
    p.add_argument("--timeout", type=float, default=120, help="seconds a read may take")
    args = p.parse_args()
    if args.size < STAMP.size:
        p.error(f"--size must be at least {STAMP.size} (the timestamp header)")
    args.label = args.label or args.mode
    {"tp": tp, "replay": replay, "lat": lat}[args.mode](args)


if __name__ == "__main__":
    main()
