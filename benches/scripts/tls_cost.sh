#!/usr/bin/env bash
# What TLS costs (issue 14): one broker (2 shards) with a PLAINTEXT and an SSL listener, and
# e2e-rdkafka (librdkafka) against each in turn, ROUNDS times (PLAINTEXT, SSL, PLAINTEXT,
# SSL, ...), so both see the same machine in the same minutes. Each run: 100,000 x 1 KiB
# acks=all produce + consume, then 200 msg/s for 20 s with linger.ms=0 (as
# e2e_rdkafka_runs.sh). Certificates are made with openssl in a temp dir (P-256, as in
# docs/security.md's example). Prints every RESULT line tagged with its protocol, then the
# medians and the SSL / PLAINTEXT ratio of each figure.
# Usage: benches/scripts/tls_cost.sh [ROUNDS]   (default 3; about 50 s a round)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p shardlog -p shardlog-benches --bin shardlog --bin e2e-rdkafka
dir=$(mktemp -d)
broker=
trap '[ -n "$broker" ] && kill -9 $broker 2>/dev/null; rm -rf "$dir"' EXIT

ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=tls_cost CA" -keyout "$dir/ca.key" \
  -out "$dir/ca.pem" 2>/dev/null
openssl req "${ec[@]}" -subj "/CN=broker" -keyout "$dir/broker.key" -out "$dir/broker.csr" \
  2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$dir/broker.ext"
openssl x509 -req -in "$dir/broker.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 2 -extfile "$dir/broker.ext" -out "$dir/broker.pem" 2>/dev/null

# PLAINTEXT on port..port+2, the admin port, SSL on port+4..port+6.
port=$((20000 + RANDOM % 10000))
ssl_port=$((port + 4))
"${SHARDLOG_BIN:-$target/release/shardlog}" --data-dir "$dir/data" --cores 2 \
  --listener PLAINTEXT://127.0.0.1:$port --listener SSL://127.0.0.1:$ssl_port \
  --tls-cert-file "$dir/broker.pem" --tls-key-file "$dir/broker.key" \
  --admin-addr 127.0.0.1:$((port + 3)) > "$dir/broker.log" 2>&1 &
broker=$!
for p in $port $ssl_port; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
done

for round in $(seq "$rounds"); do
  for protocol in PLAINTEXT SSL; do
    case $protocol in
      PLAINTEXT) flags=(--bootstrap 127.0.0.1:$port) ;;
      SSL) flags=(--bootstrap 127.0.0.1:$ssl_port -X security.protocol=ssl
                  -X ssl.ca.location="$dir/ca.pem") ;;
    esac
    "$target/release/e2e-rdkafka" "${flags[@]}" --messages 100000 --size 1024 \
      --partitions 3 --rate 200 --secs 20 \
      | sed -n "s/^RESULT /RESULT protocol=$protocol round=$round /p" | tee -a "$dir/results"
  done
done
grep -E 'WARN|ERROR' "$dir/broker.log" | tail -5 || true

python3 - "$dir/results" <<'PY'
import statistics, sys
runs = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in open(sys.argv[1])]
figures = ["produce_msg_s", "produce_mb_s", "consume_msg_s", "consume_mb_s",
           "ack_p50_us", "ack_p99_us", "e2e_p50_us", "e2e_p99_us", "e2e_p999_us"]
print(f"\n{'figure':<15} {'PLAINTEXT':>12} {'SSL':>12} {'SSL/PLAINTEXT':>14}   (medians of {len(runs) // 4} runs)")
for figure in figures:
    median = {p: statistics.median(float(r[figure]) for r in runs if r["protocol"] == p and figure in r)
              for p in ("PLAINTEXT", "SSL")}
    ratio = median["SSL"] / median["PLAINTEXT"]
    print(f"{figure:<15} {median['PLAINTEXT']:>12.1f} {median['SSL']:>12.1f} {ratio:>14.2f}")
PY
