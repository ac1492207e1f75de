//! # pacer-policy
//!
//! Cluster-level scheduling: which job holds which devices. Every policy
//! implements [`Policy`]: given a read-only [`ClusterView`] (the cluster, the
//! active jobs, what each holds now) it returns one [`Allocation`] per job.
//! The simulator and the real runtime both drive policies through this trait; a
//! policy never knows whether time is simulated.
//!
//! Policies (one file each; adding one is a new file plus a line in [`POLICIES`]):
//! - [`fifo`]: first come, first served, gang-scheduled, non-preemptive;
//! - [`fair`]: work-conserving max-min fair share, re-planned every round (with a
//!   time slice when there are more jobs than devices; `fair-qS`);
//! - [`tiresias`]: discretised two-queue least-attained-service (Tiresias 2D-LAS);
//! - [`pollux`]: goodput-driven, maximising the generalised mean (p = −1) of
//!   per-job speedups over fair share, with each job's batch chosen for goodput;
//! - [`gavel`]: heterogeneity-aware LPs over effective throughput per device
//!   type (`gavel-maxmin`, `gavel-ftf`, `gavel-maxsum`), realised round by round;
//! - [`themis`]: finish-time fairness by partial-allocation auctions over
//!   lease rounds (`themis`, knob f);
//! - [`slaq`]: quality-driven, workers to the jobs whose predicted normalised
//!   loss falls most.
//!
//! What a policy sees of a job is its [`JobView`], built by every driver through the one
//! builder, [`job_view::JobFacts::view`] (the replica bound with Pollux's exploration
//! cap, the goodput of a mix of device types).
//!
//! Heterogeneity: a job's [`JobView::speed`] says how fast it runs on each device
//! type of the cluster ([`SpeedTable`]); a job holds devices of one type at a time
//! (a mixed allocation runs at the slowest type's speed) — except under
//! `sia-pacer-mix` for a job that accepts a balanced mix ([`JobView::mixed`]).
//!
//! Architecture invariant: no I/O, no clock, no randomness without a seed; the
//! only time a policy sees is [`ClusterView::now_s`].

pub mod deadline;
pub mod dlas;
pub mod edf;
pub mod fair;
pub mod fifo;
pub mod gavel;
pub mod job_view;
pub mod place;
pub mod pollux;
pub mod registry;
pub mod sia;
pub mod slaq;
pub mod themis;
pub mod tiresias;

use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId};
use pacer_predict::goodput::GoodputFn;
use pacer_predict::loss_curve::LossCurve;
use std::sync::Arc;

pub use registry::*;

/// Speed of one job on one device type as a function of its device count.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpeedCurve {
    /// `(devices, work units per second)` on a consolidated placement, sorted by
    /// devices; linear from 0 below the first point, flat beyond the last (a job
    /// gains nothing from devices past its largest measured size), linear between.
    /// Empty: the job cannot run on this type.
    pub points: Vec<(u32, f64)>,
    /// Speed multiplier when the devices span more nodes than needed (Gavel's
    /// `_unconsolidated` throughputs over the consolidated ones; 1 = insensitive).
    pub spread_factor: f64,
}

impl SpeedCurve {
    /// A job measured at one size: `rate` at `devices`, linear below, flat above.
    pub fn single(devices: u32, rate: f64, spread_factor: f64) -> Self {
        SpeedCurve {
            points: vec![(devices.max(1), rate)],
            spread_factor,
        }
    }

    /// Work units per second on `devices` devices.
    pub fn rate(&self, devices: u32, consolidated: bool) -> f64 {
        if devices == 0 || self.points.is_empty() {
            return 0.0;
        }
        let d = devices as f64;
        let i = self.points.partition_point(|p| p.0 <= devices);
        let r = if i == 0 {
            let (d0, r0) = self.points[0];
            r0 * d / d0 as f64
        } else if i == self.points.len() {
            self.points[i - 1].1
        } else {
            let (d0, r0) = self.points[i - 1];
            let (d1, r1) = self.points[i];
            r0 + (r1 - r0) * (d - d0 as f64) / (d1 - d0) as f64
        };
        if consolidated {
            r
        } else {
            r * self.spread_factor
        }
    }

