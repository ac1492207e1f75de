//! The policy registry: every policy by name, with its summary, its knob and when it
//! cannot act on a workload; parsing names (with a did-you-mean) into policies.

use crate::*;

/// What a workload and cluster offer a policy, for [`PolicyEntry::inert_when`]: a policy
/// that cannot act on them gives the same rows as another one, and listings say so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadTraits {
    /// Some job's speed depends on the device type (per-type throughputs on a cluster of
    /// several types); otherwise every job runs at one speed on every type.
    pub typed_speeds: bool,
    /// Some job carries a loss curve (the recorded profiles of `pacer-lab slaq`).
    pub loss_curves: bool,
}

/// One registered policy: its name on the command line, what it does in one line, its
/// knob, when it cannot act, and how to build it with its defaults. Help texts, errors
/// and the notes under result tables all read this one entry.
#[derive(Clone, Copy)]
pub struct PolicyEntry {
    /// Registry name (`pacer simulate --policy NAME`).
    pub name: &'static str,
    /// One line for `--help` and listings.
    pub summary: &'static str,
    /// The parameterised form of the name, with what the parameter sets, if it has one
    /// (`themis-fF`: the fairness knob).
    pub knob: Option<&'static str>,
    /// Why the policy cannot act on a workload with these traits (its rows then equal
    /// another policy's), or `None` when it can.
    pub inert_when: fn(&WorkloadTraits) -> Option<&'static str>,
    /// Builds the policy with its default settings.
    pub build: fn() -> Box<dyn Policy>,
    /// Whether `--policy all` runs it (Sia's policies need per-type applications and
    /// are named explicitly).
    pub in_all: bool,
}

fn never_inert(_: &WorkloadTraits) -> Option<&'static str> {
    None
}

