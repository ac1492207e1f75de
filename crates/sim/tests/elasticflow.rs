//! ElasticFlow's trace and table formats, and deadline jobs through the engine:
//! admission declines what cannot fit and accepts what can, EDF runs late jobs to the
//! end, the counts (strict and planned) and determinism; `elasticflow` decides one
//! round's arrivals together; each deadline policy's own arrival rounds.

use pacer_model::ClusterSpec;
use pacer_sim::trace::elasticflow::{load_elasticflow, parse_throughput_table, ThroughputTable};
use pacer_sim::trace::TraceError;
use pacer_sim::{ArrivalReplan, SimConfig, SimJob, SimResult, Simulation};

/// `toy` at 1 iteration/s per GPU up to 4 (linear), and slower on 8.
const TABLE: &str = "global_batch_size,1,2,4,8\n64,1.0,2.0,4.0,3.0\n128,0.5,1.0,nan,\n";

fn tables(ty: &str, model: &str) -> Result<Option<ThroughputTable>, TraceError> {
    Ok((ty == "t4" && model == "toy").then(|| parse_throughput_table(TABLE, "toy.csv").unwrap()))
}

fn load(trace: &str) -> Result<Vec<SimJob>, TraceError> {
    load_elasticflow(trace, "t.csv", &["t4".to_string()], &mut tables)
}

#[test]
fn tables_parse_and_bad_cells_name_their_line() {
    let t = parse_throughput_table(TABLE, "toy.csv").unwrap();
    assert_eq!(t[&64], vec![(1, 1.0), (2, 2.0), (4, 4.0), (8, 3.0)]);
    // `nan` and empty cells are sizes that were not measured.
    assert_eq!(t[&128], vec![(1, 0.5), (2, 1.0)]);
    let e = parse_throughput_table("global_batch_size,1,2\n64,1.0,fast\n", "x.csv").unwrap_err();
    assert!(e.to_string().starts_with("x.csv:2:"), "{e}");
    let e = parse_throughput_table("batch,1\n64,1\n", "x.csv").unwrap_err();
    assert!(e.to_string().starts_with("x.csv:1:"), "{e}");
    let e = parse_throughput_table("global_batch_size,1\n64,1\n64,2\n", "x.csv").unwrap_err();
    assert!(
        e.to_string().contains("x.csv:3:") && e.to_string().contains("twice"),
        "{e}"
    );
}

const HEADER: &str =
    "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration,best_effort\n";

#[test]
fn traces_parse_and_bad_rows_name_their_line() {
    let jobs = load(&format!(
        "{HEADER}0,100,400,toy,300,64,1,400,0\n1,160,100,toy,999,64,1,100,1\n"
    ))
    .unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].spec.arrival_s, 0.0);
    assert_eq!(jobs[1].spec.arrival_s, 60.0);
    match &jobs[0].work {
        pacer_sim::Work::Elastic {
            steps,
            curves,
            deadline_s,
        } => {
            assert_eq!(*steps, 400.0);
            assert_eq!(*deadline_s, Some(200.0));
            // At most the global batch or 64 GPUs: all four sizes.
            assert_eq!(curves[0].points.len(), 4);
        }
        w => panic!("{w:?}"),
    }
    assert!(matches!(
        &jobs[1].work,
        pacer_sim::Work::Elastic {
            deadline_s: None,
            ..
        }
    ));
    for (row, want) in [
        ("0,100,400,toy,50,64,1,400,0", "column `ddl`"),
        ("0,100,x,toy,300,64,1,400,0", "column `iteration`"),
        (
            "0,100,400,gpt9,300,64,1,400,0",
            "no throughput table for model `gpt9`",
        ),
        (
            "0,100,400,toy,300,32,1,400,0",
            "no throughputs for global batch 32",
        ),
        ("0,100,400,toy,300,64,1,400,2", "column `best_effort`"),
    ] {
        let e = load(&format!("{HEADER}0,100,400,toy,300,64,1,400,0\n{row}\n")).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("t.csv:3:") && e.contains(want), "{row}: {e}");
    }
}

