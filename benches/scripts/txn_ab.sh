#!/usr/bin/env bash
# Transactional against idempotent produce, broker builds alternating (issue 15): per round
# and per binary a fresh 2-shard broker in its own temp dir, then
# `benches/compare/txn_bench.py --rounds 1` (confluent-kafka), then the broker is stopped.
# Prints txn_bench.py's RESULT lines prefixed with `round=R bin=NAME`.
#
# Usage: benches/scripts/txn_ab.sh ROUNDS BIN [BIN...]
#   Env: LINGER (txn_bench.py --linger-ms; its default 5), BENCH_TMP.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=$1
shift
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-txn-ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    port=$(free_port_block 4)
    admin=127.0.0.1:$((port + 3))
    "$bin" --data-dir "$W/data" --kafka-addr 127.0.0.1:$port --admin-addr $admin --cores 2 \
      > "$W/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://$admin/health" >/dev/null && break; sleep 0.1; done
    python3 "$ROOT/benches/compare/txn_bench.py" --bootstrap 127.0.0.1:$port --rounds 1 \
      ${LINGER:+--linger-ms "$LINGER"} 2>&1 \
      | grep '^RESULT' | sed "s|^|round=$r bin=$(basename "$bin") |"
    kill $pid
    wait $pid
    rm -rf "$W/data" "$W/log"
  done
done
