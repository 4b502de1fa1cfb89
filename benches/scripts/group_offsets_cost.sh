#!/usr/bin/env bash
# What a replicated OffsetCommit costs (issue 16, docs/replication.md "Consumer-group
# offsets"): a single node (--cores 1) against a cluster of three (--cores 1 each, on this
# one machine), alternating, a fresh broker or cluster per round. Each runs
# `shardlog-load topics --topics 8 --partitions 1 --shapes none --requests N`: one request
# at a time, OffsetCommit of a group with no members on the group's coordinator (on one
# node: written to its log and fdatasync'd; in the cluster: an entry of the coordinator
# shard's offsets group, committed on two of three nodes and applied on the coordinator),
# and ListOffsets and Fetch on the partition's leader as controls (no raft on their path:
# the topics have one replica). Prints every RESULT line with label single or cluster.
# Needs target/release/shardlog and shardlog-load (cargo build --release).
# Usage: benches/scripts/group_offsets_cost.sh [ROUNDS] (default 3)
#   Env: REQUESTS (default 2000), SHAPES (default "single cluster"), KEEP=1 keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
requests=${REQUESTS:-2000}
target=${CARGO_TARGET_DIR:-target}
dir=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
source tests/lib/ports.sh

# start NODES: NODES brokers (1: a single node), 4 ports each; sets `bootstrap` (node 1's).
start() {
  local nodes=$1 base peers="" n port
  base=$(free_port_block $((4 * nodes)))
  for n in $(seq "$nodes"); do peers+="${peers:+,}$n=127.0.0.1:$((base + 4 * (n - 1)))"; done
  for n in $(seq "$nodes"); do
    port=$((base + 4 * (n - 1)))
    local cluster=()
    [ "$nodes" -gt 1 ] && cluster=(--node-id "$n" --peers "$peers")
    "$target/release/shardlog" --data-dir "$dir/r$round-$shape-n$n" --kafka-addr "127.0.0.1:$port" \
      --cores 1 --admin-addr "127.0.0.1:$((port + 3))" "${cluster[@]}" \
      >"$dir/r$round-$shape-n$n.log" 2>&1 &
    pids+=($!)
  done
  for n in $(seq "$nodes"); do
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:$((base + 4 * (n - 1) + 3))/health" >/dev/null && break
      sleep 0.1
    done
  done
  bootstrap="127.0.0.1:$base"
}

for round in $(seq "$rounds"); do
  for shape in ${SHAPES:-single cluster}; do
    nodes=1
    [ "$shape" = cluster ] && nodes=3
    start $nodes
    [ "$nodes" -gt 1 ] && sleep 5 # the metadata and offsets groups' elections
    "$target/release/shardlog-load" topics --bootstrap "$bootstrap" --topics 8 \
      --partitions 1 --shapes none --settle-ms 0 --requests "$requests" --label "$shape" |
      grep '^RESULT' | grep -v 'request=metadata_one_topic'
    stop_all
    sleep 1 # a killed broker's listeners may linger a moment
  done
done
