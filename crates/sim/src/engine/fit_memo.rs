//! Memoised step-time fits.
//!
//! A job's step times come from its application's tables, so jobs of one
//! application measure the same (nodes, replicas, batch) → (step, sync) points and
//! the engine refits the same observations many times (`--profiles online`: each
//! job's own fit and its per-type online profile). [`decide::fit_step_model`] is a pure
//! function of its observations and warm start, so its result is kept per
//! bit-exact input: the same answers, each computed once per thread.

use pacer_control::job::decide;
use pacer_predict::goodput::{FitError, PerfObservation, PerfParams};
use std::cell::RefCell;
use std::collections::HashMap;

/// Entries kept before the memo is emptied (inputs are a few observations each).
const CAPACITY: usize = 1 << 15;

thread_local! {
    static MEMO: RefCell<HashMap<Vec<u64>, Result<PerfParams, FitError>>> =
        RefCell::new(HashMap::new());
}

/// The input's bits: every observation field, then the warm start's parameters.
fn key(obs: &[PerfObservation], warm: Option<&PerfParams>) -> Vec<u64> {
    let mut k = Vec::with_capacity(obs.len() * 4 + 8);
    for o in obs {
        k.push(((o.nodes as u64) << 32) | o.replicas as u64);
        k.push(o.atomic_bsz.to_bits());
        k.push(o.compute_time_s.to_bits());
        k.push(o.step_time_s.to_bits());
    }
    if let Some(w) = warm {
        k.push(u64::MAX);
        k.extend(
            [
                w.alpha_c, w.beta_c, w.alpha_n, w.beta_n, w.alpha_r, w.beta_r, w.gamma,
            ]
            .map(f64::to_bits),
        );
    }
    k
}

/// [`decide::fit_step_model`], computed once per distinct input on this thread.
pub(crate) fn memoised_fit(
    obs: &[PerfObservation],
    warm: Option<&PerfParams>,
) -> Result<PerfParams, FitError> {
    let k = key(obs, warm);
    if let Some(r) = MEMO.with(|m| m.borrow().get(&k).cloned()) {
        return r;
    }

    let r = decide::fit_step_model(obs, warm);
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= CAPACITY {
            m.clear();
        }
        m.insert(k, r.clone());
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(step: f64) -> Vec<PerfObservation> {
        [(1, 1, 32.0), (1, 2, 32.0), (2, 8, 64.0)]
            .iter()
            .map(|&(nodes, replicas, atomic_bsz)| PerfObservation {
                nodes,
                replicas,
                atomic_bsz,
                compute_time_s: step * atomic_bsz / 32.0,
                step_time_s: step * atomic_bsz / 32.0 * (1.0 + 0.05 * replicas as f64),
            })
            .collect()
    }

    #[test]
    fn memoised_fits_equal_fresh_ones() {
        for step in [0.1, 0.2] {
            let o = obs(step);
            let fresh = decide::fit_step_model(&o, None);
            assert_eq!(memoised_fit(&o, None), fresh);
            assert_eq!(memoised_fit(&o, None), fresh);
            let warm = fresh.unwrap();
            let fresh_warm = decide::fit_step_model(&o[..2], Some(&warm));
            assert_eq!(memoised_fit(&o[..2], Some(&warm)), fresh_warm);
        }
        assert_ne!(key(&obs(0.1), None), key(&obs(0.2), None));
        assert_eq!(memoised_fit(&[], None), Err(FitError::Empty));
    }
}
