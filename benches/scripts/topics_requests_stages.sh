#!/usr/bin/env bash
# Where the request latency at 8 and 50,000 topics goes (issue 19): per round, a fresh broker
# at 8 topics then one at 50,000 (x 4 partitions, one 16-byte record each, no periodic passes),
# `shardlog-load topics --requests N`, then the broker's own means from its /metrics: the
# request from decoded to written (`shardlog_request_duration_seconds`) and its stages
# (`shardlog_request_stage_seconds`), beside the client's p50. One line per round, count and
# API; a mean is sum / count over the shards, in microseconds. Metadata's broker means also
# hold the set-up's Metadata requests (hundreds of topics each), so read only its client p50.
#
# Usage: benches/scripts/topics_requests_stages.sh ROUNDS
#   Env: REQUESTS (of each kind, default 20000), SHARDLOG_BIN, LOAD_BIN, BENCH_TMP.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=${1:-3}
REQUESTS=${REQUESTS:-20000}
B=${SHARDLOG_BIN:-$ROOT/target/release/shardlog}
L=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-stages.XXXXXX")
trap 'rm -rf "$W"' EXIT
hour=3600000

# mean METRICS_FILE METRIC LABEL_FILTER: sum / count over every series matching, in µs.
mean() {
  awk -v m="$2" -v f="$3" '
    index($0, m "_sum{") == 1 && $0 ~ f { s += $2 }
    index($0, m "_count{") == 1 && $0 ~ f { c += $2 }
    END { if (c > 0) printf "%.1f", s / c * 1e6; else printf "-" }' "$1"
}

for r in $(seq "$ROUNDS"); do
  for t in 8 50000; do
    port=$(free_port_block 11)
    admin=127.0.0.1:$((port + 10))
    dir=$W/$t
    "$B" --data-dir "$dir" --kafka-addr 127.0.0.1:$port --admin-addr $admin --cores 2 \
      --retention-check-interval-ms $hour --checkpoint-interval-ms $hour > "$dir.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://$admin/health" >/dev/null && break; sleep 0.1; done
    "$L" topics --bootstrap 127.0.0.1:$port --admin-addr $admin --broker-pid $pid \
      --topics $t --partitions 4 --touch-each --shapes none --size 16 \
      --requests "$REQUESTS" > "$dir.out" 2>&1
    curl -sf "http://$admin/metrics" > "$dir.metrics"
    for api in Metadata:metadata_one_topic ListOffsets:list_offsets Fetch:fetch \
      OffsetCommit:offset_commit; do
      name=${api%%:*}
      client=$(grep "request=${api#*:} " "$dir.out" | grep -o 'latency_p50_us=[0-9]*')
      line="round=$r topics=$t api=$name client_p50_us=${client#*=}"
      line+=" broker_mean_us=$(mean "$dir.metrics" shardlog_request_duration_seconds "api=\"$name\"")"
      for stage in decoded_to_queued queued_to_ready ready_to_written; do
        line+=" $stage=$(mean "$dir.metrics" shardlog_request_stage_seconds \
          "api=\"$name\".*stage=\"$stage\"")"
      done
      echo "$line"
    done
    kill $pid
    wait $pid
    rm -rf "$dir" "$dir".*
  done
done
