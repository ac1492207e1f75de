//! The pacer model times a per-placement residual table interpolated from measured rows.

use super::*;

/// [`PacerParams`] times a per-placement residual interpolated from measured rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacerTable {
    pub base: PacerParams,
    /// Per group: `(ln local_bsz, ln(measured / base))`, sorted by batch.
    pub residuals: std::collections::BTreeMap<u64, Vec<(f64, f64)>>,
    /// Weight of the node-order siblings' estimate in [`PacerTable::residual`],
    /// chosen by leave-one-out on the rows the table was built from.
    #[serde(default)]
    pub sibling_weight: f64,
    /// Weight of the other placements' residual shape beyond a placement's measured
    /// batches, chosen by leave-one-out.
    #[serde(default)]
    pub edge_weight: f64,
}

/// Batches closer than this in ln(batch) are the same batch (2%).
pub(super) fn same_batch_tol() -> f64 {
    0.02f64.ln_1p()
}

/// Linear in ln(batch) between the neighbouring points, the nearest one outside
/// them, 0 if none.
pub(super) fn interpolate_residual(v: &[(f64, f64)], x: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    match v.iter().position(|p| p.0 >= x) {
        None => v[v.len() - 1].1,
        Some(0) => v[0].1,
        Some(j) => {
            let (a, b) = (v[j - 1], v[j]);
            if b.0 - a.0 < 1e-12 {
                (a.1 + b.1) / 2.0
            } else {
                a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
            }
        }
    }
}

/// Candidate weights tried by leave-one-out.
pub(super) const TABLE_WEIGHTS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// The candidate weight with the least leave-one-out loss (the smallest on ties, so
/// 0 when there are no cases).
pub(super) fn best_weight(loss: impl Fn(f64) -> f64) -> f64 {
    TABLE_WEIGHTS
        .iter()
        .copied()
        .min_by(|a, b| loss(*a).total_cmp(&loss(*b)))
        .unwrap_or(0.0)
}

impl PacerTable {
    pub(super) fn new(base: PacerParams, rows: &[StepRow]) -> Self {
        let mut residuals: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
        for r in rows {
            if r.config.group == 0 {
                continue;
            }
            let res = (r.step_time_s / base.step_time(&r.config)).ln();
            residuals
                .entry(r.config.group)
                .or_default()
                .push((r.config.local_bsz.ln(), res));
        }
        for v in residuals.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let mut table = PacerTable {
            base,
            residuals,
            sibling_weight: 0.0,
            edge_weight: 0.0,
        };
        table.edge_weight = table.choose_edge_weight();
        table.sibling_weight = table.choose_sibling_weight();
        table
    }

    /// Median over the other placements of the same table measured at both `from`
    /// and `to` of their residual's change between the two batches (at least 3).
    fn shape_estimate(&self, group: u64, from: f64, to: f64) -> Option<f64> {
        let tol = same_batch_tol();
        let mut d: Vec<f64> = self
            .residuals
            .iter()
            // Other placements of the same table (one measuring campaign).
            .filter(|(g, _)| **g != group && (**g >> 40) == (group >> 40))
            .filter_map(|(_, v)| {
                let a = v.iter().find(|p| (p.0 - from).abs() <= tol)?;
                let b = v.iter().find(|p| (p.0 - to).abs() <= tol)?;
                Some(b.1 - a.1)
            })
            .collect();
        if d.len() < 3 {
            return None;
        }
        d.sort_by(|a, b| a.total_cmp(b));
        Some(quantile(&d, 0.5))
    }

    /// The placement's own residual at `x`: interpolated inside its measured
    /// batches; beyond them the nearest one plus `edge_weight` × the shape the other
    /// placements show between the two batches.
    fn own_residual(&self, group: u64, v: &[(f64, f64)], x: f64, edge_weight: f64) -> f64 {
        let own = interpolate_residual(v, x);
        if edge_weight == 0.0 || v.is_empty() {
            return own;
        }
        let tol = same_batch_tol();
        let nearest = if x < v[0].0 - tol {
            v[0].0
        } else if x > v[v.len() - 1].0 + tol {
            v[v.len() - 1].0
        } else {
            return own;
        };
        own + edge_weight * self.shape_estimate(group, nearest, x).unwrap_or(0.0)
    }

