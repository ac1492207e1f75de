//! Recorded job-quality profiles for SLAQ-style experiments: a real training
//! run's loss per iteration and its time per iteration at several worker counts.
//!
//! A profile is a small CSV (`crates/sim/data/slaq/<name>.csv`, written by
//! `pacer-lab slaq --record`):
//!
//! ```text
//! # algorithm=logreg,dataset=mnist,batch=256,lr=0.1
//! # workers,iter_time_s
//! # 1,0.0123
//! # 2,0.0071
//! iteration,loss
//! 0,2.3026
//! 1,1.9873
//! ...
//! ```
//!
//! A simulated job replays the curve: it advances `speed(workers)` iterations per
//! second and its loss at a fractional iteration is interpolated linearly between
//! the recorded points. It finishes at the last recorded iteration.

use pacer_model::ParseError;
use std::sync::Arc;

/// One recorded training run.
#[derive(Debug, Clone, PartialEq)]
pub struct QualityProfile {
    pub name: String,
    /// `key=value` pairs from the first comment line (algorithm, dataset, ...).
    pub meta: Vec<(String, String)>,
    /// Recorded (iteration, loss), increasing iterations.
    pub curve: Vec<(f64, f64)>,
    /// (workers, seconds per iteration), increasing workers.
    pub iter_time: Vec<(u32, f64)>,
}

impl QualityProfile {
    /// Value of a `meta` key.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Algorithm name (`meta` key `algorithm`, else the profile name).
    pub fn algorithm(&self) -> &str {
        self.meta("algorithm").unwrap_or(&self.name)
    }

    /// Iterations in the whole run.
    pub fn total_iterations(&self) -> f64 {
        self.curve.last().map_or(0.0, |p| p.0)
    }

    /// Loss after iteration `k` (linear between recorded points, clamped at the ends).
    pub fn loss_at(&self, k: f64) -> f64 {
        let c = &self.curve;
        let i = c.partition_point(|p| p.0 <= k);
        if i == 0 {
            return c[0].1;
        }
        if i == c.len() {
            return c[c.len() - 1].1;
        }
        let (k0, l0) = c[i - 1];
        let (k1, l1) = c[i];
        l0 + (l1 - l0) * (k - k0) / (k1 - k0)
    }

    pub fn initial_loss(&self) -> f64 {
        self.curve[0].1
    }

    /// The lowest loss of the run (the "converged" quality SLAQ normalises to).
    pub fn final_loss(&self) -> f64 {
        self.curve.iter().map(|p| p.1).fold(f64::INFINITY, f64::min)
    }

    /// Iterations per second on `workers` workers (linear between measured counts,
    /// flat beyond the largest).
    pub fn iterations_per_s(&self, workers: u32) -> f64 {
        if workers == 0 {
            return 0.0;
        }
        let pts: Vec<(u32, f64)> = self.iter_time.iter().map(|&(w, t)| (w, 1.0 / t)).collect();
        pacer_policy::SpeedCurve {
            points: pts,
            spread_factor: 1.0,
        }
        .rate(workers, true)
    }

