//! Planning deadline jobs on a timeline of free devices, and admission.
//!
//! Time from `now` is cut into slots of `slot_s` (the scheduling round). Jobs are
//! planned one after another, earliest deadline first, each taking from the devices
//! the ones before it left: a deadline job gets its *minimum satisfactory share*, the
//! fewest devices (one of its measured sizes, its *levels*) that finish its work by
//! its deadline; with `mix`, the level below runs first and the level itself only
//! from the latest slot that still meets the deadline (ElasticFlow's shape, which
//! leaves early slots to others). A job no share can save, or one without a deadline,
//! is planned greedily on what is left until it is done.
//!
//! [`admit`] answers whether a new deadline job fits beside the admitted ones without
//! making any of them late, and if not, the earliest deadline that would fit.

use pacer_model::{ClusterSpec, DeviceTypeId};
use smallvec::SmallVec;

mod constant;
mod job;

pub use job::{LevelList, PlanJob};

/// Free devices per type from `now`, piecewise constant over slots: `(first slot,
/// free)` breakpoints, all devices free after the last.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub now_s: f64,
    pub slot_s: f64,
    free: Vec<Vec<(usize, u32)>>,
    /// The next breakpoints of a type while [`Timeline::take_spans`] builds them.
    scratch: Vec<(usize, u32)>,
    /// [`Timeline::min_share`]'s sums, kept between plans.
    sums: SumsBufs,
    /// Walks stop once they cannot finish and skip the segments where the job runs
    /// on nothing ([`Timeline::run_into`]); off only in the tests that check those
    /// stops and skips against whole walks.
    early_stop: bool,
    /// Runs of the same devices joined at breakpoints ([`Timeline::push_span`]); off
    /// only in the test that checks the timelines they leave against unjoined ones.
    coalesce: bool,
    /// Walks of one level where the job runs at it throughout decided in closed form
    /// ([`Timeline::run_constant`]); on only for a policy's own plans of its admitted
    /// jobs, whose finish times nothing reports.
    constant_runs: bool,
    /// With `mix`, a share's upper level starts at a breakpoint of the free devices
    /// (or now), the latest from which that level alone does the work by the deadline
    /// (ElasticFlow's `ef_sim_allocation`), instead of at the latest slot that still
    /// meets the deadline.
    switch_at_breakpoints: bool,
}

/// A run of slots `[from, to)` at `devices`.
pub type Span = (usize, usize, u32);

/// A plan's runs: inline up to two (most plans have one or two), so planning a job
/// seldom allocates.
pub type Spans = SmallVec<[Span; 2]>;

impl Timeline {
    /// Every device of `cluster` free in every slot.
    pub fn new(cluster: &ClusterSpec, now_s: f64, slot_s: f64) -> Self {
        let types = cluster.device_types.len().max(1);
        let cap: Vec<u32> = (0..types)
            .map(|t| cluster.gpus_of_type(DeviceTypeId(t as u16)))
            .collect();
        Timeline {
            now_s,
            slot_s: slot_s.max(1e-3),
            // Room for a round's breakpoints, so taking plans seldom grows the lists.
            free: cap
                .iter()
                .map(|&c| {
                    let mut f = Vec::with_capacity(64);
                    f.push((0, c));
                    f
                })
                .collect(),
            scratch: Vec::new(),
            sums: SumsBufs::default(),
            early_stop: true,
            coalesce: true,
            constant_runs: false,
            switch_at_breakpoints: false,
        }
    }

    /// The breakpoints of type `ty` (`(first slot, free)`, the first at slot 0).
    pub(super) fn free_of(&self, ty: usize) -> &[(usize, u32)] {
        self.free.get(ty).map_or(&[], |f| f)
    }

    /// The level (devices, rate) whose walk met the deadline in the last plan that
    /// got its minimum share ([`Timeline::min_share`]; `None`: none did).
    pub(super) fn last_level(&self) -> Option<(u32, f64)> {
        self.sums.chosen
    }

    /// Decides walks of one level where the job runs at it throughout in closed form
    /// ([`Timeline::run_constant`]; the finish times may differ in their last bits).
    pub(super) fn decide_constant_runs(&mut self) {
        self.constant_runs = true;
    }

    /// Plans shares with [`Timeline`]`::switch_at_breakpoints` (ElasticFlow's switch).
    pub(super) fn switch_at_breakpoints(&mut self) {
        self.switch_at_breakpoints = true;
    }

    /// The latest of now and the breakpoints where the free devices of `job`'s type
    /// change, before the deadline `d`'s slot, from which `level` alone (as many of its
    /// devices as are free) does the job's work by `d` (0 when none does).
    fn latest_breakpoint_switch(&self, job: &PlanJob, level: u32, d: f64) -> usize {
        let f = self.free_of(job.ty);
        let ls = ceil_slots((d - self.now_s) / self.slot_s);
        let asc = ascending(job);
        let mut starts: Vec<(usize, u32)> = Vec::new();
        for &(k, n) in f.iter().take_while(|p| p.0 < ls) {
            if starts.last().is_none_or(|l| l.1 != n) {
                starts.push((k, n));
            }
        }
        let (mut done, mut end) = (0.0, ls);
        for &(k, n) in starts.iter().rev() {
            let (_, r) = pick_level(job, asc, level.min(n));
            let to = if end == ls {
                d
            } else {
                self.now_s + end as f64 * self.slot_s
            };
            done += r * (to - (self.now_s + k as f64 * self.slot_s));
            if done >= job.work_left {
                return k;
            }
            end = k;
        }
        0
    }