    /// Leave-one-out over the first and last row of every placement.
    fn choose_edge_weight(&self) -> f64 {
        let mut cases: Vec<(f64, f64, f64)> = Vec::new(); // (truth, own, shape)
        for (&g, v) in &self.residuals {
            if v.len() < 3 {
                continue;
            }
            for i in [0, v.len() - 1] {
                let mut rest = v.clone();
                let (x, y) = rest.remove(i);
                let nearest = if i == 0 {
                    rest[0].0
                } else {
                    rest[rest.len() - 1].0
                };
                if let Some(sh) = self.shape_estimate(g, nearest, x) {
                    cases.push((y, interpolate_residual(&rest, x), sh));
                }
            }
        }
        best_weight(|w| {
            cases
                .iter()
                .map(|&(y, own, sh)| (y - (own + w * sh)).abs())
                .sum::<f64>()
        })
    }

    /// Leave-one-out over every row that has node-order siblings at its batch: the
    /// weight with the least mean |error| of its own residual.
    fn choose_sibling_weight(&self) -> f64 {
        let mut cases: Vec<(f64, f64, f64)> = Vec::new(); // (truth, own, siblings)
        for (&g, v) in &self.residuals {
            for i in 0..v.len() {
                let mut rest = v.clone();
                let (x, y) = rest.remove(i);
                if let Some(sib) = self.sibling_estimate(g, &rest, x) {
                    cases.push((y, self.own_residual(g, &rest, x, self.edge_weight), sib));
                }
            }
        }
        best_weight(|w| {
            cases
                .iter()
                .map(|&(y, own, sib)| (y - ((1.0 - w) * own + w * sib)).abs())
                .sum::<f64>()
        })
    }

    /// Mean over the placements that differ from `group` only in node order and were
    /// measured at `x` of their residual there, each shifted by its mean offset from
    /// `own` (the placement's own points) at the batches both measured.
    fn sibling_estimate(&self, group: u64, own: &[(f64, f64)], x: f64) -> Option<f64> {
        let key = group_multiset(group)?;
        let tol = same_batch_tol();
        let mut sum = 0.0;
        let mut n = 0usize;
        for (&g, sv) in &self.residuals {
            if g == group || group_multiset(g).as_ref() != Some(&key) {
                continue;
            }
            let Some(at) = sv.iter().find(|p| (p.0 - x).abs() <= tol) else {
                continue;
            };
            let diffs: Vec<f64> = sv
                .iter()
                .filter(|p| (p.0 - x).abs() > tol)
                .filter_map(|p| {
                    own.iter()
                        .find(|q| (q.0 - p.0).abs() <= tol)
                        .map(|q| p.1 - q.1)
                })
                .collect();
            if diffs.is_empty() {
                continue;
            }
            sum += at.1 - diffs.iter().sum::<f64>() / diffs.len() as f64;
            n += 1;
        }
        (n > 0).then(|| sum / n as f64)
    }

    /// Log-residual at `c`: linear in ln(batch) between the neighbouring measured
    /// batches of the same placement (the nearest one outside them, 0 if none),
    /// blended with the node-order siblings' estimate at `c`'s batch when the
    /// placement has no row there and a sibling has ([`PacerTable::sibling_weight`]).
    pub fn residual(&self, c: &StepConfig) -> f64 {
        let Some(v) = self.residuals.get(&c.group) else {
            return 0.0;
        };
        let x = c.local_bsz.ln();
        let own = self.own_residual(c.group, v, x, self.edge_weight);
        let w = self.sibling_weight;
        if w == 0.0 || v.iter().any(|p| (p.0 - x).abs() <= same_batch_tol()) {
            return own;
        }
        match self.sibling_estimate(c.group, v, x) {
            Some(sib) => (1.0 - w) * own + w * sib,
            None => own,
        }
    }

    pub fn step_time(&self, c: &StepConfig) -> f64 {
        self.base.step_time(c) * self.residual(c).exp()
    }

    /// Whether rows of `c`'s placement were measured at local batches on both
    /// sides of `c.local_bsz` (2% tolerance): the prediction interpolates the
    /// table rather than extrapolating it.
    pub fn interpolates(&self, c: &StepConfig) -> bool {
        let Some(v) = self.residuals.get(&c.group) else {
            return false;
        };
        let x = c.local_bsz.ln();
        let tol = 0.02f64.ln_1p();
        v.first().is_some_and(|p| p.0 <= x + tol) && v.last().is_some_and(|p| p.0 >= x - tol)
    }

    /// How the table supports a prediction at `c`.
    pub fn support(&self, c: &StepConfig) -> Support {
        let tol = 0.02f64.ln_1p();
        let x = c.local_bsz.ln();
        match self.residuals.get(&c.group) {
            Some(v) if v.iter().any(|p| (p.0 - x).abs() <= tol) => Support::Measured,
            _ if self.interpolates(c) => Support::Interpolated,
            _ => Support::Extrapolated,
        }
    }
}