    /// Largest measured size (devices beyond it add nothing).
    pub fn max_useful(&self) -> u32 {
        self.points.last().map_or(0, |p| p.0)
    }

    /// The device counts a curve up to `top` is sampled at: 1, 2, 4, … below
    /// `top`, then `top` itself (at most 33 sizes for any `u32`). Doubling stops
    /// before it would overflow: `1u32 << k` wrapped past 2^31, so a request above
    /// 2^31 never ended the sequence and the table grew without bound.
    ///
    /// ```
    /// use pacer_policy::SpeedCurve;
    /// assert_eq!(SpeedCurve::doubling_sizes(6), vec![1, 2, 4, 6]);
    /// assert_eq!(SpeedCurve::doubling_sizes(1), vec![1]);
    /// assert_eq!(SpeedCurve::doubling_sizes(u32::MAX).len(), 33);
    /// ```
    pub fn doubling_sizes(top: u32) -> Vec<u32> {
        let top = top.max(1);
        let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |&d| d.checked_mul(2))
            .take_while(|&d| d < top)
            .collect();
        sizes.push(top);
        sizes
    }
}

/// How fast a job runs on each device type of the cluster (index = [`DeviceTypeId`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpeedTable {
    pub per_type: Vec<SpeedCurve>,
}

impl SpeedTable {
    /// The same curve on every one of `types` device types.
    pub fn uniform(types: usize, curve: SpeedCurve) -> Self {
        SpeedTable {
            per_type: vec![curve; types],
        }
    }

    /// Work units per second on `devices` devices of type `ty`.
    pub fn rate(&self, ty: DeviceTypeId, devices: u32, consolidated: bool) -> f64 {
        self.per_type
            .get(ty.0 as usize)
            .map_or(0.0, |c| c.rate(devices, consolidated))
    }

    /// Speed of an allocation: a job synchronises across its devices, so a mixed
    /// allocation runs at its slowest type; consolidated when it spans no more
    /// nodes than the devices need.
    pub fn rate_of(&self, cluster: &ClusterSpec, alloc: &Allocation) -> f64 {
        let r = alloc.replicas();
        if r == 0 {
            return 0.0;
        }
        let mut slowest = f64::INFINITY;
        let mut per_node = u32::MAX;
        let consolidated_nodes = |per: u32| r.div_ceil(per.max(1));
        // The rate is the same on every node of one type: read once per run of
        // nodes of the same type (the minimum of equal values is that value).
        let mut last_type = None;
        for &(node, _) in alloc.slots() {
            let n = &cluster.nodes[node.0 as usize];
            per_node = per_node.min(n.gpus);
            if last_type != Some(n.device_type) {
                last_type = Some(n.device_type);
                slowest = slowest.min(self.rate(n.device_type, r, true));
            }
        }
        if alloc.nodes() > consolidated_nodes(per_node) {
            // Spread: apply the slowest type's spread factor.
            let f = alloc
                .slots()
                .iter()
                .map(|&(node, _)| {
                    let t = cluster.nodes[node.0 as usize].device_type;
                    self.per_type
                        .get(t.0 as usize)
                        .map_or(1.0, |c| c.spread_factor)
                })
                .fold(f64::INFINITY, f64::min);
            slowest *= f;
        }
        slowest
    }
}

/// What a job reports about its training quality (SLAQ).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QualityView {
    /// Iterations done.
    pub iteration: f64,
    /// Loss after the latest iteration.
    pub loss: f64,
    /// Loss at the first iteration.
    pub first_loss: f64,
    /// SLAQ's normaliser: the largest per-iteration loss decrease seen.
    pub max_delta_per_iter: f64,
    /// The job's current fit of its loss curve, when it has one.
    pub curve: Option<LossCurve>,
}

impl QualityView {
    /// Predicted loss after iteration `k`: the fit anchored at the latest point, or,
    /// until there is a fit, the largest decrease continued (optimistic, so young
    /// jobs are explored).
    pub fn predict(&self, k: f64) -> f64 {
        match &self.curve {
            Some(c) => self.loss + c.value(k) - c.value(self.iteration),
            None => self.loss - self.max_delta_per_iter * (k - self.iteration),
        }
    }
}

