#!/usr/bin/env bash
# The web console in a real browser (Debian's chromium, headless): starts a release broker
# with --console-write on free ports with its own temp dir, makes a topic and records with
# the CLI and the load generator, then loads each page in chromium and checks the DOM it
# rendered (after its scripts ran); then tests/console/webdriver.py clicks through the
# forms over WebDriver (chromedriver), against that broker and a read-only one. On a
# failed check the page's screenshot is kept and its path printed. `CONSOLE_SCREENSHOTS=DIR`
# also saves a screenshot of each page in DIR (the ones in docs/ come from that). Without
# chromium it says SKIPPED and why (without chromedriver, the WebDriver part does);
# `.ci/run` installs both.
set -euo pipefail
cd "$(dirname "$0")/../.."
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "console browser test SKIPPED: no chromium (apt-get install chromium)"
  exit 0
fi
cargo build --release -q --bin shardlog
cargo build --release -q -p shardlog-benches --bin shardlog-load

work=$(mktemp -d)
broker=
readonly_broker=
trap '[ -n "$broker" ] && kill -9 $broker 2>/dev/null; [ -n "$readonly_broker" ] && kill -9 $readonly_broker 2>/dev/null; rm -rf "$work"' EXIT
source tests/lib/ports.sh
port=$(free_port_block 16)
admin=127.0.0.1:$((port + 5))
./target/release/shardlog --data-dir "$work/data" --kafka-addr 127.0.0.1:$port \
  --admin-addr "$admin" --cores 2 --console-write > "$work/broker.log" 2>&1 &
broker=$!
readonly_port=$((port + 10))
readonly_admin=127.0.0.1:$((port + 15))
./target/release/shardlog --data-dir "$work/readonly" --kafka-addr 127.0.0.1:$readonly_port \
  --admin-addr "$readonly_admin" --cores 1 > "$work/readonly.log" 2>&1 &
readonly_broker=$!
for a in "$admin" "$readonly_admin"; do
  for _ in $(seq 100); do curl -sf "http://$a/health" >/dev/null && break; sleep 0.1; done
done
cli() { ./target/release/shardlog --bootstrap 127.0.0.1:$port "$@"; }

failed=0
# Loads $1 in chromium, letting its scripts run for $2 ms of virtual time; the DOM goes to
# $work/dom.html and a screenshot to $work/shot.png.
render() {
  local url=http://$admin$1 budget=$2
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --virtual-time-budget="$budget" --dump-dom "$url" > "$work/dom.html" 2>/dev/null
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1100,700 --virtual-time-budget="$budget" --screenshot="$work/shot.png" \
    "$url" >/dev/null 2>&1
}
check() { # name page budget grep-pattern [screenshot-name [tries]]
  local name=$1 page=$2 budget=$3 pattern=$4 shot=${5:-} tries=${6:-1}
  render "$page" "$budget"
  # A page that shows live data may need more than one look on a loaded machine (chromium
  # runs virtual time ahead of the broker's real intervals): up to $tries renders, 1 s apart.
  while ! grep -Eq "$pattern" "$work/dom.html" && [ "$tries" -gt 1 ]; do
    tries=$((tries - 1)); sleep 1; render "$page" "$budget"
  done
  if grep -Eq "$pattern" "$work/dom.html"; then
    echo "PASS $name"
    [ -n "${CONSOLE_SCREENSHOTS:-}" ] && [ -n "$shot" ] && cp "$work/shot.png" "$CONSOLE_SCREENSHOTS/$shot"
  else
    echo "FAIL $name: /$page has no match for $pattern"
    local kept; kept=$(mktemp /tmp/console-failure-XXXX.png); cp "$work/shot.png" "$kept"
    echo "  screenshot: $kept; DOM:"; head -c 3000 "$work/dom.html" | sed 's/^/  | /'
    failed=1
  fi
  return 0
}

cli topic create prices --partitions 3 >/dev/null
check "a topic created with the CLI is on the topics page" /topics 1000 \
  '<a href="/topics/prices">prices</a>'
for i in 1 2 3 4 5; do printf '{"sym":"AAPL","px":%s}\n' "18$i.5"; done \
  | cli produce prices --key AAPL >/dev/null
# partition 0 (every AAPL record): log start 0, high watermark 5, log end 5, bytes > 0.
check "the topic page shows each partition's log start, high watermark, log end and size" \
  /topics/prices 1000 '<td>0</td><td>5</td><td>5</td><td>[1-9][0-9]*</td></tr>' console-topic.png

printf '{"sym":"MSFT","px":411.5,"venue":"<XNAS>"}\n' | cli produce prices --key MSFT --partition 2 >/dev/null
check "a keyed JSON record produced with the CLI shows pretty-printed in the message browser" \
  '/topics/prices/2?format=json' 1000 '^  "sym": "MSFT",$' console-records.png

# A load while the overview polls: each live chart draws a point per interval, and the
# topics page shows the load's topic being produced to and fetched from. (Chromium runs
# these pages in virtual time, so a chart gets few points; webdriver.py watches the
# overview in real time and takes its screenshot.)
./target/release/shardlog-load e2e --bootstrap 127.0.0.1:$port --rate 200 --secs 20 \
  --size 256 --acks all --partitions 3 > "$work/load.log" 2>&1 &
load=$!
sleep 1
points='data-points="([2-9]|[1-9][0-9]+)"'
check "the overview's produce→ack chart draws points while a load runs" / 5000 \
  "id=\"chart\" class=\"chart\" $points" "" 6
check "the overview's fdatasync chart draws points while a load runs" / 5000 \
  "id=\"fsync-chart\" class=\"chart\" $points" "" 6
check "the topics page shows a produce and a fetch rate for the topic under load" /topics 7000 \
  'data-topic="load-e2e-[0-9]+" data-kind="produce">[1-9][0-9]*</span>.*data-kind="fetch">[1-9][0-9]*</span>' \
  console-topics.png 6
wait $load || { echo "FAIL the load generator failed"; cat "$work/load.log"; failed=1; }
check "the overview shows the latency budget per stage" / 1000 \
  '<td>flush: fdatasync</td><td>[1-9][0-9]*</td><td>≤ [0-9]+</td>'

# The forms, clicked through over WebDriver (SKIPPED inside when chromedriver is absent).
python3 tests/console/webdriver.py --admin "$admin" --bootstrap 127.0.0.1:$port \
  --readonly-admin "$readonly_admin" --readonly-bootstrap 127.0.0.1:$readonly_port \
  --cli ./target/release/shardlog --load ./target/release/shardlog-load || failed=1

[ $failed = 0 ] && echo "console browser test: all passed" || { echo "console browser test: FAILED"; exit 1; }
