#!/usr/bin/env bash
# Runs the README as a newcomer would, from the README itself so the two cannot drift:
# the command under "## Start the broker" in the background from the repository root
# (default data dir ./data, default 127.0.0.1:9092), then every command of the block
# under "## Try it with kcat", then checks what the consume printed, then SIGTERM and a
# clean exit. If 9092 (or the shard/admin ports after it) is taken on this machine, the
# broker gets other ports through its environment variables and the kcat lines are
# pointed at them; nothing else is changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# The first ```sh block after a heading, without the fences.
block_after() {
  awk -v heading="$1" '
    $0 == heading { found = 1; next }
    found && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' README.md
}

start_command=$(block_after "## Start the broker")
kcat_block=$(block_after "## Try it with kcat")
[ "$start_command" = "cargo run --release" ] \
  || { echo "README's start command is '$start_command', expected 'cargo run --release'"; exit 1; }
[ -n "$kcat_block" ] || { echo "README has no kcat block"; exit 1; }
command -v kcat >/dev/null || { apt-get update -qq && apt-get install -y -qq kcat >/dev/null; }

source tests/lib/ports.sh
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
cores=$(nproc)
base=9092
for p in $(seq 9092 $((9092 + cores + 1))) 9644; do
  if port_taken "$p"; then base=$(free_port_block $((cores + 2))); break; fi
done
if [ "$base" != 9092 ]; then
  echo "default ports taken here; using 127.0.0.1:$base"
  export SHARDLOG_KAFKA_ADDR=127.0.0.1:$base SHARDLOG_ADMIN_ADDR=127.0.0.1:$((base + cores + 1))
fi

work=$(mktemp -d)
rm -rf data   # a newcomer's clone has none
cargo build --release -q
$start_command > "$work/broker.log" 2>&1 &
broker=$!
trap 'kill -9 $broker 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 600); do
  port_taken "$base" && break
  kill -0 $broker 2>/dev/null || { echo "broker exited:"; cat "$work/broker.log"; exit 1; }
  sleep 0.1
done
port_taken "$base" || { echo "broker not listening:"; cat "$work/broker.log"; exit 1; }

# Run the kcat block line by line in a scratch dir (it writes ticks.txt), keeping what
# the last command (the consume) prints.
out=""
while IFS= read -r line; do
  line=${line%%#*}
  [ -n "${line// }" ] || continue
  line=${line//127.0.0.1:9092/127.0.0.1:$base}
  echo "+ $line"
  out=$(cd "$work" && timeout 60 bash -c "$line")
  printf '%s\n' "$out"
done <<< "$kcat_block"
[ "$out" = $'AAPL 189.5\nMSFT 411.2' ] \
  || { echo "README kcat example read back '$out'"; cat "$work/broker.log"; exit 1; }

kill -TERM $broker
status=0
wait $broker || status=$?
[ "$status" = 0 ] || { echo "broker exited $status on SIGTERM"; cat "$work/broker.log"; exit 1; }
[ -d data/shard-000 ] || { echo "no ./data/shard-000 after the run"; exit 1; }
rm -rf data
echo "README smoke: 1 passed, 0 failed"
