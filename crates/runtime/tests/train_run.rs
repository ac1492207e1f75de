//! The runtime's one entry point of a training run (`pacer_runtime::train::run`), called
//! directly as a front end other than the CLI would: a plain config in, a report out,
//! over real TCP on 127.0.0.1; bad values come back naming the config field.

use pacer_runtime::train::{run, TrainConfig, TrainError};
use std::net::SocketAddr;

/// A short run on the shipped `tiny` dataset: two workers, 12 iterations, no signals.
fn short() -> TrainConfig {
    let mut c = TrainConfig::new("tiny");
    c.model = "logreg".into();
    c.global_batch = 64;
    c.workers = 2;
    c.max_iterations = Some(12);
    c.eval_every = 4;
    c.realtime_io = false;
    c.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    c
}

#[test]
fn a_short_run_without_the_cli() {
    let mut c = short();
    c.speeds = vec![1.0, 0.5];
    let mut seen = 0;
    let progress = Box::new(move |p: &pacer_runtime::Progress| {
        seen += 1;
        assert_eq!(p.iteration, seen, "one call per iteration, in order");
        assert_eq!(p.batches.iter().map(|b| b.1).sum::<u64>(), 64);
    });
    let out = run(c, Some(progress)).expect("the run trains");
    assert_eq!(out.report.iterations, 12);
    assert!(!out.report.interrupted && out.stopped_by.is_none());
    assert_eq!(out.workers.len(), 2);
    for w in &out.workers {
        let s = w.as_ref().expect("each worker ends cleanly");
        assert_eq!(s.steps, 12);
    }
    assert!((0.0..=1.0).contains(&out.report.final_accuracy));
}

fn config_error(edit: impl FnOnce(&mut TrainConfig)) -> (String, String) {
    let mut c = short();
    edit(&mut c);
    match run(c, None) {
        Err(TrainError::Config { field, message }) => (field, message),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn errors_name_the_config_field_not_a_flag() {
    let (field, m) = config_error(|c| c.global_batch = 0);
    assert_eq!(field, "global_batch", "{m}");
    let (field, m) = config_error(|c| c.max_global_batch = Some(32));
    assert_eq!(field, "max_global_batch");
    assert!(m.contains("`global_batch`") && !m.contains("--"), "{m}");
    let (field, m) = config_error(|c| c.joins = vec![(3, 0.0)]);
    assert_eq!(field, "joins", "{m}");
    let (field, m) = config_error(|c| c.kills = vec![(7, 1)]);
    assert_eq!(field, "kills", "{m}");
    let (field, m) = config_error(|c| c.optimizer = "lbfgs".into());
    assert_eq!(field, "optimizer");
    assert!(m.contains("lbfgs"), "{m}");
    let (field, _) = config_error(|c| c.lr = Some(-1.0));
    assert_eq!(field, "lr");
    let (field, _) = config_error(|c| {
        c.model = "mlp".into();
        c.hidden = 100_000_000;
    });
    assert_eq!(field, "hidden");
    let (field, _) = config_error(|c| c.worker_timeout_s = f64::NAN);
    assert_eq!(field, "worker_timeout_s");
    // The whole error, as a library user prints it.
    let e = run(
        TrainConfig {
            workers: 0,
            ..short()
        },
        None,
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "workers: must be ≥ 1");
}

#[test]
fn a_missing_dataset_is_not_a_config_error() {
    let e = run(
        TrainConfig {
            dataset: "mnist:/nonexistent/pacer-test".into(),
            ..short()
        },
        None,
    )
    .unwrap_err();
    assert!(matches!(e, TrainError::Runtime(_)), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/pacer-test"), "{e}");
}
