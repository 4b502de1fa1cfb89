#!/usr/bin/env bash
# Smoke-tests shardlog with the pure and wrapped clients people run: kcat, kafka-python,
# confluent-kafka (the newest from PyPI, with its AdminClient), aiokafka, kafkajs, and
# quixstreams and faust stateful apps (killed, restarted, state from the changelog); then kcat,
# kafka-python, aiokafka and kafkajs over SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
# as a user made with `shardlog user create`. Not part
# of `cargo test` (it installs packages from PyPI, npm and Debian); run by hand:
# bash tests/clients/run.sh           (`... run.sh sasl`: only the SASL clients, about 1 minute)
set -euo pipefail
only_sasl=false; [ "${1:-}" = sasl ] && only_sasl=true
cd "$(dirname "$0")/../.."
here=tests/clients
command -v kcat >/dev/null || apt-get install -y -qq kcat >/dev/null
python3 -c "import kafka, aiokafka" 2>/dev/null || pip install -q kafka-python aiokafka
# The newest confluent-kafka, whose wheel carries the newest librdkafka: the rdkafka crate
# the Rust tests use pins an older one.
$only_sasl || pip install -q -U confluent-kafka
# Stream processors with state in compacted changelog topics (issue 21).
$only_sasl || python3 -c "import quixstreams" 2>/dev/null || pip install -q quixstreams
$only_sasl || python3 -c "import faust" 2>/dev/null || pip install -q faust-streaming
work=$(mktemp -d)
(cd "$work" && npm init -y >/dev/null && npm install -q kafkajs >/dev/null)
cargo build --release -q
port=$((20000 + RANDOM % 10000))
export BOOTSTRAP=127.0.0.1:$port
# PLAINTEXT on port..port+2, the admin port, SASL_PLAINTEXT on port+4..port+6.
export SASL_BOOTSTRAP=127.0.0.1:$((port + 4))
./target/release/shardlog --data-dir "$work/data" --cores 2 \
  --listener "PLAINTEXT://$BOOTSTRAP" --listener "SASL_PLAINTEXT://$SASL_BOOTSTRAP" \
  --sasl-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
  --admin-addr 127.0.0.1:$((port + 3)) \
  > "$work/broker.log" 2>&1 &
broker=$!
trap 'kill -9 $broker 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
printf 'AAPL:189.5\nMSFT:411.2\n' > "$work/ticks.txt"
if ! $only_sasl; then
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
fi

# SASL: one user with both SCRAM credentials (PLAIN checks the same stored keys).
export SASL_USER=smoke SASL_PASSWORD=smoke-secret-$RANDOM
for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
  echo "$SASL_PASSWORD" | ./target/release/shardlog user create "$SASL_USER" \
    --mechanism $mechanism --password-stdin --bootstrap "$BOOTSTRAP" >/dev/null
done
for mechanism in PLAIN SCRAM-SHA-256 SCRAM-SHA-512; do
  sasl=(-X security.protocol=sasl_plaintext -X sasl.mechanism=$mechanism
        -X sasl.username="$SASL_USER" -X sasl.password="$SASL_PASSWORD")
  kcat -b "$SASL_BOOTSTRAP" "${sasl[@]}" -t "sasl-kcat-$mechanism" -P -K: -l "$work/ticks.txt"
  got=$(kcat -b "$SASL_BOOTSTRAP" "${sasl[@]}" -t "sasl-kcat-$mechanism" -C -o beginning -e -q \
        -f '%k %s\n')
  [ "$got" = $'AAPL 189.5\nMSFT 411.2' ] && echo "kcat $mechanism over SASL_PLAINTEXT ok" \
    || { echo "kcat $mechanism over SASL_PLAINTEXT failed: $got"; exit 1; }
done
# A wrong password is checked once per client: failures from one address are answered
# ever more slowly (up to 5 s each).
for mechanism in SCRAM-SHA-256 SCRAM-SHA-512 PLAIN; do
  check=0; [ $mechanism = SCRAM-SHA-256 ] && check=1
  export SASL_MECHANISM=$mechanism CHECK_WRONG_PASSWORD=$check
  python3 $here/sasl_smoke.py kafka-python
  python3 $here/sasl_smoke.py aiokafka
  (cd "$work" && NODE_PATH="$work/node_modules" node "$OLDPWD/$here/kafkajs_sasl_smoke.js")
done
echo "all clients ok"
