//! A session snapshotted at a random point, sent through JSON and restored decides
//! bit-identically to the uninterrupted session, for every controller × predictor.

use pacer_control::session::{
    IterationObservation, JobSession, SessionConfig, SessionError, SessionSnapshot, WorkerKey,
};
use pacer_control::worker::{BatchBounds, CONTROLLERS};
use pacer_model::rng::SplitMix64;
use pacer_predict::speed::{Exogenous, PREDICTORS};

/// The driver's side: which workers it believes are in the job, the last batches.
struct Driver {
    rng: SplitMix64,
    members: Vec<u64>,
    next_key: u64,
    batches: Option<Vec<u64>>,
}

impl Driver {
    fn new(seed: u64) -> Self {
        Driver {
            rng: SplitMix64::new(seed),
            members: Vec::new(),
            next_key: 0,
            batches: None,
        }
    }

    /// One random call on `s`; what it answered, bit for bit. The random draws do not
    /// depend on the session's answers beyond what the two sessions share.
    fn step(&mut self, s: &mut JobSession, k: usize) -> String {
        let r = self.rng.below(100);
        if self.members.len() < 2 || (r < 4 && self.members.len() < 7) {
            let key = self.next_key;
            self.next_key += 1 + self.rng.below(3) as u64;
            let bounds = (self.rng.below(3) == 0).then(|| BatchBounds {
                min: 1,
                max: 200 + self.rng.below(400) as u64,
            });
            self.members.push(key);
            self.members.sort_unstable();
            return format!("join {key}: {:?}", s.join(WorkerKey(key), bounds));
        }
        if r < 7 {
            let key = self.members.remove(self.rng.below(self.members.len()));
            self.batches = None;
            return format!("leave {key}: {:?}", s.leave(WorkerKey(key)));
        }
        if r < 30 {
            let key = self.members[self.rng.below(self.members.len())];
            let on = self.rng.below(2) == 0;
            let sig = Exogenous {
                cpu_load: if on {
                    0.5 + 0.05 * self.rng.next_f64()
                } else {
                    0.0
                },
                mem_load: 0.1 * self.rng.next_f64(),
            };
            return format!(
                "signals {key}: {:?}",
                s.set_next_signals(WorkerKey(key), sig)
            );
        }
        let out = match s.decide() {
            Ok(d) => {
                self.batches = Some(d.batches.to_vec());
                let bits: Vec<u64> = d.predicted_speed.iter().map(|v| v.to_bits()).collect();
                format!("decide {:?} {bits:?} {}", d.batches, d.rebalanced)
            }
            Err(e) => {
                self.batches = None;
                format!("decide: {e}")
            }
        };
        let Some(b) = &self.batches else { return out };
        let obs: Vec<IterationObservation> = self
            .members
            .iter()
            .zip(b)
            .map(|(&w, &bi)| {
                let base = 300.0 + 150.0 * (w % 4) as f64 + 50.0 * ((k / 40) % 3) as f64;
                let noise = 1.0 + 0.05 * (self.rng.next_f64() - 0.5);
                IterationObservation {
                    worker: WorkerKey(w),
                    samples: bi,
                    compute_s: bi as f64 / (base * noise),
                    signals: Exogenous::default(),
                }
            })
            .collect();
        format!("{out}; observe {:?}", s.observe(&obs))
    }
}

fn round_trip(s: &JobSession) -> JobSession {
    let json = serde_json::to_string(&s.snapshot().unwrap()).unwrap();
    let snap: SessionSnapshot = serde_json::from_str(&json).unwrap();
    let r = JobSession::restore(snap).unwrap();
    // The restored session's own snapshot is the same, to the byte.
    assert_eq!(serde_json::to_string(&r.snapshot().unwrap()).unwrap(), json);
    r
}

