#!/usr/bin/env bash
# Replication factor 3 against 1 (issue 16, step 3): three broker processes on 127.0.0.1
# (--cores 1 each, one data dir each under a temp dir), a topic of one partition with
# replication factor 3 and one with 1 (created with confluent-kafka's admin client, which
# finds the controller), then shardlog-load produce to each in turn, ROUNDS times (rf1,
# rf3, rf1, rf3, ...): 50,000 x 1 KiB records, batches of 16, acks=all, one request in
# flight, so produce->ack latency is one request's. Prints every RESULT line.
# Needs target/release/shardlog and shardlog-load built (cargo build --release) and
# python3 with confluent_kafka.
# Usage: benches/scripts/replication_latency.sh [ROUNDS]   (default 2; about 20 s a round)
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
python3 - <<'PY'
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": "127.0.0.1:29100,127.0.0.1:29104,127.0.0.1:29108"})
for name, rf in (("rf3", 3), ("rf1", 1)):
    for future in admin.create_topics([NewTopic(name, 1, rf)], request_timeout=30).values():
        future.result()
PY
sleep 6 # the rf3 group's election
for _ in $(seq "$rounds"); do
  for topic in rf1 rf3; do
    "$target/release/shardlog-load" produce --bootstrap 127.0.0.1:$base --topic $topic \
      --partitions 1 --messages 50000 --size 1024 --acks all --in-flight 1 --keys 0 \
      --label $topic | grep RESULT
  done
done
