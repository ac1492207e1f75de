//! Cost budgets: in device-hours (`budget_device_hours`) and in dollars (`budget_usd`,
//! at the service's per-type prices, `--price TYPE=USD_PER_DEVICE_H`). A job is declined
//! on submission when its expected cost is above its budget, and stopped once it has
//! spent it ([`crate::core`]).

use crate::error::ApiError;
use crate::job::{JobRecord, Run};
use crate::spec::{JobSpec, Placement};
use pacer_model::{ClusterSpec, DeviceTypeId};
use pacer_policy::JobView;

/// Highest price per device-hour `--price` takes (USD).
pub const MAX_PRICE: f64 = 1e6;

/// The prices of `--price TYPE=USD_PER_DEVICE_H …`, by device type id of `cluster`:
/// `None` when none is given; else one for every type, each a finite number in
/// `0..=MAX_PRICE`, no type twice, no type the cluster lacks.
pub fn parse_prices(args: &[String], cluster: &ClusterSpec) -> anyhow::Result<Option<Vec<f64>>> {
    if args.is_empty() {
        return Ok(None);
    }
    let types = cluster.device_types.join(", ");
    let mut prices: Vec<Option<f64>> = vec![None; cluster.device_types.len()];
    for a in args {
        let (ty, usd) = a.split_once('=').ok_or_else(|| {
            anyhow::anyhow!("--price {a}: expected TYPE=USD_PER_DEVICE_H, e.g. a100=2.93")
        })?;
        let t = cluster
            .device_types
            .iter()
            .position(|name| name == ty.trim())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--price {a}: the cluster has no device type `{ty}` (its types: {types})"
                )
            })?;
        let p: f64 = usd.trim().parse().map_err(|_| {
            anyhow::anyhow!("--price {a}: `{usd}` is not a number of US dollars per device-hour")
        })?;
        anyhow::ensure!(
            p.is_finite() && (0.0..=MAX_PRICE).contains(&p),
            "--price {a}: expected a price from 0 to {MAX_PRICE} US dollars per device-hour"
        );
        anyhow::ensure!(
            prices[t].replace(p).is_none(),
            "--price {a}: device type `{ty}` is priced twice"
        );
    }
    let missing: Vec<&str> = prices
        .iter()
        .zip(&cluster.device_types)
        .filter(|(p, _)| p.is_none())
        .map(|(_, n)| n.as_str())
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "--price: no price for device type(s) {}; give one for every type of the cluster ({types})",
        missing.join(", ")
    );
    Ok(Some(prices.into_iter().flatten().collect()))
}

/// Dollars `run` spends in `dt_s` seconds at `prices` (its devices on each node at
/// that node's type's price).
pub fn run_spend_usd(run: &Run, cluster: &ClusterSpec, prices: &[f64], dt_s: f64) -> f64 {
    run.alloc
        .iter()
        .map(|&(n, k)| {
            let price = cluster
                .nodes
                .get(n as usize)
                .and_then(|node| prices.get(node.device_type.0 as usize));
            f64::from(k) * price.copied().unwrap_or(0.0)
        })
        .sum::<f64>()
        * dt_s
        / 3600.0
}

/// Declines `spec` on submission when its budgets cannot be kept: `budget_usd` on a
/// service without prices (400), or an expected cost — `expected_runtime` ×
/// `replicas` device-hours, in dollars on the cheapest type it may run on — above
/// its budget (409 with the admission answer). Without `expected_runtime` a budget
/// is only enforced while the job runs.
pub fn check_on_submit(
    spec: &JobSpec,
    cluster: &ClusterSpec,
    prices: Option<&[f64]>,
) -> Result<(), ApiError> {
    if spec.placement == Some(Placement::Cheapest) && prices.is_none() {
        return Err(ApiError::bad(
            "placement",
            "this service has no device prices, so it cannot tell which type is cheapest; \
             drop `placement`, or start the service with `--price TYPE=USD_PER_DEVICE_H` \
             for each device type"
                .into(),
        ));
    }
    if spec.placement == Some(Placement::Cheapest) && spec.deadline.is_some() {
        return Err(ApiError::bad(
            "placement",
            "a deadline job runs on whichever type it accepts keeps its guarantee, not the \
             cheapest; drop `placement`, or narrow its types with `device_types`"
                .into(),
        ));
    }
    if spec.budget_usd.is_some() && prices.is_none() {
        return Err(ApiError::bad(
            "budget_usd",
            "this service has no device prices, so it cannot count dollars; submit the job \
             with `budget_device_hours` instead, or start the service with `--price \
             TYPE=USD_PER_DEVICE_H` for each device type"
                .into(),
        ));
    }
    let Some(runtime_s) = spec.expected_runtime_s() else {
        return Ok(());
    };
    let device_h = runtime_s * spec.replicas.max(1) as f64 / 3600.0;
    let declined = |field: &str, what: String, answer: serde_json::Value| {
        let mut e = ApiError::conflict(field, what);
        e.detail = Some(serde_json::json!({ "admission": answer }));
        Err(e)
    };
    let on = format!(
        "expected_runtime {} on {} devices",
        crate::deadline::human_s(runtime_s),
        spec.replicas.max(1)
    );
    if let Some(budget) = spec.budget_device_hours.filter(|b| device_h > *b) {
        return declined(
            "budget_device_hours",
            format!(
                "declined: its expected cost is {device_h:.3} device-hours ({on}), above its \
                 budget of {budget} device-hours; raise the budget to at least {device_h:.3}"
            ),
            serde_json::json!({
                "decision": "declined",
                "budget_device_hours": budget,
                "expected_cost_device_hours": device_h,
            }),
        );
    }
    if let (Some(budget), Some(prices)) = (spec.budget_usd, prices) {
        // The cheapest type it accepts (validation has checked it accepts one).
        let cheapest = prices
            .iter()
            .zip(&cluster.device_types)
            .filter(|(_, t)| spec.accepts(t))
            .map(|(p, _)| *p)
            .fold(f64::INFINITY, f64::min);
        let usd = device_h * cheapest;
        if usd > budget {
            return declined(
                "budget_usd",
                format!(
                    "declined: its expected cost is {usd:.2} USD even on the cheapest device \
                     type ({on} at {cheapest} USD per device-hour), above its budget of \
                     {budget} USD; raise the budget to at least {usd:.2}"
                ),
                serde_json::json!({
                    "decision": "declined",
                    "budget_usd": budget,
                    "expected_cost_usd": usd,
                }),
            );
        }
    }
    Ok(())
}

