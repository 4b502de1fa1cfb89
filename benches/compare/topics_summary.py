#!/usr/bin/env python3
"""Summary of a benches/topics.sh results file: medians over rounds, and per round each
topic count's msg/s as a ratio to the smallest count's msg/s of the same round and shape.

Usage: topics_summary.py RESULTS_FILE
"""
import statistics
import sys
from collections import defaultdict


def results(path):
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT "):
                yield dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def med(values):
    return statistics.median(values) if values else float("nan")


def spread(values):
    return f"{min(values):,.0f}-{max(values):,.0f}" if values else "-"


def main(path):
    rows = list(results(path))
    load = defaultdict(dict)  # (shape, topics) -> round -> row
    setup = defaultdict(list)  # partitions -> rows
    for r in rows:
        if r["mode"] == "topics":
            load[(r["shape"], int(r["topics"]))][r["round"]] = r
        elif r["mode"] == "topics_setup":
            setup[int(r["partitions"])].append(r)

    print("## load: medians over rounds (range); ratio = msg/s / smallest count's, same round")
    print("| shape | topics | partitions | msg/s | ratio % | ack p50 / p99 (us) "
          "| flushed B/msg | msgs/flush | RSS after (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in sorted({s for s, _ in load}):
        counts = sorted(t for s, t in load if s == shape)
        base = load[(shape, counts[0])]
        for topics in counts:
            by_round = load[(shape, topics)]
            rate = [float(r["msg_per_s"]) for r in by_round.values()]
            ratios = [100 * float(r["msg_per_s"]) / float(base[k]["msg_per_s"])
                      for k, r in by_round.items() if k in base]
            col = lambda key: med([float(r[key]) for r in by_round.values() if key in r])
            any_row = next(iter(by_round.values()))
            print(f"| {shape} | {topics:,} | {int(any_row['partitions']):,} "
                  f"| {med(rate):,.0f} ({spread(rate)}) "
                  f"| {med(ratios):.1f} ({min(ratios):.1f}-{max(ratios):.1f}) "
                  f"| {col('ack_p50_us'):,.0f} / {col('ack_p99_us'):,.0f} "
                  f"| {col('flushed_bytes_per_msg'):,.0f} | {col('msgs_per_flush'):,.1f} "
                  f"| {col('rss_after_kib') / 1024:,.0f} |")

    print()
    print("## memory: medians over brokers (range)")
    print("| partitions | RSS empty (MiB) | RSS created (MiB) | bytes per idle partition "
          "| RSS one record each (MiB) | bytes per partition with one record | create+ready ms |")
    print("|---|---|---|---|---|---|---|")
    for partitions in sorted(setup):
        rs = setup[partitions]
        get = lambda key: [float(r[key]) for r in rs if key in r]
        print(f"| {partitions:,} | {med(get('rss_empty_kib')) / 1024:.1f} "
              f"| {med(get('rss_created_kib')) / 1024:.1f} "
              f"| {med(get('idle_bytes_per_partition')):,.0f} ({spread(get('idle_bytes_per_partition'))}) "
              f"| {med(get('rss_one_record_each_kib')) / 1024:.1f} "
              f"| {med(get('one_record_bytes_per_partition')):,.0f} "
              f"({spread(get('one_record_bytes_per_partition'))}) "
              f"| {med(get('ready_ms')):,.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
