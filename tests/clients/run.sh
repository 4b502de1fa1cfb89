#!/usr/bin/env bash
# Smoke-tests shardlog with the pure and wrapped clients people run: kcat, kafka-python,
# confluent-kafka (the newest from PyPI, with its AdminClient), aiokafka, kafkajs, and
# quixstreams and faust stateful apps (killed, restarted, state from the changelog); then kcat,
# kafka-python, aiokafka, confluent-kafka and kafkajs over SASL_PLAINTEXT and SASL_SSL (PLAIN,
# SCRAM-SHA-256, SCRAM-SHA-512) as a user made with `shardlog user create`, and over SSL with
# a client certificate (a second broker, with mTLS). Certificates are made here with openssl,
# in a temp dir. Not part of `cargo test` (it installs packages from PyPI, npm and Debian); run
# by hand:
# bash tests/clients/run.sh           (`... run.sh sasl`: only the secured clients, a few minutes)
set -euo pipefail
only_sasl=false; [ "${1:-}" = sasl ] && only_sasl=true
cd "$(dirname "$0")/../.."
here=tests/clients
command -v kcat >/dev/null || apt-get install -y -qq kcat >/dev/null
python3 -c "import kafka, aiokafka" 2>/dev/null || pip install -q kafka-python aiokafka
# The newest confluent-kafka, whose wheel carries the newest librdkafka: the rdkafka crate
# the Rust tests use pins an older one.
if $only_sasl; then python3 -c "import confluent_kafka" 2>/dev/null || pip install -q confluent-kafka
else pip install -q -U confluent-kafka; fi
# Stream processors with state in compacted changelog topics (issue 21).
$only_sasl || python3 -c "import quixstreams" 2>/dev/null || pip install -q quixstreams
$only_sasl || python3 -c "import faust" 2>/dev/null || pip install -q faust-streaming
work=$(mktemp -d)
(cd "$work" && npm init -y >/dev/null && npm install -q kafkajs >/dev/null)
cargo build --release -q
# A CA, the brokers' certificate (127.0.0.1) and a client certificate, as docs/security.md's
# worked example makes them.
tls="$work/tls"; mkdir -p "$tls"
(cd "$tls"
 ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
 openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=smoke CA" -keyout ca.key -out ca.pem
 openssl req "${ec[@]}" -subj "/CN=broker" -keyout broker.key -out broker.csr
 printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > broker.ext
 openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
   -extfile broker.ext -out broker.pem
 openssl req "${ec[@]}" -subj "/O=Example/OU=eng/CN=smoke-client" -keyout client.key -out client.csr
 printf 'extendedKeyUsage=clientAuth\n' > client.ext
 openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
   -extfile client.ext -out client.pem) 2>/dev/null
source tests/lib/ports.sh
port=$(free_port_block 17)
export BOOTSTRAP=127.0.0.1:$port
# PLAINTEXT on port..port+2, the admin port, SASL_PLAINTEXT on port+4..port+6, SASL_SSL on
# port+7..port+9; the second broker: SSL with client certificates on port+10..port+12, its
# PLAINTEXT on port+14..port+16 (admin port+13).
export SASL_BOOTSTRAP=127.0.0.1:$((port + 4)) SASL_SSL_BOOTSTRAP=127.0.0.1:$((port + 7))
export SSL_BOOTSTRAP=127.0.0.1:$((port + 10))
./target/release/shardlog --data-dir "$work/data" --cores 2 \
  --listener "PLAINTEXT://$BOOTSTRAP" --listener "SASL_PLAINTEXT://$SASL_BOOTSTRAP" \
  --listener "SASL_SSL://$SASL_SSL_BOOTSTRAP" \
  --tls-cert-file "$tls/broker.pem" --tls-key-file "$tls/broker.key" \
  --sasl-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
  --admin-addr 127.0.0.1:$((port + 3)) \
  > "$work/broker.log" 2>&1 &
