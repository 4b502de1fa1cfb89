#!/usr/bin/env python3
"""Failover of a replicated partition, measured through librdkafka (issue 16).

Subcommands (for `ready` and `run` the cluster is started by benches/scripts/replication.sh;
`rolling` starts its own):

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

  rolling BINARY [--rate R] [--settle S] [--passes N] [--keep-logs DIR] [--producer-log FILE]
          [--watch-log FILE] [--producer-config KEY=VALUE]... [--broker-arg ARG]...
      A rolling restart under load, with a cluster of its own (it must start and wait for
      the nodes it stops): 3 nodes of BINARY on 127.0.0.1 (`--cores 1` each, node ids 1-3,
      data dirs in a temp dir under BENCH_TMP or target/, a block of 4 ports per node as in
      replication.sh). A fresh RF 3 topic of one partition, the same producer as `run` at R
      messages a second; then each node in turn (N passes over the three) is stopped with
      SIGTERM (the graceful shutdown), started again once it exited, waited for until it
      names the partition's leader itself and has caught up, then S seconds before the
      next. One RESULT line per restart:

        led          1 if the node led the partition when it was stopped
        exit         its exit status (0 for a clean graceful stop)
        leader_ms    SIGTERM -> Metadata from another node (asked every 20 ms, raw Metadata
                     v7 to that node alone) names a leader in a higher epoch, no error (-1:
                     the node did not lead; the new leader may be the node itself, back)
        stop_ms      SIGTERM -> the process exited
        back_ms      SIGTERM -> the restarted node names the leader
        caught_up_ms SIGTERM -> its copy of the partition is as large as the leader's was at
                     back_ms (DescribeLogDirs of each, raw); the next restart waits for it
        gap_ms       the longest time without an acknowledgement, from the last one before
                     the SIGTERM to the next SIGTERM (or the end)

      then one RESULT mode=rolling line with the checker's counts, as `run` prints them;
      exits 1 if one is not 0 or a stop's exit status was not 0.
"""
import argparse
import bisect
import datetime
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
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


PRODUCER = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 0,
    "message.timeout.ms": 120000,
    "topic.metadata.refresh.interval.ms": 1000,
}


class MonotonicFormatter(logging.Formatter):
    def format(self, record):
        return f"{time.monotonic():.3f} {record.getMessage()}"


class Load:
    """An idempotent acks=all producer of sequence numbers to partition 0 of a topic:
    when each was sent and acknowledged (monotonic seconds), and at which offset."""

    def __init__(self, bootstrap, topic, debug_log=None, extra=()):
        self.topic = topic
        config = {"bootstrap.servers": bootstrap, **PRODUCER, **dict(extra)}
        if debug_log:
            # librdkafka's own account of metadata, leaders and retries, each line stamped
            # with the monotonic clock the RESULT lines' times come from.
            config["debug"] = "broker,topic,metadata,eos,protocol"
            handler = logging.FileHandler(debug_log)
            handler.setFormatter(MonotonicFormatter())
            logger = logging.getLogger("librdkafka")
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
            self.producer = Producer(config, logger=logger)
        else:
            self.producer = Producer(config)
        self.sent = {}  # seq -> send time
        self.acked = {}  # seq -> (offset, ack time)
        self.failed = {}
        self.seq = 0

    def report(self, err, msg):
        seq = int(msg.value().decode())
        if err is None:
            self.acked[seq] = (msg.offset(), time.monotonic())
        else:
            self.failed[seq] = str(err)

    def pace(self, rate, until):
        """Sends `rate` messages a second from now until `until()` is true."""
        interval = 1.0 / rate
        start = time.monotonic()
        first = self.seq
        while not until():
            due = start + (self.seq - first) * interval
            now = time.monotonic()
            if now >= due:
                self.sent[self.seq] = now
                self.producer.produce(
                    self.topic, value=str(self.seq).encode(), on_delivery=self.report
                )
                self.seq += 1
            self.producer.poll(max(0.0, min(due + interval - time.monotonic(), 0.001)))

    def flush(self):
        """Waits (120 s at most) for every delivery report; how many did not come."""
        return self.producer.flush(120)


