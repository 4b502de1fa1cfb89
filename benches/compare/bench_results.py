"""Result lines shared by the Python benchmark clients of compare.sh.

Each figure is printed as a human block and as one `RESULT mode=... label=... key=value`
line in the shape shardlog-load prints, which compare.sh tags with run= and broker=.
"""


def pct(samples, q):
    if not samples:
        return 0
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def latency_fields(prefix, samples_us):
    fields = [(f"{prefix}_count", len(samples_us))]
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        fields.append((f"{prefix}_{name}_us", int(pct(samples_us, q))))
    fields.append((f"{prefix}_max_us", int(max(samples_us)) if samples_us else 0))
    return fields


def result(mode, label, fields):
    print(f"== {mode} ({label})")
    for k, v in fields:
        print(f"  {k:<14} {v}")
    print(f"RESULT mode={mode} label={label} " + " ".join(f"{k}={v}" for k, v in fields),
          flush=True)
