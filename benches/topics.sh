#!/usr/bin/env bash
# Many topics (issue 19): produce throughput and broker memory against the topic count.
#
# Each round starts a fresh 2-shard broker per topic count, creates the topics
# (`shardlog-load topics`: 4 partitions each, 500 per CreateTopics), records the broker's
# RSS empty, after the creates and after one record in every partition, then runs the
# produce load (acks=all, 1 KiB values, 4 records per batch, round-robin over every
# partition) in both request shapes: `many` (16 partitions per request) and `one` (one
# partition per request). Then memory-only brokers at 1k, 10k and 100k partitions.
# The summary gives medians over the rounds and, per round, each count's msg/s as a
# ratio to the smallest count's in the same round.
#
# Usage: benches/topics.sh [--rounds N] [--out FILE]
#   Env: COUNTS (topic counts of the load, default "8 1000 10000 25000"),
#        MEMORY_COUNTS (topic counts for memory only, default "250 2500 25000"),
#        MESSAGES (per shape, default 400000 = 100,000 partitions x 4 records),
#        SHARDLOG_BIN, LOAD_BIN (default: target/release/...), BENCH_TMP (data dirs).
# Every figure is a `RESULT ...` line in the results file, tagged round=.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=3
OUT=$ROOT/benches/results/topics-$(git -C "$ROOT" rev-parse --short HEAD).txt
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
COUNTS=${COUNTS:-8 1000 10000 25000}
MEMORY_COUNTS=${MEMORY_COUNTS:-250 2500 25000}
MESSAGES=${MESSAGES:-400000}
SHARDLOG=${SHARDLOG_BIN:-$ROOT/target/release/shardlog}
LOAD=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
WORK=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-topics.XXXXXX")
BROKER_PID=
cleanup() {
  if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$(dirname "$OUT")"

log() { echo "$*" | tee -a "$OUT"; }

# Starts a broker on a random base port (kafka, its shards' ports after it, admin +10).
start_broker() {
  local dir=$1
  for _ in 1 2 3 4 5; do
    PORT=$(free_port_block 11)
    ADMIN=127.0.0.1:$((PORT + 10))
    "$SHARDLOG" --data-dir "$dir" --kafka-addr "127.0.0.1:$PORT" --admin-addr "$ADMIN" \
      --cores 2 >"$dir.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 1 100); do
      if curl -sf "http://$ADMIN/health" >/dev/null; then return 0; fi
      if ! kill -0 "$BROKER_PID" 2>/dev/null; then break; fi
      sleep 0.1
    done
    kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true
    rm -rf "$dir"
  done
  echo "no broker started; last log:" >&2; cat "$dir.log" >&2; exit 1
}

# Stops the broker; a shutdown that does not exit 0 is reported, and its log kept.
stop_broker() {
  local dir=$1 status=0
  kill "$BROKER_PID"; wait "$BROKER_PID" || status=$?; BROKER_PID=
  if [ "$status" != 0 ]; then
    cp "$dir.log" "$OUT.$(basename "$dir").log"
    log "# broker $(basename "$dir") exited with status $status at shutdown; log in" \
      "$OUT.$(basename "$dir").log"
  fi
}

# round, topics, shapes, extra flags...
run_count() {
  local round=$1 topics=$2 shapes=$3; shift 3
  local dir=$WORK/broker-$round-$topics
  start_broker "$dir"
  "$LOAD" topics --bootstrap "127.0.0.1:$PORT" --admin-addr "$ADMIN" --broker-pid "$BROKER_PID" \
    --topics "$topics" --partitions 4 --touch-each --shapes "$shapes" "$@" \
    | grep '^RESULT' | sed "s/^RESULT /RESULT round=$round /" | tee -a "$OUT"
  stop_broker "$dir"
  rm -rf "$dir" "$dir.log"
}

log "# benches/topics.sh $(git -C "$ROOT" rev-parse --short HEAD) $(date -u +%FT%TZ)"
log "# uptime before: $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
  for topics in $COUNTS; do
    run_count "$round" "$topics" many,one --messages "$MESSAGES"
    log "# uptime: $(uptime)"
  done
done
for topics in $MEMORY_COUNTS; do
  for round in $(seq 1 "$ROUNDS"); do run_count "$round" "$topics" none; done
done
log "# uptime after: $(uptime)"
python3 "$ROOT/benches/compare/topics_summary.py" "$OUT" | tee -a "$OUT"