/// Every policy, in the order listings show them. Adding a policy is a new file plus one
/// line here.
pub const POLICIES: [PolicyEntry; 23] = [
    PolicyEntry {
        name: "fifo",
        summary:
            "first come, first served; each job gets the devices it asked for, gang-scheduled, \
                  non-preemptive",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(fifo::Fifo),
        in_all: true,
    },
    PolicyEntry {
        name: "fair",
        summary: "max-min fair share, water-filled up to each job's request, re-planned every \
                  round; with more jobs than devices one each, least attained service first",
        knob: Some("fair-qS: time slice of S >= 0 seconds (`fair` is fair-q600; fair-q0: none)"),
        inert_when: never_inert,
        build: || Box::new(fair::FairShare::default()),
        in_all: true,
    },
    PolicyEntry {
        name: "tiresias",
        summary: "Tiresias: two-queue discretised least-attained-service (2D-LAS)",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(tiresias::Tiresias::default()),
        in_all: true,
    },
    PolicyEntry {
        name: "pollux",
        summary: "Pollux-style: devices and batch for the best goodput, generalised mean p = -1 \
                  (jobs adapt their batch)",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(pollux::Pollux::default()),
        in_all: true,
    },
    PolicyEntry {
        name: "gavel-maxmin",
        summary: "Gavel's max-min fairness LP over effective throughput per device type",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(gavel::Gavel::max_min()),
        in_all: true,
    },
    PolicyEntry {
        name: "gavel-ftf",
        summary: "Gavel's finish-time-fairness LP (minimise the largest ρ) over effective \
                  throughput per device type",
        knob: None,
        inert_when: |t| {
            (!t.typed_speeds).then_some(
                "every job runs at one speed on every device type here (one type, or jobs \
                 without per-type throughputs), so the max-min LP already gives each job its \
                 isolated 1/N share; that puts the largest ρ the finish-time-fair LP minimises \
                 at its floor (1), and it keeps the max-min allocation: same rows as \
                 `gavel-maxmin`",
            )
        },
        build: || Box::new(gavel::Gavel::finish_time_fair()),
        in_all: true,
    },
    PolicyEntry {
        name: "gavel-maxsum",
        summary: "Gavel's max-sum-throughput LP (iterations/s), the Gavel of Sia's simulator",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(gavel::Gavel::max_sum_throughput()),
        in_all: false,
    },
    PolicyEntry {
        name: "themis",
        summary: "Themis: finish-time-fair partial-allocation auctions over leases (f = 0.8)",
        knob: Some("themis-fF: fairness knob 0 <= F <= 1 (e.g. themis-f0.5)"),
        inert_when: never_inert,
        build: || Box::new(themis::Themis::default()),
        in_all: true,
    },
    PolicyEntry {
        name: "sia",
        summary: "Sia: per-type goodput configurations, p = -0.5 knapsack (fast solver); \
                  for per-type applications (--apps sia:DIR)",
        knob: Some(
            "sia-tN: `sia` with its ties broken in the pseudo-random order of salt N (a whole \
             number; `sia` is sia-t0)",
        ),
        inert_when: never_inert,
        build: || Box::new(sia::Sia::new(sia::SiaSolver::Fast)),
        in_all: false,
    },
    PolicyEntry {
        name: "sia-exact",
        summary: "Sia: the same integer program solved exactly (microlp branch and bound)",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(sia::Sia::new(sia::SiaSolver::Exact)),
        in_all: false,
    },
    PolicyEntry {
        name: "sia-pacer",
        summary: "pacer's Sia: Sia's objective without the exploration ladder, new jobs on \
                  their fastest type, no move while restarting",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(sia::SiaPacer::default()),
        in_all: false,
    },
    PolicyEntry {
        name: "sia-pacer-mix",
        summary: "sia-pacer whose jobs may also run across device types at their balanced \
                  goodput (jobs that accept it: `pacer simulate --mixed-types`)",
        knob: Some(
            "sia-pacer-mix-gG: a running job moves onto a mix only for G >= 1 times its \
             goodput (`sia-pacer-mix` is sia-pacer-mix-g1.5)",
        ),
        inert_when: never_inert,
        build: || Box::new(sia::SiaPacerMix::default()),
        in_all: false,
    },
    PolicyEntry {
        name: "sia-pacer-mix-post",
        summary: "sia-pacer-mix offering mixed configurations only on the devices the \
                  one-type knapsack leaves free (not inside the optimisation)",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(sia::SiaPacerMix::post()),
        in_all: false,
    },
    PolicyEntry {
        name: "slaq",
        summary: "SLAQ: devices to the jobs whose predicted normalised loss falls most \
                  (needs loss curves)",
        knob: None,
        inert_when: |t| {
            (!t.loss_curves).then_some(
                "driven by each job's loss curve, and these jobs carry none (only the \
                 recorded profiles of `pacer-lab slaq` do), so it falls back to equal shares \
                 as `fair` gives them (without its time slice)",
            )
        },
        build: || Box::new(slaq::Slaq::default()),
        in_all: true,
    },
    PolicyEntry {
        name: "edf",
        summary: "earliest deadline first: each job in deadline order takes its largest \
                  measured size that fits (ElasticFlow's EDF baseline)",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(edf::Edf),
        in_all: false,
    },
    PolicyEntry {
        name: "dlas-gpu",
        summary: "Tiresias as ElasticFlow's simulator runs it: three LAS queues at 3,250 and \
                  7,200 GPU-seconds, waiting jobs to the back of their queue each round",
        knob: None,
        inert_when: never_inert,
        build: || Box::new(dlas::Dlas::default()),
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow",
        summary: "ElasticFlow: admission control on minimum satisfactory shares planned as \
                  late as possible, spare devices by marginal return",
        knob: Some("elasticflow-sS: planning slot of S > 0 seconds, the round length (default 60)"),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow",
                deadline::DeadlineConfig::elasticflow(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow-m",
        summary: "elasticflow with the spare by ElasticFlow's own marginal: the change in \
                  planned GPU-time per added GPU, a step that outlasts the free devices' \
                  next change re-planning the rest, one job at a time",
        knob: Some(
            "elasticflow-m-sS: planning slot of S > 0 seconds, the round length (default 60)",
        ),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow-m",
                deadline::DeadlineConfig::elasticflow_marginal(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow-mb",
        summary: "elasticflow-m with ElasticFlow's switch of a share's level: the upper \
                  level from the latest breakpoint of the free devices where it alone \
                  meets the deadline",
        knob: Some(
            "elasticflow-mb-sS: planning slot of S > 0 seconds, the round length (default 60)",
        ),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow-mb",
                deadline::DeadlineConfig::elasticflow_marginal_switch(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow-p",
        summary: "elasticflow with ElasticFlow's placement (all jobs placed afresh each \
                  event, largest first) and its per-event overhead by placement: the \
                  smaller one for a placement held since the last periodic restart",
        knob: Some(
            "elasticflow-p-sS: planning slot of S > 0 seconds, the round length (default 60)",
        ),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow-p",
                deadline::DeadlineConfig::elasticflow_placement(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow-mbp",
        summary: "elasticflow-mb with elasticflow-p's placement and overhead by placement",
        knob: Some(
            "elasticflow-mbp-sS: planning slot of S > 0 seconds, the round length (default 60)",
        ),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow-mbp",
                deadline::DeadlineConfig::elasticflow_marginal_switch_placement(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "elasticflow-mbpc",
        summary: "elasticflow-mbp with ElasticFlow's end events: the round a completion \
                  calls at the round's time, plus the overhead charged there, plus whole slots",
        knob: Some(
            "elasticflow-mbpc-sS: planning slot of S > 0 seconds, the round length (default 60)",
        ),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "elasticflow-mbpc",
                deadline::DeadlineConfig::elasticflow_marginal_switch_placement_clock(60.0),
            ))
        },
        in_all: false,
    },
    PolicyEntry {
        name: "deadline",
        summary: "pacer's deadline policy: guaranteed minimum shares with restarts budgeted, \
                  declined jobs re-tried, spare devices when the time saved pays the restart",
        knob: Some("deadline-sS: planning slot of S > 0 seconds, the round length (default 60)"),
        inert_when: never_inert,
        build: || {
            Box::new(deadline::Deadline::new(
                "deadline",
                deadline::DeadlineConfig::pacer(60.0),
            ))
        },
        in_all: false,
    },
];

const fn names<const N: usize>(entries: &[PolicyEntry; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = entries[i].name;
        i += 1;
    }
    out
}

/// Names accepted by [`by_name`] (besides the `themis-fF` knob forms), from [`POLICIES`].
pub const POLICY_NAMES: &[&str] = &names(&POLICIES);

/// The policies `--policy all` runs ([`PolicyEntry::in_all`]), in registry order.
pub fn default_policy_names() -> impl Iterator<Item = &'static str> {
    POLICIES.iter().filter(|e| e.in_all).map(|e| e.name)
}

/// The registry entry a name (or a knob form of it, `themis-f0.5`) builds from.
pub fn entry(name: &str) -> Option<&'static PolicyEntry> {
    POLICIES.iter().find(|e| e.name == name).or_else(|| {
        if themis::parse_knob(name).is_some() {
            POLICIES.iter().find(|e| e.name == "themis")
        } else if fair::parse_knob(name).is_some() {
            POLICIES.iter().find(|e| e.name == "fair")
        } else if sia::Sia::parse_tie_knob(name).is_some() {
            POLICIES.iter().find(|e| e.name == "sia")
        } else if deadline::Deadline::parse_slot(name, "elasticflow").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow")
        } else if deadline::Deadline::parse_slot(name, "elasticflow-m").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow-m")
        } else if deadline::Deadline::parse_slot(name, "elasticflow-mb").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow-mb")
        } else if deadline::Deadline::parse_slot(name, "elasticflow-p").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow-p")
        } else if deadline::Deadline::parse_slot(name, "elasticflow-mbp").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow-mbp")
        } else if deadline::Deadline::parse_slot(name, "elasticflow-mbpc").is_some() {
            POLICIES.iter().find(|e| e.name == "elasticflow-mbpc")
        } else if deadline::Deadline::parse_slot(name, "deadline").is_some() {
            POLICIES.iter().find(|e| e.name == "deadline")
        } else {
            None
        }
    })
}

