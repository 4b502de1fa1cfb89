#!/usr/bin/env python3
"""Failover of a replicated partition, measured through librdkafka (issue 16).

Subcommands (the cluster itself is started by benches/scripts/replication.sh):

  ready BOOTSTRAP NODES [--probe CLUSTER]
      Waits (60 s at most) until Metadata at BOOTSTRAP lists NODES nodes' brokers and names
      a controller; with --probe, also creates a fresh topic through CLUSTER (a node's
      address) and waits until BOOTSTRAP lists it: a node that restarted has caught up
      with the metadata group (shardlog-load does not retry a partition its leader does
      not know yet).

  run BOOTSTRAP NODE=PID,NODE=PID,... [--rate R] [--before S] [--after S] [--rf N]
      (BOOTSTRAP: every node's address, comma-separated, so that the checker's consumer
      finds the cluster whichever node was killed)
      Creates a fresh topic of one partition with N replicas, produces R messages a second
      (idempotent, acks=all, one message per request: linger.ms=0), kills -9 the node that
      leads the partition after S seconds, produces S seconds more, then reads the partition
      back from the new leader and checks every acknowledged message: present once, at its
      acknowledged offset, offsets dense. Prints one RESULT line:

        leader_ms      kill -> Metadata (asked every 20 ms) names another leader, no error
        failover_ms    kill -> the first acknowledgement received after it
        first_new_ms   kill -> the acknowledgement of the first message sent after the kill
        stalled        messages sent before the kill and acknowledged after it
        acked, failed, lost, duplicated, gaps: the checker's counts (the last three must be 0)

      and the killed node's id on stderr, so the caller can restart it.
"""
import argparse
import os
import signal
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def ready(bootstrap, nodes, probe_cluster=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = None
    if probe_cluster:
        topic = f"probe-{uuid.uuid4().hex[:8]}"
        cluster = AdminClient({"bootstrap.servers": probe_cluster})
        for attempt in range(6):  # about a minute
            try:
                cluster.create_topics([NewTopic(topic, 1, 1)], request_timeout=10)[topic].result()
                break
            except Exception as e:
                print(f"probe topic, attempt {attempt + 1}: {e}", file=sys.stderr)
    deadline = time.time() + 60
    last = None
    while time.time() < deadline:
        try:
            md = admin.list_topics(timeout=2)
            node_ids = {b // 1024 for b in md.brokers}
            last = (sorted(md.brokers), md.controller_id, topic in md.topics)
            if len(node_ids) >= nodes and md.controller_id >= 0 and (
                topic is None or topic in md.topics
            ):
                return
        except Exception as e:  # the cluster may not answer yet
            last = e
        time.sleep(0.2)
    sys.exit(f"cluster at {bootstrap} not ready after 60 s: last view {last}")


def leader_of(admin, topic, deadline_s=60):
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        md = admin.list_topics(topic=topic, timeout=2)
        t = md.topics.get(topic)
        if t is not None and t.error is None and 0 in t.partitions:
            p = t.partitions[0]
            if p.error is None and p.leader >= 0:
                return p.leader
        time.sleep(0.1)
    sys.exit(f"no leader for {topic} after {deadline_s} s")


def run(args):
    pids = dict(tuple(int(x) for x in kv.split("=")) for kv in args.pids.split(","))
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    for _, f in admin.create_topics([NewTopic(topic, 1, args.rf)], request_timeout=30).items():
        f.result()
    leader = leader_of(admin, topic)
    victim = leader // 1024

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        "message.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    sent = {}  # seq -> send time
    acked = {}  # seq -> (offset, ack time)
    failed = {}

    def report(err, msg):
        seq = int(msg.value().decode())
        if err is None:
            acked[seq] = (msg.offset(), time.monotonic())
        else:
            failed[seq] = str(err)

    new_leader_at = []

    def watch_leader(killed_at):
        """Records when Metadata first names a leader other than the killed node's."""
        while time.monotonic() < killed_at + 60 and not new_leader_at:
            try:
                p = admin.list_topics(topic=topic, timeout=1).topics[topic].partitions[0]
                if p.error is None and p.leader >= 0 and p.leader != leader:
                    new_leader_at.append(time.monotonic())
            except Exception:
                pass
            time.sleep(0.02)

    interval = 1.0 / args.rate
    seq = 0
    start = time.monotonic()
    kill_at = start + args.before
    end = kill_at + args.after
    killed = None
    while True:
        now = time.monotonic()
        if killed is None and now >= kill_at:
            os.kill(pids[victim], signal.SIGKILL)
            killed = time.monotonic()
            watcher = threading.Thread(target=watch_leader, args=(killed,), daemon=True)
            watcher.start()
        if now >= end:
            break
        due = start + seq * interval
        if now >= due:
            sent[seq] = now
            producer.produce(topic, value=str(seq).encode(), on_delivery=report)
            seq += 1
        producer.poll(max(0.0, min(due + interval - time.monotonic(), 0.001)))
    remaining = producer.flush(120)
    watcher.join()
    leader_ms = (new_leader_at[0] - killed) * 1000 if new_leader_at else -1

    after_kill = [t for _, t in acked.values() if t >= killed]
    first_sent_after = min((s for s, t in sent.items() if t >= killed), default=None)
    failover_ms = (min(after_kill) - killed) * 1000 if after_kill else -1
    first_new_ms = (
        (acked[first_sent_after][1] - killed) * 1000
        if first_sent_after is not None and first_sent_after in acked else -1
    )
    stalled = sum(1 for s, (_, t) in acked.items() if sent[s] < killed <= t)

    # Read the partition back from whoever leads now.
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": f"failover-check-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    by_offset = {}
    want = max((o for o, _ in acked.values()), default=-1)
    deadline = time.time() + 120
    while (not by_offset or max(by_offset) < want) and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                print(f"consume: {msg.error()}", file=sys.stderr)
            continue
        by_offset[msg.offset()] = int(msg.value().decode())
    consumer.close()
    values = list(by_offset.values())
    duplicated = len(values) - len(set(values))
    lost = sum(1 for s, (o, _) in acked.items() if by_offset.get(o) != s)
    top = max(by_offset, default=-1)
    gaps = sum(1 for o in range(top + 1) if o not in by_offset)

    print(f"killed node {victim} (pid {pids[victim]})", file=sys.stderr)
    print(
        f"RESULT mode=failover rf={args.rf} rate={args.rate} sent={seq} acked={len(acked)} "
        f"failed={len(failed)} unflushed={remaining} lost={lost} duplicated={duplicated} "
        f"gaps={gaps} leader_ms={leader_ms:.0f} failover_ms={failover_ms:.0f} "
        f"first_new_ms={first_new_ms:.0f} "
        f"stalled={stalled} killed_node={victim}"
    )
    if lost or duplicated or gaps:
        sys.exit("acknowledged messages lost, duplicated or offsets not dense")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("ready")
    r.add_argument("bootstrap")
    r.add_argument("nodes", type=int)
    r.add_argument("--probe", metavar="CLUSTER")
    f = sub.add_parser("run")
    f.add_argument("bootstrap")
    f.add_argument("pids")
    f.add_argument("--rate", type=int, default=500)
    f.add_argument("--before", type=float, default=3)
    f.add_argument("--after", type=float, default=10)
    f.add_argument("--rf", type=int, default=3)
    args = parser.parse_args()
    if args.command == "ready":
        ready(args.bootstrap, args.nodes, args.probe)
    else:
        run(args)


if __name__ == "__main__":
    main()
