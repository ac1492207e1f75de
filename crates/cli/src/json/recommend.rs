//! `pacer recommend --json`.

use serde::{Deserialize, Serialize};

/// `pacer recommend --json`: the answer for `--objective`, which is written first
/// (`"objective": "accuracy"`, `"time"` or `"cost"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "objective", rename_all = "lowercase")]
pub enum Recommendation {
    /// Courier: the best metric within the SLO.
    Accuracy(CourierAnswer),
    /// Configuration search: the least time to the target metric.
    Time(SearchAnswer),
    /// Configuration search: the least cost to the target metric.
    Cost(SearchAnswer),
}

impl Recommendation {
    /// The recommended configuration; `None` when nothing meets the SLO.
    pub fn choice(&self) -> Option<&Pick> {
        match self {
            Recommendation::Accuracy(a) => a.choice.as_ref(),
            Recommendation::Time(s) | Recommendation::Cost(s) => s.choice.as_ref(),
        }
    }
}

/// Courier's answer (`--objective accuracy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CourierAnswer {
    /// Epochs every candidate trains for.
    pub epochs: f64,
    pub slo_s: f64,
    /// Safety margins on predicted time, per kind of candidate (%).
    pub margin_pct: MarginPct,
    pub metric_higher_is_better: bool,
    pub choice: Option<Pick>,
    pub runner_up: Option<Pick>,
    /// The best choice from the measured tables.
    pub oracle: Option<Pick>,
}

/// Courier's safety margins (%): for a configuration measured as such, one whose
/// step time the model interpolates, one it extrapolates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarginPct {
    pub measured: f64,
    pub interpolated: f64,
    pub extrapolated: f64,
}

/// Configuration search's answer (`--objective time|cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchAnswer {
    /// The metric every measured batch reaches.
    pub target_metric: f64,
    pub slo_s: f64,
    /// The model's held-out p90 error (%), added to every predicted time.
    pub margin_pct: f64,
    pub choice: Option<Pick>,
    /// The best choice from the measured tables.
    pub oracle: Option<Pick>,
    /// The predicted time/cost Pareto front.
    pub pareto: Vec<Pick>,
}

/// One configuration: predicted, and measured where the tables have it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    /// Global batch.
    pub batch: f64,
    pub replicas: u32,
    pub nodes: u32,
    /// Machine type (`measured` without `--price`).
    pub machine: String,
    pub predicted_time_s: f64,
    pub predicted_metric: f64,
    /// USD (with `--price`).
    pub predicted_cost: f64,
    pub measured_time_s: Option<f64>,
    pub measured_metric: Option<f64>,
}
