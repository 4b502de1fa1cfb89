#!/usr/bin/env bash
# Request latency at 8 and 50,000 topics (issue 19), one or more broker builds alternating:
# per round and per binary, a fresh broker at 8 topics then one at 50,000, each through
# `background_passes.sh 1 off` (no periodic passes). Prints the script's RESULT lines under a
# `# round=R bin=NAME topics=T HH:MM:SS uptime:...` header; summarize with
# `benches/scripts/topics_requests_summary.py FILE`.
#
# Usage: benches/scripts/topics_requests.sh ROUNDS BIN [BIN...]
#   A BIN may be BROKER@LOAD: that broker binary timed by that load generator (named
#   `broker@load` in the headers), to compare load generators against one broker.
#   Env: REQUESTS (of each kind, default 2000), LOAD_BIN, BENCH_TMP (as background_passes.sh);
#   SIZES (default "8 50000"): the topic counts, each a fresh broker; `T@N` is T topics with
#   the requests about the first N only (`--requests-among`): e.g. "8 50000 50000@8"
#   separates what the count costs by itself from the cache misses of a random topic.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=$1
shift
for r in $(seq "$ROUNDS"); do
  for arg in "$@"; do
    bin=${arg%%@*}
    load=${LOAD_BIN:-$ROOT/target/release/shardlog-load}
    name=$(basename "$bin")
    if [ "$arg" != "$bin" ]; then load=${arg#*@}; name+=@$(basename "$load"); fi
    for t in ${SIZES:-8 50000}; do
      echo "# round=$r bin=$name topics=$t $(date -u +%H:%M:%S) uptime:$(uptime | sed 's/.*load average//')"
      among=0
      if [ "${t#*@}" != "$t" ]; then among=${t#*@}; fi
      REQUESTS=${REQUESTS:-2000} TOPICS=${t%@*} AMONG=$among SHARDLOG_BIN=$bin LOAD_BIN=$load \
        "$ROOT/benches/scripts/background_passes.sh" 1 off
    done
  done
done
