//! The JSON every `pacer … --json` prints: one `Serialize` + `Deserialize` type per
//! command, defined here and nowhere else, so the output has one shape the code
//! states and a test can parse it back (`crates/cli/tests/json_cli.rs`). Keys come
//! in the order of the fields below; the fields are listed for users in
//! `docs/json.md`. Numbers that are not finite are written as `null`.
//!
//! | command | type |
//! |---|---|
//! | `pacer simulate --json` | `Vec<`[`SimulateRow`]`>` |
//! | `pacer validate pollux --json` | `Vec<`[`ValidateRow`]`>` |
//! | `pacer recommend --json` | [`Recommendation`] |
//! | `pacer fit --json` | `Vec<`[`FitReport`]`>` |
//! | `pacer batching eval --json` | [`BatchingEval`] |
//! | `pacer batching bench --json` | [`pacer_workersim::bench::BenchReport`] |
//! | `pacer bench round --json` | [`BenchRound`] (with `--workload`: `Vec<`[`SimRoundReport`]`>`) |
//! | `pacer bench simulate --json` | `Vec<`[`SimReport`]`>` |
//! | `pacer bench scale --json` | `Vec<`[`ScaleReport`]`>` |
//! | `pacer train` / `pacer controller --json` | the runtime's `TrainReport` and the run's settings (`crates/cli/src/runtime_cmd.rs`); `controller` first prints one line, [`Listening`] |

mod bench;
mod recommend;

pub use bench::{BenchRound, LpReport, RoundReport, ScaleReport, SimReport, SimRoundReport};
pub use recommend::{CourierAnswer, MarginPct, Pick, Recommendation, SearchAnswer};

use serde::{Deserialize, Serialize};

/// `pacer controller --json`: its first line, printed (compact, on one line) as soon
/// as it listens, before the report: the address workers connect to, with the port
/// the OS chose for `--listen HOST:0`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listening {
    /// `HOST:PORT`.
    pub listening: String,
}

/// `pacer simulate --json`: one (workload, policy) row; the summary's keys follow
/// `workload` at the same level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimulateRow {
    pub workload: String,
    #[serde(flatten)]
    pub summary: pacer_sim::Summary,
}

/// `pacer validate pollux --json`: one (policy, load, workload) comparison with
/// Pollux's own simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateRow {
    pub policy: String,
    pub load: f64,
    pub workload: String,
    pub pacer_avg_jct_h: f64,
    pub pollux_sim_avg_jct_h: f64,
    pub diff_pct: f64,
    pub pacer_wall_ms: f64,
}

/// `pacer fit --json`: one model's held-out error and fitted parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitReport {
    pub model: String,
    pub split: String,
    pub rows_train: usize,
    pub rows_test: usize,
    pub median_abs_pct_error: f64,
    pub p90_abs_pct_error: f64,
    pub max_abs_pct_error: f64,
    /// The model's parameters, as its own type serialises them.
    pub params: serde_json::Value,
}

/// `pacer batching eval --json`: one report for one (scenario, controller,
/// predictor), else the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchingEval {
    One(Box<pacer_workersim::EvalReport>),
    Many(Vec<pacer_workersim::EvalReport>),
}
