use super::state::finite_n;
use super::{usable, EtsState, Exogenous, PredictorState, SpeedPredictor};

/// Smoothing parameters tried online: level α × trend β. Damping φ is fixed.
const ALPHAS: [f64; 4] = [0.1, 0.3, 0.6, 0.9];
const BETAS: [f64; 3] = [0.0, 0.05, 0.2];
const PHI: f64 = 0.9;
/// Discount of past squared errors when ranking the grid: ~50-iteration memory, so
/// the choice follows regime changes (noisy plateau ↔ drift) without flapping.
const ERR_DISCOUNT: f64 = 0.98;

#[derive(Debug, Clone, Copy)]
struct Holt {
    alpha: f64,
    beta: f64,
    level: f64,
    trend: f64,
    /// Discounted sum of squared relative one-step errors.
    sse: f64,
}

impl Holt {
    fn forecast(&self) -> f64 {
        self.level + PHI * self.trend
    }
}

/// Exponential smoothing with additive damped trend, ETS(A,Ad,N) (Holt–Gardner).
///
/// The time-series baseline of the comparison. Instead of a one-off MLE fit (which
/// needs a history we do not have at start-up), it runs the 12 filters of a small
/// α × β grid side by side — each costs a few flops — and predicts with the one
/// whose discounted one-step error is lowest. It follows gradual drifts (trend) and
/// smooths noise (small α) but, like every pure time-series model, it learns of an
/// interference burst only after it has hurt.
#[derive(Debug, Clone)]
pub struct Ets {
    filters: Vec<Holt>,
    seen: u64,
}

impl Default for Ets {
    fn default() -> Self {
        let mut filters = Vec::with_capacity(ALPHAS.len() * BETAS.len());
        for &alpha in &ALPHAS {
            for &beta in &BETAS {
                filters.push(Holt {
                    alpha,
                    beta,
                    level: 0.0,
                    trend: 0.0,
                    sse: 0.0,
                });
            }
        }
        Ets { filters, seen: 0 }
    }
}

impl Ets {
    fn best(&self) -> &Holt {
        // Ties go to the first (smoothest) filter, which keeps the choice deterministic.
        let mut best = &self.filters[0];
        for f in &self.filters[1..] {
            if f.sse < best.sse {
                best = f;
            }
        }
        best
    }
}

impl Ets {
    /// An `Ets` continuing from `s` (checked: one value per grid filter, finite).
    pub(super) fn restore(s: &EtsState) -> Result<Self, String> {
        let mut e = Ets::default();
        let n = e.filters.len();
        finite_n("level", &s.level, n)?;
        finite_n("trend", &s.trend, n)?;
        finite_n("sse", &s.sse, n)?;
        for (i, f) in e.filters.iter_mut().enumerate() {
            f.level = s.level[i];
            f.trend = s.trend[i];
            f.sse = s.sse[i];
        }
        e.seen = s.seen;
        Ok(e)
    }
}

impl SpeedPredictor for Ets {
    fn name(&self) -> &'static str {
        "ets"
    }
    fn observe(&mut self, v: f64, _exo: &Exogenous) {
        if !usable(v) {
            return;
        }
        self.seen += 1;
        for f in &mut self.filters {
            if self.seen == 1 {
                f.level = v;
                f.trend = 0.0;
                continue;
            }
            let fc = f.forecast();
            let rel = (v - fc) / v;
            f.sse = ERR_DISCOUNT * f.sse + rel * rel;
            let prev_level = f.level;
            f.level = f.alpha * v + (1.0 - f.alpha) * fc;
            f.trend = f.beta * (f.level - prev_level) + (1.0 - f.beta) * PHI * f.trend;
        }
    }
    fn predict_next(&self, _exo: &Exogenous) -> Option<f64> {
        if self.seen == 0 {
            return None;
        }
        let b = self.best();
        // A speed never goes negative; a steep trend must not extrapolate through zero.
        Some(b.forecast().max(b.level * 0.1))
    }
    fn save(&self) -> Option<PredictorState> {
        Some(PredictorState::Ets(EtsState {
            level: self.filters.iter().map(|f| f.level).collect(),
            trend: self.filters.iter().map(|f| f.trend).collect(),
            sse: self.filters.iter().map(|f| f.sse).collect(),
            seen: self.seen,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_a_linear_drift_better_than_ewma() {
        let e = Exogenous::default();
        let mut ets = Ets::default();
        let mut ewma = super::super::Ewma::new(0.3);
        let (mut err_ets, mut err_ewma) = (0.0, 0.0);
        for k in 0..300 {
            let v = 1000.0 - 2.0 * k as f64;
            if k > 50 {
                err_ets += (ets.predict_next(&e).unwrap() - v).abs() / v;
                err_ewma += (ewma.predict_next(&e).unwrap() - v).abs() / v;
            }
            ets.observe(v, &e);
            ewma.observe(v, &e);
        }
        assert!(err_ets < err_ewma * 0.5, "ets {err_ets} ewma {err_ewma}");
    }
}
