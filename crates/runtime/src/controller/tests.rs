//! Unit tests of the controller's private parts.

use super::config::{validate, ControllerConfig};
use super::connections::write_timed;
use super::report::{oracle_mean_iter_s, IterRecord};
use crate::model::ModelSpec;
use crate::optim::OptimSpec;
use std::time::Duration;

#[tokio::test]
async fn a_write_to_a_peer_that_reads_nothing_times_out() {
    // A 16-byte pipe nobody reads: the writer once waited forever, holding its
    // queue of Steps.
    let (mut w, _r) = tokio::io::duplex(16);
    let e = write_timed(&mut w, &[0u8; 1024], Some(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(e.to_string().contains("took nothing for 100ms"), "{e}");
    // One that reads (a pipe with room) is written at once.
    let (mut w, _r) = tokio::io::duplex(4096);
    write_timed(&mut w, &[0u8; 1024], Some(Duration::from_millis(100)))
        .await
        .unwrap();
}

#[test]
fn bad_timeouts_and_limits_are_config_errors_not_panics() {
    let data = crate::data::load("tiny").unwrap();
    let spec = ModelSpec::new("logreg", data.train.dim, data.train.classes, 0).unwrap();
    let base = ControllerConfig::new(spec).unwrap();
    assert!(validate(&base, &data).is_ok());
    type Edit = fn(&mut ControllerConfig);
    let cases: [(&str, Edit); 11] = [
        ("worker_timeout_s", |c| c.worker_timeout_s = f64::NAN),
        ("worker_timeout_s", |c| c.worker_timeout_s = -1.0),
        ("worker_timeout_s", |c| c.worker_timeout_s = 0.0),
        ("worker_timeout_s", |c| c.worker_timeout_s = 1e300),
        ("join_timeout_s", |c| c.join_timeout_s = f64::NAN),
        ("join_timeout_s", |c| c.join_timeout_s = -1.0),
        ("max_time_s", |c| c.max_time_s = f64::NAN),
        ("max_iterations", |c| c.max_iterations = Some(0)),
        ("min_workers", |c| c.min_workers = 0),
        ("global_batch", |c| c.global_batch = u64::MAX),
        ("momentum", |c| {
            c.optimizer = OptimSpec::Sgd {
                lr: 0.1,
                momentum: f32::NAN,
                weight_decay: 0.0,
            }
        }),
    ];
    for (field, edit) in cases {
        let mut c = base.clone();
        edit(&mut c);
        let e = validate(&c, &data).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{field}:")), "{field}: {e}");
    }
}

fn rec(speeds: &[(u32, f64)], overhead_s: f64) -> IterRecord {
    IterRecord {
        batch: 300.0,
        overhead_s,
        speeds: speeds.to_vec(),
    }
}

#[test]
fn oracle_balances_on_true_speeds_and_pays_the_jitter() {
    // Steady speeds 200 and 100: the oracle splits 200/100, 1 s each, + overhead.
    let steady: Vec<_> = (0..30)
        .map(|_| rec(&[(0, 200.0), (1, 100.0)], 0.1))
        .collect();
    assert!((oracle_mean_iter_s(&steady) - 1.1).abs() < 1e-12);

    // One jittered iteration in the middle: worker 1 ran at 80 there. Its true
    // speed (window median) stays 100, so the oracle gives it 100 samples that
    // take 1.25 s; the hindsight balance would have been 300 / 280 s.
    let mut jittered = steady.clone();
    jittered[15] = rec(&[(0, 200.0), (1, 80.0)], 0.1);
    let expect = (29.0 * 1.1 + 1.25 + 0.1) / 30.0;
    assert!((oracle_mean_iter_s(&jittered) - expect).abs() < 1e-12);
}

#[test]
fn oracle_follows_membership_changes() {
    // Worker 2 joins halfway; the oracle uses each worker's own series.
    let mut r: Vec<_> = (0..20)
        .map(|_| rec(&[(0, 150.0), (1, 150.0)], 0.0))
        .collect();
    r.extend((0..20).map(|_| rec(&[(0, 150.0), (1, 150.0), (2, 300.0)], 0.0)));
    let expect = (20.0 * 1.0 + 20.0 * 0.5) / 40.0;
    assert!((oracle_mean_iter_s(&r) - expect).abs() < 1e-12);
    assert_eq!(oracle_mean_iter_s(&[]), 0.0);
}
