//! End-to-end tests of the runtime on the shipped `tiny` dataset, over real TCP on
//! loopback. No timed assertions: everything checked is arithmetic or bookkeeping.

use pacer_runtime::controller::{self, ControllerConfig, LedgerEntry, TrainReport};
use pacer_runtime::data::{Data, SampleStream};
use pacer_runtime::optim::OptimSpec;
use pacer_runtime::protocol::{self, kind, Message, MAGIC};
use pacer_runtime::worker::{self, DataSource, Fault, WorkerConfig};
use pacer_runtime::{train_local, LocalLaunch, RuntimeError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

mod common;
use common::{config, tiny};

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Every stream position in `[0, iterations·B)` was accumulated exactly once, and
/// every iteration's weights sum to 1.
fn check_ledger(ledger: &[LedgerEntry], iterations: u64, b: u64) {
    let mut l = ledger.to_vec();
    l.sort_by_key(|e| e.stream_start);
    let mut pos = 0;
    for e in &l {
        assert_eq!(
            e.stream_start, pos,
            "gap or overlap at stream position {pos}: {e:?}"
        );
        assert_eq!(
            e.iteration,
            pos / b,
            "range {e:?} accumulated in the wrong iteration"
        );
        pos += e.len;
    }
    assert_eq!(pos, iterations * b, "ledger ends at {pos}");
    for k in 0..iterations {
        let s: u64 = ledger
            .iter()
            .filter(|e| e.iteration == k)
            .map(|e| e.len)
            .sum();
        assert_eq!(s, b, "iteration {k}: weights sum to {s}/{b}");
    }
}

/// The initial parameters and the first gradient in one process, on the union of
/// the first iteration's ranges.
fn single_process_step(d: &Data, cfg: &ControllerConfig) -> (Vec<f32>, Vec<f32>) {
    let m = cfg.model.build();
    let p0 = m.init(cfg.seed, &d.train);
    let mut idx = Vec::new();
    SampleStream::new(d.train.n, cfg.seed).indices(0, cfg.global_batch as usize, &mut idx);
    let x: Vec<f32> = idx
        .iter()
        .flat_map(|&i| d.train.row(i as usize).to_vec())
        .collect();
    let y: Vec<u32> = idx.iter().map(|&i| d.train.y[i as usize]).collect();
    let mut g = vec![0.0; m.n_params()];
    m.loss_grad(&p0, &x, &y, &mut g);
    (p0, g)
}

#[test]
fn unequal_batches_aggregate_to_the_single_process_step() {
    let d = tiny();
    for (model, width) in [("mlp", 16), ("logreg", 0), ("svm", 0), ("kmeans", 10)] {
        let mut cfg = config(&d, model, width, 32, 1);
        cfg.fixed_batches = Some(vec![3, 7, 22]);
        cfg.record_grads = 1;
        cfg.optimizer = OptimSpec::Sgd {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
        };
        let (r, _) = train_local(d.clone(), cfg.clone(), LocalLaunch::new(3), None).unwrap();
        assert_eq!(r.final_batches, vec![3, 7, 22]);
        let (p0, g) = single_process_step(&d, &cfg);
        let e = rel_err(&r.grads[0], &g);
        assert!(e <= 1e-5, "{model}: gradient relative error {e}");
        let step: Vec<f32> = r.final_params.iter().zip(&p0).map(|(a, b)| a - b).collect();
        let want: Vec<f32> = g.iter().map(|v| -0.1 * v).collect();
        let e = rel_err(&step, &want);
        assert!(e <= 1e-5, "{model}: step relative error {e}");
    }
}

/// Pipelining (Steps in chunks, the optimiser step deferred to the next send and
/// applied range by range, workers computing the first layer as rows arrive) trains
/// the same model as sending whole Steps after a whole step, and evaluates the same
/// models on the way (the evaluation steps a copy while the real step stays deferred).
#[test]
fn pipelined_iterations_train_the_same_model() {
    let d = tiny();
    let mut finals = Vec::new();
    let mut curves = Vec::new();
    for pipeline in [false, true] {
        let mut cfg = config(&d, "mlp", 16, 32, 5);
        cfg.fixed_batches = Some(vec![5, 11, 16]);
        cfg.pipeline = pipeline;
        cfg.eval_every = 2;
        let mut launch = LocalLaunch::new(3);
        launch.pipeline = pipeline;
        let (r, _) = train_local(d.clone(), cfg, launch, None).unwrap();
        assert_eq!(r.iterations, 5);
        finals.push(r.final_params);
        curves.push(r.accuracy_curve);
    }
    let e = rel_err(&finals[1], &finals[0]);
    assert!(e <= 1e-5, "pipelined vs whole: relative error {e}");
    let at = |c: &[pacer_runtime::controller::EvalPoint]| {
        c.iter().map(|p| (p.iteration, p.loss)).collect::<Vec<_>>()
    };
    let (whole, piped) = (at(&curves[0]), at(&curves[1]));
    assert_eq!(
        whole.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![2, 4, 5],
        "evaluated at 2, 4 and the end"
    );
    assert_eq!(whole.len(), piped.len());
    for ((k, a), (_, b)) in whole.iter().zip(&piped) {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "iteration {k}: loss {a} (whole) vs {b} (pipelined)"
        );
    }
}

