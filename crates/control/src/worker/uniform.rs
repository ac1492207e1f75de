use super::{BatchController, BatchProblem, Observation};

/// Plain BSP: every worker gets the same share of `B` (water-filled when a cap binds)
/// and keeps it. The baseline the adaptive controllers are measured against.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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

impl Uniform {
    /// `Err(what)` unless these batches solve `problem`.
    pub(super) fn check(&self, problem: &BatchProblem) -> Result<(), String> {
        let ok = self.batches.len() == problem.n_workers()
            && self.batches.iter().sum::<u64>() == problem.global_batch()
            && self
                .batches
                .iter()
                .zip(problem.bounds())
                .all(|(b, r)| (r.min..=r.max).contains(b));
        if ok {
            Ok(())
        } else {
            Err("batches: do not solve the members' batching problem".into())
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

    fn save(&self) -> Option<super::ControllerState> {
        Some(super::ControllerState::Uniform(self.clone()))
    }
}
