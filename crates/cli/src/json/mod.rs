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
//! | `pacer train` / `pacer controller --json` | the runtime's `TrainReport` and the run's settings (`crates/cli/src/train_report.rs`); `controller` first prints one line, [`Listening`] |

mod bench;
mod recommend;

pub use bench::{BenchRound, LpReport, RoundReport, ScaleReport, SimReport, SimRoundReport};
pub use recommend::{CourierAnswer, MarginPct, Pick, Recommendation, SearchAnswer};

use serde::{Deserialize, Serialize};

/// Pretty JSON of `value` for people and scripts: every non-integer number is rounded to
/// 12 significant digits, so sums of floats print as `65282.33`, not `65282.32999999998`
/// (far below any quantity's precision; integers are written exactly, keys in field order).
pub fn pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Rounded::default());
    value.serialize(&mut ser)?;
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// serde_json's pretty formatter with floats rounded to 12 significant digits.
#[derive(Default)]
struct Rounded(serde_json::ser::PrettyFormatter<'static>);

fn round12(x: f64) -> f64 {
    if x.is_finite() {
        format!("{x:.11e}").parse().unwrap_or(x)
    } else {
        x
    }
}

impl serde_json::ser::Formatter for Rounded {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, x: f64) -> std::io::Result<()> {
        self.0.write_f64(w, round12(x))
    }
    fn write_f32<W: ?Sized + std::io::Write>(&mut self, w: &mut W, x: f32) -> std::io::Result<()> {
        self.0.write_f64(w, round12(f64::from(x)))
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

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

#[cfg(test)]
mod pretty_tests {
    #[test]
    fn float_noise_is_rounded_and_integers_are_exact() {
        let v = serde_json::json!({
            "a": 65282.32999999998,
            "b": [0.1 + 0.2, 1e-300, -2.5e20],
            "c": u64::MAX,
            "d": 7,
            "e": null,
        });
        let s = super::pretty(&v).unwrap();
        // Keys keep their order (the json! map here is sorted; structs keep field order).
        assert_eq!(s, super::pretty(&v).unwrap());
        assert!(s.contains("\"a\": 65282.33,"), "{s}");
        assert!(s.contains("0.3,"), "{s}");
        assert!(s.contains("1e-300"), "{s}");
        assert!(s.contains("-2.5e+20"), "{s}");
        assert!(s.contains(&u64::MAX.to_string()), "{s}");
        assert!(s.contains("\"d\": 7,"), "{s}");
    }
}
