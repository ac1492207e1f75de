//! The fast solver of the Sia knapsack: the best of three starts, each completed by
//! a greedy on value per extra device and improvement moves (single-job moves,
//! exchanges within a type, relocations across types, swaps of two running jobs'
//! types), in O(jobs · configurations) per move (swaps: times the distinct sizes
//! held).

use super::Problem;

/// Fast near-exact solution: the best of three starts, each completed by
/// [`improve_from`]: nothing allocated; the Lagrangian relaxation's choice (per-type
/// device prices by subgradient steps, each job then picks independently), repaired
/// to fit by dropping the choices that lose least value per device; and `held`
/// (the configurations the jobs hold now, which the re-allocation factor favours).
pub fn solve_fast(p: &Problem, held: &[Option<usize>]) -> Vec<Option<usize>> {
    solve_fast_with(p, held, true)
}

/// [`solve_fast`], with swaps of two running jobs' types among its moves or not
/// (`sia-pacer`'s choice, `Sia::swaps`).
pub fn solve_fast_with(p: &Problem, held: &[Option<usize>], swaps: bool) -> Vec<Option<usize>> {
    let mut best: Option<(f64, Vec<Option<usize>>)> = None;
    let mut consider = |c: Vec<Option<usize>>| {
        let (v, fits) = p.evaluate(&c);
        if fits && best.as_ref().is_none_or(|b| v > b.0 + 1e-12) {
            best = Some((v, c));
        }
    };
    consider(improve_from(p, &vec![None; p.options.len()], swaps));
    consider(improve_from(p, &repair(p, lagrangian(p)), swaps));
    if held.len() == p.options.len() && p.evaluate(held).1 {
        consider(improve_from(p, held, swaps));
    }
    best.map(|b| b.1)
        .unwrap_or_else(|| vec![None; p.options.len()])
}

/// Each job's best configuration under per-type device prices found by projected
/// subgradient steps on the capacity constraints.
fn lagrangian(p: &Problem) -> Vec<Option<usize>> {
    let types = p.capacity.len();
    let mut mu = vec![0.0f64; types];
    let mut pick = vec![None; p.options.len()];
    let mut used = vec![0u64; types];
    let vmax = p
        .options
        .iter()
        .flatten()
        .map(|o| o.1)
        .fold(0.0f64, f64::max);
    for it in 0..40 {
        used.iter_mut().for_each(|u| *u = 0);
        for (j, o) in p.options.iter().enumerate() {
            let mut b: Option<(f64, usize)> = None;
            for &(c, v) in o {
                let cfg = p.configs[c];
                let r = v - mu[cfg.ty as usize] * cfg.gpus as f64;
                if r > 0.0 && b.is_none_or(|x| r > x.0) {
                    b = Some((r, c));
                }
            }
            pick[j] = b.map(|x| x.1);
            if let Some(c) = pick[j] {
                used[p.configs[c].ty as usize] += p.configs[c].gpus as u64;
            }
        }
        let step = vmax / (1.0 + it as f64);
        let mut all_fit = true;
        for t in 0..types {
            let cap = p.capacity[t].max(1) as f64;
            let g = (used[t] as f64 - cap) / cap;
            if g > 0.0 {
                all_fit = false;
            }
            mu[t] = (mu[t] + step * g / cap.sqrt()).max(0.0);
        }
        if all_fit && it > 0 {
            break;
        }
    }
    pick
}

/// Makes a choice fit: on each over-used type, drops the choices with the least
/// value per device until the type fits.
fn repair(p: &Problem, mut choice: Vec<Option<usize>>) -> Vec<Option<usize>> {
    let val = |j: usize, c: usize| p.options[j].iter().find(|o| o.0 == c).map_or(0.0, |o| o.1);
    for t in 0..p.capacity.len() {
        let mut on: Vec<(f64, usize)> = choice
            .iter()
            .enumerate()
            .filter_map(|(j, c)| {
                let c = (*c)?;
                (p.configs[c].ty as usize == t).then(|| (val(j, c) / p.configs[c].gpus as f64, j))
            })
            .collect();
        let mut used: u64 = on
            .iter()
            .map(|&(_, j)| p.configs[choice[j].unwrap_or(0)].gpus as u64)
            .sum();
        on.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, j) in on {
            if used <= p.capacity[t] {
                break;
            }
            if let Some(c) = choice[j].take() {
                used -= p.configs[c].gpus as u64;
            }
        }
    }
    choice
}