/// What a policy may know about one active (arrived, unfinished) job.
#[derive(Debug, Clone)]
pub struct JobView {
    pub id: JobId,
    /// Arrival time (s).
    pub arrival_s: f64,
    /// GPU-seconds the job has held so far.
    pub attained_gpu_s: f64,
    /// Devices the user asked for (fixed-size policies give exactly this).
    pub requested_replicas: u32,
    /// Global batch the user asked for, when the driver knows it (`None`: not
    /// known). Sia's policy values a job's configurations at batches up to it.
    pub requested_batch: Option<f64>,
    /// Most devices the job can use now (adaptive policies).
    pub max_replicas: u32,
    /// Times the job has been restarted on a new allocation.
    pub num_restarts: u32,
    /// Seconds a restart costs this job, when the driver knows (`None`: the
    /// policy's own assumption): the delay of a restart onto one device.
    pub restart_s: Option<f64>,
    /// Seconds a restart costs more per doubling of the devices it restarts onto
    /// (0: the same delay at every size); [`JobView::restart_delay_s`].
    pub restart_s_per_doubling: f64,
    /// Devices held now.
    pub current: Allocation,
    /// The job's current goodput model, when it has one (adaptive jobs).
    pub goodput: Option<GoodputFn>,
    /// Goodput model per cluster device type (indexed like
    /// `ClusterSpec::device_types`; `None` where the job has no model), for jobs with
    /// per-type measurements; empty otherwise. Heterogeneity-aware policies (Sia)
    /// compare a job's goodput across types with it.
    pub goodput_by_type: Vec<Option<GoodputFn>>,
    /// Per device type (indexed like `goodput_by_type`): whether the job's model
    /// there is its own, fitted to measurements it made on that type (`false`: a
    /// projection from another type's, or a start from the type's one-device rows);
    /// empty: every model is the job's own (fitted profiles, the service).
    /// [`JobView::measured_on`].
    pub measured_by_type: Vec<bool>,
    /// Changes whenever `goodput` changes, so policies can cache per job.
    pub goodput_version: u64,
    /// Speed per device type (work units/s); `None`: the job scales linearly up
    /// to `requested_replicas` devices of any type, finishing `work_left` units at
    /// one unit per second on its requested size.
    pub speed: Option<Arc<SpeedTable>>,
    /// Optimiser steps (at the requested batch) per unit of work, so that
    /// `rate × iterations_per_work` is the job's iteration rate: Gavel's max-sum
    /// throughput objective sums iterations per second, as Sia's simulator does
    /// (`None`: the rate itself is used).
    pub iterations_per_work: Option<f64>,
    /// Work done and left, in the units of `speed` (steps, iterations, or the
    /// fraction of the job).
    pub work_done: f64,
    pub work_left: f64,
    /// Training quality, for quality-driven policies.
    pub quality: Option<QualityView>,
    /// The job must run on devices of one type (a service job that did not ask for
    /// `mixed_types`); `false`: placement may mix types where the job runs equally
    /// fast on them ([`place::mixes_types_freely`]).
    pub one_type: bool,
    /// The time (s, on `ClusterView::now_s`'s clock) the job should finish by;
    /// `None`: best effort.
    pub deadline_s: Option<f64>,
    /// The job accepts an allocation across device types whose replicas the worker
    /// level balances (issue 26), with the goodput of such an allocation; `None`:
    /// only policies that ignore device types may mix its types. Only
    /// `sia-pacer-mix` reads it.
    pub mixed: Option<Arc<dyn MixedGoodput>>,
}

/// The goodput of one job on an allocation across device types, the worker level
/// balancing its replicas (each type's step-time model at the local batch the job's
/// own batch controller gives it, one all-reduce over the slowest link, the whole
/// job's statistical efficiency: `pacer_control::job::mixed`). Drivers implement it;
/// a policy never computes a mixed goodput itself.
pub trait MixedGoodput: Send + Sync + std::fmt::Debug {
    /// Goodput on `groups` (device type, devices; types distinct) spanning `nodes`
    /// nodes, at the best global batch the job may use there, in the units of
    /// [`JobView::goodput_by_type`]'s models; 0 when the job cannot run there.
    fn goodput(&self, groups: &[(DeviceTypeId, u32)], nodes: u32) -> f64;
}

