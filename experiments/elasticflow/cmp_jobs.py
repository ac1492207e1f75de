"""Per deadline job: met by ElasticFlow's simulator (its job.csv) against pacer
(`pacer simulate --out DIR`'s per-job CSV), each by its JCT against the job's deadline
window, so that the two clocks' origins need not agree. Lists the jobs that differ.

    python3 cmp_jobs.py EF_DIR/job.csv PACER_OUT/TRACE-POLICY-jobs.csv [MORE.csv ...]
"""
import csv
import sys

ef={r['job_id']:r for r in csv.DictReader(open(sys.argv[1]))}
for path in sys.argv[2:]:
    pc={r['name'][4:] if r['name'].startswith('job-') else r['name']:r for r in csv.DictReader(open(path))}
    diff=[]; efm=pm_n=n=0
    for j,r in ef.items():
        ddl=int(float(r["ddl"])); sub=int(float(r["submit_time"]))
        if ddl>=9e18 or int(r.get('best_effort_job',0) or 0)==1: continue
        n+=1
        em=int(float(r["end_time"]))<=ddl; efm+=em
        p=pc.get(j)
        pm= p is not None and p['completion_s']!='' and float(p['jct_s'])<=ddl-sub+1e-6; pm_n+=pm
        if em!=pm: diff.append((j,em,pm,sub,ddl-sub,int(float(r["end_time"]))-sub, p and p['jct_s'], int(r['num_gpu']), p and p['start_s'], int(float(r["start_time"]))-sub))
    print(path,'deadline jobs',n,'EF met',efm,'pacer met',pm_n,'diffs',len(diff))
    for d in sorted(diff,key=lambda x:x[3]): print('  job %s ef_met=%s pacer_met=%s submit=%d window=%d efJCT=%d pacerJCT=%s gpus=%d pacer_start=%s ef_wait=%d'%d)
