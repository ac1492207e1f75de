#!/usr/bin/env python3
"""Keep rate of untrained bert jobs at their tie by queue length: Sia's log and pacer's dumps.

  python experiments/sia/tie_keep.py WORKLOAD.csv SIA_LOG PACER_DUMP...

A tie: a bert job that has never trained holds a device after its two restart rounds
(Sia: `sia_rounds.py`'s definition; pacer: `sia_dump.patch` rows with fresh=true, cur=true and
options). Bucketed by the number of jobs without devices (Sia: in the record of the round
before; pacer: in the round's view); the pacer dumps are counted together. Issue 25.
"""
import json,sys,csv
from collections import defaultdict,Counter
app=lambda n:n.rsplit('-',1)[0]
def bucket(w): return '0-4' if w<5 else '5-14' if w<15 else '15-24' if w<25 else '25+'
# Sia
recs=[json.loads(l) for l in open(sys.argv[2])]
wait={r['timestamp']:sum(1 for j in r['submitted_jobs'] if j['completion_time'] is None and not j['placement']) for r in recs}
ser=defaultdict(list)
for r in recs:
    for j in r['submitted_jobs']:
        if j['completion_time'] is None: ser[j['name']].append((r['timestamp'],sum(j['placement'] or ()),j['progress']))
K=Counter()
for n,s in ser.items():
    if app(n)!='bert': continue
    trained=False;i=0
    while i<len(s):
        if s[i][1]==0: i+=1; continue
        j=i
        while j<len(s) and s[j][1]>0: j+=1
        if not trained and j-i>=2 and s[i+1][2]==0 and (j-i>2 or j<len(s)):
            t=s[i+1][0]+60; b=bucket(wait.get(t-60,0))
            K['sia',b,'at']+=1; K['sia',b,'kept']+= j-i>2
        trained=trained or ((s[j][2] if j<len(s) else 1e99)>s[i][2]); i=j
names=[r['name'] for r in csv.DictReader(open(sys.argv[1]))]
for f in sys.argv[3:]:
    rows=[]; w=Counter()
    for l in open(f):
        if not l.startswith('DUMP'): continue
        h,rest=l.split(' opts=',1); d=dict(kv.split('=',1) for kv in h.split()[1:])
        rows.append((d,rest)); w[d['t']]+= d['cur']=='false'
    for d,rest in rows:
        if app(names[int(d['job'])])=='bert' and d['fresh']=='true' and d['cur']=='true' and rest.split(' M')[0].strip():
            b=bucket(w[d['t']]); K['pacer',b,'at']+=1; K['pacer',b,'kept']+= d['choice']==d['held']
for who in ('sia','pacer'):
    print(who, ' '.join(f"queue {b}: kept {K[who,b,'kept']}/{K[who,b,'at']}" for b in ('0-4','5-14','15-24','25+')))