/// From a feasible `start`: greedy on value gained per extra device, then
/// single-job improvement passes.
fn improve_from(p: &Problem, start: &[Option<usize>], swaps: bool) -> Vec<Option<usize>> {
    let n = p.options.len();
    let mut free: Vec<i64> = p.capacity.iter().map(|&c| c as i64).collect();
    let mut choice: Vec<Option<(usize, f64)>> = vec![None; n];
    for (j, c) in start.iter().enumerate() {
        if let Some(&(c, v)) = c.and_then(|c| p.options[j].iter().find(|o| o.0 == c)) {
            free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
            choice[j] = Some((c, v));
        }
    }
    // Best move of a job: (gain per device, job, option index) among those that fit.
    let best_move = |j: usize, cur: Option<(usize, f64)>, free: &[i64]| -> Option<(f64, usize)> {
        let (cur_v, cur_cfg) = cur.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        let mut best: Option<(f64, usize)> = None;
        for (k, &(c, v)) in p.options[j].iter().enumerate() {
            if v <= cur_v + 1e-12 {
                continue;
            }
            let cfg = p.configs[c];
            let back = cur_cfg
                .filter(|o| o.ty == cfg.ty)
                .map_or(0, |o| o.gpus as i64);
            if (cfg.gpus as i64) > free[cfg.ty as usize] + back {
                continue;
            }
            let extra = (cfg.gpus as i64 - cur_cfg.map_or(0, |o| o.gpus as i64)).max(1) as f64;
            let ratio = (v - cur_v) / extra;
            if best.is_none_or(|b| ratio > b.0 + 1e-15) {
                best = Some((ratio, k));
            }
        }
        best
    };
    let apply = |j: usize, k: usize, choice: &mut [Option<(usize, f64)>], free: &mut [i64]| {
        if let Some((c, _)) = choice[j] {
            let o = p.configs[c];
            free[o.ty as usize] += o.gpus as i64;
        }
        let (c, v) = p.options[j][k];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[j] = Some((c, v));
    };
    // Max-heap on ratio; stale entries are re-evaluated when popped.
    let mut heap: std::collections::BinaryHeap<(OrdF64, std::cmp::Reverse<usize>)> =
        std::collections::BinaryHeap::new();
    for (j, &ch) in choice.iter().enumerate() {
        if let Some((r, _)) = best_move(j, ch, &free) {
            heap.push((OrdF64(r), std::cmp::Reverse(j)));
        }
    }
    while let Some((OrdF64(r), std::cmp::Reverse(j))) = heap.pop() {
        match best_move(j, choice[j], &free) {
            Some((r2, k)) if (r2 - r).abs() <= 1e-12 * r.abs().max(1.0) => {
                apply(j, k, &mut choice, &mut free);
                if let Some((r3, _)) = best_move(j, choice[j], &free) {
                    heap.push((OrdF64(r3), std::cmp::Reverse(j)));
                }
            }
            Some((r2, _)) => heap.push((OrdF64(r2), std::cmp::Reverse(j))),
            None => {}
        }
    }
    // Improvement: each job to its best configuration given what the others hold,
    // including giving its devices to an unallocated job of higher value.
    for _pass in 0..3 {
        let mut improved = false;
        for j in 0..n {
            let cur_v = choice[j].map_or(0.0, |x| x.1);
            let mut best: Option<(f64, usize)> = None;
            for (k, &(c, v)) in p.options[j].iter().enumerate() {
                if v <= cur_v + 1e-12 {
                    continue;
                }
                let cfg = p.configs[c];
                let back = choice[j]
                    .map(|(c0, _)| p.configs[c0])
                    .filter(|o| o.ty == cfg.ty)
                    .map_or(0, |o| o.gpus as i64);
                if (cfg.gpus as i64) <= free[cfg.ty as usize] + back && best.is_none_or(|b| v > b.0)
                {
                    best = Some((v, k));
                }
            }
            if let Some((_, k)) = best {
                apply(j, k, &mut choice, &mut free);
                improved = true;
            }
        }
        // Exchange: a job takes a better configuration with devices another job on
        // the same type gives up by shrinking (or stopping), when the sum gains.
        for _ in 0..200 {
            let moved = exchange(p, &mut choice, &mut free)
                || relocate(p, &mut choice, &mut free)
                || (swaps && swap(p, &mut choice, &mut free));
            if !moved {
                break;
            }
            improved = true;
        }
        if !improved {
            break;
        }
    }
    choice.into_iter().map(|c| c.map(|x| x.0)).collect()
}

