#!/usr/bin/env bash
# Older and non-librdkafka clients against a fresh shardlog (issue 20, issue 12):
#   sarama 1.22 (Debian) configured for Kafka 2.2.0 (its newest), 2.1.0 and 0.10.2.0 (message
#     format v1: Produce v2, Fetch v3; older settings fail in sarama's own admin client),
#   segmentio kafka-go 0.2.1 (Debian: message format v1 only, Produce v2 / Fetch v2, which
#     the broker converts to and from record batches): produce acks=all, consume, a group,
#   kafka-python pinned to api_version 0.9 (message format v0), 0.10.1 (v1), 1.0.0, 2.0.0,
#   kcat 1.7.1 (Debian, librdkafka 2.0.2), also as a Kafka 0.9.0 client (message format v0,
#     Produce v1 / Fetch v1) with each codec: none, gzip, snappy, lz4.
# Installs what is missing from Debian and PyPI, builds the Go checks offline in GOPATH
# mode, and prints the request versions each client used (from the broker's debug log).
# Usage: bash tests/clients/older_clients.sh   (root, for apt-get)
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/clients
need_apt=()
command -v go >/dev/null || need_apt+=(golang-go)
command -v kcat >/dev/null || need_apt+=(kcat)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] \
  || need_apt+=(golang-github-shopify-sarama-dev)
[ -d /usr/share/gocode/src/github.com/segmentio/kafka-go ] \
  || need_apt+=(golang-github-segmentio-kafka-go-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
python3 -c "import kafka" 2>/dev/null || pip install -q kafka-python

work=$(mktemp -d)
broker=
trap '[ -n "$broker" ] && kill -9 $broker 2>/dev/null; rm -rf "$work"' EXIT
export GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/gocache"
export GOFLAGS= CGO_CFLAGS="-Wno-deprecated-declarations"
go build -o "$work/sarama_check" ./$here/go/sarama_check
go build -o "$work/kafkago_check" ./$here/go/kafkago_check
cargo build --release -q

source tests/lib/ports.sh
port=$(free_port_block 4)
export BOOTSTRAP=127.0.0.1:$port
SHARDLOG_LOG=info,shardlog_net=debug ./target/release/shardlog --data-dir "$work/data" \
  --kafka-addr "$BOOTSTRAP" --admin-addr 127.0.0.1:$((port + 3)) --cores 2 \
  > "$work/broker.log" 2>&1 &
broker=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

failed=0
run() {
  local name=$1; shift
  local limit=(timeout 180)
  [ "$(type -t "$1")" = function ] && limit=()
  if "${limit[@]}" "$@"; then echo "PASS $name"; else
    echo "FAIL $name"; failed=1
    # The broker log goes with the temp dir: keep what it said around the failure.
    echo "  broker log, warnings and the last lines:"
    grep -E ' (WARN|ERROR) ' "$work/broker.log" | tail -n 20 | sed 's/^/  | /'
    tail -n 30 "$work/broker.log" | sed 's/^/  | /'
  fi
}
run "sarama 1.22 as Kafka 2.2.0" "$work/sarama_check" -bootstrap "$BOOTSTRAP" -version 2.2.0
run "sarama 1.22 as Kafka 2.1.0" "$work/sarama_check" -bootstrap "$BOOTSTRAP" -version 2.1.0
run "sarama 1.22 as Kafka 0.10.2.0" "$work/sarama_check" -bootstrap "$BOOTSTRAP" \
  -version 0.10.2.0
run "kafka-go 0.2.1 (message format v1)" "$work/kafkago_check" -bootstrap "$BOOTSTRAP"
run "kafka-python pinned to 0.9, 0.10.1, 1.0.0 and 2.0.0" python3 $here/kafka_python_pinned.py
printf 'AAPL:189.5\nMSFT:411.2\n' > "$work/ticks.txt"
kcat_check() {
  kcat -b "$BOOTSTRAP" -t kcat-old -P -K: -l "$work/ticks.txt" -X client.id=kcat-1.7.1 \
    && [ "$(kcat -b "$BOOTSTRAP" -t kcat-old -C -o beginning -e -q -f '%k %s\n' \
         -X client.id=kcat-1.7.1)" = $'AAPL 189.5\nMSFT 411.2' ]
}
kcat_version=$(kcat -V 2>&1 | sed -n 's/^Version \([^ ]*\).*librdkafka \([^ ]*\).*/\1 (librdkafka \2)/p')
run "kcat $kcat_version" kcat_check
# Values large enough that librdkafka really compresses them (it sends a set uncompressed
# when compression does not make it smaller).
kcat_legacy_check() {
  local codec=$1 topic=kcat-v0-$1 big
  big=$(printf 'tick%.0s' $(seq 500))
  printf 'AAPL:%s-1\nMSFT:%s-2\n' "$big" "$big" > "$work/legacy-$codec.txt"
  local legacy=(-X api.version.request=false -X broker.version.fallback=0.9.0 -X client.id=kcat-0.9.0)
  kcat -b "$BOOTSTRAP" -t "$topic" -P -K: -z "$codec" -l "$work/legacy-$codec.txt" "${legacy[@]}" \
    && [ "$(kcat -b "$BOOTSTRAP" -t "$topic" -C -o beginning -e -q -f '%k:%s\n' "${legacy[@]}")" \
         = "$(cat "$work/legacy-$codec.txt")" ]
}
for codec in none gzip snappy lz4; do
  run "kcat $kcat_version as a Kafka 0.9.0 client (message format v0), $codec" \
    kcat_legacy_check "$codec"
done

echo "request versions used, per client id:"
sed -n 's/.* request peer=[^ ]* api=\([A-Za-z]*\) version=\([0-9]*\) client_id="\([^"]*\)".*/\3|\1 v\2/p' \
  "$work/broker.log" | sort -u | awk -F'|' '
  { line[$1] = line[$1] " " $2 "," }
  END { for (c in line) print "  " c ":" line[c] }' | sort
[ -n "${OLDER_CLIENTS_BROKER_LOG:-}" ] && cp "$work/broker.log" "$OLDER_CLIENTS_BROKER_LOG"
[ $failed = 0 ] && echo "all older clients ok" || { echo "some older clients failed"; exit 1; }
