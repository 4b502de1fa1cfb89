#!/usr/bin/env bash
# Produce->ack latency with and without the log cleaner running (issue 21), in one broker
# run: a 1-shard broker (so the cleaner and the measured partition share one core), and
# ROUNDS rounds of two phases each, in turn:
#   plain:   ~250 MB of keyed batches to a new cleanup.policy=delete topic, then the
#            latency run (the cleaner has nothing to do);
#   compact: the same bytes to a new compacted topic (1,000 keys, dirty ratio 0.01), then
#            the same latency run while the cleaner cleans it.
# The latency run is shardlog-load produce to a plain topic: one 100-byte record per
# request, one request in flight (acks=all), so each sample is one durable produce->ack.
# The cleaner metrics read before and after the latency run say how many bytes it read
# meanwhile (0 = the phase did not overlap cleaning). Between phases the script waits for
# the cleaner to go idle.
#
# Usage: benches/scripts/cleaner_latency.sh [ROUNDS] > results.txt
# Env: CLEANER_BYTES_PER_SEC (default 33554432, the broker's default), LATENCY_MESSAGES
# (default 4000), BULK_MESSAGES (default 250000 x 1,000 bytes), SHARDLOG_BIN. The latency run
# should end before the cleaning does: at the default budget a pass over 250 MB reads
# 500 MB, ~15 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
target=${CARGO_TARGET_DIR:-target}
bps=${CLEANER_BYTES_PER_SEC:-33554432}
latency_messages=${LATENCY_MESSAGES:-4000}
bulk_messages=${BULK_MESSAGES:-250000}
cargo build --release -q -p shardlog -p shardlog-benches --bin shardlog --bin shardlog-load
bin=${SHARDLOG_BIN:-$target/release/shardlog}
load=$target/release/shardlog-load
dir=$(mktemp -d)
port=$((20000 + RANDOM % 10000))
admin=$((port + 100))
"$bin" --data-dir "$dir/data" --kafka-addr 127.0.0.1:$port --admin-addr 127.0.0.1:$admin \
  --cores 1 --log-cleaner-interval-ms 200 --log-cleaner-bytes-per-sec "$bps" \
  --segment-bytes 16777216 > "$dir/broker.log" 2>&1 &
broker=$!
trap 'kill -9 $broker 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

cleaner_read() {
  curl -s "http://127.0.0.1:$admin/metrics" |
    awk '/^shardlog_cleaner_read_bytes_total/ { sum += $2 } END { printf "%d", sum }'
}
wait_idle() {
  local before after
  before=$(cleaner_read)
  while true; do
    sleep 1
    after=$(cleaner_read)
    [ "$after" = "$before" ] && return
    before=$after
  done
}
topic() { # name, extra args
  "$bin" topic --bootstrap 127.0.0.1:$port create "$@" > /dev/null
}

topic lat --partitions 1
echo "# cleaner budget $bps bytes/s, $latency_messages latency samples per phase"
for round in $(seq "$rounds"); do
  for phase in plain compact; do
    name=bulk-$phase-$round
    if [ $phase = compact ]; then
      topic "$name" --partitions 1 --config cleanup.policy=compact \
        --config min.cleanable.dirty.ratio=0.01 --config delete.retention.ms=0
    else
      topic "$name" --partitions 1
    fi
    "$load" produce --bootstrap 127.0.0.1:$port --topic "$name" --messages "$bulk_messages" \
      --size 1000 --keys 1000 --partitions 1 --batch 50 --in-flight 5 > /dev/null
    read0=$(cleaner_read)
    result=$("$load" produce --bootstrap 127.0.0.1:$port --topic lat --messages "$latency_messages" \
      --size 100 --keys 0 --partitions 1 --batch 1 --in-flight 1 | grep '^RESULT')
    read1=$(cleaner_read)
    echo "RESULT round=$round phase=$phase cleaner_read_mb_during=$(( (read1 - read0) / 1000000 )) ${result#RESULT }"
    wait_idle
  done
done
grep -E "cleaned a partition|WARN|ERROR" "$dir/broker.log" | tail -3 || true
