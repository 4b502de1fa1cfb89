#!/usr/bin/env python3
"""Summarise a benches/compare.sh results file: medians and spread (min-max) over runs,
ratios computed within each run and then their median, and the targets of issue 6.

usage: summarize.py RESULTS_FILE   (prints Markdown)
"""

import statistics
import sys
from collections import defaultdict


def parse(path):
    rows = []
    for line in open(path):
        if not line.startswith("RESULT "):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        rows.append(fields)
    return rows


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class Table:
    def __init__(self, rows):
        # (run, broker, mode, label) -> fields
        self.by = {}
        self.runs = sorted({r["run"] for r in rows}, key=int)
        for r in rows:
            mode = r.get("mode", r.get("workload", ""))
            label = r.get("partitions", "") if mode == "partitions" else r.get("label", "")
            key = (r["run"], r["broker"], mode, label)
            self.by.setdefault(key, {}).update(r)

    def values(self, broker, mode, label, field):
        out = {}
        for run in self.runs:
            v = num(self.by.get((run, broker, mode, label), {}).get(field))
            if v is not None:
                out[run] = v
        return out

    def per_run(self, fn):
        out = []
        for run in self.runs:
            try:
                v = fn(run)
            except (KeyError, TypeError, ZeroDivisionError):
                v = None
            if v is not None:
                out.append(v)
        return out

    def get(self, run, broker, mode, label, field):
        return num(self.by[(run, broker, mode, label)][field])


def fmt(values, digits=0, scale=1.0):
    values = [v * scale for v in values]
    if not values:
        return "n/a", "n/a"
    f = f"{{:,.{digits}f}}"
    med = f.format(statistics.median(values))
    spread = f"{f.format(min(values))}–{f.format(max(values))}" if len(values) > 1 else "one run"
    return med, spread


def row(name, values, digits=0, scale=1.0, unit=""):
    med, spread = fmt(values, digits, scale)
    print(f"| {name} | {med}{unit} | {spread} | {len(values)} |")


