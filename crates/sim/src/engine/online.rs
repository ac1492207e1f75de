//! Per-device-type performance profiles learned online, as Sia's simulator learns
//! them (`SimConfig::profiles` = [`ProfileMode::Online`]).
//!
//! Sia's simulator (`sia-simulator/job.py`, `sia.py` with `--project_throughput`)
//! starts every job with an empty profile per device type, adds a point
//! (nodes, replicas, local batch) → (step, sync) each time the job runs there and
//! refits that type's step-time model from those points only. A type the job has
//! not run on is projected from a type it has run on (the first in cluster order)
//! by the ratio of the two types' one-device throughputs from the tables
//! ([`crate::apps::TypedTables::min_gpu_xput`]); before the job has run anywhere
//! Sia knows only those one-device throughputs. Here that start is the model
//! fitted to the type's one-device rows ([`crate::apps::TypedTables::bootstrap`]).
//!
//! With [`ProfileMode::Fitted`] (the default) policies get each type's model fitted
//! to the type's whole table from the start: more than Sia knows.

use super::fit_memo::memoised_fit;
use super::*;
use crate::apps::TypedTables;
use pacer_policy::TypeProjection;
use pacer_predict::goodput::{GoodputFn, PerfObservation};
use std::collections::BTreeMap;

/// Which per-type performance model policies see for per-type applications.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProfileMode {
    /// Each type's model fitted to its whole table, known from the start.
    #[default]
    Fitted,
    /// Learned from the points the job has run at (Sia's online profiles).
    Online,
}

impl std::str::FromStr for ProfileMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fitted" => Ok(ProfileMode::Fitted),
            "online" => Ok(ProfileMode::Online),
            _ => Err(format!("`{s}`: expected fitted or online")),
        }
    }
}

/// One measurement: (nodes, replicas, atomic batch) → (step, sync) seconds.
type Point = ((u32, u32, u32), (f64, f64));

/// (nodes, replicas, atomic batch) → (step, sync) seconds.
type Points = BTreeMap<(u32, u32, u32), (f64, f64)>;

/// One job's online profiles, indexed by the application's type index
/// ([`AppModel::typed`]).
#[derive(Debug, Clone, Default)]
pub(super) struct OnlineProfiles {
    points: Vec<Points>,
    fits: Vec<Option<PerfParams>>,
    /// How types the job has not run on are projected (the policy's).
    pub(super) projection: TypeProjection,
}

impl OnlineProfiles {
    /// Adds the points measured on application type `t`; refits that type when
    /// some are new. Returns whether the type's model changed.
    pub(super) fn record(&mut self, t: usize, measured: impl IntoIterator<Item = Point>) -> bool {
        if self.points.len() <= t {
            self.points.resize_with(t + 1, Points::new);
            self.fits.resize(t + 1, None);
        }
        let before = self.points[t].len();
        for (k, v) in measured {
            self.points[t].entry(k).or_insert(v);
        }
        if self.points[t].len() == before {
            return false;
        }
        let obs: Vec<PerfObservation> = self.points[t]
            .iter()
            .map(|(&(n, r, b), &(s, y))| PerfObservation {
                nodes: n,
                replicas: r,
                atomic_bsz: b as f64,
                compute_time_s: (s - y).max(1e-9),
                step_time_s: s,
            })
            .collect();
        let fit = memoised_fit(&obs, None).ok();
        let changed = fit != self.fits[t];
        self.fits[t] = fit;
        changed
    }

    /// The points recorded on application type `t`.
    #[cfg(test)]
    pub(super) fn points(&self, t: usize) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.points
            .get(t)
            .into_iter()
            .flat_map(|p| p.keys().copied())
    }

    /// The job's step-time model per application type: its own fit where it has
    /// run; else the first type with a fit, its step times scaled by
    /// [`projection_ratio`]; else the type's one-device bootstrap.
    pub(super) fn models(&self, app: &AppModel) -> Vec<Option<PerfParams>> {
        let typed = app.typed();
        let seen = (0..typed.len()).find_map(|s| Some((s, self.fits.get(s).copied()??)));
        (0..typed.len())
            .map(|t| {
                if let Some(Some(p)) = self.fits.get(t) {
                    return Some(*p);
                }
                match seen.and_then(|(s, p)| {
                    Some((p, projection_ratio(self.projection, &typed[s], &typed[t])?))
                }) {
                    Some((p, k)) => Some(scale_perf(&p, k)),
                    None => typed[t].bootstrap,
                }
            })
            .collect()
    }
}

impl OnlineProfiles {
    /// Whether the job has its own fit on application type `t`.
    pub(super) fn has_fit(&self, t: usize) -> bool {
        matches!(self.fits.get(t), Some(Some(_)))
    }