    /// Free devices of type `ty` in slot `k`.
    pub fn free(&self, ty: usize, k: usize) -> u32 {
        let Some(f) = self.free.get(ty) else { return 0 };
        let i = f.partition_point(|p| p.0 <= k);
        f[i - 1].1
    }

    /// Takes `spans` (sorted, disjoint, as [`Timeline::run`] returns them) of type `ty`
    /// in one pass: the breakpoints become the old ones and every span's ends, each
    /// the old free count less the devices of the span covering it. The same list as
    /// splitting at each span's ends and subtracting span by span, without a search
    /// or an insertion per span.
    fn take_spans(&mut self, ty: usize, spans: &[Span]) {
        if spans.len() <= 2 {
            // A plan of one or two runs (most are): split and subtract in place, the
            // same list (see above) without rebuilding it.
            take_in_place(&mut self.free[ty], spans);
            return;
        }
        let mut cuts = spans
            .iter()
            .filter(|s| s.2 > 0 && s.0 < s.1)
            .flat_map(|s| [s.0, s.1])
            .peekable();
        if cuts.peek().is_none() {
            return;
        }
        let mut taken = spans.iter().filter(|s| s.2 > 0 && s.0 < s.1).peekable();
        let old = &self.free[ty];
        let out = &mut self.scratch;
        out.clear();
        let (mut i, mut value) = (0usize, 0u32);
        loop {
            let next_old = old.get(i).map(|p| p.0);
            let next_cut = cuts.peek().copied();
            let k = match (next_old, next_cut) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (Some(a), Some(b)) => a.min(b),
            };
            if next_old == Some(k) {
                value = old[i].1;
                i += 1;
            }
            while cuts.peek() == Some(&k) {
                cuts.next();
            }
            while taken.peek().is_some_and(|s| s.1 <= k) {
                taken.next();
            }
            let n = taken.peek().filter(|s| s.0 <= k).map_or(0, |s| s.2);
            out.push((k, value - n));
        }
        std::mem::swap(&mut self.free[ty], &mut self.scratch);
    }

    /// Runs `job` wanting `low` devices before slot `switch` and `high` from it (the
    /// largest level that fits the free devices), from now until its work is done or
    /// `deadline`. Returns the finish time (`None`: not done by the deadline) and the
    /// spans of devices it holds, through the slot it finishes in.
    fn run(
        &self,
        job: &PlanJob,
        shape: (u32, usize, u32),
        deadline: Option<f64>,
    ) -> (Option<f64>, Spans) {
        let mut spans = Vec::new();
        let finish = self.run_into(job, shape, deadline, Some(&mut spans));
        (finish, Spans::from_vec(spans))
    }

    /// [`Timeline::run`] writing the spans into `spans` (cleared first), or only the
    /// finish time when `spans` is `None` (a bisection's probe).
    pub(super) fn run_into(
        &self,
        job: &PlanJob,
        (low, switch, high): (u32, usize, u32),
        deadline: Option<f64>,
        mut spans: Option<&mut Vec<Span>>,
    ) -> Option<f64> {
        if let Some(s) = spans.as_deref_mut() {
            s.clear();
        }
        if job.work_left <= 0.0 {
            return Some(self.now_s);
        }
        if job.levels.is_empty() {
            return None;
        }
        let mut left = job.work_left;
        let mut prev = job.current;
        let last_slot = deadline.map(|d| ceil_slots((d - self.now_s) / self.slot_s));
        if let (true, Some(d), Some(ls)) = (self.constant_runs && low == high, deadline, last_slot)
        {
            if let Some(answer) = self.run_constant(job, high, d, ls, spans.as_deref_mut()) {
                return answer;
            }
        }
        // Walks the breakpoints of the job's type in order, cutting also at `switch`
        // and the deadline's slot: no allocation, no sort (this is the planner's
        // inner loop).
        let f = &self.free[job.ty];
        // Past the point where even the fastest level the walk can run at (one of at
        // most `max(low, high)` devices) from the start of a segment to the deadline
        // could not do the work left, the walk cannot finish: it stops there. The
        // margin (1e-9 of the work and of that bound) is far above the roundings of
        // the walk's segment sums (see `SwitchSums`).
        let most = low.max(high);
        let top_rate = job
            .levels
            .iter()
            .filter(|l| l.0 <= most)
            .map(|l| l.1)
            .fold(0.0, f64::max);
        // The stop's constant parts, read once (the same values as in the test).
        let stops = self.early_stop && job.restart_s >= 0.0 && deadline.is_some();
        let stop_margin = 1e-9 * job.work_left;
        let hopeless = |start: f64, left: f64| {
            stops
                && deadline.is_some_and(|d| {
                    let bound = top_rate * (d - start);
                    bound.is_finite() && left > bound * (1.0 + 1e-9) + stop_margin
                })
        };
        let asc = ascending(job);
        // Below its smallest level a job runs on nothing ([`pick_level`] gives 0).
        let smallest = job.levels.iter().map(|l| l.0).min().unwrap_or(0);
        // The last pick, for segments with the same cap (most consecutive ones).
        let mut picked = (u32::MAX, (0u32, 0.0f64));
        let (now, slot) = (self.now_s, self.slot_s);
        // No cut is `usize::MAX` (no slot index comes near it): the deadline's slot,
        // and the end of a segment past the last breakpoint.
        const NONE: usize = usize::MAX;
        let ls = last_slot.unwrap_or(NONE);
        // `end.min(dl)` is `end` without a deadline (no segment end is NaN).
        let dl = deadline.unwrap_or(f64::INFINITY);
        let mut a = 0usize;
        // The breakpoint at or before `a` (the first is at slot 0); a segment that
        // ends at the next breakpoint moves it on by one.
        let mut idx = 0usize;
        while f.get(idx + 1).is_some_and(|p| p.0 <= a) {
            idx += 1;
        }
        // The time slot `a` starts at (a segment's start is the last one's end).
        let mut start = now + a as f64 * slot;
        loop {
            if a >= ls {
                return None;
            }
            let (mut at, mut free) = f[idx];
            if self.early_stop && free.min(high) < smallest && switch <= a {
                // Segments on no devices change nothing but the time: skip to the
                // first breakpoint where the job can run (the time it starts at is
                // `now + at × slot`, as a walk through them computes it), or stop at
                // the deadline's slot or past the last breakpoint, as such a walk
                // does.
                while free < smallest || high < smallest {
                    let &p = f.get(idx + 1)?;
                    if p.0 >= ls {
                        return None;
                    }
                    idx += 1;
                    (at, free) = p;
                }
                a = at;
                start = now + a as f64 * slot;
            }
            // The segment ends at the next breakpoint, the switch or the deadline's
            // slot, whichever comes first after `a` (`ls > a` here).
            let next = f.get(idx + 1).map_or(NONE, |p| p.0);
            let mut b = next;
            if switch > a {
                b = b.min(switch);
            }
            b = b.min(ls);
            let want = if a < switch { low } else { high };
            let cap = want.min(free);
            if picked.0 != cap {
                picked = (cap, pick_level(job, asc, cap));
            }
            let (n, r) = picked.1;
            let seg_end = if b == NONE {
                f64::INFINITY
            } else {
                now + b as f64 * slot
            };
            if n > 0 {
                // Checked where the job runs only: a stop is sound wherever it fires
                // (the whole walk returns `None` from there), and a segment without
                // devices only brings the deadline nearer.
                if hopeless(start, left) {
                    return None;
                }
                let end = seg_end.min(dl);
                let pause = if n != prev { job.restart_to(n) } else { 0.0 };
                prev = n;
                let t = start + pause;
                if t < end {
                    let can = r * (end - t);
                    if can >= left {
                        let finish = t + left / r;
                        let k = ceil_slots((finish - now) / slot - 1e-9);
                        if let Some(s) = spans.as_deref_mut() {
                            self.push_span(s, at == a, (a, k.max(a + 1), n));
                        }
                        return Some(finish);
                    }
                    left -= can;
                }
                if b != NONE {
                    if let Some(s) = spans.as_deref_mut() {
                        self.push_span(s, at == a, (a, b, n));
                    }
                }
            }
            if b == NONE {
                return None;
            }
            if b == next {
                idx += 1;
            }
            a = b;
            start = seg_end;
        }
    }

    /// Appends `span` to a walk's `spans`, or extends the last one when it ends where
    /// `span` starts at the same devices and a breakpoint of the timeline is there
    /// (`at_breakpoint`): taking either leaves the same breakpoints (a span's ends are
    /// cut, and that one is cut already), with fewer spans to take.
    fn push_span(&self, spans: &mut Vec<Span>, at_breakpoint: bool, span: Span) {
        if self.coalesce && at_breakpoint {
            if let Some(last) = spans.last_mut().filter(|l| l.1 == span.0 && l.2 == span.2) {
                last.1 = span.1;
                return;
            }
        }
        spans.push(span);
    }

    pub(super) fn reserve(&mut self, job: &PlanJob, spans: &[Span]) {
        self.take_spans(job.ty, spans);
    }

    /// Gives `spans` of type `ty` back: the inverse of taking them
    /// ([`Timeline::reserve`]).
    pub(super) fn give_back(&mut self, ty: usize, spans: &[Span]) {
        let f = &mut self.free[ty];
        for &(from, to, n) in spans {
            if n == 0 || from >= to {
                continue;
            }
            let lo = split_at(f, from);
            let hi = split_at(f, to);
            for p in &mut f[lo..hi] {
                p.1 += n;
            }
        }
    }

    /// The first slot at or after `k` where the free devices of type `ty` change
    /// (`None`: none does).
    pub(super) fn change_from(&self, ty: usize, k: usize) -> Option<usize> {
        let f = self.free_of(ty);
        let i = f.partition_point(|p| p.0 < k).max(1);
        let mut last = f[i - 1].1;
        for p in &f[i..] {
            if p.1 != last {
                return Some(p.0);
            }
            last = p.1;
        }
        None
    }

    /// The same timeline seen from slot `k`: its slot 0 is this one's slot `k`.
    pub(super) fn seen_from(&self, k: usize) -> Timeline {
        let free = self
            .free
            .iter()
            .map(|f| {
                let i = f.partition_point(|p| p.0 <= k);
                let mut g = Vec::with_capacity(f.len() + 1 - i);
                g.push((0, f[i - 1].1));
                g.extend(f[i..].iter().map(|p| (p.0 - k, p.1)));
                g
            })
            .collect();
        Timeline {
            now_s: self.now_s + k as f64 * self.slot_s,
            slot_s: self.slot_s,
            free,
            scratch: Vec::new(),
            sums: SumsBufs::default(),
            early_stop: self.early_stop,
            coalesce: self.coalesce,
            constant_runs: self.constant_runs,
            switch_at_breakpoints: self.switch_at_breakpoints,
        }
    }

    /// `job` at its fastest size from now on, as fast as the free devices allow: the
    /// plan of a job without a meetable minimum share (feasible only without a
    /// deadline).
    fn greedy(&self, job: &PlanJob) -> JobPlan {
        let top = job.levels.last().map_or(0, |l| l.0);
        let (finish, spans) = self.run(job, (top, 0, top), None);
        JobPlan {
            feasible: job.deadline_s.is_none(),
            finish_s: finish,
            spans,
        }
    }

    /// Plans `job` (its minimum satisfactory share when it has a deadline it can
    /// meet, else greedily) and takes its devices from the timeline.
    pub fn plan(&mut self, job: &PlanJob, mix: bool) -> JobPlan {
        let plan = self
            .min_share_kept(job, mix)
            .unwrap_or_else(|| self.greedy(job));
        self.reserve(job, &plan.spans);
        plan
    }

    /// [`Timeline::plan`] when `job` gets its minimum share (the plan is feasible);
    /// else `None`, the timeline untouched (no greedy plan is walked).
    pub(super) fn plan_share(&mut self, job: &PlanJob, mix: bool) -> Option<JobPlan> {
        let plan = self.min_share_kept(job, mix)?;
        self.reserve(job, &plan.spans);
        Some(plan)
    }

    /// The fewest devices that meet `job`'s deadline on this timeline, or `None`.
    pub fn min_share(&self, job: &PlanJob, mix: bool) -> Option<JobPlan> {
        self.min_share_in(job, mix, &mut SumsBufs::default())
    }

    /// [`Timeline::min_share`] with the timeline's own sums buffers (no allocation
    /// once they have grown).
    fn min_share_kept(&mut self, job: &PlanJob, mix: bool) -> Option<JobPlan> {
        let mut bufs = std::mem::take(&mut self.sums);
        let plan = self.min_share_in(job, mix, &mut bufs);
        self.sums = bufs;
        plan
    }

    /// [`Timeline::min_share`] with the sums in `bufs`: carried from level to level
    /// (the sums at a level are the next level's sums at the level below).
    fn min_share_in(&self, job: &PlanJob, mix: bool, bufs: &mut SumsBufs) -> Option<JobPlan> {
        // One buffer for every level tried (a failed run's spans are dropped), kept
        // between plans; the plan gets a copy.
        let mut spans = std::mem::take(&mut bufs.spans);
        let plan = self.min_share_with(job, mix, bufs, &mut spans);
        bufs.spans = spans;
        plan
    }

    /// [`Timeline::min_share_in`] walking into `spans`.
    fn min_share_with(
        &self,
        job: &PlanJob,
        mix: bool,
        bufs: &mut SumsBufs,
        spans: &mut Vec<Span>,
    ) -> Option<JobPlan> {
        bufs.chosen = None;
        let d = job.deadline_s?;
        bufs.high_at = None;
        for (i, &(level, rate)) in job.levels.iter().enumerate() {
            // Not even the whole time to the deadline at this size: skip the run.
            if rate * (d - self.now_s) < job.work_left {
                continue;
            }
            if !mix {
                let Some(finish) = self.run_into(job, (level, 0, level), Some(d), Some(spans))
                else {
                    continue;
                };
                bufs.chosen = Some((level, rate));
                return Some(JobPlan {
                    feasible: true,
                    finish_s: Some(finish),
                    spans: Spans::from_slice(spans),
                });
            }
            let shape = (lower_level(job, i), level);
            let sums = SwitchSums::with_bufs(self, job, shape, d, bufs);
            let at = |s: usize, spans: Option<&mut Vec<Span>>| {
                self.run_into(job, (shape.0, s, shape.1), Some(d), spans)
            };
            let meets = |s: usize| {
                sums.as_ref()
                    .and_then(|m| m.meets(job, s))
                    .unwrap_or_else(|| at(s, None).is_some())
            };
            if !meets(0) {
                if let Some(m) = sums {
                    m.give_back(bufs);
                }
                continue;
            }
            // The latest slot from which `level` (after the level below) still meets
            // the deadline: later switches do less work, so bisect (the probes keep
            // no spans, and most are decided by `sums` without a walk).
            let lo = if self.switch_at_breakpoints {
                self.latest_breakpoint_switch(job, level, d)
            } else {
                let slots = ceil_slots((d - self.now_s) / self.slot_s);
                let (mut lo, mut hi) = (0usize, slots);
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if meets(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            };
            let finish = at(lo, Some(spans));
            return Some(JobPlan {
                feasible: true,
                finish_s: Some(finish.unwrap_or(d)),
                spans: Spans::from_slice(spans),
            });
        }
        None
    }
}

