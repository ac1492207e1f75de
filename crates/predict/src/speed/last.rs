use super::{usable, Exogenous, PredictorState, SpeedPredictor};

/// Next speed = last measured speed. The zero-cost baseline; exact when speeds are
/// static, one iteration late whenever they change.
#[derive(Debug, Clone, Default)]
pub struct LastValue {
    last: Option<f64>,
}

impl LastValue {
    pub(super) fn from_state(last: Option<f64>) -> Self {
        LastValue { last }
    }
}

impl SpeedPredictor for LastValue {
    fn name(&self) -> &'static str {
        "last"
    }
    fn observe(&mut self, samples_per_s: f64, _exo: &Exogenous) {
        if usable(samples_per_s) {
            self.last = Some(samples_per_s);
        }
    }
    fn predict_next(&self, _exo: &Exogenous) -> Option<f64> {
        self.last
    }
    fn save(&self) -> Option<PredictorState> {
        Some(PredictorState::Last { last: self.last })
    }
}