/// One type's two least losses (of different jobs) at one freed count: (loss, job,
/// option index or `usize::MAX` for stopping the job).
pub(super) type ShrinkSlot = [(f64, usize, usize); 2];

/// Per type and device count `d ≤ maxg`: the two least losses (of different jobs) of
/// freeing at least `d` devices of that type by shrinking or stopping one job of
/// `choice` (its configuration and value; `None`: not a candidate).
pub(super) fn shrink_table(
    p: &Problem,
    choice: &[Option<(usize, f64)>],
    maxg: usize,
) -> Vec<Vec<ShrinkSlot>> {
    let types = p.capacity.len();
    // (loss, job, option index or usize::MAX for none), two best per freed count.
    type Slot = ShrinkSlot;
    let empty: Slot = [(f64::INFINITY, usize::MAX, 0); 2];
    let mut cheapest: Vec<Vec<Slot>> = vec![vec![empty; maxg + 1]; types];
    let put = |slot: &mut Slot, e: (f64, usize, usize)| {
        if e.1 == slot[0].1 {
            if e.0 < slot[0].0 {
                slot[0] = e;
            }
        } else if e.0 < slot[0].0 {
            slot[1] = slot[0];
            slot[0] = e;
        } else if e.0 < slot[1].0 {
            slot[1] = e;
        }
    };
    for (i, ch) in choice.iter().enumerate() {
        let Some((c0, v0)) = *ch else { continue };
        let o = p.configs[c0];
        let t = o.ty as usize;
        put(&mut cheapest[t][o.gpus as usize], (v0, i, usize::MAX));
        for (k, &(c, v)) in p.options[i].iter().enumerate() {
            let cfg = p.configs[c];
            if cfg.ty == o.ty && cfg.gpus < o.gpus {
                put(
                    &mut cheapest[t][(o.gpus - cfg.gpus) as usize],
                    (v0 - v, i, k),
                );
            }
        }
    }
    // Suffix minimum: freeing at least d.
    for per in cheapest.iter_mut() {
        for d in (0..maxg).rev() {
            let next = per[d + 1];
            for e in next {
                if e.1 != usize::MAX {
                    put(&mut per[d], e);
                }
            }
        }
    }
    cheapest
}

/// The best single exchange (see [`improve_from`]); applies it and returns whether
/// there was one that gains. Per type, `cheapest[d]` holds the two least losses
/// (of different jobs) of freeing at least `d` devices by shrinking one job.
fn exchange(p: &Problem, choice: &mut [Option<(usize, f64)>], free: &mut [i64]) -> bool {
    let maxg = p.configs.iter().map(|c| c.gpus).max().unwrap_or(0) as usize;
    let cheapest = shrink_table(p, choice, maxg);
    // (net gain, job, its option, the shrink that makes room).
    type Move = (f64, usize, usize, (f64, usize, usize));
    let mut best: Option<Move> = None;
    for (j, ch) in choice.iter().enumerate() {
        let (cur_v, cur) = ch.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        for (k, &(c, v)) in p.options[j].iter().enumerate() {
            if v <= cur_v + 1e-12 {
                continue;
            }
            let cfg = p.configs[c];
            let t = cfg.ty as usize;
            let back = cur.filter(|o| o.ty == cfg.ty).map_or(0, |o| o.gpus as i64);
            let need = cfg.gpus as i64 - back - free[t];
            if need <= 0 || need as usize > maxg {
                continue;
            }
            let slot = cheapest[t][need as usize];
            let Some(&e) = slot.iter().find(|e| e.1 != j && e.1 != usize::MAX) else {
                continue;
            };
            let net = v - cur_v - e.0;
            if net > 1e-9 && best.is_none_or(|b| net > b.0) {
                best = Some((net, j, k, e));
            }
        }
    }
    let Some((_, j, k, (_, i, ki))) = best else {
        return false;
    };
    // Shrink i, then move j.
    if let Some((c0, _)) = choice[i] {
        let o = p.configs[c0];
        free[o.ty as usize] += o.gpus as i64;
        choice[i] = None;
    }
    if ki != usize::MAX {
        let (c, v) = p.options[i][ki];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[i] = Some((c, v));
    }
    if let Some((c0, _)) = choice[j] {
        let o = p.configs[c0];
        free[o.ty as usize] += o.gpus as i64;
    }
    let (c, v) = p.options[j][k];
    free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
    choice[j] = Some((c, v));
    true
}

