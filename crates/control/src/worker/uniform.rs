use super::{BatchController, BatchProblem, Observation};

/// Plain BSP: every worker gets the same share of `B` (water-filled when a cap binds)
/// and keeps it. The baseline the adaptive controllers are measured against.
#[derive(Debug, Clone)]
pub struct Uniform {
    batches: Vec<u64>,
}

impl Uniform {
    pub fn new(problem: &BatchProblem) -> Self {
        Uniform {
            batches: problem.uniform(),
        }
    }
}

impl BatchController for Uniform {
    fn name(&self) -> &'static str {
        "uniform"
    }
    fn decide(&mut self, _obs: &Observation<'_>, batches: &mut [u64]) {
        batches.copy_from_slice(&self.batches);
    }
}
