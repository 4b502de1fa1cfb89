#!/usr/bin/env bash
# Runs librdkafka's own integration tests (librdkafka 2.12.1, as shipped in the source of
# the rdkafka-sys crate the Rust tests already download) against a fresh shardlog broker.
#
# The test runner is built outside the repository, in $LIBRDKAFKA_SUITE_CACHE, once; the
# script installs what the build needs from Debian (gcc, g++, make, zlib/zstd/lz4 headers,
# RapidJSON for the tests that check statistics JSON).
# Which tests run, and why each other one is excluded, is in librdkafka_tests.tsv next to
# this script (docs/compatibility.md shows the same table).
#
# Environment:
#   LIBRDKAFKA_TESTS         ci: the fast subset CI runs; all: every test marked run or ci
#                            (default); cluster: the tests marked cluster, against a
#                            3-node cluster (they create topics with replication factor
#                            3); or a list of test numbers, e.g. "0001 0012 0081"
#   LIBRDKAFKA_TEST_TIMEOUT  seconds each test number may take before it counts as failed
#                            (default 300)
#   LIBRDKAFKA_QUICK         1: pass -Q, the runner's quick mode (fewer messages, shorter
#                            waits); 0: full size (default 1)
#   LIBRDKAFKA_SUITE_CACHE   where the runner is built (default ~/.cache/shardlog/...)
#   LIBRDKAFKA_KEEP_LOGS     1: keep the work dir (broker log, one log per test)
#   SHARDLOG_BIN             the broker to test (default target/release/shardlog, built if
#                            missing)
#   LIBRDKAFKA_CLUSTER       3: run against a cluster of three nodes (`--cores 1` each) on
#                            127.0.0.1 instead of one broker, for the tests that create
#                            topics with replication factor 3 (by hand; CI runs one broker)
#
# Prints `PASS|FAIL|SKIP NNNN name` per test and a closing `N passed, N failed, N skipped`
# line; exits 1 if any test failed. `librdkafka_suite.sh --table` prints the table of
# tests as Markdown, for docs/compatibility.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
table=$repo/tests/clients/librdkafka_tests.tsv
if [ "${1:-}" = --table ]; then
  echo "| test | variants | runs | why excluded, or notes |"
  echo "|---|---|---|---|"
  awk -F'\t' '{ runs = $2 == "ci" ? "yes, in CI" : $2 == "run" ? "yes" \
      : $2 == "cluster" ? "yes, on a 3-node cluster" : "no"
    gsub(/ /, ", ", $3); printf "| %s | %s | %s | %s |\n", $1, $3, runs, $4 }' "$table"
  exit 0
fi
version=2.12.1
timeout_s=${LIBRDKAFKA_TEST_TIMEOUT:-300}
selection=${LIBRDKAFKA_TESTS:-all}
quick=${LIBRDKAFKA_QUICK:-1}
cache=${LIBRDKAFKA_SUITE_CACHE:-$HOME/.cache/shardlog/librdkafka-tests-$version}