impl JobView {
    /// A job with no goodput, speed or quality model (tests, benchmarks).
    pub fn basic(id: JobId, arrival_s: f64, requested_replicas: u32) -> Self {
        JobView {
            id,
            arrival_s,
            attained_gpu_s: 0.0,
            requested_replicas,
            requested_batch: None,
            max_replicas: requested_replicas,
            num_restarts: 0,
            restart_s: None,
            restart_s_per_doubling: 0.0,
            current: Allocation::empty(),
            goodput: None,
            goodput_by_type: Vec::new(),
            measured_by_type: Vec::new(),
            goodput_version: 0,
            speed: None,
            iterations_per_work: None,
            work_done: 0.0,
            work_left: 1.0,
            quality: None,
            one_type: false,
            deadline_s: None,
            mixed: None,
        }
    }

    /// Seconds a restart onto `devices` devices costs this job, when the driver
    /// knows: [`JobView::restart_s`] plus [`JobView::restart_s_per_doubling`] per
    /// doubling above one device.
    pub fn restart_delay_s(&self, devices: u32) -> Option<f64> {
        self.restart_s
            .map(|r| r + self.restart_s_per_doubling * log2_devices(devices))
    }

    /// Work units per second on `devices` devices of type `ty`.
    pub fn rate(&self, ty: DeviceTypeId, devices: u32, consolidated: bool) -> f64 {
        match &self.speed {
            Some(s) => s.rate(ty, devices, consolidated),
            None => {
                let req = self.requested_replicas.max(1);
                devices.min(req) as f64 / req as f64
            }
        }
    }

    /// Work units per second on the devices of `alloc` (its slowest type; spread
    /// over more nodes than needed: at the spread factor).
    pub fn alloc_rate(&self, cluster: &ClusterSpec, alloc: &Allocation) -> f64 {
        match &self.speed {
            Some(s) => s.rate_of(cluster, alloc),
            None => {
                let req = self.requested_replicas.max(1);
                alloc.replicas().min(req) as f64 / req as f64
            }
        }
    }

    /// Whether the job can run on device type `ty`: its speed table has a curve
    /// for it (no table: any type). Drivers only place a job on types it has
    /// measurements for; placement helpers ([`place::FreePool`]) honour this.
    pub fn can_use(&self, ty: DeviceTypeId) -> bool {
        self.speed.as_ref().is_none_or(|s| {
            s.per_type
                .get(ty.0 as usize)
                .is_some_and(|c| !c.points.is_empty())
        })
    }

    /// Whether the job's model for type `ty` is its own fit there
    /// ([`JobView::measured_by_type`]; an empty list: every type's is).
    pub fn measured_on(&self, ty: DeviceTypeId) -> bool {
        self.measured_by_type.is_empty()
            || self
                .measured_by_type
                .get(ty.0 as usize)
                .copied()
                .unwrap_or(false)
    }

    /// Most devices of type `ty` that still speed the job up.
    pub fn max_useful(&self, ty: DeviceTypeId) -> u32 {
        match &self.speed {
            Some(s) => s
                .per_type
                .get(ty.0 as usize)
                .map_or(0, SpeedCurve::max_useful),
            None => self.requested_replicas.max(1),
        }
    }
}

/// Read-only input of one scheduling round.
#[derive(Debug, Clone, Copy)]
pub struct ClusterView<'a> {
    pub now_s: f64,
    pub cluster: &'a ClusterSpec,
    pub jobs: &'a [JobView],
}