/// Takes `spans` from the breakpoints `free` span by span: splits at both ends of
/// each, then subtracts its devices between them ([`Timeline::take_spans`]'s list).
fn take_in_place(free: &mut Vec<(usize, u32)>, spans: &[Span]) {
    for &(from, to, n) in spans {
        if n == 0 || from >= to {
            continue;
        }
        let lo = split_at(free, from);
        let hi = split_at(free, to);
        for p in &mut free[lo..hi] {
            p.1 -= n;
        }
    }
}

/// The index of the breakpoint at slot `k` of `free`, inserted (with the free count
/// there) when there is none.
fn split_at(f: &mut Vec<(usize, u32)>, k: usize) -> usize {
    let i = f.partition_point(|p| p.0 <= k);
    if f[i - 1].0 == k {
        i - 1
    } else {
        let v = f[i - 1].1;
        f.insert(i, (k, v));
        i
    }
}

/// `x.ceil().max(0.0) as usize`, the same value for every `x` (NaN: 0), without the
/// library call (no rounding instruction in the baseline x86-64 target) in the usual
/// range: there `x as u64` is `x` rounded down, exactly.
pub(super) fn ceil_slots(x: f64) -> usize {
    if x > 0.0 && x < 4.0e15 {
        let t = x as u64;
        (t + u64::from((t as f64) < x)) as usize
    } else {
        x.ceil().max(0.0) as usize
    }
}

