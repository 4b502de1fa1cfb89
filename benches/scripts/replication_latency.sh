#!/usr/bin/env bash
# Replication factor 3 against 1 (issue 16, step 3): three broker processes on 127.0.0.1
# (--cores 1 each, one data dir each under a temp dir), a topic of one partition with
# replication factor 3 and one with 1 (created with confluent-kafka's admin client, which
# finds the controller), then shardlog-load produces to each in turn, ROUNDS times: rf1
# acks=all, rf3 acks=all, rf3 acks=1 (answered on the leader's fdatasync:
# docs/replication.md, "acks=1: the leader's fdatasync"); 50,000 x 1 KiB records, batches
# of 16, one request in flight, so produce->ack latency is one request's. Prints every
# RESULT line, labelled <topic>-acks<acks>.
# Needs target/release/shardlog and shardlog-load built (cargo build --release) and
# python3 with confluent_kafka.
# Usage: benches/scripts/replication_latency.sh [ROUNDS]   (default 2; about 30 s a round)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
target=${CARGO_TARGET_DIR:-target}
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
source tests/lib/ports.sh
base=$(free_port_block 12) # 4 per node: bootstrap, shard, replication, admin
peers="1=127.0.0.1:$base,2=127.0.0.1:$((base + 4)),3=127.0.0.1:$((base + 8))"
for n in 1 2 3; do
  port=$((base + 4 * (n - 1)))
  SHARDLOG_LOG=info NO_COLOR=1 "$target/release/shardlog" --data-dir "$dir/n$n" \
    --kafka-addr "127.0.0.1:$port" --cores 1 --segment-bytes 67108864 \
    --admin-addr "127.0.0.1:$((port + 3))" --node-id "$n" --peers "$peers" \
    >"$dir/n$n.log" 2>&1 &
  pids+=($!)
done
sleep 4
BASE=$base python3 - <<'PY'
import os
from confluent_kafka.admin import AdminClient, NewTopic
base = int(os.environ["BASE"])
bootstrap = ",".join(f"127.0.0.1:{base + 4 * n}" for n in range(3))
admin = AdminClient({"bootstrap.servers": bootstrap})
for name, rf in (("rf3", 3), ("rf1", 1)):
    for future in admin.create_topics([NewTopic(name, 1, rf)], request_timeout=30).values():
        future.result()
PY
sleep 6 # the rf3 group's election
for _ in $(seq "$rounds"); do
  for run in rf1:all rf3:all rf3:1; do
    topic=${run%:*} acks=${run#*:}
    "$target/release/shardlog-load" produce --bootstrap 127.0.0.1:$base --topic "$topic" \
      --partitions 1 --messages 50000 --size 1024 --acks "$acks" --in-flight 1 --keys 0 \
      --label "$topic-acks$acks" | grep RESULT
  done
done
# How many acks=1 answers the leaders gave on their own fdatasync, before the commit
# (docs/replication.md, "acks=1: the leader's fdatasync"), and any misprediction.
for n in 1 2 3; do
  BASE=$base N=$n python3 - <<'PY'
import os, urllib.request
port = int(os.environ["BASE"]) + 4 * (int(os.environ["N"]) - 1) + 3
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
for name in ("shardlog_replicated_early_acks_total", "shardlog_replicated_early_ack_mispredictions_total"):
    total = sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + "{"))
    print(f"node {os.environ['N']}: {name} {total:.0f}")
PY
done