/// A cluster scheduling policy.
///
/// A minimal one — smallest request first, each job on the first node with room — and a
/// round on a two-node cluster:
/// ```
/// use pacer_model::{Allocation, ClusterSpec, JobId, NodeId};
/// use pacer_policy::{free_per_node, ClusterView, JobView, Policy};
///
/// struct SmallestFirst;
///
/// impl Policy for SmallestFirst {
///     fn name(&self) -> &'static str {
///         "smallest-first"
///     }
///     fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
///         let mut free = free_per_node(view.cluster, &[]);
///         let mut order: Vec<usize> = (0..view.jobs.len()).collect();
///         order.sort_by_key(|&j| (view.jobs[j].requested_replicas, view.jobs[j].id));
///         let mut out = vec![Allocation::empty(); view.jobs.len()];
///         for j in order {
///             let want = view.jobs[j].requested_replicas;
///             if let Some(n) = free.iter().position(|&f| f >= want) {
///                 free[n] -= want;
///                 out[j] = Allocation::from_pairs([(NodeId(n as u32), want)]);
///             }
///         }
///         out
///     }
/// }
///
/// let cluster = ClusterSpec::parse("2x4:t4", "example").unwrap();
/// let jobs = [
///     JobView::basic(JobId(0), 0.0, 4),
///     JobView::basic(JobId(1), 0.0, 2),
///     JobView::basic(JobId(2), 0.0, 4),
/// ];
/// let view = ClusterView { now_s: 0.0, cluster: &cluster, jobs: &jobs };
/// let allocs = SmallestFirst.allocate(&view);
/// assert_eq!(allocs.iter().map(|a| a.replicas()).collect::<Vec<_>>(), [4, 2, 0]);
/// pacer_policy::check_capacity(&cluster, &allocs).unwrap();
/// ```
/// Whether a job's arrival starts a new round before the current one ends. Rounds
/// then vary in length; `round_s` stays the longest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArrivalReplan {
    /// The policy's own choice ([`Policy::arrival_replan`]): `Never` unless the
    /// policy says otherwise.
    #[default]
    Auto,
    /// Arrivals wait for the next round boundary (Gavel's and Pollux's simulators).
    Never,
    /// A new round starts at an arrival when the last allocation left devices idle:
    /// the newcomer can start at once without anybody being preempted.
    WhenIdle,
    /// A new round starts at every arrival (an event-driven scheduler); the policy
    /// decides whether to preempt for the newcomer.
    Always,
    /// ElasticFlow's simulator's clock: no fixed rounds; a round at each event (an
    /// arrival, a job's completion, the policy's own wake-up, [`Policy::wake_s`]), but
    /// at least `round_s` after the last one: events inside that window are taken
    /// together at last + `round_s` (docs/elasticflow.md).
    Events,
}

impl std::str::FromStr for ArrivalReplan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ArrivalReplan::Auto),
            "never" => Ok(ArrivalReplan::Never),
            "idle" => Ok(ArrivalReplan::WhenIdle),
            "always" => Ok(ArrivalReplan::Always),
            "events" => Ok(ArrivalReplan::Events),
            _ => Err(format!(
                "`{s}`: expected auto, never, idle, always or events"
            )),
        }
    }
}

impl ArrivalReplan {
    /// The setting a run uses under `policy`: `Auto` resolved to the policy's own.
    pub fn resolve(self, policy: &dyn Policy) -> ArrivalReplan {
        match self {
            ArrivalReplan::Auto => match policy.arrival_replan() {
                ArrivalReplan::Auto => ArrivalReplan::Never,
                own => own,
            },
            set => set,
        }
    }
}

/// How a driver that learns per-device-type profiles online (the simulator's
/// `--profiles online`) shows a job's model on a type it has not run on, projected
/// from a type it has run on. Both use only what is known before the job runs there:
/// the types' one-device table rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TypeProjection {
    /// Sia's (`--project_throughput`): step and sync times scaled by the ratio of the
    /// types' one-device throughputs, each at its own largest one-device local batch,
    /// valued with the source type's batch limits.
    #[default]
    Sia,
    /// At one batch: scaled by the ratio of the types' one-device step times at the
    /// largest local batch both measured on one device (from the models fitted to
    /// their one-device rows), valued with the destination type's batch limits, the
    /// ones the job will run with there. Sia's ratio compares a type that fits larger
    /// batches at those larger batches, which the other type cannot run.
    MatchedBatch,
}

pub trait Policy: Send {
    /// Registry name (`fifo`, `fair`, `tiresias`, `pollux`).
    fn name(&self) -> &'static str;

    /// Whether jobs under this policy pick their own batch for goodput (Pollux-style)
    /// rather than keeping the batch the user asked for.
    fn adaptive_batch(&self) -> bool {
        false
    }

