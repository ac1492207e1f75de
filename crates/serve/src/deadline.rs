//! Deadline jobs in the service (docs/serve.md, "Deadlines"): the spec's `deadline`
//! and `expected_runtime` read, the admission answer on submission (planned by
//! [`pacer_policy::deadline::plan::admit`], not re-implemented here), and each admitted
//! job's status (on track, at risk, missed, met).
//!
//! The service is the authority on admission: a declined job is never stored, and the
//! round's policy is told that every job it sees with a deadline was admitted
//! ([`pacer_policy::deadline::DeadlineConfig::admitted_by_driver`]), so a restart of
//! the service (a fresh policy) never re-decides an admitted job's guarantee.

use pacer_model::civil::{civil_from_days, days_from_civil};
use pacer_policy::deadline::DeadlineConfig;
use serde::{Deserialize, Serialize};

/// Farthest a deadline may lie from its submission (366 days).
pub const MAX_HORIZON_S: f64 = 366.0 * 86_400.0;

/// What the spec's two fields accept, for error messages.
pub const DEADLINE_FORMS: &str = "an RFC 3339 time such as `2026-11-27T03:00:00Z` or \
    `2026-11-27T04:00:00+01:00`, or a duration from submission such as `2h30m`, `90m`, \
    `1d`, `3600s` or `3600` (seconds)";
pub const DURATION_FORMS: &str =
    "a duration such as `2h30m`, `90m`, `45s`, `1d` or `3600` (seconds)";

/// What is stored with an admitted deadline job (its record's `deadline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadlineRecord {
    /// Finish by this time (ms since the Unix epoch), resolved at submission.
    pub deadline_ms: u64,
    /// The spec's `expected_runtime`: seconds the job runs on `replicas` devices.
    pub expected_runtime_s: f64,
    /// The admission answer: devices planned for it in the current round…
    pub share_now: u32,
    /// …and its planned finish (ms since the Unix epoch).
    pub planned_finish_ms: u64,
    /// A job with `app`: what admission planned it with ([`crate::goal`]; then
    /// `expected_runtime_s` is 0, unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::goal::GoalPlan>,
}

/// A deadline job's status for people and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Active; the latest plan finishes it by its deadline.
    OnTrack,
    /// Active; the latest plan finishes it after its deadline (or not at all).
    AtRisk,
    /// Past its deadline, unfinished or finished late.
    Missed,
    /// Succeeded by its deadline.
    Met,
    /// Failed or cancelled before its deadline.
    Ended,
}

impl Status {
    pub const ALL: [Status; 5] = [
        Status::OnTrack,
        Status::AtRisk,
        Status::Missed,
        Status::Met,
        Status::Ended,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Status::OnTrack => "on track",
            Status::AtRisk => "at risk",
            Status::Missed => "missed",
            Status::Met => "met",
            Status::Ended => "ended",
        }
    }
    /// The label value in `/metrics` (no spaces).
    pub fn label(self) -> &'static str {
        match self {
            Status::OnTrack => "on_track",
            Status::AtRisk => "at_risk",
            s => s.name(),
        }
    }
}

/// The status of a job with deadline `deadline_ms`: `finished` is `Some((succeeded,
/// at_ms))` once it ended; `planned_finish_ms` is the latest plan's finish (`None`:
/// the plan does not finish it).
pub fn status(
    deadline_ms: u64,
    finished: Option<(bool, u64)>,
    now_ms: u64,
    planned_finish_ms: Option<u64>,
) -> Status {
    match finished {
        Some((true, t)) if t <= deadline_ms => Status::Met,
        Some((_, t)) if t > deadline_ms => Status::Missed,
        Some(_) => Status::Ended,
        None if now_ms > deadline_ms => Status::Missed,
        None if planned_finish_ms.is_some_and(|p| p <= deadline_ms) => Status::OnTrack,
        None => Status::AtRisk,
    }
}

/// The deadline planner the service runs for `policy` (`deadline[-sS]`,
/// `elasticflow[-sS]`; slot: S, else the round), or `None` for a policy that does not
/// plan deadlines.
pub fn planner_of(policy: &str, round_s: f64) -> Option<(&'static str, DeadlineConfig)> {
    use pacer_policy::deadline::Deadline;
    let slot = |prefix: &str| {
        if policy == prefix {
            Some(round_s)
        } else {
            Deadline::parse_slot(policy, prefix)
        }
    };
    let (name, mut cfg) = if let Some(s) = slot("deadline") {
        ("deadline", DeadlineConfig::pacer(s))
    } else if let Some(s) = slot("elasticflow") {
        ("elasticflow", DeadlineConfig::elasticflow(s))
    } else {
        return None;
    };
    cfg.admitted_by_driver = true;
    Some((name, cfg))
}

/// Parses a duration: `<number><unit>` parts with units `d`, `h`, `m`, `s` (`2h30m`,
/// `1d12h`, `1.5h`), or a bare number of seconds (`3600`); positive, finite, at most
/// [`MAX_HORIZON_S`].
pub fn parse_duration(text: &str) -> Result<f64, String> {
    parse_duration_as(text, DURATION_FORMS)
}

