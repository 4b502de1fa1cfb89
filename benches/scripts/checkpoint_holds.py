"""Checkpoint timings of a full shard (100,000 partitions) from brokers' debug logs
(SHARDLOG_LOG=info,shardlog_storage::log=debug,shardlog_shards::producer_log=debug), kept
by benches/scripts/background_passes.sh with KEEP_LOGS=DIR/logs-CODE-rROUND for CODE in
before, after. Only events before "shutting down" (the close copies in one piece).

Usage: python3 benches/scripts/checkpoint_holds.py DIR
"""
import glob, re, statistics, sys
def kv(line):
    return dict(re.findall(r'(\w+)=(\d+)', line))
for code in ['before','after']:
    rows={}
    for f in sorted(glob.glob(f'{sys.argv[1]}/logs-{code}-r*/*.log')):
        full=set()
        for line in open(f, errors='replace'):
            line=re.sub(r'\x1b\[[0-9;]*m','',line)
            if 'shutting down' in line: break
            if 'checkpoint state copied' in line:
                d=kv(line)
                if d.get('partitions')!='100000': continue
                full.add(d['position'])
                for k in ['snapshot_us','longest_hold_us','start_us','copy_us','holds']:
                    if k in d: rows.setdefault(k,[]).append(int(d[k]))
            elif 'producer state snapshot encoded' in line:
                d=kv(line); rows.setdefault('producer_state_us(all)',[]).append(int(d['us']))
            elif 'checkpoint written' in line:
                d=kv(line)
                if d['position'] in full: rows.setdefault('release_us',[]).append(int(d['release_us']))
    for k,v in rows.items():
        if k=='holds': print(code,k,'n=%d median=%d max=%d'%(len(v),statistics.median(v),max(v))); continue
        print(code,k,'n=%d median=%.2f max=%.2f ms'%(len(v),statistics.median(v)/1000,max(v)/1000))