/// The best relocation (see [`improve_from`]): a running job moves to a
/// configuration of another type that fits in its free devices, and the devices it
/// leaves (with those already free there) go to the one job that gains most from
/// them on the type it left (a job of that type growing, or a waiting one starting).
/// Applies it and returns whether there was one that gains: the exact optimum often
/// differs from the greedy by such type swaps (`pacer-lab sia-gap`).
fn relocate(p: &Problem, choice: &mut [Option<(usize, f64)>], free: &mut [i64]) -> bool {
    let types = p.capacity.len();
    let maxg = p.configs.iter().map(|c| c.gpus).max().unwrap_or(0) as usize;
    // Per type and device count d: the two best (gain, job, option) of one job taking
    // a configuration of that type with at most d more devices than it holds there.
    type Slot = [(f64, usize, usize); 2];
    let empty: Slot = [(0.0, usize::MAX, 0); 2];
    let mut grow: Vec<Vec<Slot>> = vec![vec![empty; maxg + 1]; types];
    let put = |slot: &mut Slot, e: (f64, usize, usize)| {
        if e.1 == slot[0].1 {
            if e.0 > slot[0].0 {
                slot[0] = e;
            }
        } else if e.0 > slot[0].0 {
            slot[1] = slot[0];
            slot[0] = e;
        } else if e.0 > slot[1].0 {
            slot[1] = e;
        }
    };
    for (b, ch) in choice.iter().enumerate() {
        let (cur_v, cur) = ch.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        for (k, &(c, v)) in p.options[b].iter().enumerate() {
            let cfg = p.configs[c];
            // Growing on its own type, or starting; a job running elsewhere is not
            // moved here (that would be a chain of relocations).
            let held = match cur {
                Some(o) if o.ty == cfg.ty => o.gpus,
                Some(_) => continue,
                None => 0,
            };
            if v <= cur_v + 1e-12 || cfg.gpus <= held {
                continue;
            }
            put(
                &mut grow[cfg.ty as usize][(cfg.gpus - held) as usize],
                (v - cur_v, b, k),
            );
        }
    }
    // Prefix maximum: at most d more devices.
    for per in grow.iter_mut() {
        for d in 1..=maxg {
            let prev = per[d - 1];
            for e in prev {
                if e.1 != usize::MAX {
                    put(&mut per[d], e);
                }
            }
        }
    }
    // (net gain, moving job, its option, the grower on the type it leaves).
    type Relocation = (f64, usize, usize, (f64, usize, usize));
    let mut best: Option<Relocation> = None;
    for (a, ch) in choice.iter().enumerate() {
        let Some((c0, v0)) = *ch else { continue };
        let from = p.configs[c0];
        let x = from.ty as usize;
        let room = (from.gpus as i64 + free[x]).clamp(0, maxg as i64) as usize;
        let Some(&g) = grow[x][room].iter().find(|e| e.1 != a && e.1 != usize::MAX) else {
            continue;
        };
        for (k, &(c, v)) in p.options[a].iter().enumerate() {
            let cfg = p.configs[c];
            if cfg.ty == from.ty || cfg.gpus as i64 > free[cfg.ty as usize] {
                continue;
            }
            let net = v - v0 + g.0;
            if net > 1e-9 && best.is_none_or(|b| net > b.0) {
                best = Some((net, a, k, g));
            }
        }
    }
    let Some((_, a, k, (_, b, kb))) = best else {
        return false;
    };
    for (j, k) in [(a, k), (b, kb)] {
        if let Some((c0, _)) = choice[j] {
            let o = p.configs[c0];
            free[o.ty as usize] += o.gpus as i64;
        }
        let (c, v) = p.options[j][k];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[j] = Some((c, v));
    }
    debug_assert!(free.iter().all(|&f| f >= 0));
    true
}