    /// Parses the CSV format above; errors name `origin:line`.
    pub fn parse(text: &str, name: &str, origin: &str) -> Result<Self, ParseError> {
        let mut meta = Vec::new();
        let mut iter_time = Vec::new();
        let mut curve = Vec::new();
        let mut header_seen = false;
        for (k, line) in text.lines().enumerate() {
            let line_no = k + 1;
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: String| ParseError::at(origin, line_no, why);
            if let Some(c) = line.strip_prefix('#') {
                let c = c.trim();
                if c.contains('=') && meta.is_empty() {
                    for kv in c.split(',') {
                        if let Some((a, b)) = kv.split_once('=') {
                            meta.push((a.trim().to_string(), b.trim().to_string()));
                        }
                    }
                } else if let Some((w, t)) = c.split_once(',') {
                    if let (Ok(w), Ok(t)) = (w.trim().parse::<u32>(), t.trim().parse::<f64>()) {
                        if w == 0 || !(t > 0.0 && t.is_finite()) {
                            return Err(bad(format!(
                                "worker timing `{c}`: expected WORKERS ≥ 1, SECONDS > 0"
                            )));
                        }
                        iter_time.push((w, t));
                    }
                }
                continue;
            }
            if !header_seen {
                if line != "iteration,loss" {
                    return Err(bad(format!(
                        "expected the header `iteration,loss`, got `{line}`"
                    )));
                }
                header_seen = true;
                continue;
            }
            let (a, b) = line
                .split_once(',')
                .ok_or_else(|| bad(format!("`{line}`: expected ITERATION,LOSS")))?;
            let it: f64 = a
                .trim()
                .parse()
                .map_err(|_| bad(format!("iteration `{a}` is not a number")))?;
            let loss: f64 = b
                .trim()
                .parse()
                .map_err(|_| bad(format!("loss `{b}` is not a number")))?;
            // A NaN iteration would pass the comparison below (it compares false).
            if !it.is_finite()
                || !loss.is_finite()
                || curve.last().is_some_and(|p: &(f64, f64)| p.0 >= it)
            {
                return Err(bad(format!(
                    "iteration {it}: iterations must be finite and increase, losses finite"
                )));
            }
            curve.push((it, loss));
        }
        if curve.len() < 2 {
            return Err(ParseError::whole(
                origin,
                "needs at least 2 (iteration, loss) rows",
            ));
        }
        if iter_time.is_empty() {
            return Err(ParseError::whole(
                origin,
                "no `# WORKERS,SECONDS` timing lines: the time per iteration is unknown",
            ));
        }
        iter_time.sort_by_key(|p| p.0);
        Ok(QualityProfile {
            name: name.to_string(),
            meta,
            curve,
            iter_time,
        })
    }

    /// Writes the CSV format [`QualityProfile::parse`] reads.
    pub fn to_csv(&self) -> String {
        let mut s = String::new();
        let meta: Vec<String> = self.meta.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("# {}\n# workers,iter_time_s\n", meta.join(",")));
        for (w, t) in &self.iter_time {
            s.push_str(&format!("# {w},{t:.6e}\n"));
        }
        s.push_str("iteration,loss\n");
        for (k, l) in &self.curve {
            s.push_str(&format!("{k},{l:.6}\n"));
        }
        s
    }
}

/// The profiles shipped in `crates/sim/data/slaq/` (recorded by `pacer-lab
/// slaq --record`), parsed.
pub fn embedded_quality_profiles() -> Vec<Arc<QualityProfile>> {
    EMBEDDED_QUALITY
        .iter()
        .map(|(name, text)| {
            Arc::new(
                QualityProfile::parse(text, name, &format!("<embedded>/slaq/{name}.csv"))
                    .expect("embedded profiles parse"),
            )
        })
        .collect()
}

include!(concat!(env!("OUT_DIR"), "/slaq_profiles.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trip_and_errors() {
        let text = "# algorithm=logreg,lr=0.1\n# workers,iter_time_s\n# 1,0.02\n# 4,0.008\niteration,loss\n0,2.0\n10,1.0\n20,0.5\n";
        let p = QualityProfile::parse(text, "x", "x.csv").unwrap();
        assert_eq!(p.algorithm(), "logreg");
        assert_eq!(p.loss_at(5.0), 1.5);
        assert_eq!(p.final_loss(), 0.5);
        assert!((p.iterations_per_s(1) - 50.0).abs() < 1e-9);
        assert!((p.iterations_per_s(8) - 125.0).abs() < 1e-9);
        let q = QualityProfile::parse(&p.to_csv(), "x", "y.csv").unwrap();
        assert_eq!(q.curve, p.curve);
        let e =
            QualityProfile::parse("# 1,0.1\niteration,loss\n0,1\n0,2\n", "x", "z.csv").unwrap_err();
        assert!(e.to_string().starts_with("z.csv:4"), "{e}");
        let e = QualityProfile::parse("iteration,loss\n0,1\n1,0.5\n", "x", "z.csv").unwrap_err();
        assert!(e.to_string().contains("timing"), "{e}");
    }

    #[test]
    fn embedded_profiles_parse() {
        for p in embedded_quality_profiles() {
            assert!(p.curve.len() >= 2, "{}", p.name);
        }
    }
}