    /// Whether the policy reads [`JobView::quality`] (drivers then keep loss-curve
    /// fits up to date, which costs time).
    fn uses_quality(&self) -> bool {
        false
    }

    /// One allocation per entry of `view.jobs`, in the same order. The result must
    /// fit the cluster's capacity; drivers check it.
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation>;

    /// Whether the policy has declined `job` (a deadline job it will not run): a
    /// driver retires such a job, unstarted, once its deadline has passed. Policies
    /// without admission control decline nothing (the default).
    fn declined(&self, _job: JobId) -> bool {
        false
    }

    /// When a driver that runs rounds (the simulator) should also start one at a
    /// job's arrival, unless told explicitly ([`ArrivalReplan::Auto`]): `Never` by
    /// default; the deadline policies answer as their peers' simulators schedule
    /// (docs/elasticflow.md).
    fn arrival_replan(&self) -> ArrivalReplan {
        ArrivalReplan::Never
    }

    /// How online per-type profiles project a job's model to a type it has not run
    /// on ([`TypeProjection`]; Sia's by default).
    fn type_projection(&self) -> TypeProjection {
        TypeProjection::Sia
    }

    /// When the policy's last answer ([`Policy::allocate`]) would change with no
    /// arrival or departure (e.g. `dlas-gpu`'s next queue demotion): a driver
    /// running the event clock ([`ArrivalReplan::Events`]) starts a round then (at
    /// the earliest `round_s` after the last). `None` (the default): never.
    fn wake_s(&self) -> Option<f64> {
        None
    }

    /// Whether a driver running the event clock ([`ArrivalReplan::Events`]) charges
    /// every running job a job kind's per-event overhead at each round, on top of the
    /// restart delay of a changed allocation (ElasticFlow's simulator does so under
    /// its own policy only; docs/elasticflow.md, "The event clock"). `false` (the
    /// default): only a changed allocation costs its restart delay.
    fn charges_event_overhead(&self) -> bool {
        false
    }

    /// With [`Policy::charges_event_overhead`]: the overhead is ElasticFlow's by
    /// placement (its simulator's `LOG.cache`): the smaller amount for a job whose
    /// placement any job held since the last periodic restart, the full restart
    /// overhead for one whose placement is new, changed allocation or not, in place of
    /// the restart delay. `false` (the default): the smaller amount for a kept
    /// allocation, the restart delay for a changed one.
    fn event_overhead_by_placement(&self) -> bool {
        false
    }

    /// Under the event clock ([`ArrivalReplan::Events`]): the slot, when the round
    /// that a running job's completion calls is at ElasticFlow's end event for it
    /// rather than at the completion: the round's time, plus the delay charged there
    /// (its per-event overhead), plus the work's time rounded up to whole slots, as
    /// ElasticFlow's simulator schedules a job's end from its plan. `None` (the
    /// default): the round is at the completion.
    fn end_event_slot_s(&self) -> Option<f64> {
        None
    }

    /// The policy's own account of its work so far, for benchmarks (e.g. how
    /// often an exact solver stopped at its bound and fell back); empty by default.
    fn notes(&self) -> String {
        String::new()
    }

    /// A fresh event-driven form of this policy, when it has one: the driver tells
    /// it about arrivals, departures and attained service instead of handing it
    /// every active job each round, and it answers with the allocations that
    /// change. Its decisions must equal [`Policy::allocate`]'s on the same history
    /// (the simulator's tests compare both); a round then costs what changes, not
    /// the length of the queue. `None` (the default): drivers call `allocate`.
    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        None
    }
}

/// The event-driven form of a policy ([`Policy::incremental`]). A driver calls,
/// each round: [`admit`](IncrementalPolicy::admit) for the jobs that arrived, in
/// the order a [`ClusterView`] would list them (arrival time, then id);
/// [`finish`](IncrementalPolicy::finish) for the jobs that left (their devices are
/// free again); then [`decide`](IncrementalPolicy::decide). Between calls, a job
/// holds exactly the allocation the policy last gave it.
pub trait IncrementalPolicy: Send {
    /// A job became active: its static fields (id, arrival, requested size) and its
    /// attained service so far.
    fn admit(&mut self, job: &JobView);