#[test]
fn a_restored_session_continues_bit_identically() {
    const STEPS: usize = 300;
    let mut cases = 0;
    for controller in CONTROLLERS {
        for predictor in PREDICTORS {
            for seed in 0..4u64 {
                let mut cfg = SessionConfig::new(1024, controller, predictor, seed);
                cfg.gpu_like = seed % 2 == 1;
                let mut a = JobSession::new(cfg.clone()).unwrap();
                let mut da = Driver::new(seed);
                let want: Vec<String> = (0..STEPS).map(|k| da.step(&mut a, k)).collect();

                let cut = SplitMix64::new(seed ^ 0xC0FFEE).below(STEPS);
                let mut b = JobSession::new(cfg).unwrap();
                let mut db = Driver::new(seed);
                for (k, w) in want.iter().enumerate().take(cut) {
                    assert_eq!(&db.step(&mut b, k), w);
                }
                let mut b = round_trip(&b);
                for (k, w) in want.iter().enumerate().skip(cut) {
                    let got = db.step(&mut b, k);
                    assert_eq!(
                        &got, w,
                        "{controller}/{predictor} seed {seed}: step {k} after a cut at {cut}"
                    );
                }
                cases += 1;
            }
        }
    }
    assert_eq!(cases, CONTROLLERS.len() * PREDICTORS.len() * 4);
}

#[test]
fn snapshot_size_does_not_grow_with_steps() {
    let mut s = JobSession::new(SessionConfig::new(512, "pid", "narx", 3)).unwrap();
    let mut d = Driver::new(3);
    let mut sizes = Vec::new();
    for k in 0..2000 {
        d.step(&mut s, k);
        if k % 500 == 499 {
            let snap = s.snapshot().unwrap();
            sizes.push((
                snap.members.len(),
                serde_json::to_string(&snap).unwrap().len(),
            ));
        }
    }
    // Same members, same size, to within the digits of the numbers.
    for w in sizes.windows(2) {
        if w[0].0 == w[1].0 {
            assert!(w[1].1 < w[0].1 + w[0].1 / 10, "{sizes:?}");
        }
    }
}

#[test]
fn bad_snapshots_are_refused_naming_the_field() {
    let mut s = JobSession::new(SessionConfig::new(300, "lbbsp", "narx", 5)).unwrap();
    let mut d = Driver::new(5);
    for k in 0..60 {
        d.step(&mut s, k);
    }
    let good = s.snapshot().unwrap();
    let err = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = serde_json::to_value(&good).unwrap();
        f(&mut v);
        let snap: SessionSnapshot = serde_json::from_value(v).unwrap();
        JobSession::restore(snap).unwrap_err().to_string()
    };
    let e = err(&|v| v["members"][0]["predictor"]["ar"]["w"] = serde_json::json!([1.0]));
    assert!(
        e.contains("members[0].predictor.ar.w: 1 values, expected 8"),
        "{e}"
    );
    let e = err(&|v| v["pool"] = serde_json::Value::Null);
    assert!(e.contains("pool: missing"), "{e}");
    let e =
        err(&|v| v["members"][0]["predictor"] = serde_json::json!({"kind": "last", "last": 3.0}));
    assert!(
        e.contains("kind: `last` state for a `narx` predictor"),
        "{e}"
    );
    let e = err(&|v| v["batches"][0] = serde_json::json!(0));
    assert!(e.contains("batches:") || e.contains("controller."), "{e}");
    let e = err(&|v| {
        let m = v["members"][0].clone();
        v["members"].as_array_mut().unwrap().push(m);
    });
    assert!(e.contains("key"), "{e}");
    let e = err(&|v| v["config"]["controller"] = serde_json::json!("nope"));
    assert!(e.contains("unknown controller `nope`"), "{e}");

    // A session with a caller's predictors cannot be snapshotted.
    let custom = JobSession::with_predictors(
        SessionConfig::new(300, "pid", "mine", 1),
        Box::new(|w: WorkerKey| pacer_predict::speed::make_predictor("ewma", 1, w.0).unwrap()),
    )
    .unwrap();
    assert!(matches!(custom.snapshot(), Err(SessionError::Snapshot(_))));
}
