//! The measured tables of one application as curves: exact placements (up to
//! rotation) and the interpolation grid over (nodes, replicas, local batch).

use pacer_model::profile;

/// (local batch, step time, sync time) samples per (nodes, replicas).
type PointsByShape = std::collections::BTreeMap<(u32, u32), Vec<(f64, f64, f64)>>;

/// Step/sync time samples of one (nodes, replicas) level, sorted by local batch.
#[derive(Debug, Clone)]
pub(crate) struct Curve {
    bsz: Vec<f64>,
    step: Vec<f64>,
    sync: Vec<f64>,
}

impl Curve {
    pub(super) fn from_points(mut pts: Vec<(f64, f64, f64)>) -> Curve {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Average duplicates (same local batch measured twice).
        let mut c = Curve {
            bsz: Vec::new(),
            step: Vec::new(),
            sync: Vec::new(),
        };
        let mut i = 0;
        while i < pts.len() {
            let mut j = i;
            let (mut s, mut y) = (0.0, 0.0);
            while j < pts.len() && pts[j].0 == pts[i].0 {
                s += pts[j].1;
                y += pts[j].2;
                j += 1;
            }
            let n = (j - i) as f64;
            c.bsz.push(pts[i].0);
            c.step.push(s / n);
            c.sync.push(y / n);
            i = j;
        }
        c
    }

    /// (step, sync) at local batch `b`, linear between samples, clamped at the ends.
    pub(super) fn at(&self, b: f64) -> (f64, f64) {
        let n = self.bsz.len();
        if b <= self.bsz[0] || n == 1 {
            return (self.step[0], self.sync[0]);
        }
        if b >= self.bsz[n - 1] {
            return (self.step[n - 1], self.sync[n - 1]);
        }
        let k = self.bsz.partition_point(|&x| x <= b) - 1;
        let t = (b - self.bsz[k]) / (self.bsz[k + 1] - self.bsz[k]);
        (
            self.step[k] + t * (self.step[k + 1] - self.step[k]),
            self.sync[k] + t * (self.sync[k + 1] - self.sync[k]),
        )
    }
}

/// One node-count level of the scattered grid: replica counts with their curves.
#[derive(Debug, Clone)]
pub(crate) struct Level {
    nodes: u32,
    replicas: Vec<(u32, Curve)>,
}

pub(super) type Tables = (
    std::collections::HashMap<Vec<u32>, Curve>,
    usize,
    Vec<Level>,
);

/// Exact-placement curves and the interpolation grid of one table set.
pub(super) fn build_tables(
    placements: &[profile::PlacementRow],
    scalability: &[profile::ScalabilityRow],
) -> Tables {
    let mut exact_pts: std::collections::HashMap<Vec<u32>, Vec<(f64, f64, f64)>> =
        Default::default();
    let mut grid: PointsByShape = Default::default();
    for r in placements {
        exact_pts
            .entry(canonical_placement(&r.placement))
            .or_default()
            .push((r.local_bsz, r.step_time_s, r.sync_time_s));
        grid.entry((r.num_nodes(), r.num_replicas()))
            .or_default()
            .push((r.local_bsz, r.step_time_s, r.sync_time_s));
    }
    // Per-(nodes, replicas, bsz) means of placements, then scalability rows.
    let mut grid: std::collections::BTreeMap<(u32, u32), Curve> = grid
        .into_iter()
        .map(|(k, v)| (k, Curve::from_points(v)))
        .collect();
    let mut scal: PointsByShape = Default::default();
    for r in scalability {
        scal.entry((r.num_nodes, r.num_replicas))
            .or_default()
            .push((r.local_bsz, r.step_time_s, r.sync_time_s));
    }
    for (k, v) in scal {
        grid.entry(k).or_insert_with(|| Curve::from_points(v));
    }
    let mut levels: Vec<Level> = Vec::new();
    for ((n, r), c) in grid {
        match levels.last_mut() {
            Some(l) if l.nodes == n => l.replicas.push((r, c)),
            _ => levels.push(Level {
                nodes: n,
                replicas: vec![(r, c)],
            }),
        }
    }
    let max_exact_nodes = exact_pts.keys().map(Vec::len).max().unwrap_or(0);
    let exact = exact_pts
        .into_iter()
        .map(|(k, v)| (k, Curve::from_points(v)))
        .collect();
    (exact, max_exact_nodes, levels)
}

/// Step and sync time from one table set (see [`AppModel::step_time`]).
pub(super) fn table_step_time(
    exact: &std::collections::HashMap<Vec<u32>, Curve>,
    max_exact_nodes: usize,
    levels: &[Level],
    placement: &[u32],
    atomic_bsz: f64,
) -> (f64, f64) {
    resolve(exact, max_exact_nodes, levels, placement).at(atomic_bsz)
}