broker=$!
./target/release/shardlog --data-dir "$work/data-ssl" --cores 2 \
  --listener "SSL://$SSL_BOOTSTRAP" --listener "PLAINTEXT://127.0.0.1:$((port + 14))" \
  --tls-cert-file "$tls/broker.pem" --tls-key-file "$tls/broker.key" \
  --tls-client-ca-file "$tls/ca.pem" --admin-addr 127.0.0.1:$((port + 13)) \
  > "$work/broker-ssl.log" 2>&1 &
ssl_broker=$!
trap 'kill -9 $broker $ssl_broker 2>/dev/null; rm -rf "$work"' EXIT
for p in $port $((port + 14)); do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
done
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
# kcat: what it produces it reads back. $1: the listener's address, $2: its protocol, the
# rest: kcat's settings.
kcat_round_trip() {
  local addr=$1 name=$2; shift 2
  local topic="kcat-${name,,}"; topic=${topic//[^a-z0-9-]/-}
  kcat -b "$addr" "$@" -t "$topic" -P -K: -l "$work/ticks.txt"
  got=$(kcat -b "$addr" "$@" -t "$topic" -C -o beginning -e -q -f '%k %s\n')
  [ "$got" = $'AAPL 189.5\nMSFT 411.2' ] && echo "kcat $name ok" \
    || { echo "kcat $name failed: $got"; exit 1; }
}
ca=(-X ssl.ca.location="$tls/ca.pem")
for mechanism in PLAIN SCRAM-SHA-256 SCRAM-SHA-512; do
  login=(-X sasl.mechanism=$mechanism -X sasl.username="$SASL_USER" -X sasl.password="$SASL_PASSWORD")
  kcat_round_trip "$SASL_BOOTSTRAP" "$mechanism over SASL_PLAINTEXT" \
    -X security.protocol=sasl_plaintext "${login[@]}"
  kcat_round_trip "$SASL_SSL_BOOTSTRAP" "$mechanism over SASL_SSL" \
    -X security.protocol=sasl_ssl "${ca[@]}" "${login[@]}"
done
kcat_round_trip "$SSL_BOOTSTRAP" "client certificate over SSL" -X security.protocol=ssl "${ca[@]}" \
  -X ssl.certificate.location="$tls/client.pem" -X ssl.key.location="$tls/client.key"
if kcat -b "$SSL_BOOTSTRAP" -X security.protocol=ssl "${ca[@]}" -m 10 -L >/dev/null 2>&1; then
  echo "kcat without a client certificate got in over SSL"; exit 1
else echo "kcat without a client certificate refused over SSL ok"; fi

# The Python and Node clients. A wrong password is checked once per client and protocol:
# failures from one address are answered ever more slowly (up to 5 s each).
export SSL_CA="$tls/ca.pem"
clients() {
  for client in kafka-python aiokafka confluent-kafka; do python3 $here/sasl_smoke.py $client; done
  (cd "$work" && NODE_PATH="$work/node_modules" node "$OLDPWD/$here/kafkajs_sasl_smoke.js")
}
for protocol in SASL_PLAINTEXT SASL_SSL; do
  export SECURITY_PROTOCOL=$protocol SECURE_BOOTSTRAP=$SASL_BOOTSTRAP
  [ $protocol = SASL_SSL ] && SECURE_BOOTSTRAP=$SASL_SSL_BOOTSTRAP
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512 PLAIN; do
    check=0; [ $mechanism = SCRAM-SHA-512 ] && check=1
    export SASL_MECHANISM=$mechanism CHECK_WRONG_PASSWORD=$check
    clients
  done
done
export SECURITY_PROTOCOL=SSL SECURE_BOOTSTRAP=$SSL_BOOTSTRAP CHECK_WRONG_PASSWORD=1
export SSL_CERT="$tls/client.pem" SSL_KEY="$tls/client.key"
clients
echo "all clients ok"