    /// The application type whose batch limits go with [`OnlineProfiles::models`]'s
    /// model for type `t`: `t` itself where the job has a fit there or has run
    /// nowhere; else the type the model is projected from (Sia evaluates the
    /// projection with the source type's speedup function, its batch range
    /// included, `sia.py` `_compute_goodputs`).
    /// With [`TypeProjection::MatchedBatch`]: `t` itself, whose batch limits the job
    /// will run with there.
    pub(super) fn limits_type(&self, t: usize) -> usize {
        if let Some(Some(_)) = self.fits.get(t) {
            return t;
        }
        if self.projection == TypeProjection::MatchedBatch {
            return t;
        }
        (0..self.fits.len())
            .find(|&s| matches!(self.fits.get(s), Some(Some(_))))
            .unwrap_or(t)
    }
}

/// What a model fitted on type `s` is scaled by to stand for type `t`
/// ([`scale_perf`]): with [`TypeProjection::Sia`] the ratio of one-device throughputs
/// ([`crate::apps::TypedTables::min_gpu_xput`], each type at its own largest local
/// batch); with [`TypeProjection::MatchedBatch`] the ratio of the one-device step
/// times at the largest local batch both types measured on one device, from the
/// models fitted to their one-device rows (Sia's ratio where either has none).
/// `None`: no ratio (the type's bootstrap stands).
fn projection_ratio(mode: TypeProjection, s: &TypedTables, t: &TypedTables) -> Option<f64> {
    if mode == TypeProjection::MatchedBatch {
        let b = s.one_gpu_max_bsz.min(t.one_gpu_max_bsz);
        if let (Some(ps), Some(pt)) = (s.bootstrap, t.bootstrap) {
            let (ts, tt) = (ps.step_time(1, 1, b, 0), pt.step_time(1, 1, b, 0));
            if ts > 0.0 && tt > 0.0 && (tt / ts).is_finite() {
                return Some(tt / ts);
            }
        }
    }
    (t.min_gpu_xput > 0.0).then(|| s.min_gpu_xput / t.min_gpu_xput)
}

/// `p` with every step and sync time multiplied by `k` (throughput divided by
/// `k` at every configuration and batch: the model's times are homogeneous of
/// degree one in its α and β parameters).
pub(super) fn scale_perf(p: &PerfParams, k: f64) -> PerfParams {
    PerfParams {
        alpha_c: p.alpha_c * k,
        beta_c: p.beta_c * k,
        alpha_n: p.alpha_n * k,
        beta_n: p.beta_n * k,
        alpha_r: p.alpha_r * k,
        beta_r: p.beta_r * k,
        gamma: p.gamma,
    }
}

