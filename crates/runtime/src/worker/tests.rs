//! The emulated clock and the stall of late parameters.

use super::compute::EmulatedClock;
use crate::protocol::{Message, Signals, StepTiming};
use std::time::Instant;

#[test]
fn emulated_clock_covers_late_parameters_with_compute() {
    let mut c = EmulatedClock::new(Instant::now(), 4.0);
    // 1 ms of CPU from the start: 4 ms emulated.
    c.piece(0.0, 0.001);
    assert!((c.end_s - 0.004).abs() < 1e-12 && c.stall_s() < 1e-12);
    // Its next input arrived at 3 ms, while the emulated compute still ran: free.
    c.piece(0.003, 0.001);
    assert!((c.end_s - 0.008).abs() < 1e-12 && c.stall_s() < 1e-12);
    // The last one arrived at 10 ms: 2 ms of stall, then its compute.
    c.piece(0.010, 0.0005);
    assert!((c.end_s - 0.012).abs() < 1e-12);
    assert!((c.compute_s - 0.010).abs() < 1e-12);
    assert!((c.stall_s() - 0.002).abs() < 1e-12);
    assert!((c.cpu_s - 0.0025).abs() < 1e-12);
}

#[test]
fn encode_time_offset_points_at_encode_s() {
    let m = Message::Gradient {
        task: 1,
        iteration: 2,
        len: 3,
        loss_sum: 0.0,
        correct: 0,
        timing: StepTiming {
            encode_s: 0.0,
            ..Default::default()
        },
        signals: Signals::default(),
        first: 0,
        grad: vec![1.0],
    };
    let mut buf = Vec::new();
    m.encode(&mut buf);
    let off = StepTiming::ENCODE_S_OFFSET;
    buf[off..off + 8].copy_from_slice(&1.25f64.to_le_bytes());
    let off = StepTiming::POST_S_OFFSET;
    buf[off..off + 8].copy_from_slice(&2.5f64.to_le_bytes());
    match Message::decode(&buf[4..], "t").unwrap() {
        Message::Gradient { timing, .. } => {
            assert_eq!(timing.encode_s, 1.25);
            assert_eq!(timing.post_s, 2.5);
        }
        _ => unreachable!(),
    }
}
