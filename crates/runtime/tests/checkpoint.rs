//! Checkpoint and resume (`ControllerConfig::checkpoint_dir`): a run stopped by a
//! signal writes the state after its last completed step, and a new run — with
//! another number of workers — continues at the same step and sample position.

mod common;

use common::{config, tiny};
use pacer_runtime::checkpoint::Checkpoint;
use pacer_runtime::{train_local, LocalLaunch};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pacer-resume-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A flag of its own for each run (the controller watches a `'static` one).
fn stop_flag() -> &'static AtomicBool {
    Box::leak(Box::new(AtomicBool::new(false)))
}

/// Stops the run once iteration `at` is done (as SIGTERM would, between steps).
fn stop_at(flag: &'static AtomicBool, at: u64) -> pacer_runtime::ProgressFn {
    Box::new(move |p| {
        if p.iteration == at {
            flag.store(true, Ordering::SeqCst);
        }
    })
}

#[test]
fn a_stopped_run_resumes_with_fewer_workers_at_the_same_step_and_sample() {
    let d = tiny();
    let dir = scratch("4to2");
    let b = 96;
    let mut cfg = config(&d, "mlp", 16, b, 40);
    cfg.checkpoint_dir = Some(dir.clone());
    cfg.record_ledger = true;
    let flag = stop_flag();
    cfg.interrupt = Some(flag);
    let (first, outcomes) = train_local(
        d.clone(),
        cfg.clone(),
        LocalLaunch::new(4),
        Some(stop_at(flag, 12)),
    )
    .unwrap();
    assert!(first.interrupted);
    assert_eq!(first.iterations, 12);
    for o in outcomes {
        o.unwrap();
    }
    let c = Checkpoint::load(&dir)
        .unwrap()
        .expect("written on the stop");
    assert_eq!((c.meta.step, c.meta.samples), (12, 12 * b));
    // The parameters after the 12th step (its deferred optimiser step applied) and
    // the optimiser's state, exactly.
    assert_eq!(c.params, first.final_params);
    assert_eq!(c.optimizer.state().0, 12);

    cfg.interrupt = None;
    let (second, outcomes) = train_local(d.clone(), cfg, LocalLaunch::new(2), None).unwrap();
    for o in outcomes {
        o.unwrap();
    }
    assert!(!second.interrupted);
    // Continued at step 12 up to the run's 40, on 2 workers.
    assert_eq!(second.iterations, 40);
    assert_eq!(second.workers, 2);
    let first_entry = second.ledger.iter().map(|e| e.iteration).min().unwrap();
    assert_eq!(first_entry, 12);
    // The samples continue where the first run stopped and tile the stream: each
    // iteration k covers [k·B, (k+1)·B) once.
    for k in 12..40 {
        let mut ranges: Vec<(u64, u64)> = second
            .ledger
            .iter()
            .filter(|e| e.iteration == k)
            .map(|e| (e.stream_start, e.len))
            .collect();
        ranges.sort();
        let mut at = k * b;
        for (s, n) in ranges {
            assert_eq!(s, at, "iteration {k}");
            at += n;
        }
        assert_eq!(at, (k + 1) * b, "iteration {k}");
    }
    // Evaluated once, at the end of the resumed run's steps.
    assert_eq!(second.accuracy_curve.last().unwrap().iteration, 40);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_one_worker_a_resumed_run_ends_where_the_uninterrupted_one_does() {
    // One worker: the aggregate is its gradient, no summation order differs, so the
    // resumed run must reproduce the uninterrupted one bit for bit.
    let d = tiny();
    let dir = scratch("1to1");
    let mut cfg = config(&d, "mlp", 16, 64, 30);
    cfg.controller = "uniform".into();
    cfg.record_ledger = true;
    let (whole, _) = train_local(d.clone(), cfg.clone(), LocalLaunch::new(1), None).unwrap();

    cfg.checkpoint_dir = Some(dir.clone());
    let flag = stop_flag();
    cfg.interrupt = Some(flag);
    let (part, _) = train_local(
        d.clone(),
        cfg.clone(),
        LocalLaunch::new(1),
        Some(stop_at(flag, 11)),
    )
    .unwrap();
    assert_eq!(part.iterations, 11);
    cfg.interrupt = None;
    let (rest, _) = train_local(d.clone(), cfg, LocalLaunch::new(1), None).unwrap();
    assert_eq!(rest.iterations, 30);
    // It did resume: it stepped only iterations 11..30 (from scratch, it would have
    // reproduced the same parameters too).
    assert_eq!(rest.ledger.first().unwrap().iteration, 11);
    assert_eq!(rest.ledger.len(), 19);
    assert_eq!(rest.epochs, whole.epochs);
    assert!(rest.final_params == whole.final_params, "parameters differ");
    assert_eq!(rest.final_loss, whole.final_loss);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_model_is_an_error_before_training() {
    let d = tiny();
    let dir = scratch("mismatch");
    let mut cfg = config(&d, "mlp", 16, 64, 20);
    cfg.checkpoint_dir = Some(dir.clone());
    let flag = stop_flag();
    cfg.interrupt = Some(flag);
    train_local(
        d.clone(),
        cfg.clone(),
        LocalLaunch::new(1),
        Some(stop_at(flag, 3)),
    )
    .unwrap();
    let mut other = config(&d, "mlp", 32, 64, 20);
    other.checkpoint_dir = Some(dir.clone());
    let e = pacer_runtime::controller::resume_from(&other, &d)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("its model is mlp") && e.contains("width 32"),
        "{e}"
    );
    // The same through a run: refused, nothing trained.
    let e = train_local(d.clone(), other, LocalLaunch::new(1), None)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("checkpoint"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