/// Builds a policy by registry name ([`POLICIES`]), Themis with its fairness knob from
/// `themis-fF` (e.g. `themis-f0.5`), or fair share with its time slice from `fair-qS`
/// (seconds; `fair-q0`: none).
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match POLICIES.iter().find(|e| e.name == name) {
        Some(e) => Some((e.build)()),
        None => themis::parse_knob(name)
            .map(|f| Box::new(themis::Themis::with_f(f)) as Box<dyn Policy>)
            .or_else(|| {
                sia::SiaPacerMix::parse_knob(name)
                    .map(|g| Box::new(sia::SiaPacerMix::with_min_gain(g)) as Box<dyn Policy>)
            })
            .or_else(|| {
                sia::Sia::parse_tie_knob(name).map(|salt| {
                    let mut p = sia::Sia::new(sia::SiaSolver::Fast);
                    p.tie_salt = salt;
                    Box::new(p) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                fair::parse_knob(name)
                    .map(|q| Box::new(fair::FairShare::with_quantum(q)) as Box<dyn Policy>)
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow",
                        deadline::DeadlineConfig::elasticflow(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow-m").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow-m",
                        deadline::DeadlineConfig::elasticflow_marginal(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow-mb").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow-mb",
                        deadline::DeadlineConfig::elasticflow_marginal_switch(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow-p").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow-p",
                        deadline::DeadlineConfig::elasticflow_placement(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow-mbp").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow-mbp",
                        deadline::DeadlineConfig::elasticflow_marginal_switch_placement(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "elasticflow-mbpc").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "elasticflow-mbpc",
                        deadline::DeadlineConfig::elasticflow_marginal_switch_placement_clock(s),
                    )) as Box<dyn Policy>
                })
            })
            .or_else(|| {
                deadline::Deadline::parse_slot(name, "deadline").map(|s| {
                    Box::new(deadline::Deadline::new(
                        "deadline",
                        deadline::DeadlineConfig::pacer(s),
                    )) as Box<dyn Policy>
                })
            }),
    }
}

/// A policy name the registry does not know: the message names it, lists every name and
/// knob, and suggests the closest registered name when one is close.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownPolicy {
    /// The name as given.
    pub name: String,
    /// The closest registered name, if the edit distance is small.
    pub suggestion: Option<&'static str>,
}