/// The best swap (see [`improve_from`]): two running jobs on different types trade
/// types, each taking the configuration of the other's type that gains most within
/// the devices the other leaves there (and those already free). Applies it and
/// returns whether there was one whose two gains sum to more than zero: on a full
/// cluster neither a relocation nor an exchange moves a job onto a type whose
/// devices another running job holds, which Sia's exact program does when two
/// jobs' goodputs favour each other's types. Per (type, held size) of the moving
/// job and (type, held size) of its partner the best of each side is independent,
/// so the search is O(jobs · sizes · options), not over pairs of jobs.
fn swap(p: &Problem, choice: &mut [Option<(usize, f64)>], free: &mut [i64]) -> bool {
    let types = p.capacity.len();
    let mut sizes: Vec<u32> = choice
        .iter()
        .flatten()
        .map(|&(c, _)| p.configs[c].gpus)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let s = sizes.len();
    // side[(x, a, u, b)]: the best (gain, job, option) of a job on type x holding
    // sizes[a] devices taking a configuration of type u within free[u] + sizes[b].
    let idx = |x: usize, a: usize, u: usize, b: usize| ((x * s + a) * types + u) * s + b;
    let mut side: Vec<Option<(f64, usize, usize)>> = vec![None; types * s * types * s];
    for (j, ch) in choice.iter().enumerate() {
        let Some((c0, v0)) = *ch else { continue };
        let from = p.configs[c0];
        let x = from.ty as usize;
        let Ok(a) = sizes.binary_search(&from.gpus) else {
            continue;
        };
        for (b, &g) in sizes.iter().enumerate() {
            for (k, &(c, v)) in p.options[j].iter().enumerate() {
                let cfg = p.configs[c];
                let u = cfg.ty as usize;
                if u == x || i64::from(cfg.gpus) > free[u] + i64::from(g) {
                    continue;
                }
                let e = &mut side[idx(x, a, u, b)];
                if e.is_none_or(|e| v - v0 > e.0) {
                    *e = Some((v - v0, j, k));
                }
            }
        }
    }
    type Move = (usize, usize);
    let mut best: Option<(f64, Move, Move)> = None;
    for x in 0..types {
        for u in x + 1..types {
            for a in 0..s {
                for b in 0..s {
                    if let (Some(i), Some(j)) = (side[idx(x, a, u, b)], side[idx(u, b, x, a)]) {
                        let net = i.0 + j.0;
                        if net > 1e-9 && best.is_none_or(|e| net > e.0) {
                            best = Some((net, (i.1, i.2), (j.1, j.2)));
                        }
                    }
                }
            }
        }
    }
    let Some((_, a, b)) = best else {
        return false;
    };
    // Both leave first, then both take their new configurations.
    for (j, _) in [a, b] {
        if let Some((c0, _)) = choice[j] {
            let o = p.configs[c0];
            free[o.ty as usize] += o.gpus as i64;
        }
    }
    for (j, k) in [a, b] {
        let (c, v) = p.options[j][k];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[j] = Some((c, v));
    }
    debug_assert!(free.iter().all(|&f| f >= 0));
    true
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sia::Config;

    /// Two types of two devices, both held: job 0 on `a` would rather run on `b`,
    /// job 1 on `b` would rather run on `a`. No single move, exchange or
    /// relocation fits (nothing is free); the swap does.
    #[test]
    fn two_running_jobs_trade_types() {
        let cfg = |ty| Config {
            ty,
            nodes: 1,
            gpus: 2,
        };
        let p = Problem {
            configs: vec![cfg(0), cfg(1)],
            capacity: vec![2, 2],
            options: vec![vec![(0, 0.2), (1, 0.5)], vec![(0, 0.5), (1, 0.3)]],
        };
        let held = [Some(0), Some(1)];
        let mut choice: Vec<Option<(usize, f64)>> = vec![Some((0, 0.2)), Some((1, 0.3))];
        let mut free = vec![0i64, 0];
        assert!(!exchange(&p, &mut choice, &mut free));
        assert!(!relocate(&p, &mut choice, &mut free));
        assert!(swap(&p, &mut choice, &mut free));
        assert_eq!(free, [0, 0]);
        assert!(!swap(&p, &mut choice, &mut free), "no further gain");
        assert_eq!(solve_fast(&p, &held), [Some(1), Some(0)]);
    }
}
