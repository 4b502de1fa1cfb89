#!/usr/bin/env bash
# `perf stat` counters of the broker process under one shardlog-load workload.
#
# usage: perf/stat.sh WORKLOAD        (produce, produce-deep, e2e, fetch, partitions)
#
# Software counters and tracepoints only by default: this VM exposes no hardware PMU
# (cycles/instructions report <not supported>); set PERF_EVENTS to try others.
# Prints the counters and writes perf/out/stat-WORKLOAD-REV.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

WORKLOAD=${1:?usage: perf/stat.sh WORKLOAD}
EVENTS=${PERF_EVENTS:-task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions,raw_syscalls:sys_enter,io_uring:io_uring_submit_req,sched:sched_switch}
PERF=${PERF:-perf}
REV=$(revision)
mkdir -p "$PERF_OUT"
OUT=$PERF_OUT/stat-$WORKLOAD-$REV.txt

build_for_profile
trap stop_broker EXIT
start_broker
prepare_workload "$WORKLOAD"
"$PERF" stat -e "$EVENTS" --per-thread -p "$BROKER_PID" -o "$PERF_WORK/stat.txt" &
PERF_PID=$!
sleep 0.5
run_workload "$WORKLOAD" | tee "$PERF_WORK/load.txt"
kill -INT "$PERF_PID"
wait "$PERF_PID" || true
{
  echo "# perf stat, broker process, workload $WORKLOAD @ $REV"
  grep RESULT "$PERF_WORK/load.txt"
  cat "$PERF_WORK/stat.txt"
} | tee "$OUT"
