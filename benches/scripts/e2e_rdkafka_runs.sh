#!/usr/bin/env bash
# Issue 3's first end-to-end figures: a fresh shardlog (2 shards) per run, then
# e2e-rdkafka (librdkafka): 100,000 x 1 KiB acks=all produce + consume, and 200 msg/s
# for 20 s with linger.ms=0. Usage: benches/scripts/e2e_rdkafka_runs.sh [RUNS] > results.txt
# (SHARDLOG_BIN=path runs another broker build, for A/B comparisons.)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p shardlog -p shardlog-benches --bin shardlog --bin e2e-rdkafka
for run in $(seq "$runs"); do
  dir=$(mktemp -d)
  port=$((20000 + RANDOM % 10000))
  "${SHARDLOG_BIN:-$target/release/shardlog}" --data-dir "$dir/data" --kafka-addr 127.0.0.1:$port --cores 2 \
    --probe-log-interval-ms 1000 > "$dir/broker.log" 2>&1 &
  broker=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  "$target/release/e2e-rdkafka" --bootstrap 127.0.0.1:$port --messages 100000 --size 1024 \
    --partitions 3 --rate 200 --secs 20 | sed "s/^RESULT /RESULT run=$run /"
  grep "probes" "$dir/broker.log" | tail -2 || true
  kill -9 $broker; wait $broker 2>/dev/null || true
  rm -rf "$dir"
done