/// A worker that dies after sending the first blocks of its gradient (the chunked
/// uplink): the controller drops those blocks from the sum, retries the worker's
/// range on the others, and the step is still the single-process one.
#[test]
fn a_partial_gradient_is_not_counted() {
    let d = tiny();
    let mut cfg = config(&d, "mlp", 16, 32, 1);
    cfg.fixed_batches = Some(vec![3, 7, 22]);
    cfg.record_grads = 1;
    cfg.record_ledger = true;
    let mut launch = LocalLaunch::new(3);
    launch.partial_kills = vec![(1, 0)];
    let (r, outcomes) = train_local(d.clone(), cfg.clone(), launch, None).unwrap();
    assert_eq!(r.leaves, 1);
    assert!(r.retried_tasks >= 1, "the dead worker's range was retried");
    check_ledger(&r.ledger, 1, 32);
    assert!(outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok())
        .any(|s| s.shutdown_reason.contains("after parts")));
    let (_, g) = single_process_step(&d, &cfg);
    let e = rel_err(&r.grads[0], &g);
    assert!(e <= 1e-5, "gradient relative error {e}");
}

/// A raw client: send `bytes`, return the controller's answer frame.
fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> Message {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    Message::decode(&body, "controller").unwrap()
}

fn hello_frame(version: u16) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0, kind::HELLO];
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(b"old!");
    let n = (b.len() - 4) as u32;
    b[..4].copy_from_slice(&n.to_le_bytes());
    b
}

#[test]
fn bad_peers_get_clear_errors_and_training_goes_on() {
    let d = tiny();
    let mut cfg = config(&d, "logreg", 0, 64, 25);
    cfg.min_workers = 3;
    cfg.record_ledger = true;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let served = rt.spawn(controller::serve(listener, d.clone(), cfg, None));

    // Not a pacer peer: "GET " read as a length prefix is far beyond the limit.
    match raw_exchange(addr, b"GET / HTTP/1.1\r\n\r\n") {
        Message::Reject { reason } => assert!(reason.contains("exceeds the limit"), "{reason}"),
        m => panic!("{m:?}"),
    }
    // An old protocol version (1: before the chunked uplink).
    match raw_exchange(addr, &hello_frame(1)) {
        Message::Reject { reason } => {
            assert!(
                reason.contains("protocol version 1")
                    && reason.contains("this build speaks version 2"),
                "{reason}"
            )
        }
        m => panic!("{m:?}"),
    }
    // A truncated Hello.
    match raw_exchange(addr, &[3, 0, 0, 0, kind::HELLO, b'P', b'A']) {
        Message::Reject { reason } => assert!(reason.contains("truncated"), "{reason}"),
        m => panic!("{m:?}"),
    }
    // A real worker holding other data.
    let libsvm = concat!(env!("CARGO_MANIFEST_DIR"), "/data/tiny.libsvm");
    let e = worker::run_blocking(
        WorkerConfig::new(addr, "wrong-data"),
        DataSource::Spec(format!("libsvm:{libsvm}")),
    )
    .unwrap_err();
    match &e {
        RuntimeError::Rejected { reason, .. } => {
            assert!(reason.contains("wrong dataset"), "{reason}")
        }
        e => panic!("{e}"),
    }

    // Now three good workers; one sends a garbage frame at iteration 10.
    let mut handles = Vec::new();
    for i in 0..3 {
        let mut w = WorkerConfig::new(addr, format!("w{i}"));
        if i == 1 {
            w.fault = Some(Fault::GarbageAt(10));
        }
        let d = d.clone();
        handles.push(std::thread::spawn(move || {
            worker::run_blocking(w, DataSource::Loaded(d))
        }));
    }
    let r: TrainReport = rt.block_on(served).unwrap().unwrap();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert_eq!(r.iterations, 25);
    assert_eq!(r.rejected.len(), 4, "{:?}", r.rejected);
    assert_eq!(r.leaves, 1);
    assert!(r.retried_tasks >= 1);
    check_ledger(&r.ledger, 25, 64);
    let _ = protocol::VERSION;
}

