//! Applications: measured profiles and the ground-truth performance model the
//! simulator runs jobs on.
//!
//! The six Pollux applications (bert, cifar10, deepspeech2, imagenet, ncf, yolov3)
//! are embedded from `crates/sim/data/pollux/` — measured by the Pollux authors on
//! AWS g4dn.12xlarge nodes (4 × T4), Apache-2.0, see `data/pollux/LICENSE` — so that
//! `pacer simulate` works on a fresh clone. Other folders in the same layout load
//! with [`load_app_dir`].
//!
//! The model ([`AppModel`]) answers three questions the way Pollux's own simulator
//! does, so results compare line by line:
//! - step and sync time of a placement and atomic batch: linear in the local batch
//!   between measured points of that exact placement (up to rotation); for
//!   placements not measured, a piecewise-linear interpolation over
//!   (nodes, replicas, local batch) from the per-(nodes, replicas) means of
//!   `placements.csv` plus `scalability.csv`. Pollux uses a Delaunay (LinearND)
//!   interpolation there; ours brackets the node count between measured levels and
//!   the replica count within each level, which is exact on measured points;
//! - gradient statistics at a global batch and epoch: linear between the two
//!   validated batch sizes around it;
//! - progress (base-batch-equivalent steps) at each epoch boundary, and the epoch a
//!   job completes at (the application's `max_epochs`, as configured by Pollux).
//!
//! The tables are ground truth on the device types their profile lists
//! ([`AppProfile::device_types`]; `t4` for every Pollux folder): the simulator places
//! a job only on those ([`crate::admit`]) rather than relabel T4 numbers as another
//! type's.

mod fabric;
mod sia;
mod tables;

pub use sia::{load_sia_dir, load_sia_dir_with, SIA_APPS};
pub use tables::canonical_placement;
pub(crate) use tables::Resolved;
use tables::{build_tables, fit_table, resolve, table_step_time, Curve, Level};

use pacer_model::profile::{self, AppProfile};
use pacer_model::ParseError;
use std::path::Path;

/// Epochs each embedded application trains for and its largest atomic batch, as
/// configured in Pollux's simulator (`applications.py`).
const POLLUX_APPS: &[(&str, usize, Option<f64>)] = &[
    ("bert", 2, None),
    ("cifar10", 100, None),
    ("deepspeech2", 80, None),
    ("imagenet", 90, None),
    ("ncf", 10, None),
    ("yolov3", 50, Some(8.0)),
];

macro_rules! embedded_app {
    ($name:literal, [$($b:literal),*]) => {
        (
            $name,
            include_str!(concat!("../../data/pollux/", $name, "/placements.csv")),
            include_str!(concat!("../../data/pollux/", $name, "/scalability.csv")),
            &[$(($b, include_str!(concat!("../../data/pollux/", $name, "/validation-", $b, ".csv")))),*],
        )
    };
}

type EmbeddedApp = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const EMBEDDED: &[EmbeddedApp] = &[
    embedded_app!("bert", ["12", "24", "48", "96", "192", "384"]),
    embedded_app!("cifar10", ["128", "256", "512", "1024", "2048", "4096"]),
    embedded_app!("deepspeech2", ["20", "40", "80", "160", "320", "640"]),
    embedded_app!(
        "imagenet",
        ["200", "400", "800", "1600", "3200", "6400", "12800"]
    ),
    embedded_app!(
        "ncf",
        ["256", "512", "1024", "2048", "4096", "8192", "16384", "32768"]
    ),
    embedded_app!("yolov3", ["8", "16", "32", "64", "128", "256", "512"]),
];

