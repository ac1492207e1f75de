//! Each check of the harness can fail: dummy targets that panic, hang, allocate,
//! or return errors that name no origin or no place are caught.

use pacer_fuzz::harness::{
    self, check, fuzz, no_extra, Budget, Failure, Limits, Outcome, Place, RunConfig, Target,
    Watchdog,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn seeds() -> Vec<Vec<u8>> {
    vec![b"abc,def\n12,34\n".to_vec()]
}

fn target(run: fn(&[u8]) -> Outcome) -> Target {
    Target {
        name: "dummy",
        origin: "dummy.csv",
        run,
        seeds,
        extra_mem: no_extra,
    }
}

fn rejected(message: &str, place: Place) -> Outcome {
    Outcome::Rejected {
        message: message.into(),
        place,
    }
}

const QUICK: Limits = Limits {
    time: Duration::from_millis(100),
    mem_per_byte: 64,
    mem_const: 1 << 20,
};

#[test]
fn a_panic_is_caught_and_reported() {
    let t = target(|b| {
        let _ = b[b.len() + 1]; // out of bounds
        Outcome::Accepted
    });
    let f = check(&t, b"x", &QUICK).unwrap_err();
    assert!(
        matches!(&f, Failure::Panic(m) if m.contains("out of bounds")),
        "{f}"
    );
}

#[test]
fn a_slow_input_fails() {
    let t = target(|_| {
        std::thread::sleep(Duration::from_millis(300));
        Outcome::Accepted
    });
    assert!(matches!(check(&t, b"x", &QUICK), Err(Failure::Slow(_))));
}

#[test]
fn a_hang_is_seen_by_the_watchdog() {
    static HUNG: AtomicBool = AtomicBool::new(false);
    fn on_hang(target: &str, input: &[u8]) {
        assert_eq!((target, input), ("dummy", &b"abc,def\n12,34\n"[..]));
        HUNG.store(true, Ordering::SeqCst);
    }
    let t = target(|_| {
        std::thread::sleep(Duration::from_millis(600));
        Outcome::Accepted
    });
    let dog = Watchdog::start(Duration::from_millis(150), on_hang);
    let cfg = RunConfig {
        limits: Limits::default(),
        budget: Budget::Cases(0),
        seed: 0,
        max_shrink: 0,
    };
    let rep = fuzz(&t, &cfg, Some(&dog));
    assert!(HUNG.load(Ordering::SeqCst), "{rep}");
}

#[test]
fn memory_beyond_the_bound_fails() {
    let t = target(|_| {
        std::hint::black_box(vec![7u8; 2 << 20]);
        Outcome::Accepted
    });
    let f = check(&t, b"x", &QUICK).unwrap_err();
    assert!(
        matches!(f, Failure::Memory { peak, .. } if peak >= 2 << 20),
        "{f}"
    );
    // The bound grows with the input: 64 × 64 KiB = 4 MiB covers it.
    assert!(check(&t, &vec![b'x'; 64 << 10], &QUICK).is_ok());
    // Memory allocated and freed before the peak is still counted.
    let t = target(|_| {
        for _ in 0..3 {
            std::hint::black_box(vec![1u8; 3 << 20]);
        }
        Outcome::Accepted
    });
    assert!(matches!(
        check(&t, b"x", &QUICK),
        Err(Failure::Memory { .. })
    ));
}

#[test]
fn errors_must_name_origin_and_place() {
    let t = target(|_| rejected("line 2: bad number", Place::Line(2)));
    assert!(matches!(
        check(&t, b"a\nb\n", &QUICK),
        Err(Failure::NoOrigin(_))
    ));
    let t = target(|_| rejected("dummy.csv:0: bad", Place::Line(0)));
    assert!(matches!(
        check(&t, b"a\nb\n", &QUICK),
        Err(Failure::BadPlace(_))
    ));
    let t = target(|_| rejected("dummy.csv:9: bad", Place::Line(9)));
    assert!(matches!(
        check(&t, b"a\nb\n", &QUICK),
        Err(Failure::BadPlace(_))
    ));
    let t = target(|_| rejected("dummy.csv: field `x` is bad", Place::Field("zz".into())));
    assert!(matches!(check(&t, b"a", &QUICK), Err(Failure::BadPlace(_))));
    let t = target(|_| rejected("dummy.csv:3: bad", Place::Line(3)));
    assert!(check(&t, b"a\nb\n", &QUICK).is_ok());
    let t = target(|_| Outcome::Broken("decoded value differs".into()));
    assert!(matches!(check(&t, b"a", &QUICK), Err(Failure::Broken(_))));
}

#[test]
fn the_fuzz_loop_finds_and_shrinks_a_bug() {
    // Panics on a number ≥ 10^12 in the second field: reachable only by mutating
    // the seed's numbers (edge values), not by the seed itself.
    let t = target(|b| {
        let s = String::from_utf8_lossy(b);
        for line in s.lines() {
            if let Some(n) = line
                .split(',')
                .nth(1)
                .and_then(|f| f.trim().parse::<f64>().ok())
            {
                assert!(n < 1e12, "too big");
            }
        }
        Outcome::Accepted
    });
    let cfg = RunConfig {
        limits: Limits::default(),
        budget: Budget::Cases(20_000),
        seed: 1,
        max_shrink: 2000,
    };
    let rep = fuzz(&t, &cfg, None);
    let (f, input) = rep.failure.clone().expect("found");
    assert!(
        matches!(f, Failure::Panic(ref m) if m == "too big"),
        "{rep}"
    );
    assert!(input.len() <= 40, "not shrunk: {rep}");
    // A target without the bug passes the same run.
    let ok = target(|_| Outcome::Accepted);
    let rep = fuzz(&ok, &cfg, None);
    assert!(rep.failure.is_none() && rep.cases == 20_000, "{rep}");
    let _ = harness::escape(&input);
}
