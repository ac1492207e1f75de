//! How noisy single measurements are: neighbouring-batch and node-order-repeat estimates.

use super::*;

/// How noisy single measurements are, estimated without any fitted model.
///
/// Each table row is one measurement of one `(placement, local batch)`; there are
/// no repeats to compare. So every interior row of a placement's curve is compared
/// with the straight line in `(ln b, ln t)` through its two neighbours:
/// `d = ln t_i − interp(ln t_{i−1}, ln t_{i+1})`. With independent noise of
/// standard deviation σ (in log time), `Var d = σ²(1 + w² + (1−w)²)`, so
/// `d / √(1 + w² + (1−w)²)` has the spread of one row's noise. Curvature of the
/// true curve inflates `d`; the part of it that every placement shares (yolov3's
/// dip at b = 8, ncf's knee) is removed by subtracting the median `d` of all
/// placements with the same batch triple (and the same table and single/multi-node
/// class). What remains is noise plus placement-specific curvature: an upper bound
/// on noise, hence a lower bound on the error no model can beat only if that
/// curvature is small (it is, where the raw and centred numbers agree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    /// Interior rows that entered the centred estimate.
    pub rows: usize,
    /// Robust σ of one row's log noise (median |·| / 0.6745), in percent.
    pub sigma_pct: f64,
    /// Same without removing the shared curvature (a looser upper bound), in percent.
    pub sigma_raw_pct: f64,
    /// Median and 90th percentile of |noise| of one row, in percent: the errors a
    /// model that knew the true curve would still make on single rows.
    pub median_abs_pct: f64,
    pub p90_abs_pct: f64,
}

/// Smallest class of curve triples whose median is subtracted in [`noise_floor`].
pub(super) const NOISE_MIN_CLASS: usize = 5;

/// Estimates the measurement noise of step-time rows (see [`NoiseFloor`]).
/// Rows are grouped by [`StepConfig::group`]; rows of group 0 are ignored.
pub fn noise_floor(rows: &[StepRow]) -> Option<NoiseFloor> {
    use std::collections::BTreeMap;
    let mut curves: BTreeMap<u64, Vec<(f64, f64, bool)>> = BTreeMap::new();
    for r in rows {
        let c = &r.config;
        if c.group == 0
            || r.step_time_s.is_nan()
            || r.step_time_s <= 0.0
            || c.local_bsz.is_nan()
            || c.local_bsz <= 0.0
        {
            continue;
        }
        curves.entry(c.group).or_default().push((
            c.local_bsz.ln(),
            r.step_time_s.ln(),
            c.nodes > 1,
        ));
    }
    // Class key: batch triple (ln b to 1e-3), table (placement or scalability), multi-node.
    type Key = (i64, i64, i64, bool, bool);
    let mut classes: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    let mut raw = Vec::new();
    for (&group, v) in curves.iter_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for t in v.windows(3) {
            let (x0, x1, x2) = (t[0].0, t[1].0, t[2].0);
            if x2 - x0 < 1e-9 {
                continue;
            }
            let w = (x1 - x0) / (x2 - x0);
            let d = (t[1].1 - (t[0].1 + (t[2].1 - t[0].1) * w))
                / (1.0 + w * w + (1.0 - w) * (1.0 - w)).sqrt();
            raw.push(d.abs());
            let q = |x: f64| (x * 1000.0).round() as i64;
            let scal = group & (1 << 40) != 0;
            classes
                .entry((q(x0), q(x1), q(x2), scal, t[1].2))
                .or_default()
                .push(d);
        }
    }
    let mut centred = Vec::new();
    for v in classes.values_mut() {
        let n = v.len();
        if n < NOISE_MIN_CLASS {
            continue;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let m = quantile(v, 0.5);
        // Subtracting an estimated centre shrinks the spread by about √((n−1)/n).
        let k = (n as f64 / (n as f64 - 1.0)).sqrt();
        centred.extend(v.iter().map(|d| (d - m).abs() * k));
    }
    if centred.is_empty() {
        return None;
    }
    centred.sort_by(|a, b| a.total_cmp(b));
    raw.sort_by(|a, b| a.total_cmp(b));
    let pct = |x: f64| 100.0 * x.exp_m1();
    Some(NoiseFloor {
        rows: centred.len(),
        sigma_pct: pct(quantile(&centred, 0.5) / 0.6745),
        sigma_raw_pct: pct(quantile(&raw, 0.5) / 0.6745),
        median_abs_pct: pct(quantile(&centred, 0.5)),
        p90_abs_pct: pct(quantile(&centred, 0.9)),
    })
}

