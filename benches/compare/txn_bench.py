#!/usr/bin/env python3
"""Transactional produce against idempotent produce, one broker (issue 15's figures).

confluent-kafka (librdkafka), 1 KiB records to a 3-partition topic, acks=all, linger.ms=5
(--linger-ms):
  - idempotent: N records, flush, msg/s;
  - transactional: the same N records in transactions of --txn-records each
    (begin, produce, commit_transaction), msg/s, and the commit latency of each
    transaction (commit_transaction call to return: the flush of its records, EndTxn,
    the markers' fdatasync).
Prints `RESULT mode=... msgs_per_s=... commit_p50_ms=... commit_p99_ms=...`.

Usage: txn_bench.py --bootstrap HOST:PORT [--records N] [--txn-records K] [--rounds R]
                    [--linger-ms L]
"""
import argparse
import statistics
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def make_topic(bootstrap):
    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result()
    return name


def produce(producer, topic, payload, i):
    """Queues record `i` (key i % 1000), serving delivery reports while the queue is full."""
    while True:
        try:
            producer.produce(topic, payload, key=str(i % 1000))
            return
        except BufferError:
            producer.poll(0.01)


def idempotent(bootstrap, topic, records, payload, linger_ms):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": linger_ms})
    started = time.perf_counter()
    for i in range(records):
        produce(producer, topic, payload, i)
        producer.poll(0)
    assert producer.flush(60) == 0
    return records / (time.perf_counter() - started), []


def transactional(bootstrap, topic, records, payload, per_txn, linger_ms):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                         "transactional.id": f"txn-bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    commits = []
    started = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for _ in range(min(per_txn, records - sent)):
            produce(producer, topic, payload, sent)
            sent += 1
        t = time.perf_counter()
        producer.commit_transaction(30)
        commits.append((time.perf_counter() - t) * 1000)
    return records / (time.perf_counter() - started), commits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--txn-records", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5)
    args = parser.parse_args()
    payload = b"x" * 1024
    for round_ in range(1, args.rounds + 1):
        for mode in ("idempotent", "transactional"):
            topic = make_topic(args.bootstrap)
            if mode == "idempotent":
                rate, commits = idempotent(args.bootstrap, topic, args.records, payload,
                                           args.linger_ms)
            else:
                rate, commits = transactional(args.bootstrap, topic, args.records, payload,
                                              args.txn_records, args.linger_ms)
            extra = ""
            if commits:
                extra = (f" txns={len(commits)} commit_p50_ms={statistics.median(commits):.2f}"
                         f" commit_p99_ms={percentile(commits, 0.99):.2f}")
            print(f"RESULT round={round_} mode={mode} records={args.records} "
                  f"txn_records={args.txn_records} linger_ms={args.linger_ms} "
                  f"msgs_per_s={rate:.0f}{extra}", flush=True)


if __name__ == "__main__":
    main()
