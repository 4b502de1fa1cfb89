# Shared by perf/flamegraph.sh and perf/stat.sh: build, start a broker in a temp dir on
# free loopback ports, run one shardlog-load workload against it. Source, don't run.
#
# Workloads (WORKLOAD_SECS scales the time-bound ones):
#   produce    1,000,000 x 1 KiB, acks=all, 3 partitions, keys i % 1000, batch 16, 5 in flight
#   produce-deep  same with batch 64 and 16 requests in flight per connection
#   e2e        1,000 msg/s for WORKLOAD_SECS (default 10) with a long-polling consumer
#   fetch      200,000 x 1 KiB written first (not recorded), then read back 5 times
#   partitions the partition scaling load (8, 100, 1000, 10000)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PERF_TARGET=${PERF_TARGET:-${CARGO_TARGET_DIR:-$ROOT/target}/frame-pointers}
PERF_OUT=${PERF_OUT:-$ROOT/perf/out}
WORKLOAD_SECS=${WORKLOAD_SECS:-10}
BROKER_PID=
PERF_WORK=

build_for_profile() {
  # Frame pointers make `perf record -g` stacks whole; line tables come from the release
  # profile (debug = "line-tables-only"). A separate target dir keeps the flags apart.
  echo "building release with frame pointers into $PERF_TARGET" >&2
  (cd "$ROOT" && RUSTFLAGS="${RUSTFLAGS:-} -C force-frame-pointers=yes" \
    CARGO_TARGET_DIR=$PERF_TARGET cargo build --release -q -p shardlog \
    && RUSTFLAGS="${RUSTFLAGS:-} -C force-frame-pointers=yes" \
    CARGO_TARGET_DIR=$PERF_TARGET cargo build --release -q -p shardlog-benches \
    --bin shardlog-load)
}

# shellcheck source=../tests/lib/ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/ports.sh"
port_free() { ! ss -ltn | awk '{print $4}' | grep -q ":$1\$"; }

# A fresh broker (--cores 2) on a free block of 4 loopback ports below the ephemeral range
# (bootstrap, the two shards, admin): BROKER_PID, BOOTSTRAP, PERF_WORK.
start_broker() {
  local base
  base=$(free_port_block 4)
  PERF_WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/shardlog-perf.XXXXXX")
  "$PERF_TARGET/release/shardlog" --data-dir "$PERF_WORK/data" --kafka-addr "127.0.0.1:$base" \
    --admin-addr "127.0.0.1:$((base + 3))" --cores 2 >"$PERF_WORK/broker.log" 2>&1 &
  BROKER_PID=$!
  BOOTSTRAP=127.0.0.1:$base
  for _ in $(seq 1 100); do
    port_free $((base + 2)) || break
    sleep 0.1
  done
  sleep 0.5
  echo "broker pid $BROKER_PID on $BOOTSTRAP, threads:" >&2
  ps -T -p "$BROKER_PID" -o tid=,comm= | sed 's/^/  /' >&2
}

stop_broker() {
  if [ -n "$BROKER_PID" ]; then
    kill "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=
  fi
  if [ -n "$PERF_WORK" ]; then rm -rf "$PERF_WORK"; PERF_WORK=; fi
}

# Work done before recording starts (fetch needs data to read).
prepare_workload() {
  local load=$PERF_TARGET/release/shardlog-load
  case $1 in
    fetch)
      "$load" produce --bootstrap "$BOOTSTRAP" --topic perf-fetch --messages 200000 \
        --acks all --partitions 3 >/dev/null ;;
  esac
}

run_workload() {
  local load=$PERF_TARGET/release/shardlog-load
  case $1 in
    produce)
      "$load" produce --bootstrap "$BOOTSTRAP" --messages 1000000 --acks all --partitions 3 ;;
    produce-deep)
      "$load" produce --bootstrap "$BOOTSTRAP" --messages 1000000 --acks all --partitions 3 \
        --batch 64 --in-flight 16 ;;
    e2e)
      "$load" e2e --bootstrap "$BOOTSTRAP" --rate 1000 --secs "$WORKLOAD_SECS" --partitions 3 ;;
    fetch)
      for _ in 1 2 3 4 5; do
        "$load" consume --bootstrap "$BOOTSTRAP" --topic perf-fetch
      done ;;
    partitions)
      "$load" partitions --bootstrap "$BOOTSTRAP" ;;
    *)
      echo "unknown workload $1 (produce, produce-deep, e2e, fetch, partitions)" >&2
      return 2 ;;
  esac
}

# PERF_REV names a tree that is not a git checkout (e.g. a `git archive` export).
revision() {
  if [ -n "${PERF_REV:-}" ]; then echo "$PERF_REV"; return; fi
  local rev
  rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || rev=$rev-dirty
  echo "$rev"
}