/// Whether `job`'s levels are strictly ascending in devices (as `from_view` reads them).
fn ascending(job: &PlanJob) -> bool {
    job.levels.windows(2).all(|w| w[0].0 < w[1].0)
}

/// The largest level of at most `cap` devices and its rate: `(level_at_most(cap),
/// rate(..))`, in one backward scan when the levels are `ascending` (then the level
/// found is the only one of its size).
fn pick_level(job: &PlanJob, ascending: bool, cap: u32) -> (u32, f64) {
    if ascending {
        job.levels
            .iter()
            .rev()
            .find(|l| l.0 <= cap)
            .map_or((0, 0.0), |&(d, r)| (d, r))
    } else {
        let n = job.level_at_most(cap);
        (n, job.rate(n))
    }
}

/// The level below `job`'s `i`-th (0 below the first).
fn lower_level(job: &PlanJob, i: usize) -> u32 {
    if i == 0 {
        0
    } else {
        job.levels[i - 1].0
    }
}

/// Decides most probes of [`Timeline::min_share`]'s bisection — does `job`, at `low`
/// devices before slot `s` and `high` from it, finish by the deadline? — without
/// walking the timeline, from the work each segment of the walk can do at either size,
/// summed once. The walk finishes exactly when its segments' work (each computed the
/// same way) adds up to the job's; it subtracts them one by one, rounding each time.
/// Those roundings and the sums' stay below `segments × 2⁻⁵² × (work + Σ segment
/// work)`, far under the margin of `1e-9 ×` the same (at most 10⁵ segments), so an
/// answer outside the margin is the walk's answer; within it the probe walks. Used
/// only without restart delays (a pause would shift the segments' starts).
struct SwitchSums<'t> {
    /// Segments: the timeline's breakpoints (start, free devices) before the
    /// deadline's slot, and the slot the last one ends at.
    segs: &'t [(usize, u32)],
    last_slot: usize,
    /// Prefix sums of the segments' work at `low` and at `high` (one entry more).
    cum_low: Vec<f64>,
    cum_high: Vec<f64>,
    low: u32,
    high: u32,
    now_s: f64,
    slot_s: f64,
    deadline_s: f64,
    margin: f64,
    /// The job's levels are strictly ascending ([`pick_level`]).
    ascending: bool,
}

