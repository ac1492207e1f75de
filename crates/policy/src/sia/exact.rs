//! The exact solver of the Sia knapsack: microlp's branch and bound on binary
//! variables (one per job and configuration with value > 0), one "at most one
//! configuration" row per job and one capacity row per device type.
//!
//! Its running time is erratic (a 40-job round took 7 ms for two seeds and 55 s for
//! a third), so it is bounded by a number of branch-and-bound nodes — deterministic,
//! where a wall-clock limit would make the decisions depend on the machine's load —
//! and warm-started with a feasible choice (the fast solver's): at the bound the
//! result is the better of the solver's incumbent and that choice.

use super::Problem;
use microlp::{ComparisonOp, LinearExpr, OptimizationDirection, SolveOptions, TerminationReason};

/// Default node bound of `sia-exact` per round.
pub const DEFAULT_NODE_LIMIT: u64 = 2_000;

/// How a bounded exact solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactOutcome {
    /// Optimal (proven).
    Optimal,
    /// The node bound stopped the search: the best solution found (at least as
    /// good as the warm start).
    NodeLimit,
    /// The solver failed; the warm start is returned.
    Failed,
}

/// Exact solution of the knapsack, without a bound. `None` if the solver fails.
pub fn solve_exact(p: &Problem) -> Option<Vec<Option<usize>>> {
    let none = vec![None; p.options.len()];
    match solve_exact_bounded(p, &none, u64::MAX) {
        (c, ExactOutcome::Optimal) => Some(c),
        _ => None,
    }
}

/// Branch and bound with at most `node_limit` nodes (`u64::MAX`: none), warm-started
/// with `warm` (a choice that fits). Returns the choice and how the search ended.
pub fn solve_exact_bounded(
    p: &Problem,
    warm: &[Option<usize>],
    node_limit: u64,
) -> (Vec<Option<usize>>, ExactOutcome) {
    if p.options.iter().all(Vec::is_empty) {
        return (vec![None; p.options.len()], ExactOutcome::Optimal);
    }
    let mut lp = microlp::Problem::new(OptimizationDirection::Maximize);
    let x: Vec<Vec<microlp::Variable>> = p
        .options
        .iter()
        .map(|o| o.iter().map(|&(_, v)| lp.add_binary_var(v)).collect())
        .collect();
    let mut used: Vec<LinearExpr> = (0..p.capacity.len()).map(|_| LinearExpr::empty()).collect();
    for (j, o) in p.options.iter().enumerate() {
        for (k, &(c, _)) in o.iter().enumerate() {
            used[p.configs[c].ty as usize].add(x[j][k], p.configs[c].gpus as f64);
        }
        if o.len() > 1 {
            let row: Vec<(microlp::Variable, f64)> = x[j].iter().map(|&v| (v, 1.0)).collect();
            lp.add_constraint(row.as_slice(), ComparisonOp::Le, 1.0);
        }
    }
    for (t, u) in used.into_iter().enumerate() {
        lp.add_constraint(u, ComparisonOp::Le, p.capacity[t] as f64);
    }
    let mut warm_start = Vec::new();
    for (j, o) in p.options.iter().enumerate() {
        for (k, &(c, _)) in o.iter().enumerate() {
            warm_start.push((x[j][k], f64::from(u8::from(warm[j] == Some(c)))));
        }
    }
    let mut opts = SolveOptions::default();
    opts.node_limit = (node_limit != u64::MAX).then_some(node_limit);
    opts.warm_start = Some(warm_start);
    let fallback = || (warm.to_vec(), ExactOutcome::Failed);
    let Ok(outcome) = lp.solve_with(opts) else {
        return fallback();
    };
    let reason = outcome.termination_reason();
    let Some(sol) = outcome.solution() else {
        return fallback();
    };
    let choice: Vec<Option<usize>> = p
        .options
        .iter()
        .enumerate()
        .map(|(j, o)| {
            o.iter()
                .enumerate()
                .find(|(k, _)| sol.var_value(x[j][*k]) > 0.5)
                .map(|(_, &(c, _))| c)
        })
        .collect();
    // Rounding can never break a constraint of a solved MILP, but check anyway, and
    // never return less than the warm start.
    let (value, fits) = p.evaluate(&choice);
    let (warm_value, warm_fits) = p.evaluate(warm);
    if !fits || (warm_fits && warm_value > value) {
        return fallback();
    }
    let how = if reason == TerminationReason::ProvenOptimal {
        ExactOutcome::Optimal
    } else {
        ExactOutcome::NodeLimit
    };
    (choice, how)
}

#[cfg(test)]
mod tests {
    use super::super::{solve_fast, Config};
    use super::*;

    /// A seeded knapsack: `jobs` jobs, two types of `cap` devices, configurations of
    /// 1, 2, 4 devices per type with random values.
    fn knapsack(jobs: usize, cap: u64, seed: u64) -> Problem {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let configs: Vec<Config> = (0..2u16)
            .flat_map(|ty| [1, 2, 4].map(|gpus| Config { ty, nodes: 1, gpus }))
            .collect();
        let options = (0..jobs)
            .map(|_| {
                (0..configs.len())
                    .map(|c| (c, 0.05 + next() * configs[c].gpus as f64 * 0.2))
                    .collect()
            })
            .collect();
        Problem {
            configs,
            capacity: vec![cap, cap],
            options,
        }
    }

    #[test]
    fn the_node_bound_never_returns_less_than_the_warm_start() {
        for seed in 1..6 {
            let p = knapsack(30, 12, seed);
            let fast = solve_fast(&p, &[]);
            let (vf, ff) = p.evaluate(&fast);
            assert!(ff);
            let (exact, how) = solve_exact_bounded(&p, &fast, u64::MAX);
            assert_eq!(how, ExactOutcome::Optimal);
            let (ve, fe) = p.evaluate(&exact);
            assert!(fe && ve >= vf - 1e-9, "seed {seed}: {ve} < {vf}");
            for limit in [0, 1, 10] {
                let (c, how) = solve_exact_bounded(&p, &fast, limit);
                let (v, fits) = p.evaluate(&c);
                assert!(fits, "seed {seed}, limit {limit}");
                assert!(
                    v >= vf - 1e-9 && v <= ve + 1e-9,
                    "seed {seed}: {v} vs {vf}..{ve}"
                );
                assert_ne!(how, ExactOutcome::Failed);
                // Deterministic: the same bound, the same answer.
                assert_eq!(solve_exact_bounded(&p, &fast, limit).0, c);
            }
        }
    }
}
