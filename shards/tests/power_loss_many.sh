#!/bin/sh
# Runs many seeds of the broker power-loss simulation (shards/tests/power_loss.rs) in
# parallel processes of 50 seeds and prints the summary: seeds, power losses, records,
# batches and offset commits acknowledged, topics created, deduplicated retries, producer
# ids, records lost and duplicated, and the memory of the first and last process.
#
#   shards/tests/power_loss_many.sh [seeds [first seed]]     # default: 10000 from 1
#   SHARDLOG_POWER_LOSS_JOBS=4 shards/tests/power_loss_many.sh   # processes at a time
#
# Every process that fails is listed with its seeds and output; each failure names its
# seed and the command that replays it.
set -eu
cd "$(dirname "$0")/../.."
export SHARDLOG_POWER_LOSS_SEEDS="${1:-10000}"
export SHARDLOG_POWER_LOSS_FIRST_SEED="${2:-1}"
cargo test --release -p shardlog-shards --test power_loss -- --exact \
    acknowledged_records_commits_topics_and_producer_state_survive_power_loss --nocapture