impl Simulation<'_> {
    /// Records what job state `st` measured on its current type since it moved
    /// there (the engine's `JobState::profile`) into its online profiles, bumping
    /// the goodput version when a model changed. Called when the job is viewed,
    /// each round, before a move clears that profile.
    pub(super) fn record_online(&self, app: &AppModel, st: &mut JobState) {
        let Some(t) = st.alloc.slots().first().and_then(|&(node, _)| {
            let ty = self.cluster.nodes[node.0 as usize].device_type;
            app.type_index(&self.cluster.device_types[ty.0 as usize])
        }) else {
            return;
        };
        let measured: Vec<Point> = st.profile.iter().map(|(&k, &v)| (k, v)).collect();
        if st.online.record(t, measured) {
            st.goodput_version += 1;
        }
    }

    /// Online goodput models per cluster device type of a per-type application
    /// (`None` for the types it has no tables for).
    pub(super) fn online_goodput_by_type(
        &self,
        app: &AppModel,
        st: &JobState,
    ) -> Vec<Option<GoodputFn>> {
        let models = st.online.models(app);
        let grad = st.grad.unwrap_or_else(|| {
            let (sqr, var) = app.grad_stats(app.init_batch, st.epoch);
            GradParams { sqr, var }
        });
        self.cluster
            .device_types
            .iter()
            .map(|name| {
                let t = app.type_index(name)?;
                let source = &app.typed()[st.online.limits_type(t)].device_type;
                Some(GoodputFn {
                    perf: models[t]?,
                    grad,
                    limits: limits_on(app, Some(source)),
                })
            })
            .collect()
    }

    /// Per cluster device type: whether the job has its own fit there
    /// (`JobView::measured_by_type`); empty under fitted profiles, where every
    /// type's model is fitted to its table.
    pub(super) fn measured_by_type(&self, app: &AppModel, st: &JobState) -> Vec<bool> {
        if self.config.profiles != ProfileMode::Online || app.typed().is_empty() {
            return Vec::new();
        }
        self.cluster
            .device_types
            .iter()
            .map(|name| app.type_index(name).is_some_and(|t| st.online.has_fit(t)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PL: &str = "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n1,16,0.2,0.01\n2,8,0.12,0.03\n2,16,0.22,0.03\n";

    /// `bert` with a `fast` type and a `slow` one (3× the step time), from a
    /// temporary folder in Sia's layout.
    fn app() -> AppModel {
        let slow = PL.replace("0.1,", "0.3,").replace("0.2,", "0.6,");
        app_of(PL, &slow)
    }

    /// `bert` with the placement tables `fast` and `slow` for its two types.
    fn app_of(fast: &str, slow: &str) -> AppModel {
        const SC: &str =
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,8,0.3,0.1\n2,8,16,0.4,0.1\n";
        const VAL: &str = "progress,iteration,metric,grad_sqr,grad_var\n100,100,0.5,1.0,2.0\n";
        let tmp = tempfile::Builder::new()
            .prefix("pacer-online-")
            .tempdir()
            .unwrap();
        let root = tmp.path().to_path_buf();
        for (f, text) in [
            ("bert/placements-fast.csv", fast),
            ("bert/scalability-fast.csv", SC),
            ("bert/placements-slow.csv", slow),
            ("bert/scalability-slow.csv", SC),
            ("bert/validation-16.csv", VAL),
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
            std::fs::write(p, text).expect("write");
        }
        let apps = crate::apps::load_sia_dir(&root, false).expect("test tables");
        apps.into_iter().next().expect("one app")
    }

    fn fit_of(points: &[Point]) -> PerfParams {
        let mut p = OnlineProfiles::default();
        p.record(0, points.iter().copied());
        p.fits[0].expect("fits")
    }

    #[test]
    fn online_models_use_only_the_points_run_at() {
        let app = app();
        assert!(app.typed().len() >= 2, "test app needs two types");
        let mut p = OnlineProfiles::default();
        // Before any run: the one-device bootstrap of every type.
        let boot: Vec<_> = app.typed().iter().map(|t| t.bootstrap).collect();
        assert_eq!(p.models(&app), boot);
        // Ran on type 1 at one and two devices of one node.
        let run = [((1, 1, 32), (0.20, 0.0)), ((1, 2, 32), (0.26, 0.05))];
        assert!(p.record(1, run));
        assert!(
            !p.record(1, run[..1].iter().copied()),
            "no new point, no refit"
        );
        let models = p.models(&app);
        let own = fit_of(&run);
        assert_eq!(models[1], Some(own));
        assert_ne!(models[1], app.typed()[1].perf, "not the table's fit");
        // Type 0 is projected from type 1 by the one-device throughput ratio, with
        // type 1's batch limits (Sia evaluates the source type's speedup function).
        let k = app.typed()[1].min_gpu_xput / app.typed()[0].min_gpu_xput;
        assert_eq!(models[0], Some(scale_perf(&own, k)));
        assert_eq!((p.limits_type(0), p.limits_type(1)), (1, 1));
        assert_eq!(OnlineProfiles::default().limits_type(0), 0);
        // The recorded points are exactly the ones run at.
        let mut seen: Vec<_> = p.points(1).collect();
        seen.sort();
        assert_eq!(seen, vec![(1, 1, 32), (1, 2, 32)]);
        assert_eq!(p.points(0).count(), 0);
    }

    #[test]
    fn matched_batch_projection_compares_types_at_a_batch_both_run() {
        // `fast` also measured one device at local batch 64 (more memory), where its
        // throughput is 4× its throughput at 16; at the batches both run the types
        // are alike.
        let big = PL.replace("1,16,0.2,0.01\n", "1,16,0.2,0.01\n1,64,0.2,0.01\n");
        let app = app_of(&big, PL);
        let (f, s) = (
            app.type_index("fast").unwrap(),
            app.type_index("slow").unwrap(),
        );
        let typed = app.typed();
        assert_eq!(
            (typed[f].one_gpu_max_bsz, typed[s].one_gpu_max_bsz),
            (64.0, 16.0)
        );
        let run = [((1, 1, 16), (0.20, 0.0)), ((1, 2, 16), (0.26, 0.05))];
        let sia_ratio = typed[f].min_gpu_xput / typed[s].min_gpu_xput;
        assert!((sia_ratio - 4.0).abs() < 1e-9, "{sia_ratio}");
        let mut p = OnlineProfiles::default();
        p.record(f, run);
        assert_eq!(
            p.models(&app)[s],
            Some(scale_perf(&fit_of(&run), sia_ratio))
        );
        assert_eq!(p.limits_type(s), f);
        // At one batch: the one-device fits' step times at local batch 16.
        p.projection = TypeProjection::MatchedBatch;
        let step = |t: usize| typed[t].bootstrap.unwrap().step_time(1, 1, 16.0, 0);
        let k = step(s) / step(f);
        assert!((0.5..2.0).contains(&k), "{k}");
        assert_eq!(p.models(&app)[s], Some(scale_perf(&fit_of(&run), k)));
        // Valued with the batch limits the job will run with on `slow`.
        assert_eq!(p.limits_type(s), s);
        assert_eq!(p.limits_type(f), f);
    }

    #[test]
    fn scaling_divides_throughput() {
        let p = fit_of(&[((1, 1, 16), (0.1, 0.0)), ((1, 2, 16), (0.15, 0.03))]);
        let q = scale_perf(&p, 2.0);
        let (a, b) = (p.step_time(1, 2, 16.0, 0), q.step_time(1, 2, 16.0, 0));
        assert!((b / a - 2.0).abs() < 1e-9, "{a} {b}");
    }

    #[test]
    fn mode_parses() {
        assert_eq!("online".parse(), Ok(ProfileMode::Online));
        assert_eq!("fitted".parse(), Ok(ProfileMode::Fitted));
        assert!("oracle"
            .parse::<ProfileMode>()
            .unwrap_err()
            .contains("fitted or online"));
    }
}
