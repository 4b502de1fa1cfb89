#!/usr/bin/env bash
# Request latency while the shard's background passes run (issue 19): a fresh 2-shard
# broker per variant with 50,000 topics x 4 partitions (one 16-byte record in each), then
# `shardlog-load topics --requests 2000` (Metadata, ListOffsets, Fetch, OffsetCommit, one
# at a time). Variants: `ret1s` runs the retention pass every second, `ckpt1s` the
# checkpoint (with its producer-state snapshot) every second, `off` neither. The slow tail
# (p99.9, max) shows a pass holding the executor; compare variants within one run.
#
# Usage: benches/scripts/background_passes.sh [ROUNDS] [VARIANTS]   (defaults: 2, "ret1s ckpt1s off")
#   Env: TOPICS (default 50000), REQUESTS (of each kind, default 2000), AMONG (the requests'
#   topics among the first AMONG only; default 0, all), SHARDLOG_BIN, LOAD_BIN, BENCH_TMP; KEEP_LOGS=DIR keeps each
#   broker's output as DIR/ROUND-VARIANT.log (with SHARDLOG_LOG=info,shardlog_storage::log=debug,
#   shardlog_shards::producer_log=debug it holds the checkpoint timings).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=${1:-2}
VARIANTS=${2:-ret1s ckpt1s off}
TOPICS=${TOPICS:-50000}
REQUESTS=${REQUESTS:-2000}
B=${SHARDLOG_BIN:-$ROOT/target/release/shardlog}
L=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-passes.XXXXXX")
trap 'rm -rf "$W"' EXIT
hour=3600000
run() { # round variant
  local flags
  case $2 in
    ret1s) flags="--retention-check-interval-ms 1000 --checkpoint-interval-ms $hour" ;;
    ckpt1s) flags="--checkpoint-interval-ms 1000 --retention-check-interval-ms $hour" ;;
    off) flags="--retention-check-interval-ms $hour --checkpoint-interval-ms $hour" ;;
    *) echo "unknown variant $2" >&2; exit 2 ;;
  esac
  local port dir=$W/$2
  port=$(free_port_block 11)
  local admin=127.0.0.1:$((port + 10))
  # shellcheck disable=SC2086
  "$B" --data-dir "$dir" --kafka-addr 127.0.0.1:$port --admin-addr $admin --cores 2 $flags \
    > "$dir.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://$admin/health" >/dev/null && break; sleep 0.1; done
  "$L" topics --bootstrap 127.0.0.1:$port --admin-addr $admin --broker-pid $pid \
    --topics "$TOPICS" --partitions 4 --touch-each --shapes none --size 16 --requests "$REQUESTS" --requests-among "${AMONG:-0}" 2>&1 \
    | grep '^RESULT mode=topics_requests' \
    | sed "s/^/round=$1 v=$2 load=$(cut -d' ' -f1 /proc/loadavg) /"
  kill $pid; wait $pid
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$dir.log" "$KEEP_LOGS/$1-$2.log"; fi
  rm -rf "$dir" "$dir.log"
}
for r in $(seq "$ROUNDS"); do for v in $VARIANTS; do run "$r" "$v"; done; done
