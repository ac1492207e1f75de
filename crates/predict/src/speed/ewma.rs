use super::{usable, Exogenous, PredictorState, SpeedPredictor};

/// Exponentially weighted moving average: `s ← α·v + (1−α)·s`.
///
/// Smooths per-iteration jitter (better than [`super::LastValue`] on noisy workers) at
/// the price of lagging about `1/α` iterations behind real changes.
#[derive(Debug, Clone)]
pub struct Ewma {
    alpha: f64,
    state: Option<f64>,
}

impl Ewma {
    /// `alpha` in `(0, 1]`; clamped into that range.
    pub fn new(alpha: f64) -> Self {
        Ewma {
            alpha: alpha.clamp(1e-6, 1.0),
            state: None,
        }
    }

    pub(super) fn set_state(&mut self, state: Option<f64>) {
        self.state = state;
    }
}

impl SpeedPredictor for Ewma {
    fn name(&self) -> &'static str {
        "ewma"
    }
    fn observe(&mut self, samples_per_s: f64, _exo: &Exogenous) {
        if !usable(samples_per_s) {
            return;
        }
        self.state = Some(match self.state {
            None => samples_per_s,
            Some(s) => self.alpha * samples_per_s + (1.0 - self.alpha) * s,
        });
    }
    fn predict_next(&self, _exo: &Exogenous) -> Option<f64> {
        self.state
    }
    fn save(&self) -> Option<PredictorState> {
        // Only the registry's α = 0.3 is restorable.
        (self.alpha == 0.3).then_some(PredictorState::Ewma { state: self.state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_geometrically() {
        let mut p = Ewma::new(0.5);
        let e = Exogenous::default();
        p.observe(100.0, &e);
        p.observe(200.0, &e);
        assert_eq!(p.predict_next(&e), Some(150.0));
        p.observe(200.0, &e);
        assert_eq!(p.predict_next(&e), Some(175.0));
    }
}