/// The rows of one table set a placement reads, found once: the placement's own
/// measured curve (up to rotation), else the interpolation grid at its node count
/// (clamped at the largest measured) and replica count. [`Resolved::at`] is then
/// [`table_step_time`] at any local batch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resolved<'a> {
    Exact(&'a Curve),
    Grid {
        levels: &'a [Level],
        nodes: u32,
        replicas: u32,
    },
}

impl Resolved<'_> {
    /// `(step, sync)` seconds at local batch `b`.
    pub(crate) fn at(&self, b: f64) -> (f64, f64) {
        match *self {
            Resolved::Exact(c) => c.at(b),
            Resolved::Grid {
                levels,
                nodes,
                replicas,
            } => interpolate(levels, nodes, replicas, b),
        }
    }
}

/// [`Resolved`] rows of `placement` in one table set.
pub(super) fn resolve<'a>(
    exact: &'a std::collections::HashMap<Vec<u32>, Curve>,
    max_exact_nodes: usize,
    levels: &'a [Level],
    placement: &[u32],
) -> Resolved<'a> {
    let used = placement.iter().filter(|&&x| x > 0).count();
    if used <= max_exact_nodes {
        if let Some(c) = exact.get(&canonical_placement(placement)) {
            return Resolved::Exact(c);
        }
    }
    let nodes = (used as u32).min(levels.last().map(|l| l.nodes).unwrap_or(1));
    let replicas: u32 = placement.iter().sum();
    Resolved::Grid {
        levels,
        nodes,
        replicas,
    }
}

fn level_at(level: &Level, replicas: u32, b: f64) -> (f64, f64) {
    let rs = &level.replicas;
    if replicas <= rs[0].0 {
        return rs[0].1.at(b);
    }
    let last = rs.len() - 1;
    if replicas >= rs[last].0 {
        return rs[last].1.at(b);
    }
    let k = rs.partition_point(|x| x.0 <= replicas) - 1;
    let (s0, y0) = rs[k].1.at(b);
    let (s1, y1) = rs[k + 1].1.at(b);
    let t = (replicas - rs[k].0) as f64 / (rs[k + 1].0 - rs[k].0) as f64;
    (s0 + t * (s1 - s0), y0 + t * (y1 - y0))
}

fn interpolate(ls: &[Level], nodes: u32, replicas: u32, b: f64) -> (f64, f64) {
    let k = ls.partition_point(|l| l.nodes <= nodes);
    if k == 0 {
        return level_at(&ls[0], replicas, b);
    }
    let lo = &ls[k - 1];
    if lo.nodes == nodes || k == ls.len() {
        return level_at(lo, replicas, b);
    }
    let hi = &ls[k];
    let (s0, y0) = level_at(lo, replicas, b);
    let (s1, y1) = level_at(hi, replicas, b);
    let t = (nodes - lo.nodes) as f64 / (hi.nodes - lo.nodes) as f64;
    (s0 + t * (s1 - s0), y0 + t * (y1 - y0))
}

/// The Pollux step-time model fitted to every measured placement row.
pub(super) fn fit_table(
    placements: &[profile::PlacementRow],
) -> Option<pacer_predict::goodput::PerfParams> {
    let mut obs: Vec<pacer_predict::goodput::PerfObservation> = placements
        .iter()
        .map(|r| pacer_predict::goodput::PerfObservation {
            nodes: r.num_nodes(),
            replicas: r.num_replicas(),
            atomic_bsz: r.local_bsz,
            compute_time_s: (r.step_time_s - r.sync_time_s).max(1e-9),
            step_time_s: r.step_time_s,
        })
        .collect();
    obs.sort_by(|a, b| {
        (a.nodes, a.replicas)
            .cmp(&(b.nodes, b.replicas))
            .then(a.atomic_bsz.total_cmp(&b.atomic_bsz))
    });
    pacer_control::job::decide::fit_step_model(&obs, None).ok()
}

/// Canonical form of a placement: zeros dropped, lexicographically smallest rotation.
pub fn canonical_placement(p: &[u32]) -> Vec<u32> {
    let p: Vec<u32> = p.iter().copied().filter(|&x| x > 0).collect();
    let mut best = p.clone();
    for i in 1..p.len() {
        let rot: Vec<u32> = p[i..].iter().chain(p[..i].iter()).copied().collect();
        if rot < best {
            best = rot;
        }
    }
    best
}
