#!/usr/bin/env python3
"""Start-up tail of a librdkafka consumer group (issue 13, target 2).

Each run: a fresh topic (PARTITIONS partitions), a consumer in a new group subscribes and
waits for its assignment (on_assign), then a producer (acks=all, idempotent, linger.ms=0)
created at that moment sends RATE msg/s for SECS s, the first one START_DELAY_MS after
the assignment (0 by default: the set-up that showed the tail in issue 13). Each payload
carries its send time; the consumer records per-record end-to-end latency, the producer
the produce->delivery-report latency.

Reported per run, with the records grouped by send time after the assignment:
  first_s_max   worst end-to-end latency of the records sent in the first second
  steady_p99    p99 of the records sent after the first 2 s
  ratio         first_s_max / steady_p99 (the target is <= 2)
plus the overall p99, the worst produce->ack of the first second (a record whose ack is
as late as its delivery waited before the broker had it), and the first records' e2e/ack.

Two waits of librdkafka's own show up here whatever the broker (tansu shows both):
- a new idempotent producer that produces at once waits ~500 ms for its producer id
  (its PID timer; --warm-producer or --idempotence off removes it);
- a new group member with no committed offset sends its ListOffsets 100 ms after the
  assignment (the offset-reset backoff), so records sent in those 100 ms wait for it
  (--start-delay-ms 200 starts after it).
--warm-producer --start-delay-ms 200 leaves what the broker controls. A large
--fetch-wait-max-ms (30000) makes a parked fetch that a flush fails to wake obvious.

With --shardlog BIN a fresh broker (`--cores 2`) is started for every run, on free
loopback ports and a new data dir under --data-root; otherwise --bootstrap is used.

  python3 benches/compare/startup_tail.py --shardlog target/release/shardlog --runs 3
"""

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import confluent_kafka
from confluent_kafka import Consumer, Producer

from bench_results import pct, result
from kafka_client_bench import create_topic

STAMP = struct.Struct(">QQ")  # send time (perf_counter_ns), sequence number


def free_port_block(count):
    """A base port with `count` free ports after it (the bootstrap port, then one per
    shard): the broker listens on base, base+1, ..."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65535:
            continue
        taken = False
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    taken = True
                    break
        if not taken:
            return base
    raise SystemExit("no block of free loopback ports")


class Broker:
    """A fresh shardlog on loopback, stopped (and its data dir removed) on exit."""

    def __init__(self, binary, cores, data_root, log_level):
        os.makedirs(data_root, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="startup-tail-", dir=data_root)
        base = free_port_block(cores + 1)
        admin = free_port_block(1)
        self.bootstrap = f"127.0.0.1:{base}"
        self.log = open(os.path.join(self.dir, "broker.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--cores", str(cores), "--data-dir", os.path.join(self.dir, "data"),
             "--kafka-addr", self.bootstrap, "--admin-addr", f"127.0.0.1:{admin}",
             "--log-level", log_level],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"shardlog exited with {self.proc.returncode}, "
                                 f"log in {self.dir}/broker.log")
            try:
                socket.create_connection(("127.0.0.1", base), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("shardlog did not listen within 30 s")

    def stop(self, keep):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if keep:
            print(f"  broker log kept in {self.dir}/broker.log", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Reader(threading.Thread):
    """The consumer group member; `assigned_ns` is set by on_assign."""

    def __init__(self, bootstrap, topic, fetch_wait_max_ms):
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"tail-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "fetch.wait.max.ms": fetch_wait_max_ms})
        self.topic = topic
        self.assigned = threading.Event()
        self.assigned_ns = None
        self.stop = threading.Event()
        self.received = {}  # sequence -> (receive time ns, partition)

    def on_assign(self, _consumer, partitions):
        if partitions and self.assigned_ns is None:
            self.assigned_ns = time.perf_counter_ns()
            self.assigned.set()

    def run(self):
        self.consumer.subscribe([self.topic], on_assign=self.on_assign)
        while not self.stop.is_set():
            # poll(), not consume(num_messages=...): consume waits for a full batch or
            # its timeout, which would add up to the timeout to every latency.
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            now = time.perf_counter_ns()
            _, seq = STAMP.unpack_from(msg.value())
            self.received[seq] = (now, msg.partition())
        self.consumer.close()


PRODUCER_CONFIG = {"acks": "all", "enable.idempotence": True, "linger.ms": 0}


def producer_config(args, bootstrap):
    return PRODUCER_CONFIG | {"bootstrap.servers": bootstrap,
                              "enable.idempotence": args.idempotence == "on"}


def warm_producer(args, bootstrap, topic):
    """A producer that already holds its producer id, the topic's metadata and a
    connection to every shard: one record to each shard of a side topic (8 partitions)
    is acknowledged before the consumer subscribes, so the measured records pay none of
    the producer's own start-up."""
    producer = Producer(producer_config(args, bootstrap))
    side = f"{topic}-warm"
    create_topic(bootstrap, side, 8)
    for partition in range(8):
        producer.produce(side, b"warm", partition=partition)
    if producer.flush(30) != 0:
        raise SystemExit("the warm-up records were not acknowledged in 30 s")
    producer.list_topics(topic, timeout=10)
    return producer