def check(bootstrap, topic, acked):
    """Reads partition 0 back from whoever leads now: (lost, duplicated, gaps) among the
    acknowledged messages `acked` (seq -> (offset, time))."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
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
    return lost, duplicated, gaps


def create_topic(admin, prefix, rf):
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for _, f in admin.create_topics([NewTopic(topic, 1, rf)], request_timeout=30).items():
        f.result()
    return topic


def run(args):
    pids = dict(tuple(int(x) for x in kv.split("=")) for kv in args.pids.split(","))
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topic = create_topic(admin, "failover", args.rf)
    leader = leader_of(admin, topic)
    victim = leader // 1024
    load = Load(args.bootstrap, topic)
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

    start = time.monotonic()
    load.pace(args.rate, lambda: time.monotonic() >= start + args.before)
    os.kill(pids[victim], signal.SIGKILL)
    killed = time.monotonic()
    watcher = threading.Thread(target=watch_leader, args=(killed,), daemon=True)
    watcher.start()
    load.pace(args.rate, lambda: time.monotonic() >= killed + args.after)
    remaining = load.flush()
    watcher.join()
    leader_ms = (new_leader_at[0] - killed) * 1000 if new_leader_at else -1

    sent, acked = load.sent, load.acked
    after_kill = [t for _, t in acked.values() if t >= killed]
    first_sent_after = min((s for s, t in sent.items() if t >= killed), default=None)
    failover_ms = (min(after_kill) - killed) * 1000 if after_kill else -1
    first_new_ms = (
        (acked[first_sent_after][1] - killed) * 1000
        if first_sent_after is not None and first_sent_after in acked else -1
    )
    stalled = sum(1 for s, (_, t) in acked.items() if sent[s] < killed <= t)
    lost, duplicated, gaps = check(args.bootstrap, topic, acked)

    print(f"killed node {victim} (pid {pids[victim]})", file=sys.stderr)
    print(
        f"RESULT mode=failover rf={args.rf} rate={args.rate} sent={load.seq} acked={len(acked)} "
        f"failed={len(load.failed)} unflushed={remaining} lost={lost} duplicated={duplicated} "
        f"gaps={gaps} leader_ms={leader_ms:.0f} failover_ms={failover_ms:.0f} "
        f"first_new_ms={first_new_ms:.0f} "
        f"stalled={stalled} killed_node={victim}"
    )
    if lost or duplicated or gaps:
        sys.exit("acknowledged messages lost, duplicated or offsets not dense")


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port_block(count):
    """tests/lib/ports.sh's free_port_block: a free block below the ephemeral range."""
    ports = os.path.join(ROOT, "tests", "lib", "ports.sh")
    out = subprocess.run(
        ["bash", "-c", f'source "{ports}" && free_port_block {count}'],
        check=True, capture_output=True, text=True,
    )
    return int(out.stdout.strip())


class Cluster:
    """3 nodes of `binary` on 127.0.0.1, started and stopped by this process (the same
    flags and port layout as replication.sh's `start`)."""

    def __init__(self, binary, work, extra=()):
        self.binary, self.work, self.extra = binary, work, list(extra)
        self.base = free_port_block(12)
        self.peers = ",".join(f"{n}=127.0.0.1:{self.port(n)}" for n in (1, 2, 3))
        self.procs = {}

    def port(self, node):
        return self.base + 4 * (node - 1)

    def addr(self, node):
        return f"127.0.0.1:{self.port(node)}"

    def bootstrap(self):
        return ",".join(self.addr(n) for n in (1, 2, 3))

    def start(self, node):
        log = open(os.path.join(self.work, f"node{node}.log"), "ab")
        self.procs[node] = subprocess.Popen(
            [self.binary, "--data-dir", os.path.join(self.work, f"node{node}"),
             "--kafka-addr", self.addr(node),
             "--admin-addr", f"127.0.0.1:{self.port(node) + 3}",
             "--cores", "1", "--node-id", str(node), "--peers", self.peers, *self.extra],
            stdout=log, stderr=subprocess.STDOUT,
        )

    def healthy(self, node, limit_s=60):
        url = f"http://127.0.0.1:{self.port(node) + 3}/health"
        deadline = time.time() + limit_s
        while time.time() < deadline:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                return
            except Exception:
                time.sleep(0.1)
        sys.exit(f"node {node} not healthy after {limit_s} s")

    def stop_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()