/// The budget `j` has spent, if any: `(what, spent, budget)` with `what` the unit
/// (`device-hours`, `USD`).
pub fn spent(j: &JobRecord) -> Option<(&'static str, f64, f64)> {
    let device_h = j.attained_device_s / 3600.0;
    if let Some(b) = j.spec.budget_device_hours.filter(|b| device_h >= *b) {
        return Some(("device-hours", device_h, b));
    }
    j.spec
        .budget_usd
        .filter(|b| j.spent_usd >= *b)
        .map(|b| ("USD", j.spent_usd, b))
}

/// `1.002 of 1 device-hours held`, `12.01 of 12 USD spent`: what `j` has spent of the
/// budget [`spent`] names.
pub fn note(j: &JobRecord) -> String {
    match spent(j) {
        Some(("USD", s, b)) => format!("{s:.2} of {b} USD spent"),
        Some((unit, s, b)) => format!("{s:.3} of {b} {unit} held"),
        None => "within its budget".into(),
    }
}

/// The device types a job placed by cost ([`JobSpec::placed_by_cost`]) may run on this
/// round, by type id of `cluster`: those where its work costs least at `prices`, or
/// `None` when no type can be costed (the view is then left as it is).
///
/// A type's cost is its price × the job's devices ÷ the job's speed there, from its
/// view's speed table ([`crate::job::job_facts`]): measured on the types it has run
/// on, and on a type it has not run on, the speed of the type it was first measured
/// on. So a type it has not tried and that is priced lower is tried once, then judged
/// by what it measured there; before any measurement every type runs at the same
/// speed and the lowest price decides. Its devices: those it holds, else `replicas`.
/// Types it does not accept, or with fewer devices in `cluster` than its
/// `min_replicas`, are not costed; types within 1e-9 of the least cost are all kept.
///
/// A running job stays on its type unless the move pays: the dollars it would save
/// on its work left (the view's `work_left`, at the two costs) must be more than the
/// restart costs on the new type (`restart_s`, else 30 s, on its devices at that
/// type's price).
pub fn cost_types(
    job: &JobRecord,
    view: &JobView,
    cluster: &ClusterSpec,
    prices: &[f64],
) -> Option<Vec<bool>> {
    let speed = view.speed.as_ref()?;
    let types = cluster.device_types.len();
    let n = match view.current.replicas() {
        0 => job.spec.replicas.max(1),
        r => r,
    };
    let mut capacity = vec![0u32; types];
    for node in &cluster.nodes {
        capacity[node.device_type.0 as usize] += node.gpus;
    }
    let floor = job.spec.min().max(1);
    // USD·s per device-hour·work unit: × work ÷ 3600 gives dollars.
    let cost: Vec<Option<f64>> = (0..types)
        .map(|t| {
            let curve = speed.per_type.get(t)?;
            if curve.points.is_empty() || capacity[t] < floor {
                return None;
            }
            let rate = speed.rate(DeviceTypeId(t as u16), n, true);
            let price = *prices.get(t)?;
            (rate > 0.0 && rate.is_finite()).then(|| price * f64::from(n) / rate)
        })
        .collect();
    let best = cost.iter().flatten().copied().fold(f64::INFINITY, f64::min);
    if !best.is_finite() {
        return None;
    }
    let mut keep: Vec<bool> = cost
        .iter()
        .map(|c| c.is_some_and(|c| c <= best * (1.0 + 1e-9)))
        .collect();
    // A running job on one type: move only when the saving beats the restart.
    let held_type = view
        .current
        .slots()
        .first()
        .map(|s| cluster.nodes[s.0 .0 as usize].device_type.0 as usize);
    let one_type = view
        .current
        .slots()
        .iter()
        .all(|s| Some(cluster.nodes[s.0 .0 as usize].device_type.0 as usize) == held_type);
    if let (Some(cur), true) = (held_type, one_type) {
        if let Some(c_cur) = cost[cur].filter(|_| !keep[cur]) {
            let to = (0..types).find(|&t| keep[t])?;
            let saving_usd = (c_cur - best) * view.work_left / 3600.0;
            let restart_usd = view.restart_s.unwrap_or(30.0) * f64::from(n) * prices[to] / 3600.0;
            if saving_usd <= restart_usd {
                keep = (0..types).map(|t| t == cur).collect();
            }
        }
    }
    Some(keep)
}