/// [`parse_duration`], with `forms` (what the field accepts) in the message when `text`
/// is not a duration at all; a duration out of range keeps its own message (zero, or
/// past the horizon), which says more than the list of forms.
fn parse_duration_as(text: &str, forms: &str) -> Result<f64, String> {
    let bad = || format!("`{}` is not {forms}", text.escape_debug());
    let t = text.trim();
    if t.is_empty() || t.len() > 64 {
        return Err(bad());
    }
    let total = if let Ok(s) = t.parse::<f64>() {
        if !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(bad());
        }
        s
    } else {
        let mut total = 0.0;
        let mut num = String::new();
        let mut last_unit = u8::MAX;
        for b in t.bytes() {
            match b {
                b'0'..=b'9' | b'.' => num.push(b as char),
                b'd' | b'h' | b'm' | b's' => {
                    let rank = match b {
                        b'd' => 0,
                        b'h' => 1,
                        b'm' => 2,
                        _ => 3,
                    };
                    // Units in order, each once: `30m2h` and `1h1h` are mistakes.
                    if num.is_empty() || (last_unit != u8::MAX && rank <= last_unit) {
                        return Err(bad());
                    }
                    let v: f64 = num.parse().map_err(|_| bad())?;
                    total += v * [86_400.0, 3_600.0, 60.0, 1.0][rank as usize];
                    last_unit = rank;
                    num.clear();
                }
                _ => return Err(bad()),
            }
        }
        if !num.is_empty() {
            return Err(bad());
        }
        total
    };
    if !(total.is_finite() && total > 0.0) {
        return Err(format!(
            "`{}` must be a positive duration",
            text.escape_debug()
        ));
    }
    if total > MAX_HORIZON_S {
        return Err(format!(
            "`{}` is longer than the 366 days the service plans ahead",
            text.escape_debug()
        ));
    }
    Ok(total)
}