#[test]
fn a_worker_killed_mid_iteration_and_one_joining_lose_no_gradient() {
    let d = tiny();
    let mut cfg = config(&d, "mlp", 16, 64, 60);
    cfg.record_ledger = true;
    cfg.eval_every = 10;
    let mut launch = LocalLaunch::new(4);
    launch.speeds = vec![1.0, 1.0, 0.5, 0.25];
    launch.kills = vec![(2, 12)];
    launch.joins = vec![(20, 1.0)];
    let (r, outcomes) = train_local(d, cfg, launch, None).unwrap();
    assert_eq!(r.iterations, 60);
    assert_eq!(r.leaves, 1);
    assert_eq!(r.joins, 1);
    assert!(r.retried_tasks >= 1, "the dead worker's range was retried");
    assert_eq!(r.disrupted_iterations, 1);
    check_ledger(&r.ledger, 60, 64);
    // Ids follow connection order; slot 2 is the worker named local-2.
    let dead: u32 = r
        .admitted
        .iter()
        .find(|a| a.split(' ').nth(1) == Some("local-2"))
        .and_then(|a| a.split(' ').next()?.parse().ok())
        .expect("local-2 was admitted");
    // The dead worker's range in iteration 12 was computed by others, and nothing of
    // it was accumulated from iteration 12 on.
    assert!(r
        .ledger
        .iter()
        .any(|e| e.iteration == 12 && e.retry && e.worker != dead));
    assert!(!r
        .ledger
        .iter()
        .any(|e| e.worker == dead && e.iteration >= 12));
    // After the join, 4 workers share B again.
    assert_eq!(r.final_batches.len(), 4);
    assert_eq!(r.final_batches.iter().sum::<u64>(), 64);
    let died: Vec<_> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok())
        .filter(|s| s.shutdown_reason.contains("scripted death"))
        .collect();
    assert_eq!(died.len(), 1);
    assert_eq!(outcomes.len(), 5);
    // Training went on (10 classes: chance is 0.1).
    assert!(r.final_accuracy > 0.2, "{}", r.final_accuracy);
}

#[test]
fn controller_and_workers_on_different_loopback_addresses() {
    let d = tiny();
    let mut cfg = config(&d, "logreg", 0, 64, 30);
    cfg.eval_every = 10;
    let mut launch = LocalLaunch::new(3);
    launch.listen = "127.0.0.5:0".parse().unwrap();
    launch.worker_ips = vec![
        "127.0.0.2".parse().unwrap(),
        "127.0.0.3".parse().unwrap(),
        "127.0.0.4".parse().unwrap(),
    ];
    let (r, outcomes) = train_local(d, cfg, launch, None).unwrap();
    assert_eq!(r.iterations, 30);
    for (i, ip) in ["127.0.0.2", "127.0.0.3", "127.0.0.4"].iter().enumerate() {
        assert!(
            r.admitted.iter().any(|a| a.contains(&format!("{ip}:"))),
            "worker {i} not seen from {ip}: {:?}",
            r.admitted
        );
    }
    assert!(outcomes.iter().all(|o| o.is_ok()));
    assert!(r.final_accuracy > 0.5, "{}", r.final_accuracy);
}

#[test]
fn training_on_tiny_learns() {
    let d = tiny();
    for (model, width, target) in [("mlp", 32, 0.9), ("logreg", 0, 0.85)] {
        let mut cfg = config(&d, model, width, 64, 300);
        cfg.target_accuracy = Some(target);
        cfg.eval_every = 10;
        let mut launch = LocalLaunch::new(2);
        launch.speeds = vec![1.0, 0.5];
        // one shared compute slot: the workers take turns computing
        launch.compute_slots = 1;
        let (r, _) = train_local(d.clone(), cfg, launch, None).unwrap();
        assert!(r.reached, "{model}: best accuracy {}", r.best_accuracy);
        assert!(r.time_to_target_s.is_some());
    }
}
