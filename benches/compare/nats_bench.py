#!/usr/bin/env python3
"""The reference workload against NATS JetStream, with nats-py (asyncio).

tp:     N messages of SIZE bytes published to a file-storage stream, subjects
        bench.<partition> (partition = murmur2-free stand-in: hash of key i % KEYS over
        PARTITIONS), each confirmed by a JetStream PubAck; up to WINDOW unconfirmed.
replay: a new ordered push consumer reads the whole stream from the start.
lat:    RATE msg/s for SECS s, one js.publish (awaiting its PubAck) at a time, while a
        push consumer receives; end-to-end latency from a timestamp in the payload.

Prints `RESULT mode=produce|consume|e2e label=... key=value` lines in the same shape as
shardlog-load. This is a Python client: its own ceiling (measured with --ceiling, which
publishes core NATS messages without JetStream) bounds what it can show.
"""

import argparse
import asyncio
import collections
import struct
import time

import nats
from nats.js.api import DeliverPolicy, StorageType, StreamConfig

from bench_results import latency_fields, result


async def fresh_stream(js, name, subjects):
    try:
        await js.delete_stream(name)
    except Exception:
        pass
    await js.add_stream(StreamConfig(name=name, subjects=subjects, storage=StorageType.FILE))


async def tp(args):
    nc = await nats.connect(args.server)
    js = nc.jetstream()
    await fresh_stream(js, args.stream, [f"{args.stream}.*"])
    payload_tail = b"x" * (args.size - 16)
    sent_at = collections.deque()
    acks_us = []
    outstanding = asyncio.Semaphore(args.window)
    done = asyncio.Event()
    acked = 0
    errors = 0

    async def on_ack(msg):
        nonlocal acked, errors
        t = sent_at.popleft()
        acks_us.append((time.perf_counter_ns() - t) / 1e3)
        if b'"error"' in msg.data:
            errors += 1
        acked += 1
        outstanding.release()
        if acked == args.messages:
            done.set()

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_ack)
    start = time.perf_counter()
    for i in range(args.messages):
        await outstanding.acquire()
        partition = hash(str(i % args.keys)) % args.partitions
        now = time.perf_counter_ns()
        sent_at.append(now)
        payload = struct.pack(">QQ", now, i) + payload_tail
        await nc.publish(f"{args.stream}.{partition}", payload, reply=inbox)
    await nc.flush()
    await asyncio.wait_for(done.wait(), timeout=300)
    elapsed = time.perf_counter() - start
    fields = [("sent", args.messages), ("acked", acked), ("errors", errors),
              ("elapsed_ms", f"{elapsed * 1e3:.1f}"),
              ("msg_per_s", f"{args.messages / elapsed:.1f}"),
              ("mb_per_s", f"{args.messages * args.size / 1e6 / elapsed:.1f}")]
    result("produce", args.label, fields + latency_fields("ack", acks_us))
    await nc.close()


async def replay(args):
    nc = await nats.connect(args.server)
    js = nc.jetstream()
    info = await js.stream_info(args.stream)
    total = info.state.messages
    done = asyncio.Event()
    received = 0
    value_bytes = 0

    async def on_msg(msg):
        nonlocal received, value_bytes
        received += 1
        value_bytes += len(msg.data)
        if received >= total:
            done.set()

    start = time.perf_counter()
    # An ordered push consumer: flow-controlled, no acks, the fastest reader nats-py has.
    await js.subscribe(f"{args.stream}.*", cb=on_msg, ordered_consumer=True,
                       deliver_policy=DeliverPolicy.ALL)
    try:
        await asyncio.wait_for(done.wait(), timeout=300)
    except asyncio.TimeoutError:
        pass
    elapsed = time.perf_counter() - start
    result("consume", args.label, [
        ("records", received), ("elapsed_ms", f"{elapsed * 1e3:.1f}"),
        ("msg_per_s", f"{received / elapsed:.1f}"),
        ("mb_per_s", f"{value_bytes / 1e6 / elapsed:.1f}")])
    await nc.close()


async def lat(args):
    nc = await nats.connect(args.server)
    js = nc.jetstream()
    stream = args.stream + "LAT"
    await fresh_stream(js, stream, [f"{stream}.*"])
    e2e_us = []

    async def on_msg(msg):
        sent_ns = struct.unpack(">Q", msg.data[:8])[0]
        e2e_us.append((time.perf_counter_ns() - sent_ns) / 1e3)

    # Ordered consumer: no acks, so delivery never stalls at max_ack_pending.
    await js.subscribe(f"{stream}.*", cb=on_msg, ordered_consumer=True,
                       deliver_policy=DeliverPolicy.NEW)
    tail = b"x" * (args.size - 16)
    total = args.rate * args.secs
    acks_us = []
    start = time.perf_counter() + 0.2
    for k in range(total):
        delay = start + k / args.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.perf_counter_ns()
        await js.publish(f"{stream}.{k % args.partitions}", struct.pack(">QQ", now, k) + tail)
        acks_us.append((time.perf_counter_ns() - now) / 1e3)
    produced_s = time.perf_counter() - start
    deadline = time.perf_counter() + 5
    while len(e2e_us) < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    fields = [("rate", args.rate), ("secs", args.secs),
              ("achieved_rate", f"{total / produced_s:.1f}"),
              ("sent", total), ("received", len(e2e_us))]
    result("e2e", args.label, fields + latency_fields("e2e", e2e_us)
           + latency_fields("ack", acks_us))
    await nc.close()


async def ceiling(args):
    """Core NATS publish + flush, no JetStream: what this Python client can push."""
    nc = await nats.connect(args.server)
    payload = b"x" * args.size
    start = time.perf_counter()
    for i in range(args.messages):
        await nc.publish("ceiling.test", payload)
    await nc.flush()
    elapsed = time.perf_counter() - start
    result("client_ceiling", args.label, [
        ("messages", args.messages), ("msg_per_s", f"{args.messages / elapsed:.1f}"),
        ("mb_per_s", f"{args.messages * args.size / 1e6 / elapsed:.1f}")])
    await nc.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["tp", "replay", "lat", "ceiling"])
    p.add_argument("--server", default="nats://127.0.0.1:4222")
    p.add_argument("--label", default="nats")
    p.add_argument("--stream", default="BENCH")
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--secs", type=int, default=20)
    args = p.parse_args()
    asyncio.run({"tp": tp, "replay": replay, "lat": lat, "ceiling": ceiling}[args.mode](args))


if __name__ == "__main__":
    main()