def one_run(args, bootstrap, run):
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, args.partitions)
    producer = None
    if args.warm_producer:
        producer = warm_producer(args, bootstrap, topic)
    reader = Reader(bootstrap, topic, args.fetch_wait_max_ms)
    reader.start()
    if not reader.assigned.wait(30):
        raise SystemExit("the consumer got no partitions in 30 s")
    producer = producer or Producer(producer_config(args, bootstrap))
    tail = b"x" * (args.size - STAMP.size)
    sent_ns = {}
    acked_ns = {}

    def on_delivery(err, msg):
        if err is None:
            acked_ns[STAMP.unpack_from(msg.value())[1]] = time.perf_counter_ns()

    total = args.rate * args.secs
    start = reader.assigned_ns / 1e9 + args.start_delay_ms / 1e3
    for k in range(total):
        while (delay := start + k / args.rate - time.perf_counter()) > 0:
            producer.poll(delay)
        now = time.perf_counter_ns()
        sent_ns[k] = now
        producer.produce(topic, STAMP.pack(now, k) + tail, str(k % args.keys).encode(),
                         on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(30)
    deadline = time.perf_counter() + 5
    while len(reader.received) < total and time.perf_counter() < deadline:
        time.sleep(0.01)
    reader.stop.set()
    reader.join(10)
    return summarize(args, run, reader, sent_ns, acked_ns, total)


def summarize(args, run, reader, sent_ns, acked_ns, total):
    first, steady, everything, first_acks = [], [], [], []
    slow = []  # (latency ms, sent after assignment ms, partition) of first-second records
    slow_all = []  # the same, of every record
    for seq, sent in sent_ns.items():
        after_assign_s = (sent - reader.assigned_ns) / 1e9
        if seq in acked_ns and after_assign_s < 1.0:
            first_acks.append((acked_ns[seq] - sent) / 1e3)
        if seq not in reader.received:
            continue
        got, partition = reader.received[seq]
        e2e_us = (got - sent) / 1e3
        everything.append(e2e_us)
        slow_all.append((e2e_us / 1e3, after_assign_s * 1e3, partition))
        if after_assign_s < 1.0:
            first.append(e2e_us)
            slow.append((e2e_us / 1e3, after_assign_s * 1e3, partition))
        elif after_assign_s >= 2.0:
            steady.append(e2e_us)
    first_max = max(first) if first else 0
    steady_p99 = pct(steady, 0.99)
    slow.sort(reverse=True)
    slow_all.sort(reverse=True)
    fields = [("run", run), ("sent", total), ("received", len(reader.received)),
              ("first_s_count", len(first)), ("first_s_max_us", int(first_max)),
              ("steady_p50_us", int(pct(steady, 0.5))), ("steady_p99_us", int(steady_p99)),
              ("ratio", f"{first_max / steady_p99:.2f}" if steady_p99 else "nan"),
              ("all_p99_us", int(pct(everything, 0.99))),
              ("all_max_us", int(max(everything)) if everything else 0),
              ("first_s_ack_max_us", int(max(first_acks)) if first_acks else 0),
              ("fetch_wait_max_ms", args.fetch_wait_max_ms),
              ("start_delay_ms", args.start_delay_ms),
              ("warm_producer", str(args.warm_producer).lower()),
              ("idempotence", args.idempotence),
              ("client", f"confluent-kafka-{confluent_kafka.__version__}"),
              ("librdkafka", confluent_kafka.libversion()[0])]
    result("startup-tail", args.label, fields)
    first_sent = sorted(sent_ns)[:8]
    print("  first records (e2e ms / ack ms): " + ", ".join(
        f"{(reader.received[q][0] - sent_ns[q]) / 1e6:.1f}/"
        f"{(acked_ns[q] - sent_ns[q]) / 1e6:.1f}"
        for q in first_sent if q in reader.received and q in acked_ns))
    for name, records in (("first-second", slow), ("all", slow_all)):
        print(f"  slowest {name} records (e2e ms @ sent ms after assignment / partition): "
              + ", ".join(f"{e:.1f}@{s:.0f}/p{p}" for e, s, p in records[:5]))
    return first_max, steady_p99


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--shardlog", help="start a fresh broker from this binary for each run")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--data-root", default="target/startup-tail",
                   help="where the fresh brokers' data dirs go (a real disk, not tmpfs)")
    p.add_argument("--log-level", default="info")
    p.add_argument("--keep-logs", action="store_true")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--label", default="startup-tail")
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--secs", type=int, default=10)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--start-delay-ms", type=int, default=0,
                   help="first send this long after the assignment")
    p.add_argument("--warm-producer", action="store_true",
                   help="connect the producer (and get its producer id) before the "
                   "consumer subscribes, so the figure is the consumer's alone")
    p.add_argument("--idempotence", choices=["on", "off"], default="on",
                   help="the producer's enable.idempotence")
    p.add_argument("--fetch-wait-max-ms", type=int, default=500,
                   help="the consumer's fetch.wait.max.ms (librdkafka's default is 500)")
    args = p.parse_args()
    ratios = []
    for run in range(1, args.runs + 1):
        broker = None
        if args.shardlog:
            broker = Broker(os.path.abspath(args.shardlog), args.cores,
                            os.path.abspath(args.data_root), args.log_level)
        try:
            first_max, steady_p99 = one_run(args, broker.bootstrap if broker else
                                            args.bootstrap, run)
            ratios.append(first_max / steady_p99 if steady_p99 else float("inf"))
        finally:
            if broker:
                broker.stop(args.keep_logs)
    print(f"first-second worst / steady p99 per run: "
          + ", ".join(f"{r:.2f}" for r in ratios)
          + f"; median {sorted(ratios)[len(ratios) // 2]:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
