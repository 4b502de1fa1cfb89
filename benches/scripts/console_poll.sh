#!/usr/bin/env bash
# Produce->ack latency while a console overview is open on a broker with many partitions
# (issue 17 / 19): a 2-shard broker with TOPICS topics x 4 partitions, `/api/overview`
# polled once a second (as the open overview page does) while `shardlog-load e2e --rate
# 200` runs for 15 s. POLL_PATH=/metrics POLL_EVERY=5 scrapes /metrics instead, as
# Prometheus would (more often than its usual 15 s, to get several scrapes in a run). Binaries alternate per round on the same data dir, so compare
# variants within one run: a page that snapshots every partition holds each shard's
# executor for that long, which shows in the p99 and max.
#
# Usage: benches/scripts/console_poll.sh ROUNDS BIN [BIN...]   (env: TOPICS, default 50000;
#   POLL_PATH, default /api/overview; POLL_EVERY seconds, default 1; LOAD_BIN; BENCH_TMP)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=${1:?rounds}; shift
TOPICS=${TOPICS:-50000}
POLL_PATH=${POLL_PATH:-/api/overview}
POLL_EVERY=${POLL_EVERY:-1}
L=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-console-poll.XXXXXX")
port=$(free_port_block 11); admin=127.0.0.1:$((port + 10))
trap 'rm -rf "$W"' EXIT
start() { # binary
  "$1" --data-dir "$W/data" --kafka-addr 127.0.0.1:$port --admin-addr $admin --cores 2 \
    > "$W/broker.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do curl -sf "http://$admin/health" >/dev/null && return; sleep 0.2; done
  echo "broker did not start" >&2; exit 1
}
start "$1"
"$L" topics --bootstrap 127.0.0.1:$port --topics "$TOPICS" --partitions 4 --shapes none --size 16 \
  | grep '^RESULT'
kill $pid; wait $pid 2>/dev/null
for round in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    start "$bin"
    ( while kill -0 $pid 2>/dev/null; do
        curl -s -o /dev/null -w '%{time_total}\n' "http://$admin$POLL_PATH" >> "$W/poll.txt"
        sleep "$POLL_EVERY"
      done ) &
    poller=$!
    "$L" e2e --bootstrap 127.0.0.1:$port --rate 200 --secs 15 --size 256 --acks all \
      --partitions 3 2>&1 | grep '^RESULT' | sed "s|^|round=$round bin=$bin |"
    kill $poller; kill $pid; wait $pid 2>/dev/null
    echo "round=$round bin=$bin poll=$POLL_PATH poll_s_median=$(sort -n "$W/poll.txt" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
    rm -f "$W/poll.txt"
  done
done
