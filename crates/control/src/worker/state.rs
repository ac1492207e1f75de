//! Exportable controller state, for a session snapshot
//! (`crate::session::SessionSnapshot`): a restored controller continues
//! bit-identically.

use serde::{Deserialize, Serialize};

use super::{BatchController, BatchProblem, LbBsp, Pid, Uniform};

/// A registered controller's whole state, one variant per type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ControllerState {
    Uniform(Uniform),
    LbBsp(LbBsp),
    Pid(Pid),
}

impl ControllerState {
    /// The controller, checked against `problem` (worker count, global batch, bounds,
    /// every vector's length, finiteness); the error names the field.
    pub fn restore(self, problem: &BatchProblem) -> Result<Box<dyn BatchController>, String> {
        Ok(match self {
            ControllerState::Uniform(c) => {
                c.check(problem)?;
                Box::new(c)
            }
            ControllerState::LbBsp(c) => {
                c.check(problem)?;
                Box::new(c)
            }
            ControllerState::Pid(c) => {
                c.check(problem)?;
                Box::new(c)
            }
        })
    }
}

/// `Vec<f64>` whose NaN entries (unset) travel as `null` (JSON has no NaN); an
/// infinite entry is refused.
pub(super) mod nan_vec {
    use serde::{de::Deserializer, ser::Error, Deserialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        if v.iter().any(|x| x.is_infinite()) {
            return Err(S::Error::custom("an infinite value cannot be saved"));
        }
        s.collect_seq(v.iter().map(|x| (!x.is_nan()).then_some(*x)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let v = Vec::<Option<f64>>::deserialize(d)?;
        Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
    }
}
