#!/usr/bin/env python3
"""Block-layer requests per message, from `perf record -a -e block:block_rq_issue -e
block:block_rq_complete` taken while a broker served MESSAGES messages (perf/count.sh does
both). Groups requests by who issued them (the broker's shard threads, its io-wq workers,
kernel workers: cache flushes are issued by kblockd) and by type (W write, S sync, M
metadata, FF cache flush), and gives each group's count per message and its device time
(issue to completion) p50.

    perf/block_requests.py PERF_DATA MESSAGES BROKER_PID

Requests of other processes are left out, except kernel workers' (a cache flush is issued
by a kworker whoever asked for it), so run it on an otherwise quiet disk."""
import re, statistics, subprocess, sys

data, messages, broker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,pid,time,event,trace"],
                        capture_output=True, text=True).stdout
line_re = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+block:(block_rq_issue|block_rq_complete):"
                     r"\s+\S+\s+(\S+)\s+(?:\d+\s+)?\(\S*\)\s+(\d+)\s+\+\s+(\d+)")
pending, groups = {}, {}
for line in script.splitlines():
    m = line_re.match(line)
    if not m:
        continue
    comm, pid, _tid, t, event, kind, sector, _len = m.groups()
    key = "FF" if kind == "FF" else sector  # a flush has no sector
    if event == "block_rq_issue":
        if comm.startswith("kworker"):
            who = "kernel worker"
        elif pid == broker:
            who = "io-wq worker" if comm.startswith("iou-wrk") else "broker thread"
        else:
            continue
        pending.setdefault(key, []).append((float(t), who, kind))
    elif pending.get(key):
        # Requests to one sector (an inode block) are serial: pair with the latest issue.
        t0, who, kind = pending[key][-1]
        pending[key].clear()
        groups.setdefault((who, kind), []).append((float(t) - t0) * 1e6)
for (who, kind), times in sorted(groups.items(), key=lambda g: -len(g[1])):
    print(f"    block {kind:<5} from {who:<14} {len(times) / messages:8.2f} per message"
          f"   device p50 {statistics.median(times):6.0f} us")
