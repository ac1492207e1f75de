//! The round loop.

use super::*;

impl Simulation<'_> {
    /// Runs the simulation under `policy`, calling `on_round` after each round's decision.
    ///
    /// A policy with an event-driven form ([`Policy::incremental`]) is told about
    /// arrivals, departures and attained service instead of being handed every
    /// active job, so a round costs what changes in it (the running jobs' progress
    /// and the allocations that move), not the length of the queue; the others get
    /// a full [`ClusterView`] each round. `on_round` is the progress sink: it sees
    /// the simulated time and the finished jobs ([`RoundInfo`]); the engine itself
    /// reads no clock but for `wall_ms`.
    pub fn run(
        &self,
        policy: &mut dyn Policy,
        mut on_round: impl FnMut(&RoundInfo),
    ) -> Result<SimResult, SimError> {
        let wall = Instant::now();
        let cfg = &self.config;
        cfg.validate()?;
        cfg.check_jobs(self.jobs)?;
        crate::admit::check_workload(self.cluster, self.apps, self.jobs)?;
        let adaptive = policy.adaptive_batch();
        let kinds: Vec<Box<dyn JobProgress + '_>> =
            self.jobs.iter().map(|j| progress::of(&j.work)).collect();
        let speeds = self.speed_tables_of(&kinds);
        // The event-driven forms place jobs without looking at device types: they run
        // only when every job can use every device type of the cluster at the same
        // speed (the full policies keep each job on the types it has measurements
        // for, and a job whose speed depends on the type on one type).
        let unrestricted = speeds.iter().all(|sp| {
            sp.per_type
                .iter()
                .all(|c| !c.points.is_empty() && *c == sp.per_type[0])
        });
        // Every job measured on every device type of the cluster: no allocation can
        // land on an unmeasured one, and the per-change check below is skipped.
        let types = self.cluster.device_types.len();
        let all_measured = speeds.iter().all(|sp| {
            sp.per_type.len() >= types && sp.per_type[..types].iter().all(|c| !c.points.is_empty())
        });
        let mut incremental = if unrestricted {
            policy.incremental()
        } else {
            None
        };
        let modes: Vec<BatchMode> = self
            .jobs
            .iter()
            .zip(&kinds)
            .map(|(j, kind)| kind.batch_mode(self, j, adaptive))
            .collect();
        let mut states: Vec<JobState> = self.jobs.iter().map(|_| JobState::new()).collect();
        // Jobs in arrival order; `next_arrival` indexes into it, `rank` inverts it.
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            self.jobs[a]
                .spec
                .arrival_s
                .total_cmp(&self.jobs[b].spec.arrival_s)
                .then(a.cmp(&b))
        });
        let mut rank = vec![0usize; self.jobs.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let mut next_arrival = 0usize;
        // Active jobs in arrival order (kept only for policies without an
        // event-driven form, which see them all each round).
        let mut active: Vec<usize> = Vec::new();
        let mut n_active = 0usize;
        // Jobs holding devices, in arrival order, and whether each job is among them
        // (a dense flag, so that pruning `running` reads no job state).
        let mut running: Vec<usize> = Vec::new();
        let mut holds = vec![false; self.jobs.len()];
        let mut just_finished: Vec<usize> = Vec::new();
        let mut arrived: Vec<usize> = Vec::new();
        // Decision count, and the decision that last changed each job (one change each).
        let mut decision = 0u64;
        let mut changed_at = vec![0u64; self.jobs.len()];
        let mut started: Vec<usize> = Vec::new();
        let mut merged: Vec<usize> = Vec::new();
        let mut changes: Vec<(JobId, Allocation)> = Vec::new();
        let mut attained: Vec<(JobId, f64)> = Vec::new();
        let mut node_used = vec![0u32; self.cluster.nodes.len()];
        let mut used = 0u32;
        // Σ active jobs × round length and Σ round lengths since the start; a job's
        // contention is the difference between its departure and its admission.
        let mut contention_sum = 0.0f64;
        let mut contention_s = 0.0f64;
        let mut timeline = Vec::new();
        let mut now = 0.0f64;
        let total_gpus = self.cluster.total_gpus() as f64;
        let mut busy_gpu_s = 0.0;
        let mut finished = 0usize;
        let mut views: Vec<JobView> = Vec::new();
        // Devices of the types each job can run on (adaptive jobs explore up to it).
        let caps: Vec<u32> = speeds
            .iter()
            .map(|sp| {
                let usable: Vec<bool> = sp.per_type.iter().map(|c| !c.points.is_empty()).collect();
                crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64) as u32
            })
            .collect();
        let uses_quality = policy.uses_quality();
        // End of the next round: `now + round_s`, or the next arrival when it comes
        // earlier and `replan_on_arrival` allows (exactly its arrival time, so that it
        // is admitted).
        let next_round = |now: f64, idle: bool, next_arrival: usize| -> f64 {
            let replan = match cfg.replan_on_arrival {
                ArrivalReplan::Never => false,
                ArrivalReplan::WhenIdle => idle,
                ArrivalReplan::Always => true,
            };
            if replan {
                if let Some(&j) = order.get(next_arrival) {
                    let t = self.jobs[j].spec.arrival_s;
                    if t >= now && t < now + cfg.round_s {
                        return t;
                    }
                }
            }
            now + cfg.round_s
        };
        let policy_name = policy.name();
        let bad = |time_s: f64, reason: String| SimError::BadAllocation {
            policy: policy_name.into(),
            time_s,
            reason,
        };
        let mut until = next_round(now, true, next_arrival);
        while finished < self.jobs.len() && now < cfg.max_time_s {
            let dt = until - now;
            // 1. Progress of running jobs over [now, now + round).
            just_finished.clear();
            for &i in &running {
                let st = &mut states[i];
                if st.completion_s.is_some() {
                    continue;
                }
                let before = st.attained_gpu_s;
                let round = progress::Round {
                    job: &self.jobs[i],
                    mode: modes[i],
                    speed: &speeds[i],
                    uses_quality,
                };
                kinds[i].advance(self, &round, st, now, dt);
                busy_gpu_s += st.attained_gpu_s - before;
                if st.completion_s.is_some() {
                    finished += 1;
                    just_finished.push(i);
                    holds[i] = false;
                }
            }
            now = until;
            // 2. Admit arrivals; drop finished jobs.
            if n_active == 0 && next_arrival < order.len() {
                // Idle cluster: jump to the round in which the next job arrives.
                let t = self.jobs[order[next_arrival]].spec.arrival_s;
                if t > now {
                    now = if cfg.replan_on_arrival != ArrivalReplan::Never {
                        t
                    } else {
                        (t / cfg.round_s).ceil() * cfg.round_s
                    };
                }
            }
            arrived.clear();
            while next_arrival < order.len() && self.jobs[order[next_arrival]].spec.arrival_s <= now
            {
                let i = order[next_arrival];
                arrived.push(i);
                states[i].contention_sum = contention_sum;
                states[i].contention_s = contention_s;
                next_arrival += 1;
            }
            n_active += arrived.len();
            n_active -= just_finished.len();
            for &i in &just_finished {
                let st = &mut states[i];
                st.contention_sum = contention_sum - st.contention_sum;
                st.contention_s = contention_s - st.contention_s;
                used -= st.alloc.replicas();
                for &(node, c) in st.alloc.slots() {
                    node_used[node.0 as usize] -= c;
                }
            }
            if !just_finished.is_empty() {
                running.retain(|&i| holds[i]);
            }
            if incremental.is_none() {
                active.extend_from_slice(&arrived);
                if !just_finished.is_empty() {
                    active.retain(|&i| states[i].completion_s.is_none());
                }
            }
            // Departures reach an event-driven policy even when nothing is left to
            // decide (its free devices must include theirs).
            if let Some(inc) = incremental.as_mut() {
                for &i in &just_finished {
                    inc.finish(JobId(i as u32));
                }
            }
            if n_active == 0 {
                for &i in &running {
                    holds[i] = false;
                }
                running.clear();
                until = next_round(now, true, next_arrival);
                continue;
            }
            // 3. Ask the policy.
            changes.clear();
            match incremental.as_mut() {
                Some(inc) => {
                    for &i in &arrived {
                        let v = self.job_view(
                            i,
                            &*kinds[i],
                            &mut states[i],
                            modes[i],
                            &speeds[i],
                            caps[i],
                            false,
                        );
                        inc.admit(&v);
                    }
                    attained.clear();
                    if inc.uses_attained() {
                        attained.extend(
                            running
                                .iter()
                                .map(|&i| (JobId(i as u32), states[i].attained_gpu_s)),
                        );
                    }
                    inc.decide(now, self.cluster, &attained, &mut changes);
                    decision += 1;
                    for (id, _) in &changes {
                        let i = id.0 as usize;
                        let live = states
                            .get(i)
                            .is_some_and(|st| st.completion_s.is_none() && next_arrival > rank[i]);
                        if !live {
                            return Err(bad(
                                now,
                                format!("allocation for job #{i}, which is not active"),
                            ));
                        }
                        if changed_at[i] == decision {
                            return Err(bad(now, format!("two allocations for job #{i}")));
                        }
                        changed_at[i] = decision;
                    }
                }
                None => {
                    views.clear();
                    for &i in &active {
                        let v = self.job_view(
                            i,
                            &*kinds[i],
                            &mut states[i],
                            modes[i],
                            &speeds[i],
                            caps[i],
                            uses_quality,
                        );
                        views.push(v);
                    }
                    let view = ClusterView {
                        now_s: now,
                        cluster: self.cluster,
                        jobs: &views,
                    };
                    let allocs = policy.allocate(&view);
                    if allocs.len() != views.len() {
                        return Err(bad(
                            now,
                            format!("{} allocations for {} jobs", allocs.len(), views.len()),
                        ));
                    }
                    check_capacity(self.cluster, &allocs).map_err(|reason| bad(now, reason))?;
                    for (a, &i) in allocs.into_iter().zip(&active) {
                        if a != states[i].alloc {
                            changes.push((JobId(i as u32), a));
                        }
                    }
                }
            }
            // A job runs only on device types it has measurements for: elsewhere the
            // simulator would have no ground truth and would relabel another type's.
            for (id, a) in changes.iter().filter(|_| !all_measured) {
                let i = id.0 as usize;
                let unmeasured = a.slots().iter().find_map(|&(node, _)| {
                    // A node that does not exist is reported below.
                    let ty = self.cluster.nodes.get(node.0 as usize)?.device_type;
                    speeds[i]
                        .per_type
                        .get(ty.0 as usize)
                        .is_none_or(|c| c.points.is_empty())
                        .then_some((node, ty))
                });
                if let Some((node, ty)) = unmeasured {
                    return Err(bad(
                        now,
                        format!(
                            "job `{}` placed on node {} of device type {}, which it has no \
                             measurements for",
                            self.jobs[i].spec.name,
                            node.0,
                            self.cluster.device_types[ty.0 as usize]
                        ),
                    ));
                }
            }
            // 4. Apply.
            let mut moved = false;
            started.clear();
            // Capacity: devices given up first, then the new ones (in any order).
            changes.retain(|(id, a)| *a != states[id.0 as usize].alloc);
            for (id, _) in &changes {
                for &(node, c) in states[id.0 as usize].alloc.slots() {
                    node_used[node.0 as usize] -= c;
                }
            }
            for (id, a) in changes.drain(..) {
                let i = id.0 as usize;
                let st = &mut states[i];
                for &(node, c) in a.slots() {
                    let n = node.0 as usize;
                    if n >= node_used.len() {
                        return Err(bad(
                            now,
                            format!("job #{i} allocated on node {n}, which does not exist"),
                        ));
                    }
                    node_used[n] += c;
                    if node_used[n] > self.cluster.nodes[n].gpus {
                        return Err(bad(
                            now,
                            format!(
                                "node {n} over-subscribed: {} > {} devices",
                                node_used[n], self.cluster.nodes[n].gpus
                            ),
                        ));
                    }
                }
                used = used - st.alloc.replicas() + a.replicas();
                moved |= st.alloc.is_empty() != a.is_empty();
                // A fixed-batch job's step time and epoch goodput depend on its
                // placement only: kept when it restarts on one node of the same type
                // with the same count as when they were computed.
                if !a.is_empty() {
                    let shape = match a.slots() {
                        &[(node, c)] => Some((c, self.cluster.nodes[node.0 as usize].device_type)),
                        _ => None,
                    };
                    if shape.is_none() || shape != st.fixed_shape {
                        st.fixed_step = None;
                        st.fixed_goodput = None;
                    }
                    st.fixed_shape = shape;
                }
                if st.alloc.is_empty() {
                    started.push(i);
                }
                kinds[i].reallocating(self, st, &a);
                st.alloc = a;
                st.replicas = st.alloc.replicas();
                holds[i] = !st.alloc.is_empty();
                if !st.alloc.is_empty() {
                    st.rescale_left_s = kinds[i].restart_s(self).unwrap_or(cfg.restart_s);
                    st.restarts = Some(st.restarts.map_or(0, |r| r + 1));
                    st.start_s.get_or_insert(now);
                    kinds[i].restarted(self, modes[i], st);
                }
            }
            if moved {
                // Keep arrival order: jobs stepped in the same order give the same sums.
                running.retain(|&i| holds[i]);
                started.sort_unstable_by_key(|&i| rank[i]);
                merge_by_rank(&mut running, &started, &rank, &mut merged);
            }
            // The round this allocation holds for; contention is weighted by it.
            until = next_round(now, used < self.cluster.total_gpus(), next_arrival);
            let dt = until - now;
            contention_sum += n_active as f64 * dt;
            contention_s += dt;
            if cfg.record_timeline {
                timeline.push(RoundStat {
                    time_s: now,
                    active_jobs: n_active as u32,
                    running_jobs: running.len() as u32,
                    used_gpus: used,
                });
            }
            on_round(&RoundInfo {
                now_s: now,
                finished,
                sim: self,
                states: &states,
                kinds: &kinds,
            });
        }
        // Jobs still active at the end: contention up to now.
        for (k, st) in states.iter_mut().enumerate() {
            if st.completion_s.is_none() && rank[k] < next_arrival {
                st.contention_sum = contention_sum - st.contention_sum;
                st.contention_s = contention_s - st.contention_s;
            }
        }
        let mut memo = DedicatedMemo::default();
        let results: Vec<JobResult> = self
            .jobs
            .iter()
            .zip(&states)
            .zip(&kinds)
            .map(|((job, st), kind)| {
                let contention = if st.contention_s > 0.0 {
                    st.contention_sum / st.contention_s
                } else {
                    1.0
                };
                let t_indep = self.independent_time_with(job, &**kind, contention, &mut memo);
                JobResult {
                    name: job.spec.name.clone(),
                    application: job.spec.application.clone(),
                    arrival_s: job.spec.arrival_s,
                    start_s: st.start_s,
                    completion_s: st.completion_s,
                    restarts: st.restarts.unwrap_or(0),
                    gpu_s: st.attained_gpu_s,
                    avg_contention: contention,
                    independent_s: t_indep,
                }
            })
            .collect();
        Ok(SimResult::new(
            policy.name(),
            total_gpus,
            busy_gpu_s,
            results,
            timeline,
            wall.elapsed().as_secs_f64() * 1e3,
        ))
    }
}

/// Merges `add` into `into`, both sorted by `rank` (a round's starts into the running
/// jobs: O(running) instead of a sort).
fn merge_by_rank(into: &mut Vec<usize>, add: &[usize], rank: &[usize], scratch: &mut Vec<usize>) {
    if add.is_empty() {
        return;
    }
    scratch.clear();
    scratch.reserve(into.len() + add.len());
    let (mut a, mut b) = (into.iter().peekable(), add.iter().peekable());
    while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
        if rank[x] <= rank[y] {
            scratch.push(x);
            a.next();
        } else {
            scratch.push(y);
            b.next();
        }
    }
    scratch.extend(a);
    scratch.extend(b);
    std::mem::swap(into, scratch);
}

#[cfg(test)]
mod tests {
    #[test]
    fn merge_keeps_rank_order() {
        let rank = [4, 0, 3, 1, 2];
        let mut into = vec![1, 4, 0];
        let mut scratch = Vec::new();
        super::merge_by_rank(&mut into, &[3, 2], &rank, &mut scratch);
        assert_eq!(into, vec![1, 3, 4, 2, 0]);
        super::merge_by_rank(&mut into, &[], &rank, &mut scratch);
        assert_eq!(into, vec![1, 3, 4, 2, 0]);
    }
}