    /// A job left (finished); whatever it held is free.
    fn finish(&mut self, id: JobId);

    /// Whether [`decide`](IncrementalPolicy::decide) reads `attained` (drivers may
    /// then pass an empty list).
    fn uses_attained(&self) -> bool {
        true
    }

    /// One round at `now_s`. `attained` lists the jobs that held devices since the
    /// last call with their attained GPU-seconds now (nobody else's changed). Pushes
    /// `(job, allocation)` for every job whose allocation changes (an empty one
    /// preempts it) onto `changes`, at most once per job.
    fn decide(
        &mut self,
        now_s: f64,
        cluster: &ClusterSpec,
        attained: &[(JobId, f64)],
        changes: &mut Vec<(JobId, Allocation)>,
    );
}

/// `f64::from(devices.max(1)).log2()`, the same value: a power of two's is its
/// exponent, which `log2` returns exactly (an integer, and its error is under one
/// unit), here without the library call (test `log2_devices_is_log2`).
pub(crate) fn log2_devices(devices: u32) -> f64 {
    let n = devices.max(1);
    if n.is_power_of_two() {
        f64::from(n.trailing_zeros())
    } else {
        f64::from(n).log2()
    }
}

/// Hashes a [`JobId`] by one multiplication (the event-driven policies look jobs
/// up by id every round; SipHash was a tenth of their time). Lookups only: no
/// decision depends on a map's iteration order.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by job id with [`IdHasher`].
pub(crate) type IdMap<V> =
    std::collections::HashMap<JobId, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Free devices per node after taking `allocs` out of `cluster`.
pub fn free_per_node(cluster: &ClusterSpec, allocs: &[&Allocation]) -> Vec<u32> {
    let mut free: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
    for a in allocs {
        for &(node, count) in a.slots() {
            free[node.0 as usize] = free[node.0 as usize].saturating_sub(count);
        }
    }
    free
}

/// Checks that `allocs` fit the cluster; returns the first over-subscribed node.
pub fn check_capacity(cluster: &ClusterSpec, allocs: &[Allocation]) -> Result<(), String> {
    let mut used = vec![0u32; cluster.nodes.len()];
    for (j, a) in allocs.iter().enumerate() {
        for &(node, count) in a.slots() {
            let i = node.0 as usize;
            if i >= used.len() {
                return Err(format!(
                    "job #{j} allocated on node {i}, which does not exist"
                ));
            }
            used[i] += count;
            if used[i] > cluster.nodes[i].gpus {
                return Err(format!(
                    "node {i} over-subscribed: {} > {} devices",
                    used[i], cluster.nodes[i].gpus
                ));
            }
        }
    }
    Ok(())
}

/// The unit tests' goodput model: fixed network and reduction terms, compute
/// `1/speed` times the base one, gradient statistics `|G|^2 = 1`, `tr S = var`.
#[cfg(test)]
pub(crate) fn test_goodput(speed: f64, var: f64) -> pacer_predict::goodput::GoodputFn {
    use pacer_predict::goodput::{BatchLimits, GoodputFn, GradParams, PerfParams};
    GoodputFn {
        perf: PerfParams {
            alpha_c: 0.02 / speed,
            beta_c: 0.002 / speed,
            alpha_n: 0.2,
            beta_n: 0.01,
            alpha_r: 0.05,
            beta_r: 0.005,
            gamma: 2.0,
        },
        grad: GradParams { sqr: 1.0, var },
        limits: BatchLimits {
            base_batch: 64.0,
            max_batch: 8192.0,
            min_atomic: 8.0,
            max_atomic: 256.0,
            accumulation: true,
        },
    }
}

#[cfg(test)]
mod log2_tests {
    use super::log2_devices;

    /// `log2_devices` is the library's `log2` of every size a job can have up to
    /// 2^20, of 0 (taken as 1) and of every power of two.
    #[test]
    fn log2_devices_is_log2() {
        for n in (0..=1u32 << 20)
            .chain((0..32).map(|k| 1u32 << k))
            .chain([u32::MAX])
        {
            let want = f64::from(n.max(1)).log2();
            assert_eq!(log2_devices(n).to_bits(), want.to_bits(), "{n}");
        }
    }
}