install_build_tools() {
  local missing=()
  command -v gcc >/dev/null || missing+=(gcc)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  command -v python3 >/dev/null || missing+=(python3)
  local pkg
  for pkg in zlib1g-dev libzstd-dev liblz4-dev rapidjson-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Builds librdkafka (static and shared, no SSL/SASL: shardlog serves plaintext only) and
# its test runner into $cache, from a copy of the crate's source.
build_runner() {
  # A runner built before RapidJSON was installed skips the statistics tests: rebuild it.
  [ -x "$cache/tests/test-runner" ] && grep -q "define WITH_RAPIDJSON 1" "$cache/config.h" \
    && return 0
  local source
  source=$(ls -d "$HOME"/.cargo/registry/src/*/rdkafka-sys-*+"$version"/librdkafka 2>/dev/null \
    | head -1)
  if [ -z "$source" ]; then
    cargo fetch -q  # the rdkafka dev-dependency brings rdkafka-sys, with librdkafka inside
    source=$(ls -d "$HOME"/.cargo/registry/src/*/rdkafka-sys-*+"$version"/librdkafka | head -1)
  fi
  install_build_tools
  echo "building librdkafka $version and its test runner in $cache"
  rm -rf "$cache"
  mkdir -p "$(dirname "$cache")"
  cp -a "$source" "$cache.tmp"
  # mklove treats every ./configure.* file as a module: keep logs out of the source dir.
  (cd "$cache.tmp" \
    && ./configure --no-download --disable-ssl --disable-gssapi --disable-curl \
      --enable-zlib --enable-zstd --enable-lz4-ext \
    && make -j"$(nproc)" libs \
    && make -j"$(nproc)" -C tests test-runner) > "$cache.build.log" 2>&1 \
    || { tail -30 "$cache.build.log"; echo "librdkafka build failed"; exit 1; }
  mv "$cache.tmp" "$cache"
}

# The test numbers to run, from the table (or the caller's own list).
selected_tests() {
  case "$selection" in
    all) awk -F'\t' '$2 == "run" || $2 == "ci" { print $1 }' "$table" ;;
    ci) awk -F'\t' '$2 == "ci" { print $1 }' "$table" ;;
    cluster) awk -F'\t' '$2 == "cluster" { print $1 }' "$table" ;;
    *) printf '%s\n' $selection ;;
  esac
}

# A port p with p..p+3 free: bootstrap, two shard ports, admin.
source tests/lib/ports.sh