/// Whether `text` is meant as a time (it starts like a date, `YYYY-`).
fn looks_like_time(text: &str) -> bool {
    let b = text.trim().as_bytes();
    b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// Checks the form of a `deadline` (time or duration) without resolving it.
pub fn check_deadline_form(text: &str) -> Result<(), String> {
    if looks_like_time(text) {
        parse_rfc3339_ms(text).map(|_| ())
    } else {
        parse_duration_as(text, DEADLINE_FORMS).map(|_| ())
    }
}

/// The deadline `text` means for a job submitted at `now_ms` (ms since the Unix
/// epoch): a time must lie in the future and within [`MAX_HORIZON_S`] of now.
pub fn resolve_deadline(text: &str, now_ms: u64) -> Result<u64, String> {
    if looks_like_time(text) {
        let at = parse_rfc3339_ms(text)?;
        if at <= now_ms {
            return Err(format!(
                "`{}` is in the past (the service's clock says {})",
                text.escape_debug(),
                rfc3339(now_ms)
            ));
        }
        if (at - now_ms) as f64 > MAX_HORIZON_S * 1e3 {
            return Err(format!(
                "`{}` is more than the 366 days the service plans ahead",
                text.escape_debug()
            ));
        }
        Ok(at)
    } else {
        let s = parse_duration_as(text, DEADLINE_FORMS)?;
        Ok(now_ms + (s * 1e3).round() as u64)
    }
}

/// Parses an RFC 3339 time (`YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)`, years
/// 1970–9999) to ms since the Unix epoch.
pub fn parse_rfc3339_ms(text: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!(
            "`{}` is not an RFC 3339 time ({why}; expected e.g. 2026-11-27T03:00:00Z or \
             2026-11-27T04:00:00+01:00)",
            text.escape_debug()
        )
    };
    let t = text.trim().as_bytes();
    if t.len() < 20 || t.len() > 40 {
        return Err(bad("wrong length"));
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let s = &t[r];
        if !s.iter().all(u8::is_ascii_digit) {
            return Err(bad("a digit was expected"));
        }
        Ok(s.iter().fold(0i64, |a, &d| a * 10 + i64::from(d - b'0')))
    };
    let sep = |i: usize, ok: &[u8]| -> Result<(), String> {
        if ok.contains(&t[i]) {
            Ok(())
        } else {
            Err(bad("a separator is missing"))
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    sep(4, b"-")?;
    sep(7, b"-")?;
    sep(10, b"Tt ")?;
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    sep(13, b":")?;
    sep(16, b":")?;
    let mut i = 19;
    let mut frac_ms = 0i64;
    if t[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < t.len() && t[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(bad("digits must follow `.`"));
        }
        let digits = &t[start..i.min(start + 3)];
        frac_ms = digits
            .iter()
            .fold(0i64, |a, &d| a * 10 + i64::from(d - b'0'))
            * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_s = match t.get(i) {
        Some(b'Z' | b'z') if i + 1 == t.len() => 0,
        Some(&c @ (b'+' | b'-')) if i + 6 == t.len() => {
            sep(i + 3, b":")?;
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return Err(bad("the offset is out of range"));
            }
            let o = oh * 3600 + om * 60;
            if c == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return Err(bad("the time zone must be `Z` or `±HH:MM`")),
    };
    if !(1970..=9999).contains(&y) {
        return Err(bad("the year is out of range 1970..=9999"));
    }
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return Err(bad("no such date"));
    }
    if h > 23 || mi > 59 || s > 60 {
        return Err(bad("no such time of day"));
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s.min(59) - offset_s;
    if secs < 0 {
        return Err(bad("before 1970"));
    }
    Ok(secs as u64 * 1000 + frac_ms as u64)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `ms` since the Unix epoch as an RFC 3339 UTC time, to the second.
pub fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A span of seconds for people: `1h02m`, `3m20s`, `45s`.
pub fn human_s(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_duration("2h30m"), Ok(9000.0));
        assert_eq!(parse_duration("90m"), Ok(5400.0));
        assert_eq!(parse_duration("1d"), Ok(86_400.0));
        assert_eq!(parse_duration("3600"), Ok(3600.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert_eq!(parse_duration("1h0m5s"), Ok(3605.0));
        for bad in [
            "", "h", "2x", "30m2h", "1h1h", "-5", "0", "0s", "2h30", "1e3", "400d", "inf", "NaN",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_round_trips_and_checks_dates() {
        let t = parse_rfc3339_ms("2026-11-27T03:00:00Z").unwrap();
        assert_eq!(rfc3339(t), "2026-11-27T03:00:00Z");
        assert_eq!(t, 1_795_748_400_000);
        assert_eq!(parse_rfc3339_ms("2026-11-27T04:00:00+01:00"), Ok(t));
        assert_eq!(parse_rfc3339_ms("2026-11-26T22:00:00-05:00"), Ok(t));
        assert_eq!(parse_rfc3339_ms("2026-11-27T03:00:00.250Z"), Ok(t + 250));
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T00:00:00Z").map(rfc3339),
            Ok("2024-02-29T00:00:00Z".into())
        );
        for bad in [
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-27T24:00:00Z",
            "2026-11-27T03:00:00",
            "2026-11-27 03:00Z",
            "2026-11-27T03:00:00+1:00",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn deadlines_resolve_against_submission() {
        let now = parse_rfc3339_ms("2026-11-26T22:00:00Z").unwrap();
        assert_eq!(resolve_deadline("2h30m", now), Ok(now + 9_000_000));
        assert_eq!(
            resolve_deadline("2026-11-27T03:00:00Z", now),
            Ok(now + 5 * 3_600_000)
        );
        let e = resolve_deadline("2026-11-26T21:00:00Z", now).unwrap_err();
        assert!(e.contains("in the past"), "{e}");
        let e = resolve_deadline("soon", now).unwrap_err();
        assert!(e.contains("RFC 3339") && e.contains("2h30m"), "{e}");
        assert!(resolve_deadline("2028-11-26T21:00:00Z", now).is_err());
        // A deadline that is a duration out of range says so, not that its form is wrong.
        for (text, says) in [("0s", "positive"), ("400d", "366 days")] {
            let e = resolve_deadline(text, now).unwrap_err();
            assert!(e.contains(says) && !e.contains("RFC 3339"), "{text}: {e}");
            assert_eq!(check_deadline_form(text), Err(e));
        }
    }

    #[test]
    fn deadline_policies_plan_in_the_round_unless_named() {
        let (name, cfg) = planner_of("deadline", 2.0).unwrap();
        assert_eq!((name, cfg.slot_s, cfg.mix), ("deadline", 2.0, false));
        assert!(cfg.admitted_by_driver);
        let (name, cfg) = planner_of("elasticflow-s30", 2.0).unwrap();
        assert_eq!((name, cfg.slot_s, cfg.mix), ("elasticflow", 30.0, true));
        assert!(cfg.admitted_by_driver);
        assert!(planner_of("fifo", 2.0).is_none());
        assert!(planner_of("deadlines", 2.0).is_none());
    }

    #[test]
    fn status_follows_the_plan_and_the_end() {
        let d = 10_000;
        assert_eq!(status(d, None, 5_000, Some(9_000)), Status::OnTrack);
        assert_eq!(status(d, None, 5_000, Some(11_000)), Status::AtRisk);
        assert_eq!(status(d, None, 5_000, None), Status::AtRisk);
        assert_eq!(status(d, None, 10_001, Some(9_000)), Status::Missed);
        assert_eq!(status(d, Some((true, 9_999)), 20_000, None), Status::Met);
        assert_eq!(
            status(d, Some((true, 10_001)), 20_000, None),
            Status::Missed
        );
        assert_eq!(status(d, Some((false, 9_000)), 20_000, None), Status::Ended);
    }
}