/// The eight Pollux 64-GPU workloads (160 jobs each), embedded.
pub const EMBEDDED_WORKLOADS: &[(&str, &str)] = &[
    (
        "workload-1",
        include_str!("../../data/pollux/workloads/workload-1.csv"),
    ),
    (
        "workload-2",
        include_str!("../../data/pollux/workloads/workload-2.csv"),
    ),
    (
        "workload-3",
        include_str!("../../data/pollux/workloads/workload-3.csv"),
    ),
    (
        "workload-4",
        include_str!("../../data/pollux/workloads/workload-4.csv"),
    ),
    (
        "workload-5",
        include_str!("../../data/pollux/workloads/workload-5.csv"),
    ),
    (
        "workload-6",
        include_str!("../../data/pollux/workloads/workload-6.csv"),
    ),
    (
        "workload-7",
        include_str!("../../data/pollux/workloads/workload-7.csv"),
    ),
    (
        "workload-8",
        include_str!("../../data/pollux/workloads/workload-8.csv"),
    ),
];

/// Parses the embedded profiles (a few ms; call once).
pub fn embedded_profiles() -> Vec<AppProfile> {
    EMBEDDED
        .iter()
        .map(|(name, placements, scalability, validation)| {
            let origin = |f: &str| format!("<embedded>/{name}/{f}");
            let curves = validation
                .iter()
                .map(|(b, text)| {
                    profile::parse_validation(
                        text,
                        b.parse().expect("embedded batch"),
                        &origin(&format!("validation-{b}.csv")),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
                .expect("embedded validation parses");
            AppProfile::new(
                name,
                profile::parse_placements(placements, &origin("placements.csv"))
                    .expect("embedded placements parse"),
                profile::parse_scalability(scalability, &origin("scalability.csv"))
                    .expect("embedded scalability parses"),
                curves,
            )
            .expect("embedded profile is valid")
        })
        .collect()
}

/// Errors reading an application folder.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The OS error is the `source` (`anyhow`'s `{:#}` appends it; repeating it in
    /// the message printed it twice).
    #[error("{path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// A file that could not be read, or is larger than its limit.
    #[error(transparent)]
    Read(#[from] pacer_fsio::ReadError),
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// Reads a folder in the Pollux layout (`placements.csv`, optional
/// `scalability.csv`, `validation-<batch>.csv`). The folder name is the app name.
pub fn load_app_dir(dir: &Path) -> Result<AppProfile, AppError> {
    let read = |p: &Path| pacer_fsio::read_to_string_limited(p, pacer_fsio::limits::TABLE);
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("app")
        .to_string();
    let pl_path = dir.join("placements.csv");
    let placements = profile::parse_placements(&read(&pl_path)?, &pl_path.display().to_string())?;
    let sc_path = dir.join("scalability.csv");
    let scalability = if sc_path.exists() {
        profile::parse_scalability(&read(&sc_path)?, &sc_path.display().to_string())?
    } else {
        Vec::new()
    };
    let mut curves = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|source| AppError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| AppError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let file = entry.file_name();
        if let Some(batch) = file.to_str().and_then(profile::validation_batch_from_name) {
            let p = entry.path();
            curves.push(profile::parse_validation(
                &read(&p)?,
                batch,
                &p.display().to_string(),
            )?);
        }
    }
    Ok(
        AppProfile::new(&dir.display().to_string(), placements, scalability, curves).map(
            |mut a| {
                a.name = name;
                a
            },
        )?,
    )
}

/// Ground-truth performance and convergence of one application.
#[derive(Debug, Clone)]
pub struct AppModel {
    pub profile: AppProfile,
    /// Exact placements (canonical rotation) → curve.
    exact: std::collections::HashMap<Vec<u32>, Curve>,
    /// Most nodes of an exact placement: a longer placement is not looked up
    /// (canonicalising costs O(nodes²), which a huge spread placement made slow).
    max_exact_nodes: usize,
    levels: Vec<Level>,
    /// Epochs to train (job completes after the last one).
    pub max_epochs: usize,
    /// Base (initial) global batch M0: the smallest validated batch.
    pub init_batch: f64,
    /// Largest validated global batch.
    pub max_batch: f64,
    pub min_local_bsz: f64,
    pub max_local_bsz: f64,
    /// Progress (base-batch steps) at the end of each epoch, `epoch_progress[e]`
    /// = progress after epoch e+1 (minimum over the measured runs, as Pollux does).
    epoch_progress: Vec<f64>,
    /// Per-device-type tables (Sia's `placements-<type>.csv`); empty for a Pollux
    /// folder, whose one table set is `exact` / `levels` above.
    typed: Vec<TypedTables>,
    /// Restart penalty of this application (s), when it has its own (Sia's
    /// `rescale_time`); `None`: the simulator's `restart_s`.
    pub restart_s: Option<f64>,
}

/// Ground truth of one application on one device type.
#[derive(Debug, Clone)]
pub struct TypedTables {
    pub device_type: String,
    exact: std::collections::HashMap<Vec<u32>, Curve>,
    max_exact_nodes: usize,
    levels: Vec<Level>,
    /// Largest local batch measured on this type.
    pub max_local_bsz: f64,
    /// Smallest local batch measured on this type.
    pub min_local_bsz: f64,
    /// Largest local batch measured per exact placement (canonical rotation), and
    /// per (nodes, replicas) of the scalability table: Sia's per-placement memory
    /// limit ([`AppModel::max_local_bsz_at`]).
    placement_max: std::collections::HashMap<Vec<u32>, f64>,
    replicas_max: std::collections::HashMap<u32, f64>,
    scalability_max: Vec<(u32, u32, f64)>,
    /// The Pollux step-time model fitted to every measured row of this type, the
    /// per-type performance model policies see (`JobView::goodput_by_type`).
    pub perf: Option<pacer_predict::goodput::PerfParams>,
    /// Sia's "min-GPU throughput" on this type: largest local batch over largest
    /// step time among the one-device rows (samples/s). What Sia's simulator knows
    /// of every type before a job has run there; it projects one type's profile to
    /// another by the ratio of these (`cluster.py`: `compute_throughput_ratios`).
    pub min_gpu_xput: f64,
    /// Largest local batch among the one-device rows (the batch of
    /// [`TypedTables::min_gpu_xput`]).
    pub one_gpu_max_bsz: f64,
    /// The step-time model fitted to this type's one-device rows only: the profile
    /// a job starts with on a type it has not run on anywhere (online profiles,
    /// `crates/sim/src/engine/online.rs`).
    pub bootstrap: Option<pacer_predict::goodput::PerfParams>,
    /// A hash of every measured row (type name, placements, scalability): what a
    /// cache of results computed from these tables is keyed by.
    pub(crate) fingerprint: u64,
}

/// A deterministic hash of one type's measured rows ([`TypedTables::fingerprint`]).
fn fingerprint(t: &TypeProfile) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    t.device_type.hash(&mut h);
    for r in &t.placements {
        r.placement.hash(&mut h);
        for v in [r.local_bsz, r.step_time_s, r.sync_time_s] {
            v.to_bits().hash(&mut h);
        }
    }
    for r in &t.scalability {
        (r.num_nodes, r.num_replicas).hash(&mut h);
        for v in [r.local_bsz, r.step_time_s, r.sync_time_s] {
            v.to_bits().hash(&mut h);
        }
    }
    h.finish()
}

/// One device type's measured tables, as read from `placements-<type>.csv` and
/// `scalability-<type>.csv`.
#[derive(Debug, Clone)]
pub struct TypeProfile {
    pub device_type: String,
    pub placements: Vec<profile::PlacementRow>,
    pub scalability: Vec<profile::ScalabilityRow>,
}

impl AppModel {
    /// Builds the model. `max_epochs` / `max_local_bsz` default to Pollux's settings for
    /// the six known applications and otherwise to the shortest curve / largest batch.
    pub fn new(profile: AppProfile) -> AppModel {
        let known = POLLUX_APPS.iter().find(|a| a.0 == profile.name);
        let shortest = profile
            .validation
            .iter()
            .map(|c| c.rows.len())
            .min()
            .unwrap_or(1);
        let max_epochs = known.map(|a| a.1).unwrap_or(shortest).min(shortest).max(1);
        let (min_local_bsz, measured_max) = profile.local_bsz_range();
        let max_local_bsz = known.and_then(|a| a.2).unwrap_or(measured_max);
        let (exact, max_exact_nodes, levels) =
            build_tables(&profile.placements, &profile.scalability);
        let epoch_progress = (0..max_epochs)
            .map(|e| {
                profile
                    .validation
                    .iter()
                    .map(|c| c.rows[e].progress)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        AppModel {
            init_batch: profile.min_batch() as f64,
            max_batch: profile.max_batch() as f64,
            profile,
            exact,
            max_exact_nodes,
            levels,
            max_epochs,
            min_local_bsz,
            max_local_bsz,
            epoch_progress,
            typed: Vec::new(),
            restart_s: None,
        }
    }

    /// Builds a model with ground truth per device type: `types[0]`'s tables are also
    /// the type-less default ([`AppModel::step_time`]); the profile's
    /// `device_types` become the types given. The batch limits are the ones every
    /// type can run (largest of the smallest, smallest of the largest local batch).
    pub fn with_types(mut profile: AppProfile, types: Vec<TypeProfile>) -> AppModel {
        if let Some(first) = types.first() {
            profile.placements = first.placements.clone();
            profile.scalability = first.scalability.clone();
            profile.device_types = types.iter().map(|t| t.device_type.clone()).collect();
        }
        let mut m = AppModel::new(profile);
        let mut max_local = f64::INFINITY;
        let mut min_local: f64 = 0.0;
        for t in types {
            let (exact, max_exact_nodes, levels) = build_tables(&t.placements, &t.scalability);
            let (lo, hi) = t
                .placements
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
                    (lo.min(r.local_bsz), hi.max(r.local_bsz))
                });
            min_local = min_local.max(lo);
            max_local = max_local.min(hi);
            let one: Vec<profile::PlacementRow> = t
                .placements
                .iter()
                .filter(|r| r.num_replicas() == 1)
                .cloned()
                .collect();
            let (bsz, step) = one.iter().fold((0.0f64, 0.0f64), |(b, s), r| {
                (b.max(r.local_bsz), s.max(r.step_time_s))
            });
            let mut placement_max: std::collections::HashMap<Vec<u32>, f64> = Default::default();
            let mut replicas_max: std::collections::HashMap<u32, f64> = Default::default();
            for r in &t.placements {
                let e = placement_max
                    .entry(canonical_placement(&r.placement))
                    .or_insert(0.0);
                *e = e.max(r.local_bsz);
                let e = replicas_max.entry(r.num_replicas()).or_insert(0.0);
                *e = e.max(r.local_bsz);
            }
            let scalability_max = t
                .scalability
                .iter()
                .map(|r| (r.num_nodes, r.num_replicas, r.local_bsz))
                .collect();
            m.typed.push(TypedTables {
                fingerprint: fingerprint(&t),
                min_local_bsz: lo,
                placement_max,
                replicas_max,
                scalability_max,
                perf: fit_table(&t.placements),
                min_gpu_xput: if step > 0.0 { bsz / step } else { 0.0 },
                one_gpu_max_bsz: bsz,
                bootstrap: fit_table(&one),
                device_type: t.device_type,
                exact,
                max_exact_nodes,
                levels,
                max_local_bsz: hi,
            });
        }
        if !m.typed.is_empty() {
            m.min_local_bsz = min_local;
            if POLLUX_APPS
                .iter()
                .all(|a| a.0 != m.profile.name || a.2.is_none())
            {
                m.max_local_bsz = max_local.max(min_local);
            } else {
                m.max_local_bsz = m.max_local_bsz.min(max_local).max(min_local);
            }
        }
        m
    }

    /// Per-device-type tables (empty for a Pollux folder).
    pub fn typed(&self) -> &[TypedTables] {
        &self.typed
    }

    /// Index into [`AppModel::typed`] of device type `ty`.
    pub fn type_index(&self, ty: &str) -> Option<usize> {
        self.typed.iter().position(|t| t.device_type == ty)
    }

    /// Largest local batch on device type `ty` (a fixed-batch job's accumulation
    /// steps follow it, as in Sia's simulator): the type's measured largest, capped
    /// by the application's own limit where Pollux sets one (yolov3); the common
    /// limit for a type without tables or `None`.
    pub fn max_local_bsz_on(&self, ty: Option<&str>) -> f64 {
        let cap = POLLUX_APPS
            .iter()
            .find(|a| a.0 == self.profile.name)
            .and_then(|a| a.2)
            .unwrap_or(f64::INFINITY);
        ty.and_then(|t| self.type_index(t))
            .map_or(self.max_local_bsz, |k| {
                self.typed[k].max_local_bsz.min(cap).max(self.min_local_bsz)
            })
    }

    /// Local batch range `(min, max)` an adaptive job chooses from on device type
    /// `ty`, as Sia's simulator has it (each type's `Application` takes its own
    /// table's smallest and largest local batch): the type's measured range for a
    /// per-type application, else the application's limits.
    pub fn local_bsz_range_on(&self, ty: Option<&str>) -> (f64, f64) {
        match ty.and_then(|t| self.type_index(t)) {
            Some(k) => (self.typed[k].min_local_bsz, self.typed[k].max_local_bsz),
            None => (self.min_local_bsz, self.max_local_bsz),
        }
    }

    /// Largest local batch of one replica on `placement` of device type `ty`, Sia's
    /// per-placement memory limit (`Application.get_max_local_bsz`): the largest
    /// measured for that exact placement (up to rotation), else the largest among the
    /// scalability rows with at least its nodes and replicas; the type's largest when
    /// neither has one (and the application's limit for a type without tables).
    pub fn max_local_bsz_at(&self, ty: Option<&str>, placement: &[u32]) -> f64 {
        let Some(t) = ty.and_then(|t| self.type_index(t)).map(|k| &self.typed[k]) else {
            return self.max_local_bsz;
        };
        if let Some(&b) = t.placement_max.get(&canonical_placement(placement)) {
            return b;
        }
        let nodes = placement.iter().filter(|&&x| x > 0).count() as u32;
        let replicas: u32 = placement.iter().sum();
        t.scalability_max
            .iter()
            .filter(|r| r.0 >= nodes && r.1 >= replicas)
            .map(|r| r.2)
            .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b))))
            .unwrap_or(t.max_local_bsz)
    }

    /// Largest local batch measured on type `ty` for any placement of `replicas`
    /// devices (Sia's atomic-batch correction after a batch choice); `None` when
    /// no placement of that size was measured.
    pub fn max_local_bsz_for_replicas(&self, ty: Option<&str>, replicas: u32) -> Option<f64> {
        let k = ty.and_then(|t| self.type_index(t))?;
        self.typed[k].replicas_max.get(&replicas).copied()
    }

    /// `(step_time_s, sync_time_s)` on device type `ty`: its own tables when the
    /// application has per-type tables for it, else the default ones.
    pub fn step_time_on(&self, ty: &str, placement: &[u32], atomic_bsz: f64) -> (f64, f64) {
        match self.typed.iter().find(|t| t.device_type == ty) {
            Some(t) => table_step_time(
                &t.exact,
                t.max_exact_nodes,
                &t.levels,
                placement,
                atomic_bsz,
            ),
            None => self.step_time(placement, atomic_bsz),
        }
    }

    pub fn name(&self) -> &str {
        &self.profile.name
    }

    /// The rows of `typed()[k]`'s tables that `placement` reads, found once
    /// ([`AppModel::step_time_on`] at any local batch, without the look-up).
    pub(crate) fn table_at(&self, k: usize, placement: &[u32]) -> Resolved<'_> {
        let t = &self.typed[k];
        resolve(&t.exact, t.max_exact_nodes, &t.levels, placement)
    }

    /// `(step_time_s, sync_time_s)` of one optimiser step without accumulation.
    pub fn step_time(&self, placement: &[u32], atomic_bsz: f64) -> (f64, f64) {
        table_step_time(
            &self.exact,
            self.max_exact_nodes,
            &self.levels,
            placement,
            atomic_bsz,
        )
    }

    /// Progress (base-batch steps) needed to finish the job.
    pub fn target_progress(&self) -> f64 {
        self.epoch_progress[self.max_epochs - 1]
    }

    /// Progress at the end of `epoch` (0-based), i.e. the next boundary while in it.
    pub fn epoch_end_progress(&self, epoch: usize) -> f64 {
        self.epoch_progress[epoch.min(self.max_epochs - 1)]
    }

    /// The two validated batches bracketing `batch` and the weight of the upper one.
    fn bracket(&self, batch: f64) -> (usize, usize, f64) {
        let v = &self.profile.validation;
        let b = batch.clamp(v[0].global_batch as f64, v[v.len() - 1].global_batch as f64);
        let hi = v
            .partition_point(|c| (c.global_batch as f64) < b)
            .min(v.len() - 1);
        if v[hi].global_batch as f64 == b || hi == 0 {
            return (hi, hi, 0.0);
        }
        let lo = hi - 1;
        let (bl, bh) = (v[lo].global_batch as f64, v[hi].global_batch as f64);
        (lo, hi, (b - bl) / (bh - bl))
    }

    /// Gradient statistics `(sqr, var)` during `epoch` at global batch `batch`.
    pub fn grad_stats(&self, batch: f64, epoch: usize) -> (f64, f64) {
        let (lo, hi, t) = self.bracket(batch);
        let v = &self.profile.validation;
        let row = |i: usize| {
            let rows = &v[i].rows;
            let r = &rows[epoch.min(rows.len() - 1)];
            (r.grad_sqr, r.grad_var)
        };
        let (s0, v0) = row(lo);
        let (s1, v1) = row(hi);
        (s0 + t * (s1 - s0), v0 + t * (v1 - v0))
    }

    /// Base-batch steps one step at global batch `batch` is worth (AdaScale gain).
    pub fn gain(&self, batch: f64, epoch: usize) -> f64 {
        let (sqr, var) = self.grad_stats(batch, epoch);
        let scale = batch / self.init_batch;
        let denom = var / scale + sqr;
        if denom > 0.0 {
            (var + sqr) / denom
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> AppModel {
        AppModel::new(
            embedded_profiles()
                .into_iter()
                .find(|p| p.name == name)
                .unwrap(),
        )
    }

    #[test]
    fn embedded_profiles_parse() {
        let ps = embedded_profiles();
        assert_eq!(ps.len(), 6);
        for p in &ps {
            assert!(p.placements.len() > 100, "{}", p.name);
            assert!(p.validation.len() >= 6, "{}", p.name);
        }
    }

    #[test]
    fn rotation_canonical() {
        assert_eq!(canonical_placement(&[2, 1]), vec![1, 2]);
        assert_eq!(canonical_placement(&[3, 2, 1]), vec![1, 3, 2]);
        assert_eq!(canonical_placement(&[0, 4, 0, 4]), vec![4, 4]);
    }

    #[test]
    fn exact_points_are_reproduced_and_interpolation_is_between_neighbours() {
        let m = model("cifar10");
        let row = m
            .profile
            .placements
            .iter()
            .find(|r| r.placement == vec![2, 2] && r.local_bsz == 64.0)
            .unwrap();
        let (s, y) = m.step_time(&[2, 2], 64.0);
        assert!((s - row.step_time_s).abs() < 1e-12 && (y - row.sync_time_s).abs() < 1e-12);
        let a = m.step_time(&[2, 2], 45.0).0;
        let b = m.step_time(&[2, 2], 64.0).0;
        let mid = m.step_time(&[2, 2], 54.5).0;
        assert!(mid >= a.min(b) && mid <= a.max(b));
        // A measured scalability level is reproduced.
        let sr = m
            .profile
            .scalability
            .iter()
            .find(|r| r.num_nodes == 8 && r.num_replicas == 32 && r.local_bsz == 64.0);
        if let Some(sr) = sr {
            let (s, _) = m.step_time(&[4; 8], 64.0);
            assert!((s - sr.step_time_s).abs() < 1e-9);
        }
        // Five nodes: between the 4- and 6-node levels.
        let five = m.step_time(&[4, 4, 4, 4, 4], 64.0).0;
        assert!(five.is_finite() && five > 0.0);
    }

    /// A Sia-layout folder in a fresh temp dir: `files` are (app/file, text).
    /// The folder is removed when the returned guard drops.
    fn sia_dir(tag: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("pacer-sia-{tag}-"))
            .tempdir()
            .unwrap();
        let root = tmp.path().to_path_buf();
        for (f, text) in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        (tmp, root)
    }

    const PL: &str =
        "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n1,16,0.2,0.01\n2,8,0.12,0.03\n";
    const SC: &str =
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,8,0.3,0.1\n2,8,16,0.4,0.1\n";
    const VAL: &str =
        "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1.0,2.0\n20,20,0.6,1.0,2.0\n";

    #[test]
    fn sia_layout_loads_per_type_and_calibrates() {
        let (_tmp, root) = sia_dir(
            "ok",
            &[
                ("cifar10/placements-fast.csv", PL),
                ("cifar10/scalability-fast.csv", SC),
                ("cifar10/placements-slow.csv", &PL.replace("0.1,", "0.3,")),
                ("cifar10/scalability-slow.csv", SC),
                ("cifar10/validation-16.csv", VAL),
                ("cifar10/validation-32.csv", VAL),
            ],
        );
        let raw = load_sia_dir(&root, false).unwrap();
        let cal = load_sia_dir(&root, true).unwrap();
        assert_eq!(raw.len(), 1);
        let (r, c) = (&raw[0], &cal[0]);
        assert_eq!(r.name(), "cifar10");
        assert_eq!(r.typed().len(), 2);
        assert!(r.profile.measured_on("fast") && r.profile.measured_on("slow"));
        let fast = r.step_time_on("fast", &[1], 8.0).0;
        let slow = r.step_time_on("slow", &[1], 8.0).0;
        assert!((fast - 0.1).abs() < 1e-12 && (slow - 0.3).abs() < 1e-12);
        // Sia's cifar10 calibration slowdown, 1.8, and restart penalty, 50 s.
        assert!((c.step_time_on("fast", &[1], 8.0).0 - 0.18).abs() < 1e-12);
        assert_eq!(c.restart_s, Some(50.0));
        assert!(r.typed().iter().all(|t| t.perf.is_some()));
    }

    /// Sia's per-type batch limits: each type's own measured local batch range, and
    /// per placement the largest measured there (else the scalability rows that
    /// cover it), not one range common to every type.
    #[test]
    fn sia_batch_limits_are_per_type_and_placement() {
        let big = "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n1,48,0.3,0.01\n\
                   2,8,0.12,0.03\n2,24,0.2,0.03\n";
        let big_sc = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n\
                      2,8,8,0.3,0.1\n2,8,32,0.5,0.1\n";
        let (_tmp, root) = sia_dir(
            "limits",
            &[
                ("bert/placements-small.csv", PL),
                ("bert/scalability-small.csv", SC),
                ("bert/placements-big.csv", big),
                ("bert/scalability-big.csv", big_sc),
                ("bert/validation-16.csv", VAL),
            ],
        );
        let apps = load_sia_dir(&root, true).unwrap();
        let m = &apps[0];
        // The common range (used by fixed-batch jobs' defaults) is the narrowest.
        assert_eq!((m.min_local_bsz, m.max_local_bsz), (8.0, 16.0));
        assert_eq!(m.local_bsz_range_on(Some("big")), (8.0, 48.0));
        assert_eq!(m.local_bsz_range_on(Some("small")), (8.0, 16.0));
        assert_eq!(m.local_bsz_range_on(None), (8.0, 16.0));
        // Exact placements: their own largest measured batch.
        assert_eq!(m.max_local_bsz_at(Some("big"), &[1]), 48.0);
        assert_eq!(m.max_local_bsz_at(Some("big"), &[2]), 24.0);
        // Not measured exactly: the scalability rows with at least its nodes and
        // replicas; none: the type's largest.
        assert_eq!(m.max_local_bsz_at(Some("big"), &[2, 2]), 32.0);
        assert_eq!(m.max_local_bsz_at(Some("big"), &[8, 8, 8]), 48.0);
        assert_eq!(m.max_local_bsz_for_replicas(Some("big"), 2), Some(24.0));
        assert_eq!(m.max_local_bsz_for_replicas(Some("big"), 3), None);
        assert_eq!(m.max_local_bsz_at(None, &[1]), 16.0);
    }

    #[test]
    fn sia_layout_errors_name_the_file() {
        let (_tmp, root) = sia_dir(
            "one-row",
            &[
                (
                    "bert/placements-aws.csv",
                    "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n",
                ),
                ("bert/scalability-aws.csv", SC),
                ("bert/validation-16.csv", VAL),
            ],
        );
        let e = load_sia_dir(&root, true).unwrap_err().to_string();
        assert!(
            e.contains("placements-aws.csv") && e.contains("at least 2"),
            "{e}"
        );
        let (_tmp, root) = sia_dir(
            "no-scal",
            &[
                ("bert/placements-aws.csv", PL),
                ("bert/validation-16.csv", VAL),
            ],
        );
        let e = load_sia_dir(&root, true).unwrap_err().to_string();
        assert!(
            e.contains("scalability-aws.csv") && e.contains("missing"),
            "{e}"
        );
        let (_tmp, root) = sia_dir("no-types", &[("bert/validation-16.csv", VAL)]);
        let e = load_sia_dir(&root, true).unwrap_err().to_string();
        assert!(e.contains("placements-<type>.csv"), "{e}");
        // An application without a table for a type another one has.
        let (_tmp, root) = sia_dir(
            "type-gap",
            &[
                ("bert/placements-aws.csv", PL),
                ("bert/scalability-aws.csv", SC),
                ("bert/placements-rtx.csv", PL),
                ("bert/scalability-rtx.csv", SC),
                ("bert/validation-16.csv", VAL),
                ("ncf/placements-aws.csv", PL),
                ("ncf/scalability-aws.csv", SC),
                ("ncf/validation-16.csv", VAL),
            ],
        );
        let e = load_sia_dir(&root, true).unwrap_err().to_string();
        assert!(
            e.contains("ncf/placements-rtx.csv") && e.contains("no table for device type `rtx`"),
            "{e}"
        );
    }

    #[test]
    fn progress_and_gain() {
        let m = model("cifar10");
        assert_eq!(m.max_epochs, 100);
        assert!(m.target_progress() > m.epoch_end_progress(0));
        assert!((m.gain(m.init_batch, 3) - 1.0).abs() < 1e-12);
        let g = m.gain(4.0 * m.init_batch, 3);
        assert!(g > 1.0 && g <= 4.0 + 1e-9);
    }
}