/// [`SwitchSums`]' prefix sums kept between the levels [`Timeline::min_share`] tries:
/// `high` holds the sums at `high_at` devices (the last level's), which the next level
/// reads as its sums at the level below (the same segments, computed the same way), and
/// `low` is a spare buffer.
#[derive(Debug, Clone, Default)]
struct SumsBufs {
    /// A walk's runs ([`Timeline::min_share_in`]).
    spans: Vec<Span>,
    low: Vec<f64>,
    high: Vec<f64>,
    high_at: Option<u32>,
    /// The level of the last plan that met its deadline ([`Timeline::last_level`]).
    chosen: Option<(u32, f64)>,
}

impl<'t> SwitchSums<'t> {
    #[cfg(test)]
    fn new(t: &'t Timeline, job: &PlanJob, shape: (u32, u32), d: f64) -> Option<Self> {
        Self::with_bufs(t, job, shape, d, &mut SumsBufs::default())
    }

    /// The sums of `job` at `shape` up to `d`, in `bufs`' buffers (taken; return
    /// them with [`SwitchSums::give_back`]); the sums at `low` are `bufs`' when it
    /// holds them.
    fn with_bufs(
        t: &'t Timeline,
        job: &PlanJob,
        (low, high): (u32, u32),
        d: f64,
        bufs: &mut SumsBufs,
    ) -> Option<Self> {
        if job.restart_s != 0.0
            || job.restart_s_per_doubling != 0.0
            || job.work_left <= 0.0
            || job.levels.is_empty()
        {
            return None;
        }
        let last_slot = ceil_slots((d - t.now_s) / t.slot_s);
        let f = &t.free[job.ty];
        let segs = &f[..f.partition_point(|p| p.0 < last_slot)];
        if segs.is_empty() || segs.len() > 100_000 {
            return None;
        }
        let carried = bufs.high_at.take() == Some(low);
        let (mut cum_low, mut cum_high) = (
            std::mem::take(&mut bufs.low),
            std::mem::take(&mut bufs.high),
        );
        if carried {
            std::mem::swap(&mut cum_low, &mut cum_high);
        }
        let mut me = SwitchSums {
            cum_low,
            cum_high,
            segs,
            last_slot,
            low,
            high,
            now_s: t.now_s,
            slot_s: t.slot_s,
            deadline_s: d,
            margin: 0.0,
            ascending: ascending(job),
        };
        if !carried {
            me.cum_low.clear();
            if low == 0 {
                // No level of 0 devices: every segment's work is 0 (`work`).
                me.cum_low.resize(me.segs.len() + 1, 0.0);
            } else {
                me.sum_into(job, low, false);
            }
        }
        me.cum_high.clear();
        me.sum_into(job, high, true);
        let (l, h) = (me.cum_low[me.segs.len()], me.cum_high[me.segs.len()]);
        me.margin = 1e-9 * (job.work_left + l + h);
        if me.margin.is_finite() {
            Some(me)
        } else {
            me.give_back(bufs);
            None
        }
    }