# librdkafka's test scenarios (tests/scenarios/*.json) are Kafka clusters with
# num.partitions=4 and topic auto-creation on ("default") or off ("noautocreate").
brokers=()
stop_brokers() {
  local pid
  for pid in "${brokers[@]}"; do
    { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
  done
  brokers=()
}
brokers_alive() {
  local pid
  for pid in "${brokers[@]}"; do kill -0 "$pid" 2>/dev/null || return 1; done
}
start_broker() {  # auto_create: true|false
  stop_brokers
  local nodes=${LIBRDKAFKA_CLUSTER:-1} cores=2
  [ "$selection" = cluster ] && nodes=3
  [ "$nodes" -gt 1 ] && cores=1
  # A port can still be taken between the check and the broker's bind: try another block.
  local attempt n peers bootstrap
  for attempt in 1 2 3; do
    port=$(free_port_block $((4 * nodes)))
    peers="" bootstrap=""
    for n in $(seq "$nodes"); do
      peers+="${peers:+,}$n=127.0.0.1:$((port + 4 * (n - 1)))"
      bootstrap+="${bootstrap:+,}127.0.0.1:$((port + 4 * (n - 1)))"
    done
    for n in $(seq "$nodes"); do
      local p=$((port + 4 * (n - 1))) cluster=()
      [ "$nodes" -gt 1 ] && cluster=(--node-id "$n" --peers "$peers")
      rm -rf "$work/data$n"
      "$shardlog" --data-dir "$work/data$n" --kafka-addr "127.0.0.1:$p" \
        --admin-addr "127.0.0.1:$((p + 3))" --cores "$cores" --default-partitions 4 \
        --auto-create-topics "$1" "${cluster[@]}" >> "$work/broker.log" 2>&1 &
      brokers+=($!)
    done
    for _ in $(seq 100); do
      (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
      brokers_alive || break
      sleep 0.1
    done
    brokers_alive && break
    echo "the broker did not start on port block $port (attempt $attempt):"
    tail -3 "$work/broker.log"
    stop_brokers
  done
  # A cluster answers once its metadata group elected a controller.
  if [ "$nodes" -gt 1 ]; then python3 benches/scripts/failover.py ready "$bootstrap" "$nodes"; fi
  cat > "$work/test.conf" <<EOF
bootstrap.servers=$bootstrap
test.topic.random=true
EOF
}

# Runs one test number in one scenario; prints a line per test and counts them.
run_test_number() {  # number scenario
  local number=$1 scenario=$2 log=$work/$1-$2.log status results
  # TEST_KAFKA_VERSION 4.0.0: 0092 (message.format.version, which shardlog lacks) skips.
  # The runner aborts (SIGABRT) on a failed test: keep bash's "Aborted" notice out.
  set +e
  { (cd "$cache/tests" && LD_LIBRARY_PATH=../src:../src-cpp TESTS=$number \
    TEST_SCENARIO=$scenario TEST_KAFKA_VERSION=4.0.0 RDKAFKA_TEST_CONF=$work/test.conf \
    RDKAFKA_GITVER=$version timeout -k 10 "$timeout_s" ./test-runner "${args[@]}") \
    > "$log" 2>&1; } 2>/dev/null
  status=$?
  set -e
  # The runner's closing summary: `| 0001_multiobj | PASSED | 1.2s | reason` per test.
  # Silent skips (another scenario, not selected) have no reason; the broker-less
  # variants are left out by -L.
  results=$(sed 's/\x1b\[[0-9;]*m//g' "$log" \
    | awk -F'|' -v n="$number" '$2 ~ "^ *" n "_" {
        gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/^ +| +$/, "", $5); print $2, $3, $5 }' \
    | grep -v "Filtered due to negative test flags" | grep -v "SKIPPED *$" || true)
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "FAIL $number timed out after ${timeout_s}s ($scenario scenario)"
    failed=$((failed + 1))
  elif [ -z "$results" ] && [ "$status" = 0 ]; then
    :  # nothing of this number runs in this scenario
  elif [ -z "$results" ]; then
    # A failed test aborts the runner before its summary: report the first failure.
    local first
    first=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -a -m1 -A1 '^### Test "' | tr '\n' ' ' \
      | sed 's/^### Test "\([^"]*\)".*###  */\1: /' | cut -c1-300 || true)
    echo "FAIL $number ${first:-no result, runner exit $status} ($scenario scenario)"
    failed=$((failed + 1))
  else
    local name state reason
    while read -r name state reason; do
      case "$state" in
        PASSED) echo "PASS $number ${name#"${number}"_}"; passed=$((passed + 1)) ;;
        SKIPPED) echo "SKIP $number ${name#"${number}"_} ($reason)"; skipped=$((skipped + 1)) ;;
        *) echo "FAIL $number ${name#"${number}"_} $reason"; failed=$((failed + 1)) ;;
      esac
    done <<< "$results"
  fi
  if ! brokers_alive; then
    echo "FAIL $number the broker exited during this test; restarting it"
    tail -5 "$work/broker.log"
    failed=$((failed + 1))
    start_broker "$([ "$scenario" = noautocreate ] && echo false || echo true)"
  fi
}

build_runner
shardlog=${SHARDLOG_BIN:-target/release/shardlog}
[ -x "$shardlog" ] || cargo build --release -q
work=$(mktemp -d)
cleanup() {
  stop_brokers
  if [ "${LIBRDKAFKA_KEEP_LOGS:-0}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

args=(-L -p1)  # -L: leave out the broker-less tests (librdkafka's own mock cluster)
[ "$quick" = 1 ] && args+=(-Q)
passed=0 failed=0 skipped=0
started=$(date +%s)
tests=$(selected_tests)
start_broker true
for number in $tests; do
  run_test_number "$number" default
done
# Tests with a variant for a cluster that does not create topics on its own.
noautocreate=$(grep -o -w -E '0045|0107|0111' <<< "$tests" || true)
if [ -n "$noautocreate" ]; then
  start_broker false
  for number in $noautocreate; do
    run_test_number "$number" noautocreate
  done
fi
echo "librdkafka suite: $(( $(date +%s) - started )) s"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
