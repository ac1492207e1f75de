//! Winner determination of a Themis auction: bidders' bundles, the greedy by
//! value per device at per-type prices (tâtonnement), and the outcome without one
//! winner (for partial allocation).

use std::collections::BinaryHeap;

/// One bundle a bidder values: `g` devices of type `t`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bundle {
    pub(super) t: usize,
    pub(super) g: u32,
    /// log(ρ(∅) / ρ(G)) ≥ 0.
    pub(super) value: f64,
}

pub(super) struct Bidder {
    /// Index into view.jobs.
    pub(super) job: usize,
    pub(super) bundles: Vec<Bundle>,
    /// log ρ(∅).
    pub(super) log_rho_empty: f64,
    /// Priority of the bidder's first bundle over every upgrade (see `best_move`).
    pub(super) first_bonus: f64,
}

#[derive(PartialEq)]
struct Entry {
    per_device: f64,
    bidder: usize,
    /// Bundle held when the entry was made (staleness check).
    from: Option<usize>,
    to: usize,
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.per_device
            .total_cmp(&o.per_device)
            .then(o.bidder.cmp(&self.bidder))
            .then(o.to.cmp(&self.to))
    }
}

/// Best feasible move of a bidder holding `from`: a first bundle, or a larger one
/// of the same type, by value gained per extra device net of the type's price
/// `mu` (log(1/ρ) per device). With prices the move must gain more than the
/// devices cost; with all prices 0, anything that gains at all.
fn best_move(b: &Bidder, from: Option<usize>, free: &[u64], mu: &[f64]) -> Option<(f64, usize)> {
    // A job with nothing cannot finish: in Themis its ρ(∅) is unbounded, so any
    // first bundle beats any upgrade of another job; among first bundles the
    // worse ρ goes first. Our ρ(∅) is finite (one more lease, then a 1/N share),
    // so the first move of a job that holds nothing and is already behind
    // (ρ(∅) > 1) carries that priority explicitly; the others compete on value
    // alone.
    let (t0, g0, v0) = match from {
        Some(k) => {
            let x = b.bundles[k];
            (Some(x.t), x.g, x.value)
        }
        None => (None, 0, -b.first_bonus),
    };
    // A first bundle fixes the job's device type (later moves only grow it), so
    // the type is the one of the bundle the job prefers at these prices — the
    // comparative advantage of device types: where a device costs `mu[t]`, a job
    // only 1.2x faster on V100 than on K80 is better off on K80 than one 10x
    // faster. The priority above does not enter this choice.
    let t_first = match from {
        Some(_) => None,
        None => b
            .bundles
            .iter()
            .filter(|x| x.g as u64 <= free[x.t])
            .map(|x| (x.value - mu[x.t] * x.g as f64, x.t))
            .max_by(|a, c| a.0.total_cmp(&c.0).then(c.1.cmp(&a.1)))
            .map(|(_, t)| t),
    };
    let mut best: Option<(f64, usize)> = None;
    for (k, x) in b.bundles.iter().enumerate() {
        let t = t0.or(t_first);
        if x.g <= g0 || t.is_some_and(|t| t != x.t) || (x.g - g0) as u64 > free[x.t] {
            continue;
        }
        let dg = (x.g - g0) as f64;
        let gain = (x.value - v0) / dg;
        let v = gain - mu[x.t];
        if gain > 0.0 && v > 0.0 && best.is_none_or(|(bv, _)| v > bv) {
            best = Some((v, k));
        }
    }
    best
}

/// Best bundle of a bidder alone, whatever the others do.
fn best_bundle(b: &Bidder, free: &[u64]) -> Option<usize> {
    b.bundles
        .iter()
        .enumerate()
        .filter(|(_, x)| x.g as u64 <= free[x.t] && x.value > 0.0)
        .max_by(|a, b| a.1.value.total_cmp(&b.1.value).then(b.0.cmp(&a.0)))
        .map(|(k, _)| k)
}

