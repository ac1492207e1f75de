//! Held-out evaluation: error statistics, seeded random and extrapolation splits.

use super::*;

/// Absolute percentage errors of a model on test rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    pub rows: usize,
    pub median_abs_pct_error: f64,
    pub p90_abs_pct_error: f64,
    pub max_abs_pct_error: f64,
}

/// Errors of `model` on `rows`, in percent.
pub fn error_stats(model: &StepModel, rows: &[StepRow]) -> ErrorStats {
    let mut e: Vec<f64> = rows
        .iter()
        .map(|r| 100.0 * (model.step_time(&r.config) - r.step_time_s).abs() / r.step_time_s)
        .collect();
    e.sort_by(|a, b| a.total_cmp(b));
    ErrorStats {
        rows: e.len(),
        median_abs_pct_error: quantile(&e, 0.5),
        p90_abs_pct_error: quantile(&e, 0.9),
        max_abs_pct_error: e.last().copied().unwrap_or(f64::NAN),
    }
}

/// Linear-interpolated quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// A train/test split of rows (indices into the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

impl Split {
    pub fn pick(&self, rows: &[StepRow]) -> (Vec<StepRow>, Vec<StepRow>) {
        let get = |ix: &[usize]| ix.iter().map(|&i| rows[i].clone()).collect();
        (get(&self.train), get(&self.test))
    }
}

/// The seeded generator of the splits: a seed means the same split everywhere.
pub use pacer_model::rng::SplitMix64;

/// A random `test_fraction` of the rows is held out (Fisher–Yates with `seed`).
pub fn split_random(n: usize, test_fraction: f64, seed: u64) -> Split {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        let j = rng.below(i + 1);
        idx.swap(i, j);
    }
    let n_test = ((n as f64 * test_fraction).round() as usize).min(n.saturating_sub(1));
    let mut test = idx[..n_test].to_vec();
    let mut train = idx[n_test..].to_vec();
    test.sort_unstable();
    train.sort_unstable();
    Split { train, test }
}

/// Holds out the rows with the largest replica counts: whole replica-count groups,
/// largest first, until at least `test_fraction` of the rows are held out (always
/// leaving the smallest count for training).
pub fn split_extrapolate(rows: &[StepRow], test_fraction: f64) -> Split {
    let mut counts: Vec<u32> = rows.iter().map(|r| r.config.replicas).collect();
    counts.sort_unstable();
    counts.dedup();
    let target = (rows.len() as f64 * test_fraction).ceil() as usize;
    let mut threshold = u32::MAX;
    let mut held = 0;
    for &c in counts.iter().rev().take(counts.len().saturating_sub(1)) {
        if held >= target {
            break;
        }
        threshold = c;
        held += rows.iter().filter(|r| r.config.replicas == c).count();
    }
    let (test, train): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&i| rows[i].config.replicas >= threshold);
    Split { train, test }
}

/// Fit on the training rows of `split`, measure on its test rows.
pub fn evaluate(
    kind: ModelKind,
    rows: &[StepRow],
    split: &Split,
) -> Result<(StepModel, ErrorStats), ItertimeError> {
    let (train, test) = split.pick(rows);
    let model = fit(kind, &train)?;
    let stats = error_stats(&model, &test);
    Ok((model, stats))
}
