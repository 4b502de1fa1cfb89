#!/usr/bin/env bash
# On-CPU flamegraph of the broker under one shardlog-load workload.
#
# usage: perf/flamegraph.sh WORKLOAD        (produce, produce-deep, e2e, fetch, partitions)
#
# Builds release with frame pointers (in $CARGO_TARGET_DIR/frame-pointers), starts a broker with --cores 2 in a
# temp dir on free loopback ports, records the broker process only with
# `perf record -g` (cpu-clock: this VM has no hardware counters) while the workload runs,
# and renders with inferno (`cargo install inferno`). Writes to perf/out/:
#   flamegraph-WORKLOAD-REV.svg         all threads; the root frames are thread names
#   flamegraph-WORKLOAD-REV.top.txt     top self-time symbols and CPU per thread
#   flamegraph-WORKLOAD-REV.load.txt    the load generator's own report
#   flamegraph-WORKLOAD-REV.folded      collapsed stacks (inferno-diff-folded compares two)
# REV is `git rev-parse --short HEAD` (with -dirty when the tree has changes).
# Env: PERF_FREQ (default 999 Hz), WORKLOAD_SECS, PERF_TARGET, PERF_OUT, BENCH_TMP.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

WORKLOAD=${1:?usage: perf/flamegraph.sh WORKLOAD}
FREQ=${PERF_FREQ:-999}
command -v inferno-flamegraph >/dev/null || { echo "needs: cargo install inferno" >&2; exit 1; }
PERF=${PERF:-perf}
REV=$(revision)
mkdir -p "$PERF_OUT"
NAME=$PERF_OUT/flamegraph-$WORKLOAD-$REV

build_for_profile
trap stop_broker EXIT
start_broker
prepare_workload "$WORKLOAD"
"$PERF" record -F "$FREQ" -g -p "$BROKER_PID" -o "$PERF_WORK/perf.data" 2>"$PERF_WORK/perf.err" &
PERF_PID=$!
sleep 0.5
run_workload "$WORKLOAD" | tee "$NAME.load.txt"
kill -INT "$PERF_PID"
wait "$PERF_PID" || true

"$PERF" script -i "$PERF_WORK/perf.data" 2>/dev/null >"$PERF_WORK/perf.script"
# Thread names (comm) become the root frames, so each shard is its own tower.
inferno-collapse-perf --all <"$PERF_WORK/perf.script" >"$NAME.folded"
inferno-flamegraph --title "shardlog $WORKLOAD @ $REV (on-CPU, cpu-clock ${FREQ} Hz)" \
  --countname samples <"$NAME.folded" >"$NAME.svg"
{
  echo "# $WORKLOAD @ $REV: samples per thread"
  "$PERF" report -i "$PERF_WORK/perf.data" --no-children -g none --sort comm --stdio 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -20 || true
  echo
  echo "# top self-time symbols (all threads)"
  "$PERF" report -i "$PERF_WORK/perf.data" --no-children -g none --sort comm,dso,symbol --stdio \
    2>/dev/null | grep -v '^#' | grep -v '^$' | sed -E 's/[ -]+$//' | head -45 || true
  echo
  echo "# inclusive share of samples whose stack contains the pattern (all threads)"
  "$(dirname "$0")/inclusive.sh" "$NAME.folded"
} >"$NAME.top.txt"
echo "wrote $NAME.svg and $NAME.top.txt" >&2