def raw_call(addr, api_key, version, body, timeout=0.5):
    """One request (header v1) to the node at `addr` alone, over a socket of our own: the
    response body after the correlation id, or None if the node does not answer."""
    host, port = addr.split(":")
    client = b"failover"
    request = struct.pack(">hhih", api_key, version, 1, len(client)) + client + body
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(request)) + request)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
    except OSError:
        return None
    return data[8:]


def skip_string(data, at):
    (length,) = struct.unpack_from(">h", data, at)
    return at + 2 + max(length, 0)


def metadata_leader(addr, topic):
    """(error, leader, leader epoch, ISR nodes) of partition 0 of `topic` as the node at
    `addr` names it, or None if it does not answer: Metadata v7 to that node alone (librdkafka's
    list_topics may ask any broker it knows, the one being stopped included)."""
    name = topic.encode()
    data = raw_call(addr, 3, 7, struct.pack(">ih", 1, len(name)) + name + b"\x00")
    if data is None:
        return None
    (brokers,) = struct.unpack_from(">i", data, 4)  # after the throttle time
    at = 8
    for _ in range(brokers):
        at = skip_string(data, skip_string(data, at + 4) + 4)  # id, host, port, rack
    at = skip_string(data, at) + 4 + 4  # cluster id, controller id, one topic
    (topic_error,) = struct.unpack_from(">h", data, at)
    at = skip_string(data, at + 2) + 1  # name, is_internal
    (partitions,) = struct.unpack_from(">i", data, at)
    if topic_error or partitions < 1:
        return (topic_error or -1, -1, -1, [])
    error, _, leader, epoch = struct.unpack_from(">hiii", data, at + 4)
    at += 4 + 14
    (replicas,) = struct.unpack_from(">i", data, at)
    at += 4 + 4 * replicas
    (isr_count,) = struct.unpack_from(">i", data, at)
    isr = struct.unpack_from(f">{isr_count}i", data, at + 4)
    return (error, leader, epoch, [b // 1024 for b in isr])


def watch_metadata(cluster, topic, path, done):
    """Every 100 ms until `done()`: each node's view of partition 0 (error, leader node,
    epoch, ISR nodes), one line per node, monotonic seconds first (`--watch-log`)."""
    with open(path, "w") as out:
        while not done():
            for n in (1, 2, 3):
                seen = metadata_leader(cluster.addr(n), topic)
                if seen:
                    error, leader, epoch, isr = seen
                    out.write(f"{time.monotonic():.3f} node={n} error={error} "
                              f"leader={leader // 1024 if leader >= 0 else -1} epoch={epoch} "
                              f"isr={','.join(map(str, isr))}\n")
                else:
                    out.write(f"{time.monotonic():.3f} node={n} no answer\n")
            out.flush()
            time.sleep(0.1)


def partition_size(addr, topic):
    """The size in bytes of partition 0 of `topic` in the log of the node at `addr`
    (DescribeLogDirs v1 of every topic), or None if it does not answer or has none."""
    data = raw_call(addr, 35, 1, struct.pack(">i", -1))
    if data is None:
        return None
    (dirs,) = struct.unpack_from(">i", data, 4)
    at = 8
    for _ in range(dirs):
        at = skip_string(data, at + 2)  # error, log dir
        (topics,) = struct.unpack_from(">i", data, at)
        at += 4
        for _ in range(topics):
            end = skip_string(data, at)
            name = data[at + 2:end].decode()
            (partitions,) = struct.unpack_from(">i", data, end)
            at = end + 4
            for _ in range(partitions):
                index, size = struct.unpack_from(">iq", data, at)
                if name == topic and index == 0:
                    return size
                at += 4 + 8 + 8 + 1  # index, size, offset lag, is future
    return None


def watch_new_leader(cluster, topic, stopped, epoch, since, found):
    """Appends to `found` the first time (monotonic) a node other than `stopped` names a
    leader in an epoch above `epoch`, without error (the stopped node itself may win the
    election once it is back); gives up after 60 s."""
    others = [n for n in (1, 2, 3) if n != stopped]
    while time.monotonic() < since + 60:
        for n in others:
            seen = metadata_leader(cluster.addr(n), topic)
            if seen and seen[0] == 0 and seen[1] >= 0 and seen[2] > epoch:
                found.append(time.monotonic())
                return
        time.sleep(0.02)


def restart_one(cluster, topic, node, settle):
    """SIGTERM to `node`, its exit, its start, until it names the leader itself and its
    copy of the partition holds what the leader's held then (caught up), then `settle`
    seconds: what one RESULT line reports (times in monotonic seconds)."""
    # A leader may be between elections (a check-quorum step-down): wait for one.
    asked = time.monotonic()
    while True:
        before = metadata_leader(cluster.addr(node % 3 + 1), topic)
        if before and before[0] == 0 and before[1] >= 0:
            break
        if time.monotonic() > asked + 30:
            sys.exit(f"node {node % 3 + 1} names no leader before node {node}'s restart: {before}")
        time.sleep(0.02)
    led = before[1] // 1024 == node
    found = []
    stopped, stopped_wall = time.monotonic(), time.time()
    cluster.procs[node].send_signal(signal.SIGTERM)
    watcher = threading.Thread(
        target=watch_new_leader, args=(cluster, topic, node, before[2], stopped, found)
    )
    if led:
        watcher.start()
    status = cluster.procs[node].wait(90)
    exited = time.monotonic()
    cluster.start(node)
    cluster.healthy(node)
    while True:
        seen = metadata_leader(cluster.addr(node), topic)
        if seen and seen[0] == 0 and seen[1] >= 0:
            break
        if time.monotonic() > stopped + 120:
            sys.exit(f"node {node} names no leader 120 s after its restart: {seen}")
        time.sleep(0.02)
    back = time.monotonic()
    leader = cluster.addr(seen[1] // 1024)
    target = partition_size(leader, topic)
    while (partition_size(cluster.addr(node), topic) or -1) < (target or 0):
        if time.monotonic() > stopped + 120:
            sys.exit(f"node {node} not caught up with {target} bytes 120 s after its restart")
        time.sleep(0.02)
    caught_up = time.monotonic()
    if led:
        watcher.join()
    time.sleep(settle)
    return {"node": node, "led": int(led), "exit": status, "stopped": stopped,
            "stopped_wall": stopped_wall,
            "leader": found[0] if found else None, "exited": exited, "back": back,
            "caught_up": caught_up}


def longest_gap(ack_times, start, end):
    """The longest time between consecutive acknowledgements (`ack_times` sorted), over
    those from the last one before `start` to the first one at or after `end`."""
    first = max(bisect.bisect_left(ack_times, start) - 1, 0)
    last = min(bisect.bisect_left(ack_times, end), len(ack_times) - 1)
    window = ack_times[first:last + 1]
    return max((b - a for a, b in zip(window, window[1:])), default=0.0)


def rolling(args):
    work = tempfile.mkdtemp(prefix="shardlog-rolling.", dir=os.environ.get("BENCH_TMP",
                            os.path.join(ROOT, "target")))
    cluster = Cluster(os.path.abspath(args.binary), work, args.broker_arg)
    try:
        for n in (1, 2, 3):
            cluster.start(n)
        for n in (1, 2, 3):
            cluster.healthy(n)
        ready(cluster.bootstrap(), 3)
        rolling_under_load(args, cluster)
    finally:
        cluster.stop_all()
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            for n in (1, 2, 3):
                shutil.copy(os.path.join(work, f"node{n}.log"), args.keep_logs)
        shutil.rmtree(work, ignore_errors=True)


def rolling_under_load(args, cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    topic = create_topic(admin, "rolling", 3)
    leader_of(admin, topic)
    extra = [kv.split("=", 1) for kv in args.producer_config]
    load = Load(cluster.bootstrap(), topic, args.producer_log, extra)
    done = threading.Event()
    # Daemons: a run that exits early (sys.exit) must not hang on them.
    producer = threading.Thread(target=load.pace, args=(args.rate, done.is_set), daemon=True)
    producer.start()
    if args.watch_log:
        threading.Thread(
            target=watch_metadata, args=(cluster, topic, args.watch_log, done.is_set),
            daemon=True,
        ).start()
    time.sleep(args.settle)
    restarts = [
        restart_one(cluster, topic, node, args.settle)
        for _ in range(args.passes) for node in (1, 2, 3)
    ]
    done.set()
    producer.join()
    remaining = load.flush()
    ack_times = sorted(t for _, t in load.acked.values())
    ends = [r["stopped"] for r in restarts[1:]] + [time.monotonic()]
    for r, end in zip(restarts, ends):
        ms = lambda t: (t - r["stopped"]) * 1000 if t is not None else -1  # noqa: E731
        gap_ms = longest_gap(ack_times, r["stopped"], end) * 1000
        print(
            f"RESULT mode=restart node={r['node']} led={r['led']} exit={r['exit']} "
            f"leader_ms={ms(r['leader']):.0f} stop_ms={ms(r['exited']):.0f} "
            f"back_ms={ms(r['back']):.0f} caught_up_ms={ms(r['caught_up']):.0f} "
            f"gap_ms={gap_ms:.0f} stopped_at={r['stopped']:.3f} "
            f"stopped_utc={datetime.datetime.fromtimestamp(r['stopped_wall'], datetime.UTC):%H:%M:%S.%f}",
            flush=True,
        )
    lost, duplicated, gaps = check(cluster.bootstrap(), topic, load.acked)
    print(
        f"RESULT mode=rolling rf=3 rate={args.rate} restarts={len(restarts)} sent={load.seq} "
        f"acked={len(load.acked)} failed={len(load.failed)} unflushed={remaining} lost={lost} "
        f"duplicated={duplicated} gaps={gaps}"
    )
    if lost or duplicated or gaps or any(r["exit"] != 0 for r in restarts):
        sys.exit("acknowledged messages lost, duplicated, offsets not dense, or an unclean stop")


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
    g = sub.add_parser("rolling")
    g.add_argument("binary")
    g.add_argument("--rate", type=int, default=500)
    g.add_argument("--settle", type=float, default=3)
    g.add_argument("--passes", type=int, default=1)
    g.add_argument("--keep-logs", metavar="DIR")
    g.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a librdkafka setting of the producer (repeatable)")
    g.add_argument("--watch-log", metavar="FILE",
                   help="every node's leader, epoch and ISR every 100 ms, monotonic times")
    g.add_argument("--producer-log", metavar="FILE",
                   help="librdkafka's debug log of the producer, monotonic times")
    g.add_argument("--broker-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for every node (repeat it), e.g. "
                        "--broker-arg=--leader-imbalance-check-interval-ms=1000")
    args = parser.parse_args()
    if args.command == "ready":
        ready(args.bootstrap, args.nodes, args.probe)
    elif args.command == "run":
        run(args)
    else:
        rolling(args)


if __name__ == "__main__":
    main()