/// Result of one winner determination.
pub(super) struct Outcome {
    /// Each bidder's bundle (index), if it won one.
    pub(super) assign: Vec<Option<usize>>,
    /// Whether capacity kept any bidder from its best bundle.
    pub(super) constrained: bool,
    /// Per type: the largest gain per device of a move that did not fit (the
    /// unmet demand at these prices), 0 where none — the price that would clear it.
    pub(super) clearing: Vec<f64>,
}

/// Greedy proportional-fair winner determination at per-type prices `mu`:
/// repeatedly the move (a first bundle, or an upgrade to a larger bundle of the
/// same type) with the largest net gain in log(1/ρ) per extra device; then, at
/// price 0, whatever still gains (no device a bidder wants stays idle).
pub(super) fn winners(
    bidders: &[Bidder],
    free0: &[u64],
    skip: Option<usize>,
    mu: &[f64],
) -> Outcome {
    let mut free = free0.to_vec();
    let mut out: Vec<Option<usize>> = vec![None; bidders.len()];
    let zero = vec![0.0; free0.len()];
    for prices in [mu, &zero[..]] {
        greedy(bidders, &mut free, &mut out, prices, |i| Some(i) != skip);
        if prices.iter().all(|&m| m == 0.0) {
            break;
        }
    }
    let unlimited = vec![u64::MAX; free0.len()];
    let constrained = bidders.iter().enumerate().any(|(i, b)| {
        Some(i) != skip
            && best_bundle(b, &unlimited)
                .is_some_and(|k| out[i].is_none_or(|o| b.bundles[o].value < b.bundles[k].value))
    });
    // Clearing prices: the most a bidder would still gain per device of a type
    // from a move that does not fit — a first bundle, a larger one, or a switch
    // from the type it got (unmet demand; the first-bundle priority left out).
    // 0 where every gaining move fit.
    let types = free0.len();
    let mut clearing = vec![0.0f64; types];
    for (i, b) in bidders.iter().enumerate() {
        if Some(i) == skip {
            continue;
        }
        let (t0, g0, v0) = out[i].map_or((None, 0, 0.0), |k| {
            let x = b.bundles[k];
            (Some(x.t), x.g, x.value)
        });
        for x in &b.bundles {
            let gain = match t0 {
                // A bundle of another type than the one held: a switch.
                Some(t) if t != x.t => {
                    if x.g as u64 <= free[x.t] {
                        continue;
                    }
                    // The price at which it would be indifferent: the switch
                    // also frees the devices it holds, at their price.
                    (x.value - v0 + mu[t] * g0 as f64) / x.g as f64
                }
                _ => {
                    if x.g <= g0 || (x.g - g0) as u64 <= free[x.t] {
                        continue;
                    }
                    (x.value - v0) / (x.g - g0) as f64
                }
            };
            clearing[x.t] = clearing[x.t].max(gain);
        }
    }
    Outcome {
        assign: out,
        constrained,
        clearing,
    }
}

/// The greedy of [`winners`] from the state `out` / `free`: repeatedly the move
/// with the largest net gain per extra device at `prices`, for the bidders
/// `seed` admits (the others neither move nor are re-planned).
fn greedy(
    bidders: &[Bidder],
    free: &mut [u64],
    out: &mut [Option<usize>],
    prices: &[f64],
    seed: impl Fn(usize) -> bool,
) {
    let mut heap = BinaryHeap::new();
    for (i, b) in bidders.iter().enumerate() {
        if !seed(i) {
            continue;
        }
        if let Some((v, k)) = best_move(b, out[i], free, prices) {
            heap.push(Entry {
                per_device: v,
                bidder: i,
                from: out[i],
                to: k,
            });
        }
    }
    while let Some(e) = heap.pop() {
        let b = &bidders[e.bidder];
        let cur = out[e.bidder];
        let x = b.bundles[e.to];
        let g0 = cur.map_or(0, |k| b.bundles[k].g);
        if e.from == cur && (x.g - g0) as u64 <= free[x.t] {
            free[x.t] -= (x.g - g0) as u64;
            out[e.bidder] = Some(e.to);
        }
        // Next move of this bidder (also re-plans a stale entry).
        if let Some((v, k)) = best_move(b, out[e.bidder], free, prices) {
            heap.push(Entry {
                per_device: v,
                bidder: e.bidder,
                from: out[e.bidder],
                to: k,
            });
        }
    }
}

