//! The executors `pacer serve --executor` can run jobs through, in one registry (as the
//! policies' `pacer_policy::POLICIES` and the trace formats' `pacer_sim::trace::TRACE_FORMATS`):
//! the flag's help, its parsing and its errors all read [`EXECUTORS`].

/// One registered executor.
#[derive(Debug, Clone, Copy)]
pub struct ExecutorEntry {
    /// Name on the command line (`--executor NAME[:ARG]`).
    pub name: &'static str,
    /// What the optional `:ARG` sets, and its default; `None`: takes none.
    pub arg: Option<(&'static str, &'static str)>,
    /// One line for `--help`.
    pub summary: &'static str,
    /// Where the cluster comes from with this executor (`--cluster …`).
    pub cluster: &'static str,
}

/// Every executor, in the order `--help` lists them.
pub const EXECUTORS: [ExecutorEntry; 2] = [
    ExecutorEntry {
        name: "local",
        arg: None,
        summary: "jobs as process trees on this machine, on CPU slots or GPUs",
        cluster: "--cluster COUNTxSLOTS:TYPE[,…] or a TOML file",
    },
    ExecutorEntry {
        name: "slurm",
        arg: Some(("PARTITION", "gpu")),
        summary:
            "Slurm batch jobs pinned to the chosen nodes and GPU counts (one srun rank per node)",
        cluster: "--cluster slurm: nodes, GPU counts and types read from the partition",
    },
];

/// What `--executor` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorChoice {
    Local,
    /// The Slurm partition.
    Slurm(String),
}

/// Parses `NAME[:ARG]` against [`EXECUTORS`]; the error names what was given, what is
/// registered, and the closest name when one is close.
pub fn parse(s: &str) -> Result<ExecutorChoice, String> {
    let (name, arg) = match s.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (s, None),
    };
    let Some(e) = EXECUTORS.iter().find(|e| e.name == name) else {
        let close = EXECUTORS
            .iter()
            .map(|e| {
                (
                    strsim::damerau_levenshtein(&name.to_ascii_lowercase(), e.name),
                    e.name,
                )
            })
            .filter(|&(d, n)| d <= (n.len() / 3).max(1))
            .min_by_key(|&(d, _)| d)
            .map(|(_, n)| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        return Err(format!(
            "--executor {s}: unknown executor `{name}`{close}; expected {}",
            expected()
        ));
    };
    match (e.arg, arg) {
        (None, None) => Ok(ExecutorChoice::Local),
        (None, Some(_)) => Err(format!("--executor {s}: `{name}` takes no `:ARG`")),
        (Some((what, _)), Some("")) => Err(format!("--executor {s}: empty {what} after `{name}:`")),
        (Some((_, default)), a) => Ok(ExecutorChoice::Slurm(a.unwrap_or(default).to_string())),
    }
}

/// `local`, `slurm` or `slurm:PARTITION`, from the registry.
fn expected() -> String {
    let forms: Vec<String> = EXECUTORS
        .iter()
        .flat_map(|e| match e.arg {
            None => vec![format!("`{}`", e.name)],
            Some((what, _)) => vec![format!("`{}`", e.name), format!("`{}:{what}`", e.name)],
        })
        .collect();
    forms.join(", ")
}

/// `--executor`'s long help: one line per registered executor.
pub fn help() -> String {
    let mut h = String::from("How jobs run (default `local`):");
    for e in &EXECUTORS {
        let form = match e.arg {
            None => e.name.to_string(),
            Some((what, default)) => format!("{}[:{what}] ({what} default `{default}`)", e.name),
        };
        h.push_str(&format!(
            "\n  {form}: {}; cluster: {}",
            e.summary, e.cluster
        ));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_registered_form_and_names_what_it_expected() {
        assert_eq!(parse("local"), Ok(ExecutorChoice::Local));
        assert_eq!(parse("slurm"), Ok(ExecutorChoice::Slurm("gpu".into())));
        assert_eq!(
            parse("slurm:debug"),
            Ok(ExecutorChoice::Slurm("debug".into()))
        );
        let e = parse("slrum").unwrap_err();
        assert!(e.contains("did you mean `slurm`?"), "{e}");
        assert!(e.contains("`local`, `slurm`, `slurm:PARTITION`"), "{e}");
        assert!(parse("kubernetes")
            .unwrap_err()
            .contains("unknown executor `kubernetes`"));
        assert!(parse("local:x").unwrap_err().contains("takes no `:ARG`"));
        assert!(parse("slurm:").unwrap_err().contains("empty PARTITION"));
        for e in &EXECUTORS {
            assert!(help().contains(e.summary));
        }
    }
}
