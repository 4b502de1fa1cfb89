#!/usr/bin/env bash
# Share of samples whose stack contains each pattern, from a collapsed-stack file
# (inferno-collapse-perf output: "frame;frame;... count").
# usage: perf/inclusive.sh FILE.folded [LABEL=REGEX ...]
set -euo pipefail
FILE=${1:?usage: perf/inclusive.sh FILE.folded [LABEL=REGEX ...]}
shift
if [ $# -eq 0 ]; then
  set -- \
    "thread shard-*=^shard-" "thread iou-wrk-* (io_uring workers)=^iou-wrk" \
    "io_uring submit/reap (io_uring_enter)=io_uring_enter" \
    "socket send (tcp_sendmsg)=tcp_sendmsg" "socket receive (tcp_recvmsg)=tcp_recvmsg" \
    "fdatasync (ext4_sync_file)=ext4_sync_file" \
    "fdatasync on an io_uring worker=^iou-wrk.*ext4_sync_file" \
    "O_DIRECT write (iomap_dio_rw)=iomap_dio_rw" \
    "virtio kick (iowrite16)=iowrite16" \
    "scheduler (schedule)=;(__)?schedule_\\[k\\]" \
    "CRC-32C=crc32c" "kafka-protocol encode/decode=kafka_protocol" \
    "storage crate=shardlog_storage" "net crate=shardlog_net" "shards crate=shardlog_shards" \
    "handlers (binary)=;shardlog::handlers" \
    "memcpy/memmove=memmove|memcpy" "malloc/free=malloc|_int_free|cfree"
fi
total=$(awk '{n += $NF} END {printf "%.0f", n}' "$FILE")
# With cpu-clock the weights are nanoseconds of CPU.
echo "total: $(awk -v t="$total" 'BEGIN {printf "%.2f", t / 1e9}') s of CPU sampled"
for spec in "$@"; do
  label=${spec%%=*}
  regex=${spec#*=}
  awk -v re="$regex" -v label="$label" -v total="$total" '
    { stack = $0; sub(/ [0-9]+$/, "", stack); if (stack ~ re) n += $NF }
    END { printf "  %5.1f%%  %s\n", 100 * n / total, label }' "$FILE"
done
