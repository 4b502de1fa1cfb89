#!/usr/bin/env bash
# Request latency at 8 and 50,000 topics (issue 19), one or more broker builds alternating:
# per round and per binary, a fresh broker at 8 topics then one at 50,000, each through
# `background_passes.sh 1 off` (no periodic passes). Prints the script's RESULT lines under a
# `# round=R bin=NAME topics=T HH:MM:SS uptime:...` header; summarize with
# `benches/scripts/topics_requests_summary.py FILE`.
#
# Usage: benches/scripts/topics_requests.sh ROUNDS BIN [BIN...]
#   Env: REQUESTS (of each kind, default 2000), LOAD_BIN, BENCH_TMP (as background_passes.sh).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=$1
shift
for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    for t in 8 50000; do
      echo "# round=$r bin=$(basename "$bin") topics=$t $(date -u +%H:%M:%S) uptime:$(uptime | sed 's/.*load average//')"
      REQUESTS=${REQUESTS:-2000} TOPICS=$t SHARDLOG_BIN=$bin "$ROOT/benches/scripts/background_passes.sh" 1 off
    done
  done
done
