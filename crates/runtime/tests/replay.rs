//! One code path for a job's decisions: the runtime's per-worker batches are the job
//! session's. A real run (real workers over loopback TCP, speeds emulated) reports what
//! the session observed after every iteration; replaying those observations through a
//! fresh `JobSession`, as the scenario simulator drives it, must decide the same batches
//! at every iteration.

use pacer_control::session::{JobSession, SessionConfig, WorkerKey};
use pacer_runtime::controller::{Progress, ProgressFn};
use pacer_runtime::{train_local, LocalLaunch};
use std::sync::{Arc, Mutex};

mod common;

fn run_and_replay(controller: &str, predictor: &str, joins: Vec<(u64, f64)>) {
    let d = common::tiny();
    let b = 96;
    let mut cfg = common::config(&d, "mlp", 16, b, 40);
    cfg.controller = controller.into();
    cfg.predictor = predictor.into();
    cfg.seed = 5;
    let trace: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let sink = trace.clone();
    let progress: ProgressFn = Box::new(move |p: &Progress| sink.lock().unwrap().push(p.clone()));
    let mut launch = LocalLaunch::new(3);
    launch.speeds = vec![1.0, 0.5, 0.25];
    launch.time_scale = 20.0;
    launch.joins = joins;
    let (report, _) = train_local(d, cfg, launch, Some(progress)).unwrap();
    let trace = trace.lock().unwrap();
    assert_eq!(trace.len() as u64, report.iterations);
    let joins_expected =
        |t: &[Progress]| report.joins == 0 || t.last().is_some_and(|p| p.batches.len() == 4);

    let mut s = JobSession::new(SessionConfig::new(b, controller, predictor, 5)).unwrap();
    let mut distinct = std::collections::BTreeSet::new();
    for p in trace.iter() {
        let members: Vec<u64> = p.batches.iter().map(|&(id, _)| u64::from(id)).collect();
        let gone: Vec<WorkerKey> = s.workers().filter(|w| !members.contains(&w.0)).collect();
        for w in gone {
            s.leave(w).unwrap();
        }
        for &id in &members {
            let _ = s.join(WorkerKey(id), None);
        }
        let decided = s.decide().unwrap().batches.to_vec();
        let ran: Vec<u64> = p.batches.iter().map(|&(_, b)| b).collect();
        assert_eq!(
            decided, ran,
            "{controller}+{predictor}: iteration {} decided differently on replay",
            p.iteration
        );
        distinct.insert(ran);
        s.observe(&p.observed).unwrap();
        for &(id, e) in &p.next_signals {
            s.set_next_signals(WorkerKey(u64::from(id)), e).unwrap();
        }
    }
    if !joins_expected(&trace) {
        panic!("{controller}+{predictor}: the worker that should join never did");
    }
    // The replay exercised adaptive decisions, not only the equal start.
    assert!(
        distinct.len() > 1,
        "{controller}+{predictor}: the batches never moved"
    );
}

#[test]
fn the_runtime_decides_what_the_session_decides_on_a_replay() {
    run_and_replay("lbbsp", "narx", Vec::new());
    run_and_replay("pid", "ewma", Vec::new());
}

#[test]
fn a_worker_that_joins_mid_run_is_replayed_too() {
    run_and_replay("lbbsp", "ewma", vec![(15, 1.0)]);
}