fn run(jobs: &[SimJob], cluster: &str, policy: &str) -> SimResult {
    run_with(jobs, cluster, policy, ArrivalReplan::Auto)
}

fn run_with(jobs: &[SimJob], cluster: &str, policy: &str, replan: ArrivalReplan) -> SimResult {
    let cluster = ClusterSpec::parse(cluster, "test").unwrap();
    let config = SimConfig {
        round_s: 10.0,
        record_timeline: false,
        replan_on_arrival: replan,
        ..SimConfig::default()
    };
    let sim = Simulation {
        cluster: &cluster,
        apps: &[],
        jobs,
        config,
    };
    let mut p = pacer_policy::by_name(policy).unwrap();
    sim.run(p.as_mut(), |_| {}).unwrap()
}

/// On 4 GPUs from t = 0: job 0 needs 2 GPUs until its deadline (400 iterations by
/// 200 s plus restarts), job 1 needs 3 of the same 200 s, job 2 (1 GPU, 100
/// iterations, deadline 1000 s) fits beside job 0, job 3 is best effort.
const WORKLOAD: &str = "0,0,400,toy,230,64,1,400,0\n1,0,600,toy,205,64,1,600,0\n2,0,100,toy,1000,64,1,100,0\n3,0,200,toy,5000,64,1,200,1\n";

/// [`WORKLOAD`] with job 1 arriving a round later (its deadline as far from it).
const LATER: &str = "0,0,400,toy,230,64,1,400,0\n1,10,600,toy,215,64,1,600,0\n2,0,100,toy,1000,64,1,100,0\n3,0,200,toy,5000,64,1,200,1\n";

#[test]
fn admission_declines_what_cannot_fit_and_accepts_what_can() {
    for (policy, workload) in [("elasticflow-s10", LATER), ("deadline-s10", WORKLOAD)] {
        let jobs = load(&format!("{HEADER}{workload}")).unwrap();
        let r = run(&jobs, "1x4:t4", policy);
        let d = r.summary.deadlines.clone().unwrap();
        assert_eq!(d.deadline_jobs, 3);
        // The declined job never runs and is retired at its deadline.
        assert_eq!(r.jobs[1].start_s, None, "{policy}");
        assert_eq!(r.jobs[1].completion_s, None, "{policy}");
        for k in [0, 2] {
            assert!(
                r.jobs[k].met_deadline().unwrap().1,
                "{policy}: job {k} {:?}",
                r.jobs[k]
            );
        }
        assert!((d.met_planned - 2.0 / 3.0).abs() < 1e-9, "{policy}: {d:?}");
        assert!(d.met_strict <= d.met_planned);
        assert!(r.jobs[3].completion_s.is_some(), "the best-effort job runs");
        assert_eq!(d.best_effort_jobs, 1);
        assert!(d.best_effort_avg_jct_s.is_finite());
    }
}

#[test]
fn elasticflow_decides_one_rounds_arrivals_together() {
    // Jobs 0 and 2 fit together, job 1 beside neither: arriving in one round,
    // ElasticFlow's rule declines all three (`deadline` admits 0 and 2 above).
    let jobs = load(&format!("{HEADER}{WORKLOAD}")).unwrap();
    let r = run(&jobs, "1x4:t4", "elasticflow-s10");
    for k in 0..3 {
        assert_eq!(r.jobs[k].start_s, None, "job {k}: {:?}", r.jobs[k]);
    }
    assert_eq!(r.summary.deadlines.unwrap().met_planned, 0.0);
    assert!(r.jobs[3].completion_s.is_some(), "the best-effort job runs");
}

