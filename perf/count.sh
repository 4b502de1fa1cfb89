#!/usr/bin/env bash
# Kernel work per message of a broker under `shardlog-load e2e`: syscalls, io_uring
# submissions (by opcode), membarrier calls, context switches, and the block requests the
# disk saw (perf/block_requests.py: writes, metadata writes, cache flushes, device p50). Counts, not times, so
# they barely move with a noisy neighbour; use them to compare reactor changes.
#
# usage: perf/count.sh [BIN ...]     (default: target/release/shardlog)
#   Each BIN gets a fresh broker (--cores 2) in a temp dir on free loopback ports and
#   RATE msg/s (default 200) for SECS s (default 10); binaries alternate inside each of
#   ROUNDS rounds (default 1). Env: BENCH_TMP (data dirs), CARGO_TARGET_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
RATE=${RATE:-200} SECS=${SECS:-10} ROUNDS=${ROUNDS:-1}
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$TARGET/release/shardlog")
LOAD=$TARGET/release/shardlog-load
[ -x "$LOAD" ] || (cd "$ROOT" && cargo build --release -q -p shardlog-benches --bin shardlog-load)
EVENTS=task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_membarrier,io_uring:io_uring_submit_req,io_uring:io_uring_queue_async_work

source "$ROOT/tests/lib/ports.sh"
port_free() { ! ss -ltn | awk '{print $4}' | grep -q ":$1\$"; }
one() { # BIN
  local work base broker stat perf msgs
  work=$(mktemp -d "${BENCH_TMP:-/tmp}/shardlog-count.XXXXXX")
  base=$(free_port_block 4) # bootstrap, two shards, admin: below the ephemeral range
  "$1" --data-dir "$work/data" --kafka-addr "127.0.0.1:$base" --admin-addr "127.0.0.1:$((base + 3))" \
    --cores 2 >"$work/broker.log" 2>&1 &
  broker=$!
  for _ in $(seq 1 100); do port_free $((base + 2)) || break; sleep 0.1; done
  sleep 0.5
  perf stat -x, -e "$EVENTS" -p "$broker" -o "$work/stat.csv" &
  stat=$!
  perf record -q -e io_uring:io_uring_submit_req -p "$broker" -o "$work/perf.data" 2>/dev/null &
  perf=$!
  perf record -q -a -e block:block_rq_issue -e block:block_rq_complete -o "$work/block.data" 2>/dev/null &
  block=$!
  sleep 0.3
  "$LOAD" e2e --bootstrap "127.0.0.1:$base" --rate "$RATE" --secs "$SECS" --partitions 3 >"$work/load.txt"
  kill -INT $stat $perf $block; wait $stat $perf $block || true
  kill -9 $broker 2>/dev/null; wait $broker 2>/dev/null || true
  msgs=$(grep -o 'received=[0-9]*' "$work/load.txt" | cut -d= -f2)
  echo "== $1: $msgs messages, $(grep -o 'e2e_p50_us=[0-9]*' "$work/load.txt"), load average $(cut -d' ' -f1 /proc/loadavg)"
  awk -F, -v m="$msgs" '$1 ~ /^[0-9.]+$/ {
      unit = ($2 == "msec") ? " CPU us" : ""; v = ($2 == "msec") ? $1 * 1000 : $1
      printf "  %-40s %8.2f%s per message\n", $3, v / m, unit }' "$work/stat.csv"
  perf script -i "$work/perf.data" 2>/dev/null | grep -o 'opcode [A-Z_]*' | sort | uniq -c |
    sort -rn | awk -v m="$msgs" '{ printf "    submitted %-29s %8.2f per message\n", $3, $1 / m }'
  "$ROOT/perf/block_requests.py" "$work/block.data" "$msgs" "$broker"
  rm -rf "$work"
}
for r in $(seq 1 "$ROUNDS"); do for b in "${BINS[@]}"; do one "$b"; done; done
