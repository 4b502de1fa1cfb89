#!/usr/bin/env bash
# RF 3 against RF 1 on one machine, and failover (issue 16). A cluster of 3 nodes on
# 127.0.0.1 (`--cores 1` each, node ids 1-3, own data dirs under BENCH_TMP, one block of 4
# ports per node: bootstrap, shard, replication, admin). Per round, RF 1 then RF 3, each on
# a fresh topic of 3 partitions (leaders spread over the nodes):
#   - `shardlog-load produce`, acks=all, as fast as 5 requests in flight per leader allow:
#     msg/s and produce->ack percentiles;
#   - `shardlog-load e2e` at a paced RATE: produce->ack and produce->consume percentiles;
# then, per round, `failover.py run`: a fresh RF 3 topic, an idempotent librdkafka producer
# at FAILOVER_RATE, the leader's node killed with SIGKILL (and restarted before the next
# round): kill -> first acknowledgement, and the checker's lost / duplicated / gaps (0).
# Prints RESULT lines under `# round=R ...` headers. Every process is on the same 2 cores:
# one noisy machine, not a network; read ratios within a round.
#
# Usage: benches/scripts/replication.sh [ROUNDS]   (default 3)
#   Env: SHARDLOG_BIN, LOAD_BIN (default target/release/...), BENCH_TMP, MESSAGES (produce,
#   default 100000), RATE (e2e msg/s, default 1000), SECS (e2e, default 10), FAILOVER_RATE
#   (default 500), RFS (default "1 3"; failover runs only when it holds 3), KEEP_LOGS=DIR
#   keeps each node's output.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=${1:-3}
MESSAGES=${MESSAGES:-100000}
RATE=${RATE:-1000}
SECS=${SECS:-10}
FAILOVER_RATE=${FAILOVER_RATE:-500}
RFS=${RFS:-1 3}
B=${SHARDLOG_BIN:-$ROOT/target/release/shardlog}
L=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-replication.XXXXXX")
BASE=$(free_port_block 12)
PEERS="1=127.0.0.1:$BASE,2=127.0.0.1:$((BASE + 4)),3=127.0.0.1:$((BASE + 8))"
BOOTSTRAP=127.0.0.1:$BASE
ALL=127.0.0.1:$BASE,127.0.0.1:$((BASE + 4)),127.0.0.1:$((BASE + 8))
declare -A PID
start() { # node
  local port=$((BASE + 4 * ($1 - 1)))
  "$B" --data-dir "$W/node$1" --kafka-addr 127.0.0.1:$port --admin-addr 127.0.0.1:$((port + 3)) \
    --cores 1 --node-id "$1" --peers "$PEERS" >> "$W/node$1.log" 2>&1 &
  PID[$1]=$!
}
stop_all() {
  for n in 1 2 3; do [ -n "${PID[$n]:-}" ] && kill "${PID[$n]}" 2>/dev/null && wait "${PID[$n]}" 2>/dev/null; done
  if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$W"/node*.log "$KEEP_LOGS/"; fi
  rm -rf "$W"
}
healthy() { # node: its admin endpoint answers (60 s at most)
  local admin=127.0.0.1:$((BASE + 4 * ($1 - 1) + 3))
  for _ in $(seq 600); do curl -sf "http://$admin/health" >/dev/null && return 0; sleep 0.1; done
  echo "node $1 not healthy after 60 s: $(tail -3 "$W/node$1.log")" >&2
  return 1
}
trap stop_all EXIT
for n in 1 2 3; do start $n; done
for n in 1 2 3; do healthy $n || exit 1; done
python3 "$ROOT/benches/scripts/failover.py" ready "$BOOTSTRAP" 3 || exit 1
tag() { sed "s/^/round=$1 load=$(cut -d' ' -f1 /proc/loadavg) /"; }
for r in $(seq "$ROUNDS"); do
  for rf in $RFS; do
    echo "# round=$r rf=$rf $(date -u +%H:%M:%S) uptime:$(uptime | sed 's/.*load average//')"
    "$L" produce --bootstrap "$BOOTSTRAP" --replication-factor $rf --partitions 3 --keys 0 \
      --messages "$MESSAGES" --label "rf$rf" 2>&1 | grep -E '^(RESULT|shardlog-load:)' | tag "$r"
    "$L" e2e --bootstrap "$BOOTSTRAP" --replication-factor $rf --partitions 3 \
      --rate "$RATE" --secs "$SECS" --label "rf$rf" 2>&1 | grep -E '^(RESULT|shardlog-load:)' | tag "$r"
  done
  case " $RFS " in *" 3 "*) ;; *) continue ;; esac
  echo "# round=$r failover $(date -u +%H:%M:%S)"
  out=$(python3 "$ROOT/benches/scripts/failover.py" run "$ALL" \
    "1=${PID[1]},2=${PID[2]},3=${PID[3]}" --rate "$FAILOVER_RATE" 2>"$W/failover.err")
  echo "$out" | tag "$r"
  killed=$(sed -n 's/^killed node \([0-9]*\).*/\1/p' "$W/failover.err")
  grep -v -e '^killed node' -e '^%' "$W/failover.err" | head -5 >&2
  if [ -n "$killed" ]; then
    wait "${PID[$killed]}" 2>/dev/null
    start "$killed"
    healthy "$killed" || exit 1
    # The restarted node has caught up with the metadata group: it lists a topic created
    # now through another node.
    python3 "$ROOT/benches/scripts/failover.py" ready "127.0.0.1:$((BASE + 4 * (killed - 1)))" 3 \
      --probe "127.0.0.1:$((BASE + 4 * (killed % 3)))" || exit 1
  fi
done
