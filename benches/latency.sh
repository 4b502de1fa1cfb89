#!/usr/bin/env bash
# Durable-ack latency, variant against variant, in one run (issue 13's first target).
#
# Per round: the disk's own figure (machine-limits: 4 KiB O_DIRECT overwrite + fdatasync,
# one at a time, back to back and paced at --rate as the load is), then for each variant
# a fresh broker (--cores 2 unless the variant says otherwise) and `shardlog-load e2e` at
# --rate msg/s for --secs (1 KiB, acks=all, 3 partitions), then the broker's stage
# histograms from /metrics (the latency budget, docs/metrics.md). Variants alternate inside
# a round so a noisy neighbour hits all of them alike. Prints `RESULT round=R
# variant=NAME ...` lines and, at the end, the median over rounds of each figure per
# variant, with its ratios to the disk's overwrite p50, back to back and paced.
#
# Usage: benches/latency.sh [--rounds N] [--secs S] [--rate R] [--out FILE]
#                           [VARIANT ...]
#   VARIANT is NAME=FLAGS, e.g. 'poll=--poll-us 200'; BIN:PATH inside FLAGS picks another
#   broker binary ('before=BIN:/tmp/shardlog-old'). Default variants: 'default=' only.
#   Env: CARGO_TARGET_DIR, BENCH_TMP (data dirs; a real disk, not tmpfs).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ROUNDS=3 SECS=10 RATE=200
OUT=$ROOT/benches/results/latency-$(date -u +%Y%m%dT%H%M%SZ).txt
VARIANTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --secs) SECS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *=*) VARIANTS+=("$1"); shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=("default=")

(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p shardlog -p shardlog-benches)
sync
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
WORK=$(mktemp -d "${BENCH_TMP:-/tmp}/shardlog-latency.XXXXXX")
BROKER=
trap '[ -n "$BROKER" ] && kill -9 $BROKER 2>/dev/null; rm -rf "$WORK"' EXIT
log() { echo "$*" | tee -a "$OUT"; }
log "# $(git -C "$ROOT" rev-parse --short HEAD) $(date -u +%FT%TZ) rounds=$ROUNDS secs=$SECS rate=$RATE load=$(cut -d' ' -f1-3 /proc/loadavg)"

port_free() { ! ss -ltn | awk '{print $4}' | grep -q ":$1\$"; }
source "$ROOT/tests/lib/ports.sh"
pick_port() { free_port_block $(($1 + 1)); } # a base port with the next $1 free

# The p50 of a histogram family from a Prometheus scrape, interpolated inside its bucket,
# summed over shards; labels as a regex on the label set.
stage_p50_us() { # scrape family label-regex
  python3 - "$1" "$2" "$3" <<'EOF'
import re, sys
text, family, want = open(sys.argv[1]).read(), sys.argv[2], re.compile(sys.argv[3])
buckets = {}
for line in text.splitlines():
    m = re.match(family + r'_bucket\{(.*)\} (\S+)', line)
    if not m or not want.search(m.group(1)):
        continue
    le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
    bound = float('inf') if le == '+Inf' else float(le)
    buckets[bound] = buckets.get(bound, 0) + float(m.group(2))
points = sorted(buckets.items())
if not points or points[-1][1] == 0:
    print('na'); sys.exit()
half, low, below = points[-1][1] / 2, 0.0, 0.0
for bound, cumulative in points:
    if cumulative >= half:
        if bound == float('inf'):
            print(int(low * 1e6)); break
        share = (half - below) / (cumulative - below) if cumulative > below else 1
        print(int((low + (bound - low) * share) * 1e6)); break
    low, below = bound, cumulative
EOF
}

run_variant() { # round name flags
  local round=$1 name=$2 flags=$3 bin=$TARGET/release/shardlog port
  if [[ $flags == BIN:* ]]; then
    bin=${flags%% *}; bin=${bin#BIN:}
    [[ $flags == *" "* ]] && flags=${flags#* } || flags=""
  fi
  port=$(pick_port 5)
  [[ $flags == *--cores* ]] || flags="--cores 2 $flags"
  # shellcheck disable=SC2086
  "$bin" --data-dir "$WORK/$name-$round" --kafka-addr 127.0.0.1:$port \
    --admin-addr 127.0.0.1:$((port + 4)) $flags > "$WORK/$name-$round.log" 2>&1 &
  BROKER=$!
  for _ in $(seq 300); do port_free $((port + 1)) || break; sleep 0.05; done
  sleep 0.5
  local result
  result=$("$TARGET/release/shardlog-load" e2e --bootstrap 127.0.0.1:$port --rate "$RATE" \
    --secs "$SECS" --size 1024 --acks all --partitions 3 | grep '^RESULT' || true)
  curl -s "127.0.0.1:$((port + 4))/metrics" > "$WORK/metrics"
  kill -9 $BROKER; wait $BROKER 2>/dev/null || true; BROKER=
  rm -rf "$WORK/$name-$round"
  # Let the deleted segments' discards (ext4 `discard`) and writeback finish before the next
  # variant starts, or it pays for this one's cleanup.
  sync; sleep 3
  local m=$WORK/metrics stages=""
  for stage in decoded_to_queued queued_to_ready ready_to_written; do
    stages+=" produce_${stage}_p50_us=$(stage_p50_us $m shardlog_request_stage_seconds "api=\"Produce\",stage=\"$stage\"")"
  done
  for stage in gather write fdatasync; do
    stages+=" flush_${stage}_p50_us=$(stage_p50_us $m shardlog_flush_stage_seconds "stage=\"$stage\"")"
  done
  stages+=" fetch_wake_p50_us=$(stage_p50_us $m shardlog_fetch_wake_seconds 'shard=')"
  local keep
  keep=$(echo "$result" | grep -o '\(ack\|e2e\)_p[0-9]*_us=[0-9]*\|\(ack\|e2e\)_max_us=[0-9]*' | tr '\n' ' ')
  log "RESULT round=$round variant=$name $keep$stages"
}

for round in $(seq "$ROUNDS"); do
  limits=$("$TARGET/release/machine-limits" --dir "$WORK" --ops 1000 --seq-mib 16 \
    --pace-us $((1000000 / RATE)) | grep '^RESULT')
  log "RESULT round=$round variant=disk $(echo "$limits" | grep -o '\(overwrite\|append\|paced\)_sync_p50_us=[0-9]*' | tr '\n' ' ')"
  for v in "${VARIANTS[@]}"; do run_variant "$round" "${v%%=*}" "${v#*=}"; done
done

python3 - "$OUT" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith('RESULT'):
        continue
    fields = dict(kv.split('=', 1) for kv in line.split()[1:])
    for k, v in fields.items():
        if k not in ('round', 'variant') and v != 'na':
            rows.setdefault(fields['variant'], {}).setdefault(k, []).append(float(v))
disk = statistics.median(rows.get('disk', {}).get('overwrite_sync_p50_us', [float('nan')]))
paced = statistics.median(rows.get('disk', {}).get('paced_sync_p50_us', [float('nan')]))
print(f"\nmedians over rounds (disk overwrite+fdatasync p50 {disk:.0f} us back to back, "
      f"{paced:.0f} us paced)")
for variant, figures in rows.items():
    if variant == 'disk':
        continue
    parts = [f"{k}={statistics.median(v):.0f}" for k, v in figures.items()]
    ack = statistics.median(figures.get('ack_p50_us', [float('nan')]))
    print(f"{variant}: ack_p50/disk={ack / disk:.2f} ack_p50/paced={ack / paced:.2f} "
          + " ".join(parts))
EOF