def print_table(t, columns, figures):
    """One row per figure with a value; columns are (header, broker tag)."""
    print("| figure | " + " | ".join(header for header, _ in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, mode, label, field, digits in figures:
        cells = []
        scale = 1 / 1024 if field.endswith("_kib") else 1.0
        for _, b in columns:
            vals = list(t.values(b, mode, label, field).values())
            if field == "received":
                sent = list(t.values(b, mode, label, "sent").values())
                cells.append(f"{int(statistics.median(vals))}/{int(statistics.median(sent))}"
                             if vals else "—")
                continue
            med, spread = fmt(vals, digits, scale)
            cells.append("—" if med == "n/a" else f"{med} ({spread})")
        if any(c != "—" for c in cells):
            print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    t = Table(parse(sys.argv[1]))
    brokers = [b for b in ("shardlog", "tansu", "nats", "nats-sync")
               if any(k[1] == b for k in t.by)]
    v = lambda *a: list(t.values(*a).values())

    print("### Machine limits (same run)\n")
    print("| figure | median | spread | runs |\n|---|---|---|---|")
    for field, name in [
        ("overwrite_sync_p50_us", "4 KiB O_DIRECT overwrite + fdatasync p50 (µs)"),
        ("overwrite_sync_p99_us", "4 KiB O_DIRECT overwrite + fdatasync p99 (µs)"),
        ("append_sync_p50_us", "4 KiB O_DIRECT append + fdatasync p50 (µs)"),
        ("append_sync_p99_us", "4 KiB O_DIRECT append + fdatasync p99 (µs)"),
        ("seq_direct_mb_per_s", "sequential O_DIRECT 1 MiB writes, QD1 (MB/s)"),
        ("rtt_64b_p50_us", "loopback TCP round trip 64 B p50 (µs)"),
        ("rtt_1k_p50_us", "loopback TCP round trip 1 KiB p50 (µs)"),
        ("rtt_1k_p99_us", "loopback TCP round trip 1 KiB p99 (µs)"),
    ]:
        row(name, v("machine", "limits", "", field))

    print("\n### Per broker\n")
    figures = [
        ("tp produce, msg/s", "produce", "tp", "msg_per_s", 0),
        ("tp produce, MB/s", "produce", "tp", "mb_per_s", 1),
        ("tp produce→ack p50 (µs)", "produce", "tp", "ack_p50_us", 0),
        ("tp produce→ack p99 (µs)", "produce", "tp", "ack_p99_us", 0),
        ("tp consume, msg/s", "consume", "tp", "msg_per_s", 0),
        ("tp-deep produce (batch 64, 16 in flight), msg/s", "produce", "tp-deep", "msg_per_s", 0),
        ("tp-deep produce, MB/s", "produce", "tp-deep", "mb_per_s", 1),
        ("lat end-to-end p50 (µs)", "e2e", "lat", "e2e_p50_us", 0),
        ("lat end-to-end p90 (µs)", "e2e", "lat", "e2e_p90_us", 0),
        ("lat end-to-end p99 (µs)", "e2e", "lat", "e2e_p99_us", 0),
        ("lat end-to-end p99.9 (µs)", "e2e", "lat", "e2e_p999_us", 0),
        ("lat end-to-end max (µs)", "e2e", "lat", "e2e_max_us", 0),
        ("lat produce→ack p50 (µs)", "e2e", "lat", "ack_p50_us", 0),
        ("lat produce→ack p99 (µs)", "e2e", "lat", "ack_p99_us", 0),
        ("lat received/sent", "e2e", "lat", "received", 0),
        ("replay, msg/s", "consume", "replay", "msg_per_s", 0),
        ("replay, MB/s", "consume", "replay", "mb_per_s", 1),
        ("client ceiling (core NATS publish, no JetStream), msg/s", "client_ceiling",
         "ceiling", "msg_per_s", 0),
        ("idle RSS (MiB)", "rss", "", "idle_rss_kib", 1),
        ("RSS after load (MiB)", "rss", "", "loaded_rss_kib", 1),
    ]
    print_table(t, [(b, b) for b in brokers], figures)

    clients = [(f"{b} ({client})", tag) for b in ("shardlog", "tansu")
               for client, tag in (("shardlog-load", b), ("confluent-kafka", f"{b}-confluent"))
               if any(k[1] == f"{b}-confluent" for k in t.by)]
    if clients:
        print("\n### Native load generator and a real client (confluent-kafka, Python)\n")
        print("The same tp/lat/replay through `benches/compare/kafka_client_bench.py` "
              "(librdkafka defaults for tp, linger.ms=0 for lat; consume rates count from "
              "the first record, after the group join).\n")
        print_table(t, clients, [f for f in figures if f[2] in ("tp", "lat", "replay")])

    rd = [k for k in t.by if k[1] == "shardlog-rdkafka"]
    if rd:
        print("\n### shardlog through librdkafka (e2e-rdkafka)\n")
        print("| figure | median | spread | runs |\n|---|---|---|---|")
        for field, name, wl in [
            ("produce_msg_s", "tp produce msg/s (linger.ms=5 default)", "throughput"),
            ("consume_msg_s", "tp consume msg/s", "throughput"),
            ("ack_p50_us", "lat produce→ack p50 (µs), linger.ms=0", "latency"),
            ("ack_p99_us", "lat produce→ack p99 (µs)", "latency"),
            ("e2e_p50_us", "lat end-to-end p50 (µs)", "latency"),
            ("e2e_p99_us", "lat end-to-end p99 (µs)", "latency"),
            ("e2e_p999_us", "lat end-to-end p99.9 (µs)", "latency"),
        ]:
            vals = [num(t.by[k][field]) for k in rd if t.by[k].get("workload") == wl
                    and field in t.by[k]]
            row(name, [x for x in vals if x is not None])

    parts = sorted({int(k[3] and t.by[k].get("partitions", 0) or 0)
                    for k in t.by if k[2] == "partitions"})
    if parts:
        print("\n### shardlog: partition scaling (`shardlog-load partitions`)\n")
        print("| partitions | msg/s | MB/s | produce→ack p99 (µs) | % of 8 partitions |")
        print("|---|---|---|---|---|")
        for p in parts:
            rows = [t.by[k] for k in t.by if k[2] == "partitions"
                    and t.by[k].get("partitions") == str(p)]
            cells = []
            for f, d in (("msg_per_s", 0), ("mb_per_s", 1), ("ack_p99_us", 0),
                         ("ratio_to_first_pct", 1)):
                med, spread = fmt([num(r[f]) for r in rows], d)
                cells.append(f"{med} ({spread})")
            print(f"| {p} | " + " | ".join(cells) + " |")
        idle = [t.by[k] for k in t.by if k[2] == "idle_partitions"]
        if idle:
            med, spread = fmt([num(r["bytes_per_partition"]) for r in idle])
            print(f"\nIdle memory per partition (10,000 empty partitions, RSS delta): "
                  f"{med} B ({spread}).")

    print("\n### Ratios within each run (median, spread)\n")
    print("| ratio | median | spread |\n|---|---|---|")

    def ratio_row(name, fn, digits=2, unit="×"):
        vals = t.per_run(fn)
        med, spread = fmt(vals, digits)
        print(f"| {name} | {med}{unit} | {spread} |")
        return [statistics.median(vals)] if vals else []

    g = t.get
    for peer in brokers[1:]:
        for label in ("tp", "tp-deep"):
            if peer.startswith("nats") and label == "tp-deep":
                continue
            ratio_row(f"shardlog {label} / {peer} tp produce msg/s",
                      lambda r, p=peer, lb=label: g(r, "shardlog", "produce", lb, "msg_per_s")
                      / g(r, p, "produce", "tp", "msg_per_s"))
    if any(k[1] == "tansu-confluent" for k in t.by):
        ratio_row("confluent-kafka: shardlog / tansu tp produce msg/s",
                  lambda r: g(r, "shardlog-confluent", "produce", "tp", "msg_per_s")
                  / g(r, "tansu-confluent", "produce", "tp", "msg_per_s"))
    for label in ("tp", "tp-deep"):
        ratio_row(f"shardlog {label} produce MB/s / sequential O_DIRECT",
                  lambda r, lb=label: 100 * g(r, "shardlog", "produce", lb, "mb_per_s")
                  / g(r, "machine", "limits", "", "seq_direct_mb_per_s"), 1, "%")
    ratio_row("lat produce→ack p50 / (overwrite+fdatasync p50 + RTT 1 KiB p50)",
              lambda r: g(r, "shardlog", "e2e", "lat", "ack_p50_us")
              / (g(r, "machine", "limits", "", "overwrite_sync_p50_us")
                 + g(r, "machine", "limits", "", "rtt_1k_p50_us")))
    ratio_row("lat produce→ack p50 / (append+fdatasync p50 + RTT 1 KiB p50)",
              lambda r: g(r, "shardlog", "e2e", "lat", "ack_p50_us")
              / (g(r, "machine", "limits", "", "append_sync_p50_us")
                 + g(r, "machine", "limits", "", "rtt_1k_p50_us")))


if __name__ == "__main__":
    main()