#[test]
fn each_deadline_policy_rounds_arrivals_as_its_peer_simulator() {
    // A best-effort job from 0 s, a deadline job arriving mid-round (3 s).
    let trace = "0,0,400,toy,5000,64,1,400,1\n1,3,400,toy,5000,64,1,400,0\n";
    let jobs = load(&format!("{HEADER}{trace}")).unwrap();
    let key = |r: &SimResult| -> Vec<(Option<u64>, Option<u64>)> {
        r.jobs
            .iter()
            .map(|j| {
                (
                    j.start_s.map(f64::to_bits),
                    j.completion_s.map(f64::to_bits),
                )
            })
            .collect()
    };
    for (policy, own) in [
        ("deadline-s10", ArrivalReplan::Always),
        ("elasticflow-s10", ArrivalReplan::Events),
        ("edf", ArrivalReplan::Events),
        ("dlas-gpu", ArrivalReplan::Events),
        ("fifo", ArrivalReplan::Never),
    ] {
        let auto = run(&jobs, "1x4:t4", policy);
        assert_eq!(
            key(&auto),
            key(&run_with(&jobs, "1x4:t4", policy, own)),
            "{policy}"
        );
        // An explicit setting overrides the policy's own.
        for (set, at) in [(ArrivalReplan::Never, 10.0), (ArrivalReplan::Always, 3.0)] {
            let r = run_with(&jobs, "1x4:t4", policy, set);
            assert_eq!(r.jobs[1].start_s, Some(at), "{policy} under {set:?}");
        }
    }
    // 400 iterations at 4 GPUs take 100 s after an 8 s restart: from 3 s they end by
    // 114 s, from the round at 10 s they cannot. `deadline` meets it by its own
    // rounds (a round at the arrival) and declines it at fixed ones.
    let trace = "0,0,400,toy,5000,64,1,400,1\n1,3,400,toy,114,64,1,400,0\n";
    let jobs = load(&format!("{HEADER}{trace}")).unwrap();
    let own = run(&jobs, "1x4:t4", "deadline-s10");
    assert!(own.jobs[1].met_deadline().unwrap().0, "{:?}", own.jobs[1]);
    let fixed = run_with(&jobs, "1x4:t4", "deadline-s10", ArrivalReplan::Never);
    assert_eq!(fixed.jobs[1].start_s, None, "{:?}", fixed.jobs[1]);
}

#[test]
fn edf_runs_every_job_to_the_end() {
    let jobs = load(&format!("{HEADER}{WORKLOAD}")).unwrap();
    let r = run(&jobs, "1x4:t4", "edf");
    assert!(r.jobs.iter().all(|j| j.completion_s.is_some()));
    // Deadline order: job 1 (205 s) first, on all 4 GPUs, and late (600 iterations
    // need 150 s from the first round at 10 s, plus its restart: it still makes it);
    // job 0 (230 s) waits for it and misses.
    let end = |k: usize| r.jobs[k].completion_s.unwrap();
    assert!(end(1) < end(0));
    assert!(r.jobs[1].met_deadline().unwrap().0);
    assert!(!r.jobs[0].met_deadline().unwrap().0);
}

#[test]
fn the_same_workload_gives_the_same_results() {
    let jobs = load(&format!("{HEADER}{WORKLOAD}")).unwrap();
    for policy in ["edf", "elasticflow-s10", "deadline-s10"] {
        let a = run(&jobs, "2x4:t4", policy);
        let b = run(&jobs, "2x4:t4", policy);
        let key = |r: &SimResult| -> Vec<(Option<u64>, u32)> {
            r.jobs
                .iter()
                .map(|j| (j.completion_s.map(f64::to_bits), j.restarts))
                .collect()
        };
        assert_eq!(key(&a), key(&b), "{policy}");
    }
}

#[test]
fn the_restart_overhead_grows_by_its_per_doubling_term() {
    // Policies are told `ef_restart_s(1, ..)` and the per-doubling term; together they
    // must give the engine's delay at every size (ElasticFlow's `estimate_overhead`).
    use pacer_sim::trace::elasticflow::{ef_restart_s, EF_RESTART_S_PER_DOUBLING};
    for cluster in [64, 256] {
        for gpus in [1, 2, 3, 4, 8, 16, 64] {
            let told =
                ef_restart_s(1, cluster) + EF_RESTART_S_PER_DOUBLING * f64::from(gpus).log2();
            assert!(
                (told - ef_restart_s(gpus, cluster)).abs() < 1e-12,
                "{gpus} on {cluster}"
            );
        }
    }
    assert_eq!(ef_restart_s(4, 64), 8.0);
    assert_eq!(ef_restart_s(64, 256), 21.0);
}

