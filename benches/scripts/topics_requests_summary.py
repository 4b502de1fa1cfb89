#!/usr/bin/env python3
"""Summarize benches/scripts/topics_requests.sh output: per binary and request kind, the
median over rounds of each broker's p50 (range), the median p90 and p99, per topic count
(as the headers name them: '8', '50000', '50000@8' for the requests among the first 8 of
50,000); the per-round ratio of each count's p50 to the first count's; with two binaries,
the second's p50 over the first's in the same round (paired A/B), per topic count."""
import sys, statistics as st, collections
rows = collections.defaultdict(dict)  # (bin, round) -> {(topics, req): dict}
hdr = None
for line in open(sys.argv[1]):
    if line.startswith('# round='):
        m = dict(kv.split('=') for kv in line[2:].split()[:3]); hdr = m; continue
    if 'RESULT' in line and hdr:
        kv = dict(x.split('=') for x in line.split() if '=' in x)
        rows[(hdr['bin'], int(hdr['round']))][(hdr['topics'], kv['request'])] = {k: int(kv['latency_'+k+'_us']) for k in ('p50','p90','p99')}
bins = sorted({b for b, _ in rows}, key=lambda b: [k[0] for k in rows].index(b))
# Topic counts in order of first appearance; each is read against the first.
sizes = list(dict.fromkeys(t for cells in rows.values() for t, _ in cells))
base = sizes[0]
reqs = ['metadata_one_topic', 'list_offsets', 'fetch', 'offset_commit']


def span(values, fmt):
    return f"{st.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


for b in bins:
    rounds = sorted(r for bb, r in rows if bb == b)
    print(f'== {b}: {len(rounds)} rounds')
    head = ' | '.join(f'{t} topics: p50 median (range) / p90 / p99' for t in sizes)
    ratios = ' | '.join(f'p50 {t} / {base} per round: median (range); each' for t in sizes[1:])
    print(f'| request | {head} | {ratios} |')
    for q in reqs:
        out = []
        for t in sizes:
            v = [rows[(b, r)][(t, q)] for r in rounds if (t, q) in rows[(b, r)]]
            out.append(f"{span([x['p50'] for x in v], 'g')} / {st.median([x['p90'] for x in v]):g} / {st.median([x['p99'] for x in v]):g}")
        for t in sizes[1:]:
            rat = [rows[(b, r)][(t, q)]['p50'] / rows[(b, r)][(base, q)]['p50'] for r in rounds if (base, q) in rows[(b, r)] and (t, q) in rows[(b, r)]]
            out.append(f"{span(rat, '.2f')}×; {' '.join(f'{x:.2f}' for x in rat)}")
        print(f"| {q} | {' | '.join(out)} |")
if len(bins) == 2:
    a, b = bins
    print(f'== paired, same round: {b} / {a} p50')
    for q in reqs:
        out = []
        for t in sizes:
            r = [rows[(b, x)][(t, q)]['p50'] / rows[(a, x)][(t, q)]['p50'] for x in sorted(r for bb, r in rows if bb == a) if (t, q) in rows[(a, x)] and (t, q) in rows.get((b, x), {})]
            out.append(f"{t}: {span(r, '.2f')}×, n={len(r)}")
        print(f'| {q} | ' + ' | '.join(out) + ' |')
