#!/usr/bin/env bash
# Where the request latency at 8 and 50,000 topics goes (issue 19). Per round:
#   - a fresh broker set up with 8 topics, then a fresh client asking about those 8;
#   - a fresh broker set up with 50,000 topics, then fresh clients in turn asking about 8 of
#     them (`hot8`) and about all 50,000 (`all50k`), twice: the same broker process, so its
#     size is the same for both and only the working set of the requests differs.
# Topics have 4 partitions and one 16-byte record each, periodic passes are off. Each client
# run is `shardlog-load topics --requests N` on the existing topics (`--prefix`); beside the
# client's p50 it prints the broker's own means over that run (its /metrics before and after):
# the request from decoded to written (`shardlog_request_duration_seconds`) and its stages
# (`shardlog_request_stage_seconds`), sum / count over the shards, in microseconds. Metadata's
# broker means also hold the client's set-up Metadata requests (hundreds of topics each at
# 50,000), so read only its client p50.
#
# PLAN=burst asks instead whether the gap follows the set-up's write burst or the one-process
# client: on each broker, twice, `onepass` (one client writes a record to every partition and
# then times the requests, as topics_requests.sh does), `burst` (one client writes them, a
# fresh one times the requests right after) and `settled` (one client writes them, a fresh
# one times the requests SETTLE seconds later), every client asking about all the broker's
# topics.
#
# PLAN=control gives both brokers the same write burst: 200,000 one-record batches, 16 per
# request (at 50,000 topics the set-up's one record per partition; at 8 topics the same
# count over its 32 partitions), then fresh clients time the requests right after
# (`burst`) and SETTLE seconds later (`settled`).
#
# Usage: benches/scripts/topics_requests_stages.sh ROUNDS
#   Env: REQUESTS (of each kind, default 20000), PLAN (working-set, burst or control), SETTLE (s,
#   default 10), SHARDLOG_BIN, LOAD_BIN, BENCH_TMP.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/tests/lib/ports.sh"
ROUNDS=${1:-3}
REQUESTS=${REQUESTS:-20000}
PLAN=${PLAN:-working-set}
SETTLE=${SETTLE:-10}
B=${SHARDLOG_BIN:-$ROOT/target/release/shardlog}
L=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
W=$(mktemp -d "${BENCH_TMP:-$ROOT/target}/shardlog-stages.XXXXXX")
trap 'rm -rf "$W"' EXIT
hour=3600000

# mean BEFORE AFTER METRIC FILTER: the mean over the series matching FILTER between two
# scrapes, in µs.
mean() {
  awk -v m="$3" -v f="$4" '
    index($0, m "_sum{") == 1 && $0 ~ f { s[FILENAME] += $2 }
    index($0, m "_count{") == 1 && $0 ~ f { c[FILENAME] += $2 }
    END {
      n = c[ARGV[2]] - c[ARGV[1]]
      if (n > 0) printf "%.1f", (s[ARGV[2]] - s[ARGV[1]]) / n * 1e6; else printf "-"
    }' "$1" "$2"
}

# client ROUND BROKER_TOPICS LABEL TOPICS [--touch-each]: one client run and its line per API.
client() {
  local r=$1 held=$2 label=$3 topics=$4
  shift 4
  curl -sf "http://$admin/metrics" > "$W/before"
  "$L" topics --bootstrap 127.0.0.1:$port --admin-addr $admin --broker-pid $pid \
    --prefix "$prefix" --topics "$topics" --partitions 4 --shapes none --size 16 \
    --requests "$REQUESTS" "$@" > "$W/out" 2>&1
  curl -sf "http://$admin/metrics" > "$W/after"
  for api in Metadata:metadata_one_topic ListOffsets:list_offsets Fetch:fetch \
    OffsetCommit:offset_commit; do
    local name=${api%%:*} p50
    p50=$(grep "request=${api#*:} " "$W/out" | grep -o 'latency_p50_us=[0-9]*')
    local line="round=$r broker_topics=$held asked=$label api=$name client_p50_us=${p50#*=}"
    line+=" broker_mean_us=$(mean "$W/before" "$W/after" shardlog_request_duration_seconds \
      "api=\"$name\"")"
    for stage in decoded_to_queued queued_to_ready ready_to_written; do
      line+=" $stage=$(mean "$W/before" "$W/after" shardlog_request_stage_seconds \
        "api=\"$name\".*stage=\"$stage\"")"
    done
    echo "$line"
  done
}

for r in $(seq "$ROUNDS"); do
  for held in 8 50000; do
    port=$(free_port_block 11)
    admin=127.0.0.1:$((port + 10))
    prefix=stages-$r-$held
    "$B" --data-dir "$W/data" --kafka-addr 127.0.0.1:$port --admin-addr $admin --cores 2 \
      --retention-check-interval-ms $hour --checkpoint-interval-ms $hour > "$W/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "http://$admin/health" >/dev/null && break; sleep 0.1; done
    if [ "$PLAN" = control ]; then
      # The same burst on both brokers, then the requests right after and once settled.
      burst=(--shapes none)
      [ "$held" = 8 ] && burst=(--shapes many --batch 1 --messages 200000)
      REQUESTS=0 client "$r" "$held" setup "$held" --touch-each "${burst[@]}" > /dev/null
      client "$r" "$held" burst "$held"
      sleep "$SETTLE"
      client "$r" "$held" settled "$held"
      kill $pid
      wait $pid
      rm -rf "$W/data" "$W/log"
      continue
    fi
    # Set-up: create the topics and put one record in each partition (no timed requests).
    REQUESTS=0 client "$r" "$held" setup "$held" --touch-each > /dev/null
    if [ "$PLAN" = burst ]; then
      for _ in 1 2; do
        client "$r" "$held" onepass "$held" --touch-each
        REQUESTS=0 client "$r" "$held" setup "$held" --touch-each > /dev/null
        client "$r" "$held" burst "$held"
        REQUESTS=0 client "$r" "$held" setup "$held" --touch-each > /dev/null
        sleep "$SETTLE"
        client "$r" "$held" settled "$held"
      done
    elif [ "$held" = 8 ]; then
      client "$r" "$held" all8 8
    else
      for _ in 1 2; do
        client "$r" "$held" hot8 8
        client "$r" "$held" all50k 50000
      done
    fi
    kill $pid
    wait $pid
    rm -rf "$W/data" "$W/log"
  done
done