    /// Fills `cum_high` (`high`) or `cum_low` with the prefix sums of the segments'
    /// work at `want` devices (one entry more than segments).
    fn sum_into(&mut self, job: &PlanJob, want: u32, high: bool) {
        let mut cum = std::mem::take(if high {
            &mut self.cum_high
        } else {
            &mut self.cum_low
        });
        let mut x = 0.0;
        cum.push(x);
        // The last pick, for segments with the same cap (most consecutive ones).
        let mut picked = (u32::MAX, (0u32, 0.0f64));
        for j in 0..self.segs.len() {
            let ((a, f), b) = (self.segs[j], self.end_of(j));
            let cap = want.min(f);
            if picked.0 != cap {
                picked = (cap, pick_level(job, self.ascending, cap));
            }
            x += self.work_at(picked.1, a, b);
            cum.push(x);
        }
        if high {
            self.cum_high = cum;
        } else {
            self.cum_low = cum;
        }
    }

    /// Returns the buffers to `bufs`, the sums at `high` kept for the next level.
    fn give_back(self, bufs: &mut SumsBufs) {
        bufs.low = self.cum_low;
        bufs.high = self.cum_high;
        bufs.high_at = Some(self.high);
    }

    /// The slot segment `j` ends at.
    fn end_of(&self, j: usize) -> usize {
        self.segs.get(j + 1).map_or(self.last_slot, |p| p.0)
    }

    /// The work of slots `[a, b)` at `want` devices (the largest level of at most
    /// `want` and `free`), as [`Timeline::run_into`] computes a segment's.
    fn work(&self, job: &PlanJob, want: u32, free: u32, a: usize, b: usize) -> f64 {
        if a >= b {
            return 0.0;
        }
        self.work_at(pick_level(job, self.ascending, want.min(free)), a, b)
    }

    /// [`SwitchSums::work`] at the level `(n, rate)` picked for it.
    fn work_at(&self, (n, rate): (u32, f64), a: usize, b: usize) -> f64 {
        if a >= b || n == 0 {
            return 0.0;
        }
        let start = self.now_s + a as f64 * self.slot_s;
        let end = (self.now_s + b as f64 * self.slot_s).min(self.deadline_s);
        if start < end {
            rate * (end - start)
        } else {
            0.0
        }
    }

    /// Whether switching at slot `s` meets the deadline, when the sums tell.
    fn meets(&self, job: &PlanJob, s: usize) -> Option<bool> {
        let n = self.segs.len();
        // The segments starting before `s` run at `low`; the last of them is cut at `s`.
        let k = self.segs.partition_point(|p| p.0 < s);
        let mut sum = self.cum_high[n] - self.cum_high[k];
        if k > 0 {
            let ((a, f), b) = (self.segs[k - 1], self.end_of(k - 1));
            sum += self.cum_low[k - 1] + self.work(job, self.low, f, a, b.min(s));
            if b > s {
                sum += self.work(job, self.high, f, s, b);
            }
        }
        let work = job.work_left;
        if sum >= work + self.margin {
            Some(true)
        } else if sum + self.margin < work {
            Some(false)
        } else {
            None
        }
    }
}