#[test]
fn elasticflow_pays_an_overhead_at_each_event() {
    // 8 GPUs (2 s base overhead; 8 s to restart onto 4). Job 0 (400 iterations,
    // fastest at 4 GPUs: 100 s) from 0 s; best-effort job 1 (1,000 iterations) arrives
    // at 50 s and takes the other 4. Under ElasticFlow's clock job 0, unchanged at
    // that event, pays 2 s more: 8 + 100 + 2 = 110 s; job 1 pays 2 s at job 0's end
    // (50 + 8 + 250 + 2). On the grid (`idle`) nothing is charged but restarts.
    let trace = "0,0,400,toy,5000,64,1,400,0\n1,50,1000,toy,50000,64,1,1000,1\n";
    let jobs = load(&format!("{HEADER}{trace}")).unwrap();
    let end = |r: &SimResult, k: usize| r.jobs[k].completion_s.unwrap();
    let own = run(&jobs, "1x8:t4", "elasticflow-s10");
    assert!((end(&own, 0) - 110.0).abs() < 1e-6, "{:?}", own.jobs[0]);
    assert!((end(&own, 1) - 310.0).abs() < 1e-6, "{:?}", own.jobs[1]);
    let grid = run_with(&jobs, "1x8:t4", "elasticflow-s10", ArrivalReplan::WhenIdle);
    assert!((end(&grid, 0) - 108.0).abs() < 1e-6, "{:?}", grid.jobs[0]);
    assert!((grid.jobs[0].restart_paid_s - 8.0).abs() < 1e-9);
    assert!((own.jobs[0].restart_paid_s - 10.0).abs() < 1e-9);
    // `edf`, on the same clock, pays none (ElasticFlow's EDF loop charges none): job 0
    // takes its largest measured size, 8, and pays only that restart (10 s).
    let edf = run(&jobs, "1x8:t4", "edf");
    assert!(
        (edf.jobs[0].restart_paid_s - 10.0).abs() < 1e-9,
        "{:?}",
        edf.jobs[0]
    );
    assert!(
        (end(&edf, 0) - (10.0 + 400.0 / 3.0)).abs() < 1e-6,
        "{:?}",
        edf.jobs[0]
    );
}

#[test]
fn elasticflow_p_charges_the_overhead_by_placement() {
    // Two nodes of 4 GPUs (2 s base overhead; 8 s to restart onto 4). Job 0 (400
    // iterations, 4 it/s at its top, 4 GPUs) from 0 s; job 1 (400 iterations, an
    // earlier deadline) arrives at 50 s. ElasticFlow's placement puts job 1, the
    // earlier deadline at the same size, on node 0, where job 0 was, and moves job 0
    // to node 1. Its simulator credits `(interval - overhead) * throughput` per
    // event, the overhead 2 s for a placement held since the last periodic restart
    // (cached) and the size's restart overhead (8 s) for a new one:
    // job 0: 0 s on node 0, new, 8 s: (50 - 8) * 4 = 168 by 50 s; 50 s on node 1, new,
    //   8 s: the 232 left take 58 s, done at 50 + 8 + 58 = 116 s;
    // job 1: 50 s on node 0, cached, 2 s: (116 - 50 - 2) * 4 = 256 by 116 s; 116 s,
    //   still node 0, cached, 2 s: the 144 left take 36 s, done at 154 s.
    // `elasticflow` charges by kept allocation instead: job 0 keeps node 0 (2 s at
    // 50 s, done at 50 + 2 + 58 = 110 s), job 1 starts on node 1 (8 s: 52 s * 4 =
    // 208 by 110 s, then 2 s and 48 s, done at 160 s).
    let trace = "0,0,400,toy,5000,64,1,400,0\n1,50,400,toy,1000,64,1,400,0\n";
    let jobs = load(&format!("{HEADER}{trace}")).unwrap();
    let end = |r: &SimResult, k: usize| r.jobs[k].completion_s.unwrap();
    let by_placement = run(&jobs, "2x4:t4", "elasticflow-p-s10");
    assert!(
        (end(&by_placement, 0) - 116.0).abs() < 1e-6,
        "{:?}",
        by_placement.jobs[0]
    );
    assert!(
        (end(&by_placement, 1) - 154.0).abs() < 1e-6,
        "{:?}",
        by_placement.jobs[1]
    );
    assert!((by_placement.jobs[0].restart_paid_s - 16.0).abs() < 1e-9);
    assert!((by_placement.jobs[1].restart_paid_s - 4.0).abs() < 1e-9);
    let kept = run(&jobs, "2x4:t4", "elasticflow-s10");
    assert!((end(&kept, 0) - 110.0).abs() < 1e-6, "{:?}", kept.jobs[0]);
    assert!((end(&kept, 1) - 160.0).abs() < 1e-6, "{:?}", kept.jobs[1]);
    assert!((kept.jobs[0].restart_paid_s - 10.0).abs() < 1e-9);
    assert!((kept.jobs[1].restart_paid_s - 10.0).abs() < 1e-9);
}

