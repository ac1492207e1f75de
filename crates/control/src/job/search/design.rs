//! The experiment design of online search: which candidates to profile first.

use crate::job::Candidate;

/// Features of a candidate for the experiment design: the linear terms of the
/// Pollux step-time model (`α_c + β_c·b` compute, `α + β·r` network inside one
/// node and across nodes), each scaled to [0, 1] over the candidates. A D-optimal
/// design over them brackets the candidates: smallest and largest local batch,
/// fewest and most replicas on one node and across nodes, so the fitted model
/// interpolates towards the (usually many-replica) time optimum instead of
/// extrapolating to it.
fn features(c: &Candidate, max_bsz: f64, max_replicas: f64) -> [f64; 6] {
    let r = c.replicas() as f64 / max_replicas;
    let intra = if c.config.nodes == 1 && c.replicas() > 1 {
        1.0
    } else {
        0.0
    };
    let inter = if c.config.nodes > 1 { 1.0 } else { 0.0 };
    [
        1.0,
        c.config.local_bsz / max_bsz,
        intra,
        intra * r,
        inter,
        inter * r,
    ]
}

/// Greedy D-optimal design: repeatedly add the candidate with the largest
/// `ln(1 + φᵀA⁻¹φ) / cost`, `A = λI + Σ φφᵀ`, as Ernest's `expt_design.py`
/// chooses experiments. `cost(c)` is what profiling `c` for one step costs in the
/// currency of the objective; ties go to the earlier candidate.
pub fn design_with(cands: &[Candidate], k: usize, cost: impl Fn(&Candidate) -> f64) -> Vec<usize> {
    use nalgebra::{DMatrix, DVector};
    const D: usize = 6;
    let max_bsz = cands
        .iter()
        .map(|c| c.config.local_bsz)
        .fold(f64::MIN_POSITIVE, f64::max);
    let max_replicas = cands.iter().map(|c| c.replicas()).max().unwrap_or(1) as f64;
    let phis: Vec<DVector<f64>> = cands
        .iter()
        .map(|c| DVector::from_row_slice(&features(c, max_bsz, max_replicas)))
        .collect();
    let mut a = DMatrix::<f64>::identity(D, D) * 1e-3;
    let mut chosen: Vec<usize> = Vec::new();
    for _ in 0..k.min(cands.len()) {
        let Some(inv) = a.clone().try_inverse() else {
            break;
        };
        let mut best: Option<(f64, usize)> = None;
        for (i, c) in cands.iter().enumerate() {
            if chosen.contains(&i) {
                continue;
            }
            let phi = &phis[i];
            let gain = (1.0 + (phi.transpose() * &inv * phi)[(0, 0)]).ln() / cost(c).max(1e-12);
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, i));
            }
        }
        let Some((_, i)) = best else { break };
        a += &phis[i] * phis[i].transpose();
        chosen.push(i);
    }
    chosen
}

/// [`design_with`] at unit cost per candidate.
pub fn design(cands: &[Candidate], k: usize) -> Vec<usize> {
    design_with(cands, k, |_| 1.0)
}
