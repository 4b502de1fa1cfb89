#!/usr/bin/env bash
# Smoke-tests shardlog with the pure and wrapped clients people run: kcat, kafka-python,
# confluent-kafka (the newest from PyPI, with its AdminClient), aiokafka, kafkajs, and
# quixstreams and faust stateful apps (killed, restarted, state from the changelog). Not part
# of `cargo test` (it installs packages from PyPI, npm and Debian); run by hand:
# bash tests/clients/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/clients
command -v kcat >/dev/null || apt-get install -y -qq kcat >/dev/null
python3 -c "import kafka, aiokafka" 2>/dev/null || pip install -q kafka-python aiokafka
# The newest confluent-kafka, whose wheel carries the newest librdkafka: the rdkafka crate
# the Rust tests use pins an older one.
pip install -q -U confluent-kafka
# Stream processors with state in compacted changelog topics (issue 21).
python3 -c "import quixstreams" 2>/dev/null || pip install -q quixstreams
python3 -c "import faust" 2>/dev/null || pip install -q faust-streaming
work=$(mktemp -d)
(cd "$work" && npm init -y >/dev/null && npm install -q kafkajs >/dev/null)
cargo build --release -q
port=$((20000 + RANDOM % 10000))
export BOOTSTRAP=127.0.0.1:$port
./target/release/shardlog --data-dir "$work/data" --kafka-addr "$BOOTSTRAP" --cores 2 \
  --admin-addr 127.0.0.1:$((port + 3)) \
  > "$work/broker.log" 2>&1 &
broker=$!
trap 'kill -9 $broker 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
printf 'AAPL:189.5\nMSFT:411.2\n' > "$work/ticks.txt"
kcat -b "$BOOTSTRAP" -t trades -P -K: -l "$work/ticks.txt"
got=$(kcat -b "$BOOTSTRAP" -t trades -C -o beginning -e -q -f '%k %s\n')
[ "$got" = $'AAPL 189.5\nMSFT 411.2' ] && echo "kcat ok" || { echo "kcat failed: $got"; exit 1; }
python3 $here/kafka_python_smoke.py
python3 $here/confluent_smoke.py
python3 $here/confluent_admin_smoke.py
python3 $here/confluent_compacted_smoke.py
python3 $here/stateful_apps.py quixstreams
python3 $here/stateful_apps.py faust
python3 $here/aiokafka_smoke.py
python3 $here/txn_smoke.py
for script in kafkajs_smoke.js kafkajs_txn_smoke.js; do
  (cd "$work" && NODE_PATH="$work/node_modules" KAFKAJS_NO_PARTITIONER_WARNING=1 node "$OLDPWD/$here/$script")
done
echo "all clients ok"