#[test]
fn ef_end_events_call_a_completions_round_at_its_end_event() {
    // The trace of `elasticflow_p_charges_the_overhead_by_placement`, slot 10 s, under
    // `elasticflow-p` with and without ElasticFlow's end events (`ef_end_events`, what
    // `elasticflow-mbpc` adds to `elasticflow-mbp`). At the 50 s round job 0 is moved
    // to node 1 and charged its 8 s restart overhead; its 232 iterations left take
    // 58 s, done at 116 s, where `elasticflow-p` has its next round. ElasticFlow's end
    // event for it is 50 + 8 + 6 slots = 118 s: with end events the round is there
    // (job 0 still ends at 116 s). Job 1 (node 0, cached, 2 s at each round) is
    // credited (118 - 50 - 2) * 4 = 264 by then, pays 2 s and runs its 136 left in
    // 34 s: done at 154 s either way. Its end event, 118 + 2 + 4 slots = 160 s, ends
    // the run with no round observed (nothing is left to decide).
    use pacer_policy::deadline::{Deadline, DeadlineConfig};
    let trace = "0,0,400,toy,5000,64,1,400,0\n1,50,400,toy,1000,64,1,400,0\n";
    let jobs = load(&format!("{HEADER}{trace}")).unwrap();
    let cluster = ClusterSpec::parse("2x4:t4", "test").unwrap();
    let rounds = |ef_end_events: bool| {
        let sim = Simulation {
            cluster: &cluster,
            apps: &[],
            jobs: &jobs,
            config: SimConfig {
                round_s: 10.0,
                record_timeline: false,
                ..SimConfig::default()
            },
        };
        let cfg = DeadlineConfig {
            ef_end_events,
            ..DeadlineConfig::elasticflow_placement(10.0)
        };
        let mut p = Deadline::new("elasticflow-p", cfg);
        let mut at = Vec::new();
        let r = sim.run(&mut p, |info| at.push(info.now_s)).unwrap();
        let ends: Vec<f64> = r.jobs.iter().map(|j| j.completion_s.unwrap()).collect();
        (at, ends)
    };
    let ended = |ends: &[f64]| (ends[0] - 116.0).abs() < 1e-6 && (ends[1] - 154.0).abs() < 1e-6;
    let (at, ends) = rounds(false);
    assert_eq!(at, vec![0.0, 50.0, 116.0], "{ends:?}");
    assert!(ended(&ends), "{ends:?}");
    let (at, ends) = rounds(true);
    assert_eq!(at, vec![0.0, 50.0, 118.0], "{ends:?}");
    assert!(ended(&ends), "{ends:?}");
}