/// The others' assignment without bidder `skip`, for its partial allocation:
/// `assign` (an outcome of [`winners`] at `mu`) with `skip`'s devices returned
/// and the same greedy continued from there, at `mu` and then at 0. Only
/// bidders that can use the returned devices are re-planned — those holding
/// their type or nothing; every other bidder had no gaining move left when
/// `assign` was made, and returning devices of another type gives it none.
/// Starting from `assign` rather than re-running the auction without `skip`
/// keeps what the others won (re-running a greedy can hand them less, which
/// would make `skip`'s fraction exceed 1), and costs one pass over the
/// bidders instead of a whole auction per winner.
pub(super) fn winners_without(
    bidders: &[Bidder],
    free0: &[u64],
    assign: &[Option<usize>],
    skip: usize,
    mu: &[f64],
) -> Vec<Option<usize>> {
    let mut free = free0.to_vec();
    let mut out = assign.to_vec();
    out[skip] = None;
    for (b, a) in bidders.iter().zip(&out) {
        if let Some(k) = *a {
            let x = b.bundles[k];
            free[x.t] = free[x.t].saturating_sub(x.g as u64);
        }
    }
    let Some(t) = assign[skip].map(|k| bidders[skip].bundles[k].t) else {
        return out;
    };
    let zero = vec![0.0; free0.len()];
    for prices in [mu, &zero[..]] {
        let held: Vec<Option<usize>> = out
            .iter()
            .zip(bidders)
            .map(|(a, b)| a.map(|k| b.bundles[k].t))
            .collect();
        greedy(bidders, &mut free, &mut out, prices, |i| {
            i != skip && held[i].is_none_or(|u| u == t)
        });
        if prices.iter().all(|&m| m == 0.0) {
            break;
        }
    }
    out
}

/// Rounds of price adjustment in [`solve`].
const PRICE_ROUNDS: usize = 6;

/// Proportional-fair winner determination with per-type prices found by
/// tâtonnement: start at 0 (plain greedy), set each type's price to its clearing
/// price, re-run, damp; keep the assignment with the largest Σ log(1/ρ) (the
/// first-bundle priority counted). Returns it and the prices that produced it.
pub(super) fn solve(bidders: &[Bidder], free0: &[u64]) -> (Outcome, Vec<f64>) {
    let objective = |o: &Outcome| -> f64 {
        bidders
            .iter()
            .zip(&o.assign)
            .map(|(b, a)| a.map_or(0.0, |k| b.bundles[k].value + b.first_bonus))
            .sum()
    };
    let mut mu = vec![0.0; free0.len()];
    let mut best = winners(bidders, free0, None, &mu);
    let mut best_obj = objective(&best);
    let mut best_mu = mu.clone();
    let mut last = best.assign.clone();
    let mut clearing = best.clearing.clone();
    for round in 0..PRICE_ROUNDS {
        if clearing.iter().all(|&c| c == 0.0) && round == 0 {
            break;
        }
        for (m, c) in mu.iter_mut().zip(&clearing) {
            *m = if round == 0 { *c } else { 0.5 * (*m + c) };
        }
        let o = winners(bidders, free0, None, &mu);
        let obj = objective(&o);
        let same = o.assign == last;
        last = o.assign.clone();
        clearing = o.clearing.clone();
        if obj > best_obj {
            best_obj = obj;
            best = o;
            best_mu = mu.clone();
        }
        if same {
            break;
        }
    }
    (best, best_mu)
}

/// Σ over bidders (except `skip`) of log(1/ρ) under an assignment.
pub(super) fn pf_value(bidders: &[Bidder], assign: &[Option<usize>], skip: usize) -> f64 {
    bidders
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(i, b)| -b.log_rho_empty + assign[i].map_or(0.0, |k| b.bundles[k].value))
        .sum()
}