impl std::fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown policy `{}`", self.name)?;
        if let Some(s) = self.suggestion {
            write!(f, " (did you mean `{s}`?)")?;
        }
        write!(f, "; expected one of {}", POLICY_NAMES.join(", "))?;
        for k in POLICIES.iter().filter_map(|e| e.knob) {
            write!(f, "; or {k}")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownPolicy {}

/// [`by_name`], or an [`UnknownPolicy`] that says what was expected.
pub fn parse(name: &str) -> Result<Box<dyn Policy>, UnknownPolicy> {
    by_name(name).ok_or_else(|| UnknownPolicy {
        name: name.to_string(),
        suggestion: closest_name(name),
    })
}

/// The registered name closest to `name` by edit distance (case-insensitive), if it
/// is within a third of the longer name (at least 1 edit); a knob form is matched by
/// its prefix (`themis-g0.5` → `themis`).
fn closest_name(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    let stem = lower
        .rsplit_once('-')
        .filter(|(_, k)| k.len() > 1 && k[1..].parse::<f64>().is_ok())
        .map_or(lower.as_str(), |(s, _)| s);
    POLICY_NAMES
        .iter()
        .flat_map(|&n| {
            [
                (strsim::damerau_levenshtein(&lower, n), n),
                (strsim::damerau_levenshtein(stem, n), n),
            ]
        })
        .filter(|&(d, n)| d <= (n.len().max(lower.len()) / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_suggest_the_closest_registered_one() {
        let e = |n: &str| parse(n).err().expect("unknown name");
        assert_eq!(e("tiresais").suggestion, Some("tiresias"));
        assert_eq!(e("Pollux").suggestion, Some("pollux"));
        assert_eq!(e("gavel-maxmn").suggestion, Some("gavel-maxmin"));
        assert_eq!(e("themis-g0.5").suggestion, Some("themis"));
        assert_eq!(e("sjf").suggestion, None);
        assert_eq!(e("round-robin").suggestion, None);
        let msg = e("fiffo").to_string();
        assert!(
            msg.starts_with("unknown policy `fiffo` (did you mean `fifo`?)"),
            "{msg}"
        );
        assert!(msg.contains("themis-fF"), "{msg}");
        assert!(msg.contains("fair-qS"), "{msg}");
    }

    #[test]
    fn every_name_and_knob_form_has_an_entry_that_builds_it() {
        for e in &POLICIES {
            assert_eq!(entry(e.name).map(|x| x.name), Some(e.name));
            assert_eq!((e.build)().name(), by_name(e.name).unwrap().name());
        }
        assert_eq!(entry("themis-f0.5").map(|x| x.name), Some("themis"));
        assert_eq!(entry("fair-q0").map(|x| x.name), Some("fair"));
        assert_eq!(entry("sia-t3").map(|x| x.name), Some("sia"));
        assert!(entry("sia-t").is_none() && entry("sia-t-1").is_none());
        assert!(entry("nope").is_none());
    }

    #[test]
    fn inert_checks_come_from_the_entries() {
        let none = WorkloadTraits::default();
        let all = WorkloadTraits {
            typed_speeds: true,
            loss_curves: true,
        };
        let inert: Vec<_> = POLICIES
            .iter()
            .filter(|e| (e.inert_when)(&none).is_some())
            .map(|e| e.name)
            .collect();
        assert_eq!(inert, ["gavel-ftf", "slaq"]);
        assert!(POLICIES.iter().all(|e| (e.inert_when)(&all).is_none()));
    }
}