/// One job's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    /// It meets its deadline (or has none).
    pub feasible: bool,
    /// Planned finish (`None`: beyond the horizon).
    pub finish_s: Option<f64>,
    /// The devices it holds, by runs of slots from now.
    pub spans: Spans,
}

impl JobPlan {
    /// Devices in the current slot.
    pub fn now(&self) -> u32 {
        self.spans.first().filter(|s| s.0 == 0).map_or(0, |s| s.2)
    }
}

pub use super::admit::{admit, edf_order, plan_all, Admission, AdmitRules, Admitter};

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use pacer_model::JobId;

    /// A small deterministic generator (xorshift64*; also `carry.rs`'s and
    /// `plan/constant.rs`'s tests).
    pub(crate) struct Rng(pub(crate) u64);
    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        pub(crate) fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A job with levels 1, 2, 4, 8 at sub-linear rates, `work` left, due at
    /// `deadline`.
    pub(crate) fn job(rng: &mut Rng, id: u32, restart_s: f64) -> PlanJob {
        let mut rate = 0.5 + rng.unit();
        let mut levels = Vec::new();
        for d in [1, 2, 4, 8] {
            levels.push((d, rate));
            rate *= 1.3 + 0.6 * rng.unit();
        }
        PlanJob {
            id: JobId(id),
            ty: 0,
            levels: levels.into(),
            work_left: 100.0 + 20_000.0 * rng.unit(),
            deadline_s: Some(500.0 + 20_000.0 * rng.unit()),
            restart_s,
            restart_s_per_doubling: 0.0,
            current: [0, 1, 2, 4][rng.below(4) as usize],
        }
    }

    /// The breakpoint list as taking each span in turn (the first implementation:
    /// split at both ends, subtract between) leaves it.
    fn take_one_by_one(free: &mut Vec<(usize, u32)>, spans: &[Span]) {
        let split = |f: &mut Vec<(usize, u32)>, k: usize| {
            let i = f.partition_point(|p| p.0 <= k);
            if f[i - 1].0 != k {
                let v = f[i - 1].1;
                f.insert(i, (k, v));
            }
        };
        for &(from, to, n) in spans {
            if n == 0 || from >= to {
                continue;
            }
            split(free, from);
            split(free, to);
            let lo = free.partition_point(|p| p.0 < from);
            let hi = free.partition_point(|p| p.0 < to);
            for p in &mut free[lo..hi] {
                p.1 -= n;
            }
        }
    }

    /// `ceil_slots` is `ceil().max(0.0) as usize` on integers, near them, and at the
    /// edges of its fast range.
    #[test]
    fn ceil_slots_is_the_library_ceil() {
        let mut rng = Rng(3);
        let mut xs = vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            -1.5,
            4.0e15,
            4.0e15 - 0.5,
            3.999_999_999_999_999e15,
            1e300,
        ];
        for k in 0..2000 {
            let x = f64::from(k) * 0.25;
            // The floats either side of `x`.
            let bits = x.to_bits();
            xs.extend([x, x - 1e-9, x + 1e-9, f64::from_bits(bits + 1)]);
            if x > 0.0 {
                xs.push(f64::from_bits(bits - 1));
            }
            xs.push(rng.unit() * 1e6);
            xs.push((rng.unit() * 1e6).floor());
        }
        for x in xs {
            assert_eq!(ceil_slots(x), x.ceil().max(0.0) as usize, "{x}");
        }
    }

    /// Timelines after planning random jobs, with the same plans taken span by span.
    #[test]
    fn merged_takes_equal_taking_span_by_span() {
        let cluster = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut rng = Rng(7);
        for case in 0..200 {
            let mut t = Timeline::new(&cluster, 0.0, 60.0);
            let mut reference = t.free[0].clone();
            for k in 0..12 {
                let j = job(&mut rng, k, if case % 2 == 0 { 0.0 } else { 7.0 });
                let p = t.plan(&j, case % 3 == 0);
                take_one_by_one(&mut reference, &p.spans);
                assert_eq!(t.free[0], reference, "case {case}, job {k}");
            }
        }
    }

    /// Case `case` of a randomised test: its restart delay (none on even cases), whether
    /// shares mix, and a timeline of 60-s slots from `case × step_s`.
    fn case_of(cluster: &ClusterSpec, case: usize, step_s: f64) -> (f64, bool, Timeline) {
        let restart_s = if case.is_multiple_of(2) { 0.0 } else { 5.0 };
        let t = Timeline::new(cluster, step_s * case as f64, 60.0);
        (restart_s, case % 4 < 2, t)
    }

    /// Plans whose runs of the same devices are joined leave the same timelines, finish
    /// at the same times and hold the same devices now as plans whose runs are not.
    #[test]
    fn joined_runs_leave_the_same_timelines() {
        let cluster = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut rng = Rng(5);
        let (mut joined, mut spans) = (0usize, 0usize);
        for case in 0..300 {
            let (restart_s, mix, mut t) = case_of(&cluster, case, 60.0);
            let mut u = t.clone();
            u.coalesce = false;
            for k in 0..12 {
                let mut j = job(&mut rng, k, restart_s);
                if k % 5 == 4 {
                    j.deadline_s = None;
                }
                // Any shape and switch (runs of the same devices meet at switches that
                // are no breakpoint): the spans either walk takes leave the same list.
                let i = rng.below(j.levels.len() as u64) as usize;
                let shape = (lower_level(&j, i), rng.below(60) as usize, j.levels[i].0);
                let (mut t2, mut u2) = (t.clone(), u.clone());
                let (_, ps) = t2.run(&j, shape, None);
                let (_, qs) = u2.run(&j, shape, None);
                t2.reserve(&j, &ps);
                u2.reserve(&j, &qs);
                assert_eq!(t2.free, u2.free, "case {case}, job {k}, shape {shape:?}");
                let (p, q) = if j.deadline_s.is_some() {
                    (t.plan(&j, mix), u.plan(&j, mix))
                } else {
                    let (p, q) = (t.greedy(&j), u.greedy(&j));
                    t.reserve(&j, &p.spans);
                    u.reserve(&j, &q.spans);
                    (p, q)
                };
                assert_eq!(t.free, u.free, "case {case}, job {k}");
                assert_eq!(
                    (p.feasible, p.finish_s, p.now()),
                    (q.feasible, q.finish_s, q.now())
                );
                joined += q.spans.len() - p.spans.len();
                spans += q.spans.len();
            }
        }
        assert!(joined > spans / 4, "{joined} of {spans} runs joined");
    }

    /// Every probe the sums decide is the walk's answer, and every plan is the plan
    /// of whole walks (no early stop, every bisection probe walked).
    #[test]
    fn sums_and_early_stops_answer_as_whole_walks() {
        let cluster = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut rng = Rng(11);
        let (mut decided, mut walked) = (0usize, 0usize);
        for case in 0..300 {
            let (restart_s, mix, mut fast) = case_of(&cluster, case, 120.0);
            let mut slow = fast.clone();
            slow.early_stop = false;
            for k in 0..10 {
                let j = job(&mut rng, k, restart_s);
                let d = j.deadline_s.unwrap();
                // Probes at every switch slot of every level pair.
                for i in 0..j.levels.len() {
                    let shape = (lower_level(&j, i), j.levels[i].0);
                    let Some(sums) = SwitchSums::new(&fast, &j, shape, d) else {
                        continue;
                    };
                    for s in 0..=sums.last_slot {
                        let walk = slow
                            .run_into(&j, (shape.0, s, shape.1), Some(d), None)
                            .is_some();
                        match sums.meets(&j, s) {
                            Some(m) => {
                                decided += 1;
                                assert_eq!(m, walk, "case {case} job {k} level {i} slot {s}");
                            }
                            None => walked += 1,
                        }
                        let stopped = fast.run_into(&j, (shape.0, s, shape.1), Some(d), None);
                        let whole = slow.run_into(&j, (shape.0, s, shape.1), Some(d), None);
                        assert_eq!(stopped, whole);
                    }
                }
                let p = fast.plan(&j, mix);
                let q = slow.plan_walking(&j, mix);
                assert_eq!(p, q, "case {case} job {k}");
            }
        }
        assert!(decided > 1000, "{decided} probes decided by the sums");
        assert!(walked < decided / 10, "{walked} walked, {decided} decided");
    }

    impl Timeline {
        /// [`Timeline::plan`] as first written: every probe of the bisection walks.
        fn plan_walking(&mut self, job: &PlanJob, mix: bool) -> JobPlan {
            let found = (|| {
                let d = job.deadline_s?;
                for (i, &(level, rate)) in job.levels.iter().enumerate() {
                    if rate * (d - self.now_s) < job.work_left {
                        continue;
                    }
                    let (finish, spans) = self.run(job, (level, 0, level), Some(d));
                    let Some(finish) = finish else { continue };
                    if !mix {
                        return Some(JobPlan {
                            feasible: true,
                            finish_s: Some(finish),
                            spans,
                        });
                    }
                    let lower = lower_level(job, i);
                    let at = |s: usize| self.run(job, (lower, s, level), Some(d));
                    let slots = ((d - self.now_s) / self.slot_s).ceil().max(0.0) as usize;
                    let (mut lo, mut hi) = (0usize, slots);
                    while lo < hi {
                        let mid = (lo + hi).div_ceil(2);
                        if at(mid).0.is_some() {
                            lo = mid;
                        } else {
                            hi = mid - 1;
                        }
                    }
                    let (finish, spans) = at(lo);
                    return Some(JobPlan {
                        feasible: true,
                        finish_s: Some(finish.unwrap_or(d)),
                        spans,
                    });
                }
                None
            })();
            let plan = found.unwrap_or_else(|| self.greedy(job));
            take_one_by_one(&mut self.free[job.ty], &plan.spans);
            plan
        }
    }
}