/// Measurement noise from the repeats the Pollux traces do contain.
///
/// `placements.csv` measures some placements that differ only in the order of
/// their nodes — `1344`, `1434` and `1443` all put 1, 3, 4 and 4 replicas on four
/// nodes — at the same local batches. Every model here (and Ernest's and Pollux's)
/// sees a placement only through its multiset of per-node counts, so for them these
/// are repeated measurements of one configuration, taken in separate runs:
/// - `mean_abs_log_bound_pct` is a hard bound, with no assumption on the noise:
///   one prediction `p` for the `k` values `x` of a class at one batch has
///   `Σ|x − p| ≥ Σ|x − median|`, so any order-blind predictor's mean |ln error| over
///   these rows is at least this;
/// - `median_abs_pct` / `p90_abs_pct` are from `e = (x − m)·√(k/(k−1))` (`m` the
///   class mean at that batch), which has the spread of one row's noise when the
///   row's placement was never measured (its whole run is new). For Gaussian noise
///   they are the median and p90 of |noise|; with heavy tails (an occasional slow
///   run) a pair spreads one outlier over both rows and they overstate the median,
///   so they are an estimate of the noise level, not a bound;
/// - `within_*` first removes each placement's mean offset from its class over its
///   batches (the part of the noise one run shares). When a model beats it on held-out
///   rows of placements it has other rows of, the remaining noise is correlated
///   along a placement's batches, which interpolating neighbours exploits.
///
/// Only placements whose group id decodes to its per-node counts (one decimal digit
/// per node, as in the Pollux format) and with at least `min_replicas` replicas
/// enter. `None` when no class has two placements at a common batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatFloor {
    /// Classes (multisets of per-node counts) with at least two placements.
    pub classes: usize,
    /// Indices (into the input) of the rows that entered.
    pub members: Vec<usize>,
    pub median_abs_pct: f64,
    pub p90_abs_pct: f64,
    pub within_median_abs_pct: f64,
    pub within_p90_abs_pct: f64,
    pub mean_abs_log_bound_pct: f64,
}

/// Per-node replica counts of a placement group id (one decimal digit per node),
/// sorted; `None` for scalability or unknown groups.
pub(super) fn group_multiset(group: u64) -> Option<Vec<u32>> {
    if group == 0 || group >= 1 << 40 {
        return None;
    }
    let mut g = group;
    let mut counts = Vec::new();
    while g > 0 {
        let d = (g % 10) as u32;
        if d == 0 {
            return None;
        }
        counts.push(d);
        g /= 10;
    }
    counts.sort_unstable();
    Some(counts)
}

/// Per-node replica counts of a placement group id, sorted, if it decodes
/// consistently with the row's configuration.
pub(super) fn placement_multiset(c: &StepConfig) -> Option<Vec<u32>> {
    let counts = group_multiset(c.group)?;
    let ok = counts.len() as u32 == c.nodes
        && counts.iter().sum::<u32>() == c.replicas
        && counts.last().copied() == Some(c.max_per_node);
    ok.then_some(counts)
}

/// See [`RepeatFloor`].
pub fn repeat_floor(rows: &[StepRow], min_replicas: u32) -> Option<RepeatFloor> {
    use std::collections::BTreeMap;
    // class → batch key → [(group, row index, ln t)]
    type Cell = Vec<(u64, usize, f64)>;
    let mut classes: BTreeMap<Vec<u32>, BTreeMap<i64, Cell>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let c = &r.config;
        if c.replicas < min_replicas
            || !(r.step_time_s > 0.0 && r.step_time_s.is_finite())
            || !(c.local_bsz > 0.0 && c.local_bsz.is_finite())
        {
            continue;
        }
        let Some(key) = placement_multiset(c) else {
            continue;
        };
        let b = (c.local_bsz.ln() * 1000.0).round() as i64;
        classes.entry(key).or_default().entry(b).or_default().push((
            c.group,
            i,
            r.step_time_s.ln(),
        ));
    }
    let mut members = Vec::new();
    let mut dev = Vec::new();
    let mut hard = Vec::new();
    let mut n_classes = 0;
    // (group) → [(deviation from the class mean, scale)] for the within estimate.
    let mut by_placement: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for cells in classes.values() {
        let mut used = false;
        for cell in cells.values() {
            let mut groups: Vec<u64> = cell.iter().map(|t| t.0).collect();
            groups.sort_unstable();
            groups.dedup();
            let k = cell.len();
            // One row per placement and batch; otherwise the cell is ambiguous.
            if groups.len() < 2 || groups.len() != k {
                continue;
            }
            used = true;
            let m = cell.iter().map(|t| t.2).sum::<f64>() / k as f64;
            let scale = (k as f64 / (k as f64 - 1.0)).sqrt();
            let mut xs: Vec<f64> = cell.iter().map(|t| t.2).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            let med = quantile(&xs, 0.5);
            for &(g, i, x) in cell {
                members.push(i);
                dev.push(((x - m) * scale).abs());
                hard.push((x - med).abs());
                by_placement.entry(g).or_default().push((x - m, scale));
            }
        }
        n_classes += usize::from(used);
    }
    if dev.is_empty() {
        return None;
    }
    let mut within = Vec::new();
    for v in by_placement.values() {
        let n = v.len();
        if n < 2 {
            continue;
        }
        let o = v.iter().map(|t| t.0).sum::<f64>() / n as f64;
        let k = (n as f64 / (n as f64 - 1.0)).sqrt();
        within.extend(v.iter().map(|&(d, s)| ((d - o) * s * k).abs()));
    }
    dev.sort_by(|a, b| a.total_cmp(b));
    within.sort_by(|a, b| a.total_cmp(b));
    members.sort_unstable();
    let pct = |x: f64| 100.0 * x.exp_m1();
    Some(RepeatFloor {
        classes: n_classes,
        members,
        median_abs_pct: pct(quantile(&dev, 0.5)),
        p90_abs_pct: pct(quantile(&dev, 0.9)),
        within_median_abs_pct: pct(quantile(&within, 0.5)),
        within_p90_abs_pct: pct(quantile(&within, 0.9)),
        mean_abs_log_bound_pct: 100.0 * hard.iter().sum::<f64>() / hard.len() as f64,
    })
}
