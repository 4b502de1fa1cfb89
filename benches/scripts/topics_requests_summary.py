#!/usr/bin/env python3
"""Summarize benches/scripts/topics_requests.sh output: per binary and request kind, the
median over rounds of each broker's p50 (range), the median p90 and p99, at 8 and 50,000
topics; the per-round ratio of p50 at 50,000 to p50 at 8; with two binaries, the second's
p50 over the first's in the same round (paired A/B), per topic count."""
import sys, re, statistics as st, collections
rows = collections.defaultdict(dict)  # (bin, round) -> {(topics, req): dict}
hdr = None
for line in open(sys.argv[1]):
    if line.startswith('# round='):
        m = dict(kv.split('=') for kv in line[2:].split()[:3]); hdr = m; continue
    if 'RESULT' in line and hdr:
        kv = dict(x.split('=') for x in line.split() if '=' in x)
        rows[(hdr['bin'], int(hdr['round']))][(int(kv['topics']), kv['request'])] = {k: int(kv['latency_'+k+'_us']) for k in ('p50','p90','p99')}
bins = sorted({b for b, _ in rows}, key=lambda b: [k[0] for k in rows].index(b))
reqs = ['metadata_one_topic', 'list_offsets', 'fetch', 'offset_commit']
for b in bins:
    rounds = sorted(r for bb, r in rows if bb == b)
    print(f'== {b}: {len(rounds)} rounds')
    print('| request | 8 topics: p50 median (range) / p90 / p99 | 50,000: p50 median (range) / p90 / p99 | p50 ratio per round: median (range) | per-round ratios |')
    for q in reqs:
        out = []
        for t in (8, 50000):
            v = [rows[(b, r)][(t, q)] for r in rounds if (t, q) in rows[(b, r)]]
            p50 = [x['p50'] for x in v]
            out.append(f"{st.median(p50):g} ({min(p50)}–{max(p50)}) / {st.median([x['p90'] for x in v]):g} / {st.median([x['p99'] for x in v]):g}")
        rat = [rows[(b, r)][(50000, q)]['p50'] / rows[(b, r)][(8, q)]['p50'] for r in rounds if (8, q) in rows[(b, r)] and (50000, q) in rows[(b, r)]]
        print(f"| {q} | {out[0]} | {out[1]} | {st.median(rat):.2f}× ({min(rat):.2f}–{max(rat):.2f}) | {' '.join(f'{x:.2f}' for x in rat)} |")
if len(bins) == 2:
    a, b = bins
    print(f'== paired, same round: {b} / {a} p50')
    for q in reqs:
        out = []
        for t in (8, 50000):
            r = [rows[(b, x)][(t, q)]['p50'] / rows[(a, x)][(t, q)]['p50'] for x in sorted(r for bb, r in rows if bb == a) if (t, q) in rows[(a, x)] and (t, q) in rows.get((b, x), {})]
            out.append(f"{t}: {st.median(r):.2f}× ({min(r):.2f}–{max(r):.2f}, n={len(r)})")
        print(f'| {q} | ' + ' | '.join(out) + ' |')
