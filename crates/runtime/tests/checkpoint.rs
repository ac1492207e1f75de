//! Checkpoint and resume (`ControllerConfig::checkpoint_dir`): a run stopped by a
//! signal writes the state after its last completed step, and a new run — with
//! another number of workers — continues at the same step and sample position.

mod common;

use common::{config, tiny};
use pacer_runtime::checkpoint::Checkpoint;
use pacer_runtime::{train_local, LocalLaunch};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// A path `<fresh folder>/<name>` that does not exist yet; the folder is removed when
/// the returned guard drops.
fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("pacer-resume-")
        .tempdir()
        .unwrap();
    let d = tmp.path().join(name);
    (tmp, d)
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
    let (_tmp, dir) = scratch("4to2");
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
    let c = Checkpoint::load(&dir, &cfg.model)
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
    let (_tmp, dir) = scratch("1to1");
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
    let (_tmp, dir) = scratch("mismatch");
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

/// FNV-1a, as the checkpoint format sums its bytes: a writer can always recompute it.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The checkpoint `c` written to `dir` with `f32` value `index` of the file's first
/// vector (the parameters) replaced by `value`, and the checksum recomputed.
fn write_tampered(c: &Checkpoint, dir: &std::path::Path, index: usize, value: f32) {
    let mut bytes = c.encode();
    // magic 8 | format 4 | meta length 4 | meta | params count 8 | values
    let meta_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let at = 16 + meta_len + 8 + 4 * index;
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let n = bytes.len();
    let sum = fnv1a(&bytes[..n - 8]);
    bytes[n - 8..].copy_from_slice(&sum.to_le_bytes());
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(Checkpoint::path(dir), bytes).unwrap();
}

#[test]
fn a_checkpoint_with_non_finite_parameters_is_refused_naming_the_file() {
    let d = tiny();
    let (_tmp, dir) = scratch("poisoned");
    let mut cfg = config(&d, "mlp", 16, 64, 20);
    cfg.checkpoint_dir = Some(dir.clone());
    let model = cfg.model.build();
    let params = model.init(cfg.seed, &d.train);
    let opt = pacer_runtime::optim::Optimizer::new(cfg.optimizer, params.len());
    let c = Checkpoint::of_run(&d, &cfg, 5, 5 * 64, params, opt);
    // A sound one loads (the tampering below is the only difference).
    c.save(&dir).unwrap();
    assert!(Checkpoint::load(&dir, &cfg.model).unwrap().is_some());
    let path = Checkpoint::path(&dir).display().to_string();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        write_tampered(&c, &dir, 7, bad);
        let e = Checkpoint::load(&dir, &cfg.model).unwrap_err().to_string();
        assert!(
            e.contains(&path) && e.contains("params") && e.contains("value 7 of"),
            "{e}"
        );
        // Through a run: refused before anything trains, with the same reason.
        let e = train_local(d.clone(), cfg.clone(), LocalLaunch::new(1), None)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains(&path) && e.contains("expected a finite number"),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
